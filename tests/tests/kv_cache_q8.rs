//! A q8_0 KV cache (`--cache-type-k/-v q8_0`) on a real model: its logits against the f16
//! cache's, decoding the golden prompt token by token (the grouped decode kernel) and in
//! batches of 32 (the batch path), as the mean KL divergence over every position. Quantizing
//! K and V (and the query, as llama.cpp does with a q8_0 cache) is a small perturbation;
//! a kernel or layout bug (a wrong row, a missed rotation) gives a KL orders of magnitude
//! larger. The bound is justified by measurement in the test's output (see MAX_MEAN_KL).
//! Also: the skip threshold at 1e-4 against exact attention with the same cache.
//! Run in release mode: `cargo test --release -p smolrun-tests --test kv_cache_q8`.

use smolrun_core::kernels::KernelSet;
use smolrun_core::math;
use smolrun_core::model::{KvCacheType, Model, ResidentStore, State, WeightStore};
use smolrun_core::platform::Parallel;
use smolrun_linux::MappedFile;
use smolrun_tests::*;

/// Mean KL(f16 cache || q8_0 cache) over the positions (nats). Measured on this prompt
/// (x86-64 AVX2, 120 positions, decoding): mean 1.05e-2, max 0.60 at one position. That is
/// large next to the f16 criterion against llama.cpp (0.005): Qwen2.5's K bias outliers make
/// Q8_0 keys coarse even after llama.cpp's rotation (its own q8_0 cache costs this model +0.6%
/// perplexity at -c 2048, +0.7% at -c 128). The bound is 3x the measured mean.
const MAX_MEAN_KL: f64 = 0.03;
/// Mean KL(exact || skip at 1e-4), same cache: the dropped weights are each below 1e-4 of the
/// largest.
const MAX_MEAN_KL_SKIP: f64 = 0.002;

fn decoded(
    m: &Model,
    store: &dyn WeightStore,
    par: &dyn Parallel,
    tokens: &[u32],
    eps: f32,
) -> Vec<Vec<f32>> {
    let mut state = State::new(m, tokens.len()).expect("state");
    state.set_attn_skip_eps(eps);
    tokens
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            m.forward(&mut state, store, par, t, i)
                .expect("forward")
                .to_vec()
        })
        .collect()
}

/// KL(p || q) of two rows of logits.
fn kl(p: &[f32], q: &[f32]) -> f64 {
    let (lp, lq) = (math::log_sum_exp(p), math::log_sum_exp(q));
    p.iter()
        .zip(q)
        .map(|(&a, &b)| {
            let la = a as f64 - lp;
            la.exp() * (la - (b as f64 - lq))
        })
        .sum()
}

fn mean_max(a: &[Vec<f32>], b: &[Vec<f32>]) -> (f64, f64) {
    let kls: Vec<f64> = a.iter().zip(b).map(|(p, q)| kl(p, q)).collect();
    let mean = kls.iter().sum::<f64>() / kls.len() as f64;
    (mean, kls.iter().cloned().fold(0.0, f64::max))
}

#[test]
fn q8_0_cache_logits_stay_near_the_f16_cache() {
    let model = "qwen2.5-coder-0.5b";
    let path = model_path(model);
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    let file = MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let g = smolrun_core::gguf::Gguf::parse(file.bytes()).expect("parse");
    let f16 = Model::load_with_kernels(&g, &kernels).expect("load");
    let mut q8 = f16.clone();
    q8.set_kv_type(KvCacheType::Q8_0);
    let store = ResidentStore::new(&g);
    let par = ScopedThreads::from_env();
    let tokens = golden_prompt(model, 120);

    let want = decoded(&f16, &store, &par, &tokens, 0.0);
    let got = decoded(&q8, &store, &par, &tokens, 0.0);
    let (mean, max) = mean_max(&want, &got);
    println!(
        "{model}: q8_0 vs f16 cache, decoding {} tokens: KL mean {mean:.2e}, max {max:.2e}",
        tokens.len()
    );
    assert!(
        mean < MAX_MEAN_KL,
        "q8_0 cache decoding: mean KL {mean} >= {MAX_MEAN_KL}"
    );

    let batched = logits_in_batches(&q8, &store, &par, &tokens, 32);
    let (mean_b, max_b) = mean_max(&want, &batched);
    println!("{model}: q8_0 vs f16 cache, batches of 32: KL mean {mean_b:.2e}, max {max_b:.2e}");
    assert!(
        mean_b < MAX_MEAN_KL,
        "q8_0 cache batches: mean KL {mean_b} >= {MAX_MEAN_KL}"
    );

    for (name, m) in [("f16", &f16), ("q8_0", &q8)] {
        let exact = if name == "f16" { &want } else { &got };
        let skipped = decoded(m, &store, &par, &tokens, 1e-4);
        let (mean_s, max_s) = mean_max(exact, &skipped);
        println!(
            "{model}: {name} cache, skip 1e-4 vs exact: KL mean {mean_s:.2e}, max {max_s:.2e}"
        );
        assert!(
            mean_s < MAX_MEAN_KL_SKIP,
            "{name} skip: mean KL {mean_s} >= {MAX_MEAN_KL_SKIP}"
        );
    }
}
