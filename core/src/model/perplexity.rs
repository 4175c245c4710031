//! Perplexity the way llama-perplexity measures it, so the two numbers can be compared.
//!
//! The tokens are cut into `tokens.len() / n_ctx` chunks of `n_ctx`; each chunk is run from an
//! empty context with its first token replaced by BOS (when the vocabulary adds one), and only
//! the second half of each chunk is scored: the logits at positions `n_ctx/2 .. n_ctx-1`
//! predict tokens `n_ctx/2 + 1 .. n_ctx`, so every scored token has at least `n_ctx/2` tokens of
//! context.
//!
//! A pruned LM head gives its dropped ids probability 0, so a dropped target has an infinite
//! negative log-likelihood. Such a target is not folded into the perplexity, which then covers
//! the kept targets only; it is counted in [`PerplexityResult::n_dropped`] and handed to
//! `on_token` as `f64::INFINITY`, so that the caller reports it and charges it a stated penalty
//! (`smolrun perplexity`: 8 bits per byte of the dropped token's text).

use super::{Model, ModelError, State, WeightStore};
use crate::math;
use crate::platform::Parallel;
use alloc::vec::Vec;

/// Joins pieces in the context: [`head::join_pieces`](super::head::join_pieces) with its
/// tokenizer and kept ids, `(context, next) -> Some((tokens replaced, id))`.
pub type JoinPieces<'a> = dyn Fn(&[u32], u32) -> Option<(usize, u32)> + 'a;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerplexityResult {
    /// exp(mean negative log-likelihood) over the scored tokens whose id the head can produce.
    pub ppl: f64,
    /// Sum of the negative log-likelihoods (nats) of those tokens.
    pub nll_sum: f64,
    /// Scored tokens the head can produce (all of them for a full head).
    pub n_scored: usize,
    /// Scored tokens a pruned head cannot produce (their logit is -inf): not in `ppl`.
    pub n_dropped: usize,
    /// Chunks (or strided windows) run.
    pub n_chunks: usize,
}

/// Scores `tokens` in chunks of `n_ctx` (see the module docs). `state` must hold at least
/// `n_ctx` positions. `on_token(i, nll)` is called for every scored token `tokens[i]`, e.g. to
/// count the bytes it decodes to for bits per byte; `nll` is `f64::INFINITY` for a target that a
/// pruned head dropped.
#[allow(clippy::too_many_arguments)]
pub fn perplexity(
    model: &Model,
    state: &mut State,
    store: &dyn WeightStore,
    par: &dyn Parallel,
    tokens: &[u32],
    n_ctx: usize,
    bos: Option<u32>,
    join: Option<&JoinPieces>,
    on_token: impl FnMut(usize, f64),
) -> Result<PerplexityResult, ModelError> {
    check_context(state, n_ctx)?;
    let n_chunks = tokens.len() / n_ctx;
    let chunks = (0..n_chunks).map(|c| (c * n_ctx, n_ctx / 2));
    score_windows(
        model, state, store, par, tokens, n_ctx, chunks, bos, join, on_token,
    )
}

/// Scores `tokens` the way llama-perplexity's `--ppl-stride S` does: windows of `n_ctx` tokens
/// starting every `stride` tokens, each run from an empty context with BOS first, each scoring
/// its last `stride` targets; then, where the text goes on past the last whole window, one more
/// window that ends at the last token and scores what is left. So every token from
/// `n_ctx - stride` to the end is scored exactly once, with at least `n_ctx - stride` tokens of
/// context: a stock and a pruned head's tokenization of a text (the re-spelled one is longer)
/// are scored on the same bytes but for the first window's head, where they differ by the
/// re-spellings that fall in it. (llama-perplexity leaves the tail after its last whole window
/// unscored, up to `stride - 1` tokens, which is not the same stretch of text for two
/// tokenizations.) Needs `1 <= stride < n_ctx`; see [`strided_windows`].
#[allow(clippy::too_many_arguments)]
pub fn perplexity_strided(
    model: &Model,
    state: &mut State,
    store: &dyn WeightStore,
    par: &dyn Parallel,
    tokens: &[u32],
    n_ctx: usize,
    stride: usize,
    bos: Option<u32>,
    join: Option<&JoinPieces>,
    on_token: impl FnMut(usize, f64),
) -> Result<PerplexityResult, ModelError> {
    check_context(state, n_ctx)?;
    if stride == 0 || stride >= n_ctx {
        return Err(ModelError::BadContext {
            requested: stride,
            max: n_ctx - 1,
        });
    }
    let windows = strided_windows(tokens.len(), n_ctx, stride);
    score_windows(
        model, state, store, par, tokens, n_ctx, windows, bos, join, on_token,
    )
}

/// The windows of [`perplexity_strided`] over `len` tokens, as `(start, first)`: the window
/// holds `tokens[start..start + n_ctx]` and scores the predictions at its positions
/// `first..n_ctx - 1` (targets `start + first + 1 ..= start + n_ctx - 1`). None if `len < n_ctx`.
/// Needs `1 <= stride < n_ctx`.
pub fn strided_windows(
    len: usize,
    n_ctx: usize,
    stride: usize,
) -> impl Iterator<Item = (usize, usize)> {
    let n_whole = if len >= n_ctx && stride > 0 {
        (len - n_ctx) / stride + 1
    } else {
        0
    };
    let scored_end = n_whole.saturating_sub(1) * stride + n_ctx;
    let whole = (0..n_whole).map(move |w| (w * stride, n_ctx - stride - 1));
    // The tail window starts `len - n_ctx` and scores from `scored_end` on.
    let tail =
        (n_whole > 0 && scored_end < len).then(|| (len - n_ctx, scored_end - (len - n_ctx) - 1));
    whole.chain(tail)
}

fn check_context(state: &State, n_ctx: usize) -> Result<(), ModelError> {
    if n_ctx < 2 || n_ctx > state.n_ctx {
        return Err(ModelError::BadContext {
            requested: n_ctx,
            max: state.n_ctx,
        });
    }
    Ok(())
}

/// Runs each window `(start, first)`: `tokens[start..start + n_ctx]` from an empty context (BOS
/// first), scoring the predictions at window positions `first..n_ctx - 1`.
#[allow(clippy::too_many_arguments)]
fn score_windows(
    model: &Model,
    state: &mut State,
    store: &dyn WeightStore,
    par: &dyn Parallel,
    tokens: &[u32],
    n_ctx: usize,
    windows: impl Iterator<Item = (usize, usize)>,
    bos: Option<u32>,
    join: Option<&JoinPieces>,
    mut on_token: impl FnMut(usize, f64),
) -> Result<PerplexityResult, ModelError> {
    let mut nll_sum = 0f64;
    let mut n_scored = 0usize;
    let mut n_dropped = 0usize;
    let mut n_chunks = 0usize;
    let mut chunk = alloc::vec![0u32; n_ctx];
    // What the model reads: the chunk's tokens, with pieces joined where `join` says so.
    let mut context: Vec<u32> = Vec::with_capacity(n_ctx);
    // The window index of the target that each context token predicts.
    let mut predicts: Vec<usize> = Vec::with_capacity(n_ctx);
    let mut failed = None;
    for (start, first) in windows {
        let Some(targets) = tokens.get(start..start + n_ctx) else {
            break;
        };
        chunk.copy_from_slice(targets);
        if let Some(b) = bos {
            chunk[0] = b;
        }
        state.reset();
        // The whole chunk is one batch, as llama-perplexity evaluates it (split only where
        // pieces are joined: the context is rewound to the first piece); the last position
        // predicts nothing inside the chunk, so it is not run.
        context.clear();
        predicts.clear();
        let mut fed = 0; // context[..fed] is in the KV cache
        let mut run = |context: &[u32],
                       predicts: &[usize],
                       from: usize,
                       state: &mut State|
         -> Result<(), ModelError> {
            let batch = &context[from..];
            let scored_from = predicts[from..]
                .iter()
                .position(|&t| t > first)
                .unwrap_or(batch.len());
            if batch.is_empty() {
                return Ok(());
            }
            model.forward_batch_all(
                state,
                store,
                par,
                batch,
                from,
                scored_from,
                &mut |j, logits| {
                    let t = predicts[from + j];
                    let target = targets[t] as usize;
                    match logits.get(target) {
                        Some(&l) if l == f32::NEG_INFINITY => {
                            n_dropped += 1;
                            on_token(start + t, f64::INFINITY);
                        }
                        Some(&l) => {
                            let nll = math::log_sum_exp(logits) - l as f64;
                            nll_sum += nll;
                            n_scored += 1;
                            on_token(start + t, nll);
                        }
                        None => failed = Some(targets[t]),
                    }
                },
            )
        };
        for (j, &input) in chunk[..n_ctx - 1].iter().enumerate() {
            let joined = match join {
                Some(m) if j > 0 => m(&context, input),
                _ => None,
            };
            if let Some((n, id)) = joined {
                // The pieces' own predictions are scored before they are replaced.
                run(&context, &predicts, fed, state)?;
                context.truncate(context.len() - n);
                predicts.truncate(context.len());
                fed = context.len();
                context.push(id);
            } else {
                context.push(input);
            }
            predicts.push(j + 1);
        }
        run(&context, &predicts, fed, state)?;
        if let Some(token) = failed {
            return Err(ModelError::TokenOutOfRange {
                token,
                n_vocab: model.n_vocab(),
            });
        }
        n_chunks += 1;
    }
    let ppl = if n_scored > 0 {
        libm::exp(nll_sum / n_scored as f64)
    } else {
        f64::NAN
    };
    Ok(PerplexityResult {
        ppl,
        nll_sum,
        n_scored,
        n_dropped,
        n_chunks,
    })
}

/// Bits per byte of text: the summed negative log-likelihood (nats) over the bytes it covers.
/// Unlike perplexity, it compares models with different tokenizers.
pub fn bits_per_byte(nll_sum_nats: f64, n_bytes: usize) -> f64 {
    if n_bytes == 0 {
        return f64::NAN;
    }
    nll_sum_nats / (core::f64::consts::LN_2 * n_bytes as f64)
}
