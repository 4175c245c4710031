//! The arena: one region of memory that the caller hands to core, carved by a plan into the
//! state of a run (KV cache or recurrent state, activations, scratch, logits, the MTP block's
//! state), so that what the memory guard planned and what the run holds are the same numbers.
//!
//! ```text
//! ArenaPlan   named parts, each a sum of buffers rounded up to its alignment (u64, saturating:
//!             a plan too big for any address space reads as u64::MAX, it never wraps)
//! Region      the bytes: a static buffer, a heap block, an anonymous mmap, a vm_allocate'd
//!             region (the platform crates make the last two), released as a whole
//! Arena<'r>   a bump pointer per part over a region the plan fits in (checked up front: size,
//!             alignment, address space), handing out zeroed, aligned, typed slices
//! ```
//!
//! The parts are laid out in the order of [`Part::ALL`]: the ones that direct reads land in
//! (stream zones, expert slots; aligned to the reader's direct-I/O alignment) first, then the
//! cache-line aligned ones. Every part's size is a multiple of its alignment and the
//! alignments only shrink along the layout, so every part starts aligned and the arena's
//! high-water mark is exactly the plan's total when every buffer the plan counted was taken.
//!
//! The arena allocates nothing itself and writes nothing it does not hand out: a region known
//! to be zero (fresh anonymous memory, `alloc_zeroed`) is not touched until the model writes a
//! buffer, so a KV cache sized for 32K tokens costs resident memory only for the positions
//! used, as a calloc'd buffer does.

use core::fmt;
use core::marker::PhantomData;
use core::mem::{align_of, size_of, MaybeUninit};
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

/// Alignment of every cache-line aligned part and buffer: a buffer never shares a cache line
/// with another one that a different thread writes, and SIMD loads of a row start aligned.
pub const CACHE_LINE: usize = 64;

/// Alignment of the parts that direct reads land in when no reader said otherwise: O_DIRECT
/// wants the logical block size (512 or 4096); a page satisfies both.
pub const DIRECT_IO_ALIGNMENT: usize = 4096;

/// A named part of the arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// Zones of the streaming store's ring and its direct-read scratch, filled by direct
    /// reads (the store's own arena: `StreamStore::zone_plan`; empty in a run's state).
    StreamZones,
    /// Slots of the expert pools, filled by direct reads (the pool's own arena:
    /// `pager::slot_plan`; empty in a run's state).
    ExpertSlots,
    /// One entry per layer saying where its state is (the table of `LayerState`s).
    LayerTable,
    /// The attention layers' f16 keys and values.
    KvCache,
    /// The recurrent layers' fixed state, and the copies a verify pass keeps.
    RecurrentState,
    /// The per-token rows every layer reads and writes, and attention's scores.
    Activations,
    /// The matvec's quantized inputs, the lookup-table kernels' tables, the matmul tile.
    Scratch,
    /// The logits rows, and a pruned head's rows before they are scattered.
    Logits,
    /// Qwen3.5's MTP block: its KV cache, the trunk's hidden rows it reads, its input rows.
    Mtp,
}

/// How many parts a plan has.
pub const N_PARTS: usize = 9;

impl Part {
    /// Every part, in the order the arena lays them out (largest alignment first).
    pub const ALL: [Part; N_PARTS] = [
        Part::StreamZones,
        Part::ExpertSlots,
        Part::LayerTable,
        Part::KvCache,
        Part::RecurrentState,
        Part::Activations,
        Part::Scratch,
        Part::Logits,
        Part::Mtp,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Part::StreamZones => "stream zones",
            Part::ExpertSlots => "expert slots",
            Part::LayerTable => "layer table",
            Part::KvCache => "kv cache",
            Part::RecurrentState => "recurrent state",
            Part::Activations => "activations",
            Part::Scratch => "scratch",
            Part::Logits => "logits",
            Part::Mtp => "mtp state",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }

    /// Direct reads land in this part: it is aligned for them.
    pub const fn is_read_target(self) -> bool {
        matches!(self, Part::StreamZones | Part::ExpertSlots)
    }
}

/// `value` rounded up to a multiple of `align` (a power of two), saturating.
const fn round_up(value: u64, align: u64) -> u64 {
    match value.checked_add(align - 1) {
        Some(v) => v & !(align - 1),
        None => u64::MAX,
    }
}

/// How many bytes each part of a run's state takes, and how each is aligned: what an
/// [`Arena`] over a region carves, part by part, buffer by buffer. Built by adding buffers
/// ([`ArenaPlan::add`]) in the order the state takes them ([`Arena::take`]).
///
/// The sizes are u64 and saturate: a plan bigger than any address space reads as `u64::MAX`
/// bytes and is refused when an arena is made for it (never wrapped into a small number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArenaPlan {
    bytes: [u64; N_PARTS],
    /// log2 of each part's alignment (small: the plan travels inside error values).
    align_log2: [u8; N_PARTS],
}

impl Default for ArenaPlan {
    fn default() -> Self {
        ArenaPlan::new()
    }
}

impl ArenaPlan {
    /// An empty plan: every part cache-line aligned, the read targets aligned for direct I/O.
    pub const fn new() -> ArenaPlan {
        let mut align_log2 = [CACHE_LINE.trailing_zeros() as u8; N_PARTS];
        let direct = DIRECT_IO_ALIGNMENT.trailing_zeros() as u8;
        align_log2[Part::StreamZones.index()] = direct;
        align_log2[Part::ExpertSlots.index()] = direct;
        ArenaPlan {
            bytes: [0; N_PARTS],
            align_log2,
        }
    }

    /// This plan with the read targets aligned to `align` (the reader's
    /// [`ReadAt::direct_alignment`](crate::platform::ReadAt::direct_alignment)), at least a
    /// cache line; `None` unless `align` is a power of two.
    pub fn with_direct_alignment(mut self, align: usize) -> Option<ArenaPlan> {
        if !align.is_power_of_two() {
            return None;
        }
        for part in [Part::StreamZones, Part::ExpertSlots] {
            self.align_log2[part.index()] = align.max(CACHE_LINE).trailing_zeros() as u8;
            self.bytes[part.index()] = round_up(self.bytes[part.index()], self.align(part) as u64);
        }
        Some(self)
    }

    /// Bytes one buffer of `rows x cols` values of `T` takes in `part`: rounded up to the
    /// part's alignment, so that the next buffer starts aligned too.
    pub fn buffer_bytes<T>(&self, part: Part, rows: usize, cols: usize) -> u64 {
        let n = (rows as u64).saturating_mul(cols as u64);
        let bytes = n.saturating_mul(size_of::<T>() as u64);
        round_up(bytes, self.align(part) as u64)
    }

    /// Counts one buffer of `rows x cols` values of `T` in `part`.
    pub fn add<T>(&mut self, part: Part, rows: usize, cols: usize) {
        let bytes = self.buffer_bytes::<T>(part, rows, cols);
        let i = part.index();
        self.bytes[i] = self.bytes[i].saturating_add(bytes);
    }

    /// Counts `bytes` in `part` as one buffer (a stream zone or an expert slot).
    pub fn add_bytes(&mut self, part: Part, bytes: u64) {
        let i = part.index();
        let rounded = round_up(bytes, self.align(part) as u64);
        self.bytes[i] = self.bytes[i].saturating_add(rounded);
    }

    /// Bytes of `part`.
    pub fn bytes(&self, part: Part) -> u64 {
        self.bytes[part.index()]
    }

    /// Alignment of `part` (and of every buffer in it).
    pub fn align(&self, part: Part) -> usize {
        1 << self.align_log2[part.index()]
    }

    /// Every part with its size, in layout order.
    pub fn parts(&self) -> impl Iterator<Item = (Part, u64)> + '_ {
        Part::ALL.iter().map(|&p| (p, self.bytes(p)))
    }

    /// Bytes of the whole plan: the size a region needs (saturating).
    pub fn total(&self) -> u64 {
        self.bytes
            .iter()
            .fold(0u64, |sum, &b| sum.saturating_add(b))
    }

    /// Where `part` starts in the region (saturating).
    pub fn offset(&self, part: Part) -> u64 {
        Part::ALL
            .iter()
            .take_while(|&&p| p != part)
            .fold(0u64, |sum, &p| sum.saturating_add(self.bytes(p)))
    }

    /// The alignment a region's start needs: the largest of the non-empty parts', at least a
    /// cache line.
    pub fn region_alignment(&self) -> usize {
        Part::ALL
            .iter()
            .filter(|&&p| self.bytes(p) > 0)
            .map(|&p| self.align(p))
            .fold(CACHE_LINE, usize::max)
    }

    /// The plan's total as a size this target can address, or why not: a plan bigger than
    /// `max_bytes` (`usize::MAX` for the running target; `u32::MAX as u64` is what a 32-bit
    /// device can address) is refused with its parts.
    pub fn fits_in(&self, max_bytes: u64) -> Result<u64, ArenaError> {
        let total = self.total();
        // u64::MAX is where the sums saturated: the true size is larger still.
        if total == u64::MAX || total > max_bytes {
            return Err(ArenaError::TooBigForAddressSpace {
                plan: *self,
                max_bytes,
            });
        }
        Ok(total)
    }

    /// The plan's total in bytes of this target's address space.
    pub fn total_usize(&self) -> Result<usize, ArenaError> {
        let total = self.fits_in(usize::MAX as u64)?;
        // Cannot fail: checked against usize::MAX just above.
        usize::try_from(total).map_err(|_| ArenaError::TooBigForAddressSpace {
            plan: *self,
            max_bytes: usize::MAX as u64,
        })
    }
}

/// Writes the parts with their sizes, one per line, then the total (for error messages and
/// `--verbose`).
impl fmt::Display for ArenaPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (part, bytes) in self.parts().filter(|p| p.1 > 0) {
            writeln!(f, "  {:<16} {:>14} bytes", part.name(), bytes)?;
        }
        write!(f, "  {:<16} {:>14} bytes", "total", self.total())
    }
}

/// Why an arena could not be made over a region, or could not hand out a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArenaError {
    /// The region is smaller than the plan (nothing was written).
    RegionTooSmall {
        plan: ArenaPlan,
        region_bytes: usize,
    },
    /// The region does not start on the alignment the plan's parts need (direct reads land
    /// in them; nothing was written).
    Misaligned { address: usize, needed: usize },
    /// The plan is more bytes than this target can address (a 32-bit device), or overflowed
    /// (it saturated at u64::MAX).
    TooBigForAddressSpace { plan: ArenaPlan, max_bytes: u64 },
    /// A buffer beyond what the plan counted for its part: the code that planned the state
    /// and the code that carves it disagree (a bug, never out of bounds).
    PartFull {
        part: Part,
        planned: u64,
        asked: u64,
    },
    /// A buffer's values need more alignment than its part has (a bug).
    TypeAlignment { part: Part, needed: usize },
    /// The heap could not give a region of this many bytes.
    OutOfMemory { bytes: usize },
}

impl fmt::Display for ArenaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArenaError::RegionTooSmall { plan, region_bytes } => write!(
                f,
                "the memory region for the run's state is {region_bytes} bytes but its plan \
                 needs {} ({} more); give a region of at least the plan's total, or lower the \
                 context (-c) or the batch. The plan:\n{plan}",
                plan.total(),
                plan.total().saturating_sub(*region_bytes as u64)
            ),
            ArenaError::Misaligned { address, needed } => write!(
                f,
                "the memory region for the run's state starts at {address:#x}, which is not a \
                 multiple of {needed} (direct reads land in it); give a region aligned to \
                 {needed} bytes (an anonymous mmap is page-aligned)"
            ),
            ArenaError::TooBigForAddressSpace { plan, max_bytes } => {
                if plan.total() == u64::MAX {
                    write!(
                        f,
                        "the run's state is more bytes than a 64-bit number holds"
                    )?;
                } else {
                    write!(
                        f,
                        "the run's state needs {} bytes, more than this device can address \
                         ({max_bytes} bytes)",
                        plan.total()
                    )?;
                }
                write!(f, "; lower the context (-c). The plan:\n{plan}")
            }
            ArenaError::PartFull {
                part,
                planned,
                asked,
            } => write!(
                f,
                "the arena's part '{}' was planned at {planned} bytes but {asked} were taken \
                 from it: the state's plan and its carving disagree (a bug in smolrun; please \
                 report it)",
                part.name()
            ),
            ArenaError::TypeAlignment { part, needed } => write!(
                f,
                "a buffer in the arena's part '{}' needs {needed}-byte alignment, more than the \
                 part has (a bug in smolrun; please report it)",
                part.name()
            ),
            ArenaError::OutOfMemory { bytes } => write!(
                f,
                "could not allocate {bytes} bytes for the run's state: lower the context (-c)"
            ),
        }
    }
}

/// Types whose all-zero bit pattern is a valid value: what an arena hands out without writing
/// a region known to be zero.
///
/// # Safety
/// The all-zero bytes of `size_of::<Self>()` must be a valid `Self`.
pub unsafe trait Zeroed: Copy {}

// SAFETY: zero is a valid value of every primitive number and of bool (false).
unsafe impl Zeroed for u8 {}
unsafe impl Zeroed for u16 {}
unsafe impl Zeroed for u32 {}
unsafe impl Zeroed for u64 {}
unsafe impl Zeroed for usize {}
unsafe impl Zeroed for i8 {}
unsafe impl Zeroed for i16 {}
unsafe impl Zeroed for i32 {}
unsafe impl Zeroed for f32 {}
unsafe impl Zeroed for f64 {}
unsafe impl Zeroed for bool {}

/// A bump allocator per part over a region the plan fits in: hands out aligned, typed slices
/// that live as long as the region's borrow, each exactly once. Freed as a whole when the
/// region is (nothing is freed piecewise).
pub struct Arena<'r> {
    base: NonNull<u8>,
    plan: ArenaPlan,
    /// Where each part starts (fits in usize: checked against the region's length).
    start: [usize; N_PARTS],
    used: [usize; N_PARTS],
    /// The region's bytes are all zero: buffers of [`Zeroed`] types need no writing.
    zeroed: bool,
    _region: PhantomData<&'r mut [MaybeUninit<u8>]>,
}

// SAFETY: the arena is the only way to the region's bytes it has not handed out; it holds
// them as a `&mut [MaybeUninit<u8>]` would.
unsafe impl Send for Arena<'_> {}

impl<'r> Arena<'r> {
    /// An arena over `region` for `plan`. Checks, before anything is written, that the plan
    /// fits this target's address space and the region, and that the region starts on the
    /// alignment the plan's parts need. Buffers are zeroed as they are handed out.
    pub fn new(
        plan: &ArenaPlan,
        region: &'r mut [MaybeUninit<u8>],
    ) -> Result<Arena<'r>, ArenaError> {
        // SAFETY: `zeroed` is false: nothing is assumed of the bytes.
        unsafe { Arena::over(plan, region.as_mut_ptr().cast(), region.len(), false) }
    }

    /// Like [`Arena::new`] over bytes known to be zero, which are then not written before
    /// the model writes them.
    ///
    /// # Safety
    /// Every byte of `region` must be zero.
    pub unsafe fn new_zeroed(
        plan: &ArenaPlan,
        region: &'r mut [MaybeUninit<u8>],
    ) -> Result<Arena<'r>, ArenaError> {
        // SAFETY: the caller promises the bytes are zero.
        unsafe { Arena::over(plan, region.as_mut_ptr().cast(), region.len(), true) }
    }

    /// # Safety
    /// `base..base + len` must be valid for reads and writes for `'r` and reached by nothing
    /// else meanwhile; all zero if `zeroed`.
    unsafe fn over(
        plan: &ArenaPlan,
        base: *mut u8,
        len: usize,
        zeroed: bool,
    ) -> Result<Arena<'r>, ArenaError> {
        let total = plan.total_usize()?;
        if len < total {
            return Err(ArenaError::RegionTooSmall {
                plan: *plan,
                region_bytes: len,
            });
        }
        let needed = plan.region_alignment();
        let address = base as usize;
        if !address.is_multiple_of(needed) {
            return Err(ArenaError::Misaligned { address, needed });
        }
        let mut start = [0usize; N_PARTS];
        for part in Part::ALL {
            // Below the total, which fits in usize.
            start[part.index()] = plan.offset(part) as usize;
        }
        Ok(Arena {
            // A region of length 0 may come with a null pointer: any aligned address will do,
            // no byte of it is ever read.
            base: NonNull::new(base).unwrap_or(NonNull::dangling()),
            plan: *plan,
            start,
            used: [0; N_PARTS],
            zeroed,
            _region: PhantomData,
        })
    }

    /// The next `rows x cols` values of `T` in `part`, zeroed.
    pub fn take<T: Zeroed>(
        &mut self,
        part: Part,
        rows: usize,
        cols: usize,
    ) -> Result<&'r mut [T], ArenaError> {
        let (ptr, n) = self.reserve::<T>(part, rows, cols)?;
        if !self.zeroed {
            // SAFETY: `reserve` handed out `n` values of T at `ptr`, in the region, aligned.
            unsafe { ptr.as_ptr().write_bytes(0, n) };
        }
        // SAFETY: the bytes are zero (written above, or the region's own), a valid T by
        // `Zeroed`; the range is in the region, aligned, and handed out once.
        Ok(unsafe { core::slice::from_raw_parts_mut(ptr.as_ptr(), n) })
    }

    /// [`Arena::take`], the slice detached from the region's lifetime, for a value that is
    /// kept beside the region's owner (a [`State`](crate::model::State)'s buffers).
    ///
    /// # Safety
    /// As [`ArenaSlice::detach`]: the region must outlive the slice and every use of it.
    pub unsafe fn take_detached<T: Zeroed + 'r>(
        &mut self,
        part: Part,
        rows: usize,
        cols: usize,
    ) -> Result<ArenaSlice<T>, ArenaError> {
        let slice = self.take::<T>(part, rows, cols)?;
        // SAFETY: the caller's promise.
        Ok(unsafe { ArenaSlice::detach(slice) })
    }

    /// The next `rows x cols` values of `T` in `part`, each set to `value`.
    pub fn take_filled<T: Copy>(
        &mut self,
        part: Part,
        rows: usize,
        cols: usize,
        value: T,
    ) -> Result<&'r mut [T], ArenaError> {
        let slots = self.take_uninit::<T>(part, rows, cols)?;
        for slot in slots.iter_mut() {
            slot.write(value);
        }
        // SAFETY: every slot was written just above.
        Ok(unsafe { &mut *(slots as *mut [MaybeUninit<T>] as *mut [T]) })
    }

    /// The next `rows x cols` slots for values of `T` in `part`, not initialised: for a table
    /// of values that are built one by one (the layer table).
    pub fn take_uninit<T>(
        &mut self,
        part: Part,
        rows: usize,
        cols: usize,
    ) -> Result<&'r mut [MaybeUninit<T>], ArenaError> {
        let (ptr, n) = self.reserve::<T>(part, rows, cols)?;
        // SAFETY: in the region, aligned, handed out once; MaybeUninit needs no initialising.
        Ok(unsafe { core::slice::from_raw_parts_mut(ptr.as_ptr().cast(), n) })
    }

    /// Moves `part`'s bump pointer past one buffer of `rows x cols` values of `T` (rounded up
    /// to the part's alignment, as [`ArenaPlan::buffer_bytes`] counts it).
    fn reserve<T>(
        &mut self,
        part: Part,
        rows: usize,
        cols: usize,
    ) -> Result<(NonNull<T>, usize), ArenaError> {
        let i = part.index();
        let align = self.plan.align(part);
        if align_of::<T>() > align {
            return Err(ArenaError::TypeAlignment {
                part,
                needed: align_of::<T>(),
            });
        }
        let planned = self.plan.bytes(part);
        let bytes = self.plan.buffer_bytes::<T>(part, rows, cols);
        let full = ArenaError::PartFull {
            part,
            planned,
            asked: (self.used[i] as u64).saturating_add(bytes),
        };
        if bytes > planned - self.used[i] as u64 {
            return Err(full);
        }
        // Below the plan's total, which fits in usize (checked by `over`); so does the count
        // of values (at most the bytes, unless T takes none).
        let n = rows.checked_mul(cols).ok_or(full)?;
        let bytes = bytes as usize;
        let offset = self.start[i] + self.used[i];
        self.used[i] += bytes;
        if n == 0 {
            return Ok((NonNull::dangling(), 0));
        }
        // SAFETY: offset + bytes <= the part's end <= total <= the region's length.
        let ptr = unsafe { self.base.as_ptr().add(offset) };
        // SAFETY: in the region, which is not null.
        Ok((unsafe { NonNull::new_unchecked(ptr.cast()) }, n))
    }

    /// Bytes handed out from `part` (buffers rounded up to its alignment).
    pub fn used(&self, part: Part) -> usize {
        self.used[part.index()]
    }

    /// Bytes handed out in all: equal to the plan's total when every planned buffer was taken.
    pub fn high_water(&self) -> usize {
        self.used.iter().sum()
    }

    pub fn plan(&self) -> &ArenaPlan {
        &self.plan
    }

    /// What the arena planned and handed out, part by part, to keep after it is gone.
    pub fn usage(&self, region: &'static str, region_bytes: usize) -> ArenaUsage {
        ArenaUsage {
            plan: self.plan,
            used: self.used,
            region,
            region_bytes,
        }
    }
}

/// An arena's plan and what it handed out, part by part (`smolrun run --verbose` prints it:
/// the two columns are the same numbers when the plan was right).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArenaUsage {
    pub plan: ArenaPlan,
    used: [usize; N_PARTS],
    /// What the region is ("heap", "anonymous mmap", "vm_allocate", "static").
    pub region: &'static str,
    pub region_bytes: usize,
}

impl ArenaUsage {
    pub fn used(&self, part: Part) -> usize {
        self.used[part.index()]
    }

    pub fn high_water(&self) -> usize {
        self.used.iter().sum()
    }
}

impl fmt::Display for ArenaUsage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "arena ({}, {} bytes):  {:>14} {:>14}",
            self.region, self.region_bytes, "planned", "used"
        )?;
        for part in Part::ALL {
            let (planned, used) = (self.plan.bytes(part), self.used(part));
            if planned > 0 || used > 0 {
                writeln!(f, "  {:<16} {:>14} {:>14}", part.name(), planned, used)?;
            }
        }
        write!(
            f,
            "  {:<16} {:>14} {:>14}",
            "total",
            self.plan.total(),
            self.high_water()
        )
    }
}

/// Memory a run's state is carved from, owned: its bytes stay where they are however the
/// owner moves, and are given back (by the platform's own call) when it is dropped.
///
/// Core makes two kinds itself: [`Region::heap`] (the global allocator, zeroed) and
/// [`Region::from_static`] (a buffer in a firmware image); the platform crates make the others
/// with [`Region::from_raw_parts`] (smolrun-linux: an anonymous mmap; smolrun-ios: a
/// vm_allocate'd region, counted in the footprint).
pub struct Region {
    base: NonNull<u8>,
    len: usize,
    zeroed: bool,
    /// Gives the bytes back; `None` for a static buffer.
    release: Option<unsafe fn(NonNull<u8>, usize)>,
    kind: &'static str,
}

// SAFETY: a region is plain memory owned by whoever owns the `Region`.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    /// A region of `bytes` on the heap, page-aligned (direct reads can land in any part) and
    /// zeroed by the allocator (calloc: pages stay untouched until the model writes them).
    pub fn heap(bytes: usize) -> Result<Region, ArenaError> {
        let kind = "heap";
        if bytes == 0 {
            return Ok(Region {
                base: NonNull::dangling(),
                len: 0,
                zeroed: true,
                release: None,
                kind,
            });
        }
        let Ok(layout) = core::alloc::Layout::from_size_align(bytes, HEAP_REGION_ALIGN) else {
            return Err(ArenaError::OutOfMemory { bytes });
        };
        // SAFETY: the layout's size is not zero.
        let ptr = unsafe { alloc::alloc::alloc_zeroed(layout) };
        let Some(base) = NonNull::new(ptr) else {
            return Err(ArenaError::OutOfMemory { bytes });
        };
        /// # Safety
        /// `base` came from `Region::heap` with `len` bytes.
        unsafe fn release_heap(base: NonNull<u8>, len: usize) {
            if let Ok(layout) = core::alloc::Layout::from_size_align(len, HEAP_REGION_ALIGN) {
                // SAFETY: allocated with this layout by `Region::heap`.
                unsafe { alloc::alloc::dealloc(base.as_ptr(), layout) }
            }
        }
        Ok(Region {
            base,
            len: bytes,
            zeroed: true,
            release: Some(release_heap),
            kind,
        })
    }

    /// A region of no bytes (for a plan with nothing in it).
    pub const fn empty() -> Region {
        Region {
            base: NonNull::dangling(),
            len: 0,
            zeroed: true,
            release: None,
            kind: "empty",
        }
    }

    /// A region over a static buffer (a firmware image's): never given back. Its bytes are
    /// zeroed as buffers are handed out.
    pub fn from_static(buf: &'static mut [MaybeUninit<u8>]) -> Region {
        Region {
            // A slice's pointer is never null.
            base: NonNull::new(buf.as_mut_ptr().cast()).unwrap_or(NonNull::dangling()),
            len: buf.len(),
            zeroed: false,
            release: None,
            kind: "static",
        }
    }

    /// A region the platform mapped or allocated itself.
    ///
    /// # Safety
    /// `base..base + len` must be valid for reads and writes, reached by nothing else until
    /// `release(base, len)` is called (when the region is dropped), and all zero if `zeroed`.
    pub unsafe fn from_raw_parts(
        base: NonNull<u8>,
        len: usize,
        zeroed: bool,
        release: Option<unsafe fn(NonNull<u8>, usize)>,
        kind: &'static str,
    ) -> Region {
        Region {
            base,
            len,
            zeroed,
            release,
            kind,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What the region is: "heap", "static", or the platform's name ("anonymous mmap", ...).
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// Where the region starts.
    pub fn address(&self) -> usize {
        self.base.as_ptr() as usize
    }

    /// An arena for `plan` over this region (checked as [`Arena::new`] checks it).
    pub fn arena(&mut self, plan: &ArenaPlan) -> Result<Arena<'_>, ArenaError> {
        let zeroed = core::mem::replace(&mut self.zeroed, false);
        // SAFETY: the region owns these bytes and `&mut self` is borrowed for the arena's
        // life; zero if the region still was (once handed out, they are no longer assumed to
        // be, hence the flag's reset).
        unsafe { Arena::over(plan, self.base.as_ptr(), self.len, zeroed) }
    }
}

/// Alignment of every heap region: a page, so that direct reads can land in any part.
const HEAP_REGION_ALIGN: usize = 4096;

impl Drop for Region {
    fn drop(&mut self) {
        if let Some(release) = self.release {
            // SAFETY: `from_raw_parts`' contract (or `heap`'s own allocation).
            unsafe { release(self.base, self.len) }
        }
    }
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Region({}, {} bytes at {:#x})",
            self.kind,
            self.len,
            self.address()
        )
    }
}

/// A slice carved from a region that the owner of this value also owns (a [`State`]'s own
/// region): a `&mut [T]` without the region's lifetime. Dereferences to the slice.
///
/// [`State`]: crate::model::State
pub struct ArenaSlice<T> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: an ArenaSlice is the only way to its values, as a `&mut [T]` (or a Vec) would be.
unsafe impl<T: Send> Send for ArenaSlice<T> {}
unsafe impl<T: Sync> Sync for ArenaSlice<T> {}

impl<T> ArenaSlice<T> {
    /// An empty slice (no region behind it).
    pub const fn empty() -> ArenaSlice<T> {
        ArenaSlice {
            ptr: NonNull::dangling(),
            len: 0,
        }
    }

    /// Forgets the lifetime of a slice an arena handed out.
    ///
    /// # Safety
    /// The region `slice` was carved from must outlive the returned value and every use of
    /// it (the value is kept beside the region's owner, which drops the region last), and
    /// nothing else may reach the slice's values.
    pub unsafe fn detach(slice: &mut [T]) -> ArenaSlice<T> {
        ArenaSlice {
            // A slice's pointer is never null.
            ptr: NonNull::new(slice.as_mut_ptr()).unwrap_or(NonNull::dangling()),
            len: slice.len(),
        }
    }
}

impl<T> Deref for ArenaSlice<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `detach`'s contract: the values live in a region still held, reached only
        // through this value.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> DerefMut for ArenaSlice<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<'a, T> IntoIterator for &'a ArenaSlice<T> {
    type Item = &'a T;
    type IntoIter = core::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a, T> IntoIterator for &'a mut ArenaSlice<T> {
    type Item = &'a mut T;
    type IntoIter = core::slice::IterMut<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

impl<T: fmt::Debug> fmt::Debug for ArenaSlice<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    fn plan() -> ArenaPlan {
        let mut plan = ArenaPlan::new();
        plan.add::<f32>(Part::Activations, 3, 5); // 60 -> 64
        plan.add::<u16>(Part::KvCache, 16, 8); // 256
        plan.add::<u8>(Part::Scratch, 1, 65); // 65 -> 128
        plan.add::<f32>(Part::Logits, 0, 100); // empty: 0
        plan
    }

    /// A 4096-aligned buffer to carve from.
    #[repr(C, align(4096))]
    struct Page([MaybeUninit<u8>; 8192]);

    fn page() -> alloc::boxed::Box<Page> {
        alloc::boxed::Box::new(Page([MaybeUninit::new(0xAB); 8192]))
    }

    #[test]
    fn the_high_water_mark_is_the_plans_total_and_every_buffer_is_aligned_and_zero() {
        let plan = plan();
        assert_eq!(plan.total(), 64 + 256 + 128);
        assert_eq!(plan.offset(Part::KvCache), 0);
        assert_eq!(plan.offset(Part::Activations), 256);
        assert_eq!(plan.offset(Part::Scratch), 320);
        let mut buf = page();
        let mut arena = Arena::new(&plan, &mut buf.0).unwrap();
        let a = arena.take::<f32>(Part::Activations, 3, 5).unwrap();
        let k = arena.take::<u16>(Part::KvCache, 16, 8).unwrap();
        let s = arena.take::<u8>(Part::Scratch, 1, 65).unwrap();
        let l = arena.take::<f32>(Part::Logits, 0, 100).unwrap();
        assert_eq!((a.len(), k.len(), s.len(), l.len()), (15, 128, 65, 0));
        assert!(a.iter().all(|&v| v == 0.0) && k.iter().all(|&v| v == 0));
        assert!(s.iter().all(|&v| v == 0), "the 0xAB fill was zeroed");
        for p in [
            a.as_ptr() as usize,
            k.as_ptr() as usize,
            s.as_ptr() as usize,
        ] {
            assert_eq!(p % CACHE_LINE, 0);
        }
        assert_eq!(arena.high_water() as u64, plan.total());
        for part in Part::ALL {
            assert_eq!(arena.used(part) as u64, plan.bytes(part), "{}", part.name());
        }
        // Writes through one slice do not show in another.
        a.fill(1.0);
        k.fill(7);
        s.fill(9);
        assert!(a.iter().all(|&v| v == 1.0) && k.iter().all(|&v| v == 7));
    }

    #[test]
    fn a_buffer_beyond_its_part_is_refused_not_carved() {
        let plan = plan();
        let mut buf = page();
        let mut arena = Arena::new(&plan, &mut buf.0).unwrap();
        let err = arena.take::<f32>(Part::Activations, 4, 5).unwrap_err();
        assert_eq!(
            err,
            ArenaError::PartFull {
                part: Part::Activations,
                planned: 64,
                asked: 128
            }
        );
        // A part with nothing planned hands out nothing either.
        assert!(arena.take::<u8>(Part::Mtp, 1, 1).is_err());
        assert_eq!(arena.high_water(), 0);
    }

    #[test]
    fn a_region_too_small_is_refused_with_the_plans_parts_before_anything_is_written() {
        let plan = plan();
        let mut buf = page();
        let err = match Arena::new(&plan, &mut buf.0[..447]) {
            Err(e) => e,
            Ok(_) => panic!("a 447-byte region for a 448-byte plan was accepted"),
        };
        let msg = err.to_string();
        assert!(
            msg.contains("is 447 bytes but its plan needs 448 (1 more)"),
            "{msg}"
        );
        for line in ["kv cache", "256", "activations", "scratch", "128", "total"] {
            assert!(msg.contains(line), "{line} missing from: {msg}");
        }
        assert!(!msg.contains("logits"), "empty parts are not listed: {msg}");
        // Nothing was written.
        assert!(buf.0.iter().all(|b| unsafe { b.assume_init() } == 0xAB));
    }

    #[test]
    fn a_region_misaligned_for_direct_reads_is_refused_with_the_alignment_needed() {
        let mut plan = plan();
        // Cache-line parts only: a region aligned to 64 is enough.
        let mut buf = page();
        assert!(Arena::new(&plan, &mut buf.0[64..]).is_ok());
        let err = match Arena::new(&plan, &mut buf.0[8..]) {
            Err(e) => e,
            Ok(_) => panic!("misaligned region accepted"),
        };
        assert!(matches!(err, ArenaError::Misaligned { needed: 64, .. }));
        // With an expert slot (a direct read lands in it): a page.
        plan.add_bytes(Part::ExpertSlots, 1000);
        assert_eq!(plan.bytes(Part::ExpertSlots), 4096);
        assert_eq!(plan.region_alignment(), 4096);
        assert_eq!(plan.offset(Part::KvCache), 4096);
        let mut big = page();
        let err = match Arena::new(&plan, &mut big.0[64..]) {
            Err(e) => e,
            Ok(_) => panic!("misaligned region accepted"),
        };
        assert!(matches!(err, ArenaError::Misaligned { needed: 4096, .. }));
        let msg = err.to_string();
        assert!(msg.contains("not a multiple of 4096"), "{msg}");
        let mut arena = Arena::new(&plan, &mut big.0).unwrap();
        let slot = arena.take::<u8>(Part::ExpertSlots, 1, 1000).unwrap();
        assert_eq!(slot.as_ptr() as usize % 4096, 0);
        // A reader with 512-byte blocks: 512-byte slots.
        let p512 = ArenaPlan::new().with_direct_alignment(512).unwrap();
        assert_eq!(p512.align(Part::ExpertSlots), 512);
        assert!(ArenaPlan::new().with_direct_alignment(1000).is_none());
    }

    /// A 32-bit device addresses 4 GB: a plan above it is refused, and a plan whose sizes
    /// overflow u64 saturates instead of wrapping to a small number that would fit.
    #[test]
    fn a_plan_too_big_for_the_address_space_is_refused_never_wrapped() {
        let four_gb = u32::MAX as u64;
        let mut plan = ArenaPlan::new();
        // 2^20 positions x 2^10 f16 values x 2 (keys and values): 4 GB, one byte too many.
        plan.add::<u16>(Part::KvCache, 1 << 20, 1 << 10);
        plan.add::<u16>(Part::KvCache, 1 << 20, 1 << 10);
        assert_eq!(plan.total(), 1 << 32);
        let err = plan.fits_in(four_gb).unwrap_err();
        assert!(err
            .to_string()
            .contains("more than this device can address"));
        assert!(plan.fits_in(u64::MAX).is_ok());
        // A count whose bytes overflow u64 saturates and is refused on every target.
        let mut huge = ArenaPlan::new();
        huge.add::<f32>(Part::Activations, usize::MAX, usize::MAX);
        huge.add::<f32>(Part::Logits, 1, 1);
        assert_eq!(huge.total(), u64::MAX);
        let err = huge.total_usize().unwrap_err();
        assert!(err
            .to_string()
            .contains("more bytes than a 64-bit number holds"));
        let mut buf = page();
        assert!(Arena::new(&huge, &mut buf.0).is_err());
    }

    #[test]
    fn an_owned_region_hands_out_zeroed_buffers_and_reports_its_use() {
        let plan = plan();
        let mut region = Region::heap(plan.total() as usize).unwrap();
        assert_eq!(region.address() % 4096, 0);
        assert_eq!(region.kind(), "heap");
        let mut arena = region.arena(&plan).unwrap();
        let a = arena.take::<f32>(Part::Activations, 3, 5).unwrap();
        assert!(a.iter().all(|&v| v == 0.0));
        let t = arena
            .take_filled::<f32>(Part::Scratch, 1, 32, -1.0)
            .unwrap();
        assert!(t.iter().all(|&v| v == -1.0));
        let usage = arena.usage(region_kind(), 448);
        assert_eq!(usage.used(Part::Activations), 64);
        assert_eq!(usage.used(Part::Scratch), 128);
        assert_eq!(usage.high_water(), 192);
        let shown = usage.to_string();
        assert!(shown.contains("planned"), "{shown}");
        assert!(shown.contains("kv cache"), "{shown}");
    }

    fn region_kind() -> &'static str {
        "heap"
    }

    #[test]
    fn a_static_region_is_not_assumed_zero() {
        static mut BUF: [MaybeUninit<u8>; 256] = [MaybeUninit::new(0x55); 256];
        // SAFETY: the only reference to BUF in this test binary.
        let buf: &'static mut [MaybeUninit<u8>; 256] =
            unsafe { &mut *core::ptr::addr_of_mut!(BUF) };
        let offset = buf.as_ptr().align_offset(64);
        let mut region = Region::from_static(&mut buf[offset..offset + 128]);
        let mut plan = ArenaPlan::new();
        plan.add::<u8>(Part::Scratch, 1, 100);
        let mut arena = region.arena(&plan).unwrap();
        let s = arena.take::<u8>(Part::Scratch, 1, 100).unwrap();
        assert!(s.iter().all(|&b| b == 0));
    }
}
