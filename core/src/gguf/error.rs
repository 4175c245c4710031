use crate::quant::GgmlType;
use alloc::string::String;
use core::fmt;

/// Everything that can be wrong with a GGUF file. Each variant names what was being read and
/// the expected versus found value; `Display` adds what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GgufError {
    /// Fewer bytes left than the field needs: the file is truncated or a length field lies.
    Truncated {
        what: String,
        offset: u64,
        needed: u64,
        available: u64,
    },
    BadMagic {
        found: [u8; 4],
    },
    UnsupportedVersion {
        found: u32,
    },
    /// A count (tensors, keys, array elements) larger than the rest of the file could hold.
    CountExceedsFile {
        what: String,
        count: u64,
        max_possible: u64,
    },
    InvalidUtf8 {
        what: String,
        offset: u64,
    },
    UnknownValueType {
        key: String,
        found: u32,
    },
    ArrayTooDeep {
        key: String,
        depth: u32,
    },
    DuplicateKey {
        key: String,
    },
    MissingKey {
        key: String,
    },
    WrongValueType {
        key: String,
        expected: &'static str,
        found: &'static str,
    },
    BadAlignment {
        found: u64,
    },
    BadDimCount {
        tensor: String,
        found: u32,
    },
    UnknownTensorType {
        tensor: String,
        found: u32,
    },
    ShapeOverflow {
        tensor: String,
        dims: [u64; 4],
    },
    RowNotWholeBlocks {
        tensor: String,
        ggml_type: GgmlType,
        row_len: u64,
        block_size: usize,
    },
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
    },
    TensorOutOfBounds {
        tensor: String,
        offset: u64,
        n_bytes: u64,
        data_len: u64,
    },
    DuplicateTensor {
        tensor: String,
    },
    /// Writer only: `to_bytes` got a different number of data slices than tensors were added.
    TensorDataCount {
        expected: u64,
        found: u64,
    },
    /// Writer only: the bytes handed over for a tensor do not match its type and shape.
    TensorDataLength {
        tensor: String,
        expected: u64,
        found: u64,
    },
}

impl GgufError {
    /// Whether parsing a prefix of the file failed only because the header goes on past it
    /// (`Gguf::parse_header`): parsing a longer prefix may succeed.
    pub fn wants_more_bytes(&self) -> bool {
        matches!(
            self,
            GgufError::Truncated { .. } | GgufError::CountExceedsFile { .. }
        )
    }
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use GgufError::*;
        match self {
            Truncated { what, offset, needed, available } => write!(
                f,
                "truncated while reading {what} at byte {offset}: needed {needed} bytes, {available} left; \
                 the file is incomplete (re-download it or check its sha256)"
            ),
            BadMagic { found } => write!(
                f,
                "not a GGUF file: expected magic \"GGUF\", found {found:02x?}; \
                 pass a .gguf model (convert other formats with llama.cpp's convert scripts)"
            ),
            UnsupportedVersion { found } => write!(
                f,
                "GGUF version {found} is not supported: expected 2 or 3 \
                 (a big-endian file shows a huge version; re-convert it as little-endian)"
            ),
            CountExceedsFile { what, count, max_possible } => write!(
                f,
                "{what} is {count}, but the rest of the file can hold at most {max_possible}; the header is corrupt"
            ),
            InvalidUtf8 { what, offset } => write!(f, "{what} at byte {offset} is not valid UTF-8; the file is corrupt"),
            UnknownValueType { key, found } => write!(
                f,
                "metadata key '{key}' has value type {found}, expected 0..=12; the file is corrupt or from a newer GGUF version"
            ),
            ArrayTooDeep { key, depth } => write!(
                f,
                "metadata key '{key}' nests arrays {depth} deep (at most {} allowed); the file is corrupt",
                super::MAX_ARRAY_NESTING
            ),
            DuplicateKey { key } => write!(f, "metadata key '{key}' appears twice; the file is corrupt"),
            MissingKey { key } => write!(
                f,
                "metadata key '{key}' is missing; this file lacks what smolrun needs (is it a complete model file?)"
            ),
            WrongValueType { key, expected, found } => {
                write!(f, "metadata key '{key}': expected {expected}, found {found}")
            }
            BadAlignment { found } => write!(
                f,
                "general.alignment is {found}, expected a non-zero power of two; the file is corrupt"
            ),
            BadDimCount { tensor, found } => write!(
                f,
                "tensor '{tensor}' has {found} dimensions, expected 1 to {}; the file is corrupt",
                super::MAX_DIMS
            ),
            UnknownTensorType { tensor, found } => write!(
                f,
                "tensor '{tensor}' has type id {found}, which smolrun does not know; \
                 re-quantize the model to a supported type (e.g. Q4_K_M) or update smolrun"
            ),
            ShapeOverflow { tensor, dims } => write!(
                f,
                "tensor '{tensor}' has shape {dims:?} whose size overflows; the file is corrupt"
            ),
            RowNotWholeBlocks { tensor, ggml_type, row_len, block_size } => write!(
                f,
                "tensor '{tensor}' of type {ggml_type} has rows of {row_len} elements, expected a multiple of {block_size}"
            ),
            MisalignedTensor { tensor, offset, alignment } => write!(
                f,
                "tensor '{tensor}' starts at data offset {offset}, expected a multiple of the alignment {alignment}"
            ),
            TensorOutOfBounds { tensor, offset, n_bytes, data_len } => write!(
                f,
                "tensor '{tensor}' spans data bytes {offset}..{offset}+{n_bytes}, but the data section has only \
                 {data_len} bytes; the file is truncated (re-download it)"
            ),
            DuplicateTensor { tensor } => write!(f, "tensor '{tensor}' appears twice; the file is corrupt"),
            TensorDataCount { expected, found } => write!(
                f,
                "the writer has {expected} tensors but was given data for {found}"
            ),
            TensorDataLength { tensor, expected, found } => write!(
                f,
                "tensor '{tensor}': its type and shape need {expected} bytes of data, {found} were given"
            ),
        }
    }
}
