//! IQ4_NL . Q8_0 and IQ4_XS . Q8_K (#33). IQ4_NL block (18 bytes): f16 d at 0, 16 index bytes
//! at 2; IQ4_XS super-block (136 bytes): f16 d at 0, u16 scales_h at 2, 4 bytes scales_l at 4,
//! 128 index bytes at 8 (16 per sub-block of 32). In both, byte j of a 32-element group holds
//! element j's index in its low nibble and element j + 16's in its high nibble, and an index
//! selects one of the 16 levels of `kvalues_iq4nl`.
//!
//! The integer part runs in `asm!` (`group_sums_*`): per group of 32, the nibbles are split
//! (`and`, `ushr`) and looked up with one `tbl` each in the 16-byte level table (a nibble is
//! 0..15, so `tbl` never leaves the table: no byte of a file reaches outside it), then dotted
//! with the 32 activations: `smull`/`smlal` (two products per i16 lane, |127 * 128| * 2 <
//! 2^15), pairwise widened into i32 (`saddlp`/`sadalp`), or `sdot` with dotprod. The sums of a
//! run of groups are stored to a small stack buffer, and the float part then runs in Rust, the
//! scalar twins' operations in their order (`smolrun_core::quant::iq4_nl::vec_dot`:
//! sumf += (dy * dx) * sumi; `iq4_xs::vec_dot`: sumf += (dx * dy * (ls - 32)) * sumi per
//! sub-block), so both faces return the scalar result bit for bit.

use super::{whole_blocks, Q8_0_BYTES, Q8_K_BYTES, QK, QK_K};
use core::arch::asm;

const IQ4_NL_BYTES: usize = 18;
const IQ4_XS_BYTES: usize = 136;

/// ggml's `kvalues_iq4nl`.
static KVALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Groups of 32 whose integer sums are gathered before the float part runs.
const RUN: usize = 32;

/// `out[g]` = the dot of the 32 levels indexed by the 16 bytes at `x + g * xs` with the 32 i8
/// activations at `y + g * ys`, for g in 0..n (n >= 1), with ARMv8.0 widening multiplies.
///
/// # Safety
/// Every group read must lie inside its slice; `out` holds n values.
#[inline(always)]
unsafe fn group_sums_neon(
    x: *const u8,
    xs: usize,
    y: *const u8,
    ys: usize,
    n: usize,
    out: *mut i32,
) {
    asm!(
        "ld1 {{v31.16b}}, [{t}]",
        "movi v30.16b, #0x0f",
        "2:",
        "ld1 {{v0.16b}}, [{x}], {xs}",
        "ld1 {{v2.16b, v3.16b}}, [{y}], {ys}",
        "and v8.16b, v0.16b, v30.16b",
        "ushr v9.16b, v0.16b, #4",
        "tbl v8.16b, {{v31.16b}}, v8.16b",
        "tbl v9.16b, {{v31.16b}}, v9.16b",
        "smull v4.8h, v8.8b, v2.8b",
        "smull2 v5.8h, v8.16b, v2.16b",
        "smlal v4.8h, v9.8b, v3.8b",
        "smlal2 v5.8h, v9.16b, v3.16b",
        "saddlp v4.4s, v4.8h",
        "sadalp v4.4s, v5.8h",
        "addv s4, v4.4s",
        "str s4, [{o}], #4",
        "subs {n}, {n}, #1",
        "b.ne 2b",
        t = in(reg) KVALUES.as_ptr(),
        x = inout(reg) x => _,
        xs = in(reg) xs,
        y = inout(reg) y => _,
        ys = in(reg) ys,
        n = inout(reg) n => _,
        o = inout(reg) out => _,
        out("v0") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _,
        out("v8") _, out("v9") _, out("v30") _, out("v31") _,
        options(nostack),
    );
}

/// [`group_sums_neon`] with `sdot` (ARMv8.2 dotprod).
///
/// # Safety
/// As [`group_sums_neon`], and the CPU must implement dotprod.
#[inline(always)]
unsafe fn group_sums_dotprod(
    x: *const u8,
    xs: usize,
    y: *const u8,
    ys: usize,
    n: usize,
    out: *mut i32,
) {
    asm!(
        ".arch_extension dotprod",
        "ld1 {{v31.16b}}, [{t}]",
        "movi v30.16b, #0x0f",
        "2:",
        "ld1 {{v0.16b}}, [{x}], {xs}",
        "ld1 {{v2.16b, v3.16b}}, [{y}], {ys}",
        "movi v4.4s, #0",
        "and v8.16b, v0.16b, v30.16b",
        "ushr v9.16b, v0.16b, #4",
        "tbl v8.16b, {{v31.16b}}, v8.16b",
        "tbl v9.16b, {{v31.16b}}, v9.16b",
        "sdot v4.4s, v8.16b, v2.16b",
        "sdot v4.4s, v9.16b, v3.16b",
        "addv s4, v4.4s",
        "str s4, [{o}], #4",
        "subs {n}, {n}, #1",
        "b.ne 2b",
        t = in(reg) KVALUES.as_ptr(),
        x = inout(reg) x => _,
        xs = in(reg) xs,
        y = inout(reg) y => _,
        ys = in(reg) ys,
        n = inout(reg) n => _,
        o = inout(reg) out => _,
        out("v0") _, out("v2") _, out("v3") _, out("v4") _,
        out("v8") _, out("v9") _, out("v30") _, out("v31") _,
        options(nostack),
    );
}

#[inline(always)]
fn f16_at(b: &[u8], off: usize) -> f32 {
    super::float::f16_to_f32(u16::from_le_bytes([b[off], b[off + 1]]))
}

/// IQ4_NL . Q8_0 over `nb` blocks, with `sums` filling a run of group sums.
#[inline(always)]
fn iq4_nl_row(
    nb: usize,
    w: &[u8],
    act: &[u8],
    sums: unsafe fn(*const u8, usize, *const u8, usize, usize, *mut i32),
) -> f32 {
    let mut buf = [0i32; RUN];
    let mut sumf = 0.0f32;
    let mut b0 = 0;
    while b0 < nb {
        let c = (nb - b0).min(RUN);
        // SAFETY: blocks b0..b0 + c lie inside both slices (nb = whole_blocks), c >= 1.
        unsafe {
            sums(
                w.as_ptr().add(b0 * IQ4_NL_BYTES + 2),
                IQ4_NL_BYTES,
                act.as_ptr().add(b0 * Q8_0_BYTES + 2),
                Q8_0_BYTES,
                c,
                buf.as_mut_ptr(),
            )
        };
        for (k, &s) in buf[..c].iter().enumerate() {
            let b = b0 + k;
            let d = f16_at(act, b * Q8_0_BYTES) * f16_at(w, b * IQ4_NL_BYTES);
            sumf += d * s as f32;
        }
        b0 += c;
    }
    sumf
}

/// IQ4_NL . Q8_0 with widening multiplies (ARMv8.0). Bit-identical to the scalar twin.
pub fn vec_dot_iq4_nl_q8_0_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK, w, IQ4_NL_BYTES, act, Q8_0_BYTES);
    iq4_nl_row(nb, w, act, group_sums_neon)
}

/// IQ4_NL . Q8_0 with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_iq4_nl_q8_0_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK, w, IQ4_NL_BYTES, act, Q8_0_BYTES);
    iq4_nl_row(nb, w, act, group_sums_dotprod)
}

/// IQ4_XS . Q8_K over `nb` super-blocks.
#[inline(always)]
fn iq4_xs_row(
    nb: usize,
    w: &[u8],
    act: &[u8],
    sums: unsafe fn(*const u8, usize, *const u8, usize, usize, *mut i32),
) -> f32 {
    let mut buf = [0i32; 8];
    let mut sumf = 0.0f32;
    for i in 0..nb {
        let x = &w[i * IQ4_XS_BYTES..(i + 1) * IQ4_XS_BYTES];
        let y = &act[i * Q8_K_BYTES..(i + 1) * Q8_K_BYTES];
        // SAFETY: the 8 groups lie inside this super-block of both slices.
        unsafe {
            sums(
                x.as_ptr().add(8),
                16,
                y.as_ptr().add(4),
                32,
                8,
                buf.as_mut_ptr(),
            )
        };
        let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let d4d8 = f16_at(x, 0) * dy;
        let h = u16::from_le_bytes([x[2], x[3]]);
        for (ib, &s) in buf.iter().enumerate() {
            let low = (x[4 + ib / 2] >> (4 * (ib % 2))) & 0xF;
            let ls = (low | ((((h >> (2 * ib)) & 3) as u8) << 4)) as i32;
            let dl = d4d8 * (ls - 32) as f32;
            sumf += dl * s as f32;
        }
    }
    sumf
}

/// IQ4_XS . Q8_K with widening multiplies (ARMv8.0). Bit-identical to the scalar twin.
pub fn vec_dot_iq4_xs_q8_k_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ4_XS_BYTES, act, Q8_K_BYTES);
    iq4_xs_row(nb, w, act, group_sums_neon)
}

/// IQ4_XS . Q8_K with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_iq4_xs_q8_k_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ4_XS_BYTES, act, Q8_K_BYTES);
    iq4_xs_row(nb, w, act, group_sums_dotprod)
}
