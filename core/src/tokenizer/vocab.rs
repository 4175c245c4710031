//! The vocabulary: each token's text, kind and score, and a text-to-id index.
//!
//! Texts are copied out of the GGUF file into one byte arena so the tokenizer owns its data
//! and does not tie the caller to the mapped file's lifetime (2.3 MB for Gemma 3's 262,144
//! tokens).

use super::table::{hash_bytes, IdTable};
use alloc::vec::Vec;

/// What a token is, as llama.cpp's token attributes. A bit set: the reference adds CONTROL to
/// some tokens by their text (see `special.rs`), so a token can be NORMAL and CONTROL at once.
pub mod attr {
    pub const UNDEFINED: u8 = 0;
    pub const UNKNOWN: u8 = 1 << 0;
    pub const UNUSED: u8 = 1 << 1;
    pub const NORMAL: u8 = 1 << 2;
    /// BOS, EOS, chat-turn markers: matched in the text only when `parse_special` is on.
    pub const CONTROL: u8 = 1 << 3;
    /// Added tokens (Gemma's runs of spaces and newlines, Qwen's `<tool_call>`): always matched
    /// in the text before the normal tokenizer runs, even when `parse_special` is off.
    pub const USER_DEFINED: u8 = 1 << 4;
    /// SentencePiece byte fallback `<0xXX>`.
    pub const BYTE: u8 = 1 << 5;
    /// A special token that swallows the whitespace before it in the text (`LSTRIP`).
    pub const LSTRIP: u8 = 1 << 6;
    /// A special token that swallows the whitespace after it in the text (`RSTRIP`; Phi-3's).
    pub const RSTRIP: u8 = 1 << 7;
}

/// `tokenizer.ggml.token_type` values (GGUF spec), mapped to attributes.
pub(crate) fn attr_from_token_type(token_type: i64) -> u8 {
    match token_type {
        1 => attr::NORMAL,
        2 => attr::UNKNOWN,
        3 => attr::CONTROL,
        4 => attr::USER_DEFINED,
        5 => attr::UNUSED,
        6 => attr::BYTE,
        _ => attr::UNDEFINED,
    }
}

pub(crate) struct Vocab {
    /// All token texts, back to back; token `i` is `text[text_end[i - 1]..text_end[i]]`.
    text: Vec<u8>,
    text_end: Vec<u32>,
    pub(crate) attrs: Vec<u8>,
    /// SentencePiece merge priorities (higher merges first); empty for BPE vocabularies.
    pub(crate) scores: Vec<f32>,
    index: IdTable,
}

impl Vocab {
    /// Builds the vocabulary from token texts. An empty text becomes `[EMPTY_<id>]` and a text
    /// that appears twice maps to its last id, as in the reference. `None` if the texts add up
    /// to 4 GiB or more (offsets are 32-bit). `text_bytes`: what the texts add up to (bytes
    /// that exist in the file), so the arena is allocated once.
    pub(crate) fn new<'s>(
        texts: impl Iterator<Item = &'s [u8]>,
        n_tokens: usize,
        text_bytes: usize,
        attrs: Vec<u8>,
        scores: Vec<f32>,
    ) -> Option<Vocab> {
        let mut text = Vec::with_capacity(text_bytes);
        let mut text_end: Vec<u32> = Vec::with_capacity(n_tokens);
        let mut index = IdTable::with_capacity(n_tokens);
        for (id, t) in texts.enumerate() {
            let start = text.len();
            if t.is_empty() {
                use core::fmt::Write;
                let mut s = alloc::string::String::new();
                let _ = write!(s, "[EMPTY_{id}]");
                text.extend_from_slice(s.as_bytes());
            } else {
                text.extend_from_slice(t);
            }
            text_end.push(u32::try_from(text.len()).ok()?);
            // Indexed as it is copied; a text seen before compares against the copies so far.
            let t = &text[start..];
            let id = u32::try_from(id).ok()?;
            index.insert(hash_bytes(t), id, false, |other| {
                let other = other as usize;
                let from = if other == 0 {
                    0
                } else {
                    text_end[other - 1] as usize
                };
                &text[from..text_end[other] as usize] == t
            });
        }
        Some(Vocab {
            text,
            text_end,
            attrs,
            scores,
            index,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.text_end.len()
    }

    /// The token's text as stored in the vocabulary (`▁` for spaces in SentencePiece, the
    /// byte-level alphabet in GPT-2 BPE). `id` must be below `len()`.
    pub(crate) fn text(&self, id: u32) -> &[u8] {
        let i = id as usize;
        let start = if i == 0 {
            0
        } else {
            self.text_end[i - 1] as usize
        };
        &self.text[start..self.text_end[i] as usize]
    }

    /// The id whose text is exactly `text`.
    pub(crate) fn find(&self, text: &[u8]) -> Option<u32> {
        self.index
            .find(hash_bytes(text), |id| self.text(id) == text)
    }

    pub(crate) fn attr(&self, id: u32) -> u8 {
        self.attrs[id as usize]
    }

    pub(crate) fn bytes_used(&self) -> usize {
        self.text.len()
            + self.text_end.len() * 4
            + self.attrs.len()
            + self.scores.len() * 4
            + self.index.bytes_used()
    }
}
