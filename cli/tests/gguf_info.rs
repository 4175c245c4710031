//! `smolrun gguf info` on the real models and on broken files: readable output, clean errors,
//! no panics.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn smolrun(args: &[&str], models_dir: Option<&Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_smolrun"));
    cmd.args(args);
    if let Some(dir) = models_dir {
        cmd.env("SMOLRUN_MODELS", dir);
    }
    cmd.output().expect("run smolrun")
}

fn models_dir() -> PathBuf {
    match std::env::var_os("SMOLRUN_MODELS") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/smolrun/models"),
    }
}

fn require_model(file: &str) -> PathBuf {
    let path = models_dir().join(file);
    assert!(
        path.is_file(),
        "{} is missing: run tools/fetch-models.sh to download the test models",
        path.display()
    );
    path
}

/// A scratch folder of this test process, removed by the test that made it.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("smolrun-gguf-info-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn assert_no_panic(o: &Output) {
    let err = text(&o.stderr);
    assert!(!err.contains("panicked"), "smolrun panicked: {err}");
}

#[test]
fn info_on_gemma3_by_short_name() {
    require_model("gemma-3-270m-q4_k_m.gguf");
    let o = smolrun(&["gguf", "info", "gemma3-270m"], None);
    assert_no_panic(&o);
    assert!(o.status.success(), "stderr: {}", text(&o.stderr));
    let out = text(&o.stdout);
    // Numbers from the file as gguf-dump (the gguf Python package) reports them.
    assert!(
        out.contains("GGUF v3, 236 tensors, 33 metadata keys, alignment 32, data offset 6525120"),
        "{out}"
    );
    assert!(out.contains("general.architecture = \"gemma3\""), "{out}");
    assert!(out.contains("[string]     262144  tokenizer.ggml.tokens = [\"<pad>\", \"<eos>\", \"<bos>\", \"<unk>\", \"<mask>\", ... 262139 more]"), "{out}");
    assert!(out.contains("token_embd.weight"), "{out}");
    assert!(out.contains("totals:"), "{out}");
}

#[test]
fn info_on_qwen_by_path() {
    let path = require_model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    let o = smolrun(&["gguf", "info", path.to_str().unwrap()], None);
    assert_no_panic(&o);
    assert!(o.status.success(), "stderr: {}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("general.architecture = \"qwen2\""), "{out}");
    assert!(out.contains("qwen2.block_count = 24"), "{out}");
    assert!(
        out.contains("291 tensors, 26 metadata keys, alignment 32, data offset 5947776"),
        "{out}"
    );
    assert!(out.contains("blk.23.ffn_down.weight"), "{out}");
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B, 1.1 GB; minutes of CPU)"]
fn info_on_qwen25_coder_15b() {
    let path = models_dir().join("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf");
    assert!(
        path.is_file(),
        "{} is missing: tools/test.sh --full fetches it",
        path.display()
    );
    let o = smolrun(&["gguf", "info", "qwen2.5-coder-1.5b"], None);
    assert!(o.status.success(), "stderr: {}", text(&o.stderr));
    assert!(text(&o.stdout).contains("qwen2.block_count = 28"));
}

#[test]
fn hostile_file_gives_a_clean_error() {
    let dir = scratch("hostile");
    // A header that promises 2^62 tensors.
    let mut bytes = b"GGUF".to_vec();
    bytes.extend_from_slice(&3u32.to_le_bytes());
    bytes.extend_from_slice(&(1u64 << 62).to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    bytes.extend_from_slice(&[0u8; 40]);
    let path = dir.join("hostile.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let o = smolrun(&["gguf", "info", path.to_str().unwrap()], None);

    // A real model cut short: its tensor data runs past the end.
    let model = require_model("gemma-3-270m-q4_k_m.gguf");
    let cut = dir.join("cut.gguf");
    let full = std::fs::read(&model).unwrap();
    std::fs::write(&cut, &full[..full.len() / 2]).unwrap();
    let o_cut = smolrun(&["gguf", "info", cut.to_str().unwrap()], None);
    std::fs::remove_dir_all(&dir).unwrap();

    assert_no_panic(&o);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains(path.to_str().unwrap()), "{err}");
    assert!(err.contains("tensor count is 4611686018427387904"), "{err}");

    assert_no_panic(&o_cut);
    assert!(!o_cut.status.success());
    let err = text(&o_cut.stderr);
    assert!(
        err.contains("cut.gguf") && err.contains("the file is truncated"),
        "{err}"
    );
}

#[test]
fn unknown_name_and_missing_model_say_what_to_do() {
    let o = smolrun(&["gguf", "info", "llama-7b"], None);
    assert_no_panic(&o);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    for name in [
        "gemma3-270m",
        "qwen2.5-coder-0.5b",
        "qwen2.5-coder-1.5b",
        "tools/fetch-models.sh",
    ] {
        assert!(err.contains(name), "{err}");
    }

    let empty = scratch("empty-models");
    let o = smolrun(&["gguf", "info", "gemma3-270m"], Some(&empty));
    std::fs::remove_dir_all(&empty).unwrap();
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("tools/fetch-models.sh gemma3-270m"), "{err}");
    assert!(err.contains("gemma-3-270m-q4_k_m.gguf"), "{err}");
}

#[test]
fn empty_file_is_an_error_not_a_panic() {
    let dir = scratch("empty-file");
    let path = dir.join("empty.gguf");
    std::fs::write(&path, b"").unwrap();
    let o = smolrun(&["gguf", "info", path.to_str().unwrap()], None);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_no_panic(&o);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("truncated while reading magic"));
}

/// `gguf info --kernels` on every real and low-bit file the tests use: on this CPU (x86-64 with
/// AVX2 in CI, or aarch64) no big matrix is left on a scalar path and every matrix has a
/// kernel. (The flagging itself is tested on the scalar set: cmd::gguf's unit test.)
#[test]
fn every_big_matrix_of_the_test_models_reaches_a_simd_kernel() {
    for file in [
        "gemma-3-270m-q4_k_m.gguf",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "qwen2.5-coder-0.5b-q1_0.gguf",
        "qwen2.5-coder-0.5b-q2_0.gguf",
        "qwen2.5-coder-0.5b-q2_k.gguf",
        "synthetic-qwen3-q2_0.gguf",
        "synthetic-qwen3-tq1_0.gguf",
        "synthetic-qwen3-tq2_0.gguf",
        "synthetic-qwen3-q2_k.gguf",
        "synthetic-qwen3-iq2_xxs.gguf",
        "synthetic-qwen3-iq3_xxs.gguf",
        "synthetic-qwen3-iq2_xs.gguf",
        "synthetic-qwen3-iq2_s.gguf",
        "synthetic-qwen3-iq3_s.gguf",
        "synthetic-qwen3-iq1_s.gguf",
        "synthetic-qwen3-iq1_m.gguf",
    ] {
        let path = require_model(file);
        let out = smolrun(&["gguf", "info", "--kernels", path.to_str().unwrap()], None);
        assert!(out.status.success(), "{file}: {}", text(&out.stderr));
        let report = text(&out.stdout);
        if report.lines().next().unwrap_or("").contains("(scalar)") {
            // A CPU smolrun has no SIMD kernels for: nothing to ask of it.
            continue;
        }
        assert!(
            report.contains("every big matrix reaches a SIMD kernel on this CPU"),
            "{file}:\n{report}"
        );
        assert!(
            report.contains("output.weight") || report.contains("(head)"),
            "{file}"
        );
    }
}

/// The same on Qwen2.5-Coder-1.5B in every type of #33 (tools/oracle/qwen15b-types.sh): each
/// --pure file and each mix as published files are made, and the Q4_K_M it is made from. By
/// hand: the files are 0.5-1.3 GB and no test makes them; a missing one fails.
#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B requantized, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_every_type_reaches_a_simd_kernel() {
    let pure = [
        "IQ4_NL", "IQ4_XS", "IQ3_XXS", "IQ3_S", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ1_S", "IQ1_M",
        "Q3_K", "Q5_K",
    ];
    let mixes = [
        "Q3_K_M", "Q3_K_S", "Q5_K_M", "IQ4_XS", "IQ3_XXS", "IQ3_M", "IQ2_XXS", "IQ2_M",
    ];
    let mut files = vec![(
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf".to_string(),
        String::new(),
    )];
    files.extend(pure.iter().map(|t| {
        (
            format!("qwen2.5-coder-1.5b-{}-pure.gguf", t.to_lowercase()),
            format!("{t}:pure"),
        )
    }));
    files.extend(mixes.iter().map(|t| {
        (
            format!("qwen2.5-coder-1.5b-{}.gguf", t.to_lowercase()),
            t.to_string(),
        )
    }));
    let (mut flagged, mut missing) = (Vec::new(), Vec::new());
    for (file, arg) in &files {
        let path = models_dir().join(file);
        if !path.is_file() {
            missing.push(format!("{file} (tools/oracle/qwen15b-types.sh {arg})"));
            continue;
        }
        let out = smolrun(&["gguf", "info", "--kernels", path.to_str().unwrap()], None);
        assert!(out.status.success(), "{file}: {}", text(&out.stderr));
        let report = text(&out.stdout);
        let first = report.lines().next().unwrap_or("").to_string();
        println!("{file}: {first}");
        for line in report
            .lines()
            .filter(|l| l.starts_with("WARNING") || l.starts_with("ERROR"))
        {
            println!("  {line}");
        }
        assert!(
            report.contains("output.weight") || report.contains("(head)"),
            "{file}"
        );
        if first.contains("(scalar)") {
            // A CPU smolrun has no SIMD kernels for: nothing to ask of it.
            continue;
        }
        if !report.contains("every big matrix reaches a SIMD kernel on this CPU") {
            flagged.push(format!("{file}:\n{report}"));
        }
    }
    assert!(
        flagged.is_empty(),
        "big matrices on a scalar path or with no kernel:\n{}",
        flagged.join("\n")
    );
    assert!(
        missing.is_empty(),
        "missing in {}: {}",
        models_dir().display(),
        missing.join(", ")
    );
}
