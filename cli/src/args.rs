//! Flags and environment variables onto [`EngineOptions`]: the only place the binary turns what
//! a user typed into the engine's options. The engine reads neither flags nor the environment.
//!
//! The variables the CLI still honours (for scripts and by-hand measurements):
//! `SMOLRUN_MODELS` (model folder), `SMOLRUN_NO_MEM_GUARD=1`, `SMOLRUN_STREAM_READERS=N`,
//! `SMOLRUN_STREAM_VERIFY=1`, `SMOLRUN_KERNELS=scalar`, `SMOLRUN_SPIN_US=N`, `SMOLRUN_REPACK=0`,
//! `SMOLRUN_VERIFY_CACHE=1`, `SMOLRUN_VERBOSE=1`, `SMOLRUN_ADDRESS_SPACE=SIZE`.

use indicatif::{ProgressBar, ProgressStyle};
use smolrun_core::sampler::SamplerParams;
use smolrun_engine::options::{parse_size, KvCacheType};
use smolrun_engine::{
    CacheDir, DraftChoice, DraftOptions, EngineOptions, Event, Events, KernelChoice, MemoryOptions,
    MoePolicy, MoePool, PagerOptions, RepackOptions, StreamOptions, WeightsMode,
};
use std::path::PathBuf;
use std::sync::Mutex;

/// The model folder: `$SMOLRUN_MODELS`, or `~/.cache/smolrun/models`.
pub fn models_dir() -> PathBuf {
    smolrun_engine::models::models_dir_from(
        std::env::var_os("SMOLRUN_MODELS"),
        std::env::var_os("HOME"),
    )
}

/// A path that exists, a model in the model folder, or a short name (see `models.rs`).
pub fn resolve(name_or_path: &str) -> Result<PathBuf, String> {
    let path = smolrun_engine::models::resolve(name_or_path, Some(&models_dir()))?;
    Ok(path)
}

/// How many threads to use by default: the fast cores this process may run on.
pub fn default_threads() -> usize {
    smolrun_engine::platform::default_threads()
}

fn env_is(name: &str, value: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == value)
}

/// The flags every command shares (`--cache-dir`, `--no-repack-cache`) and the environment.
#[derive(Debug, Clone)]
pub struct Globals {
    pub cache_dir: CacheDir,
}

impl Globals {
    /// The options every engine of this process starts from: the repack cache, the kernels,
    /// the stream readers, the model folder, verbosity and where events are printed.
    pub fn base_options(&self) -> EngineOptions {
        let verbose = std::env::var_os("SMOLRUN_VERBOSE").is_some();
        EngineOptions {
            kernels: match std::env::var("SMOLRUN_KERNELS").as_deref() {
                Ok("scalar") => KernelChoice::Scalar,
                _ => KernelChoice::Best,
            },
            repack: RepackOptions {
                cache_dir: self.cache_dir.clone(),
                enabled: !env_is("SMOLRUN_REPACK", "0"),
                verify_full: env_is("SMOLRUN_VERIFY_CACHE", "1"),
            },
            stream: StreamOptions {
                readers: std::env::var("SMOLRUN_STREAM_READERS")
                    .ok()
                    .and_then(|v| v.parse::<usize>().ok())
                    .filter(|&n| n > 0)
                    .unwrap_or(smolrun_engine::options::DEFAULT_STREAM_READERS),
                verify: env_is("SMOLRUN_STREAM_VERIFY", "1"),
            },
            spin_micros: std::env::var("SMOLRUN_SPIN_US")
                .ok()
                .and_then(|v| v.parse().ok()),
            models_dir: Some(models_dir()),
            verbose,
            events: stderr_events(),
            ..EngineOptions::default()
        }
    }

    /// A command's options: the base ones with its context, threads, memory flags and drafts.
    pub fn engine_options(
        &self,
        n_ctx: Option<usize>,
        threads: Option<usize>,
        mem: &MemoryArgs,
        draft: Option<&DraftArgs>,
    ) -> Result<EngineOptions, String> {
        let no_guard = mem.no_guard
            || std::env::var("SMOLRUN_NO_MEM_GUARD").is_ok_and(|v| !v.is_empty() && v != "0");
        let address_space = match std::env::var("SMOLRUN_ADDRESS_SPACE") {
            Ok(v) => Some(parse_size(&v).map_err(|e| format!("SMOLRUN_ADDRESS_SPACE: {e}"))?),
            Err(_) => None,
        };
        Ok(EngineOptions {
            n_ctx,
            threads,
            weights: mem.weights.into(),
            memory: MemoryOptions {
                budget: mem.budget,
                no_guard,
                floor: mem.floor,
                resident_bytes: mem.resident_mb.map(|mb| mb.saturating_mul(1_000_000)),
                flash_mbps: mem.flash_mbps,
                address_space,
            },
            pager: PagerOptions {
                pool: mem.moe_pool,
                cache_bias: mem.moe_cache_bias,
                prefetch: mem.moe_prefetch,
                no_early_prefetch: mem.no_moe_early_prefetch,
                experts: mem.experts,
                warm_file: mem.moe_warm.clone(),
                policy: mem.moe_policy.into(),
            },
            state_f16: mem.state_f16,
            cache_type_k: mem.cache_type_k,
            cache_type_v: mem.cache_type_v,
            attn_skip_eps: mem.attn_skip_eps,
            draft: draft.map(DraftArgs::options).unwrap_or_default(),
            ..self.base_options()
        })
    }
}

/// Notices and timings on stderr as `smolrun: ...`; progress as a bar (indicatif draws
/// nothing when stderr is no terminal).
fn stderr_events() -> Events {
    let bar: Mutex<Option<(&'static str, ProgressBar)>> = Mutex::new(None);
    Events::new(move |event| match event {
        Event::Notice(text) | Event::Verbose(text) => eprintln!("smolrun: {text}"),
        Event::Progress { task, done, total } => {
            let mut bar = bar.lock().unwrap_or_else(|p| p.into_inner());
            if bar.as_ref().is_none_or(|(t, _)| *t != task) {
                let b = ProgressBar::new(total);
                if let Ok(style) = ProgressStyle::with_template(
                    "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
                ) {
                    b.set_style(style.progress_chars("=> "));
                }
                b.set_message(task);
                *bar = Some((task, b));
            }
            if let Some((_, b)) = bar.as_ref() {
                b.set_position(done);
            }
            if done >= total {
                if let Some((_, b)) = bar.take() {
                    b.finish_and_clear();
                }
            }
        }
    })
}

/// The memory guard's and the stores' flags, shared by run, chat, serve, bench and perplexity.
#[derive(clap::Args, Debug, Clone)]
pub struct MemoryArgs {
    /// RAM this run may use in all (e.g. 800M, 1.5G; K/M/G/T are powers of 1024), instead of
    /// what the device reports available (cgroup limit, MemAvailable).
    #[arg(long = "mem-budget", value_name = "SIZE", value_parser = parse_size)]
    pub budget: Option<u64>,
    /// Load even when the model does not fit, and do not stop when memory runs low (weights
    /// that do not fit are re-read from flash every token: very slow). SMOLRUN_NO_MEM_GUARD=1
    /// does the same.
    #[arg(long = "no-mem-guard")]
    pub no_guard: bool,
    /// While generating, stop when less than this is left.
    #[arg(long = "mem-floor", value_name = "SIZE", value_parser = parse_size, default_value = "32M")]
    pub floor: u64,
    /// How the weights are reached: `resident` maps the file; `stream` keeps a resident set
    /// in RAM and streams the rest from flash every token, read ahead by reader threads with
    /// direct reads (for a model bigger than RAM); `pread` maps nothing and reads each weight
    /// into one scratch buffer just before its matvec (slow); `auto` maps the file when the
    /// model fits, streams it when it does not, and reads it with pread when it is bigger than
    /// the address space this process may map (iOS, 32-bit, `ulimit -v`) and cannot stream.
    #[arg(long = "weights", value_enum, default_value_t = WeightsFlag::Auto)]
    pub weights: WeightsFlag,
    /// With streaming: MB (10^6 bytes) of weights kept in RAM (the resident set); the stream
    /// zones come on top [default: what the memory probe leaves, zones included].
    #[arg(long = "resident-mb", value_name = "MB")]
    pub resident_mb: Option<u64>,
    /// With streaming: the flash's read bandwidth in MB/s, for the reported limit (flash MB/s
    /// over MB streamed per token) [default: probed with a short direct read at start].
    #[arg(long = "flash-mbps", value_name = "MB/S")]
    pub flash_mbps: Option<f64>,
    /// Mixture of experts: keep N experts per layer in RAM and read the others from flash
    /// when the router picks them (the expert pager; everything else stays mapped); `all`
    /// keeps every expert resident [default: paged when the model does not fit, the pools
    /// sized by the memory probe].
    #[arg(long = "moe-pool", value_name = "N|all", value_parser = parse_moe_pool)]
    pub moe_pool: Option<MoePool>,
    /// Mixture of experts, paged: a selection bonus for experts already in RAM (added to
    /// the router's score when choosing, never to an expert's weight). Fewer reads from flash
    /// for a small change of routing; 0 routes as the model does.
    #[arg(long = "moe-cache-bias", value_name = "B", default_value_t = 0.0)]
    pub moe_cache_bias: f32,
    /// Mixture of experts, paged: each layer guesses the experts of the layer this many ahead
    /// from its own input (that layer's router on this hidden state) and has them read while
    /// it computes; 0 turns it off.
    #[arg(long = "moe-prefetch", value_name = "LAYERS", default_value_t = 1)]
    pub moe_prefetch: usize,
    /// Mixture of experts with an early router (SmallThinker), paged: do not read the chosen
    /// experts while attention runs, only when the FFN needs them (what the other families
    /// do; for measuring what the early read hides).
    #[arg(long = "no-moe-early-prefetch")]
    pub no_moe_early_prefetch: bool,
    /// Mixture of experts: experts per token instead of the model's own count (fewer: less
    /// to read and compute, at some cost in quality).
    #[arg(long = "experts", value_name = "K")]
    pub experts: Option<usize>,
    /// Mixture of experts, paged: start with the experts listed in FILE (each layer's most
    /// used, written by an earlier run) in the pools, and write the list of this run to FILE
    /// when it ends.
    #[arg(long = "moe-warm", value_name = "FILE")]
    pub moe_warm: Option<std::path::PathBuf>,
    /// Mixture of experts, paged: which expert leaves a full pool.
    #[arg(long = "moe-policy", value_enum, default_value_t = MoePolicyFlag::Decay)]
    pub moe_policy: MoePolicyFlag,
    /// Recurrent models (Qwen3.5): keep the delta-rule state of the recurrent layers as f16
    /// instead of f32: half its memory and of the bytes each token reads and writes there,
    /// for a rounding of every state value at every token.
    #[arg(long = "state-f16")]
    pub state_f16: bool,
    /// What the KV cache stores for keys: f16, or q8_0 (34 bytes per 32 values: 47% less
    /// cache, the query quantized to q8_0 for the dots, as llama.cpp's -ctk q8_0). -ctk too.
    /// [default: f16, or a fitted file's run profile's type when neither -ctk nor -ctv is given]
    #[arg(long = "cache-type-k", visible_alias = "ctk", value_name = "TYPE",
          value_parser = parse_kv_type)]
    pub cache_type_k: Option<KvCacheType>,
    /// What the KV cache stores for values: f16 or q8_0 (the same type as the keys'). -ctv too.
    /// [default: as -ctk's]
    #[arg(long = "cache-type-v", visible_alias = "ctv", value_name = "TYPE",
          value_parser = parse_kv_type)]
    pub cache_type_v: Option<KvCacheType>,
    /// Decoding's attention skip threshold: once every key's score is known, keys whose
    /// softmax weight is below EPS times the largest get no exponential and their values are
    /// not read (faster at long context, at a small cost; e.g. 1e-4). 0 or off: exact.
    #[arg(long = "attn-skip-eps", value_name = "EPS", value_parser = parse_skip_eps,
          default_value = "off")]
    pub attn_skip_eps: f32,
}

/// `--cache-type-k/-v`: a type name llama.cpp's -ctk/-ctv knows and smolrun keeps.
pub fn parse_kv_type(text: &str) -> Result<KvCacheType, String> {
    KvCacheType::parse(text).ok_or_else(|| {
        format!(
            "'{text}' is not a KV cache type smolrun keeps: use one of {}",
            KvCacheType::NAMES
        )
    })
}

/// `--attn-skip-eps`: `off`, 0, or a weight in (0, 1).
pub fn parse_skip_eps(text: &str) -> Result<f32, String> {
    if text == "off" {
        return Ok(0.0);
    }
    match text.parse::<f32>() {
        Ok(e) if (0.0..1.0).contains(&e) => Ok(e),
        _ => Err(format!(
            "'{text}' is not a skip threshold: give off, 0, or a weight below 1 such as 1e-4"
        )),
    }
}

impl Default for MemoryArgs {
    fn default() -> Self {
        MemoryArgs {
            budget: None,
            no_guard: false,
            floor: 32 << 20,
            weights: WeightsFlag::Auto,
            resident_mb: None,
            flash_mbps: None,
            moe_pool: None,
            moe_cache_bias: 0.0,
            moe_prefetch: 1,
            no_moe_early_prefetch: false,
            experts: None,
            moe_warm: None,
            moe_policy: MoePolicyFlag::Decay,
            state_f16: false,
            cache_type_k: None,
            cache_type_v: None,
            attn_skip_eps: 0.0,
        }
    }
}

fn parse_moe_pool(text: &str) -> Result<MoePool, String> {
    match text {
        "all" => Ok(MoePool::All),
        n => match n.parse::<usize>() {
            Ok(0) | Err(_) => Err(format!(
                "'{text}' is not a pool size: give a number of experts per layer (1 or more) or \
                 'all'"
            )),
            Ok(n) => Ok(MoePool::Slots(n)),
        },
    }
}

/// `--moe-policy`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MoePolicyFlag {
    /// The least valued by a use count that decays by 0.95 per token.
    #[default]
    Decay,
    /// The least recently used.
    Lru,
}

impl From<MoePolicyFlag> for MoePolicy {
    fn from(f: MoePolicyFlag) -> MoePolicy {
        match f {
            MoePolicyFlag::Decay => MoePolicy::Decay,
            MoePolicyFlag::Lru => MoePolicy::Lru,
        }
    }
}

/// `--weights`: where the weights live while running.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightsFlag {
    #[default]
    Auto,
    Resident,
    Stream,
    Pread,
}

impl From<WeightsFlag> for WeightsMode {
    fn from(f: WeightsFlag) -> WeightsMode {
        match f {
            WeightsFlag::Auto => WeightsMode::Auto,
            WeightsFlag::Resident => WeightsMode::Resident,
            WeightsFlag::Stream => WeightsMode::Stream,
            WeightsFlag::Pread => WeightsMode::Pread,
        }
    }
}

/// `--draft` and `--draft-max`, shared by `run`, `chat`, `serve` and `bench`.
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

impl DraftArgs {
    pub fn options(&self) -> DraftOptions {
        DraftOptions {
            choice: DraftChoice::parse(&self.draft),
            max: self.draft_max,
        }
    }
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
