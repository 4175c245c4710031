//! `--weights`: where the weights live while running. A model file bigger than the address
//! space this process may map (iOS 1.7 GB, 32-bit 3 GB, `ulimit -v`, or SMOLRUN_ADDRESS_SPACE
//! as here) is streamed instead of being refused, and gives the text the mapped run gives, as
//! the pread store does; `--weights resident` still refuses it, with both sizes. A model that
//! does not fit in memory is streamed too, with what the run streams per token reported; a
//! budget too small even for the stream zones is refused before loading, with the numbers.
//! Meant for release mode: `cargo test --release -p smolrun`.

mod common;
use common::*;

const PROMPT: &str = "def fibonacci(n):";

fn greedy(extra: &[&str], env: Option<(&str, &str)>) -> std::process::Output {
    let mut cmd = smolrun();
    cmd.args(["run", "-m"])
        .arg(model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
        .args([
            "-p", PROMPT, "-n", "12", "--temp", "0", "-c", "256", "--json",
        ])
        .args(extra);
    if let Some((k, v)) = env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn tokens(o: &std::process::Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    let got: serde_json::Value = serde_json::from_str(stdout(o).trim()).unwrap();
    got["tokens"].clone()
}

#[test]
fn a_file_bigger_than_the_address_space_is_streamed_or_read_with_pread() {
    let mapped = greedy(&[], None);
    assert!(!stderr(&mapped).contains("pread"), "{}", stderr(&mapped));

    // The 491 MB file against a 300 MiB address space (less the 384 MiB kept for the program:
    // no room at all for the file, not even for stream zones): the pread store.
    let budget = Some(("SMOLRUN_ADDRESS_SPACE", "300M"));
    let unmapped = greedy(&[], budget);
    let err = stderr(&unmapped);
    assert!(err.contains("streamed instead of mapped"), "{err}");
    assert!(err.contains("read with pread"), "{err}");
    assert!(err.contains("491 MB"), "{err}");
    assert_eq!(tokens(&unmapped), tokens(&mapped));

    // 700 MiB: 316 MiB for the file, which is streamed with that as its budget.
    let streamed = greedy(&[], Some(("SMOLRUN_ADDRESS_SPACE", "700M")));
    let err = stderr(&streamed);
    assert!(err.contains("streamed instead of mapped"), "{err}");
    let doc: serde_json::Value = serde_json::from_str(stdout(&streamed).trim()).unwrap();
    assert_eq!(doc["tokens"], tokens(&mapped));
    let held = doc["resident_mb"].as_f64().unwrap();
    assert!(held > 100.0 && held < 316.0 * 1.048576, "{doc}");

    // Forced, without any budget: the same text.
    assert_eq!(
        tokens(&greedy(&["--weights", "pread"], None)),
        tokens(&mapped)
    );

    // Forced to map it: refused before mapping, with both sizes and what to do.
    let o = greedy(&["--weights", "resident"], budget);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("491 MB") && err.contains("can map only"),
        "{err}"
    );
}

fn json(o: &std::process::Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_str(stdout(o).trim()).unwrap()
}

#[test]
fn a_model_that_does_not_fit_is_streamed_and_gives_the_mapped_text() {
    let mapped = greedy(&[], None);
    assert!(json(&mapped).get("stream_mb_per_token").is_none());

    // Forced, 50 MB resident, every streamed weight checked against its checksum.
    let forced = greedy(
        &[
            "--weights",
            "stream",
            "--resident-mb",
            "50",
            "--flash-mbps",
            "278",
        ],
        Some(("SMOLRUN_STREAM_VERIFY", "1")),
    );
    let doc = json(&forced);
    assert_eq!(doc["tokens"], tokens(&mapped));
    let resident = doc["resident_mb"].as_f64().unwrap();
    assert!(resident > 0.0 && resident <= 50.0, "{doc}");
    // The 491 MB file less its untied embedding table (read by row) and the resident set.
    let per_token = doc["stream_mb_per_token"].as_f64().unwrap();
    assert!(per_token > 150.0 && per_token < 491.0, "{doc}");
    assert_eq!(doc["flash_mb_s"].as_f64(), Some(278.0));
    let limit = doc["flash_limit_tok_s"].as_f64().unwrap();
    assert!((limit - 278.0 / per_token).abs() < 1e-9, "{doc}");

    // Under auto, a budget the mapped model does not fit in: streamed, the same text.
    let auto = greedy(&["--mem-budget", "400M"], None);
    let err = stderr(&auto);
    assert!(err.contains("does not fit in memory"), "{err}");
    assert!(err.contains("streamed from flash"), "{err}");
    let doc = json(&auto);
    assert_eq!(doc["tokens"], tokens(&mapped));
    assert!(doc["resident_mb"].as_f64().unwrap() > 50.0, "{doc}");

    // A budget that cannot hold the stream zones next to the KV cache and the rest: refused
    // before loading, with the numbers.
    let o = greedy(&["--weights", "stream", "--mem-budget", "90M"], None);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("cannot hold the stream ring"), "{err}");
    assert!(err.contains("MB"), "{err}");
}
