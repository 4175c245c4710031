//! The hidden states that embeddings pool (`Model::forward_batch_hidden`) are, to the bit, the
//! rows the LM head multiplies when `forward_batch_all` computes every position's logits (its
//! "result_norm" tap), and pooling them gives a unit vector. On qwen2.5-coder-0.5b, a
//! paraphrase embeds closer than an unrelated sentence.
//! Run in release mode: `cargo test --release -p smolrun-tests --test embedding`.

use smolrun_core::model::embedding::{Pooler, Pooling};
use smolrun_core::model::State;
use smolrun_core::tokenizer::Tokenizer;
use smolrun_tests::*;
use std::sync::Mutex;

/// Rows the "result_norm" tap saw (a tap is a plain fn, so it writes here).
static TAPPED: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());
/// Held by a test while it taps: the tests run on parallel threads and share `TAPPED`.
static TAPPING: Mutex<()> = Mutex::new(());

fn tap(name: &str, _layer: usize, x: &[f32]) {
    if name == "result_norm" {
        TAPPED.lock().unwrap().push(x.to_vec());
    }
}

fn hidden_rows_are_the_heads_input(model: &str) {
    let _one_at_a_time = TAPPING.lock().unwrap_or_else(|e| e.into_inner());
    let tokens = golden_prompt(model, 40);
    let par = ScopedThreads::from_env();
    with_model(model, |_g, m, store| {
        let mut state = State::new(m, tokens.len()).expect("state");
        state.tap = Some(tap);
        TAPPED.lock().unwrap().clear();
        m.forward_batch_all(&mut state, store, &par, &tokens, 0, 0, &mut |_, _| {})
            .expect("forward_batch_all");
        let tapped = std::mem::take(&mut *TAPPED.lock().unwrap());
        state.tap = None;
        state.reset();
        let mut hidden = Vec::new();
        m.forward_batch_hidden(&mut state, store, &par, &tokens, 0, &mut |i, h| {
            assert_eq!(i, hidden.len(), "rows in order");
            hidden.push(h.to_vec());
        })
        .expect("forward_batch_hidden");
        assert_eq!(hidden.len(), tokens.len());
        assert_eq!(tapped.len(), tokens.len());
        for (i, (a, b)) in hidden.iter().zip(&tapped).enumerate() {
            assert!(
                a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{model}: position {i}: the hidden row differs from the head's input"
            );
        }
        let mut pooler = Pooler::new(Pooling::Mean, m.hp.n_embd);
        for (i, h) in hidden.iter().enumerate() {
            pooler.add(i, h);
        }
        let e = pooler.finish();
        let norm: f64 = e.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{model}: |e| = {norm}");
    });
}

#[test]
fn synthetic_qwen3() {
    hidden_rows_are_the_heads_input("synthetic-qwen3");
}

#[test]
fn synthetic_llama() {
    hidden_rows_are_the_heads_input("synthetic-llama");
}

#[test]
fn qwen25_coder_05b() {
    hidden_rows_are_the_heads_input("qwen2.5-coder-0.5b");
}

#[test]
fn qwen25_coder_05b_paraphrases_embed_closer() {
    let model = "qwen2.5-coder-0.5b";
    let par = ScopedThreads::from_env();
    with_model(model, |g, m, store| {
        let tokenizer = Tokenizer::from_gguf(g).expect("tokenizer");
        let pooling = Pooling::from_gguf(g).expect("pooling");
        assert_eq!(pooling, Pooling::Mean, "no pooling_type key: mean");
        let mut state = State::new(m, 64).expect("state");
        let mut embed = |text: &str| {
            let mut ids = Vec::new();
            tokenizer.encode(text, true, true, &mut ids);
            state.reset();
            let mut pooler = Pooler::new(pooling, m.hp.n_embd);
            m.forward_batch_hidden(&mut state, store, &par, &ids, 0, &mut |i, h| {
                pooler.add(i, h)
            })
            .expect("forward_batch_hidden");
            pooler.finish()
        };
        let cat = embed("The cat sat on the mat.");
        let paraphrase = embed("A cat was sitting on the mat.");
        let stocks = embed("Stock prices fell sharply on Tuesday.");
        let cos = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        let (near, far) = (cos(&cat, &paraphrase), cos(&cat, &stocks));
        eprintln!("{model}: cosine paraphrase {near:.3}, unrelated {far:.3}");
        assert!(near > far + 0.2, "paraphrase {near}, unrelated {far}");
    });
}
