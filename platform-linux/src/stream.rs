//! The streaming store's threads: core's [`StreamStore`] owns the ring and its policy; this
//! starts the reader threads that fill it (each runs `reader_loop`: direct reads into the
//! zones) and gives them and the compute thread a condition variable to sleep on.

use smolrun_core::model::stream::StreamStore;
use smolrun_core::model::{StoreError, StreamStats, Weight, WeightKey, WeightStore};
use smolrun_core::platform::{ReadAt, Signal};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// A [`Signal`] on a mutex and a condition variable.
#[derive(Debug, Default)]
pub struct CondSignal {
    epoch: Mutex<u64>,
    changed: Condvar,
}

impl Signal for CondSignal {
    fn epoch(&self) -> u64 {
        *self.epoch.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait(&self, seen: u64) {
        let guard = self.epoch.lock().unwrap_or_else(|p| p.into_inner());
        let _unchanged = self
            .changed
            .wait_while(guard, |e| *e == seen)
            .unwrap_or_else(|p| p.into_inner());
    }

    fn notify(&self) {
        *self.epoch.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.changed.notify_all();
    }
}

/// A planned [`StreamStore`] with its reader threads running; stops and joins them on drop.
pub struct StreamingStore<R: ReadAt + Send + Sync + 'static> {
    store: Arc<StreamStore<R, CondSignal>>,
    readers: Vec<JoinHandle<()>>,
}

impl<R: ReadAt + Send + Sync + 'static> StreamingStore<R> {
    /// Starts `n_readers` reader threads on `store` (planned).
    pub fn start(store: StreamStore<R, CondSignal>, n_readers: usize) -> std::io::Result<Self> {
        let store = Arc::new(store);
        let mut this = StreamingStore {
            store,
            readers: Vec::new(),
        };
        for i in 0..n_readers.max(1) {
            let store = Arc::clone(&this.store);
            let handle = std::thread::Builder::new()
                .name(format!("smolrun-reader-{i}"))
                .spawn(move || store.reader_loop())?;
            this.readers.push(handle);
        }
        Ok(this)
    }

    pub fn store(&self) -> &StreamStore<R, CondSignal> {
        &self.store
    }
}

impl<R: ReadAt + Send + Sync + 'static> Drop for StreamingStore<R> {
    fn drop(&mut self) {
        self.store.shut_down();
        for handle in self.readers.drain(..) {
            let _ = handle.join();
        }
    }
}

impl<R: ReadAt + Send + Sync + 'static> WeightStore for StreamingStore<R> {
    fn get(&self, key: WeightKey) -> Result<Weight<'_>, StoreError> {
        self.store.get(key)
    }

    fn read_rows(
        &self,
        key: WeightKey,
        first_row: usize,
        n_rows: usize,
        out: &mut [u8],
    ) -> Result<(), StoreError> {
        self.store.read_rows(key, first_row, n_rows, out)
    }

    fn release(&self, key: WeightKey) {
        // Guards from `get` release into the inner store directly; nothing comes here.
        self.store.release(key)
    }

    fn held_bytes(&self) -> u64 {
        self.store.held_bytes()
    }

    fn stream_stats(&self) -> Option<StreamStats> {
        self.store.stream_stats()
    }
}
