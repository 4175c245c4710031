//! Shared helpers for the integration tests: finding models and golden files, a small thread
//! pool for the model-running tests, and the comparison arithmetic (KL divergence over top-k).

use serde_json::Value;
use smolrun_core::gguf::Gguf;
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::expert_cache::Eviction;
use smolrun_core::model::pager::{ExpertPool, PagedStore, PagerConfig};
use smolrun_core::model::ModelError;
use smolrun_core::model::{
    Model, PreadStore, ResidentStore, State, StreamBudget, StreamPlan, StreamStore, TensorTable,
    WeightStore,
};
use smolrun_core::platform::{Parallel, ReadAt};
use smolrun_linux::{start_expert_readers, CondSignal, FileReader, MappedFile, StreamingStore};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The directory holding the model files: `$SMOLRUN_MODELS`, else `~/.cache/smolrun/models`.
pub fn models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SMOLRUN_MODELS") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    Path::new(&home).join(".cache/smolrun/models")
}

/// The repository root (the tests crate sits one level below it).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests crate has a parent")
        .to_path_buf()
}

/// `tests/golden/<model>`, or `$SMOLRUN_GOLDEN/<model>` to test against golden data elsewhere
/// (e.g. freshly regenerated, before it is committed).
pub fn golden_dir(model: &str) -> PathBuf {
    match std::env::var_os("SMOLRUN_GOLDEN") {
        Some(d) => PathBuf::from(d).join(model),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("golden")
            .join(model),
    }
}

/// Reads `<golden dir>/<model>/<file>` (falling back to tests/golden when `$SMOLRUN_GOLDEN`
/// lacks the file); fails with a message saying how to regenerate it.
pub fn golden(model: &str, file: &str) -> Value {
    let mut p = golden_dir(model).join(file);
    if !p.exists() {
        p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("golden")
            .join(model)
            .join(file);
    }
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| {
        panic!(
            "golden file {} is missing ({e}); regenerate it with tools/oracle/regen.sh {model}",
            p.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", p.display()))
}

/// The file name of a model known to the tests, by its short name.
pub fn model_file_name(model: &str) -> &'static str {
    match model {
        "gemma3-270m" => "gemma-3-270m-q4_k_m.gguf",
        "qwen2.5-coder-0.5b" => "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "qwen2.5-coder-1.5b" => "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "synthetic-qwen3" => "synthetic-qwen3.gguf",
        "synthetic-llama" => "synthetic-llama.gguf",
        "synthetic-qwen3moe" => "synthetic-qwen3moe.gguf",
        "synthetic-qwen2moe" => "synthetic-qwen2moe.gguf",
        "synthetic-bailingmoe2" => "synthetic-bailingmoe2.gguf",
        "synthetic-qwen35" => "synthetic-qwen35.gguf",
        "synthetic-smollm3" => "synthetic-smollm3.gguf",
        "synthetic-phi3" => "synthetic-phi3.gguf",
        "synthetic-olmoe" => "synthetic-olmoe.gguf",
        "synthetic-qwen35moe" => "synthetic-qwen35moe.gguf",
        "synthetic-lfm2" => "synthetic-lfm2.gguf",
        "synthetic-lfm2moe" => "synthetic-lfm2moe.gguf",
        "synthetic-smallthinker" => "synthetic-smallthinker.gguf",
        "synthetic-granitehybrid" => "synthetic-granitehybrid.gguf",
        "qwen2.5-coder-0.5b-q1_0" => "qwen2.5-coder-0.5b-q1_0.gguf",
        "qwen2.5-coder-0.5b-q2_0" => "qwen2.5-coder-0.5b-q2_0.gguf",
        "qwen2.5-coder-0.5b-q2_k" => "qwen2.5-coder-0.5b-q2_k.gguf",
        "synthetic-qwen3-q2_0" => "synthetic-qwen3-q2_0.gguf",
        "synthetic-qwen3-tq1_0" => "synthetic-qwen3-tq1_0.gguf",
        "synthetic-qwen3-tq2_0" => "synthetic-qwen3-tq2_0.gguf",
        "synthetic-qwen3-q2_k" => "synthetic-qwen3-q2_k.gguf",
        "qwen2.5-coder-0.5b-iq4_nl" => "qwen2.5-coder-0.5b-iq4_nl.gguf",
        "qwen2.5-coder-0.5b-iq4_xs" => "qwen2.5-coder-0.5b-iq4_xs.gguf",
        "synthetic-qwen3-iq2_xxs" => "synthetic-qwen3-iq2_xxs.gguf",
        "synthetic-qwen3-iq3_xxs" => "synthetic-qwen3-iq3_xxs.gguf",
        "synthetic-qwen3-iq2_xs" => "synthetic-qwen3-iq2_xs.gguf",
        "synthetic-qwen3-iq2_s" => "synthetic-qwen3-iq2_s.gguf",
        "synthetic-qwen3-iq3_s" => "synthetic-qwen3-iq3_s.gguf",
        "synthetic-qwen3-iq1_s" => "synthetic-qwen3-iq1_s.gguf",
        "synthetic-qwen3-iq1_m" => "synthetic-qwen3-iq1_m.gguf",
        // By hand only, made by tools/oracle/qwen15b-types.sh (golden::LOWBIT_15B_MODELS; the
        // Q3_K_M and Q5_K_M mixes also by batch_exact's by-hand test)
        "qwen2.5-coder-1.5b-iq4_nl-pure" => "qwen2.5-coder-1.5b-iq4_nl-pure.gguf",
        "qwen2.5-coder-1.5b-iq4_xs-pure" => "qwen2.5-coder-1.5b-iq4_xs-pure.gguf",
        "qwen2.5-coder-1.5b-iq3_xxs-pure" => "qwen2.5-coder-1.5b-iq3_xxs-pure.gguf",
        "qwen2.5-coder-1.5b-iq3_s-pure" => "qwen2.5-coder-1.5b-iq3_s-pure.gguf",
        "qwen2.5-coder-1.5b-iq2_xxs-pure" => "qwen2.5-coder-1.5b-iq2_xxs-pure.gguf",
        "qwen2.5-coder-1.5b-iq2_xs-pure" => "qwen2.5-coder-1.5b-iq2_xs-pure.gguf",
        "qwen2.5-coder-1.5b-iq2_s-pure" => "qwen2.5-coder-1.5b-iq2_s-pure.gguf",
        "qwen2.5-coder-1.5b-iq1_s-pure" => "qwen2.5-coder-1.5b-iq1_s-pure.gguf",
        "qwen2.5-coder-1.5b-iq1_m-pure" => "qwen2.5-coder-1.5b-iq1_m-pure.gguf",
        "qwen2.5-coder-1.5b-q3_k-pure" => "qwen2.5-coder-1.5b-q3_k-pure.gguf",
        "qwen2.5-coder-1.5b-q5_k-pure" => "qwen2.5-coder-1.5b-q5_k-pure.gguf",
        "qwen2.5-coder-1.5b-q3_k_m" => "qwen2.5-coder-1.5b-q3_k_m.gguf",
        "qwen2.5-coder-1.5b-q3_k_s" => "qwen2.5-coder-1.5b-q3_k_s.gguf",
        "qwen2.5-coder-1.5b-q5_k_m" => "qwen2.5-coder-1.5b-q5_k_m.gguf",
        "qwen2.5-coder-1.5b-iq4_xs" => "qwen2.5-coder-1.5b-iq4_xs.gguf",
        "qwen2.5-coder-1.5b-iq3_xxs" => "qwen2.5-coder-1.5b-iq3_xxs.gguf",
        "qwen2.5-coder-1.5b-iq3_m" => "qwen2.5-coder-1.5b-iq3_m.gguf",
        "qwen2.5-coder-1.5b-iq2_xxs" => "qwen2.5-coder-1.5b-iq2_xxs.gguf",
        "qwen2.5-coder-1.5b-iq2_m" => "qwen2.5-coder-1.5b-iq2_m.gguf",
        other => panic!("unknown test model '{other}'"),
    }
}

/// The path of a model's file. Synthetic models are (re)written unless the file is the one their
/// goldens were made from (tests/golden/<model>/model.json); a real model that is absent fails
/// the test, saying what fetches it: no test passes for work it did not do. (The tests of
/// Qwen2.5-Coder-1.5B are the by-hand group: ignored in CI, run by `tools/test.sh --full`.)
pub fn model_path(model: &str) -> PathBuf {
    let lowbit =
        crate::golden::LOWBIT_MODELS.contains(&model) || model == "qwen2.5-coder-0.5b-q2_0";
    if model.starts_with("synthetic-") && !lowbit {
        // written when absent or when it is not the file the goldens were made from
        return crate::golden::synthetic_model(model).unwrap_or_else(|e| panic!("{e}"));
    }
    let p = models_dir().join(model_file_name(model));
    if p.exists() {
        return p;
    }
    if model == "qwen2.5-coder-1.5b" {
        panic!(
            "model {model} not found at {}: run tools/test.sh --full (which fetches it with \
             tools/fetch-models.sh qwen2.5-coder-1.5b), or set SMOLRUN_MODELS",
            p.display()
        );
    }
    if let Some(ty) = model.strip_prefix("qwen2.5-coder-1.5b-") {
        let arg = match ty.strip_suffix("-pure") {
            Some(t) => format!("{}:pure", t.to_uppercase()),
            None => ty.to_uppercase(),
        };
        panic!(
            "model {model} not found at {}: run tools/oracle/qwen15b-types.sh {arg} (llama-quantize \
             b11434, 1-3 minutes), or set SMOLRUN_MODELS",
            p.display()
        );
    }
    if lowbit {
        panic!(
            "model {model} not found at {}: run tools/fetch-models.sh lowbit (it requantizes \
             qwen2.5-coder-0.5b and synthetic-qwen3 with smolrun gguf requant, and with \
             llama-quantize for the 2- and 3-bit i-quants), or set SMOLRUN_MODELS",
            p.display()
        );
    }
    panic!(
        "model {model} not found at {}: run tools/fetch-models.sh (or set SMOLRUN_MODELS)",
        p.display()
    );
}

/// A mapped model file, parsed on demand by [`with_model`].
pub fn with_model<R>(model: &str, f: impl FnOnce(&Gguf, &Model, &dyn WeightStore) -> R) -> R {
    with_model_on(model, &test_kernels(), f)
}

/// Which store the model tests read their weights through: the resident one (the file mapped)
/// by default, the pread one with `SMOLRUN_TEST_WEIGHTS=pread` (nothing mapped; the golden
/// tests then check the seam as `--weights pread` runs it).
pub fn test_weights_pread() -> bool {
    std::env::var("SMOLRUN_TEST_WEIGHTS").as_deref() == Ok("pread")
}

/// [`with_model`] on the given kernel set.
pub fn with_model_on<R>(
    model: &str,
    kernels: &KernelSet,
    f: impl FnOnce(&Gguf, &Model, &dyn WeightStore) -> R,
) -> R {
    let path = model_path(model);
    let file = MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let g = Gguf::parse(file.bytes()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if test_weights_pread() {
        let store = pread_store(&path, &g);
        let m = Model::load_from(&g, &store, kernels)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return f(&g, &m, &store);
    }
    let m =
        Model::load_with_kernels(&g, kernels).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let store = ResidentStore::new(&g);
    f(&g, &m, &store)
}

/// A store that maps nothing over the model file at `path` (header `g`), its scratch sized for
/// the file's largest weight, as `--weights pread` builds it.
pub fn pread_store(path: &Path, g: &Gguf) -> PreadStore<FileReader> {
    let reader = FileReader::open(path).unwrap_or_else(|e| panic!("{e}"));
    let scratch = TensorTable::new(g).largest_weight() as usize;
    PreadStore::new(reader, g, scratch).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// How a test streams a model: the plan's budget, the ring's size if not the plan's (`Some`
/// shrinks it to force wrap-arounds; never below the largest streamed weight), the number of
/// reader threads, and whether every weight is checked against its checksum.
#[derive(Debug, Clone, Copy)]
pub struct StreamSetup {
    pub budget: StreamBudget,
    pub zone: Option<u64>,
    pub readers: usize,
    pub verify: bool,
}

/// A streaming store over `reader` (the file of `g`, parsed from its header): the model loaded
/// through it, planned as `setup` says, its readers started.
pub fn streaming_store<R: ReadAt + Send + Sync + 'static>(
    reader: R,
    g: &Gguf,
    kernels: &KernelSet,
    setup: StreamSetup,
) -> (Model, StreamingStore<R>, StreamPlan) {
    let mut store = StreamStore::new(reader, g, CondSignal::default(), CondSignal::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let m = Model::load_from(g, &store, kernels).unwrap_or_else(|e| panic!("{e}"));
    let mut plan = StreamPlan::new(
        store.table(),
        &m.weight_order(),
        setup.budget,
        store.alignment(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    if let Some(zone) = setup.zone {
        let largest = plan
            .streamed
            .iter()
            .map(|w| w.span.end - w.span.start)
            .max();
        plan.zone_bytes = zone.max(largest.unwrap_or(0));
    }
    // The zones in a mapping of exactly their plan, as the engine carves them.
    let zones = store
        .zone_plan(&plan, &m.expert_keys())
        .unwrap_or_else(|e| panic!("{e}"));
    let region = smolrun_linux::anonymous_region_for(&zones).expect("a region for the zones");
    store
        .plan(&plan, &m.expert_keys(), setup.verify, region)
        .unwrap_or_else(|e| panic!("{e}"));
    let store = StreamingStore::start(store, setup.readers).expect("reader threads");
    (m, store, plan)
}

/// The kernels the model tests run: the scalar reference by default, this CPU's as the CLI
/// selects them with `SMOLRUN_TEST_KERNELS=native`. Scalar by default because the goldens
/// are met with it and CI may lack the SIMD faces; with the AVX2 faces, gemma3-270m's greedy
/// test measured 3/5 identical continuations (one divergence at a 0.19 logit gap): Gemma 3's
/// activation outliers turn the SIMD kernels' other f32 summation order into whole Q8
/// rounding steps.
pub fn test_kernels() -> KernelSet {
    test_kernels_or(false)
}

/// The kernel set `SMOLRUN_TEST_KERNELS` names (`native` or `scalar`), else this CPU's native set
/// when `native` is true (the by-hand 1.5B tests: the path a user runs) or the scalar one.
pub fn test_kernels_or(native: bool) -> KernelSet {
    match std::env::var("SMOLRUN_TEST_KERNELS").as_deref() {
        Ok("native") => KernelSet::select(&smolrun_linux::detect_features()),
        Ok("scalar") => KernelSet::scalar(),
        _ if native => KernelSet::select(&smolrun_linux::detect_features()),
        _ => KernelSet::scalar(),
    }
}

/// Splits work over scoped std threads (the platform crate's pool is the production one; this
/// keeps the tests independent of it).
pub struct ScopedThreads(pub usize);

impl ScopedThreads {
    /// Two workers by default (CI has two cores); `SMOLRUN_TEST_THREADS` overrides.
    pub fn from_env() -> ScopedThreads {
        let n = std::env::var("SMOLRUN_TEST_THREADS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2usize);
        ScopedThreads(n.max(1))
    }
}

impl Parallel for ScopedThreads {
    fn n_threads(&self) -> usize {
        self.0
    }
    fn run(&self, job: &(dyn Fn(usize) + Sync)) {
        if self.0 == 1 {
            return job(0);
        }
        std::thread::scope(|s| {
            for i in 1..self.0 {
                s.spawn(move || job(i));
            }
            job(0);
        });
    }
}

/// ids of a JSON array of integers.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of token ids")
        .iter()
        .map(|x| x.as_u64().expect("a token id") as u32)
        .collect()
}

/// KL(reference || ours) over the partition {each of the reference's top-k ids, all other ids}.
/// `top` holds the reference's (id, logit) pairs and `ref_lse` its log-sum-exp over all logits,
/// so its probabilities are exact; ours come from our full logits.
pub fn kl_top_k(top: &[(u32, f32)], ref_lse: f64, ours: &[f32]) -> f64 {
    let our_lse = smolrun_core::math::log_sum_exp(ours);
    let (mut kl, mut p_in, mut q_in) = (0f64, 0f64, 0f64);
    for &(id, logit) in top {
        let p = (logit as f64 - ref_lse).exp();
        let q = (ours[id as usize] as f64 - our_lse).exp();
        if p > 0.0 {
            kl += p * (p / q.max(1e-300)).ln();
        }
        p_in += p;
        q_in += q;
    }
    let (p_rest, q_rest) = ((1.0 - p_in).max(0.0), (1.0 - q_in).max(1e-300));
    if p_rest > 1e-12 {
        kl += p_rest * (p_rest / q_rest).ln();
    }
    kl
}

/// Index of the largest logit.
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// The first `n` tokens of the model's golden logits texts, joined: a prompt of real text for
/// tests that compare two ways of running the same tokens.
pub fn golden_prompt(model: &str, n: usize) -> Vec<u32> {
    let g = golden(model, "logits.json");
    let texts = g["texts"].as_array().expect("texts");
    let mut tokens: Vec<u32> = texts.iter().flat_map(|t| ids(&t["tokens"])).collect();
    assert!(
        tokens.len() >= n,
        "{model}: the golden texts hold {} tokens",
        tokens.len()
    );
    tokens.truncate(n);
    tokens
}

/// The logits at every position of `tokens`, run from an empty context in batches of `n_batch`
/// (`forward_batch_all`).
pub fn logits_in_batches(
    m: &Model,
    store: &dyn WeightStore,
    par: &dyn Parallel,
    tokens: &[u32],
    n_batch: usize,
) -> Vec<Vec<f32>> {
    let mut state = State::with_batch(m, tokens.len(), n_batch).expect("state");
    assert_eq!(state.n_batch(), n_batch.min(tokens.len()));
    let mut all = Vec::new();
    m.forward_batch_all(&mut state, store, par, tokens, 0, 0, &mut |i, l| {
        assert_eq!(i, all.len());
        all.push(l.to_vec())
    })
    .expect("forward_batch_all");
    all
}

/// Logits at every position of each golden text (one batch per text, from an empty context,
/// as the logits test runs them), then `n_decode` greedy tokens after the first text.
pub fn logits_through(
    m: &Model,
    store: &dyn WeightStore,
    model: &str,
    n_decode: usize,
) -> Vec<f32> {
    let par = ScopedThreads::from_env();
    let golden = golden(model, "logits.json");
    let texts: Vec<Vec<u32>> = golden["texts"]
        .as_array()
        .expect("texts")
        .iter()
        .map(|t| ids(&t["tokens"]))
        .collect();
    let n_ctx = texts.iter().map(Vec::len).max().unwrap_or(1) + n_decode;
    let mut state = State::new(m, n_ctx).expect("state");
    let mut all = Vec::new();
    for tokens in &texts {
        state.reset();
        m.forward_batch_all(&mut state, store, &par, tokens, 0, 0, &mut |_, l| {
            all.extend_from_slice(l)
        })
        .expect("forward_batch_all");
    }
    state.reset();
    let prompt = &texts[0];
    let mut next = argmax(m.forward_batch(&mut state, store, &par, prompt, 0).unwrap());
    for i in 0..n_decode {
        let logits = m
            .forward(&mut state, store, &par, next, prompt.len() + i)
            .expect("forward");
        all.extend_from_slice(logits);
        next = argmax(logits);
    }
    all
}

/// A paged store over `reader` for `m` (loaded from the mapped file `g`): experts from pools
/// of `slots` experts per layer, filled by `readers` threads (0: by the compute thread).
pub fn paged_store<'a, R: ReadAt + Send + Sync + 'static>(
    g: &'a Gguf<'a>,
    m: &Model,
    reader: R,
    slots: usize,
    readers: usize,
) -> Result<PagedStore<ResidentStore<'a>, R, CondSignal>, ModelError> {
    let config = PagerConfig {
        slots_per_layer: slots,
        eviction: Eviction::DEFAULT,
    };
    let groups = m.expert_groups();
    // The slots in a mapping of exactly their plan, as the engine carves them.
    let slots = smolrun_core::model::pager::slot_plan(&reader, g, &groups, config)?;
    let region = smolrun_linux::anonymous_region_for(&slots).expect("a region for the slots");
    let pool = ExpertPool::new(
        reader,
        g,
        &groups,
        config,
        CondSignal::default(),
        CondSignal::default(),
        region,
    )?;
    let pool = Arc::new(pool);
    let threads: Option<Box<dyn Send + Sync>> = match readers {
        0 => None,
        n => Some(Box::new(start_expert_readers(&pool, n).expect("threads"))),
    };
    Ok(PagedStore::new(ResidentStore::new(g), pool, threads))
}
