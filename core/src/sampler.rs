//! Choosing the next token from the logits.
//!
//! The chain follows llama.cpp's default order, so the same settings mean the same thing in both
//! engines: penalties (repeat, frequency, presence) over the last N accepted tokens, then top-k,
//! top-p and min-p on the temperature-1 distribution, then temperature, then a draw from our own
//! seeded PRNG. A temperature of 0 (or below) is greedy: the highest logit after the penalties.
//!
//! Everything is allocated once in [`Sampler::new`], sized for the vocabulary: choosing a token
//! allocates nothing. Top-k keeps a bounded min-heap of the k best logits in one pass over the
//! vocabulary instead of sorting all of it; only `top_k = 0` (no limit) sorts, and then only the
//! tokens that survive min-p.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

/// The settings of one sampling chain. `Default` gives smolrun's CLI defaults (llama.cpp's, except
/// the repeat penalty, which smolrun turns on: 1.15 over the last 256 tokens).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerParams {
    /// Divides the logits before the draw; 0 or below means greedy.
    pub temperature: f32,
    /// Keep only the k most likely tokens; 0 keeps the whole vocabulary.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probabilities add up to at least p; 1 disables.
    pub top_p: f32,
    /// Drop tokens less likely than min_p times the most likely one; 0 disables.
    pub min_p: f32,
    /// llama.cpp's repeat penalty: positive logits of recent tokens are divided by it, negative
    /// ones multiplied; 1 disables.
    pub repeat_penalty: f32,
    /// How many of the last accepted tokens the penalties look at; 0 disables all penalties.
    pub repeat_last_n: usize,
    /// Subtracted once from the logit of every token seen in the window (OpenAI's presence_penalty).
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per time it appears in the window (frequency_penalty).
    pub frequency_penalty: f32,
    /// Seed of the PRNG; the same seed, settings and logits give the same tokens.
    pub seed: u64,
    /// How many alternatives [`Sampled::top`] lists (the most likely tokens, for logprobs).
    pub n_probs: usize,
}

impl Default for SamplerParams {
    fn default() -> Self {
        SamplerParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.15,
            repeat_last_n: 256,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: 0x5EED,
            n_probs: 0,
        }
    }
}

impl SamplerParams {
    /// Plain greedy decoding: the highest raw logit, no penalties. This is what the reference's
    /// greedy continuations are made with.
    pub fn greedy() -> Self {
        SamplerParams {
            temperature: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 0,
            ..SamplerParams::default()
        }
    }

    fn penalties_active(&self) -> bool {
        self.repeat_last_n > 0
            && (self.repeat_penalty != 1.0
                || self.presence_penalty != 0.0
                || self.frequency_penalty != 0.0)
    }
}

/// Why a token could not be chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum SamplerError {
    /// The logits slice does not have one value per vocabulary entry.
    WrongLogitCount { expected: usize, found: usize },
    /// Every token is banned or has a logit of -inf or NaN.
    NoCandidate,
    /// A setting is out of its range (e.g. top_p of 1.5).
    BadParam {
        name: &'static str,
        value: f32,
        range: &'static str,
    },
}

impl fmt::Display for SamplerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SamplerError::WrongLogitCount { expected, found } => write!(
                f,
                "sampler got {found} logits but the vocabulary has {expected} tokens; \
                 the model's output size and the tokenizer disagree"
            ),
            SamplerError::NoCandidate => write!(
                f,
                "no token can be sampled: every logit is -inf/NaN or banned; \
                 check the model file (NaN logits) or the banned-token mask"
            ),
            SamplerError::BadParam { name, value, range } => {
                write!(
                    f,
                    "sampling setting {name} = {value} is out of range ({range})"
                )
            }
        }
    }
}

/// A token and the log of its probability under the model's distribution (temperature 1, after
/// the penalties and the ban mask, before any truncation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
}

/// The outcome of one [`Sampler::sample`] call.
#[derive(Debug, Clone, Copy)]
pub struct Sampled<'a> {
    pub token: u32,
    /// Probability of `token` under the model's distribution (see [`TokenLogprob`]).
    pub prob: f32,
    pub logprob: f32,
    /// The `n_probs` most likely tokens, most likely first.
    pub top: &'a [TokenLogprob],
}

/// xoshiro256** (Blackman and Vigna): small, fast, and good enough for drawing tokens. Seeded
/// through splitmix64 so that any u64, including 0, gives a usable state.
#[derive(Debug, Clone)]
pub struct Xoshiro256 {
    s: [u64; 4],
}

impl Xoshiro256 {
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Xoshiro256 {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 bits of resolution.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// A candidate token: its (penalised) logit and id.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    logit: f32,
    id: u32,
}

/// The order all candidates are ranked by: higher logit first, and on a tie the lower id first,
/// which is what an argmax that keeps the first maximum picks (llama.cpp's greedy does).
#[inline]
fn ranks_above(a: Candidate, b: Candidate) -> bool {
    a.logit > b.logit || (a.logit == b.logit && a.id < b.id)
}

fn sort_best_first(list: &mut [Candidate]) {
    list.sort_unstable_by(|a, b| {
        if ranks_above(*a, *b) {
            core::cmp::Ordering::Less
        } else if ranks_above(*b, *a) {
            core::cmp::Ordering::Greater
        } else {
            core::cmp::Ordering::Equal
        }
    });
}

/// Restores the min-heap property (worst candidate at the root) below `i`.
fn sift_down(heap: &mut [Candidate], mut i: usize) {
    loop {
        let left = 2 * i + 1;
        if left >= heap.len() {
            return;
        }
        let right = left + 1;
        let mut worst = left;
        if right < heap.len() && ranks_above(heap[left], heap[right]) {
            worst = right;
        }
        if ranks_above(heap[i], heap[worst]) {
            heap.swap(i, worst);
            i = worst;
        } else {
            return;
        }
    }
}

fn sift_up(heap: &mut [Candidate], mut i: usize) {
    while i > 0 {
        let parent = (i - 1) / 2;
        if ranks_above(heap[parent], heap[i]) {
            heap.swap(parent, i);
            i = parent;
        } else {
            return;
        }
    }
}

/// A sampling chain with its buffers and its history of accepted tokens.
pub struct Sampler {
    params: SamplerParams,
    rng: Xoshiro256,
    vocab_size: usize,
    /// Copy of the logits with the penalties and the ban mask applied.
    logits: Vec<f32>,
    /// Heap, then sorted list, of candidates; vocabulary-sized so `top_k = 0` needs nothing more.
    candidates: Vec<Candidate>,
    /// Probabilities of the kept candidates (temperature applied) for the final draw.
    weights: Vec<f32>,
    top: Vec<TokenLogprob>,
    /// Ring of the last `repeat_last_n` accepted tokens, and how often each id occurs in it.
    history: Vec<u32>,
    history_start: usize,
    history_len: usize,
    counts: Vec<u32>,
    /// One bit per token id: set bits are never produced.
    banned: Vec<u64>,
}

impl Sampler {
    pub fn new(vocab_size: usize, params: SamplerParams) -> Result<Sampler, SamplerError> {
        Self::check(&params)?;
        let counts = if params.penalties_active() {
            vec![0u32; vocab_size]
        } else {
            Vec::new()
        };
        Ok(Sampler {
            params,
            rng: Xoshiro256::new(params.seed),
            vocab_size,
            logits: vec![0.0; vocab_size],
            candidates: vec![Candidate { logit: 0.0, id: 0 }; vocab_size],
            weights: vec![0.0; vocab_size],
            top: Vec::with_capacity(params.n_probs.min(vocab_size)),
            history: vec![0; params.repeat_last_n],
            history_start: 0,
            history_len: 0,
            counts,
            banned: vec![0; vocab_size.div_ceil(64)],
        })
    }

    fn check(p: &SamplerParams) -> Result<(), SamplerError> {
        let bad = |name, value, range| Err(SamplerError::BadParam { name, value, range });
        if !(p.top_p > 0.0 && p.top_p <= 1.0) {
            return bad("top_p", p.top_p, "greater than 0, at most 1");
        }
        if !(0.0..=1.0).contains(&p.min_p) {
            return bad("min_p", p.min_p, "0 to 1");
        }
        if !(p.repeat_penalty > 0.0 && p.repeat_penalty.is_finite()) {
            return bad(
                "repeat_penalty",
                p.repeat_penalty,
                "greater than 0; 1 disables",
            );
        }
        if p.temperature.is_nan() {
            return bad("temperature", p.temperature, "0 or more; 0 is greedy");
        }
        if !p.presence_penalty.is_finite() {
            return bad("presence_penalty", p.presence_penalty, "a finite number");
        }
        if !p.frequency_penalty.is_finite() {
            return bad("frequency_penalty", p.frequency_penalty, "a finite number");
        }
        Ok(())
    }

    pub fn params(&self) -> &SamplerParams {
        &self.params
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Forbids `id` from ever being produced (its logit becomes -inf). Ids past the vocabulary are
    /// ignored: there is nothing to forbid.
    pub fn ban(&mut self, id: u32) {
        let i = id as usize;
        if i < self.vocab_size {
            self.banned[i / 64] |= 1u64 << (i % 64);
        }
    }

    pub fn is_banned(&self, id: u32) -> bool {
        let i = id as usize;
        i < self.vocab_size && self.banned[i / 64] & (1u64 << (i % 64)) != 0
    }

    /// Clears the history of accepted tokens and reseeds the PRNG (a new conversation).
    pub fn reset(&mut self) {
        self.history_start = 0;
        self.history_len = 0;
        self.counts.iter_mut().for_each(|c| *c = 0);
        self.rng = Xoshiro256::new(self.params.seed);
    }

    /// Records a token as part of the text (prompt or generated) for the penalties.
    pub fn accept(&mut self, token: u32) {
        let window = self.history.len();
        if window == 0 || self.counts.is_empty() || token as usize >= self.vocab_size {
            return;
        }
        if self.history_len == window {
            let oldest = self.history[self.history_start];
            self.counts[oldest as usize] -= 1;
            self.history[self.history_start] = token;
            self.history_start = (self.history_start + 1) % window;
        } else {
            self.history[(self.history_start + self.history_len) % window] = token;
            self.history_len += 1;
        }
        self.counts[token as usize] += 1;
    }

    fn apply_penalties(&mut self) {
        let p = self.params;
        let window = self.history.len();
        for k in 0..self.history_len {
            let id = self.history[(self.history_start + k) % window] as usize;
            let count = self.counts[id];
            // A token that occurs several times is in the ring several times; the high bit marks
            // it as done for this call so it is penalised once, and is cleared right after.
            if count & 0x8000_0000 != 0 {
                continue;
            }
            let logit = &mut self.logits[id];
            if *logit <= 0.0 {
                *logit *= p.repeat_penalty;
            } else {
                *logit /= p.repeat_penalty;
            }
            *logit -= count as f32 * p.frequency_penalty + p.presence_penalty;
            self.counts[id] |= 0x8000_0000;
        }
        for k in 0..self.history_len {
            let id = self.history[(self.history_start + k) % window] as usize;
            self.counts[id] &= 0x7FFF_FFFF;
        }
    }

    /// Puts the best `cap` candidates, best first, at the front of `candidates`; returns how many
    /// there are (fewer than `cap` when fewer tokens are possible).
    fn gather_best(&mut self, cap: usize) -> usize {
        if cap == 0 {
            return 0;
        }
        let heap = &mut self.candidates[..cap];
        let mut n = 0;
        for (id, &logit) in self.logits.iter().enumerate() {
            if logit == f32::NEG_INFINITY {
                continue;
            }
            let c = Candidate {
                logit,
                id: id as u32,
            };
            if n < cap {
                heap[n] = c;
                n += 1;
                sift_up(&mut heap[..n], n - 1);
            } else if ranks_above(c, heap[0]) {
                heap[0] = c;
                sift_down(heap, 0);
            }
        }
        sort_best_first(&mut heap[..n]);
        n
    }

    /// Puts every candidate whose logit is at least `floor`, best first, at the front of
    /// `candidates`; returns how many.
    fn gather_above(&mut self, floor: f32) -> usize {
        let mut n = 0;
        for (id, &logit) in self.logits.iter().enumerate() {
            if logit != f32::NEG_INFINITY && logit >= floor {
                self.candidates[n] = Candidate {
                    logit,
                    id: id as u32,
                };
                n += 1;
            }
        }
        sort_best_first(&mut self.candidates[..n]);
        n
    }

    /// Chooses the next token from `logits` (one per vocabulary entry). Does not accept it: call
    /// [`Sampler::accept`] with the token that is actually used.
    pub fn sample(&mut self, logits: &[f32]) -> Result<Sampled<'_>, SamplerError> {
        let kept = self.prepare(logits)?;
        let chosen = match kept.total {
            None => self.candidates[0],
            Some(total) => {
                let pick = self.draw(kept.n_kept, total);
                self.candidates[pick]
            }
        };
        Ok(self.sampled(chosen, kept.lse))
    }

    /// One step of speculative sampling (Leviathan et al. 2023, Chen et al. 2023): `draft` was
    /// proposed for the position whose logits are `logits`. Returns the token to use and whether
    /// it is the draft (accepted: the tokens drafted after it may be checked next). The token
    /// is distributed exactly as [`Sampler::sample`] draws it from the same logits and history
    /// (the same penalties, top-k, top-p, min-p and temperature give the target distribution
    /// p): the draft is accepted with probability min(1, p(d)/q(d)), else a token is drawn from
    /// the residual max(0, p - q), renormalised. A [`Draft::Token`] has q a point mass, so it
    /// is accepted with probability p(d) and the residual is p without d. Greedy (temperature
    /// 0): the token is the one `sample` picks, accepted when it is the draft. The random
    /// numbers drawn differ from `sample`'s (one or two per step), so a seed gives other
    /// tokens than plain sampling does, from the same distribution.
    pub fn sample_draft(
        &mut self,
        logits: &[f32],
        draft: Draft<'_>,
    ) -> Result<(Sampled<'_>, bool), SamplerError> {
        let d = draft.token();
        let kept = self.prepare(logits)?;
        let Some(total) = kept.total else {
            let chosen = self.candidates[0];
            return Ok((self.sampled(chosen, kept.lse), chosen.id == d));
        };
        let n_kept = kept.n_kept;
        let at = self.candidates[..n_kept].iter().position(|c| c.id == d);
        let p_d = at.map_or(0.0, |i| self.weights[i] as f64 / total);
        let q = |id: u32| match draft {
            Draft::Token(t) => f64::from(u8::from(t == id)),
            Draft::Sampled { q, .. } => q.get(id as usize).map_or(0.0, |&v| v as f64),
        };
        if let Some(i) = at {
            // u < p/q, written without the division (q(d) may be 0 for a careless caller:
            // then any p(d) > 0 accepts, as min(1, p/0) = 1 says).
            if self.rng.next_f64() * q(d) < p_d {
                let chosen = self.candidates[i];
                return Ok((self.sampled(chosen, kept.lse), true));
            }
        }
        // Rejected: the residual max(0, p - q) over the kept candidates (a token outside them
        // has p = 0, so a residual of 0).
        let mut residual = 0.0f64;
        for (w, c) in self.weights[..n_kept].iter_mut().zip(&self.candidates) {
            let r = (*w as f64 / total - q(c.id)).max(0.0);
            *w = r as f32;
            residual += *w as f64;
        }
        let chosen = if residual > 0.0 {
            let pick = self.draw(n_kept, residual);
            self.candidates[pick]
        } else {
            // p <= q everywhere, so p = q and a rejection had probability 0; rounding got here.
            self.candidates[at.unwrap_or(0)]
        };
        let accepted = chosen.id == d;
        Ok((self.sampled(chosen, kept.lse), accepted))
    }

    /// Steps 1-4 of the chain: the penalised logits, the kept candidates best first at the
    /// front of `candidates`, and (unless greedy) their temperature weights in `weights`.
    fn prepare(&mut self, logits: &[f32]) -> Result<Kept, SamplerError> {
        if logits.len() != self.vocab_size {
            return Err(SamplerError::WrongLogitCount {
                expected: self.vocab_size,
                found: logits.len(),
            });
        }
        let p = self.params;
        let greedy = p.temperature <= 0.0;

        // 1. Copy, ban, penalise. NaN is treated as "impossible" so one bad value cannot win.
        for (i, (dst, &src)) in self.logits.iter_mut().zip(logits).enumerate() {
            let banned = self.banned[i / 64] & (1u64 << (i % 64)) != 0;
            *dst = if banned || src.is_nan() {
                f32::NEG_INFINITY
            } else {
                src
            };
        }
        if p.penalties_active() {
            self.apply_penalties();
        }

        // 2. The most likely tokens: a bounded min-heap of the best `k` (top-k), or of more when
        //    more alternatives are asked for, in one pass and sorted afterwards.
        let mut max_logit = f32::NEG_INFINITY;
        for &l in &self.logits {
            if l > max_logit {
                max_logit = l;
            }
        }
        if max_logit == f32::NEG_INFINITY {
            return Err(SamplerError::NoCandidate);
        }
        let k = if greedy { 1 } else { p.top_k };
        let limited = k > 0 && k < self.vocab_size;
        let heap_cap = if limited { k.max(p.n_probs) } else { p.n_probs };
        let n_best = self.gather_best(heap_cap.min(self.vocab_size));

        // The model's log-partition, for the logprobs of the chosen token and the alternatives.
        let mut sum = 0.0f64;
        for &l in &self.logits {
            if l != f32::NEG_INFINITY {
                sum += libm::expf(l - max_logit) as f64;
            }
        }
        let lse = max_logit + libm::log(sum) as f32;
        self.top.clear();
        for c in &self.candidates[..p.n_probs.min(n_best)] {
            self.top.push(TokenLogprob {
                id: c.id,
                logprob: c.logit - lse,
            });
        }

        // Without top-k the candidates are every token min-p keeps (its floor needs only the
        // maximum, so this is one pass), sorted: the only sort that grows with the vocabulary.
        let mut n_kept = if limited {
            k.min(n_best)
        } else {
            let floor = if p.min_p > 0.0 && !greedy {
                max_logit + libm::logf(p.min_p)
            } else {
                f32::NEG_INFINITY
            };
            self.gather_above(floor)
        };
        if greedy {
            return Ok(Kept {
                n_kept,
                lse,
                total: None,
            });
        }

        let kept = &self.candidates[..n_kept];
        // 3. top-p on the temperature-1 softmax of what top-k kept.
        if p.top_p < 1.0 {
            let top = kept[0].logit;
            let mut total = 0.0f64;
            for (w, c) in self.weights.iter_mut().zip(kept) {
                *w = libm::expf(c.logit - top);
                total += *w as f64;
            }
            let mut cum = 0.0f64;
            for (i, w) in self.weights[..n_kept].iter().enumerate() {
                cum += *w as f64 / total;
                if cum >= p.top_p as f64 {
                    n_kept = i + 1;
                    break;
                }
            }
        }
        // 4. min-p: the list is sorted, so the survivors are a prefix.
        if p.min_p > 0.0 {
            let floor = self.candidates[0].logit + libm::logf(p.min_p);
            let survivors = self.candidates[1..n_kept]
                .iter()
                .take_while(|c| c.logit >= floor)
                .count();
            n_kept = 1 + survivors;
        }
        // 5. temperature: the weights of the draw.
        let kept = &self.candidates[..n_kept];
        let top = kept[0].logit;
        let inv_t = 1.0 / p.temperature;
        let mut total = 0.0f64;
        for (w, c) in self.weights.iter_mut().zip(kept) {
            *w = libm::expf((c.logit - top) * inv_t);
            total += *w as f64;
        }
        Ok(Kept {
            n_kept,
            lse,
            total: Some(total),
        })
    }

    /// The draw: an index into the first `n` candidates, in proportion to `weights` (which
    /// sum to `total`).
    fn draw(&mut self, n: usize, total: f64) -> usize {
        let target = self.rng.next_f64() * total;
        let mut cum = 0.0f64;
        for (i, w) in self.weights[..n].iter().enumerate() {
            cum += *w as f64;
            if target < cum {
                return i;
            }
        }
        // Rounding left the target past the sum: the last candidate with a weight.
        self.weights[..n]
            .iter()
            .rposition(|&w| w > 0.0)
            .unwrap_or(n - 1)
    }

    fn sampled(&self, chosen: Candidate, lse: f32) -> Sampled<'_> {
        let logprob = chosen.logit - lse;
        Sampled {
            token: chosen.id,
            prob: libm::expf(logprob),
            logprob,
            top: &self.top,
        }
    }
}

/// What [`Sampler::prepare`] kept: `n_kept` candidates, the log-partition of the model's
/// distribution, and the sum of the candidates' weights (`None`: greedy, no weights).
struct Kept {
    n_kept: usize,
    lse: f32,
    total: Option<f64>,
}

/// A token proposed for the next position by a speculative draft ([`Sampler::sample_draft`]).
#[derive(Debug, Clone, Copy)]
pub enum Draft<'a> {
    /// Proposed deterministically (prompt lookup, a greedy draft model): q is a point mass.
    Token(u32),
    /// Drawn from the draft's distribution `q` (one probability per vocabulary id).
    Sampled { token: u32, q: &'a [f32] },
}

impl Draft<'_> {
    pub fn token(&self) -> u32 {
        match *self {
            Draft::Token(t) | Draft::Sampled { token: t, .. } => t,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn plain(temperature: f32) -> SamplerParams {
        SamplerParams {
            temperature,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: 42,
            n_probs: 0,
        }
    }

    fn ln(ps: &[f32]) -> Vec<f32> {
        ps.iter().map(|p| libm::logf(*p)).collect()
    }

    /// Draws `n` tokens and returns how often each id came out, as a fraction.
    fn frequencies(params: SamplerParams, logits: &[f32], n: usize) -> Vec<f64> {
        let mut s = Sampler::new(logits.len(), params).unwrap();
        let mut counts = vec![0usize; logits.len()];
        for _ in 0..n {
            counts[s.sample(logits).unwrap().token as usize] += 1;
        }
        counts.iter().map(|&c| c as f64 / n as f64).collect()
    }

    fn assert_close(found: &[f64], expected: &[f64], tol: f64) {
        for (i, (f, e)) in found.iter().zip(expected).enumerate() {
            assert!(
                (f - e).abs() <= tol,
                "id {i}: found {f}, expected {e} (all: {found:?})"
            );
        }
    }

    #[test]
    fn xoshiro_matches_reference_outputs() {
        // First outputs of xoshiro256** from state [1, 2, 3, 4] (the authors' C code).
        let mut r = Xoshiro256 { s: [1, 2, 3, 4] };
        let out: Vec<u64> = (0..4).map(|_| r.next_u64()).collect();
        assert_eq!(out, [11520, 0, 1509978240, 1215971899390074240]);
    }

    #[test]
    fn greedy_takes_the_highest_logit_and_the_lowest_id_on_a_tie() {
        let mut s = Sampler::new(5, SamplerParams::greedy()).unwrap();
        assert_eq!(s.sample(&[0.1, 3.0, -2.0, 2.9, 0.0]).unwrap().token, 1);
        assert_eq!(s.sample(&[0.1, 3.0, -2.0, 3.0, 0.0]).unwrap().token, 1);
        assert_eq!(s.sample(&[7.0, 3.0, -2.0, 3.0, 7.0]).unwrap().token, 0);
    }

    #[test]
    fn top_k_one_is_greedy_at_any_temperature() {
        let p = SamplerParams {
            top_k: 1,
            ..plain(5.0)
        };
        let f = frequencies(p, &[1.0, 1.2, 0.9, 1.1], 200);
        assert_eq!(f, [0.0, 1.0, 0.0, 0.0]);
    }

    #[test]
    fn temperature_one_reproduces_the_softmax() {
        let f = frequencies(plain(1.0), &ln(&[0.5, 0.3, 0.2]), 100_000);
        assert_close(&f, &[0.5, 0.3, 0.2], 0.01);
    }

    #[test]
    fn temperature_half_squares_the_probabilities() {
        // p^(1/0.5) normalised: 0.25, 0.09, 0.04 over 0.38.
        let f = frequencies(plain(0.5), &ln(&[0.5, 0.3, 0.2]), 100_000);
        assert_close(&f, &[0.25 / 0.38, 0.09 / 0.38, 0.04 / 0.38], 0.01);
    }

    #[test]
    fn top_p_keeps_the_token_that_crosses_p() {
        // Cumulative 0.5, 0.8: p = 0.7 keeps two tokens, renormalised to 0.625 / 0.375.
        let p = SamplerParams {
            top_p: 0.7,
            ..plain(1.0)
        };
        let f = frequencies(p, &ln(&[0.5, 0.3, 0.2]), 100_000);
        assert_close(&f, &[0.625, 0.375, 0.0], 0.01);
        assert_eq!(f[2], 0.0);
    }

    #[test]
    fn min_p_drops_tokens_below_the_fraction_of_the_best() {
        // Floor 0.5 * 0.5 = 0.25 keeps 0.5 and 0.3.
        for top_k in [0, 3] {
            let p = SamplerParams {
                min_p: 0.5,
                top_k,
                ..plain(1.0)
            };
            let f = frequencies(p, &ln(&[0.5, 0.3, 0.2]), 50_000);
            assert_close(&f, &[0.625, 0.375, 0.0], 0.01);
            assert_eq!(f[2], 0.0);
        }
    }

    #[test]
    fn top_k_samples_among_the_k_best_only() {
        let p = SamplerParams {
            top_k: 2,
            ..plain(1.0)
        };
        // 0.4 and 0.3 survive, in proportion 4:3.
        let f = frequencies(p, &ln(&[0.1, 0.4, 0.2, 0.3]), 70_000);
        assert_close(&f, &[0.0, 4.0 / 7.0, 0.0, 3.0 / 7.0], 0.01);
    }

    #[test]
    fn heap_top_k_agrees_with_a_full_sort() {
        let mut rng = Xoshiro256::new(7);
        let logits: Vec<f32> = (0..5000)
            .map(|_| (rng.next_f64() * 20.0 - 10.0) as f32)
            .collect();
        let mut sorted: Vec<(f32, u32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (l, i as u32))
            .collect();
        sorted.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap().then(a.1.cmp(&b.1)));
        let p = SamplerParams {
            top_k: 40,
            n_probs: 40,
            ..plain(1.0)
        };
        let mut s = Sampler::new(logits.len(), p).unwrap();
        let out = s.sample(&logits).unwrap();
        let ids: Vec<u32> = out.top.iter().map(|t| t.id).collect();
        let expected: Vec<u32> = sorted[..40].iter().map(|x| x.1).collect();
        assert_eq!(ids, expected);
        assert!(expected.contains(&out.token));
    }

    #[test]
    fn repeat_penalty_divides_positive_and_multiplies_negative_logits() {
        let p = SamplerParams {
            repeat_penalty: 2.0,
            repeat_last_n: 8,
            n_probs: 3,
            ..SamplerParams::greedy()
        };
        let mut s = Sampler::new(3, p).unwrap();
        s.accept(0);
        s.accept(1);
        s.accept(0);
        // [2.0, -1.0, 1.5] -> [1.0, -2.0, 1.5]: token 2 now wins, penalised once despite two 0s.
        let out = s.sample(&[2.0, -1.0, 1.5]).unwrap();
        assert_eq!(out.token, 2);
        let lse = libm::logf(libm::expf(1.0) + libm::expf(-2.0) + libm::expf(1.5));
        assert!((out.logprob - (1.5 - lse)).abs() < 1e-5);
        assert_eq!(out.top[1].id, 0);
        assert!((out.top[1].logprob - (1.0 - lse)).abs() < 1e-5);
        assert!((out.top[2].logprob - (-2.0 - lse)).abs() < 1e-5);
    }

    #[test]
    fn penalties_see_only_the_last_n_tokens() {
        let p = SamplerParams {
            repeat_penalty: 10.0,
            repeat_last_n: 2,
            ..SamplerParams::greedy()
        };
        let mut s = Sampler::new(3, p).unwrap();
        s.accept(0);
        assert_eq!(s.sample(&[3.0, 1.0, 2.0]).unwrap().token, 2);
        s.accept(1);
        s.accept(2); // 0 leaves the window
        assert_eq!(s.sample(&[3.0, 1.0, 2.0]).unwrap().token, 0);
        s.reset();
        assert_eq!(s.sample(&[1.0, 3.0, 2.0]).unwrap().token, 1);
    }

    #[test]
    fn frequency_and_presence_penalties_subtract_per_count_and_once() {
        let p = SamplerParams {
            repeat_last_n: 16,
            frequency_penalty: 0.5,
            presence_penalty: 0.25,
            n_probs: 3,
            ..SamplerParams::greedy()
        };
        let mut s = Sampler::new(3, p).unwrap();
        for t in [0, 0, 0, 1] {
            s.accept(t);
        }
        // 0: 3.0 - 3*0.5 - 0.25 = 1.25; 1: 2.0 - 0.5 - 0.25 = 1.25; 2: 1.3 untouched.
        let out = s.sample(&[3.0, 2.0, 1.3]).unwrap();
        assert_eq!(out.token, 2);
        assert!((out.top[1].logprob - out.top[2].logprob).abs() < 1e-6);
        assert_eq!((out.top[1].id, out.top[2].id), (0, 1));
    }

    #[test]
    fn banned_tokens_are_never_produced() {
        let mut s = Sampler::new(4, plain(1.0)).unwrap();
        s.ban(1);
        s.ban(99); // past the vocabulary: ignored
        assert!(s.is_banned(1) && !s.is_banned(0));
        for _ in 0..2000 {
            assert_ne!(s.sample(&[0.0, 5.0, 0.0, 0.0]).unwrap().token, 1);
        }
        for id in [0, 2, 3] {
            s.ban(id);
        }
        assert_eq!(s.sample(&[0.0; 4]).unwrap_err(), SamplerError::NoCandidate);
    }

    #[test]
    fn same_seed_same_tokens_other_seed_other_tokens() {
        let logits = ln(&[0.2, 0.2, 0.2, 0.2, 0.2]);
        let draw = |seed| {
            let mut s = Sampler::new(5, SamplerParams { seed, ..plain(1.0) }).unwrap();
            (0..64)
                .map(|_| s.sample(&logits).unwrap().token)
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let mut s = Sampler::new(4, plain(1.0)).unwrap();
        assert_eq!(
            s.sample(&[0.0; 3]).unwrap_err(),
            SamplerError::WrongLogitCount {
                expected: 4,
                found: 3
            }
        );
        assert_eq!(
            s.sample(&[f32::NAN, f32::NAN, 1.0, f32::NAN])
                .unwrap()
                .token,
            2
        );
        assert!(Sampler::new(
            4,
            SamplerParams {
                top_p: 0.0,
                ..plain(1.0)
            }
        )
        .is_err());
        assert!(Sampler::new(
            4,
            SamplerParams {
                min_p: 2.0,
                ..plain(1.0)
            }
        )
        .is_err());
    }

    #[test]
    fn chosen_probability_is_the_full_softmax() {
        let mut s = Sampler::new(3, SamplerParams::greedy()).unwrap();
        let out = s.sample(&ln(&[0.25, 0.6, 0.15])).unwrap();
        assert_eq!(out.token, 1);
        assert!((out.prob - 0.6).abs() < 1e-6);
    }

    /// Draws `n` speculative steps with drafts from `propose` (a deterministic token, or one
    /// drawn from q) and returns the output frequencies and the acceptance rate.
    fn speculative_frequencies(
        params: SamplerParams,
        logits: &[f32],
        history: &[u32],
        q: Option<&[f32]>,
        fixed_draft: u32,
        n: usize,
    ) -> (Vec<f64>, f64) {
        let mut s = Sampler::new(logits.len(), params).unwrap();
        for &t in history {
            s.accept(t);
        }
        let mut draft_rng = Xoshiro256::new(99);
        let mut counts = vec![0usize; logits.len()];
        let mut accepted = 0;
        for _ in 0..n {
            let draft = match q {
                None => Draft::Token(fixed_draft),
                Some(q) => {
                    // d ~ q, with the draft's own random numbers.
                    let u = draft_rng.next_f64();
                    let mut cum = 0.0;
                    let d = q.iter().position(|&p| {
                        cum += p as f64;
                        u < cum
                    });
                    Draft::Sampled {
                        token: d.unwrap_or(q.len() - 1) as u32,
                        q,
                    }
                }
            };
            let (out, ok) = s.sample_draft(logits, draft).unwrap();
            assert_eq!(ok, out.token == draft.token() && ok);
            counts[out.token as usize] += 1;
            accepted += usize::from(ok);
        }
        let freq = counts.iter().map(|&c| c as f64 / n as f64).collect();
        (freq, accepted as f64 / n as f64)
    }

    /// Each frequency within 5 standard deviations of a binomial(n, p) proportion (a false
    /// alarm about once in 3.5 million per id), plus a rounding allowance.
    fn assert_binomial(found: &[f64], expected: &[f64], n: usize) {
        for (i, (&f, &p)) in found.iter().zip(expected).enumerate() {
            let bound = 5.0 * (p * (1.0 - p) / n as f64).sqrt() + 1e-9;
            assert!(
                (f - p).abs() <= bound,
                "id {i}: frequency {f}, expected {p} +- {bound} (all: {found:?}, p: {expected:?})"
            );
        }
    }

    /// The target distribution of `plain(t)` with top-k 3 over these logits: the tokens the
    /// plain sampler draws from, by construction of the chain (ids 0..3 kept, id 3 dropped).
    fn toy() -> (SamplerParams, Vec<f32>, Vec<f64>) {
        let params = SamplerParams {
            top_k: 3,
            ..plain(0.7)
        };
        let logits = ln(&[0.45, 0.3, 0.2, 0.05]);
        let w: Vec<f64> = [0.45f64, 0.3, 0.2]
            .iter()
            .map(|p| p.powf(1.0 / 0.7))
            .collect();
        let total: f64 = w.iter().sum();
        let mut p: Vec<f64> = w.iter().map(|w| w / total).collect();
        p.push(0.0);
        (params, logits, p)
    }

    #[test]
    fn a_deterministic_draft_keeps_the_target_distribution() {
        let (params, logits, p) = toy();
        const N: usize = 200_000;
        // Every draft token, the one top-k drops included (always rejected).
        for d in 0..4u32 {
            let (f, rate) = speculative_frequencies(params, &logits, &[], None, d, N);
            assert_binomial(&f, &p, N);
            // Accepted with probability p(d).
            assert_binomial(&[rate], &[p[d as usize]], N);
        }
    }

    #[test]
    fn a_sampled_draft_keeps_the_target_distribution() {
        let (params, logits, p) = toy();
        const N: usize = 200_000;
        for q in [
            [0.25f32, 0.25, 0.25, 0.25],
            [0.05, 0.05, 0.8, 0.1],
            [0.5, 0.3, 0.15, 0.05],
        ] {
            let (f, rate) = speculative_frequencies(params, &logits, &[], Some(&q), 0, N);
            assert_binomial(&f, &p, N);
            // Accepted with probability sum_x min(p(x), q(x)).
            let overlap: f64 = p.iter().zip(&q).map(|(&p, &q)| p.min(q as f64)).sum();
            assert_binomial(&[rate], &[overlap], N);
        }
    }

    /// The target is the distribution after the penalties of the accepted history: a repeat
    /// penalty of 2 on id 0 turns 0.45 into 0.45^(1/2) before temperature.
    #[test]
    fn the_draft_target_includes_the_penalties() {
        let (params, logits, _) = toy();
        let params = SamplerParams {
            repeat_penalty: 2.0,
            repeat_last_n: 4,
            ..params
        };
        // logits are ln(p) < 0: a penalised negative logit is multiplied by 2.
        let w: Vec<f64> = [0.45f64.powi(2), 0.3, 0.2]
            .iter()
            .map(|p| p.powf(1.0 / 0.7))
            .collect();
        let total: f64 = w.iter().sum();
        let mut p: Vec<f64> = w.iter().map(|w| w / total).collect();
        p.push(0.0);
        const N: usize = 200_000;
        let (f, _) = speculative_frequencies(params, &logits, &[0], None, 0, N);
        assert_binomial(&f, &p, N);
    }

    #[test]
    fn a_greedy_draft_is_accepted_exactly_when_it_is_the_argmax() {
        let mut s = Sampler::new(4, SamplerParams::greedy()).unwrap();
        let logits = [0.1, 3.0, -2.0, 2.9];
        let (out, ok) = s.sample_draft(&logits, Draft::Token(1)).unwrap();
        assert_eq!((out.token, ok), (1, true));
        let (out, ok) = s.sample_draft(&logits, Draft::Token(3)).unwrap();
        assert_eq!((out.token, ok), (1, false));
    }
}
