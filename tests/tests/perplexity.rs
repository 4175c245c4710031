//! Perplexity against llama-perplexity (tests/golden/<model>/perplexity.json): the same text,
//! chunks of n_ctx tokens with BOS first, the second half of each chunk scored; ours must be
//! within 0.5% of the reference. The token ids come from tests/golden/<model>/ppl-tokens.json
//! (llama-tokenize on the same text), so the test does not depend on our tokenizer.
//! Run in release mode: `cargo test --release -p smolrun-tests --test perplexity`.

use smolrun_core::model::{perplexity, State};
use smolrun_tests::*;

const MAX_RELATIVE_DIFF: f64 = 0.005;

fn check_perplexity(model: &str) {
    if model_path(model).is_none() {
        return;
    }
    let reference = golden(model, "perplexity.json");
    let tokens_file = golden(model, "ppl-tokens.json");
    let tokens = ids(&tokens_file["tokens"]);
    let n_ctx = reference["n_ctx"].as_u64().expect("n_ctx") as usize;
    let ref_ppl = reference["ppl"].as_f64().expect("ppl");
    let par = ScopedThreads::from_env();
    with_model(model, |g, m, store| {
        let add_bos = match g.get("tokenizer.ggml.add_bos_token") {
            Some(v) => v.as_bool().unwrap_or(false),
            None => g.get_str("tokenizer.ggml.model").ok() == Some("llama"),
        };
        let bos = if add_bos {
            Some(g.get_u64("tokenizer.ggml.bos_token_id").expect("bos id") as u32)
        } else {
            None
        };
        let mut state = State::new(m, n_ctx).expect("state");
        let r = perplexity(m, &mut state, store, &par, &tokens, n_ctx, bos, |_, _| {})
            .expect("perplexity");
        let rel = (r.ppl - ref_ppl).abs() / ref_ppl;
        println!(
            "{model}: ppl {:.4} vs llama.cpp {ref_ppl:.4} ({:+.3}%), {} chunks of {n_ctx}, {} tokens scored",
            r.ppl,
            100.0 * (r.ppl - ref_ppl) / ref_ppl,
            r.n_chunks,
            r.n_scored
        );
        if let Some(n) = reference["n_chunks"].as_u64() {
            assert_eq!(
                r.n_chunks, n as usize,
                "{model}: chunk count differs from llama-perplexity"
            );
        }
        assert!(
            rel < MAX_RELATIVE_DIFF,
            "{model}: perplexity {} differs from llama.cpp's {ref_ppl} by {:.3}% (limit {}%)",
            r.ppl,
            rel * 100.0,
            MAX_RELATIVE_DIFF * 100.0
        );
    });
}

#[test]
fn gemma3_270m() {
    check_perplexity("gemma3-270m");
}

#[test]
fn qwen25_coder_05b() {
    check_perplexity("qwen2.5-coder-0.5b");
}

#[test]
fn qwen25_coder_15b() {
    check_perplexity("qwen2.5-coder-1.5b");
}
