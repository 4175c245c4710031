//! Experts-last files: a mixture-of-experts GGUF whose expert tensors (3-D, one slice per
//! expert) all come after every other tensor, so that the non-expert weights form one prefix
//! of the file. A device whose address space cannot hold the whole file (iOS gives a process
//! ~1.7 GB) maps only that prefix and reads the experts from flash on demand.
//!
//! `smolrun gguf experts-last` writes such a file and records where the expert data begins in
//! the metadata key [`EXPERT_DATA_OFFSET_KEY`]; [`expert_data_offset`] reads it back and checks
//! that the tensor table really is laid out that way (a file edited by another tool may keep
//! the key and lose the order).

use super::{Gguf, TensorInfo, Value};
use alloc::string::String;
use core::fmt;

/// Metadata key (u64): the absolute file offset where the first expert tensor's data begins.
/// Every non-expert tensor ends at or before it, every expert tensor starts at or after it.
pub const EXPERT_DATA_OFFSET_KEY: &str = "smolrun.expert_data_offset";

/// Whether `t` is an expert tensor: 3-D with more than one expert along `dims[2]`
/// (`blk.N.ffn_{gate,up,down}_exps.weight`), the tensors an expert pager reads on demand.
pub fn is_expert_tensor(t: &TensorInfo) -> bool {
    t.n_dims == 3 && t.dims[2] > 1
}

/// Why a file's [`EXPERT_DATA_OFFSET_KEY`] cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpertLayoutError {
    /// The key is not an unsigned integer.
    WrongType { found: &'static str },
    /// The offset lies past the end of the file.
    PastEnd { offset: u64, file_len: u64 },
    /// A non-expert tensor ends after the offset: it would be cut off from the mapped prefix.
    ResidentAfter {
        tensor: String,
        offset: u64,
        end: u64,
    },
    /// An expert tensor starts before the offset.
    ExpertBefore {
        tensor: String,
        offset: u64,
        start: u64,
    },
}

impl fmt::Display for ExpertLayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const FIX: &str = "the file was changed after `smolrun gguf experts-last` wrote it: run \
                           `smolrun gguf experts-last` on it again";
        write!(f, "metadata key {EXPERT_DATA_OFFSET_KEY}: ")?;
        match self {
            ExpertLayoutError::WrongType { found } => write!(
                f,
                "expected an unsigned integer (u64), found a {found}; {FIX}"
            ),
            ExpertLayoutError::PastEnd { offset, file_len } => write!(
                f,
                "offset {offset} lies past the end of the {file_len}-byte file (truncated?); {FIX}"
            ),
            ExpertLayoutError::ResidentAfter {
                tensor,
                offset,
                end,
            } => write!(
                f,
                "non-expert tensor '{tensor}' ends at byte {end}, expected at or before the \
                 expert data at {offset}; {FIX}"
            ),
            ExpertLayoutError::ExpertBefore {
                tensor,
                offset,
                start,
            } => write!(
                f,
                "expert tensor '{tensor}' starts at byte {start}, expected at or after the \
                 expert data offset {offset}; {FIX}"
            ),
        }
    }
}

/// The absolute offset where the expert data of an experts-last file begins: `None` when the
/// file has no [`EXPERT_DATA_OFFSET_KEY`] (an ordinary file), the offset when the tensor table
/// agrees with it (every non-expert tensor ends at or before it, every expert tensor starts at
/// or after it, and it lies inside the file), an error naming the first tensor that does not.
pub fn expert_data_offset(gguf: &Gguf) -> Result<Option<u64>, ExpertLayoutError> {
    let offset = match gguf.get(EXPERT_DATA_OFFSET_KEY) {
        None => return Ok(None),
        Some(v @ (Value::U64(_) | Value::U32(_))) => v.as_u64().unwrap_or(u64::MAX),
        Some(v) => {
            return Err(ExpertLayoutError::WrongType {
                found: v.type_name(),
            })
        }
    };
    if offset > gguf.file_len() {
        return Err(ExpertLayoutError::PastEnd {
            offset,
            file_len: gguf.file_len(),
        });
    }
    for t in &gguf.tensors {
        // Parsing checked offset + n_bytes against the file length: no overflow.
        let end = t.offset + t.n_bytes;
        if is_expert_tensor(t) {
            if t.offset < offset {
                return Err(ExpertLayoutError::ExpertBefore {
                    tensor: t.name.into(),
                    offset,
                    start: t.offset,
                });
            }
        } else if end > offset {
            return Err(ExpertLayoutError::ResidentAfter {
                tensor: t.name.into(),
                offset,
                end,
            });
        }
    }
    Ok(Some(offset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgufWriter;
    use crate::quant::GgmlType;
    use alloc::string::ToString;
    use alloc::vec;
    use alloc::vec::Vec;

    /// A file of `tensors` (name, dims) in F32, with `key` if given.
    fn file(tensors: &[(&str, &[u64])], key: Option<crate::gguf::MetaValue>) -> Vec<u8> {
        let mut w = GgufWriter::new();
        w.add("general.architecture", "test").unwrap();
        if let Some(k) = key {
            w.add(EXPERT_DATA_OFFSET_KEY, k).unwrap();
        }
        let mut data = Vec::new();
        for (name, dims) in tensors {
            let i = w.add_tensor(name, GgmlType::F32, dims).unwrap();
            data.push(vec![0u8; w.tensor_bytes(i) as usize]);
        }
        let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        w.to_bytes(&refs).unwrap()
    }

    const EXPERTS_LAST: &[(&str, &[u64])] = &[
        ("a", &[32, 2]),
        ("norm", &[32]),
        ("exps", &[32, 4, 8]),
        ("one_expert", &[32, 2, 1]),
    ];

    fn offset_of(bytes: &[u8], name: &str) -> u64 {
        Gguf::parse(bytes).unwrap().tensor(name).unwrap().offset
    }

    #[test]
    fn absent_key_is_none() {
        let bytes = file(EXPERTS_LAST, None);
        assert_eq!(expert_data_offset(&Gguf::parse(&bytes).unwrap()), Ok(None));
    }

    #[test]
    fn a_3d_tensor_of_one_expert_is_not_an_expert_tensor() {
        let bytes = file(EXPERTS_LAST, None);
        let g = Gguf::parse(&bytes).unwrap();
        assert!(is_expert_tensor(g.tensor("exps").unwrap()));
        assert!(!is_expert_tensor(g.tensor("one_expert").unwrap()));
        assert!(!is_expert_tensor(g.tensor("a").unwrap()));
    }

    #[test]
    fn a_correct_offset_is_accepted_and_wrong_ones_name_the_tensor() {
        // The key is fixed-size, so its value does not move any tensor.
        let probe = file(EXPERTS_LAST, Some(0u64.into()));
        let exps = offset_of(&probe, "exps");
        let g_bytes = file(EXPERTS_LAST, Some(exps.into()));
        let g = Gguf::parse(&g_bytes).unwrap();
        // "one_expert" (not an expert tensor) comes after the experts: refused.
        let err = expert_data_offset(&g).unwrap_err();
        assert!(
            matches!(&err, ExpertLayoutError::ResidentAfter { tensor, .. } if tensor == "one_expert"),
            "{err:?}"
        );
        assert!(err.to_string().contains("experts-last"), "{err}");

        let good: &[(&str, &[u64])] = &[("a", &[32, 2]), ("norm", &[32]), ("exps", &[32, 4, 8])];
        let probe = file(good, Some(0u64.into()));
        let exps = offset_of(&probe, "exps");
        let bytes = file(good, Some(exps.into()));
        let g = Gguf::parse(&bytes).unwrap();
        assert_eq!(expert_data_offset(&g), Ok(Some(exps)));

        // One byte later: the expert tensor starts before it.
        let bytes = file(good, Some((exps + 1).into()));
        let err = expert_data_offset(&Gguf::parse(&bytes).unwrap()).unwrap_err();
        assert_eq!(
            err,
            ExpertLayoutError::ExpertBefore {
                tensor: "exps".into(),
                offset: exps + 1,
                start: exps
            }
        );
        // Too early: "norm" ends after it.
        let bytes = file(good, Some((exps - 32).into()));
        let err = expert_data_offset(&Gguf::parse(&bytes).unwrap()).unwrap_err();
        assert!(
            matches!(&err, ExpertLayoutError::ResidentAfter { tensor, .. } if tensor == "norm"),
            "{err:?}"
        );
    }

    #[test]
    fn hostile_values_are_errors_not_panics() {
        let good: &[(&str, &[u64])] = &[("a", &[32, 2]), ("exps", &[32, 4, 8])];
        let bytes = file(good, Some(u64::MAX.into()));
        let g = Gguf::parse(&bytes).unwrap();
        assert!(matches!(
            expert_data_offset(&g),
            Err(ExpertLayoutError::PastEnd { .. })
        ));
        let bytes = file(good, Some("12".into()));
        let g = Gguf::parse(&bytes).unwrap();
        assert_eq!(
            expert_data_offset(&g),
            Err(ExpertLayoutError::WrongType { found: "string" })
        );
        let bytes = file(good, Some((-5i64).into()));
        let g = Gguf::parse(&bytes).unwrap();
        assert!(matches!(
            expert_data_offset(&g),
            Err(ExpertLayoutError::WrongType { .. })
        ));
    }
}
