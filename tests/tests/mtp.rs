//! Qwen3.5's MTP drafting (core/src/model/mtp.rs) on synthetic-qwen35, whose fifth block is an
//! MTP layer: the drafts are llama.cpp's (tests/golden/synthetic-qwen35/mtp.json, written by
//! tools/oracle/golden --mtp), and a rejected draft puts the recurrent state back to the bit
//! (`State::rewind`, from the copies a verify pass keeps).
//! Run in release mode: `cargo test --release -p smolrun-tests --test mtp`.

use serde_json::Value;
use smolrun_core::gguf::Gguf;
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::{Model, ModelError, ResidentStore, State};
use smolrun_linux::MappedFile;
use smolrun_tests::*;

const MODEL: &str = "synthetic-qwen35";

/// Below this top-1 minus top-2 logit gap of llama.cpp's draft logits, a last-bit difference
/// may pick the other token (the greedy criteria's 0.2 margin, halved: a draft is an argmax
/// like any greedy step). 3 of the 160 first drafts of the golden are under it.
const MIN_MARGIN: f64 = 0.1;

fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// Teacher-forced along each golden greedy text: after the prompt, at every position p the
/// MTP block drafts from the token at p (three chained steps), then the trunk decodes that
/// token. Each draft token must be llama.cpp's wherever llama.cpp's margin is clear and the
/// chain before it agreed.
fn drafts_equal_llama_cpp(kernels: &KernelSet) {
    let path = model_path(MODEL);
    let compared = compare_drafts(&path, &golden(MODEL, "mtp.json"), kernels);
    assert!(compared >= 300, "only {compared} draft tokens compared");
}

/// The comparison on another file and its `golden --mtp` output, by hand (not in CI; the
/// Qwen3.5-0.8B-shaped model is 450-870 MB):
/// `SMOLRUN_MTP_MODEL=synthetic-qwen35-0.8b-q4_k.gguf SMOLRUN_MTP_GOLDEN=mtp.json cargo test
/// --release -p smolrun-tests --test mtp -- --ignored --nocapture`.
#[test]
#[ignore = "needs SMOLRUN_MTP_MODEL and SMOLRUN_MTP_GOLDEN (a 450-870 MB model and its golden --mtp output)"]
fn mtp_drafts_equal_llama_cpp_on_a_given_file() {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("set {k}"));
    let golden: Value =
        serde_json::from_str(&std::fs::read_to_string(var("SMOLRUN_MTP_GOLDEN")).unwrap()).unwrap();
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    compare_drafts(var("SMOLRUN_MTP_MODEL").as_ref(), &golden, &kernels);
}

/// Returns how many draft tokens were compared (at least one, all equal, or it panics).
fn compare_drafts(path: &std::path::Path, golden: &Value, kernels: &KernelSet) -> usize {
    let file = MappedFile::open(path).unwrap();
    let g = Gguf::parse(file.bytes()).unwrap();
    let mut m = Model::load_with_kernels(&g, kernels).unwrap();
    let store = ResidentStore::new(&g);
    m.load_mtp(&g, &store, kernels).expect("load_mtp");
    let par = ScopedThreads::from_env();
    let n_draft = golden["n_draft"].as_u64().unwrap() as usize;
    let n_vocab = m.n_vocab();
    let (mut compared, mut equal, mut skipped) = (0, 0, 0);
    for case in golden["cases"].as_array().unwrap() {
        let prompt = ids(&case["prompt_tokens"]);
        let seq: Vec<u32> = prompt.iter().copied().chain(ids(&case["tokens"])).collect();
        let mut state = State::with_mtp(&m, 256, 32, 4).unwrap();
        m.forward_batch(&mut state, &store, &par, &prompt, 0)
            .unwrap();
        for step in case["steps"].as_array().unwrap() {
            let p = step["pos"].as_u64().unwrap() as usize;
            // The first draft after the prompt's last token comes before the trunk has run it
            // (llama.cpp's speculative loop keeps the prompt's last token back); here the
            // prompt runs whole, so drafting starts at the first generated token.
            if p < prompt.len() {
                continue;
            }
            assert_eq!(state.pos, p);
            let want = ids(&step["draft"]);
            let margins: Vec<f64> = step["margins"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            let mut got = Vec::new();
            let mut logits = m.mtp_begin(&mut state, &store, &par, seq[p]).unwrap();
            for i in 0..n_draft {
                let d = argmax(&logits[..n_vocab]);
                got.push(d);
                if i + 1 < n_draft {
                    logits = m.mtp_next(&mut state, &store, &par, d).unwrap();
                }
            }
            for i in 0..n_draft {
                if got[..i] != want[..i] {
                    break;
                }
                if margins[i] < MIN_MARGIN {
                    skipped += 1;
                    break;
                }
                compared += 1;
                if got[i] == want[i] {
                    equal += 1;
                } else {
                    eprintln!(
                        "{} ({}): position {p} draft {i}: ours {} llama.cpp {} (margin {})",
                        path.display(),
                        kernels.name(),
                        got[i],
                        want[i],
                        margins[i]
                    );
                }
            }
            m.forward(&mut state, &store, &par, seq[p], p).unwrap();
        }
    }
    eprintln!(
        "{} ({}): {equal} of {compared} MTP draft tokens equal llama.cpp's ({skipped} \
         chains stopped at a margin under {MIN_MARGIN})",
        path.display(),
        kernels.name()
    );
    assert_eq!(equal, compared, "MTP drafts differ from llama.cpp's");
    // Equal over nothing proves nothing: a golden whose steps all lie in the prompt, or whose
    // every chain starts at a near tie, must fail, not pass.
    assert!(
        compared > 0,
        "{}: no MTP draft token compared ({skipped} chains stopped at a margin under \
         {MIN_MARGIN})",
        path.display()
    );
    compared
}

#[test]
fn mtp_drafts_equal_llama_cpp_scalar_kernels() {
    drafts_equal_llama_cpp(&KernelSet::scalar());
}

#[test]
fn mtp_drafts_equal_llama_cpp_native_kernels() {
    drafts_equal_llama_cpp(&KernelSet::select(&smolrun_linux::detect_features()));
}

fn recurrent(state: &State, n_layer: usize) -> Vec<(Vec<f32>, Vec<f32>)> {
    (0..n_layer)
        .filter_map(|l| state.recurrent_state(l))
        .map(|(c, s)| (c.to_vec(), s.to_vec()))
        .collect()
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// A verify pass over a draft whose third token is wrong, then `State::rewind` to the last
/// accepted token: the recurrent state is, to the bit, the one of a run that decoded only the
/// accepted tokens and never saw the draft, and so are the logits after the next token.
#[test]
fn a_rejected_draft_restores_the_recurrent_state() {
    let path = model_path(MODEL);
    let file = MappedFile::open(&path).unwrap();
    let g = Gguf::parse(file.bytes()).unwrap();
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    let m = Model::load_with_kernels(&g, &kernels).unwrap();
    let store = ResidentStore::new(&g);
    let par = ScopedThreads::from_env();
    let n_layer = m.hp.n_layer;
    let all = golden_prompt(MODEL, 20);
    let (prompt, rest) = all.split_at(12);

    // Never saw the draft: the prompt, then rest[0], rest[1] decoded, then rest[2].
    let mut plain = State::with_logit_rows(&m, 64, 32, 6).unwrap();
    m.forward_batch(&mut plain, &store, &par, prompt, 0)
        .unwrap();
    m.forward(&mut plain, &store, &par, rest[0], 12).unwrap();
    m.forward(&mut plain, &store, &par, rest[1], 13).unwrap();
    let want_state = recurrent(&plain, n_layer);
    assert_eq!(
        want_state.len(),
        3,
        "synthetic-qwen35 has three recurrent layers"
    );
    let want_logits = m
        .forward(&mut plain, &store, &par, rest[2], 14)
        .unwrap()
        .to_vec();

    // Verified [rest[0], rest[1], wrong, wrong, wrong]: two accepted, back to position 14.
    let mut spec = State::with_logit_rows(&m, 64, 32, 6).unwrap();
    m.forward_batch(&mut spec, &store, &par, prompt, 0).unwrap();
    let n = m.n_vocab() as u32;
    let draft = [rest[0], rest[1], (rest[2] + 7) % n, (rest[3] + 7) % n, 11];
    m.forward_verify(&mut spec, &store, &par, &draft, 12)
        .unwrap();
    assert_ne!(
        recurrent(&spec, n_layer),
        want_state,
        "the draft left the state alone"
    );
    // Not back past the pass (the state stays where it is).
    assert!(matches!(
        spec.rewind(11),
        Err(ModelError::RecurrentRewind { pos: 11, at: 17 })
    ));
    assert_eq!(spec.pos, 17);
    spec.rewind(14).unwrap();
    assert_eq!(spec.pos, 14);
    let got_state = recurrent(&spec, n_layer);
    assert_eq!(got_state.len(), want_state.len(), "recurrent layers");
    for (l, (got, want)) in got_state.iter().zip(&want_state).enumerate() {
        assert!(
            same_bits(&got.0, &want.0) && same_bits(&got.1, &want.1),
            "recurrent layer {l}'s state after the rewind is not the plain run's"
        );
    }
    let got_logits = m.forward(&mut spec, &store, &par, rest[2], 14).unwrap();
    assert!(same_bits(got_logits, &want_logits));
    // A decode pass keeps no copies: nothing to go back to.
    assert!(matches!(
        spec.rewind(14),
        Err(ModelError::RecurrentRewind { pos: 14, at: 15 })
    ));
    // Back to 0 starts over: the state of a fresh one.
    spec.rewind(0).unwrap();
    m.forward(&mut spec, &store, &par, prompt[0], 0).unwrap();
    let mut fresh = State::with_logit_rows(&m, 64, 32, 6).unwrap();
    m.forward(&mut fresh, &store, &par, prompt[0], 0).unwrap();
    assert_eq!(recurrent(&spec, n_layer), recurrent(&fresh, n_layer));
}

/// MTP drafting refuses a model without an MTP layer, and a state for it needs the layer loaded.
#[test]
fn mtp_on_a_model_without_it_is_refused() {
    let path = model_path("synthetic-qwen3");
    let file = MappedFile::open(&path).unwrap();
    let g = Gguf::parse(file.bytes()).unwrap();
    let mut m = Model::load(&g).unwrap();
    let store = ResidentStore::new(&g);
    let err = m
        .load_mtp(&g, &store, &KernelSet::scalar())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--draft mtp") && err.contains("qwen3"),
        "{err}"
    );
    let err = State::with_mtp(&m, 64, 8, 4).err().unwrap().to_string();
    assert!(err.contains("not loaded"), "{err}");
}
