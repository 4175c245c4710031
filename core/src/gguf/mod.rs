//! GGUF reader over a byte slice: the whole file (mapped read-only), or only a prefix of it
//! that holds the header ([`Gguf::parse_header`]), when the tensors are read through a weight
//! store instead of a mapping (a file bigger than the address space).
//!
//! The file is untrusted. Every count, length and offset is checked against the bytes that
//! exist before it is used, and nothing is allocated in proportion to a number read from the
//! file unless the bytes to back it are present: an array that claims 2^40 elements must have
//! at least 2^40 times its smallest element size left in the file before we believe it.
//!
//! Layout (versions 2 and 3, little-endian):
//! ```text
//! magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//! n_kv x      { string key | u32 value_type | value }
//! n_tensors x { string name | u32 n_dims | n_dims x u64 ne | u32 ggml_type | u64 offset }
//! padding to general.alignment (default 32)
//! tensor data; each tensor's offset is relative to the start of this section
//! ```

mod error;
pub mod expert_layout;
mod value;
pub mod writer;

pub use error::GgufError;
pub use expert_layout::{
    expert_data_offset, is_expert_tensor, ExpertLayoutError, EXPERT_DATA_OFFSET_KEY,
};
pub use value::{ArrayIter, ArrayRef, Ints, StringBytes, Value, ValueType};
pub use writer::{GgufWriter, MetaArray, MetaValue};

use crate::quant::GgmlType;
use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

pub const MAGIC: [u8; 4] = *b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml tensors have at most four dimensions.
pub const MAX_DIMS: usize = 4;
/// Arrays of arrays are legal; this bounds the recursion a hostile file can ask for.
pub const MAX_ARRAY_NESTING: u32 = 8;
/// Up-front capacity for the metadata and tensor tables. A count from the file is only a
/// promise (checked against the bytes left, but a 1 GB hostile file could still promise tens of
/// millions of entries of which none decode), so the tables grow as entries actually parse.
const PREALLOCATE_AT_MOST: usize = 1024;

/// One metadata entry: a key and its value, both borrowed from the file.
#[derive(Debug, Clone, Copy)]
pub struct MetaEntry<'a> {
    pub key: &'a str,
    pub value: Value<'a>,
}

/// A tensor's description from the header. `offset` is absolute within the file bytes.
#[derive(Debug, Clone, Copy)]
pub struct TensorInfo<'a> {
    pub name: &'a str,
    pub ggml_type: GgmlType,
    /// ggml order: `dims[0]` is the row length (fastest-varying). Unused dims are 1.
    pub dims: [u64; MAX_DIMS],
    pub n_dims: usize,
    /// Absolute offset of the first byte in the file.
    pub offset: u64,
    pub n_bytes: u64,
}

impl TensorInfo<'_> {
    /// The used dimensions, ggml order (`shape()[0]` is the row length).
    pub fn shape(&self) -> &[u64] {
        &self.dims[..self.n_dims]
    }
    pub fn n_elements(&self) -> u64 {
        // Checked at parse time not to overflow.
        self.dims.iter().product()
    }
    /// Length of one row (dims[0]) and number of rows (product of the rest).
    pub fn rows_cols(&self) -> (u64, u64) {
        (self.n_elements() / self.dims[0].max(1), self.dims[0])
    }
    /// Bytes of one row of `dims[0]` elements. Parsing checked that this fits in u64, also for
    /// tensors with an empty axis.
    pub fn row_bytes(&self) -> usize {
        (self.dims[0] / self.ggml_type.block_size() as u64 * self.ggml_type.type_size() as u64)
            as usize
    }
}

/// A parsed GGUF file: header, metadata and tensor table, all borrowing from the bytes.
#[derive(Debug)]
pub struct Gguf<'a> {
    /// What was parsed: the whole file, or a prefix that holds the header.
    bytes: &'a [u8],
    /// Length of the whole file, against which every tensor's extent was checked.
    file_len: u64,
    pub version: u32,
    pub alignment: u64,
    /// Absolute offset of the tensor data section.
    pub data_offset: u64,
    pub metadata: Vec<MetaEntry<'a>>,
    pub tensors: Vec<TensorInfo<'a>>,
    by_name: BTreeMap<&'a str, usize>,
}

/// A cursor that refuses to read past the end; every read names what it was reading.
pub(crate) struct Cursor<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    pub(crate) fn take(
        &mut self,
        n: u64,
        what: &dyn Fn() -> String,
    ) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.pos as u64,
                needed: n,
                available: self.remaining(),
            });
        }
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    pub(crate) fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// A GGUF string: u64 length, then that many bytes of UTF-8 (no terminator).
    pub(crate) fn string(&mut self, what: &dyn Fn() -> String) -> Result<&'a str, GgufError> {
        let start = self.pos as u64;
        let len = self.u64(what)?;
        let b = self.take(len, what)?;
        core::str::from_utf8(b).map_err(|_| GgufError::InvalidUtf8 {
            what: what(),
            offset: start,
        })
    }
}

impl<'a> Gguf<'a> {
    /// Parses the header, metadata and tensor table of `bytes`, the whole file, and checks
    /// every tensor's extent.
    pub fn parse(bytes: &'a [u8]) -> Result<Gguf<'a>, GgufError> {
        Gguf::parse_header(bytes, bytes.len() as u64)
    }

    /// Parses the header from `prefix`, the first bytes of a file of `file_len` bytes, and
    /// checks every tensor's extent against `file_len`. A prefix too short for the header
    /// fails with an error for which [`GgufError::wants_more_bytes`] is true: read more and
    /// parse again. Tensor bytes are then read through a weight store (`tensor_data` has none).
    pub fn parse_header(prefix: &'a [u8], file_len: u64) -> Result<Gguf<'a>, GgufError> {
        let bytes = &prefix[..prefix
            .len()
            .min(usize::try_from(file_len).unwrap_or(usize::MAX))];
        let mut c = Cursor { bytes, pos: 0 };
        let magic = c.take(4, &|| "magic".to_string())?;
        if magic != MAGIC {
            let mut found = [0u8; 4];
            found.copy_from_slice(magic);
            return Err(GgufError::BadMagic { found });
        }
        let version = c.u32(&|| "version".to_string())?;
        if version != 2 && version != 3 {
            return Err(GgufError::UnsupportedVersion { found: version });
        }
        let n_tensors = c.u64(&|| "tensor count".to_string())?;
        let n_kv = c.u64(&|| "metadata count".to_string())?;

        // Smallest possible encodings: a KV is an empty key (8) + type (4) + a 1-byte value;
        // a tensor info is an empty name (8) + n_dims (4) + one dim (8) + type (4) + offset (8).
        const MIN_KV_BYTES: u64 = 8 + 4 + 1;
        const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;
        check_count("metadata count", n_kv, MIN_KV_BYTES, c.remaining())?;
        let mut metadata = Vec::with_capacity((n_kv as usize).min(PREALLOCATE_AT_MOST));
        let mut keys = alloc::collections::BTreeSet::new();
        for i in 0..n_kv {
            let key = c.string(&|| alloc::format!("key of metadata entry {i}"))?;
            let vt = c.u32(&|| alloc::format!("value type of metadata key '{key}'"))?;
            let value = value::read_value(&mut c, key, vt, 0)?;
            if !keys.insert(key) {
                return Err(GgufError::DuplicateKey {
                    key: key.to_string(),
                });
            }
            metadata.push(MetaEntry { key, value });
        }

        let alignment = match metadata.iter().find(|e| e.key == "general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(e) => match e.value {
                Value::U32(a) if a != 0 && a.is_power_of_two() => a as u64,
                Value::U32(a) => return Err(GgufError::BadAlignment { found: a as u64 }),
                v => {
                    return Err(GgufError::WrongValueType {
                        key: "general.alignment".to_string(),
                        expected: "u32",
                        found: v.type_name(),
                    })
                }
            },
        };

        check_count(
            "tensor count",
            n_tensors,
            MIN_TENSOR_INFO_BYTES,
            c.remaining(),
        )?;
        let mut raw = Vec::with_capacity((n_tensors as usize).min(PREALLOCATE_AT_MOST));
        let mut by_name = BTreeMap::new();
        for i in 0..n_tensors {
            let name = c.string(&|| alloc::format!("name of tensor {i}"))?;
            let n_dims = c.u32(&|| alloc::format!("dimension count of tensor '{name}'"))?;
            if n_dims == 0 || n_dims as usize > MAX_DIMS {
                return Err(GgufError::BadDimCount {
                    tensor: name.to_string(),
                    found: n_dims,
                });
            }
            let mut dims = [1u64; MAX_DIMS];
            for (d, slot) in dims.iter_mut().enumerate().take(n_dims as usize) {
                *slot = c.u64(&|| alloc::format!("dimension {d} of tensor '{name}'"))?;
            }
            let type_id = c.u32(&|| alloc::format!("type of tensor '{name}'"))?;
            let rel_offset = c.u64(&|| alloc::format!("offset of tensor '{name}'"))?;
            let ggml_type =
                GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
                    tensor: name.to_string(),
                    found: type_id,
                })?;
            // ggml stores dims as int64_t: each must be at most i64::MAX, and so must their
            // product. A zero dim counts as 1 here, so that an empty axis cannot hide an
            // oversized other axis (whose row length later code would still multiply).
            let bounded = dims
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d.max(1)))
                .is_some_and(|n| n <= i64::MAX as u64);
            if !bounded {
                return Err(GgufError::ShapeOverflow {
                    tensor: name.to_string(),
                    dims,
                });
            }
            let n_elements: u64 = dims.iter().product();
            if !dims[0].is_multiple_of(ggml_type.block_size() as u64) {
                return Err(GgufError::RowNotWholeBlocks {
                    tensor: name.to_string(),
                    ggml_type,
                    row_len: dims[0],
                    block_size: ggml_type.block_size(),
                });
            }
            // With an empty axis the tensor has no bytes, but its rows still have a length
            // that row_bytes() must be able to compute.
            if ggml_type.bytes_for(dims[0]).is_none() {
                return Err(GgufError::ShapeOverflow {
                    tensor: name.to_string(),
                    dims,
                });
            }
            let n_bytes =
                ggml_type
                    .bytes_for(n_elements)
                    .ok_or_else(|| GgufError::ShapeOverflow {
                        tensor: name.to_string(),
                        dims,
                    })?;
            if !rel_offset.is_multiple_of(alignment) {
                return Err(GgufError::MisalignedTensor {
                    tensor: name.to_string(),
                    offset: rel_offset,
                    alignment,
                });
            }
            if by_name.insert(name, i as usize).is_some() {
                return Err(GgufError::DuplicateTensor {
                    tensor: name.to_string(),
                });
            }
            raw.push((name, ggml_type, dims, n_dims as usize, rel_offset, n_bytes));
        }

        let header_end = c.pos as u64;
        let data_offset = header_end.div_ceil(alignment) * alignment;
        if data_offset > file_len && !raw.is_empty() {
            return Err(GgufError::Truncated {
                what: "padding before tensor data".to_string(),
                offset: header_end,
                needed: data_offset - header_end,
                available: file_len - header_end,
            });
        }
        let mut tensors = Vec::with_capacity(raw.len());
        for (name, ggml_type, dims, n_dims, rel_offset, n_bytes) in raw {
            let offset = data_offset.checked_add(rel_offset);
            let end = offset.and_then(|o| o.checked_add(n_bytes));
            match (offset, end) {
                (Some(offset), Some(end)) if end <= file_len => tensors.push(TensorInfo {
                    name,
                    ggml_type,
                    dims,
                    n_dims,
                    offset,
                    n_bytes,
                }),
                _ => {
                    return Err(GgufError::TensorOutOfBounds {
                        tensor: name.to_string(),
                        offset: rel_offset,
                        n_bytes,
                        data_len: file_len.saturating_sub(data_offset),
                    })
                }
            }
        }
        Ok(Gguf {
            bytes,
            file_len,
            version,
            alignment,
            data_offset,
            metadata,
            tensors,
            by_name,
        })
    }

    /// The bytes this was parsed from: the whole file, or the prefix that holds its header.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Length of the whole file.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Whether the parsed bytes hold the tensor data too (`parse` of a whole file).
    pub fn has_tensor_data(&self) -> bool {
        self.bytes.len() as u64 == self.file_len
    }

    pub fn get(&self, key: &str) -> Option<Value<'a>> {
        self.metadata.iter().find(|e| e.key == key).map(|e| e.value)
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo<'a>> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of a tensor of a whole-file parse (its extent was checked at parse time), for
    /// tools that rewrite a mapped file. Empty when the bytes were not parsed (`parse_header`),
    /// or for a `TensorInfo` of another file: the forward pass reads through a weight store.
    pub fn tensor_data(&self, t: &TensorInfo<'a>) -> &'a [u8] {
        let end = t.offset.saturating_add(t.n_bytes);
        match (usize::try_from(t.offset), usize::try_from(end)) {
            (Ok(start), Ok(end)) => self.bytes.get(start..end).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// A required string value, with an error that names the key.
    pub fn get_str(&self, key: &str) -> Result<&'a str, GgufError> {
        match self.get(key) {
            Some(Value::Str(s)) => Ok(s),
            Some(v) => Err(GgufError::WrongValueType {
                key: key.to_string(),
                expected: "string",
                found: v.type_name(),
            }),
            None => Err(GgufError::MissingKey {
                key: key.to_string(),
            }),
        }
    }

    /// A required unsigned integer of any width (files differ in u32/u64/i32 for counts).
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        match self.get(key) {
            Some(v) => v.as_u64().ok_or_else(|| GgufError::WrongValueType {
                key: key.to_string(),
                expected: "non-negative integer",
                found: v.type_name(),
            }),
            None => Err(GgufError::MissingKey {
                key: key.to_string(),
            }),
        }
    }

    /// A required float (f32 or f64 in the file).
    pub fn get_f32(&self, key: &str) -> Result<f32, GgufError> {
        match self.get(key) {
            Some(v) => v.as_f32().ok_or_else(|| GgufError::WrongValueType {
                key: key.to_string(),
                expected: "float",
                found: v.type_name(),
            }),
            None => Err(GgufError::MissingKey {
                key: key.to_string(),
            }),
        }
    }

    /// `general.architecture`, the prefix of the model's hyperparameter keys.
    pub fn architecture(&self) -> Result<&'a str, GgufError> {
        self.get_str("general.architecture")
    }
}

fn check_count(
    what: &'static str,
    count: u64,
    min_bytes_each: u64,
    remaining: u64,
) -> Result<(), GgufError> {
    if count > remaining / min_bytes_each {
        return Err(GgufError::CountExceedsFile {
            what: what.to_string(),
            count,
            max_possible: remaining / min_bytes_each,
        });
    }
    Ok(())
}
