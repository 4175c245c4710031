//! Speculative decoding end to end (`run --draft`): at temperature 0 the tokens are the ones
//! plain decoding gives, with prompt lookup and with a draft model, on a code-editing prompt
//! whose answer repeats its input (so drafts are accepted: the tests assert that some are, and
//! that some are rejected, so both paths run); a token limit inside a verified run stops where
//! plain decoding stops; a draft model with another vocabulary is refused.
//! Meant for release mode: `cargo test --release -p smolrun --test speculative`.

mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

const PROMPT: &str = "<|im_start|>user
Here is a Python function. Rewrite it with type hints, keeping everything else exactly the same.

```python
def merge_intervals(intervals):
    if not intervals:
        return []
    intervals = sorted(intervals, key=lambda pair: pair[0])
    merged = [list(intervals[0])]
    for start, end in intervals[1:]:
        last = merged[-1]
        if start <= last[1]:
            last[1] = max(last[1], end)
        else:
            merged.append([start, end])
    return [tuple(pair) for pair in merged]
```<|im_end|>
<|im_start|>assistant
";

fn qwen() -> PathBuf {
    model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
}

/// `run --json` at temperature 0 on two threads with `extra` flags.
fn run(model: &Path, n: usize, extra: &[&str]) -> Value {
    let o = smolrun()
        .args(["run", "-m"])
        .arg(model)
        .args(["-p", PROMPT, "-n", &n.to_string(), "--temp", "0", "-t", "2"])
        .args(["--json", "--no-repack-cache"])
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
    serde_json::from_str(stdout(&o).trim()).unwrap()
}

fn tokens(v: &Value) -> Vec<u64> {
    serde_json::from_value(v["tokens"].clone()).unwrap()
}

/// The same tokens as plain decoding, some drafts accepted and some rejected.
fn assert_speculated_like_plain(plain: &Value, spec: &Value, what: &str) {
    assert_eq!(tokens(spec), tokens(plain), "{what}: the tokens differ");
    assert_eq!(spec["text"], plain["text"], "{what}");
    let rate = spec["draft_accept_rate"].as_f64().unwrap();
    assert!(rate > 0.0 && rate < 1.0, "{what}: accept rate {rate}");
    let per_pass = spec["tokens_per_pass"].as_f64().unwrap();
    assert!(per_pass > 1.0, "{what}: {per_pass} tokens per pass");
    assert_eq!(plain["tokens_per_pass"].as_f64(), Some(1.0));
    assert!(plain["draft_accept_rate"].is_null());
}

#[test]
fn ngram_drafts_give_the_plain_tokens_at_temperature_0() {
    let plain = run(&qwen(), 160, &[]);
    assert!(tokens(&plain).len() > 100, "{plain}");
    let spec = run(&qwen(), 160, &["--draft", "ngram"]);
    assert_speculated_like_plain(&plain, &spec, "ngram");

    // A token limit that falls inside verified runs: exactly plain decoding's first tokens.
    for n in [1, 2, 37, 61] {
        let spec = run(&qwen(), n, &["--draft", "ngram", "--draft-max", "6"]);
        assert_eq!(tokens(&spec), tokens(&plain)[..n], "-n {n}");
        assert_eq!(spec["stop"], "length");
    }
}

/// A draft model with the target's vocabulary but not its predictions: Qwen2.5-Coder-0.5B with
/// half of its head pruned (the odd ids), which therefore proposes other tokens at times.
#[test]
fn a_draft_model_gives_the_plain_tokens_at_temperature_0() {
    let dir = std::env::temp_dir().join(format!("smolrun-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ids, draft) = (dir.join("ids.txt"), dir.join("draft.gguf"));
    let kept: Vec<String> = (0..151_936u32)
        .filter(|i| i % 2 == 0)
        .map(|i| i.to_string())
        .collect();
    std::fs::write(&ids, kept.join("\n")).unwrap();
    let o = smolrun()
        .args(["gguf", "prune-head", "-m"])
        .arg(qwen())
        .arg("--ids")
        .arg(&ids)
        .arg("-o")
        .arg(&draft)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));

    let plain = run(&qwen(), 120, &[]);
    let draft_arg = draft.to_str().unwrap();
    let spec = run(&qwen(), 120, &["--draft", draft_arg, "--draft-max", "5"]);
    assert_speculated_like_plain(&plain, &spec, "draft model");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_draft_model_with_another_vocabulary_is_refused() {
    let err = expect_failure(
        smolrun()
            .args(["run", "-m"])
            .arg(qwen())
            .args(["-p", "hi", "-n", "2", "--draft"])
            .arg(gemma()),
    );
    assert!(
        err.contains("vocabulary") && err.contains("--draft ngram"),
        "{err}"
    );
}
