//! The memory guard end to end: a model that does not fit is refused before loading, by every
//! command that loads one, with the numbers by part and what to try; `--no-mem-guard` and
//! SMOLRUN_NO_MEM_GUARD let it run anyway; bad sizes are rejected; and an embedding table that
//! is not the LM head stays on flash during a run.
//! Meant for release mode: `cargo test --release -p smolrun --test memory_guard`.

mod common;
use common::*;
use std::os::unix::io::AsRawFd;

/// The parts a refusal must name, and the advice it must give.
const REFUSAL_WORDS: [&str; 10] = [
    "does not fit in memory",
    "--mem-budget",
    "weights read every token",
    "kv cache",
    "tokenizer",
    "logits and sampler",
    "runtime",
    "what to try",
    "prune-head",
    "-c ",
];

#[test]
fn a_100m_budget_refuses_gemma_with_the_numbers_in_every_command() {
    let model = gemma();
    let commands: [&[&str]; 5] = [
        &["run", "-p", "Hello", "-n", "4"],
        &["chat"],
        &["bench", "-p", "8", "-n", "4"],
        &["perplexity", "-f", "Cargo.toml"],
        &["serve", "--port", "0"],
    ];
    for args in commands {
        let mut cmd = smolrun();
        cmd.args(&args[..1])
            .arg("-m")
            .arg(&model)
            .args(&args[1..])
            .args(["--mem-budget", "100M"]);
        let err = expect_failure(&mut cmd);
        for word in REFUSAL_WORDS {
            assert!(err.contains(word), "{args:?}: no {word:?} in: {err}");
        }
        // 100M is 104.9 MB; the weights alone are 246.4 MB.
        assert!(err.contains("104.9 MB (--mem-budget)"), "{args:?}: {err}");
        assert!(err.contains("246.4 MB"), "{args:?}: {err}");
    }
}

#[test]
fn the_guard_can_be_turned_off_and_a_big_enough_budget_runs() {
    let model = gemma();
    let run = |extra: &[&str], env: Option<(&str, &str)>| {
        let mut cmd = smolrun();
        cmd.args(["run", "-m"])
            .arg(&model)
            .args(["-p", "Hello", "-n", "2", "--temp", "0", "-c", "256"])
            .args(extra);
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let off = run(&["--mem-budget", "100M", "--no-mem-guard"], None);
    assert!(off.status.success(), "{}", stderr(&off));
    let off_env = run(
        &["--mem-budget", "100M"],
        Some(("SMOLRUN_NO_MEM_GUARD", "1")),
    );
    assert!(off_env.status.success(), "{}", stderr(&off_env));
    let fits = run(&["--mem-budget", "0.5G"], None);
    assert!(fits.status.success(), "{}", stderr(&fits));
}

/// The refusal tries smaller contexts: gemma needs ~376 MB at -c 4096 and ~306 MB at -c 256.
#[test]
fn the_refusal_names_a_context_that_fits_or_says_none_does() {
    let refusal = |budget: &str| {
        let mut cmd = smolrun();
        cmd.args(["run", "-m"]).arg(gemma()).args([
            "-p",
            "Hello",
            "-c",
            "4096",
            "--mem-budget",
            budget,
        ]);
        expect_failure(&mut cmd)
    };
    let some = refusal("340M");
    assert!(some.contains("a smaller context: -c 2048 needs"), "{some}");
    let none = refusal("280M");
    assert!(none.contains("even -c 256 needs"), "{none}");
}

#[test]
fn bad_budget_sizes_are_rejected() {
    for bad in ["0", "12X", "1.5", "-1G", "lots", "1.2.3M"] {
        let o = smolrun()
            .args(["run", "-m"])
            .arg(gemma())
            .args(["-p", "Hello"])
            .arg(format!("--mem-budget={bad}"))
            .output()
            .unwrap();
        // clap's own error: exit code 2.
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let err = stderr(&o);
        assert!(err.contains("--mem-budget"), "{bad}: {err}");
        assert!(err.contains("not a memory size"), "{bad}: {err}");
        assert!(err.contains("write it like 800M"), "{bad}: {err}");
    }
}

/// Qwen2.5-Coder-0.5B has its own output matrix, so its 93.6 MB embedding table is read one
/// row per token. After a run, only the pages of the rows used may be in RAM. The table's
/// pages are dropped from the page cache first (POSIX_FADV_DONTNEED); if another process on
/// the machine holds them mapped they cannot be dropped, and the measurement says nothing:
/// then the test says so and stops.
#[test]
fn an_untied_embedding_table_stays_on_flash() {
    let path = model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    let mapped = smolrun_linux::MappedFile::open(&path).unwrap();
    let gguf = smolrun_core::gguf::Gguf::parse(mapped.bytes()).unwrap();
    let table = gguf.tensor("token_embd.weight").unwrap();
    assert!(gguf.tensor("output.weight").is_some());
    let range = table.offset as usize..(table.offset + table.n_bytes) as usize;

    let file = std::fs::File::open(&path).unwrap();
    // SAFETY: plain syscall on an open descriptor.
    let rc = unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            table.offset as libc::off_t,
            table.n_bytes as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        )
    };
    assert_eq!(rc, 0);
    let before = mapped.resident_bytes(range.clone()).unwrap();
    if before > table.n_bytes / 4 {
        println!(
            "notice: {} MB of the table stay in the page cache after DONTNEED (another process \
             maps them); residency cannot be measured on this machine now",
            before / 1_000_000
        );
        return;
    }
    let prompt = "A short story about a lighthouse keeper who finds a message in a bottle. \
                  It begins on a stormy night in November, when the lamp fails.";
    let o = smolrun()
        .args(["run", "-m"])
        .arg(&path)
        .args(["-p", prompt, "-n", "32", "--temp", "0", "-c", "256"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let after = mapped.resident_bytes(range).unwrap();
    let grew = after.saturating_sub(before);
    // About 64 tokens, at most two 4 KB pages each (a 616-byte Q5_0 row may straddle a page
    // boundary): 0.5 MB. Readahead around each row would bring in ~128 KB per token (~8 MB).
    println!(
        "embedding table: {} of {} bytes resident after the run ({} before)",
        after, table.n_bytes, before
    );
    assert!(
        grew <= 64 * 2 * 4096 + (64 << 10),
        "the run brought {grew} bytes of the {}-byte embedding table into RAM",
        table.n_bytes
    );
}

/// A floor above what any machine has left: generation stops at the first look (after 16
/// tokens), keeps what it wrote, and says why with a failing exit code.
#[test]
fn generation_stops_cleanly_below_the_floor() {
    let o = smolrun()
        .args(["run", "-m"])
        .arg(gemma())
        .args([
            "-p",
            "Once upon a time",
            "-n",
            "64",
            "--temp",
            "0",
            "-c",
            "256",
        ])
        .args(["--json", "--mem-floor", "1T", "--mem-budget", "1G"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("below the floor"), "{err}");
    assert!(err.contains("stop: low-memory"), "{err}");
    let out: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(out["stop"], "low-memory");
    assert_eq!(out["tokens"].as_array().unwrap().len(), 16, "{out}");
}
