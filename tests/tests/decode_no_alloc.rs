//! After warm-up, decoding a token performs no heap allocation: the forward pass (on the
//! platform's thread pool), sampling with the default chain (penalties, top-k heap, top-p,
//! min-p, temperature, the draw, top-N alternatives), accepting the token, and the memory
//! guard's look at the available memory every 16 tokens. A counting global allocator checks 64
//! decoded tokens, on the resident store, on the pread store (nothing mapped: every weight read
//! into its scratch buffer) and on the streaming store (reader threads filling a ring a weight at
//! a time: the readers must not allocate either), and for the mixtures of experts on the expert
//! pager (reader threads, guesses, cache-aware routing), on Gemma 3 and on the synthetic
//! mixtures of experts (qwen3moe, bailingmoe2). This file holds a single test, run from its own `main`, so
//! that nothing else in the process allocates meanwhile.

use smolrun_core::gguf::Gguf;
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::StreamBudget;
use smolrun_core::model::{KvCacheType, Model, MoeOptions, ResidentStore, State, WeightStore};
use smolrun_core::sampler::{Sampler, SamplerParams};
use smolrun_linux::FileReader;
use smolrun_linux::{MappedFile, MemoryWatch, ThreadPool};
use smolrun_tests::counting_alloc::{allocated_bytes, allocations, CountingAllocator};
use smolrun_tests::{model_path, paged_store, pread_store, streaming_store, StreamSetup};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Runs without libtest (`harness = false` in Cargo.toml): a harness thread's own allocations
/// (its progress notices) would be counted against the decode loop.
fn main() {
    decoding_64_tokens_after_warm_up_allocates_nothing();
    println!("decode_no_alloc: ok");
}

fn decoding_64_tokens_after_warm_up_allocates_nothing() {
    // Gemma 3; then a mixture of experts (routing, the chosen experts' hint and their
    // matvecs); then groups, the selection bias and the shared expert, with a fused QKV matrix;
    // then the shared expert's sigmoid gate (qwen2moe); then Qwen3.5's recurrent layers and
    // gated attention; then OLMoE's whole-projection QK-norm and top-8 routing, Phi-3's fused
    // gate and up, SmolLM3's layers without RoPE, LFM2's short convolutions, LFM2-MoE's
    // sigmoid router with its selection bias, SmallThinker's early router and ReGLU experts, Granite 4.0 H's Mamba-2 scan and scales.
    for model in [
        "gemma3-270m",
        "synthetic-qwen3moe",
        "synthetic-bailingmoe2",
        "synthetic-qwen2moe",
        "synthetic-qwen35",
        "synthetic-olmoe",
        "synthetic-phi3",
        "synthetic-smollm3",
        "synthetic-qwen35moe",
        "synthetic-lfm2",
        "synthetic-lfm2moe",
        "synthetic-smallthinker",
        "synthetic-granitehybrid",
    ] {
        let path = model_path(model);
        let file = MappedFile::open(&path).unwrap();
        let gguf = Gguf::parse(file.bytes()).unwrap();
        let m = Model::load(&gguf).unwrap();
        decode_64_without_allocating(
            &m,
            &ResidentStore::new(&gguf),
            &format!("{model}, resident"),
        );
        decode_64_without_allocating(&m, &pread_store(&path, &gguf), &format!("{model}, pread"));
        let setup = StreamSetup {
            budget: StreamBudget::Resident(0),
            zone: Some(0),
            readers: 2,
            verify: true,
        };
        let reader = FileReader::open(&path).unwrap();
        let kernels = KernelSet::select(&smolrun_linux::detect_features());
        let (ms, stream, _) = streaming_store(reader, &gguf, &kernels, setup);
        decode_64_without_allocating(&ms, &stream, &format!("{model}, streamed"));
        // A q8_0 KV cache (quantized rows, the query quantized, rotations), resident, exact
        // and with the skip threshold (its gathered exponentials and runs of rows).
        if model == "gemma3-270m" {
            let mut q8 = m.clone();
            q8.set_kv_type(KvCacheType::Q8_0);
            let store = ResidentStore::new(&gguf);
            decode_64_without_allocating(&q8, &store, &format!("{model}, q8_0 cache"));
            decode_64_skipping(&q8, &store, &format!("{model}, q8_0 cache, skip"), 1e-4);
            decode_64_skipping(&m, &store, &format!("{model}, f16 cache, skip"), 1e-4);
        }
        // Experts paged into pools of a token's experts plus one, by two reader threads,
        // with guesses and cache-aware routing.
        let Some(group) = m.expert_groups().first().copied() else {
            continue;
        };
        let mut mp = m.clone();
        let opts = MoeOptions {
            cache_bias: 0.1,
            predict_distance: 1,
            experts_used: None,
            no_early_prefetch: false,
        };
        mp.set_moe_options(opts).unwrap();
        let reader = FileReader::open(&path).unwrap();
        let paged = paged_store(&gguf, &mp, reader, group.n_used + 1, 2).unwrap();
        decode_64_without_allocating(&mp, &paged, &format!("{model}, experts paged"));
    }
}

fn decode_64_without_allocating(model: &Model, store: &dyn WeightStore, what: &str) {
    decode_64_skipping(model, store, what, 0.0)
}

/// [`decode_64_without_allocating`] with the attention skip threshold `eps` (0: exact).
fn decode_64_skipping(model: &Model, store: &dyn WeightStore, what: &str, eps: f32) {
    let pool = ThreadPool::new(2).unwrap();
    let mut state = State::new(model, 256).unwrap();
    state.set_attn_skip_eps(eps);
    let params = SamplerParams {
        n_probs: 3,
        ..SamplerParams::default()
    };

    // Warm-up: a short prompt and a few decoded tokens (first touch of every buffer, worker
    // start-up, the sampler's first use).
    let prompt = [2u32, 818, 5279, 529, 7001, 563];
    let mut token = 0;
    let mut pos = 0;
    let n_vocab = {
        let mut logits_len = 0;
        for &t in &prompt {
            logits_len = model
                .forward(&mut state, store, &pool, t, pos)
                .unwrap()
                .len();
            pos += 1;
        }
        logits_len
    };
    let mut sampler = Sampler::new(n_vocab, params).unwrap();
    // Opens its files here, at start-up; a reading must not allocate.
    let watch = MemoryWatch::new();
    let mut lowest_available = u64::MAX;
    for &t in &prompt {
        sampler.accept(t);
    }
    for _ in 0..4 {
        let logits = model.forward(&mut state, store, &pool, token, pos).unwrap();
        token = sampler.sample(logits).unwrap().token;
        sampler.accept(token);
        pos += 1;
    }

    let (count_before, bytes_before) = (allocations(), allocated_bytes());
    for i in 0..64 {
        if i % 16 == 0 {
            lowest_available = lowest_available.min(watch.read().available);
        }
        let logits = model.forward(&mut state, store, &pool, token, pos).unwrap();
        let sampled = sampler.sample(logits).unwrap();
        assert_eq!(sampled.top.len(), 3);
        token = sampled.token;
        sampler.accept(token);
        pos += 1;
    }
    let count = allocations() - count_before;
    let bytes = allocated_bytes() - bytes_before;
    assert_eq!(
        count, 0,
        "{what}: 64 decoded tokens made {count} heap allocations ({bytes} bytes)"
    );
    assert_eq!(pos, prompt.len() + 4 + 64);
    assert!(
        lowest_available > 0 && lowest_available < u64::MAX,
        "the memory readings did not run: {lowest_available}"
    );
}
