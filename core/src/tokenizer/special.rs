//! Special tokens: which ids are BOS/EOS/end-of-turn, which tokens end generation, and finding
//! control and user-defined tokens in a text before the normal tokenizer sees it.

use super::vocab::{attr, Vocab};
use alloc::vec::Vec;

/// Ids of the tokens with a role. `None` where the model has none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// End of turn (`<|im_end|>`, `<end_of_turn>`, `<|eot_id|>`).
    pub eot: Option<u32>,
    /// End of message (`<|eom_id|>`, Llama 3 tool calls).
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

// Token texts the reference recognises when the metadata does not name the id. Where several
// are present, the reference takes whichever its hash map yields first; we take the first in
// these lists, so `eot()` may differ from llama.cpp's on a vocabulary with two candidates
// (Qwen has `<|im_end|>` and `<|endoftext|>`; `is_eog` is the same either way).
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Tokens that end generation by their text alone (the reference's list).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// The id of a token whose text is one of `texts` (first in list order), found through the
/// index so that a duplicated text resolves to the id the index gives it.
fn find_first(vocab: &Vocab, texts: &[&str]) -> Option<u32> {
    texts.iter().find_map(|t| vocab.find(t.as_bytes()))
}

/// Fills the roles the metadata left empty from token texts, marks those tokens CONTROL, and
/// returns the sorted list of end-of-generation ids, following the reference's rules.
pub(crate) fn resolve_roles(vocab: &mut Vocab, ids: &mut SpecialIds) -> Vec<u32> {
    let detect = |slot: &mut Option<u32>, texts: &[&str], vocab: &mut Vocab| {
        if slot.is_none() {
            *slot = find_first(vocab, texts);
            if let Some(id) = *slot {
                vocab.attrs[id as usize] |= attr::CONTROL;
            }
        }
    };
    detect(&mut ids.eot, EOT_TEXTS, vocab);
    detect(&mut ids.eom, EOM_TEXTS, vocab);
    detect(&mut ids.fim_pre, FIM_PRE_TEXTS, vocab);
    detect(&mut ids.fim_suf, FIM_SUF_TEXTS, vocab);
    detect(&mut ids.fim_mid, FIM_MID_TEXTS, vocab);
    detect(&mut ids.fim_pad, FIM_PAD_TEXTS, vocab);
    detect(&mut ids.fim_rep, FIM_REP_TEXTS, vocab);
    detect(&mut ids.fim_sep, FIM_SEP_TEXTS, vocab);

    // The reference treats the FIM pad/repo/file-separator tokens as end of generation too.
    let mut eog: Vec<u32> = [ids.fim_pad, ids.fim_rep, ids.fim_sep]
        .into_iter()
        .flatten()
        .collect();
    for t in EOG_TEXTS {
        if let Some(id) = vocab.find(t.as_bytes()) {
            eog.push(id);
            vocab.attrs[id as usize] |= attr::CONTROL;
        }
    }

    // gpt-oss: these structure tokens are always rendered and parsed as user-defined.
    for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
        if let Some(id) = vocab.find(t.as_bytes()) {
            vocab.attrs[id as usize] = attr::USER_DEFINED;
        }
    }

    eog.extend([ids.eos, ids.eot, ids.eom].into_iter().flatten());
    eog.sort_unstable();
    eog.dedup();

    let has = |eog: &[u32], vocab: &Vocab, text: &str| {
        eog.iter()
            .copied()
            .find(|&id| vocab.text(id) == text.as_bytes())
    };
    // o200k_harmony and solar-open: "<|end|>" ends a message, not the generation.
    if let Some(end) = has(&eog, vocab, "<|end|>") {
        let has_return = has(&eog, vocab, "<|return|>").is_some();
        let has_call =
            has(&eog, vocab, "<|call|>").is_some() || has(&eog, vocab, "<|calls|>").is_some();
        let has_flush = has(&eog, vocab, "<|flush|>").is_some();
        if has_call && (has_return || has_flush) {
            eog.retain(|&id| id != end);
            vocab.attrs[end as usize] = attr::USER_DEFINED;
        }
    }
    // Gemma 4 and PLaMo have "</s>" as a normal token.
    if let Some(s) = has(&eog, vocab, "</s>") {
        if has(&eog, vocab, "<|tool_response>").is_some()
            || has(&eog, vocab, "<|plamo:eos|>").is_some()
        {
            eog.retain(|&id| id != s);
            vocab.attrs[s as usize] = attr::NORMAL;
        }
    }
    eog
}

/// Control, user-defined and unknown tokens, longest text first: the order in which the
/// reference cuts them out of a text. Equal lengths go by id (the reference's sort leaves their
/// order unspecified; it matters only if two such tokens overlap in a text).
pub(crate) fn matching_order(vocab: &Vocab) -> Vec<u32> {
    let mut order: Vec<u32> = (0..vocab.len() as u32)
        .filter(|&id| vocab.attr(id) & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0)
        .collect();
    order.sort_by(|&a, &b| {
        vocab
            .text(b)
            .len()
            .cmp(&vocab.text(a).len())
            .then(a.cmp(&b))
    });
    order
}

/// A piece of the input: text still to tokenize, or a special token found in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// Byte range of the input text.
    Text(usize, usize),
    Token(u32),
}

/// The whitespace-stripping attributes the reference gives special tokens by the model's name
/// (`general.name`, lowercased; llama.cpp's llama_vocab::load): Phi-3's special tokens swallow
/// the whitespace after them, except `<unk>`, `<s>` and `<|endoftext|>`.
pub(crate) fn strip_by_model_name(vocab: &mut Vocab, name: &str) {
    let name = name.to_ascii_lowercase();
    if !(name.contains("phi-3") || name.contains("phi3")) {
        return;
    }
    for id in matching_order(vocab) {
        vocab.attrs[id as usize] |= attr::RSTRIP;
    }
    if let Some(id) = vocab.find(b"</s>") {
        vocab.attrs[id as usize] |= attr::RSTRIP;
    }
    for text in [&b"<unk>"[..], b"<s>", b"<|endoftext|>"] {
        if let Some(id) = vocab.find(text) {
            vocab.attrs[id as usize] &= !attr::RSTRIP;
        }
    }
}

/// C's isspace: what the reference strips next to an LSTRIP or RSTRIP token.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Cuts the special tokens out of `text`, in `order`. For each token in turn, every occurrence
/// in every remaining text fragment (left to right, not overlapping) becomes a token fragment.
/// With `parse_special` off, only user-defined tokens are cut out.
pub(crate) fn partition(
    vocab: &Vocab,
    order: &[u32],
    text: &[u8],
    parse_special: bool,
    fragments: &mut Vec<Fragment>,
) {
    fragments.clear();
    if text.is_empty() {
        return;
    }
    fragments.push(Fragment::Text(0, text.len()));

    // A cheap filter first: Gemma has 6,414 special tokens, nearly all absent from any given
    // text. A token can only occur if each of its adjacent byte pairs occurs in the text.
    let mut pairs = alloc::vec![0u64; 65536 / 64];
    let mut singles = [0u64; 4];
    for w in text.windows(2) {
        let p = (w[0] as usize) << 8 | w[1] as usize;
        pairs[p / 64] |= 1 << (p % 64);
    }
    for &b in text {
        singles[b as usize / 64] |= 1 << (b % 64);
    }
    let may_occur = |t: &[u8]| {
        t.len() <= text.len()
            && t.iter()
                .all(|&b| singles[b as usize / 64] & (1 << (b % 64)) != 0)
            && t.windows(2).all(|w| {
                let p = (w[0] as usize) << 8 | w[1] as usize;
                pairs[p / 64] & (1 << (p % 64)) != 0
            })
    };

    let mut next = Vec::new();
    for &id in order {
        if !parse_special && vocab.attr(id) & (attr::CONTROL | attr::UNKNOWN) != 0 {
            continue;
        }
        let needle = vocab.text(id);
        if !may_occur(needle) {
            continue;
        }
        next.clear();
        let mut found = false;
        for &frag in fragments.iter() {
            let Fragment::Text(mut start, end) = frag else {
                next.push(frag);
                continue;
            };
            let token_attr = vocab.attr(id);
            while let Some(at) = find(&text[start..end], needle) {
                found = true;
                let mut left_end = start + at;
                if token_attr & attr::LSTRIP != 0 {
                    while left_end > start && is_c_space(text[left_end - 1]) {
                        left_end -= 1;
                    }
                }
                if left_end > start {
                    next.push(Fragment::Text(start, left_end));
                }
                next.push(Fragment::Token(id));
                start += at + needle.len();
                if token_attr & attr::RSTRIP != 0 {
                    while start < end && is_c_space(text[start]) {
                        start += 1;
                    }
                }
            }
            if start < end {
                next.push(Fragment::Text(start, end));
            }
        }
        if found {
            core::mem::swap(fragments, &mut next);
        }
    }
}

/// First position of `needle` in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let mut from = 0;
    while from + needle.len() <= haystack.len() {
        let at = from
            + haystack[from..=haystack.len() - needle.len()]
                .iter()
                .position(|&b| b == first)?;
        if &haystack[at + 1..at + needle.len()] == rest {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_locates_substrings() {
        assert_eq!(find(b"abcabd", b"abd"), Some(3));
        assert_eq!(find(b"ab", b"abc"), None);
        assert_eq!(find(b"aaa", b"a"), Some(0));
        assert_eq!(find(b"xyz", b""), None);
    }
}
