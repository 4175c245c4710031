//! `smolrun gguf requant -m IN --type T [--tensors REGEX] -o OUT`: rewrites a model's weight
//! tensors to another type in one streamed pass, with tensor data byte-identical to
//! `llama-quantize --allow-requantize --pure IN OUT T` (no importance matrix).
//!
//! ```text
//! per tensor, in llama-quantize's order (`llama_order`: by layer, then name):
//!   left alone      1-D tensors, norms, and the other names llama-quantize never quantizes
//!                   (`llama_quantizes`), and tensors the --tensors regex does not match
//!   same type       a tensor already of its target type: bytes copied unchanged
//!   rewritten       slabs of rows: pread -> ggml's dequantizer (to f32) -> ggml's reference
//!                   quantizer (`quant::quantize_weights`) -> written at the tensor's offset
//! ```
//! The target of a tensor whose rows are not whole blocks of T is llama-quantize's fallback
//! (`fallback_type`): IQ4_XS -> IQ4_NL; Q2_K, Q3_K, Q2_0, TQ1_0, TQ2_0 -> Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1;
//! Q6_K -> Q8_0; a 32-block type keeps itself; and F16 when even the fallback does not fit.
//! Qwen2.5 0.5B's rows of 896 = 3.5 x 256 make half its tensors fall back. A line is printed
//! per fallback, as llama-quantize does.
//!
//! RAM: the header (mapped) plus one slab of rows (about [`SLAB_BYTES`] of f32) at a time, so a
//! model much bigger than RAM requantizes too.
//!
//! The tensors are written in llama-quantize's order (its loader keeps them in a map sorted by
//! layer number, tensors outside the blocks first, then by name), so the whole tensor data
//! section is byte-identical to llama-quantize's, offsets included; so is the header: every
//! metadata entry in order, with `general.quantization_version`
//! (2) and `general.file_type` (llama.cpp's ftype for T, e.g. 15 = Q4_K_M for Q4_K, as
//! llama-quantize writes for "Q4_K") moved to the end. With --tensors, `general.file_type` is
//! kept as it was: the file is then a mix, not one type.

use super::gguf_out::{refuse_same_file, Input, PartialFile, TensorStream};
use smolrun_core::gguf::{Gguf, GgufWriter, MetaValue, TensorInfo};
use smolrun_core::quant::{self, GgmlType, QuantError, WEIGHT_QUANTIZERS};
use smolrun_linux::MappedFile;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug, Clone)]
pub struct RequantArgs {
    /// Input model (path or short name).
    #[arg(short = 'm', long)]
    pub model: String,
    /// Target type: Q8_0, Q5_0, Q4_0, Q4_K, Q2_K, Q2_0, Q1_0, TQ2_0, TQ1_0, IQ4_NL, IQ4_XS, F16,
    /// BF16, F32.
    #[arg(long = "type")]
    pub ty: String,
    /// Rewrite only the tensors whose name this regex matches (searched anywhere in the name,
    /// as llama-quantize's --tensor-type does); the others are copied unchanged.
    #[arg(long)]
    pub tensors: Option<String>,
    /// Threads quantizing each slab of rows [default: one per core].
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Output .gguf file (written as OUT.tmp, renamed when complete and checked).
    #[arg(short = 'o', long)]
    pub out: PathBuf,
}

/// f32 elements dequantized per slab: 4 Mi elements (16 MiB), rounded to whole rows.
const SLAB_ELEMENTS: usize = 4 << 20;
/// The slab in bytes of f32, for the module docs.
pub const SLAB_BYTES: usize = SLAB_ELEMENTS * 4;

/// `general.quantization_version` that llama-quantize writes (ggml's GGML_QNT_VERSION).
const QNT_VERSION: u32 = 2;

/// llama.cpp's `llama_ftype` for a file quantized to `t` with --pure, as llama-quantize writes
/// it in `general.file_type` (its type name "Q4_K" is Q4_K_M, "Q2_K" is Q2_K, ...).
fn file_type(t: GgmlType) -> u32 {
    match t {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q4_0 => 2,
        GgmlType::Q8_0 => 7,
        GgmlType::Q5_0 => 8,
        GgmlType::Q2_K => 10,
        GgmlType::Q4_K => 15,
        GgmlType::BF16 => 32,
        GgmlType::TQ1_0 => 36,
        GgmlType::TQ2_0 => 37,
        GgmlType::Q1_0 => 40,
        GgmlType::Q2_0 => 41,
        GgmlType::IQ4_NL => 25,
        GgmlType::IQ4_XS => 30,
        // Every type in WEIGHT_QUANTIZERS is listed above; this arm is never taken.
        _ => 0,
    }
}

/// Names llama-quantize never quantizes (its `tensor_allows_quantization`, the checks that do
/// not depend on the architecture): substrings, and whole names.
const NEVER_QUANTIZED_PARTS: &[&str] = &[
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
    "mm.a.code_embd",
];
const NEVER_QUANTIZED_NAMES: &[&str] = &["position_embd.weight", "token_types.weight"];

/// Would llama-quantize quantize this tensor at all: 2-D or more, a name ending in "weight",
/// not a norm, router, positional embedding or one of the small special tensors above.
pub fn llama_quantizes(t: &TensorInfo) -> bool {
    t.n_dims >= 2
        && t.name.ends_with("weight")
        && !NEVER_QUANTIZED_PARTS.iter().any(|p| t.name.contains(p))
        && !NEVER_QUANTIZED_NAMES.contains(&t.name)
}

/// llama-quantize's `tensor_type_fallback`: the type a tensor gets when its rows are not whole
/// blocks of `target`. `None`: llama-quantize defines no fallback (it fails).
pub(crate) fn fallback_type(target: GgmlType, row_len: u64) -> Option<GgmlType> {
    use GgmlType::*;
    let fallback = match target {
        IQ1_S | IQ1_M | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ4_XS => IQ4_NL,
        Q2_0 | Q2_K | Q3_K | TQ1_0 | TQ2_0 => Q4_0,
        Q4_K => Q5_0,
        Q5_K => Q5_1,
        Q6_K => Q8_0,
        t if t.block_size() <= 32 => t,
        _ => return None,
    };
    // Most likely a row not divisible by 32: llama-quantize writes F16 then.
    Some(match row_len % fallback.block_size() as u64 {
        0 => fallback,
        _ => F16,
    })
}

/// What happens to one tensor.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Action {
    Copy,
    Convert(GgmlType),
}

/// Parses `--type`: one of [`WEIGHT_QUANTIZERS`], in any case.
pub(crate) fn parse_type(name: &str) -> Result<GgmlType, String> {
    WEIGHT_QUANTIZERS
        .iter()
        .copied()
        .find(|t| t.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            let valid: Vec<&str> = WEIGHT_QUANTIZERS.iter().map(|t| t.name()).collect();
            format!(
                "--type {name}: not a type smolrun can quantize to; valid types: {}",
                valid.join(", ")
            )
        })
}

/// Decides every tensor's action; prints a line per fallback, as llama-quantize does.
fn plan(
    g: &Gguf,
    path: &Path,
    target: GgmlType,
    only: Option<&regex::Regex>,
) -> Result<(Vec<Action>, usize), String> {
    let mut actions = Vec::with_capacity(g.tensors.len());
    let mut n_fallback = 0;
    for t in &g.tensors {
        let selected = only.is_none_or(|re| re.is_match(t.name));
        if !selected || !llama_quantizes(t) {
            actions.push(Action::Copy);
            continue;
        }
        let row_len = t.dims[0];
        let mut ty = target;
        if !row_len.is_multiple_of(target.block_size() as u64) {
            let Some(fallback) = fallback_type(target, row_len) else {
                return Err(format!(
                    "{}: tensor {} has rows of {row_len} elements, not a multiple of {target}'s \
                     block of {} elements, and {target} has no fallback type (llama-quantize \
                     fails on it too); choose another --type, or leave the tensor out with \
                     --tensors",
                    path.display(),
                    t.name,
                    target.block_size()
                ));
            };
            n_fallback += 1;
            eprintln!(
                "warning: {:<36} - ncols {row_len:6} not divisible by {:3} (required for type \
                 {:>7}) -> falling back to {:>7}",
                t.name,
                target.block_size(),
                target.name(),
                fallback.name()
            );
            ty = fallback;
        }
        if quant::row_bytes(t.ggml_type, row_len as usize).is_err() {
            return Err(format!(
                "{}: tensor {}: rows of {row_len} elements are not whole {}-element blocks of \
                 its type {}; the file is corrupt",
                path.display(),
                t.name,
                t.ggml_type.block_size(),
                t.ggml_type
            ));
        }
        actions.push(if ty == t.ggml_type {
            Action::Copy
        } else {
            Action::Convert(ty)
        });
    }
    Ok((actions, n_fallback))
}

/// The order llama-quantize writes tensors in: its loader's map compares the layer number of
/// `blk.N.` names (-1 for the rest) and then the names as byte strings.
fn llama_order(g: &Gguf) -> Vec<usize> {
    let layer = |name: &str| -> i64 {
        name.strip_prefix("blk.")
            .map(|rest| {
                let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
                rest[..digits].parse::<i64>().unwrap_or(-1)
            })
            .unwrap_or(-1)
    };
    let mut order: Vec<usize> = (0..g.tensors.len()).collect();
    order.sort_by(|&a, &b| {
        let (na, nb) = (g.tensors[a].name, g.tensors[b].name);
        layer(na)
            .cmp(&layer(nb))
            .then(na.as_bytes().cmp(nb.as_bytes()))
    });
    order
}

/// The output header: the input's metadata (with llama-quantize's two keys moved to the end)
/// and its tensors in `order`, each with its new type.
fn layout(
    g: &Gguf,
    path: &Path,
    actions: &[Action],
    order: &[usize],
    file_type: Option<u32>,
) -> Result<GgufWriter, String> {
    let bad = |e: smolrun_core::gguf::GgufError| format!("{}: {e}", path.display());
    const QNT_KEY: &str = "general.quantization_version";
    const FTYPE_KEY: &str = "general.file_type";
    let mut w = GgufWriter::new().with_version(g.version).map_err(bad)?;
    for entry in &g.metadata {
        if entry.key == QNT_KEY || (entry.key == FTYPE_KEY && file_type.is_some()) {
            continue;
        }
        w.add(entry.key, MetaValue::from(entry.value))
            .map_err(bad)?;
    }
    w.add(QNT_KEY, QNT_VERSION).map_err(bad)?;
    if let Some(ft) = file_type {
        w.add(FTYPE_KEY, ft).map_err(bad)?;
    }
    for &j in order {
        let (t, a) = (&g.tensors[j], &actions[j]);
        let ty = match *a {
            Action::Copy => t.ggml_type,
            Action::Convert(ty) => ty,
        };
        w.add_tensor(t.name, ty, t.shape()).map_err(bad)?;
    }
    Ok(w)
}

/// `smolrun gguf requant`.
pub fn requant(a: &RequantArgs) -> Result<(), String> {
    let target = parse_type(&a.ty)?;
    let only = match &a.tensors {
        Some(re) => Some(
            regex::Regex::new(re)
                .map_err(|e| format!("--tensors {re:?} is not a valid regex: {e}"))?,
        ),
        None => None,
    };
    let threads = a
        .threads
        .unwrap_or_else(crate::args::default_threads)
        .max(1);
    let in_path = crate::args::resolve(&a.model)?;
    refuse_same_file(&in_path, &a.out)?;
    let started = std::time::Instant::now();

    // The header is parsed from the mapped file; tensor bytes are read with pread, a slab at
    // a time, so only the header's pages and one slab are ever in RAM.
    let mapped = MappedFile::open(&in_path)?;
    let g = Gguf::parse(mapped.bytes()).map_err(|e| format!("{}: {e}", in_path.display()))?;
    let (actions, n_fallback) = plan(&g, &in_path, target, only.as_ref())?;
    let file_type = only.is_none().then(|| file_type(target));
    let order = llama_order(&g);
    let w = layout(&g, &in_path, &actions, &order, file_type)?;

    let partial = PartialFile::for_output(&a.out);
    let src = Input::local(&in_path)?;
    let mut out = TensorStream::create(&partial.path, &w)?;
    let n = g.tensors.len();
    let (mut bytes_in, mut bytes_out, mut n_converted) = (0u64, 0u64, 0usize);
    let mut slab = Slab::default();
    for (i, &j) in order.iter().enumerate() {
        let (t, action) = (&g.tensors[j], &actions[j]);
        out.begin_tensor(i)?;
        let shape: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
        let line = format!(
            "[{:4}/{n:4}] {:<36} - [{}], type = {:>6}, ",
            i + 1,
            t.name,
            shape.join(", "),
            t.ggml_type.name()
        );
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        match *action {
            Action::Copy => {
                copy_tensor(&src, t, &mut out, &mut slab)?;
                eprintln!("{line}size = {:8.3} MiB", mib(t.n_bytes));
                bytes_out += t.n_bytes;
            }
            Action::Convert(ty) => {
                let written = convert_tensor(&src, t, ty, threads, &mut out, &mut slab)?;
                eprintln!(
                    "{line}converting to {ty} .. size = {:8.2} MiB -> {:8.2} MiB",
                    mib(t.n_bytes),
                    mib(written)
                );
                bytes_out += written;
                n_converted += 1;
            }
        }
        bytes_in += t.n_bytes;
    }
    let total = out.finish()?;
    drop(slab);

    // Parse the result back and check every tensor's type and shape before it takes the final
    // name.
    let check = MappedFile::open(&partial.path)?;
    if check.bytes().len() as u64 != total {
        return Err(format!(
            "{}: wrote {} bytes, expected {total}",
            partial.path.display(),
            check.bytes().len()
        ));
    }
    let written = Gguf::parse(check.bytes())
        .map_err(|e| format!("{} does not parse back: {e}", partial.path.display()))?;
    for (i, &j) in order.iter().enumerate() {
        let (t, a) = (&g.tensors[j], &actions[j]);
        let want = match *a {
            Action::Copy => t.ggml_type,
            Action::Convert(ty) => ty,
        };
        let got = &written.tensors[i];
        if got.name != t.name || got.ggml_type != want || got.shape() != t.shape() {
            return Err(format!(
                "{}: tensor {i} reads back as {} {} {:?}, expected {} {want} {:?}; please \
                 report this",
                partial.path.display(),
                got.name,
                got.ggml_type,
                got.shape(),
                t.name,
                t.shape()
            ));
        }
    }
    drop(written);
    drop(check);
    partial.commit(&a.out)?;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    if n_fallback > 0 {
        eprintln!("requant: WARNING: {n_fallback} of {n} tensor(s) required fallback quantization");
    }
    eprintln!(
        "requant: wrote {} in {:.1} s: {n_converted} of {n} tensors converted to {target} (or \
         its fallback), tensor data {:.2} MiB -> {:.2} MiB",
        a.out.display(),
        started.elapsed().as_secs_f64(),
        mib(bytes_in),
        mib(bytes_out)
    );
    Ok(())
}

/// The buffers of one slab of rows, reused from tensor to tensor.
#[derive(Default)]
pub(crate) struct Slab {
    src: Vec<u8>,
    f32s: Vec<f32>,
    dst: Vec<u8>,
}

/// Copies a tensor's bytes unchanged, a slab at a time.
fn copy_tensor(
    src: &Input,
    t: &TensorInfo,
    out: &mut TensorStream,
    slab: &mut Slab,
) -> Result<(), String> {
    let chunk = SLAB_BYTES as u64;
    let mut done = 0u64;
    while done < t.n_bytes {
        let n = (t.n_bytes - done).min(chunk) as usize;
        slab.src.resize(n, 0);
        src.read_at(&mut slab.src, t.offset + done)?;
        out.write(&slab.src)?;
        done += n as u64;
    }
    Ok(())
}

/// Dequantizes `t` a slab of rows at a time, quantizes the rows to `ty` on `threads` threads,
/// and writes them; returns the bytes written.
pub(crate) fn convert_tensor(
    src: &Input,
    t: &TensorInfo,
    ty: GgmlType,
    threads: usize,
    out: &mut TensorStream,
    slab: &mut Slab,
) -> Result<u64, String> {
    let (n_rows, row_len) = t.rows_cols();
    let (n_rows, row_len) = (n_rows as usize, row_len as usize);
    let path = src.label();
    let qerr = |e: QuantError| format!("{path}: tensor {}: {e}", t.name);
    let src_row = quant::row_bytes(t.ggml_type, row_len).map_err(qerr)?;
    let dst_row = quant::row_bytes(ty, row_len).map_err(qerr)?;
    let rows_per_slab = (SLAB_ELEMENTS / row_len.max(1)).max(1);
    let mut written = 0u64;
    let mut row = 0;
    while row < n_rows {
        let rows = rows_per_slab.min(n_rows - row);
        slab.src.resize(rows * src_row, 0);
        slab.f32s.resize(rows * row_len, 0.0);
        slab.dst.resize(rows * dst_row, 0);
        src.read_at(&mut slab.src, t.offset + (row * src_row) as u64)?;
        quant::dequantize_row(t.ggml_type, &slab.src, &mut slab.f32s).map_err(|e| match e {
            QuantError::Unsupported { .. } => format!(
                "{path}: tensor {} is {}, which smolrun cannot dequantize; leave it out with \
                 --tensors, or requantize it with llama-quantize",
                t.name, t.ggml_type
            ),
            e => qerr(e),
        })?;
        if let Some(bad) = slab.f32s.iter().position(|v| !v.is_finite()) {
            return Err(format!(
                "{path}: tensor {} row {} holds {} (element {}): its scales are NaN or infinite; \
                 the file is corrupt (llama-quantize rejects it too)",
                t.name,
                row + bad / row_len,
                slab.f32s[bad],
                bad % row_len
            ));
        }
        quantize_rows(ty, &slab.f32s, &mut slab.dst, row_len, dst_row, threads).map_err(qerr)?;
        out.write(&slab.dst)?;
        written += slab.dst.len() as u64;
        row += rows;
    }
    Ok(written)
}

/// Quantizes whole rows, split among `threads` threads (ggml's reference quantizers work
/// block by block, so the split does not change a byte).
fn quantize_rows(
    ty: GgmlType,
    x: &[f32],
    dst: &mut [u8],
    row_len: usize,
    dst_row: usize,
    threads: usize,
) -> Result<(), QuantError> {
    let n_rows = x.len() / row_len.max(1);
    let per_thread = n_rows.div_ceil(threads).max(1);
    if threads == 1 || n_rows < 2 {
        return quant::quantize_weights(ty, x, dst);
    }
    std::thread::scope(|s| {
        let jobs: Vec<_> = x
            .chunks(per_thread * row_len)
            .zip(dst.chunks_mut(per_thread * dst_row))
            .map(|(x, d)| s.spawn(move || quant::quantize_weights(ty, x, d)))
            .collect();
        // The scope joins every thread; the first error is the one reported.
        jobs.into_iter()
            .try_for_each(|j| j.join().expect("a quantizer thread panicked"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallbacks_are_llama_quantizes() {
        assert_eq!(fallback_type(GgmlType::Q2_K, 896), Some(GgmlType::Q4_0));
        assert_eq!(fallback_type(GgmlType::Q4_K, 896), Some(GgmlType::Q5_0));
        assert_eq!(fallback_type(GgmlType::TQ1_0, 896), Some(GgmlType::Q4_0));
        assert_eq!(fallback_type(GgmlType::Q2_0, 96), Some(GgmlType::Q4_0));
        assert_eq!(fallback_type(GgmlType::Q8_0, 100), Some(GgmlType::F16));
        assert_eq!(fallback_type(GgmlType::Q4_K, 100), Some(GgmlType::F16));
        assert_eq!(fallback_type(GgmlType::Q1_0, 896 + 64), None);
    }

    #[test]
    fn type_names_parse_in_any_case_and_unknown_ones_list_the_valid() {
        assert_eq!(parse_type("q4_k"), Ok(GgmlType::Q4_K));
        assert_eq!(parse_type("TQ1_0"), Ok(GgmlType::TQ1_0));
        let e = parse_type("Q3_K").unwrap_err();
        assert!(e.contains("Q8_0, Q5_0") && e.contains("TQ1_0"), "{e}");
    }
}
