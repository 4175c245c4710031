//! Writes small valid GGUF files with the crate's own writer into `seeds/`, the starting corpus
//! for the `gguf_parse` target: every value type, nested arrays, several tensor types, both
//! versions, a non-default alignment and a tokenizer-like layout.

use smolrun_core::gguf::{GgufWriter, MetaArray, MetaValue};
use smolrun_core::quant::GgmlType;
use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, w: &GgufWriter| {
        let data: Vec<Vec<u8>> = (0..w.tensor_count())
            .map(|i| {
                (0..w.tensor_bytes(i))
                    .map(|b| (b * 31 + i as u64) as u8)
                    .collect()
            })
            .collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let bytes = w.to_bytes(&refs).unwrap();
        std::fs::write(dir.join(name), &bytes).unwrap();
        println!("{name}: {} bytes", bytes.len());
    };

    // Every scalar type and every array element type.
    let mut w = GgufWriter::new();
    w.add("u8", 1u8).unwrap();
    w.add("i8", -1i8).unwrap();
    w.add("u16", 2u16).unwrap();
    w.add("i16", -2i16).unwrap();
    w.add("u32", 3u32).unwrap();
    w.add("i32", -3i32).unwrap();
    w.add("f32", 0.5f32).unwrap();
    w.add("bool", true).unwrap();
    w.add("str", "s").unwrap();
    w.add("u64", 4u64).unwrap();
    w.add("i64", -4i64).unwrap();
    w.add("f64", 0.25f64).unwrap();
    w.add("a.u8", vec![1u8, 2]).unwrap();
    w.add("a.i8", vec![-1i8]).unwrap();
    w.add("a.u16", vec![1u16]).unwrap();
    w.add("a.i16", vec![-1i16]).unwrap();
    w.add("a.u32", vec![1u32]).unwrap();
    w.add("a.i32", vec![-1i32, 2]).unwrap();
    w.add("a.f32", vec![1.0f32, 2.0]).unwrap();
    w.add("a.bool", vec![true, false]).unwrap();
    w.add("a.str", vec!["a", "bc"]).unwrap();
    w.add("a.u64", vec![u64::MAX]).unwrap();
    w.add("a.i64", vec![i64::MIN]).unwrap();
    w.add("a.f64", vec![1.0f64]).unwrap();
    write("all-value-types", &w);

    // Nested arrays.
    let mut w = GgufWriter::new();
    let inner = MetaArray::Array(vec![
        MetaArray::U8(vec![1]),
        MetaArray::Str(vec!["x".into()]),
    ]);
    w.add(
        "nested",
        MetaValue::Array(MetaArray::Array(vec![inner, MetaArray::I32(vec![])])),
    )
    .unwrap();
    write("nested-arrays", &w);

    // A miniature model: architecture keys, a vocabulary, tensors of several types.
    for (version, alignment, name) in [
        (3, None, "tiny-model-v3"),
        (2, Some(64u32), "tiny-model-v2-align64"),
    ] {
        let mut w = GgufWriter::new().with_version(version).unwrap();
        if let Some(a) = alignment {
            w.add("general.alignment", a).unwrap();
        }
        w.add("general.architecture", "llama").unwrap();
        w.add("llama.block_count", 1u32).unwrap();
        w.add("llama.embedding_length", 32u32).unwrap();
        w.add("llama.attention.layer_norm_rms_epsilon", 1e-5f32)
            .unwrap();
        w.add("tokenizer.ggml.model", "gpt2").unwrap();
        w.add("tokenizer.ggml.tokens", vec!["<s>", "</s>", "a", "b", "ab"])
            .unwrap();
        w.add("tokenizer.ggml.token_type", vec![3i32, 3, 1, 1, 1])
            .unwrap();
        w.add("tokenizer.ggml.scores", vec![0.0f32, 0.0, -1.0, -1.0, -2.0])
            .unwrap();
        w.add("tokenizer.ggml.merges", vec!["a b"]).unwrap();
        w.add_tensor("token_embd.weight", GgmlType::Q8_0, &[32, 5])
            .unwrap();
        w.add_tensor("blk.0.attn_norm.weight", GgmlType::F32, &[32])
            .unwrap();
        w.add_tensor("blk.0.ffn_down.weight", GgmlType::F16, &[32, 2])
            .unwrap();
        w.add_tensor("output.weight", GgmlType::Q4_K, &[256, 1])
            .unwrap();
        // An empty axis: no data, but a row length the reader must still bound.
        w.add_tensor("empty", GgmlType::F32, &[4, 0, 2]).unwrap();
        write(name, &w);
    }
}
