//! Tokenizers built from small hand-made GGUF files, so the algorithms are checked without a
//! model on disk (the real vocabularies are checked against llama.cpp in tests/tests/tokenizer.rs).

use super::*;
use alloc::format;
use alloc::string::String;
use alloc::vec;

/// A metadata value for the test GGUF writer.
enum Kv {
    U32(u32),
    Bool(bool),
    Str(String),
    Strs(Vec<String>),
    F32s(Vec<f32>),
    I32s(Vec<i32>),
}

/// A GGUF v3 file with these metadata entries and no tensors.
fn gguf_bytes(kvs: &[(&str, Kv)]) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    let mut out = Vec::new();
    out.extend_from_slice(b"GGUF");
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
    for (key, v) in kvs {
        string(&mut out, key);
        let array_header = |out: &mut Vec<u8>, elem: u32, n: usize| {
            out.extend_from_slice(&9u32.to_le_bytes());
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(n as u64).to_le_bytes());
        };
        match v {
            Kv::U32(x) => {
                out.extend_from_slice(&4u32.to_le_bytes());
                out.extend_from_slice(&x.to_le_bytes());
            }
            Kv::Bool(b) => {
                out.extend_from_slice(&7u32.to_le_bytes());
                out.push(*b as u8);
            }
            Kv::Str(s) => {
                out.extend_from_slice(&8u32.to_le_bytes());
                string(&mut out, s);
            }
            Kv::Strs(v) => {
                array_header(&mut out, 8, v.len());
                for s in v {
                    string(&mut out, s);
                }
            }
            Kv::F32s(v) => {
                array_header(&mut out, 6, v.len());
                for x in v {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
            Kv::I32s(v) => {
                array_header(&mut out, 5, v.len());
                for x in v {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
    }
    out
}

fn build(kvs: &[(&str, Kv)]) -> Result<Tokenizer, TokenizerError> {
    let bytes = gguf_bytes(kvs);
    let gguf = Gguf::parse(&bytes).expect("test GGUF parses");
    Tokenizer::from_gguf(&gguf)
}

/// A SentencePiece vocabulary: <unk>, <s>, </s>, 256 byte tokens, then a few pieces.
fn spm_vocab() -> Tokenizer {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    for b in 0..256 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let pieces = [
        ("▁", -1.0),
        ("a", -2.0),
        ("b", -2.0),
        ("ab", -0.5),
        ("▁ab", -0.1),
        ("▁a", -3.0),
    ];
    let mut scores = vec![0.0; tokens.len()];
    for (p, s) in pieces {
        tokens.push(p.into());
        types.push(1);
        scores.push(s);
    }
    build(&[
        ("tokenizer.ggml.model", Kv::Str("llama".into())),
        ("tokenizer.ggml.tokens", Kv::Strs(tokens)),
        ("tokenizer.ggml.scores", Kv::F32s(scores)),
        ("tokenizer.ggml.token_type", Kv::I32s(types)),
    ])
    .expect("SentencePiece test vocabulary builds")
}

#[test]
fn spm_merges_by_score_and_falls_back_to_bytes() {
    let tok = spm_vocab();
    let id = |t: &str| tok.token_id(t.as_bytes()).unwrap();
    let byte = |b: u8| 3 + b as u32;
    let mut ids = Vec::new();
    // " ab abc": the space prefix is added, "c" has no piece and becomes <0x63>.
    tok.encode("ab abc", true, true, &mut ids);
    assert_eq!(ids, [1, id("▁ab"), id("▁ab"), byte(b'c')]);
    // A character outside the vocabulary: one byte token per UTF-8 byte.
    ids.clear();
    tok.encode("é", false, false, &mut ids);
    assert_eq!(ids, [id("▁"), byte(0xC3), byte(0xA9)]);
    // Control tokens only with parse_special; a text after one gets the space prefix again.
    ids.clear();
    tok.encode("</s>ab", false, true, &mut ids);
    assert_eq!(ids, [2, id("▁ab")]);
    // Defaults of the "llama" model when the metadata names none.
    assert_eq!((tok.bos(), tok.eos()), (Some(1), Some(2)));
    assert!(tok.adds_bos() && tok.is_eog(2) && !tok.is_eog(1));
    assert_eq!(tok.token_bytes(id("▁ab")), b" ab");
    assert_eq!(tok.token_bytes(byte(0xC3)), [0xC3]);
}

fn bpe_vocab(pre: &str) -> Tokenizer {
    let tokens = [
        "h",
        "e",
        "l",
        "o",
        "Ġ",
        "w",
        "r",
        "d",
        "ll",
        "he",
        "llo",
        "hello",
        "Ġw",
        "or",
        "Ġwor",
        "ld",
        "<|endoftext|>",
    ];
    let mut types = vec![1; tokens.len()];
    types[tokens.len() - 1] = 3;
    let merges = ["l l", "h e", "ll o", "he llo", "Ġ w", "o r", "Ġw or", "l d"];
    build(&[
        ("tokenizer.ggml.model", Kv::Str("gpt2".into())),
        ("tokenizer.ggml.pre", Kv::Str(pre.into())),
        (
            "tokenizer.ggml.tokens",
            Kv::Strs(tokens.iter().map(|&s| s.into()).collect()),
        ),
        ("tokenizer.ggml.token_type", Kv::I32s(types)),
        (
            "tokenizer.ggml.merges",
            Kv::Strs(merges.iter().map(|&s| s.into()).collect()),
        ),
        ("tokenizer.ggml.eos_token_id", Kv::U32(16)),
        ("tokenizer.ggml.add_bos_token", Kv::Bool(false)),
    ])
    .expect("BPE test vocabulary builds")
}

#[test]
fn bpe_merges_by_rank_within_words() {
    for pre in ["qwen2", "llama-bpe", "gpt-2", "default"] {
        let tok = bpe_vocab(pre);
        let id = |t: &str| tok.token_id(t.as_bytes()).unwrap();
        let mut ids = Vec::new();
        tok.encode("hello world<|endoftext|>", true, true, &mut ids);
        assert_eq!(
            ids,
            [id("hello"), id("Ġwor"), id("ld"), 16],
            "pre-tokenizer {pre}"
        );
        assert_eq!(tok.token_bytes(id("Ġwor")), b" wor");
        assert!(tok.is_eog(16));
    }
}

#[test]
fn missing_metadata_names_the_key() {
    let err = build(&[("general.architecture", Kv::Str("llama".into()))])
        .err()
        .expect("no tokenizer metadata must be an error");
    assert_eq!(
        err,
        TokenizerError::MissingKey {
            key: KEY_MODEL,
            needed_for: "choosing the tokenizer"
        }
    );
    let msg = format!("{err}");
    assert!(
        msg.contains("tokenizer.ggml.model") && msg.contains("convert"),
        "{msg}"
    );

    let err = build(&[
        ("tokenizer.ggml.model", Kv::Str("gpt2".into())),
        ("tokenizer.ggml.tokens", Kv::Strs(vec!["a".into()])),
    ])
    .err()
    .expect("a gpt2 tokenizer without merges must be an error");
    assert!(matches!(
        err,
        TokenizerError::MissingKey {
            key: KEY_MERGES,
            ..
        }
    ));

    let err = build(&[
        ("tokenizer.ggml.model", Kv::Str("gpt2".into())),
        ("tokenizer.ggml.pre", Kv::Str("no-such-pre".into())),
        ("tokenizer.ggml.tokens", Kv::Strs(vec!["a".into()])),
        ("tokenizer.ggml.merges", Kv::Strs(vec![])),
    ])
    .err()
    .expect("an unknown pre-tokenizer must be an error");
    assert_eq!(
        err,
        TokenizerError::UnknownPre {
            found: "no-such-pre".into()
        }
    );

    let err = build(&[
        ("tokenizer.ggml.model", Kv::Str("llama".into())),
        (
            "tokenizer.ggml.tokens",
            Kv::Strs(vec!["a".into(), "b".into()]),
        ),
        ("tokenizer.ggml.scores", Kv::F32s(vec![0.0])),
    ])
    .err()
    .expect("too few scores must be an error");
    assert!(matches!(
        err,
        TokenizerError::ShortArray {
            found: 1,
            n_tokens: 2,
            ..
        }
    ));
}
