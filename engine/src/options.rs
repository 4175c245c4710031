//! Everything a run of the engine can be told, as one value: [`EngineOptions`]. Nothing below
//! this crate's caller reads a flag, an environment variable or a process-wide setting, so two
//! engines with different options live side by side in one process. The CLI maps its flags
//! (and its few `SMOLRUN_*` variables) onto these fields; an app fills them in itself.

use crate::error::EngineError;
pub use smolrun_core::model::KvCacheType;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// Context length when none is asked for (capped at what the model was trained on).
pub const DEFAULT_CTX: usize = 4096;

/// Reader threads of the streaming store and of the expert pager: enough requests in flight to
/// keep eMMC and SD cards busy (each is mostly asleep in a read).
pub const DEFAULT_STREAM_READERS: usize = 3;

/// Most drafted tokens per pass: the verify pass runs them with the sampled token in one batch
/// of the state's (`DEFAULT_BATCH`, 32) rows.
pub const MAX_DRAFT: usize = smolrun_core::model::DEFAULT_BATCH - 1;
pub const DEFAULT_NGRAM_DRAFT: usize = 8;
pub const DEFAULT_MODEL_DRAFT: usize = 4;
/// llama.cpp's draft-mtp default (common_params_speculative_draft::n_max).
pub const DEFAULT_MTP_DRAFT: usize = 3;

/// How one engine runs: the file's store, memory, pager, drafting, kernels, caches and threads.
/// `EngineOptions::default()` is what `smolrun run -m MODEL` does.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Context length in tokens (`None`: [`DEFAULT_CTX`], or the trained context if smaller).
    pub n_ctx: Option<usize>,
    /// Threads for the forward pass (`None`: the fast cores this process may run on).
    pub threads: Option<usize>,
    /// Where the weights live while running.
    pub weights: WeightsMode,
    pub memory: MemoryOptions,
    pub pager: PagerOptions,
    /// Recurrent models (Qwen3.5): the delta-rule state as f16 instead of f32.
    pub state_f16: bool,
    /// What the KV cache stores, keys and values (`--cache-type-k` / `--cache-type-v`, like
    /// llama.cpp's `-ctk` / `-ctv`): f16 or q8_0; `None`: unset, f16 unless a fitted file's
    /// run profile says otherwise (`RunProfile::apply`). The two must be the same type (one
    /// attention kernel per pair); [`EngineOptions::kv_type`] checks.
    pub cache_type_k: Option<KvCacheType>,
    pub cache_type_v: Option<KvCacheType>,
    /// Decoding's attention skip threshold (`--attn-skip-eps`): keys whose softmax weight is
    /// below eps times the largest are left out. 0: exact attention (the default).
    pub attn_skip_eps: f32,
    /// Speculative decoding.
    pub draft: DraftOptions,
    pub kernels: KernelChoice,
    pub repack: RepackOptions,
    pub stream: StreamOptions,
    /// How long idle pool workers spin before sleeping (`None`: the pool's default; 0 suits a
    /// busy shared machine).
    pub spin_micros: Option<u32>,
    /// Where short model names (and `smolrun pull`'s files) are looked up; `None`: only paths.
    pub models_dir: Option<PathBuf>,
    /// Timings of each load phase and what the stores decided, sent as [`Event::Verbose`].
    pub verbose: bool,
    /// Where notices, timings and progress go (nowhere by default).
    pub events: Events,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            n_ctx: None,
            threads: None,
            weights: WeightsMode::Auto,
            memory: MemoryOptions::default(),
            pager: PagerOptions::default(),
            state_f16: false,
            cache_type_k: None,
            cache_type_v: None,
            attn_skip_eps: 0.0,
            draft: DraftOptions::default(),
            kernels: KernelChoice::Best,
            repack: RepackOptions::default(),
            stream: StreamOptions::default(),
            spin_micros: None,
            models_dir: None,
            verbose: false,
            events: Events::default(),
        }
    }
}

impl EngineOptions {
    /// The KV cache's type: `cache_type_k` (f16 when unset), refused when `cache_type_v`
    /// (f16 when unset) differs or the skip threshold is not a number in [0, 1).
    pub fn kv_type(&self) -> Result<KvCacheType, EngineError> {
        let k = self.cache_type_k.unwrap_or_default();
        let v = self.cache_type_v.unwrap_or_default();
        if k != v {
            return Err(EngineError::option(
                "cache_type",
                format!(
                    "--cache-type-k {} with --cache-type-v {}: smolrun keeps keys and values in \
                     one type; give both f16 or both q8_0",
                    k.name(),
                    v.name()
                ),
            ));
        }
        if !(0.0..1.0).contains(&self.attn_skip_eps) {
            return Err(EngineError::option(
                "attn_skip_eps",
                format!(
                    "--attn-skip-eps {}: give a weight in [0, 1) (0 or off: exact; 1e-4 skips keys \
                     under 1/10,000 of the largest weight)",
                    self.attn_skip_eps
                ),
            ));
        }
        Ok(k)
    }

    /// These options with the KV cache's type set (keys and values): what a run planned with
    /// `kv` (a fitted file's profile's type, say) runs with.
    pub fn with_kv_type(&self, kv: KvCacheType) -> EngineOptions {
        EngineOptions {
            cache_type_k: Some(kv),
            cache_type_v: Some(kv),
            ..self.clone()
        }
    }

    /// MTP drafting may run (`Mtp`, or `Auto` when streamed): a streamed model keeps its MTP
    /// layer and LM head in RAM, and the memory plan counts the drafting state.
    pub fn pin_mtp(&self) -> bool {
        matches!(self.draft.choice, DraftChoice::Mtp | DraftChoice::Auto)
    }
}

/// Where the weights live while running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightsMode {
    /// Mapped when the model fits; streamed (or its experts paged) when it does not, or when the
    /// file is bigger than the address space; `Pread` when not even the stream zones fit.
    #[default]
    Auto,
    /// The file mapped read-only.
    Resident,
    /// A resident set in RAM, the rest streamed from flash every token by reader threads.
    Stream,
    /// Nothing mapped: each weight read into one scratch buffer just before its matvec.
    Pread,
}

/// The memory guard and the stores' budgets.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryOptions {
    /// Bytes this run may use in all, instead of what the device reports available.
    pub budget: Option<u64>,
    /// Load even when the model does not fit, and do not stop when memory runs low.
    pub no_guard: bool,
    /// While generating, stop when less than this many bytes are left.
    pub floor: u64,
    /// Streaming: bytes (10^6 per MB as the CLI takes them) of weights kept resident.
    pub resident_bytes: Option<u64>,
    /// Streaming and paging: the flash's read bandwidth in MB/s for the reported limit
    /// (`None`: probed at load with a short direct read).
    pub flash_mbps: Option<f64>,
    /// Address space a model file may take, as if the platform imposed it (`None`: what the
    /// platform really imposes: iOS, 32-bit, RLIMIT_AS).
    pub address_space: Option<u64>,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions {
            budget: None,
            no_guard: false,
            floor: 32 << 20,
            resident_bytes: None,
            flash_mbps: None,
            address_space: None,
        }
    }
}

/// Mixture of experts: the expert pager and routing.
#[derive(Debug, Clone, PartialEq)]
pub struct PagerOptions {
    /// Experts per layer kept in RAM, or all (`None`: paged only when the model does not fit).
    pub pool: Option<MoePool>,
    /// A selection bonus for experts already in RAM (paged runs only; never an expert's weight).
    pub cache_bias: f32,
    /// Layers ahead whose experts are guessed and read early (paged runs only; 0: off).
    pub prefetch: usize,
    /// An early router's experts (SmallThinker's) not asked for before attention: read when
    /// the FFN needs them, as in the other families (to measure what the early read hides).
    pub no_early_prefetch: bool,
    /// Experts per token instead of the model's count.
    pub experts: Option<usize>,
    /// A warm list: read at start if it exists, written when the engine is dropped.
    pub warm_file: Option<PathBuf>,
    pub policy: MoePolicy,
}

impl Default for PagerOptions {
    fn default() -> Self {
        PagerOptions {
            pool: None,
            cache_bias: 0.0,
            prefetch: 1,
            no_early_prefetch: false,
            experts: None,
            warm_file: None,
            policy: MoePolicy::Decay,
        }
    }
}

/// Experts per layer kept in RAM, or all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoePool {
    Slots(usize),
    All,
}

/// Which expert leaves a full pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MoePolicy {
    /// The least valued by a use count that decays by 0.95 per token.
    #[default]
    Decay,
    /// The least recently used.
    Lru,
}

/// Speculative decoding: where drafts come from and how many per pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DraftOptions {
    pub choice: DraftChoice,
    /// Most tokens drafted per pass (`None`: 8 for ngram, 4 for a draft model, 3 for mtp).
    pub max: Option<usize>,
}

/// Where drafts come from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DraftChoice {
    #[default]
    Off,
    /// Prompt lookup.
    Ngram,
    /// The model's own MTP layer.
    Mtp,
    /// When the weights stream from flash: mtp if the model has an MTP layer, else ngram.
    Auto,
    /// A draft model (a path or a name in the model folder) with the same vocabulary.
    Model(String),
}

impl DraftChoice {
    /// `--draft`'s spelling: `ngram`, `mtp`, `auto`, `off` (or empty, `none`), else a model.
    pub fn parse(text: &str) -> DraftChoice {
        match text {
            "" | "off" | "none" => DraftChoice::Off,
            "ngram" => DraftChoice::Ngram,
            "mtp" => DraftChoice::Mtp,
            "auto" => DraftChoice::Auto,
            other => DraftChoice::Model(other.to_string()),
        }
    }
}

/// The kernels the forward pass runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelChoice {
    /// This CPU's fastest set, picked from its features at run time.
    #[default]
    Best,
    /// The scalar reference kernels (what the golden comparisons run on).
    Scalar,
}

/// The repack cache: weights repacked for this CPU's kernels, written once, mapped after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepackOptions {
    pub cache_dir: CacheDir,
    /// `false`: the one-row kernels on the file layout, nothing repacked (for measuring what
    /// the repacked kernels gain).
    pub enabled: bool,
    /// Read every byte of a cache before using it, instead of sampled windows.
    pub verify_full: bool,
}

impl Default for RepackOptions {
    fn default() -> Self {
        RepackOptions {
            cache_dir: CacheDir::NextToModel,
            enabled: true,
            verify_full: false,
        }
    }
}

/// Where repack caches go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum CacheDir {
    /// Beside the model file.
    #[default]
    NextToModel,
    In(PathBuf),
    /// Repack in memory at every start, write nothing.
    Off,
}

/// The streaming store and the expert pager's reader threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamOptions {
    /// Reader threads.
    pub readers: usize,
    /// Every streamed weight checksummed at load and compared on every use.
    pub verify: bool,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            readers: DEFAULT_STREAM_READERS,
            verify: false,
        }
    }
}

/// Something the engine says while loading or running, for its caller to show or not.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// A decision the user should know of ("does not fit: streamed", "cache rebuilt").
    Notice(&'a str),
    /// Timings and details, sent only with [`EngineOptions::verbose`].
    Verbose(&'a str),
    /// Long work (repacking, checking the repack cache): `done` of `total` bytes; a last event
    /// with `done == total` ends it.
    Progress {
        task: &'static str,
        done: u64,
        total: u64,
    },
}

/// A function that receives [`Event`]s, from any thread of the engine.
pub type EventFn = dyn Fn(Event<'_>) + Send + Sync;

/// The receiver of [`Event`]s: a closure shared by every thread of the engine.
#[derive(Clone, Default)]
pub struct Events(Option<Arc<EventFn>>);

impl Events {
    pub fn new(f: impl Fn(Event<'_>) + Send + Sync + 'static) -> Events {
        Events(Some(Arc::new(f)))
    }

    pub fn send(&self, event: Event<'_>) {
        if let Some(f) = &self.0 {
            f(event);
        }
    }

    pub fn notice(&self, text: &str) {
        self.send(Event::Notice(text));
    }
}

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Events(..)"
        } else {
            "Events(none)"
        })
    }
}

/// Parses a size: bytes, or a number with a K, M, G or T suffix (powers of 1024, like
/// `numfmt --from=iec`), optionally followed by `B` or `iB`: `800M`, `1.5G`, `512MiB`, `2048`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let bad = |why: &str| {
        format!("'{text}' is not a memory size ({why}); write it like 800M, 1.5G or 536870912")
    };
    let s = text.trim();
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(digits_end);
    if number.is_empty() {
        return Err(bad("no number"));
    }
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(bad("the unit must be K, M, G or T")),
    };
    let value = match number.split_once('.') {
        None => number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(1 << shift)),
        Some((whole, frac)) => {
            if shift == 0 {
                return Err(bad("a fraction of a byte"));
            }
            if frac.is_empty() || frac.contains('.') || frac.len() > 6 {
                return Err(bad("the fraction must have 1 to 6 digits"));
            }
            let whole: u64 = if whole.is_empty() {
                0
            } else {
                whole.parse().map_err(|_| bad("not a number"))?
            };
            let frac_value: u64 = frac.parse().map_err(|_| bad("not a number"))?;
            let scale = 10u64.pow(frac.len() as u32);
            whole.checked_mul(1 << shift).and_then(|w| {
                // frac_value < 10^6 and shift <= 40: the product fits in u64.
                w.checked_add(frac_value * (1u64 << shift) / scale)
            })
        }
    };
    match value {
        None => Err(bad("too large")),
        Some(0) => Err(bad("it must be more than 0")),
        Some(v) => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys and values in one type; a skip threshold in [0, 1); each refusal says what to give.
    #[test]
    fn kv_type_refuses_mixed_types_and_bad_thresholds() {
        let mut o = EngineOptions::default();
        assert_eq!(o.kv_type().unwrap(), KvCacheType::F16);
        o.cache_type_k = Some(KvCacheType::Q8_0);
        let e = o.kv_type().unwrap_err().to_string();
        assert!(e.contains("both f16 or both q8_0"), "{e}");
        // Unset is f16: an explicit f16 beside it is the same type.
        o.cache_type_k = Some(KvCacheType::F16);
        assert_eq!(o.kv_type().unwrap(), KvCacheType::F16);
        o.cache_type_k = Some(KvCacheType::Q8_0);
        o.cache_type_v = Some(KvCacheType::Q8_0);
        assert_eq!(o.kv_type().unwrap(), KvCacheType::Q8_0);
        o.attn_skip_eps = 1.5;
        let e = o.kv_type().unwrap_err().to_string();
        assert!(e.contains("[0, 1)"), "{e}");
        assert_eq!(KvCacheType::parse("q4_1"), None);
        assert_eq!(KvCacheType::NAMES, "f16, q8_0");
    }

    #[test]
    fn sizes_with_units() {
        assert_eq!(parse_size("800M"), Ok(800 << 20));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("512MB"), Ok(512 << 20));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("536870912"), Ok(536_870_912));
        assert_eq!(parse_size("4096B"), Ok(4096));
        assert_eq!(parse_size(" 1G "), Ok(1 << 30));
        assert_eq!(parse_size(".5G"), Ok(1 << 29));
        // numfmt --from=iec rounds 0.1G up; we round down to the byte.
        assert_eq!(parse_size("0.1G"), Ok(107_374_182));
    }

    #[test]
    fn bad_sizes_are_refused_with_the_right_form() {
        for bad in [
            "",
            "M",
            "abc",
            "-5M",
            "0",
            "0M",
            "1.5",
            "12X",
            "1.2.3G",
            "1.G",
            "5 M M",
            "99999999999T",
            "1.1234567G",
        ] {
            let e = parse_size(bad).expect_err(bad);
            assert!(e.contains("write it like 800M"), "{bad}: {e}");
        }
    }

    #[test]
    fn draft_choice_parses_the_flag() {
        assert_eq!(DraftChoice::parse("off"), DraftChoice::Off);
        assert_eq!(DraftChoice::parse("ngram"), DraftChoice::Ngram);
        assert_eq!(DraftChoice::parse("auto"), DraftChoice::Auto);
        assert_eq!(DraftChoice::parse("mtp"), DraftChoice::Mtp);
        assert_eq!(
            DraftChoice::parse("qwen2.5-coder-0.5b"),
            DraftChoice::Model("qwen2.5-coder-0.5b".into())
        );
    }
}
