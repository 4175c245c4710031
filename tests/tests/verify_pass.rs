//! Speculative decoding's verify pass (`Model::forward_verify`): the logits it computes for each
//! token of a draft are the logits decoding those tokens one by one gives, to the bit, with
//! this CPU's kernels (on AVX-512 the K-quant prompt kernels keep other bits than the decode
//! kernels: the verify pass must run the decode ones) and with the scalar reference; a rejected
//! draft rolls back by position alone (the next pass starts after the last accepted token and
//! the stale cache entries beyond it are never read); and the LM head is asked of the store once
//! per pass, however many tokens it scores.
//! Run in release mode: `cargo test --release -p smolrun-tests --test verify_pass`.

use smolrun_core::gguf::Gguf;
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::{Model, RecordingStore, ResidentStore, State, StoreCall, WeightStore};
use smolrun_core::platform::Parallel;
use smolrun_linux::MappedFile;
use smolrun_tests::*;

fn assert_same(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != b[i].to_bits()) {
        panic!(
            "{what}: logit {i} is {} in one run and {} in the other",
            a[i], b[i]
        );
    }
}

/// Decodes `tokens` one by one after `prompt` and returns the logits after each.
fn decoded(
    m: &Model,
    store: &dyn WeightStore,
    par: &dyn Parallel,
    prompt: &[u32],
    tokens: &[u32],
) -> Vec<Vec<f32>> {
    let mut state = State::new(m, 128).expect("state");
    m.forward_batch(&mut state, store, par, prompt, 0)
        .expect("prompt");
    let mut pos = prompt.len();
    tokens
        .iter()
        .map(|&t| {
            let l = m.forward(&mut state, store, par, t, pos).expect("forward");
            pos += 1;
            l.to_vec()
        })
        .collect()
}

fn check(model: &str, kernels: &KernelSet) {
    let path = model_path(model);
    let file = MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let g = Gguf::parse(file.bytes()).expect("parse");
    let m = Model::load_with_kernels(&g, kernels).expect("load");
    let store = ResidentStore::new(&g);
    let par = ScopedThreads::from_env();
    let all = golden_prompt(model, 24);
    let (prompt, rest) = all.split_at(12);
    let want = decoded(&m, &store, &par, prompt, rest);
    let what = |i: usize| format!("{model} ({}) draft token {i}", kernels.name());

    // The whole continuation as one draft.
    let mut state = State::with_logit_rows(&m, 128, 32, 12).expect("state");
    m.forward_batch(&mut state, &store, &par, prompt, 0)
        .expect("prompt");
    m.forward_verify(&mut state, &store, &par, rest, prompt.len())
        .expect("verify");
    for (i, w) in want.iter().enumerate() {
        assert_same(state.logits_row(i), w, &what(i));
    }

    // A draft whose tokens after the first three are wrong: the next pass starts after the
    // three accepted ones, over stale cache entries, and still gives decoding's logits.
    let mut wrong: Vec<u32> = rest[..8].to_vec();
    for t in &mut wrong[3..] {
        *t = (*t + 17) % m.n_vocab() as u32;
    }
    let mut state = State::with_logit_rows(&m, 128, 32, 8).expect("state");
    m.forward_batch(&mut state, &store, &par, prompt, 0)
        .expect("prompt");
    m.forward_verify(&mut state, &store, &par, &wrong, prompt.len())
        .expect("verify");
    for (i, w) in want[..3].iter().enumerate() {
        assert_same(state.logits_row(i), w, &what(i));
    }
    assert_ne!(
        state.logits_row(4),
        &want[4][..],
        "the wrong draft changed nothing"
    );
    let at = prompt.len() + 3;
    m.forward_verify(&mut state, &store, &par, &rest[3..9], at)
        .expect("verify after the rollback");
    for (i, w) in want[3..9].iter().enumerate() {
        assert_same(
            state.logits_row(i),
            w,
            &format!("{} after a rollback", what(3 + i)),
        );
    }
}

#[test]
fn verify_pass_gives_decoding_logits_native_kernels() {
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    for model in ["gemma3-270m", "qwen2.5-coder-0.5b", "synthetic-qwen3moe"] {
        check(model, &kernels);
    }
}

#[test]
fn verify_pass_gives_decoding_logits_scalar_kernels() {
    for model in ["qwen2.5-coder-0.5b", "synthetic-llama"] {
        check(model, &KernelSet::scalar());
    }
}

/// One verify pass of 6 tokens asks the store for the LM head once (and every other weight
/// once), as decoding one token does.
#[test]
fn verify_pass_reads_each_weight_once() {
    let path = model_path("qwen2.5-coder-0.5b");
    let file = MappedFile::open(&path).unwrap();
    let g = Gguf::parse(file.bytes()).unwrap();
    let m = Model::load(&g).unwrap();
    let store = RecordingStore::new(ResidentStore::new(&g), 1 << 16);
    let par = ScopedThreads(1);
    let tokens = golden_prompt("qwen2.5-coder-0.5b", 10);
    let mut state = State::with_logit_rows(&m, 64, 32, 6).unwrap();
    m.forward_batch(&mut state, &store, &par, &tokens[..4], 0)
        .unwrap();
    let gets = |calls: Vec<StoreCall>| {
        let mut keys: Vec<_> = calls
            .into_iter()
            .filter_map(|c| match c {
                StoreCall::Get(k) | StoreCall::GetRepacked(k) => Some(k),
                _ => None,
            })
            .collect();
        let n = keys.len();
        keys.sort();
        keys.dedup();
        (n, keys.len())
    };
    store.take();
    m.forward(&mut state, &store, &par, tokens[4], 4).unwrap();
    let (decode_gets, decode_distinct) = gets(store.take());
    assert_eq!(decode_gets, decode_distinct);
    m.forward_verify(&mut state, &store, &par, &tokens[5..], 5)
        .unwrap();
    let calls = store.take();
    let head_gets = calls
        .iter()
        .filter(|c| **c == StoreCall::Get(m.output.key))
        .count();
    assert_eq!(head_gets, 1, "the LM head was asked for {head_gets} times");
    assert_eq!(gets(calls), (decode_gets, decode_distinct));
}

/// LFM2's short convolutions: a verify pass over a draft whose third token is wrong, then
/// `State::rewind` to the last accepted token, leaves every conv window, to the bit, as a run
/// that decoded only the accepted tokens, and so the logits after the next token; the verify
/// pass's own logits are decoding's.
#[test]
fn a_rejected_draft_restores_the_conv_windows() {
    rejected_draft_restores_the_state("synthetic-lfm2");
}

/// The same on Granite 4.0 H's Mamba-2 layers: their conv windows and scan states.
#[test]
fn a_rejected_draft_restores_the_mamba2_states() {
    rejected_draft_restores_the_state("synthetic-granitehybrid");
}

fn rejected_draft_restores_the_state(model: &str) {
    let path = model_path(model);
    let file = MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let g = Gguf::parse(file.bytes()).expect("parse");
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    let m = Model::load_with_kernels(&g, &kernels).expect("load");
    let store = ResidentStore::new(&g);
    let par = ScopedThreads::from_env();
    let windows = |s: &State| -> Vec<Vec<u32>> {
        (0..m.hp.n_layer)
            .filter_map(|l| s.recurrent_state(l))
            .map(|(c, s)| c.iter().chain(s).map(|v| v.to_bits()).collect())
            .collect()
    };
    let all = golden_prompt(model, 20);
    let (prompt, rest) = all.split_at(12);

    let mut plain = State::with_logit_rows(&m, 64, 32, 6).expect("state");
    m.forward_batch(&mut plain, &store, &par, prompt, 0)
        .expect("prompt");
    let mut decoded = Vec::new();
    for (i, &t) in rest[..2].iter().enumerate() {
        decoded.push(
            m.forward(&mut plain, &store, &par, t, 12 + i)
                .unwrap()
                .to_vec(),
        );
    }
    let want = windows(&plain);
    assert_eq!(want.len(), 4, "{model} has four recurrent layers");
    let want_logits = m
        .forward(&mut plain, &store, &par, rest[2], 14)
        .unwrap()
        .to_vec();

    let mut spec = State::with_logit_rows(&m, 64, 32, 6).expect("state");
    m.forward_batch(&mut spec, &store, &par, prompt, 0)
        .expect("prompt");
    let n = m.n_vocab() as u32;
    let draft = [rest[0], rest[1], (rest[2] + 7) % n, (rest[3] + 7) % n, 11];
    m.forward_verify(&mut spec, &store, &par, &draft, 12)
        .expect("verify");
    for (i, w) in decoded.iter().enumerate() {
        assert_same(spec.logits_row(i), w, &format!("{model} draft token {i}"));
    }
    assert_ne!(windows(&spec), want, "the draft left the windows alone");
    spec.rewind(14).expect("rewind into the verify pass");
    assert_eq!(
        windows(&spec),
        want,
        "the recurrent states after the rewind"
    );
    let got = m.forward(&mut spec, &store, &par, rest[2], 14).unwrap();
    assert_same(got, &want_logits, &format!("{model} after the rewind"));
}
