//! Quantizing the matvec input, rounded the way the reference engine rounds it.
//!
//! Activations with large outliers (Gemma 3's residual stream reaches the thousands) make the
//! Q8_0/Q8_1 rounding visible in the logits: llama.cpp's x86 build quantizes with `127 / amax`
//! and round-half-to-even (its AVX2 `quantize_row_q8_0` / `quantize_row_q8_1`), while ggml's
//! scalar reference uses `1 / (amax / 127)` and round-half-away-from-zero. A different integer
//! in one block moves Gemma 3's logits by ~0.05, so we round as the reference's x86 build does.
//! Other formats go through `core::quant` unchanged.

use crate::math;
use crate::quant::{self, GgmlType, QuantError};
use half::f16;

pub fn quantize_activation(ty: GgmlType, x: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    // (bytes per block, offset of the quants); Q8_1 keeps s = d * sum(q) after d.
    let (block_bytes, qs_at) = match ty {
        GgmlType::Q8_0 => (34, 2),
        GgmlType::Q8_1 => (36, 4),
        _ => return quant::quantize_row(ty, x, out),
    };
    let need = quant::row_bytes(ty, x.len())?;
    if out.len() != need {
        return Err(QuantError::BadLength {
            ggml_type: ty,
            expected: need,
            found: out.len(),
        });
    }
    for (xs, block) in x.chunks_exact(32).zip(out.chunks_exact_mut(block_bytes)) {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        block[0..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        let mut sum = 0i32;
        for (q, &v) in block[qs_at..].iter_mut().zip(xs) {
            // Half to even, like _mm256_round_ps(_MM_ROUND_NEAREST) (and libm::rintf): the
            // value is within 127 in magnitude (or infinite/NaN when amax is 0 or tiny),
            // where round_half_even_small is exact, and unlike rintf it is no call.
            let qi = math::round_half_even_small(v * id) as i32;
            sum += qi;
            *q = qi as i8 as u8;
        }
        if ty == GgmlType::Q8_1 {
            let s = f16::from_f32(d * sum as f32).to_bits().to_le_bytes();
            block[2..4].copy_from_slice(&s);
        }
    }
    Ok(())
}
