//! Greedy continuations against llama.cpp (tests/golden/<model>/greedy.json): each prompt's
//! continuation must be identical up to the first position where the reference's own top-2
//! margin is below [`NEAR_TIE`] (the inference criteria of DESIGN.md: a near tie may go either
//! way, and after it the two continuations are different texts).
//! Run in release mode: `cargo test --release -p smolrun-tests --test greedy`.

use smolrun_core::kernels::KernelSet;
use smolrun_core::model::State;
use smolrun_tests::*;

/// Below this top-2 logit margin in llama.cpp's own run, a token may differ.
const NEAR_TIE: f64 = 0.2;

fn check_greedy(model: &str) {
    check_greedy_on(model, &test_kernels());
}

fn check_greedy_on(model: &str, kernels: &KernelSet) {
    let g = golden(model, "greedy.json");
    let par = ScopedThreads::from_env();
    with_model_on(model, kernels, |_g, m, store| {
        let cases = g["cases"].as_array().expect("cases");
        let n_ctx = cases
            .iter()
            .map(|c| ids(&c["prompt_tokens"]).len() + ids(&c["tokens"]).len() + 1)
            .max()
            .unwrap_or(1);
        let mut state = State::new(m, n_ctx).expect("state");
        let (mut matches, mut checked_tokens) = (0, 0);
        let mut report = Vec::new();
        let mut failures = Vec::new();
        for c in cases {
            let prompt = ids(&c["prompt_tokens"]);
            let want = ids(&c["tokens"]);
            let ref_margins: Vec<f64> = c["margins"]
                .as_array()
                .expect("margins")
                .iter()
                .map(|m| m.as_f64().expect("a margin"))
                .collect();
            // Tokens before the reference's first near tie must agree.
            let must_agree = ref_margins
                .iter()
                .position(|&m| m < NEAR_TIE)
                .unwrap_or(want.len())
                .min(want.len());
            checked_tokens += must_agree;
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
                    let line = format!(
                        "prompt {:?}: first difference at token {i} (llama.cpp's token {:.4} below ours there, \
                         reference top-2 margin {:.4}; must agree up to token {must_agree}): ours {:?}, llama.cpp {:?}",
                        c["prompt"].as_str().unwrap_or(""),
                        margins[i],
                        ref_margins.get(i).copied().unwrap_or(f64::NAN),
                        &got[i..],
                        &want[i..]
                    );
                    if i < must_agree {
                        failures.push(line.clone());
                    }
                    report.push(line);
                }
            }
        }
        println!(
            "{model}: {matches}/{} greedy continuations identical; {checked_tokens} tokens before \
             the reference's near ties all agree unless listed as failures",
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
            checked_tokens > 0,
            "{model}: every continuation starts at a near tie: the test compares nothing"
        );
        assert!(
            failures.is_empty(),
            "{model}: continuations differ before the reference's first near tie (margin < {NEAR_TIE}):\n{}",
            failures.join("\n")
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
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B, 1.1 GB; minutes of CPU)"]
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

#[test]
fn synthetic_smollm3() {
    check_greedy("synthetic-smollm3");
}

#[test]
fn synthetic_phi3() {
    check_greedy("synthetic-phi3");
}

// The synthetic mixtures of experts: their tokens agree with llama.cpp's even with a routing
// bug (a planted x1.05 on the weights' sum passed all three), so these only say the decode loop
// runs them; what holds their routing is logits.rs's KL bound against llama.cpp (1e-4; the plant
// fails synthetic_qwen3moe) and batch_exact.rs's decode path equal to the batch path, bit for bit.

#[test]
fn synthetic_qwen3moe() {
    check_greedy("synthetic-qwen3moe");
}

#[test]
fn synthetic_qwen2moe() {
    check_greedy("synthetic-qwen2moe");
}

#[test]
fn synthetic_bailingmoe2() {
    check_greedy("synthetic-bailingmoe2");
}

#[test]
fn synthetic_qwen35() {
    check_greedy("synthetic-qwen35");
}

#[test]
fn synthetic_olmoe() {
    check_greedy("synthetic-olmoe");
}

#[test]
fn synthetic_qwen35moe() {
    check_greedy("synthetic-qwen35moe");
}

#[test]
fn synthetic_lfm2() {
    check_greedy("synthetic-lfm2");
}

#[test]
fn synthetic_lfm2moe() {
    check_greedy("synthetic-lfm2moe");
}

#[test]
fn synthetic_smallthinker() {
    check_greedy("synthetic-smallthinker");
}

#[test]
fn synthetic_granitehybrid() {
    check_greedy("synthetic-granitehybrid");
}

// The 1-bit, 2-bit and ternary kernels (golden::LOWBIT_MODELS) over greedy text, but for
// qwen2.5-coder-0.5b-q1_0, whose greedy text is degenerate (golden::NO_GREEDY).

/// On this CPU's kernel set: the scalar Q2_K face takes 73 s of CI for these 5 x 32 tokens, the
/// native one 4 s, with the same result (5/5 identical, 73 tokens checked; the faces are held
/// to the scalar one by the kernel exactness tests). This also runs the production path against
/// llama.cpp, where the others run the scalar truth.
#[test]
fn qwen25_coder_05b_q2_k() {
    check_greedy_on(
        "qwen2.5-coder-0.5b-q2_k",
        &KernelSet::select(&smolrun_linux::detect_features()),
    );
}

#[test]
fn synthetic_qwen3_q2_0() {
    check_greedy("synthetic-qwen3-q2_0");
}

#[test]
fn synthetic_qwen3_q2_k() {
    check_greedy("synthetic-qwen3-q2_k");
}

/// IQ2_XXS (#33) on this CPU's kernels (the logits test runs the scalar truth).
#[test]
fn synthetic_qwen3_iq2_xxs() {
    check_greedy_on(
        "synthetic-qwen3-iq2_xxs",
        &KernelSet::select(&smolrun_linux::detect_features()),
    );
}

/// IQ3_XXS (#33) likewise.
#[test]
fn synthetic_qwen3_iq3_xxs() {
    check_greedy_on(
        "synthetic-qwen3-iq3_xxs",
        &KernelSet::select(&smolrun_linux::detect_features()),
    );
}

/// IQ2_XS (#33) likewise.
#[test]
fn synthetic_qwen3_iq2_xs() {
    check_greedy_on(
        "synthetic-qwen3-iq2_xs",
        &KernelSet::select(&smolrun_linux::detect_features()),
    );
}

/// IQ2_S (#33) likewise.
#[test]
fn synthetic_qwen3_iq2_s() {
    check_greedy_on(
        "synthetic-qwen3-iq2_s",
        &KernelSet::select(&smolrun_linux::detect_features()),
    );
}

/// IQ3_S (#33) likewise.
#[test]
fn synthetic_qwen3_iq3_s() {
    check_greedy_on(
        "synthetic-qwen3-iq3_s",
        &KernelSet::select(&smolrun_linux::detect_features()),
    );
}

/// IQ1_S (#33) likewise.
#[test]
fn synthetic_qwen3_iq1_s() {
    check_greedy_on(
        "synthetic-qwen3-iq1_s",
        &KernelSet::select(&smolrun_linux::detect_features()),
    );
}

/// IQ1_M (#33) likewise.
#[test]
fn synthetic_qwen3_iq1_m() {
    check_greedy_on(
        "synthetic-qwen3-iq1_m",
        &KernelSet::select(&smolrun_linux::detect_features()),
    );
}

#[test]
fn synthetic_qwen3_tq1_0() {
    check_greedy("synthetic-qwen3-tq1_0");
}

#[test]
fn synthetic_qwen3_tq2_0() {
    check_greedy("synthetic-qwen3-tq2_0");
}

/// The IQ4 types (#33) on this CPU's kernel set, as qwen25_coder_05b_q2_k: the production
/// path against llama.cpp (the logits tests run the scalar truth), and seconds instead of minutes.
#[test]
fn qwen25_coder_05b_iq4_nl() {
    check_greedy_on(
        "qwen2.5-coder-0.5b-iq4_nl",
        &KernelSet::select(&smolrun_linux::detect_features()),
    );
}

#[test]
fn qwen25_coder_05b_iq4_xs() {
    check_greedy_on(
        "qwen2.5-coder-0.5b-iq4_xs",
        &KernelSet::select(&smolrun_linux::detect_features()),
    );
}

// Qwen2.5-Coder-1.5B requantized to #33's types (golden::LOWBIT_15B_MODELS, by hand: the files
// come from tools/oracle/qwen15b-types.sh), on this CPU's kernel set as the logits tests run it.
fn check_greedy_15b(model: &str) {
    check_greedy_on(model, &test_kernels_or(true));
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B in IQ4_NL, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_iq4_nl_pure() {
    check_greedy_15b("qwen2.5-coder-1.5b-iq4_nl-pure");
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B in IQ4_XS, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_iq4_xs_pure() {
    check_greedy_15b("qwen2.5-coder-1.5b-iq4_xs-pure");
}

/// The IQ2_XXS mix as llama-quantize makes it (165 matrices IQ2_XXS, 28 Q4_K, 4 Q2_K, the head
/// Q5_K): its text repeats itself but is not one token over and over, so greedy is compared.
#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B, IQ2_XXS mix, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_iq2_xxs() {
    check_greedy_15b("qwen2.5-coder-1.5b-iq2_xxs");
}

/// The IQ3_XXS mix (84 matrices IQ3_XXS, 56 IQ2_S, 29 IQ3_S, 28 Q4_K, the head Q5_K).
#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B, IQ3_XXS mix, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_iq3_xxs() {
    check_greedy_15b("qwen2.5-coder-1.5b-iq3_xxs");
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B in IQ3_XXS, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_iq3_xxs_pure() {
    check_greedy_15b("qwen2.5-coder-1.5b-iq3_xxs-pure");
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B in IQ2_XXS, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_iq2_xxs_pure() {
    check_greedy_15b("qwen2.5-coder-1.5b-iq2_xxs-pure");
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B in Q3_K, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_q3_k_pure() {
    check_greedy_15b("qwen2.5-coder-1.5b-q3_k-pure");
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B in Q5_K, tools/oracle/qwen15b-types.sh)"]
fn qwen25_coder_15b_q5_k_pure() {
    check_greedy_15b("qwen2.5-coder-1.5b-q5_k-pure");
}
