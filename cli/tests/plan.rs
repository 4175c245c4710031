//! `smolrun plan` predicts what a run on a device holds and reads: its resident set and the
//! flash it reads per token are what `smolrun bench --json` then measures under the same memory
//! (within 10 %), for a streamed dense model and a mapped one; device presets and profile files.

use std::process::Command;

fn smolrun(args: &[&str]) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_smolrun"))
        .args(args)
        .output()
        .expect("run smolrun");
    assert!(
        o.status.success(),
        "smolrun {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let line = String::from_utf8_lossy(&o.stdout);
    let last = line.lines().last().unwrap_or("");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {line}"))
}

fn near(what: &str, predicted: f64, measured: f64) {
    assert!(
        (predicted - measured).abs() <= 0.10 * measured.max(1e-9),
        "{what}: plan says {predicted:.2}, bench measured {measured:.2}"
    );
}

/// Qwen2.5-Coder-0.5B streamed with 100 MB resident (its 144 MB head streamed, so the ring
/// cannot hold every streamed weight and each token reads them again): plan predicts the
/// resident set and the MB read per token that bench measures; synthetic-qwen3 with 20 MB
/// resident, whose ring holds all it streams, so nothing is read again after the first pass;
/// and synthetic-lfm2moe streamed, whose ring holds the rest but whose chosen experts are read
/// into a scratch slot every token (the plan said 0 MB per token before it counted them).
#[test]
fn plan_predicts_what_a_streamed_run_holds_and_reads() {
    for (model, resident_mb) in [
        ("qwen2.5-coder-0.5b", "100"),
        ("synthetic-qwen3", "20"),
        ("synthetic-lfm2moe", "20"),
    ] {
        check_streamed(model, resident_mb);
    }
}

fn check_streamed(model: &str, resident_mb: &str) {
    let model = smolrun_tests::model_path(model);
    let model = model.to_str().unwrap();
    // bench -p 0 -n 8 runs a context of 16 tokens (8 generated after an 8-token prompt).
    let plan = smolrun(&[
        "plan",
        model,
        "--mem",
        "1G",
        "--flash-mbps",
        "500",
        "-c",
        "16",
        "--weights",
        "stream",
        "--resident-mb",
        resident_mb,
        "--json",
    ]);
    assert_eq!(plan["weights"], "stream", "{plan}");
    let bench = smolrun(&[
        "bench",
        "-m",
        model,
        "--weights",
        "stream",
        "--resident-mb",
        resident_mb,
        "--flash-mbps",
        "500",
        "-p",
        "0",
        "-n",
        "8",
        "-r",
        "1",
        "-t",
        "1",
        "--json",
    ]);
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k}: {v}"));
    near(
        "resident MB",
        f(&plan, "resident_mb"),
        f(&bench, "resident_mb"),
    );
    near(
        "flash MB per token",
        f(&plan, "flash_mb_per_token"),
        f(&bench, "stream_mb_per_token"),
    );
    if f(&plan, "flash_mb_per_token") > 0.0 {
        near(
            "flash limit",
            f(&plan, "flash_limit_tok_s"),
            f(&bench, "flash_limit_tok_s"),
        );
    }
}

/// Gemma 3 270M fits a 512 MB router whole: resident, nothing read per token; the iPad's
/// address space and memory make the 1.5B-sized plan stream. Presets and a profile file give
/// the same plan for the same numbers.
#[test]
fn presets_and_profile_files() {
    let gemma = smolrun_tests::model_path("gemma3-270m");
    let gemma = gemma.to_str().unwrap();
    let router = smolrun(&["plan", gemma, "--device", "router-512m", "--json"]);
    assert_eq!(router["weights"], "resident", "{router}");
    assert_eq!(router["fits"], true, "{router}");
    assert_eq!(router["flash_mb_per_token"], 0.0, "{router}");
    let dir = std::env::temp_dir().join(format!("smolrun-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let profile = dir.join("my-router.txt");
    std::fs::write(
        &profile,
        "# the same box as router-512m\nmem = 512M\nflash_mbps = 40\nthreads = 4\n",
    )
    .unwrap();
    let mine = smolrun(&[
        "plan",
        gemma,
        "--device",
        profile.to_str().unwrap(),
        "--json",
    ]);
    let strip = |mut v: serde_json::Value| {
        v.as_object_mut().unwrap().remove("device");
        v
    };
    assert_eq!(strip(mine), strip(router));
    // Too small for the part that cannot stream: fits false, with the numbers.
    let tiny = smolrun(&[
        "plan",
        gemma,
        "--mem",
        "64M",
        "--flash-mbps",
        "40",
        "--json",
    ]);
    assert_eq!(tiny["fits"], false, "{tiny}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A paged mixture of experts: the plan says the cache bias is off (fit sets none) and points to
/// its measured trade-off; a dense model's plan has no such line.
#[test]
fn paged_moe_plan_states_the_cache_bias() {
    let moe = smolrun_tests::model_path("synthetic-qwen3moe");
    let text = |model: &std::path::Path, extra: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_smolrun"))
            .args(["plan", model.to_str().unwrap(), "--device", "tv-box"])
            .args(extra)
            .output()
            .expect("run smolrun");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let out = text(&moe, &["--moe-pool", "4"]);
    assert!(out.contains("expert pools: 4 of 8"), "{out}");
    assert!(
        out.contains("cache bias: off (fit sets none")
            && out.contains("A trained mixture of experts"),
        "{out}"
    );
    let dense = text(&smolrun_tests::model_path("synthetic-qwen3"), &[]);
    assert!(!dense.contains("cache bias"), "{dense}");
}
