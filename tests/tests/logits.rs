//! Teacher-forced logits against llama.cpp (tests/golden/<model>/logits.json): at every position
//! of the reference texts, our top-1 must equal the reference's wherever the reference's top-2
//! margin exceeds 0.1 (except at no more positions than llama.cpp's own unrepacked run changes
//! its top-1, each no steadier than the steadiest of those, see `reference_own_top1_changes`), and the mean KL divergence over {top-20 ids,
//! rest} must stay below 0.005.
//! Run in release mode: `cargo test --release -p smolrun-tests --test logits`.

use smolrun_core::model::State;
use smolrun_tests::*;

const MIN_MARGIN: f32 = 0.1;
const MAX_MEAN_KL: f64 = 0.005;

/// The synthetic mixtures of experts' own bound. Their logits are dominated by the successor
/// structure of the synthetic head (tools/oracle/synth_model.py), so the FFN moves them little:
/// with a real routing bug top-1 still agrees at every position and the mean KL stays inside
/// the general bound. synthetic-qwen3moe: unnormalised weights give 6.1e-4, the correct FFN
/// 2e-6. synthetic-bailingmoe2 (correct: 3e-6): the selection bias added to the weights too
/// 2.4e-4, groups scored by their best expert only 8.0e-4, no groups 1.3e-3, no selection bias
/// 1.5e-3 (the shared expert left out, 6.4e-3, and the weight scale, 9.2e-3, the general bound
/// catches). Below 1e-4 catches each and leaves 30x the measured noise. (Its max KL, 2e-4, is at
/// the two positions where a chosen expert's selection score is within 7e-4 of the next one's:
/// a routing near tie that llama.cpp's last bits decide the other way.) synthetic-qwen2moe
/// (correct: 1e-6): the shared expert's sigmoid gate left out gives 1.8e-3.
/// synthetic-qwen35 (correct: 1e-6, max 8e-6) has the same weakness in its recurrent layers,
/// with top-1 agreeing at every position for each bug: beta fixed at 0.5 gives 7.5e-4, value
/// heads mapped to key heads interleaved instead of tiled 3.4e-3, no decay (g = 0) 3.9e-3, the
/// conv's current tap taken from the oldest 5.3e-3; the same bound catches each.
/// synthetic-olmoe (correct: 2e-6): the chosen weights renormalised (qwen3moe's rule) 2.4e-4.
/// synthetic-lfm2 (correct: below 1e-6, max 7e-6), its short convolutions likewise: the conv
/// window forgotten at every token gives 4.6e-4 with top-1 agreeing at every position (b and c
/// swapped, 7.0e-3, and b * c for b * x, 1.2e-2, the general bound catches).
/// synthetic-lfm2moe (correct: 2e-6, max 1.3e-4): the selection bias left out of the choice
/// gives 7.9e-4 (top-1 differing at 2 of 196 positions), the chosen sigmoids left unnormalised
/// 2.5e-2 (78 of 196). synthetic-smallthinker (correct: 3e-6, max 1.6e-4): the router on the
/// FFN's normed input instead of the layer's input gives 3.6e-3, SiLU experts for ReGLU
/// 3.2e-3, the windowed layers' RoPE base 10000 for the file's global one 5.6e-4, the chosen
/// weights unnormalised 4.4e-4, RoPE on the global layers (llama.cpp runs them without)
/// 3.1e-4, each with top-1 agreeing at all but at most one position.
const MAX_MEAN_KL_SYNTHETIC_MOE: f64 = 1e-4;

/// synthetic-smollm3's own bound, for the same reason at a smaller scale: RoPE applied on its
/// NoPE layers (3 and 7) moves the mean KL from 1e-6 to 6.2e-5 with top-1 agreeing everywhere,
/// inside even the MoE bound. 1e-5 catches it and leaves 10x the measured noise. (synthetic-phi3,
/// correct 3e-6: gate and up swapped gives 1.6e-2, which the general bound catches.)
const MAX_MEAN_KL_SYNTHETIC_NOPE: f64 = 1e-5;

/// synthetic-qwen35moe's own bound: its experts' share of the residual stream is small (the
/// gated shared expert and the embeddings dominate), so the chosen weights left unnormalised
/// (qwen2moe's rule instead of qwen35moe's) move the mean KL only from 1e-6 to 4.4e-5, with
/// top-1 agreeing everywhere: inside the MoE bound. 1e-5 catches it and leaves 10x the
/// measured noise.
const MAX_MEAN_KL_SYNTHETIC_QWEN35MOE: f64 = 1e-5;

/// synthetic-granitehybrid's own bound: the embeddings dominate its residual stream and the
/// residual scale (0.5) halves every layer's share, so its Mamba-2 bugs move the logits little
/// and top-1 agrees everywhere with each of them (correct: mean 6.1e-8, max 7.9e-7). D left
/// out gives 5.9e-5, the SiLU(z) gate left out 4.2e-4, exp(dt) for softplus(dt) 4.3e-5, B and
/// C groups tiled over the heads (h % G) instead of shared by consecutive heads 1.4e-4: inside
/// the MoE bound but two of them. Its two attention layers weigh even less: the file's
/// attention.scale ignored (1/sqrt(head_dim) instead) gives 2.9e-6 (the residual scale left
/// out, 4.8e-3, the general bound catches). 1e-6 catches each, the attention scale with 3x to
/// spare, and leaves 16x the measured noise.
const MAX_MEAN_KL_SYNTHETIC_GRANITEHYBRID: f64 = 1e-6;

/// How many positions (with a reference margin over MIN_MARGIN) llama.cpp's own top-1 changes
/// at when it runs the weights unrepacked (logits-norepack.json, real models): the most top-1
/// differences we may have. Its x86 kernels sum in orders (AVX-512 lanes, tiled batch GEMMs,
/// repacked layouts) that smolrun's kernels do not reproduce; in these quantized models a
/// last-bit difference now and then becomes a whole Q8 rounding step (an activation at 62.5
/// +- 1e-5 in one layer of one token, say), and the texts' later positions, which read that
/// token, move by up to a few tenths of a logit. Where llama.cpp is not stable against its
/// own other layout, no implementation that is not bit-identical to it can be.
///
/// Returns the positions' count and the largest reference top-2 margin among them: a top-1 of
/// ours that differs is allowed only where the reference's margin is no larger than that (a
/// position where llama.cpp itself is that unstable), and no more often than llama.cpp's own
/// run. Not the same positions: which near ties flip depends on the summation order, so only an
/// implementation bit-identical to llama.cpp's unrepacked run would flip exactly there (the
/// 0.5B flips at (2, 6), reference margin 0.141, where llama.cpp's own run flips at (2, 37),
/// margin 0.230; Gemma at (2, 70), margin 0.248, one of llama.cpp's own four, margins up to 0.286).
fn reference_own_top1_changes(model: &str, reference: &serde_json::Value) -> (usize, f32) {
    // tools/oracle/regen.sh writes it for every real model (golden() says how when it is
    // missing); the synthetic ones have none.
    // the low-bit files made from the 0.5B have one (tools/oracle/regen.sh)
    let lowbit_real = (smolrun_tests::golden::LOWBIT_MODELS.contains(&model)
        || smolrun_tests::golden::LOWBIT_15B_MODELS.contains(&model))
        && !model.starts_with("synthetic-");
    if !smolrun_tests::golden::REAL_MODELS.contains(&model) && !lowbit_real {
        return (0, 0.0);
    }
    let other = golden(model, "logits-norepack.json");
    let (texts, other_texts) = (
        reference["texts"].as_array().expect("texts"),
        other["texts"].as_array().expect("texts"),
    );
    assert_eq!(
        texts.len(),
        other_texts.len(),
        "{model}: logits-norepack.json has other texts"
    );
    let mut changes = Vec::new();
    let mut widest = 0f32;
    for (ti, (t, o)) in texts.iter().zip(other_texts).enumerate() {
        assert_eq!(
            t["tokens"], o["tokens"],
            "{model}: text {ti} tokenized differently"
        );
        for (i, (top, other_top)) in t["top"]
            .as_array()
            .expect("top")
            .iter()
            .zip(o["top"].as_array().expect("top"))
            .enumerate()
        {
            let logit = |k: usize| top[k][1].as_f64().expect("logit");
            let margin = logit(0) - logit(1);
            if margin > MIN_MARGIN as f64 && top[0][0] != other_top[0][0] {
                changes.push((ti, i));
                widest = widest.max(margin as f32);
            }
        }
    }
    println!(
        "  llama.cpp unrepacked changes its top-1 at (text, position): {changes:?}, reference \
         margins up to {widest:.4}"
    );
    (changes.len(), widest)
}

fn check_logits(model: &str) {
    check_logits_on(model, &test_kernels());
}

fn check_logits_on(model: &str, kernels: &smolrun_core::kernels::KernelSet) {
    let golden_path = golden(model, "logits.json");
    let par = ScopedThreads::from_env();
    println!("{model}: kernels {}", kernels.name());
    with_model_on(model, kernels, |_g, m, store| {
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
                        disagreements.push((
                            ti,
                            i,
                            top[0],
                            ours,
                            logits[ours as usize],
                            top[0].1 - top[1].1,
                        ));
                    }
                }
            }
        }
        let mean_kl = kl_sum / n_pos.max(1) as f64;
        println!(
            "{model}: {n_pos} positions, top-1 agrees on {n_agree}/{n_checked} with margin > {MIN_MARGIN}, \
             mean KL {mean_kl:.3e}, max KL {kl_max:.3e}"
        );
        assert!(n_pos > 0, "{model}: logits.json has no positions");
        if !disagreements.is_empty() {
            println!("  top-1 differs at (text, position, reference (id, logit), ours, our logit): {disagreements:?}");
        }
        let (allowed, widest) = reference_own_top1_changes(model, &golden_path);
        let wider: Vec<_> = disagreements.iter().filter(|d| d.5 > widest).collect();
        assert!(
            wider.is_empty(),
            "{model}: top-1 differs from llama.cpp where the reference's top-2 margin is wider than \
             any at which llama.cpp's own unrepacked run changes its top-1 ({widest:.4}): (text, \
             position, reference (id, logit), ours, our logit, reference margin) {wider:?}"
        );
        assert!(
            disagreements.len() <= allowed,
            "{model}: top-1 differs from llama.cpp at (text, position, reference (id, logit), ours, our logit): \
             {disagreements:?}, more often than llama.cpp's own unrepacked run ({allowed})"
        );
        let max_mean_kl = if matches!(
            model,
            "synthetic-qwen3moe"
                | "synthetic-qwen2moe"
                | "synthetic-bailingmoe2"
                | "synthetic-qwen35"
                | "synthetic-olmoe"
                | "synthetic-lfm2"
                | "synthetic-lfm2moe"
                | "synthetic-smallthinker"
        ) {
            MAX_MEAN_KL_SYNTHETIC_MOE
        } else if model == "synthetic-smollm3" {
            MAX_MEAN_KL_SYNTHETIC_NOPE
        } else if model == "synthetic-qwen35moe" {
            MAX_MEAN_KL_SYNTHETIC_QWEN35MOE
        } else if model == "synthetic-granitehybrid" {
            MAX_MEAN_KL_SYNTHETIC_GRANITEHYBRID
        } else {
            MAX_MEAN_KL
        };
        assert!(
            mean_kl < max_mean_kl,
            "{model}: mean KL divergence {mean_kl} >= {max_mean_kl}"
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
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B, 1.1 GB; minutes of CPU)"]
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

#[test]
fn synthetic_qwen3moe() {
    check_logits("synthetic-qwen3moe");
}

#[test]
fn synthetic_qwen2moe() {
    check_logits("synthetic-qwen2moe");
}

#[test]
fn synthetic_bailingmoe2() {
    check_logits("synthetic-bailingmoe2");
}

#[test]
fn synthetic_qwen35() {
    check_logits("synthetic-qwen35");
}

#[test]
fn synthetic_smollm3() {
    check_logits("synthetic-smollm3");
}

#[test]
fn synthetic_phi3() {
    check_logits("synthetic-phi3");
}

#[test]
fn synthetic_olmoe() {
    check_logits("synthetic-olmoe");
}

#[test]
fn synthetic_qwen35moe() {
    check_logits("synthetic-qwen35moe");
}

#[test]
fn synthetic_lfm2() {
    check_logits("synthetic-lfm2");
}

#[test]
fn synthetic_lfm2moe() {
    check_logits("synthetic-lfm2moe");
}

#[test]
fn synthetic_smallthinker() {
    check_logits("synthetic-smallthinker");
}

#[test]
fn synthetic_granitehybrid() {
    check_logits("synthetic-granitehybrid");
}

// The 1-bit, 2-bit and ternary kernels against llama.cpp (golden::LOWBIT_MODELS).
#[test]
fn qwen25_coder_05b_q1_0() {
    check_logits("qwen2.5-coder-0.5b-q1_0");
}

// qwen2.5-coder-0.5b-q2_k (only ffn_down in Q2_K) is held to its perplexity, not here: its
// mean KL is 0.0010 (bound 0.005), but top-1 differs at 3 of 191 positions where llama.cpp's own
// unrepacked run differs at 2 (measured with the scalar kernels). The Q2_K kernel's logits test
// is synthetic_qwen3_q2_k, every matrix in Q2_K.
#[test]
fn synthetic_qwen3_q2_k() {
    check_logits("synthetic-qwen3-q2_k");
}

// IQ2_XXS (#33): every matrix but the token embedding.
#[test]
fn synthetic_qwen3_iq2_xxs() {
    check_logits("synthetic-qwen3-iq2_xxs");
}

#[test]
fn synthetic_qwen3_iq3_xxs() {
    check_logits("synthetic-qwen3-iq3_xxs");
}

#[test]
fn synthetic_qwen3_iq2_xs() {
    check_logits("synthetic-qwen3-iq2_xs");
}

#[test]
fn synthetic_qwen3_iq2_s() {
    check_logits("synthetic-qwen3-iq2_s");
}

#[test]
fn synthetic_qwen3_iq3_s() {
    check_logits("synthetic-qwen3-iq3_s");
}

#[test]
fn synthetic_qwen3_iq1_s() {
    check_logits("synthetic-qwen3-iq1_s");
}

#[test]
fn synthetic_qwen3_iq1_m() {
    check_logits("synthetic-qwen3-iq1_m");
}

#[test]
fn synthetic_qwen3_q2_0() {
    check_logits("synthetic-qwen3-q2_0");
}

#[test]
fn synthetic_qwen3_tq1_0() {
    check_logits("synthetic-qwen3-tq1_0");
}

#[test]
fn synthetic_qwen3_tq2_0() {
    check_logits("synthetic-qwen3-tq2_0");
}

// The IQ4 kernels (#33) on the 0.5B's real shapes.
#[test]
fn qwen25_coder_05b_iq4_nl() {
    check_logits("qwen2.5-coder-0.5b-iq4_nl");
}

#[test]
fn qwen25_coder_05b_iq4_xs() {
    check_logits("qwen2.5-coder-0.5b-iq4_xs");
}

// Qwen2.5-Coder-1.5B requantized to #33's types (golden::LOWBIT_15B_MODELS, by hand: the files
// come from tools/oracle/qwen15b-types.sh): on this CPU's kernel set, the path a user runs
// (the scalar truth on the 1.5B takes minutes per file; the kernel exactness tests hold the
// faces to it), SMOLRUN_TEST_KERNELS=scalar for the scalar one.
fn check_logits_15b(model: &str) {
    check_logits_on(model, &test_kernels_or(true));
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B in IQ4_NL, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_iq4_nl_pure() {
    check_logits_15b("qwen2.5-coder-1.5b-iq4_nl-pure");
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B in IQ4_XS, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_iq4_xs_pure() {
    check_logits_15b("qwen2.5-coder-1.5b-iq4_xs-pure");
}

/// The IQ2_XXS mix as llama-quantize makes it (165 matrices IQ2_XXS, 28 Q4_K, 4 Q2_K, the head
/// Q5_K): its text repeats itself but is not one token over and over, so greedy is compared.
#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B, IQ2_XXS mix, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_iq2_xxs() {
    check_logits_15b("qwen2.5-coder-1.5b-iq2_xxs");
}

/// The IQ3_XXS mix (84 matrices IQ3_XXS, 56 IQ2_S, 29 IQ3_S, 28 Q4_K, the head Q5_K).
#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B, IQ3_XXS mix, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_iq3_xxs() {
    check_logits_15b("qwen2.5-coder-1.5b-iq3_xxs");
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B in IQ3_XXS, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_iq3_xxs_pure() {
    check_logits_15b("qwen2.5-coder-1.5b-iq3_xxs-pure");
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B in IQ2_XXS, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_iq2_xxs_pure() {
    check_logits_15b("qwen2.5-coder-1.5b-iq2_xxs-pure");
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B in Q3_K, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_q3_k_pure() {
    check_logits_15b("qwen2.5-coder-1.5b-q3_k-pure");
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B in Q5_K, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_q5_k_pure() {
    check_logits_15b("qwen2.5-coder-1.5b-q5_k-pure");
}
