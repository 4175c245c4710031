//! A pruned LM head on a tiny llama model written here: the rewrite plan keeps every other
//! tensor byte-identical, the pruned model's logits equal the full model's on the kept ids and
//! are -inf elsewhere, the sampler never produces a dropped id, and hostile kept-id metadata is
//! refused with an error that names the key. (The same checks on gemma3-270m, through the
//! `smolrun gguf` commands, are in cli/tests/prune_head.rs.)

use smolrun_core::gguf::{Gguf, GgufWriter, MetaArray, MetaValue};
use smolrun_core::model::head::{self, TensorSource, KEPT_IDS_KEY};
use smolrun_core::model::{Model, ModelError, ResidentStore, State};
use smolrun_core::platform::SingleThread;
use smolrun_core::quant::GgmlType;
use smolrun_core::sampler::{Sampler, SamplerParams};

const N_EMBD: u64 = 32;
const N_FF: u64 = 64;
const N_VOCAB: u64 = 40;

/// A one-layer llama with F32 weights in a small deterministic pattern; `tied`: no
/// `output.weight`. `extra` metadata is appended (hostile kept-id lists).
fn tiny_model(tied: bool, extra: Option<(MetaValue, u64)>) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add("general.architecture", "llama").unwrap();
    w.add("llama.block_count", 1u32).unwrap();
    w.add("llama.embedding_length", N_EMBD as u32).unwrap();
    w.add("llama.feed_forward_length", N_FF as u32).unwrap();
    w.add("llama.attention.head_count", 2u32).unwrap();
    w.add("llama.attention.head_count_kv", 1u32).unwrap();
    w.add("llama.context_length", 64u32).unwrap();
    w.add("llama.attention.layer_norm_rms_epsilon", 1e-5f32)
        .unwrap();
    let mut head_rows = N_VOCAB;
    if let Some((v, rows)) = extra {
        w.add(KEPT_IDS_KEY, v).unwrap();
        head_rows = rows;
    }
    let mut shapes: Vec<(&str, Vec<u64>)> = vec![
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
    ];
    if !tied {
        shapes.push(("output.weight", vec![N_EMBD, head_rows]));
    }
    let data: Vec<Vec<u8>> = shapes
        .iter()
        .enumerate()
        .map(|(i, (name, dims))| {
            w.add_tensor(name, GgmlType::F32, dims).unwrap();
            let n: u64 = dims.iter().product();
            (0..n)
                .flat_map(|j| {
                    let v = (((i as u64 * 7919 + j * 104729) % 1000) as f32 / 1000.0 - 0.5) * 0.4;
                    v.to_le_bytes()
                })
                .collect()
        })
        .collect();
    let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    w.to_bytes(&refs).unwrap()
}

/// Carries out a prune plan in memory (the CLI streams the same plan to a file).
fn prune(bytes: &[u8], ids: &[u32]) -> Vec<u8> {
    let g = Gguf::parse(bytes).unwrap();
    let plan = head::plan_prune(&g, ids).unwrap();
    let data: Vec<Vec<u8>> = plan
        .sources
        .iter()
        .map(|s| match *s {
            TensorSource::Copy { offset, len } => {
                bytes[offset as usize..(offset + len) as usize].to_vec()
            }
            TensorSource::KeptRows { offset, row_bytes } => plan
                .ids
                .iter()
                .flat_map(|&id| {
                    let at = (offset + id as u64 * row_bytes) as usize;
                    bytes[at..at + row_bytes as usize].to_vec()
                })
                .collect(),
        })
        .collect();
    let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    plan.writer.to_bytes(&refs).unwrap()
}

const KEPT: [u32; 16] = [0, 1, 2, 3, 5, 8, 9, 13, 17, 20, 21, 25, 30, 34, 38, 39];

fn logits_for(bytes: &[u8], tokens: &[u32]) -> Vec<Vec<f32>> {
    let g = Gguf::parse(bytes).unwrap();
    let m = Model::load(&g).unwrap();
    let store = ResidentStore::new(&g);
    let mut st = State::new(&m, 16).unwrap();
    tokens
        .iter()
        .enumerate()
        .map(|(pos, &t)| {
            m.forward(&mut st, &store, &SingleThread, t, pos)
                .unwrap()
                .to_vec()
        })
        .collect()
}

fn check_pruned_logits(tied: bool) {
    let full = tiny_model(tied, None);
    let pruned = prune(&full, &KEPT);
    // The prompt holds dropped ids too (4, 7, 11): embeddings stay complete.
    let prompt = [1, 4, 7, 11, 39, 2];
    let a = logits_for(&full, &prompt);
    let b = logits_for(&pruned, &prompt);
    for (pos, (fa, fb)) in a.iter().zip(&b).enumerate() {
        for id in 0..N_VOCAB as u32 {
            if KEPT.contains(&id) {
                assert_eq!(
                    fa[id as usize].to_bits(),
                    fb[id as usize].to_bits(),
                    "position {pos}, kept id {id}"
                );
            } else {
                assert_eq!(
                    fb[id as usize],
                    f32::NEG_INFINITY,
                    "position {pos}, id {id}"
                );
            }
        }
    }
}

#[test]
fn pruned_untied_head_gives_the_full_logits_on_kept_ids() {
    check_pruned_logits(false);
}

#[test]
fn pruned_tied_head_gives_the_full_logits_on_kept_ids() {
    check_pruned_logits(true);
}

#[test]
fn rewrite_keeps_every_other_tensor_and_key_byte_identical() {
    for tied in [false, true] {
        let full = tiny_model(tied, None);
        let pruned = prune(&full, &KEPT);
        let (a, b) = (Gguf::parse(&full).unwrap(), Gguf::parse(&pruned).unwrap());
        for e in &a.metadata {
            assert_eq!(b.get(e.key), Some(e.value), "key {}", e.key);
        }
        assert_eq!(b.metadata.len(), a.metadata.len() + 1);
        let ids: Vec<i64> = b
            .get(KEPT_IDS_KEY)
            .and_then(|v| v.as_array())
            .and_then(|a| a.ints().map(|i| i.collect()))
            .unwrap();
        assert_eq!(ids, KEPT.iter().map(|&i| i as i64).collect::<Vec<_>>());
        for t in &a.tensors {
            if t.name == "output.weight" {
                continue;
            }
            let u = b.tensor(t.name).unwrap();
            assert_eq!((u.ggml_type, u.dims), (t.ggml_type, t.dims), "{}", t.name);
            assert_eq!(a.tensor_data(t), b.tensor_data(u), "{}", t.name);
        }
        let source = a
            .tensor("output.weight")
            .or(a.tensor("token_embd.weight"))
            .unwrap();
        let head = b.tensor("output.weight").unwrap();
        assert_eq!(head.dims, [N_EMBD, KEPT.len() as u64, 1, 1]);
        let rb = source.row_bytes();
        for (row, &id) in KEPT.iter().enumerate() {
            assert_eq!(
                &b.tensor_data(head)[row * rb..(row + 1) * rb],
                &a.tensor_data(source)[id as usize * rb..(id as usize + 1) * rb]
            );
        }
        assert_eq!(b.tensors.len(), a.tensors.len() + tied as usize);
    }
}

#[test]
fn sampler_never_produces_a_dropped_id() {
    let pruned = prune(&tiny_model(true, None), &KEPT);
    let logits = logits_for(&pruned, &[1, 4, 7]).pop().unwrap();
    let params = [
        SamplerParams::greedy(),
        SamplerParams::default(),
        SamplerParams {
            temperature: 5.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.5,
            frequency_penalty: 0.5,
            presence_penalty: -0.5,
            n_probs: 40,
            ..SamplerParams::default()
        },
    ];
    for p in params {
        let mut s = Sampler::new(N_VOCAB as usize, p).unwrap();
        // Dropped ids in the penalty window: -inf must stay -inf, never NaN.
        for t in [4, 7, 11, 1] {
            s.accept(t);
        }
        for _ in 0..200 {
            let out = s.sample(&logits).unwrap();
            assert!(
                KEPT.contains(&out.token),
                "sampled dropped id {}",
                out.token
            );
            assert!(out.logprob.is_finite() && out.prob > 0.0);
            for alt in out.top {
                assert!(KEPT.contains(&alt.id) && alt.logprob.is_finite());
            }
            let t = out.token;
            s.accept(t);
        }
    }
}

/// The error when loading the tiny untied model with `kept` as its kept-id list and a head of
/// `rows` rows.
fn load_error(kept: MetaValue, rows: u64) -> String {
    let bytes = tiny_model(false, Some((kept, rows)));
    let g = Gguf::parse(&bytes).unwrap();
    match Model::load(&g) {
        Ok(_) => panic!("a hostile kept-id list was accepted"),
        Err(e) => {
            assert!(matches!(e, ModelError::BadHParam { .. }), "{e:?}");
            e.to_string()
        }
    }
}

#[test]
fn hostile_kept_ids_are_refused_by_key() {
    let i32s = |v: &[i32]| MetaValue::Array(MetaArray::I32(v.to_vec()));
    let cases = [
        (i32s(&[0, 2, 1, 3]), 4, "2 at index 2"),
        (i32s(&[0, 1, 1, 3]), 4, "1 after 1"),
        (i32s(&[0, 1, 2, 40]), 4, "40 at index 3"),
        (i32s(&[-1, 1, 2, 3]), 4, "-1 at index 0"),
        (i32s(&[0, 1, 2]), 4, "3 ids"),
        (MetaValue::Array(MetaArray::U8(vec![0, 1, 2, 3])), 4, "u8"),
        (MetaValue::U32(3), 4, "u32"),
    ];
    for (value, rows, found) in cases {
        let e = load_error(value, rows);
        assert!(
            e.contains(KEPT_IDS_KEY) && e.contains(found),
            "error '{e}' should name the key and '{found}'"
        );
    }
    // More ids than the vocabulary with a head to match.
    let many: Vec<i32> = (0..41).collect();
    let e = load_error(i32s(&many), 41);
    assert!(e.contains("at most 40"), "{e}");
}

#[test]
fn a_full_head_without_ids_must_have_one_row_per_token() {
    // A head cut to 16 rows whose kept ids were lost cannot be mapped back to tokens.
    let mut bytes = tiny_model(false, None);
    let pruned = prune(&bytes, &KEPT);
    let g = Gguf::parse(&pruned).unwrap();
    let mut w = GgufWriter::new();
    for e in g.metadata.iter().filter(|e| e.key != KEPT_IDS_KEY) {
        w.add(e.key, MetaValue::from(e.value)).unwrap();
    }
    let mut data = Vec::new();
    for t in &g.tensors {
        w.add_tensor(t.name, t.ggml_type, t.shape()).unwrap();
        data.push(g.tensor_data(t));
    }
    bytes = w.to_bytes(&data).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let e = Model::load(&g).unwrap_err();
    assert!(
        matches!(e, ModelError::BadTensorShape { ref name, .. } if name == "output.weight"),
        "{e:?}"
    );
}

#[test]
fn plan_refuses_bad_id_lists() {
    let full = tiny_model(true, None);
    let g = Gguf::parse(&full).unwrap();
    for (ids, msg) in [
        (&[][..], "empty"),
        (&[0, 40][..], "not in the vocabulary"),
        (&[3, 2][..], "sorted and unique"),
        (&[2, 2][..], "sorted and unique"),
    ] {
        let e = head::plan_prune(&g, ids).err().unwrap();
        assert!(e.contains(msg), "{e}");
    }
    let pruned = prune(&full, &KEPT);
    let g = Gguf::parse(&pruned).unwrap();
    let e = head::plan_prune(&g, &KEPT).err().unwrap();
    assert!(e.contains("already has a pruned head"), "{e}");
}
