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
        // Gemma has no recurrent layers: no such line.
        assert!(!err.contains("recurrent state"), "{args:?}: {err}");
        // 100M is 104.9 MB; the weights alone are 246.4 MB.
        assert!(err.contains("104.9 MB (--mem-budget)"), "{args:?}: {err}");
        assert!(err.contains("246.4 MB"), "{args:?}: {err}");
    }
}

/// Qwen3.5's recurrent layers show as a fixed state beside the attention layers' KV cache, which
/// alone counts per token: synthetic-qwen35 has one attention layer (2 KV heads of 64, f16 keys
/// and values: 512 bytes per position) and three recurrent layers of 19,456 bytes each.
#[test]
fn a_refusal_shows_the_recurrent_state_apart_from_the_kv_cache() {
    let model = model("synthetic-qwen35.gguf");
    let err = expect_failure(
        smolrun()
            .args(["run", "-p", "Hello", "-n", "1", "-c", "2048", "-m"])
            .arg(&model)
            .args(["--mem-budget", "1M"]),
    );
    let line = |part: &str| {
        err.lines()
            .find(|l| l.trim_start().starts_with(part))
            .unwrap_or_else(|| panic!("no {part:?} line in: {err}"))
            .to_string()
    };
    // 2048 x 512 bytes = 1.0 MB at 0.5 KB per token; 3 x 19,456 bytes = 0.1 MB.
    let kv = line("kv cache");
    assert!(
        kv.contains("1.0 MB") && kv.contains("0.5 KB per token"),
        "{kv}"
    );
    let state = line("recurrent state");
    assert!(
        state.contains("0.1 MB") && state.contains("same at any context"),
        "{state}"
    );
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

/// An untied embedding table (synthetic-llama: 151,936 rows of 144 bytes, 21.9 MB, and its own
/// output matrix) is read one row per token: after a run, only the pages of the rows used may
/// be in RAM. The run uses a private copy of the file, so that no other process on the machine
/// can bring the table's pages into the page cache, and the copy's pages are dropped first
/// (fsync, then POSIX_FADV_DONTNEED), and this test never touches the copy's pages itself.
/// Without MADV_RANDOM on the table, each row's fault reads
/// ahead around it (measured: 20 MB of the 0.5B's 93.6 MB table after 64 tokens), and reading
/// the header sequentially reads ahead into the table (2.4 MB here, read_ahead_kb is 8192).
#[test]
fn an_untied_embedding_table_stays_on_flash() {
    let source = smolrun_tests::model_path("synthetic-llama");
    let path = std::env::temp_dir().join(format!("smolrun-embd-{}.gguf", std::process::id()));
    std::fs::copy(&source, &path).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    file.sync_all().unwrap();
    // SAFETY: plain syscall on an open descriptor; length 0 means to the end of the file.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);

    // The table's place comes from the source file read into memory: parsing the copy through
    // its mapping would fault its header in and read ahead into the table (2.4 MB), pages this
    // process then holds mapped, which no drop by the run can evict (a flaky 2.9 MB in CI).
    let source_bytes = std::fs::read(&source).unwrap();
    let gguf = smolrun_core::gguf::Gguf::parse(&source_bytes).unwrap();
    let table = gguf.tensor("token_embd.weight").unwrap();
    assert!(gguf.tensor("output.weight").is_some());
    let range = table.offset as usize..(table.offset + table.n_bytes) as usize;
    // Mapped only to ask which of its pages are resident (mincore touches none).
    let mapped = smolrun_linux::MappedFile::open(&path).unwrap();
    let before = mapped.resident_bytes(range.clone()).unwrap();

    let prompt = "A short story about a lighthouse keeper who finds a message in a bottle. \
                  It begins on a stormy night in November, when the lamp fails.";
    let o = smolrun()
        .args(["run", "-m"])
        .arg(&path)
        .args(["-p", prompt, "-n", "32", "--temp", "0", "-c", "256"])
        .output()
        .unwrap();
    let after = mapped.resident_bytes(range).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    println!(
        "embedding table: {after} of {} bytes resident after the run ({before} before)",
        table.n_bytes
    );
    // About 60 tokens, one 4 KB page each (a 144-byte row rarely straddles two): at most
    // 64 x 2 pages = 0.5 MB. Readahead around each row, or around the header and the norms
    // next to the table at load, would leave several MB of it in RAM.
    assert!(
        after <= 64 * 2 * 4096,
        "after the run {after} bytes of the {}-byte embedding table are in RAM",
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
