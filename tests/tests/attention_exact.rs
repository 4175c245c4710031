//! The SIMD attention face that the kernel set installs (`KernelSet::attention`) gives the
//! scalar `math::attention_head`'s logits to the bit on the real models: the same matvec
//! kernels, only the attention swapped, over a prompt long enough for llama.cpp's f32 batch
//! kernel (64+ tokens) and over decoding and small batches (the f16-accumulator kernel),
//! with Gemma 3's sliding-window layers included; then decoding with the skip threshold, and
//! a q8_0 cache (decoding, batches, skipping). (core's kernel tests check the face on
//! random and edge-case heads; this checks it where the golden data lives.)
//! Run in release mode: `cargo test --release -p smolrun-tests --test attention_exact`.

use smolrun_core::kernels::KernelSet;
use smolrun_core::math;
use smolrun_core::model::{KvCacheType, Model, ResidentStore, State, TokenMixer};
use smolrun_core::platform::Parallel;
use smolrun_linux::MappedFile;
use smolrun_tests::*;

/// Logits at every position, one `forward()` per token (decoding).
fn decoded(m: &Model, store: &ResidentStore, par: &dyn Parallel, tokens: &[u32]) -> Vec<Vec<f32>> {
    decoded_skipping(m, store, par, tokens, 0.0)
}

/// [`decoded`] with the attention skip threshold `eps` (0: exact).
fn decoded_skipping(
    m: &Model,
    store: &ResidentStore,
    par: &dyn Parallel,
    tokens: &[u32],
    eps: f32,
) -> Vec<Vec<f32>> {
    let mut state = State::new(m, tokens.len()).expect("state");
    state.set_attn_skip_eps(eps);
    let mut all = Vec::new();
    for (i, &t) in tokens.iter().enumerate() {
        all.push(
            m.forward(&mut state, store, par, t, i)
                .expect("forward")
                .to_vec(),
        );
    }
    all
}

fn assert_same(want: &[Vec<f32>], got: &[Vec<f32>], what: &str) {
    assert_eq!(want.len(), got.len());
    for (p, (a, b)) in want.iter().zip(got).enumerate() {
        if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != b[i].to_bits()) {
            panic!(
                "{what}: position {p}, logit {i}: scalar attention {}, SIMD attention {}",
                a[i], b[i]
            );
        }
    }
}

fn check(model: &str) {
    let path = model_path(model);
    // With the batch twins, prompts and decoding use kernels of the same bits (see
    // batch_exact.rs), so only the attention differs between the runs compared below.
    let kernels = KernelSet::select(&smolrun_linux::detect_features()).with_batch_twins();
    if kernels.name() == "scalar" {
        println!("notice: no SIMD kernels on this CPU; the attention face is the scalar code");
    }
    let file = MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let g = smolrun_core::gguf::Gguf::parse(file.bytes()).expect("parse");
    let simd = Model::load_with_kernels(&g, &kernels).expect("load");
    let mut scalar = simd.clone();
    for layer in &mut scalar.layers {
        if let TokenMixer::Attention(attention) = &mut layer.mixer {
            attention.attend = math::AttentionFaces {
                head: math::attention_head,
                group: math::attention_group,
                q8: smolrun_core::kv_q8::AttentionLoopsQ8::SCALAR,
            };
        }
    }
    let store = ResidentStore::new(&g);
    let par = ScopedThreads::from_env();

    // 80 tokens in one batch: the f32 kernel.
    let tokens = golden_prompt(model, 80);
    let want = logits_in_batches(&scalar, &store, &par, &tokens, 80);
    assert_same(
        &want,
        &logits_in_batches(&simd, &store, &par, &tokens, 80),
        &format!("{model} batch 80"),
    );
    // Decoding and batches of 13: the f16-accumulator kernel.
    let tokens = &tokens[..40];
    let want = decoded(&scalar, &store, &par, tokens);
    assert_same(
        &want,
        &decoded(&simd, &store, &par, tokens),
        &format!("{model} decoding"),
    );
    assert_same(
        &want,
        &logits_in_batches(&simd, &store, &par, tokens, 13),
        &format!("{model} batch 13"),
    );
    // Decoding with the skip threshold (the f16 kernel's blocked pass with the maximum first).
    assert_same(
        &decoded_skipping(&scalar, &store, &par, tokens, 1e-4),
        &decoded_skipping(&simd, &store, &par, tokens, 1e-4),
        &format!("{model} decoding, skip 1e-4"),
    );
    // A q8_0 cache: decoding (with and without the skip threshold) and batches of 13.
    let (mut scalar, mut simd) = (scalar, simd);
    scalar.set_kv_type(KvCacheType::Q8_0);
    simd.set_kv_type(KvCacheType::Q8_0);
    let want = decoded(&scalar, &store, &par, tokens);
    assert_same(
        &want,
        &decoded(&simd, &store, &par, tokens),
        &format!("{model} q8_0 cache, decoding"),
    );
    assert_same(
        &logits_in_batches(&scalar, &store, &par, tokens, 13),
        &logits_in_batches(&simd, &store, &par, tokens, 13),
        &format!("{model} q8_0 cache, batch 13"),
    );
    assert_same(
        &decoded_skipping(&scalar, &store, &par, tokens, 1e-4),
        &decoded_skipping(&simd, &store, &par, tokens, 1e-4),
        &format!("{model} q8_0 cache, decoding, skip 1e-4"),
    );
    println!(
        "{model}: {} attention gives the scalar logits to the bit (f16 and q8_0 caches, \
         exact and skipping)",
        kernels.name()
    );
}

// One test per model, so that the two run side by side (much of a check is single-threaded:
// the scalar attention, the logit copies and comparisons).
#[test]
fn simd_attention_gives_the_scalar_logits_gemma3_270m() {
    check("gemma3-270m");
}

#[test]
fn simd_attention_gives_the_scalar_logits_qwen25_coder_05b() {
    check("qwen2.5-coder-0.5b");
}
