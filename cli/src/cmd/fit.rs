//! `smolrun fit IN -o OUT --device NAME`: the fastest file of a model that fits a device, in one
//! streamed pass over the input (bounded memory: the header, one slab of rows, the kept head
//! ids), with the plan printed first (`--plan` stops there). IN is a local file, an http(s)
//! URL or a Hugging Face `org/repo:QUANT`: a remote file is read with range requests, tensor
//! by tensor, never stored whole.
//!
//! ```text
//! the stock file's plan on the device (`smolrun plan`)
//!   head       a vocabulary over 65,536 rows keeps 65,536 (`--head-rows`; ids chosen as
//!              `gguf head-ids` chooses them, or given with `--head-ids`); a tied head gets its
//!              own output.weight of the kept embedding rows, the embeddings stay whole
//!   experts    when the stock plan cannot hold every expert in RAM, the expert tensors are
//!              requantized to `--experts-type` (Q2_K by default; `keep` leaves them) where
//!              that is fewer bytes, and every expert tensor is written last
//!              (`smolrun.expert_data_offset`: a device maps the non-expert prefix alone)
//!   profile    `smolrun.profile.*`: the device, the fitted plan's pool and context, and a q8_0
//!              KV cache where memory buys speed (experts paged, weights streamed: the fitted
//!              file is planned with it, so its pool holds what the smaller cache leaves),
//!              taken by run, chat, serve, bench and plan as defaults (engine/src/profile.rs)
//! the fitted file's plan, from its header before a byte of tensor data is written
//! ```
//! Every other tensor and metadata entry is copied unchanged. The output is written to
//! `OUT.tmp-PID`, parsed back and checked, then renamed; on any error it is removed.

use super::gguf_out::{refuse_same_file, Input, PartialFile, TensorStream};
use super::plan::{self as plan_cmd, DeviceArgs};
use super::requant::{self, Slab};
use smolrun_core::gguf::{
    expert_data_offset, is_expert_tensor, Gguf, GgufWriter, MetaValue, TensorInfo,
    EXPERT_DATA_OFFSET_KEY,
};
use smolrun_core::model::head::KEPT_IDS_KEY;
use smolrun_core::quant::{self, GgmlType};
use smolrun_engine::options::KvCacheType;
use smolrun_engine::plan::{self, Device, DevicePlan};
use smolrun_engine::profile::{self, RunProfile};
use smolrun_engine::EngineOptions;
use smolrun_linux::MappedFile;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// Input model: a .gguf path or model name, an http(s) URL, or a Hugging Face
    /// `org/repo:QUANT` (read with range requests, never stored whole).
    input: String,
    /// Output .gguf file (written as OUT.tmp-PID, renamed when complete and checked).
    #[arg(short = 'o', long)]
    out: PathBuf,
    #[command(flatten)]
    device: DeviceArgs,
    /// Context length to fit for [default: 4096, or the trained context if smaller].
    #[arg(short = 'c', long = "ctx-size")]
    ctx: Option<usize>,
    /// LM-head rows to keep, rounded up to a multiple of 16 [default: 65,536 when the
    /// vocabulary is larger, else every row].
    #[arg(long = "head-rows")]
    head_rows: Option<usize>,
    /// Kept head ids, one per line, sorted (from `smolrun gguf head-ids`), instead of choosing
    /// them here.
    #[arg(long = "head-ids", conflicts_with = "head_rows")]
    head_ids: Option<PathBuf>,
    /// Corpus positions the model reads when it chooses the head rows (as `gguf head-ids`).
    #[arg(long, default_value_t = 4096)]
    model_positions: usize,
    /// Type of the expert tensors: Q2_K, Q4_0, Q4_K, ... or `keep` [default: Q2_K when the
    /// device cannot hold every expert in RAM, else keep].
    #[arg(long = "experts-type")]
    experts_type: Option<String>,
    /// Print the stock and the fitted plan, write nothing.
    #[arg(long)]
    plan: bool,
}

/// The head a vocabulary larger than this is cut to by default: the reference write-ups' 64K
/// head (a Gemma 3 or Qwen vocabulary loses ~1 % bits per byte on English text with it).
pub const DEFAULT_HEAD_ROWS: usize = 65_536;

/// Bytes copied per read.
const COPY_BUFFER: usize = 8 << 20;

/// Where an output tensor's bytes come from.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// The input tensor's bytes, unchanged.
    Copy(usize),
    /// The kept head rows of the input tensor (the head, or a tied head's embeddings).
    KeptRows(usize),
    /// The input tensor requantized to this type.
    Convert(usize, GgmlType),
}

/// The fitted file's layout: its header and, per output tensor, where the bytes come from.
struct Layout {
    writer: GgufWriter,
    sources: Vec<Source>,
    /// Output index of the first expert tensor (`None`: a dense model).
    first_expert: Option<usize>,
}

impl Layout {
    fn file_len(&self) -> u64 {
        self.writer.header().len() as u64 + self.writer.data_len()
    }

    fn expert_offset(&self) -> Option<u64> {
        self.first_expert
            .map(|i| self.writer.header().len() as u64 + self.writer.tensor_offset(i))
    }
}

/// What `fit` decided, before the layout.
struct Decision {
    /// The kept head ids, sorted; `None`: the head stays whole.
    ids: Option<Vec<u32>>,
    /// The experts' new type; `None`: unchanged.
    experts: Option<GgmlType>,
    /// The run profile written into the file.
    profile: RunProfile,
}

pub fn run(args: Args, globals: &crate::args::Globals) -> Result<(), String> {
    let device = plan_cmd::device(&args.device)?;
    // The input's header, read from the local file or with range requests; its tensor bytes
    // are read the same way, tensor by tensor, while the output is written.
    let (input, header_bytes, file_len) = plan_cmd::open(&args.input)?;
    let label = input.label();
    let local = match &input {
        Input::Local { path, .. } => {
            refuse_same_file(path, &args.out)?;
            Some(path.clone())
        }
        Input::Remote { .. } => None,
    };
    let g = Gguf::parse_header(&header_bytes, file_len).map_err(|e| format!("{label}: {e}"))?;
    let in_path = PathBuf::from(&label);
    let base = EngineOptions {
        n_ctx: args.ctx,
        ..globals.base_options()
    };
    let stock = plan::plan(&in_path, &g, file_len, &device, &base)?;

    let n_vocab = g
        .tensor("token_embd.weight")
        .filter(|t| t.n_dims == 2)
        .map(|t| t.dims[1] as usize)
        .ok_or_else(|| {
            format!(
                "{}: no 2-D token_embd.weight tensor: not a model fit can rewrite",
                in_path.display()
            )
        })?;
    let is_moe = g.tensors.iter().any(is_expert_tensor);
    let experts = experts_type(&args, &g, &stock, is_moe)?;
    let mut decision = Decision {
        ids: head_ids(&args, &g, &label, local.as_deref(), n_vocab, globals)?,
        experts,
        profile: RunProfile::default(),
    };

    // The fitted file's plan, from its header alone (the profile's values do not move a byte:
    // they are fixed-size numbers, zero until known, and zero means unset).
    let layout = layout(&g, &in_path, &decision)?;
    let header = layout.writer.header();
    let fitted_g = Gguf::parse_header(&header, layout.file_len())
        .map_err(|e| format!("the fitted header does not parse: {e}; please report this"))?;
    let mut fitted = plan::plan(&args.out, &fitted_g, layout.file_len(), &device, &base)?;
    // Where memory buys speed, the fitted file runs with a q8_0 KV cache, and is planned
    // with it: its pool holds what the smaller cache leaves.
    let cache_type = kv_cache_type(&fitted);
    if let Some(kv) = cache_type {
        fitted = plan::plan(
            &args.out,
            &fitted_g,
            layout.file_len(),
            &device,
            &base.with_kv_type(kv),
        )?;
    }
    decision.profile = RunProfile {
        device: Some(device.name.clone()),
        moe_pool: fitted.pools.as_ref().map(|p| p.slots_per_layer),
        ctx: Some(fitted.n_ctx),
        threads: Some(device.threads),
        cache_type,
    };
    drop(fitted_g);
    print_side_by_side(&label, &g, file_len, &device, &stock, &fitted, &decision);
    if args.plan {
        return Ok(());
    }
    if let Some(why) = &fitted.refusal {
        return Err(format!(
            "even the fitted file does not fit {}: {why}\nnothing was written",
            device.name
        ));
    }
    let layout = self::layout(&g, &in_path, &decision)?;
    let threads = args
        .device
        .threads
        .unwrap_or_else(crate::args::default_threads);
    write(&g, &input, &args.out, &layout, &decision, threads)?;
    Ok(())
}

/// The experts' target type: `--experts-type`, or Q2_K when the stock plan cannot hold every
/// expert in RAM.
fn experts_type(
    args: &Args,
    g: &Gguf,
    stock: &DevicePlan,
    is_moe: bool,
) -> Result<Option<GgmlType>, String> {
    let chosen = match args.experts_type.as_deref() {
        Some(t) if t.eq_ignore_ascii_case("keep") => None,
        Some(t) => {
            Some(requant::parse_type(t).map_err(|e| format!("--experts-type: {e} (or keep)"))?)
        }
        None => default_experts_type(stock),
    };
    if chosen.is_some() && !is_moe {
        if args.experts_type.is_some() {
            return Err(format!(
                "--experts-type: {} has no expert tensors (a dense model)",
                g.architecture().unwrap_or("this model")
            ));
        }
        return Ok(None);
    }
    Ok(chosen)
}

/// Q2_K when the stock plan cannot hold every expert in RAM, else the experts keep their type.
/// Every expert is in RAM when the file is resident or its pools have a slot for each; a
/// mixture of experts streamed (its pools could not hold even a token's experts) reads every
/// chosen expert from flash, and needs smaller experts most.
fn default_experts_type(stock: &DevicePlan) -> Option<GgmlType> {
    let all_fit = match stock.pools.as_ref() {
        Some(p) => p.slots_per_layer >= p.n_expert,
        None => stock.weights == "resident",
    };
    (!all_fit || stock.refusal.is_some()).then_some(GgmlType::Q2_K)
}

/// The KV cache's type of the fitted file's profile: q8_0 (half the f16 cache, as llama.cpp's
/// `-ctk q8_0 -ctv q8_0`) when memory buys speed, i.e. when the (f16) fitted plan pages
/// experts without a slot for each, streams its weights, or does not fit; `None` (f16)
/// otherwise, so a file that fits keeps the stock file's exact cache.
fn kv_cache_type(fitted: &DevicePlan) -> Option<KvCacheType> {
    let memory_buys_speed = match fitted.pools.as_ref() {
        Some(p) => p.slots_per_layer < p.n_expert,
        None => fitted.weights == "stream",
    };
    (memory_buys_speed || fitted.refusal.is_some()).then_some(KvCacheType::Q8_0)
}

/// The kept head ids: from `--head-ids`, or chosen here for `--head-rows` (default: 65,536 for
/// a larger vocabulary); `None` when the head stays whole.
fn head_ids(
    args: &Args,
    g: &Gguf,
    label: &str,
    local: Option<&Path>,
    n_vocab: usize,
    globals: &crate::args::Globals,
) -> Result<Option<Vec<u32>>, String> {
    if g.get(KEPT_IDS_KEY).is_some() {
        if args.head_ids.is_some() || args.head_rows.is_some() {
            return Err(format!(
                "{label}: the head is already pruned ({KEPT_IDS_KEY} is set): fit the original \
                 file"
            ));
        }
        return Ok(None);
    }
    if let Some(file) = &args.head_ids {
        return super::head::read_ids(file).map(Some);
    }
    let keep = match args.head_rows {
        Some(0) => return Err("--head-rows 0: keep at least the control and byte tokens".into()),
        Some(n) => n,
        None if n_vocab > DEFAULT_HEAD_ROWS => DEFAULT_HEAD_ROWS,
        None => return Ok(None),
    };
    if keep >= n_vocab {
        return Ok(None);
    }
    if local.is_none() && args.model_positions > 0 {
        eprintln!(
            "fit: {label} is read over HTTP: the head rows are ranked by the corpus and the word \
             lists, without the model's predictions (they need its weights; give --head-ids \
             from `smolrun gguf head-ids` on a local copy to have them)"
        );
    }
    super::head::choose_ids(
        g,
        label,
        local,
        &[],
        None,
        4.0,
        keep,
        args.model_positions,
        args.device
            .threads
            .unwrap_or_else(crate::args::default_threads),
        globals,
    )
    .map(Some)
}

/// The fitted file's header and sources: the metadata (an old expert offset, kept-ids list or
/// profile replaced), the non-expert tensors in the input's order (the head cut to the kept
/// rows; a tied head's own output.weight after the embeddings), then the expert tensors.
fn layout(g: &Gguf, path: &Path, d: &Decision) -> Result<Layout, String> {
    // Plan once to learn where the experts start, then again with that offset (a fixed-size
    // u64: it moves nothing).
    let first = layout_with(g, path, d, 0)?;
    match first.expert_offset() {
        Some(offset) => layout_with(g, path, d, offset),
        None => Ok(first),
    }
}

fn layout_with(g: &Gguf, path: &Path, d: &Decision, expert_offset: u64) -> Result<Layout, String> {
    use smolrun_core::gguf::writer::MetaArray;
    let bad = |e: smolrun_core::gguf::GgufError| format!("{}: {e}", path.display());
    let is_moe = g.tensors.iter().any(is_expert_tensor);
    let mut w = GgufWriter::new().with_version(g.version).map_err(bad)?;
    let ours = [
        EXPERT_DATA_OFFSET_KEY,
        KEPT_IDS_KEY,
        profile::DEVICE_KEY,
        profile::MOE_POOL_KEY,
        profile::CTX_KEY,
        profile::THREADS_KEY,
        profile::CACHE_TYPE_KEY,
    ];
    for entry in g.metadata.iter().filter(|e| !ours.contains(&e.key)) {
        w.add(entry.key, MetaValue::from(entry.value))
            .map_err(bad)?;
    }
    if let Some(ids) = &d.ids {
        let ids: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
        w.add(KEPT_IDS_KEY, MetaValue::Array(MetaArray::I32(ids)))
            .map_err(bad)?;
    }
    let p = &d.profile;
    w.add(profile::DEVICE_KEY, p.device.as_deref().unwrap_or(""))
        .map_err(bad)?;
    let count = |n: Option<usize>| n.map_or(0, |n| n.min(u32::MAX as usize) as u32);
    w.add(profile::MOE_POOL_KEY, count(p.moe_pool))
        .map_err(bad)?;
    w.add(profile::CTX_KEY, count(p.ctx)).map_err(bad)?;
    w.add(profile::THREADS_KEY, count(p.threads)).map_err(bad)?;
    if let Some(kv) = p.cache_type {
        w.add(profile::CACHE_TYPE_KEY, kv.name()).map_err(bad)?;
    }
    if is_moe {
        w.add(EXPERT_DATA_OFFSET_KEY, expert_offset).map_err(bad)?;
    }

    let tied = g.tensor("output.weight").is_none();
    let mut sources = Vec::with_capacity(g.tensors.len() + 1);
    let add = |w: &mut GgufWriter,
               sources: &mut Vec<Source>,
               name: &str,
               ty: GgmlType,
               dims: &[u64],
               src: Source| {
        sources.push(src);
        w.add_tensor(name, ty, dims).map_err(bad)
    };
    for (j, t) in g.tensors.iter().enumerate() {
        if is_expert_tensor(t) {
            continue;
        }
        match (&d.ids, t.name) {
            (Some(ids), "output.weight") => add(
                &mut w,
                &mut sources,
                t.name,
                t.ggml_type,
                &[t.dims[0], ids.len() as u64],
                Source::KeptRows(j),
            )?,
            _ => add(
                &mut w,
                &mut sources,
                t.name,
                t.ggml_type,
                t.shape(),
                Source::Copy(j),
            )?,
        };
        if let (Some(ids), true, "token_embd.weight") = (&d.ids, tied, t.name) {
            add(
                &mut w,
                &mut sources,
                "output.weight",
                t.ggml_type,
                &[t.dims[0], ids.len() as u64],
                Source::KeptRows(j),
            )?;
        }
    }
    let first_expert = is_moe.then_some(sources.len());
    for (j, t) in g.tensors.iter().enumerate() {
        if !is_expert_tensor(t) {
            continue;
        }
        let (ty, src) = match expert_target(t, d.experts, path)? {
            Some(ty) => (ty, Source::Convert(j, ty)),
            None => (t.ggml_type, Source::Copy(j)),
        };
        add(&mut w, &mut sources, t.name, ty, t.shape(), src)?;
    }
    Ok(Layout {
        writer: w,
        sources,
        first_expert,
    })
}

/// The type an expert tensor is rewritten to: `target` (or llama-quantize's fallback for rows
/// that are not whole blocks of it) where that takes fewer bytes; `None` to copy it.
fn expert_target(
    t: &TensorInfo,
    target: Option<GgmlType>,
    path: &Path,
) -> Result<Option<GgmlType>, String> {
    let Some(target) = target else {
        return Ok(None);
    };
    let row_len = t.dims[0] as usize;
    let ty = if row_len.is_multiple_of(target.block_size()) {
        target
    } else {
        match requant::fallback_type(target, row_len as u64) {
            Some(f) => f,
            None => return Ok(None),
        }
    };
    let now = quant::row_bytes(t.ggml_type, row_len).map_err(|e| {
        format!(
            "{}: tensor {}: {e}; the file is corrupt",
            path.display(),
            t.name
        )
    })?;
    let then = quant::row_bytes(ty, row_len).unwrap_or(usize::MAX);
    Ok((then < now).then_some(ty))
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn print_side_by_side(
    label: &str,
    g: &Gguf,
    file_len: u64,
    device: &Device,
    stock: &DevicePlan,
    fitted: &DevicePlan,
    d: &Decision,
) {
    plan_cmd::print_plan(label, g, file_len, device, stock);
    println!();
    println!("fitted:");
    match &d.ids {
        Some(ids) => println!("  head: {} of its rows kept", ids.len()),
        None => println!("  head: whole"),
    }
    match d.experts {
        Some(ty) => println!("  experts: requantized to {ty} where that is smaller, written last"),
        None if stock.pools.is_some() || g.tensors.iter().any(is_expert_tensor) => {
            println!("  experts: types kept, written last")
        }
        None => {}
    }
    let limit = |p: &DevicePlan| {
        if p.flash_limit_tok_s.is_finite() {
            format!("{:.2} tok/s", p.flash_limit_tok_s)
        } else {
            "none (nothing read per token)".into()
        }
    };
    println!("  {:<28} {:>14} {:>14}", "", "stock", "fitted");
    println!(
        "  {:<28} {:>14} {:>14}",
        "weights", stock.weights, fitted.weights
    );
    println!(
        "  {:<28} {:>14.1} {:>14.1}",
        "resident MB",
        mb(stock.resident_bytes),
        mb(fitted.resident_bytes)
    );
    println!(
        "  {:<28} {:>14} {:>14}",
        "kv cache type",
        stock.kv_type.name(),
        fitted.kv_type.name()
    );
    if let (Some(a), Some(b)) = (&stock.pools, &fitted.pools) {
        println!(
            "  {:<28} {:>14} {:>14}",
            "experts per layer in RAM", a.slots_per_layer, b.slots_per_layer
        );
    }
    println!(
        "  {:<28} {:>14.1} {:>14.1}",
        "flash MB per token", stock.flash_mb_per_token, fitted.flash_mb_per_token
    );
    println!(
        "  {:<28} {:>14} {:>14}",
        "flash limit",
        limit(stock),
        limit(fitted)
    );
    println!(
        "  {:<28} {:>14} {:>14}",
        "fits",
        if stock.refusal.is_none() { "yes" } else { "no" },
        if fitted.refusal.is_none() {
            "yes"
        } else {
            "no"
        }
    );
    println!("  run profile: {}", d.profile.describe());
}

/// Writes `layout` from `in_path` to `out` (through `OUT.tmp-PID`), parses it back, checks it
/// and renames it.
fn write(
    g: &Gguf,
    input: &Input,
    out: &Path,
    layout: &Layout,
    d: &Decision,
    threads: usize,
) -> Result<(), String> {
    let started = std::time::Instant::now();
    let partial = PartialFile::for_output(out);
    let read = |buf: &mut [u8], at: u64| input.read_at(buf, at);
    let mut stream = TensorStream::create(&partial.path, &layout.writer)?;
    let mut buf = vec![0u8; COPY_BUFFER];
    let mut slab = Slab::default();
    for (i, source) in layout.sources.iter().enumerate() {
        stream.begin_tensor(i)?;
        match *source {
            Source::Copy(j) => {
                let t = &g.tensors[j];
                let mut done = 0u64;
                while done < t.n_bytes {
                    let n = (t.n_bytes - done).min(COPY_BUFFER as u64) as usize;
                    read(&mut buf[..n], t.offset + done)?;
                    stream.write(&buf[..n])?;
                    done += n as u64;
                }
            }
            Source::KeptRows(j) => {
                let t = &g.tensors[j];
                let ids = d.ids.as_deref().unwrap_or(&[]);
                let rb = t.row_bytes();
                let per_buf = (COPY_BUFFER / rb.max(1)).max(1);
                // Runs of consecutive ids are one read each, at most a buffer long.
                let mut k = 0;
                while k < ids.len() {
                    let first = ids[k];
                    let mut n = 1;
                    while k + n < ids.len() && n < per_buf && ids[k + n] == first + n as u32 {
                        n += 1;
                    }
                    read(&mut buf[..n * rb], t.offset + first as u64 * rb as u64)?;
                    stream.write(&buf[..n * rb])?;
                    k += n;
                }
            }
            Source::Convert(j, ty) => {
                requant::convert_tensor(
                    input,
                    &g.tensors[j],
                    ty,
                    threads.max(1),
                    &mut stream,
                    &mut slab,
                )?;
            }
        }
    }
    let total = stream.finish()?;
    drop(slab);

    // Parse the result back and check it before it takes the final name.
    let check = MappedFile::open(&partial.path)?;
    if check.bytes().len() as u64 != total || total != layout.file_len() {
        return Err(format!(
            "{}: wrote {} bytes, expected {}; please report this",
            partial.path.display(),
            check.bytes().len(),
            layout.file_len()
        ));
    }
    let written = Gguf::parse(check.bytes())
        .map_err(|e| format!("{} does not parse back: {e}", partial.path.display()))?;
    match (expert_data_offset(&written), layout.expert_offset()) {
        (Ok(found), want) if found == want => {}
        (found, want) => {
            return Err(format!(
                "{}: {EXPERT_DATA_OFFSET_KEY} reads back as {found:?}, expected {want:?}; \
                 please report this",
                partial.path.display()
            ))
        }
    }
    if RunProfile::of(&written) != d.profile {
        return Err(format!(
            "{}: the run profile reads back as {:?}, expected {:?}; please report this",
            partial.path.display(),
            RunProfile::of(&written),
            d.profile
        ));
    }
    drop(written);
    drop(check);
    partial.commit(out)?;
    eprintln!(
        "fit: wrote {} ({:.1} MB, from {:.1} MB) in {:.1} s",
        out.display(),
        mb(total),
        mb(g.file_len()),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(weights: &'static str, pools: Option<(usize, usize)>) -> DevicePlan {
        DevicePlan {
            weights,
            n_ctx: 4096,
            kv_type: KvCacheType::F16,
            resident_bytes: 0,
            zone_bytes: 0,
            pools: pools.map(|(slots_per_layer, n_expert)| plan::PoolPlan {
                slots_per_layer,
                n_expert,
                n_used: 4,
                moe_layers: 22,
                pool_bytes: 0,
                uniform_miss_rate: 0.0,
            }),
            parts: Vec::new(),
            total_bytes: 0,
            allowed_bytes: 0,
            refusal: None,
            flash_mb_per_token: 0.0,
            flash_limit_tok_s: 0.0,
            notices: Vec::new(),
        }
    }

    /// LFM2-8B-A1B-shaped on the TV box: its pools cannot hold a token's experts, so the stock
    /// file streams; the experts must shrink (they were kept, as if they all fitted).
    #[test]
    fn experts_shrink_unless_all_are_in_ram() {
        assert_eq!(default_experts_type(&plan("resident", None)), None);
        assert_eq!(default_experts_type(&plan("paged", Some((32, 32)))), None);
        let q2 = Some(GgmlType::Q2_K);
        assert_eq!(default_experts_type(&plan("paged", Some((6, 32)))), q2);
        assert_eq!(default_experts_type(&plan("stream", None)), q2);
        assert_eq!(default_experts_type(&plan("pread", None)), q2);
        let mut refused = plan("resident", None);
        refused.refusal = Some("does not fit".into());
        assert_eq!(default_experts_type(&refused), q2);
    }

    /// A q8_0 KV cache where memory buys speed (experts paged short of a slot each, weights
    /// streamed) or the fit needs it; f16 (none written) where everything is in RAM.
    #[test]
    fn kv_cache_is_q8_0_where_memory_buys_speed() {
        let q8 = Some(KvCacheType::Q8_0);
        assert_eq!(kv_cache_type(&plan("resident", None)), None);
        assert_eq!(kv_cache_type(&plan("paged", Some((32, 32)))), None);
        assert_eq!(kv_cache_type(&plan("paged", Some((31, 32)))), q8);
        assert_eq!(kv_cache_type(&plan("stream", None)), q8);
        let mut refused = plan("resident", None);
        refused.refusal = Some("does not fit".into());
        assert_eq!(kv_cache_type(&refused), q8);
    }
}
