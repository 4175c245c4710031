//! The expert pager in the engine: when a mixture of experts is paged (`--moe-pool N`, or a
//! model that does not fit), how big its pools are, starting it (reader threads, the warm
//! list, the flash probe), and what `run --json` / `bench --json` report of it.
//!
//! The pager itself (pools, reads, eviction) is core's (core/src/model/pager.rs); its reader
//! threads are platform-linux's.

use crate::options::{EngineOptions, Events, MoePolicy, MoePool, WeightsMode};
use crate::EngineError;
use smolrun_core::gguf::Gguf;
use smolrun_core::model::expert_cache::Eviction;
use smolrun_core::model::pager::{slot_plan, ExpertPool, MoeStats, PagedStore, PagerConfig};
use smolrun_core::model::tensor_use::head_is_embedding;
use smolrun_core::model::{
    FfnShape, HParams, Model, MoeOptions, ResidentStore, TensorUse, WeightStore,
};
use smolrun_linux::{CondSignal, FileReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How a paged mixture of experts runs.
#[derive(Debug, Clone)]
pub struct PagerSettings {
    pub slots_per_layer: usize,
    pub readers: usize,
    pub eviction: Eviction,
    /// `--moe-warm`: read at start if it exists, written at the end.
    pub warm_file: Option<PathBuf>,
    pub flash_mbps: Option<f64>,
}

/// The expert tensors of a file, from its header alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpertLayout {
    /// Bytes of every expert tensor together.
    pub expert_bytes: u64,
    /// Bytes one slot of every MoE layer takes together (one expert's three slices, each
    /// with room for its alignment): what one more slot per layer costs.
    pub slot_bytes_all_layers: u64,
    /// Bytes of everything else a paged run keeps mapped and reads (the untied embedding
    /// table, read by row, left out).
    pub other_bytes: u64,
    /// Experts a token uses (the most over the layers), and the fewest a layer has.
    pub n_used: usize,
    pub n_expert: usize,
    /// The largest one expert's slice of any expert tensor takes read aligned (a streamed
    /// run's scratch for an expert).
    pub largest_slice: u64,
}

/// Direct-read alignment assumed when sizing slots from the header.
const SLOT_ALIGN: u64 = 4096;

impl ExpertLayout {
    /// `None` for a model without expert tensors (or a header smolrun cannot read).
    pub fn of(gguf: &Gguf, experts_used: Option<usize>) -> Option<ExpertLayout> {
        let hp = HParams::from_gguf(gguf).ok()?;
        let (mut n_used, mut n_expert) = (0usize, usize::MAX);
        for l in &hp.layers {
            if let FfnShape::Moe {
                n_expert: e,
                n_expert_used: k,
                ..
            } = l.ffn
            {
                n_used = n_used.max(experts_used.unwrap_or(k));
                n_expert = n_expert.min(e);
            }
        }
        let tied = head_is_embedding(&gguf.tensors);
        let mut layout = ExpertLayout {
            expert_bytes: 0,
            slot_bytes_all_layers: 0,
            other_bytes: 0,
            n_used,
            n_expert,
            largest_slice: 0,
        };
        for t in &gguf.tensors {
            match TensorUse::of(t, tied) {
                TensorUse::Experts => {
                    layout.expert_bytes += t.n_bytes;
                    let one = t.n_bytes / t.dims[2];
                    let span = smolrun_core::model::stream::largest_span(one, SLOT_ALIGN);
                    layout.slot_bytes_all_layers += span;
                    layout.largest_slice = layout.largest_slice.max(span);
                }
                TensorUse::Whole | TensorUse::Vector => layout.other_bytes += t.n_bytes,
                // Read by row, left on flash.
                TensorUse::Rows => {}
            }
        }
        (layout.expert_bytes > 0 && n_used > 0).then_some(layout)
    }

    /// Bytes a paged run holds for weights with `slots` experts per layer.
    pub fn held_bytes(&self, slots: usize) -> u64 {
        self.other_bytes + slots.min(self.n_expert) as u64 * self.slot_bytes_all_layers
    }
}

/// Where the room for a paged run comes from, as the file was opened.
#[derive(Debug, Clone, Copy)]
pub struct PagerRoom {
    /// Bytes left for weights when the whole model does not fit in memory (`None`: it fits).
    pub memory: Option<u64>,
    /// Address space left for the file's mapping and the pools when the whole file cannot be
    /// mapped (`None`: it can).
    pub address_space: Option<u64>,
    /// Where the expert data of an experts-last file begins (its prefix is all that is
    /// mapped then).
    pub experts_last: Option<u64>,
}

/// Whether (and how) the experts of the model are paged, as `--moe-pool` and `--weights`
/// say: `--moe-pool N` pages with N experts per layer; under `--weights auto` a mixture of
/// experts that does not fit in memory, or whose file does not fit in the address space, is
/// paged with the pools the room holds, if they hold at least a token's experts (a file the
/// address space cannot map whole must be experts-last: only its prefix is mapped). Returns the
/// pager's settings and the routing options the model runs with (`--experts`; the cache bias
/// and the prefetch only when paged).
pub fn decide(
    gguf: &Gguf,
    options: &EngineOptions,
    room: PagerRoom,
) -> Result<(Option<PagerSettings>, MoeOptions), EngineError> {
    let mem = &options.pager;
    let bad = |message: &str| Err(EngineError::option("moe_pool", message));
    let layout = ExpertLayout::of(gguf, mem.experts);
    let cannot_map_whole = room.address_space.is_some();
    let mappable = !cannot_map_whole || room.experts_last.is_some();
    let slots = match (layout, mem.pool, options.weights) {
        (None, Some(MoePool::Slots(_)), _) => {
            return bad("--moe-pool: this model has no experts (it is not a mixture of experts)")
        }
        (Some(_), Some(MoePool::Slots(_)), WeightsMode::Stream | WeightsMode::Pread) => {
            return bad(
                "--moe-pool pages the experts of a mapped model: use it with --weights auto or \
                 resident (streaming the rest as well is not supported yet)",
            )
        }
        (Some(_), Some(MoePool::Slots(_)), _) if !mappable => {
            return bad(
                "--moe-pool: the file is bigger than the address space and its experts are not \
                 last, so its other weights cannot be mapped alone: rewrite it with `smolrun gguf \
                 experts-last`",
            )
        }
        (Some(x), Some(MoePool::Slots(n)), _) => Some(n.min(x.n_expert)),
        (Some(x), None, WeightsMode::Auto)
            if mappable && (room.memory.is_some() || cannot_map_whole) =>
        {
            let slot = x.slot_bytes_all_layers.max(1);
            let by_memory = room.memory.map_or(Some(usize::MAX), |r| {
                Some((r.checked_sub(x.other_bytes)? / slot) as usize)
            });
            // The prefix mapping and the pools both take address space.
            let mapped = room.experts_last.unwrap_or(gguf.file_len());
            let by_address = room.address_space.map_or(Some(usize::MAX), |r| {
                Some((r.checked_sub(mapped)? / slot) as usize)
            });
            match (by_memory, by_address) {
                (Some(a), Some(b)) if a.min(b) >= x.n_used => Some(a.min(b).min(x.n_expert)),
                _ => None,
            }
        }
        _ => None,
    };
    let paged = slots.is_some();
    let routing = MoeOptions {
        experts_used: mem.experts,
        cache_bias: if paged { mem.cache_bias } else { 0.0 },
        predict_distance: if paged { mem.prefetch } else { 0 },
        // all resident: nothing to read early, so the early routing is not done twice
        no_early_prefetch: !paged || mem.no_early_prefetch,
    };
    let settings = slots.map(|slots_per_layer| PagerSettings {
        slots_per_layer,
        readers: options.stream.readers.max(1),
        eviction: match mem.policy {
            MoePolicy::Decay => Eviction::DEFAULT,
            MoePolicy::Lru => Eviction::Lru,
        },
        warm_file: mem.warm_file.clone(),
        flash_mbps: options.memory.flash_mbps,
    });
    Ok((settings, routing))
}

/// A running pager, kept by the engine for its report and the warm list.
pub struct PagerHandle {
    pub pool: Arc<ExpertPool<FileReader, CondSignal>>,
    pub warm_file: Option<PathBuf>,
    /// Flash read bandwidth, MB/s (probed, or `--flash-mbps`).
    pub flash_mb_s: f64,
}

impl PagerHandle {
    /// Writes each layer's most used experts to the warm file (if one was given).
    pub fn save_warm_list(&self) -> Result<(), String> {
        let Some(path) = &self.warm_file else {
            return Ok(());
        };
        let mut text = String::from("# smolrun moe-warm v1: layer: experts, most used first\n");
        for (layer, experts) in self.pool.most_used() {
            let list: Vec<String> = experts.iter().map(u16::to_string).collect();
            text += &format!("{layer}: {}\n", list.join(" "));
        }
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// Reads a warm list written by [`PagerHandle::save_warm_list`].
pub fn read_warm_list(path: &Path) -> Result<Vec<(usize, Vec<u16>)>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut lists = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || {
            format!(
                "{}:{}: not a line of a warm list ('LAYER: EXPERT EXPERT ...'): {line}; delete \
                 the file to start cold",
                path.display(),
                i + 1
            )
        };
        let (layer, experts) = line.split_once(':').ok_or_else(bad)?;
        let layer: usize = layer.trim().parse().map_err(|_| bad())?;
        let experts: Vec<u16> = experts
            .split_whitespace()
            .map(|e| e.parse().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        lists.push((layer, experts));
    }
    Ok(lists)
}

/// Starts the pager over `inner` (the mapped non-expert weights) for `model`: the pools, the
/// reader threads, the warm list, the flash probe (unless `--flash-mbps`).
pub fn start<'g>(
    path: &Path,
    gguf: &Gguf,
    model: &Model,
    inner: ResidentStore<'g>,
    settings: &PagerSettings,
    events: &Events,
    verbose: bool,
) -> Result<(Box<dyn WeightStore + Send + 'g>, PagerHandle), EngineError> {
    let at =
        |e: &dyn std::fmt::Display| EngineError::bad_file(path, format!("{}: {e}", path.display()));
    let io = |e: smolrun_core::platform::IoError| {
        EngineError::read(path, smolrun_linux::describe_io_error(&e))
    };
    let open = || FileReader::open(path).map_err(io);
    let config = PagerConfig {
        slots_per_layer: settings.slots_per_layer,
        eviction: settings.eviction,
    };
    let groups = model.expert_groups();
    let reader = open()?;
    // The slots, carved from a region the platform gives for exactly their plan.
    let slots = slot_plan(&reader, gguf, &groups, config).map_err(|e| at(&e))?;
    let region = crate::load::store_region(path, &slots, "expert slots")?;
    let pool = ExpertPool::new(
        reader,
        gguf,
        &groups,
        config,
        CondSignal::default(),
        CondSignal::default(),
        region,
    )
    .map_err(|e| at(&e))?;
    let pool = Arc::new(pool);
    let flash_mb_s = match settings.flash_mbps {
        Some(v) => v,
        None => {
            let spans: Vec<_> = groups
                .iter()
                .flat_map(|g| g.tensors)
                .filter_map(|id| gguf.tensors.get(id))
                .map(|t| {
                    let align = SLOT_ALIGN;
                    t.offset / align * align..(t.offset + t.n_bytes) / align * align
                })
                .filter(|r| r.end > r.start)
                .collect();
            smolrun_linux::probe_read_mbps(&open()?, &spans, settings.readers)
                .map_err(io)?
                .0
        }
    };
    let threads = smolrun_linux::start_expert_readers(&pool, settings.readers).map_err(|e| {
        EngineError::system(format!(
            "{}: cannot start the expert reader threads: {e}",
            path.display()
        ))
    })?;
    if let Some(file) = settings.warm_file.as_deref().filter(|f| f.exists()) {
        let lists = read_warm_list(file).map_err(|e| EngineError::option("moe_warm", e))?;
        pool.warm(&lists).map_err(|e| at(&e))?;
    }
    if verbose {
        events.send(crate::Event::Verbose(&format!(
            "expert pager: {} experts per layer in RAM ({} MB of pools), {} reader threads, \
             flash {flash_mb_s:.0} MB/s",
            settings.slots_per_layer,
            pool.pool_bytes() / 1_000_000,
            settings.readers
        )));
    }
    let handle = PagerHandle {
        pool: Arc::clone(&pool),
        warm_file: settings.warm_file.clone(),
        flash_mb_s,
    };
    let store = PagedStore::new(inner, pool, Some(Box::new(threads)));
    Ok((Box::new(store), handle))
}

/// What the pager read over a stretch of tokens, and the speed limit that sets.
#[derive(Debug, Clone, Copy)]
pub struct MoeReport {
    pub miss_rate: f64,
    /// MB read per token for experts the router chose and the pool did not hold.
    pub missed_mb_per_token: f64,
    /// MB read per token in all (misses and predictions).
    pub read_mb_per_token: f64,
    /// Share of predicted experts the router then chose.
    pub prefetch_accuracy: f64,
    pub pool_mb: f64,
    pub slots_per_layer: usize,
    pub flash_mb_s: f64,
    /// flash_mb_s / read_mb_per_token: what no run can beat.
    pub flash_limit_tok_s: f64,
}

impl MoeReport {
    /// The report for `stats` (counted over `tokens` tokens).
    pub fn new(stats: &MoeStats, tokens: usize, flash_mb_s: f64) -> MoeReport {
        let per_token = |bytes: u64| bytes as f64 / 1e6 / tokens.max(1) as f64;
        let read = per_token(stats.missed_bytes + stats.predicted_bytes);
        MoeReport {
            miss_rate: stats.miss_rate(),
            missed_mb_per_token: per_token(stats.missed_bytes),
            read_mb_per_token: read,
            prefetch_accuracy: stats.prefetch_accuracy(),
            pool_mb: stats.pool_bytes as f64 / 1e6,
            slots_per_layer: stats.slots_per_layer,
            flash_mb_s,
            flash_limit_tok_s: if read > 0.0 {
                flash_mb_s / read
            } else {
                f64::INFINITY
            },
        }
    }

    pub fn add_to(&self, obj: &mut serde_json::Value) {
        let fields = [
            ("moe_miss_rate", self.miss_rate),
            ("moe_missed_mb_per_token", self.missed_mb_per_token),
            ("moe_read_mb_per_token", self.read_mb_per_token),
            ("moe_prefetch_accuracy", self.prefetch_accuracy),
            ("moe_pool_mb", self.pool_mb),
            ("moe_slots_per_layer", self.slots_per_layer as f64),
            ("flash_mb_s", self.flash_mb_s),
            ("flash_limit_tok_s", self.flash_limit_tok_s),
        ];
        if let Some(map) = obj.as_object_mut() {
            for (k, v) in fields {
                map.insert(k.into(), serde_json::json!(v));
            }
        }
    }

    pub fn line(&self) -> String {
        format!(
            "experts paged: {} per layer ({:.0} MB); {:.1} % missed, {:.1} MB/token read \
             ({:.1} missed); prefetch accuracy {:.0} %; flash {:.0} MB/s limits this to {:.2} tok/s",
            self.slots_per_layer,
            self.pool_mb,
            100.0 * self.miss_rate,
            self.read_mb_per_token,
            self.missed_mb_per_token,
            100.0 * self.prefetch_accuracy,
            self.flash_mb_s,
            self.flash_limit_tok_s
        )
    }
}
