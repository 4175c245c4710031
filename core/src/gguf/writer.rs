//! GGUF writer: builds the header (metadata and tensor table) and lays the tensors out at
//! aligned offsets, so that tests, synthetic models and rewriters (head pruning, repacking)
//! produce files that [`Gguf::parse`](super::Gguf::parse) and llama.cpp both accept.
//!
//! The writer owns its values ([`MetaValue`]); a value parsed from another file converts with
//! `MetaValue::from`, which is how a rewriter copies the metadata it keeps.
//!
//! Two ways out:
//! - [`GgufWriter::to_bytes`] returns a whole file from the tensors' bytes (small files, tests);
//! - [`GgufWriter::header`] returns only the header padded to the data section, and
//!   [`GgufWriter::tensor_offset`] says where each tensor goes after it, so a big file can be
//!   streamed to disk tensor by tensor (pad each tensor to `tensor_offset` of the next).

use super::{ArrayRef, GgufError, Value, ValueType, DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS};
use crate::quant::GgmlType;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

/// An owned metadata value, one variant per GGUF value type.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    Array(MetaArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// An owned array value. All elements of a GGUF array share one type, which the variant fixes;
/// an array of arrays holds inner arrays that may each have their own element type.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    Str(Vec<String>),
    Array(Vec<MetaArray>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl MetaValue {
    pub fn value_type(&self) -> ValueType {
        match self {
            MetaValue::U8(_) => ValueType::U8,
            MetaValue::I8(_) => ValueType::I8,
            MetaValue::U16(_) => ValueType::U16,
            MetaValue::I16(_) => ValueType::I16,
            MetaValue::U32(_) => ValueType::U32,
            MetaValue::I32(_) => ValueType::I32,
            MetaValue::F32(_) => ValueType::F32,
            MetaValue::Bool(_) => ValueType::Bool,
            MetaValue::Str(_) => ValueType::Str,
            MetaValue::Array(_) => ValueType::Array,
            MetaValue::U64(_) => ValueType::U64,
            MetaValue::I64(_) => ValueType::I64,
            MetaValue::F64(_) => ValueType::F64,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            MetaValue::U8(v) => out.push(*v),
            MetaValue::I8(v) => out.push(*v as u8),
            MetaValue::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::Bool(v) => out.push(*v as u8),
            MetaValue::Str(s) => put_str(out, s),
            MetaValue::Array(a) => a.encode(out),
            MetaValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        }
    }
}

impl MetaArray {
    pub fn elem_type(&self) -> ValueType {
        match self {
            MetaArray::U8(_) => ValueType::U8,
            MetaArray::I8(_) => ValueType::I8,
            MetaArray::U16(_) => ValueType::U16,
            MetaArray::I16(_) => ValueType::I16,
            MetaArray::U32(_) => ValueType::U32,
            MetaArray::I32(_) => ValueType::I32,
            MetaArray::F32(_) => ValueType::F32,
            MetaArray::Bool(_) => ValueType::Bool,
            MetaArray::Str(_) => ValueType::Str,
            MetaArray::Array(_) => ValueType::Array,
            MetaArray::U64(_) => ValueType::U64,
            MetaArray::I64(_) => ValueType::I64,
            MetaArray::F64(_) => ValueType::F64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::Str(v) => v.len(),
            MetaArray::Array(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Nesting depth: 1 for an array of scalars, 2 for an array of arrays of scalars, ...
    fn depth(&self) -> u32 {
        match self {
            MetaArray::Array(inner) => 1 + inner.iter().map(|a| a.depth()).max().unwrap_or(0),
            _ => 1,
        }
    }

    /// Element type id, element count, elements.
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.elem_type() as u32).to_le_bytes());
        out.extend_from_slice(&(self.len() as u64).to_le_bytes());
        match self {
            MetaArray::U8(v) => out.extend_from_slice(v),
            MetaArray::I8(v) => out.extend(v.iter().map(|&x| x as u8)),
            MetaArray::U16(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            MetaArray::I16(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            MetaArray::U32(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            MetaArray::I32(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            MetaArray::F32(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            MetaArray::Bool(v) => out.extend(v.iter().map(|&x| x as u8)),
            MetaArray::Str(v) => v.iter().for_each(|s| put_str(out, s)),
            MetaArray::Array(v) => v.iter().for_each(|a| a.encode(out)),
            MetaArray::U64(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            MetaArray::I64(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            MetaArray::F64(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        }
    }
}

impl From<Value<'_>> for MetaValue {
    fn from(v: Value<'_>) -> MetaValue {
        match v {
            Value::U8(x) => MetaValue::U8(x),
            Value::I8(x) => MetaValue::I8(x),
            Value::U16(x) => MetaValue::U16(x),
            Value::I16(x) => MetaValue::I16(x),
            Value::U32(x) => MetaValue::U32(x),
            Value::I32(x) => MetaValue::I32(x),
            Value::F32(x) => MetaValue::F32(x),
            Value::Bool(x) => MetaValue::Bool(x),
            Value::Str(s) => MetaValue::Str(s.to_string()),
            Value::Array(a) => MetaValue::Array(MetaArray::from(a)),
            Value::U64(x) => MetaValue::U64(x),
            Value::I64(x) => MetaValue::I64(x),
            Value::F64(x) => MetaValue::F64(x),
        }
    }
}

impl From<ArrayRef<'_>> for MetaArray {
    fn from(a: ArrayRef<'_>) -> MetaArray {
        // Each arm keeps the elements of its own type; the array was validated when parsed, so
        // every element decodes as `elem_type` and the filters drop nothing.
        macro_rules! collect {
            ($variant:ident) => {
                MetaArray::$variant(
                    a.iter()
                        .filter_map(|v| match v {
                            Value::$variant(x) => Some(x),
                            _ => None,
                        })
                        .collect(),
                )
            };
        }
        match a.elem_type {
            ValueType::U8 => collect!(U8),
            ValueType::I8 => collect!(I8),
            ValueType::U16 => collect!(U16),
            ValueType::I16 => collect!(I16),
            ValueType::U32 => collect!(U32),
            ValueType::I32 => collect!(I32),
            ValueType::F32 => collect!(F32),
            ValueType::Bool => collect!(Bool),
            ValueType::Str => MetaArray::Str(
                a.iter()
                    .filter_map(|v| v.as_str().map(|s| s.to_string()))
                    .collect(),
            ),
            ValueType::Array => MetaArray::Array(
                a.iter()
                    .filter_map(|v| v.as_array().map(MetaArray::from))
                    .collect(),
            ),
            ValueType::U64 => collect!(U64),
            ValueType::I64 => collect!(I64),
            ValueType::F64 => collect!(F64),
        }
    }
}

macro_rules! meta_from {
    ($($t:ty => $variant:ident),* $(,)?) => {
        $(impl From<$t> for MetaValue {
            fn from(x: $t) -> MetaValue { MetaValue::$variant(x) }
        })*
    };
}
meta_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, String => Str, u64 => U64, i64 => I64, f64 => F64, MetaArray => Array);

impl From<&str> for MetaValue {
    fn from(s: &str) -> MetaValue {
        MetaValue::Str(s.to_string())
    }
}

macro_rules! array_from {
    ($($t:ty => $variant:ident),* $(,)?) => {
        $(impl From<Vec<$t>> for MetaValue {
            fn from(v: Vec<$t>) -> MetaValue { MetaValue::Array(MetaArray::$variant(v)) }
        })*
    };
}
array_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, String => Str, u64 => U64, i64 => I64, f64 => F64, MetaArray => Array);

impl From<Vec<&str>> for MetaValue {
    fn from(v: Vec<&str>) -> MetaValue {
        MetaValue::Array(MetaArray::Str(
            v.into_iter().map(|s| s.to_string()).collect(),
        ))
    }
}

/// A tensor as the writer will describe it.
#[derive(Debug, Clone)]
struct PlannedTensor {
    name: String,
    ggml_type: GgmlType,
    dims: [u64; MAX_DIMS],
    n_dims: usize,
    n_bytes: u64,
}

/// Collects metadata and tensor descriptions, then writes them as GGUF. Keys and tensors keep
/// the order they were added in.
#[derive(Debug, Clone)]
pub struct GgufWriter {
    version: u32,
    alignment: u64,
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<PlannedTensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// A GGUF version 3 file with the default alignment (32).
    pub fn new() -> GgufWriter {
        GgufWriter {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Version 2 and 3 share the layout (64-bit counts); 3 only adds big-endian files, which
    /// this writer never produces.
    pub fn with_version(mut self, version: u32) -> Result<GgufWriter, GgufError> {
        if version != 2 && version != 3 {
            return Err(GgufError::UnsupportedVersion { found: version });
        }
        self.version = version;
        Ok(self)
    }

    /// Adds a metadata entry. `general.alignment` must be a u32 power of two; it sets the
    /// alignment the tensors are placed at.
    pub fn add(&mut self, key: &str, value: impl Into<MetaValue>) -> Result<(), GgufError> {
        let value = value.into();
        if self.metadata.iter().any(|(k, _)| k == key) {
            return Err(GgufError::DuplicateKey {
                key: key.to_string(),
            });
        }
        if let MetaValue::Array(a) = &value {
            if a.depth() > super::MAX_ARRAY_NESTING {
                return Err(GgufError::ArrayTooDeep {
                    key: key.to_string(),
                    depth: a.depth(),
                });
            }
        }
        if key == "general.alignment" {
            match value {
                MetaValue::U32(a) if a != 0 && a.is_power_of_two() => self.alignment = a as u64,
                MetaValue::U32(a) => return Err(GgufError::BadAlignment { found: a as u64 }),
                ref v => {
                    return Err(GgufError::WrongValueType {
                        key: key.to_string(),
                        expected: "u32",
                        found: v.value_type().name(),
                    })
                }
            }
        }
        self.metadata.push((key.to_string(), value));
        Ok(())
    }

    /// Adds a tensor description; `dims` in ggml order (`dims[0]` is the row length). Returns
    /// its index, which [`tensor_offset`](Self::tensor_offset) and `to_bytes` use.
    pub fn add_tensor(
        &mut self,
        name: &str,
        ggml_type: GgmlType,
        dims: &[u64],
    ) -> Result<usize, GgufError> {
        if dims.is_empty() || dims.len() > MAX_DIMS {
            return Err(GgufError::BadDimCount {
                tensor: name.to_string(),
                found: dims.len() as u32,
            });
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GgufError::DuplicateTensor {
                tensor: name.to_string(),
            });
        }
        let mut padded = [1u64; MAX_DIMS];
        padded[..dims.len()].copy_from_slice(dims);
        let overflow = || GgufError::ShapeOverflow {
            tensor: name.to_string(),
            dims: padded,
        };
        // The same bound the reader applies, so everything written here parses back.
        let bounded = padded
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d.max(1)))
            .is_some_and(|n| n <= i64::MAX as u64);
        if !bounded {
            return Err(overflow());
        }
        if !padded[0].is_multiple_of(ggml_type.block_size() as u64) {
            return Err(GgufError::RowNotWholeBlocks {
                tensor: name.to_string(),
                ggml_type,
                row_len: padded[0],
                block_size: ggml_type.block_size(),
            });
        }
        ggml_type.bytes_for(padded[0]).ok_or_else(overflow)?;
        let n_bytes = ggml_type
            .bytes_for(padded.iter().product())
            .ok_or_else(overflow)?;
        self.tensors.push(PlannedTensor {
            name: name.to_string(),
            ggml_type,
            dims: padded,
            n_dims: dims.len(),
            n_bytes,
        });
        Ok(self.tensors.len() - 1)
    }

    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    pub fn tensor_count(&self) -> usize {
        self.tensors.len()
    }

    /// Offset of tensor `index` from the start of the data section: each tensor starts at the
    /// next multiple of the alignment after the previous one ends. `index` must be below
    /// [`tensor_count`](Self::tensor_count) (an index `add_tensor` returned).
    pub fn tensor_offset(&self, index: usize) -> u64 {
        self.tensors[..index]
            .iter()
            .fold(0, |end, t| align_up(end, self.alignment) + t.n_bytes)
            .next_multiple_of(self.alignment)
    }

    /// Bytes of tensor `index`'s data as its type and shape require (same `index` rule).
    pub fn tensor_bytes(&self, index: usize) -> u64 {
        self.tensors[index].n_bytes
    }

    /// Length of the data section: up to the end of the last tensor, padded to the alignment
    /// (llama.cpp pads the last tensor too).
    pub fn data_len(&self) -> u64 {
        match self.tensors.len() {
            0 => 0,
            n => align_up(
                self.tensor_offset(n - 1) + self.tensors[n - 1].n_bytes,
                self.alignment,
            ),
        }
    }

    /// Header, metadata and tensor table, zero-padded to the alignment: its length is the
    /// absolute offset of the data section.
    pub fn header(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_str(&mut out, key);
            out.extend_from_slice(&(value.value_type() as u32).to_le_bytes());
            value.encode(&mut out);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            offset = align_up(offset, self.alignment);
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.n_dims as u32).to_le_bytes());
            for d in &t.dims[..t.n_dims] {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ggml_type.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset += t.n_bytes;
        }
        out.resize(align_up(out.len() as u64, self.alignment) as usize, 0);
        out
    }

    /// The whole file: `data[i]` holds tensor `i`'s bytes, exactly `tensor_bytes(i)` of them.
    pub fn to_bytes(&self, data: &[&[u8]]) -> Result<Vec<u8>, GgufError> {
        if data.len() != self.tensors.len() {
            return Err(GgufError::TensorDataCount {
                expected: self.tensors.len() as u64,
                found: data.len() as u64,
            });
        }
        for (t, d) in self.tensors.iter().zip(data) {
            if d.len() as u64 != t.n_bytes {
                return Err(GgufError::TensorDataLength {
                    tensor: t.name.clone(),
                    expected: t.n_bytes,
                    found: d.len() as u64,
                });
            }
        }
        let mut out = self.header();
        let data_start = out.len();
        for d in data {
            out.resize(
                data_start + align_up((out.len() - data_start) as u64, self.alignment) as usize,
                0,
            );
            out.extend_from_slice(d);
        }
        out.resize(data_start + self.data_len() as usize, 0);
        Ok(out)
    }
}

fn align_up(x: u64, alignment: u64) -> u64 {
    x.next_multiple_of(alignment)
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::Gguf;
    use alloc::vec;

    fn every_type() -> Vec<(&'static str, MetaValue)> {
        vec![
            ("t.u8", MetaValue::U8(200)),
            ("t.i8", MetaValue::I8(-100)),
            ("t.u16", MetaValue::U16(60000)),
            ("t.i16", MetaValue::I16(-30000)),
            ("t.u32", MetaValue::U32(4_000_000_000)),
            ("t.i32", MetaValue::I32(-2_000_000_000)),
            ("t.f32", MetaValue::F32(1.5e-6)),
            ("t.bool", MetaValue::Bool(true)),
            ("t.str", MetaValue::Str("héllo".to_string())),
            ("t.u64", MetaValue::U64(u64::MAX)),
            ("t.i64", MetaValue::I64(i64::MIN)),
            ("t.f64", MetaValue::F64(-2.25e300)),
            ("a.u8", vec![1u8, 2, 3].into()),
            ("a.i8", vec![-1i8, 0, 1].into()),
            ("a.u16", vec![7u16].into()),
            ("a.i16", vec![-7i16, 7].into()),
            ("a.u32", vec![1u32, u32::MAX].into()),
            ("a.i32", vec![i32::MIN, -1, 0, i32::MAX].into()),
            ("a.f32", vec![0.0f32, -1.0, f32::INFINITY].into()),
            ("a.bool", vec![true, false, true].into()),
            ("a.str", vec!["", "a", "<|endoftext|>"].into()),
            ("a.u64", vec![u64::MAX, 0].into()),
            ("a.i64", vec![i64::MIN, 5].into()),
            ("a.f64", vec![1e-300f64].into()),
            ("a.empty", MetaValue::Array(MetaArray::Str(vec![]))),
            (
                "a.nested",
                vec![
                    MetaArray::I32(vec![1, 2]),
                    MetaArray::Str(vec!["x".to_string()]),
                    MetaArray::Array(vec![MetaArray::F64(vec![0.5])]),
                ]
                .into(),
            ),
        ]
    }

    #[test]
    fn round_trip_every_value_type_and_tensors() {
        for version in [2, 3] {
            for alignment in [None, Some(1u32), Some(64)] {
                let mut w = GgufWriter::new().with_version(version).unwrap();
                if let Some(a) = alignment {
                    w.add("general.alignment", a).unwrap();
                }
                for (k, v) in every_type() {
                    w.add(k, v).unwrap();
                }
                let q4k: Vec<u8> = (0..2 * 144).map(|i| i as u8).collect();
                let f32s: Vec<u8> = (0..3 * 5 * 4).map(|i| (i * 7) as u8).collect();
                let i8s: Vec<u8> = vec![9; 3];
                assert_eq!(w.add_tensor("q", GgmlType::Q4_K, &[512]).unwrap(), 0);
                w.add_tensor("f", GgmlType::F32, &[3, 5]).unwrap();
                w.add_tensor("odd", GgmlType::I8, &[3, 1, 1, 1]).unwrap();
                let file = w.to_bytes(&[&q4k, &f32s, &i8s]).unwrap();

                let g = Gguf::parse(&file).unwrap();
                assert_eq!(g.version, version);
                assert_eq!(g.alignment, w.alignment());
                assert_eq!(g.data_offset, w.header().len() as u64);
                assert_eq!(file.len() as u64, g.data_offset + w.data_len());
                let offset = usize::from(alignment.is_some());
                assert_eq!(g.metadata.len(), every_type().len() + offset);
                for (entry, (k, v)) in g.metadata[offset..].iter().zip(every_type()) {
                    assert_eq!(entry.key, k);
                    assert_eq!(MetaValue::from(entry.value), v, "key {k}");
                }
                for (i, (name, data)) in [("q", &q4k), ("f", &f32s), ("odd", &i8s)]
                    .into_iter()
                    .enumerate()
                {
                    let t = g.tensor(name).unwrap();
                    assert_eq!(t.offset, g.data_offset + w.tensor_offset(i));
                    assert_eq!(g.tensor_data(t), &data[..]);
                }
                assert_eq!(g.tensor("f").unwrap().shape(), &[3, 5]);
                assert_eq!(g.tensor("odd").unwrap().shape(), &[3, 1, 1, 1]);
            }
        }
    }

    #[test]
    fn writer_refuses_what_the_reader_would_reject() {
        let mut w = GgufWriter::new();
        w.add("k", 1u32).unwrap();
        assert!(matches!(
            w.add("k", 2u32),
            Err(GgufError::DuplicateKey { .. })
        ));
        assert!(matches!(
            w.add("general.alignment", 48u32),
            Err(GgufError::BadAlignment { found: 48 })
        ));
        assert!(matches!(
            w.add("general.alignment", 32u64),
            Err(GgufError::WrongValueType { .. })
        ));
        assert!(matches!(
            w.add_tensor("t", GgmlType::Q4_K, &[100]),
            Err(GgufError::RowNotWholeBlocks { .. })
        ));
        assert!(matches!(
            w.add_tensor("t", GgmlType::F32, &[]),
            Err(GgufError::BadDimCount { found: 0, .. })
        ));
        assert!(matches!(
            w.add_tensor("t", GgmlType::F32, &[1 << 40, 1 << 40]),
            Err(GgufError::ShapeOverflow { .. })
        ));
        w.add_tensor("t", GgmlType::F32, &[4]).unwrap();
        assert!(matches!(
            w.add_tensor("t", GgmlType::F32, &[4]),
            Err(GgufError::DuplicateTensor { .. })
        ));
        assert!(matches!(
            w.to_bytes(&[]),
            Err(GgufError::TensorDataCount {
                expected: 1,
                found: 0
            })
        ));
        assert!(matches!(
            w.to_bytes(&[&[0u8; 15]]),
            Err(GgufError::TensorDataLength {
                expected: 16,
                found: 15,
                ..
            })
        ));
        let mut deep = MetaArray::U8(vec![1]);
        for _ in 0..crate::gguf::MAX_ARRAY_NESTING {
            deep = MetaArray::Array(vec![deep]);
        }
        assert!(matches!(
            w.add("deep", deep),
            Err(GgufError::ArrayTooDeep { .. })
        ));
    }

    #[test]
    fn header_only_file_without_tensors_parses() {
        let mut w = GgufWriter::new();
        w.add("general.architecture", "llama").unwrap();
        let file = w.to_bytes(&[]).unwrap();
        let g = Gguf::parse(&file).unwrap();
        assert_eq!(g.get_str("general.architecture").unwrap(), "llama");
        assert!(g.tensors.is_empty());
    }
}
