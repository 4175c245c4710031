//! The transformer's elementwise math, written once and shared by every model family: RMS norm,
//! rotary position embedding, softmax, attention over the KV cache, activations, softcapping.
//!
//! Where llama.cpp's CPU backend rounds in a particular way (f64 sum in RMS norm, GELU through
//! an f16 table, an iterated theta in RoPE), we round the same way, so that logits agree to the
//! last few bits rather than merely "closely".

use alloc::vec::Vec;
use half::f16;

/// `out = x / sqrt(mean(x^2) + eps) * weight`. The sum of squares runs in f64 as ggml does.
///
/// Gemma stores its norm weights already shifted by one (its converter writes `w + 1`), so one
/// convention serves every family.
pub fn rms_norm(out: &mut [f32], x: &[f32], weight: &[f32], eps: f32) {
    let scale = rms_scale(x, eps);
    for ((o, &xi), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = xi * scale * w;
    }
}

/// In-place RMS norm (used per head for QK-norm and for the post-norms).
pub fn rms_norm_in_place(x: &mut [f32], weight: &[f32], eps: f32) {
    let scale = rms_scale(x, eps);
    for (xi, &w) in x.iter_mut().zip(weight) {
        *xi = *xi * scale * w;
    }
}

fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    1.0 / libm::sqrtf(mean + eps)
}

/// `x = x / sqrt(sum(x^2) + eps)`, rounded as llama.cpp's Gated DeltaNet L2 norm computes it:
/// an RMS norm with `eps / n`, then a scale of `1 / sqrt(n)`.
pub fn l2_norm_in_place(x: &mut [f32], eps: f32) {
    let n = x.len() as f32;
    let scale = rms_scale(x, eps / n);
    let inv_sqrt_n = 1.0 / libm::sqrtf(n);
    for xi in x.iter_mut() {
        *xi = *xi * scale * inv_sqrt_n;
    }
}

/// How RoPE pairs up the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Llama: dimensions (2i, 2i+1) rotate together.
    Normal,
    /// GPT-NeoX, Qwen, Gemma: dimension i rotates with i + n_rot/2.
    Neox,
}

/// The rotary embedding of one layer: base frequency, linear scale and YaRN parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rope {
    pub style: RopeStyle,
    /// How many leading dimensions of each head are rotated (the rest pass through).
    pub n_rot: usize,
    pub freq_base: f32,
    /// 1 / scaling factor (linear and YaRN); 1.0 means no scaling.
    pub freq_scale: f32,
    /// YaRN's extrapolation mix: 0 disables YaRN, 1 is the usual value.
    pub ext_factor: f32,
    /// Magnitude scale applied to cos and sin (YaRN's attention factor).
    pub attn_factor: f32,
    /// YaRN's correction dimensions (low, high), from `yarn_corr_dims`.
    pub corr_dims: [f32; 2],
}

impl Rope {
    pub fn plain(style: RopeStyle, n_rot: usize, freq_base: f32) -> Rope {
        Rope {
            style,
            n_rot,
            freq_base,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            corr_dims: [0.0, 0.0],
        }
    }

    /// YaRN's ramp bounds: the dimensions whose wavelength lies between `beta_fast` and
    /// `beta_slow` rotations over the original context.
    pub fn yarn_corr_dims(
        n_rot: usize,
        n_ctx_orig: usize,
        freq_base: f32,
        beta_fast: f32,
        beta_slow: f32,
    ) -> [f32; 2] {
        let corr_dim = |n_rotations: f32| {
            n_rot as f32
                * libm::logf(n_ctx_orig as f32 / (n_rotations * 2.0 * core::f32::consts::PI))
                / (2.0 * libm::logf(freq_base))
        };
        let start = libm::floorf(corr_dim(beta_fast));
        let end = libm::ceilf(corr_dim(beta_slow));
        [start.max(0.0), end.min(n_rot as f32 - 1.0)]
    }

    /// cos/sin of the angle for dimension pair `i0/2` at position `theta_extrap` (already
    /// `pos * base^(-i0/n_rot)`, divided by a frequency factor if the model has them).
    fn cos_sin(&self, theta_extrap: f32, i0: usize) -> (f32, f32) {
        let theta_interp = self.freq_scale * theta_extrap;
        let mut theta = theta_interp;
        let mut mscale = self.attn_factor;
        if self.ext_factor != 0.0 {
            let [low, high] = self.corr_dims;
            let y = ((i0 / 2) as f32 - low) / (high - low).max(0.001);
            let ramp = 1.0 - y.clamp(0.0, 1.0);
            let mix = ramp * self.ext_factor;
            theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
            mscale *= 1.0 + 0.1 * libm::logf(1.0 / self.freq_scale);
        }
        (libm::cosf(theta) * mscale, libm::sinf(theta) * mscale)
    }

    /// Rotates each of the `x.len() / head_dim` heads of `x` for position `pos`.
    /// `freq_factors` (Llama 3's `rope_freqs`) divide each pair's angle when present.
    pub fn apply(&self, x: &mut [f32], head_dim: usize, pos: usize, freq_factors: Option<&[f32]>) {
        self.rotate(x, head_dim, pos as f32, freq_factors);
    }

    /// Rotates heads that were rotated for position `p` to position `p + delta` (a context
    /// shift moves cached keys back by the tokens it dropped). The angles compose, so this is
    /// [`Rope::apply`] at position `delta`, as llama.cpp's K-shift applies it (YaRN's magnitude
    /// scale included, as there).
    pub fn shift(&self, x: &mut [f32], head_dim: usize, delta: i32, freq_factors: Option<&[f32]>) {
        self.rotate(x, head_dim, delta as f32, freq_factors);
    }

    fn rotate(&self, x: &mut [f32], head_dim: usize, pos: f32, freq_factors: Option<&[f32]>) {
        let theta_scale = libm::powf(self.freq_base, -2.0 / self.n_rot as f32);
        // The angles depend on the position and the pair only: their cos/sin are computed
        // once for all heads (the same floats as per head), up to MAX_PAIRS pairs.
        const MAX_PAIRS: usize = 256;
        let n_pairs = self.n_rot / 2;
        let mut cos_sin = [(0f32, 0f32); MAX_PAIRS];
        let shared = n_pairs <= MAX_PAIRS;
        if shared {
            self.for_each_angle(pos, theta_scale, freq_factors, |i0, c, s| {
                cos_sin[i0 / 2] = (c, s)
            });
        }
        for head in x.chunks_exact_mut(head_dim) {
            let mut rotate = |i0: usize, c: f32, s: f32| {
                let (a, b) = match self.style {
                    RopeStyle::Normal => (i0, i0 + 1),
                    RopeStyle::Neox => (i0 / 2, i0 / 2 + self.n_rot / 2),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * c - x1 * s;
                head[b] = x0 * s + x1 * c;
            };
            if shared {
                for (pair, &(c, s)) in cos_sin[..n_pairs].iter().enumerate() {
                    rotate(2 * pair, c, s);
                }
            } else {
                self.for_each_angle(pos, theta_scale, freq_factors, rotate);
            }
        }
    }

    /// `f(i0, cos, sin)` for every pair `i0 = 0, 2, ..` of the rotated dimensions at `pos`.
    fn for_each_angle(
        &self,
        pos: f32,
        theta_scale: f32,
        freq_factors: Option<&[f32]>,
        mut f: impl FnMut(usize, f32, f32),
    ) {
        // theta is multiplied up step by step in f32, as ggml does, rather than computed with
        // powf per pair: the rounding then matches the reference's.
        let mut theta = pos;
        for i0 in (0..self.n_rot).step_by(2) {
            let ff = freq_factors.map_or(1.0, |f| f[i0 / 2]);
            let (c, s) = self.cos_sin(theta / ff, i0);
            f(i0, c, s);
            theta *= theta_scale;
        }
    }
}

/// In-place softmax, max-subtracted for stability.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sum = 0f64;
    for v in x.iter_mut() {
        *v = libm::expf(*v - max);
        sum += *v as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// log(sum(exp(x))), computed stably.
pub fn log_sum_exp(x: &[f32]) -> f64 {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let sum: f64 = x.iter().map(|&v| libm::exp((v - max) as f64)).sum();
    max as f64 + libm::log(sum)
}

/// `cap * tanh(x / cap)`: Gemma's soft limit on attention scores and final logits.
pub fn softcap(x: f32, cap: f32) -> f32 {
    cap * libm::tanhf(x / cap)
}

/// GELU, tanh approximation, evaluated as llama.cpp's CPU backend does: the input is rounded
/// to f16, GELU computed in f32 and the result rounded to f16 (its lookup table holds exactly
/// these values); beyond |x| >= 10 it is 0 or x.
pub fn gelu_tanh(x: f32) -> f32 {
    if x <= -10.0 {
        return 0.0;
    }
    if x >= 10.0 {
        return x;
    }
    let xh = f16::from_f32(x).to_f32();
    f16::from_f32(gelu_tanh_exact(xh)).to_f32()
}

/// [`gelu_tanh`] for every f16 input, computed once (at model load): llama.cpp's lookup
/// table. `gelu` gives `gelu_tanh`'s bits for every input by construction (the table entry for
/// the f16 bits of `x` is exactly what `gelu_tanh` computes from them), without a `tanhf` per
/// element.
#[derive(Clone)]
pub struct GeluTable(Vec<f32>);

impl GeluTable {
    /// Bytes the table holds (one f32 per f16 input).
    pub const BYTES: usize = (1 << 16) * core::mem::size_of::<f32>();

    /// Built at every load of a GELU model, so it shares one `tanhf` between `x` and `-x`:
    /// the tanh argument of `-x` is exactly the negated argument of `x` (the products only
    /// change sign) and `tanhf` is exactly odd (it works on `|x|` and copies the sign back), so
    /// `gelu_tanh_exact(-x)` is `gelu_from_tanh(-x, -t)` to the bit. That halves the `tanhf`
    /// calls, which dominate (and are slow where floating point is emulated or in-order).
    /// Infinities and NaNs take the one-by-one formula, so their bits stay whatever it gives.
    pub fn new() -> GeluTable {
        const SIGN: u16 = 0x8000;
        let mut table = alloc::vec![0.0f32; 1 << 16];
        let to_f16 = |y: f32| f16::from_f32(y).to_f32();
        let one_by_one = |bits: u16| to_f16(gelu_tanh_exact(f16::from_bits(bits).to_f32()));
        for bits in 0..SIGN {
            let x = f16::from_bits(bits).to_f32();
            let (pos, neg) = if x.is_finite() {
                let t = libm::tanhf(gelu_tanh_arg(x));
                (to_f16(gelu_from_tanh(x, t)), to_f16(gelu_from_tanh(-x, -t)))
            } else {
                (one_by_one(bits), one_by_one(bits | SIGN))
            };
            table[bits as usize] = pos;
            table[(bits | SIGN) as usize] = neg;
        }
        GeluTable(table)
    }

    /// `gelu_tanh(x)`, to the bit.
    #[inline]
    pub fn gelu(&self, x: f32) -> f32 {
        if x <= -10.0 {
            return 0.0;
        }
        if x >= 10.0 {
            return x;
        }
        let bits = if x.is_nan() {
            f16::from_f32(x).to_bits()
        } else {
            f16_bits_finite(x)
        };
        self.0[bits as usize]
    }
}

/// The bits of `x` as f16, rounded half to even (`half::f16::from_f32`'s), for finite `x`:
/// a few integer steps instead of `half`'s general conversion (which also handles NaN and
/// infinities, and without F16C at compile time is a function of branches).
#[inline(always)]
pub fn f16_bits_finite(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = (bits >> 16) & 0x8000;
    let abs = bits & 0x7FFF_FFFF;
    let magnitude = if abs < 0x3880_0000 {
        // Below 2^-14 the f16 is subnormal, a multiple of 2^-24: in 0.5 + |x| (ulp 2^-24)
        // the f32 addition rounds |x| / 2^-24 half to even into the low significand bits.
        (f32::from_bits(abs) + 0.5).to_bits() - 0x3F00_0000
    } else if abs < 0x477F_F000 {
        // Normal: exponent rebiased (127 -> 15), the 13 dropped bits rounded half to even
        // (a carry moves into the exponent, as it should).
        let odd = (abs >> 13) & 1;
        (abs - 0x3800_0000 + 0x0FFF + odd) >> 13
    } else {
        0x7C00 // rounds to infinity
    };
    (sign | magnitude) as u16
}

impl Default for GeluTable {
    fn default() -> GeluTable {
        GeluTable::new()
    }
}

impl core::fmt::Debug for GeluTable {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "GeluTable({} entries)", self.0.len())
    }
}

/// GELU, tanh approximation, in plain f32.
pub fn gelu_tanh_exact(x: f32) -> f32 {
    gelu_from_tanh(x, libm::tanhf(gelu_tanh_arg(x)))
}

/// The argument of the tanh in [`gelu_tanh_exact`].
#[inline]
fn gelu_tanh_arg(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const GELU_COEF_A: f32 = 0.044715;
    // `1 + a*x*x` as one fused multiply-add: llama.cpp's C expression is compiled with
    // contraction (GCC and clang contract by default where the target has FMA), and its table
    // holds what that gives. Rounded twice instead, the entry at -1.999 lands on the other
    // side of an f16 tie, and Gemma 3 hits it in our golden texts.
    SQRT_2_OVER_PI * x * libm::fmaf(GELU_COEF_A * x, x, 1.0)
}

/// [`gelu_tanh_exact`] once its tanh `t` is known.
#[inline]
fn gelu_from_tanh(x: f32, t: f32) -> f32 {
    0.5 * x * (1.0 + t)
}

/// SiLU (swish): x * sigmoid(x).
pub fn silu(x: f32) -> f32 {
    x / (1.0 + libm::expf(-x))
}

/// The logistic function 1 / (1 + e^-x).
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + libm::expf(-x))
}

/// ln(1 + e^x), and x itself above 20 (where the two agree in f32), as ggml computes it.
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        libm::logf(1.0 + libm::expf(x))
    }
}

/// `gate[i] = silu(gate[i]) * up[i]`: the SwiGLU of one token's FFN row. The scalar face of
/// `KernelSet::swiglu`.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

/// `gate[i] = max(gate[i], 0) * up[i]`: the ReGLU of one token's FFN row, as ggml's reglu
/// writes it (0 where the gate is not positive, whatever `up` is).
pub fn reglu(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = if *g > 0.0 { *g * u } else { 0.0 };
    }
}

/// `x` rounded to the nearest integer, ties to even, exact for |x| < 2^22 and for infinities
/// and NaN (returned as they are). Adding 1.5 * 2^23 moves the fraction bits out of the
/// significand, and that f32 addition rounds half to even; subtracting it again is exact.
/// The value of `libm::rintf` in that range, without a call, so that loops vectorize.
#[inline(always)]
pub fn round_half_even_small(x: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0; // 1.5 * 2^23
    (x + SHIFT) - SHIFT
}

/// Which positions of the cache one query attends to.
#[derive(Debug, Clone, Copy)]
pub struct AttentionSpan {
    /// The query's position; keys at positions `0..=pos` are causal.
    pub pos: usize,
    /// Sliding window: a key at `p` is masked when `pos - p >= window`. `None` is full causal.
    pub window: Option<usize>,
    /// The skip threshold of decoding, ln(eps) (`--attn-skip-eps`): every score is computed
    /// first, then keys whose score is below the maximum + ln(eps) get no exponential and
    /// their value row is not read (weights under eps of the largest). `None`: exact. Only the
    /// grouped faces with the online softmax honour it (decoding's).
    pub skip_below: Option<f32>,
}

impl AttentionSpan {
    pub fn first_key(&self) -> usize {
        match self.window {
            Some(w) if w > 0 => (self.pos + 1).saturating_sub(w),
            _ => 0,
        }
    }
}

/// Grouped-query attention for one token over a KV cache stored as f16.
///
/// `q` holds `n_head` heads of `head_dim`; the caches hold, per position, `n_head_kv` heads of
/// `head_dim` (keys) and `head_dim_v` (values), positions `0..=span.pos` filled. Query head `h`
/// reads KV head `h / (n_head / n_head_kv)`. `out` gets `n_head` heads of `head_dim_v`.
/// `scores` is scratch of at least `span.pos + 1` floats.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    out: &mut [f32],
    q: &[f32],
    key_cache: &[u16],
    value_cache: &[u16],
    scores: &mut [f32],
    n_head: usize,
    n_head_kv: usize,
    head_dim: usize,
    head_dim_v: usize,
    span: AttentionSpan,
    scale: f32,
    softcap_at: Option<f32>,
) {
    let group = n_head / n_head_kv;
    for h in 0..n_head {
        let kv = KvHead {
            key_cache,
            value_cache,
            head: h / group,
            n_head_kv,
            head_dim,
            head_dim_v,
        };
        attention_head(
            &mut out[h * head_dim_v..(h + 1) * head_dim_v],
            &q[h * head_dim..(h + 1) * head_dim],
            &kv,
            scores,
            span,
            scale,
            softcap_at,
            AttentionKernel::F32,
        );
    }
}

/// One KV head of a layer's cache: `head` of `n_head_kv`, per position `n_head_kv * head_dim`
/// keys and `n_head_kv * head_dim_v` values, as f16 bits.
pub struct KvHead<'a> {
    pub key_cache: &'a [u16],
    pub value_cache: &'a [u16],
    pub head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub head_dim_v: usize,
}

/// How attention accumulates, mirroring the two kernels of llama.cpp's CPU flash attention so
/// that logits agree with it closely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKernel {
    /// Scores and the weighted sum of values in f32, normalized at the end (llama.cpp's tiled
    /// kernel, used for batches of 64 or more queries).
    F32,
    /// Online softmax over the keys in order with the value accumulator held in f16 (llama.cpp's
    /// kernel for decoding and small batches). The query must already be rounded to f16.
    F16Accumulator,
}

/// Attention of one query head: scores `q.k * scale` (softcapped when `softcap_at` is set) over
/// the span's keys, softmax, then the weighted sum of the values into `out`.
#[allow(clippy::too_many_arguments)]
pub fn attention_head(
    out: &mut [f32],
    q: &[f32],
    kv: &KvHead,
    scores: &mut [f32],
    span: AttentionSpan,
    scale: f32,
    softcap_at: Option<f32>,
    kernel: AttentionKernel,
) {
    let k_stride = kv.n_head_kv * kv.head_dim;
    let v_stride = kv.n_head_kv * kv.head_dim_v;
    let first = span.first_key();
    let n = span.pos + 1 - first;
    let sc = &mut scores[..n];
    for (i, s) in sc.iter_mut().enumerate() {
        let p = first + i;
        let k = &kv.key_cache[p * k_stride + kv.head * kv.head_dim..][..kv.head_dim];
        let dot = match kernel {
            AttentionKernel::F32 => q
                .iter()
                .zip(k)
                .map(|(&a, &b)| a * f16::from_bits(b).to_f32())
                .sum(),
            AttentionKernel::F16Accumulator => dot_f16_in_lanes(q, k),
        };
        let v = dot * scale;
        *s = match softcap_at {
            Some(cap) => softcap(v, cap),
            None => v,
        };
    }
    let value = |i: usize| {
        let p = first + i;
        &kv.value_cache[p * v_stride + kv.head * kv.head_dim_v..][..kv.head_dim_v]
    };
    out.fill(0.0);
    let sum = match kernel {
        AttentionKernel::F32 => {
            let max = sc.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let mut sum = 0f64;
            for (i, s) in sc.iter_mut().enumerate() {
                let w = libm::expf(*s - max);
                sum += w as f64;
                for (o, &vb) in out.iter_mut().zip(value(i)) {
                    *o += w * f16::from_bits(vb).to_f32();
                }
            }
            sum as f32
        }
        AttentionKernel::F16Accumulator => {
            let round = |x: f32| f16::from_f32(x).to_f32();
            let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
            for (i, &s) in sc.iter().enumerate() {
                let (mut ms, mut vs) = (1.0f32, 1.0f32);
                if s > max {
                    let old = max;
                    max = s;
                    ms = libm::expf(old - max);
                    out.iter_mut().for_each(|o| *o = round(*o * ms));
                } else {
                    vs = libm::expf(s - max);
                }
                for (o, &vb) in out.iter_mut().zip(value(i)) {
                    *o = round(libm::fmaf(f16::from_bits(vb).to_f32(), vs, *o));
                }
                sum = sum * ms + vs;
            }
            sum
        }
    };
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    out.iter_mut().for_each(|o| *o *= inv);
}

/// The signature of [`attention_head`]: what the kernel set holds for attention (the scalar
/// function itself, or a SIMD face built with [`attention_head_with`]).
pub type AttentionHeadFn =
    fn(&mut [f32], &[f32], &KvHead, &mut [f32], AttentionSpan, f32, Option<f32>, AttentionKernel);

/// The vector loops of [`attention_head`], one face per CPU (smolrun_kernels), each bit for
/// bit the scalar loop it replaces. Keys and values come as rows of `q.len()` / `out.len()`
/// f16 at `stride` apart, starting with the span's first position.
#[derive(Clone, Copy, Debug)]
pub struct AttentionLoops {
    /// `scores[i]` = [`dot_f16_in_lanes`] of `q` with key row `i`.
    pub key_dots_lanes64: fn(q: &[f32], keys: &[u16], stride: usize, scores: &mut [f32]),
    /// `scores[i]` = `q.iter().zip(key_i).map(|(a, b)| a * b).sum()`: one f32 chain per key.
    pub key_dots_sequential: fn(q: &[f32], keys: &[u16], stride: usize, scores: &mut [f32]),
    /// `out[d] += weights[i] * value_i[d]`, rows `i` in order (product, then sum, rounded).
    pub weighted_values: fn(out: &mut [f32], weights: &[f32], values: &[u16], stride: usize),
    /// `out[d] = f16(out[d] * ms)`.
    pub rescale_f16: fn(out: &mut [f32], ms: f32),
    /// `out[d] = f16(fmaf(value[d], vs, out[d]))`.
    pub accumulate_f16: fn(out: &mut [f32], value: &[u16], vs: f32),
    /// For each value row `i` in order: `rescale_f16(out, ms[i])` where `ms[i] != 1.0`, then
    /// `accumulate_f16(out, value_i, vs[i])` ([`accumulate_rows_f16`]): a block of the online
    /// softmax's rows with the accumulator kept in registers from row to row.
    pub accumulate_rows_f16: AccumulateRowsFn,
    /// `x[i] = libm::expf(x[i])`.
    pub exp_in_place: fn(x: &mut [f32]),
}

/// The signature of [`accumulate_rows_f16`]: the accumulator, the value rows at `stride`
/// apart, and each row's (ms, vs).
pub type AccumulateRowsFn =
    fn(out: &mut [f32], values: &[u16], stride: usize, ms: &[f32], vs: &[f32]);

/// The scalar truth of [`AttentionLoops::accumulate_rows_f16`]. Skipping the rescale where
/// `ms[i]` is 1.0 changes nothing: the accumulator holds f16 values (zero, then each result
/// rounded to f16), and an f16 value times 1.0 rounded to f16 is itself.
pub fn accumulate_rows_f16(out: &mut [f32], values: &[u16], stride: usize, ms: &[f32], vs: &[f32]) {
    accumulate_rows_f16_with(rescale_f16, accumulate_f16, out, values, stride, ms, vs);
}

/// [`accumulate_rows_f16`] one row at a time through a face's one-row loops (`rescale`,
/// `accumulate`): the rows' order and the rescale rule in one place.
pub fn accumulate_rows_f16_with(
    rescale: fn(&mut [f32], f32),
    accumulate: fn(&mut [f32], &[u16], f32),
    out: &mut [f32],
    values: &[u16],
    stride: usize,
    ms: &[f32],
    vs: &[f32],
) {
    let dim = out.len();
    for (i, (&ms, &vs)) in ms.iter().zip(vs).enumerate() {
        let Some(value) = values.get(i * stride..i * stride + dim) else {
            return;
        };
        if ms != 1.0 {
            rescale(out, ms);
        }
        accumulate(out, value, vs);
    }
}

/// `out[d] = f16(out[d] * ms)`: the scalar [`AttentionLoops::rescale_f16`].
fn rescale_f16(out: &mut [f32], ms: f32) {
    for o in out.iter_mut() {
        *o = f16::from_f32(*o * ms).to_f32();
    }
}

/// `out[d] = f16(fmaf(value[d], vs, out[d]))`: the scalar [`AttentionLoops::accumulate_f16`].
fn accumulate_f16(out: &mut [f32], value: &[u16], vs: f32) {
    for (o, &v) in out.iter_mut().zip(value) {
        *o = f16::from_f32(libm::fmaf(f16::from_bits(v).to_f32(), vs, *o)).to_f32();
    }
}

/// The scalar truth of [`AttentionLoops::exp_in_place`].
pub fn exp_in_place(x: &mut [f32]) {
    x.iter_mut().for_each(|x| *x = libm::expf(*x));
}

/// [`attention_head`] with its vector loops taken from `loops`: the same operations in the same
/// order, so the same bits (core's kernel tests check every face against the scalar code).
/// The per-key scalar steps (scale, softcap, `expf`, the online maximum and sums) stay here.
#[allow(clippy::too_many_arguments)]
pub fn attention_head_with(
    loops: &AttentionLoops,
    out: &mut [f32],
    q: &[f32],
    kv: &KvHead,
    scores: &mut [f32],
    span: AttentionSpan,
    scale: f32,
    softcap_at: Option<f32>,
    kernel: AttentionKernel,
) {
    let k_stride = kv.n_head_kv * kv.head_dim;
    let v_stride = kv.n_head_kv * kv.head_dim_v;
    let first = span.first_key();
    let n = span.pos + 1 - first;
    let sc = &mut scores[..n];
    // The scalar code zips q with each key and out with each value: the shorter one counts.
    let q = &q[..q.len().min(kv.head_dim)];
    let keys = &kv.key_cache[first * k_stride + kv.head * kv.head_dim..];
    match kernel {
        AttentionKernel::F32 => (loops.key_dots_sequential)(q, keys, k_stride, sc),
        AttentionKernel::F16Accumulator => (loops.key_dots_lanes64)(q, keys, k_stride, sc),
    }
    for s in sc.iter_mut() {
        let v = *s * scale;
        *s = match softcap_at {
            Some(cap) => softcap(v, cap),
            None => v,
        };
    }
    let values = &kv.value_cache[first * v_stride + kv.head * kv.head_dim_v..];
    out.fill(0.0);
    let dim_v = out.len().min(kv.head_dim_v);
    let acc = &mut out[..dim_v];
    let sum = match kernel {
        AttentionKernel::F32 => {
            let max = sc.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let mut sum = 0f64;
            for s in sc.iter_mut() {
                let w = libm::expf(*s - max);
                sum += w as f64;
                *s = w;
            }
            (loops.weighted_values)(acc, sc, values, v_stride);
            sum as f32
        }
        AttentionKernel::F16Accumulator => {
            let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
            for (i, &s) in sc.iter().enumerate() {
                let (mut ms, mut vs) = (1.0f32, 1.0f32);
                if s > max {
                    let old = max;
                    max = s;
                    ms = libm::expf(old - max);
                    (loops.rescale_f16)(acc, ms);
                } else {
                    vs = libm::expf(s - max);
                }
                (loops.accumulate_f16)(acc, &values[i * v_stride..][..dim_v], vs);
                sum = sum * ms + vs;
            }
            sum
        }
    };
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    out.iter_mut().for_each(|o| *o *= inv);
}

/// The signature of [`attention_group`]: the query heads that share one KV head, together.
pub type AttentionGroupFn =
    fn(&mut [f32], &[f32], &KvHead, &mut [f32], AttentionSpan, f32, Option<f32>, AttentionKernel);

/// The faces of attention a kernel set holds: one query head, and the query heads of one KV
/// head together (decoding).
#[derive(Clone, Copy, Debug)]
pub struct AttentionFaces {
    pub head: AttentionHeadFn,
    pub group: AttentionGroupFn,
    /// The loops of attention over a q8_0 cache (`kv_q8::attention_q8_with`).
    pub q8: crate::kv_q8::AttentionLoopsQ8,
}

/// Keys (and values) a grouped attention reads before moving on: 128 positions of a 256-wide
/// head are 64 KB of f16, which stay in the L2 cache while every query head of the group reads
/// them.
pub const ATTENTION_BLOCK: usize = 128;

/// [`attention_head`] for the `qs.len() / kv.head_dim` query heads that read KV head `kv.head`
/// (grouped-query attention), each bit for bit what [`attention_head`] gives it: `outs` gets
/// their outputs one after another (`head_dim_v` each) and `scores` is scratch of as many
/// equal rows, each of at least `span.pos + 1` floats. This scalar version is the truth;
/// [`attention_group_with`] is the one the SIMD faces run.
#[allow(clippy::too_many_arguments)]
pub fn attention_group(
    outs: &mut [f32],
    qs: &[f32],
    kv: &KvHead,
    scores: &mut [f32],
    span: AttentionSpan,
    scale: f32,
    softcap_at: Option<f32>,
    kernel: AttentionKernel,
) {
    if span.skip_below.is_some() && kernel == AttentionKernel::F16Accumulator {
        // The skip threshold needs every score before the values: the blocked pass does that.
        let loops = &SCALAR_ATTENTION_LOOPS;
        return attention_group_with(loops, outs, qs, kv, scores, span, scale, softcap_at, kernel);
    }
    let g = qs.len() / kv.head_dim;
    let stride = scores.len() / g.max(1);
    for h in 0..g {
        attention_head(
            &mut outs[h * kv.head_dim_v..][..kv.head_dim_v],
            &qs[h * kv.head_dim..][..kv.head_dim],
            kv,
            &mut scores[h * stride..][..stride],
            span,
            scale,
            softcap_at,
            kernel,
        );
    }
}

/// [`AttentionLoops`] in plain Rust: the scalar truth each SIMD face is tested against (the
/// scalar kernel set runs them where a pass needs the blocked order: the skip threshold).
pub const SCALAR_ATTENTION_LOOPS: AttentionLoops = AttentionLoops {
    key_dots_lanes64: |q, keys, stride, scores| {
        let dim = q.len();
        for (i, s) in scores.iter_mut().enumerate() {
            let Some(k) = keys.get(i * stride..i * stride + dim) else {
                return;
            };
            *s = dot_f16_in_lanes(q, k);
        }
    },
    key_dots_sequential: |q, keys, stride, scores| {
        let dim = q.len();
        for (i, s) in scores.iter_mut().enumerate() {
            let Some(k) = keys.get(i * stride..i * stride + dim) else {
                return;
            };
            *s = q
                .iter()
                .zip(k)
                .map(|(&a, &b)| a * f16::from_bits(b).to_f32())
                .sum();
        }
    },
    weighted_values: |out, weights, values, stride| {
        let dim = out.len();
        for (i, &w) in weights.iter().enumerate() {
            let Some(v) = values.get(i * stride..i * stride + dim) else {
                return;
            };
            for (o, &b) in out.iter_mut().zip(v) {
                *o += w * f16::from_bits(b).to_f32();
            }
        }
    },
    rescale_f16,
    accumulate_f16,
    accumulate_rows_f16,
    exp_in_place,
};

/// Query heads a grouped pass keeps the online-softmax state of at once (more are done in
/// rounds of this many).
const GROUP_MAX: usize = 16;

/// [`attention_group`] with `loops`' vector loops, a block of [`ATTENTION_BLOCK`] positions at
/// a time: every query head of the group reads the block's keys, then its values, while they
/// are in the cache. One head at a time over the whole span would read a long context's cache
/// from memory once per query head (four times for Qwen3.5, seven for Qwen2.5-0.5B); this reads
/// it once. Each head sees the same operations in the same order as in
/// [`attention_head_with`] (the blocks only interleave the heads), so the same bits.
#[allow(clippy::too_many_arguments)]
pub fn attention_group_with(
    loops: &AttentionLoops,
    outs: &mut [f32],
    qs: &[f32],
    kv: &KvHead,
    scores: &mut [f32],
    span: AttentionSpan,
    scale: f32,
    softcap_at: Option<f32>,
    kernel: AttentionKernel,
) {
    let (hd, dv) = (kv.head_dim, kv.head_dim_v);
    let g_all = qs.len() / hd;
    let stride = scores.len() / g_all.max(1);
    let k_stride = kv.n_head_kv * hd;
    let v_stride = kv.n_head_kv * dv;
    let first = span.first_key();
    let n = span.pos + 1 - first;
    let keys = &kv.key_cache[first * k_stride + kv.head * hd..];
    let values = &kv.value_cache[first * v_stride + kv.head * dv..];
    for h0 in (0..g_all).step_by(GROUP_MAX) {
        let g = (g_all - h0).min(GROUP_MAX);
        let outs = &mut outs[h0 * dv..][..g * dv];
        let qs = &qs[h0 * hd..][..g * hd];
        let scores = &mut scores[h0 * stride..][..g * stride];
        outs.fill(0.0);

        // Scores, a block of keys at a time for every head.
        for b0 in (0..n).step_by(ATTENTION_BLOCK) {
            let b1 = (b0 + ATTENTION_BLOCK).min(n);
            let block_keys = &keys[b0 * k_stride..];
            for h in 0..g {
                let q = &qs[h * hd..][..hd];
                let sc = &mut scores[h * stride..][b0..b1];
                match kernel {
                    AttentionKernel::F32 => {
                        (loops.key_dots_sequential)(q, block_keys, k_stride, sc)
                    }
                    AttentionKernel::F16Accumulator => {
                        (loops.key_dots_lanes64)(q, block_keys, k_stride, sc)
                    }
                }
                for s in sc.iter_mut() {
                    let v = *s * scale;
                    *s = match softcap_at {
                        Some(cap) => softcap(v, cap),
                        None => v,
                    };
                }
            }
        }

        // The weighted values, a block of rows at a time for every head.
        let mut sums = [0f32; GROUP_MAX];
        match kernel {
            AttentionKernel::F32 => {
                for (h, sum) in sums[..g].iter_mut().enumerate() {
                    let sc = &mut scores[h * stride..][..n];
                    let max = sc.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                    let mut total = 0f64;
                    for s in sc.iter_mut() {
                        let w = libm::expf(*s - max);
                        total += w as f64;
                        *s = w;
                    }
                    *sum = total as f32;
                }
                for b0 in (0..n).step_by(ATTENTION_BLOCK) {
                    let b1 = (b0 + ATTENTION_BLOCK).min(n);
                    for h in 0..g {
                        let acc = &mut outs[h * dv..][..dv];
                        let w = &scores[h * stride..][b0..b1];
                        (loops.weighted_values)(acc, w, &values[b0 * v_stride..], v_stride);
                    }
                }
            }
            AttentionKernel::F16Accumulator => {
                // attention_head's online softmax, a block at a time: the running maximum and
                // each row's (ms, vs) first (their exponentials in one vector call), then the
                // rows into the f16 accumulator in one kernel call. Row i: a new maximum
                // rescales the accumulator by ms = expf(old - new) and adds the row with
                // vs = 1; otherwise ms = 1 and vs = expf(s - max).
                let mut maxes = [f32::NEG_INFINITY; GROUP_MAX];
                let mut ms = [1f32; ATTENTION_BLOCK];
                let mut vs = [1f32; ATTENTION_BLOCK];
                let mut rescales = [false; ATTENTION_BLOCK];
                let skip = span.skip_below;
                if skip.is_some() {
                    for (h, max) in maxes[..g].iter_mut().enumerate() {
                        *max = scores[h * stride..][..n]
                            .iter()
                            .fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                    }
                }
                for b0 in (0..n).step_by(ATTENTION_BLOCK) {
                    let b1 = (b0 + ATTENTION_BLOCK).min(n);
                    let m = b1 - b0;
                    let (ms, vs, rescales) = (&mut ms[..m], &mut vs[..m], &mut rescales[..m]);
                    for h in 0..g {
                        let acc = &mut outs[h * dv..][..dv];
                        let (max, sum) = (&mut maxes[h], &mut sums[h]);
                        let sc = &scores[h * stride..][b0..b1];
                        if let Some(ln_eps) = skip {
                            let values = &values[b0 * v_stride..];
                            let (ex, vs) = (&mut ms[..], &mut vs[..]);
                            *sum += skip_rows_f16(
                                loops, acc, sc, *max, ln_eps, values, v_stride, ex, vs,
                            );
                            continue;
                        }
                        // The exponent of each row's one exponential, in `ms`.
                        for ((&s, e), r) in sc.iter().zip(ms.iter_mut()).zip(rescales.iter_mut()) {
                            *r = s > *max;
                            if *r {
                                let old = *max;
                                *max = s;
                                *e = old - *max;
                            } else {
                                *e = s - *max;
                            }
                        }
                        (loops.exp_in_place)(ms);
                        for ((ms, vs), &r) in ms.iter_mut().zip(vs.iter_mut()).zip(rescales.iter())
                        {
                            (*ms, *vs) = if r { (*ms, 1.0) } else { (1.0, *ms) };
                            *sum = *sum * *ms + *vs;
                        }
                        let values = &values[b0 * v_stride..];
                        (loops.accumulate_rows_f16)(acc, values, v_stride, ms, vs);
                    }
                }
            }
        }
        for (h, &sum) in sums[..g].iter().enumerate() {
            let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
            outs[h * dv..][..dv].iter_mut().for_each(|o| *o *= inv);
        }
    }
}

/// The skip threshold's block of rows for one head whose maximum score `max` is known: rows
/// with `s - max >= ln_eps` get `vs = expf(s - max)` (gathered, one vector call) and are added
/// to the f16 accumulator in runs of consecutive kept rows (no rescale: ms = 1); the others are
/// not read. `ex` and `vs` are scratch of the block's length. Returns the block's weight sum.
#[allow(clippy::too_many_arguments)]
fn skip_rows_f16(
    loops: &AttentionLoops,
    acc: &mut [f32],
    sc: &[f32],
    max: f32,
    ln_eps: f32,
    values: &[u16],
    v_stride: usize,
    ex: &mut [f32],
    vs: &mut [f32],
) -> f32 {
    let m = sc.len();
    let mut k = 0;
    for &s in sc {
        if s - max >= ln_eps {
            ex[k] = s - max;
            k += 1;
        }
    }
    (loops.exp_in_place)(&mut ex[..k]);
    let mut sum = 0f32;
    let mut k = 0;
    for (&s, v) in sc.iter().zip(vs[..m].iter_mut()) {
        *v = 0.0;
        if s - max >= ln_eps {
            *v = ex[k];
            sum += *v;
            k += 1;
        }
    }
    const ONES: [f32; ATTENTION_BLOCK] = [1.0; ATTENTION_BLOCK];
    let mut i = 0;
    while i < m {
        if vs[i] == 0.0 {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < m && vs[j] != 0.0 {
            j += 1;
        }
        let rows = &values[i * v_stride..];
        (loops.accumulate_rows_f16)(acc, rows, v_stride, &ONES[..j - i], &vs[i..j]);
        i = j;
    }
    sum
}

/// Dot product of a query (already rounded to f16) with an f16 key, summed in the order of
/// llama.cpp's `ggml_vec_dot_f16` on the AVX-512 machine the golden data comes from: 64 lanes
/// (4 registers of 16), each accumulating every 64th product with a fused multiply-add, then
/// reduced pairwise (registers 2,3 onto 0,1, then 1 onto 0, then `_mm512_reduce_add_ps`: halves
/// of 8, 4, 2, 1). With the f16 value accumulator downstream, another summation order flips an
/// f16 rounding now and then, which Gemma 3's large post-norm weights amplify into visible
/// logit differences.
pub fn dot_f16_in_lanes(q: &[f32], k: &[u16]) -> f32 {
    const LANES: usize = 64;
    let mut acc = [0f32; LANES];
    let n_full = q.len() / LANES * LANES;
    for (qc, kc) in q[..n_full]
        .chunks_exact(LANES)
        .zip(k[..n_full].chunks_exact(LANES))
    {
        for l in 0..LANES {
            acc[l] = libm::fmaf(qc[l], f16::from_bits(kc[l]).to_f32(), acc[l]);
        }
    }
    for l in 0..32 {
        acc[l] += acc[l + 32];
    }
    for l in 0..16 {
        acc[l] += acc[l + 16];
    }
    let mut t8 = [0f32; 8];
    for (l, t) in t8.iter_mut().enumerate() {
        *t = acc[l] + acc[l + 8];
    }
    let t4 = [t8[0] + t8[4], t8[1] + t8[5], t8[2] + t8[6], t8[3] + t8[7]];
    let mut sum = ((t4[0] + t4[2]) + (t4[1] + t4[3])) as f64;
    for (&a, &b) in q[n_full..].iter().zip(&k[n_full..]) {
        sum += (a * f16::from_bits(b).to_f32()) as f64;
    }
    sum as f32
}

// =============================================================================================
// The gated delta rule (Qwen3.5's recurrent layers, model/delta_net.rs): the scalar truth of
// `KernelSet::delta_rule`, whose SIMD faces give its bits.
// =============================================================================================

/// Lanes of the delta rule's two dot products per state row: lane `l` takes the products of
/// the dimensions `i` with `i % 16 == l` with a fused multiply-add, then the lanes are added
/// pairwise (l + 8, l + 4, then `(t[0] + t[2]) + (t[1] + t[3])`). 16 lanes are two AVX2
/// registers or four NEON registers, so a SIMD face keeps this order with no shuffles; a
/// sequential sum (the unfused step's order) would chain every product through one adder.
pub const DELTA_LANES: usize = 16;

/// One token of the gated delta rule on one value head, fused: each state row is read once
/// from memory and written once, with the decay, `S k`, the delta, the rank-1 update and `S q`
/// done while it is in cache. `s` holds `out.len()` rows of `k.len()` (= dk) values, row `j`
/// the value dimension `j`; for each row:
///
/// ```text
/// x_i   = s_i * decay                      (rounded, recomputed in the second sweep)
/// sk    = lanes16(fma(x_i, k_i))           decayed S k
/// d     = (v_j - sk) * beta                the delta rule
/// s_i   = fma(k_i, d, x_i)                 s = decay s + d k^T, stored
/// out_j = lanes16(fma(s_i, q_i)) * scale   S q / sqrt(dk), from the unrounded new s
/// ```
///
/// This is llama.cpp's gated_delta_net in another summation order (its own ggml kernel sums
/// sequentially); the golden tests hold it to llama.cpp's logits.
pub fn delta_rule_step(
    s: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    decay: f32,
    beta: f32,
    out: &mut [f32],
) {
    delta_rule_rows(s, q, k, v, decay, beta, out, |x| *x, |x| x);
}

/// [`delta_rule_step`] on a state kept as f16 (`--state-f16`): each value is widened to f32
/// exactly, the step runs in f32, and the new value is rounded to the nearest f16 (ties to
/// even) when stored; `out` is computed from the new values before that rounding.
pub fn delta_rule_step_f16(
    s: &mut [u16],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    decay: f32,
    beta: f32,
    out: &mut [f32],
) {
    delta_rule_rows(
        s,
        q,
        k,
        v,
        decay,
        beta,
        out,
        |x| f16::from_bits(*x).to_f32(),
        |x| f16::from_f32(x).to_bits(),
    );
}

/// `1 / sqrt(dk)`: the scale of the delta rule's output, computed once by every face alike.
pub fn delta_rule_scale(dk: usize) -> f32 {
    1.0 / libm::sqrtf(dk as f32)
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn delta_rule_rows<S>(
    s: &mut [S],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    decay: f32,
    beta: f32,
    out: &mut [f32],
    load: impl Fn(&S) -> f32,
    store: impl Fn(f32) -> S,
) {
    let dk = k.len();
    if dk == 0 {
        return;
    }
    let scale = delta_rule_scale(dk);
    for ((row, &vj), o) in s.chunks_exact_mut(dk).zip(v).zip(out.iter_mut()) {
        let mut acc = [0f32; DELTA_LANES];
        for (i, (x, &ki)) in row.iter().zip(k).enumerate() {
            let l = i % DELTA_LANES;
            acc[l] = libm::fmaf(load(x) * decay, ki, acc[l]);
        }
        let d = (vj - sum_delta_lanes(&acc)) * beta;
        let mut acc = [0f32; DELTA_LANES];
        for (i, ((x, &ki), &qi)) in row.iter_mut().zip(k).zip(q).enumerate() {
            let l = i % DELTA_LANES;
            let new = libm::fmaf(ki, d, load(x) * decay);
            *x = store(new);
            acc[l] = libm::fmaf(new, qi, acc[l]);
        }
        *o = sum_delta_lanes(&acc) * scale;
    }
}

/// The pairwise reduction of [`DELTA_LANES`] lanes (see there).
#[inline(always)]
fn sum_delta_lanes(acc: &[f32; DELTA_LANES]) -> f32 {
    let mut t8 = [0f32; 8];
    for (l, t) in t8.iter_mut().enumerate() {
        *t = acc[l] + acc[l + 8];
    }
    let t4 = [t8[0] + t8[4], t8[1] + t8[5], t8[2] + t8[6], t8[3] + t8[7]];
    (t4[0] + t4[2]) + (t4[1] + t4[3])
}

/// One token of the delta rule on one value head's f32 state: [`delta_rule_step`] or a SIMD
/// face of it with the same bits.
pub type DeltaRuleFn = fn(&mut [f32], &[f32], &[f32], &[f32], f32, f32, &mut [f32]);

/// The same on an f16 state: [`delta_rule_step_f16`] or a SIMD face of it.
pub type DeltaRuleF16Fn = fn(&mut [u16], &[f32], &[f32], &[f32], f32, f32, &mut [f32]);

/// The delta-rule faces a kernel set runs, one per state type.
#[derive(Clone, Copy, Debug)]
pub struct DeltaRuleKernels {
    pub f32: DeltaRuleFn,
    pub f16: DeltaRuleF16Fn,
}

impl DeltaRuleKernels {
    pub const SCALAR: DeltaRuleKernels = DeltaRuleKernels {
        f32: delta_rule_step,
        f16: delta_rule_step_f16,
    };
}

/// Rounds `x` to f16 bits (how the KV cache stores keys and values).
pub fn to_f16_bits(dst: &mut [u16], x: &[f32]) {
    for (d, &v) in dst.iter_mut().zip(x) {
        *d = f16::from_f32(v).to_bits();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_of_constant_vector_is_weight() {
        let x = [2.0f32; 8];
        let w = [1.5f32; 8];
        let mut out = [0f32; 8];
        rms_norm(&mut out, &x, &w, 0.0);
        for v in out {
            assert!((v - 1.5).abs() < 1e-6);
        }
    }

    /// The cos/sin shared by all heads are the per-head ones, to the bit: against a plain
    /// per-head, per-pair loop, for both styles, with frequency factors and YaRN's ramp, and
    /// with more pairs than the shared buffer holds.
    #[test]
    fn rope_shares_the_angles_of_a_position_exactly() {
        for (n_rot, head_dim) in [(64, 64), (32, 64), (600, 600)] {
            for style in [RopeStyle::Normal, RopeStyle::Neox] {
                let mut rope = Rope::plain(style, n_rot, 10_000.0);
                rope.freq_scale = 0.25;
                rope.ext_factor = 1.0;
                rope.corr_dims = Rope::yarn_corr_dims(n_rot, 4096, 10_000.0, 32.0, 1.0);
                let ff: Vec<f32> = (0..n_rot / 2).map(|i| 1.0 + i as f32 * 0.01).collect();
                let x: Vec<f32> = (0..3 * head_dim).map(|i| (i as f32 * 0.37).sin()).collect();
                for pos in [0, 1, 77, 4000] {
                    let mut got = x.clone();
                    rope.apply(&mut got, head_dim, pos, Some(&ff));
                    let mut want = x.clone();
                    let theta_scale = libm::powf(10_000.0, -2.0 / n_rot as f32);
                    for head in want.chunks_exact_mut(head_dim) {
                        let mut theta = pos as f32;
                        for i0 in (0..n_rot).step_by(2) {
                            let (c, s) = rope.cos_sin(theta / ff[i0 / 2], i0);
                            let (a, b) = match style {
                                RopeStyle::Normal => (i0, i0 + 1),
                                RopeStyle::Neox => (i0 / 2, i0 / 2 + n_rot / 2),
                            };
                            let (x0, x1) = (head[a], head[b]);
                            head[a] = x0 * c - x1 * s;
                            head[b] = x0 * s + x1 * c;
                            theta *= theta_scale;
                        }
                    }
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "n_rot {n_rot} {style:?} pos {pos}");
                }
            }
        }
    }

    #[test]
    fn rope_neox_and_normal_rotate_the_right_pairs() {
        let rope = Rope::plain(RopeStyle::Neox, 4, 10000.0);
        let mut x = [1.0f32, 0.0, 0.0, 0.0];
        rope.apply(&mut x, 4, 1, None);
        // pair (0, 2) at angle 1 rad
        assert!((x[0] - libm::cosf(1.0)).abs() < 1e-6);
        assert!((x[2] - libm::sinf(1.0)).abs() < 1e-6);
        assert_eq!(x[1], 0.0);
        let rope = Rope::plain(RopeStyle::Normal, 4, 10000.0);
        let mut x = [1.0f32, 0.0, 0.0, 0.0];
        rope.apply(&mut x, 4, 1, None);
        assert!((x[1] - libm::sinf(1.0)).abs() < 1e-6);
        assert_eq!(x[2], 0.0);
    }

    /// A shift by `delta` rotates a head rotated for `p` to (nearly) the head rotated for
    /// `p + delta`: the context shift's premise. Exact up to f32 rounding of the angles.
    #[test]
    fn rope_shift_composes_with_the_position() {
        for style in [RopeStyle::Normal, RopeStyle::Neox] {
            let rope = Rope::plain(style, 64, 10000.0);
            let x: Vec<f32> = (0..128).map(|i| libm::sinf(i as f32 * 0.37)).collect();
            for (p, delta) in [(100usize, -60i32), (4000, -1000), (37, -37)] {
                let mut shifted = x.clone();
                rope.apply(&mut shifted, 64, p, None);
                rope.shift(&mut shifted, 64, delta, None);
                let mut fresh = x.clone();
                rope.apply(&mut fresh, 64, (p as i64 + delta as i64) as usize, None);
                let err = shifted
                    .iter()
                    .zip(&fresh)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                // Angles of up to 4000 radians carry f32 rounding of ~2e-4.
                assert!(err < 2e-3, "{style:?} p {p} delta {delta}: off by {err}");
            }
        }
    }

    #[test]
    fn rope_at_position_zero_is_identity() {
        let rope = Rope::plain(RopeStyle::Neox, 8, 10000.0);
        let mut x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let before = x;
        rope.apply(&mut x, 8, 0, None);
        assert_eq!(x, before);
    }

    #[test]
    fn softmax_sums_to_one() {
        let mut x = [1.0f32, 2.0, 3.0, -1.0];
        softmax(&mut x);
        let s: f32 = x.iter().sum();
        assert!((s - 1.0).abs() < 1e-6);
        assert!(x[2] > x[1] && x[1] > x[0]);
    }

    #[test]
    fn gelu_table_holds_the_one_by_one_formula_for_every_f16_bit_pattern() {
        // The table shares one tanhf between x and -x; every entry, NaNs and infinities
        // included, must still be what the formula gives for that input alone.
        let table = GeluTable::new();
        for bits in 0..=u16::MAX {
            let want = f16::from_f32(gelu_tanh_exact(f16::from_bits(bits).to_f32())).to_f32();
            let got = table.0[bits as usize];
            assert_eq!(want.to_bits(), got.to_bits(), "entry {bits:#06x}");
        }
    }

    #[test]
    fn gelu_table_gives_gelu_tanh_bits_for_every_f16_and_between() {
        let table = GeluTable::new();
        for bits in 0..=u16::MAX {
            let x = f16::from_bits(bits).to_f32();
            // Each f16 value, and f32 inputs just off it (they round to it or a neighbour).
            for x in [x, f32::from_bits(x.to_bits().wrapping_add(1)), x * 1.000_3] {
                let (want, got) = (gelu_tanh(x), table.gelu(x));
                assert_eq!(want.to_bits(), got.to_bits(), "gelu({x:e})");
            }
        }
    }

    #[test]
    fn f16_bits_finite_is_half_from_f32() {
        let mut n = 0;
        for bits in (0u32..0x7F80_0000)
            .step_by(61)
            .chain(0x477F_E000..0x4780_2000)
        {
            for x in [f32::from_bits(bits), -f32::from_bits(bits)] {
                let want = f16::from_f32(x).to_bits();
                assert_eq!(f16_bits_finite(x), want, "{x:e} ({:#x})", x.to_bits());
                n += 1;
            }
        }
        assert!(n > 15_000_000);
        assert_eq!(f16_bits_finite(f32::MAX), 0x7C00);
        assert_eq!(f16_bits_finite(-0.0), 0x8000);
    }

    #[test]
    fn gelu_and_silu_known_values() {
        assert!((gelu_tanh_exact(1.0) - 0.841_192).abs() < 1e-5);
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-3);
        assert_eq!(gelu_tanh(-20.0), 0.0);
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
    }

    #[test]
    fn round_half_even_small_is_rintf() {
        let mut cases: Vec<f32> = (-600..=600).map(|i| i as f32 * 0.25).collect();
        cases.extend([
            0.5,
            1.5,
            2.5,
            -0.5,
            -2.5,
            126.5,
            -127.5,
            4_194_303.5,
            -4_194_302.5,
        ]);
        cases.extend([
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1.0e-30,
            0.499_999_97,
        ]);
        for bits in (0u32..0x4a7f_ffff).step_by(4099) {
            cases.push(f32::from_bits(bits));
            cases.push(-f32::from_bits(bits));
        }
        for x in cases {
            let (got, want) = (round_half_even_small(x), libm::rintf(x));
            assert!(
                got == want && (got as i32) == (want as i32),
                "{x}: {got} vs rintf {want}"
            );
        }
        assert!(round_half_even_small(f32::NAN).is_nan());
    }

    #[test]
    fn attention_with_one_key_returns_its_value() {
        let q = [1.0f32, 0.0, 0.0, 1.0];
        let mut k = [0u16; 2];
        let mut v = [0u16; 2];
        to_f16_bits(&mut k, &[0.5, 0.5]);
        to_f16_bits(&mut v, &[3.0, -2.0]);
        let mut out = [0f32; 4];
        let mut scores = [0f32; 1];
        let span = AttentionSpan {
            pos: 0,
            window: None,
            skip_below: None,
        };
        attention(
            &mut out,
            &q,
            &k,
            &v,
            &mut scores,
            2,
            1,
            2,
            2,
            span,
            1.0,
            None,
        );
        assert_eq!(out, [3.0, -2.0, 3.0, -2.0]);
    }

    #[test]
    fn sliding_window_drops_old_keys() {
        let span = AttentionSpan {
            pos: 10,
            window: Some(4),
            skip_below: None,
        };
        // keys 7, 8, 9, 10: pos - p < 4
        assert_eq!(span.first_key(), 7);
        let full = AttentionSpan {
            pos: 10,
            window: None,
            skip_below: None,
        };
        assert_eq!(full.first_key(), 0);
    }
}
