//! Builds GGUF bytes field by field, including fields no writer would produce: the hostile-file
//! tests spell out each broken file with this so the damage is visible in the test itself.

/// A GGUF file under construction, little-endian throughout.
#[derive(Debug, Clone, Default)]
pub struct GgufBytes(pub Vec<u8>);

/// GGUF value type ids used by the tests.
pub const T_U32: u32 = 4;
pub const T_STR: u32 = 8;
pub const T_ARRAY: u32 = 9;
pub const T_U64: u32 = 10;

impl GgufBytes {
    /// Magic, version, tensor count and metadata count.
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> GgufBytes {
        GgufBytes(Vec::new())
            .raw(b"GGUF")
            .u32(version)
            .u64(n_tensors)
            .u64(n_kv)
    }

    pub fn raw(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }

    pub fn u32(self, v: u32) -> Self {
        self.raw(&v.to_le_bytes())
    }

    pub fn u64(self, v: u64) -> Self {
        self.raw(&v.to_le_bytes())
    }

    /// A GGUF string: u64 length, then the bytes.
    pub fn str(self, s: &str) -> Self {
        self.u64(s.len() as u64).raw(s.as_bytes())
    }

    /// A metadata entry with a u32 value.
    pub fn kv_u32(self, key: &str, v: u32) -> Self {
        self.str(key).u32(T_U32).u32(v)
    }

    /// A metadata entry with a string value.
    pub fn kv_str(self, key: &str, v: &str) -> Self {
        self.str(key).u32(T_STR).str(v)
    }

    /// A tensor info: name, dims (their count is written first), type id, relative offset.
    pub fn tensor(self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> Self {
        let mut b = self.str(name).u32(dims.len() as u32);
        for &d in dims {
            b = b.u64(d);
        }
        b.u32(type_id).u64(offset)
    }

    /// Zero bytes up to the next multiple of `alignment`.
    pub fn pad_to(mut self, alignment: usize) -> Self {
        let len = self.0.len().next_multiple_of(alignment);
        self.0.resize(len, 0);
        self
    }

    /// `n` bytes of tensor data.
    pub fn data(mut self, n: usize) -> Self {
        self.0.extend((0..n).map(|i| i as u8));
        self
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}
