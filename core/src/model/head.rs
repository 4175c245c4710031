//! A pruned LM head: the output matrix holds only the rows of the tokens worth producing, and
//! the file lists which vocabulary id each row belongs to under [`KEPT_IDS_KEY`].
//!
//! A small model is mostly vocabulary (Gemma 3 270M: 178 of its 247 MB are the 262K-row tied
//! head), and decoding one token reads the whole head. Keeping the ~32K-64K most frequent ids cuts
//! that read by 4-8x; the dropped ids get a logit of -inf, so nothing can sample them, while the
//! embedding table stays complete and a prompt may still contain any token.
//!
//! The rows keep the order of the vocabulary (the ids are sorted), so the logits of the kept ids
//! are exactly what the full head computes for them: same rows, same kernel.

use super::ModelError;
use crate::gguf::{Gguf, Value, ValueType};
use crate::tokenizer::{attr, Tokenizer};
use alloc::format;
use alloc::vec::Vec;

/// Metadata key of a pruned head: an i32 array, the vocabulary id of each row of
/// `output.weight`, strictly increasing.
pub const KEPT_IDS_KEY: &str = "smolrun.head.kept_ids";

/// Reads and checks the kept ids of a pruned head; `None` for a file with a full head.
/// `n_vocab` is the embedding table's row count and `n_rows` the output matrix's row count.
pub fn kept_ids(g: &Gguf, n_vocab: usize, n_rows: u64) -> Result<Option<Vec<u32>>, ModelError> {
    let value = match g.get(KEPT_IDS_KEY) {
        None => return Ok(None),
        Some(v) => v,
    };
    let bad = |expected: &str, found: alloc::string::String| ModelError::BadHParam {
        key: KEPT_IDS_KEY.into(),
        expected: expected.into(),
        found,
    };
    let array = match value {
        Value::Array(a) if a.elem_type == ValueType::I32 => a,
        Value::Array(a) => {
            return Err(bad(
                "an array of i32 (the pruned head's vocabulary ids)",
                format!("an array of {}", a.elem_type.name()),
            ))
        }
        v => {
            return Err(bad(
                "an array of i32 (the pruned head's vocabulary ids)",
                format!("a {}", v.type_name()),
            ))
        }
    };
    if array.len != n_rows {
        return Err(bad(
            &format!("one id per row of the output matrix ({n_rows} rows)"),
            format!("{} ids; re-run `smolrun gguf prune-head`", array.len),
        ));
    }
    if array.len > n_vocab as u64 {
        return Err(bad(
            &format!("at most {n_vocab} ids (the vocabulary)"),
            format!("{} ids", array.len),
        ));
    }
    let mut ids = Vec::with_capacity(array.len as usize);
    for (i, id) in array.ints().into_iter().flatten().enumerate() {
        if id < 0 || id as u64 >= n_vocab as u64 {
            return Err(bad(
                &format!("ids in 0..{n_vocab} (the vocabulary)"),
                format!("{id} at index {i}"),
            ));
        }
        let id = id as u32;
        if let Some(&prev) = ids.last() {
            if id <= prev {
                return Err(bad(
                    "strictly increasing ids (sorted, no duplicates)",
                    format!("{id} after {prev} at index {i}"),
                ));
            }
        }
        ids.push(id);
    }
    Ok(Some(ids))
}

/// Writes the kept rows' logits into the full-vocabulary `logits` at their ids. The other
/// entries are not touched: they hold -inf from [`State::new`](super::State::new) and nothing
/// else writes them.
pub fn scatter(kept_logits: &[f32], kept_ids: &[u32], logits: &mut [f32]) {
    for (&l, &id) in kept_logits.iter().zip(kept_ids) {
        logits[id as usize] = l;
    }
}

/// Most context tokens (with the one just produced) that [`join_pieces`] joins into one id.
pub const MAX_JOINED_PIECES: usize = 4;

/// How many of `tokens` fall outside a pruned head whose sorted row ids are `kept`: the ids the
/// model can read but never write (a text that needs them is re-spelled with kept pieces).
pub fn count_outside(kept: &[u32], tokens: &[u32]) -> usize {
    tokens
        .iter()
        .filter(|t| kept.binary_search(t).is_err())
        .count()
}

/// A pruned head writes a dropped token in kept pieces ("Holmes" as "Hol" + "mes"), but the
/// model learned the text with the dropped token, not with the pieces, and reads its own pieces
/// badly: measured on a story, every later prediction paid for them (170 of the 909 extra bits
/// that a 64K head cost). So once the last context tokens and the token just produced spell one
/// dropped id exactly, the context holds that id instead of the pieces; the embedding table is
/// complete, so the model can read it. `context` ends with the tokens already fed to the model,
/// `next` is the token just produced, `kept` the head's sorted ids. Returns how many context
/// tokens the id replaces (`next` is replaced too) and the id; `None` leaves `next` as it is.
/// Longer joins are tried first. Allocation-free: decoding calls it for every token.
pub fn join_pieces(
    tok: &Tokenizer,
    kept: &[u32],
    context: &[u32],
    next: u32,
) -> Option<(usize, u32)> {
    let normal = |id: u32| tok.token_attr(id) & attr::NORMAL != 0;
    // The text of `next` and the normal tokens before it, filled from the end of the buffer, so
    // the text of the last k + 1 tokens is `text[starts[k]..]`: each piece is copied once.
    let mut text = [0u8; 96];
    let mut starts = [0usize; MAX_JOINED_PIECES];
    let mut n_tokens = 0;
    let mut start = text.len();
    for &id in core::iter::once(&next).chain(context.iter().rev()) {
        let piece = tok.token_text(id).unwrap_or(&[]);
        if n_tokens == MAX_JOINED_PIECES || !normal(id) || piece.len() > start {
            break;
        }
        start -= piece.len();
        text[start..start + piece.len()].copy_from_slice(piece);
        starts[n_tokens] = start;
        n_tokens += 1;
    }
    for n in (1..n_tokens).rev() {
        match tok.token_id(&text[starts[n]..]) {
            Some(id) if kept.binary_search(&id).is_err() && normal(id) => return Some((n, id)),
            _ => {}
        }
    }
    None
}

/// Checks a list of ids to keep: strictly increasing (sorted, no duplicates), each below
/// `n_vocab`, at least one. The error says what is wrong and where.
pub fn check_ids(ids: &[u32], n_vocab: usize) -> Result<(), alloc::string::String> {
    if ids.is_empty() {
        return Err("the list of ids to keep is empty".into());
    }
    for (i, &id) in ids.iter().enumerate() {
        if id as usize >= n_vocab {
            return Err(format!(
                "id {id} (line {}) is not in the vocabulary of {n_vocab} tokens",
                i + 1
            ));
        }
        if i > 0 && id <= ids[i - 1] {
            return Err(format!(
                "id {id} (line {}) follows {}: the ids must be sorted and unique",
                i + 1,
                ids[i - 1]
            ));
        }
    }
    Ok(())
}

/// Where the bytes of one tensor of a rewritten file come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TensorSource {
    /// `len` bytes at absolute `offset` of the input, copied as they are.
    Copy { offset: u64, len: u64 },
    /// The rows `PrunePlan::ids` of the matrix at absolute `offset` of the input, in that order.
    KeptRows { offset: u64, row_bytes: u64 },
}

/// A pruned-head file, planned from the input's header: the new header (every metadata key
/// and tensor of the input, the head cut to the kept rows, [`KEPT_IDS_KEY`] added) and, for
/// each tensor in the new order, where its bytes come from. Writing it is one sequential pass
/// over the output, with the kept head rows gathered from the input.
pub struct PrunePlan {
    pub writer: crate::gguf::writer::GgufWriter,
    pub sources: Vec<TensorSource>,
    pub ids: Vec<u32>,
}

/// Plans the pruned copy of `g` that keeps the head rows `ids` (checked with [`check_ids`]).
/// A tied head (no `output.weight`) gets a new `output.weight` right after `token_embd.weight`,
/// built from the kept embedding rows, of the same type; the embedding table stays whole.
pub fn plan_prune(g: &Gguf, ids: &[u32]) -> Result<PrunePlan, alloc::string::String> {
    use crate::gguf::writer::{GgufWriter, MetaArray, MetaValue};
    if g.get(KEPT_IDS_KEY).is_some() {
        return Err(format!(
            "the file already has a pruned head ({KEPT_IDS_KEY} is set): prune the original file"
        ));
    }
    let embd = g
        .tensor("token_embd.weight")
        .ok_or("tensor 'token_embd.weight' is missing: not a model smolrun can prune")?;
    if embd.n_dims != 2 {
        return Err(format!(
            "tensor 'token_embd.weight' has {} dimensions, expected 2",
            embd.n_dims
        ));
    }
    let n_vocab = embd.dims[1] as usize;
    check_ids(ids, n_vocab)?;
    let head = g.tensor("output.weight");
    if let Some(h) = head {
        if h.n_dims != 2 || h.dims[1] != embd.dims[1] {
            return Err(format!(
                "tensor 'output.weight' has shape {:?}, expected [{}, {n_vocab}] (one row per token)",
                h.shape(),
                h.dims[0]
            ));
        }
    }
    let err = |e: crate::gguf::GgufError| format!("{e}");
    let mut w = GgufWriter::new().with_version(g.version).map_err(err)?;
    for entry in &g.metadata {
        w.add(entry.key, MetaValue::from(entry.value))
            .map_err(err)?;
    }
    let id_array: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
    w.add(KEPT_IDS_KEY, MetaValue::Array(MetaArray::I32(id_array)))
        .map_err(err)?;

    let mut sources = Vec::with_capacity(g.tensors.len() + 1);
    for t in &g.tensors {
        let is_head = t.name == "output.weight";
        let mut dims = t.dims;
        if is_head {
            dims[1] = ids.len() as u64;
        }
        w.add_tensor(t.name, t.ggml_type, &dims[..t.n_dims])
            .map_err(err)?;
        sources.push(if is_head {
            TensorSource::KeptRows {
                offset: t.offset,
                row_bytes: t.row_bytes() as u64,
            }
        } else {
            TensorSource::Copy {
                offset: t.offset,
                len: t.n_bytes,
            }
        });
        if head.is_none() && t.name == "token_embd.weight" {
            w.add_tensor("output.weight", t.ggml_type, &[t.dims[0], ids.len() as u64])
                .map_err(err)?;
            sources.push(TensorSource::KeptRows {
                offset: t.offset,
                row_bytes: t.row_bytes() as u64,
            });
        }
    }
    Ok(PrunePlan {
        writer: w,
        sources,
        ids: ids.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_outside_the_head_are_counted_with_repeats() {
        let kept = [0, 3, 7, 100];
        assert_eq!(count_outside(&kept, &[]), 0);
        assert_eq!(count_outside(&kept, &[3, 7, 100, 0]), 0);
        assert_eq!(count_outside(&kept, &[3, 4, 4, 101, 99, 7]), 4);
    }
}
