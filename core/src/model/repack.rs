//! Weights repacked for kernels that want another layout, and the repack cache that keeps them.
//!
//! Where this CPU's kernel set has a repacked kernel for a matrix's type
//! ([`crate::kernels::RepackedKernel`], e.g. Q4_K rows interleaved by 4 for `sdot`), the rows
//! are repacked once at load. The copies go into one buffer laid out as a cache file, so the
//! platform can write it next to the model and map it on later starts instead of repacking
//! (and without touching the original tensors' pages again). This module is the pure part:
//! which matrices to repack ([`RepackPlan`]), the file's layout, the key that says whether a
//! cache belongs to this model and kernel set, and validation. The platform does the I/O.
//!
//! File layout (all integers little-endian):
//!
//! | offset         | bytes | content                                                     |
//! |----------------|-------|-------------------------------------------------------------|
//! | 0              | 8     | magic `SMOLRPK\0`                                           |
//! | 8              | 4     | format version ([`CACHE_FORMAT_VERSION`])                   |
//! | 12             | 4     | number of entries                                           |
//! | 16             | 8     | length of the whole file (a truncated file is caught here)  |
//! | 24             | 8     | offset of the first entry's data (page-aligned)             |
//! | 32             | 8     | model file length      \                                    |
//! | 40             | 8     | model file mtime (ns)   > the model's key ([`CacheKey`])    |
//! | 48             | 8     | model fingerprint      /                                    |
//! | 56             | 32    | kernel set name, zero-padded                                |
//! | 88             | 8     | checksum of bytes 0..(end of the table), this field as 0    |
//! | 96             | 32    | zero                                                        |
//! | 128 + 80 i     | 80    | entry i: tensor id, rows, columns, data offset, data length,|
//! |                |       | data checksum, sampled checksum (7 x u64), layout name (16  |
//! |                |       | bytes, padded), 8 bytes zero                                |
//! | data offset    | len   | entry i's repacked rows; every entry starts on a 4 KiB page |
//!
//! The key: a full hash of a multi-GB model would cost a second start as much as the repack it
//! saves, so the model is identified by its length, its mtime and a fingerprint that hashes
//! the whole GGUF header (metadata and tensor table: names, types, shapes, offsets) and 16
//! samples of 4 KiB spread over the tensor data. A model replaced by another file or rewritten
//! in place changes the mtime; one copied with its mtime kept (`cp -p`) still differs in the
//! header or the samples unless it is the same model. The kernel set's name and each entry's
//! layout name pin the kernels; the format version pins this layout.
//!
//! Integrity: the cache is written under a temporary name and renamed into place, so a half
//! written cache never carries the final name. Each entry has two checksums: one of all its
//! bytes, and a sampled one of four 4 KiB windows (first, last and two between; the whole
//! entry when it is smaller). A start checks the sampled ones ([`Verify::Sampled`]): reading
//! every byte would make a start from cold flash as slow as reading the model it replaces
//! (measured: 1.35 s of a 2.5 s first start for Gemma's 226 MB cache at 278 MB/s), and the
//! forward pass reads those pages anyway. [`Verify::Full`] (`SMOLRUN_VERIFY_CACHE=1`) checks
//! every byte, for a cache on a medium one does not trust.

use super::store::{RepackedWeights, TensorId, WeightKey, WeightStore};
use super::{Matrix, Model, ModelError};
use crate::kernels::RepackedKernel;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// Bumped whenever the header, the table or a layout's bytes change.
pub const CACHE_FORMAT_VERSION: u32 = 2;
pub const CACHE_MAGIC: [u8; 8] = *b"SMOLRPK\0";
/// Entries start on page boundaries, so each tensor's copy is mapped page-aligned.
pub const CACHE_PAGE: usize = 4096;
const HEADER_BYTES: usize = 128;
const ENTRY_BYTES: usize = 80;
const ENTRY_LAYOUT_AT: usize = 56;
const SAMPLE_WINDOWS: usize = 4;
const SAMPLE_WINDOW_BYTES: usize = 4096;
const KERNEL_SET_BYTES: usize = 32;
const LAYOUT_BYTES: usize = 16;
const CHECKSUM_AT: usize = 88;
const FINGERPRINT_SAMPLES: usize = 16;
const FINGERPRINT_SAMPLE_BYTES: usize = 4096;

/// What the cache must match: the model file (length, mtime, fingerprint) and the kernel set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey<'a> {
    pub model_len: u64,
    pub model_mtime_ns: u64,
    /// [`model_fingerprint`] of the model file.
    pub model_fingerprint: u64,
    /// `KernelSet::name()`.
    pub kernel_set: &'a str,
}

/// The two checksums of an entry's data: all bytes, and the sampled windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntrySums {
    pub full: u64,
    pub sampled: u64,
}

impl EntrySums {
    pub fn of(data: &[u8]) -> EntrySums {
        EntrySums {
            full: checksum64(data),
            sampled: sampled_checksum(data),
        }
    }
}

/// How much of each entry a start reads to check it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// The sampled windows (a few KiB per entry).
    Sampled,
    /// Every byte.
    Full,
}

/// One matrix to repack and where its copy goes in the cache.
#[derive(Debug, Clone)]
pub struct RepackEntry {
    pub id: TensorId,
    pub name: String,
    pub n_rows: usize,
    pub n_cols: usize,
    pub kernel: RepackedKernel,
    pub ty: crate::quant::GgmlType,
    /// Byte offset of the copy in the cache file.
    pub offset: usize,
    /// Bytes of the copy.
    pub len: usize,
    /// Bytes of the tensor in the model file.
    pub source_len: usize,
}

/// Which matrices of a model get repacked, in the order the forward pass uses them, and the
/// cache file's layout for them.
#[derive(Debug, Clone)]
pub struct RepackPlan {
    pub entries: Vec<RepackEntry>,
    /// Offset of the first entry's data (the header and table come before it).
    pub data_start: usize,
    /// Length of the whole cache file.
    pub file_len: usize,
}

impl RepackPlan {
    /// Every matrix whose kernel has a repacked layout. The embedding table is repacked only
    /// as the LM head of a tied model (the embedding lookup reads one row per token from the
    /// file, so it never needs a copy).
    pub fn new(model: &Model) -> Result<RepackPlan, ModelError> {
        let mut matrices: Vec<&Matrix> = Vec::new();
        for l in &model.layers {
            matrices.extend(l.matrices());
        }
        matrices.push(&model.output);
        let mut entries: Vec<RepackEntry> = Vec::new();
        for m in matrices {
            let Some(kernel) = m.kernel.repacked else {
                continue;
            };
            if entries.iter().any(|e| e.id == m.id) {
                continue;
            }
            let len = (kernel.bytes)(m.n_rows, m.n_cols).ok_or_else(|| ModelError::Store {
                tensor: m.name.clone(),
                reason: alloc::format!(
                    "{} rows of {} elements cannot be repacked as {}",
                    m.n_rows,
                    m.n_cols,
                    kernel.layout
                ),
            })?;
            entries.push(RepackEntry {
                id: m.id,
                name: m.name.clone(),
                n_rows: m.n_rows,
                n_cols: m.n_cols,
                kernel,
                ty: m.ty,
                offset: 0,
                len,
                source_len: m.n_rows * m.row_bytes,
            });
        }
        Ok(RepackPlan::from_entries(entries))
    }

    /// Lays out `entries` (their `offset` is overwritten) after the header and table.
    pub fn from_entries(mut entries: Vec<RepackEntry>) -> RepackPlan {
        let data_start = align_page(HEADER_BYTES + ENTRY_BYTES * entries.len());
        let mut at = data_start;
        for e in &mut entries {
            e.offset = at;
            at = align_page(at + e.len);
        }
        RepackPlan {
            entries,
            data_start,
            file_len: at,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of the repacked copies (the file less its header and padding).
    pub fn repacked_bytes(&self) -> usize {
        self.entries.iter().map(|e| e.len).sum()
    }

    /// Repacks entry `i` from the model file (read through `store`) into `cache` (the whole
    /// cache buffer, `file_len` long) and returns the copy's checksums, for
    /// [`RepackPlan::write_header`].
    pub fn repack_entry(
        &self,
        store: &dyn WeightStore,
        i: usize,
        cache: &mut [u8],
    ) -> Result<EntrySums, ModelError> {
        let e = &self.entries[i];
        let fail = |reason: String| ModelError::Store {
            tensor: e.name.clone(),
            reason,
        };
        let src = store.get(WeightKey::tensor(e.id))?;
        if src.len() != e.source_len || cache.len() != self.file_len {
            return Err(fail(alloc::format!(
                "cannot repack: {} source bytes (expected {}) into a {}-byte cache (expected {})",
                src.len(),
                e.source_len,
                cache.len(),
                self.file_len
            )));
        }
        let dst = &mut cache[e.offset..e.offset + e.len];
        (e.kernel.repack)(&src, e.n_rows, e.n_cols, dst).ok_or_else(|| {
            fail(alloc::format!(
                "{} rows of {} elements did not repack as {}",
                e.n_rows,
                e.n_cols,
                e.kernel.layout
            ))
        })?;
        Ok(EntrySums::of(dst))
    }

    /// Writes the header and the table into `cache[..data_start]`, with the data checksums
    /// `repack_entry` returned (one per entry, in order).
    pub fn write_header(
        &self,
        key: &CacheKey,
        checksums: &[EntrySums],
        cache: &mut [u8],
    ) -> Result<(), CacheError> {
        if checksums.len() != self.entries.len() || cache.len() < self.data_start {
            return Err(CacheError::PlanMismatch {
                what: "checksums or header space for the entries".into(),
            });
        }
        let name = key.kernel_set.as_bytes();
        if name.len() > KERNEL_SET_BYTES {
            return Err(CacheError::PlanMismatch {
                what: alloc::format!("kernel set name '{}' is too long", key.kernel_set),
            });
        }
        let h = &mut cache[..self.data_start];
        h.fill(0);
        h[0..8].copy_from_slice(&CACHE_MAGIC);
        put_u32(h, 8, CACHE_FORMAT_VERSION);
        put_u32(h, 12, self.entries.len() as u32);
        put_u64(h, 16, self.file_len as u64);
        put_u64(h, 24, self.data_start as u64);
        put_u64(h, 32, key.model_len);
        put_u64(h, 40, key.model_mtime_ns);
        put_u64(h, 48, key.model_fingerprint);
        h[56..56 + name.len()].copy_from_slice(name);
        for (i, (e, sums)) in self.entries.iter().zip(checksums).enumerate() {
            let at = HEADER_BYTES + ENTRY_BYTES * i;
            let layout = e.kernel.layout.as_bytes();
            if layout.len() > LAYOUT_BYTES {
                return Err(CacheError::PlanMismatch {
                    what: alloc::format!("layout name '{}' is too long", e.kernel.layout),
                });
            }
            for (j, v) in [e.id, e.n_rows, e.n_cols, e.offset, e.len]
                .iter()
                .enumerate()
            {
                put_u64(h, at + 8 * j, *v as u64);
            }
            put_u64(h, at + 40, sums.full);
            put_u64(h, at + 48, sums.sampled);
            h[at + ENTRY_LAYOUT_AT..at + ENTRY_LAYOUT_AT + layout.len()].copy_from_slice(layout);
        }
        let table_end = HEADER_BYTES + ENTRY_BYTES * self.entries.len();
        let sum = checksum64(&h[..table_end]);
        put_u64(h, CHECKSUM_AT, sum);
        Ok(())
    }

    /// Checks that `cache` is a complete, intact cache of this plan for `key`: magic, version,
    /// length, header checksum, the key, and the table against the plan. Returns the stored
    /// data checksums, which [`RepackPlan::verify_entry`] checks (a full check reads the whole
    /// copy, so the caller may show progress). Never panics on any bytes.
    pub fn validate_header(
        &self,
        cache: &[u8],
        key: &CacheKey,
    ) -> Result<Vec<EntrySums>, CacheError> {
        if cache.len() < HEADER_BYTES {
            return Err(CacheError::Truncated {
                expected: self.file_len as u64,
                found: cache.len() as u64,
            });
        }
        if cache[0..8] != CACHE_MAGIC {
            return Err(CacheError::NotACache);
        }
        let version = get_u32(cache, 8);
        if version != CACHE_FORMAT_VERSION {
            return Err(CacheError::Version {
                found: version,
                expected: CACHE_FORMAT_VERSION,
            });
        }
        let stored_len = get_u64(cache, 16);
        if stored_len != cache.len() as u64 {
            return Err(CacheError::Truncated {
                expected: stored_len,
                found: cache.len() as u64,
            });
        }
        let n_entries = get_u32(cache, 12) as usize;
        let table_end = n_entries
            .checked_mul(ENTRY_BYTES)
            .and_then(|t| t.checked_add(HEADER_BYTES))
            .filter(|&end| end <= cache.len())
            .ok_or(CacheError::Corrupt {
                what: alloc::format!("a table of {n_entries} entries does not fit the file"),
            })?;
        let mut header = cache[..table_end].to_vec();
        put_u64(&mut header, CHECKSUM_AT, 0);
        if checksum64(&header) != get_u64(cache, CHECKSUM_AT) {
            return Err(CacheError::Corrupt {
                what: "header checksum mismatch".into(),
            });
        }
        let stored_set = &cache[56..56 + KERNEL_SET_BYTES];
        let stored_set = &stored_set[..stored_set
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(KERNEL_SET_BYTES)];
        let key_fields = [
            ("model length", get_u64(cache, 32), key.model_len),
            ("model mtime", get_u64(cache, 40), key.model_mtime_ns),
            (
                "model fingerprint",
                get_u64(cache, 48),
                key.model_fingerprint,
            ),
        ];
        for (what, found, expected) in key_fields {
            if found != expected {
                return Err(CacheError::Stale {
                    what: alloc::format!("{what} {found:#x}, the model has {expected:#x}"),
                });
            }
        }
        if stored_set != key.kernel_set.as_bytes() {
            return Err(CacheError::Stale {
                what: alloc::format!(
                    "kernel set '{}', this CPU runs '{}'",
                    String::from_utf8_lossy(stored_set),
                    key.kernel_set
                ),
            });
        }
        // The same model and kernel set give the same plan; a mismatch means a cache written
        // by another smolrun build with the same format version (a layout that changed
        // without a version bump) or damage that the checksum did not catch.
        if n_entries != self.entries.len()
            || get_u64(cache, 24) != self.data_start as u64
            || stored_len != self.file_len as u64
        {
            return Err(CacheError::Stale {
                what: alloc::format!(
                    "{n_entries} entries in {stored_len} bytes, this build plans {} in {}",
                    self.entries.len(),
                    self.file_len
                ),
            });
        }
        let mut checksums = Vec::with_capacity(n_entries);
        for (i, e) in self.entries.iter().enumerate() {
            let at = HEADER_BYTES + ENTRY_BYTES * i;
            let fields: [u64; 5] = core::array::from_fn(|j| get_u64(cache, at + 8 * j));
            let layout = &cache[at + ENTRY_LAYOUT_AT..at + ENTRY_LAYOUT_AT + LAYOUT_BYTES];
            let layout = &layout[..layout.iter().position(|&b| b == 0).unwrap_or(LAYOUT_BYTES)];
            let want = [e.id, e.n_rows, e.n_cols, e.offset, e.len].map(|v| v as u64);
            if fields != want || layout != e.kernel.layout.as_bytes() {
                return Err(CacheError::Stale {
                    what: alloc::format!(
                        "entry {i} is {:?} as '{}', this build plans {} {want:?} as '{}'",
                        fields,
                        String::from_utf8_lossy(layout),
                        e.name,
                        e.kernel.layout
                    ),
                });
            }
            checksums.push(EntrySums {
                full: get_u64(cache, at + 40),
                sampled: get_u64(cache, at + 48),
            });
        }
        Ok(checksums)
    }

    /// Checks entry `i`'s data against its stored checksums (from `validate_header`).
    pub fn verify_entry(
        &self,
        cache: &[u8],
        i: usize,
        sums: EntrySums,
        how: Verify,
    ) -> Result<(), CacheError> {
        let e = &self.entries[i];
        let data = cache
            .get(e.offset..e.offset + e.len)
            .ok_or(CacheError::Truncated {
                expected: (e.offset + e.len) as u64,
                found: cache.len() as u64,
            })?;
        let (found, stored, which) = match how {
            Verify::Sampled => (sampled_checksum(data), sums.sampled, "sampled data"),
            Verify::Full => (checksum64(data), sums.full, "data"),
        };
        if found != stored {
            return Err(CacheError::Corrupt {
                what: alloc::format!("{which} checksum mismatch in {}", e.name),
            });
        }
        Ok(())
    }

    /// The byte ranges of a cache of this plan that [`validate_header`](Self::validate_header)
    /// and a [`Verify::Sampled`] check of every entry read: the header and table, then each
    /// entry's sample windows. A caller can ask the kernel for exactly these pages up front (a
    /// fault through the mapping would read up to `read_ahead_kb` around each window).
    pub fn sampled_ranges(&self) -> impl Iterator<Item = core::ops::Range<usize>> + '_ {
        let table = 0..HEADER_BYTES + ENTRY_BYTES * self.entries.len();
        core::iter::once(table).chain(
            self.entries.iter().flat_map(|e| {
                sample_windows(e.len).map(move |w| e.offset + w.start..e.offset + w.end)
            }),
        )
    }

    /// The repacked copies inside `cache` (a validated or freshly written cache of this plan)
    /// as the weight store's table, for a file of `n_tensors` tensors.
    pub fn weights(
        &self,
        cache: Box<dyn AsRef<[u8]> + Send + Sync>,
        n_tensors: usize,
    ) -> Result<RepackedWeights, ModelError> {
        let mut w = RepackedWeights::new(cache, n_tensors);
        for e in &self.entries {
            w.insert(e.id, e.kernel.layout, e.offset..e.offset + e.len)?;
        }
        Ok(w)
    }
}

/// Why a cache file cannot be used (the caller rebuilds it and says why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheError {
    /// Shorter (or longer) than its header says, or than a header.
    Truncated { expected: u64, found: u64 },
    /// No repack cache magic.
    NotACache,
    /// Written by another format version.
    Version { found: u32, expected: u32 },
    /// A checksum does not match, or the table does not fit.
    Corrupt { what: String },
    /// Intact, but for another model file, kernel set or build.
    Stale { what: String },
    /// The plan cannot be written as a cache (a name too long for its field).
    PlanMismatch { what: String },
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheError::Truncated { expected, found } => {
                write!(f, "truncated: {found} bytes, expected {expected}")
            }
            CacheError::NotACache => write!(f, "not a smolrun repack cache (bad magic)"),
            CacheError::Version { found, expected } => {
                write!(f, "format version {found}, this build writes {expected}")
            }
            CacheError::Corrupt { what } => write!(f, "corrupt: {what}"),
            CacheError::Stale { what } => write!(f, "stale: {what}"),
            CacheError::PlanMismatch { what } => write!(f, "cannot be written: {what}"),
        }
    }
}

/// The model half of the cache key that does not need the file system: a hash of the GGUF
/// header (everything before the tensor data at `data_offset`) and of 16 samples of 4 KiB
/// spread evenly over the tensor data. Reads about `data_offset` + 64 KiB of the file.
pub fn model_fingerprint(file: &[u8], data_offset: usize) -> u64 {
    let header_end = data_offset.min(file.len());
    let mut h = checksum64(&file[..header_end]);
    let data = &file[header_end..];
    if data.len() <= FINGERPRINT_SAMPLES * FINGERPRINT_SAMPLE_BYTES {
        return mix(h ^ checksum64(data));
    }
    for range in fingerprint_samples(file.len(), data_offset) {
        h = mix(h ^ checksum64(&file[range]));
    }
    h
}

/// The byte ranges of the file that [`model_fingerprint`] samples after the header (empty when
/// it hashes all the data).
fn fingerprint_samples(
    file_len: usize,
    data_offset: usize,
) -> impl Iterator<Item = core::ops::Range<usize>> {
    let header_end = data_offset.min(file_len);
    let data_len = file_len - header_end;
    let sampled = data_len > FINGERPRINT_SAMPLES * FINGERPRINT_SAMPLE_BYTES;
    // First sample at the start of the data, last one at its end, the rest evenly between.
    let span = data_len.saturating_sub(FINGERPRINT_SAMPLE_BYTES);
    (0..if sampled { FINGERPRINT_SAMPLES } else { 0 }).map(move |s| {
        let at = span / (FINGERPRINT_SAMPLES - 1) * s
            + span % (FINGERPRINT_SAMPLES - 1) * s / (FINGERPRINT_SAMPLES - 1);
        header_end + at..header_end + at + FINGERPRINT_SAMPLE_BYTES
    })
}

/// [`checksum64`] of [`SAMPLE_WINDOWS`] windows of 4 KiB spread over `data` (first at the
/// start, last at the end), mixed with the length; of all of `data` when it is that small.
pub fn sampled_checksum(data: &[u8]) -> u64 {
    if data.len() <= SAMPLE_WINDOWS * SAMPLE_WINDOW_BYTES {
        return mix(checksum64(data));
    }
    let mut h = data.len() as u64;
    for window in sample_windows(data.len()) {
        h = mix(h ^ checksum64(&data[window]));
    }
    h
}

/// The windows of a `len`-byte entry that [`sampled_checksum`] reads (all of it when small).
fn sample_windows(len: usize) -> impl Iterator<Item = core::ops::Range<usize>> {
    let sampled = len > SAMPLE_WINDOWS * SAMPLE_WINDOW_BYTES;
    let span = len.saturating_sub(SAMPLE_WINDOW_BYTES);
    (0..if sampled { SAMPLE_WINDOWS } else { 1 }).map(move |w| {
        if !sampled {
            return 0..len;
        }
        let at = span / (SAMPLE_WINDOWS - 1) * w
            + span % (SAMPLE_WINDOWS - 1) * w / (SAMPLE_WINDOWS - 1);
        at..at + SAMPLE_WINDOW_BYTES
    })
}

/// The byte ranges of the model file that [`model_fingerprint`] reads: the header, then the
/// samples of the tensor data. A caller can ask the kernel for exactly these pages up front:
/// faulting them in one by one through a mapping reads up to `read_ahead_kb` around each.
pub fn fingerprint_ranges(
    file_len: usize,
    data_offset: usize,
) -> impl Iterator<Item = core::ops::Range<usize>> {
    let header_end = data_offset.min(file_len);
    let whole_data = file_len - header_end <= FINGERPRINT_SAMPLES * FINGERPRINT_SAMPLE_BYTES;
    let header = if whole_data {
        0..file_len
    } else {
        0..header_end
    };
    core::iter::once(header).chain(fingerprint_samples(file_len, data_offset))
}

/// A fast 64-bit checksum (not cryptographic: it detects damage and mix-ups, not attacks).
/// Four independent multiply-xorshift lanes over 8-byte words, so it runs at several GB/s and
/// checking a whole cache costs little next to reading it.
pub fn checksum64(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut lanes = [
        0x243F_6A88_85A3_08D3u64,
        0x1319_8A2E_0370_7344,
        0xA409_3822_299F_31D0,
        0x082E_FA98_EC4E_6C89,
    ];
    let mut chunks = bytes.chunks_exact(32);
    for c in &mut chunks {
        for (j, lane) in lanes.iter_mut().enumerate() {
            let w = u64::from_le_bytes(c[8 * j..8 * j + 8].try_into().unwrap_or([0; 8]));
            let x = (*lane ^ w).wrapping_mul(K);
            *lane = x ^ (x >> 29);
        }
    }
    let mut tail = [0u8; 32];
    let rest = chunks.remainder();
    tail[..rest.len()].copy_from_slice(rest);
    let mut h = bytes.len() as u64;
    for (j, lane) in lanes.iter().enumerate() {
        let w = u64::from_le_bytes(tail[8 * j..8 * j + 8].try_into().unwrap_or([0; 8]));
        h = mix(h ^ mix(*lane ^ w));
    }
    h
}

/// splitmix64's finalizer: every input bit affects every output bit.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn align_page(n: usize) -> usize {
    n.div_ceil(CACHE_PAGE) * CACHE_PAGE
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{Gguf, GgufWriter};
    use crate::model::ResidentStore;
    use crate::quant::GgmlType;
    use alloc::vec;

    /// A stand-in layout: each row's bytes reversed (the cache does not care what a layout is).
    fn reversed_rows(src: &[u8], n_rows: usize, n_cols: usize, dst: &mut [u8]) -> Option<()> {
        if src.len() != n_rows * n_cols * 4 || dst.len() != src.len() {
            return None;
        }
        for (d, s) in dst
            .chunks_exact_mut(n_cols * 4)
            .zip(src.chunks_exact(n_cols * 4))
        {
            d.iter_mut().zip(s.iter().rev()).for_each(|(d, s)| *d = *s);
        }
        Some(())
    }

    const TEST_KERNEL: RepackedKernel = RepackedKernel {
        layout: "test_reversed",
        group_rows: 1,
        bytes: |r, c| Some(r * c * 4),
        repack: reversed_rows,
        rows: |_, _, _, out| out.fill(0.0),
        face: "test",
        act_table: None,
    };

    /// A GGUF with two F32 matrices and the plan that repacks both.
    fn model_file() -> (Vec<u8>, Vec<RepackEntry>) {
        let mut w = GgufWriter::new();
        w.add("general.architecture", "llama").unwrap();
        w.add_tensor("a", GgmlType::F32, &[8, 3]).unwrap();
        w.add_tensor("b", GgmlType::F32, &[16, 5000]).unwrap();
        let a: Vec<u8> = (0..8 * 3 * 4).map(|i| i as u8).collect();
        let b: Vec<u8> = (0..16 * 5000 * 4).map(|i| (i * 31 % 251) as u8).collect();
        let file = w.to_bytes(&[&a, &b]).unwrap();
        let entries = [(0, "a", 3, 8), (1, "b", 5000, 16)]
            .map(|(id, name, n_rows, n_cols)| RepackEntry {
                id,
                name: name.into(),
                n_rows,
                n_cols,
                kernel: TEST_KERNEL,
                ty: GgmlType::F32,
                offset: 0,
                len: n_rows * n_cols * 4,
                source_len: n_rows * n_cols * 4,
            })
            .to_vec();
        (file, entries)
    }

    fn key(file: &[u8], g: &Gguf) -> CacheKey<'static> {
        CacheKey {
            model_len: file.len() as u64,
            model_mtime_ns: 1_700_000_000_123_456_789,
            model_fingerprint: model_fingerprint(file, g.data_offset as usize),
            kernel_set: "aarch64-dotprod",
        }
    }

    fn build(plan: &RepackPlan, g: &Gguf, key: &CacheKey) -> Vec<u8> {
        let mut cache = vec![0xAAu8; plan.file_len];
        let sums: Vec<EntrySums> = (0..plan.entries.len())
            .map(|i| {
                plan.repack_entry(&ResidentStore::new(g), i, &mut cache)
                    .unwrap()
            })
            .collect();
        plan.write_header(key, &sums, &mut cache).unwrap();
        cache
    }

    fn check(plan: &RepackPlan, cache: &[u8], key: &CacheKey) -> Result<(), CacheError> {
        check_as(plan, cache, key, Verify::Full)
    }

    fn check_as(
        plan: &RepackPlan,
        cache: &[u8],
        key: &CacheKey,
        how: Verify,
    ) -> Result<(), CacheError> {
        let sums = plan.validate_header(cache, key)?;
        for (i, &s) in sums.iter().enumerate() {
            plan.verify_entry(cache, i, s, how)?;
        }
        Ok(())
    }

    /// Every byte outside `ranges` replaced, so a reader that looks beyond them sees it.
    fn scrambled_outside(bytes: &[u8], ranges: &[core::ops::Range<usize>]) -> Vec<u8> {
        let mut out: Vec<u8> = bytes.iter().map(|b| b ^ 0x5A).collect();
        for r in ranges {
            out[r.clone()].copy_from_slice(&bytes[r.clone()]);
        }
        out
    }

    #[test]
    fn the_sampled_check_and_the_fingerprint_read_only_the_ranges_they_name() {
        let (file, entries) = model_file();
        let g = Gguf::parse(&file).unwrap();
        let plan = RepackPlan::from_entries(entries);
        let key = key(&file, &g);
        let cache = build(&plan, &g, &key);

        let ranges: Vec<_> = plan.sampled_ranges().collect();
        assert_eq!(
            ranges.len(),
            1 + 1 + SAMPLE_WINDOWS,
            "table, small a, windows of b"
        );
        let scrambled = scrambled_outside(&cache, &ranges);
        assert_ne!(scrambled, cache);
        check_as(&plan, &scrambled, &key, Verify::Sampled).unwrap();
        for r in &ranges[1..] {
            let mut bad = cache.clone();
            bad[r.end - 1] ^= 1;
            assert!(
                check_as(&plan, &bad, &key, Verify::Sampled).is_err(),
                "{r:?}"
            );
        }

        let data_offset = g.data_offset as usize;
        let ranges: Vec<_> = fingerprint_ranges(file.len(), data_offset).collect();
        assert_eq!(ranges[0], 0..data_offset);
        assert_eq!(ranges.len(), 1 + FINGERPRINT_SAMPLES);
        let scrambled = scrambled_outside(&file, &ranges);
        assert_ne!(scrambled, file);
        let fingerprint = model_fingerprint(&file, data_offset);
        assert_eq!(model_fingerprint(&scrambled, data_offset), fingerprint);
        for r in &ranges {
            let mut bad = file.clone();
            bad[r.start] ^= 1;
            assert_ne!(model_fingerprint(&bad, data_offset), fingerprint, "{r:?}");
        }
    }

    #[test]
    fn a_written_cache_validates_and_serves_the_repacked_rows() {
        let (file, entries) = model_file();
        let g = Gguf::parse(&file).unwrap();
        let plan = RepackPlan::from_entries(entries);
        assert_eq!(plan.data_start, CACHE_PAGE);
        assert_eq!(plan.entries[1].offset, 2 * CACHE_PAGE);
        assert_eq!(
            plan.file_len,
            2 * CACHE_PAGE + (5000 * 64usize).div_ceil(CACHE_PAGE) * CACHE_PAGE
        );
        let key = key(&file, &g);
        let cache = build(&plan, &g, &key);
        check(&plan, &cache, &key).unwrap();
        let weights = plan
            .weights(Box::new(cache.clone()), g.tensors.len())
            .unwrap();
        assert_eq!(weights.count(), 2);
        assert_eq!(weights.total_bytes(), plan.repacked_bytes());
        let b = g.tensor_data(&g.tensors[1]);
        let copy = weights.get(1, "test_reversed").unwrap();
        assert_eq!(copy.len(), b.len());
        assert_eq!(
            &copy[..64],
            &b[..64].iter().rev().copied().collect::<Vec<_>>()[..]
        );
        assert!(
            weights.get(1, "q4_k_x4").is_none(),
            "another layout is not served"
        );
        assert!(weights.get(7, "test_reversed").is_none());
    }

    #[test]
    fn damaged_and_stale_caches_are_refused() {
        let (file, entries) = model_file();
        let g = Gguf::parse(&file).unwrap();
        let plan = RepackPlan::from_entries(entries);
        let key = key(&file, &g);
        let cache = build(&plan, &g, &key);

        let truncated = &cache[..cache.len() - 100];
        assert!(matches!(
            check(&plan, truncated, &key),
            Err(CacheError::Truncated { .. })
        ));
        assert!(matches!(
            check(&plan, &cache[..50], &key),
            Err(CacheError::Truncated { .. })
        ));
        assert!(matches!(
            check(&plan, &[], &key),
            Err(CacheError::Truncated { .. })
        ));

        let mut bad = cache.clone();
        bad[plan.entries[1].offset + 12345] ^= 1;
        let err = check(&plan, &bad, &key).unwrap_err();
        assert_eq!(
            err,
            CacheError::Corrupt {
                what: "data checksum mismatch in b".into()
            }
        );

        // A start checks the sampled windows only: a flip between them waits for a full check,
        // flips at either end of an entry (where a short or misplaced write shows) are caught.
        assert_eq!(check_as(&plan, &bad, &key, Verify::Sampled), Ok(()));
        let b = &plan.entries[1];
        for at in [b.offset + 5, b.offset + b.len / 3, b.offset + b.len - 1] {
            let mut bad = cache.clone();
            bad[at] ^= 0x80;
            assert_eq!(
                check_as(&plan, &bad, &key, Verify::Sampled),
                Err(CacheError::Corrupt {
                    what: "sampled data checksum mismatch in b".into()
                }),
                "flip at {at}"
            );
        }
        // A small entry is sampled whole.
        let mut bad = cache.clone();
        bad[plan.entries[0].offset + 50] ^= 1;
        assert!(check_as(&plan, &bad, &key, Verify::Sampled).is_err());

        let mut bad = cache.clone();
        bad[HEADER_BYTES + ENTRY_BYTES + 8] ^= 1; // entry 1's row count
        assert!(matches!(
            check(&plan, &bad, &key),
            Err(CacheError::Corrupt { .. })
        ));

        let mut bad = cache.clone();
        bad[0] = b'X';
        assert_eq!(check(&plan, &bad, &key), Err(CacheError::NotACache));

        let mut bad = cache.clone();
        put_u32(&mut bad, 8, CACHE_FORMAT_VERSION + 1);
        assert!(matches!(
            check(&plan, &bad, &key),
            Err(CacheError::Version { .. })
        ));

        // Another model file (mtime, length, content) or another kernel set: stale.
        let touched = CacheKey {
            model_mtime_ns: key.model_mtime_ns + 1,
            ..key.clone()
        };
        let other_set = CacheKey {
            kernel_set: "aarch64-neon",
            ..key.clone()
        };
        let mut edited = file.clone();
        let last = edited.len() - 1;
        edited[last] ^= 0x80; // a byte of tensor b inside the last fingerprint sample
        let edited_key = CacheKey {
            model_fingerprint: model_fingerprint(&edited, g.data_offset as usize),
            ..key.clone()
        };
        for stale in [touched, other_set, edited_key] {
            assert!(
                matches!(check(&plan, &cache, &stale), Err(CacheError::Stale { .. })),
                "{stale:?}"
            );
        }

        // A plan that differs from the one the cache was written for: stale, not misread.
        let mut other = plan.entries.clone();
        other[1].kernel.layout = "test_other";
        let other_plan = RepackPlan::from_entries(other);
        assert!(matches!(
            check(&other_plan, &cache, &key),
            Err(CacheError::Stale { .. })
        ));
        // Every single-byte corruption of the header and table is caught.
        for at in 0..HEADER_BYTES + 2 * ENTRY_BYTES {
            let mut bad = cache.clone();
            bad[at] ^= 0x10;
            assert!(
                check(&plan, &bad, &key).is_err(),
                "flipped byte {at} went unnoticed"
            );
        }
    }

    #[test]
    fn checksum_sees_every_byte_and_the_length() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 256) as u8).collect();
        let base = checksum64(&data);
        for at in [0, 31, 32, 500, 991, 999] {
            let mut d = data.clone();
            d[at] ^= 1;
            assert_ne!(checksum64(&d), base, "byte {at}");
        }
        assert_ne!(checksum64(&data[..999]), base);
        assert_ne!(checksum64(&[0u8; 64]), checksum64(&[0u8; 65]));
    }
}
