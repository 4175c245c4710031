//! Helpers shared by the CLI tests: where the models and the golden data are, and running the
//! binary.
#![allow(dead_code)] // each test file uses a part of this module

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn smolrun() -> Command {
    Command::new(env!("CARGO_BIN_EXE_smolrun"))
}

/// The binary on the scalar reference kernels (SMOLRUN_KERNELS=scalar), for the tests that
/// compare with llama.cpp's golden data; the SIMD faces are checked against the scalar ones by
/// the kernel exactness tests.
pub fn smolrun_reference() -> Command {
    let mut c = smolrun();
    c.env("SMOLRUN_KERNELS", "scalar");
    c
}

/// A model file: a synthetic one is written when absent (smolrun_tests::model_path); a missing
/// real model fails the test and says how to get it.
pub fn model(file_name: &str) -> PathBuf {
    if let Some(short) = file_name.strip_suffix(".gguf") {
        if short.starts_with("synthetic-") {
            return smolrun_tests::model_path(short);
        }
    }
    let dir = std::env::var_os("SMOLRUN_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/smolrun/models")
        });
    let path = dir.join(file_name);
    assert!(
        path.exists(),
        "{} is missing: run tools/fetch-models.sh (or set SMOLRUN_MODELS to where the models are)",
        path.display()
    );
    path
}

pub fn gemma() -> PathBuf {
    model("gemma-3-270m-q4_k_m.gguf")
}

/// tests/golden of the workspace (SMOLRUN_GOLDEN_DIR overrides it).
pub fn golden_dir() -> PathBuf {
    std::env::var_os("SMOLRUN_GOLDEN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden"))
}

/// Reads a golden file from [`golden_dir`], or from the workspace's tests/golden when an
/// override directory lacks it.
pub fn read_golden(rel: &str) -> serde_json::Value {
    let mut path = golden_dir().join(rel);
    if !path.exists() {
        path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/golden")
            .join(rel);
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; it is written by tools/oracle/regen.sh",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs the binary, expects it to fail, and returns its stderr.
pub fn expect_failure(cmd: &mut Command) -> String {
    let o = cmd.output().expect("smolrun runs");
    assert!(
        !o.status.success(),
        "expected a failure, got success; stdout: {}",
        stdout(&o)
    );
    let err = stderr(&o);
    assert!(
        err.starts_with("smolrun: "),
        "errors start with 'smolrun: ', got: {err}"
    );
    err
}

/// A minimal GGUF v3 file with string metadata and no tensors, for error cases.
pub fn write_gguf(path: &Path, kv: &[(&str, &str)]) {
    let mut b = Vec::new();
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes()); // tensors
    b.extend_from_slice(&(kv.len() as u64).to_le_bytes());
    for (k, v) in kv {
        b.extend_from_slice(&(k.len() as u64).to_le_bytes());
        b.extend_from_slice(k.as_bytes());
        b.extend_from_slice(&8u32.to_le_bytes()); // GGUF_TYPE_STRING
        b.extend_from_slice(&(v.len() as u64).to_le_bytes());
        b.extend_from_slice(v.as_bytes());
    }
    std::fs::write(path, b).unwrap();
}

/// A scratch directory for one test, removed and recreated.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("smolrun-cli-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether python3 can run tools/oracle (numpy and gguf installed).
/// Fails the test, saying what to install, when python3 with numpy and gguf is missing
/// (tools/test.sh installs it): a test that needs it never passes without it.
pub fn require_python_with_gguf() {
    let ok = Command::new("python3")
        .args(["-c", "import numpy, gguf"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "python3 with numpy and gguf is not available: pip install numpy gguf==0.19.0 (as \
         tools/test.sh does)"
    );
}

/// Writes the small Ling shape the pager and fit tests share (tools/oracle/ling_shaped.py: 3
/// layers, the first dense with an FFN of 512, the other two `experts` experts of `expert_ff`
/// in 4 groups, 2 groups and 4 experts used per token, n_embd 256, heads of 64), with `extra`
/// options after it.
pub fn write_small_ling(out: &Path, experts: &str, expert_ff: &str, extra: &[&str]) {
    let shape = [
        "--layers",
        "3",
        "--experts",
        experts,
        "--experts-used",
        "4",
        "--groups",
        "4",
        "--groups-used",
        "2",
        "--n-embd",
        "256",
        "--head-dim",
        "64",
        "--expert-ff",
        expert_ff,
        "--dense-ff",
        "512",
    ];
    write_ling_shaped(out, &[&shape[..], extra].concat());
}

/// Writes a Ling-shaped model (tools/oracle/ling_shaped.py) with `args` (its shape and
/// options) to `out`, the tokenizer taken from Qwen2.5-Coder-0.5B.
pub fn write_ling_shaped(out: &Path, args: &[&str]) {
    let vocab = model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/oracle/ling_shaped.py");
    let run = Command::new("python3")
        .arg(script)
        .args(args)
        .arg("--tokenizer-from")
        .arg(&vocab)
        .arg("--out")
        .arg(out)
        .output()
        .expect("cannot run python3");
    assert!(
        run.status.success(),
        "ling_shaped.py failed: {}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}
