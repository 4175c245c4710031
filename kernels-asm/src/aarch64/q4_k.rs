//! Q4_K . Q8_K. Q4_K super-block (144 bytes): f16 d at 0, f16 dmin at 2, 12 bytes of packed
//! 6-bit scales and mins at 4, 128 nibble bytes at 16 (bytes 32c..32c+32 hold sub-block 2c in
//! their low nibbles and 2c + 1 in their high nibbles). Q8_K (292 bytes): f32 d at 0, 256
//! signed bytes at 4, 16 i16 sums of 16 quants at 260.
//! Scalar twin: `smolrun_core::quant::q4_k::vec_dot`.

use super::{whole_blocks, Q8_K_BYTES, QK_K};
use core::arch::aarch64::float32x4_t;
use core::arch::asm;

const Q4_K_BYTES: usize = 144;

/// The 6-bit scales and mins of the 8 sub-blocks (ggml's `get_scale_min_k4`).
#[inline(always)]
fn scales_and_mins(block: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut q = [0u8; 12];
    q.copy_from_slice(&block[4..16]);
    let (mut sc, mut mn) = ([0u8; 8], [0u8; 8]);
    for j in 0..4 {
        sc[j] = q[j] & 63;
        mn[j] = q[j + 4] & 63;
        sc[j + 4] = (q[j + 8] & 0xF) | ((q[j] >> 6) << 4);
        mn[j + 4] = (q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4);
    }
    (sc, mn)
}

/// One asm block per super-block. The loop `2:` runs over 4 chunks of 64 elements: it unpacks
/// 32 nibble bytes into v6, v7 (sub-block 2c) and v16, v17 (sub-block 2c + 1) and runs `$int`,
/// which multiplies them with the activation bytes v2..v5, scales them by the sub-block scales
/// read from `{sc}` and accumulates the integer lanes in v20 (and v21). After the loop: the
/// mins through the activation's 16-element sums, subtracted from `sumf` as the scalar twin
/// does, then `$lanes` adds d * (integer lanes) to the f32 lane sums `lo`, `hi`.
macro_rules! q4_k_row {
    ($w:expr, $act:expr, $nb:expr, $scale_ty:ty, [$($pre:literal),*], [$($int:literal),* $(,)?],
     [$($lanes:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let mut sumf = 0.0f32;
        // SAFETY (of the transmutes): float32x4_t is four f32s, any bits valid.
        let mut lo: float32x4_t = core::mem::transmute([0.0f32; 4]);
        let mut hi: float32x4_t = core::mem::transmute([0.0f32; 4]);
        for b in 0..$nb {
            let x = w.as_ptr().add(b * Q4_K_BYTES);
            let y = act.as_ptr().add(b * Q8_K_BYTES);
            let (sc, mn) = scales_and_mins(&w[b * Q4_K_BYTES..(b + 1) * Q4_K_BYTES]);
            let scales: [$scale_ty; 8] = sc.map(|s| s as $scale_ty);
            let mins: [i32; 8] = mn.map(|m| m as i32);
            asm!(
                $($pre,)*
                "movi v20.4s, #0",
                "movi v21.4s, #0",
                "movi v31.16b, #0x0f",
                "mov {cnt:w}, #4",
                "2:",
                "ld1 {{v0.16b, v1.16b}}, [{qs}], #32",
                "ld1 {{v2.16b, v3.16b, v4.16b, v5.16b}}, [{q8}], #64",
                "and v6.16b, v0.16b, v31.16b",
                "and v7.16b, v1.16b, v31.16b",
                "ushr v16.16b, v0.16b, #4",
                "ushr v17.16b, v1.16b, #4",
                $($int,)*
                "subs {cnt:w}, {cnt:w}, #1",
                "b.ne 2b",
                // {q8} now points at the activation's bsums. sumi_mins = sum over sub-blocks s of
                // (bsum[2s] + bsum[2s + 1]) * min[s], widened to i32 before adding.
                "ld1 {{v24.16b, v25.16b}}, [{q8}]",
                "saddlp v24.4s, v24.8h",
                "saddlp v25.4s, v25.8h",
                "ld1 {{v26.4s, v27.4s}}, [{mins}]",
                "mul v24.4s, v24.4s, v26.4s",
                "mla v24.4s, v25.4s, v27.4s",
                "addv s24, v24.4s",
                "scvtf s24, s24",
                "ldr s29, [{y}]",
                "ldr h28, [{x}, #2]",
                "fcvt s28, h28",
                "fmul s28, s28, s29",
                "fmul s24, s28, s24",
                "fsub {sumf:s}, {sumf:s}, s24",
                "ldr h30, [{x}]",
                "fcvt s30, h30",
                "fmul s30, s30, s29",
                $($lanes,)*
                x = in(reg) x,
                y = in(reg) y,
                qs = inout(reg) x.add(16) => _,
                q8 = inout(reg) y.add(4) => _,
                sc = inout(reg) scales.as_ptr() => _,
                mins = in(reg) mins.as_ptr(),
                cnt = out(reg) _,
                sumf = inout(vreg) sumf,
                lo = inout(vreg) lo,
                hi = inout(vreg) hi,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
                out("v5") _, out("v6") _, out("v7") _, out("v16") _, out("v17") _,
                out("v18") _, out("v19") _, out("v20") _, out("v21") _, out("v22") _,
                out("v23") _, out("v24") _, out("v25") _, out("v26") _, out("v27") _,
                out("v28") _, out("v29") _, out("v30") _, out("v31") _,
                options(nostack, readonly),
            );
        }
        let lo: [f32; 4] = core::mem::transmute(lo);
        let hi: [f32; 4] = core::mem::transmute(hi);
        (sumf, lo, hi)
    }};
}

/// Q4_K . Q8_K with widening multiplies (ARMv8.0). Bit-identical to the scalar twin: `smull`
/// of 8 bytes puts element e of a sub-block in lane e % 8, ggml's scalar lane layout, and each
/// i16 lane sums 4 products of at most 15 * 128.
pub fn vec_dot_q4_k_q8_k_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, Q4_K_BYTES, act, Q8_K_BYTES);
    // SAFETY: super-blocks 0..nb lie inside both slices; only base aarch64 NEON instructions.
    let (mut sumf, lo, hi) = unsafe {
        q4_k_row!(
            w,
            act,
            nb,
            i16,
            [],
            [
                "smull v18.8h, v6.8b, v2.8b",
                "smlal2 v18.8h, v6.16b, v2.16b",
                "smlal v18.8h, v7.8b, v3.8b",
                "smlal2 v18.8h, v7.16b, v3.16b",
                "smull v19.8h, v16.8b, v4.8b",
                "smlal2 v19.8h, v16.16b, v4.16b",
                "smlal v19.8h, v17.8b, v5.8b",
                "smlal2 v19.8h, v17.16b, v5.16b",
                "ld1r {{v22.8h}}, [{sc}], #2",
                "ld1r {{v23.8h}}, [{sc}], #2",
                "smlal v20.4s, v18.4h, v22.4h",
                "smlal2 v21.4s, v18.8h, v22.8h",
                "smlal v20.4s, v19.4h, v23.4h",
                "smlal2 v21.4s, v19.8h, v23.8h",
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
    for s in lo.into_iter().chain(hi) {
        sumf += s;
    }
    sumf
}

/// Q4_K . Q8_K with `sdot` (ARMv8.2 dotprod). Integer sums exact; the f32 lane sums follow
/// `sdot`'s lanes (4 neighbouring elements each), so the result differs from the scalar twin
/// by summation-order rounding only (bound in the module docs of `aarch64`).
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_q4_k_q8_k_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, Q4_K_BYTES, act, Q8_K_BYTES);
    // SAFETY: super-blocks 0..nb lie inside both slices; the caller vouches for dotprod.
    let (mut sumf, lo, _) = unsafe {
        q4_k_row!(
            w,
            act,
            nb,
            i32,
            [".arch_extension dotprod"],
            [
                "movi v18.4s, #0",
                "movi v19.4s, #0",
                "sdot v18.4s, v6.16b, v2.16b",
                "sdot v18.4s, v7.16b, v3.16b",
                "sdot v19.4s, v16.16b, v4.16b",
                "sdot v19.4s, v17.16b, v5.16b",
                "ld1r {{v22.4s}}, [{sc}], #4",
                "ld1r {{v23.4s}}, [{sc}], #4",
                "mla v20.4s, v18.4s, v22.4s",
                "mla v20.4s, v19.4s, v23.4s",
            ],
            [
                "scvtf v20.4s, v20.4s",
                "fmul v20.4s, v20.4s, v30.s[0]",
                "fadd {lo:v}.4s, {lo:v}.4s, v20.4s",
                "// {hi:v} stays zero: sdot leaves 4 integer lanes, not 8",
            ]
        )
    };
    for s in lo {
        sumf += s;
    }
    sumf
}
