//! `smolrun gguf requant` on the synthetic Qwen3 (rows of 256 and 512, tensors in F16, Q8_0,
//! Q4_0 and Q4_1): the requantized models load and run, the tensors llama-quantize leaves alone
//! are copied byte for byte, --tensors picks tensors, and bad input is refused with a clear
//! error and no file left behind. Qwen2.5-Coder-0.5B's Q8_0 and Q4_K requants and the synthetic
//! model's Q2_K one hold llama-quantize's tensor bytes (committed sha256s). By hand (`--ignored`, it needs the oracle's llama-quantize,
//! $SMOLRUN_ORACLE): Qwen2.5-Coder-0.5B's Q8_0, Q4_K, Q2_K (and with SMOLRUN_REQUANT_LOWBIT=1
//! Q1_0, Q2_0, TQ1_0, TQ2_0) requants compared with llama-quantize's block by block, and the
//! metadata.

use smolrun_core::gguf::{Gguf, GgufWriter, MetaValue, TensorInfo, Value};
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::{Model, ResidentStore, State};
use smolrun_core::platform::SingleThread;
use smolrun_core::quant::GgmlType;
use smolrun_linux::MappedFile;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn require_model(model: &str) -> PathBuf {
    smolrun_tests::model_path(model)
}

fn requant(input: &Path, ty: &str, extra: &[&str], out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smolrun"))
        .args(["gguf", "requant", "-m"])
        .arg(input)
        .args(["--type", ty, "-t", "2"])
        .args(extra)
        .arg("-o")
        .arg(out)
        .output()
        .expect("run smolrun")
}

fn ok(run: &Output) -> String {
    let err = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{err}");
    err
}

/// Removes the scratch folder when the test ends, passed or not.
struct Scratch(PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("smolrun-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// Logits at each position of a few tokens, on the scalar kernels.
fn logits(g: &Gguf, tokens: &[u32]) -> Vec<Vec<f32>> {
    let kernels = KernelSet::scalar();
    let m = Model::load_with_kernels(g, &kernels).unwrap();
    let store = ResidentStore::new(g);
    let mut st = State::new(&m, 32).unwrap();
    tokens
        .iter()
        .enumerate()
        .map(|(pos, &t)| {
            m.forward(&mut st, &store, &SingleThread, t, pos)
                .unwrap()
                .to_vec()
        })
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum();
    dot / (na.sqrt() * nb.sqrt())
}

fn file_type(g: &Gguf) -> Option<u64> {
    g.get("general.file_type").and_then(|v| v.as_u64())
}

/// Requantizes the synthetic Qwen3 to `ty`: every 2-D weight gets `ty`, the norms stay F32
/// byte for byte, the metadata is the input's with llama-quantize's two keys at the end, and
/// the model runs; returns the cosine of its logits with the input model's.
fn requant_synthetic(ty: GgmlType, ftype: u64) -> f64 {
    requant_synthetic_to(ty, ftype).0
}

/// [`requant_synthetic`], keeping the written file (its scratch folder and path).
fn requant_synthetic_to(ty: GgmlType, ftype: u64) -> (f64, (Scratch, PathBuf)) {
    let input = require_model("synthetic-qwen3");
    let dir = scratch(&format!("requant-{ty}"));
    let out = dir.0.join("out.gguf");
    ok(&requant(&input, ty.name(), &[], &out));
    let a_file = MappedFile::open(&input).unwrap();
    let a = Gguf::parse(a_file.bytes()).unwrap();
    let b_file = MappedFile::open(&out).unwrap();
    let b = Gguf::parse(b_file.bytes()).unwrap();

    let keys = |g: &Gguf| -> Vec<String> { g.metadata.iter().map(|e| e.key.into()).collect() };
    let (ka, kb) = (keys(&a), keys(&b));
    assert_eq!(
        &kb[kb.len() - 2..],
        ["general.quantization_version", "general.file_type"]
    );
    for e in &a.metadata {
        if !e.key.starts_with("general.quantization_version") && e.key != "general.file_type" {
            let v = b.get(e.key).expect("no key dropped");
            assert_eq!(MetaValue::from(e.value), MetaValue::from(v), "{}", e.key);
        }
    }
    assert!(kb.len() <= ka.len() + 2);
    assert_eq!(file_type(&b), Some(ftype));
    assert!(matches!(
        b.get("general.quantization_version"),
        Some(Value::U32(2))
    ));

    assert_eq!(a.tensors.len(), b.tensors.len());
    // written in llama-quantize's order (layer, then name): matched by name
    for t in &b.tensors {
        let s = a.tensor(t.name).expect("every tensor kept");
        assert_eq!(s.shape(), t.shape(), "{}", t.name);
        if s.n_dims == 1 {
            assert_eq!(t.ggml_type, s.ggml_type, "{}", t.name);
            assert!(a.tensor_data(s) == b.tensor_data(t), "{} changed", t.name);
        } else {
            assert_eq!(t.ggml_type, ty, "{}", t.name);
        }
    }
    let tokens = [1, 500, 1000, 42, 7];
    let (la, lb) = (logits(&a, &tokens), logits(&b, &tokens));
    assert!(lb.iter().flatten().all(|v| v.is_finite()));
    let cos = la
        .iter()
        .zip(&lb)
        .map(|(x, y)| cosine(x, y))
        .fold(1.0, f64::min);
    (cos, (dir, out))
}

#[test]
fn synthetic_q8_0_runs_like_the_input() {
    let cos = requant_synthetic(GgmlType::Q8_0, 7);
    assert!(cos > 0.999, "cosine of the logits {cos}");
}

#[test]
fn synthetic_q4_k_runs() {
    let cos = requant_synthetic(GgmlType::Q4_K, 15);
    assert!(cos > 0.98, "cosine of the logits {cos}");
}

/// The bytes: the tensor data llama-quantize (b11434) wrote for the same requant, whose sha256
/// tests/golden/synthetic-qwen3-q2_k/model.json records (a scale rounded the other way in one
/// block changes it). The run: Q2_K on these random weights keeps a logits cosine of 0.853 on
/// the five tokens with exactly those bytes (scalar kernels, deterministic), so 0.8 only says
/// the file runs as a Q2_K model; a tensor read with the wrong type or rows is near 0.
#[test]
fn synthetic_q2_k_holds_llama_quantize_bytes_and_runs() {
    let (cos, out) = requant_synthetic_to(GgmlType::Q2_K, 10);
    assert!(cos > 0.8, "cosine of the logits {cos}");
    let golden = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/golden/synthetic-qwen3-q2_k/model.json");
    let want: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&golden).expect("model.json")).unwrap();
    let want = want["tensor_data_sha256"]
        .as_str()
        .expect("tensor_data_sha256");
    let got = smolrun_tests::golden::tensor_data_sha256(&out.1).1;
    assert_eq!(
        got, want,
        "smolrun gguf requant --type Q2_K of synthetic-qwen3 wrote other tensor bytes than \
         llama-quantize --pure (tests/golden/synthetic-qwen3-q2_k/model.json)"
    );
}

#[test]
fn tensors_regex_rewrites_only_what_it_matches_and_same_type_is_a_copy() {
    let input = require_model("synthetic-qwen3");
    let dir = scratch("requant-regex");
    let out = dir.0.join("out.gguf");
    ok(&requant(
        &input,
        "Q4_K",
        &["--tensors", r"ffn_(up|gate)\."],
        &out,
    ));
    let a_file = MappedFile::open(&input).unwrap();
    let a = Gguf::parse(a_file.bytes()).unwrap();
    let b_file = MappedFile::open(&out).unwrap();
    let b = Gguf::parse(b_file.bytes()).unwrap();
    let mut converted = 0;
    for t in &b.tensors {
        let s = a.tensor(t.name).expect("every tensor kept");
        if t.name.contains("ffn_up.") || t.name.contains("ffn_gate.") {
            assert_eq!(t.ggml_type, GgmlType::Q4_K, "{}", t.name);
            converted += 1;
        } else {
            assert_eq!(t.ggml_type, s.ggml_type, "{}", t.name);
            assert!(a.tensor_data(s) == b.tensor_data(t), "{} changed", t.name);
        }
    }
    assert_eq!(converted, 8);
    // A partial requant keeps the input's file type.
    assert_eq!(file_type(&b), file_type(&a));

    // Requantizing to the type a tensor already has copies it: the same bytes again.
    let again = dir.0.join("again.gguf");
    ok(&requant(
        &out,
        "Q4_K",
        &["--tensors", r"ffn_(up|gate)\."],
        &again,
    ));
    let c_file = MappedFile::open(&again).unwrap();
    let c = Gguf::parse(c_file.bytes()).unwrap();
    for (t, u) in b.tensors.iter().zip(&c.tensors) {
        assert!(b.tensor_data(t) == c.tensor_data(u), "{} changed", t.name);
    }
}

fn expect_failure(run: &Output) -> String {
    assert!(!run.status.success(), "expected a failure");
    String::from_utf8_lossy(&run.stderr).into_owned()
}

#[test]
fn bad_requests_are_refused_with_what_to_do() {
    let input = require_model("synthetic-qwen3");
    let dir = scratch("requant-bad");
    let out = dir.0.join("out.gguf");

    let err = expect_failure(&requant(&input, "Q3_K", &[], &out));
    assert!(
        err.contains("valid types") && err.contains("Q4_K") && err.contains("TQ1_0"),
        "{err}"
    );
    let err = expect_failure(&requant(&input, "Q8_0", &["--tensors", "("], &out));
    assert!(err.contains("not a valid regex"), "{err}");
    let err = expect_failure(&requant(&input, "Q8_0", &[], &input));
    assert!(err.contains("is the input file"), "{err}");

    // A 2-D F32 tensor with rows of 96: Q1_0 (blocks of 128) has no fallback type.
    let odd = dir.0.join("odd.gguf");
    let mut w = GgufWriter::new();
    w.add("general.architecture", "llama").unwrap();
    w.add_tensor("blk.0.ffn_up.weight", GgmlType::F32, &[96, 2])
        .unwrap();
    let data: Vec<u8> = (0..192).flat_map(|i| (i as f32).to_le_bytes()).collect();
    std::fs::write(&odd, w.to_bytes(&[&data]).unwrap()).unwrap();
    let err = expect_failure(&requant(&odd, "Q1_0", &[], &out));
    assert!(
        err.contains("blk.0.ffn_up.weight") && err.contains("96") && err.contains("128"),
        "{err}"
    );
    // ... while Q2_K falls back to Q4_0 (96 = 3 x 32), as llama-quantize does, and says so.
    let err = ok(&requant(&odd, "Q2_K", &[], &out));
    assert!(err.contains("falling back to    Q4_0"), "{err}");
    let b_file = MappedFile::open(&out).unwrap();
    let b = Gguf::parse(b_file.bytes()).unwrap();
    assert_eq!(b.tensors[0].ggml_type, GgmlType::Q4_0);
    drop(b);
    drop(b_file);
    std::fs::remove_file(&out).unwrap();

    let left: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "odd.gguf")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_failed_write_leaves_no_partial_file() {
    let input = require_model("synthetic-qwen3");
    let dir = scratch("requant-full");
    let out = dir.0.join("out.gguf");
    // A 2 MB file size limit (SIGXFSZ ignored, so the write fails with EFBIG instead of
    // killing the process): the write fails well inside the output.
    let run = Command::new("bash")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 2048; exec \"$@\"")
        .arg("bash")
        .arg(env!("CARGO_BIN_EXE_smolrun"))
        .args(["gguf", "requant", "--type", "Q4_K", "-m"])
        .arg(&input)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let err = expect_failure(&run);
    assert!(err.contains("out.gguf.tmp"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&dir.0).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

// ---------------------------------------------------------------------------------------------
// Against llama-quantize.
// ---------------------------------------------------------------------------------------------

/// llama-quantize of the reference build, or None.
fn llama_quantize() -> Option<PathBuf> {
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    let oracle = std::env::var_os("SMOLRUN_ORACLE")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cache/smolrun/oracle"));
    let bin = oracle.join("build/bin/llama-quantize");
    bin.exists().then_some(bin)
}

fn qwen_05b() -> Option<PathBuf> {
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    let dir = std::env::var_os("SMOLRUN_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cache/smolrun/models"));
    let p = dir.join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    p.exists().then_some(p)
}

/// Per output type: tensors compared, blocks compared, blocks that differ.
#[derive(Default, Debug)]
struct Tally {
    tensors: usize,
    blocks: usize,
    differ: usize,
}

/// Compares every tensor of `ours` with the same-named one of `theirs` (llama-quantize sorts
/// its tensors, so by name, not by position), block by block.
fn compare(ours: &Gguf, theirs: &Gguf) -> Vec<(GgmlType, Tally)> {
    assert_eq!(ours.tensors.len(), theirs.tensors.len());
    let mut tallies: Vec<(GgmlType, Tally)> = Vec::new();
    for t in &ours.tensors {
        let r: &TensorInfo = theirs
            .tensor(t.name)
            .unwrap_or_else(|| panic!("llama-quantize has no {}", t.name));
        assert_eq!(
            (t.ggml_type, t.shape()),
            (r.ggml_type, r.shape()),
            "{}",
            t.name
        );
        let block = t.ggml_type.type_size();
        let (a, b) = (ours.tensor_data(t), theirs.tensor_data(r));
        let differ = a
            .chunks_exact(block)
            .zip(b.chunks_exact(block))
            .filter(|(x, y)| x != y)
            .count();
        if differ > 0 {
            eprintln!("{}: {differ} blocks differ", t.name);
        }
        let i = match tallies.iter().position(|(ty, _)| *ty == t.ggml_type) {
            Some(i) => i,
            None => {
                tallies.push((t.ggml_type, Tally::default()));
                tallies.len() - 1
            }
        };
        let tally = &mut tallies[i].1;
        tally.tensors += 1;
        tally.blocks += a.len() / block;
        tally.differ += differ;
    }
    tallies
}

/// Qwen2.5-Coder-0.5B requantized to Q8_0, Q4_K, IQ4_NL and IQ4_XS (#33; half of its IQ4_XS
/// tensors fall back to IQ4_NL, rows of 896) holds the tensor bytes llama-quantize
/// b11434 writes with --pure (their sha256 in tests/golden/qwen2.5-coder-0.5b/requant.json,
/// written by tools/oracle/requant-golden.sh): every block of every tensor, from committed
/// goldens, so CI needs no llama.cpp build. (Q2_K and the low-bit types: golden_files.rs's
/// lowbit_model_files_hold_the_goldens_tensor_bytes, on the files tools/fetch-models.sh makes.)
#[test]
fn qwen_05b_requants_hold_llama_quantize_tensor_bytes() {
    let model = smolrun_tests::model_path("qwen2.5-coder-0.5b");
    let golden_path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/golden/qwen2.5-coder-0.5b/requant.json");
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&golden_path).expect("requant.json"))
            .unwrap();
    let types = golden["types"].as_object().expect("types");
    assert!(types.len() >= 2, "{}: no types", golden_path.display());
    let dir = scratch("requant-vs-golden");
    for (ty, want) in types {
        // IQ4_XS's requant quantizes half of the 0.5B's tensors (rows of 896) with IQ4_NL, its
        // fallback: it holds both quantizers to llama-quantize's bytes, and IQ4_NL's own file
        // (~1 minute of CPU more) is checked from tools/fetch-models.sh lowbit's copy by
        // golden_files::lowbit_model_files_hold_the_goldens_tensor_bytes.
        if ty == "IQ4_NL" {
            continue;
        }
        let out = dir.0.join(format!("{ty}.gguf"));
        ok(&requant(&model, ty, &[], &out));
        let got = smolrun_tests::golden::tensor_data_sha256(&out).1;
        assert_eq!(
            got,
            want["tensor_data_sha256"]
                .as_str()
                .expect("tensor_data_sha256"),
            "smolrun gguf requant --type {ty} of Qwen2.5-Coder-0.5B wrote other tensor bytes than \
             llama-quantize --pure ({}); the by-hand test qwen_05b_requants_match_llama_quantize_\
             block_for_block says which blocks",
            golden_path.display()
        );
        std::fs::remove_file(&out).unwrap();
    }
}

/// By hand: it runs llama-quantize itself, which CI does not build. What CI checks instead,
/// from committed goldens: every quantizer against ggml's bytes on edge rows
/// (tests/tests/quant_blocks.rs: Q8_0, Q4_K, Q2_K and the low-bit types), and whole files
/// against llama-quantize's tensor bytes for the types CI requantizes
/// (golden_files::lowbit_model_files_hold_the_goldens_tensor_bytes: Q2_K, Q2_0, Q1_0, TQ1_0,
/// TQ2_0; the files are written by `smolrun gguf requant` in tools/fetch-models.sh lowbit).
#[test]
#[ignore = "by hand: needs the oracle's llama-quantize (tools/oracle/build.sh); run with --ignored"]
fn qwen_05b_requants_match_llama_quantize_block_for_block() {
    let bin = llama_quantize().expect(
        "$SMOLRUN_ORACLE/build/bin/llama-quantize is missing: build it with tools/oracle/build.sh",
    );
    let model = qwen_05b()
        .expect("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf is missing: run tools/fetch-models.sh");
    let dir = scratch("requant-vs-llama");
    // The three the issue asks for; with SMOLRUN_REQUANT_LOWBIT=1 also the 1-bit, 2-bit and
    // ternary types CI makes test models of (TQ1_0/TQ2_0 fall back to Q4_0 on rows of 896, like
    // Q2_K): about 40 s more on 2 cores. tests/tests/quant_blocks.rs checks their quantizers
    // against ggml on edge rows in every run. With SMOLRUN_REQUANT_IQ4=1 also IQ4_NL and IQ4_XS
    // (#33): llama-quantize's 15-scale search takes it about 9 minutes per type on 2 cores.
    let mut types = vec!["Q8_0", "Q4_K", "Q2_K"];
    if std::env::var_os("SMOLRUN_REQUANT_LOWBIT").is_some_and(|v| v == "1") {
        types.extend(["Q1_0", "Q2_0", "TQ1_0", "TQ2_0"]);
    }
    if std::env::var_os("SMOLRUN_REQUANT_IQ4").is_some_and(|v| v == "1") {
        types.extend(["IQ4_NL", "IQ4_XS"]);
    }
    for ty in types {
        let theirs_path = dir.0.join(format!("llama-{ty}.gguf"));
        let ours_path = dir.0.join(format!("smolrun-{ty}.gguf"));
        let run = Command::new(&bin)
            .args(["--allow-requantize", "--pure"])
            .arg(&model)
            .arg(&theirs_path)
            .args([ty, "2"])
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "llama-quantize: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        ok(&requant(&model, ty, &[], &ours_path));
        let ours_file = MappedFile::open(&ours_path).unwrap();
        let ours = Gguf::parse(ours_file.bytes()).unwrap();
        let theirs_file = MappedFile::open(&theirs_path).unwrap();
        let theirs = Gguf::parse(theirs_file.bytes()).unwrap();
        // The header: the same metadata in the same order, the same values.
        let keys = |g: &Gguf| -> Vec<String> { g.metadata.iter().map(|e| e.key.into()).collect() };
        assert_eq!(keys(&ours), keys(&theirs), "{ty}");
        for e in &ours.metadata {
            assert_eq!(
                MetaValue::from(e.value),
                MetaValue::from(theirs.get(e.key).unwrap()),
                "{ty}: {}",
                e.key
            );
        }
        for (out_ty, t) in compare(&ours, &theirs) {
            eprintln!(
                "requant {ty}: {out_ty} {} tensors, {} blocks, {} differ",
                t.tensors, t.blocks, t.differ
            );
            // Zero so far; a tie decided by float contraction would be allowed below 0.1 %.
            assert!(
                t.differ * 1000 < t.blocks.max(1),
                "{ty}: {out_ty}: {} of {} blocks differ",
                t.differ,
                t.blocks
            );
        }
        drop(ours);
        drop(theirs);
        let _ = std::fs::remove_file(&ours_path);
        let _ = std::fs::remove_file(&theirs_path);
    }
}
