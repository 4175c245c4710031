//! Loading the weights: the second half of the load sequence. From an opened file
//! ([`crate::file::open`]) and its parsed header, builds the weight store the file was opened
//! for (mapped with the repacked weights, paged experts, streamed, or pread), the model on it,
//! the state for the context, and the thread pool.

use crate::file::{self, ModelFile, OpenedFile, StreamConfig};
use crate::moe::PagerHandle;
use crate::options::{EngineOptions, Event, Events, KernelChoice};
use crate::repack_cache::{self, Log};
use crate::EngineError;
use smolrun_core::arena::{ArenaPlan, ArenaUsage, Region};
use smolrun_core::gguf::Gguf;
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::{
    Model, MoeOptions, PreadStore, ResidentStore, State, StateOptions, StreamPlan, StreamStore,
    TensorTable, WeightStore,
};
use smolrun_core::platform::{Parallel, SingleThread};
use smolrun_linux::{CondSignal, FileReader, StreamingStore};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The flash as a streaming or paging load found it.
#[derive(Debug, Clone, Copy)]
pub struct FlashProbe {
    /// Read bandwidth, MB/s (probed, or given).
    pub mb_s: f64,
    /// Bytes read while loading: the header, the resident set and the probe.
    pub load_bytes: u64,
}

/// What loading the weights of one file builds (an engine's without its tokenizer and threads;
/// a draft model's too).
pub struct LoadedWeights<'g> {
    pub model: Model,
    pub state: State,
    pub store: Box<dyn WeightStore + Send + 'g>,
    /// The flash, when the weights are streamed.
    pub flash: Option<FlashProbe>,
    /// The expert pager, when a mixture of experts is paged.
    pub pager: Option<PagerHandle>,
    /// The arena of the store's read targets (the stream zones, the expert slots): its plan
    /// and what it handed out. `None` for the mapped and pread stores, which have none.
    pub store_arena: Option<ArenaUsage>,
}

/// This CPU's fastest kernel set, or the scalar reference (what the golden comparisons against
/// llama.cpp run on). Chosen once per model: every matrix keeps its own.
pub fn kernel_set(choice: KernelChoice) -> KernelSet {
    match choice {
        KernelChoice::Scalar => KernelSet::scalar(),
        KernelChoice::Best => KernelSet::select(&crate::platform::cpu_features()),
    }
}

/// The worker threads a forward pass splits its matvecs over (the caller is one of them).
pub fn parallel(
    threads: usize,
    spin_micros: Option<u32>,
) -> Result<Box<dyn Parallel + Send>, EngineError> {
    if threads <= 1 {
        return Ok(Box::new(SingleThread));
    }
    let mut opts = smolrun_linux::PoolOptions::new(threads);
    if let Some(n) = spin_micros {
        opts.spin_micros = n;
    }
    let pool = smolrun_linux::ThreadPool::with_options(opts).map_err(|e| {
        EngineError::system(format!(
            "cannot start {threads} threads: {e}; try a smaller -t"
        ))
    })?;
    Ok(Box::new(pool))
}

/// Model setup copies the small vectors (norms, biases) out of the file; they lie between the
/// weight matrices, one or two pages each. Read them all at once, and only their pages: a fault
/// on each through the mapping would wait for a whole readahead window around it (with
/// `read_ahead_kb` at 8 MB, most of the layers' weights), which on a start from the repack
/// cache are never read again.
///
/// Only for a tied embedding table (the LM head, read whole anyway). An untied table is left
/// on flash by `leave_embeddings_on_flash`, which drops what loading read ahead into it; the
/// weights that follow it are then best faulted in at load as before: the first fault there
/// reads a window around it, back into the table, and done during the forward pass, after the
/// drop, that would leave megabytes of the table in RAM (cli/tests/memory_guard.rs).
fn prefetch_vectors(path: &Path, gguf: &Gguf, log: &Log) {
    if gguf.tensor("output.weight").is_some() {
        return;
    }
    let vectors = gguf
        .tensors
        .iter()
        .filter(|t| t.n_dims == 1)
        .map(|t| t.offset..t.offset.saturating_add(t.n_bytes));
    if let Err(why) = smolrun_linux::prefetch_ranges(path, vectors) {
        if log.verbose {
            log.events.send(Event::Verbose(&why));
        }
    }
}

fn io_error(path: &Path, e: &smolrun_core::platform::IoError) -> EngineError {
    EngineError::read(path, smolrun_linux::describe_io_error(e))
}

/// A model error at load: a tensor that is missing, of the wrong shape or type, a bad
/// hyperparameter; the message names the file.
pub(crate) fn load_error(path: &Path, e: impl std::fmt::Display) -> EngineError {
    EngineError::bad_file(path, format!("{}: {e}", path.display()))
}

/// What starting the streaming store gives: the model loaded through it, the store, the
/// flash it reads, and its zones' arena.
type Streaming<'g> = (
    Model,
    Box<dyn WeightStore + Send + 'g>,
    FlashProbe,
    Option<ArenaUsage>,
);

/// Builds the streaming store: the model's setup through it, its plan for `config`, the
/// resident set read, the flash probed (unless given), the reader threads started.
fn start_streaming<'g>(
    path: &Path,
    gguf: &Gguf,
    kernels: &KernelSet,
    config: StreamConfig,
    log: &Log,
) -> Result<Streaming<'g>, EngineError> {
    let at = |e: &dyn std::fmt::Display| load_error(path, e);
    // A reader of its own: the reader threads outlive any borrow of the opened file.
    let reader = FileReader::open(path).map_err(|e| io_error(path, &e))?;
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
    .map_err(|e| EngineError::DoesNotFit {
        path: path.to_path_buf(),
        needed: 0,
        allowed: 0,
        message: format!("{}: {e}", path.display()),
    })?;
    let (flash_mb_s, probe_bytes) = match config.flash_mbps {
        Some(v) => (v, 0),
        None => {
            let probe = FileReader::open(path).map_err(|e| io_error(path, &e))?;
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
                .map_err(|e| io_error(path, &e))?
        }
    };
    // The ring's zones and the direct-read scratch, carved from a region the platform gives
    // for exactly their plan, as the run's state is.
    let zones = store
        .zone_plan(&plan, &model.expert_keys())
        .map_err(|e| at(&e))?;
    let region = store_region(path, &zones, "stream zones")?;
    store
        .plan(&plan, &model.expert_keys(), config.verify, region)
        .map_err(|e| at(&e))?;
    let zone_usage = store.zone_usage();
    let stream = StreamingStore::start(store, config.readers).map_err(|e| {
        EngineError::system(format!(
            "{}: cannot start the reader threads: {e}",
            path.display()
        ))
    })?;
    if log.verbose {
        log.events.send(Event::Verbose(&format!(
            "streaming: {} MB resident, {} MB streamed per pass, {} MB of zones, flash \
             {flash_mb_s:.0} MB/s",
            plan.resident_bytes / 1_000_000,
            plan.streamed_bytes / 1_000_000,
            plan.zone_bytes / 1_000_000
        )));
    }
    let flash = FlashProbe {
        mb_s: flash_mb_s,
        load_bytes: plan.resident_bytes + probe_bytes + gguf.data_offset,
    };
    Ok((model, Box::new(stream), flash, zone_usage))
}

/// A region of exactly `plan`'s size for a store's buffers that direct reads land in (`what`:
/// the stream zones, the expert slots), from the platform as a run's state region is.
pub(crate) fn store_region(
    path: &Path,
    plan: &ArenaPlan,
    what: &str,
) -> Result<Region, EngineError> {
    crate::platform::state_region(plan).map_err(|e| {
        EngineError::system(format!(
            "{}: cannot get {} bytes for the {what}: {e}",
            path.display(),
            plan.total()
        ))
    })
}

/// The model, the state for `n_ctx` tokens and the weight store (with the repacked weights) of
/// a parsed file, as `file` was opened; `moe` is the routing the file was opened with.
pub fn load_weights<'g>(
    path: &Path,
    gguf: &Gguf<'g>,
    file: &'g ModelFile,
    n_ctx: usize,
    moe: MoeOptions,
    options: &EngineOptions,
) -> Result<LoadedWeights<'g>, EngineError> {
    let at = |e: &dyn std::fmt::Display| load_error(path, e);
    let log = Log {
        events: options.events.clone(),
        verbose: options.verbose,
    };
    let events: &Events = &options.events;
    let phase = |what: &str, t: Instant| crate::file::phase_time(events, options.verbose, what, t);
    let kernels = kernel_set(options.kernels);
    let t = Instant::now();
    let mut pager = None;
    let mut flash = None;
    let mut store_arena = None;
    let (mut model, store): (Model, Box<dyn WeightStore + Send + 'g>) = match file {
        ModelFile::Paged {
            mapped,
            pager: settings,
            file_len,
        } => {
            prefetch_vectors(path, gguf, &log);
            let store = if (mapped.bytes().len() as u64) < *file_len {
                ResidentStore::over_prefix(mapped.bytes(), gguf)
            } else {
                ResidentStore::over(mapped.bytes(), gguf)
            }
            .map_err(|e| at(&e))?;
            let mut model = Model::load_from(gguf, &store, &kernels).map_err(|e| at(&e))?;
            model.set_moe_options(moe).map_err(|e| at(&e))?;
            let store =
                match repack_cache::load_or_build(path, gguf, &model, &options.repack, &log)? {
                    Some(repacked) => store.with_repacked(repacked),
                    None => store,
                };
            let (store, handle) =
                crate::moe::start(path, gguf, &model, store, settings, events, options.verbose)?;
            phase("model setup (expert pager)", t);
            store_arena = Some(handle.pool.slot_usage());
            pager = Some(handle);
            (model, store)
        }
        ModelFile::Mapped(mapped) => {
            prefetch_vectors(path, gguf, &log);
            let store = ResidentStore::over(mapped.bytes(), gguf).map_err(|e| at(&e))?;
            let model = Model::load_from(gguf, &store, &kernels).map_err(|e| at(&e))?;
            phase("model setup", t);
            let t = Instant::now();
            // Weights repacked for this CPU's interleaved kernels: mapped from the repack
            // cache, or repacked now and cached (nothing where no kernel wants another
            // layout).
            let store =
                match repack_cache::load_or_build(path, gguf, &model, &options.repack, &log)? {
                    Some(repacked) => store.with_repacked(repacked),
                    None => store,
                };
            phase("repacked weights", t);
            (model, Box::new(store))
        }
        ModelFile::Unmapped {
            stream: Some(config),
            ..
        } => {
            let (model, store, probe, zones) =
                start_streaming(path, gguf, &kernels, *config, &log)?;
            phase("model setup (streaming store)", t);
            flash = Some(probe);
            store_arena = zones;
            (model, store)
        }
        ModelFile::Unmapped { reader, .. } => {
            // One scratch buffer for the largest weight. It holds no repacked copies, so
            // every kernel runs on the file layout, as with repacking off.
            let scratch = TensorTable::new(gguf).largest_weight();
            let scratch = usize::try_from(scratch).map_err(|_| EngineError::DoesNotFit {
                path: path.to_path_buf(),
                needed: scratch,
                allowed: usize::MAX as u64,
                message: format!(
                    "{}: a weight of {scratch} bytes is more than this process can hold",
                    path.display()
                ),
            })?;
            let store = PreadStore::new(reader, gguf, scratch).map_err(|e| at(&e))?;
            let model = Model::load_from(gguf, &store, &kernels).map_err(|e| at(&e))?;
            phase("model setup (pread store)", t);
            (model, Box::new(store))
        }
    };
    model.set_moe_options(moe).map_err(|e| at(&e))?;
    model.set_state_f16(options.state_f16);
    model.set_kv_type(options.kv_type()?);
    let t = Instant::now();
    let mut state = carve_state(path, &model, &StateOptions::new(n_ctx))?;
    state.set_attn_skip_eps(options.attn_skip_eps);
    phase("state", t);
    Ok(LoadedWeights {
        model,
        state,
        store,
        flash,
        pager,
        store_arena,
    })
}

/// A run's state for `opts`, carved from a region the platform gives for exactly its plan (an
/// anonymous mapping; `vm_allocate` on iOS, counted in the footprint jetsam reads). A region
/// too small or an address space too small for the plan is refused with its parts.
pub fn carve_state(path: &Path, model: &Model, opts: &StateOptions) -> Result<State, EngineError> {
    let plan = State::plan(model, opts).map_err(|e| load_error(path, e))?;
    let region = crate::platform::state_region(&plan).map_err(|e| {
        EngineError::system(format!(
            "{}: cannot get {} bytes for the run's state: {e}",
            path.display(),
            plan.total()
        ))
    })?;
    State::in_region(model, opts, region).map_err(|e| load_error(path, e))
}

/// The bytes of a file the same struct owns, with the lifetime of that struct's fields.
///
/// SAFETY (for every caller): `file` is kept in a `Box` by the struct that holds what borrows
/// from it, is never replaced or mutated while the struct lives, and is declared after every
/// field that borrows it, so it is dropped last. The bytes themselves never move: a mapping
/// stays where it was mapped and a header `Vec` is never resized. Nothing with the detached
/// lifetime leaves the struct: [`Engine::gguf`] hands the header out with the lifetime of
/// `&self`.
pub(crate) unsafe fn detach(file: &ModelFile) -> &'static ModelFile {
    unsafe { &*(file as *const ModelFile) }
}

/// A model file opened, parsed and loaded, owning what everything borrows from: the engine's
/// weights, or a draft model's.
pub(crate) struct OwnedModel {
    pub store: Box<dyn WeightStore + Send>,
    pub gguf: Gguf<'static>,
    /// Held, never read: `store` and `gguf` borrow its bytes (see [`detach`]).
    #[allow(dead_code)]
    pub file: Box<ModelFile>,
    pub path: PathBuf,
}

/// Loads a model file for drafting: mapped, not memory-checked (a draft is small; the README
/// says so), with the kernels, caches and folders of the engine it drafts for.
pub(crate) fn open_draft_model(
    model: &str,
    n_ctx: usize,
    options: &EngineOptions,
) -> Result<(OwnedModel, Model, State), EngineError> {
    let draft_options = EngineOptions {
        n_ctx: Some(n_ctx),
        weights: crate::options::WeightsMode::Auto,
        memory: crate::options::MemoryOptions {
            no_guard: true,
            ..crate::options::MemoryOptions::default()
        },
        pager: crate::options::PagerOptions::default(),
        draft: crate::options::DraftOptions::default(),
        ..options.clone()
    };
    let OpenedFile {
        path,
        file,
        n_ctx,
        moe,
        kv_type,
    } = file::open(model, &draft_options)?;
    let draft_options = draft_options.with_kv_type(kv_type);
    let file = Box::new(file);
    // SAFETY: see `detach`; `file` moves into the `OwnedModel` after the fields that borrow it.
    let bytes_owner = unsafe { detach(&file) };
    let gguf = file::parse_gguf(&path, bytes_owner)?;
    let LoadedWeights {
        model,
        state,
        store,
        ..
    } = load_weights(&path, &gguf, bytes_owner, n_ctx, moe, &draft_options)?;
    Ok((
        OwnedModel {
            store,
            gguf,
            file,
            path,
        },
        model,
        state,
    ))
}
