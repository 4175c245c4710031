//! Speculative decoding: cheap guesses of the next tokens (a draft), checked by the model in one
//! pass ([`Model::forward_verify`]) that reads every weight once for all of them. Decoding is
//! bound by reading the weights (from RAM, or from flash when they stream), so a pass that
//! checks k+1 tokens costs little more than one that decodes one, and yields one to k+1 tokens.
//!
//! The draft comes from prompt lookup ([`ngram_draft`]: what followed the last few tokens the
//! last time they occurred; code edits and summaries repeat their input), from a small draft
//! model with the same vocabulary ([`DraftModel`], run greedily), or from the model's own MTP
//! layer (Qwen3.5's `nextn` block, [`mtp_draft`]: greedy, chained, as llama.cpp's draft-mtp). The generation loop
//! (`Engine::generate_with`) samples each verified position with `Sampler::sample_draft`, which
//! keeps the target distribution exactly (and at temperature 0 the tokens plain decoding
//! gives), and rolls the cache back to the accepted tokens after a rejection.

use crate::load::OwnedModel;
use crate::options::EngineOptions;
use crate::EngineError;
use smolrun_core::model::{Model, ModelError, State, WeightStore};
use smolrun_core::platform::Parallel;
use smolrun_core::tokenizer::Tokenizer;
use std::path::{Path, PathBuf};

/// The longest and shortest tail that prompt lookup matches.
const NGRAM_LONGEST: usize = 3;
const NGRAM_SHORTEST: usize = 2;

/// Prompt lookup decoding: finds the most recent earlier occurrence of the last 3 tokens of
/// `context` (else of the last 2) and writes the tokens that followed it into `out` (as many as
/// fit and exist); returns how many. Allocation-free; one backward scan of the context.
pub fn ngram_draft(context: &[u32], out: &mut [u32]) -> usize {
    for n in (NGRAM_SHORTEST..=NGRAM_LONGEST).rev() {
        if context.len() <= n {
            continue;
        }
        let tail = &context[context.len() - n..];
        // Occurrences that end before the tail does, the most recent first.
        if let Some(i) = (0..context.len() - n)
            .rev()
            .find(|&i| &context[i..i + n] == tail)
        {
            let follow = &context[i + n..];
            let k = follow.len().min(out.len());
            out[..k].copy_from_slice(&follow[..k]);
            return k;
        }
    }
    0
}

/// A second, smaller model with the target's vocabulary that proposes tokens greedily, with its
/// own weights, KV cache and list of cached tokens. It runs on the target's thread pool,
/// between the target's passes.
pub struct DraftModel {
    pub path: PathBuf,
    model: Model,
    state: State,
    /// Its file, header and store (it owns its file as the engine does).
    owned: OwnedModel,
    /// The tokens whose keys and values are in the draft's cache, in order.
    cached: Vec<u32>,
    /// Ids the draft may propose: the tokenizer's (the head may have padding rows past them).
    n_tokens: usize,
}

impl DraftModel {
    /// Opens and loads the draft model `name_or_path` for a context of `n_ctx` tokens and checks
    /// that its vocabulary is `target`'s, token for token. It is mapped, with the kernels,
    /// caches and folders of `options` (the target's), and not memory-checked: a draft is small
    /// (the README says so).
    pub fn load(
        name_or_path: &str,
        n_ctx: usize,
        target: &Tokenizer,
        options: &EngineOptions,
    ) -> Result<Self, EngineError> {
        let (owned, model, state) = crate::load::open_draft_model(name_or_path, n_ctx, options)?;
        let path = owned.path.clone();
        let tokenizer = Tokenizer::from_gguf(&owned.gguf).map_err(|e| {
            EngineError::bad_file(&path, format!("draft model {}: {e}", path.display()))
        })?;
        check_same_vocab(&path, &tokenizer, target)?;
        Ok(DraftModel {
            path,
            model,
            state,
            owned,
            cached: Vec::with_capacity(n_ctx),
            n_tokens: tokenizer.n_vocab(),
        })
    }

    /// Brings the draft's cache to `context` (running only what is new since its last call,
    /// which after a rejection is the target's correction and maybe a token or two before it),
    /// then proposes up to `out.len()` tokens greedily, stopping after an end-of-generation
    /// token. Returns how many.
    pub fn draft(
        &mut self,
        par: &dyn Parallel,
        tokenizer: &Tokenizer,
        context: &[u32],
        out: &mut [u32],
    ) -> Result<usize, EngineError> {
        if out.is_empty() || context.is_empty() {
            return Ok(0);
        }
        let path = &self.path;
        let fail = |e: ModelError| {
            EngineError::model(path, format!("draft model {}: {e}", path.display()))
        };
        let common = self
            .cached
            .iter()
            .zip(context)
            .take_while(|(a, b)| a == b)
            .count();
        // The last token runs again when it is cached: its logits are the first proposal's.
        let keep = common.min(context.len() - 1);
        self.cached.truncate(keep);
        let new = &context[keep..];
        let store = self.owned.store.as_ref();
        self.model
            .forward_batch(&mut self.state, store, par, new, keep)
            .map_err(fail)?;
        self.cached.extend_from_slice(new);
        let room = self.state.n_ctx - self.cached.len();
        let n = out.len().min(room + 1);
        for (i, slot) in out[..n].iter_mut().enumerate() {
            let t = argmax(&self.state.logits()[..self.n_tokens]);
            *slot = t;
            if i + 1 == n || tokenizer.is_eog(t) {
                return Ok(i + 1);
            }
            let pos = self.cached.len();
            self.model
                .forward(&mut self.state, store, par, t, pos)
                .map_err(fail)?;
            self.cached.push(t);
        }
        Ok(n)
    }
}

/// The model's target pass, for a draft that runs on it (MTP).
pub struct Target<'a> {
    pub model: &'a Model,
    pub state: &'a mut State,
    pub store: &'a dyn WeightStore,
}

/// Drafts with the model's MTP layer after it sampled `token` (at the state's position): up to
/// `out.len()` tokens, greedily (the argmax, as llama.cpp's draft-mtp), each step fed the
/// previous draft and the block's own output, stopping after an end-of-generation token.
/// Returns how many. The state's logits are the draft's afterwards (the verify pass comes next).
pub fn mtp_draft(
    target: Target<'_>,
    par: &dyn Parallel,
    tokenizer: &Tokenizer,
    token: u32,
    out: &mut [u32],
) -> Result<usize, ModelError> {
    let Target {
        model,
        state,
        store,
    } = target;
    let n_tokens = tokenizer.n_vocab();
    let mut logits = model.mtp_begin(state, store, par, token)?;
    for i in 0..out.len() {
        let t = argmax(&logits[..n_tokens]);
        out[i] = t;
        if i + 1 == out.len() || tokenizer.is_eog(t) {
            return Ok(i + 1);
        }
        logits = model.mtp_next(state, store, par, t)?;
    }
    Ok(out.len())
}

/// The first id with the highest logit (the greedy sampler's choice, without penalties).
fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// A draft model must spell every id as the target does, or its proposals mean other text.
fn check_same_vocab(path: &Path, draft: &Tokenizer, target: &Tokenizer) -> Result<(), EngineError> {
    let bad = |message: String| EngineError::option("draft", message);
    if draft.n_vocab() != target.n_vocab() {
        return Err(bad(format!(
            "draft model {} has a vocabulary of {} tokens, the model has {}: a draft model must \
             share the model's tokenizer (e.g. a smaller model of the same family), or use \
             --draft ngram",
            path.display(),
            draft.n_vocab(),
            target.n_vocab()
        )));
    }
    if let Some(id) =
        (0..target.n_vocab() as u32).find(|&id| draft.token_text(id) != target.token_text(id))
    {
        let show = |t: Option<&[u8]>| format!("{:?}", String::from_utf8_lossy(t.unwrap_or(&[])));
        return Err(bad(format!(
            "draft model {} spells token {id} as {}, the model as {}: a draft model must share \
             the model's tokenizer, or use --draft ngram",
            path.display(),
            show(draft.token_text(id)),
            show(target.token_text(id))
        )));
    }
    Ok(())
}

/// Where a pass's draft comes from.
pub enum DraftSource {
    Ngram,
    /// The model's own MTP layer.
    Mtp,
    Model(Box<DraftModel>),
}

/// The engine's drafting: the source, the most tokens per pass, and the token buffer of a
/// verify pass (the sampled token, then the draft), reserved once.
pub struct Drafter {
    pub source: DraftSource,
    pub max: usize,
    pub tokens: Vec<u32>,
}

impl Drafter {
    pub fn new(source: DraftSource, max: usize) -> Drafter {
        Drafter {
            source,
            max,
            tokens: Vec::with_capacity(max + 1),
        }
    }

    /// What `--draft` shows as (for logs and JSON).
    pub fn describe(&self) -> String {
        match &self.source {
            DraftSource::Ngram => format!("ngram (up to {} tokens)", self.max),
            DraftSource::Mtp => format!("mtp (up to {} tokens)", self.max),
            DraftSource::Model(m) => format!("{} (up to {} tokens)", m.path.display(), self.max),
        }
    }

    /// Fills `self.tokens` with `last` and up to `max` drafted tokens that follow `context`
    /// (which ends with `last`); returns how many were drafted. `target`: the model's pass,
    /// which MTP drafting runs its layer on.
    pub fn propose(
        &mut self,
        par: &dyn Parallel,
        tokenizer: &Tokenizer,
        context: &[u32],
        max: usize,
        target: Target<'_>,
    ) -> Result<usize, EngineError> {
        let max = max.min(self.max);
        self.tokens.clear();
        self.tokens.resize(max + 1, 0);
        let last = context[context.len() - 1];
        self.tokens[0] = last;
        let out = &mut self.tokens[1..];
        let k = match &mut self.source {
            DraftSource::Ngram => ngram_draft(context, out),
            DraftSource::Mtp => mtp_draft(target, par, tokenizer, last, out)
                .map_err(|e| EngineError::model(PathBuf::new(), format!("MTP draft: {e}")))?,
            DraftSource::Model(m) => m.draft(par, tokenizer, context, out)?,
        };
        self.tokens.truncate(k + 1);
        Ok(k)
    }
}

/// How speculation went in one generation: forward passes after the prompt (plain decodes and
/// verify passes), tokens drafted and accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpecStats {
    pub passes: usize,
    pub drafted: usize,
    pub accepted: usize,
}

impl SpecStats {
    /// Accepted share of the drafted tokens (`None` when nothing was drafted).
    pub fn accept_rate(&self) -> Option<f64> {
        (self.drafted > 0).then(|| self.accepted as f64 / self.drafted as f64)
    }

    /// Tokens each pass yielded: the `n_tokens` generated, but the first (it came from the
    /// prompt's pass), over the passes. 1 for plain decoding.
    pub fn tokens_per_pass(&self, n_tokens: usize) -> Option<f64> {
        (self.passes > 0).then(|| n_tokens.saturating_sub(1) as f64 / self.passes as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ngram_proposes_what_followed_the_most_recent_match() {
        let mut out = [0u32; 4];
        // "1 2 3" occurs twice before the tail; the later one is followed by 7 8.
        let ctx = [1, 2, 3, 4, 5, 1, 2, 3, 7, 8, 9, 1, 2, 3];
        assert_eq!(ngram_draft(&ctx, &mut out), 4);
        assert_eq!(out, [7, 8, 9, 1]);
        // Only the last two tokens match earlier: 5 6 -> 0.
        let ctx = [5, 6, 0, 9, 5, 6];
        let mut out = [0u32; 8];
        assert_eq!(ngram_draft(&ctx, &mut out), 4);
        assert_eq!(&out[..4], &[0, 9, 5, 6]);
        // No match, too short, no room.
        assert_eq!(ngram_draft(&[1, 2, 3, 4], &mut out), 0);
        assert_eq!(ngram_draft(&[1, 1], &mut out), 0);
        assert_eq!(ngram_draft(&ctx, &mut []), 0);
    }

    #[test]
    fn stats_rates() {
        let s = SpecStats {
            passes: 4,
            drafted: 10,
            accepted: 5,
        };
        assert_eq!(s.accept_rate(), Some(0.5));
        assert_eq!(s.tokens_per_pass(13), Some(3.0));
        assert_eq!(SpecStats::default().accept_rate(), None);
    }
}
