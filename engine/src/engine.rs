//! The engine: one model file opened by one load sequence ([`Engine::open`]), and the
//! generation loop that `run`, `chat`, `loopcheck`, the server and the C ABI share.
//!
//! The load sequence, in order: resolve the name; open the file as the weights mode and the
//! memory say (mapped, streamed, pread, or experts paged: `file.rs`); parse the header; check
//! the memory plan against what the device gives (`memory_guard.rs`); build the tokenizer on a
//! thread of its own while the weights are set up (the store, the repacked weights, the model,
//! the state: `load.rs`) and the thread pool starts; watch the memory while generating; leave an
//! untied embedding table on flash; set up drafting. Every choice comes from [`EngineOptions`].
//!
//! The engine remembers which tokens its KV cache holds, so a chat turn only runs the tokens
//! that are new since the last turn (the longest common prefix is kept).

use crate::chat_template::ChatTemplate;
use crate::file::{self, ModelFile, OpenedFile};
use crate::load::{self, detach, FlashProbe, LoadedWeights};
use crate::memory_guard::{self, MemoryGuard};
use crate::moe::{MoeReport, PagerHandle};
use crate::options::{
    DraftChoice, DraftOptions, EngineOptions, DEFAULT_MODEL_DRAFT, DEFAULT_MTP_DRAFT,
    DEFAULT_NGRAM_DRAFT, MAX_DRAFT,
};
use crate::speculative::{DraftModel, DraftSource, Drafter, SpecStats, Target};
use crate::EngineError;
use smolrun_core::gguf::Gguf;
use smolrun_core::model::embedding::{Pooler, Pooling};
use smolrun_core::model::pager::MoeStats;
use smolrun_core::model::{Family, Model, ModelError, State, StateOptions, WeightStore};
use smolrun_core::platform::Parallel;
use smolrun_core::quant::GgmlType;
use smolrun_core::sampler::{Draft, Sampled, Sampler, SamplerParams};
use smolrun_core::tokenizer::{StreamDecoder, Tokenizer};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token.
    EndOfText,
    /// `-n` tokens were produced.
    Length,
    /// The context is full.
    ContextFull,
    /// The user pressed Ctrl-C (or the caller's stop flag was set).
    Interrupted,
    /// The caller's `on_token` asked to stop (the server: a stop string, its token budget, a
    /// client that went away).
    Stopped,
    /// The memory guard saw less memory left than its floor
    /// ([`Engine::low_memory_message`] says how much).
    LowMemory,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::EndOfText => "eog",
            StopReason::Length => "length",
            StopReason::ContextFull => "context",
            StopReason::Interrupted => "interrupted",
            StopReason::Stopped => "stopped",
            StopReason::LowMemory => "low-memory",
        }
    }
}

pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a, fed bytes as they come (the logits digest, saved states' checksums and keys).
pub(crate) struct Fnv(pub(crate) u64);

impl Fnv {
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// FNV-1a over the little-endian bytes of each value's bits.
fn fnv1a_f32(h: u64, values: &[f32]) -> u64 {
    let mut h = Fnv(h);
    values
        .iter()
        .for_each(|v| h.feed(&v.to_bits().to_le_bytes()));
    h.0
}

/// What one generation produced, and how fast. Its text is what the caller made of the tokens
/// ([`Engine::generate`] returns it beside this).
#[derive(Debug, Clone)]
pub struct Generation {
    /// Generated ids; an end-of-generation token that stopped it is included.
    pub tokens: Vec<u32>,
    /// Prompt tokens that had to be run (fewer than the prompt when the cache had a prefix).
    pub prompt_evaluated: usize,
    pub prompt_time: Duration,
    pub gen_time: Duration,
    pub stop: StopReason,
    /// Forward passes after the prompt, and how drafting went (no drafts without `--draft`).
    pub spec: SpecStats,
    /// With [`GenerateOptions::digest_logits`]: a 64-bit FNV-1a hash of the bits of every set of
    /// logits a token was sampled from, in order: equal for two runs only if every logit was
    /// (what the tests compare where the tokens alone would agree despite a routing bug).
    pub logits_digest: Option<u64>,
    /// Tokens the context shift dropped from the cache while generating (0: none; see
    /// [`GenerateOptions::context_shift`]).
    pub shifted_out: usize,
}

impl Generation {
    pub fn prompt_tok_s(&self) -> f64 {
        per_second(self.prompt_evaluated, self.prompt_time)
    }
    pub fn gen_tok_s(&self) -> f64 {
        per_second(self.tokens.len(), self.gen_time)
    }
}

/// Where a generation stops, besides an end-of-generation token, a full context, low memory
/// and its caller's `on_token`; and whether the prompt counts for the penalties.
#[derive(Debug, Clone, Copy, Default)]
pub struct GenerateOptions<'a> {
    /// At most this many tokens (None: no limit).
    pub max_tokens: Option<usize>,
    /// Checked before each token: set from another thread (Ctrl-C) to stop.
    pub interrupt: Option<&'a AtomicBool>,
    /// The prompt goes into the sampler's penalty history (off for a chat prompt: it is full of
    /// turn markers that must stay likely).
    pub penalize_prompt: bool,
    /// Hash every step's logits into [`Generation::logits_digest`] (a pass over the vocabulary
    /// per token; off by default).
    pub digest_logits: bool,
    /// When the context is full, keep its first `n` tokens, drop half of the rest and go on
    /// (llama.cpp's context shift, `Engine::shift_context`) instead of stopping: for models
    /// that can (attention only); the others stop with [`StopReason::ContextFull`]. `None`:
    /// stop when full.
    pub context_shift: Option<usize>,
}

/// Restricts which tokens may come next: a grammar (a JSON schema, tool calls). See
/// [`Engine::generate_with`] for how the generation loop asks it.
pub trait TokenFilter {
    /// May `token` come next? For an end-of-generation token: may the text end here?
    fn allows(&mut self, tokenizer: &Tokenizer, token: u32) -> bool;
    /// `logits` with every token that may not come next set to -inf (a buffer the filter
    /// owns, sized once).
    fn masked(&mut self, tokenizer: &Tokenizer, logits: &[f32]) -> &[f32];
    /// `token` was chosen.
    fn accept(&mut self, tokenizer: &Tokenizer, token: u32);
    /// Nothing may follow what was accepted.
    fn finished(&self) -> bool;
}

/// One generated token, as the generation loop hands it to its caller: sampled, not yet run.
/// An end-of-generation token is not handed over (it ends the loop).
#[derive(Clone, Copy)]
pub struct TokenStep<'a> {
    /// The token, its probability and the `n_probs` most likely tokens (the sampler's params).
    pub sampled: Sampled<'a>,
    /// Turns ids into text ([`StreamDecoder`] for whole characters, [`TokenStep::bytes`]).
    pub tokenizer: &'a Tokenizer,
}

impl<'a> TokenStep<'a> {
    pub fn token(&self) -> u32 {
        self.sampled.token
    }

    /// What token `id` shows as text, possibly part of a UTF-8 character: nothing for a control
    /// token (BOS, turn markers).
    pub fn bytes(&self, id: u32) -> &'a [u8] {
        if self.tokenizer.is_control(id) {
            &[]
        } else {
            self.tokenizer.token_bytes(id)
        }
    }
}

fn per_second(n: usize, t: Duration) -> f64 {
    if n == 0 || t.is_zero() {
        0.0
    } else {
        n as f64 / t.as_secs_f64()
    }
}

/// What the streaming store read and what that means for speed, over some stretch of time.
#[derive(Debug, Clone, Copy)]
pub struct StreamReport {
    /// MB (10^6 bytes) read from flash per token over the stretch.
    pub stream_mb_per_token: f64,
    /// MB one pass over the weights reads, as planned.
    pub stream_mb_per_pass: f64,
    pub resident_mb: f64,
    /// MB/s read over the stretch (achieved).
    pub read_mb_s: f64,
    /// The flash's bandwidth (probed or `--flash-mbps`).
    pub flash_mb_s: f64,
    /// flash_mb_s / stream_mb_per_token: what no run can beat.
    pub flash_limit_tok_s: f64,
    /// All bytes read from flash since load (load, probe and passes), MB.
    pub total_read_mb: f64,
}

impl StreamReport {
    /// Adds the report's fields to a JSON object.
    pub fn add_to(&self, obj: &mut serde_json::Value) {
        let fields = [
            ("stream_mb_per_token", self.stream_mb_per_token),
            ("stream_mb_per_pass", self.stream_mb_per_pass),
            ("resident_mb", self.resident_mb),
            ("read_mb_s", self.read_mb_s),
            ("flash_mb_s", self.flash_mb_s),
            ("flash_limit_tok_s", self.flash_limit_tok_s),
            ("flash_read_mb_total", self.total_read_mb),
        ];
        if let Some(map) = obj.as_object_mut() {
            for (k, v) in fields {
                map.insert(k.into(), serde_json::json!(v));
            }
        }
    }

    /// One line for stderr.
    pub fn line(&self) -> String {
        format!(
            "streamed: {:.1} MB/token at {:.0} MB/s ({:.0} MB resident); flash {:.0} MB/s \
             limits this to {:.2} tok/s",
            self.stream_mb_per_token,
            self.read_mb_s,
            self.resident_mb,
            self.flash_mb_s,
            self.flash_limit_tok_s
        )
    }
}

/// A loaded model, ready to generate. It owns its file: the mapping (or the header read into
/// memory), the header parsed from it and the weight store that reads it.
pub struct Engine {
    // Field order is drop order. Everything that borrows the file's bytes (the draft model's
    // own file aside, the store and the parsed header) comes before `file`, so it is dropped
    // first; see `detach`.
    /// Speculative decoding ([`Engine::set_draft`]); `None`: one token per pass.
    draft: Option<Drafter>,
    store: Box<dyn WeightStore + Send>,
    gguf: Gguf<'static>,
    file: Box<ModelFile>,
    /// The flash, when the weights are streamed.
    flash: Option<FlashProbe>,
    /// The expert pager, when a mixture of experts is paged.
    pager: Option<PagerHandle>,
    /// The arena of the store's read targets (stream zones, expert slots), when it has one.
    store_arena: Option<smolrun_core::arena::ArenaUsage>,
    pub path: PathBuf,
    pub model: Model,
    pub tokenizer: Tokenizer,
    par: Box<dyn Parallel + Send>,
    state: State,
    /// The tokens whose keys and values are in the cache, in order.
    cached: Vec<u32>,
    /// Watches the available memory while generating ([`Engine::watch_memory`]).
    memory: Option<MemoryGuard>,
    /// Pruned head: the cache holds a dropped token instead of the kept pieces that spelled it
    /// ([`Engine::set_join_pieces`]).
    join_pieces: bool,
    /// Why the last generation stopped with [`StopReason::LowMemory`].
    low_memory: Option<String>,
    /// What the engine was opened with (a draft model is opened with the same kernels, cache
    /// folder and model folder).
    options: EngineOptions,
}

// An app opens an engine on one thread and runs it on another (the C ABI's callers, a server's
// worker): everything it owns, the store and the thread pool included, may move between threads.
const _: () = {
    const fn movable_between_threads<T: Send>() {}
    movable_between_threads::<Engine>();
};

impl Drop for Engine {
    /// Writes the pager's warm list (`--moe-warm`) for the next run.
    fn drop(&mut self) {
        if let Some(Err(e)) = self.pager.as_ref().map(PagerHandle::save_warm_list) {
            self.options.events.notice(&e);
        }
    }
}

impl Engine {
    /// Opens `model` (a path, or a name in [`EngineOptions::models_dir`]) with `options`: the
    /// one load sequence every user of the engine goes through (see the module docs). Fails
    /// before reading any weight when the model does not fit.
    pub fn open(model: &str, options: &EngineOptions) -> Result<Engine, EngineError> {
        let events = &options.events;
        let phase = |what: &str, t: Instant| file::phase_time(events, options.verbose, what, t);
        let threads = options
            .threads
            .unwrap_or_else(crate::platform::default_threads);
        if threads == 0 {
            return Err(EngineError::option(
                "threads",
                "-t 0: use at least 1 thread",
            ));
        }
        options.kv_type()?;
        let t = Instant::now();
        let OpenedFile {
            path,
            file,
            n_ctx,
            moe,
            kv_type,
        } = file::open(model, options)?;
        phase("open", t);
        // The KV cache's type the file was placed with (a fitted file's profile may set it):
        // the memory check, the model and the engine's options all use it.
        let options = &options.with_kv_type(kv_type);
        let file = Box::new(file);
        // SAFETY: see `detach`; `file` moves into the engine below, after the fields that
        // borrow it.
        let bytes_owner = unsafe { detach(&file) };
        let t = Instant::now();
        let gguf = file::parse_gguf(&path, bytes_owner)?;
        phase("parse header", t);
        let t = Instant::now();
        let guard = memory_guard::check_memory(
            &path,
            &gguf,
            n_ctx,
            options,
            file.weights_held(&path, &gguf)?,
        )?;
        phase("memory check", t);
        let at = |e: &dyn std::fmt::Display| load::load_error(&path, e);
        // Architecture first: a file of another kind of model would otherwise fail on some
        // missing key with a less helpful message.
        let arch = gguf.architecture().map_err(|e| at(&e))?;
        if Family::from_arch(arch).is_none() {
            return Err(at(&ModelError::UnsupportedArch { arch: arch.into() }));
        }
        // The tokenizer (for Gemma 3: 262,144 tokens to index, the biggest part of a start
        // from the repack cache) is built on a thread of its own while this one sets up the
        // model, the state and the repacked weights; a device has at least two cores. Its
        // error, if any, still comes first, as when it was built first.
        let (tokenizer, rest) = std::thread::scope(|scope| {
            let build = || {
                let t = Instant::now();
                let tokenizer = Tokenizer::from_gguf(&gguf);
                phase("tokenizer (own thread)", t);
                tokenizer
            };
            let thread = std::thread::Builder::new()
                .name("smolrun-tokenizer".into())
                .spawn_scoped(scope, build);
            let rest = load::load_weights(&path, &gguf, bytes_owner, n_ctx, moe, options).and_then(
                |weights| {
                    let t = Instant::now();
                    let par = load::parallel(threads, options.spin_micros)?;
                    phase("thread pool", t);
                    Ok((weights, par))
                },
            );
            let tokenizer = match thread {
                Ok(handle) => handle
                    .join()
                    .map_err(|_| at(&"building the tokenizer failed (its thread panicked)"))?,
                // No thread to be had: build it here.
                Err(_) => build(),
            };
            Ok::<_, EngineError>((tokenizer.map_err(|e| at(&e))?, rest))
        })?;
        let (
            LoadedWeights {
                model,
                state,
                store,
                flash,
                pager,
                store_arena,
            },
            par,
        ) = rest?;
        let t = Instant::now();
        if let Some(mapped) = file.mapped() {
            memory_guard::leave_embeddings_on_flash(mapped, &gguf)?;
        }
        phase("embeddings advice", t);
        let mut engine = Engine {
            draft: None,
            store,
            gguf,
            file,
            flash,
            pager,
            store_arena,
            path,
            model,
            tokenizer,
            par,
            state,
            cached: Vec::new(),
            memory: guard,
            join_pieces: false,
            low_memory: None,
            options: options.clone(),
        };
        engine.set_draft(&options.draft)?;
        Ok(engine)
    }

    /// The parsed header of the model file.
    pub fn gguf(&self) -> &Gguf<'_> {
        &self.gguf
    }

    /// How the weights are reached: mapped, paged, streamed or read with pread.
    pub fn model_file(&self) -> &ModelFile {
        &self.file
    }

    /// The options the engine was opened with.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// Hands a memory guard over (or `None` to stop watching): from now on, every 16th
    /// generated token looks at the available memory and generation stops below the floor.
    pub fn watch_memory(&mut self, guard: Option<MemoryGuard>) {
        self.memory = guard;
    }
}

impl Engine {
    /// Bytes the streaming store has read from flash so far (0 when nothing is streamed).
    pub fn stream_bytes_read(&self) -> u64 {
        self.store.stream_stats().map_or(0, |s| s.bytes_read)
    }

    /// The streaming report for a stretch of `tokens` tokens that took `seconds` and read
    /// `read` bytes (differences of [`Engine::stream_bytes_read`]). `None` when nothing is
    /// streamed.
    pub fn stream_report(&self, read: u64, tokens: usize, seconds: f64) -> Option<StreamReport> {
        let (now, flash) = (self.store.stream_stats()?, self.flash?);
        let per_token = if tokens > 0 {
            read as f64 / 1e6 / tokens as f64
        } else {
            now.streamed_bytes_per_pass as f64 / 1e6
        };
        Some(StreamReport {
            stream_mb_per_token: per_token,
            stream_mb_per_pass: now.streamed_bytes_per_pass as f64 / 1e6,
            resident_mb: now.resident_bytes as f64 / 1e6,
            read_mb_s: if seconds > 0.0 {
                read as f64 / 1e6 / seconds
            } else {
                0.0
            },
            flash_mb_s: flash.mb_s,
            flash_limit_tok_s: if per_token > 0.0 {
                flash.mb_s / per_token
            } else {
                f64::INFINITY
            },
            total_read_mb: (flash.load_bytes + now.bytes_read) as f64 / 1e6,
        })
    }

    /// The expert pager's counts so far (`None` when experts are not paged).
    pub fn moe_stats(&self) -> Option<MoeStats> {
        self.store.moe_stats()
    }

    /// The pager's report for a stretch of `tokens` tokens whose counts are `stats`
    /// (differences of [`Engine::moe_stats`]). `None` when experts are not paged.
    pub fn moe_report(&self, stats: &MoeStats, tokens: usize) -> Option<MoeReport> {
        let pager = self.pager.as_ref()?;
        Some(MoeReport::new(stats, tokens, pager.flash_mb_s))
    }

    /// Why the last generation stopped with [`StopReason::LowMemory`].
    pub fn low_memory_message(&self) -> Option<&str> {
        self.low_memory.as_deref()
    }

    /// The guard's per-token look (allocation-free unless it stops).
    fn check_memory_floor(&mut self) -> Result<(), EngineError> {
        match &mut self.memory {
            Some(guard) => guard
                .check()
                .map_err(|message| EngineError::LowMemory { message }),
            None => Ok(()),
        }
    }

    /// The kernel set the forward pass runs on (printed by `smolrun bench`).
    pub fn kernels_name(&self) -> &'static str {
        self.model.kernels_name
    }

    pub fn n_ctx(&self) -> usize {
        self.state.n_ctx
    }

    /// The run state's arena: its plan and what it handed out, part by part.
    pub fn arena(&self) -> &smolrun_core::arena::ArenaUsage {
        self.state.arena()
    }

    /// The arena of the weight store's read targets (the stream zones, the expert slots): its
    /// plan and what it handed out. `None` for the mapped and pread stores.
    pub fn store_arena(&self) -> Option<&smolrun_core::arena::ArenaUsage> {
        self.store_arena.as_ref()
    }

    pub fn n_vocab(&self) -> usize {
        self.model.n_vocab()
    }

    pub fn architecture(&self) -> &str {
        self.gguf.architecture().unwrap_or("")
    }

    pub fn chat_template(&self) -> Result<ChatTemplate, EngineError> {
        ChatTemplate::from_gguf(&self.gguf)
            .map_err(|e| EngineError::bad_file(&self.path, format!("{}: {e}", self.path.display())))
    }

    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut ids = Vec::new();
        self.tokenizer
            .encode(text, add_special, parse_special, &mut ids);
        ids
    }

    /// Tokenizes a rendered chat prompt: control tokens are parsed, and BOS is added only when
    /// the model wants one and the template did not already write it.
    pub fn tokenize_chat(&self, rendered: &str, template: &ChatTemplate) -> Vec<u32> {
        let bos = template.bos_token();
        let has_bos = !bos.is_empty() && rendered.starts_with(bos);
        self.tokenize(rendered, !has_bos, true)
    }

    /// A sampler for this model's vocabulary. Ids the model can output but the tokenizer does
    /// not know (padding rows of the LM head) are banned: they have no text.
    pub fn sampler(&self, params: SamplerParams) -> Result<Sampler, EngineError> {
        let mut s = Sampler::new(self.n_vocab(), params)
            .map_err(|e| EngineError::option("sampling", e.to_string()))?;
        for id in self.tokenizer.n_vocab()..self.n_vocab() {
            s.ban(id as u32);
        }
        Ok(s)
    }

    /// Forgets the cache (a new conversation).
    pub fn reset(&mut self) {
        self.cached.clear();
        self.state.reset();
    }

    /// A forward pass's error: a weight that could not be read names its tensor.
    fn forward_error(&self, e: ModelError) -> EngineError {
        let message = format!("{}: {e}", self.path.display());
        match e {
            ModelError::WeightRead(read) => EngineError::Read {
                path: self.path.clone(),
                tensor: Some(read.tensor),
                message,
            },
            _ => EngineError::model(&self.path, message),
        }
    }

    /// Makes the cache hold exactly `tokens` and returns the logits after the last one. Only
    /// the tokens after the longest prefix already cached are run; returns how many were.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<usize, EngineError> {
        if tokens.is_empty() {
            return Err(EngineError::BadPrompt {
                tokens: 0,
                n_ctx: self.n_ctx(),
                message: "nothing to run: the prompt has no tokens".into(),
            });
        }
        if tokens.len() > self.n_ctx() {
            return Err(self.too_long(
                tokens.len(),
                format!(
                "the prompt is {} tokens but the context holds {} (-c {}): shorten the prompt or \
                 raise -c (this model was trained on up to {} tokens)",
                tokens.len(),
                self.n_ctx(),
                self.n_ctx(),
                self.model.hp.n_ctx_train
            ),
            ));
        }
        let common = self
            .cached
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count();
        // The last token always runs again: its logits are what the caller needs.
        let mut keep = common.min(tokens.len() - 1);
        // A recurrent state cannot go back to a shorter prefix: start over (snapshots of the
        // state would spare this; they come with the Qwen3.5 MTP work).
        if keep < self.cached.len() && self.state.has_recurrent_layers() {
            keep = 0;
        }
        self.cached.truncate(keep);
        let new = &tokens[keep..];
        self.model
            .forward_batch(
                &mut self.state,
                self.store.as_ref(),
                self.par.as_ref(),
                new,
                keep,
            )
            .map(|_| ())
            .map_err(|e| self.forward_error(e))?;
        self.check_logits_finite()?;
        self.cached.extend_from_slice(new);
        Ok(new.len())
    }

    /// Logits that are NaN or infinite, or all one value, come from a damaged file: a block
    /// scale that is NaN or infinite poisons every dot product it enters, and once the hidden
    /// state is NaN the 8-bit activation quantizer turns it into zeros, so the head gives the
    /// same logit for every token. Either would be sampled as garbage. The check costs one pass
    /// over the logits per token; only when it fails is the file searched for the tensor to
    /// name.
    fn check_logits_finite(&self) -> Result<(), EngineError> {
        // -inf is a real logit: a pruned head gives it to the tokens it dropped.
        let logits = self.state.logits();
        let first = logits.first().copied().unwrap_or(0.0);
        let poisoned = logits.iter().any(|v| v.is_nan() || *v == f32::INFINITY);
        if !poisoned && logits.iter().any(|&v| v != first) {
            return Ok(());
        }
        let culprit = match first_nonfinite_scale_in_file(&self.path, &self.gguf) {
            Ok(Some((tensor, ty, block, value))) => format!(
                "tensor '{tensor}' ({}) has a scale of {value} in block {block} (byte {} of the \
                 tensor); the file is damaged: fetch or quantize it again",
                ty.name(),
                block * ty.type_size()
            ),
            Ok(None) => "no tensor has a NaN or infinite block scale, so a weight or the \
                         arithmetic overflowed; run `smolrun perplexity` on this file to compare \
                         it with llama.cpp"
                .to_string(),
            Err(e) => format!("searching the file for the cause failed: {e}"),
        };
        Err(EngineError::bad_file(
            &self.path,
            format!(
                "{}: the model's logits are not finite or all the same ({first} first): {culprit}",
                self.path.display()
            ),
        ))
    }

    /// The file's GGUF header bytes, metadata and tensor table (a saved state's key, the
    /// server's model digest).
    pub fn header_bytes(&self) -> &[u8] {
        let header = self.file.header_bytes();
        &header[..(self.gguf.data_offset as usize).min(header.len())]
    }

    pub(crate) fn state_ref(&self) -> &State {
        &self.state
    }

    pub(crate) fn state_mut_ref(&mut self) -> &mut State {
        &mut self.state
    }

    /// The state's pieces were filled from a saved state of `tokens`: the cache holds them.
    pub(crate) fn set_cached_tokens(&mut self, tokens: &[u32]) {
        self.state.restored(tokens.len());
        self.cached.clear();
        self.cached.extend_from_slice(tokens);
    }

    /// Whether [`Engine::shift_context`] works on this model and state: every layer is
    /// attention (a recurrent state or conv window cannot drop positions), no MTP drafting.
    pub fn can_shift_context(&self) -> bool {
        self.model.can_shift_context(&self.state)
    }

    /// llama.cpp's context shift, for a cache that is full: keeps the first `n_keep` tokens
    /// (at most the context less 4), drops half of the ones after them and moves the rest
    /// down, their keys rotated to their new positions. Returns how many tokens were dropped.
    /// Nothing is allocated (a generation that shifts still allocates nothing per token).
    pub fn shift_context(&mut self, n_keep: usize) -> Result<usize, EngineError> {
        let n_cached = self.cached.len();
        let keep = n_keep.min(self.n_ctx().saturating_sub(4)).min(n_cached);
        let discard = (n_cached - keep) / 2;
        if discard == 0 {
            return Ok(0);
        }
        self.model
            .shift_context(&mut self.state, keep, discard)
            .map_err(|e| self.forward_error(e))?;
        self.cached.drain(keep..keep + discard);
        Ok(discard)
    }

    /// Runs one more token after what is cached; the sampler reads its logits next. Fails when
    /// the memory guard finds less memory left than its floor.
    pub fn decode(&mut self, token: u32) -> Result<(), EngineError> {
        self.check_memory_floor()?;
        self.decode_unguarded(token)
    }

    fn decode_unguarded(&mut self, token: u32) -> Result<(), EngineError> {
        let joined = match (&self.model.head_ids, self.join_pieces) {
            (Some(kept), true) => {
                smolrun_core::model::head::join_pieces(&self.tokenizer, kept, &self.cached, token)
            }
            _ => None,
        };
        // A join rewinds the cache to the first piece and runs the dropped token there.
        let (token, pos) = match joined {
            Some((n, id)) => (id, self.cached.len() - n),
            None => (token, self.cached.len()),
        };
        if let Err(e) = self.model.forward(
            &mut self.state,
            self.store.as_ref(),
            self.par.as_ref(),
            token,
            pos,
        ) {
            return Err(self.forward_error(e));
        }
        self.check_logits_finite()?;
        self.cached.truncate(pos);
        self.cached.push(token);
        Ok(())
    }

    /// Pruned head: when the tokens generated last spell one dropped token exactly, the model
    /// reads that token instead of the pieces from then on (`head::join_pieces`): better for
    /// prose, worse for code that repeats a dropped identifier (the model copies the pieces
    /// of an earlier occurrence when they are in its context). The text is the same either way.
    pub fn set_join_pieces(&mut self, on: bool) {
        self.join_pieces = on;
    }

    /// Turns on speculative decoding as `--draft` and `--draft-max` say: the state gets a row
    /// of logits per token a verify pass checks (the cache is forgotten), and a draft model is
    /// loaded and checked to share the vocabulary. `auto` drafts with prompt lookup when the
    /// weight store streams from flash (a pass then costs one read of the streamed weights,
    /// however many tokens it checks), and not otherwise. Returns what drafts, if anything.
    pub fn set_draft(&mut self, args: &DraftOptions) -> Result<Option<String>, EngineError> {
        // A recurrent model (Qwen3.5) goes back to the last accepted token of a verify pass
        // through the copies of its state that the pass keeps (`State::rewind`).
        let has_mtp = self.model.hp.n_nextn == 1 && self.model.hp.mtp_layer().is_some();
        let source = match args.choice.clone() {
            DraftChoice::Off => None,
            DraftChoice::Auto if self.store.stream_stats().is_none() => None,
            DraftChoice::Auto if has_mtp => Some(DraftSource::Mtp),
            DraftChoice::Mtp => Some(DraftSource::Mtp),
            DraftChoice::Ngram | DraftChoice::Auto => Some(DraftSource::Ngram),
            DraftChoice::Model(name) => Some(DraftSource::Model(Box::new(DraftModel::load(
                &name,
                self.n_ctx(),
                &self.tokenizer,
                &self.options,
            )?))),
        };
        let max = match (&source, args.max) {
            (_, Some(n)) if n > MAX_DRAFT => {
                return Err(EngineError::option(
                    "draft_max",
                    format!("--draft-max {n}: at most {MAX_DRAFT} tokens per pass"),
                ))
            }
            (_, Some(n)) => n,
            (Some(DraftSource::Model(_)), None) => DEFAULT_MODEL_DRAFT,
            (Some(DraftSource::Mtp), None) => DEFAULT_MTP_DRAFT,
            _ => DEFAULT_NGRAM_DRAFT,
        };
        let drafter = match source {
            Some(source) if max > 0 => Drafter::new(source, max),
            _ => {
                self.draft = None;
                return Ok(None);
            }
        };
        let n_batch = self.state.n_batch();
        let mtp = matches!(drafter.source, DraftSource::Mtp);
        if mtp && self.model.mtp.is_none() {
            let kernels = load::kernel_set(self.options.kernels);
            if let Err(e) = self
                .model
                .load_mtp(&self.gguf, self.store.as_ref(), &kernels)
            {
                return Err(self.forward_error(e));
            }
        }
        let opts = StateOptions {
            n_ctx: self.n_ctx(),
            n_batch,
            n_logits: max + 1,
            mtp,
        };
        self.state = load::carve_state(&self.path, &self.model, &opts)?;
        self.state.set_attn_skip_eps(self.options.attn_skip_eps);
        self.cached.clear();
        let described = drafter.describe();
        self.draft = Some(drafter);
        Ok(Some(described))
    }

    /// What drafts tokens, if anything (for logs and JSON).
    pub fn drafting(&self) -> Option<String> {
        self.draft.as_ref().map(Drafter::describe)
    }

    /// The pieces a caller that drives the model itself needs (perplexity). The cache is
    /// forgotten: whatever the caller runs replaces it.
    pub fn parts(
        &mut self,
    ) -> (
        &Tokenizer,
        &Model,
        &mut State,
        &dyn WeightStore,
        &dyn Parallel,
    ) {
        self.cached.clear();
        self.state.reset();
        (
            &self.tokenizer,
            &self.model,
            &mut self.state,
            self.store.as_ref(),
            self.par.as_ref(),
        )
    }

    /// The embedding of `tokens`: every position's final normed hidden state (no LM head),
    /// pooled as `pooling` says and scaled to unit length. The tokens run on a fresh cache, so
    /// an embedding never depends on what ran before; the cache is left empty.
    pub fn embed(&mut self, tokens: &[u32], pooling: Pooling) -> Result<Vec<f32>, EngineError> {
        if tokens.is_empty() {
            return Err(EngineError::BadPrompt {
                tokens: 0,
                n_ctx: self.n_ctx(),
                message: "nothing to embed: the input has no tokens".into(),
            });
        }
        if tokens.len() > self.n_ctx() {
            return Err(self.too_long(
                tokens.len(),
                format!(
                "the input is {} tokens but the context holds {} (-c {}): shorten it or raise -c",
                tokens.len(),
                self.n_ctx(),
                self.n_ctx()
            ),
            ));
        }
        self.check_memory_floor()?;
        self.cached.clear();
        self.state.reset();
        let mut pooler = Pooler::new(pooling, self.model.hp.n_embd);
        let result = self.model.forward_batch_hidden(
            &mut self.state,
            self.store.as_ref(),
            self.par.as_ref(),
            tokens,
            0,
            &mut |t, hidden| pooler.add(t, hidden),
        );
        // The cache now holds the input, which no generation asked for: forget it.
        self.state.reset();
        result.map_err(|e| self.forward_error(e))?;
        let embedding = pooler.finish();
        if embedding.iter().any(|v| !v.is_finite()) {
            return Err(EngineError::model(
                &self.path,
                format!(
                    "{}: the embedding is not finite; run `smolrun perplexity` on this file to \
                     check it",
                    self.path.display()
                ),
            ));
        }
        Ok(embedding)
    }

    /// How many tokens the cache holds.
    pub fn n_cached(&self) -> usize {
        self.cached.len()
    }

    /// The tokens the cache holds, in order.
    pub fn cached_tokens(&self) -> &[u32] {
        &self.cached
    }

    /// The logits after the last token run.
    pub fn logits(&self) -> &[f32] {
        self.state.logits()
    }

    fn too_long(&self, tokens: usize, message: String) -> EngineError {
        EngineError::BadPrompt {
            tokens,
            n_ctx: self.n_ctx(),
            message,
        }
    }

    /// Generates text after `prompt` (see [`generate_with`](Self::generate_with)): `on_text`
    /// gets each piece as soon as it is complete UTF-8. Returns the generation and its text.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        sampler: &mut Sampler,
        options: GenerateOptions<'_>,
        filter: Option<&mut dyn TokenFilter>,
        mut on_text: impl FnMut(&str),
    ) -> Result<(Generation, String), EngineError> {
        let mut decoder = StreamDecoder::new();
        let mut text = String::new();
        let mut piece = String::new();
        let mut emit = |piece: &str| {
            if !piece.is_empty() {
                on_text(piece);
                text.push_str(piece);
            }
        };
        let gen = self.generate_with(prompt, sampler, options, filter, &mut |step| {
            piece.clear();
            decoder.push(step.tokenizer, step.token(), &mut piece);
            emit(&piece);
            ControlFlow::Continue(())
        })?;
        // An unfinished character at the end (U+FFFD).
        piece.clear();
        decoder.finish(&mut piece);
        emit(&piece);
        Ok((gen, text))
    }

    /// The generation loop that `run`, `chat`, `loopcheck` and the server share. Runs the tokens
    /// of `prompt` that are not cached yet, then samples a token, hands it to `on_token` and
    /// runs it, until an end-of-generation token, `options`' limits, a full context, low memory
    /// ([`low_memory_message`](Self::low_memory_message) says why) or `on_token` breaking.
    /// After warm-up, a token allocates nothing here (its lists are reserved up front).
    /// With a `filter` (a grammar), the token drawn is checked, and only when the filter
    /// refuses it are the logits masked and a token drawn again from what it allows (llama.cpp's common sampler does the same: one
    /// check per token in the common case instead of a pass over the vocabulary). A filter
    /// that says nothing may follow ends generation as an end-of-generation token would.
    pub fn generate_with(
        &mut self,
        prompt: &[u32],
        sampler: &mut Sampler,
        options: GenerateOptions<'_>,
        mut filter: Option<&mut dyn TokenFilter>,
        on_token: &mut dyn FnMut(TokenStep<'_>) -> ControlFlow<()>,
    ) -> Result<Generation, EngineError> {
        let t0 = Instant::now();
        let prompt_evaluated = self.prefill(prompt)?;
        let prompt_time = t0.elapsed();
        if options.penalize_prompt {
            for &t in prompt {
                sampler.accept(t);
            }
        }
        let t1 = Instant::now();
        self.low_memory = None;
        let max_tokens = options.max_tokens;
        // Room for every token the context can hold, so that no push below reallocates: the
        // cache's list (once per engine), and the generated ids (the last one is not run; more
        // only when joined pieces shorten the cache).
        let room = self.n_ctx() - self.cached.len();
        self.cached.reserve(room);
        // With a context shift the answer may outgrow the context: room for the whole budget
        // (an answer with no budget that shifts grows its list by doubling, rarely).
        let most = match options.context_shift {
            Some(_) => max_tokens.unwrap_or(room + 1),
            None => max_tokens.map_or(room + 1, |n| n.min(room + 1)),
        };
        let mut tokens = Vec::with_capacity(most);
        let mut spec = SpecStats::default();
        // The last verify pass, while its rows are being sampled: the cache length before it
        // (`base`) and the row whose logits come next. Its tokens (the sampled one, then the
        // draft) are `self.draft`'s buffer, all of them in the cache; after a rejection, or when
        // generation stops, the cache goes back to the tokens accepted.
        let mut verifying: Option<(usize, usize)> = None;
        let mut digest = options.digest_logits.then_some(FNV_OFFSET);
        let mut shifted_out = 0;
        let stop_reason = loop {
            if options.interrupt.is_some_and(|i| i.load(Ordering::Relaxed)) {
                break StopReason::Interrupted;
            }
            if max_tokens.is_some_and(|n| tokens.len() >= n) {
                break StopReason::Length;
            }
            // Row `row` of a verify pass holds the logits after its token `row`; the pass's
            // next token is the draft for them.
            let drafted = match (verifying, &self.draft) {
                (Some((_, row)), Some(d)) => d.tokens.get(row + 1).copied(),
                _ => None,
            };
            let logits = match verifying {
                Some((_, row)) => self.state.logits_row(row),
                None => self.state.logits(),
            };
            if let Some(d) = &mut digest {
                *d = fnv1a_f32(*d, logits);
            }
            let sampling_error = |e: smolrun_core::sampler::SamplerError| {
                EngineError::model(
                    &self.path,
                    format!("{}: sampling failed: {e}", self.path.display()),
                )
            };
            let mut pick = match drafted {
                Some(d) => sampler.sample_draft(logits, Draft::Token(d)),
                None => sampler.sample(logits).map(|s| (s, false)),
            }
            .map_err(sampling_error)?;
            if let Some(f) = filter.as_deref_mut() {
                if !f.allows(&self.tokenizer, pick.0.token) {
                    let masked = f.masked(&self.tokenizer, logits);
                    pick = match drafted {
                        Some(d) => sampler.sample_draft(masked, Draft::Token(d)),
                        None => sampler.sample(masked).map(|s| (s, false)),
                    }
                    .map_err(sampling_error)?;
                }
            }
            let (sampled, accepted) = pick;
            let token = sampled.token;
            if let Some(f) = filter.as_deref_mut() {
                f.accept(&self.tokenizer, token);
            }
            let end = self.tokenizer.is_eog(token);
            // The grammar is complete and allows nothing more: this token is the last one.
            let last = !end && filter.as_deref().is_some_and(|f| f.finished());
            let flow = if end {
                ControlFlow::Continue(())
            } else {
                on_token(TokenStep {
                    sampled,
                    tokenizer: &self.tokenizer,
                })
            };
            sampler.accept(token);
            tokens.push(token);
            if let Some((base, row)) = &mut verifying {
                if accepted {
                    // The draft is this token: it is in the cache already, and the next row
                    // holds the logits after it.
                    spec.accepted += 1;
                    *row += 1;
                } else {
                    // Rejected (or the pass's last row): the cache keeps the pass's tokens up
                    // to this row's, and `token` runs next.
                    let keep = *base + *row + 1;
                    self.cached.truncate(keep);
                    self.state.rewind(keep).map_err(|e| self.forward_error(e))?;
                    verifying = None;
                }
            }
            if end || last {
                break StopReason::EndOfText;
            }
            if flow.is_break() {
                break StopReason::Stopped;
            }
            if max_tokens.is_some_and(|n| tokens.len() >= n) {
                break StopReason::Length;
            }
            if verifying.is_none() && self.cached.len() >= self.n_ctx() {
                match options.context_shift {
                    Some(n_keep) if self.can_shift_context() => {
                        shifted_out += self.shift_context(n_keep)?;
                    }
                    _ => break StopReason::ContextFull,
                }
            }
            if let Err(why) = self.check_memory_floor() {
                self.low_memory = Some(why.to_string());
                break StopReason::LowMemory;
            }
            if verifying.is_some() {
                continue;
            }
            // Tokens this pass may still yield (the one it runs and the drafts after it).
            let left = max_tokens.map_or(usize::MAX, |n| n - tokens.len());
            verifying = self.run_token(token, left, &mut spec)?;
        };
        // Stopped inside a verify pass: the cache keeps the tokens accepted, the last included.
        if let Some((base, row)) = verifying {
            let keep = base + row + 1;
            self.cached.truncate(keep);
            self.state.rewind(keep).map_err(|e| self.forward_error(e))?;
        }
        Ok(Generation {
            tokens,
            prompt_evaluated,
            prompt_time,
            gen_time: t1.elapsed(),
            stop: stop_reason,
            spec,
            logits_digest: digest,
            shifted_out,
        })
    }

    /// Runs `token` after the cache: with a draft (up to `left - 1` tokens, and what the
    /// context has room for), one verify pass over the token and the draft, whose rows the
    /// loop then samples (returns the cache length before the pass); else one decode step.
    fn run_token(
        &mut self,
        token: u32,
        left: usize,
        spec: &mut SpecStats,
    ) -> Result<Option<(usize, usize)>, EngineError> {
        spec.passes += 1;
        let base = self.cached.len();
        let room = self.n_ctx() - base - 1;
        // Joined pieces rewrite the cache token by token; they decode without drafts.
        let joining = self.join_pieces && self.model.head_ids.is_some();
        let max = left.saturating_sub(1).min(room);
        let Some(drafter) = self.draft.as_mut().filter(|_| max > 0 && !joining) else {
            self.decode_unguarded(token)?;
            return Ok(None);
        };
        // The context the draft continues ends with `token` (pushed for the lookup, no
        // allocation: the list has room for the whole context).
        self.cached.push(token);
        let target = Target {
            model: &self.model,
            state: &mut self.state,
            store: self.store.as_ref(),
        };
        let drafted = drafter.propose(
            self.par.as_ref(),
            &self.tokenizer,
            &self.cached,
            max,
            target,
        );
        self.cached.pop();
        if drafted? == 0 {
            self.decode_unguarded(token)?;
            return Ok(None);
        }
        let tokens = &drafter.tokens;
        spec.drafted += tokens.len() - 1;
        if let Err(e) = self.model.forward_verify(
            &mut self.state,
            self.store.as_ref(),
            self.par.as_ref(),
            tokens,
            base,
        ) {
            return Err(self.forward_error(e));
        }
        self.cached.extend_from_slice(tokens);
        Ok(Some((base, 0)))
    }
}

/// The first tensor in the file with a NaN or infinite block scale: (name, type, block, scale).
/// Reads the tensors with pread one at a time (at most 64 MB of buffer), so it works whatever
/// store runs the model; it only runs after non-finite logits.
fn first_nonfinite_scale_in_file(
    path: &Path,
    gguf: &Gguf,
) -> Result<Option<(String, GgmlType, usize, f32)>, String> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut buf = Vec::new();
    for t in &gguf.tensors {
        let block = t.ggml_type.type_size();
        // whole blocks per read, so a block never straddles two reads
        let chunk = ((64 << 20) / block).max(1) * block;
        let mut done = 0u64;
        while done < t.n_bytes {
            let n = chunk.min((t.n_bytes - done) as usize);
            buf.resize(n, 0);
            file.read_exact_at(&mut buf, t.offset + done)
                .map_err(|e| format!("{}: reading tensor '{}': {e}", path.display(), t.name))?;
            if let Some((i, v)) = smolrun_core::quant::first_nonfinite_scale(t.ggml_type, &buf) {
                let index = done as usize / block + i;
                return Ok(Some((t.name.to_string(), t.ggml_type, index, v)));
            }
            done += n as u64;
        }
    }
    Ok(None)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Gemma 3 270M in the model folder.
    pub(crate) fn gemma_path() -> PathBuf {
        smolrun_tests::model_path("gemma3-270m")
    }

    /// The options a test opens a model with: `n_ctx` tokens, `threads` threads.
    pub(crate) fn test_options(n_ctx: usize, threads: usize) -> EngineOptions {
        EngineOptions {
            n_ctx: Some(n_ctx),
            threads: Some(threads),
            ..EngineOptions::default()
        }
    }

    pub(crate) fn open_test(path: &Path, n_ctx: usize, threads: usize) -> Engine {
        Engine::open(path.to_str().unwrap(), &test_options(n_ctx, threads)).unwrap()
    }

    fn draft(choice: &str, max: usize) -> DraftOptions {
        DraftOptions {
            choice: DraftChoice::parse(choice),
            max: Some(max),
        }
    }

    #[test]
    fn reusing_the_cached_prefix_gives_the_same_logits_as_a_fresh_run() {
        let path = gemma_path();
        let mut engine = open_test(&path, 64, 1);
        let first = engine.tokenize("The cat sat on the mat.", true, false);
        let second = engine.tokenize("The cat sat on the sofa and slept.", true, false);
        let shared = first
            .iter()
            .zip(&second)
            .take_while(|(a, b)| a == b)
            .count();
        assert!(shared >= 4, "the two texts should share a prefix");

        assert_eq!(engine.prefill(&first).unwrap(), first.len());
        // Only the tokens after the shared prefix run again.
        assert_eq!(engine.prefill(&second).unwrap(), second.len() - shared);
        let reused = engine.state.logits().to_vec();
        assert_eq!(engine.n_cached(), second.len());

        engine.reset();
        assert_eq!(engine.prefill(&second).unwrap(), second.len());
        assert_eq!(engine.state.logits(), &reused[..]);

        // The same prompt again runs its last token only (its logits are needed).
        assert_eq!(engine.prefill(&second).unwrap(), 1);
        assert_eq!(engine.state.logits(), &reused[..]);
    }

    /// A context shift moves the cached rows after the dropped ones down and rotates their
    /// keys to their new positions. The first layer's keys and values depend on the token
    /// alone (not on the context, as every later layer's do, so no shifted cache equals a
    /// fresh run there, in llama.cpp neither), so there the shifted cache must hold what a
    /// fresh run of the kept tokens writes: up to the rounding of rotating an f16 key once
    /// more (measured: 0.00095 and 0.00097 of the head's largest value, one f16 step, against
    /// the bound of two; a shift that forgot to rotate is off by 0.81 of it). Gemma 3's local and global layers rotate with two bases;
    /// Qwen2.5's keys have a bias.
    #[test]
    fn a_shifted_cache_holds_the_first_layers_keys_of_a_fresh_run() {
        let text = "The lighthouse keeper climbed the narrow stairs every evening at dusk. From \
                    the top he could see the fishing boats returning to the harbour, their \
                    lamps swaying gently as the waves rolled in from the open sea. Each night \
                    he wrote the weather, the ships and the hour in a book that his father had \
                    kept before him, and each morning he polished the great lens until it shone";
        for model in ["gemma3-270m", "qwen2.5-coder-0.5b"] {
            let path = smolrun_tests::model_path(model);
            let mut engine = open_test(&path, 64, 2);
            assert!(engine.can_shift_context());
            let tokens = engine.tokenize(text, true, false);
            let prompt = &tokens[..60];
            engine.prefill(prompt).unwrap();
            // Keep 4, drop half of the 56 after them.
            assert_eq!(engine.shift_context(4).unwrap(), 28);
            assert_eq!(engine.n_cached(), 32);
            let kept: Vec<u32> = [&prompt[..4], &prompt[32..]].concat();
            assert_eq!(engine.cached_tokens(), &kept[..]);
            let (keys, values) = engine.state.kv_cache(0).unwrap();
            let (keys, values) = (keys.to_vec(), values.to_vec());

            engine.reset();
            engine.prefill(&kept).unwrap();
            let (fresh_keys, fresh_values) = engine.state.kv_cache(0).unwrap();
            let f = |b: u16| half::f16::from_bits(b).to_f32();
            let kv_dim = keys.len() / 64;
            let head_dim = match &engine.model.layers[0].mixer {
                smolrun_core::model::TokenMixer::Attention(a) => a.shape.head_dim,
                _ => unreachable!(),
            };
            let n = 32 * kv_dim;
            assert_eq!(
                values[..n],
                fresh_values[..n],
                "{model}: values are moved as they are"
            );
            let mut worst = 0f32;
            for (shifted, fresh) in keys[..n]
                .chunks_exact(head_dim)
                .zip(fresh_keys[..n].chunks_exact(head_dim))
            {
                let scale = fresh.iter().map(|&b| f(b).abs()).fold(0f32, f32::max);
                for (&a, &b) in shifted.iter().zip(fresh) {
                    worst = worst.max((f(a) - f(b)).abs() / scale);
                }
            }
            assert!(
                worst < 1.0 / 512.0,
                "{model}: keys off by {worst} of a head's largest"
            );
        }
    }

    /// With a context shift an answer runs past the context (to its budget), allocating
    /// nothing per token, and says how many tokens were shifted out; without one it stops
    /// when the context is full. A recurrent model cannot shift and stops there too.
    #[test]
    fn generation_goes_on_past_a_full_context_with_a_shift() {
        let path = smolrun_tests::model_path("synthetic-qwen3");
        let mut engine = open_test(&path, 32, 1);
        let prompt = engine.tokenize("The cat sat on the mat. The dog", false, false);
        let generate = |engine: &mut Engine, shift: Option<usize>| {
            let mut sampler = engine.sampler(SamplerParams::greedy()).unwrap();
            let options = GenerateOptions {
                max_tokens: Some(100),
                context_shift: shift,
                ..GenerateOptions::default()
            };
            engine.reset();
            engine
                .generate_with(&prompt, &mut sampler, options, None, &mut |_| {
                    ControlFlow::Continue(())
                })
                .unwrap()
        };
        let plain = generate(&mut engine, None);
        assert_eq!(plain.stop, StopReason::ContextFull);
        assert_eq!(plain.shifted_out, 0);
        let shifted = generate(&mut engine, Some(4));
        assert_eq!(shifted.stop, StopReason::Length, "{:?}", shifted.stop);
        assert_eq!(shifted.tokens.len(), 100);
        assert!(shifted.shifted_out >= 100 + prompt.len() - 32);
        // Up to the first shift the two answers are the same tokens.
        let before = 32 - prompt.len();
        assert_eq!(plain.tokens[..before], shifted.tokens[..before]);

        let path = smolrun_tests::model_path("synthetic-qwen35");
        let mut engine = open_test(&path, 32, 1);
        assert!(!engine.can_shift_context());
        let recurrent = generate(&mut engine, Some(4));
        assert_eq!(recurrent.stop, StopReason::ContextFull);
    }

    /// A recurrent model (Qwen3.5) cannot go back to a shorter prefix: the same prompt again,
    /// or a prompt that shares only part of the cache, runs from the start and gives the
    /// logits of a fresh run (instead of the model's rewind error, which a second chat turn or
    /// a repeated server request would otherwise meet).
    #[test]
    fn a_recurrent_model_starts_over_instead_of_going_back() {
        let path = smolrun_tests::model_path("synthetic-qwen35");
        let mut engine = open_test(&path, 64, 1);
        assert!(engine.state.has_recurrent_layers());
        let first = engine.tokenize("The cat sat on the mat.", false, false);
        let second = engine.tokenize("The cat sat on the sofa and slept.", false, false);
        assert_eq!(engine.prefill(&first).unwrap(), first.len());
        let first_logits = engine.state.logits().to_vec();
        assert_eq!(engine.prefill(&second).unwrap(), second.len());
        let second_logits = engine.state.logits().to_vec();
        assert_eq!(engine.prefill(&first).unwrap(), first.len());
        assert_eq!(engine.state.logits(), &first_logits[..]);
        engine.reset();
        assert_eq!(engine.prefill(&second).unwrap(), second.len());
        assert_eq!(engine.state.logits(), &second_logits[..]);
        // A longer prompt that extends the cache goes on from where it is.
        let longer = [second.as_slice(), &first[..2]].concat();
        assert_eq!(engine.prefill(&longer).unwrap(), 2);
    }

    /// Speculative decoding on a recurrent model (synthetic-qwen35): with drafts from its MTP
    /// layer, from prompt lookup and from a draft model (synthetic-qwen3: the same vocabulary,
    /// its drafts mostly wrong), accepted and rejected, the greedy tokens are plain decoding's
    /// (the state goes back to the last accepted token through the copies the verify pass
    /// keeps); a break inside a verified run leaves the state at the accepted tokens; and the
    /// MTP drafts are mostly accepted (the synthetic MTP layer is built to be right ~90% of the
    /// time).
    #[test]
    fn drafts_on_a_recurrent_model_give_plain_decodings_tokens() {
        let path = smolrun_tests::model_path("synthetic-qwen35");
        let draft_model = smolrun_tests::model_path("synthetic-qwen3");
        let mut engine = open_test(&path, 256, 1);
        let prompt = engine.tokenize("The cat sat on the mat. The dog sat on the", false, false);
        let generate = |engine: &mut Engine, stop_at: usize| {
            let mut sampler = engine.sampler(SamplerParams::greedy()).unwrap();
            let mut n = 0;
            let options = GenerateOptions {
                max_tokens: Some(48),
                ..GenerateOptions::default()
            };
            engine
                .generate_with(&prompt, &mut sampler, options, None, &mut |_| {
                    n += 1;
                    match n > stop_at {
                        true => ControlFlow::Break(()),
                        false => ControlFlow::Continue(()),
                    }
                })
                .unwrap()
        };
        let plain = generate(&mut engine, usize::MAX);
        assert_eq!(plain.tokens.len(), 48);
        for (draft_from, max) in [
            ("mtp", 3),
            ("mtp", 1),
            ("ngram", 6),
            (draft_model.to_str().unwrap(), 4),
        ] {
            let args = draft(draft_from, max);
            assert!(engine.set_draft(&args).unwrap().is_some());
            let spec = generate(&mut engine, usize::MAX);
            assert_eq!(
                spec.tokens, plain.tokens,
                "--draft {draft_from} --draft-max {max}"
            );
            let s = spec.spec;
            eprintln!("synthetic-qwen35 --draft {draft_from} --draft-max {max}: {s:?}");
            if draft_from == "mtp" {
                assert!(
                    s.accept_rate().unwrap() > 0.6 && s.passes < 30,
                    "--draft mtp: {s:?}"
                );
            }
            if draft_from != "ngram" {
                assert!(
                    s.accepted < s.drafted,
                    "--draft {draft_from}: no rejection: {s:?}"
                );
            }
            for stop_at in [0, 5, 12, 13] {
                let spec = generate(&mut engine, stop_at);
                assert_eq!(
                    spec.tokens,
                    plain.tokens[..stop_at + 1],
                    "break at {stop_at}"
                );
                let context: Vec<u32> = prompt.iter().chain(&spec.tokens).copied().collect();
                assert!(context.starts_with(&engine.cached));
                assert_eq!(engine.state.pos, engine.cached.len());
            }
        }
    }

    /// Speculative decoding on LFM2's short convolutions (synthetic-lfm2): with drafts from
    /// prompt lookup and from a draft model (synthetic-qwen3: the same vocabulary, its drafts
    /// mostly wrong) and from itself (every draft right), the greedy tokens are plain decoding's:
    /// a rejected draft takes every conv window back to the last accepted token through the
    /// copies the verify pass keeps.
    #[test]
    fn drafts_on_lfm2_give_plain_decodings_tokens() {
        let path = smolrun_tests::model_path("synthetic-lfm2");
        let draft_model = smolrun_tests::model_path("synthetic-qwen3");
        let mut engine = open_test(&path, 256, 1);
        assert!(engine.state.has_recurrent_layers());
        let prompt = engine.tokenize("The cat sat on the mat. The dog sat on the", false, false);
        let generate = |engine: &mut Engine| {
            let mut sampler = engine.sampler(SamplerParams::greedy()).unwrap();
            let options = GenerateOptions {
                max_tokens: Some(48),
                ..GenerateOptions::default()
            };
            engine
                .generate_with(&prompt, &mut sampler, options, None, &mut |_| {
                    ControlFlow::Continue(())
                })
                .unwrap()
        };
        let plain = generate(&mut engine);
        assert_eq!(plain.tokens.len(), 48);
        // The model as its own draft model: every draft accepted.
        let itself = path.to_str().unwrap();
        for (draft_from, max) in [
            ("ngram", 6),
            (draft_model.to_str().unwrap(), 4),
            (itself, 3),
        ] {
            assert!(engine.set_draft(&draft(draft_from, max)).unwrap().is_some());
            let spec = generate(&mut engine);
            assert_eq!(spec.tokens, plain.tokens, "--draft {draft_from}");
            let s = spec.spec;
            eprintln!("synthetic-lfm2 --draft {draft_from} --draft-max {max}: {s:?}");
            if draft_from == itself {
                assert!(
                    s.accepted > 0,
                    "--draft {draft_from}: nothing accepted: {s:?}"
                );
            } else if draft_from != "ngram" {
                assert!(
                    s.accepted < s.drafted,
                    "--draft {draft_from}: no rejection: {s:?}"
                );
            }
        }
    }

    /// Counts each thread's own heap allocations, for the test below: other tests run on other
    /// threads meanwhile.
    mod counting {
        use std::alloc::{GlobalAlloc, Layout, System};
        use std::cell::Cell;

        thread_local! {
            static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
        }

        pub struct ThreadCounting;

        fn count() {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        }

        /// This thread's allocations so far.
        pub fn allocations() -> usize {
            ALLOCATIONS.with(Cell::get)
        }

        // SAFETY: forwards to the system allocator, only counting.
        unsafe impl GlobalAlloc for ThreadCounting {
            unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
                count();
                unsafe { System.alloc(layout) }
            }
            unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
                unsafe { System.dealloc(ptr, layout) }
            }
            unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
                count();
                unsafe { System.realloc(ptr, layout, new_size) }
            }
        }
    }

    #[global_allocator]
    static GLOBAL: counting::ThreadCounting = counting::ThreadCounting;

    /// The generation loop allocates nothing per token after warm-up: sampling with penalties
    /// and three alternatives, the step handed to the caller, the memory guard's look every 16
    /// tokens, and the forward pass (on one thread, this one, where the counter counts).
    #[test]
    fn the_generation_loop_allocates_nothing_per_token() {
        // A context of 256, and one of 48 that shifts (at tokens ~40 and ~62).
        for (n_ctx, shift) in [(256, None), (48, Some(4))] {
            generate_counting_allocations(n_ctx, shift);
        }
    }

    fn generate_counting_allocations(n_ctx: usize, context_shift: Option<usize>) {
        const N: usize = 80;
        let mut options = test_options(n_ctx, 1);
        options.memory.budget = Some(1 << 40);
        let mut engine = Engine::open(gemma_path().to_str().unwrap(), &options).unwrap();
        assert!(engine.memory.is_some(), "the memory guard watches");
        let mut sampler = engine
            .sampler(SamplerParams {
                n_probs: 3,
                ..SamplerParams::default()
            })
            .unwrap();
        // No end of text: the loop runs all N tokens.
        for id in 0..engine.tokenizer.n_vocab() as u32 {
            if engine.tokenizer.is_eog(id) {
                sampler.ban(id);
            }
        }
        let prompt = engine.tokenize("The history of the old city begins", true, false);
        let options = GenerateOptions {
            max_tokens: Some(N),
            penalize_prompt: true,
            context_shift,
            ..GenerateOptions::default()
        };
        let mut seen = [0usize; N];
        let mut n = 0;
        let gen = engine
            .generate_with(&prompt, &mut sampler, options, None, &mut |step| {
                assert_eq!(step.sampled.top.len(), 3);
                seen[n] = counting::allocations();
                n += 1;
                ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!((gen.stop, gen.tokens.len(), n), (StopReason::Length, N, N));
        assert_eq!(gen.shifted_out > 0, context_shift.is_some());
        let after_warm_up = seen[N - 1] - seen[16];
        assert_eq!(
            after_warm_up, 0,
            "tokens 16..{N} made {after_warm_up} heap allocations"
        );
    }

    /// Speculative decoding allocates nothing per token either: drafting (prompt lookup, or a
    /// draft model: Gemma drafting for itself), the verify pass, sampling its rows and the
    /// rollback after a rejection.
    #[test]
    fn speculative_generation_allocates_nothing_per_token() {
        const N: usize = 96;
        let path = gemma_path();
        for draft_from in ["ngram", path.to_str().unwrap()] {
            let mut engine = open_test(&path, 256, 1);
            let args = draft(draft_from, 4);
            assert!(engine.set_draft(&args).unwrap().is_some());
            let mut sampler = engine
                .sampler(SamplerParams {
                    n_probs: 3,
                    ..SamplerParams::default()
                })
                .unwrap();
            for id in 0..engine.tokenizer.n_vocab() as u32 {
                if engine.tokenizer.is_eog(id) {
                    sampler.ban(id);
                }
            }
            let prompt = engine.tokenize(
                "1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3",
                true,
                false,
            );
            let options = GenerateOptions {
                max_tokens: Some(N),
                ..GenerateOptions::default()
            };
            let mut seen = [0usize; N];
            let mut n = 0;
            let gen = engine
                .generate_with(&prompt, &mut sampler, options, None, &mut |_| {
                    seen[n] = counting::allocations();
                    n += 1;
                    ControlFlow::Continue(())
                })
                .unwrap();
            assert_eq!(gen.tokens.len(), N);
            assert!(gen.spec.accepted > 0, "{draft_from}: {:?}", gen.spec);
            let after_warm_up = seen[N - 1] - seen[16];
            assert_eq!(
                after_warm_up, 0,
                "{draft_from}: tokens 16..{N} made {after_warm_up} heap allocations"
            );
        }
    }

    /// MTP drafting on a recurrent model allocates nothing per token either: the MTP steps,
    /// the copies of the recurrent state a verify pass keeps, and the rewind to them.
    #[test]
    fn mtp_generation_allocates_nothing_per_token() {
        const N: usize = 96;
        let path = smolrun_tests::model_path("synthetic-qwen35");
        let mut engine = open_test(&path, 256, 1);
        let args = draft("mtp", 3);
        assert!(engine.set_draft(&args).unwrap().is_some());
        let mut sampler = engine.sampler(SamplerParams::greedy()).unwrap();
        for id in 0..engine.tokenizer.n_vocab() as u32 {
            if engine.tokenizer.is_eog(id) {
                sampler.ban(id);
            }
        }
        let prompt = engine.tokenize("The cat sat on the mat.", false, false);
        let options = GenerateOptions {
            max_tokens: Some(N),
            ..GenerateOptions::default()
        };
        let mut seen = [0usize; N];
        let mut n = 0;
        let gen = engine
            .generate_with(&prompt, &mut sampler, options, None, &mut |_| {
                seen[n] = counting::allocations();
                n += 1;
                ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(gen.tokens.len(), N);
        let s = gen.spec;
        assert!(s.accepted > 0 && s.accepted < s.drafted, "{s:?}");
        let after_warm_up = seen[N - 1] - seen[16];
        assert_eq!(
            after_warm_up, 0,
            "tokens 16..{N} made {after_warm_up} heap allocations"
        );
    }

    /// With drafts accepted and rejected, the tokens are plain decoding's; stopping inside a
    /// verified run (the caller breaks at token `j`) stops exactly where plain decoding stops,
    /// and leaves the cache holding only accepted tokens, at its position.
    #[test]
    fn a_break_inside_a_verified_run_stops_where_plain_decoding_does() {
        let path = gemma_path();
        let mut engine = open_test(&path, 256, 1);
        let prompt = engine.tokenize(
            "The cat sat on the mat. The dog sat on the log. The bird sat on the",
            true,
            false,
        );
        let greedy = SamplerParams::greedy();
        let generate = |engine: &mut Engine, stop_at: usize| {
            let mut sampler = engine.sampler(greedy).unwrap();
            let mut n = 0;
            let options = GenerateOptions {
                max_tokens: Some(40),
                ..GenerateOptions::default()
            };
            engine
                .generate_with(&prompt, &mut sampler, options, None, &mut |_| {
                    n += 1;
                    if n > stop_at {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })
                .unwrap()
        };
        let plain = generate(&mut engine, usize::MAX);
        assert_eq!(plain.tokens.len(), 40);
        let args = draft("ngram", 6);
        engine.set_draft(&args).unwrap();
        let spec = generate(&mut engine, usize::MAX);
        assert_eq!(spec.tokens, plain.tokens);
        // Drafts were accepted, and rejected (the rollback ran).
        let s = spec.spec;
        assert!(
            s.accepted > 0 && s.accepted < s.drafted && s.passes < 39,
            "{s:?}"
        );
        for stop_at in [0, 1, 5, 12, 13, 27] {
            let spec = generate(&mut engine, stop_at);
            assert_eq!(spec.stop, StopReason::Stopped);
            assert_eq!(
                spec.tokens,
                plain.tokens[..stop_at + 1],
                "break at {stop_at}"
            );
            let context: Vec<u32> = prompt.iter().chain(&spec.tokens).copied().collect();
            assert!(
                context.starts_with(&engine.cached),
                "break at {stop_at}: the cache holds tokens that were not accepted"
            );
            assert!(engine.cached.len() + 1 >= context.len());
            assert_eq!(engine.state.pos, engine.cached.len());
        }
    }

    #[test]
    fn a_prompt_longer_than_the_context_is_refused() {
        let path = gemma_path();
        let mut engine = open_test(&path, 4, 1);
        let tokens = engine.tokenize("one two three four five six", true, false);
        let err = engine.prefill(&tokens).unwrap_err();
        assert!(
            matches!(err, EngineError::BadPrompt { n_ctx: 4, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("context holds 4"), "{err}");
        let err = Engine::open(path.to_str().unwrap(), &test_options(1 << 30, 1))
            .err()
            .unwrap();
        assert!(
            matches!(
                err,
                EngineError::BadOption {
                    option: "n_ctx",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("trained on"), "{err}");
    }
}
