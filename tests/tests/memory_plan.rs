//! core's MemoryPlan on the real models: the bytes it counts as read every token are the sums
//! of the tensor tables (worked out independently with the `gguf` Python package: all tensors
//! but the 1-D ones, minus `token_embd.weight` when the file has an `output.weight`), and its
//! KV cache, activations and logits are what `State::new` really allocates.

use smolrun_core::gguf::Gguf;
use smolrun_core::model::{HParams, MemoryPlan, Model, State};
use smolrun_linux::MappedFile;
use smolrun_tests::model_path;

struct Expected {
    model: &'static str,
    /// Matrices read every token, from `gguf` (Python).
    weights: u64,
    embedding_table: u64,
    head_is_embedding: bool,
    /// 1-D tensors (norms, biases).
    norms: u64,
    header: u64,
}

const MODELS: [Expected; 3] = [
    Expected {
        model: "gemma3-270m",
        // 68,106,240 of layer matrices + the tied 178,257,920-byte Q8_0 table.
        weights: 246_364_160,
        embedding_table: 178_257_920,
        head_is_embedding: true,
        norms: 223_744,
        header: 6_525_120,
    },
    Expected {
        model: "qwen2.5-coder-0.5b",
        // 246,930,432 of layer matrices + the 144,643,072-byte output.weight.
        weights: 391_573_504,
        embedding_table: 93_592_576,
        head_is_embedding: false,
        norms: 286_208,
        header: 5_947_776,
    },
    Expected {
        model: "qwen2.5-coder-1.5b",
        // 788,078,592 of layer matrices + the 191,439,360-byte Q6_K output.weight.
        weights: 979_517_952,
        embedding_table: 131_272_704,
        head_is_embedding: false,
        norms: 579_584,
        header: 5_950_528,
    },
];

#[test]
fn plans_match_the_tensor_tables_and_state_new() {
    for want in &MODELS[..2] {
        check_plan(want);
    }
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B, 1.1 GB; minutes of CPU)"]
fn plans_match_the_tensor_tables_and_state_new_qwen25_coder_15b() {
    check_plan(&MODELS[2]);
}

fn check_plan(want: &Expected) {
    {
        let path = model_path(want.model);
        let file = MappedFile::open(&path).unwrap();
        let gguf = Gguf::parse(file.bytes()).unwrap();
        let hp = HParams::from_gguf(&gguf).unwrap();
        let model = Model::load(&gguf).unwrap();
        for n_ctx in [256, 4096] {
            let plan = MemoryPlan::new(&hp, &gguf.tensors, gguf.data_offset, n_ctx);
            let m = want.model;
            assert_eq!(plan.weights, want.weights, "{m}");
            assert_eq!(plan.embedding_table, want.embedding_table, "{m}");
            assert_eq!(plan.head_is_embedding, want.head_is_embedding, "{m}");
            assert_eq!(plan.norms, want.norms, "{m}");
            assert_eq!(plan.metadata, want.header, "{m}");
            // Sampler arrays aside, the state parts are State's own count.
            let state = State::new(&model, n_ctx).unwrap();
            let sampler = 20 * hp.n_vocab as u64;
            assert_eq!(
                plan.kv_cache + plan.recurrent_state + plan.activations + plan.logits - sampler,
                state.memory_bytes() as u64,
                "{m} at -c {n_ctx}"
            );
            // A table that is not the head costs at most two pages per token of context.
            if want.head_is_embedding {
                assert_eq!(plan.embedding_rows, 0, "{m}");
            } else {
                assert!(plan.embedding_rows <= n_ctx as u64 * 8192, "{m}");
                assert!(plan.embedding_rows < want.embedding_table, "{m}");
            }
            assert_eq!(
                plan.total(),
                plan.parts().iter().map(|p| p.1).sum::<u64>(),
                "{m}"
            );
        }
    }
}

/// Qwen3.5's recurrent layers hold a fixed state instead of a KV cache: synthetic-qwen35 has
/// one attention layer (2 KV heads of 64: f16 keys and values, 512 bytes per position) and
/// three recurrent ones, each a conv window of 3 x 256 channels and four 32 x 32 matrices, f32
/// (19,456 bytes whatever the context); the plan counts exactly what State allocates.
#[test]
fn recurrent_layers_count_their_state_not_a_kv_cache() {
    let path = model_path("synthetic-qwen35");
    let file = MappedFile::open(&path).unwrap();
    let gguf = Gguf::parse(file.bytes()).unwrap();
    let hp = HParams::from_gguf(&gguf).unwrap();
    let model = Model::load(&gguf).unwrap();
    for n_ctx in [256, 2048] {
        let plan = MemoryPlan::new(&hp, &gguf.tensors, gguf.data_offset, n_ctx);
        assert_eq!(plan.kv_cache, 512 * n_ctx as u64, "-c {n_ctx}");
        assert_eq!(plan.recurrent_state, 3 * 19_456, "-c {n_ctx}");
        assert_eq!(MemoryPlan::kv_bytes_per_token(&hp), 512);
        let state = State::new(&model, n_ctx).unwrap();
        let sampler = 20 * hp.n_vocab as u64;
        assert_eq!(
            plan.kv_cache + plan.recurrent_state + plan.activations + plan.logits - sampler,
            state.memory_bytes() as u64,
            "-c {n_ctx}"
        );
    }
    // --state-f16: the matrices (3 layers x 4 x 32 x 32) take 2 bytes a value instead of 4;
    // the conv window stays f32.
    let hp16 = hp.clone().with_state_f16(true);
    let mut model16 = Model::load(&gguf).unwrap();
    model16.set_state_f16(true);
    for n_ctx in [256, 2048] {
        let plan = MemoryPlan::new(&hp16, &gguf.tensors, gguf.data_offset, n_ctx);
        assert_eq!(plan.kv_cache, 512 * n_ctx as u64, "-c {n_ctx} --state-f16");
        assert_eq!(
            plan.recurrent_state,
            3 * (19_456 - 2 * 4 * 32 * 32),
            "-c {n_ctx} --state-f16"
        );
        let state = State::new(&model16, n_ctx).unwrap();
        let sampler = 20 * hp.n_vocab as u64;
        assert_eq!(
            plan.kv_cache + plan.recurrent_state + plan.activations + plan.logits - sampler,
            state.memory_bytes() as u64,
            "-c {n_ctx} --state-f16"
        );
    }
}
