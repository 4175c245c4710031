//! Token ids against llama.cpp's (tests/golden/<model>/tokenize.json), decoding back to text,
//! and the special-token roles, on the real models.
//!
//! The models are looked for in $SMOLRUN_MODELS or ~/.cache/smolrun/models (tools/fetch-models.sh
//! puts them there). The golden files are looked for in $SMOLRUN_GOLDEN or tests/golden.

use smolrun_core::gguf::Gguf;
use smolrun_core::tokenizer::{attr, StreamDecoder, Tokenizer, TokenizerKind};
use smolrun_linux::MappedFile;
use std::path::PathBuf;

fn models_dir() -> PathBuf {
    match std::env::var_os("SMOLRUN_MODELS") {
        Some(d) => PathBuf::from(d),
        None => {
            let home = std::env::var_os("HOME").unwrap_or_default();
            PathBuf::from(home).join(".cache/smolrun/models")
        }
    }
}

fn golden_dir() -> PathBuf {
    match std::env::var_os("SMOLRUN_GOLDEN") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden"),
    }
}

/// Maps the model file, or fails saying how to get it.
fn map_model(file: &str) -> MappedFile {
    let path = models_dir().join(file);
    if !path.exists() {
        panic!(
            "model {} is missing: run tools/fetch-models.sh (or set SMOLRUN_MODELS)",
            path.display()
        );
    }
    MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn load(map: &MappedFile) -> Tokenizer {
    let gguf = Gguf::parse(map.bytes()).unwrap_or_else(|e| panic!("{}: {e}", map.path().display()));
    Tokenizer::from_gguf(&gguf).unwrap_or_else(|e| panic!("{}: {e}", map.path().display()))
}

struct Case {
    text: String,
    add_special: bool,
    parse_special: bool,
    ids: Vec<u32>,
}

fn golden_cases(model: &str) -> Vec<Case> {
    let path = golden_dir().join(model).join("tokenize.json");
    let json = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; regenerate the golden data with tools/oracle/regen.sh",
            path.display()
        )
    });
    let v: serde_json::Value =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let bad = |what: &str| -> ! { panic!("{}: {what}", path.display()) };
    let cases = v["cases"]
        .as_array()
        .unwrap_or_else(|| bad("no \"cases\" array"));
    cases
        .iter()
        .map(|c| Case {
            text: c["text"]
                .as_str()
                .unwrap_or_else(|| bad("case without text"))
                .to_string(),
            add_special: c["add_special"]
                .as_bool()
                .unwrap_or_else(|| bad("add_special")),
            parse_special: c["parse_special"]
                .as_bool()
                .unwrap_or_else(|| bad("parse_special")),
            ids: c["ids"]
                .as_array()
                .unwrap_or_else(|| bad("case without ids"))
                .iter()
                .map(|x| x.as_u64().unwrap_or_else(|| bad("id not an integer")) as u32)
                .collect(),
        })
        .collect()
}

/// Encodes every golden case; fails listing each mismatch.
fn check_against_golden(model: &str, file: &str) {
    let map = map_model(file);
    let tok = load(&map);
    let cases = golden_cases(model);
    assert!(!cases.is_empty(), "{model}: the golden file has no cases");
    let mut mismatches = Vec::new();
    for c in &cases {
        let mut ids = Vec::new();
        tok.encode(&c.text, c.add_special, c.parse_special, &mut ids);
        if ids != c.ids {
            mismatches.push(format!(
                "  text {:?} (add_special {}, parse_special {})\n    llama.cpp {:?}\n    smolrun   {:?}",
                c.text, c.add_special, c.parse_special, c.ids, ids
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{model}: {} of {} cases differ from llama.cpp:\n{}",
        mismatches.len(),
        cases.len(),
        mismatches.join("\n")
    );
}

/// Decodes ids one at a time through a StreamDecoder; checks that no piece of output is ever
/// invalid (it is a String) and that the whole is `text`.
fn assert_round_trip(tok: &Tokenizer, text: &str) {
    let mut ids = Vec::new();
    tok.encode(text, false, false, &mut ids);
    let mut dec = StreamDecoder::new();
    let mut out = String::new();
    for &id in &ids {
        dec.push(tok, id, &mut out);
    }
    assert!(
        !dec.has_pending(),
        "{text:?}: a character was left unfinished"
    );
    dec.finish(&mut out);
    assert_eq!(out, text, "decode(encode(text)) differs; ids {ids:?}");
}

const GEMMA: (&str, &str) = ("gemma3-270m", "gemma-3-270m-q4_k_m.gguf");
const QWEN_05B: (&str, &str) = (
    "qwen2.5-coder-0.5b",
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
);
const QWEN_15B: (&str, &str) = (
    "qwen2.5-coder-1.5b",
    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
);

#[test]
fn gemma3_ids_match_llama_cpp() {
    check_against_golden(GEMMA.0, GEMMA.1);
}

#[test]
fn qwen25_coder_05b_ids_match_llama_cpp() {
    check_against_golden(QWEN_05B.0, QWEN_05B.1);
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B, 1.1 GB; minutes of CPU)"]
fn qwen25_coder_15b_ids_match_llama_cpp() {
    check_against_golden(QWEN_15B.0, QWEN_15B.1);
}

/// The synthetic Llama file carries Qwen's vocabulary with Llama 3's "llama-bpe" pre-tokenizer
/// and BOS, the one llama.cpp setup of those that no small real model here has. It is not
/// committed; tools/oracle/synth_model.py writes it (deterministically) when it is missing.
#[test]
fn synthetic_llama_bpe_ids_match_llama_cpp() {
    let file = "synthetic-llama.gguf";
    let path = models_dir().join(file);
    if !path.exists() {
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tools/oracle/synth_model.py");
        let status = std::process::Command::new("python3")
            .arg(&script)
            .arg("llama")
            .arg("--out")
            .arg(models_dir())
            .status();
        assert!(
            matches!(status, Ok(s) if s.success()) && path.exists(),
            "{} is missing and `python3 {} llama` did not write it ({status:?}); \
             run tools/fetch-models.sh first (the script copies the Qwen tokenizer)",
            path.display(),
            script.display()
        );
    }
    check_against_golden("synthetic-llama", file);
}

/// The synthetic SmolLM3 file: Qwen's vocabulary with "llama-bpe" (SmolLM3 has Llama 3's
/// tokenizer) and no BOS.
#[test]
fn synthetic_smollm3_ids_match_llama_cpp() {
    smolrun_tests::model_path("synthetic-smollm3");
    check_against_golden("synthetic-smollm3", "synthetic-smollm3.gguf");
}

/// The synthetic Phi-3 file: Phi-3's own SPM vocabulary, BOS added (all its tokenizer keys
/// copied from llama.cpp's ggml-vocab-phi-3.gguf).
#[test]
fn synthetic_phi3_ids_match_llama_cpp() {
    smolrun_tests::model_path("synthetic-phi3");
    check_against_golden("synthetic-phi3", "synthetic-phi3.gguf");
}

/// The synthetic OLMoE file: Qwen's vocabulary with the "olmo" pre-tokenizer (GPT-2's regex).
#[test]
fn synthetic_olmoe_ids_match_llama_cpp() {
    smolrun_tests::model_path("synthetic-olmoe");
    check_against_golden("synthetic-olmoe", "synthetic-olmoe.gguf");
}

const ROUND_TRIP_TEXTS: &[&str] = &[
    "Hello world",
    " leading and trailing  ",
    "def f(x):\n\treturn x ** 2  # square\n\n",
    "café naïve Größe — “quotes”",
    "中文 日本語 한국어 Русский العربية",
    "emoji 😀👍🏽 family 👨\u{200d}👩\u{200d}👧 flag 🇩🇪",
    // Rare characters that neither vocabulary has whole: byte fallback / byte-level pieces.
    "\u{13000}\u{1D11E}\u{E000}\u{10FFFD}",
    "<|im_start|> <start_of_turn> as plain text",
];

#[test]
fn gemma3_decodes_back_to_the_text() {
    let map = map_model(GEMMA.1);
    let tok = load(&map);
    for t in ROUND_TRIP_TEXTS {
        assert_round_trip(&tok, t);
    }
}

#[test]
fn qwen25_decodes_back_to_the_text() {
    let map = map_model(QWEN_05B.1);
    let tok = load(&map);
    for t in ROUND_TRIP_TEXTS {
        assert_round_trip(&tok, t);
    }
}

#[test]
fn gemma3_byte_fallback_tokens_decode_through_the_stream() {
    let map = map_model(GEMMA.1);
    let tok = load(&map);
    // An Egyptian hieroglyph: not in Gemma's vocabulary, so it is written as four <0xXX> tokens.
    let mut ids = Vec::new();
    tok.encode("\u{13000}", false, false, &mut ids);
    assert_eq!(ids.len(), 4, "expected 4 byte tokens, got {ids:?}");
    for &id in &ids {
        assert_eq!(
            tok.token_attr(id) & attr::BYTE,
            attr::BYTE,
            "token {id} is not a byte token"
        );
        assert_eq!(tok.token_bytes(id).len(), 1);
    }
    let mut dec = StreamDecoder::new();
    let mut out = String::new();
    for (i, &id) in ids.iter().enumerate() {
        dec.push(&tok, id, &mut out);
        // Nothing comes out until the fourth byte completes the character.
        assert_eq!(out.is_empty(), i < 3);
    }
    assert_eq!(out, "\u{13000}");
}

#[test]
fn gemma3_special_tokens() {
    let map = map_model(GEMMA.1);
    let tok = load(&map);
    assert!(matches!(tok.kind(), TokenizerKind::Spm));
    assert_eq!(tok.n_vocab(), 262_144);
    assert_eq!(tok.bos(), Some(2));
    assert_eq!(tok.eos(), Some(1));
    assert!(tok.adds_bos());
    assert!(!tok.adds_eos());
    let end_of_turn = tok
        .token_id(b"<end_of_turn>")
        .expect("<end_of_turn> in the vocabulary");
    assert_eq!(tok.eot(), Some(end_of_turn));
    assert!(tok.is_eog(1) && tok.is_eog(end_of_turn));
    assert!(!tok.is_eog(2));
    assert!(tok.is_control(2) && tok.is_control(end_of_turn));
    assert!(!tok.is_control(tok.token_id("▁world".as_bytes()).unwrap()));
    assert_eq!(
        tok.token_bytes(tok.token_id("▁world".as_bytes()).unwrap()),
        b" world"
    );

    // BOS only with add_special; <start_of_turn> parsed only with parse_special.
    let start = tok.token_id(b"<start_of_turn>").unwrap();
    let mut ids = Vec::new();
    tok.encode("<start_of_turn>user", true, true, &mut ids);
    assert_eq!(&ids[..2], &[2, start]);
    ids.clear();
    tok.encode("<start_of_turn>user", false, false, &mut ids);
    assert!(!ids.contains(&start) && !ids.contains(&2));
}

#[test]
fn qwen25_special_tokens() {
    let map = map_model(QWEN_05B.1);
    let tok = load(&map);
    assert!(matches!(tok.kind(), TokenizerKind::Bpe { .. }));
    assert_eq!(tok.n_vocab(), 151_936);
    // Qwen2.5 files say add_bos_token = false: no BOS even with add_special.
    assert!(!tok.adds_bos());
    let mut ids = Vec::new();
    tok.encode("Hello", true, true, &mut ids);
    assert_eq!(ids, [9707]);
    let im_end = tok.token_id(b"<|im_end|>").unwrap();
    let endoftext = tok.token_id(b"<|endoftext|>").unwrap();
    assert_eq!(tok.eos(), Some(im_end));
    assert!(tok.is_eog(im_end) && tok.is_eog(endoftext));
    let im_start = tok.token_id(b"<|im_start|>").unwrap();
    assert!(!tok.is_eog(im_start) && tok.is_control(im_start));
    assert_eq!(
        tok.token_bytes(tok.token_id("Ġworld".as_bytes()).unwrap()),
        b" world"
    );

    // <tool_call> is user-defined: cut out of the text even with parse_special off.
    let tool_call = tok.token_id(b"<tool_call>").unwrap();
    ids.clear();
    tok.encode("<tool_call><|im_start|>", false, false, &mut ids);
    assert_eq!(ids[0], tool_call);
    assert!(!ids.contains(&im_start));
}

#[test]
fn invalid_utf8_input_is_tokenized_without_panicking() {
    for (_, file) in [GEMMA, QWEN_05B] {
        let map = map_model(file);
        let tok = load(&map);
        let mut ids = Vec::new();
        tok.encode_bytes(b"ok \xE2\x82 \xFF\xFE bad \xC3", true, true, &mut ids);
        assert!(ids.len() > 3, "{file}: {ids:?}");
        for &id in &ids {
            assert!((id as usize) < tok.n_vocab());
        }
    }
}

/// A pruned head's pieces join into the dropped token they spell (`head::join_pieces`), on
/// Gemma's vocabulary: "Hol" + "mes" is "Holmes" once the head dropped it, not while it keeps
/// it; three pieces join too; a control token never joins.
#[test]
fn pieces_join_into_the_dropped_token_they_spell() {
    use smolrun_core::model::head::join_pieces;
    let map = map_model(GEMMA.1);
    let tok = load(&map);
    let id = |text: &str| {
        tok.token_id(text.replace(' ', "\u{2581}").as_bytes())
            .unwrap_or_else(|| panic!("{text:?} is not one Gemma token"))
    };
    let (holmes, hol, mes, the) = (id("Holmes"), id("Hol"), id("mes"), id(" the"));
    let all_but = |dropped: &[u32]| -> Vec<u32> {
        (0..tok.n_vocab() as u32)
            .filter(|i| !dropped.contains(i))
            .collect()
    };
    let kept = all_but(&[holmes]);
    assert_eq!(
        join_pieces(&tok, &kept, &[the, hol], mes),
        Some((1, holmes))
    );
    // Kept: the model can write it itself, nothing to join.
    assert_eq!(join_pieces(&tok, &all_but(&[]), &[the, hol], mes), None);
    // Not the pieces of one token.
    assert_eq!(join_pieces(&tok, &kept, &[hol, the], mes), None);
    // Three pieces: " per" + "ple" + "x" is " perplex".
    let (perplex, per, ple, x) = (id(" perplex"), id(" per"), id("ple"), id("x"));
    assert!(tok
        .token_id(" perple".replace(' ', "\u{2581}").as_bytes())
        .is_none());
    let kept = all_but(&[perplex]);
    assert_eq!(
        join_pieces(&tok, &kept, &[the, per, ple], x),
        Some((2, perplex))
    );
    let eot = tok.eot().expect("Gemma has an end-of-turn token");
    assert_eq!(join_pieces(&tok, &kept, &[the, hol], eot), None);
}
