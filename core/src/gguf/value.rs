//! Metadata values. Scalars are decoded; strings borrow from the file; arrays stay encoded and
//! are walked on demand, so a 150k-entry vocabulary costs nothing until a tokenizer asks.

use super::{Cursor, GgufError, MAX_ARRAY_NESTING};
use alloc::string::{String, ToString};

/// GGUF value type ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    Str = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => Str,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Encoded size of a fixed-size scalar; `None` for strings and arrays.
    pub fn fixed_size(self) -> Option<u64> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            Str | Array => None,
        }
    }

    /// Smallest encoding of one element of this type (string: its u64 length; array: type + length).
    fn min_size(self) -> u64 {
        match self {
            ValueType::Str => 8,
            ValueType::Array => 12,
            t => t.fixed_size().unwrap_or(1),
        }
    }

    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            Str => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(&'a str),
    Array(ArrayRef<'a>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl<'a> Value<'a> {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::Str(_) => ValueType::Str,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    pub fn type_name(&self) -> &'static str {
        self.value_type().name()
    }

    /// Any integer that is non-negative, widened to u64.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v as i64),
            Value::I16(v) => Some(v as i64),
            Value::I32(v) => Some(v as i64),
            Value::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::F32(v) => Some(v),
            Value::F64(v) => Some(v as f32),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&'a str> {
        match *self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<ArrayRef<'a>> {
        match *self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// An array value kept in its encoded form. `bytes` holds exactly the elements (already
/// validated at parse time, so walking them again cannot fail or read out of bounds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArrayRef<'a> {
    pub elem_type: ValueType,
    pub len: u64,
    bytes: &'a [u8],
    depth: u32,
}

impl<'a> ArrayRef<'a> {
    pub fn len(&self) -> usize {
        self.len as usize
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Iterates over the elements; each decode re-checks bounds but cannot fail on a file
    /// that parsed.
    pub fn iter(&self) -> ArrayIter<'a> {
        ArrayIter {
            c: Cursor {
                bytes: self.bytes,
                pos: 0,
            },
            elem_type: self.elem_type,
            left: self.len,
            depth: self.depth,
        }
    }

    /// Elements as strings; `None` if this is not an array of strings.
    pub fn strings(&self) -> Option<impl Iterator<Item = &'a str> + 'a> {
        self.string_bytes()
            .map(|it| it.filter_map(|b| core::str::from_utf8(b).ok()))
    }

    /// Elements of an array of strings as their bytes (UTF-8, checked when the file was
    /// parsed), without decoding each element as a [`Value`] and checking it again: the
    /// tokenizer walks Gemma's 262,144 token texts this way at every start.
    pub fn string_bytes(&self) -> Option<StringBytes<'a>> {
        (self.elem_type == ValueType::Str).then_some(StringBytes {
            bytes: self.bytes,
            left: self.len,
        })
    }

    /// Bytes the elements take in the file (for a string array: the texts plus an 8-byte
    /// length each), so a copy of them can be sized once, by bytes that exist.
    pub fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    /// Elements as f32; `None` if this is not an array of f32.
    pub fn f32s(&self) -> Option<impl Iterator<Item = f32> + 'a> {
        (self.elem_type == ValueType::F32).then(|| {
            self.bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        })
    }

    /// Elements as i64 for any integer element type; `None` otherwise. Yields exactly `len`
    /// items so that indices line up (token types per token id): a u64 element above i64::MAX
    /// saturates to i64::MAX.
    pub fn ints(&self) -> Option<Ints<'a>> {
        let size = match self.elem_type {
            ValueType::U8 | ValueType::I8 => 1,
            ValueType::U16 | ValueType::I16 => 2,
            ValueType::U32 | ValueType::I32 => 4,
            ValueType::U64 | ValueType::I64 => 8,
            _ => return None,
        };
        Some(Ints {
            elems: self.bytes.chunks_exact(size),
            elem_type: self.elem_type,
        })
    }
}

/// The elements of an array of strings, as bytes ([`ArrayRef::string_bytes`]).
pub struct StringBytes<'a> {
    bytes: &'a [u8],
    left: u64,
}

impl<'a> Iterator for StringBytes<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Parsing walked these exact bytes, so neither read can fall short; if one did, the
        // iterator would only end early.
        let (len, rest) = self.bytes.split_first_chunk::<8>()?;
        let len = usize::try_from(u64::from_le_bytes(*len)).ok()?;
        let (text, rest) = rest.split_at_checked(len)?;
        self.bytes = rest;
        Some(text)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

/// The elements of an array of integers as i64 ([`ArrayRef::ints`]), read straight from their
/// little-endian bytes (token types: one per token).
pub struct Ints<'a> {
    elems: core::slice::ChunksExact<'a, u8>,
    elem_type: ValueType,
}

impl Iterator for Ints<'_> {
    type Item = i64;
    fn next(&mut self) -> Option<i64> {
        let b = self.elems.next()?;
        // Each element is exactly its type's size (`ints` chose the chunk size by type).
        Some(match self.elem_type {
            ValueType::U8 => *b.first()? as i64,
            ValueType::I8 => *b.first()? as i8 as i64,
            ValueType::U16 => u16::from_le_bytes(*b.first_chunk()?) as i64,
            ValueType::I16 => i16::from_le_bytes(*b.first_chunk()?) as i64,
            ValueType::U32 => u32::from_le_bytes(*b.first_chunk()?) as i64,
            ValueType::I32 => i32::from_le_bytes(*b.first_chunk()?) as i64,
            ValueType::I64 => i64::from_le_bytes(*b.first_chunk()?),
            // A u64 above i64::MAX saturates, as documented on `ints`.
            _ => i64::try_from(u64::from_le_bytes(*b.first_chunk()?)).unwrap_or(i64::MAX),
        })
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.elems.size_hint()
    }
}

impl ExactSizeIterator for Ints<'_> {}

/// Walks an [`ArrayRef`]'s elements in file order.
pub struct ArrayIter<'a> {
    c: Cursor<'a>,
    elem_type: ValueType,
    left: u64,
    depth: u32,
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = Value<'a>;
    fn next(&mut self) -> Option<Value<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        read_typed(&mut self.c, "", self.elem_type, self.depth).ok()
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

/// Reads one value of type id `vt` for `key`.
pub(super) fn read_value<'a>(
    c: &mut Cursor<'a>,
    key: &str,
    vt: u32,
    depth: u32,
) -> Result<Value<'a>, GgufError> {
    let t = ValueType::from_id(vt).ok_or_else(|| GgufError::UnknownValueType {
        key: key.to_string(),
        found: vt,
    })?;
    read_typed(c, key, t, depth)
}

fn read_typed<'a>(
    c: &mut Cursor<'a>,
    key: &str,
    t: ValueType,
    depth: u32,
) -> Result<Value<'a>, GgufError> {
    let what = || -> String { alloc::format!("value of metadata key '{key}'") };
    Ok(match t {
        ValueType::U8 => Value::U8(c.take(1, &what)?[0]),
        ValueType::I8 => Value::I8(c.take(1, &what)?[0] as i8),
        ValueType::U16 => {
            let b = c.take(2, &what)?;
            Value::U16(u16::from_le_bytes([b[0], b[1]]))
        }
        ValueType::I16 => {
            let b = c.take(2, &what)?;
            Value::I16(i16::from_le_bytes([b[0], b[1]]))
        }
        ValueType::U32 => Value::U32(c.u32(&what)?),
        ValueType::I32 => Value::I32(c.u32(&what)? as i32),
        ValueType::F32 => Value::F32(f32::from_bits(c.u32(&what)?)),
        ValueType::Bool => Value::Bool(c.take(1, &what)?[0] != 0),
        ValueType::Str => Value::Str(c.string(&what)?),
        ValueType::U64 => Value::U64(c.u64(&what)?),
        ValueType::I64 => Value::I64(c.u64(&what)? as i64),
        ValueType::F64 => Value::F64(f64::from_bits(c.u64(&what)?)),
        ValueType::Array => {
            if depth >= MAX_ARRAY_NESTING {
                return Err(GgufError::ArrayTooDeep {
                    key: key.to_string(),
                    depth: depth + 1,
                });
            }
            let et_id = c.u32(&|| alloc::format!("element type of array '{key}'"))?;
            let elem_type =
                ValueType::from_id(et_id).ok_or_else(|| GgufError::UnknownValueType {
                    key: key.to_string(),
                    found: et_id,
                })?;
            let len = c.u64(&|| alloc::format!("length of array '{key}'"))?;
            if len > c.remaining() / elem_type.min_size() {
                return Err(GgufError::CountExceedsFile {
                    what: alloc::format!("element count of array '{key}'"),
                    count: len,
                    max_possible: c.remaining() / elem_type.min_size(),
                });
            }
            let start = c.pos;
            match elem_type.fixed_size() {
                // len * size <= remaining was checked above.
                Some(size) => {
                    c.take(len * size, &what)?;
                }
                // Strings are checked in a loop of their own (no Value per element): a
                // vocabulary is hundreds of thousands of them.
                None if elem_type == ValueType::Str => skip_strings(c, key, len)?,
                None => {
                    for _ in 0..len {
                        read_typed(c, key, elem_type, depth + 1)?;
                    }
                }
            }
            Value::Array(ArrayRef {
                elem_type,
                len,
                bytes: &c.bytes[start..c.pos],
                depth: depth + 1,
            })
        }
    })
}

/// Walks `len` strings of an array (u64 length, then the bytes), checking that each is there
/// and is UTF-8.
///
/// A vocabulary has hundreds of thousands of short strings, so the UTF-8 check is done once
/// over the whole run of them when it can be: when every length is below 128, the eight bytes
/// that encode it are all ASCII, and then the run is valid UTF-8 exactly when each string is
/// (an ASCII byte always ends any character before it and cannot continue one, so no
/// character can straddle two strings, and a bad string is bad inside the run too). Otherwise,
/// and to name the string at fault, each is checked alone.
fn skip_strings(c: &mut Cursor<'_>, key: &str, len: u64) -> Result<(), GgufError> {
    let start = c.pos;
    let mut lengths_ascii = true;
    for i in 0..len {
        let what = || alloc::format!("element {i} of array '{key}'");
        let n = c.u64(&what)?;
        lengths_ascii &= n < 0x80;
        c.take(n, &what)?;
    }
    let run = &c.bytes[start..c.pos];
    if lengths_ascii && core::str::from_utf8(run).is_ok() {
        return Ok(());
    }
    let mut each = Cursor {
        bytes: c.bytes,
        pos: start,
    };
    for i in 0..len {
        let what = || alloc::format!("element {i} of array '{key}'");
        each.string(&what)?;
    }
    Ok(())
}
