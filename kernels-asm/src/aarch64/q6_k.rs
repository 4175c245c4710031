//! Q6_K . Q8_K. Q6_K super-block (210 bytes): low 4 bits `ql` at 0 (128 bytes), high 2 bits
//! `qh` at 128 (64 bytes), 16 signed sub-block scales at 192, f16 d at 208. In half h (128
//! elements; ql[64h..], qh[32h..]), for l in 0..32: element l is ql[l] low nibble with qh[l]
//! bits 0-1, l + 32 is ql[l + 32] low with bits 2-3, l + 64 is ql[l] high with bits 4-5,
//! l + 96 is ql[l + 32] high with bits 6-7; each minus 32. Sub-blocks are 16 elements.
//! Scalar twin: `smolrun_core::quant::q6_k::vec_dot`.

use super::{whole_blocks, Q8_K_BYTES, QK_K};
use core::arch::aarch64::float32x4_t;
use core::arch::asm;

const Q6_K_BYTES: usize = 210;

/// Builds the quants of one quarter of a half (32 elements) into v6 (first 16) and v16 (next
/// 16), minus 32: `low` picks ql[0..32] (v0, v1) or ql[32..64] (v2, v3) and which nibble,
/// `high` the shift that brings the quarter's 2 bits of qh (v4, v5) to bits 4-5.
macro_rules! quarter {
    ($low0:literal, $low1:literal, $nib:tt, $high:tt) => {
        concat!(
            quarter!(@nib $nib, "v6", $low0), "\n",
            quarter!(@nib $nib, "v16", $low1), "\n",
            quarter!(@high $high, "v17", "v4"), "\n",
            quarter!(@high $high, "v19", "v5"), "\n",
            "and v17.16b, v17.16b, v30.16b\n",
            "and v19.16b, v19.16b, v30.16b\n",
            "orr v6.16b, v6.16b, v17.16b\n",
            "orr v16.16b, v16.16b, v19.16b\n",
            "sub v6.16b, v6.16b, v29.16b\n",
            "sub v16.16b, v16.16b, v29.16b\n",
            "ld1 {{v22.16b, v23.16b}}, [{q8}], #32\n",
        )
    };
    (@nib "low", $dst:literal, $src:literal) => {
        concat!("and ", $dst, ".16b, ", $src, ".16b, v31.16b")
    };
    (@nib "high", $dst:literal, $src:literal) => {
        concat!("ushr ", $dst, ".16b, ", $src, ".16b, #4")
    };
    (@high "shl4", $dst:literal, $src:literal) => {
        concat!("shl ", $dst, ".16b, ", $src, ".16b, #4")
    };
    (@high "shl2", $dst:literal, $src:literal) => {
        concat!("shl ", $dst, ".16b, ", $src, ".16b, #2")
    };
    (@high "none", $dst:literal, $src:literal) => {
        concat!("mov ", $dst, ".16b, ", $src, ".16b")
    };
    (@high "shr2", $dst:literal, $src:literal) => {
        concat!("ushr ", $dst, ".16b, ", $src, ".16b, #2")
    };
}

/// Widening multiply of sub-blocks `k` (v6 x v22) and `k + 1` (v16 x v23) of the current
/// half, 8 lanes (element e in lane e % 8; each i16 lane sums 2 products of at most 32 * 128),
/// scaled by the i16 scales in v7 into the i32 lanes v20 (0..3) and v21 (4..7).
macro_rules! mac_neon {
    ($k:literal, $k1:literal) => {
        concat!(
            "smull v18.8h, v6.8b, v22.8b\n",
            "smlal2 v18.8h, v6.16b, v22.16b\n",
            "smlal v20.4s, v18.4h, v7.h[",
            $k,
            "]\n",
            "smlal2 v21.4s, v18.8h, v7.h[",
            $k,
            "]\n",
            "smull v18.8h, v16.8b, v23.8b\n",
            "smlal2 v18.8h, v16.16b, v23.16b\n",
            "smlal v20.4s, v18.4h, v7.h[",
            $k1,
            "]\n",
            "smlal2 v21.4s, v18.8h, v7.h[",
            $k1,
            "]\n",
        )
    };
}

/// `sdot` of sub-blocks (v6 x v22) and (v16 x v23), scaled by the i32 scales `$s0`, `$s1`
/// (register.s[index]) into the 4 i32 lanes of v20.
macro_rules! mac_sdot {
    ($s0:literal, $s1:literal) => {
        concat!(
            "movi v18.4s, #0\n",
            "sdot v18.4s, v6.16b, v22.16b\n",
            "mla v20.4s, v18.4s, ",
            $s0,
            "\n",
            "movi v18.4s, #0\n",
            "sdot v18.4s, v16.16b, v23.16b\n",
            "mla v20.4s, v18.4s, ",
            $s1,
            "\n",
        )
    };
}

/// One asm block per super-block; the loop `2:` runs over the two halves. `$scales` loads the
/// half's 8 scales, `$q0..$q3` are the four quarters (unpack + multiply). Afterwards `$lanes`
/// adds d * (integer lanes) to the f32 lane sums `lo`, `hi`.
macro_rules! q6_k_row {
    ($w:expr, $act:expr, $nb:expr, [$($pre:literal),*], [$($scales:literal),*],
     [$($q:expr),*], [$($lanes:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        // SAFETY (of the transmutes): float32x4_t is four f32s, any bits valid.
        let mut lo: float32x4_t = core::mem::transmute([0.0f32; 4]);
        let mut hi: float32x4_t = core::mem::transmute([0.0f32; 4]);
        for b in 0..$nb {
            let x = w.as_ptr().add(b * Q6_K_BYTES);
            let y = act.as_ptr().add(b * Q8_K_BYTES);
            asm!(
                $($pre,)*
                "movi v20.4s, #0",
                "movi v21.4s, #0",
                "movi v31.16b, #0x0f",
                "movi v30.16b, #0x30",
                "movi v29.16b, #32",
                "mov {cnt:w}, #2",
                "2:",
                "ld1 {{v0.16b, v1.16b, v2.16b, v3.16b}}, [{ql}], #64",
                "ld1 {{v4.16b, v5.16b}}, [{qh}], #32",
                $($scales,)*
                $($q,)*
                "subs {cnt:w}, {cnt:w}, #1",
                "b.ne 2b",
                "ldr h28, [{x}, #208]",
                "fcvt s28, h28",
                "ldr s29, [{y}]",
                "fmul s30, s28, s29",
                $($lanes,)*
                x = in(reg) x,
                y = in(reg) y,
                ql = inout(reg) x => _,
                qh = inout(reg) x.add(128) => _,
                sc = inout(reg) x.add(192) => _,
                q8 = inout(reg) y.add(4) => _,
                cnt = out(reg) _,
                lo = inout(vreg) lo,
                hi = inout(vreg) hi,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
                out("v5") _, out("v6") _, out("v7") _, out("v16") _, out("v17") _,
                out("v18") _, out("v19") _, out("v20") _, out("v21") _, out("v22") _,
                out("v23") _, out("v24") _, out("v25") _, out("v28") _, out("v29") _,
                out("v30") _, out("v31") _,
                options(nostack, readonly, pure),
            );
        }
        let lo: [f32; 4] = core::mem::transmute(lo);
        let hi: [f32; 4] = core::mem::transmute(hi);
        (lo, hi)
    }};
}

/// Q6_K . Q8_K with widening multiplies (ARMv8.0). Bit-identical to the scalar twin (8 lanes
/// in ggml's scalar layout, f32 lane sums added in order at the end).
pub fn vec_dot_q6_k_q8_k_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, Q6_K_BYTES, act, Q8_K_BYTES);
    // SAFETY: super-blocks 0..nb lie inside both slices; only base aarch64 NEON instructions.
    let (lo, hi) = unsafe {
        q6_k_row!(
            w,
            act,
            nb,
            [],
            ["ld1 {{v7.8b}}, [{sc}], #8", "sxtl v7.8h, v7.8b"],
            [
                quarter!("v0", "v1", "low", "shl4"),
                mac_neon!(0, 1),
                quarter!("v2", "v3", "low", "shl2"),
                mac_neon!(2, 3),
                quarter!("v0", "v1", "high", "none"),
                mac_neon!(4, 5),
                quarter!("v2", "v3", "high", "shr2"),
                mac_neon!(6, 7)
            ],
            [
                "scvtf v20.4s, v20.4s",
                "scvtf v21.4s, v21.4s",
                "fmul v20.4s, v20.4s, v30.s[0]",
                "fmul v21.4s, v21.4s, v30.s[0]",
                "fadd {lo:v}.4s, {lo:v}.4s, v20.4s",
                "fadd {hi:v}.4s, {hi:v}.4s, v21.4s",
            ]
        )
    };
    let mut sumf = 0.0f32;
    for s in lo.into_iter().chain(hi) {
        sumf += s;
    }
    sumf
}

/// Q6_K . Q8_K with `sdot` (ARMv8.2 dotprod). Integer sums exact; the f32 lane sums follow
/// `sdot`'s lanes, so the result differs from the scalar twin by summation-order rounding only
/// (bound in the module docs of `aarch64`).
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_q6_k_q8_k_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, Q6_K_BYTES, act, Q8_K_BYTES);
    // SAFETY: super-blocks 0..nb lie inside both slices; the caller vouches for dotprod.
    let (lo, _) = unsafe {
        q6_k_row!(
            w,
            act,
            nb,
            [".arch_extension dotprod"],
            [
                "ld1 {{v24.8b}}, [{sc}], #8",
                "sxtl v24.8h, v24.8b",
                "sxtl2 v25.4s, v24.8h",
                "sxtl v24.4s, v24.4h"
            ],
            [
                quarter!("v0", "v1", "low", "shl4"),
                mac_sdot!("v24.s[0]", "v24.s[1]"),
                quarter!("v2", "v3", "low", "shl2"),
                mac_sdot!("v24.s[2]", "v24.s[3]"),
                quarter!("v0", "v1", "high", "none"),
                mac_sdot!("v25.s[0]", "v25.s[1]"),
                quarter!("v2", "v3", "high", "shr2"),
                mac_sdot!("v25.s[2]", "v25.s[3]")
            ],
            [
                "scvtf v20.4s, v20.4s",
                "fmul v20.4s, v20.4s, v30.s[0]",
                "fadd {lo:v}.4s, {lo:v}.4s, v20.4s",
                "// {hi:v} stays zero: sdot leaves 4 integer lanes, not 8",
            ]
        )
    };
    let mut sumf = 0.0f32;
    for s in lo {
        sumf += s;
    }
    sumf
}
