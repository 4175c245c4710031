//! The streaming store: a dense model bigger than RAM, read from flash at the flash's full speed
//! (DESIGN.md, "Where weights live": streamed).
//!
//! Decoding a token reads every weight once, in the same order every time. When the weights do
//! not fit, the kernel's page cache is the worst policy for that cyclic scan (LRU evicts exactly
//! the page that is needed next, so everything is re-read every token). This store instead
//! keeps a fixed **resident set** in RAM and reads the rest, the **streamed** weights, into
//! **stream zones**: one ring buffer that reader threads fill ahead of use, in the order the
//! forward pass uses the weights, with large direct reads (O_DIRECT: no page cache). A weight's
//! zone is freed as soon as its matvec releases it (drop-behind), and the readers run on into
//! the next token's weights without a pause.
//!
//! [`StreamPlan`] chooses the split from a byte budget. Every weight is read once per token, so
//! every resident byte saves exactly one streamed byte; but the ring must hold the largest
//! streamed weight twice (one being computed on while the next is read), so the plan keeps the
//! largest weights resident first (Qwen2.5-Coder-1.5B's 191 MB LM head kept resident lets the
//! ring shrink from 382 MB to 32 MB), then fills what is left of the budget.
//!
//! Threads: the compute thread calls [`WeightStore::get`], which waits until its weight is
//! completely read (a wrong guess costs time, never correctness: a weight asked for out of
//! order restarts the ring there). Reader threads run [`StreamStore::reader_loop`]: the
//! platform starts them (core starts no threads) and gives the [`Signal`]s they sleep on. The
//! slot table they share is one `spin::Mutex`, held for a few hundred nanoseconds at a time.
//!
//! Weights the plan does not name (the experts of a mixture of experts, which the expert pager
//! serves) are read on the compute thread into a scratch buffer of their own, as the pread
//! store does. Embedding rows are read by row with buffered reads.

use super::error::ModelError;
use super::store::{
    StoreError, StoreErrorKind, StreamStats, TensorTable, Weight, WeightKey, WeightStore,
};
use crate::arena::{Arena, ArenaPlan, ArenaUsage, Part, Region};
use crate::gguf::Gguf;
use crate::platform::{IoError, ReadAt, Signal};
use alloc::alloc::{alloc_zeroed, dealloc, Layout};
use alloc::vec::Vec;
use core::ops::Range;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Bytes one reader reads at once: large enough that a flash's per-request cost vanishes
/// (eMMC: ~6 ms for a lone 1 MB read, ~29 ms for 8 MB at 278 MB/s), small enough that several
/// readers share a weight.
pub const STREAM_CHUNK_BYTES: usize = 8 << 20;

/// The smallest ring: room for several layers' matrices of a small model, so that reads run
/// ahead over the many small weights of a layer.
pub const MIN_ZONE_BYTES: u64 = 32 << 20;

/// How the weights' memory is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamBudget {
    /// Resident set and ring together (the memory probe's figure).
    Total(u64),
    /// The resident set alone (`--resident-mb`); the ring comes on top.
    Resident(u64),
}

/// One weight of the pass as the plan sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedWeight {
    pub key: WeightKey,
    /// The weight's bytes in the file.
    pub extent: Range<u64>,
    /// The file range read for it: `extent` widened to whole alignment blocks (direct reads).
    pub span: Range<u64>,
}

/// `extent` widened to whole `align` blocks: what a direct read of it reads.
pub fn aligned_span(extent: &Range<u64>, align: u64) -> Range<u64> {
    extent.start / align * align..extent.end.div_ceil(align) * align
}

/// The most bytes the aligned span of any `len`-byte range can take, wherever it starts: what
/// a buffer must hold for any one expert of a tensor (its experts start at different offsets
/// within an alignment block).
pub fn largest_span(len: u64, align: u64) -> u64 {
    len.div_ceil(align) * align + align
}

impl PlannedWeight {
    fn span_bytes(&self) -> u64 {
        self.span.end - self.span.start
    }
}

/// Which weights stay in RAM, which are streamed (in pass order) and how big the ring is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPlan {
    pub resident: Vec<PlannedWeight>,
    /// In the order the pass uses them.
    pub streamed: Vec<PlannedWeight>,
    pub zone_bytes: u64,
    /// Bytes of the resident set (whole spans, as held).
    pub resident_bytes: u64,
    /// Bytes one pass reads from flash (whole spans, as read).
    pub streamed_bytes: u64,
}

impl StreamPlan {
    /// Plans the weights `order` (whole tensors, in the order the pass asks for them; a key
    /// that repeats is counted once) under `budget`. `align` is the direct-read alignment.
    pub fn new(
        table: &TensorTable,
        order: &[WeightKey],
        budget: StreamBudget,
        align: u64,
    ) -> Result<StreamPlan, ModelError> {
        let align = align.max(1);
        let mut weights: Vec<PlannedWeight> = Vec::new();
        for &key in order {
            if weights.iter().any(|w| w.key == key) {
                continue;
            }
            let extent = table.extent(key).map_err(ModelError::WeightRead)?;
            let span = aligned_span(&extent, align);
            weights.push(PlannedWeight { key, extent, span });
        }
        let total: u64 = weights.iter().map(PlannedWeight::span_bytes).sum();
        // Largest first: the k largest resident makes the (k+1)-th the largest streamed one,
        // which sizes the ring.
        let mut by_size: Vec<usize> = (0..weights.len()).collect();
        by_size.sort_by_key(|&i| core::cmp::Reverse(weights[i].span_bytes()));
        let size = |i: usize| weights[by_size[i]].span_bytes();
        let zone_for = |largest: u64| (2 * largest).max(MIN_ZONE_BYTES);
        // (resident indices into by_size, zone, streamed bytes)
        let mut best: Option<(Vec<usize>, u64, u64)> = None;
        let mut prefix = 0u64;
        for k in 0..=weights.len() {
            let zone = if k == weights.len() {
                0
            } else {
                zone_for(size(k))
            };
            let room = match budget {
                StreamBudget::Total(b) => b.checked_sub(zone + prefix),
                StreamBudget::Resident(r) => r.checked_sub(prefix),
            };
            if let Some(mut room) = room {
                let mut chosen: Vec<usize> = (0..k).collect();
                // Fill the rest of the budget, largest first (fewest tensors to look up).
                for i in k + 1..weights.len() {
                    if size(i) <= room {
                        room -= size(i);
                        chosen.push(i);
                    }
                }
                let resident: u64 = chosen.iter().map(|&i| size(i)).sum();
                let streamed = total - resident;
                if best.as_ref().is_none_or(|b| streamed < b.2) {
                    best = Some((chosen, zone, streamed));
                }
            }
            if k < weights.len() {
                prefix += size(k);
            }
        }
        let Some((chosen, zone_bytes, streamed_bytes)) = best else {
            let largest = if weights.is_empty() { 0 } else { size(0) };
            return Err(ModelError::Store {
                tensor: "(stream plan)".into(),
                reason: alloc::format!(
                    "a weight budget of {} MB cannot hold the stream ring: the largest weight \
                     is {} MB and the ring needs {} MB; give more memory (--mem-budget, \
                     --resident-mb) or use a smaller model",
                    match budget {
                        StreamBudget::Total(b) | StreamBudget::Resident(b) => b / 1_000_000,
                    },
                    largest / 1_000_000,
                    zone_for(largest) / 1_000_000
                ),
            });
        };
        let mut is_resident = alloc::vec![false; weights.len()];
        for &i in &chosen {
            is_resident[by_size[i]] = true;
        }
        let (mut resident, mut streamed) = (Vec::new(), Vec::new());
        for (w, r) in weights.into_iter().zip(is_resident) {
            if r {
                resident.push(w)
            } else {
                streamed.push(w)
            }
        }
        let zone_bytes = if streamed.is_empty() { 0 } else { zone_bytes };
        Ok(StreamPlan {
            resident_bytes: total - streamed_bytes,
            resident,
            streamed,
            zone_bytes,
            streamed_bytes,
        })
    }
}

impl StreamPlan {
    /// [`StreamPlan::new`] with the weights `pinned` resident whatever their size, their bytes
    /// taken from the budget first: weights asked for outside the pass's order (Qwen3.5's MTP
    /// block and the LM head its draft steps read again, several times between two passes),
    /// which a ring read once per pass in order cannot serve.
    pub fn with_pinned(
        table: &TensorTable,
        order: &[WeightKey],
        pinned: &[WeightKey],
        budget: StreamBudget,
        align: u64,
    ) -> Result<StreamPlan, ModelError> {
        let mut kept: Vec<PlannedWeight> = Vec::new();
        for &key in pinned {
            if kept.iter().any(|w| w.key == key) {
                continue;
            }
            let extent = table.extent(key).map_err(ModelError::WeightRead)?;
            let span = aligned_span(&extent, align.max(1));
            kept.push(PlannedWeight { key, extent, span });
        }
        let bytes: u64 = kept.iter().map(PlannedWeight::span_bytes).sum();
        let short = |b: u64| ModelError::Store {
            tensor: "(stream plan)".into(),
            reason: alloc::format!(
                "the weights that must stay in RAM (the MTP layer and the LM head, {} MB) do \
                 not fit a weight budget of {} MB: give more memory or draft without mtp",
                bytes / 1_000_000,
                b / 1_000_000
            ),
        };
        let budget = match budget {
            StreamBudget::Total(b) => StreamBudget::Total(b.checked_sub(bytes).ok_or(short(b))?),
            StreamBudget::Resident(r) => {
                StreamBudget::Resident(r.checked_sub(bytes).ok_or(short(r))?)
            }
        };
        let rest: Vec<WeightKey> = order
            .iter()
            .copied()
            .filter(|k| !pinned.contains(k))
            .collect();
        let mut plan = StreamPlan::new(table, &rest, budget, align)?;
        plan.resident_bytes += bytes;
        plan.resident.extend(kept);
        Ok(plan)
    }
}

/// Zeroed memory aligned for direct reads, shared by reader and compute threads through raw
/// pointers (who may touch which bytes when is the ring's business): a heap block of its own
/// (the resident weights), or a buffer carved from an arena whose region its owner keeps (the
/// stream zones, the expert slots).
pub(crate) struct AlignedBytes {
    ptr: NonNull<u8>,
    pub(crate) len: usize,
    align: usize,
    /// Allocated by `zeroed` and given back on drop; false for a buffer in an arena.
    owned: bool,
}

// SAFETY: a plain allocation; access is coordinated by the owner (see `StreamStore`).
unsafe impl Send for AlignedBytes {}
// SAFETY: as above.
unsafe impl Sync for AlignedBytes {}

impl AlignedBytes {
    pub(crate) fn zeroed(len: usize, align: usize, what: &str) -> Result<AlignedBytes, ModelError> {
        if len == 0 {
            return Ok(AlignedBytes {
                ptr: NonNull::dangling(),
                len: 0,
                align,
                owned: false,
            });
        }
        let too_large = || ModelError::Store {
            tensor: "(stream store)".into(),
            reason: alloc::format!("cannot allocate {len} bytes for the {what}"),
        };
        let layout = Layout::from_size_align(len, align).map_err(|_| too_large())?;
        // SAFETY: len > 0.
        let ptr = unsafe { alloc_zeroed(layout) };
        Ok(AlignedBytes {
            ptr: NonNull::new(ptr).ok_or_else(too_large)?,
            len,
            align,
            owned: true,
        })
    }

    /// `len` bytes taken from the part `part` of `arena`, as one buffer.
    ///
    /// # Safety
    /// The arena's region must outlive the returned value and every slice of it (its owner
    /// keeps the region in a field beside it).
    pub(crate) unsafe fn in_arena(
        arena: &mut Arena<'_>,
        part: Part,
        len: usize,
    ) -> Result<AlignedBytes, ModelError> {
        let align = arena.plan().align(part);
        let buf = arena.take::<u8>(part, 1, len).map_err(ModelError::Arena)?;
        Ok(AlignedBytes {
            ptr: NonNull::new(buf.as_mut_ptr()).unwrap_or(NonNull::dangling()),
            len,
            align,
            owned: false,
        })
    }

    /// # Safety
    /// No one writes `range` while the slice lives.
    pub(crate) unsafe fn slice(&self, range: Range<usize>) -> &[u8] {
        assert!(range.start <= range.end && range.end <= self.len);
        core::slice::from_raw_parts(self.ptr.as_ptr().add(range.start), range.len())
    }

    /// # Safety
    /// No one else reads or writes `range` while the slice lives.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice_mut(&self, range: Range<usize>) -> &mut [u8] {
        assert!(range.start <= range.end && range.end <= self.len);
        core::slice::from_raw_parts_mut(self.ptr.as_ptr().add(range.start), range.len())
    }
}

impl Drop for AlignedBytes {
    fn drop(&mut self) {
        if self.owned && self.len > 0 {
            // SAFETY: allocated in `zeroed` with this layout.
            unsafe {
                dealloc(
                    self.ptr.as_ptr(),
                    Layout::from_size_align_unchecked(self.len, self.align),
                )
            }
        }
    }
}

/// Where a tensor's `get` is served from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    /// In the resident buffer: the weight's bytes.
    Resident(Range<usize>),
    /// In the ring, at this position of the stream order.
    Streamed(usize),
    /// Not planned: read on the compute thread into the direct scratch buffer.
    Direct,
}

/// One weight's turn in the ring: its zone and how far its reads have come. Indexed by
/// sequence number (the `s`-th weight streamed since the start, `s % n` in the order).
#[derive(Debug, Clone, Default)]
struct Entry {
    /// Zone offset of the weight's span.
    off: usize,
    chunks: u32,
    claimed: u32,
    done: u32,
    held: bool,
    /// The compute thread is done with it (or it was abandoned): its zone may be reused once
    /// no read into it is in flight.
    released: bool,
    failed: Option<IoError>,
}

/// The slot table that reader and compute threads share (under one spin lock).
struct Ring {
    entries: Vec<Entry>,
    /// Entries `tail..head` hold zones; `next_use` is the sequence number the compute thread
    /// is expected to ask for next.
    tail: u64,
    head: u64,
    next_use: u64,
    /// Zone offset just past the newest entry.
    head_end: usize,
    in_flight: u32,
    /// Released last: kept until the next get of another weight, so that a weight asked for
    /// twice in a row (an LM head run row by row) is not read twice.
    delayed: Option<u64>,
    /// The direct scratch buffer is lent out.
    direct_held: bool,
    shutdown: bool,
    misses: u64,
}

/// A read for a reader thread: chunk `chunk` of the weight at sequence `s`.
#[derive(Debug, Clone, Copy)]
pub struct ReadJob {
    s: u64,
    file_offset: u64,
    zone: (usize, usize),
}

/// The streaming store. Build it with [`StreamStore::new`], load the model through it (norms
/// are read by row), give it the model's weight order with [`StreamStore::plan`], then start
/// reader threads on [`StreamStore::reader_loop`] and stop them with
/// [`StreamStore::shut_down`].
pub struct StreamStore<R: ReadAt, S: Signal> {
    reader: R,
    table: TensorTable,
    align: usize,
    place: Vec<Place>,
    order: Vec<PlannedWeight>,
    resident: AlignedBytes,
    /// The ring's zones and the direct-read scratch: buffers in `zone_region`.
    zone: AlignedBytes,
    direct: AlignedBytes,
    zone_region: Region,
    zone_usage: Option<ArenaUsage>,
    ring: spin::Mutex<Ring>,
    /// Compute threads wait on it for reads to complete; reader threads for work.
    data_ready: S,
    work_ready: S,
    /// Checksums of the streamed weights, compared on every get (`SMOLRUN_STREAM_VERIFY=1`).
    checksums: Option<Vec<u64>>,
    resident_bytes: u64,
    streamed_bytes: u64,
    bytes_read: AtomicU64,
    passes: AtomicU64,
    planned: AtomicBool,
}

/// A cheap 64-bit checksum (multiply-rotate over 8-byte words): catches a read into the wrong
/// place or a stale zone, not an adversary.
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0x9E37_79B9_7F4A_7C15 ^ bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let v = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        h = (h ^ v).wrapping_mul(0x100_0000_01B3).rotate_left(29);
    }
    for &b in words.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01B3).rotate_left(29);
    }
    h
}

impl<R: ReadAt + Sync, S: Signal> StreamStore<R, S> {
    /// A store over `reader` (the model file) for the tensors of `gguf`, with nothing planned
    /// yet: `read_rows` works (the model's setup), `get` serves every weight on the compute
    /// thread until [`StreamStore::plan`].
    pub fn new(reader: R, gguf: &Gguf, data_ready: S, work_ready: S) -> Result<Self, ModelError> {
        if reader.len() != gguf.file_len() {
            return Err(ModelError::Store {
                tensor: "(all)".into(),
                reason: alloc::format!(
                    "the file has {} bytes, its header was parsed from a file of {}",
                    reader.len(),
                    gguf.file_len()
                ),
            });
        }
        let align = reader.direct_alignment().max(64);
        let table = TensorTable::new(gguf);
        let n = gguf.tensors.len();
        Ok(StreamStore {
            reader,
            table,
            align,
            place: alloc::vec![Place::Direct; n],
            order: Vec::new(),
            resident: AlignedBytes::zeroed(0, align, "")?,
            zone: AlignedBytes::zeroed(0, align, "")?,
            direct: AlignedBytes::zeroed(0, align, "")?,
            zone_region: Region::empty(),
            zone_usage: None,
            ring: spin::Mutex::new(Ring {
                entries: Vec::new(),
                tail: 0,
                head: 0,
                next_use: 0,
                head_end: 0,
                in_flight: 0,
                delayed: None,
                direct_held: false,
                shutdown: false,
                misses: 0,
            }),
            data_ready,
            work_ready,
            checksums: None,
            resident_bytes: 0,
            streamed_bytes: 0,
            bytes_read: AtomicU64::new(0),
            passes: AtomicU64::new(0),
            planned: AtomicBool::new(false),
        })
    }

    /// The direct-read alignment the plan must use.
    pub fn alignment(&self) -> u64 {
        self.align as u64
    }

    pub fn table(&self) -> &TensorTable {
        &self.table
    }

    /// Takes `plan`: reads the resident set into RAM, sizes the ring and the scratch buffer
    /// for unplanned weights (the largest of `unplanned`, e.g. one expert), and, with
    /// `verify`, reads every streamed weight once to checksum it. Call before the readers
    /// start.
    ///
    /// The zones and the scratch buffer are carved from `region` (which the store keeps), of
    /// at least [`StreamStore::zone_plan`]'s size: the caller's memory, as the run's state is
    /// (an anonymous mapping, a `vm_allocate`d region, a static buffer).
    pub fn plan(
        &mut self,
        plan: &StreamPlan,
        unplanned: &[WeightKey],
        verify: bool,
        mut region: Region,
    ) -> Result<(), ModelError> {
        let align = self.align;
        let to_usize = |v: u64| {
            usize::try_from(v).map_err(|_| ModelError::Store {
                tensor: "(stream plan)".into(),
                reason: alloc::format!("{v} bytes is more than this process can address"),
            })
        };
        let spans: u64 = plan.resident.iter().map(PlannedWeight::span_bytes).sum();
        self.resident = AlignedBytes::zeroed(to_usize(spans)?, align, "resident weights")?;
        let mut at = 0usize;
        for w in &plan.resident {
            let len = to_usize(w.span_bytes())?;
            // SAFETY: nothing else uses the resident buffer before `plan` returns.
            let buf = unsafe { self.resident.slice_mut(at..at + len) };
            self.read_span(w.key, w.span.clone(), buf)?;
            let skip = (w.extent.start - w.span.start) as usize;
            let bytes = (w.extent.end - w.extent.start) as usize;
            self.place[w.key.tensor] = Place::Resident(at + skip..at + skip + bytes);
            at += len;
        }
        let zones = self.zone_plan(plan, unplanned)?;
        let direct = self.direct_scratch_bytes(unplanned)?;
        let (kind, region_bytes) = (region.kind(), region.len());
        let mut arena = region.arena(&zones).map_err(ModelError::Arena)?;
        // SAFETY: the region is kept in `self.zone_region` beside the two buffers, and dropped
        // with them (it is replaced only here, before either is used again).
        unsafe {
            self.zone =
                AlignedBytes::in_arena(&mut arena, Part::StreamZones, to_usize(plan.zone_bytes)?)?;
            self.direct = AlignedBytes::in_arena(&mut arena, Part::StreamZones, to_usize(direct)?)?;
        }
        self.zone_usage = Some(arena.usage(kind, region_bytes));
        self.zone_region = region;
        self.order = plan.streamed.clone();
        for (i, w) in self.order.iter().enumerate() {
            if (w.span_bytes() as usize) > self.zone.len {
                return Err(ModelError::Store {
                    tensor: "(stream plan)".into(),
                    reason: alloc::format!(
                        "a streamed weight of {} bytes does not fit the {}-byte ring",
                        w.span_bytes(),
                        self.zone.len
                    ),
                });
            }
            self.place[w.key.tensor] = Place::Streamed(i);
        }
        if verify {
            let mut sums = Vec::with_capacity(self.order.len());
            for w in self.order.clone() {
                let len = to_usize(w.span_bytes())?;
                // SAFETY: no reader runs before `plan` returns.
                let buf = unsafe { self.zone.slice_mut(0..len) };
                self.read_span(w.key, w.span.clone(), buf)?;
                let skip = (w.extent.start - w.span.start) as usize;
                sums.push(checksum(
                    &buf[skip..skip + (w.extent.end - w.extent.start) as usize],
                ));
            }
            self.checksums = Some(sums);
        }
        self.ring.get_mut().entries = alloc::vec![Entry::default(); self.order.len()];
        self.resident_bytes = plan.resident_bytes;
        self.streamed_bytes = plan.streamed_bytes;
        self.planned.store(true, Ordering::Release);
        Ok(())
    }

    /// The arena's plan for `plan`'s zones and the scratch buffer of the weights it leaves
    /// unplanned (the largest of `unplanned`): the region [`StreamStore::plan`] needs, its
    /// parts aligned for this reader's direct reads.
    pub fn zone_plan(
        &self,
        plan: &StreamPlan,
        unplanned: &[WeightKey],
    ) -> Result<ArenaPlan, ModelError> {
        let mut zones = ArenaPlan::new()
            .with_direct_alignment(self.align)
            .ok_or_else(|| ModelError::Store {
                tensor: "(stream plan)".into(),
                reason: alloc::format!(
                    "the reader's direct-read alignment {} is not a power of two",
                    self.align
                ),
            })?;
        zones.add_bytes(Part::StreamZones, plan.zone_bytes);
        zones.add_bytes(Part::StreamZones, self.direct_scratch_bytes(unplanned)?);
        Ok(zones)
    }

    /// What the zones' arena planned and handed out (after [`StreamStore::plan`]).
    pub fn zone_usage(&self) -> Option<ArenaUsage> {
        self.zone_usage
    }

    /// Bytes of the scratch buffer a weight of `unplanned` is read into on the compute
    /// thread: the largest aligned span among them (for an expert, of any expert).
    fn direct_scratch_bytes(&self, unplanned: &[WeightKey]) -> Result<u64, ModelError> {
        let align = self.align as u64;
        let mut direct = 0u64;
        for &key in unplanned {
            let r = self.table.extent(key).map_err(ModelError::WeightRead)?;
            let span = match key.expert {
                // Every expert of the tensor, not only the one named.
                Some(_) => largest_span(r.end - r.start, align),
                None => aligned_span(&r, align).end - aligned_span(&r, align).start,
            };
            direct = direct.max(span);
        }
        Ok(direct)
    }

    /// Reads `span` (aligned) of `key` into `buf` on this thread, in chunks.
    fn read_span(
        &self,
        key: WeightKey,
        span: Range<u64>,
        buf: &mut [u8],
    ) -> Result<(), ModelError> {
        for (i, chunk) in buf.chunks_mut(STREAM_CHUNK_BYTES).enumerate() {
            let at = span.start + (i * STREAM_CHUNK_BYTES) as u64;
            self.reader.read_direct(at, chunk).map_err(|e| {
                let r = at..at + chunk.len() as u64;
                ModelError::WeightRead(self.io_error(key, r, e))
            })?;
        }
        Ok(())
    }

    fn io_error(&self, key: WeightKey, r: Range<u64>, e: IoError) -> StoreError {
        self.table.error(key, r, StoreErrorKind::Io(e))
    }

    /// Bytes streamed per pass, resident bytes and reads so far.
    pub fn stats(&self) -> StreamStats {
        StreamStats {
            resident_bytes: self.resident_bytes,
            streamed_bytes_per_pass: self.streamed_bytes,
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            passes: self.passes.load(Ordering::Relaxed),
            misses: self.ring.lock().misses,
        }
    }

    /// Ring bytes (the stream zones).
    pub fn zone_bytes(&self) -> usize {
        self.zone.len
    }

    /// For a reader thread: reads what the ring needs next until [`StreamStore::shut_down`].
    pub fn reader_loop(&self) {
        while let Some(job) = self.next_read() {
            let (off, len) = job.zone;
            // SAFETY: the chunk was claimed by this reader alone, and no compute thread reads
            // an entry before all its chunks are done.
            let buf = unsafe { self.zone.slice_mut(off..off + len) };
            let result = self.reader.read_direct(job.file_offset, buf);
            self.complete(job, result);
        }
    }

    /// Stops the reader threads (they return from `reader_loop` after their current read).
    pub fn shut_down(&self) {
        self.ring.lock().shutdown = true;
        self.work_ready.notify();
        self.data_ready.notify();
    }

    /// Blocks until there is a chunk to read; `None` once shut down.
    fn next_read(&self) -> Option<ReadJob> {
        loop {
            let epoch = self.work_ready.epoch();
            {
                let mut ring = self.ring.lock();
                if ring.shutdown {
                    return None;
                }
                if let Some(job) = self.claim(&mut ring) {
                    return Some(job);
                }
            }
            self.work_ready.wait(epoch);
        }
    }

    /// The next unclaimed chunk, oldest weight first, making room for the next weight of the
    /// order when every weight in the ring is claimed.
    fn claim(&self, ring: &mut Ring) -> Option<ReadJob> {
        let n = self.order.len() as u64;
        if n == 0 {
            return None;
        }
        let mut s = ring.tail;
        loop {
            if s == ring.head && !self.allocate(ring) {
                return None;
            }
            let w = &self.order[(s % n) as usize];
            let e = &mut ring.entries[(s % n) as usize];
            if e.claimed < e.chunks {
                let c = e.claimed as usize;
                e.claimed += 1;
                ring.in_flight += 1;
                let start = c * STREAM_CHUNK_BYTES;
                let len = (w.span_bytes() as usize - start).min(STREAM_CHUNK_BYTES);
                return Some(ReadJob {
                    s,
                    file_offset: w.span.start + start as u64,
                    zone: (e.off + start, len),
                });
            }
            s += 1;
        }
    }

    /// Gives the weight at sequence `ring.head` a zone, if there is room.
    fn allocate(&self, ring: &mut Ring) -> bool {
        let n = self.order.len() as u64;
        if ring.head - ring.tail >= n {
            return false;
        }
        let len = self.order[(ring.head % n) as usize].span_bytes() as usize;
        let tail_off = (ring.tail != ring.head).then(|| ring.entries[(ring.tail % n) as usize].off);
        let Some(off) = zone_offset(tail_off, ring.head_end, len, self.zone.len) else {
            return false;
        };
        ring.entries[(ring.head % n) as usize] = Entry {
            off,
            chunks: len.div_ceil(STREAM_CHUNK_BYTES) as u32,
            ..Entry::default()
        };
        ring.head += 1;
        ring.head_end = off + len;
        true
    }

    /// A reader finished a chunk.
    fn complete(&self, job: ReadJob, result: Result<(), IoError>) {
        let freed = {
            let mut ring = self.ring.lock();
            let n = self.order.len() as u64;
            let e = &mut ring.entries[(job.s % n) as usize];
            e.done += 1;
            match result {
                Ok(()) => {
                    self.bytes_read
                        .fetch_add(job.zone.1 as u64, Ordering::Relaxed);
                }
                Err(err) => {
                    if e.failed.is_none() {
                        e.failed = Some(err);
                    }
                }
            }
            ring.in_flight -= 1;
            self.advance_tail(&mut ring)
        };
        self.data_ready.notify();
        if freed {
            self.work_ready.notify();
        }
    }

    /// Frees the zones of released weights at the tail of the ring; true if any was freed.
    fn advance_tail(&self, ring: &mut Ring) -> bool {
        let n = self.order.len() as u64;
        let start = ring.tail;
        while ring.tail < ring.head {
            let e = &ring.entries[(ring.tail % n) as usize];
            if !e.released || e.done < e.chunks || ring.delayed == Some(ring.tail) {
                break;
            }
            ring.tail += 1;
        }
        if ring.tail == ring.head {
            ring.head_end = 0;
        }
        ring.tail != start
    }

    /// Gives up the weights at sequence numbers `seqs` (none held): their unclaimed chunks are
    /// never read, and their zones are freed once the reads in flight into them are done.
    fn abandon(&self, ring: &mut Ring, seqs: Range<u64>) {
        let n = self.order.len() as u64;
        for s in seqs {
            let e = &mut ring.entries[(s % n) as usize];
            e.released = true;
            e.done += e.chunks - e.claimed;
            e.claimed = e.chunks;
        }
    }

    /// The compute thread asked for a weight other than the expected one: drop everything in
    /// the ring (reads in flight finish into their zones first) and restart it at `to`.
    fn restart_at<'r>(
        &'r self,
        mut ring: spin::MutexGuard<'r, Ring>,
        to: u64,
    ) -> spin::MutexGuard<'r, Ring> {
        let window = ring.tail..ring.head;
        self.abandon(&mut ring, window);
        ring.delayed = None;
        while ring.in_flight > 0 {
            let epoch = self.data_ready.epoch();
            drop(ring);
            self.data_ready.wait(epoch);
            ring = self.ring.lock();
        }
        self.advance_tail(&mut ring);
        ring.tail = to;
        ring.head = to;
        ring.next_use = to;
        ring.head_end = 0;
        ring.misses += 1;
        ring
    }

    fn get_streamed(&self, key: WeightKey, index: usize) -> Result<Weight<'_>, StoreError> {
        let n = self.order.len() as u64;
        let w = &self.order[index];
        let s = {
            let mut ring = self.ring.lock();
            if let Some(d) = ring.delayed {
                if self.order[(d % n) as usize].key == key {
                    // Asked for again right after its release: still in its zone.
                    ring.delayed = None;
                    let e = &mut ring.entries[(d % n) as usize];
                    e.held = true;
                    e.released = false;
                    let off = e.off;
                    drop(ring);
                    return Ok(self.weight_in_zone(key, w, off));
                }
                ring.delayed = None;
                if self.advance_tail(&mut ring) {
                    self.work_ready.notify();
                }
            }
            let mut s = ring.next_use;
            if self.order[(s % n) as usize].key != key {
                let held = (ring.tail..ring.head).find(|&h| ring.entries[(h % n) as usize].held);
                if let Some(h) = held {
                    let held = self.order[(h % n) as usize].key;
                    let kind = StoreErrorKind::Busy { held };
                    return Err(self.table.error(key, w.extent.clone(), kind));
                }
                let mut to = s - s % n + index as u64;
                if to < s {
                    to += n;
                }
                if to < ring.head {
                    // Skipped forward to a weight already in the ring (a prompt chunk that
                    // computes no logits skips the LM head): drop the weights in between,
                    // keep the rest.
                    self.abandon(&mut ring, s..to);
                    ring.misses += 1;
                    if self.advance_tail(&mut ring) {
                        self.work_ready.notify();
                    }
                } else {
                    ring = self.restart_at(ring, to);
                }
                s = to;
            }
            ring.next_use = s + 1;
            if s.is_multiple_of(n) {
                self.passes.fetch_add(1, Ordering::Relaxed);
            }
            s
        };
        self.work_ready.notify();
        // Wait until every chunk of the weight is in.
        let off = loop {
            let epoch = self.data_ready.epoch();
            {
                let mut ring = self.ring.lock();
                if s < ring.head {
                    let e = &mut ring.entries[(s % n) as usize];
                    if e.done == e.chunks {
                        if let Some(err) = e.failed.take() {
                            e.released = true;
                            if self.advance_tail(&mut ring) {
                                self.work_ready.notify();
                            }
                            drop(ring);
                            let r = w.span.clone();
                            return Err(self.io_error(key, r, err));
                        }
                        e.held = true;
                        break e.off;
                    }
                }
            }
            self.data_ready.wait(epoch);
        };
        let weight = self.weight_in_zone(key, w, off);
        if let Some(sums) = &self.checksums {
            let found = checksum(&weight);
            if found != sums[index] {
                let kind = StoreErrorKind::Corrupt {
                    expected: sums[index],
                    found,
                };
                return Err(self.table.error(key, w.extent.clone(), kind));
            }
        }
        Ok(weight)
    }

    fn weight_in_zone(&self, key: WeightKey, w: &PlannedWeight, off: usize) -> Weight<'_> {
        let skip = (w.extent.start - w.span.start) as usize;
        let len = (w.extent.end - w.extent.start) as usize;
        // SAFETY: the entry is held: its chunks are all read and its zone is not reused
        // until the release.
        let bytes = unsafe { self.zone.slice(off + skip..off + skip + len) };
        Weight::new(self, key, bytes)
    }

    fn get_direct(&self, key: WeightKey) -> Result<Weight<'_>, StoreError> {
        let r = self.table.extent(key)?;
        let span = aligned_span(&r, self.align as u64);
        let len = (span.end - span.start) as usize;
        if len > self.direct.len {
            let kind = StoreErrorKind::TooLarge {
                scratch: self.direct.len,
            };
            return Err(self.table.error(key, r, kind));
        }
        {
            let mut ring = self.ring.lock();
            if ring.direct_held {
                let kind = StoreErrorKind::Busy { held: key };
                return Err(self.table.error(key, r, kind));
            }
            ring.direct_held = true;
        }
        // SAFETY: `direct_held` lends the scratch to this get alone until its release.
        let buf = unsafe { self.direct.slice_mut(0..len) };
        if let Err(e) = self.reader.read_direct(span.start, buf) {
            self.ring.lock().direct_held = false;
            return Err(self.io_error(key, span, e));
        }
        // Read from flash while running, as the ring's reads are (experts, mostly).
        self.bytes_read.fetch_add(len as u64, Ordering::Relaxed);
        let skip = (r.start - span.start) as usize;
        let bytes = &buf[skip..skip + (r.end - r.start) as usize];
        Ok(Weight::new(self, key, bytes))
    }
}

impl<R: ReadAt + Sync, S: Signal> WeightStore for StreamStore<R, S> {
    fn get(&self, key: WeightKey) -> Result<Weight<'_>, StoreError> {
        if key.expert.is_none() {
            match self.place.get(key.tensor) {
                Some(Place::Resident(r)) => {
                    // SAFETY: the resident buffer is only written by `plan` (&mut self).
                    let bytes = unsafe { self.resident.slice(r.clone()) };
                    return Ok(Weight::new(self, key, bytes));
                }
                Some(&Place::Streamed(i)) => return self.get_streamed(key, i),
                _ => {}
            }
        }
        self.get_direct(key)
    }

    fn read_rows(
        &self,
        key: WeightKey,
        first_row: usize,
        n_rows: usize,
        out: &mut [u8],
    ) -> Result<(), StoreError> {
        let r = self.table.rows_extent(key, first_row, n_rows, out.len())?;
        if let (None, Some(Place::Resident(at))) = (key.expert, self.place.get(key.tensor)) {
            let whole = self.table.extent(key)?;
            let start = at.start + (r.start - whole.start) as usize;
            // SAFETY: as in `get`.
            out.copy_from_slice(unsafe { self.resident.slice(start..start + out.len()) });
            return Ok(());
        }
        self.reader
            .read_at(r.start, out)
            .map_err(|e| self.io_error(key, r, e))
    }

    fn prefetch(&self, _keys: &[WeightKey]) {
        // The ring reads ahead in the learned order; the one-layer hint adds nothing.
    }

    fn release(&self, key: WeightKey) {
        if key.expert.is_none() {
            match self.place.get(key.tensor) {
                Some(Place::Resident(_)) => return,
                Some(&Place::Streamed(index)) => {
                    let n = self.order.len() as u64;
                    let mut ring = self.ring.lock();
                    let held = (ring.tail..ring.head).find(|&s| {
                        (s % n) as usize == index && ring.entries[(s % n) as usize].held
                    });
                    if let Some(s) = held {
                        let e = &mut ring.entries[(s % n) as usize];
                        e.held = false;
                        e.released = true;
                        let earlier = ring.delayed.replace(s);
                        if earlier.is_some() && self.advance_tail(&mut ring) {
                            drop(ring);
                            self.work_ready.notify();
                        }
                    }
                    return;
                }
                _ => {}
            }
        }
        self.ring.lock().direct_held = false;
    }

    fn held_bytes(&self) -> u64 {
        (self.resident.len + self.zone.len + self.direct.len) as u64
    }

    fn stream_stats(&self) -> Option<StreamStats> {
        self.planned.load(Ordering::Acquire).then(|| self.stats())
    }
}

/// Where the next zone of `len` bytes goes in a ring of `zone_len` bytes whose live zones run
/// from the oldest's offset `tail_off` (None: the ring is empty) to `head_end`, in allocation
/// order: after the newest if it fits before the end (or before the oldest, once wrapped),
/// else at 0 if that stays below the oldest; None while it would overlap a live zone.
fn zone_offset(
    tail_off: Option<usize>,
    head_end: usize,
    len: usize,
    zone_len: usize,
) -> Option<usize> {
    let Some(tail_off) = tail_off else {
        return Some(0);
    };
    if head_end > tail_off {
        if head_end + len <= zone_len {
            Some(head_end)
        } else if len <= tail_off {
            Some(0)
        } else {
            None
        }
    } else if head_end + len <= tail_off {
        Some(head_end)
    } else {
        None
    }
}

#[cfg(test)]
mod ring_tests {
    use super::zone_offset;
    use alloc::collections::VecDeque;

    /// The ring's placement over many random weights, released oldest first as the compute
    /// thread releases them: every zone lies inside the buffer and overlaps no live zone, and
    /// an empty ring always takes a weight that fits the buffer (a wrap that lands on a live
    /// zone by even one byte fails here).
    #[test]
    fn zones_never_overlap_a_live_zone_and_an_empty_ring_always_takes_a_weight() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move |below: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % below as u64) as usize
        };
        for zone_len in [4096usize, 10_000, 65_536, 1 << 20] {
            let mut live: VecDeque<(usize, usize)> = VecDeque::new();
            let mut head_end = 0;
            let (mut placed, mut wrapped) = (0usize, 0usize);
            for _ in 0..50_000 {
                // sizes from 1 byte to the whole buffer, small ones most often
                let big = next(8) == 0;
                let len = 1 + next(if big { zone_len } else { zone_len / 4 });
                if next(3) == 0 {
                    live.pop_front();
                }
                let tail = live.front().map(|&(off, _)| off);
                match zone_offset(tail, head_end, len, zone_len) {
                    Some(off) => {
                        assert!(
                            off + len <= zone_len,
                            "zone {off}+{len} past the end {zone_len}"
                        );
                        for &(o, l) in &live {
                            assert!(
                                off + len <= o || o + l <= off,
                                "zone {off}+{len} overlaps the live zone {o}+{l} (buffer {zone_len})"
                            );
                        }
                        if off == 0 && !live.is_empty() {
                            wrapped += 1;
                        }
                        live.push_back((off, len));
                        head_end = off + len;
                        placed += 1;
                    }
                    None => {
                        assert!(
                            !live.is_empty(),
                            "an empty ring refused {len} of {zone_len} bytes"
                        );
                        live.pop_front();
                    }
                }
            }
            assert!(
                placed > 10_000 && wrapped > 100,
                "the walk placed {placed}, wrapped {wrapped}: it tests too little"
            );
        }
    }
}
