//! The writer against files llama.cpp's converter produced: rebuilding a real model's header
//! from its parsed metadata and tensor table must give back the same bytes, and the same
//! tensor offsets. This is what a rewriter (head pruning, repacking) relies on.

use smolrun_core::gguf::{Gguf, GgufWriter, MetaValue};
use smolrun_linux::MappedFile;
use std::path::{Path, PathBuf};

fn model_path(file: &str) -> PathBuf {
    let dir = match std::env::var_os("SMOLRUN_MODELS") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/smolrun/models"),
    };
    dir.join(file)
}

fn header_round_trip(path: &Path) {
    let mapped = MappedFile::open(path).unwrap();
    let g = Gguf::parse(mapped.bytes()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut w = GgufWriter::new().with_version(g.version).unwrap();
    for e in &g.metadata {
        w.add(e.key, MetaValue::from(e.value)).unwrap();
    }
    for t in &g.tensors {
        w.add_tensor(t.name, t.ggml_type, t.shape()).unwrap();
    }
    let header = w.header();
    assert_eq!(header.len() as u64, g.data_offset);
    let original = &mapped.bytes()[..header.len()];
    if let Some(i) = header.iter().zip(original).position(|(a, b)| a != b) {
        panic!("{}: rewritten header differs at byte {i}", path.display());
    }
    for (i, t) in g.tensors.iter().enumerate() {
        assert_eq!(
            g.data_offset + w.tensor_offset(i),
            t.offset,
            "tensor {}",
            t.name
        );
    }
    assert_eq!(g.data_offset + w.data_len(), mapped.bytes().len() as u64);
}

#[test]
fn real_model_headers_rewrite_byte_identical() {
    for file in [
        "gemma-3-270m-q4_k_m.gguf",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    ] {
        let path = model_path(file);
        assert!(
            path.is_file(),
            "{} is missing: run tools/fetch-models.sh to download the test models",
            path.display()
        );
        header_round_trip(&path);
    }
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B, 1.1 GB; minutes of CPU)"]
fn real_model_headers_rewrite_byte_identical_qwen25_coder_15b() {
    let big = model_path("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf");
    assert!(
        big.is_file(),
        "{} is missing: tools/test.sh --full fetches it",
        big.display()
    );
    header_round_trip(&big);
}
