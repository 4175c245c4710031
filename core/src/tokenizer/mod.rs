//! Tokenizers built from GGUF metadata, giving the same token ids as llama.cpp.
//!
//! Two families:
//! - SentencePiece-style ("llama" in `tokenizer.ggml.model`; Llama 2, Gemma): merges by token
//!   score over UTF-8 characters, `<0xXX>` byte fallback, spaces written as U+2581 (see `spm`);
//! - GPT-2 byte-level BPE ("gpt2"; Qwen2/2.5/3, Llama 3): a pre-tokenizer cuts the text into
//!   words (see `pretokenize`), then merges by rank from `tokenizer.ggml.merges` (see `bpe`).
//!
//! Both first cut special tokens out of the text (`special::partition`): user-defined tokens
//! always, control tokens when `parse_special` is on.
//!
//! Decoding: [`Tokenizer::token_bytes`] gives the bytes a token stands for; a [`StreamDecoder`]
//! turns a stream of ids into text without ever splitting a UTF-8 character.

mod bpe;
mod error;
mod pretokenize;
mod special;
mod spm;
mod stream;
mod table;
mod unicode;
mod unicode_tables;
mod vocab;

pub use error::TokenizerError;
pub use pretokenize::{PreTokenizer, PreTokenizerSetup};
pub use special::SpecialIds;
pub use stream::StreamDecoder;
pub use vocab::attr;

use crate::gguf::{Gguf, Value};
use alloc::string::ToString;
use alloc::vec::Vec;
use special::Fragment;
use vocab::Vocab;

/// Which algorithm turns text into ids.
pub enum TokenizerKind {
    /// SentencePiece-style, by token score.
    Spm,
    /// GPT-2 byte-level BPE, by merge rank, after a pre-tokenizer.
    Bpe {
        pre: PreTokenizer,
        /// Words that are whole tokens skip the merges (Llama 3).
        ignore_merges: bool,
    },
}

pub struct Tokenizer {
    kind: TokenizerKind,
    vocab: Vocab,
    merges: Option<bpe::MergeTable>,
    alphabet: unicode::ByteAlphabet,
    ids: SpecialIds,
    /// End-of-generation ids, sorted.
    eog: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
    /// SentencePiece: put a space before text that starts the input or follows a special token.
    add_space_prefix: bool,
    /// Control, user-defined and unknown tokens, in the order they are cut out of a text.
    special_order: Vec<u32>,
    /// SentencePiece byte fallback: the `<0xXX>` token of each byte.
    byte_tokens: [Option<u32>; 256],
    /// What each token decodes to, back to back (see [`Tokenizer::token_bytes`]).
    pieces: Vec<u8>,
    piece_end: Vec<u32>,
}

pub const KEY_MODEL: &str = "tokenizer.ggml.model";
pub const KEY_PRE: &str = "tokenizer.ggml.pre";
pub const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
pub const KEY_SCORES: &str = "tokenizer.ggml.scores";
pub const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
pub const KEY_MERGES: &str = "tokenizer.ggml.merges";

impl Tokenizer {
    /// Builds the tokenizer that the file's `tokenizer.ggml.*` metadata describes.
    pub fn from_gguf(gguf: &Gguf) -> Result<Tokenizer, TokenizerError> {
        let model = get_str(gguf, KEY_MODEL)?.ok_or(TokenizerError::MissingKey {
            key: KEY_MODEL,
            needed_for: "choosing the tokenizer",
        })?;
        let pre_name = get_str(gguf, KEY_PRE)?;

        let tokens = get_array(gguf, KEY_TOKENS)?.ok_or(TokenizerError::MissingKey {
            key: KEY_TOKENS,
            needed_for: "the vocabulary",
        })?;
        let token_texts = tokens.string_bytes().ok_or(TokenizerError::WrongType {
            key: KEY_TOKENS,
            expected: "array of strings",
        })?;
        let n_tokens = tokens.len();
        if n_tokens == 0 || n_tokens > u32::MAX as usize / 2 {
            return Err(TokenizerError::BadVocabSize { found: n_tokens });
        }

        let scores = match get_array(gguf, KEY_SCORES)? {
            None => Vec::new(),
            Some(a) => {
                let scores: Vec<f32> = if let Some(f) = a.f32s() {
                    f.collect()
                } else if let Some(i) = a.ints() {
                    i.map(|v| v as f32).collect()
                } else {
                    return Err(TokenizerError::WrongType {
                        key: KEY_SCORES,
                        expected: "array of f32 or i32",
                    });
                };
                check_len(KEY_SCORES, scores.len(), n_tokens)?;
                scores
            }
        };

        let attrs = match get_array(gguf, KEY_TOKEN_TYPE)? {
            None => alloc::vec![attr::NORMAL; n_tokens],
            Some(a) => {
                let types = a.ints().ok_or(TokenizerError::WrongType {
                    key: KEY_TOKEN_TYPE,
                    expected: "array of i32",
                })?;
                check_len(KEY_TOKEN_TYPE, types.len(), n_tokens)?;
                types
                    .take(n_tokens)
                    .map(vocab::attr_from_token_type)
                    .collect()
            }
        };

        // The texts take the array's bytes less an 8-byte length each.
        let text_bytes = tokens.encoded_len().saturating_sub(8 * n_tokens);
        let mut vocab = Vocab::new(token_texts, n_tokens, text_bytes, attrs, scores)
            .ok_or(TokenizerError::TooLarge { key: KEY_TOKENS })?;

        // Defaults per family, then the metadata (the reference's order).
        let mut ids = SpecialIds::default();
        let (kind, merges, mut add_bos, mut add_space_prefix) = match model {
            "llama" => {
                ids.bos = Some(1);
                ids.eos = Some(2);
                ids.unk = Some(0);
                (TokenizerKind::Spm, None, true, true)
            }
            "gpt2" => {
                let name = pre_name.unwrap_or("default");
                let setup =
                    PreTokenizer::from_name(name).ok_or_else(|| TokenizerError::UnknownPre {
                        found: name.to_string(),
                    })?;
                let merges = get_array(gguf, KEY_MERGES)?.ok_or(TokenizerError::MissingKey {
                    key: KEY_MERGES,
                    needed_for: "BPE merges of a \"gpt2\" tokenizer",
                })?;
                let merge_texts = merges.string_bytes().ok_or(TokenizerError::WrongType {
                    key: KEY_MERGES,
                    expected: "array of strings",
                })?;
                let text_bytes = merges.encoded_len().saturating_sub(8 * merges.len());
                let table = bpe::MergeTable::new(merge_texts, merges.len(), text_bytes)
                    .ok_or(TokenizerError::TooLarge { key: KEY_MERGES })?;
                // The reference's placeholder ids for BPE; the metadata normally overrides them.
                ids.bos = Some(11);
                ids.eos = Some(11);
                let kind = TokenizerKind::Bpe {
                    pre: setup.pre,
                    ignore_merges: setup.ignore_merges,
                };
                (kind, Some(table), setup.add_bos_default, false)
            }
            other => {
                return Err(TokenizerError::UnsupportedModel {
                    found: other.to_string(),
                })
            }
        };
        if let TokenizerKind::Spm = kind {
            if let Some(v) = get_bool(gguf, "tokenizer.ggml.add_space_prefix")? {
                add_space_prefix = v;
            }
        }

        // A default id past the vocabulary is dropped; an id from the metadata past it is
        // ignored (the reference warns and keeps the default).
        let n = n_tokens as u64;
        for slot in [&mut ids.bos, &mut ids.eos, &mut ids.unk] {
            if slot.is_some_and(|id| id as u64 >= n) {
                *slot = None;
            }
        }
        type Slot = fn(&mut SpecialIds) -> &mut Option<u32>;
        let id_keys: [(&'static str, Slot); 17] = [
            ("tokenizer.ggml.bos_token_id", |s| &mut s.bos),
            ("tokenizer.ggml.eos_token_id", |s| &mut s.eos),
            ("tokenizer.ggml.eot_token_id", |s| &mut s.eot),
            ("tokenizer.ggml.eom_token_id", |s| &mut s.eom),
            ("tokenizer.ggml.unknown_token_id", |s| &mut s.unk),
            ("tokenizer.ggml.seperator_token_id", |s| &mut s.sep),
            ("tokenizer.ggml.padding_token_id", |s| &mut s.pad),
            ("tokenizer.ggml.mask_token_id", |s| &mut s.mask),
            ("tokenizer.ggml.fim_pre_token_id", |s| &mut s.fim_pre),
            ("tokenizer.ggml.fim_suf_token_id", |s| &mut s.fim_suf),
            ("tokenizer.ggml.fim_mid_token_id", |s| &mut s.fim_mid),
            ("tokenizer.ggml.fim_pad_token_id", |s| &mut s.fim_pad),
            ("tokenizer.ggml.fim_rep_token_id", |s| &mut s.fim_rep),
            ("tokenizer.ggml.fim_sep_token_id", |s| &mut s.fim_sep),
            // Older names of the FIM keys.
            ("tokenizer.ggml.prefix_token_id", |s| &mut s.fim_pre),
            ("tokenizer.ggml.suffix_token_id", |s| &mut s.fim_suf),
            ("tokenizer.ggml.middle_token_id", |s| &mut s.fim_mid),
        ];
        for (key, slot) in id_keys {
            if let Some(id) = get_u64(gguf, key)? {
                if id < n {
                    *slot(&mut ids) = Some(id as u32);
                }
            }
        }
        if let Some(v) = get_bool(gguf, "tokenizer.ggml.add_bos_token")? {
            add_bos = v;
        }
        let add_eos = get_bool(gguf, "tokenizer.ggml.add_eos_token")?.unwrap_or(false);

        let eog = special::resolve_roles(&mut vocab, &mut ids);
        if let Some(name) = get_str(gguf, "general.name")? {
            special::strip_by_model_name(&mut vocab, name);
        }
        let special_order = special::matching_order(&vocab);

        let mut byte_tokens = [None; 256];
        if let TokenizerKind::Spm = kind {
            for (b, slot) in byte_tokens.iter_mut().enumerate() {
                let hex = b"0123456789ABCDEF";
                let name = [b'<', b'0', b'x', hex[b >> 4], hex[b & 15], b'>'];
                *slot = vocab.find(&name).or_else(|| vocab.find(&[b as u8]));
            }
        }

        let mut tok = Tokenizer {
            kind,
            vocab,
            merges,
            alphabet: unicode::ByteAlphabet::new(),
            ids,
            eog,
            add_bos,
            add_eos,
            add_space_prefix,
            special_order,
            byte_tokens,
            pieces: Vec::new(),
            piece_end: Vec::new(),
        };
        tok.build_pieces();
        Ok(tok)
    }

    /// Appends the ids of `text` to `out`.
    ///
    /// `add_special`: add BOS/EOS as the model's metadata asks (`tokenizer.ggml.add_bos_token`,
    /// `add_eos_token`). `parse_special`: a control token's text in `text` (`<|im_start|>`)
    /// becomes that token; otherwise it is tokenized as plain text. User-defined tokens are
    /// matched either way, as in the reference.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool, out: &mut Vec<u32>) {
        self.encode_bytes(text.as_bytes(), add_special, parse_special, out)
    }

    /// As [`encode`](Self::encode), for text that may not be valid UTF-8 (a file's bytes).
    /// Invalid bytes are handled as the reference handles them: SentencePiece writes them
    /// through byte-fallback tokens, byte-level BPE reads each as U+FFFD.
    pub fn encode_bytes(
        &self,
        text: &[u8],
        add_special: bool,
        parse_special: bool,
        out: &mut Vec<u32>,
    ) {
        let mut fragments = Vec::new();
        special::partition(
            &self.vocab,
            &self.special_order,
            text,
            parse_special,
            &mut fragments,
        );
        if add_special && self.add_bos {
            out.extend(self.ids.bos);
        }
        match self.kind {
            TokenizerKind::Spm => self.encode_spm(text, &fragments, out),
            TokenizerKind::Bpe { pre, ignore_merges } => {
                self.encode_bpe(text, &fragments, pre, ignore_merges, out)
            }
        }
        if add_special && self.add_eos {
            out.extend(self.ids.eos);
        }
    }

    fn encode_spm(&self, text: &[u8], fragments: &[Fragment], out: &mut Vec<u32>) {
        let mut escaped = Vec::new();
        // The first text gets the space prefix too, whether or not a BOS precedes it.
        let mut after_special = true;
        for &frag in fragments {
            match frag {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Fragment::Text(start, end) => {
                    escaped.clear();
                    if self.add_space_prefix && after_special {
                        escaped.extend_from_slice(SPM_SPACE);
                    }
                    for &b in &text[start..end] {
                        if b == b' ' {
                            escaped.extend_from_slice(SPM_SPACE);
                        } else {
                            escaped.push(b);
                        }
                    }
                    spm::encode(&self.vocab, &self.byte_tokens, &escaped, out);
                    after_special = false;
                }
            }
        }
    }

    fn encode_bpe(
        &self,
        text: &[u8],
        fragments: &[Fragment],
        pre: PreTokenizer,
        ignore_merges: bool,
        out: &mut Vec<u32>,
    ) {
        let Some(merges) = &self.merges else {
            return;
        };
        let mut cps = Vec::new();
        let mut flags = Vec::new();
        let mut word_lens = Vec::new();
        let mut word = Vec::new();
        let mut utf8 = Vec::with_capacity(4);
        let mut scratch = bpe::WordScratch::default();
        for &frag in fragments {
            let (start, end) = match frag {
                Fragment::Token(id) => {
                    out.push(id);
                    continue;
                }
                Fragment::Text(start, end) => (start, end),
            };
            cps.clear();
            unicode::decode_lenient(&text[start..end], &mut cps);
            pretokenize::flags_for(&cps, &mut flags);
            word_lens.clear();
            pre.split(&cps, &flags, &mut word_lens);
            let mut at = 0;
            for &len in &word_lens {
                word.clear();
                for &cp in &cps[at..at + len] {
                    utf8.clear();
                    unicode::push_utf8(cp, &mut utf8);
                    for &b in &utf8 {
                        word.extend_from_slice(self.alphabet.encode(b));
                    }
                }
                at += len;
                bpe::encode_word(&self.vocab, merges, ignore_merges, &word, &mut scratch, out);
            }
        }
    }

    /// Works out what each token decodes to, once, so `token_bytes` is a slice lookup.
    fn build_pieces(&mut self) {
        let mut pieces = Vec::with_capacity(self.vocab.bytes_used() / 2);
        let mut piece_end = Vec::with_capacity(self.vocab.len());
        for id in 0..self.vocab.len() as u32 {
            let text = self.vocab.text(id);
            let a = self.vocab.attr(id);
            if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
                pieces.extend_from_slice(text);
            } else if a & attr::NORMAL != 0 {
                match self.kind {
                    TokenizerKind::Spm => unescape_spm(text, &mut pieces),
                    TokenizerKind::Bpe { .. } => {
                        unmap_byte_level(&self.alphabet, text, &mut pieces)
                    }
                }
            } else if a & attr::BYTE != 0 {
                match parse_byte_token(text) {
                    Some(b) => pieces.push(b),
                    None => pieces.extend_from_slice(text),
                }
            }
            // Unused and undefined tokens decode to nothing, as in the reference.
            piece_end.push(pieces.len() as u32);
        }
        self.pieces = pieces;
        self.piece_end = piece_end;
    }

    /// The bytes token `id` stands for: spaces for SentencePiece's U+2581, the byte of a
    /// `<0xXX>` token, the original bytes of a byte-level BPE token, the text itself for
    /// control and user-defined tokens (check [`is_control`](Self::is_control) to hide those).
    /// Possibly part of a UTF-8 character: use a [`StreamDecoder`] to make text. Empty for an
    /// id outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        let i = id as usize;
        if i >= self.piece_end.len() {
            return &[];
        }
        let start = if i == 0 {
            0
        } else {
            self.piece_end[i - 1] as usize
        };
        &self.pieces[start..self.piece_end[i] as usize]
    }

    /// The token's text as the vocabulary stores it (U+2581 for spaces, byte-level alphabet).
    pub fn token_text(&self, id: u32) -> Option<&[u8]> {
        ((id as usize) < self.vocab.len()).then(|| self.vocab.text(id))
    }

    /// The id whose vocabulary text is exactly `text` (`b"<|im_start|>"`).
    pub fn token_id(&self, text: &[u8]) -> Option<u32> {
        self.vocab.find(text)
    }

    /// The token's attributes, a set of [`attr`] bits (0 outside the vocabulary).
    pub fn token_attr(&self, id: u32) -> u8 {
        self.vocab.attrs.get(id as usize).copied().unwrap_or(0)
    }

    pub fn n_vocab(&self) -> usize {
        self.vocab.len()
    }
    pub fn kind(&self) -> &TokenizerKind {
        &self.kind
    }
    pub fn bos(&self) -> Option<u32> {
        self.ids.bos
    }
    pub fn eos(&self) -> Option<u32> {
        self.ids.eos
    }
    pub fn eot(&self) -> Option<u32> {
        self.ids.eot
    }
    pub fn special_ids(&self) -> &SpecialIds {
        &self.ids
    }
    /// Whether `encode(.., add_special = true, ..)` puts BOS first / EOS last.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }
    pub fn adds_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether `id` ends generation: EOS, end of turn, end of message and the tokens the
    /// reference recognises by text (`<|im_end|>`, `<end_of_turn>`, `<|endoftext|>`, ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// All end-of-generation ids, sorted.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// Control tokens (BOS, EOS, chat markers) are not text: hide them when printing.
    pub fn is_control(&self, id: u32) -> bool {
        self.token_attr(id) & attr::CONTROL != 0
    }

    /// Heap bytes held by the tokenizer (vocabulary, index, merges, decoded pieces).
    pub fn bytes_used(&self) -> usize {
        let merges = self.merges.as_ref().map_or(0, |m| m.bytes_used());
        self.vocab.bytes_used()
            + merges
            + self.pieces.len()
            + self.piece_end.len() * 4
            + self.special_order.len() * 4
    }
}

/// U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's stand-in for a space.
const SPM_SPACE: &[u8] = "\u{2581}".as_bytes();

fn unescape_spm(text: &[u8], out: &mut Vec<u8>) {
    // Copied in runs between the spaces: this runs for every token at load.
    let mut rest = text;
    while let Some(i) = rest.iter().position(|&b| b == SPM_SPACE[0]) {
        if rest[i..].starts_with(SPM_SPACE) {
            out.extend_from_slice(&rest[..i]);
            out.push(b' ');
            rest = &rest[i + SPM_SPACE.len()..];
        } else {
            out.extend_from_slice(&rest[..=i]);
            rest = &rest[i + 1..];
        }
    }
    out.extend_from_slice(rest);
}

/// Byte-level BPE text back to bytes. A character outside the byte alphabet (none in real
/// vocabularies) is kept as its UTF-8; the reference writes an `[UNK_BYTE_..]` marker instead.
fn unmap_byte_level(alphabet: &unicode::ByteAlphabet, text: &[u8], out: &mut Vec<u8>) {
    let s = match core::str::from_utf8(text) {
        Ok(s) => s,
        Err(_) => {
            out.extend_from_slice(text);
            return;
        }
    };
    for c in s.chars() {
        match alphabet.decode(c as u32) {
            Some(b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

/// `<0xAB>` -> 0xAB.
fn parse_byte_token(text: &[u8]) -> Option<u8> {
    let hex = text.strip_prefix(b"<0x")?.strip_suffix(b">")?;
    if hex.len() != 2 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16);
    Some((digit(hex[0])? * 16 + digit(hex[1])?) as u8)
}

fn get_str<'a>(gguf: &Gguf<'a>, key: &'static str) -> Result<Option<&'a str>, TokenizerError> {
    match gguf.get(key) {
        None => Ok(None),
        Some(Value::Str(s)) => Ok(Some(s)),
        Some(_) => Err(TokenizerError::WrongType {
            key,
            expected: "string",
        }),
    }
}

fn get_array<'a>(
    gguf: &Gguf<'a>,
    key: &'static str,
) -> Result<Option<crate::gguf::ArrayRef<'a>>, TokenizerError> {
    match gguf.get(key) {
        None => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(_) => Err(TokenizerError::WrongType {
            key,
            expected: "array",
        }),
    }
}

fn get_bool(gguf: &Gguf, key: &'static str) -> Result<Option<bool>, TokenizerError> {
    match gguf.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(b)),
        Some(_) => Err(TokenizerError::WrongType {
            key,
            expected: "bool",
        }),
    }
}

fn get_u64(gguf: &Gguf, key: &'static str) -> Result<Option<u64>, TokenizerError> {
    match gguf.get(key) {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or(TokenizerError::WrongType {
            key,
            expected: "non-negative integer",
        }),
    }
}

fn check_len(key: &'static str, found: usize, n_tokens: usize) -> Result<(), TokenizerError> {
    if found < n_tokens {
        return Err(TokenizerError::ShortArray {
            key,
            found,
            n_tokens,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
