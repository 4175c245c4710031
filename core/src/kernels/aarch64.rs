//! aarch64: the one place this architecture puts its kernels in a [`KernelSet`] (`install`, like
//! tract's per-architecture `plug`): the NEON kernels of `smolrun_kernels::aarch64`, with and
//! without dotprod, and the NEON faces of attention and SwiGLU. `install` checks
//! `features.neon` / `features.dotprod` (an ARMv8.0 core must never reach an sdot) and names
//! the set "aarch64-dotprod" or "aarch64-neon".
//!
//! `exactness.rs` and `math_exactness.rs` test whatever this installs against the scalar
//! code; core/tests/neon_exact.rs tests both faces of every kernel directly
//! (tools/test-aarch64.sh, qemu a76 and a53); the tests below check which face each set of
//! features gets.

use super::{ActTable, KernelSet, RepackedKernel, Q1_0_LUT16_SCALAR, Q2_0_LUT16_SCALAR};
use crate::kv_q8::AttentionLoopsQ8;
use crate::math::{self, AttentionLoops, DeltaRuleKernels};
use crate::platform::CpuFeatures;
use crate::quant::{q1_0_lut, q2_0_lut, GgmlType};
use smolrun_kernels::aarch64::{self as neon, attention as k, exp};

/// Installs the ARMv8.0 NEON kernels and the NEON faces of attention and SwiGLU (one face for
/// every core) when `features.neon` (every aarch64 CPU has it; a cleared flag keeps the set
/// scalar), and on top of them the sdot kernels when `features.dotprod`.
///
/// Unlike cpuid on x86-64, aarch64 has no unprivileged, portable way to confirm a feature
/// from no_std code (reading ID_AA64ISAR0_EL1 traps on iOS), so the dotprod flag is taken
/// as the platform detected it (getauxval(AT_HWCAP) & HWCAP_ASIMDDP on Linux/Android,
/// sysctl hw.optional.arm.FEAT_DotProd on iOS). A flag set by hand on a CPU without dotprod
/// makes the first sdot raise SIGILL, a clean crash, never a wrong result.
pub(super) fn install(features: &CpuFeatures, set: &mut KernelSet) {
    if !features.neon {
        return;
    }
    set.name = "aarch64-neon";
    // Attention over the f16 KV cache and SwiGLU: the NEON faces of math's scalar code.
    // A q8_0 cache: the Q8_0 row kernel for the keys' dots, the NEON value accumulation.
    set.attention = attention_faces!(ATTENTION_LOOPS, ATTENTION_LOOPS_Q8);
    set.swiglu = exp::swiglu;
    // The gated delta rule's fused step (Qwen3.5's recurrent layers), f32 and f16 state.
    set.delta_rule = DeltaRuleKernels {
        f32: delta_rule_neon,
        f16: delta_rule_f16_neon,
    };
    set.install(GgmlType::Q4_K, neon::vec_dot_q4_k_q8_k_neon, None, "neon");
    set.install(GgmlType::Q6_K, neon::vec_dot_q6_k_q8_k_neon, None, "neon");
    // Q3_K and Q5_K (#33): widening multiplies, the twins' lanes, bit for bit; one face for
    // every core (no sdot face yet: the dotprod set keeps these).
    set.install(GgmlType::Q3_K, neon::vec_dot_q3_k_q8_k_neon, None, "neon");
    set.install(GgmlType::Q5_K, neon::vec_dot_q5_k_q8_k_neon, None, "neon");
    // Q4_1 and Q5_1 (#33): the twins' block integers in asm, their float steps in Rust.
    set.install(GgmlType::Q4_1, neon::vec_dot_q4_1_q8_1_neon, None, "neon");
    set.install(GgmlType::Q5_1, neon::vec_dot_q5_1_q8_1_neon, None, "neon");
    set.install(GgmlType::Q8_0, neon::vec_dot_q8_0_q8_0_neon, None, "neon");
    set.install(GgmlType::Q4_0, neon::vec_dot_q4_0_q8_0_neon, None, "neon");
    set.install(GgmlType::Q5_0, neon::vec_dot_q5_0_q8_0_neon, None, "neon");
    set.install(GgmlType::Q2_K, neon::vec_dot_q2_k_q8_k_neon, None, "neon");
    set.install(GgmlType::TQ2_0, neon::vec_dot_tq2_0_q8_k_neon, None, "neon");
    set.install(GgmlType::F16, neon::vec_dot_f16_neon, None, "neon");
    set.install(GgmlType::F32, neon::vec_dot_f32_neon, None, "neon");
    set.install(GgmlType::Q1_0, neon::vec_dot_q1_0_q8_0_neon, None, "neon");
    set.install(GgmlType::Q2_0, neon::vec_dot_q2_0_q8_0_neon, None, "neon");
    set.install(GgmlType::TQ1_0, neon::vec_dot_tq1_0_q8_k_neon, None, "neon");
    // IQ4_NL, IQ4_XS (#33): `tbl` lookups of the level table, bit for bit the scalar twins.
    set.install(
        GgmlType::IQ4_NL,
        neon::vec_dot_iq4_nl_q8_0_neon,
        None,
        "neon",
    );
    set.install(
        GgmlType::IQ4_XS,
        neon::vec_dot_iq4_xs_q8_k_neon,
        None,
        "neon",
    );
    // IQ2_XXS (#33): grid and sign entries loaded by masked index, bit for bit the twin.
    set.install(
        GgmlType::IQ2_XXS,
        neon::vec_dot_iq2_xxs_q8_k_neon,
        None,
        "neon",
    );
    set.install(
        GgmlType::IQ3_XXS,
        neon::vec_dot_iq3_xxs_q8_k_neon,
        None,
        "neon",
    );
    // IQ2_XS, IQ2_S, IQ3_S (#33): the same, whole sign bytes spread by `tbl`/`cmtst`.
    set.install(
        GgmlType::IQ2_XS,
        neon::vec_dot_iq2_xs_q8_k_neon,
        None,
        "neon",
    );
    set.install(GgmlType::IQ2_S, neon::vec_dot_iq2_s_q8_k_neon, None, "neon");
    set.install(GgmlType::IQ3_S, neon::vec_dot_iq3_s_q8_k_neon, None, "neon");
    set.install(GgmlType::IQ1_S, neon::vec_dot_iq1_s_q8_k_neon, None, "neon");
    set.install(GgmlType::IQ1_M, neon::vec_dot_iq1_m_q8_k_neon, None, "neon");
    // Q1_0 by table lookup (rows in groups of 16, one `tbl` per 4 weights of 16 rows), with
    // and without dotprod: llvm-mca (tools/lowbit-asm.py mca) predicts per row and 128
    // weights 22.4 cycles on the A53 and 5.1 on the A7 against 100 and 19.5 for the direct
    // ARMv8.0 kernel, and 20.1 on the A55 against 74 for the direct sdot kernel. The one
    // vec_dot of the entry stays the direct kernel (rows the repack does not cover).
    set.add_repacked(GgmlType::Q1_0, Q1_0_LUT16);
    // Q2_0 likewise (2-activation tables): 23.6 cycles per row and 64 weights on the A53 and
    // 4.4 on the A7 against 83 and 11.9 direct, 20.1 on the A55 against 53 with sdot.
    set.add_repacked(GgmlType::Q2_0, Q2_0_LUT16);
    if !features.dotprod {
        return;
    }
    set.name = "aarch64-dotprod";
    // The q8_0 cache's keys' dots with sdot.
    set.attention.q8 = ATTENTION_LOOPS_Q8_DOTPROD;
    set.install(GgmlType::Q4_K, q4_k_dotprod, None, "dotprod");
    set.install(GgmlType::Q6_K, q6_k_dotprod, None, "dotprod");
    set.install(GgmlType::Q4_1, q4_1_dotprod, None, "dotprod");
    set.install(GgmlType::Q5_1, q5_1_dotprod, None, "dotprod");
    set.install(GgmlType::Q8_0, q8_0_dotprod, None, "dotprod");
    set.install(GgmlType::Q4_0, q4_0_dotprod, None, "dotprod");
    set.install(GgmlType::Q5_0, q5_0_dotprod, None, "dotprod");
    set.install(GgmlType::Q2_K, q2_k_dotprod, None, "dotprod");
    set.install(GgmlType::TQ2_0, tq2_0_dotprod, None, "dotprod");
    set.install(GgmlType::Q1_0, q1_0_dotprod, None, "dotprod");
    set.install(GgmlType::Q2_0, q2_0_dotprod, None, "dotprod");
    set.install(GgmlType::TQ1_0, tq1_0_dotprod, None, "dotprod");
    set.install(GgmlType::IQ4_NL, iq4_nl_dotprod, None, "dotprod");
    set.install(GgmlType::IQ4_XS, iq4_xs_dotprod, None, "dotprod");
    set.install(GgmlType::IQ2_XXS, iq2_xxs_dotprod, None, "dotprod");
    set.install(GgmlType::IQ3_XXS, iq3_xxs_dotprod, None, "dotprod");
    set.install(GgmlType::IQ2_XS, iq2_xs_dotprod, None, "dotprod");
    set.install(GgmlType::IQ2_S, iq2_s_dotprod, None, "dotprod");
    set.install(GgmlType::IQ3_S, iq3_s_dotprod, None, "dotprod");
    set.install(GgmlType::IQ1_S, iq1_s_dotprod, None, "dotprod");
    set.install(GgmlType::IQ1_M, iq1_m_dotprod, None, "dotprod");
    // Rows interleaved by 4: one sdot by activation element feeds 4 rows. The tail rows
    // of a matrix run through the one-row dotprod kernel inside the same call.
    set.add_repacked(
        GgmlType::Q4_K,
        RepackedKernel {
            layout: "q4_k_x4",
            group_rows: 4,
            bytes: neon::q4_k_x4_bytes,
            repack: neon::repack_q4_k_x4,
            rows: q4_k_x4_dotprod,
            face: "dotprod-x4",
            act_table: None,
        },
    );
    set.add_repacked(
        GgmlType::Q8_0,
        RepackedKernel {
            layout: "q8_0_x4",
            group_rows: 4,
            bytes: neon::q8_0_x4_bytes,
            repack: neon::repack_q8_0_x4,
            rows: q8_0_x4_dotprod,
            face: "dotprod-x4",
            act_table: None,
        },
    );
    set.add_repacked(
        GgmlType::Q5_0,
        RepackedKernel {
            layout: "q5_0_x4",
            group_rows: 4,
            bytes: neon::q5_0_x4_bytes,
            repack: neon::repack_q5_0_x4,
            rows: q5_0_x4_dotprod,
            face: "dotprod-x4",
            act_table: None,
        },
    );
}

/// The Q1_0 lookup-table kernel, NEON face (ARMv8.0): the layout and tables of the scalar face
/// `Q1_0_LUT16_SCALAR` (same layout name, so a repack cache serves both), built and dotted in asm.
pub(super) const Q1_0_LUT16: RepackedKernel = RepackedKernel {
    rows: neon::matvec_q1_0_lut16_neon,
    face: "neon-lut16",
    act_table: Some(ActTable {
        bytes: q1_0_lut::table_bytes,
        build: neon::build_table_q1_0_lut_neon,
    }),
    ..Q1_0_LUT16_SCALAR
};

/// The Q2_0 lookup-table kernel, NEON face: the layout and tables of `Q2_0_LUT16_SCALAR`.
pub(super) const Q2_0_LUT16: RepackedKernel = RepackedKernel {
    rows: neon::matvec_q2_0_lut16_neon,
    face: "neon-lut16",
    act_table: Some(ActTable {
        bytes: q2_0_lut::table_bytes,
        build: neon::build_table_q2_0_lut_neon,
    }),
    ..Q2_0_LUT16_SCALAR
};

// =============================================================================================
// Weight kernels that need dotprod: the safe wrappers `install` puts in the set.
// =============================================================================================

// SAFETY (the three below): installed only when the platform reported dotprod; the x4
// matvecs read only whole blocks inside both slices and give 0 for rows they lack.
fn q4_k_x4_dotprod(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { neon::matvec_q4_k_x4_dotprod(n, w, a, out) }
}
fn q8_0_x4_dotprod(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { neon::matvec_q8_0_x4_dotprod(n, w, a, out) }
}
fn q5_0_x4_dotprod(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    unsafe { neon::matvec_q5_0_x4_dotprod(n, w, a, out) }
}

// SAFETY (every function below): installed only by `install` when the platform reported
// dotprod. The kernels read only whole blocks inside both slices.
fn q4_k_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_q4_k_q8_k_dotprod(n, w, a) }
}
fn q4_1_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_q4_1_q8_1_dotprod(n, w, a) }
}
fn q5_1_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_q5_1_q8_1_dotprod(n, w, a) }
}
fn q6_k_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_q6_k_q8_k_dotprod(n, w, a) }
}
fn q8_0_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_q8_0_q8_0_dotprod(n, w, a) }
}
fn q4_0_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_q4_0_q8_0_dotprod(n, w, a) }
}
fn q5_0_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_q5_0_q8_0_dotprod(n, w, a) }
}
fn q2_k_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_q2_k_q8_k_dotprod(n, w, a) }
}
fn tq2_0_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_tq2_0_q8_k_dotprod(n, w, a) }
}
fn q1_0_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_q1_0_q8_0_dotprod(n, w, a) }
}
fn q2_0_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_q2_0_q8_0_dotprod(n, w, a) }
}
fn tq1_0_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_tq1_0_q8_k_dotprod(n, w, a) }
}
fn iq4_nl_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_iq4_nl_q8_0_dotprod(n, w, a) }
}
fn iq4_xs_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_iq4_xs_q8_k_dotprod(n, w, a) }
}
fn iq2_xxs_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_iq2_xxs_q8_k_dotprod(n, w, a) }
}
fn iq3_xxs_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_iq3_xxs_q8_k_dotprod(n, w, a) }
}
fn iq2_xs_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_iq2_xs_q8_k_dotprod(n, w, a) }
}
fn iq2_s_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_iq2_s_q8_k_dotprod(n, w, a) }
}
fn iq1_m_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_iq1_m_q8_k_dotprod(n, w, a) }
}
fn iq1_s_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_iq1_s_q8_k_dotprod(n, w, a) }
}
fn iq3_s_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
    unsafe { neon::vec_dot_iq3_s_q8_k_dotprod(n, w, a) }
}

// =============================================================================================
// Attention over the f16 KV cache (the NEON loops of `math::attention_head_with`, bit for bit
// the scalar `math::attention_head`) and SwiGLU (`math::swiglu`, its `libm::expf` lane by lane).
// =============================================================================================

// The gated delta rule (smolrun_kernels::aarch64::delta_rule, bit for bit
// `math::delta_rule_step{,_f16}`): head dims that are a multiple of 16 (Qwen3.5's 128, the
// synthetic models' 32) in pairs of rows; an odd last row and any other head dim run the
// scalar step, which gives the same bits.
fn delta_rule_neon(
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
    neon::delta_rule::delta_rule_f32_neon(s, q, k, v, decay, beta, scale, out);
    let done = out.len().min(v.len()).min(s.len() / dk) / 2 * 2;
    if done < out.len() {
        math::delta_rule_step(
            &mut s[done * dk..],
            q,
            k,
            &v[done.min(v.len())..],
            decay,
            beta,
            &mut out[done..],
        );
    }
}

fn delta_rule_f16_neon(
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
    neon::delta_rule::delta_rule_f16_neon(s, q, k, v, decay, beta, scale, out);
    let done = out.len().min(v.len()).min(s.len() / dk) / 2 * 2;
    if done < out.len() {
        math::delta_rule_step_f16(
            &mut s[done * dk..],
            q,
            k,
            &v[done.min(v.len())..],
            decay,
            beta,
            &mut out[done..],
        );
    }
}

/// The NEON loops of attention over a q8_0 cache (`kv_q8::attention_q8_with`), bit for bit
/// `kv_q8::AttentionLoopsQ8::SCALAR`: the keys' dots are the Q8_0 . Q8_0 row kernel, which
/// keeps the scalar `q8_0::vec_dot`'s bits (the scalar `kv_q8::key_dots` is that function).
pub(super) const ATTENTION_LOOPS_Q8: AttentionLoopsQ8 = AttentionLoopsQ8 {
    key_dots: |qq, keys, stride, scores| {
        key_dots_q8_0_with(neon::vec_dot_q8_0_q8_0_neon, qq, keys, stride, scores)
    },
    accumulate_rows: k::accumulate_rows_q8_0,
    exp_in_place: math::exp_in_place,
};

/// [`ATTENTION_LOOPS_Q8`] with the sdot row kernel for the keys' dots (installed only when
/// `features.dotprod`).
pub(super) const ATTENTION_LOOPS_Q8_DOTPROD: AttentionLoopsQ8 = AttentionLoopsQ8 {
    key_dots: |qq, keys, stride, scores| key_dots_q8_0_with(q8_0_dotprod, qq, keys, stride, scores),
    ..ATTENTION_LOOPS_Q8
};

/// `scores[i]` = `dot(key_i, qq)` for the key rows at `stride` bytes apart that `keys` holds.
fn key_dots_q8_0_with(
    dot: fn(usize, &[u8], &[u8]) -> f32,
    qq: &[u8],
    keys: &[u8],
    stride: usize,
    scores: &mut [f32],
) {
    let n = qq.len() / 34 * 32;
    let bytes = qq.len() / 34 * 34;
    for (i, s) in scores.iter_mut().enumerate() {
        let Some(k) = keys.get(i * stride..i * stride + bytes) else {
            return;
        };
        *s = dot(n, k, &qq[..bytes]);
    }
}

pub(super) const ATTENTION_LOOPS: AttentionLoops = AttentionLoops {
    key_dots_lanes64: k::key_dots_lanes64,
    key_dots_sequential: k::key_dots_sequential,
    weighted_values: k::weighted_values,
    rescale_f16: k::rescale_f16,
    accumulate_f16: k::accumulate_f16,
    accumulate_rows_f16: accumulate_rows_f16_neon,
    exp_in_place: math::exp_in_place,
};

/// `math::accumulate_rows_f16` through the NEON one-row loops (row by row: the accumulator
/// goes through memory between rows).
fn accumulate_rows_f16_neon(
    out: &mut [f32],
    values: &[u16],
    stride: usize,
    ms: &[f32],
    vs: &[f32],
) {
    math::accumulate_rows_f16_with(
        k::rescale_f16,
        k::accumulate_f16,
        out,
        values,
        stride,
        ms,
        vs,
    );
}

#[cfg(test)]
mod tests {
    use super::super::exactness::detected_features;
    use super::super::KernelSet;
    use crate::platform::CpuFeatures;
    use crate::quant::GgmlType;
    use std::println;
    use std::vec;

    /// The dotprod flag alone decides between the two aarch64 faces: without it no entry may
    /// be an sdot kernel (on the A53 under qemu one would SIGILL in the tests below).
    #[test]
    fn aarch64_selects_the_face_the_features_allow() {
        let covered = [
            (GgmlType::Q4_K, true),
            (GgmlType::Q6_K, true),
            (GgmlType::Q3_K, false),
            (GgmlType::Q5_K, false),
            (GgmlType::Q4_1, true),
            (GgmlType::Q5_1, true),
            (GgmlType::Q8_0, true),
            (GgmlType::Q4_0, true),
            (GgmlType::Q5_0, true),
            (GgmlType::Q2_K, true),
            (GgmlType::TQ2_0, true),
            (GgmlType::F16, false),
            (GgmlType::F32, false),
            (GgmlType::Q1_0, true),
            (GgmlType::Q2_0, true),
            (GgmlType::TQ1_0, true),
            (GgmlType::IQ4_NL, true),
            (GgmlType::IQ4_XS, true),
            (GgmlType::IQ2_XXS, true),
            (GgmlType::IQ3_XXS, true),
            (GgmlType::IQ2_XS, true),
            (GgmlType::IQ2_S, true),
            (GgmlType::IQ3_S, true),
            (GgmlType::IQ1_S, true),
            (GgmlType::IQ1_M, true),
        ];
        let neon_only = CpuFeatures {
            neon: true,
            ..CpuFeatures::default()
        };
        let set = KernelSet::select(&neon_only);
        assert_eq!(set.name(), "aarch64-neon");
        for (ty, _) in covered {
            assert_eq!(set.weight(ty).unwrap().face, "neon", "{ty}");
        }
        assert!(set.weights.iter().all(|k| k.face != "dotprod"));
        let features = detected_features();
        if features.dotprod {
            let set = KernelSet::select(&features);
            assert_eq!(set.name(), "aarch64-dotprod");
            for (ty, has_sdot) in covered {
                let face = if has_sdot { "dotprod" } else { "neon" };
                assert_eq!(set.weight(ty).unwrap().face, face, "{ty}");
            }
        } else {
            assert_eq!(KernelSet::select(&features).name(), "aarch64-neon");
            println!("notice: this CPU has no dotprod; the sdot kernels are not selected");
        }
    }

    /// Q1_0 and Q2_0 run through the lookup-table kernels (repacked, with activation tables)
    /// with and without dotprod; `exactness::repacked_kernels_match_scalar_on_every_row` tests the
    /// kernel itself.
    #[test]
    fn q1_0_and_q2_0_take_the_table_kernels() {
        let neon_only = CpuFeatures {
            neon: true,
            ..CpuFeatures::default()
        };
        let mut sets = vec![KernelSet::select(&neon_only)];
        if detected_features().dotprod {
            sets.push(KernelSet::select(&detected_features()));
        }
        for set in sets {
            for (ty, layout) in [
                (GgmlType::Q1_0, "q1_0_lut16"),
                (GgmlType::Q2_0, "q2_0_lut16"),
            ] {
                let rk = set.weight(ty).unwrap().repacked.unwrap();
                assert_eq!(
                    (rk.layout, rk.face, rk.group_rows),
                    (layout, "neon-lut16", 16),
                    "{}",
                    set.name()
                );
                assert!(rk.act_table.is_some());
            }
        }
    }

    /// With dotprod, the Q4_K, Q8_0 and Q5_0 entries carry their x4 (row-interleaved) kernels;
    /// `exactness::repacked_kernels_match_scalar_on_every_row` tests them against the scalar twins.
    #[test]
    fn dotprod_sets_have_the_x4_kernels() {
        let set = KernelSet::select(&detected_features());
        if detected_features().dotprod {
            for ty in [GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q5_0] {
                assert!(
                    set.weight(ty).unwrap().repacked.is_some(),
                    "{ty} has no x4 kernel"
                );
            }
        }
    }
}
