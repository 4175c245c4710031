//! The global allocator for what loading needs (the tokenizer's tables, the tensor table, the
//! repacked weights, the model's small vectors): a bump allocator over the bottom of the static
//! region. It frees only the most recent block (a Vec growing in place, a temporary); its peak
//! is reported. The run's state never comes from here: it is carved from the top of the same
//! region by core's arena, and the heap's limit is lowered below it first.

use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

pub struct Bump {
    start: AtomicUsize,
    next: AtomicUsize,
    limit: AtomicUsize,
    /// Start of the most recent block (the only one that can be freed or grown in place).
    last: AtomicUsize,
    peak: AtomicUsize,
    allocations: AtomicUsize,
}

impl Bump {
    pub const fn new() -> Bump {
        Bump {
            start: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            limit: AtomicUsize::new(0),
            last: AtomicUsize::new(usize::MAX),
            peak: AtomicUsize::new(0),
            allocations: AtomicUsize::new(0),
        }
    }

    /// Hands out `start..limit` from now on (one core, no interrupts: plain atomics suffice).
    pub fn init(&self, start: usize, limit: usize) {
        self.start.store(start, Relaxed);
        self.next.store(start, Relaxed);
        self.limit.store(limit, Relaxed);
    }

    /// Lowers the limit to `limit` (where the arena starts); false if the heap already
    /// reaches past it.
    pub fn shrink_to(&self, limit: usize) -> bool {
        if self.next.load(Relaxed) > limit {
            return false;
        }
        self.limit.store(limit, Relaxed);
        true
    }

    /// Where the next block would go.
    pub fn next(&self) -> usize {
        self.next.load(Relaxed)
    }

    /// The most bytes the heap ever held.
    pub fn peak(&self) -> usize {
        self.peak.load(Relaxed) - self.start.load(Relaxed)
    }

    pub fn in_use(&self) -> usize {
        self.next.load(Relaxed) - self.start.load(Relaxed)
    }

    pub fn allocations(&self) -> usize {
        self.allocations.load(Relaxed)
    }

    fn bump_to(&self, start: usize, end: usize) {
        self.next.store(end, Relaxed);
        self.last.store(start, Relaxed);
        if end > self.peak.load(Relaxed) {
            self.peak.store(end, Relaxed);
        }
    }
}

// SAFETY: blocks are disjoint ranges of the region (below the limit, which only moves down
// over free space), aligned as asked; single-threaded use.
unsafe impl GlobalAlloc for Bump {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.allocations.fetch_add(1, Relaxed);
        let next = self.next.load(Relaxed);
        let Some(start) = next.checked_next_multiple_of(layout.align()) else {
            return core::ptr::null_mut();
        };
        match start.checked_add(layout.size()) {
            Some(end) if end <= self.limit.load(Relaxed) => {
                self.bump_to(start, end);
                start as *mut u8
            }
            _ => core::ptr::null_mut(),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let start = ptr as usize;
        if start == self.last.load(Relaxed) && start + layout.size() == self.next.load(Relaxed) {
            self.next.store(start, Relaxed);
            self.last.store(usize::MAX, Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let start = ptr as usize;
        let is_last =
            start == self.last.load(Relaxed) && start + layout.size() == self.next.load(Relaxed);
        if is_last {
            if let Some(end) = start.checked_add(new_size) {
                if end <= self.limit.load(Relaxed) {
                    self.allocations.fetch_add(1, Relaxed);
                    self.bump_to(start, end);
                    return ptr;
                }
            }
        }
        // SAFETY: the GlobalAlloc contract, passed on.
        unsafe {
            let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
                return core::ptr::null_mut();
            };
            let new = self.alloc(new_layout);
            if !new.is_null() {
                core::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}
