use alloc::string::String;
use core::fmt;

/// Why a tokenizer could not be built from a file's metadata. `Display` says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerError {
    /// A `tokenizer.ggml.*` key that this tokenizer needs is absent.
    MissingKey {
        key: &'static str,
        needed_for: &'static str,
    },
    WrongType {
        key: &'static str,
        expected: &'static str,
    },
    /// A per-token array (scores, token types) has fewer entries than the vocabulary.
    ShortArray {
        key: &'static str,
        found: usize,
        n_tokens: usize,
    },
    BadVocabSize {
        found: usize,
    },
    /// The strings of an array add up to 4 GiB or more.
    TooLarge {
        key: &'static str,
    },
    /// `tokenizer.ggml.model` names a tokenizer smolrun does not implement.
    UnsupportedModel {
        found: String,
    },
    /// `tokenizer.ggml.pre` names a pre-tokenizer smolrun does not implement.
    UnknownPre {
        found: String,
    },
}

impl fmt::Display for TokenizerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use TokenizerError::*;
        match self {
            MissingKey { key, needed_for } => write!(
                f,
                "metadata key '{key}' is missing; it is needed for {needed_for}. The file has no \
                 (complete) tokenizer: re-convert the model with llama.cpp's convert_hf_to_gguf.py, \
                 which writes the tokenizer.ggml.* keys"
            ),
            WrongType { key, expected } => write!(
                f,
                "metadata key '{key}' should be {expected} but has another type; the file is corrupt \
                 or was written by a converter smolrun does not know (re-convert it)"
            ),
            ShortArray { key, found, n_tokens } => write!(
                f,
                "metadata key '{key}' has {found} entries but the vocabulary has {n_tokens} tokens; \
                 the file is corrupt (re-download or re-convert it)"
            ),
            BadVocabSize { found } => write!(
                f,
                "tokenizer.ggml.tokens has {found} tokens, expected 1 to 2^31; the file is corrupt"
            ),
            TooLarge { key } => write!(
                f,
                "metadata key '{key}' holds 4 GiB or more of text, far beyond any real tokenizer; \
                 the file is corrupt"
            ),
            UnsupportedModel { found } => write!(
                f,
                "tokenizer.ggml.model is \"{found}\"; smolrun implements \"llama\" (SentencePiece) \
                 and \"gpt2\" (byte-level BPE) tokenizers only, so this model cannot be run"
            ),
            UnknownPre { found } => write!(
                f,
                "tokenizer.ggml.pre is \"{found}\", a pre-tokenizer smolrun does not implement \
                 (it knows qwen2, qwen35, llama-bpe/llama3, gpt-2, starcoder and default \
                 families); this model cannot be tokenized correctly"
            ),
        }
    }
}
