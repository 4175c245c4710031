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

use crate::engine::{self, ModelFile};
use smolrun_core::gguf::Gguf;
use smolrun_core::model::{Model, ModelError, State, WeightStore};
use smolrun_core::platform::Parallel;
use smolrun_core::tokenizer::Tokenizer;
use std::path::{Path, PathBuf};

/// `--draft` and `--draft-max`, shared by `run`, `chat` and `serve`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DraftArgs {
    /// Speculative decoding: `ngram` (prompt lookup: propose the tokens that followed the last
    /// ones where they occurred before), `mtp` (the model's own MTP layer: Qwen3.5's nextn
    /// block), a draft model (a .gguf path or short name with the same vocabulary, run
    /// greedily), `auto` (when the weights stream from flash, where checking several tokens
    /// costs one read of the weights: mtp if the model has an MTP layer, else ngram), or `off`.
    #[arg(long, value_name = "ngram|mtp|auto|off|MODEL", default_value = "off")]
    pub draft: String,
    /// Most tokens drafted per pass [default: 8 for ngram, 4 for a draft model, 3 for mtp; at
    /// most 31].
    #[arg(long, value_name = "N")]
    pub draft_max: Option<usize>,
}

/// What `--draft` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DraftChoice {
    Off,
    Ngram,
    Mtp,
    Auto,
    Model(String),
}

impl DraftArgs {
    /// Whether this may draft with the model's MTP layer (`mtp`, or `auto` when streamed).
    pub fn may_use_mtp(&self) -> bool {
        matches!(self.choice(), DraftChoice::Mtp | DraftChoice::Auto)
    }

    pub fn choice(&self) -> DraftChoice {
        match self.draft.as_str() {
            "" | "off" | "none" => DraftChoice::Off,
            "ngram" => DraftChoice::Ngram,
            "mtp" => DraftChoice::Mtp,
            "auto" => DraftChoice::Auto,
            other => DraftChoice::Model(other.to_string()),
        }
    }
}

/// Most drafted tokens per pass: the verify pass runs them with the sampled token in one batch
/// of the state's (`DEFAULT_BATCH`, 32) rows.
pub const MAX_DRAFT: usize = smolrun_core::model::DEFAULT_BATCH - 1;
pub const DEFAULT_NGRAM_DRAFT: usize = 8;
pub const DEFAULT_MODEL_DRAFT: usize = 4;
/// llama.cpp's draft-mtp default (common_params_speculative_draft::n_max).
pub const DEFAULT_MTP_DRAFT: usize = 3;

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
    store: Box<dyn WeightStore>,
    /// The tokens whose keys and values are in the draft's cache, in order.
    cached: Vec<u32>,
    /// Ids the draft may propose: the tokenizer's (the head may have padding rows past them).
    n_tokens: usize,
}

impl DraftModel {
    /// Opens and loads the draft model `name_or_path` for a context of `n_ctx` tokens and checks
    /// that its vocabulary is `target`'s, token for token. The draft lives as long as the
    /// process (its mapping and header are leaked, as the server's model is).
    pub fn load(name_or_path: &str, n_ctx: usize, target: &Tokenizer) -> Result<Self, String> {
        // Mapped (a draft is small; the memory guard does not plan for it, see the README).
        let mapped = engine::MemoryArgs {
            no_guard: true,
            ..engine::MemoryArgs::default()
        };
        let (path, file) = engine::open_model(name_or_path, &mapped, Some(n_ctx))?;
        let file: &'static ModelFile = Box::leak(Box::new(file));
        let gguf: &'static Gguf<'static> = Box::leak(Box::new(engine::parse_gguf(&path, file)?));
        let at = |e: &dyn std::fmt::Display| format!("draft model {}: {e}", path.display());
        let tokenizer = Tokenizer::from_gguf(gguf).map_err(|e| at(&e))?;
        check_same_vocab(&path, &tokenizer, target)?;
        let (model, state, store, _, _) =
            engine::load_weights_only(&path, gguf, file, Some(n_ctx)).map_err(|e| at(&e))?;
        Ok(DraftModel {
            path,
            model,
            state,
            store,
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
    ) -> Result<usize, String> {
        if out.is_empty() || context.is_empty() {
            return Ok(0);
        }
        let fail = |e: smolrun_core::model::ModelError| {
            format!("draft model {}: {e}", self.path.display())
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
        let store = self.store.as_ref();
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
fn check_same_vocab(path: &Path, draft: &Tokenizer, target: &Tokenizer) -> Result<(), String> {
    if draft.n_vocab() != target.n_vocab() {
        return Err(format!(
            "draft model {} has a vocabulary of {} tokens, the model has {}: a draft model must \
             share the model's tokenizer (e.g. a smaller model of the same family), or use \
             --draft ngram",
            path.display(),
            draft.n_vocab(),
            target.n_vocab()
        ));
    }
    if let Some(id) =
        (0..target.n_vocab() as u32).find(|&id| draft.token_text(id) != target.token_text(id))
    {
        let show = |t: Option<&[u8]>| format!("{:?}", String::from_utf8_lossy(t.unwrap_or(&[])));
        return Err(format!(
            "draft model {} spells token {id} as {}, the model as {}: a draft model must share \
             the model's tokenizer, or use --draft ngram",
            path.display(),
            show(draft.token_text(id)),
            show(target.token_text(id))
        ));
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
    ) -> Result<usize, String> {
        let max = max.min(self.max);
        self.tokens.clear();
        self.tokens.resize(max + 1, 0);
        let last = context[context.len() - 1];
        self.tokens[0] = last;
        let out = &mut self.tokens[1..];
        let k = match &mut self.source {
            DraftSource::Ngram => ngram_draft(context, out),
            DraftSource::Mtp => mtp_draft(target, par, tokenizer, last, out)
                .map_err(|e| format!("MTP draft: {e}"))?,
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
    fn choice_parses_the_flag() {
        let args = |s: &str| DraftArgs {
            draft: s.into(),
            draft_max: None,
        };
        assert_eq!(args("off").choice(), DraftChoice::Off);
        assert_eq!(args("ngram").choice(), DraftChoice::Ngram);
        assert_eq!(args("auto").choice(), DraftChoice::Auto);
        assert_eq!(args("mtp").choice(), DraftChoice::Mtp);
        assert_eq!(
            args("qwen2.5-coder-0.5b").choice(),
            DraftChoice::Model("qwen2.5-coder-0.5b".into())
        );
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
