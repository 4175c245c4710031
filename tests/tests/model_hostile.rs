//! Hostile and broken model files: absurd hyperparameters, missing tensors and wrong shapes must
//! give an error that names the key or tensor and the expected versus found value, before
//! anything is sized from the bad number. The files are written by a tiny GGUF builder here.

use smolrun_core::gguf::Gguf;
use smolrun_core::model::{MixerShape, Model, ModelError, ResidentStore, State};
use smolrun_core::platform::SingleThread;

enum Meta {
    U32(u32),
    F32(f32),
    Str(&'static str),
    Bool(bool),
    U32s(Vec<u32>),
    Bools(Vec<bool>),
}

/// A GGUF v3 file with the given metadata and F32 tensors of the given (ggml-order) shapes,
/// filled with a small deterministic pattern.
fn build_gguf(meta: &[(&str, Meta)], tensors: &[(&str, Vec<u64>)]) -> Vec<u8> {
    fn put_str(b: &mut Vec<u8>, s: &str) {
        b.extend_from_slice(&(s.len() as u64).to_le_bytes());
        b.extend_from_slice(s.as_bytes());
    }
    let mut b = Vec::new();
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    b.extend_from_slice(&(meta.len() as u64).to_le_bytes());
    for (k, v) in meta {
        put_str(&mut b, k);
        match v {
            Meta::U32(x) => {
                b.extend_from_slice(&4u32.to_le_bytes());
                b.extend_from_slice(&x.to_le_bytes());
            }
            Meta::F32(x) => {
                b.extend_from_slice(&6u32.to_le_bytes());
                b.extend_from_slice(&x.to_le_bytes());
            }
            Meta::Str(s) => {
                b.extend_from_slice(&8u32.to_le_bytes());
                put_str(&mut b, s);
            }
            Meta::Bool(x) => {
                b.extend_from_slice(&7u32.to_le_bytes());
                b.push(*x as u8);
            }
            Meta::U32s(xs) => {
                b.extend_from_slice(&9u32.to_le_bytes());
                b.extend_from_slice(&4u32.to_le_bytes());
                b.extend_from_slice(&(xs.len() as u64).to_le_bytes());
                xs.iter()
                    .for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
            }
            Meta::Bools(xs) => {
                b.extend_from_slice(&9u32.to_le_bytes());
                b.extend_from_slice(&7u32.to_le_bytes());
                b.extend_from_slice(&(xs.len() as u64).to_le_bytes());
                xs.iter().for_each(|&x| b.push(x as u8));
            }
        }
    }
    let mut offset = 0u64;
    let mut sizes = Vec::new();
    for (name, dims) in tensors {
        put_str(&mut b, name);
        b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&0u32.to_le_bytes()); // F32
        b.extend_from_slice(&offset.to_le_bytes());
        let n: u64 = dims.iter().product();
        sizes.push(n);
        offset += (n * 4).div_ceil(32) * 32;
    }
    while b.len() % 32 != 0 {
        b.push(0);
    }
    for (i, n) in sizes.iter().enumerate() {
        let start = b.len();
        for j in 0..*n {
            let v = (((i as u64 * 7919 + j * 104729) % 1000) as f32 / 1000.0 - 0.5) * 0.2;
            b.extend_from_slice(&v.to_le_bytes());
        }
        while (b.len() - start) % 32 != 0 {
            b.push(0);
        }
    }
    b
}

const N_EMBD: u64 = 32;
const N_FF: u64 = 64;
const N_VOCAB: u64 = 8;

fn metadata(
    block_count: u32,
    n_head: u32,
    n_head_kv: u32,
    n_embd: u32,
) -> Vec<(&'static str, Meta)> {
    vec![
        ("general.architecture", Meta::Str("llama")),
        ("llama.block_count", Meta::U32(block_count)),
        ("llama.embedding_length", Meta::U32(n_embd)),
        ("llama.feed_forward_length", Meta::U32(N_FF as u32)),
        ("llama.attention.head_count", Meta::U32(n_head)),
        ("llama.attention.head_count_kv", Meta::U32(n_head_kv)),
        ("llama.context_length", Meta::U32(64)),
        ("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-5)),
    ]
}

/// One llama layer with 2 query heads and 1 KV head of 16.
fn tensors() -> Vec<(&'static str, Vec<u64>)> {
    vec![
        ("token_embd.weight", vec![N_EMBD, N_VOCAB]),
        ("output_norm.weight", vec![N_EMBD]),
        ("blk.0.attn_norm.weight", vec![N_EMBD]),
        ("blk.0.attn_q.weight", vec![N_EMBD, N_EMBD]),
        ("blk.0.attn_k.weight", vec![N_EMBD, 16]),
        ("blk.0.attn_v.weight", vec![N_EMBD, 16]),
        ("blk.0.attn_output.weight", vec![N_EMBD, N_EMBD]),
        ("blk.0.ffn_norm.weight", vec![N_EMBD]),
        ("blk.0.ffn_gate.weight", vec![N_EMBD, N_FF]),
        ("blk.0.ffn_up.weight", vec![N_EMBD, N_FF]),
        ("blk.0.ffn_down.weight", vec![N_FF, N_EMBD]),
    ]
}

fn load(bytes: &[u8]) -> Result<Model, ModelError> {
    let g = Gguf::parse(bytes).expect("the builder writes valid GGUF");
    Model::load(&g)
}

#[test]
fn well_formed_tiny_model_runs() {
    let bytes = build_gguf(&metadata(1, 2, 1, N_EMBD as u32), &tensors());
    let g = Gguf::parse(&bytes).unwrap();
    let m = Model::load(&g).unwrap();
    let store = ResidentStore::new(&g);
    let mut st = State::new(&m, 4).unwrap();
    for pos in 0..4 {
        let logits = m.forward(&mut st, &store, &SingleThread, 3, pos).unwrap();
        assert_eq!(logits.len(), N_VOCAB as usize);
        assert!(logits.iter().all(|v| v.is_finite()));
    }
    // The fifth position does not fit the 4-position state.
    let err = m.forward(&mut st, &store, &SingleThread, 3, 4).unwrap_err();
    assert_eq!(err, ModelError::ContextFull { pos: 4, n_ctx: 4 });
    let err = m
        .forward(&mut st, &store, &SingleThread, 99, 0)
        .unwrap_err();
    assert_eq!(
        err,
        ModelError::TokenOutOfRange {
            token: 99,
            n_vocab: 8
        }
    );
    assert!(matches!(
        State::new(&m, 65),
        Err(ModelError::BadContext {
            requested: 65,
            max: 64
        })
    ));
}

#[test]
fn absurd_block_count_is_rejected_by_key() {
    let bytes = build_gguf(&metadata(100_000, 2, 1, N_EMBD as u32), &tensors());
    let err = load(&bytes).unwrap_err();
    match &err {
        ModelError::BadHParam {
            key,
            expected,
            found,
        } => {
            assert_eq!(key, "llama.block_count");
            assert_eq!(found, "100000");
            assert!(expected.contains("1024"), "{expected}");
        }
        e => panic!("expected a BadHParam error for llama.block_count, got {e:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("llama.block_count") && msg.contains("100000"),
        "{msg}"
    );
}

#[test]
fn zero_heads_and_non_dividing_kv_heads_are_rejected() {
    let err = load(&build_gguf(&metadata(1, 0, 1, N_EMBD as u32), &tensors())).unwrap_err();
    assert!(
        matches!(&err, ModelError::BadHParam { key, found, .. } if key == "llama.attention.head_count" && found == "0"),
        "{err:?}"
    );
    let err = load(&build_gguf(&metadata(1, 4, 3, N_EMBD as u32), &tensors())).unwrap_err();
    assert!(
        matches!(&err, ModelError::BadHParam { key, found, .. } if key == "llama.attention.head_count_kv" && found == "3"),
        "{err:?}"
    );
}

#[test]
fn embedding_length_must_match_token_embd() {
    let err = load(&build_gguf(&metadata(1, 2, 1, 48), &tensors())).unwrap_err();
    match err {
        ModelError::BadHParam {
            key,
            expected,
            found,
        } => {
            assert_eq!(key, "llama.embedding_length");
            assert_eq!(found, "48");
            assert!(expected.starts_with("32"), "{expected}");
        }
        e => panic!("expected a BadHParam error for llama.embedding_length, got {e:?}"),
    }
}

#[test]
fn missing_tensor_is_named() {
    let t: Vec<_> = tensors()
        .into_iter()
        .filter(|(n, _)| *n != "blk.0.ffn_up.weight")
        .collect();
    let err = load(&build_gguf(&metadata(1, 2, 1, N_EMBD as u32), &t)).unwrap_err();
    assert_eq!(
        err,
        ModelError::MissingTensor {
            name: "blk.0.ffn_up.weight".into()
        }
    );
    assert!(err.to_string().contains("blk.0.ffn_up.weight"));
}

#[test]
fn wrong_shape_is_named_with_expected_and_found() {
    let t: Vec<_> = tensors()
        .into_iter()
        .map(|(n, d)| {
            if n == "blk.0.attn_k.weight" {
                (n, vec![N_EMBD, 24])
            } else {
                (n, d)
            }
        })
        .collect();
    let err = load(&build_gguf(&metadata(1, 2, 1, N_EMBD as u32), &t)).unwrap_err();
    assert_eq!(
        err,
        ModelError::BadTensorShape {
            name: "blk.0.attn_k.weight".into(),
            expected: [32, 16, 1, 1],
            found: [32, 24, 1, 1],
        }
    );
}

#[test]
fn unsupported_architecture_is_named() {
    let mut meta = metadata(1, 2, 1, N_EMBD as u32);
    meta[0] = ("general.architecture", Meta::Str("mamba"));
    let err = load(&build_gguf(&meta, &tensors())).unwrap_err();
    assert_eq!(
        err,
        ModelError::UnsupportedArch {
            arch: "mamba".into()
        }
    );
}

/// A tiny qwen3moe: the llama tensors' attention (plus QK-norm), 4 experts of width 32, 2 used.
fn moe_file(expert_count: u32, used: u32, down_exps: Vec<u64>) -> Vec<u8> {
    let meta: Vec<(&str, Meta)> = vec![
        ("general.architecture", Meta::Str("qwen3moe")),
        ("qwen3moe.block_count", Meta::U32(1)),
        ("qwen3moe.embedding_length", Meta::U32(N_EMBD as u32)),
        ("qwen3moe.attention.head_count", Meta::U32(2)),
        ("qwen3moe.attention.head_count_kv", Meta::U32(1)),
        ("qwen3moe.context_length", Meta::U32(64)),
        ("qwen3moe.attention.layer_norm_rms_epsilon", Meta::F32(1e-5)),
        ("qwen3moe.expert_count", Meta::U32(expert_count)),
        ("qwen3moe.expert_used_count", Meta::U32(used)),
        ("qwen3moe.expert_feed_forward_length", Meta::U32(32)),
    ];
    let mut t: Vec<_> = tensors()
        .into_iter()
        .filter(|(n, _)| !n.starts_with("blk.0.ffn_") || *n == "blk.0.ffn_norm.weight")
        .collect();
    t.extend([
        ("blk.0.attn_q_norm.weight", vec![16]),
        ("blk.0.attn_k_norm.weight", vec![16]),
        ("blk.0.ffn_gate_inp.weight", vec![N_EMBD, 4]),
        ("blk.0.ffn_gate_exps.weight", vec![N_EMBD, 32, 4]),
        ("blk.0.ffn_up_exps.weight", vec![N_EMBD, 32, 4]),
        ("blk.0.ffn_down_exps.weight", down_exps),
    ]);
    build_gguf(&meta, &t)
}

#[test]
fn a_tiny_mixture_of_experts_runs_and_its_bad_shapes_are_named() {
    let bytes = moe_file(4, 2, vec![32, N_EMBD, 4]);
    let g = Gguf::parse(&bytes).unwrap();
    let m = Model::load(&g).unwrap();
    let store = ResidentStore::new(&g);
    let mut st = State::new(&m, 4).unwrap();
    for pos in 0..4 {
        let logits = m.forward(&mut st, &store, &SingleThread, 3, pos).unwrap();
        assert!(logits.iter().all(|v| v.is_finite()));
    }

    // One expert too few in the down projection: named with both shapes.
    let err = load(&moe_file(4, 2, vec![32, N_EMBD, 3])).unwrap_err();
    assert_eq!(
        err,
        ModelError::BadTensorShape {
            name: "blk.0.ffn_down_exps.weight".into(),
            expected: [32, N_EMBD, 4, 1],
            found: [32, N_EMBD, 3, 1],
        }
    );
    // More experts per token than there are, or than a token's fixed list holds.
    for (count, used) in [(4, 5), (64, 17), (4, 0)] {
        let err = load(&moe_file(count, used, vec![32, N_EMBD, 4])).unwrap_err();
        let ModelError::BadHParam { key, found, .. } = &err else {
            panic!("expected a hyperparameter error, got {err}");
        };
        assert_eq!(key, "qwen3moe.expert_used_count", "{err}");
        assert_eq!(found, &used.to_string());
    }
}

/// A tiny qwen2moe: Q/K/V biases, 4 experts of width 32, 2 used, a shared expert of width 64
/// behind its sigmoid gate (`with_gate`: the gate's weights are in the file).
fn qwen2moe_file(with_gate: bool) -> Vec<u8> {
    let meta: Vec<(&str, Meta)> = vec![
        ("general.architecture", Meta::Str("qwen2moe")),
        ("qwen2moe.block_count", Meta::U32(1)),
        ("qwen2moe.embedding_length", Meta::U32(N_EMBD as u32)),
        ("qwen2moe.attention.head_count", Meta::U32(2)),
        ("qwen2moe.attention.head_count_kv", Meta::U32(1)),
        ("qwen2moe.context_length", Meta::U32(64)),
        ("qwen2moe.attention.layer_norm_rms_epsilon", Meta::F32(1e-5)),
        ("qwen2moe.expert_count", Meta::U32(4)),
        ("qwen2moe.expert_used_count", Meta::U32(2)),
        ("qwen2moe.expert_feed_forward_length", Meta::U32(32)),
        ("qwen2moe.expert_shared_feed_forward_length", Meta::U32(64)),
    ];
    let mut t: Vec<_> = tensors()
        .into_iter()
        .filter(|(n, _)| !n.starts_with("blk.0.ffn_") || *n == "blk.0.ffn_norm.weight")
        .collect();
    t.extend([
        ("blk.0.attn_q.bias", vec![N_EMBD]),
        ("blk.0.attn_k.bias", vec![16]),
        ("blk.0.attn_v.bias", vec![16]),
        ("blk.0.ffn_gate_inp.weight", vec![N_EMBD, 4]),
        ("blk.0.ffn_gate_exps.weight", vec![N_EMBD, 32, 4]),
        ("blk.0.ffn_up_exps.weight", vec![N_EMBD, 32, 4]),
        ("blk.0.ffn_down_exps.weight", vec![32, N_EMBD, 4]),
        ("blk.0.ffn_gate_shexp.weight", vec![N_EMBD, 64]),
        ("blk.0.ffn_up_shexp.weight", vec![N_EMBD, 64]),
        ("blk.0.ffn_down_shexp.weight", vec![64, N_EMBD]),
    ]);
    if with_gate {
        t.push(("blk.0.ffn_gate_inp_shexp.weight", vec![N_EMBD]));
    }
    build_gguf(&meta, &t)
}

#[test]
fn a_tiny_qwen2moe_runs_and_its_shared_gate_is_required() {
    let bytes = qwen2moe_file(true);
    let g = Gguf::parse(&bytes).unwrap();
    let m = Model::load(&g).unwrap();
    let store = ResidentStore::new(&g);
    let mut st = State::new(&m, 4).unwrap();
    for pos in 0..4 {
        let logits = m.forward(&mut st, &store, &SingleThread, 3, pos).unwrap();
        assert!(logits.iter().all(|v| v.is_finite()));
    }
    let err = load(&qwen2moe_file(false)).unwrap_err();
    assert_eq!(
        err,
        ModelError::MissingTensor {
            name: "blk.0.ffn_gate_inp_shexp.weight".into()
        }
    );
}

/// The expert hyperparameters of a tiny bailingmoe2 that [`bailing_file`] may spoil.
struct Bailing {
    groups: u32,
    groups_used: u32,
    used: u32,
    gating: u32,
    /// Rows of the fused QKV matrix (32 + 2 x 16 is right).
    qkv_rows: u64,
}

const BAILING: Bailing = Bailing {
    groups: 4,
    groups_used: 2,
    used: 2,
    gating: 2,
    qkv_rows: 64,
};

/// A tiny bailingmoe2: 2 query heads and 1 KV head of 16 in one fused QKV matrix, partial RoPE
/// (8 of 16), layer 0 dense, layer 1 eight experts of width 32 in groups (sigmoid router,
/// selection bias, normalised and scaled weights) and a shared expert; block 2 an MTP layer with
/// no tensors at all (inference never reads them).
fn bailing_file(b: &Bailing) -> Vec<u8> {
    let meta: Vec<(&str, Meta)> = vec![
        ("general.architecture", Meta::Str("bailingmoe2")),
        ("bailingmoe2.block_count", Meta::U32(3)),
        ("bailingmoe2.nextn_predict_layers", Meta::U32(1)),
        ("bailingmoe2.leading_dense_block_count", Meta::U32(1)),
        ("bailingmoe2.embedding_length", Meta::U32(N_EMBD as u32)),
        ("bailingmoe2.feed_forward_length", Meta::U32(N_FF as u32)),
        ("bailingmoe2.attention.head_count", Meta::U32(2)),
        ("bailingmoe2.attention.head_count_kv", Meta::U32(1)),
        ("bailingmoe2.rope.dimension_count", Meta::U32(8)),
        ("bailingmoe2.context_length", Meta::U32(64)),
        (
            "bailingmoe2.attention.layer_norm_rms_epsilon",
            Meta::F32(1e-5),
        ),
        ("bailingmoe2.expert_count", Meta::U32(8)),
        ("bailingmoe2.expert_used_count", Meta::U32(b.used)),
        ("bailingmoe2.expert_feed_forward_length", Meta::U32(32)),
        ("bailingmoe2.expert_group_count", Meta::U32(b.groups)),
        (
            "bailingmoe2.expert_group_used_count",
            Meta::U32(b.groups_used),
        ),
        ("bailingmoe2.expert_shared_count", Meta::U32(1)),
        ("bailingmoe2.expert_weights_scale", Meta::F32(2.5)),
        ("bailingmoe2.expert_weights_norm", Meta::Bool(true)),
        ("bailingmoe2.expert_gating_func", Meta::U32(b.gating)),
    ];
    let mut t = vec![
        ("token_embd.weight", vec![N_EMBD, N_VOCAB]),
        ("output_norm.weight", vec![N_EMBD]),
        ("output.weight", vec![N_EMBD, N_VOCAB]),
    ];
    let names: [[&'static str; 6]; 2] = [
        [
            "blk.0.attn_norm.weight",
            "blk.0.attn_qkv.weight",
            "blk.0.attn_q_norm.weight",
            "blk.0.attn_k_norm.weight",
            "blk.0.attn_output.weight",
            "blk.0.ffn_norm.weight",
        ],
        [
            "blk.1.attn_norm.weight",
            "blk.1.attn_qkv.weight",
            "blk.1.attn_q_norm.weight",
            "blk.1.attn_k_norm.weight",
            "blk.1.attn_output.weight",
            "blk.1.ffn_norm.weight",
        ],
    ];
    for [norm, qkv, qn, kn, out, ffn_norm] in names {
        t.extend([
            (norm, vec![N_EMBD]),
            (qkv, vec![N_EMBD, b.qkv_rows]),
            (qn, vec![16]),
            (kn, vec![16]),
            (out, vec![N_EMBD, N_EMBD]),
            (ffn_norm, vec![N_EMBD]),
        ]);
    }
    t.extend([
        ("blk.0.ffn_gate.weight", vec![N_EMBD, N_FF]),
        ("blk.0.ffn_up.weight", vec![N_EMBD, N_FF]),
        ("blk.0.ffn_down.weight", vec![N_FF, N_EMBD]),
        ("blk.1.ffn_gate_inp.weight", vec![N_EMBD, 8]),
        ("blk.1.exp_probs_b.bias", vec![8]),
        ("blk.1.ffn_gate_exps.weight", vec![N_EMBD, 32, 8]),
        ("blk.1.ffn_up_exps.weight", vec![N_EMBD, 32, 8]),
        ("blk.1.ffn_down_exps.weight", vec![32, N_EMBD, 8]),
        ("blk.1.ffn_gate_shexp.weight", vec![N_EMBD, 32]),
        ("blk.1.ffn_up_shexp.weight", vec![N_EMBD, 32]),
        ("blk.1.ffn_down_shexp.weight", vec![32, N_EMBD]),
    ]);
    build_gguf(&meta, &t)
}

#[test]
fn a_tiny_bailingmoe2_runs_and_its_bad_expert_groups_are_named() {
    let bytes = bailing_file(&BAILING);
    let g = Gguf::parse(&bytes).unwrap();
    let m = Model::load(&g).unwrap();
    assert_eq!(m.hp.n_layer, 2, "the MTP block is not a layer");
    let store = ResidentStore::new(&g);
    let mut st = State::new(&m, 4).unwrap();
    for pos in 0..4 {
        let logits = m.forward(&mut st, &store, &SingleThread, 3, pos).unwrap();
        assert!(logits.iter().all(|v| v.is_finite()));
    }

    let bad = |b: Bailing, key: &str, found: &str| {
        let err = load(&bailing_file(&b)).unwrap_err();
        let ModelError::BadHParam {
            key: k, found: f, ..
        } = &err
        else {
            panic!("expected a hyperparameter error for {key}, got {err}");
        };
        assert_eq!((k.as_str(), f.as_str()), (key, found), "{err}");
    };
    // 3 groups do not divide 8 experts; 8 groups of one expert cannot be scored by their best two.
    for groups in [3, 8] {
        let b = Bailing { groups, ..BAILING };
        bad(b, "bailingmoe2.expert_group_count", &groups.to_string());
    }
    // Every group used is no choice (llama.cpp refuses it too); none used chooses nothing.
    for groups_used in [4, 0] {
        let b = Bailing {
            groups_used,
            ..BAILING
        };
        let found = groups_used.to_string();
        bad(b, "bailingmoe2.expert_group_used_count", &found);
    }
    // 1 group of 2 experts cannot give 3 experts a token.
    let b = Bailing {
        groups_used: 1,
        used: 3,
        ..BAILING
    };
    bad(b, "bailingmoe2.expert_used_count", "3");
    let b = Bailing {
        gating: 3,
        ..BAILING
    };
    bad(b, "bailingmoe2.expert_gating_func", "3");
    // The fused QKV matrix one row short: named with both shapes.
    let err = load(&bailing_file(&Bailing {
        qkv_rows: 63,
        ..BAILING
    }))
    .unwrap_err();
    assert_eq!(
        err,
        ModelError::BadTensorShape {
            name: "blk.0.attn_qkv.weight".into(),
            expected: [N_EMBD, 64, 1, 1],
            found: [N_EMBD, 63, 1, 1],
        }
    );
}

type MetaList = Vec<(&'static str, Meta)>;

/// A two-layer qwen35: layer 0 recurrent (2 key heads and 4 value heads of 8, conv 4), layer 1
/// gated full attention (2 query heads and 1 KV head of 16, IMRoPE sections [3, 3, 2, 0] over
/// all 8 rotated pairs). `edit` changes the metadata; `drop` leaves a tensor out; `reshape`
/// replaces one tensor's dims.
fn qwen35_file(
    edit: &dyn Fn(&mut MetaList),
    drop: Option<&str>,
    reshape: Option<(&str, Vec<u64>)>,
) -> Vec<u8> {
    qwen35_file_with(edit, drop, reshape, &[])
}

/// [`qwen35_file`] with `extra` tensors after the trunk's (an MTP block's).
fn qwen35_file_with(
    edit: &dyn Fn(&mut MetaList),
    drop: Option<&str>,
    reshape: Option<(&str, Vec<u64>)>,
    extra: &[(&'static str, Vec<u64>)],
) -> Vec<u8> {
    let mut meta = vec![
        ("general.architecture", Meta::Str("qwen35")),
        ("qwen35.block_count", Meta::U32(2)),
        ("qwen35.embedding_length", Meta::U32(N_EMBD as u32)),
        ("qwen35.feed_forward_length", Meta::U32(N_FF as u32)),
        ("qwen35.attention.head_count", Meta::U32(2)),
        ("qwen35.attention.head_count_kv", Meta::U32(1)),
        ("qwen35.attention.key_length", Meta::U32(16)),
        ("qwen35.attention.value_length", Meta::U32(16)),
        ("qwen35.rope.dimension_count", Meta::U32(16)),
        (
            "qwen35.rope.dimension_sections",
            Meta::U32s(vec![3, 3, 2, 0]),
        ),
        ("qwen35.context_length", Meta::U32(64)),
        ("qwen35.attention.layer_norm_rms_epsilon", Meta::F32(1e-6)),
        ("qwen35.full_attention_interval", Meta::U32(2)),
        ("qwen35.ssm.conv_kernel", Meta::U32(4)),
        ("qwen35.ssm.state_size", Meta::U32(8)),
        ("qwen35.ssm.group_count", Meta::U32(2)),
        ("qwen35.ssm.time_step_rank", Meta::U32(4)),
        ("qwen35.ssm.inner_size", Meta::U32(32)),
    ];
    edit(&mut meta);
    let mut tensors: Vec<(&str, Vec<u64>)> = vec![
        ("token_embd.weight", vec![N_EMBD, N_VOCAB]),
        ("output_norm.weight", vec![N_EMBD]),
        ("blk.0.attn_norm.weight", vec![N_EMBD]),
        ("blk.0.attn_qkv.weight", vec![N_EMBD, 64]),
        ("blk.0.attn_gate.weight", vec![N_EMBD, 32]),
        ("blk.0.ssm_conv1d.weight", vec![4, 64]),
        ("blk.0.ssm_dt.bias", vec![4]),
        ("blk.0.ssm_a", vec![4]),
        ("blk.0.ssm_beta.weight", vec![N_EMBD, 4]),
        ("blk.0.ssm_alpha.weight", vec![N_EMBD, 4]),
        ("blk.0.ssm_norm.weight", vec![8]),
        ("blk.0.ssm_out.weight", vec![32, N_EMBD]),
        ("blk.1.attn_norm.weight", vec![N_EMBD]),
        ("blk.1.attn_q.weight", vec![N_EMBD, 64]),
        ("blk.1.attn_k.weight", vec![N_EMBD, 16]),
        ("blk.1.attn_v.weight", vec![N_EMBD, 16]),
        ("blk.1.attn_q_norm.weight", vec![16]),
        ("blk.1.attn_k_norm.weight", vec![16]),
        ("blk.1.attn_output.weight", vec![N_EMBD, N_EMBD]),
    ];
    for l in ["0", "1"] {
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        tensors.push((
            leak(format!("blk.{l}.post_attention_norm.weight")),
            vec![N_EMBD],
        ));
        tensors.push((leak(format!("blk.{l}.ffn_gate.weight")), vec![N_EMBD, N_FF]));
        tensors.push((leak(format!("blk.{l}.ffn_up.weight")), vec![N_EMBD, N_FF]));
        tensors.push((leak(format!("blk.{l}.ffn_down.weight")), vec![N_FF, N_EMBD]));
    }
    tensors.extend(extra.iter().cloned());
    tensors.retain(|(name, _)| Some(*name) != drop);
    if let Some((name, dims)) = reshape {
        tensors.iter_mut().find(|(n, _)| *n == name).unwrap().1 = dims;
    }
    build_gguf(&meta, &tensors)
}

/// The tensors of an MTP block at `blk.2` of [`qwen35_file`]'s model: gated attention as
/// layer 1's, an FFN, and the nextn tensors.
fn qwen35_mtp_tensors() -> Vec<(&'static str, Vec<u64>)> {
    vec![
        ("blk.2.attn_norm.weight", vec![N_EMBD]),
        ("blk.2.attn_q.weight", vec![N_EMBD, 64]),
        ("blk.2.attn_k.weight", vec![N_EMBD, 16]),
        ("blk.2.attn_v.weight", vec![N_EMBD, 16]),
        ("blk.2.attn_q_norm.weight", vec![16]),
        ("blk.2.attn_k_norm.weight", vec![16]),
        ("blk.2.attn_output.weight", vec![N_EMBD, N_EMBD]),
        ("blk.2.post_attention_norm.weight", vec![N_EMBD]),
        ("blk.2.ffn_gate.weight", vec![N_EMBD, N_FF]),
        ("blk.2.ffn_up.weight", vec![N_EMBD, N_FF]),
        ("blk.2.ffn_down.weight", vec![N_FF, N_EMBD]),
        ("blk.2.nextn.eh_proj.weight", vec![2 * N_EMBD, N_EMBD]),
        ("blk.2.nextn.enorm.weight", vec![N_EMBD]),
        ("blk.2.nextn.hnorm.weight", vec![N_EMBD]),
    ]
}

/// MTP drafting on qwen35: a model with one MTP block loads it and drafts; a model without
/// one, with two, or with an MTP tensor missing or mis-shaped is refused with the key or the
/// tensor named. Without MTP drafting the block stays unread (the trunk loads as before).
#[test]
fn qwen35_mtp_layer_count_and_tensors() {
    let with_nextn = |n: u32| {
        move |meta: &mut MetaList| {
            set(meta, "qwen35.block_count", Meta::U32(2 + n));
            meta.push(("qwen35.nextn_predict_layers", Meta::U32(n)));
        }
    };
    let mtp = |bytes: &[u8]| -> Result<(), ModelError> {
        let g = Gguf::parse(bytes).unwrap();
        let mut m = Model::load(&g)?;
        let store = ResidentStore::new(&g);
        m.load_mtp(&g, &store, &smolrun_core::kernels::KernelSet::scalar())?;
        let mut st = State::with_mtp(&m, 16, 4, 4)?;
        m.forward_batch(&mut st, &store, &SingleThread, &[3, 1, 4], 0)?;
        let logits = m.mtp_begin(&mut st, &store, &SingleThread, 1)?;
        assert_eq!(logits.len(), N_VOCAB as usize);
        m.mtp_next(&mut st, &store, &SingleThread, 5)?;
        Ok(())
    };
    let good = qwen35_file_with(&with_nextn(1), None, None, &qwen35_mtp_tensors());
    mtp(&good).expect("one MTP block");
    // The trunk alone loads whatever the MTP block holds.
    let missing = qwen35_file_with(
        &with_nextn(1),
        Some("blk.2.nextn.eh_proj.weight"),
        None,
        &qwen35_mtp_tensors(),
    );
    assert!(load(&missing).is_ok());
    assert_eq!(
        mtp(&missing).unwrap_err(),
        ModelError::MissingTensor {
            name: "blk.2.nextn.eh_proj.weight".into()
        }
    );
    let misshaped = qwen35_file_with(
        &with_nextn(1),
        None,
        Some(("blk.2.nextn.eh_proj.weight", vec![N_EMBD, N_EMBD])),
        &qwen35_mtp_tensors(),
    );
    let err = mtp(&misshaped).unwrap_err();
    assert!(
        matches!(&err, ModelError::BadTensorShape { name, .. } if name == "blk.2.nextn.eh_proj.weight"),
        "{err:?}"
    );
    // No MTP block.
    let err = mtp(&qwen35_file(&|_| {}, None, None))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no MTP") && err.contains("qwen35.nextn_predict_layers"),
        "{err}"
    );
    // Two: llama.cpp's qwen35 MTP graph runs one.
    let two = qwen35_file_with(&with_nextn(2), None, None, &qwen35_mtp_tensors());
    let err = mtp(&two).unwrap_err().to_string();
    assert!(
        err.contains("qwen35.nextn_predict_layers") && err.contains("found 2"),
        "{err}"
    );
}

fn set(meta: &mut [(&'static str, Meta)], key: &str, value: Meta) {
    meta.iter_mut().find(|(k, _)| *k == key).unwrap().1 = value;
}

#[test]
fn a_tiny_qwen35_runs_and_keeps_no_rewind() {
    let bytes = qwen35_file(&|_| {}, None, None);
    let g = Gguf::parse(&bytes).unwrap();
    let m = Model::load(&g).unwrap();
    let store = ResidentStore::new(&g);
    let tokens = [3u32, 1, 4, 1, 5, 2, 6];
    // Token by token, then the same prompt in one batch: the same logits (scalar kernels).
    let mut st = State::with_batch(&m, 16, 1).unwrap();
    let mut last = Vec::new();
    for (pos, &t) in tokens.iter().enumerate() {
        last = m
            .forward(&mut st, &store, &SingleThread, t, pos)
            .unwrap()
            .to_vec();
        assert!(last.iter().all(|v| v.is_finite()));
    }
    let state_of = |st: &State| {
        let (conv, ssm) = st.recurrent_state(0).expect("layer 0 is recurrent");
        (conv.to_vec(), ssm.to_vec())
    };
    let by_token = state_of(&st);
    assert!(st.recurrent_state(1).is_none(), "layer 1 is full attention");
    let mut chunked = State::with_batch(&m, 16, 4).unwrap();
    let l = m
        .forward_batch(&mut chunked, &store, &SingleThread, &tokens, 0)
        .unwrap();
    assert_eq!(l, &last[..]);
    assert_eq!(state_of(&chunked), by_token);
    // A recurrent state cannot go back; position 0 starts over.
    let err = m.forward(&mut st, &store, &SingleThread, 3, 2).unwrap_err();
    assert_eq!(err, ModelError::RecurrentRewind { pos: 2, at: 7 });
    assert!(err.to_string().contains("position 0"), "{err}");
    m.forward(&mut st, &store, &SingleThread, 3, 0).unwrap();
    let mut fresh = State::with_batch(&m, 16, 1).unwrap();
    m.forward(&mut fresh, &store, &SingleThread, 3, 0).unwrap();
    assert_eq!(state_of(&st), state_of(&fresh));
    // recurrent_layers instead of the interval: the same layers.
    let listed = qwen35_file(
        &|meta| {
            meta.push((
                "qwen35.attention.recurrent_layers",
                Meta::Bools(vec![true, false]),
            ))
        },
        None,
        None,
    );
    let g = Gguf::parse(&listed).unwrap();
    assert_eq!(Model::load(&g).unwrap().hp.layers, m.hp.layers);
}

#[test]
fn qwen35_bad_inputs_are_named() {
    // A missing SSM tensor.
    let err = load(&qwen35_file(&|_| {}, Some("blk.0.ssm_a"), None)).unwrap_err();
    assert_eq!(
        err,
        ModelError::MissingTensor {
            name: "blk.0.ssm_a".into()
        }
    );
    // A mis-shaped conv kernel (5 taps where ssm.conv_kernel says 4).
    let err = load(&qwen35_file(
        &|_| {},
        None,
        Some(("blk.0.ssm_conv1d.weight", vec![5, 64])),
    ))
    .unwrap_err();
    assert!(
        matches!(&err, ModelError::BadTensorShape { name, expected, found }
            if name == "blk.0.ssm_conv1d.weight" && expected[0] == 4 && found[0] == 5),
        "{err:?}"
    );
    // dv != dk: value heads of 16 against key heads of 8.
    let err = load(&qwen35_file(
        &|meta| set(meta, "qwen35.ssm.inner_size", Meta::U32(64)),
        None,
        None,
    ))
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("qwen35.ssm.inner_size") && msg.contains("dv = dk") && msg.contains("64"),
        "{msg}"
    );
    // A recurrent-layer list of the wrong length.
    let err = load(&qwen35_file(
        &|meta| {
            meta.push((
                "qwen35.attention.recurrent_layers",
                Meta::Bools(vec![true, false, true]),
            ))
        },
        None,
        None,
    ))
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("qwen35.attention.recurrent_layers") && msg.contains("2 booleans"),
        "{msg}"
    );
    // Value heads that do not share key heads evenly.
    let err = load(&qwen35_file(
        &|meta| {
            set(meta, "qwen35.ssm.time_step_rank", Meta::U32(3));
            set(meta, "qwen35.ssm.inner_size", Meta::U32(24));
        },
        None,
        None,
    ))
    .unwrap_err();
    assert!(
        err.to_string().contains("qwen35.ssm.time_step_rank"),
        "{err}"
    );
    // IMRoPE sections that leave rotated pairs unrotated for text.
    let err = load(&qwen35_file(
        &|meta| {
            set(
                meta,
                "qwen35.rope.dimension_sections",
                Meta::U32s(vec![2, 2, 2, 2]),
            )
        },
        None,
        None,
    ))
    .unwrap_err();
    assert!(
        err.to_string().contains("qwen35.rope.dimension_sections"),
        "{err}"
    );
    // A missing SSM key.
    let err = load(&qwen35_file(
        &|meta| meta.retain(|(k, _)| *k != "qwen35.ssm.state_size"),
        None,
        None,
    ))
    .unwrap_err();
    assert!(err.to_string().contains("qwen35.ssm.state_size"), "{err}");
}

/// The llama metadata (with `n_head_kv` KV heads) and tensors renamed to `arch`, the llama
/// tensors that `drop` names left out and `add` put in.
fn family_file(
    arch: &'static str,
    n_head_kv: u32,
    extra_meta: Vec<(&'static str, Meta)>,
    drop: &[&str],
    add: Vec<(&'static str, Vec<u64>)>,
) -> Vec<u8> {
    let key = |k: &'static str| -> &'static str {
        let renamed = k.replacen("llama.", &format!("{arch}."), 1);
        Box::leak(renamed.into_boxed_str())
    };
    let mut meta: Vec<(&str, Meta)> = metadata(1, 2, n_head_kv, N_EMBD as u32)
        .into_iter()
        .map(|(k, v)| (key(k), v))
        .collect();
    meta[0] = ("general.architecture", Meta::Str(arch));
    meta.extend(extra_meta);
    let mut t: Vec<_> = tensors()
        .into_iter()
        .filter(|(n, _)| !drop.contains(n))
        .collect();
    t.extend(add);
    build_gguf(&meta, &t)
}

fn runs(bytes: &[u8]) {
    let g = Gguf::parse(bytes).unwrap();
    let m = Model::load(&g).unwrap();
    let store = ResidentStore::new(&g);
    let mut st = State::new(&m, 4).unwrap();
    for pos in 0..4 {
        let logits = m.forward(&mut st, &store, &SingleThread, 3, pos).unwrap();
        assert!(logits.iter().all(|v| v.is_finite()));
    }
}

/// A tiny phi3: fused QKV and a fused gate/up; a wrong fused width and LongRoPE factors are
/// named.
#[test]
fn a_tiny_phi3_runs_and_its_fused_ffn_and_rope_factors_are_checked() {
    let qkv = ("blk.0.attn_qkv.weight", vec![N_EMBD, N_EMBD + 32]);
    let separate = [
        "blk.0.attn_q.weight",
        "blk.0.attn_k.weight",
        "blk.0.attn_v.weight",
        "blk.0.ffn_gate.weight",
        "blk.0.ffn_up.weight",
    ];
    let file = |up_rows: u64, extra: Vec<(&'static str, Vec<u64>)>| {
        let mut add = vec![qkv.clone(), ("blk.0.ffn_up.weight", vec![N_EMBD, up_rows])];
        add.extend(extra);
        family_file("phi3", 1, vec![], &separate, add)
    };
    runs(&file(2 * N_FF, vec![]));
    assert_eq!(
        load(&file(N_FF, vec![])).unwrap_err(),
        ModelError::BadTensorShape {
            name: "blk.0.ffn_up.weight".into(),
            expected: [N_EMBD, 2 * N_FF, 1, 1],
            found: [N_EMBD, N_FF, 1, 1],
        }
    );
    let err = load(&file(2 * N_FF, vec![("rope_factors_long.weight", vec![8])])).unwrap_err();
    let ModelError::UnsupportedTensor { name, .. } = &err else {
        panic!("expected the rope factors refused, got {err}");
    };
    assert_eq!(name, "rope_factors_long.weight");
}

/// A tiny olmoe: QK-norm over the whole projection (its weights as long as Q and K), 4 experts
/// of width feed_forward_length, 2 used; a per-head norm is named with both shapes, and so are
/// K heads narrower than the norm's n_embd.
#[test]
fn a_tiny_olmoe_runs_and_its_whole_projection_qk_norm_is_checked() {
    let file = |n_head_kv: u32, k_norm: u64| {
        let meta = vec![
            ("olmoe.expert_count", Meta::U32(4)),
            ("olmoe.expert_used_count", Meta::U32(2)),
        ];
        let drop = [
            "blk.0.attn_k.weight",
            "blk.0.attn_v.weight",
            "blk.0.ffn_gate.weight",
            "blk.0.ffn_up.weight",
            "blk.0.ffn_down.weight",
        ];
        let kv = 16 * n_head_kv as u64;
        let add = vec![
            ("blk.0.attn_k.weight", vec![N_EMBD, kv]),
            ("blk.0.attn_v.weight", vec![N_EMBD, kv]),
            ("blk.0.attn_q_norm.weight", vec![N_EMBD]),
            ("blk.0.attn_k_norm.weight", vec![k_norm]),
            ("blk.0.ffn_gate_inp.weight", vec![N_EMBD, 4]),
            ("blk.0.ffn_gate_exps.weight", vec![N_EMBD, N_FF, 4]),
            ("blk.0.ffn_up_exps.weight", vec![N_EMBD, N_FF, 4]),
            ("blk.0.ffn_down_exps.weight", vec![N_FF, N_EMBD, 4]),
        ];
        family_file("olmoe", n_head_kv, meta, &drop, add)
    };
    runs(&file(2, N_EMBD));
    assert_eq!(
        load(&file(2, 16)).unwrap_err(),
        ModelError::BadTensorShape {
            name: "blk.0.attn_k_norm.weight".into(),
            expected: [N_EMBD, 1, 1, 1],
            found: [16, 1, 1, 1],
        }
    );
    assert_eq!(
        load(&file(1, N_EMBD)).unwrap_err(),
        ModelError::BadTensorShape {
            name: "blk.0.attn_k_norm.weight".into(),
            expected: [16, 1, 1, 1],
            found: [N_EMBD, 1, 1, 1],
        }
    );
}

/// A tiny lfm2 of two layers, a short convolution then attention (per-layer
/// `attention.head_count_kv` [0, 1]): it runs; a conv of the wrong length, a missing in_proj, a
/// head-count array of the wrong length or with no attention layer, and a conv length under 2
/// are named with what was expected and found.
#[test]
fn a_tiny_lfm2_runs_and_its_bad_conv_layers_are_named() {
    let file = |kv: Vec<u32>, l_cache: u32, conv: Vec<u64>, drop: &str| {
        let meta = vec![
            ("general.architecture", Meta::Str("lfm2")),
            ("lfm2.block_count", Meta::U32(2)),
            ("lfm2.embedding_length", Meta::U32(N_EMBD as u32)),
            ("lfm2.feed_forward_length", Meta::U32(N_FF as u32)),
            ("lfm2.attention.head_count", Meta::U32(2)),
            ("lfm2.attention.head_count_kv", Meta::U32s(kv)),
            ("lfm2.context_length", Meta::U32(64)),
            ("lfm2.attention.layer_norm_rms_epsilon", Meta::F32(1e-5)),
            ("lfm2.shortconv.l_cache", Meta::U32(l_cache)),
        ];
        let mut t = vec![
            ("token_embd.weight", vec![N_EMBD, N_VOCAB]),
            ("token_embd_norm.weight", vec![N_EMBD]),
            ("blk.0.attn_norm.weight", vec![N_EMBD]),
            ("blk.0.shortconv.in_proj.weight", vec![N_EMBD, 3 * N_EMBD]),
            ("blk.0.shortconv.conv.weight", conv),
            ("blk.0.shortconv.out_proj.weight", vec![N_EMBD, N_EMBD]),
            ("blk.1.attn_norm.weight", vec![N_EMBD]),
            ("blk.1.attn_q.weight", vec![N_EMBD, N_EMBD]),
            ("blk.1.attn_k.weight", vec![N_EMBD, 16]),
            ("blk.1.attn_v.weight", vec![N_EMBD, 16]),
            ("blk.1.attn_q_norm.weight", vec![16]),
            ("blk.1.attn_k_norm.weight", vec![16]),
            ("blk.1.attn_output.weight", vec![N_EMBD, N_EMBD]),
        ];
        for l in ["blk.0.", "blk.1."] {
            let n = |s: &str| -> &'static str { Box::leak(format!("{l}{s}").into_boxed_str()) };
            t.push((n("ffn_norm.weight"), vec![N_EMBD]));
            t.push((n("ffn_gate.weight"), vec![N_EMBD, N_FF]));
            t.push((n("ffn_up.weight"), vec![N_EMBD, N_FF]));
            t.push((n("ffn_down.weight"), vec![N_FF, N_EMBD]));
        }
        t.retain(|(n, _)| *n != drop);
        build_gguf(&meta, &t)
    };
    runs(&file(vec![0, 1], 3, vec![3, N_EMBD], ""));
    assert_eq!(
        load(&file(vec![0, 1], 3, vec![4, N_EMBD], "")).unwrap_err(),
        ModelError::BadTensorShape {
            name: "blk.0.shortconv.conv.weight".into(),
            expected: [3, N_EMBD, 1, 1],
            found: [4, N_EMBD, 1, 1],
        }
    );
    let err = load(&file(
        vec![0, 1],
        3,
        vec![3, N_EMBD],
        "blk.0.shortconv.in_proj.weight",
    ))
    .unwrap_err();
    assert!(
        matches!(&err, ModelError::MissingTensor { name } if name == "blk.0.shortconv.in_proj.weight"),
        "{err}"
    );
    for (kv, l_cache, what) in [
        (vec![0], 3, "an array of 2 counts"),
        (vec![0, 0], 3, "no layer with attention"),
        (vec![0, 3], 3, "0 or a divisor of attention.head_count (2)"),
        (vec![0, 1], 1, "2..=64"),
    ] {
        let err = load(&file(kv.clone(), l_cache, vec![3, N_EMBD], "")).unwrap_err();
        let ModelError::BadHParam { key, .. } = &err else {
            panic!("{kv:?}, l_cache {l_cache}: expected a bad key, got {err}");
        };
        let want = if l_cache == 1 {
            "lfm2.shortconv.l_cache"
        } else {
            "lfm2.attention.head_count_kv"
        };
        assert_eq!(key, want, "{err}");
        assert!(err.to_string().contains(what), "{kv:?}: {err}");
    }
}

/// A tiny lfm2moe of three layers: a short convolution with a dense FFN (the one leading dense
/// block), then attention and a short convolution with 4 experts, 2 per token, a sigmoid router
/// and its selection bias. It runs; a missing or mis-shaped selection bias or expert tensor, a
/// head-count array of the wrong length, an expert count beyond the fixed per-token list, an
/// unknown gating function and more leading dense blocks than layers are named with what was
/// expected and found.
#[test]
fn a_tiny_lfm2moe_runs_and_its_bad_experts_are_named() {
    const N_EXPERT: u64 = 4;
    const N_FF_EXP: u64 = 32;
    struct Lfm2Moe {
        kv: Vec<u32>,
        n_expert: u32,
        n_used: u32,
        gating: Option<u32>,
        n_dense_lead: u32,
        drop: &'static str,
        reshape: (&'static str, Vec<u64>),
    }
    let good = || Lfm2Moe {
        kv: vec![0, 1, 0],
        n_expert: N_EXPERT as u32,
        n_used: 2,
        gating: Some(2),
        n_dense_lead: 1,
        drop: "",
        reshape: ("", vec![]),
    };
    let file = |c: &Lfm2Moe| {
        let mut meta = vec![
            ("general.architecture", Meta::Str("lfm2moe")),
            ("lfm2moe.block_count", Meta::U32(3)),
            ("lfm2moe.embedding_length", Meta::U32(N_EMBD as u32)),
            ("lfm2moe.feed_forward_length", Meta::U32(N_FF as u32)),
            ("lfm2moe.attention.head_count", Meta::U32(2)),
            ("lfm2moe.attention.head_count_kv", Meta::U32s(c.kv.clone())),
            ("lfm2moe.context_length", Meta::U32(64)),
            ("lfm2moe.attention.layer_norm_rms_epsilon", Meta::F32(1e-5)),
            ("lfm2moe.shortconv.l_cache", Meta::U32(3)),
            ("lfm2moe.expert_count", Meta::U32(c.n_expert)),
            ("lfm2moe.expert_used_count", Meta::U32(c.n_used)),
            (
                "lfm2moe.expert_feed_forward_length",
                Meta::U32(N_FF_EXP as u32),
            ),
            (
                "lfm2moe.leading_dense_block_count",
                Meta::U32(c.n_dense_lead),
            ),
        ];
        if let Some(g) = c.gating {
            meta.push(("lfm2moe.expert_gating_func", Meta::U32(g)));
        }
        let mut t = vec![
            ("token_embd.weight", vec![N_EMBD, N_VOCAB]),
            ("token_embd_norm.weight", vec![N_EMBD]),
            ("blk.1.attn_q.weight", vec![N_EMBD, N_EMBD]),
            ("blk.1.attn_k.weight", vec![N_EMBD, 16]),
            ("blk.1.attn_v.weight", vec![N_EMBD, 16]),
            ("blk.1.attn_q_norm.weight", vec![16]),
            ("blk.1.attn_k_norm.weight", vec![16]),
            ("blk.1.attn_output.weight", vec![N_EMBD, N_EMBD]),
            ("blk.0.ffn_gate.weight", vec![N_EMBD, N_FF]),
            ("blk.0.ffn_up.weight", vec![N_EMBD, N_FF]),
            ("blk.0.ffn_down.weight", vec![N_FF, N_EMBD]),
        ];
        for l in 0..3 {
            let n =
                |s: &str| -> &'static str { Box::leak(format!("blk.{l}.{s}").into_boxed_str()) };
            t.push((n("attn_norm.weight"), vec![N_EMBD]));
            t.push((n("ffn_norm.weight"), vec![N_EMBD]));
            if l != 1 {
                t.push((n("shortconv.in_proj.weight"), vec![N_EMBD, 3 * N_EMBD]));
                t.push((n("shortconv.conv.weight"), vec![3, N_EMBD]));
                t.push((n("shortconv.out_proj.weight"), vec![N_EMBD, N_EMBD]));
            }
            if l >= 1 {
                t.push((n("ffn_gate_inp.weight"), vec![N_EMBD, N_EXPERT]));
                t.push((n("exp_probs_b.bias"), vec![N_EXPERT]));
                t.push((n("ffn_gate_exps.weight"), vec![N_EMBD, N_FF_EXP, N_EXPERT]));
                t.push((n("ffn_up_exps.weight"), vec![N_EMBD, N_FF_EXP, N_EXPERT]));
                t.push((n("ffn_down_exps.weight"), vec![N_FF_EXP, N_EMBD, N_EXPERT]));
            }
        }
        t.retain(|(n, _)| *n != c.drop);
        for (n, dims) in &mut t {
            if *n == c.reshape.0 {
                *dims = c.reshape.1.clone();
            }
        }
        build_gguf(&meta, &t)
    };
    runs(&file(&good()));
    let err = load(&file(&Lfm2Moe {
        drop: "blk.2.exp_probs_b.bias",
        ..good()
    }))
    .unwrap_err();
    assert!(
        matches!(&err, ModelError::MissingTensor { name } if name == "blk.2.exp_probs_b.bias"),
        "{err}"
    );
    for (name, dims, expected) in [
        (
            "blk.1.exp_probs_b.bias",
            vec![N_EXPERT + 1],
            [N_EXPERT, 1, 1, 1],
        ),
        (
            "blk.2.ffn_down_exps.weight",
            vec![N_FF_EXP, N_EMBD, N_EXPERT - 1],
            [N_FF_EXP, N_EMBD, N_EXPERT, 1],
        ),
        (
            "blk.1.ffn_gate_inp.weight",
            vec![N_EMBD, 2 * N_EXPERT],
            [N_EMBD, N_EXPERT, 1, 1],
        ),
    ] {
        let err = load(&file(&Lfm2Moe {
            reshape: (name, dims.clone()),
            ..good()
        }))
        .unwrap_err();
        let mut found = [1u64; 4];
        found[..dims.len()].copy_from_slice(&dims);
        assert_eq!(
            err,
            ModelError::BadTensorShape {
                name: name.into(),
                expected,
                found,
            }
        );
    }
    let bad = |c: Lfm2Moe, key: &str, what: &str| {
        let err = load(&file(&c)).unwrap_err();
        let ModelError::BadHParam { key: k, .. } = &err else {
            panic!("expected a hyperparameter error for {key}, got {err}");
        };
        assert_eq!(k, key, "{err}");
        assert!(err.to_string().contains(what), "{key}: {err}");
    };
    bad(
        Lfm2Moe {
            kv: vec![0, 1],
            ..good()
        },
        "lfm2moe.attention.head_count_kv",
        "an array of 3 counts",
    );
    // A token's chosen experts live in a fixed list of 16.
    bad(
        Lfm2Moe {
            n_expert: 32,
            n_used: 17,
            ..good()
        },
        "lfm2moe.expert_used_count",
        "1..=16",
    );
    bad(
        Lfm2Moe {
            n_used: 5,
            ..good()
        },
        "lfm2moe.expert_used_count",
        "1..=4",
    );
    bad(
        Lfm2Moe {
            gating: Some(3),
            ..good()
        },
        "lfm2moe.expert_gating_func",
        "1 (softmax) or 2 (sigmoid)",
    );
    bad(
        Lfm2Moe {
            n_dense_lead: 4,
            ..good()
        },
        "lfm2moe.leading_dense_block_count",
        "0..=3",
    );
    let err = load(&file(&Lfm2Moe {
        gating: None,
        ..good()
    }))
    .unwrap_err();
    assert!(
        err.to_string().contains("lfm2moe.expert_gating_func"),
        "{err}"
    );
}

/// A tiny smallthinker of two layers with a sliding window (layer 0 global without RoPE, layer
/// 1 windowed), 4 ReGLU experts, 2 per token, whose router reads the layer's input: it runs;
/// a missing router, mis-shaped experts, RoPE over part of a head, a window pattern of the
/// wrong length and an expert count beyond the fixed per-token list are named with what was
/// expected and found.
#[test]
fn a_tiny_smallthinker_runs_and_its_bad_experts_are_named() {
    const N_EXPERT: u64 = 4;
    const N_FF_EXP: u64 = 32;
    struct SmallThinker {
        n_expert: u32,
        n_used: u32,
        n_rot: u32,
        pattern: Option<Vec<bool>>,
        drop: &'static str,
        reshape: (&'static str, Vec<u64>),
    }
    let good = || SmallThinker {
        n_expert: N_EXPERT as u32,
        n_used: 2,
        n_rot: 16,
        pattern: None,
        drop: "",
        reshape: ("", vec![]),
    };
    let file = |c: &SmallThinker| {
        let mut meta = vec![
            ("general.architecture", Meta::Str("smallthinker")),
            ("smallthinker.block_count", Meta::U32(2)),
            ("smallthinker.embedding_length", Meta::U32(N_EMBD as u32)),
            (
                "smallthinker.feed_forward_length",
                Meta::U32(N_FF_EXP as u32),
            ),
            ("smallthinker.attention.head_count", Meta::U32(2)),
            ("smallthinker.attention.head_count_kv", Meta::U32(1)),
            ("smallthinker.rope.dimension_count", Meta::U32(c.n_rot)),
            ("smallthinker.context_length", Meta::U32(64)),
            (
                "smallthinker.attention.layer_norm_rms_epsilon",
                Meta::F32(1e-6),
            ),
            ("smallthinker.attention.sliding_window", Meta::U32(4096)),
            ("smallthinker.expert_count", Meta::U32(c.n_expert)),
            ("smallthinker.expert_used_count", Meta::U32(c.n_used)),
            (
                "smallthinker.expert_feed_forward_length",
                Meta::U32(N_FF_EXP as u32),
            ),
            ("smallthinker.expert_gating_func", Meta::U32(1)),
        ];
        if let Some(p) = &c.pattern {
            meta.push((
                "smallthinker.attention.sliding_window_pattern",
                Meta::Bools(p.clone()),
            ));
        }
        let mut t = vec![
            ("token_embd.weight", vec![N_EMBD, N_VOCAB]),
            ("output_norm.weight", vec![N_EMBD]),
        ];
        for l in 0..2 {
            let n =
                |s: &str| -> &'static str { Box::leak(format!("blk.{l}.{s}").into_boxed_str()) };
            t.push((n("attn_norm.weight"), vec![N_EMBD]));
            t.push((n("attn_q.weight"), vec![N_EMBD, N_EMBD]));
            t.push((n("attn_k.weight"), vec![N_EMBD, 16]));
            t.push((n("attn_v.weight"), vec![N_EMBD, 16]));
            t.push((n("attn_output.weight"), vec![N_EMBD, N_EMBD]));
            t.push((n("ffn_norm.weight"), vec![N_EMBD]));
            t.push((n("ffn_gate_inp.weight"), vec![N_EMBD, N_EXPERT]));
            t.push((n("ffn_gate_exps.weight"), vec![N_EMBD, N_FF_EXP, N_EXPERT]));
            t.push((n("ffn_up_exps.weight"), vec![N_EMBD, N_FF_EXP, N_EXPERT]));
            t.push((n("ffn_down_exps.weight"), vec![N_FF_EXP, N_EMBD, N_EXPERT]));
        }
        t.retain(|(n, _)| *n != c.drop);
        for (n, dims) in &mut t {
            if *n == c.reshape.0 {
                *dims = c.reshape.1.clone();
            }
        }
        build_gguf(&meta, &t)
    };
    runs(&file(&good()));
    let m = load(&file(&good())).unwrap();
    let windows: Vec<_> =
        m.hp.layers
            .iter()
            .map(|l| match l.mixer {
                MixerShape::Attention(a) => (a.window, a.rope),
                _ => panic!("attention only"),
            })
            .collect();
    assert_eq!(windows, [(None, false), (Some(4096), true)]);
    let err = load(&file(&SmallThinker {
        drop: "blk.1.ffn_gate_inp.weight",
        ..good()
    }))
    .unwrap_err();
    assert!(
        matches!(&err, ModelError::MissingTensor { name } if name == "blk.1.ffn_gate_inp.weight"),
        "{err}"
    );
    let err = load(&file(&SmallThinker {
        reshape: (
            "blk.0.ffn_up_exps.weight",
            vec![N_EMBD, N_FF_EXP + 1, N_EXPERT],
        ),
        ..good()
    }))
    .unwrap_err();
    assert_eq!(
        err,
        ModelError::BadTensorShape {
            name: "blk.0.ffn_up_exps.weight".into(),
            expected: [N_EMBD, N_FF_EXP, N_EXPERT, 1],
            found: [N_EMBD, N_FF_EXP + 1, N_EXPERT, 1],
        }
    );
    let bad = |c: SmallThinker, key: &str, what: &str| {
        let err = load(&file(&c)).unwrap_err();
        let ModelError::BadHParam { key: k, .. } = &err else {
            panic!("expected a hyperparameter error for {key}, got {err}");
        };
        assert_eq!(k, key, "{err}");
        assert!(err.to_string().contains(what), "{key}: {err}");
    };
    bad(
        SmallThinker { n_rot: 8, ..good() },
        "smallthinker.rope.dimension_count",
        "RoPE over whole heads",
    );
    bad(
        SmallThinker {
            pattern: Some(vec![false]),
            ..good()
        },
        "smallthinker.attention.sliding_window_pattern",
        "2 booleans",
    );
    bad(
        SmallThinker {
            n_expert: 32,
            n_used: 17,
            ..good()
        },
        "smallthinker.expert_used_count",
        "1..=16",
    );
}

/// A tiny granitehybrid of two layers, Mamba-2 then attention (per-layer
/// `attention.head_count_kv` [0, 1]; 4 heads of 16, state 8, 2 groups, a conv of 4 taps): it
/// runs, with Granite's scales set; a mis-shaped conv or grouped norm, a missing A, D or conv
/// bias, a head-count array of the wrong length, a state size or conv kernel the code cannot
/// take, heads that do not divide the inner size, groups that do not divide the heads, experts
/// and a scale that is not a number are named with what was expected and found.
#[test]
fn a_tiny_granitehybrid_runs_and_its_bad_ssm_layers_are_named() {
    const D_INNER: u64 = 64;
    const D_STATE: u64 = 8;
    const N_HEAD: u64 = 4;
    const N_GROUP: u64 = 2;
    const CONV_CH: u64 = D_INNER + 2 * N_GROUP * D_STATE;
    let key =
        |k: &str| -> &'static str { Box::leak(format!("granitehybrid.{k}").into_boxed_str()) };
    let file =
        |changes: Vec<(&'static str, Meta)>, reshape: Vec<(&'static str, Vec<u64>)>, drop: &str| {
            let mut meta = vec![
                ("general.architecture", Meta::Str("granitehybrid")),
                (key("block_count"), Meta::U32(2)),
                (key("embedding_length"), Meta::U32(N_EMBD as u32)),
                (key("feed_forward_length"), Meta::U32(N_FF as u32)),
                (key("attention.head_count"), Meta::U32(2)),
                (key("attention.head_count_kv"), Meta::U32s(vec![0, 1])),
                (key("context_length"), Meta::U32(64)),
                (key("attention.layer_norm_rms_epsilon"), Meta::F32(1e-5)),
                (key("ssm.conv_kernel"), Meta::U32(4)),
                (key("ssm.inner_size"), Meta::U32(D_INNER as u32)),
                (key("ssm.state_size"), Meta::U32(D_STATE as u32)),
                (key("ssm.time_step_rank"), Meta::U32(N_HEAD as u32)),
                (key("ssm.group_count"), Meta::U32(N_GROUP as u32)),
                (key("embedding_scale"), Meta::F32(1.5)),
                (key("residual_scale"), Meta::F32(0.5)),
                (key("attention.scale"), Meta::F32(0.25)),
                (key("logit_scale"), Meta::F32(2.0)),
                (key("rope.scaling.finetuned"), Meta::Bool(false)),
            ];
            for (k, v) in changes {
                match meta.iter().position(|(name, _)| *name == k) {
                    Some(i) => meta[i].1 = v,
                    None => meta.push((k, v)),
                }
            }
            let mut t = vec![
                ("token_embd.weight", vec![N_EMBD, N_VOCAB]),
                ("output_norm.weight", vec![N_EMBD]),
                ("blk.0.attn_norm.weight", vec![N_EMBD]),
                (
                    "blk.0.ssm_in.weight",
                    vec![N_EMBD, D_INNER + CONV_CH + N_HEAD],
                ),
                ("blk.0.ssm_conv1d.weight", vec![4, CONV_CH]),
                ("blk.0.ssm_conv1d.bias", vec![CONV_CH]),
                ("blk.0.ssm_dt.bias", vec![N_HEAD]),
                ("blk.0.ssm_a", vec![1, N_HEAD]),
                ("blk.0.ssm_d", vec![1, N_HEAD]),
                ("blk.0.ssm_norm.weight", vec![D_INNER / N_GROUP, N_GROUP]),
                ("blk.0.ssm_out.weight", vec![D_INNER, N_EMBD]),
                ("blk.1.attn_norm.weight", vec![N_EMBD]),
                ("blk.1.attn_q.weight", vec![N_EMBD, N_EMBD]),
                ("blk.1.attn_k.weight", vec![N_EMBD, 16]),
                ("blk.1.attn_v.weight", vec![N_EMBD, 16]),
                ("blk.1.attn_output.weight", vec![N_EMBD, N_EMBD]),
            ];
            for l in ["blk.0.", "blk.1."] {
                let n = |s: &str| -> &'static str { Box::leak(format!("{l}{s}").into_boxed_str()) };
                t.push((n("ffn_norm.weight"), vec![N_EMBD]));
                t.push((n("ffn_gate.weight"), vec![N_EMBD, N_FF]));
                t.push((n("ffn_up.weight"), vec![N_EMBD, N_FF]));
                t.push((n("ffn_down.weight"), vec![N_FF, N_EMBD]));
            }
            for (name, dims) in reshape {
                t.iter_mut().find(|(n, _)| *n == name).unwrap().1 = dims;
            }
            t.retain(|(n, _)| *n != drop);
            build_gguf(&meta, &t)
        };
    let ok = file(vec![], vec![], "");
    runs(&ok);
    let g = Gguf::parse(&ok).unwrap();
    let m = Model::load(&g).unwrap();
    assert!(matches!(m.hp.layers[0].mixer, MixerShape::Mamba2(_)));
    assert!(matches!(m.hp.layers[1].mixer, MixerShape::Attention(a) if !a.rope));
    assert_eq!(m.hp.scales.logit, Some(2.0));

    for (name, dims, expected) in [
        (
            "blk.0.ssm_conv1d.weight",
            vec![3, CONV_CH],
            [4, CONV_CH, 1, 1],
        ),
        (
            "blk.0.ssm_norm.weight",
            vec![D_INNER, 1],
            [D_INNER / N_GROUP, N_GROUP, 1, 1],
        ),
        ("blk.0.ssm_a", vec![N_HEAD], [1, N_HEAD, 1, 1]),
    ] {
        let err = load(&file(vec![], vec![(name, dims.clone())], "")).unwrap_err();
        let mut found = [1u64; 4];
        found[..dims.len()].copy_from_slice(&dims);
        assert_eq!(
            err,
            ModelError::BadTensorShape {
                name: name.into(),
                expected,
                found,
            }
        );
    }
    for missing in [
        "blk.0.ssm_a",
        "blk.0.ssm_d",
        "blk.0.ssm_conv1d.bias",
        "blk.0.ssm_in.weight",
    ] {
        let err = load(&file(vec![], vec![], missing)).unwrap_err();
        assert!(
            matches!(&err, ModelError::MissingTensor { name } if name == missing),
            "{missing}: {err}"
        );
    }
    for (k, v, want_key, what) in [
        (
            "attention.head_count_kv",
            Meta::U32s(vec![0]),
            "attention.head_count_kv",
            "an array of 2 counts",
        ),
        ("ssm.state_size", Meta::U32(0), "ssm.state_size", "1..=1024"),
        ("ssm.conv_kernel", Meta::U32(1), "ssm.conv_kernel", "2..=64"),
        (
            "ssm.conv_kernel",
            Meta::U32(1000),
            "ssm.conv_kernel",
            "2..=64",
        ),
        (
            "ssm.time_step_rank",
            Meta::U32(5),
            "ssm.time_step_rank",
            "a divisor of ssm.inner_size (64)",
        ),
        (
            "ssm.group_count",
            Meta::U32(3),
            "ssm.group_count",
            "a divisor of ssm.time_step_rank (4)",
        ),
        ("expert_count", Meta::U32(4), "expert_count", "dense FFNs"),
        (
            "logit_scale",
            Meta::F32(f32::NAN),
            "logit_scale",
            "a finite number",
        ),
    ] {
        let err = load(&file(vec![(key(k), v)], vec![], "")).unwrap_err();
        let ModelError::BadHParam { key: got, .. } = &err else {
            panic!("{k}: expected a bad key, got {err}");
        };
        assert_eq!(got, &format!("granitehybrid.{want_key}"), "{err}");
        assert!(err.to_string().contains(what), "{k}: {err}");
    }
}
