//! Teacher-forced logits against llama.cpp (tests/golden/<model>/logits.json): at every position
//! of the reference texts, our top-1 must equal the reference's wherever the reference's top-2
//! margin exceeds 0.1, and the mean KL divergence over {top-20 ids, rest} must stay below 0.005.
//! Run in release mode: `cargo test --release -p smolrun-tests --test logits`.

use smolrun_core::model::State;
use smolrun_tests::*;

const MIN_MARGIN: f32 = 0.1;
const MAX_MEAN_KL: f64 = 0.005;

/// Positions where our top-1 may differ although the reference's margin exceeds MIN_MARGIN.
/// Zero except where measured otherwise: llama.cpp's x86 kernels sum in an order (AVX-512
/// lanes, tiled batch GEMMs) that smolrun's scalar kernels do not reproduce, and Gemma 3's and
/// Qwen2.5's activation outliers turn those last-bit differences into whole Q8 rounding steps.
/// Each allowance is the measured count; tighten it when the kernels get closer.
fn allowed_top1_misses(model: &str) -> usize {
    match model {
        // (text 2, position 70): reference margin 0.25; we pick its second token, 44993, which
        // is also llama.cpp's own top-1 there when it runs without repacked weights
        // (use_extra_bufts = false: 4 of these 202 positions change their top-1 that way).
        "gemma3-270m" => 1,
        // (text 2, position 6): reference margin 0.14
        "qwen2.5-coder-0.5b" => 1,
        _ => 0,
    }
}

fn check_logits(model: &str) {
    let Some(golden_path) = model_path(model).map(|_| golden(model, "logits.json")) else {
        return;
    };
    let par = ScopedThreads::from_env();
    with_model(model, |_g, m, store| {
        let texts = golden_path["texts"].as_array().expect("texts");
        let n_ctx = texts
            .iter()
            .map(|t| t["tokens"].as_array().map_or(0, |a| a.len()))
            .max()
            .unwrap_or(1);
        let mut state = State::new(m, n_ctx).expect("state");
        let (mut n_pos, mut n_checked, mut n_agree, mut kl_sum, mut kl_max) = (0, 0, 0, 0.0, 0f64);
        let mut disagreements = Vec::new();
        for (ti, text) in texts.iter().enumerate() {
            let tokens = ids(&text["tokens"]);
            let tops = text["top"].as_array().expect("top");
            let lses = text["lse"].as_array().expect("lse");
            state.reset();
            // One batch per text, as the reference ran it (its attention kernel depends on the
            // batch size, and forward_batch_all picks the same one).
            let mut all = Vec::with_capacity(tokens.len());
            m.forward_batch_all(&mut state, store, &par, &tokens, 0, 0, &mut |_, l| {
                all.push(l.to_vec())
            })
            .expect("forward");
            for (i, logits) in all.iter().enumerate() {
                let Some(top) = tops.get(i) else { continue };
                let top: Vec<(u32, f32)> = top
                    .as_array()
                    .expect("top pairs")
                    .iter()
                    .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap() as f32))
                    .collect();
                let lse = lses[i].as_f64().expect("lse");
                let kl = kl_top_k(&top, lse, logits);
                kl_sum += kl;
                kl_max = kl_max.max(kl);
                n_pos += 1;
                if top[0].1 - top[1].1 > MIN_MARGIN {
                    n_checked += 1;
                    let ours = argmax(logits);
                    if ours == top[0].0 {
                        n_agree += 1;
                    } else {
                        disagreements.push((ti, i, top[0], ours, logits[ours as usize]));
                    }
                }
            }
        }
        let mean_kl = kl_sum / n_pos.max(1) as f64;
        println!(
            "{model}: {n_pos} positions, top-1 agrees on {n_agree}/{n_checked} with margin > {MIN_MARGIN}, \
             mean KL {mean_kl:.6}, max KL {kl_max:.6}"
        );
        assert!(n_pos > 0, "{model}: logits.json has no positions");
        if !disagreements.is_empty() {
            println!("  top-1 differs at (text, position, reference (id, logit), ours, our logit): {disagreements:?}");
        }
        assert!(
            disagreements.len() <= allowed_top1_misses(model),
            "{model}: top-1 differs from llama.cpp at (text, position, reference (id, logit), ours, our logit): {disagreements:?}"
        );
        assert!(
            mean_kl < MAX_MEAN_KL,
            "{model}: mean KL divergence {mean_kl} >= {MAX_MEAN_KL}"
        );
    });
}

#[test]
fn gemma3_270m() {
    check_logits("gemma3-270m");
}

#[test]
fn qwen25_coder_05b() {
    check_logits("qwen2.5-coder-0.5b");
}

#[test]
fn qwen25_coder_15b() {
    check_logits("qwen2.5-coder-1.5b");
}

#[test]
fn synthetic_qwen3() {
    check_logits("synthetic-qwen3");
}

#[test]
fn synthetic_llama() {
    check_logits("synthetic-llama");
}
