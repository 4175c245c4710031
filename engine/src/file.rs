//! Opening a model file: the first half of the load sequence. Resolves the name, decides from
//! the header alone where the weights will live (mapped, streamed, read with pread, or a
//! mixture of experts with its experts paged), and opens the file that way. Nothing here reads
//! a weight.

use crate::memory_guard;
use crate::moe::{self, PagerSettings};
use crate::options::{EngineOptions, Events, KvCacheType, WeightsMode, DEFAULT_CTX};
use crate::EngineError;
use smolrun_core::gguf::Gguf;
use smolrun_core::model::tensor_use::head_is_embedding;
use smolrun_core::model::{
    HParams, MoeOptions, StreamBudget, StreamPlan, TensorTable, TensorUse, WeightKey,
};
use smolrun_core::platform::ReadAt;
use smolrun_linux::{FileReader, MappedFile};
use std::path::{Path, PathBuf};

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
        pager: PagerSettings,
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
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamConfig {
    pub budget: StreamBudget,
    /// Reader threads.
    pub readers: usize,
    /// Every streamed weight compared with its checksum.
    pub verify: bool,
    /// The flash's bandwidth as given; otherwise probed at load.
    pub flash_mbps: Option<f64>,
    /// Load the MTP layer of a model that has one and keep it, with the LM head, resident
    /// ([`EngineOptions::pin_mtp`]).
    pub mtp: bool,
}

impl StreamConfig {
    fn new(budget: StreamBudget, options: &EngineOptions) -> StreamConfig {
        StreamConfig {
            budget,
            readers: options.stream.readers.max(1),
            verify: options.stream.verify,
            flash_mbps: options.memory.flash_mbps,
            mtp: options.pin_mtp(),
        }
    }
}

/// A file opened for a run: where it is, how its weights are reached, the context it was
/// planned for and the routing options its mixture of experts (if any) runs with.
pub struct OpenedFile {
    pub path: PathBuf,
    pub file: ModelFile,
    pub n_ctx: usize,
    /// `--experts`, and the cache bias and prefetch when the experts are paged.
    pub moe: MoeOptions,
    /// The KV cache's type the run was planned with (the caller's, or the file's run
    /// profile's when the caller set none).
    pub kv_type: KvCacheType,
}

/// Whether a stream plan for `budget` can hold its zones (from the header alone), with reads
/// aligned to `align` bytes.
fn stream_plan_fits(gguf: &Gguf, align: u64, budget: StreamBudget) -> bool {
    let (whole, _) = weight_keys_from_header(gguf);
    StreamPlan::new(&TensorTable::new(gguf), &whole, budget, align.max(64)).is_ok()
}

/// The weights a pass asks for whole, from the header alone (every matrix but an untied
/// embedding table, read by row, and the experts, asked for one by one), and one expert of each
/// expert tensor: what a stream plan is made from before the model is loaded.
pub(crate) fn weight_keys_from_header(gguf: &Gguf) -> (Vec<WeightKey>, Vec<WeightKey>) {
    let tied = head_is_embedding(&gguf.tensors);
    let (mut whole, mut experts) = (Vec::new(), Vec::new());
    for (id, t) in gguf.tensors.iter().enumerate() {
        match TensorUse::of(t, tied) {
            TensorUse::Whole => whole.push(WeightKey::tensor(id)),
            TensorUse::Experts => experts.push(WeightKey::expert(id, 0)),
            TensorUse::Rows | TensorUse::Vector => {}
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

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
    pub fn weights_held(&self, path: &Path, gguf: &Gguf) -> Result<Option<u64>, EngineError> {
        match self {
            ModelFile::Mapped(_) => Ok(None),
            ModelFile::Paged { pager, .. } => {
                Ok(moe::ExpertLayout::of(gguf, None).map(|x| x.held_bytes(pager.slots_per_layer)))
            }
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
                let plan = StreamPlan::new(&table, &whole, config.budget, align).map_err(|e| {
                    EngineError::DoesNotFit {
                        path: path.to_path_buf(),
                        needed: 0,
                        allowed: 0,
                        message: format!("{}: {e}", path.display()),
                    }
                })?;
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

fn not_gguf(path: &Path, e: impl std::fmt::Display) -> EngineError {
    EngineError::bad_file(
        path,
        format!("{} is not a readable GGUF model file: {e}", path.display()),
    )
}

fn io_error(path: &Path, e: &smolrun_core::platform::IoError) -> EngineError {
    EngineError::read(path, smolrun_linux::describe_io_error(e))
}

/// Reads the first bytes of `reader` until they hold the whole GGUF header (a prefix that
/// parses). A file that is not GGUF fails at the first read, not after reading it all.
fn read_header(path: &Path, reader: &FileReader) -> Result<Vec<u8>, EngineError> {
    let file_len = reader.len();
    let mut want = FIRST_HEADER_READ as u64;
    loop {
        let len = want.min(file_len) as usize;
        let mut prefix = vec![0u8; len];
        reader
            .read_at(0, &mut prefix)
            .map_err(|e| io_error(path, &e))?;
        match Gguf::parse_header(&prefix, file_len) {
            Ok(_) => return Ok(prefix),
            Err(e) if e.wants_more_bytes() && (len as u64) < file_len => want *= 2,
            Err(e) => return Err(not_gguf(path, e)),
        }
    }
}

/// Parses the model's header (from the mapping, or from the prefix read); the error names the
/// file.
pub fn parse_gguf<'a>(path: &Path, file: &'a ModelFile) -> Result<Gguf<'a>, EngineError> {
    Gguf::parse_header(file.header_bytes(), file.len()).map_err(|e| not_gguf(path, e))
}

/// The context length for a requested one (None: [`DEFAULT_CTX`] or the trained context if
/// smaller), checked against what the model was trained on.
pub fn context_length(
    path: &Path,
    trained: usize,
    requested: Option<usize>,
) -> Result<usize, EngineError> {
    match requested {
        None => Ok(DEFAULT_CTX.min(trained)),
        Some(0) => Err(EngineError::option(
            "n_ctx",
            "-c 0: the context must hold at least 1 token",
        )),
        Some(n) if n > trained => Err(EngineError::option(
            "n_ctx",
            format!(
                "-c {n} is more than the {trained} tokens {} was trained on; use -c {trained} or \
                 less",
                path.display()
            ),
        )),
        Some(n) => Ok(n),
    }
}

/// Where the weights of a file will live, decided from its header alone: what [`open`] does
/// with the file, and what `smolrun plan` reports for a device before anything is downloaded.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The context the run is planned for.
    pub n_ctx: usize,
    /// The KV cache's type the run is planned for (the caller's, or the run profile's).
    pub kv_type: KvCacheType,
    /// The whole file is mapped (the resident store, or a paged MoE's whole file).
    pub map: bool,
    /// Streamed: the budget of the resident set and zones (`None`: not streamed).
    pub stream: Option<StreamConfig>,
    /// A mixture of experts whose experts are paged into pools.
    pub pager: Option<PagerSettings>,
    /// Where the expert data of an experts-last file begins (only that prefix is mapped when
    /// its experts are paged).
    pub experts_last: Option<u64>,
    /// The routing options the model runs with.
    pub moe: MoeOptions,
    /// What the user should be told of the decision (sent as notices by [`open`]).
    pub notices: Vec<String>,
}

impl Placement {
    /// The mode `--weights auto` (or the one asked for) ends up with, in the words of
    /// `--weights`: `resident`, `stream`, `pread`, or `paged` (experts paged, the rest mapped).
    pub fn mode(&self) -> &'static str {
        match (&self.pager, &self.stream, self.map) {
            (Some(_), _, _) => "paged",
            (None, Some(_), _) => "stream",
            (None, None, true) => "resident",
            (None, None, false) => "pread",
        }
    }
}

/// Decides from the header (`gguf`, of a file of `file_len` bytes at `path`) where the weights
/// will live under `options`: mapped, streamed, read with pread, or a mixture of experts with
/// its experts paged. `align` is the direct-read alignment of the storage (4096 when unknown).
/// The memory the decision counts is `options.memory.budget` when given, else what the device
/// reports now; the address space is `options.memory.address_space` when given, else what the
/// platform imposes.
pub fn place(
    path: &Path,
    gguf: &Gguf,
    file_len: u64,
    align: u64,
    options: &EngineOptions,
) -> Result<Placement, EngineError> {
    let profile = crate::profile::RunProfile::of(gguf);
    if profile.is_empty() {
        return place_with(path, gguf, file_len, align, options);
    }
    // A fitted file's run profile sets what the caller left unset; a profile this device
    // cannot honour (a pool larger than its RAM) is planned again without it, and said so.
    let with = profile.apply(options);
    match place_with(path, gguf, file_len, align, &with) {
        Err(EngineError::DoesNotFit { message, .. }) if with.pager.pool != options.pager.pool => {
            let mut placement = place_with(path, gguf, file_len, align, options)?;
            placement.notices.push(format!(
                "the file's run profile ({}) does not fit here, planned again without its pool: \
                 {message}",
                profile.describe()
            ));
            Ok(placement)
        }
        other => other,
    }
}

fn place_with(
    path: &Path,
    gguf: &Gguf,
    file_len: u64,
    align: u64,
    options: &EngineOptions,
) -> Result<Placement, EngineError> {
    let mut notices = Vec::new();
    let budget = crate::platform::address_space_budget(options.memory.address_space);
    let fits = crate::platform::check_address_space(path, file_len, budget);
    // The address space left for weights, when it is what keeps the file from being mapped.
    let mut address_space_for_weights = None;
    let mut too_big_to_map = String::new();
    let map = match (options.weights, fits, budget) {
        (WeightsMode::Pread | WeightsMode::Stream, ..) => false,
        (WeightsMode::Resident, fits, _) => {
            fits?;
            true
        }
        (WeightsMode::Auto, Ok(()), _) | (WeightsMode::Auto, Err(_), None) => true,
        (WeightsMode::Auto, Err(_), Some((budget, who))) => {
            too_big_to_map = format!(
                "{} is {} MB, more than the {} MB of address space {who} leaves for a model file",
                path.display(),
                file_len / 1_000_000,
                budget.for_file() / 1_000_000
            );
            address_space_for_weights = Some(budget.for_file());
            false
        }
    };
    let trained = HParams::from_gguf(gguf)
        .map(|hp| hp.n_ctx_train)
        .unwrap_or(usize::MAX);
    let ctx = context_length(path, trained, options.n_ctx)?;
    let budget = match options.memory.resident_bytes {
        Some(bytes) => StreamBudget::Resident(bytes),
        None => {
            let room = memory_guard::stream_weights_budget(gguf, ctx, options);
            // The resident set and the zones take address space as a mapping would.
            StreamBudget::Total(room.min(address_space_for_weights.unwrap_or(u64::MAX)))
        }
    };
    // A mixture of experts pages its experts rather than streaming everything, when its
    // pools hold a token's experts in the room there is.
    let experts_last = smolrun_core::gguf::expert_data_offset(gguf)
        .map_err(|e| EngineError::bad_file(path, format!("{}: {e}", path.display())))?;
    let room = moe::PagerRoom {
        memory: memory_guard::room_for_weights(gguf, ctx, options),
        address_space: address_space_for_weights,
        experts_last,
    };
    let (pager, moe_options) = moe::decide(gguf, options, room)?;
    match (&pager, experts_last) {
        _ if too_big_to_map.is_empty() => {}
        (Some(_), Some(prefix)) => notices.push(format!(
            "{too_big_to_map}: only its first {} MB (everything but the experts) is mapped",
            prefix / 1_000_000
        )),
        _ => notices.push(format!(
            "{too_big_to_map}: its weights are streamed instead of mapped (--weights stream)"
        )),
    }
    if let (Some(p), None) = (&pager, &options.pager.pool) {
        notices.push(format!(
            "{} does not fit with -c {ctx}: its experts are paged from flash, {} per layer kept in \
             RAM (--moe-pool N to choose, --moe-pool all to map it all)",
            path.display(),
            p.slots_per_layer
        ));
    }
    let stream = match options.weights {
        _ if pager.is_some() => None,
        WeightsMode::Stream => Some(StreamConfig::new(budget, options)),
        WeightsMode::Pread | WeightsMode::Resident => None,
        // Too little address space even for the stream zones: the pread store's one buffer.
        WeightsMode::Auto if !map => {
            if stream_plan_fits(gguf, align, budget) {
                Some(StreamConfig::new(budget, options))
            } else {
                notices.push(
                    "not even the stream zones fit in that address space: the weights are read \
                     with pread into one buffer (slow)"
                        .to_string(),
                );
                None
            }
        }
        // A budget too small even for the stream zones: mapped, and the memory guard refuses
        // it with the numbers by part.
        WeightsMode::Auto => match memory_guard::room_for_weights(gguf, ctx, options) {
            Some(room) if stream_plan_fits(gguf, align, budget) => {
                notices.push(format!(
                    "{} does not fit in memory with -c {ctx}: {} MB is left for its weights, the \
                     rest is streamed from flash every token (--weights stream; --weights \
                     resident to map it anyway)",
                    path.display(),
                    room / 1_000_000
                ));
                Some(StreamConfig::new(budget, options))
            }
            _ => None,
        },
    };
    Ok(Placement {
        n_ctx: ctx,
        kv_type: options.kv_type()?,
        map: pager.is_some() || (map && stream.is_none()),
        stream,
        pager,
        experts_last,
        moe: moe_options,
        notices,
    })
}

/// Resolves the model and opens the file as [`place`] decides under `options`: mapped, or with
/// only its header read (streamed, or read with pread). A missing model says how to get one.
pub fn open(model: &str, options: &EngineOptions) -> Result<OpenedFile, EngineError> {
    let path = crate::models::resolve(model, options.models_dir.as_deref())?;
    if !path.exists() {
        return Err(EngineError::ModelNotFound {
            model: model.to_string(),
            message: format!(
                "model '{model}' not found (looked for {}): give the path of a .gguf file or one \
                 of the short names {}; tools/fetch-models.sh downloads those",
                path.display(),
                crate::models::short_names()
            ),
        });
    }
    if path.is_dir() {
        return Err(EngineError::ModelNotFound {
            model: model.to_string(),
            message: format!(
                "model '{}' is a directory: give the path of a .gguf file",
                path.display()
            ),
        });
    }
    let file_len = std::fs::metadata(&path)
        .map_err(|e| EngineError::read(&path, format!("cannot read {}: {e}", path.display())))?
        .len();
    let reader = FileReader::open(&path).map_err(|e| io_error(&path, &e))?;
    let header = read_header(&path, &reader)?;
    let gguf = Gguf::parse_header(&header, file_len).map_err(|e| not_gguf(&path, e))?;
    let align = reader.direct_alignment() as u64;
    let placement = place(&path, &gguf, file_len, align, options)?;
    for notice in &placement.notices {
        options.events.notice(notice);
    }
    drop(gguf);
    let map_file = |prefix: Option<u64>| {
        match prefix {
            Some(prefix) => MappedFile::open_prefix(&path, prefix),
            None => MappedFile::open(&path),
        }
        .map_err(|e| EngineError::read(&path, e))
    };
    let Placement {
        n_ctx,
        kv_type,
        map,
        stream,
        pager,
        experts_last,
        moe,
        ..
    } = placement;
    let file = if let Some(pager) = pager {
        // Only what is read through the mapping: an experts-last file's prefix.
        ModelFile::Paged {
            mapped: map_file(experts_last)?,
            file_len,
            pager,
        }
    } else if map {
        ModelFile::Mapped(map_file(None)?)
    } else {
        ModelFile::Unmapped {
            reader,
            header,
            stream,
        }
    };
    Ok(OpenedFile {
        path,
        file,
        n_ctx,
        moe,
        kv_type,
    })
}

/// With [`EngineOptions::verbose`], how long one phase of loading took (since `start`): what
/// the load time printed by `run` is made of.
pub(crate) fn phase_time(events: &Events, verbose: bool, what: &str, start: std::time::Instant) {
    if verbose {
        events.send(crate::Event::Verbose(&format!(
            "{what}: {:.1} ms",
            start.elapsed().as_secs_f64() * 1e3
        )));
    }
}
