//! The expert pager (core/src/model/pager.rs) hands out the file's bytes of each expert: with
//! pools far smaller than the layers' expert counts, on both synthetic mixtures of experts,
//! the logits equal the all-resident run's to the bit, with the reads done by the compute
//! thread or by reader threads, with and without pre-gated prefetch. A failed expert read is
//! an error naming the layer's tensor and the expert, and the next pass recovers. Cache-aware
//! routing lowers the misses.
//!
//! Run in release mode: `cargo test --release -p smolrun-tests --test pager`.

use smolrun_core::gguf::Gguf;
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::pager::MoeStats;
use smolrun_core::model::{
    Model, ModelError, MoeOptions, ResidentStore, State, StoreErrorKind, WeightStore,
};
use smolrun_core::platform::{IoError, ReadAt};
use smolrun_linux::{FileReader, MappedFile};
use smolrun_tests::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const MOE_MODELS: [&str; 7] = [
    "synthetic-qwen3moe",
    "synthetic-bailingmoe2",
    "synthetic-qwen2moe",
    "synthetic-olmoe",
    "synthetic-qwen35moe",
    "synthetic-lfm2moe",
    "synthetic-smallthinker",
];

/// The model's path and its file mapped.
fn open(model: &str) -> (std::path::PathBuf, MappedFile) {
    let path = model_path(model);
    let file = MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    (path, file)
}

fn kernels() -> KernelSet {
    KernelSet::select(&smolrun_linux::detect_features())
}

fn bits_equal(model: &str, what: &str, want: &[f32], got: &[f32]) {
    assert_eq!(want.len(), got.len(), "{model} {what}");
    let differ = want
        .iter()
        .zip(got)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert_eq!(differ, 0, "{model} {what}: {differ} logits differ");
}

#[test]
fn paged_logits_equal_the_resident_ones_to_the_bit() {
    for model in MOE_MODELS {
        let path = model_path(model);
        let file = MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let g = Gguf::parse(file.bytes()).expect("parse");
        let kernels = kernels();
        let resident = ResidentStore::new(&g);
        let mut m = Model::load_from(&g, &resident, &kernels).expect("load");
        let want = logits_through(&m, &resident, model, 8);
        let used = m.expert_groups()[0].n_used;
        let n_expert = m.expert_groups()[0].n_expert;
        // (slots, reader threads, pre-gated prefetch distance, an early router's read left out:
        // only SmallThinker has an early router)
        let mut runs = vec![
            (used, 0, 0, false),
            (used + 1, 2, 1, false),
            (n_expert - 2, 3, 1, false),
        ];
        if model == "synthetic-smallthinker" {
            runs.push((used + 1, 1, 0, true));
        }
        for (slots, readers, predict, no_early) in runs {
            m.set_moe_options(MoeOptions {
                predict_distance: predict,
                no_early_prefetch: no_early,
                ..MoeOptions::default()
            })
            .expect("options");
            let reader = FileReader::open(&path).unwrap_or_else(|e| panic!("{e}"));
            let store = paged_store(&g, &m, reader, slots, readers).expect("pager");
            let got = logits_through(&m, &store, model, 8);
            let what = format!(
                "{slots} slots, {readers} readers, predict {predict}, no early read {no_early}"
            );
            bits_equal(model, &what, &want, &got);
            let stats = store.moe_stats().expect("stats");
            assert!(
                stats.misses > 0 && stats.lookups > stats.misses,
                "{what}: {stats:?}"
            );
            assert!(
                slots < n_expert,
                "{model}: the pool must be smaller than the layer"
            );
            // Guesses are read only while no token waits for reads: with most experts held.
            if slots == n_expert - 2 {
                assert!(stats.predicted > 0, "{what}: nothing predicted: {stats:?}");
            }
        }
    }
}

#[test]
fn a_pool_smaller_than_a_tokens_experts_is_refused() {
    let model = MOE_MODELS[1];
    let (path, file) = open(model);
    let g = Gguf::parse(file.bytes()).expect("parse");
    let m = Model::load_with_kernels(&g, &kernels()).expect("load");
    let used = m.expert_groups()[0].n_used;
    let reader = FileReader::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let err = paged_store(&g, &m, reader, used - 1, 0)
        .err()
        .expect("refused");
    let msg = err.to_string();
    assert!(msg.contains(&format!("--moe-pool {used}")), "{msg}");
    assert!(msg.contains("ffn_gate_exps"), "{msg}");
}

#[test]
fn an_expert_count_the_routing_cannot_choose_is_refused() {
    let model = MOE_MODELS[1];
    let (_, file) = open(model);
    let g = Gguf::parse(file.bytes()).expect("parse");
    let mut m = Model::load_with_kernels(&g, &kernels()).expect("load");
    // 16 experts in 4 groups of which 2 are used: at most 8 reachable.
    for k in [0, 9, 17] {
        let err = m
            .set_moe_options(MoeOptions {
                experts_used: Some(k),
                ..MoeOptions::default()
            })
            .unwrap_err();
        assert!(err.to_string().contains("1 to 8"), "{k}: {err}");
    }
    m.set_moe_options(MoeOptions {
        experts_used: Some(2),
        ..MoeOptions::default()
    })
    .expect("2 experts");
    assert_eq!(m.expert_groups()[0].n_used, 2);
}

/// Fails every read while `failing` is set.
struct FailingReader {
    inner: FileReader,
    failing: Arc<AtomicBool>,
}

impl ReadAt for FailingReader {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(IoError {
                code: 5,
                op: "pread O_DIRECT",
                file: "failing.gguf".into(),
                offset,
                len: buf.len() as u64,
            });
        }
        self.inner.read_at(offset, buf)
    }
    fn read_direct(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.read_at(offset, buf)
    }
    fn direct_alignment(&self) -> usize {
        self.inner.direct_alignment()
    }
}

#[test]
fn a_failed_expert_read_names_the_expert_and_the_next_pass_recovers() {
    let model = MOE_MODELS[0];
    let (path, file) = open(model);
    let g = Gguf::parse(file.bytes()).expect("parse");
    let m = Model::load_with_kernels(&g, &kernels()).expect("load");
    let resident = ResidentStore::new(&g);
    let par = ScopedThreads(1);
    let mut state = State::new(&m, 16).expect("state");
    let want = m
        .forward(&mut state, &resident, &par, 7, 0)
        .unwrap()
        .to_vec();

    let failing = Arc::new(AtomicBool::new(true));
    let reader = FailingReader {
        inner: FileReader::open(&path).unwrap(),
        failing: failing.clone(),
    };
    let used = m.expert_groups()[0].n_used;
    let store = paged_store(&g, &m, reader, used, 2).expect("pager");
    state.reset();
    let err = m.forward(&mut state, &store, &par, 7, 0).unwrap_err();
    let ModelError::WeightRead(e) = &err else {
        panic!("expected a read error, got {err}");
    };
    assert!(matches!(e.kind, StoreErrorKind::Io(_)), "{err}");
    assert!(
        e.tensor.starts_with("blk.") && e.tensor.contains("_exps"),
        "{err}"
    );
    assert!(e.expert.is_some(), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("(expert "), "{msg}");

    failing.store(false, Ordering::SeqCst);
    state.reset();
    let got = m.forward(&mut state, &store, &par, 7, 0).unwrap().to_vec();
    bits_equal(model, "after the failed read", &want, &got);
}

/// Decodes `n` greedy tokens after a short prompt and returns the pager's counts.
fn decode_misses(m: &Model, store: &dyn WeightStore, n: usize) -> (MoeStats, Vec<u32>) {
    let par = ScopedThreads(1);
    let mut state = State::new(m, n + 8).expect("state");
    let mut next = argmax(
        m.forward_batch(&mut state, store, &par, &[1, 2, 3, 4], 0)
            .unwrap(),
    );
    let before = store.moe_stats().expect("stats");
    let mut tokens = Vec::new();
    for i in 0..n {
        next = argmax(m.forward(&mut state, store, &par, next, 4 + i).unwrap());
        tokens.push(next);
    }
    (store.moe_stats().expect("stats").since(&before), tokens)
}

#[test]
fn cache_aware_routing_misses_less() {
    let model = MOE_MODELS[1];
    let (path, file) = open(model);
    let g = Gguf::parse(file.bytes()).expect("parse");
    let mut m = Model::load_with_kernels(&g, &kernels()).expect("load");
    let used = m.expert_groups()[0].n_used;
    let mut misses = Vec::new();
    for bias in [0.0, 0.5] {
        m.set_moe_options(MoeOptions {
            cache_bias: bias,
            ..MoeOptions::default()
        })
        .expect("options");
        let reader = FileReader::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let store = paged_store(&g, &m, reader, used + 2, 1).expect("pager");
        let (stats, _) = decode_misses(&m, &store, 24);
        misses.push(stats.misses);
    }
    assert!(
        misses[1] < misses[0],
        "misses without and with the bias: {misses:?}"
    );
}
