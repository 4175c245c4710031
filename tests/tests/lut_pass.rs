//! The Q1_0 and Q2_0 lookup-table kernels through the forward pass, on real files
//! (qwen2.5-coder-0.5b-q1_0.gguf and -q2_0.gguf: Qwen2.5-Coder-0.5B requantized by
//! llama-quantize --pure, or by `smolrun gguf requant` to the same bytes: tools/fetch-models.sh
//! lowbit): the weights repacked into 16-row groups as the
//! repack cache would hold them, the activation tables built once per token into the state's
//! table scratch, a prompt's batch of more tokens than that scratch holds (`TABLE_TOKENS`)
//! run a few tokens at a time, and decoding token by token. Every logit must be the
//! unrepacked run's to the bit: the kernels keep `vec_dot`'s float order.
//!
//! It runs the table kernel's scalar face (`Q1_0_LUT16_SCALAR`) on every CPU, and on aarch64
//! also the NEON face that the CPU's kernel set installs (under qemu: `tools/test-aarch64.sh`
//! does not run this file; run it with the runner it sets, see the report of issue #19). On
//! x86-64 with AVX-512 VNNI the same pass runs the row-interleaved kernels the set installs for
//! Q1_0 (`q1_0_x16`) and, on synthetic-qwen3-q2_k (every matrix Q2_K), Q2_K (`q2_k_x8`):
//! they too keep `vec_dot`'s float order, so the same bit-identity holds.
//! Run in release mode: `cargo test --release -p smolrun-tests --test lut_pass`.

use smolrun_core::gguf::Gguf;
use smolrun_core::kernels::{KernelSet, RepackedKernel, Q1_0_LUT16_SCALAR, Q2_0_LUT16_SCALAR};
use smolrun_core::model::repack::RepackPlan;
use smolrun_core::model::{Model, ResidentStore, TABLE_TOKENS};
use smolrun_core::quant::GgmlType;
use smolrun_linux::MappedFile;
use smolrun_tests::*;

#[test]
fn q1_0_table_kernel_gives_the_direct_kernels_logits() {
    check_file(
        "qwen2.5-coder-0.5b-q1_0",
        GgmlType::Q1_0,
        Some(Q1_0_LUT16_SCALAR),
    );
}

#[test]
fn q2_0_table_kernel_gives_the_direct_kernels_logits() {
    check_file(
        "qwen2.5-coder-0.5b-q2_0",
        GgmlType::Q2_0,
        Some(Q2_0_LUT16_SCALAR),
    );
}

/// Q2_K has no table kernel; this CPU's row-interleaved one where the set has it (x86-64).
#[test]
fn q2_k_repacked_kernel_gives_the_direct_kernels_logits() {
    check_file("synthetic-qwen3-q2_k", GgmlType::Q2_K, None);
}

fn check_file(model: &str, ty: GgmlType, scalar_face: Option<RepackedKernel>) {
    // a missing file fails the test and says how to make it
    let path = model_path(model);
    let file = MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let g = Gguf::parse(file.bytes()).expect("parse");
    // The scalar face on every CPU; this CPU's own repacked kernel where it has one (aarch64:
    // the table kernel's NEON face; x86-64 with AVX-512 VNNI: the row-interleaved ones).
    let mut sets = Vec::new();
    if let Some(face) = scalar_face {
        let mut scalar = KernelSet::scalar();
        scalar.add_repacked(ty, face);
        sets.push(scalar);
    }
    let native = KernelSet::select(&smolrun_linux::detect_features());
    let k = native.weight(ty).expect("weight kernel");
    if k.repacked.is_some() {
        sets.push(native);
    }
    if sets.is_empty() {
        println!("notice: {ty} has no repacked kernel on this CPU; nothing to compare");
    }
    for kernels in sets {
        check_set(&g, &kernels, ty);
    }
}

/// `kernels` (with a table kernel for the file's type) on the repacked store against the same kernels on the
/// plain store, where every matvec takes the direct one-row kernel.
fn check_set(g: &Gguf, kernels: &KernelSet, ty: GgmlType) {
    let model = Model::load_with_kernels(g, kernels).expect("load");
    let rk = model
        .output
        .kernel
        .repacked
        .unwrap_or_else(|| panic!("a repacked kernel for the LM head ({ty})"));
    assert_eq!(model.act_table_bytes() > 0, rk.act_table.is_some());
    let plain = ResidentStore::new(g);
    let plan = RepackPlan::new(&model).expect("plan");
    assert!(
        plan.entries.iter().any(|e| e.n_rows > 1000),
        "the {ty} matrices are repacked"
    );
    let mut cache = vec![0u8; plan.file_len];
    for i in 0..plan.entries.len() {
        plan.repack_entry(&plain, i, &mut cache).expect("repack");
    }
    let weights = plan
        .weights(Box::new(cache), g.tensors.len())
        .expect("weights");
    let repacked = ResidentStore::new(g).with_repacked(weights);

    let par = ScopedThreads::from_env();
    let tokens: Vec<u32> = [
        9707u32, 11, 1879, 0, 576, 3974, 13876, 38835, 374, 264, 6366,
    ]
    .into_iter()
    .take(TABLE_TOKENS + 3)
    .collect();
    for n_batch in [tokens.len(), 1] {
        let want = logits_in_batches(&model, &plain, &par, &tokens, n_batch);
        let got = logits_in_batches(&model, &repacked, &par, &tokens, n_batch);
        for (t, (w, g)) in want.iter().zip(&got).enumerate() {
            let differ = w
                .iter()
                .zip(g)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            assert_eq!(
                differ,
                0,
                "{} ({}), batches of {n_batch}, token {t}: {differ} of {} logits differ",
                kernels.name(),
                rk.face,
                w.len()
            );
        }
        println!(
            "{} {} ({}, {}): {} tokens in batches of {n_batch}: every logit identical",
            model.output.ty,
            rk.layout,
            kernels.name(),
            rk.face,
            tokens.len()
        );
    }
}
