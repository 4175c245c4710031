//! The Q1_0 lookup-table kernel through the forward pass, on a real Q1_0 file
//! (qwen2.5-coder-0.5b-q1_0.gguf: Qwen2.5-Coder-0.5B requantized by llama-quantize --pure to
//! Q1_0; skipped with a notice when absent): the weights repacked into 16-row groups as the
//! repack cache would hold them, the activation tables built once per token into the state's
//! table scratch, a prompt's batch of more tokens than that scratch holds (`TABLE_TOKENS`)
//! run a few tokens at a time, and decoding token by token. Every logit must be the
//! unrepacked scalar run's to the bit: the kernel keeps `q1_0::vec_dot`'s float order.
//!
//! It runs the table kernel's scalar face (`Q1_0_LUT16_SCALAR`) so that it runs on any CPU;
//! the NEON face gives the same bits as the scalar face (core/tests/neon_exact.rs, under
//! qemu). Run in release mode: `cargo test --release -p smolrun-tests --test lut_pass`.

use smolrun_core::gguf::Gguf;
use smolrun_core::kernels::{KernelSet, Q1_0_LUT16_SCALAR};
use smolrun_core::model::repack::RepackPlan;
use smolrun_core::model::{Model, ResidentStore, TABLE_TOKENS};
use smolrun_core::quant::GgmlType;
use smolrun_linux::MappedFile;
use smolrun_tests::*;

#[test]
fn q1_0_table_kernel_gives_the_direct_kernels_logits() {
    let path = models_dir().join("qwen2.5-coder-0.5b-q1_0.gguf");
    if !path.exists() {
        eprintln!(
            "NOTICE: skipping: {} is absent (llama-quantize --allow-requantize --pure the \
             0.5B Q4_K_M file to Q1_0)",
            path.display()
        );
        return;
    }
    let file = MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let g = Gguf::parse(file.bytes()).expect("parse");
    let mut kernels = KernelSet::scalar();
    let direct = Model::load_with_kernels(&g, &kernels).expect("load");
    kernels.add_repacked(GgmlType::Q1_0, Q1_0_LUT16_SCALAR);
    let lut = Model::load_with_kernels(&g, &kernels).expect("load");
    assert!(lut.act_table_bytes() > 0 && direct.act_table_bytes() == 0);

    let plain = ResidentStore::new(&g);
    let plan = RepackPlan::new(&lut).expect("plan");
    assert!(
        plan.entries.iter().any(|e| e.n_rows > 1000),
        "the Q1_0 matrices are repacked"
    );
    let mut cache = vec![0u8; plan.file_len];
    for i in 0..plan.entries.len() {
        plan.repack_entry(&plain, i, &mut cache).expect("repack");
    }
    let weights = plan
        .weights(Box::new(cache), g.tensors.len())
        .expect("weights");
    let repacked = ResidentStore::new(&g).with_repacked(weights);

    let par = ScopedThreads::from_env();
    let tokens: Vec<u32> = [
        9707u32, 11, 1879, 0, 576, 3974, 13876, 38835, 374, 264, 6366,
    ]
    .into_iter()
    .take(TABLE_TOKENS + 3)
    .collect();
    for n_batch in [tokens.len(), 1] {
        let want = logits_in_batches(&direct, &plain, &par, &tokens, n_batch);
        let got = logits_in_batches(&lut, &repacked, &par, &tokens, n_batch);
        for (t, (w, g)) in want.iter().zip(&got).enumerate() {
            let differ = w
                .iter()
                .zip(g)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            assert_eq!(
                differ,
                0,
                "batches of {n_batch}, token {t}: {differ} of {} logits differ",
                w.len()
            );
        }
        println!(
            "q1_0 lut16: {} tokens in batches of {n_batch}: every logit identical",
            tokens.len()
        );
    }
}
