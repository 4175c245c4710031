//! The streaming store's threads: core's [`StreamStore`] owns the ring and its policy; this
//! starts the reader threads that fill it (each runs `reader_loop`: direct reads into the
//! zones) and gives them and the compute thread a condition variable to sleep on.

use crate::{AlignedBuf, FileReader};
use smolrun_core::model::pager::ExpertPool;
use smolrun_core::model::stream::{StreamStore, STREAM_CHUNK_BYTES};
use smolrun_core::model::{StoreError, StreamStats, Weight, WeightKey, WeightStore};
use smolrun_core::platform::{IoError, ReadAt, Signal};
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

/// Reader threads that each run one loop until told to stop: the streaming store's and the
/// expert pager's. Stops and joins them on drop.
pub struct ReaderThreads {
    handles: Vec<JoinHandle<()>>,
    stop: Box<dyn Fn() + Send + Sync>,
}

impl ReaderThreads {
    /// Starts `n` threads (at least one) named `name-i`, each running `run`, and returns once
    /// every one of them runs: a thread's own start-up allocates (its name, its thread-locals),
    /// which must not happen later, while tokens are decoded. `stop` makes `run` return.
    pub fn start(
        n: usize,
        name: &str,
        run: Arc<dyn Fn() + Send + Sync>,
        stop: Box<dyn Fn() + Send + Sync>,
    ) -> std::io::Result<ReaderThreads> {
        let started = Arc::new((
            std::sync::atomic::AtomicUsize::new(0),
            CondSignal::default(),
        ));
        let mut this = ReaderThreads {
            handles: Vec::new(),
            stop,
        };
        for i in 0..n.max(1) {
            let run = Arc::clone(&run);
            let started = Arc::clone(&started);
            // On an error, the drop stops and joins the threads already started.
            let handle = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    started.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    started.1.notify();
                    run()
                })?;
            this.handles.push(handle);
        }
        loop {
            let epoch = started.1.epoch();
            if started.0.load(std::sync::atomic::Ordering::SeqCst) == this.handles.len() {
                return Ok(this);
            }
            started.1.wait(epoch);
        }
    }
}

impl Drop for ReaderThreads {
    fn drop(&mut self) {
        (self.stop)();
        for handle in self.handles.drain(..) {
            let _ = handle.join();
        }
    }
}

/// Starts `n` reader threads on the expert pager's `pool`; dropping the result stops them.
pub fn start_expert_readers<R: ReadAt + Send + Sync + 'static>(
    pool: &Arc<ExpertPool<R, CondSignal>>,
    n: usize,
) -> std::io::Result<ReaderThreads> {
    let (run, stop) = (Arc::clone(pool), Arc::clone(pool));
    ReaderThreads::start(
        n,
        "smolrun-expert-reader",
        Arc::new(move || run.reader_loop()),
        Box::new(move || stop.shut_down()),
    )
}

/// A planned [`StreamStore`] with its reader threads running; stops and joins them on drop.
pub struct StreamingStore<R: ReadAt + Send + Sync + 'static> {
    store: Arc<StreamStore<R, CondSignal>>,
    _readers: ReaderThreads,
}

impl<R: ReadAt + Send + Sync + 'static> StreamingStore<R> {
    /// Starts `n_readers` reader threads on `store` (planned).
    pub fn start(store: StreamStore<R, CondSignal>, n_readers: usize) -> std::io::Result<Self> {
        let store = Arc::new(store);
        let (run, stop) = (Arc::clone(&store), Arc::clone(&store));
        let readers = ReaderThreads::start(
            n_readers,
            "smolrun-reader",
            Arc::new(move || run.reader_loop()),
            Box::new(move || stop.shut_down()),
        )?;
        Ok(StreamingStore {
            store,
            _readers: readers,
        })
    }

    pub fn store(&self) -> &StreamStore<R, CondSignal> {
        &self.store
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

/// Bytes the flash probe times: long enough to average out a flash's start-up latency (at
/// 278 MB/s, about a quarter of a second), short next to a load.
pub const PROBE_BYTES: u64 = 64 << 20;

/// Bytes read before the probe's clock starts: a throttled or cached device serves a first
/// burst faster than it can keep up (a cgroup's io.max lets ~1.3x through at first, measured
/// under smoldevice: 340 MB/s probed cold against 260 MB/s sustained).
pub const PROBE_WARMUP_BYTES: u64 = 32 << 20;

/// The flash's read bandwidth in MB/s (10^6 bytes), measured by direct reads from `spans`
/// (aligned file ranges: the streamed weights) on `threads` threads at once, in the chunks the
/// readers use: [`PROBE_WARMUP_BYTES`] untimed, then [`PROBE_BYTES`] timed. Returns it with the
/// bytes read in all.
pub fn probe_read_mbps(
    reader: &FileReader,
    spans: &[std::ops::Range<u64>],
    threads: usize,
) -> Result<(f64, u64), IoError> {
    let chunk = STREAM_CHUNK_BYTES as u64;
    let mut jobs = Vec::new();
    let mut total = 0u64;
    let all = PROBE_WARMUP_BYTES + PROBE_BYTES;
    'spans: for span in spans {
        let mut at = span.start;
        while at < span.end {
            let len = (span.end - at).min(chunk).min(all - total);
            jobs.push((at, len as usize));
            total += len;
            at += len;
            if total >= all {
                break 'spans;
            }
        }
    }
    // Too little streamed to time after a warm-up: time it all.
    let (warmup, timed) = if total > PROBE_WARMUP_BYTES + PROBE_BYTES / 2 {
        let mut n = 0;
        let mut bytes = 0u64;
        while bytes < PROBE_WARMUP_BYTES {
            bytes += jobs[n].1 as u64;
            n += 1;
        }
        (n, total - bytes)
    } else {
        (0, total)
    };
    if jobs.is_empty() {
        return Ok((0.0, 0));
    }
    read_all(reader, &jobs[..warmup], threads)?;
    let start = std::time::Instant::now();
    read_all(reader, &jobs[warmup..], threads)?;
    let seconds = start.elapsed().as_secs_f64();
    Ok((timed as f64 / 1e6 / seconds.max(1e-9), total))
}

/// Direct reads of `jobs` (offset, length) on `threads` threads.
fn read_all(reader: &FileReader, jobs: &[(u64, usize)], threads: usize) -> Result<(), IoError> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<Result<(), IoError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let mut buf = AlignedBuf::zeroed(STREAM_CHUNK_BYTES);
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(at, len)) = jobs.get(i) else {
                            return Ok(());
                        };
                        reader.read_direct(at, &mut buf[..len])?;
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Ok(())))
            .collect()
    });
    results.into_iter().collect()
}
