//! Greedy continuations against llama.cpp (tests/golden/<model>/greedy.json): the 32-token
//! continuation of at least 4 of the 5 prompts must be identical (one may diverge where two
//! candidates are within rounding of each other).
//! Run in release mode: `cargo test --release -p smolrun-tests --test greedy`.

use smolrun_core::model::State;
use smolrun_tests::*;

fn check_greedy(model: &str) {
    let Some(g) = model_path(model).map(|_| golden(model, "greedy.json")) else {
        return;
    };
    let par = ScopedThreads::from_env();
    with_model(model, |_g, m, store| {
        let cases = g["cases"].as_array().expect("cases");
        let n_ctx = cases
            .iter()
            .map(|c| ids(&c["prompt_tokens"]).len() + ids(&c["tokens"]).len() + 1)
            .max()
            .unwrap_or(1);
        let mut state = State::new(m, n_ctx).expect("state");
        let mut matches = 0;
        let mut report = Vec::new();
        for c in cases {
            let prompt = ids(&c["prompt_tokens"]);
            let want = ids(&c["tokens"]);
            state.reset();
            let mut got = Vec::with_capacity(want.len());
            let logits = m
                .forward_batch(&mut state, store, &par, &prompt, 0)
                .expect("prompt");
            let mut tok = argmax(logits);
            // gap[k]: how far llama.cpp's token at step k lies below our choice there
            let mut margins = vec![logits[tok as usize] - logits[want[0] as usize]];
            got.push(tok);
            while got.len() < want.len() {
                let pos = prompt.len() + got.len() - 1;
                let logits = m
                    .forward(&mut state, store, &par, tok, pos)
                    .expect("forward");
                tok = argmax(logits);
                margins.push(logits[tok as usize] - logits[want[got.len()] as usize]);
                got.push(tok);
            }
            let first_diff = got.iter().zip(&want).position(|(a, b)| a != b);
            match first_diff {
                None => matches += 1,
                Some(i) => {
                    report.push(format!(
                        "prompt {:?}: first difference at token {i} (llama.cpp's token {:.4} below ours there): ours {:?}, llama.cpp {:?}",
                        c["prompt"].as_str().unwrap_or(""),
                        margins[i],
                        &got[i..],
                        &want[i..]
                    ))
                }
            }
        }
        println!(
            "{model}: {matches}/{} greedy continuations identical",
            cases.len()
        );
        for r in &report {
            println!("  {r}");
        }
        assert!(
            cases.len() >= 5,
            "{model}: greedy.json has fewer than 5 cases"
        );
        assert!(
            matches + 1 >= cases.len(),
            "{model}: only {matches}/{} continuations identical:\n{}",
            cases.len(),
            report.join("\n")
        );
    });
}

#[test]
fn gemma3_270m() {
    check_greedy("gemma3-270m");
}

#[test]
fn qwen25_coder_05b() {
    check_greedy("qwen2.5-coder-0.5b");
}

#[test]
fn qwen25_coder_15b() {
    check_greedy("qwen2.5-coder-1.5b");
}

#[test]
fn synthetic_qwen3() {
    check_greedy("synthetic-qwen3");
}

#[test]
fn synthetic_llama() {
    check_greedy("synthetic-llama");
}
