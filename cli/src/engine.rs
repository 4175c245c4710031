//! Loading a model and generating text: the glue that `run`, `chat`, `perplexity` (and the
//! server) share. A command opens the file ([`open_model`]), parses it, and builds an
//! [`Engine`] that borrows the parsed file for as long as it runs.
//!
//! The engine remembers which tokens its KV cache holds, so a chat turn only runs the tokens
//! that are new since the last turn (the longest common prefix is kept).

use crate::chat_template::ChatTemplate;
use crate::memory_guard::MemoryGuard;
pub use crate::memory_guard::{MemoryArgs, WeightsMode};
use crate::moe::{MoeReport, PagerHandle};
use crate::speculative::{
    DraftArgs, DraftChoice, DraftModel, DraftSource, Drafter, SpecStats, Target,
};
use smolrun_core::gguf::Gguf;
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::embedding::{Pooler, Pooling};
use smolrun_core::model::pager::MoeStats;
pub use smolrun_core::model::stream::MIN_ZONE_BYTES;
use smolrun_core::model::{
    Family, Model, ModelError, PreadStore, ResidentStore, State, StreamBudget, StreamPlan,
    StreamStore, TensorTable, WeightKey, WeightStore,
};
use smolrun_core::platform::{Parallel, ReadAt, SingleThread};
use smolrun_core::quant::GgmlType;
use smolrun_core::sampler::{Draft, Sampled, Sampler, SamplerParams};
use smolrun_core::tokenizer::{StreamDecoder, Tokenizer};
use smolrun_linux::{CondSignal, FileReader, MappedFile, StreamingStore};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Context length when `-c` is not given (capped at what the model was trained on).
pub const DEFAULT_CTX: usize = 4096;

const SHORT_NAMES: &str = "gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b";

/// A model file as the run reaches it: mapped whole, or not mapped at all (its header read
/// into memory, its tensors read by the store: streamed, or with pread).
pub enum ModelFile {
    Mapped(MappedFile),
    /// A mixture of experts mapped whole, its experts paged from flash into pools (only the
    /// non-expert part is read through the mapping).
    Paged {
        /// The whole file, or the non-expert prefix of an experts-last file.
        mapped: MappedFile,
        file_len: u64,
        pager: crate::moe::PagerSettings,
    },
    Unmapped {
        reader: FileReader,
        /// The first bytes of the file, enough to hold its whole header.
        header: Vec<u8>,
        /// Streamed (a resident set and stream zones), or `None`: the pread store.
        stream: Option<StreamConfig>,
    },
}

/// How a streamed model is streamed.
#[derive(Debug, Clone, Copy)]
pub struct StreamConfig {
    pub budget: StreamBudget,
    /// Reader threads (`SMOLRUN_STREAM_READERS`, default [`DEFAULT_STREAM_READERS`]).
    pub readers: usize,
    /// Every streamed weight compared with its checksum (`SMOLRUN_STREAM_VERIFY=1`).
    pub verify: bool,
    /// `--flash-mbps`; otherwise probed at load.
    pub flash_mbps: Option<f64>,
    /// Load the MTP layer of a model that has one and keep it, with the LM head, resident
    /// ([`MemoryArgs::pin_mtp`]).
    pub mtp: bool,
}

/// Reader threads of the streaming store: enough requests in flight to keep eMMC and SD cards
/// busy (each is mostly asleep in a read).
pub const DEFAULT_STREAM_READERS: usize = 3;

/// Reader threads of the streaming store and of the expert pager: `SMOLRUN_STREAM_READERS`,
/// else [`DEFAULT_STREAM_READERS`].
pub fn stream_readers() -> usize {
    std::env::var("SMOLRUN_STREAM_READERS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_STREAM_READERS)
}

impl StreamConfig {
    fn new(budget: StreamBudget, mem: &MemoryArgs) -> StreamConfig {
        let readers = stream_readers();
        let verify = std::env::var("SMOLRUN_STREAM_VERIFY").is_ok_and(|v| v == "1");
        StreamConfig {
            budget,
            readers,
            verify,
            flash_mbps: mem.flash_mbps,
            mtp: mem.pin_mtp,
        }
    }
}

/// Whether a stream plan for `budget` can hold its zones (from the header alone).
fn stream_plan_fits(gguf: &Gguf, reader: &FileReader, budget: StreamBudget) -> bool {
    let (whole, _) = weight_keys_from_header(gguf);
    let align = reader.direct_alignment().max(64) as u64;
    StreamPlan::new(&TensorTable::new(gguf), &whole, budget, align).is_ok()
}

/// The weights a pass asks for whole, from the header alone (every matrix but an untied
/// embedding table, read by row, and the experts, asked for one by one), and one expert of each
/// expert tensor: what a stream plan is made from before the model is loaded.
fn weight_keys_from_header(gguf: &Gguf) -> (Vec<WeightKey>, Vec<WeightKey>) {
    let tied = gguf.tensor("output.weight").is_none();
    let (mut whole, mut experts) = (Vec::new(), Vec::new());
    for (id, t) in gguf.tensors.iter().enumerate() {
        if t.n_dims < 2 || (t.name == "token_embd.weight" && !tied) {
            continue;
        }
        if smolrun_core::gguf::is_expert_tensor(t) {
            experts.push(WeightKey::expert(id, 0));
        } else {
            whole.push(WeightKey::tensor(id));
        }
    }
    (whole, experts)
}

impl ModelFile {
    /// The bytes to parse the header from: the whole mapping, or the header prefix.
    pub fn header_bytes(&self) -> &[u8] {
        match self {
            ModelFile::Mapped(m) | ModelFile::Paged { mapped: m, .. } => m.bytes(),
            ModelFile::Unmapped { header, .. } => header,
        }
    }

    pub fn len(&self) -> u64 {
        match self {
            ModelFile::Mapped(m) => m.bytes().len() as u64,
            ModelFile::Paged { file_len, .. } => *file_len,
            ModelFile::Unmapped { reader, .. } => reader.len(),
        }
    }

    pub fn mapped(&self) -> Option<&MappedFile> {
        match self {
            ModelFile::Mapped(m) | ModelFile::Paged { mapped: m, .. } => Some(m),
            ModelFile::Unmapped { .. } => None,
        }
    }

    /// What the memory guard counts for the weights instead of the plan's (None: mapped, the
    /// plan's own numbers): a pread store's scratch buffer, or a streaming store's resident
    /// set, zones and expert scratch. A budget too small for the zones is refused here, before
    /// anything is loaded.
    pub fn weights_held(&self, path: &Path, gguf: &Gguf) -> Result<Option<u64>, String> {
        match self {
            ModelFile::Mapped(_) => Ok(None),
            ModelFile::Paged { pager, .. } => Ok(crate::moe::ExpertLayout::of(gguf, None)
                .map(|x| x.held_bytes(pager.slots_per_layer))),
            ModelFile::Unmapped { stream: None, .. } => {
                Ok(Some(TensorTable::new(gguf).largest_weight()))
            }
            ModelFile::Unmapped {
                stream: Some(config),
                reader,
                ..
            } => {
                let table = TensorTable::new(gguf);
                let (whole, experts) = weight_keys_from_header(gguf);
                let align = reader.direct_alignment().max(64) as u64;
                let plan = StreamPlan::new(&table, &whole, config.budget, align)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                let expert_scratch = experts
                    .iter()
                    .filter_map(|&k| table.extent(k).ok())
                    .map(|r| smolrun_core::model::stream::largest_span(r.end - r.start, align))
                    .max()
                    .unwrap_or(0);
                Ok(Some(plan.resident_bytes + plan.zone_bytes + expert_scratch))
            }
        }
    }
}

/// The header prefix read first when the file is not mapped; doubled until the header parses.
const FIRST_HEADER_READ: usize = 1 << 20;

/// Reads the first bytes of `reader` until they hold the whole GGUF header (a prefix that
/// parses). A file that is not GGUF fails at the first read, not after reading it all.
fn read_header(path: &Path, reader: &FileReader) -> Result<Vec<u8>, String> {
    let file_len = reader.len();
    let mut want = FIRST_HEADER_READ as u64;
    loop {
        let len = want.min(file_len) as usize;
        let mut prefix = vec![0u8; len];
        reader
            .read_at(0, &mut prefix)
            .map_err(|e| smolrun_linux::describe_io_error(&e))?;
        match Gguf::parse_header(&prefix, file_len) {
            Ok(_) => return Ok(prefix),
            Err(e) if e.wants_more_bytes() && (len as u64) < file_len => want *= 2,
            Err(e) => {
                return Err(format!(
                    "{} is not a readable GGUF model file: {e}",
                    path.display()
                ))
            }
        }
    }
}

/// `--state-f16` of this run, set when the model file is opened and applied to every model
/// this process loads from then on (as the MoE options are).
static STATE_F16: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Resolves `-m` and opens the file as `--weights` says: mapped, or with only its header read
/// (`stream`, `pread`, or `auto` with a model that does not fit in memory, or a file bigger
/// than the address space this process may map). `n_ctx` is the context the run asks for
/// (`None`: the default), which the memory check under `auto` counts. A missing model says how
/// to get one.
pub fn open_model(
    name_or_path: &str,
    mem: &MemoryArgs,
    n_ctx: Option<usize>,
) -> Result<(PathBuf, ModelFile), String> {
    STATE_F16.store(mem.state_f16, std::sync::atomic::Ordering::Relaxed);
    let mode = mem.weights;
    let path = crate::models::resolve(name_or_path)?;
    if !path.exists() {
        return Err(format!(
            "model '{name_or_path}' not found (looked for {}): give the path of a .gguf file or one \
             of the short names {SHORT_NAMES}; tools/fetch-models.sh downloads those",
            path.display()
        ));
    }
    if path.is_dir() {
        return Err(format!(
            "model '{}' is a directory: give the path of a .gguf file",
            path.display()
        ));
    }
    let file_len = std::fs::metadata(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .len();
    let budget = crate::platform::address_space_budget();
    let fits = crate::platform::check_address_space(&path, file_len, budget);
    // The address space left for weights, when it is what keeps the file from being mapped.
    let mut address_space_for_weights = None;
    let mut too_big_to_map = String::new();
    let map = match (mode, fits, budget) {
        (WeightsMode::Pread | WeightsMode::Stream, ..) => false,
        (WeightsMode::Resident, fits, _) => {
            fits?;
            true
        }
        (WeightsMode::Auto, Ok(()), _) | (WeightsMode::Auto, Err(_), None) => true,
        (WeightsMode::Auto, Err(_), Some((budget, who))) => {
            too_big_to_map = format!(
                "smolrun: {} is {} MB, more than the {} MB of address space {who} leaves for a \
                 model file",
                path.display(),
                file_len / 1_000_000,
                budget.for_file() / 1_000_000
            );
            address_space_for_weights = Some(budget.for_file());
            false
        }
    };
    let reader = FileReader::open(&path).map_err(|e| smolrun_linux::describe_io_error(&e))?;
    let header = read_header(&path, &reader)?;
    let gguf = Gguf::parse_header(&header, file_len)
        .map_err(|e| format!("{} is not a readable GGUF model file: {e}", path.display()))?;
    let trained = smolrun_core::model::HParams::from_gguf(&gguf)
        .map(|hp| hp.n_ctx_train)
        .unwrap_or(usize::MAX);
    let ctx = context_length(&path, trained, n_ctx)?;
    let budget = match mem.resident_mb {
        Some(mb) => StreamBudget::Resident(mb.saturating_mul(1_000_000)),
        None => {
            let room = crate::memory_guard::stream_weights_budget(&gguf, ctx, mem);
            // The resident set and the zones take address space as a mapping would.
            StreamBudget::Total(room.min(address_space_for_weights.unwrap_or(u64::MAX)))
        }
    };
    // A mixture of experts pages its experts rather than streaming everything, when its
    // pools hold a token's experts in the room there is.
    let experts_last = smolrun_core::gguf::expert_data_offset(&gguf)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let room = crate::moe::PagerRoom {
        memory: crate::memory_guard::room_for_weights(&gguf, ctx, mem),
        address_space: address_space_for_weights,
        experts_last,
    };
    let pager = crate::moe::decide(&gguf, mem, room)?;
    match (&pager, experts_last) {
        _ if too_big_to_map.is_empty() => {}
        (Some(_), Some(prefix)) => eprintln!(
            "{too_big_to_map}: only its first {} MB (everything but the experts) is mapped",
            prefix / 1_000_000
        ),
        _ => eprintln!(
            "{too_big_to_map}: its weights are streamed instead of mapped (--weights stream)"
        ),
    }
    if let (Some(p), None) = (&pager, mem.moe_pool) {
        eprintln!(
            "smolrun: {} does not fit with -c {ctx}: its experts are paged from flash, {} per \
             layer kept in RAM (--moe-pool N to choose, --moe-pool all to map it all)",
            path.display(),
            p.slots_per_layer
        );
    }
    let stream = match mode {
        _ if pager.is_some() => None,
        WeightsMode::Stream => Some(StreamConfig::new(budget, mem)),
        WeightsMode::Pread | WeightsMode::Resident => None,
        // Too little address space even for the stream zones: the pread store's one buffer.
        WeightsMode::Auto if !map => {
            if stream_plan_fits(&gguf, &reader, budget) {
                Some(StreamConfig::new(budget, mem))
            } else {
                eprintln!(
                    "smolrun: not even the stream zones fit in that address space: the weights \
                     are read with pread into one buffer (slow)"
                );
                None
            }
        }
        // A budget too small even for the stream zones: mapped, and the memory guard refuses
        // it with the numbers by part.
        WeightsMode::Auto => match crate::memory_guard::room_for_weights(&gguf, ctx, mem) {
            Some(room) if stream_plan_fits(&gguf, &reader, budget) => {
                eprintln!(
                    "smolrun: {} does not fit in memory with -c {ctx}: {} MB is left for its \
                     weights, the rest is streamed from flash every token (--weights stream; \
                     --weights resident to map it anyway)",
                    path.display(),
                    room / 1_000_000
                );
                Some(StreamConfig::new(budget, mem))
            }
            _ => None,
        },
    };
    drop(gguf);
    let file = if let Some(pager) = pager {
        // Only what is read through the mapping: an experts-last file's prefix.
        let mapped = match experts_last {
            Some(prefix) => MappedFile::open_prefix(&path, prefix)?,
            None => MappedFile::open(&path)?,
        };
        ModelFile::Paged {
            mapped,
            file_len,
            pager,
        }
    } else if map && stream.is_none() {
        ModelFile::Mapped(MappedFile::open(&path)?)
    } else {
        ModelFile::Unmapped {
            reader,
            header,
            stream,
        }
    };
    Ok((path, file))
}

/// Parses the model's header (from the mapping, or from the prefix read); the error names the
/// file.
pub fn parse_gguf<'a>(path: &Path, file: &'a ModelFile) -> Result<Gguf<'a>, String> {
    Gguf::parse_header(file.header_bytes(), file.len())
        .map_err(|e| format!("{} is not a readable GGUF model file: {e}", path.display()))
}

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

pub struct Engine<'g> {
    /// The flash, when the weights are streamed.
    flash: Option<FlashProbe>,
    /// The expert pager, when a mixture of experts is paged.
    pager: Option<PagerHandle>,
    pub path: PathBuf,
    pub gguf: &'g Gguf<'g>,
    pub model: Model,
    pub tokenizer: Tokenizer,
    store: Box<dyn WeightStore + 'g>,
    par: Box<dyn Parallel>,
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
    /// Speculative decoding ([`Engine::set_draft`]); `None`: one token per pass.
    draft: Option<Drafter>,
}

impl Drop for Engine<'_> {
    /// Writes the pager's warm list (`--moe-warm`) for the next run.
    fn drop(&mut self) {
        if let Some(Err(e)) = self.pager.as_ref().map(PagerHandle::save_warm_list) {
            eprintln!("smolrun: {e}");
        }
    }
}

/// Builds the streaming store: the model's setup through it, its plan for `config`, the
/// resident set read, the flash probed (unless `--flash-mbps`), the reader threads started.
fn start_streaming<'g>(
    path: &Path,
    gguf: &Gguf,
    kernels: &KernelSet,
    config: StreamConfig,
) -> Result<(Model, Box<dyn WeightStore + 'g>, FlashProbe), String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    // A reader of its own: the reader threads outlive any borrow of the opened file.
    let reader = FileReader::open(path).map_err(|e| smolrun_linux::describe_io_error(&e))?;
    let mut store = StreamStore::new(reader, gguf, CondSignal::default(), CondSignal::default())
        .map_err(|e| at(&e))?;
    let mut model = Model::load_from(gguf, &store, kernels).map_err(|e| at(&e))?;
    // MTP drafting reads the MTP layer and the LM head again between passes: resident.
    let hp = &model.hp;
    if config.mtp && hp.n_nextn == 1 && hp.mtp_layer().is_some() {
        model.load_mtp(gguf, &store, kernels).map_err(|e| at(&e))?;
    }
    let pinned = model.mtp.as_ref().map_or(Vec::new(), |m| m.keys.clone());
    let plan = StreamPlan::with_pinned(
        store.table(),
        &model.weight_order(),
        &pinned,
        config.budget,
        store.alignment(),
    )
    .map_err(|e| at(&e))?;
    let (flash_mb_s, probe_bytes) = match config.flash_mbps {
        Some(v) => (v, 0),
        None => {
            let probe = FileReader::open(path).map_err(|e| smolrun_linux::describe_io_error(&e))?;
            let mut spans: Vec<_> = plan.streamed.iter().map(|w| w.span.clone()).collect();
            if spans.is_empty() {
                // Everything planned is resident: the experts are what is read while running.
                let align = store.alignment();
                spans = model
                    .expert_keys()
                    .iter()
                    .filter_map(|&k| gguf.tensors.get(k.tensor))
                    .map(|t| t.offset / align * align..(t.offset + t.n_bytes) / align * align)
                    .filter(|r| r.end > r.start)
                    .collect();
            }
            smolrun_linux::probe_read_mbps(&probe, &spans, config.readers)
                .map_err(|e| smolrun_linux::describe_io_error(&e))?
        }
    };
    store
        .plan(&plan, &model.expert_keys(), config.verify)
        .map_err(|e| at(&e))?;
    let stream = StreamingStore::start(store, config.readers)
        .map_err(|e| at(&format!("cannot start the reader threads: {e}")))?;
    crate::repack_cache::verbose(format_args!(
        "streaming: {} MB resident, {} MB streamed per pass, {} MB of zones, flash {flash_mb_s:.0} MB/s",
        plan.resident_bytes / 1_000_000,
        plan.streamed_bytes / 1_000_000,
        plan.zone_bytes / 1_000_000
    ));
    let flash = FlashProbe {
        mb_s: flash_mb_s,
        load_bytes: plan.resident_bytes + probe_bytes + gguf.data_offset,
    };
    Ok((model, Box::new(stream), flash))
}

/// The flash as a streaming load found it.
#[derive(Debug, Clone, Copy)]
pub struct FlashProbe {
    /// Read bandwidth, MB/s (probed, or `--flash-mbps`).
    pub mb_s: f64,
    /// Bytes read while loading: the header, the resident set and the probe.
    pub load_bytes: u64,
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

/// The memory guard, run before [`Engine::load`]: plans the RAM the run needs for the context
/// `n_ctx` (`None`: the default, as `Engine::load` picks it) and refuses with the numbers when
/// the device (or `--mem-budget`) cannot give it. It only reads the header, so a refused model
/// costs no flash reads. Hand the result to [`Engine::watch_memory`].
pub fn check_memory(
    path: &Path,
    gguf: &Gguf,
    file: &ModelFile,
    n_ctx: Option<usize>,
    args: &MemoryArgs,
) -> Result<Option<MemoryGuard>, String> {
    let trained = smolrun_core::model::HParams::from_gguf(gguf)
        .map(|hp| hp.n_ctx_train)
        .unwrap_or(usize::MAX);
    let n_ctx = context_length(path, trained, n_ctx)?;
    let held = file.weights_held(path, gguf)?;
    crate::memory_guard::check_memory(path, gguf, n_ctx, args, held)
}

/// Run after [`Engine::load`]: an embedding table that is not the LM head is advised
/// MADV_RANDOM, so that reading a row does not read ahead the rows around it, and the pages of
/// it that loading read ahead (around the header and the norms next to it) are dropped from
/// the page cache. Its rows are then read one by one from flash.
pub fn leave_embeddings_on_flash(file: &ModelFile, gguf: &Gguf) -> Result<(), String> {
    match file.mapped() {
        Some(mapped) => crate::memory_guard::leave_embeddings_on_flash(mapped, gguf),
        // Nothing mapped: a row read with pread leaves nothing behind but reclaimable cache.
        None => Ok(()),
    }
}

/// Model setup copies the small vectors (norms, biases) out of the file; they lie between the
/// weight matrices, one or two pages each. Read them all at once, and only their pages: a fault
/// on each through the mapping would wait for a whole readahead window around it (with
/// `read_ahead_kb` at 8 MB, most of the layers' weights), which on a start from the repack
/// cache are never read again.
///
/// Only for a tied embedding table (the LM head, read whole anyway). An untied table is left
/// on flash by [`leave_embeddings_on_flash`], which drops what loading read ahead into it; the
/// weights that follow it are then best faulted in at load as before: the first fault there
/// reads a window around it, back into the table, and done during the forward pass, after the
/// drop, that would leave megabytes of the table in RAM (cli/tests/memory_guard.rs).
fn prefetch_vectors(path: &Path, gguf: &Gguf) {
    if gguf.tensor("output.weight").is_some() {
        return;
    }
    let vectors = gguf
        .tensors
        .iter()
        .filter(|t| t.n_dims == 1)
        .map(|t| t.offset..t.offset.saturating_add(t.n_bytes));
    if let Err(why) = smolrun_linux::prefetch_ranges(path, vectors) {
        crate::repack_cache::verbose(format_args!("{why}"));
    }
}

/// With SMOLRUN_VERBOSE set, prints how long one phase of loading took (since `start`): what
/// the load time printed by `run` is made of.
pub fn phase_time(what: &str, start: Instant) {
    if std::env::var_os("SMOLRUN_VERBOSE").is_some() {
        eprintln!(
            "smolrun: {what}: {:.1} ms",
            start.elapsed().as_secs_f64() * 1e3
        );
    }
}

/// The context length for a requested `-c` (None: [`DEFAULT_CTX`] or the trained context if
/// smaller), checked against what the model was trained on.
fn context_length(path: &Path, trained: usize, requested: Option<usize>) -> Result<usize, String> {
    match requested {
        None => Ok(DEFAULT_CTX.min(trained)),
        Some(0) => Err("-c 0: the context must hold at least 1 token".into()),
        Some(n) if n > trained => Err(format!(
            "-c {n} is more than the {trained} tokens {} was trained on; use -c {trained} or less",
            path.display()
        )),
        Some(n) => Ok(n),
    }
}

impl<'g> Engine<'g> {
    /// Checks the architecture, builds the tokenizer and the model, and sizes the state for
    /// `n_ctx` tokens (`None`: [`DEFAULT_CTX`] or the trained context if smaller).
    pub fn load(
        path: &Path,
        gguf: &'g Gguf<'g>,
        file: &'g ModelFile,
        n_ctx: Option<usize>,
        threads: usize,
    ) -> Result<Engine<'g>, String> {
        let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
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
                let tokenizer = Tokenizer::from_gguf(gguf);
                phase_time("tokenizer (own thread)", t);
                tokenizer
            };
            let thread = std::thread::Builder::new()
                .name("smolrun-tokenizer".into())
                .spawn_scoped(scope, build);
            let rest = Self::load_weights(path, gguf, file, n_ctx, threads);
            let tokenizer = match thread {
                Ok(handle) => handle
                    .join()
                    .map_err(|_| at(&"building the tokenizer failed (its thread panicked)"))?,
                // No thread to be had: build it here.
                Err(_) => build(),
            };
            Ok::<_, String>((tokenizer.map_err(|e| at(&e))?, rest))
        })?;
        let (model, state, store, par, flash, pager) = rest?;
        Ok(Engine {
            flash,
            pager,
            path: path.to_path_buf(),
            gguf,
            model,
            tokenizer,
            store,
            par,
            state,
            cached: Vec::new(),
            memory: None,
            join_pieces: false,
            low_memory: None,
            draft: None,
        })
    }

    /// Everything of [`load`](Self::load) but the tokenizer: the model, the state for
    /// `n_ctx`, the weight store (with the repacked weights) and the thread pool.
    #[allow(clippy::type_complexity)]
    fn load_weights(
        path: &Path,
        gguf: &'g Gguf<'g>,
        file: &'g ModelFile,
        n_ctx: Option<usize>,
        threads: usize,
    ) -> Result<
        (
            Model,
            State,
            Box<dyn WeightStore + 'g>,
            Box<dyn Parallel>,
            Option<FlashProbe>,
            Option<PagerHandle>,
        ),
        String,
    > {
        let (model, state, store, flash, pager) = load_weights_only(path, gguf, file, n_ctx)?;
        let t = Instant::now();
        let par = parallel(threads)?;
        phase_time("thread pool", t);
        Ok((model, state, store, par, flash, pager))
    }
}

/// This CPU's fastest kernel set; `SMOLRUN_KERNELS=scalar`: the scalar reference.
fn kernel_set() -> KernelSet {
    match std::env::var("SMOLRUN_KERNELS").as_deref() {
        Ok("scalar") => KernelSet::scalar(),
        _ => KernelSet::select(&crate::platform::cpu_features()),
    }
}

/// The model, the state for `n_ctx` and the weight store (with the repacked weights) of a
/// parsed file, and the flash probe when streamed: an engine's without its tokenizer and
/// threads (a draft model's too).
#[allow(clippy::type_complexity)]
pub fn load_weights_only<'g>(
    path: &Path,
    gguf: &'g Gguf<'g>,
    file: &'g ModelFile,
    n_ctx: Option<usize>,
) -> Result<
    (
        Model,
        State,
        Box<dyn WeightStore + 'g>,
        Option<FlashProbe>,
        Option<PagerHandle>,
    ),
    String,
> {
    {
        let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
        // This CPU's fastest kernel set, chosen once here (every matrix keeps its own);
        // SMOLRUN_KERNELS=scalar forces the scalar reference, which is what the golden
        // comparisons against llama.cpp run on. The SIMD faces agree with the scalar ones within
        // their summation-order bound (core/src/kernels/exactness.rs), but on gemma3-270m, whose
        // activation outliers amplify last-bit differences, three golden checks do not yet hold
        // with them (see tests/tests/perplexity.rs): an open item of the speed work.
        let kernels = kernel_set();
        let t = Instant::now();
        let mut pager = None;
        let (mut model, store, flash): (Model, Box<dyn WeightStore + 'g>, _) = match file {
            ModelFile::Paged {
                mapped,
                pager: settings,
                file_len,
            } => {
                prefetch_vectors(path, gguf);
                let store = if (mapped.bytes().len() as u64) < *file_len {
                    ResidentStore::over_prefix(mapped.bytes(), gguf)
                } else {
                    ResidentStore::over(mapped.bytes(), gguf)
                }
                .map_err(|e| at(&e))?;
                let mut model = Model::load_from(gguf, &store, &kernels).map_err(|e| at(&e))?;
                crate::moe::apply_options(&mut model).map_err(|e| at(&e))?;
                let store = match crate::repack_cache::load_or_build(path, gguf, &model)? {
                    Some(repacked) => store.with_repacked(repacked),
                    None => store,
                };
                let (store, handle) = crate::moe::start(path, gguf, &model, store, settings)?;
                phase_time("model setup (expert pager)", t);
                pager = Some(handle);
                (model, store, None)
            }
            ModelFile::Mapped(mapped) => {
                prefetch_vectors(path, gguf);
                let store = ResidentStore::over(mapped.bytes(), gguf).map_err(|e| at(&e))?;
                let model = Model::load_from(gguf, &store, &kernels).map_err(|e| at(&e))?;
                phase_time("model setup", t);
                let t = Instant::now();
                // Weights repacked for this CPU's interleaved kernels: mapped from the repack
                // cache, or repacked now and cached (nothing where no kernel wants another
                // layout).
                let store = match crate::repack_cache::load_or_build(path, gguf, &model)? {
                    Some(repacked) => store.with_repacked(repacked),
                    None => store,
                };
                phase_time("repacked weights", t);
                (model, Box::new(store), None)
            }
            ModelFile::Unmapped {
                stream: Some(config),
                ..
            } => {
                let (model, store, flash) = start_streaming(path, gguf, &kernels, *config)?;
                phase_time("model setup (streaming store)", t);
                (model, store, Some(flash))
            }
            ModelFile::Unmapped { reader, .. } => {
                // One scratch buffer for the largest weight. It holds no repacked copies, so
                // every kernel runs on the file layout, as `SMOLRUN_REPACK=0` does.
                let scratch = TensorTable::new(gguf).largest_weight();
                let scratch = usize::try_from(scratch).map_err(|_| {
                    at(&format!(
                        "a weight of {scratch} bytes is more than this process can hold"
                    ))
                })?;
                let store = PreadStore::new(reader, gguf, scratch).map_err(|e| at(&e))?;
                let model = Model::load_from(gguf, &store, &kernels).map_err(|e| at(&e))?;
                phase_time("model setup (pread store)", t);
                (model, Box::new(store), None)
            }
        };
        crate::moe::apply_options(&mut model).map_err(|e| at(&e))?;
        model.set_state_f16(STATE_F16.load(std::sync::atomic::Ordering::Relaxed));
        let n_ctx = context_length(path, model.hp.n_ctx_train, n_ctx)?;
        let t = Instant::now();
        let state = State::new(&model, n_ctx).map_err(|e| at(&e))?;
        phase_time("state", t);
        Ok((model, state, store, flash, pager))
    }
}

impl<'g> Engine<'g> {
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

    /// Hands over the memory guard from [`check_memory`]: from now on, every 16th generated
    /// token looks at the available memory and generation stops below the floor.
    pub fn watch_memory(&mut self, guard: Option<MemoryGuard>) {
        self.memory = guard;
    }

    /// Why the last generation stopped with [`StopReason::LowMemory`].
    pub fn low_memory_message(&self) -> Option<&str> {
        self.low_memory.as_deref()
    }

    /// The guard's per-token look (allocation-free unless it stops).
    fn check_memory_floor(&mut self) -> Result<(), String> {
        match &mut self.memory {
            Some(guard) => guard.check(),
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

    pub fn n_vocab(&self) -> usize {
        self.model.n_vocab()
    }

    pub fn architecture(&self) -> &str {
        self.gguf.architecture().unwrap_or("")
    }

    pub fn chat_template(&self) -> Result<ChatTemplate, String> {
        ChatTemplate::from_gguf(self.gguf).map_err(|e| format!("{}: {e}", self.path.display()))
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
    pub fn sampler(&self, params: SamplerParams) -> Result<Sampler, String> {
        let mut s = Sampler::new(self.n_vocab(), params).map_err(|e| e.to_string())?;
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

    fn forward_error(&self, e: ModelError) -> String {
        format!("{}: {e}", self.path.display())
    }

    /// Makes the cache hold exactly `tokens` and returns the logits after the last one. Only
    /// the tokens after the longest prefix already cached are run; returns how many were.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<usize, String> {
        if tokens.is_empty() {
            return Err("nothing to run: the prompt has no tokens".into());
        }
        if tokens.len() > self.n_ctx() {
            return Err(format!(
                "the prompt is {} tokens but the context holds {} (-c {}): shorten the prompt or \
                 raise -c (this model was trained on up to {} tokens)",
                tokens.len(),
                self.n_ctx(),
                self.n_ctx(),
                self.model.hp.n_ctx_train
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
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
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
    fn check_logits_finite(&self) -> Result<(), String> {
        // -inf is a real logit: a pruned head gives it to the tokens it dropped.
        let logits = self.state.logits();
        let first = logits.first().copied().unwrap_or(0.0);
        let poisoned = logits.iter().any(|v| v.is_nan() || *v == f32::INFINITY);
        if !poisoned && logits.iter().any(|&v| v != first) {
            return Ok(());
        }
        let culprit = match first_nonfinite_scale_in_file(&self.path, self.gguf) {
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
        Err(format!(
            "{}: the model's logits are not finite or all the same ({first} first): {culprit}",
            self.path.display()
        ))
    }

    /// Runs one more token after what is cached; the sampler reads its logits next. Fails when
    /// the memory guard finds less memory left than its floor.
    pub fn decode(&mut self, token: u32) -> Result<(), String> {
        self.check_memory_floor()?;
        self.decode_unguarded(token)
    }

    fn decode_unguarded(&mut self, token: u32) -> Result<(), String> {
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
    pub fn set_draft(&mut self, args: &DraftArgs) -> Result<Option<String>, String> {
        // A recurrent model (Qwen3.5) goes back to the last accepted token of a verify pass
        // through the copies of its state that the pass keeps (`State::rewind`).
        let has_mtp = self.model.hp.n_nextn == 1 && self.model.hp.mtp_layer().is_some();
        let source = match args.choice() {
            DraftChoice::Off => None,
            DraftChoice::Auto if self.store.stream_stats().is_none() => None,
            DraftChoice::Auto if has_mtp => Some(DraftSource::Mtp),
            DraftChoice::Mtp => Some(DraftSource::Mtp),
            DraftChoice::Ngram | DraftChoice::Auto => Some(DraftSource::Ngram),
            DraftChoice::Model(name) => Some(DraftSource::Model(Box::new(DraftModel::load(
                &name,
                self.n_ctx(),
                &self.tokenizer,
            )?))),
        };
        let max = match (&source, args.draft_max) {
            (_, Some(n)) if n > crate::speculative::MAX_DRAFT => {
                return Err(format!(
                    "--draft-max {n}: at most {} tokens per pass",
                    crate::speculative::MAX_DRAFT
                ))
            }
            (_, Some(n)) => n,
            (Some(DraftSource::Model(_)), None) => crate::speculative::DEFAULT_MODEL_DRAFT,
            (Some(DraftSource::Mtp), None) => crate::speculative::DEFAULT_MTP_DRAFT,
            _ => crate::speculative::DEFAULT_NGRAM_DRAFT,
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
            let kernels = kernel_set();
            self.model
                .load_mtp(self.gguf, self.store.as_ref(), &kernels)
                .map_err(|e| self.forward_error(e))?;
        }
        self.state = match mtp {
            true => State::with_mtp(&self.model, self.n_ctx(), n_batch, max + 1),
            false => State::with_logit_rows(&self.model, self.n_ctx(), n_batch, max + 1),
        }
        .map_err(|e| self.forward_error(e))?;
        self.cached.clear();
        let described = drafter.describe();
        self.draft = Some(drafter);
        Ok(Some(described))
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
    pub fn embed(&mut self, tokens: &[u32], pooling: Pooling) -> Result<Vec<f32>, String> {
        if tokens.is_empty() {
            return Err("nothing to embed: the input has no tokens".into());
        }
        if tokens.len() > self.n_ctx() {
            return Err(format!(
                "the input is {} tokens but the context holds {} (-c {}): shorten it or raise -c",
                tokens.len(),
                self.n_ctx(),
                self.n_ctx()
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
            return Err(format!(
                "{}: the embedding is not finite; run `smolrun perplexity` on this file to check it",
                self.path.display()
            ));
        }
        Ok(embedding)
    }

    /// How many tokens the cache holds.
    pub fn n_cached(&self) -> usize {
        self.cached.len()
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
    ) -> Result<(Generation, String), String> {
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
    ) -> Result<Generation, String> {
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
        let mut tokens = Vec::with_capacity(max_tokens.map_or(room + 1, |n| n.min(room + 1)));
        let mut spec = SpecStats::default();
        // The last verify pass, while its rows are being sampled: the cache length before it
        // (`base`) and the row whose logits come next. Its tokens (the sampled one, then the
        // draft) are `self.draft`'s buffer, all of them in the cache; after a rejection, or when
        // generation stops, the cache goes back to the tokens accepted.
        let mut verifying: Option<(usize, usize)> = None;
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
            let sampling_error = |e: smolrun_core::sampler::SamplerError| {
                format!("{}: sampling failed: {e}", self.path.display())
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
                break StopReason::ContextFull;
            }
            if let Err(why) = self.check_memory_floor() {
                self.low_memory = Some(why);
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
    ) -> Result<Option<(usize, usize)>, String> {
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

/// The worker threads a forward pass splits its matvecs over (the caller is one of them).
fn parallel(threads: usize) -> Result<Box<dyn Parallel>, String> {
    if threads <= 1 {
        return Ok(Box::new(SingleThread));
    }
    let mut opts = smolrun_linux::PoolOptions::new(threads);
    // SMOLRUN_SPIN_US: how long idle workers spin before sleeping (0 for a busy shared machine).
    if let Some(n) = std::env::var("SMOLRUN_SPIN_US")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        opts.spin_micros = n;
    }
    let pool = smolrun_linux::ThreadPool::with_options(opts)
        .map_err(|e| format!("cannot start {threads} threads: {e}; try a smaller -t"))?;
    Ok(Box::new(pool))
}

/// How many threads to use by default: the fast cores this process may run on.
pub fn default_threads() -> usize {
    crate::platform::default_threads()
}

/// Sampling flags shared by `run` and `chat` (llama.cpp's names and defaults, except the
/// repeat penalty which smolrun turns on).
#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Temperature; 0 is greedy (then the repeat penalty is off unless given).
    #[arg(long = "temp", default_value_t = 0.8)]
    pub temp: f32,
    /// Keep the K most likely tokens (0: all).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Nucleus sampling: keep the most likely tokens up to this total probability (1: off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens less likely than this fraction of the most likely one (0: off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Penalty for repeating recent tokens (1: off) [default: 1.15, or 1 with --temp 0].
    #[arg(long)]
    pub repeat_penalty: Option<f32>,
    /// How many recent tokens the penalties look at.
    #[arg(long, default_value_t = 256)]
    pub repeat_last_n: usize,
    /// Subtracted from the logit of each token present in the recent window.
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    /// Subtracted from a token's logit per occurrence in the recent window.
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// Seed of the sampler's random numbers (default: from the clock).
    #[arg(short = 's', long)]
    pub seed: Option<u64>,
    /// Pruned head: once generated pieces spell a dropped token, the model reads that token
    /// instead of the pieces (better on prose, worse on code that repeats a dropped name).
    #[arg(long)]
    pub join_pieces: bool,
}

impl SamplingArgs {
    pub fn params(&self) -> SamplerParams {
        let greedy = self.temp <= 0.0;
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
        });
        SamplerParams {
            temperature: self.temp.max(0.0),
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self
                .repeat_penalty
                .unwrap_or(if greedy { 1.0 } else { 1.15 }),
            repeat_last_n: self.repeat_last_n,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed,
            n_probs: 0,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Gemma 3 270M from the model directory (SMOLRUN_MODELS or the default), mapped.
    pub(crate) fn gemma_file() -> (PathBuf, ModelFile) {
        let dir = std::env::var_os("SMOLRUN_MODELS")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                    .join(".cache/smolrun/models")
            });
        let path = dir.join("gemma-3-270m-q4_k_m.gguf");
        assert!(
            path.exists(),
            "{} is missing: run tools/fetch-models.sh (or set SMOLRUN_MODELS)",
            path.display()
        );
        let file = ModelFile::Mapped(MappedFile::open(&path).unwrap());
        (path, file)
    }

    /// `--join-pieces` in the decoder: on a Gemma whose head dropped "Holmes", decoding "Hol"
    /// then "mes" leaves the cache and the logits exactly as decoding "Holmes" after the same
    /// prompt does (the join rewinds to "Hol" and runs "Holmes" there); without joining the
    /// pieces stay and the logits differ.
    #[test]
    fn joined_pieces_decode_as_the_dropped_token() {
        let (path, file) = gemma_file();
        let gguf = parse_gguf(&path, &file).unwrap();
        let tok = Tokenizer::from_gguf(&gguf).unwrap();
        let id = |text: &str| tok.token_id(text.as_bytes()).unwrap();
        let (hol, mes, holmes) = (id("Hol"), id("mes"), id("Holmes"));
        let dir = std::env::temp_dir().join(format!("smolrun-join-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ids_path, pruned_path) = (dir.join("ids.txt"), dir.join("pruned.gguf"));
        let kept: Vec<String> = (0..tok.n_vocab() as u32)
            .filter(|&i| i != holmes)
            .map(|i| i.to_string())
            .collect();
        std::fs::write(&ids_path, kept.join("\n")).unwrap();
        crate::cmd::head::prune_head(path.to_str().unwrap(), &ids_path, &pruned_path).unwrap();
        let pruned = ModelFile::Mapped(MappedFile::open(&pruned_path).unwrap());
        let g = parse_gguf(&pruned_path, &pruned).unwrap();
        let mut engine = Engine::load(&pruned_path, &g, &pruned, Some(64), 1).unwrap();
        let prompt = engine.tokenize("He turned to my friend and said, \"", true, false);
        let n = prompt.len();

        engine.set_join_pieces(true);
        engine.prefill(&prompt).unwrap();
        engine.decode(hol).unwrap();
        engine.decode(mes).unwrap();
        let joined = engine.state.logits().to_vec();
        assert_eq!(&engine.cached[n..], &[holmes]);

        engine.set_join_pieces(false);
        engine.prefill(&prompt).unwrap();
        engine.decode(holmes).unwrap();
        assert!(
            engine.state.logits() == joined.as_slice(),
            "joined logits differ"
        );

        engine.prefill(&prompt).unwrap();
        engine.decode(hol).unwrap();
        engine.decode(mes).unwrap();
        assert_eq!(&engine.cached[n..], &[hol, mes]);
        assert!(engine.state.logits() != joined.as_slice());
        drop(engine);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reusing_the_cached_prefix_gives_the_same_logits_as_a_fresh_run() {
        let (path, file) = gemma_file();
        let gguf = parse_gguf(&path, &file).unwrap();
        let mut engine = Engine::load(&path, &gguf, &file, Some(64), 1).unwrap();
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

    /// A recurrent model (Qwen3.5) cannot go back to a shorter prefix: the same prompt again,
    /// or a prompt that shares only part of the cache, runs from the start and gives the
    /// logits of a fresh run (instead of the model's rewind error, which a second chat turn or
    /// a repeated server request would otherwise meet).
    #[test]
    fn a_recurrent_model_starts_over_instead_of_going_back() {
        let path = smolrun_tests::model_path("synthetic-qwen35").expect("synthetic-qwen35");
        let file = ModelFile::Mapped(MappedFile::open(&path).unwrap());
        let gguf = parse_gguf(&path, &file).unwrap();
        let mut engine = Engine::load(&path, &gguf, &file, Some(64), 1).unwrap();
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
        let path = smolrun_tests::model_path("synthetic-qwen35").expect("synthetic-qwen35");
        let draft_model = smolrun_tests::model_path("synthetic-qwen3").expect("synthetic-qwen3");
        let file = ModelFile::Mapped(MappedFile::open(&path).unwrap());
        let gguf = parse_gguf(&path, &file).unwrap();
        let mut engine = Engine::load(&path, &gguf, &file, Some(256), 1).unwrap();
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
        for (draft, max) in [
            ("mtp", 3),
            ("mtp", 1),
            ("ngram", 6),
            (draft_model.to_str().unwrap(), 4),
        ] {
            let args = DraftArgs {
                draft: draft.into(),
                draft_max: Some(max),
            };
            assert!(engine.set_draft(&args).unwrap().is_some());
            let spec = generate(&mut engine, usize::MAX);
            assert_eq!(
                spec.tokens, plain.tokens,
                "--draft {draft} --draft-max {max}"
            );
            let s = spec.spec;
            eprintln!("synthetic-qwen35 --draft {draft} --draft-max {max}: {s:?}");
            if draft == "mtp" {
                assert!(
                    s.accept_rate().unwrap() > 0.6 && s.passes < 30,
                    "--draft mtp: {s:?}"
                );
            }
            if draft != "ngram" {
                assert!(
                    s.accepted < s.drafted,
                    "--draft {draft}: no rejection: {s:?}"
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
        const N: usize = 80;
        let (path, file) = gemma_file();
        let gguf = parse_gguf(&path, &file).unwrap();
        let mut engine = Engine::load(&path, &gguf, &file, Some(256), 1).unwrap();
        let budget = MemoryArgs {
            budget: Some(1 << 40),
            ..MemoryArgs::default()
        };
        engine.watch_memory(check_memory(&path, &gguf, &file, Some(256), &budget).unwrap());
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
        let (path, file) = gemma_file();
        let gguf = parse_gguf(&path, &file).unwrap();
        for draft in ["ngram", path.to_str().unwrap()] {
            let mut engine = Engine::load(&path, &gguf, &file, Some(256), 1).unwrap();
            let args = DraftArgs {
                draft: draft.into(),
                draft_max: Some(4),
            };
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
            assert!(gen.spec.accepted > 0, "{draft}: {:?}", gen.spec);
            let after_warm_up = seen[N - 1] - seen[16];
            assert_eq!(
                after_warm_up, 0,
                "{draft}: tokens 16..{N} made {after_warm_up} heap allocations"
            );
        }
    }

    /// MTP drafting on a recurrent model allocates nothing per token either: the MTP steps,
    /// the copies of the recurrent state a verify pass keeps, and the rewind to them.
    #[test]
    fn mtp_generation_allocates_nothing_per_token() {
        const N: usize = 96;
        let path = smolrun_tests::model_path("synthetic-qwen35").expect("synthetic-qwen35");
        let file = ModelFile::Mapped(MappedFile::open(&path).unwrap());
        let gguf = parse_gguf(&path, &file).unwrap();
        let mut engine = Engine::load(&path, &gguf, &file, Some(256), 1).unwrap();
        let args = DraftArgs {
            draft: "mtp".into(),
            draft_max: Some(3),
        };
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
        let (path, file) = gemma_file();
        let gguf = parse_gguf(&path, &file).unwrap();
        let mut engine = Engine::load(&path, &gguf, &file, Some(256), 1).unwrap();
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
        let args = DraftArgs {
            draft: "ngram".into(),
            draft_max: Some(6),
        };
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
        let (path, file) = gemma_file();
        let gguf = parse_gguf(&path, &file).unwrap();
        let mut engine = Engine::load(&path, &gguf, &file, Some(4), 1).unwrap();
        let tokens = engine.tokenize("one two three four five six", true, false);
        let err = engine.prefill(&tokens).unwrap_err();
        assert!(err.contains("context holds 4"), "{err}");
        let err = Engine::load(&path, &gguf, &file, Some(1 << 30), 1)
            .err()
            .unwrap();
        assert!(err.contains("trained on"), "{err}");
    }
}
