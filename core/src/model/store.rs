//! Where the model gets its weights: the one seam between the forward pass and the place a
//! weight lives (see DESIGN.md, "Where weights live").
//!
//! The forward pass names a weight by a [`WeightKey`] (a tensor, or one expert of a 3-D expert
//! tensor), asks the store for it just before its matvec ([`WeightStore::get`]) and gets a
//! [`Weight`]: a guard that derefs to the bytes and releases them when dropped, so a store that
//! streams from flash knows the moment a zone or a slot may be reused. Before that it may say
//! what it will need next ([`WeightStore::prefetch`]); embedding rows are read by row
//! ([`WeightStore::read_rows`]), never by fetching the whole table.
//!
//! Stores here:
//! - [`ResidentStore`]: everything in place in the mapped file (plus repacked copies);
//! - [`PreadStore`]: nothing mapped; every weight is read with pread into one bounded scratch
//!   buffer just before its matvec (slow; it proves the seam, and opens a file bigger than the
//!   address space);
//! - [`RecordingStore`]: wraps another and records every call, for tests that check that every
//!   get is released and that each decoded token asks in the same order.

use super::error::ModelError;
use crate::gguf::{Gguf, TensorInfo};
use crate::platform::{IoError, ReadAt};
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::fmt;
use core::ops::{Deref, Range};

/// A tensor's index in the GGUF tensor table.
pub type TensorId = usize;

/// What the forward pass asks a store for: a whole tensor, or one expert's slice of a 3-D
/// expert tensor (ggml dims `[n_cols, n_rows, n_expert]`; expert `e` is the `e`-th of
/// `n_expert` equal slices, as ggml's `mul_mat_id` reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WeightKey {
    pub tensor: TensorId,
    pub expert: Option<u16>,
}

impl WeightKey {
    /// The whole tensor `id`.
    pub const fn tensor(id: TensorId) -> WeightKey {
        WeightKey {
            tensor: id,
            expert: None,
        }
    }

    /// Expert `e` of the expert tensor `id`.
    pub const fn expert(id: TensorId, e: u16) -> WeightKey {
        WeightKey {
            tensor: id,
            expert: Some(e),
        }
    }
}

/// Why a store could not hand over a weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// The read failed or came back short (a file truncated after load, EIO): the OS error.
    Io(IoError),
    /// The key names no tensor of the file.
    NoSuchTensor { n_tensors: usize },
    /// The key names an expert of a tensor that has none, or past its last one.
    NoSuchExpert { n_expert: u64 },
    /// Rows asked for past the tensor's last row.
    RowsOutOfRange {
        first_row: usize,
        n_rows: usize,
        rows: u64,
    },
    /// The caller's buffer does not have the size the rows need.
    BadBuffer { expected: usize, found: usize },
    /// The weight is larger than the store's scratch buffer.
    TooLarge { scratch: usize },
    /// The store holds one weight at a time and another one is still held.
    Busy { held: WeightKey },
    /// What was read differs from the file (the streaming store's verify mode): a checksum of
    /// the weight as read at load against the one of the bytes handed out.
    Corrupt { expected: u64, found: u64 },
    /// The weight lies (partly) past the mapped prefix of the file
    /// ([`ResidentStore::over_prefix`]): an expert of an experts-last file, which must be read
    /// through a store that pages experts from flash.
    NotMapped { mapped: u64 },
}

/// A failed `get` or `read_rows`: which tensor (and expert), where in the file, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError {
    pub tensor: String,
    pub expert: Option<u16>,
    /// Absolute file offset and length of what was asked for (0 when unknown).
    pub offset: u64,
    pub len: u64,
    pub kind: StoreErrorKind,
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "weights of '{}'", self.tensor)?;
        if let Some(e) = self.expert {
            write!(f, " (expert {e})")?;
        }
        write!(f, " at offset {} ({} bytes): ", self.offset, self.len)?;
        match &self.kind {
            StoreErrorKind::Io(e) => write!(
                f,
                "{e}; the model file changed or the storage failed while running: check it \
                 (sha256) and start again"
            ),
            StoreErrorKind::NoSuchTensor { n_tensors } => {
                write!(f, "no such tensor (the file has {n_tensors})")
            }
            StoreErrorKind::NoSuchExpert { n_expert } => write!(
                f,
                "no such expert: the tensor has {n_expert} (1 means it is not an expert tensor)"
            ),
            StoreErrorKind::RowsOutOfRange {
                first_row,
                n_rows,
                rows,
            } => write!(
                f,
                "rows {first_row}..{} asked for, the tensor has {rows}",
                first_row + n_rows
            ),
            StoreErrorKind::BadBuffer { expected, found } => {
                write!(
                    f,
                    "the buffer holds {found} bytes, the rows need {expected}"
                )
            }
            StoreErrorKind::TooLarge { scratch } => write!(
                f,
                "larger than the {scratch}-byte scratch buffer the store was sized for"
            ),
            StoreErrorKind::Busy { held } => write!(
                f,
                "the store holds one weight at a time and tensor #{} is still held (a guard \
                 was not dropped)",
                held.tensor
            ),
            StoreErrorKind::Corrupt { expected, found } => write!(
                f,
                "the bytes read (checksum {found:016x}) differ from the file's ({expected:016x}): \
                 a read went to the wrong place or was overwritten; please report it with \
                 SMOLRUN_STREAM_VERIFY=1's output"
            ),
            StoreErrorKind::NotMapped { mapped } => write!(
                f,
                "not in the mapped part of the file (its first {mapped} bytes, the non-expert \
                 weights of an experts-last file): expert weights must be read by a store that \
                 pages them from flash, not by the resident store alone"
            ),
        }
    }
}

/// A weight handed out by a store: derefs to its bytes, released when dropped.
pub struct Weight<'s> {
    bytes: &'s [u8],
    key: WeightKey,
    store: &'s dyn WeightStore,
}

impl<'s> Weight<'s> {
    /// For store implementations: `bytes` of `key`, released through `store` on drop.
    pub fn new(store: &'s dyn WeightStore, key: WeightKey, bytes: &'s [u8]) -> Weight<'s> {
        Weight { bytes, key, store }
    }
}

impl Deref for Weight<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes
    }
}

impl Drop for Weight<'_> {
    fn drop(&mut self) {
        self.store.release(self.key);
    }
}

/// Where the forward pass gets its weights. Shared by the compute threads (`Sync`); every
/// method takes `&self`.
pub trait WeightStore: Sync {
    /// The bytes of `key` as stored in the file, held until the guard drops.
    fn get(&self, key: WeightKey) -> Result<Weight<'_>, StoreError>;

    /// The copy of `key` repacked into `layout` (a `RepackedKernel::layout`), if this store
    /// holds one; `None`, and the model runs the kernel on the file layout from `get`.
    fn get_repacked(&self, key: WeightKey, layout: &str) -> Option<Weight<'_>> {
        let _ = (key, layout);
        None
    }

    /// Copies rows `first_row..first_row + n_rows` of `key` into `out` (exactly their bytes):
    /// an embedding row, or a small vector (a norm) at load. Nothing stays held.
    fn read_rows(
        &self,
        key: WeightKey,
        first_row: usize,
        n_rows: usize,
        out: &mut [u8],
    ) -> Result<(), StoreError>;

    /// A hint: the model will ask for `keys` next, in this order. A store that reads ahead
    /// starts on them; the others ignore it. Never needed for correctness.
    fn prefetch(&self, keys: &[WeightKey]) {
        let _ = keys;
    }

    /// A guess: the model may ask for `keys` soon (experts a later layer's router picks on this
    /// hidden state: pre-gated prefetch). A store that pages experts loads them if it has room,
    /// after everything it was asked for for sure; a wrong guess costs flash time, never
    /// correctness.
    fn predict(&self, keys: &[WeightKey]) {
        let _ = keys;
    }

    /// Which experts of the expert tensor `tensor` are in RAM now (`held[e]`), for routing that
    /// favours them (`--moe-cache-bias`). Returns false, leaving `held` as it was, when the
    /// store holds every expert alike (nothing to favour).
    fn experts_held(&self, tensor: TensorId, held: &mut [bool]) -> bool {
        let _ = (tensor, held);
        false
    }

    /// The guard of `key` was dropped: the model is done with it for this token. Called by
    /// [`Weight`]'s drop only.
    fn release(&self, key: WeightKey);

    /// Bytes this store keeps in RAM for weights while running (its scratch buffers and
    /// anything it copied), not counting pages of a mapped file: what the memory guard adds.
    fn held_bytes(&self) -> u64 {
        0
    }

    /// What this store reads from flash while running, if it streams weights (`None` for a
    /// store that holds every weight in RAM or in a mapping): what `--draft auto` and the
    /// benchmarks' flash figures are based on.
    fn stream_stats(&self) -> Option<StreamStats> {
        None
    }

    /// The expert pager's counts (`None` when experts are not paged).
    fn moe_stats(&self) -> Option<super::pager::MoeStats> {
        None
    }
}

/// The flash traffic of a streaming store, counted since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StreamStats {
    /// Bytes of weights held in RAM for the whole run (the resident set).
    pub resident_bytes: u64,
    /// Bytes one pass over the weights (a token, or a batch) reads from flash.
    pub streamed_bytes_per_pass: u64,
    /// Bytes read from flash while running (not counting the load).
    pub bytes_read: u64,
    /// Passes over the weights begun so far.
    pub passes: u64,
    /// Times the forward pass asked for a weight out of the learned order (the ring was
    /// restarted there).
    pub misses: u64,
}

/// The extent of every tensor of a file, from its header: what a store needs to find a key's
/// bytes and to name it in an error.
#[derive(Debug, Clone)]
pub struct TensorTable {
    tensors: Vec<TensorExtent>,
}

#[derive(Debug, Clone)]
struct TensorExtent {
    name: String,
    offset: u64,
    n_bytes: u64,
    /// Experts in the tensor (`dims[2]` of a 3-D tensor), 1 otherwise.
    n_expert: u64,
    /// Rows of one expert (or of the tensor) and their bytes.
    rows: u64,
    row_bytes: u64,
}

impl TensorTable {
    pub fn new(gguf: &Gguf) -> TensorTable {
        TensorTable {
            tensors: gguf.tensors.iter().map(TensorExtent::of).collect(),
        }
    }

    /// Bytes of the largest weight a `get` can ask for: a whole tensor, or one expert of an
    /// expert tensor (what a store with one scratch buffer must hold).
    pub fn largest_weight(&self) -> u64 {
        let one = |t: &TensorExtent| t.n_bytes / t.n_expert.max(1);
        self.tensors.iter().map(one).max().unwrap_or(0)
    }

    pub(crate) fn error(
        &self,
        key: WeightKey,
        extent: Range<u64>,
        kind: StoreErrorKind,
    ) -> StoreError {
        StoreError {
            tensor: match self.tensors.get(key.tensor) {
                Some(t) => t.name.clone(),
                None => alloc::format!("#{}", key.tensor),
            },
            expert: key.expert,
            offset: extent.start,
            len: extent.end - extent.start,
            kind,
        }
    }

    /// The absolute file range of `key`.
    pub fn extent(&self, key: WeightKey) -> Result<Range<u64>, StoreError> {
        let t = self.tensors.get(key.tensor).ok_or_else(|| {
            self.error(
                key,
                0..0,
                StoreErrorKind::NoSuchTensor {
                    n_tensors: self.tensors.len(),
                },
            )
        })?;
        let whole = t.offset..t.offset + t.n_bytes;
        match key.expert {
            None => Ok(whole),
            Some(e) if t.n_expert > 1 && (e as u64) < t.n_expert => {
                let each = t.n_bytes / t.n_expert;
                let start = t.offset + e as u64 * each;
                Ok(start..start + each)
            }
            Some(_) => Err(self.error(
                key,
                whole,
                StoreErrorKind::NoSuchExpert {
                    n_expert: t.n_expert,
                },
            )),
        }
    }

    /// The absolute file range of rows `first_row..first_row + n_rows` of `key`, checked
    /// against the tensor and against `out_len`, the caller's buffer.
    pub fn rows_extent(
        &self,
        key: WeightKey,
        first_row: usize,
        n_rows: usize,
        out_len: usize,
    ) -> Result<Range<u64>, StoreError> {
        let whole = self.extent(key)?;
        let t = &self.tensors[key.tensor];
        let end_row = first_row as u64 + n_rows as u64;
        if end_row > t.rows {
            let kind = StoreErrorKind::RowsOutOfRange {
                first_row,
                n_rows,
                rows: t.rows,
            };
            return Err(self.error(key, whole, kind));
        }
        let start = whole.start + first_row as u64 * t.row_bytes;
        let len = n_rows as u64 * t.row_bytes;
        if len != out_len as u64 {
            let kind = StoreErrorKind::BadBuffer {
                expected: len as usize,
                found: out_len,
            };
            return Err(self.error(key, start..start + len, kind));
        }
        Ok(start..start + len)
    }
}

impl TensorExtent {
    fn of(t: &TensorInfo) -> TensorExtent {
        let n_expert = if t.n_dims == 3 { t.dims[2].max(1) } else { 1 };
        let row_bytes = t.row_bytes() as u64;
        let rows = (t.n_bytes / n_expert).checked_div(row_bytes).unwrap_or(0);
        TensorExtent {
            name: t.name.into(),
            offset: t.offset,
            n_bytes: t.n_bytes,
            n_expert,
            rows,
            row_bytes,
        }
    }
}

/// Repacked copies of some tensors, all inside one buffer: the mapped repack cache, or memory
/// the platform filled at load. Looked up by tensor id in O(1) for every matvec.
pub struct RepackedWeights {
    bytes: Box<dyn AsRef<[u8]> + Send + Sync>,
    slots: Vec<Option<RepackedSlot>>,
}

struct RepackedSlot {
    layout: &'static str,
    range: Range<usize>,
}

impl RepackedWeights {
    /// An empty table over `bytes` for a file of `n_tensors` tensors.
    pub fn new(bytes: Box<dyn AsRef<[u8]> + Send + Sync>, n_tensors: usize) -> RepackedWeights {
        RepackedWeights {
            bytes,
            slots: (0..n_tensors).map(|_| None).collect(),
        }
    }

    /// Tensor `id`'s copy in `layout` is `bytes[range]`.
    pub fn insert(
        &mut self,
        id: TensorId,
        layout: &'static str,
        range: Range<usize>,
    ) -> Result<(), ModelError> {
        let n_bytes = (*self.bytes).as_ref().len();
        let n_tensors = self.slots.len();
        let reason = if range.start > range.end || range.end > n_bytes {
            Some(alloc::format!(
                "repacked bytes {}..{} lie outside the {n_bytes}-byte buffer",
                range.start,
                range.end
            ))
        } else if id >= n_tensors {
            Some(alloc::format!("no such tensor (the file has {n_tensors})"))
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(ModelError::Store {
                tensor: alloc::format!("#{id}"),
                reason,
            });
        }
        self.slots[id] = Some(RepackedSlot { layout, range });
        Ok(())
    }

    /// The copy of tensor `id` in `layout`, if there is one.
    pub fn get(&self, id: TensorId, layout: &str) -> Option<&[u8]> {
        let slot = self.slots.get(id)?.as_ref()?;
        if slot.layout != layout {
            return None;
        }
        (*self.bytes).as_ref().get(slot.range.clone())
    }

    /// How many tensors have a repacked copy.
    pub fn count(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Bytes of all the repacked copies together.
    pub fn total_bytes(&self) -> usize {
        self.slots.iter().flatten().map(|s| s.range.len()).sum()
    }
}

/// Every tensor resident: read in place from the (normally memory-mapped) file, and, for the
/// matrices in `repacked`, from their repacked copies.
pub struct ResidentStore<'a> {
    file: &'a [u8],
    table: TensorTable,
    repacked: Option<RepackedWeights>,
}

impl<'a> ResidentStore<'a> {
    /// The tensors of `gguf`, parsed from the whole file (`Gguf::parse`).
    pub fn new(gguf: &Gguf<'a>) -> Self {
        ResidentStore {
            file: gguf.bytes(),
            table: TensorTable::new(gguf),
            repacked: None,
        }
    }

    /// The tensors of `gguf` (parsed from the header alone, or from the whole file) in `file`,
    /// the whole file's bytes. A `file` shorter than the header says is refused.
    pub fn over(file: &'a [u8], gguf: &Gguf) -> Result<Self, ModelError> {
        if (file.len() as u64) < gguf.file_len() {
            return Err(ModelError::Store {
                tensor: "(all)".into(),
                reason: alloc::format!(
                    "the mapped file has {} bytes, its header describes {}",
                    file.len(),
                    gguf.file_len()
                ),
            });
        }
        Ok(ResidentStore {
            file,
            table: TensorTable::new(gguf),
            repacked: None,
        })
    }

    /// The tensors of `gguf` (parsed from the header, `Gguf::parse_header`) over `prefix`, only
    /// the first bytes of the file: the non-expert part of an experts-last file (see
    /// [`crate::gguf::expert_layout`]), mapped where the whole file does not fit in the address
    /// space. Every non-expert tensor must lie inside `prefix` (checked here, so the model loads
    /// or is refused up front); a `get` of anything past it (an expert) is a
    /// [`StoreErrorKind::NotMapped`] error, never an out-of-bounds slice. A file that carries
    /// `smolrun.expert_data_offset` must also agree with it.
    pub fn over_prefix(prefix: &'a [u8], gguf: &Gguf) -> Result<Self, ModelError> {
        let mapped = prefix.len() as u64;
        let layout_error = |tensor: &str, reason: String| ModelError::Store {
            tensor: tensor.into(),
            reason,
        };
        crate::gguf::expert_data_offset(gguf)
            .map_err(|e| layout_error("(all)", alloc::format!("{e}")))?;
        for t in gguf
            .tensors
            .iter()
            .filter(|t| !crate::gguf::is_expert_tensor(t))
        {
            let end = t.offset + t.n_bytes;
            if end > mapped {
                return Err(layout_error(
                    t.name,
                    alloc::format!(
                        "the non-expert tensor ends at byte {end}, past the {mapped} mapped bytes \
                         of the file; map at least up to smolrun.expert_data_offset of a file \
                         that `smolrun gguf experts-last` wrote (run it on this one to write \
                         such a file)"
                    ),
                ));
            }
        }
        Ok(ResidentStore {
            file: prefix,
            table: TensorTable::new(gguf),
            repacked: None,
        })
    }

    /// Adds repacked copies that the model's matvecs use instead of the file layout (the
    /// original pages of those tensors are then never touched).
    pub fn with_repacked(mut self, repacked: RepackedWeights) -> Self {
        self.repacked = Some(repacked);
        self
    }

    pub fn repacked(&self) -> Option<&RepackedWeights> {
        self.repacked.as_ref()
    }

    fn bytes(&self, key: WeightKey) -> Result<&'a [u8], StoreError> {
        let r = self.table.extent(key)?;
        self.mapped(key, r)
    }

    /// The bytes of `r`, a range of the file: parsing checked every extent against the file
    /// length and `new` / `over` the mapping's, but `over_prefix` maps only part of the file.
    fn mapped(&self, key: WeightKey, r: Range<u64>) -> Result<&'a [u8], StoreError> {
        let bytes = usize::try_from(r.start)
            .ok()
            .zip(usize::try_from(r.end).ok())
            .and_then(|(start, end)| self.file.get(start..end));
        bytes.ok_or_else(|| {
            let kind = StoreErrorKind::NotMapped {
                mapped: self.file.len() as u64,
            };
            self.table.error(key, r, kind)
        })
    }
}

impl WeightStore for ResidentStore<'_> {
    fn get(&self, key: WeightKey) -> Result<Weight<'_>, StoreError> {
        Ok(Weight::new(self, key, self.bytes(key)?))
    }

    fn get_repacked(&self, key: WeightKey, layout: &str) -> Option<Weight<'_>> {
        if key.expert.is_some() {
            return None;
        }
        let bytes = self.repacked.as_ref()?.get(key.tensor, layout)?;
        Some(Weight::new(self, key, bytes))
    }

    fn read_rows(
        &self,
        key: WeightKey,
        first_row: usize,
        n_rows: usize,
        out: &mut [u8],
    ) -> Result<(), StoreError> {
        let r = self.table.rows_extent(key, first_row, n_rows, out.len())?;
        out.copy_from_slice(self.mapped(key, r)?);
        Ok(())
    }

    fn release(&self, _key: WeightKey) {}
}

/// Nothing mapped: every weight is read with pread into one scratch buffer, sized once for the
/// largest weight, just before its matvec, and given up on release. One weight is held at a
/// time (the forward pass never needs two); a second `get` before the release is an error,
/// not a wait.
pub struct PreadStore<R: ReadAt> {
    reader: R,
    table: TensorTable,
    /// 64-byte aligned bytes, written only by the `get` that set `held`.
    scratch: UnsafeCell<Vec<u8>>,
    scratch_start: usize,
    scratch_len: usize,
    /// The weight whose guard is alive, if any: `get` takes it from `None`, `release` clears it.
    held: spin::Mutex<Option<WeightKey>>,
}

// SAFETY: `scratch` is written only inside `get`, after `held` was set from `None` to `Some`
// by that call, and read only through the `Weight` that call returns, which releases `held` on
// drop: no write overlaps a read, and no two writes overlap.
unsafe impl<R: ReadAt + Sync> Sync for PreadStore<R> {}

/// Alignment of the scratch buffer: a cache line, more than any kernel's loads need.
const SCRATCH_ALIGN: usize = 64;

impl<R: ReadAt> PreadStore<R> {
    /// A store over `reader` (the model file) for the tensors of `gguf`, with a scratch buffer
    /// of `scratch_bytes` (at least [`TensorTable::largest_weight`] to run every weight).
    pub fn new(reader: R, gguf: &Gguf, scratch_bytes: usize) -> Result<Self, ModelError> {
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
        let mut scratch = alloc::vec![0u8; scratch_bytes + SCRATCH_ALIGN];
        let scratch_start = scratch.as_mut_ptr().align_offset(SCRATCH_ALIGN);
        Ok(PreadStore {
            reader,
            table: TensorTable::new(gguf),
            scratch: UnsafeCell::new(scratch),
            scratch_start,
            scratch_len: scratch_bytes,
            held: spin::Mutex::new(None),
        })
    }

    fn io_error(&self, key: WeightKey, r: Range<u64>, e: IoError) -> StoreError {
        self.table.error(key, r, StoreErrorKind::Io(e))
    }
}

impl<R: ReadAt + Sync> WeightStore for PreadStore<R> {
    fn get(&self, key: WeightKey) -> Result<Weight<'_>, StoreError> {
        let r = self.table.extent(key)?;
        let len = (r.end - r.start) as usize;
        if len > self.scratch_len {
            let kind = StoreErrorKind::TooLarge {
                scratch: self.scratch_len,
            };
            return Err(self.table.error(key, r, kind));
        }
        {
            let mut held = self.held.lock();
            if let Some(held) = *held {
                return Err(self.table.error(key, r, StoreErrorKind::Busy { held }));
            }
            *held = Some(key);
        }
        // SAFETY: `held` was `None` and is now ours: no Weight over the scratch is alive, and no
        // other `get` writes it until this one's Weight is dropped (see the Sync impl).
        let scratch = unsafe { &mut *self.scratch.get() };
        let buf = &mut scratch[self.scratch_start..self.scratch_start + len];
        if let Err(e) = self.reader.read_at(r.start, buf) {
            self.release(key);
            return Err(self.io_error(key, r, e));
        }
        let bytes = &buf[..];
        Ok(Weight::new(self, key, bytes))
    }

    fn read_rows(
        &self,
        key: WeightKey,
        first_row: usize,
        n_rows: usize,
        out: &mut [u8],
    ) -> Result<(), StoreError> {
        let r = self.table.rows_extent(key, first_row, n_rows, out.len())?;
        self.reader
            .read_at(r.start, out)
            .map_err(|e| self.io_error(key, r, e))
    }

    fn release(&self, _key: WeightKey) {
        *self.held.lock() = None;
    }

    fn held_bytes(&self) -> u64 {
        (self.scratch_len + SCRATCH_ALIGN) as u64
    }
}

/// One call a [`RecordingStore`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCall {
    Get(WeightKey),
    GetRepacked(WeightKey),
    ReadRows(WeightKey),
    Prefetch(usize),
    Release(WeightKey),
}

/// Wraps a store and records every call (into a buffer reserved up front: recording a token
/// allocates nothing until `capacity` calls were recorded). For tests: that every get is
/// released, that each decoded token asks for its weights in the same order (the order a
/// streaming store learns), that hints come before their gets.
pub struct RecordingStore<S> {
    inner: S,
    calls: spin::Mutex<Vec<StoreCall>>,
}

impl<S: WeightStore> RecordingStore<S> {
    pub fn new(inner: S, capacity: usize) -> Self {
        RecordingStore {
            inner,
            calls: spin::Mutex::new(Vec::with_capacity(capacity)),
        }
    }

    /// The calls so far, and forgets them.
    pub fn take(&self) -> Vec<StoreCall> {
        let mut calls = self.calls.lock();
        let taken = calls.clone();
        calls.clear();
        taken
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn record(&self, call: StoreCall) {
        let mut calls = self.calls.lock();
        if calls.len() < calls.capacity() {
            calls.push(call);
        }
    }
}

impl<S: WeightStore> WeightStore for RecordingStore<S> {
    fn get(&self, key: WeightKey) -> Result<Weight<'_>, StoreError> {
        self.record(StoreCall::Get(key));
        let w = self.inner.get(key)?;
        // The inner guard must not release into the inner store itself: this store's guard
        // does, so the release is recorded too.
        let bytes: *const [u8] = &*w;
        core::mem::forget(w);
        // SAFETY: the inner store keeps the bytes until `release(key)`, which only this
        // guard's drop calls (through `self.release`).
        Ok(Weight::new(self, key, unsafe { &*bytes }))
    }

    fn get_repacked(&self, key: WeightKey, layout: &str) -> Option<Weight<'_>> {
        let w = self.inner.get_repacked(key, layout)?;
        self.record(StoreCall::GetRepacked(key));
        let bytes: *const [u8] = &*w;
        core::mem::forget(w);
        // SAFETY: as in `get`.
        Some(Weight::new(self, key, unsafe { &*bytes }))
    }

    fn read_rows(
        &self,
        key: WeightKey,
        first_row: usize,
        n_rows: usize,
        out: &mut [u8],
    ) -> Result<(), StoreError> {
        self.record(StoreCall::ReadRows(key));
        self.inner.read_rows(key, first_row, n_rows, out)
    }

    fn prefetch(&self, keys: &[WeightKey]) {
        self.record(StoreCall::Prefetch(keys.len()));
        self.inner.prefetch(keys)
    }

    fn predict(&self, keys: &[WeightKey]) {
        self.inner.predict(keys)
    }

    fn experts_held(&self, tensor: TensorId, held: &mut [bool]) -> bool {
        self.inner.experts_held(tensor, held)
    }

    fn moe_stats(&self) -> Option<super::pager::MoeStats> {
        self.inner.moe_stats()
    }

    fn stream_stats(&self) -> Option<StreamStats> {
        self.inner.stream_stats()
    }

    fn release(&self, key: WeightKey) {
        self.record(StoreCall::Release(key));
        self.inner.release(key)
    }

    fn held_bytes(&self) -> u64 {
        self.inner.held_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{GgufWriter, EXPERT_DATA_OFFSET_KEY};
    use crate::quant::GgmlType;
    use alloc::string::ToString;

    /// An experts-last file: two non-expert tensors, then one expert tensor of 4 experts, with
    /// every byte of the data section set to its index (mod 251) so slices are recognisable.
    fn experts_last_file() -> Vec<u8> {
        let build = |offset: u64| {
            let mut w = GgufWriter::new();
            w.add("general.architecture", "test").unwrap();
            w.add(EXPERT_DATA_OFFSET_KEY, offset).unwrap();
            let dims: [&[u64]; 3] = [&[32, 3], &[32], &[32, 2, 4]];
            for (name, d) in ["a", "norm", "exps"].iter().zip(dims) {
                w.add_tensor(name, GgmlType::F32, d).unwrap();
            }
            w
        };
        let probe = build(0);
        let offset = probe.header().len() as u64 + probe.tensor_offset(2);
        let w = build(offset);
        let data: Vec<Vec<u8>> = (0..3)
            .map(|i| {
                (0..w.tensor_bytes(i))
                    .map(|b| ((b + 7 * i as u64) % 251) as u8)
                    .collect()
            })
            .collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        w.to_bytes(&refs).unwrap()
    }

    #[test]
    fn a_prefix_store_hands_out_the_resident_part_and_refuses_experts() {
        let file = experts_last_file();
        let whole = Gguf::parse(&file).unwrap();
        let offset = crate::gguf::expert_data_offset(&whole).unwrap().unwrap();
        let prefix = &file[..offset as usize];
        let g = Gguf::parse_header(prefix, file.len() as u64).unwrap();
        let store = ResidentStore::over_prefix(prefix, &g).unwrap();
        for (id, name) in [(0, "a"), (1, "norm")] {
            let t = whole.tensor(name).unwrap();
            let w = store.get(WeightKey::tensor(id)).unwrap();
            assert_eq!(&*w, whole.tensor_data(t), "{name}");
        }
        let mut row = [0u8; 128];
        store
            .read_rows(WeightKey::tensor(0), 2, 1, &mut row)
            .unwrap();
        assert_eq!(&row[..], &whole.tensor_data(&whole.tensors[0])[256..384]);

        for key in [
            WeightKey::expert(2, 0),
            WeightKey::expert(2, 3),
            WeightKey::tensor(2),
        ] {
            let err = store.get(key).err().expect("an expert past the prefix");
            assert_eq!(err.kind, StoreErrorKind::NotMapped { mapped: offset });
            assert_eq!(err.tensor, "exps");
            assert!(err.to_string().contains("not in the mapped part"), "{err}");
        }
        let err = store
            .read_rows(WeightKey::expert(2, 1), 0, 1, &mut row)
            .unwrap_err();
        assert_eq!(err.kind, StoreErrorKind::NotMapped { mapped: offset });
    }

    #[test]
    fn a_prefix_that_cuts_a_resident_tensor_is_refused_up_front() {
        let file = experts_last_file();
        let whole = Gguf::parse(&file).unwrap();
        let norm = whole.tensor("norm").unwrap();
        let short = &file[..(norm.offset + norm.n_bytes - 1) as usize];
        let g = Gguf::parse_header(short, file.len() as u64).unwrap();
        let err = ResidentStore::over_prefix(short, &g)
            .err()
            .expect("refused");
        match err {
            ModelError::Store { tensor, reason } => {
                assert_eq!(tensor, "norm");
                assert!(reason.contains("experts-last"), "{reason}");
            }
            e => panic!("{e:?}"),
        }
        // The whole file is a prefix too: every weight is there.
        let store = ResidentStore::over_prefix(&file, &whole).unwrap();
        assert!(store.get(WeightKey::expert(2, 3)).is_ok());
    }
}
