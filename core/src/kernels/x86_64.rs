//! x86-64: the one place this architecture puts its kernels in a [`KernelSet`] (`install`, like
//! tract's per-architecture `plug`). With AVX2, FMA and F16C (allowed by the caller's
//! `CpuFeatures` and confirmed by cpuid), the AVX2 kernels of `smolrun_kernels::x86_64` replace
//! the scalar matvecs and the AVX2 faces of attention and SwiGLU replace `math`'s; with
//! AVX-512 VNNI as well, the 32-element formats and the K-quants' prompts run AVX-512 kernels.
//!
//! `exactness.rs` and `math_exactness.rs` test whatever this installs against the scalar
//! code; the tests below check what is installed on which CPU, and the kernels that
//! replaced others against the ones they replaced.

use super::{KernelSet, RepackedKernel};
use crate::kv_q8::AttentionLoopsQ8;
use crate::math::{self, AttentionLoops, DeltaRuleKernels};
use crate::platform::CpuFeatures;
use crate::quant::GgmlType;
use smolrun_kernels::x86_64::avx2_lowbit;
use smolrun_kernels::x86_64::{
    attention as k, avx2, avx2_2bit, avx2_3bit, avx2_fma_f16c_usable, avx2_iq2, avx2_iq4, avx2_k,
    avx2_kt, avx2_kt35, avx2_kt_iq4, avx2_q0, avx2_q1, avx512_k, avx512_q0, avx512_vnni_usable,
    exp,
};

/// Installs the AVX2 kernels and the AVX2 faces of attention and SwiGLU when the caller allows
/// AVX2, FMA and F16C and cpuid confirms them; on top of them the AVX-512 VNNI kernels of the
/// 32-element formats when the caller also allows AVX512F, AVX512BW and AVX512-VNNI and cpuid
/// confirms those and AVX512VL.
pub(super) fn install(features: &CpuFeatures, set: &mut KernelSet) {
    let allowed = features.avx2 && features.fma && features.f16c;
    if !allowed || !avx2_fma_f16c_usable() {
        return;
    }
    set.name = "x86_64-avx2";
    // Attention over the f16 KV cache and SwiGLU: the AVX2 faces of math's scalar code.
    set.attention = attention_faces!(ATTENTION_LOOPS, ATTENTION_LOOPS_Q8);
    set.swiglu = swiglu_avx2;
    // The gated delta rule's fused step (Qwen3.5's recurrent layers), f32 and f16 state.
    set.delta_rule = DeltaRuleKernels {
        f32: delta_rule_avx2,
        f16: delta_rule_f16_avx2,
    };
    // Q4_K and Q6_K (most of a decode step) from avx2_k: scales decoded and spread in
    // registers; the same lanes and float order as avx2.rs, so the same bits.
    set.install(GgmlType::Q4_K, q4_k, None, "avx2");
    set.install(GgmlType::Q5_K, q5_k, None, "avx2");
    set.install(GgmlType::Q6_K, q6_k, None, "avx2");
    set.install(GgmlType::Q8_0, q8_0, Some(q8_0_rows), "avx2");
    set.install(GgmlType::Q4_0, q4_0, Some(q4_0_rows), "avx2");
    set.install(GgmlType::Q5_0, q5_0, Some(q5_0_rows), "avx2");
    set.install(GgmlType::F16, f16, None, "avx2");
    // 2-bit weights: the scalar twins' integer sums in lanes, their float steps as they are.
    set.install(GgmlType::Q2_K, q2_k, None, "avx2");
    set.install(GgmlType::TQ2_0, tq2_0, None, "avx2");
    // Q3_K (#33): bytes put in the twin's lane order, its exact integers and float steps
    // (bit for bit); prompts by avx2_kt35 below.
    set.install(GgmlType::Q3_K, q3_k, Some(q3_k_rows), "avx2");
    // Q4_1 and Q5_1 (#33): the twins' exact block integers and float steps (bit for bit);
    // prompts in the same bits.
    set.install(GgmlType::Q4_1, q4_1, None, "avx2");
    set.install(GgmlType::Q5_1, q5_1, None, "avx2");
    set.install_cols(GgmlType::Q4_1, q4_1_cols);
    set.install_cols(GgmlType::Q5_1, q5_1_cols);
    // Q2_K rows repacked 8 to a group, the row in the lane (avx2_2bit's `q2_k_x8`).
    set.add_repacked(GgmlType::Q2_K, Q2_K_X8);
    set.install(GgmlType::F32, f32, None, "avx2");
    // 1-bit, 2-bit and ternary (avx2_lowbit): bit for bit the scalar twins.
    set.install(GgmlType::Q1_0, q1_0, Some(q1_0_rows), "avx2");
    set.install(GgmlType::Q2_0, q2_0, None, "avx2");
    set.install(GgmlType::TQ1_0, tq1_0, None, "avx2");
    // Prompts: Q4_K and Q6_K by avx2_kt (tokens in the lanes, each sub-block's scale applied
    // once per 8 tokens: 1.9x and 1.5x avx2_k's batched speed), whose bits are its own
    // one-row dots' (its `cols_twin`), not the faster decode dots' above; the rest each
    // weight block unpacked once for 4 tokens, bit for bit the vec_dots above.
    set.install_cols_with_twin(GgmlType::Q4_K, q4_k_cols, q4_k_twin, "avx2-tokens");
    set.install_cols_with_twin(GgmlType::Q6_K, q6_k_cols, q6_k_twin, "avx2-tokens");
    // Q3_K and Q5_K likewise by avx2_kt35 (#33).
    set.install_cols_with_twin(GgmlType::Q3_K, q3_k_cols, q3_k_twin, "avx2-tokens");
    set.install_cols_with_twin(GgmlType::Q5_K, q5_k_cols, q5_k_twin, "avx2-tokens");
    set.install_cols(GgmlType::Q8_0, q8_0_cols);
    set.install_cols(GgmlType::Q4_0, q4_0_cols);
    set.install_cols(GgmlType::Q5_0, q5_0_cols);
    // IQ4_NL and IQ4_XS (#33): the grid lookup is a pshufb. IQ4_NL's prompts in the decode
    // kernel's bits; IQ4_XS's by avx2_kt_iq4 (tokens in the lanes) in its one-row twin's.
    set.install(GgmlType::IQ4_NL, iq4_nl, Some(iq4_nl_rows), "avx2");
    set.install_cols(GgmlType::IQ4_NL, iq4_nl_cols);
    set.install(GgmlType::IQ4_XS, iq4_xs, None, "avx2");
    set.install_cols_with_twin(GgmlType::IQ4_XS, iq4_xs_cols, iq4_xs_twin, "avx2-tokens");
    // IQ2_XXS, IQ3_XXS, IQ2_XS, IQ2_S, IQ3_S, IQ1_S, IQ1_M (#33): grid and sign lookups gathered per
    // sub-block, the twins' exact integers and float steps (bit for bit); prompts in the decode
    // kernels' bits.
    set.install(GgmlType::IQ2_XXS, iq2_xxs, Some(iq2_xxs_rows), "avx2");
    set.install_cols(GgmlType::IQ2_XXS, iq2_xxs_cols);
    set.install(GgmlType::IQ3_XXS, iq3_xxs, Some(iq3_xxs_rows), "avx2");
    set.install_cols(GgmlType::IQ3_XXS, iq3_xxs_cols);
    set.install(GgmlType::IQ2_XS, iq2_xs, None, "avx2");
    set.install_cols(GgmlType::IQ2_XS, iq2_xs_cols);
    set.install(GgmlType::IQ2_S, iq2_s, None, "avx2");
    set.install_cols(GgmlType::IQ2_S, iq2_s_cols);
    set.install(GgmlType::IQ3_S, iq3_s, None, "avx2");
    set.install_cols(GgmlType::IQ3_S, iq3_s_cols);
    set.install(GgmlType::IQ1_S, iq1_s, None, "avx2");
    set.install_cols(GgmlType::IQ1_S, iq1_s_cols);
    set.install(GgmlType::IQ1_M, iq1_m, None, "avx2");
    set.install_cols(GgmlType::IQ1_M, iq1_m_cols);
    let allowed = features.avx512f && features.avx512bw && features.avx512vnni;
    if !allowed || !avx512_vnni_usable() {
        return;
    }
    set.name = "x86_64-avx512";
    // Decoding's attention over the f16 cache 16 lanes at a time (same bits as AVX2's).
    set.attention = attention_faces!(ATTENTION_LOOPS_512, ATTENTION_LOOPS_Q8);
    set.install(GgmlType::Q8_0, q8_0_512, Some(q8_0_rows_512), "avx512");
    set.install(GgmlType::Q4_0, q4_0_512, Some(q4_0_rows_512), "avx512");
    set.install(GgmlType::Q5_0, q5_0_512, Some(q5_0_rows_512), "avx512");
    // Q1_0: the AVX2 one-row dot, eight rows at a time by masked moves and vpdpbusd (same bits)
    set.install(GgmlType::Q1_0, q1_0, Some(q1_0_rows_512), "avx512");
    set.add_repacked(GgmlType::Q2_K, Q2_K_X8_VNNI);
    // Q1_0 rows repacked 16 to a group, a mask of 4 weights of each row per activation dword
    // (avx2_lowbit's `q1_0_x16`): no per-block fold of the rows' sums.
    set.add_repacked(GgmlType::Q1_0, Q1_0_X16_VNNI);
    set.install_cols(GgmlType::Q8_0, q8_0_cols_512);
    set.install_cols(GgmlType::Q4_0, q4_0_cols_512);
    set.install_cols(GgmlType::Q5_0, q5_0_cols_512);
    // Q4_K and Q6_K: prompts by avx512_k (the tokens in the lanes, 2x the AVX2 batch
    // speed on Qwen2.5-1.5B), decode by avx2_k, which is 8-11% faster than avx512_k's
    // one-row kernel (the bits of the prompt kernel, its `cols_twin`).
    set.install_cols_with_twin(GgmlType::Q4_K, q4_k_cols_512, q4_k_512, "avx512");
    set.install_cols_with_twin(GgmlType::Q6_K, q6_k_cols_512, q6_k_512, "avx512");
}

// =============================================================================================
// Weight kernels (smolrun_kernels::x86_64: avx2, avx2_k, avx2_q0, avx2_kt, avx2_kt35,
// avx2_kt_iq4, avx512_q0, avx512_k, ...).
// =============================================================================================

// SAFETY (every function below): installed only by `install`, after
// `avx2_fma_f16c_usable()` confirmed AVX2, FMA and F16C on this CPU. The kernels read only
// whole blocks inside both slices.
fn q4_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_k::vec_dot_q4_k_q8_k(n, w, a) }
}
fn q5_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2::vec_dot_q5_k_q8_k(n, w, a) }
}
fn q6_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_k::vec_dot_q6_k_q8_k(n, w, a) }
}
fn q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2::vec_dot_q8_0_q8_0(n, w, a) }
}
fn q4_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2::vec_dot_q4_0_q8_0(n, w, a) }
}
fn q5_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2::vec_dot_q5_0_q8_0(n, w, a) }
}
fn q2_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_2bit::vec_dot_q2_k_q8_k(n, w, a) }
}
fn q3_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_3bit::vec_dot_q3_k_q8_k(n, w, a) }
}
fn q3_k_rows(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { avx2_3bit::matvec_q3_k_q8_k(n, w, a, out) }
}
fn q3_k_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_kt35::matmul_q3_k_q8_k(n, w, a, t, out) }
}
fn q3_k_twin(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_kt35::vec_dot_q3_k_q8_k(n, w, a) }
}
fn q4_1(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_q1::vec_dot_q4_1_q8_1(n, w, a) }
}
fn q5_1(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_q1::vec_dot_q5_1_q8_1(n, w, a) }
}
fn q4_1_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_q1::matmul_q4_1_q8_1(n, w, a, t, out) }
}
fn q5_1_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_q1::matmul_q5_1_q8_1(n, w, a, t, out) }
}
fn tq2_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_2bit::vec_dot_tq2_0_q8_k(n, w, a) }
}
fn f16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2::vec_dot_f16(n, w, a) }
}
fn f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2::vec_dot_f32(n, w, a) }
}
fn q1_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_lowbit::vec_dot_q1_0_q8_0(n, w, a) }
}
fn q1_0_rows_512(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { avx2_lowbit::matvec_q1_0_q8_0_vnni(n, w, a, out) }
}
fn q1_0_rows(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { avx2_lowbit::matvec_q1_0_q8_0(n, w, a, out) }
}
fn q2_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_lowbit::vec_dot_q2_0_q8_0(n, w, a) }
}
fn tq1_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_lowbit::vec_dot_tq1_0_q8_k(n, w, a) }
}
/// Q2_K in groups of 8 rows (same bytes as the file, rearranged); the tail rows run the
/// one-row AVX2 kernel inside the same call.
const Q2_K_X8: RepackedKernel = RepackedKernel {
    layout: "q2_k_x8",
    group_rows: avx2_2bit::Q2_K_X8_ROWS,
    bytes: avx2_2bit::q2_k_x8_bytes,
    repack: avx2_2bit::repack_q2_k_x8,
    rows: q2_k_x8,
    face: "avx2-x8",
    act_table: None,
};
/// The same layout through VNNI's `vpdpbusd` (same bits).
const Q2_K_X8_VNNI: RepackedKernel = RepackedKernel {
    rows: q2_k_x8_vnni,
    face: "avx512-x8",
    ..Q2_K_X8
};
fn q2_k_x8(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { avx2_2bit::matvec_q2_k_x8_q8_k(n, w, a, out) }
}
fn q4_k_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_kt::matmul_q4_k_q8_k(n, w, a, t, out) }
}
fn q4_k_twin(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_kt::vec_dot_q4_k_q8_k(n, w, a) }
}
fn q5_k_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_kt35::matmul_q5_k_q8_k(n, w, a, t, out) }
}
fn q5_k_twin(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_kt35::vec_dot_q5_k_q8_k(n, w, a) }
}
fn q6_k_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_kt::matmul_q6_k_q8_k(n, w, a, t, out) }
}
fn q6_k_twin(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_kt::vec_dot_q6_k_q8_k(n, w, a) }
}
// The 32-element formats (avx2_q0): several rows per pass (matvec) and batches (matmul),
// both giving the bits of the vec_dot above for every row.
fn q8_0_rows(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { avx2_q0::matvec_q8_0_q8_0(n, w, a, out) }
}
fn q4_0_rows(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { avx2_q0::matvec_q4_0_q8_0(n, w, a, out) }
}
fn q5_0_rows(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { avx2_q0::matvec_q5_0_q8_0(n, w, a, out) }
}
fn q8_0_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_q0::matmul_q8_0_q8_0(n, w, a, t, out) }
}
fn q4_0_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_q0::matmul_q4_0_q8_0(n, w, a, t, out) }
}
fn q5_0_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_q0::matmul_q5_0_q8_0(n, w, a, t, out) }
}
fn iq4_nl(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_q0::vec_dot_iq4_nl_q8_0(n, w, a) }
}
fn iq4_nl_rows(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { avx2_q0::matvec_iq4_nl_q8_0(n, w, a, out) }
}
fn iq4_nl_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_q0::matmul_iq4_nl_q8_0(n, w, a, t, out) }
}
fn iq4_xs(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_iq4::vec_dot_iq4_xs_q8_k(n, w, a) }
}
fn iq4_xs_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_kt_iq4::matmul_iq4_xs_q8_k(n, w, a, t, out) }
}
fn iq4_xs_twin(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_kt_iq4::vec_dot_iq4_xs_q8_k(n, w, a) }
}
fn iq2_xxs(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_iq2::vec_dot_iq2_xxs_q8_k(n, w, a) }
}
fn iq2_xxs_rows(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { avx2_iq2::matvec_iq2_xxs_q8_k(n, w, a, out) }
}
fn iq2_xxs_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_iq2::matmul_iq2_xxs_q8_k(n, w, a, t, out) }
}
fn iq3_xxs(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_iq2::vec_dot_iq3_xxs_q8_k(n, w, a) }
}
fn iq3_xxs_rows(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { avx2_iq2::matvec_iq3_xxs_q8_k(n, w, a, out) }
}
fn iq3_xxs_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_iq2::matmul_iq3_xxs_q8_k(n, w, a, t, out) }
}
fn iq2_xs(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_iq2::vec_dot_iq2_xs_q8_k(n, w, a) }
}
fn iq2_xs_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_iq2::matmul_iq2_xs_q8_k(n, w, a, t, out) }
}
fn iq2_s(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_iq2::vec_dot_iq2_s_q8_k(n, w, a) }
}
fn iq2_s_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_iq2::matmul_iq2_s_q8_k(n, w, a, t, out) }
}
fn iq1_s(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_iq2::vec_dot_iq1_s_q8_k(n, w, a) }
}
fn iq1_s_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_iq2::matmul_iq1_s_q8_k(n, w, a, t, out) }
}
fn iq1_m(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_iq2::vec_dot_iq1_m_q8_k(n, w, a) }
}
fn iq1_m_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_iq2::matmul_iq1_m_q8_k(n, w, a, t, out) }
}
fn iq3_s(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx2_iq2::vec_dot_iq3_s_q8_k(n, w, a) }
}
fn iq3_s_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx2_iq2::matmul_iq3_s_q8_k(n, w, a, t, out) }
}

// `avx512_vnni_usable()` confirmed AVX2, FMA, F16C, AVX512F/BW/VL and AVX512-VNNI. The
// three entry points of a format give the same bits (avx512_q0's docs).
fn q8_0_512(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx512_q0::vec_dot_q8_0_q8_0(n, w, a) }
}
fn q4_0_512(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx512_q0::vec_dot_q4_0_q8_0(n, w, a) }
}
fn q5_0_512(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx512_q0::vec_dot_q5_0_q8_0(n, w, a) }
}
/// Q1_0 in groups of 16 rows (same bytes as the file, rearranged); the tail rows run the
/// one-row AVX2 kernel inside the same call.
const Q1_0_X16_VNNI: RepackedKernel = RepackedKernel {
    layout: "q1_0_x16",
    group_rows: avx2_lowbit::Q1_0_X16_ROWS,
    bytes: avx2_lowbit::q1_0_x16_bytes,
    repack: avx2_lowbit::repack_q1_0_x16,
    rows: q1_0_x16_vnni,
    face: "avx512-x16",
    act_table: None,
};
fn q1_0_x16_vnni(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { avx2_lowbit::matvec_q1_0_x16_q8_0_vnni(n, w, a, out) }
}
fn q2_k_x8_vnni(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { avx2_2bit::matvec_q2_k_x8_q8_k_vnni(n, w, a, out) }
}
fn q8_0_rows_512(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { avx512_q0::matvec_q8_0_q8_0(n, w, a, out) }
}
fn q4_0_rows_512(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { avx512_q0::matvec_q4_0_q8_0(n, w, a, out) }
}
fn q5_0_rows_512(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { avx512_q0::matvec_q5_0_q8_0(n, w, a, out) }
}
fn q8_0_cols_512(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx512_q0::matmul_q8_0_q8_0(n, w, a, t, out) }
}
fn q4_0_cols_512(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx512_q0::matmul_q4_0_q8_0(n, w, a, t, out) }
}
fn q5_0_cols_512(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx512_q0::matmul_q5_0_q8_0(n, w, a, t, out) }
}
fn q4_k_512(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx512_k::vec_dot_q4_k_q8_k(n, w, a) }
}
fn q6_k_512(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { avx512_k::vec_dot_q6_k_q8_k(n, w, a) }
}
fn q4_k_cols_512(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx512_k::matmul_q4_k_q8_k(n, w, a, t, out) }
}
fn q6_k_cols_512(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
    unsafe { avx512_k::matmul_q6_k_q8_k(n, w, a, t, out) }
}

// =============================================================================================
// Attention over the f16 KV cache (the AVX2 loops of `math::attention_head_with`, bit for bit
// the scalar `math::attention_head`) and SwiGLU (`math::swiglu`, its `libm::expf` lane by lane).
// =============================================================================================

fn swiglu_avx2(gate: &mut [f32], up: &[f32]) {
    // SAFETY: installed only after `avx2_fma_f16c_usable()` confirmed AVX2.
    unsafe { exp::swiglu(gate, up) }
}

// The gated delta rule (smolrun_kernels::x86_64::delta_rule, bit for bit
// `math::delta_rule_step{,_f16}`): head dims that are a multiple of 16 (Qwen3.5's 128, the
// synthetic models' 32); any other runs the scalar step, which is the same function.
fn delta_rule_avx2(
    s: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    decay: f32,
    beta: f32,
    out: &mut [f32],
) {
    let dk = k.len();
    if dk == 0 || !dk.is_multiple_of(16) || q.len() < dk {
        return math::delta_rule_step(s, q, k, v, decay, beta, out);
    }
    let scale = math::delta_rule_scale(dk);
    // SAFETY: installed only after `avx2_fma_f16c_usable()`; the kernel clamps its rows to
    // what `s`, `v` and `out` hold.
    unsafe {
        smolrun_kernels::x86_64::delta_rule::delta_rule_f32(s, q, k, v, decay, beta, scale, out)
    }
}

fn delta_rule_f16_avx2(
    s: &mut [u16],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    decay: f32,
    beta: f32,
    out: &mut [f32],
) {
    let dk = k.len();
    if dk == 0 || !dk.is_multiple_of(16) || q.len() < dk {
        return math::delta_rule_step_f16(s, q, k, v, decay, beta, out);
    }
    let scale = math::delta_rule_scale(dk);
    // SAFETY: as in `delta_rule_avx2`.
    unsafe {
        smolrun_kernels::x86_64::delta_rule::delta_rule_f16(s, q, k, v, decay, beta, scale, out)
    }
}

// SAFETY (the loops below): reachable only through the AVX2 attention faces, which `install`
// puts in the set after `avx2_fma_f16c_usable()` confirmed AVX2, FMA and F16C. The kernels
// clamp their row counts to the slices.
pub(super) const ATTENTION_LOOPS: AttentionLoops = AttentionLoops {
    key_dots_lanes64: |q, keys, stride, scores| unsafe {
        k::key_dots_lanes64(q, keys, stride, scores)
    },
    key_dots_sequential: |q, keys, stride, scores| unsafe {
        k::key_dots_sequential(q, keys, stride, scores)
    },
    weighted_values: |out, w, values, stride| unsafe { k::weighted_values(out, w, values, stride) },
    rescale_f16: |out, ms| unsafe { k::rescale_f16(out, ms) },
    accumulate_f16: |out, value, vs| unsafe { k::accumulate_f16(out, value, vs) },
    accumulate_rows_f16: |out, values, stride, ms, vs| unsafe {
        k::accumulate_rows_f16(out, values, stride, ms, vs)
    },
    exp_in_place: |x| unsafe { exp::exp_in_place(x) },
};

// SAFETY: as for `ATTENTION_LOOPS` (the same `install` path, the same checks).
/// The AVX2 loops of attention over a q8_0 cache (`kv_q8::attention_q8_with`), bit for bit
/// `kv_q8::AttentionLoopsQ8::SCALAR`.
pub(super) const ATTENTION_LOOPS_Q8: AttentionLoopsQ8 = AttentionLoopsQ8 {
    key_dots: |qq, keys, stride, scores| unsafe { k::key_dots_q8_0(qq, keys, stride, scores) },
    accumulate_rows: |out, values, stride, ms, vs| unsafe {
        k::accumulate_rows_q8_0(out, values, stride, ms, vs)
    },
    exp_in_place: |x| unsafe { exp::exp_in_place(x) },
};

// SAFETY (the two loops below): reachable only through the AVX-512 faces, which `install`
// puts in the set after `avx512_vnni_usable()` confirmed AVX512F as well.
/// The AVX-512 loops of decoding's attention: the keys' dots and the f16 accumulator 16 lanes
/// at a time (2x fewer instructions per position than AVX2; the same bits).
pub(super) const ATTENTION_LOOPS_512: AttentionLoops = AttentionLoops {
    key_dots_lanes64: |q, keys, stride, scores| unsafe {
        k::key_dots_lanes64_512(q, keys, stride, scores)
    },
    accumulate_rows_f16: |out, values, stride, ms, vs| unsafe {
        k::accumulate_rows_f16_512(out, values, stride, ms, vs)
    },
    ..ATTENTION_LOOPS
};

#[cfg(test)]
mod tests {
    use super::super::exactness::{
        act_from_quants, detected_features, f16_fields, fast_sets, put_f16, quantize, set_edge_row,
    };
    use super::super::KernelSet;
    use crate::platform::CpuFeatures;
    use crate::quant::testutil::{random_blocks, XorShift};
    use crate::quant::GgmlType;
    use alloc::vec;
    use alloc::vec::Vec;
    use std::println;

    #[test]
    fn x86_64_selects_avx2_when_the_cpu_has_it() {
        let features = detected_features();
        let set = KernelSet::select(&features);
        if features.avx2 && features.fma && features.f16c {
            // With AVX-512 VNNI the 32-element formats take the avx512 face, the rest stay
            // AVX2; with the AVX-512 flags cleared, everything is AVX2.
            let avx512 = features.avx512f
                && features.avx512bw
                && features.avx512vnni
                && smolrun_kernels::x86_64::avx512_vnni_usable();
            let q0 = [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0];
            if avx512 {
                assert_eq!(set.name(), "x86_64-avx512");
                for ty in q0 {
                    assert_eq!(set.weight(ty).unwrap().face, "avx512", "{ty}");
                }
                // K-quants: AVX-512 prompts, AVX2 decode (the prompt kernel's bits: its twin).
                for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
                    let k = set.weight(ty).unwrap();
                    assert_eq!(k.face, "avx2", "{ty}");
                    assert!(k.cols.is_some() && k.cols_twin.is_some(), "{ty}");
                    let twins = set.with_batch_twins();
                    assert_eq!(twins.weight(ty).unwrap().face, "avx512", "{ty}");
                }
            }
            let set = if avx512 {
                KernelSet::select(&CpuFeatures {
                    avx512f: false,
                    ..features
                })
            } else {
                set.clone()
            };
            assert_eq!(set.name(), "x86_64-avx2");
            for ty in [
                GgmlType::Q4_K,
                GgmlType::Q5_K,
                GgmlType::Q6_K,
                GgmlType::Q8_0,
                GgmlType::Q4_0,
                GgmlType::Q5_0,
                GgmlType::Q2_K,
                GgmlType::Q3_K,
                GgmlType::Q4_1,
                GgmlType::Q5_1,
                GgmlType::TQ2_0,
                GgmlType::F16,
                GgmlType::F32,
                GgmlType::Q1_0,
                GgmlType::Q2_0,
                GgmlType::TQ1_0,
                GgmlType::IQ4_NL,
                GgmlType::IQ4_XS,
                GgmlType::IQ2_XXS,
                GgmlType::IQ3_XXS,
                GgmlType::IQ2_XS,
                GgmlType::IQ2_S,
                GgmlType::IQ3_S,
                GgmlType::IQ1_S,
                GgmlType::IQ1_M,
            ] {
                assert_eq!(set.weight(ty).unwrap().face, "avx2", "{ty}");
            }
        } else {
            println!("notice: this CPU lacks AVX2/FMA/F16C; the AVX2 kernels are not tested");
        }
    }

    /// The decode kernels of `avx2_k` (Q4_K, Q6_K) claim the lanes and float order of the
    /// `avx2.rs` kernels they replaced: to the bit, on random rows of 1..=6 blocks, with edge
    /// blocks (all 0x00, all 0xFF with large and negative scales) and extreme activations;
    /// and their batched kernels give the one-row bits for every activation row.
    #[test]
    fn avx2_k_kernels_give_the_bits_of_the_avx2_kernels() {
        use smolrun_kernels::x86_64::{avx2, avx2_fma_f16c_usable, avx2_k};
        if !avx2_fma_f16c_usable() {
            println!("notice: this CPU lacks AVX2/FMA/F16C; avx2_k is not tested");
            return;
        }
        type Dot = unsafe fn(usize, &[u8], &[u8]) -> f32;
        type Cols = unsafe fn(usize, &[u8], &[u8], usize, &mut [f32]);
        let pairs: [(GgmlType, Dot, Dot, Cols); 2] = [
            (
                GgmlType::Q4_K,
                avx2::vec_dot_q4_k_q8_k,
                avx2_k::vec_dot_q4_k_q8_k,
                avx2_k::matmul_q4_k_q8_k,
            ),
            (
                GgmlType::Q6_K,
                avx2::vec_dot_q6_k_q8_k,
                avx2_k::vec_dot_q6_k_q8_k,
                avx2_k::matmul_q6_k_q8_k,
            ),
        ];
        for (ty, old, new, cols) in pairs {
            let mut rng = XorShift(0xA5_2C ^ ty.id() as u64);
            for nb in 1..=6 {
                let n = nb * 256;
                let n_rows = 9;
                let row_bytes = nb * ty.type_size();
                let mut w = random_blocks(ty, n_rows * nb, rng.next_u64());
                w[row_bytes..2 * row_bytes].fill(0);
                for (r, v) in [(2, -2.5f32), (3, 6.0e4)] {
                    set_edge_row(&mut w, ty, row_bytes, r, v);
                }
                let mut acts: Vec<u8> = Vec::new();
                for t in 0..6 {
                    acts.extend(match t {
                        0 | 1 => {
                            let x: Vec<f32> = (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect();
                            quantize(GgmlType::Q8_K, &x)
                        }
                        2 => act_from_quants(GgmlType::Q8_K, 0.01, &vec![-128; n]),
                        3 => act_from_quants(
                            GgmlType::Q8_K,
                            3.0,
                            &(0..n)
                                .map(|i| if i % 3 == 0 { 127 } else { -128 })
                                .collect::<Vec<_>>(),
                        ),
                        _ => {
                            let mut x = vec![0.001f32; n];
                            x[(t * 77) % n] = -3.0e4;
                            quantize(GgmlType::Q8_K, &x)
                        }
                    });
                }
                let act_row = acts.len() / 6;
                let mut batched = vec![f32::NAN; 6 * n_rows];
                // SAFETY: AVX2, FMA and F16C confirmed above.
                unsafe { cols(n, &w, &acts, 6, &mut batched) };
                for t in 0..6 {
                    let act = &acts[t * act_row..(t + 1) * act_row];
                    for r in 0..n_rows {
                        let row = &w[r * row_bytes..(r + 1) * row_bytes];
                        // SAFETY: as above.
                        let (a, b) = unsafe { (old(n, row, act), new(n, row, act)) };
                        assert_eq!(a.to_bits(), b.to_bits(), "{ty} {nb} blocks row {r} act {t}");
                        assert_eq!(
                            batched[t * n_rows + r].to_bits(),
                            b.to_bits(),
                            "{ty} batched, {nb} blocks row {r} act {t}"
                        );
                    }
                }
            }
        }
    }

    /// `avx2_kt`'s Q4_K and Q6_K, `avx2_kt35`'s Q3_K and Q5_K and `avx2_kt_iq4`'s IQ4_XS
    /// prompt kernels give their one-row dots' bits for every (row, token):
    /// 1..=5 blocks (across its chunks of 2), 35 rows (across its tiles of 32), 1..=40 tokens
    /// (the one-row path below 4, partial token vectors, a second pass past 32), edge blocks (all 0x00; all 0xFF with large and negative factors; all 0x00
    /// with factors 1, for IQ4_XS level -127 and scale -32 everywhere) and extreme
    /// activations (all -128, alternating 127/-128). With AVX-512 VNNI, Q4_K's and Q6_K's one-row dots also
    /// equal `avx512_k`'s (the same integers and float steps).
    #[test]
    fn avx2_kt_matmuls_give_their_vec_dot_bits() {
        use smolrun_kernels::x86_64::{
            avx2_fma_f16c_usable, avx2_kt, avx2_kt35, avx2_kt_iq4, avx512_k,
        };
        if !avx2_fma_f16c_usable() {
            println!("notice: this CPU lacks AVX2/FMA/F16C; avx2_kt is not tested");
            return;
        }
        type Dot = unsafe fn(usize, &[u8], &[u8]) -> f32;
        type Cols = unsafe fn(usize, &[u8], &[u8], usize, &mut [f32]);
        let kernels: [(GgmlType, Cols, Dot, Option<Dot>); 5] = [
            (
                GgmlType::Q4_K,
                avx2_kt::matmul_q4_k_q8_k,
                avx2_kt::vec_dot_q4_k_q8_k,
                Some(avx512_k::vec_dot_q4_k_q8_k),
            ),
            (
                GgmlType::Q6_K,
                avx2_kt::matmul_q6_k_q8_k,
                avx2_kt::vec_dot_q6_k_q8_k,
                Some(avx512_k::vec_dot_q6_k_q8_k),
            ),
            (
                GgmlType::Q3_K,
                avx2_kt35::matmul_q3_k_q8_k,
                avx2_kt35::vec_dot_q3_k_q8_k,
                None,
            ),
            (
                GgmlType::Q5_K,
                avx2_kt35::matmul_q5_k_q8_k,
                avx2_kt35::vec_dot_q5_k_q8_k,
                None,
            ),
            (
                GgmlType::IQ4_XS,
                avx2_kt_iq4::matmul_iq4_xs_q8_k,
                avx2_kt_iq4::vec_dot_iq4_xs_q8_k,
                None,
            ),
        ];
        for (ty, cols, dot, dot512) in kernels {
            let mut rng = XorShift(0x4B_70 ^ ty.id() as u64);
            for nb in 1..=5 {
                let n = nb * 256;
                let n_rows = 35;
                let row_bytes = nb * ty.type_size();
                let mut w = random_blocks(ty, n_rows * nb, rng.next_u64());
                w[row_bytes..2 * row_bytes].fill(0);
                for (r, v) in [(2, -2.5f32), (33, 6.0e4)] {
                    set_edge_row(&mut w, ty, row_bytes, r, v);
                }
                for b in w[5 * row_bytes..6 * row_bytes].chunks_exact_mut(ty.type_size()) {
                    b.fill(0);
                    for &off in f16_fields(ty) {
                        put_f16(b, off, 1.0);
                    }
                }
                for n_acts in 1..=40 {
                    let mut acts: Vec<u8> = Vec::new();
                    for t in 0..n_acts {
                        acts.extend(match t % 5 {
                            0 | 1 => {
                                let x: Vec<f32> = (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect();
                                quantize(GgmlType::Q8_K, &x)
                            }
                            2 => act_from_quants(GgmlType::Q8_K, 0.01, &vec![-128; n]),
                            3 => act_from_quants(
                                GgmlType::Q8_K,
                                3.0,
                                &(0..n)
                                    .map(|i| if i % 3 == 0 { 127 } else { -128 })
                                    .collect::<Vec<_>>(),
                            ),
                            _ => {
                                let mut x = vec![0.001f32; n];
                                x[(t * 77) % n] = -3.0e4;
                                quantize(GgmlType::Q8_K, &x)
                            }
                        });
                    }
                    let act_row = acts.len() / n_acts;
                    let mut batched = vec![f32::NAN; n_acts * n_rows];
                    // SAFETY: AVX2, FMA and F16C confirmed above.
                    unsafe { cols(n, &w, &acts, n_acts, &mut batched) };
                    for t in 0..n_acts {
                        let act = &acts[t * act_row..(t + 1) * act_row];
                        for r in 0..n_rows {
                            let row = &w[r * row_bytes..(r + 1) * row_bytes];
                            // SAFETY: as above.
                            let one = unsafe { dot(n, row, act) };
                            assert_eq!(
                                batched[t * n_rows + r].to_bits(),
                                one.to_bits(),
                                "{ty} {nb} blocks, {n_acts} tokens: row {r} token {t}"
                            );
                            let Some(dot512) = dot512 else { continue };
                            if smolrun_kernels::x86_64::avx512_vnni_usable() {
                                // SAFETY: AVX-512 VNNI confirmed.
                                let v = unsafe { dot512(n, row, act) };
                                assert_eq!(
                                    v.to_bits(),
                                    one.to_bits(),
                                    "{ty} avx512_k, row {r} token {t}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The repacked kernels (Q2_K's `q2_k_x8`, AVX2 and VNNI faces; Q1_0's `q1_0_x16`)
    /// keep the scalar twin's bits on edge blocks as well as random ones: all bits set (Q2_K:
    /// codes 3 and scale bytes 0xFF) or clear, scales large, negative, infinite or NaN,
    /// activations all -128 or alternating extremes, and 35 rows (two groups of 16, four of 8,
    /// and a tail of 3) of 1..=5 blocks, cut into chunks as the model cuts them.
    #[test]
    fn repacked_x86_kernels_give_the_scalar_bits_on_edge_blocks() {
        let mut tested = 0;
        for ty in [GgmlType::Q2_K, GgmlType::Q1_0] {
            let scalar = KernelSet::scalar().weight(ty).unwrap().vec_dot;
            let act_ty = crate::quant::vec_dot_type(ty).unwrap();
            let kernels: Vec<_> = fast_sets()
                .iter()
                .filter_map(|s| s.weight(ty).unwrap().repacked)
                .collect();
            let mut rng = XorShift(0x2C_08 ^ ty.id() as u64);
            for nb in 1..=5 {
                let n = nb * ty.block_size();
                let n_rows = 35;
                let row_bytes = nb * ty.type_size();
                let mut w = random_blocks(ty, n_rows * nb, rng.next_u64());
                let edges = [
                    (1, 6.0e4),
                    (2, -2.5),
                    (5, f32::INFINITY),
                    (9, f32::NAN),
                    (17, -6.0e4),
                    (33, 0.5),
                ];
                for (e, (r, v)) in edges.into_iter().enumerate() {
                    let edge = &mut w[r * row_bytes..(r + 1) * row_bytes];
                    edge.fill(0xFF);
                    for b in edge.chunks_exact_mut(ty.type_size()) {
                        // Q2_K: d, then dmin from the next edge case
                        for (i, &off) in f16_fields(ty).iter().enumerate() {
                            put_f16(b, off, edges[(e + i) % edges.len()].1.min(v));
                        }
                    }
                }
                w[3 * row_bytes..4 * row_bytes].fill(0);
                let acts = [
                    {
                        let x: Vec<f32> = (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect();
                        quantize(act_ty, &x)
                    },
                    act_from_quants(act_ty, 0.01, &vec![-128; n]),
                    act_from_quants(
                        act_ty,
                        3.0,
                        &(0..n)
                            .map(|i| if i % 3 == 0 { 127 } else { -128 })
                            .collect::<Vec<_>>(),
                    ),
                ];
                for rk in &kernels {
                    tested += 1;
                    let mut packed = vec![0u8; (rk.bytes)(n_rows, n).unwrap()];
                    (rk.repack)(&w, n_rows, n, &mut packed).unwrap();
                    for (a, act) in acts.iter().enumerate() {
                        let mut out = vec![f32::NAN; n_rows];
                        for (r0, r1) in [(0, 16), (16, 32), (32, 35)] {
                            let range = rk.row_range(n_rows, n, r0, r1).unwrap();
                            rk.matvec(ty, &packed[range], r1 - r0, n, act, &mut out[r0..r1])
                                .unwrap();
                        }
                        for (r, y) in out.iter().enumerate() {
                            let want = scalar(n, &w[r * row_bytes..(r + 1) * row_bytes], act);
                            assert_eq!(
                                y.to_bits(),
                                want.to_bits(),
                                "{ty} {} {nb} blocks row {r} act {a}: {y} vs {want}",
                                rk.face
                            );
                        }
                    }
                }
            }
        }
        if tested == 0 {
            println!("notice: no repacked kernel on this CPU; nothing to compare");
        }
    }

    /// Decoding's attention loops, AVX2 and (where the CPU has it) AVX-512, each against its
    /// scalar truth, to the bit: the keys' dots (`math::dot_f16_in_lanes`) over dims around
    /// the 64-lane step, the block of f16 accumulations (`math::accumulate_rows_f16`, rescales
    /// included, accumulators overflowing to inf) and the exponentials (`libm::expf`).
    #[test]
    fn attention_loops_give_the_scalar_bits() {
        let mut loops = vec![("avx2", super::ATTENTION_LOOPS)];
        if super::avx512_vnni_usable() {
            loops.push(("avx512", super::ATTENTION_LOOPS_512));
        }
        let mut rng = XorShift(0xA77_0512);
        let f16_of = |rng: &mut XorShift, m: f32| {
            let r = rng.next_u64();
            match r % 41 {
                0 => half::f16::INFINITY.to_bits(),
                1 => 0x0001, // the smallest subnormal
                2 => 0x8000,
                3 => 0x7BFF, // 65504
                _ => half::f16::from_f32((rng.unit() * 2.0 - 1.0) * m).to_bits(),
            }
        };
        for (name, l) in &loops {
            for dim in [1, 8, 63, 64, 65, 100, 128, 200, 256, 272] {
                let stride = dim + 3;
                let n = 37;
                for m in [1.0f32, 300.0, 60000.0] {
                    let cache: Vec<u16> = (0..n * stride).map(|_| f16_of(&mut rng, m)).collect();
                    let q: Vec<f32> = (0..dim)
                        .map(|_| half::f16::from_bits(f16_of(&mut rng, m)).to_f32())
                        .collect();
                    let mut got = vec![0f32; n];
                    (l.key_dots_lanes64)(&q, &cache, stride, &mut got);
                    for (i, g) in got.iter().enumerate() {
                        let want = crate::math::dot_f16_in_lanes(&q, &cache[i * stride..][..dim]);
                        assert_eq!(
                            g.to_bits(),
                            want.to_bits(),
                            "{name} key dot {dim} {m} row {i}"
                        );
                    }
                    // ms: mostly 1, some rescales (one of them 0); vs of mixed size.
                    let ms: Vec<f32> = (0..n)
                        .map(|i| match i % 9 {
                            4 => 0.0,
                            2 | 7 => rng.unit(),
                            _ => 1.0,
                        })
                        .collect();
                    let vs: Vec<f32> = (0..n)
                        .map(|i| rng.unit() * [1.0, 3.0, 1e-4][i % 3])
                        .collect();
                    let start: Vec<f32> = (0..dim)
                        .map(|_| half::f16::from_bits(f16_of(&mut rng, m)).to_f32())
                        .collect();
                    let (mut got, mut want) = (start.clone(), start);
                    (l.accumulate_rows_f16)(&mut got, &cache, stride, &ms, &vs);
                    crate::math::accumulate_rows_f16(&mut want, &cache, stride, &ms, &vs);
                    for (d, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                            "{name} accumulate {dim} {m} dim {d}: {g} vs {w}"
                        );
                    }
                }
            }
            let mut xs: Vec<f32> = (0..=u32::MAX).step_by(65_537).map(f32::from_bits).collect();
            xs.extend([
                0.0,
                -0.0,
                f32::NEG_INFINITY,
                f32::INFINITY,
                -88.0,
                88.7,
                -103.9,
            ]);
            let mut got = xs.clone();
            (l.exp_in_place)(&mut got);
            for (x, g) in xs.iter().zip(&got) {
                let want = libm::expf(*x);
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "{name} expf({x:e}) = {g:e}, want {want:e}"
                );
            }
        }
    }

    /// Every x86-64 set this CPU runs has a batched kernel (matmul) for each format it covers.
    #[test]
    fn x86_64_sets_have_matmuls() {
        for fast in fast_sets() {
            if !fast.name().starts_with("x86_64-") {
                continue;
            }
            for ty in [
                GgmlType::Q3_K,
                GgmlType::Q4_1,
                GgmlType::Q5_1,
                GgmlType::Q4_K,
                GgmlType::Q5_K,
                GgmlType::Q6_K,
                GgmlType::Q8_0,
                GgmlType::Q4_0,
                GgmlType::Q5_0,
            ] {
                assert!(
                    fast.weight(ty).unwrap().cols.is_some(),
                    "{ty} has no matmul in {}",
                    fast.name()
                );
            }
        }
    }
}
