//! A prompt run in batches (each weight read once per batch, `WeightKernel::matmul`) gives the
//! logits that running it token by token gives, to the bit: the same activation quantization,
//! the same dot products per (row, token), the same attention. Checked on the real models with
//! the scalar reference kernels and with this CPU's kernels (the batched SIMD faces, each with
//! the one-row kernel whose bits it keeps: `KernelSet::with_batch_twins`), with
//! batch sizes that do not divide the prompt.
//! Run in release mode: `cargo test --release -p smolrun-tests --test batch_exact`.

use smolrun_core::kernels::KernelSet;
use smolrun_core::model::{Model, ResidentStore, State};
use smolrun_core::platform::Parallel;
use smolrun_linux::MappedFile;
use smolrun_tests::*;

/// Logits at every position of `tokens`, run in batches of `n_batch`.
fn batched(
    m: &Model,
    store: &ResidentStore,
    par: &dyn Parallel,
    tokens: &[u32],
    n_batch: usize,
) -> Vec<Vec<f32>> {
    let all = logits_in_batches(m, store, par, tokens, n_batch);
    let mut state = State::with_batch(m, tokens.len(), n_batch).expect("state");
    // forward_batch: the last position's logits, the same bits.
    let last = m
        .forward_batch(&mut state, store, par, tokens, 0)
        .expect("forward_batch");
    assert_same(&all[tokens.len() - 1], last, "forward_batch's last logits");
    all
}

fn assert_same(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len());
    if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != b[i].to_bits()) {
        panic!(
            "{what}: logit {i} is {} in one run and {} in the other",
            a[i], b[i]
        );
    }
}

fn check(model: &str, kernels: &KernelSet, n_tokens: usize, batches: &[usize], per_token: bool) {
    let path = model_path(model);
    let file = MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let g = smolrun_core::gguf::Gguf::parse(file.bytes()).expect("parse");
    let m = Model::load_with_kernels(&g, kernels).expect("load");
    let store = ResidentStore::new(&g);
    let par = ScopedThreads::from_env();
    // A requantized file takes its source model's golden prompt.
    let source = ["-q3_k_m", "-q5_k_m"]
        .iter()
        .find_map(|s| model.strip_suffix(s))
        .unwrap_or(model);
    let tokens = golden_prompt(source, n_tokens);
    let one_by_one = batched(&m, &store, &par, &tokens, 1);
    if per_token {
        // Decoding: forward() per token (below 64 tokens both use the decode attention).
        let mut state = State::new(&m, tokens.len()).expect("state");
        for (i, &t) in tokens.iter().enumerate() {
            let l = m.forward(&mut state, &store, &par, t, i).expect("forward");
            assert_same(
                &one_by_one[i],
                l,
                &format!("{model} forward() at position {i}"),
            );
        }
    }
    for &b in batches {
        let all = batched(&m, &store, &par, &tokens, b);
        for (i, (x, y)) in one_by_one.iter().zip(&all).enumerate() {
            assert_same(
                x,
                y,
                &format!("{model} ({}, batch {b}) position {i}", kernels.name()),
            );
        }
    }
}

#[test]
fn batches_give_the_token_by_token_logits_scalar() {
    for model in [
        "gemma3-270m",
        "qwen2.5-coder-0.5b",
        "synthetic-smollm3",
        "synthetic-phi3",
    ] {
        check(model, &KernelSet::scalar(), 24, &[5, 32], true);
    }
}

/// The mixtures of experts: routing per token inside a batch (each token its own experts, the
/// experts' rows gathered per batch) gives decoding's logits to the bit. With logits.rs's KL
/// bound against llama.cpp on the batch path, this holds the decode path to llama.cpp too: what
/// the greedy token comparisons on these synthetic files could not do (they agree even with a
/// weight normalised wrongly: a planted x1.05 on the weights' sum passed them all).
#[test]
fn batches_give_the_token_by_token_logits_moe() {
    for model in [
        "synthetic-qwen3moe",
        "synthetic-qwen2moe",
        "synthetic-bailingmoe2",
        "synthetic-olmoe",
        "synthetic-qwen35moe",
        "synthetic-lfm2moe",
        "synthetic-smallthinker",
    ] {
        check(model, &KernelSet::scalar(), 24, &[5, 32], true);
        let native = KernelSet::select(&smolrun_linux::detect_features()).with_batch_twins();
        check(model, &native, 24, &[7], true);
    }
}

/// Qwen3.5's recurrent layers, LFM2's short convolutions and Granite 4.0 H's Mamba-2 layers: a
/// prompt in chunks reaches the state token-by-token decoding reaches (the convolution and the
/// delta rule or the selective scan run token by token in both; only the matrices are
/// batched), to the bit, and so gives the same logits at every position.
#[test]
fn chunked_prompt_gives_the_token_by_token_recurrent_state() {
    let native = KernelSet::select(&smolrun_linux::detect_features()).with_batch_twins();
    // (model, its recurrent layers, whether they hold a state besides the window: delta-rule
    // matrices, Mamba-2's scan state)
    for (model, layers, matrices) in [
        ("synthetic-qwen35", 3, true),
        ("synthetic-lfm2", 4, false),
        ("synthetic-lfm2moe", 4, false),
        ("synthetic-granitehybrid", 4, true),
    ] {
        for kernels in [KernelSet::scalar(), native.clone()] {
            chunked_state(model, &kernels, layers, matrices);
        }
    }
}

fn chunked_state(model: &str, kernels: &KernelSet, layers: usize, matrices: bool) {
    check(model, kernels, 40, &[5, 32], true);
    let path = model_path(model);
    let file = MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let g = smolrun_core::gguf::Gguf::parse(file.bytes()).expect("parse");
    let m = Model::load_with_kernels(&g, kernels).expect("load");
    let store = ResidentStore::new(&g);
    let par = ScopedThreads::from_env();
    let tokens = golden_prompt(model, 37);
    let mut by_token = State::with_batch(&m, 64, 1).expect("state");
    for (i, &t) in tokens.iter().enumerate() {
        m.forward(&mut by_token, &store, &par, t, i)
            .expect("forward");
    }
    let mut chunked = State::with_batch(&m, 64, 16).expect("state");
    m.forward_batch(&mut chunked, &store, &par, &tokens, 0)
        .expect("forward_batch");
    let mut n_recurrent = 0;
    for l in 0..m.layers.len() {
        let (Some(a), Some(b)) = (by_token.recurrent_state(l), chunked.recurrent_state(l)) else {
            continue;
        };
        n_recurrent += 1;
        assert_eq!(
            a.1.is_empty(),
            !matrices,
            "{model} layer {l}: delta-rule state"
        );
        for (what, x, y) in [("conv window", a.0, b.0), ("delta-rule state", a.1, b.1)] {
            if what == "delta-rule state" && !matrices {
                continue;
            }
            assert!(
                x.iter().any(|&v| v != 0.0),
                "{model} layer {l}: {what} is all zero"
            );
            if let Some(i) = (0..x.len()).find(|&i| x[i].to_bits() != y[i].to_bits()) {
                panic!(
                    "{model} layer {l} ({}): {what}[{i}] is {} token by token, {} in chunks of 16",
                    kernels.name(),
                    x[i],
                    y[i]
                );
            }
        }
    }
    assert_eq!(n_recurrent, layers, "{model}'s recurrent layers");
}

/// The same with `--state-f16` (the delta-rule matrices kept as f16), on the scalar and this
/// CPU's kernels: the f16 state after a chunked prompt is the token-by-token one, to the bit,
/// and so are the logits.
#[test]
fn chunked_prompt_gives_the_token_by_token_f16_state() {
    let path = model_path("synthetic-qwen35");
    let native = KernelSet::select(&smolrun_linux::detect_features()).with_batch_twins();
    for kernels in [KernelSet::scalar(), native] {
        let file = MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let g = smolrun_core::gguf::Gguf::parse(file.bytes()).expect("parse");
        let mut m = Model::load_with_kernels(&g, &kernels).expect("load");
        m.set_state_f16(true);
        let store = ResidentStore::new(&g);
        let par = ScopedThreads::from_env();
        let tokens = golden_prompt("synthetic-qwen35", 37);
        let mut by_token = State::with_batch(&m, 64, 1).expect("state");
        for (i, &t) in tokens.iter().enumerate() {
            m.forward(&mut by_token, &store, &par, t, i)
                .expect("forward");
        }
        let mut chunked = State::with_batch(&m, 64, 16).expect("state");
        m.forward_batch(&mut chunked, &store, &par, &tokens, 0)
            .expect("forward_batch");
        let mut n_recurrent = 0;
        for l in 0..m.layers.len() {
            let (Some(x), Some(y)) = (
                by_token.recurrent_state_f16(l),
                chunked.recurrent_state_f16(l),
            ) else {
                continue;
            };
            n_recurrent += 1;
            assert!(
                x.iter().any(|&v| v != 0),
                "layer {l}: f16 state is all zero"
            );
            assert!(
                x == y,
                "layer {l} ({}): f16 state differs in chunks",
                kernels.name()
            );
            assert!(by_token.recurrent_state(l).unwrap().1.is_empty());
        }
        assert_eq!(
            n_recurrent, 3,
            "synthetic-qwen35 has three recurrent layers"
        );
        assert_same(
            by_token.logits(),
            chunked.logits(),
            &format!("synthetic-qwen35 --state-f16 ({})", kernels.name()),
        );
    }
}

#[test]
fn batches_give_the_token_by_token_logits_native() {
    // Prompt kernels paired with the one-row kernels whose bits they keep (on AVX-512, the
    // K-quant prompts' twins; decoding itself runs the faster AVX2 dots, see cols_twin).
    let kernels = KernelSet::select(&smolrun_linux::detect_features()).with_batch_twins();
    for model in ["gemma3-270m", "qwen2.5-coder-0.5b"] {
        check(model, &kernels, 40, &[7, 32], true);
    }
    // 70 tokens: llama.cpp's batch attention kernel (f32) in both runs.
    check("gemma3-270m", &kernels, 70, &[32], false);
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B, 1.1 GB; minutes of CPU)"]
fn batches_give_the_token_by_token_logits_native_qwen25_coder_15b() {
    let kernels = KernelSet::select(&smolrun_linux::detect_features()).with_batch_twins();
    check("qwen2.5-coder-1.5b", &kernels, 20, &[9], true);
}

#[test]
#[ignore = "by hand: Qwen2.5-Coder-1.5B in Q3_K_M and Q5_K_M (files not in CI; minutes of CPU)"]
fn batches_give_the_token_by_token_logits_native_qwen25_coder_15b_k_m() {
    // The Q3_K and Q5_K prompt kernels (x86-64: avx2_kt35) with their twins; batches of 3 take
    // the one-row path of the prompt kernel, 7 and 32 its packed tokens.
    let kernels = KernelSet::select(&smolrun_linux::detect_features()).with_batch_twins();
    for model in ["qwen2.5-coder-1.5b-q3_k_m", "qwen2.5-coder-1.5b-q5_k_m"] {
        check(model, &kernels, 40, &[3, 7, 32], true);
    }
}
