//! llama.cpp's own tokenizer test vectors (tests/golden/vocab/, from its models/ directory; see
//! tests/golden/README.md): a vocabulary-only GGUF `ggml-vocab-NAME.gguf` with
//! `ggml-vocab-NAME.gguf.inp` (the texts) and `.out` (their ids), as llama.cpp's
//! tests/test-tokenizer-0 reads and runs them: no BOS or other added tokens, special tokens not
//! parsed, and every case must give exactly the ids of the file.

use smolrun_core::gguf::Gguf;
use smolrun_core::tokenizer::Tokenizer;
use smolrun_linux::MappedFile;
use std::path::PathBuf;

fn vocab_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden/vocab")
}

/// The cases of `NAME.inp`/`NAME.out` as test-tokenizer-0 splits them: the texts are separated
/// by "\n__ggml_vocab_test__\n" (text after the last separator, empty in these files, is a case
/// only if non-empty); the ids are one line per text, stripped, separated by single spaces (an
/// empty line is no ids).
fn cases(inp: &str, out: &str) -> Vec<(Vec<u8>, Vec<u32>)> {
    let read = |name: &str| {
        let path = vocab_dir().join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let vocab = out;
    let inp = read(inp);
    let out = String::from_utf8(read(out)).expect(".out is ASCII");

    const SEP: &[u8] = b"\n__ggml_vocab_test__\n";
    let mut texts = Vec::new();
    let mut pos = 0;
    while pos < inp.len() {
        match inp[pos..].windows(SEP.len()).position(|w| w == SEP) {
            Some(n) => {
                texts.push(inp[pos..pos + n].to_vec());
                pos += n + SEP.len();
            }
            None => {
                texts.push(inp[pos..].to_vec());
                break;
            }
        }
    }
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|line| {
            line.split_whitespace()
                .map(|t| {
                    t.parse()
                        .unwrap_or_else(|e| panic!("{vocab}.out: {t:?}: {e}"))
                })
                .collect()
        })
        .collect();
    assert_eq!(
        texts.len(),
        ids.len(),
        "{vocab}: .inp and .out have different numbers of cases"
    );
    texts.into_iter().zip(ids).collect()
}

/// Encodes every case with `tok` as test-tokenizer-0 does; fails listing each mismatch.
/// Returns the number of cases.
fn check(inp: &str, out: &str, tok: &Tokenizer) -> usize {
    let vocab = out;
    let cases = cases(inp, out);
    assert!(!cases.is_empty(), "{vocab}: no cases");
    let mut failures = Vec::new();
    let mut ids = Vec::new();
    for (text, want) in &cases {
        ids.clear();
        tok.encode_bytes(text, false, false, &mut ids);
        if &ids != want {
            failures.push(format!(
                "{:?}\n  llama.cpp: {want:?}\n  smolrun:   {ids:?}",
                String::from_utf8_lossy(text)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{vocab}: {} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    cases.len()
}

fn tokenizer(bytes: &[u8], what: &str) -> Tokenizer {
    let gguf = Gguf::parse(bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
    Tokenizer::from_gguf(&gguf).unwrap_or_else(|e| panic!("{what}: {e}"))
}

const QWEN35: &str = "ggml-vocab-qwen35.gguf";

fn qwen35_file() -> MappedFile {
    MappedFile::open(&vocab_dir().join(QWEN35)).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn qwen35_vocab_matches_llama_cpp_test_vectors() {
    let map = qwen35_file();
    let gguf = Gguf::parse(map.bytes()).unwrap();
    assert_eq!(gguf.get_str("tokenizer.ggml.pre").unwrap(), "qwen35");
    let tok = tokenizer(map.bytes(), QWEN35);
    assert!(!tok.adds_bos(), "qwen35 adds no BOS");
    let n = check(
        "ggml-vocab-qwen35.gguf.inp",
        "ggml-vocab-qwen35.gguf.out",
        &tok,
    );
    assert_eq!(n, 50, "the b11434 vectors have 50 cases");
}

/// Phi-3's SPM vocabulary (32,064 tokens, pre-type "default"), llama.cpp's own vectors.
#[test]
fn phi3_vocab_matches_llama_cpp_test_vectors() {
    let path = vocab_dir().join("ggml-vocab-phi-3.gguf");
    let map = MappedFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let gguf = Gguf::parse(map.bytes()).unwrap();
    assert_eq!(gguf.get_str("tokenizer.ggml.model").unwrap(), "llama");
    let tok = tokenizer(map.bytes(), "ggml-vocab-phi-3.gguf");
    let n = check(
        "ggml-vocab-phi-3.gguf.inp",
        "ggml-vocab-phi-3.gguf.out",
        &tok,
    );
    assert!(n > 0, "the phi-3 vectors have cases");
}

/// `qwen35` (the bytes of ggml-vocab-qwen35.gguf) with its `tokenizer.ggml.pre` value replaced
/// by `name`: the same vocabulary and merges under another pre-tokenizer. llama.cpp's
/// ggml-vocab-qwen2.gguf is, byte for byte, this file with "qwen2" (checked when the files were
/// added), so only the qwen35 file is kept.
fn with_pre(qwen35: &[u8], name: &str) -> Vec<u8> {
    let value = |name: &str| {
        let mut v = Vec::new();
        v.extend_from_slice(&18u64.to_le_bytes());
        v.extend_from_slice(b"tokenizer.ggml.pre");
        v.extend_from_slice(&8u32.to_le_bytes()); // a string
        v.extend_from_slice(&(name.len() as u64).to_le_bytes());
        v.extend_from_slice(name.as_bytes());
        v
    };
    let (from, to) = (value("qwen35"), value(name));
    let at: Vec<usize> = qwen35
        .windows(from.len())
        .enumerate()
        .filter(|(_, w)| *w == from.as_slice())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "one tokenizer.ggml.pre entry");
    let mut out = qwen35[..at[0]].to_vec();
    out.extend_from_slice(&to);
    out.extend_from_slice(&qwen35[at[0] + from.len()..]);
    out
}

fn qwen2_from_qwen35(qwen35: &[u8]) -> Vec<u8> {
    with_pre(qwen35, "qwen2")
}

#[test]
fn qwen2_vocab_matches_llama_cpp_test_vectors() {
    let map = qwen35_file();
    let tok = tokenizer(&qwen2_from_qwen35(map.bytes()), "ggml-vocab-qwen2.gguf");
    let n = check(
        "ggml-vocab-qwen2.gguf.inp",
        "ggml-vocab-qwen2.gguf.out",
        &tok,
    );
    assert_eq!(n, 46, "the b11434 vectors have 46 cases");
}

/// Texts with combining marks in many scripts and places (tests/golden/vocab/qwen35-marks.inp),
/// with llama.cpp b11434's ids on the qwen35 vocabulary and on the same vocabulary as qwen2
/// (tools/oracle/vocab_marks.py): llama.cpp's own qwen35 vectors give the same ids under
/// Qwen2's pre-tokenizer, these do not.
#[test]
fn combining_marks_match_llama_cpp_for_qwen35_and_qwen2() {
    const INP: &str = "qwen35-marks.inp";
    let map = qwen35_file();
    let qwen35 = tokenizer(map.bytes(), QWEN35);
    let qwen2 = tokenizer(&qwen2_from_qwen35(map.bytes()), "ggml-vocab-qwen2.gguf");
    let n = check(INP, "qwen35-marks.qwen35.out", &qwen35);
    assert_eq!(check(INP, "qwen35-marks.qwen2.out", &qwen2), n);
    let differ = cases(INP, "qwen35-marks.qwen35.out")
        .iter()
        .zip(cases(INP, "qwen35-marks.qwen2.out"))
        .filter(|(a, b)| a.1 != b.1)
        .count();
    assert!(
        differ > 0,
        "the reference gives the same ids for qwen35 and qwen2 on every text"
    );
}

/// The pre-tokenizers that llama.cpp's tree has no test vectors for, though the families smolrun
/// runs name them (LFM2's `lfm2`, SmolLM's `smollm`, OLMo's `olmo`, Granite's `granite-docling`,
/// ...): texts covering each regex's branches (tests/golden/vocab/pretok-branches.inp) with
/// llama.cpp b11434's ids on the qwen35 vocabulary renamed to each (tools/oracle/vocab_pretok.py).
/// The names fall into four splits on these texts (Llama 3's, StarCoder's, GPT-2's and the
/// default's), and each split must differ from the others somewhere, or the texts do not
/// exercise it.
#[test]
fn pre_tokenizers_without_llama_cpp_vectors_match_llama_tokenize() {
    const INP: &str = "pretok-branches.inp";
    let map = qwen35_file();
    let names = [
        "lfm2",
        "llama-bpe",
        "dbrx",
        "smollm",
        "starcoder",
        "refact",
        "olmo",
        "gpt-2",
        "granite-docling",
        "default",
    ];
    let mut outs = Vec::new();
    for name in names {
        let out = format!("pretok-branches.{name}.out");
        let tok = tokenizer(
            &with_pre(map.bytes(), name),
            &format!("qwen35 vocab as {name}"),
        );
        assert_eq!(check(INP, &out, &tok), 20, "{out}: 20 cases");
        outs.push(cases(INP, &out));
    }
    // lfm2 is Llama 3's split (llama.cpp sets LLAMA3 for it), smollm StarCoder's, olmo GPT-2's
    let split_of = |name: &str| &outs[names.iter().position(|n| *n == name).unwrap()];
    assert_eq!(split_of("lfm2"), split_of("llama-bpe"));
    assert_eq!(split_of("smollm"), split_of("starcoder"));
    assert_eq!(split_of("olmo"), split_of("gpt-2"));
    let splits = ["llama-bpe", "starcoder", "gpt-2", "default"];
    for (i, a) in splits.iter().enumerate() {
        for b in &splits[i + 1..] {
            assert_ne!(
                split_of(a),
                split_of(b),
                "{a} and {b} split every text alike"
            );
        }
    }
    // llama.cpp adds a BOS for lfm2 by default, as for Llama 3
    let lfm2 = smolrun_core::tokenizer::PreTokenizer::from_name("lfm2").expect("lfm2 is known");
    assert!(lfm2.add_bos_default && lfm2.ignore_merges);
}
