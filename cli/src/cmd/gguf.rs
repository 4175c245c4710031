//! `smolrun gguf ...`: look inside GGUF files.
//!
//! `info` prints what gguf-dump prints (header, every metadata key with its type and value,
//! the tensor table) plus totals, reading only the header pages of the mapped file.
//! `head-ids` and `prune-head` make a model with a pruned LM head (see [`super::head`]).
//! `experts-last` moves a mixture-of-experts model's expert tensors to the end (see
//! [`super::experts_last`]).
//! `moefy` makes a mixture of experts (qwen2moe) of a dense Qwen2 model (see [`super::moefy`]).
//! `requant` rewrites weight tensors to another type, as llama-quantize does (see
//! [`super::requant`]).

use smolrun_core::gguf::{ArrayRef, Gguf, Value};
use smolrun_core::quant::GgmlType;
use smolrun_linux::MappedFile;
use std::collections::BTreeMap;
use std::io::{self, Write};

#[derive(clap::Subcommand)]
pub enum GgufCommand {
    /// Print metadata and the tensor table, like gguf-dump.
    Info {
        /// Path to a .gguf file or a short model name (gemma3-270m, qwen2.5-coder-0.5b, ...).
        file: String,
        /// Array elements to show before abbreviating.
        #[arg(long, default_value_t = 5)]
        array_items: usize,
        /// Instead: the kernel each matrix of the forward pass reaches on this CPU (decode,
        /// prompt, repacked), and every big matrix left on a scalar path.
        #[arg(long)]
        kernels: bool,
    },
    /// Choose the LM-head rows to keep: the most frequent ids of a corpus, plus every control,
    /// byte and chat-template token; writes the sorted ids, one per line.
    HeadIds {
        /// Model (path or short name) whose tokenizer is used.
        #[arg(short = 'm', long)]
        model: String,
        /// Corpus text files or directories [default: tools/head-corpus of the source tree].
        #[arg(long, num_args = 1..)]
        corpus: Vec<std::path::PathBuf>,
        /// Word frequency lists, 'word<TAB>count' per line: each word's spellings (lower case and
        /// capitalised, after a space and not) are tokenized and their ids weighed by its count
        /// [default: tools/head-corpus/words/en-wordfreq.tsv of the source tree].
        #[arg(long, num_args = 1.., conflicts_with = "no_word_freq")]
        word_freq: Option<Vec<std::path::PathBuf>>,
        /// Rank by the corpus and the model's predictions only, without word lists.
        #[arg(long)]
        no_word_freq: bool,
        /// Weight of each word list against the corpus: the list's ids weigh this many times the
        /// corpus's tokens in total (the model's predictions weigh once).
        #[arg(long, default_value_t = 4.0)]
        word_freq_weight: f64,
        /// Rows to keep, rounded up to a multiple of 16.
        #[arg(long)]
        keep: usize,
        /// Corpus positions the model reads to add its own predictions to the counts (0: counts
        /// and the tokenizer's prior only), shared equally among the corpus files.
        // 4096: with the 10 files of tools/head-corpus, 2 windows of 205 tokens each. Half of it
        // lost other languages' rows (Russian 51 -> 67 % of tokens dropped) for English ones.
        #[arg(long, default_value_t = 4096)]
        model_positions: usize,
        /// Threads for the model's predictions [default: one per core].
        #[arg(short = 't', long)]
        threads: Option<usize>,
        /// Output file of ids.
        #[arg(short = 'o', long)]
        out: std::path::PathBuf,
    },
    /// Write a copy of a model whose LM head holds only the rows listed in --ids; every other
    /// tensor is copied byte for byte. Dropped tokens can still be read, never produced.
    PruneHead {
        /// Input model (path or short name).
        #[arg(short = 'm', long)]
        model: String,
        /// Kept ids, one per line, sorted (from `smolrun gguf head-ids`).
        #[arg(long)]
        ids: std::path::PathBuf,
        /// Output .gguf file.
        #[arg(short = 'o', long)]
        out: std::path::PathBuf,
    },
    /// Write a copy of a mixture-of-experts model whose expert tensors come after every other
    /// tensor (bytes unchanged, only the order), with smolrun.expert_data_offset saying where
    /// they begin: a device that cannot map the whole file maps only the non-expert prefix.
    ExpertsLast {
        /// Input model (path or short name).
        #[arg(short = 'm', long)]
        model: String,
        /// Output .gguf file (written as OUT.tmp, renamed when complete and checked).
        #[arg(short = 'o', long)]
        out: std::path::PathBuf,
    },
    /// Write a mixture of experts (architecture qwen2moe, which llama.cpp runs too) made of a
    /// dense Qwen2/Qwen2.5 model: each FFN's neurons clustered into experts by co-activation on
    /// a calibration text, a router fitted to the clusters' activation mass.
    Moefy(super::moefy::MoefyArgs),
    /// Rewrite weight tensors to another type (Q8_0, Q4_K, Q2_K, Q1_0, TQ1_0, ...) in one
    /// streamed pass; tensor data byte-identical to `llama-quantize --allow-requantize --pure`.
    Requant(super::requant::RequantArgs),
}

pub fn run(c: GgufCommand, globals: &crate::args::Globals) -> Result<(), String> {
    match c {
        GgufCommand::Info {
            file,
            kernels: true,
            ..
        } => kernel_report(&file),
        GgufCommand::Info {
            file, array_items, ..
        } => info(&file, array_items),
        GgufCommand::HeadIds {
            model,
            corpus,
            word_freq,
            no_word_freq,
            word_freq_weight,
            keep,
            model_positions,
            threads,
            out,
        } => super::head::head_ids(
            &model,
            &corpus,
            if no_word_freq {
                Some(&[])
            } else {
                word_freq.as_deref()
            },
            word_freq_weight,
            keep,
            model_positions,
            threads.unwrap_or_else(crate::args::default_threads),
            &out,
            globals,
        ),
        GgufCommand::PruneHead { model, ids, out } => super::head::prune_head(&model, &ids, &out),
        GgufCommand::ExpertsLast { model, out } => super::experts_last::experts_last(&model, &out),
        GgufCommand::Moefy(args) => super::moefy::moefy(&args, globals),
        GgufCommand::Requant(args) => super::requant::requant(&args),
    }
}

fn info(file: &str, array_items: usize) -> Result<(), String> {
    let path = crate::args::resolve(file)?;
    let mapped = MappedFile::open(&path)?;
    let gguf = Gguf::parse(mapped.bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    match print_info(&mut out, &path.display().to_string(), &gguf, array_items)
        .and_then(|()| out.flush())
    {
        Ok(()) => Ok(()),
        // `smolrun gguf info m | head` closes the pipe early; that is not an error.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("writing to stdout: {e}")),
    }
}

/// A matrix of at least this many weights is big: read every token, it is where a scalar
/// kernel costs whole milliseconds (the reference write-ups lost 45 of 72 ms per token to an
/// LM head that missed the fast kernel).
pub const BIG_MATRIX: u64 = 1 << 20;

/// `smolrun gguf info --kernels FILE`.
fn kernel_report(file: &str) -> Result<(), String> {
    let path = crate::args::resolve(file)?;
    let mapped = MappedFile::open(&path)?;
    let gguf = Gguf::parse(mapped.bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    let kernels = smolrun_core::kernels::KernelSet::select(&smolrun_linux::detect_features());
    let mut out = io::BufWriter::new(io::stdout().lock());
    match print_kernels(&mut out, &path.display().to_string(), &gguf, &kernels)
        .and_then(|()| out.flush())
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("writing to stdout: {e}")),
    }
}

/// One line per matrix the forward pass multiplies (the tied embedding table as the LM head;
/// an untied one is read by row, not multiplied): its type and shape, the decode kernel's face,
/// whether a prompt runs batched or row by row, the repacked layout and face where this CPU
/// has one; then every big matrix ([`BIG_MATRIX`]) whose decode kernel is scalar.
fn print_kernels(
    out: &mut impl Write,
    path: &str,
    g: &Gguf<'_>,
    kernels: &smolrun_core::kernels::KernelSet,
) -> io::Result<()> {
    use smolrun_core::model::tensor_use::{head_is_embedding, TensorUse};
    writeln!(out, "{path}: kernels on this CPU ({})", kernels.name())?;
    writeln!(
        out,
        "{:<40} {:>6} {:>16}  {:<10} {:<10} repacked",
        "matrix", "type", "rows x cols", "decode", "prompt"
    )?;
    let tied = head_is_embedding(&g.tensors);
    let mut scalar_big = Vec::new();
    let mut unsupported = Vec::new();
    for t in &g.tensors {
        let use_ = TensorUse::of(t, tied);
        // The short convolution's taps are not multiplied by the matvec.
        let conv = t.name.ends_with("ssm_conv1d.weight");
        if !matches!(use_, TensorUse::Whole | TensorUse::Experts) || t.n_dims < 2 || conv {
            continue;
        }
        let (rows, cols) = t.rows_cols();
        let shape = format!("{rows} x {cols}");
        let name = if tied && t.name == "token_embd.weight" {
            "token_embd.weight (head)"
        } else {
            t.name
        };
        match kernels.weight(t.ggml_type) {
            Ok(k) => {
                let repacked = match k.repacked {
                    Some(r) if (r.bytes)(rows as usize, cols as usize).is_some() => {
                        format!("{} ({})", r.layout, r.face)
                    }
                    _ => "-".into(),
                };
                let prompt = if k.cols.is_some() {
                    "batched"
                } else {
                    "row by row"
                };
                writeln!(
                    out,
                    "{name:<40} {:>6} {shape:>16}  {:<10} {prompt:<10} {repacked}",
                    t.ggml_type.name(),
                    k.face
                )?;
                let fast_repacked = k.repacked.is_some_and(|r| !r.face.starts_with("scalar"));
                if rows * cols >= BIG_MATRIX && k.face == "scalar" && !fast_repacked {
                    scalar_big.push(format!("{} ({}, {shape})", t.name, t.ggml_type.name()));
                }
            }
            Err(_) => {
                writeln!(
                    out,
                    "{name:<40} {:>6} {shape:>16}  no kernel",
                    t.ggml_type.name()
                )?;
                unsupported.push(format!("{} ({})", t.name, t.ggml_type.name()));
            }
        }
    }
    if scalar_big.is_empty() && unsupported.is_empty() {
        writeln!(out, "every big matrix reaches a SIMD kernel on this CPU")?;
    }
    if !scalar_big.is_empty() {
        writeln!(
            out,
            "WARNING: {} big matrices on a scalar path (slow): {}",
            scalar_big.len(),
            scalar_big.join(", ")
        )?;
    }
    if !unsupported.is_empty() {
        writeln!(
            out,
            "ERROR: {} matrices of a type smolrun cannot multiply: {}",
            unsupported.len(),
            unsupported.join(", ")
        )?;
    }
    Ok(())
}

fn print_info(
    out: &mut impl Write,
    path: &str,
    g: &Gguf<'_>,
    array_items: usize,
) -> io::Result<()> {
    writeln!(out, "{path}: {} bytes", g.bytes().len())?;
    writeln!(
        out,
        "GGUF v{}, {} tensors, {} metadata keys, alignment {}, data offset {}",
        g.version,
        g.tensors.len(),
        g.metadata.len(),
        g.alignment,
        g.data_offset
    )?;

    writeln!(out, "\nmetadata ({} keys):", g.metadata.len())?;
    writeln!(
        out,
        "{:>5}  {:<10} {:>8}  key = value",
        "idx", "type", "count"
    )?;
    for (i, entry) in g.metadata.iter().enumerate() {
        let (type_name, count) = match entry.value {
            Value::Array(a) => (format!("[{}]", a.elem_type.name()), a.len),
            v => (v.type_name().to_string(), 1),
        };
        writeln!(
            out,
            "{:>5}  {:<10} {:>8}  {} = {}",
            i + 1,
            type_name,
            count,
            entry.key,
            format_value(entry.value, array_items)
        )?;
    }

    writeln!(out, "\ntensors ({}):", g.tensors.len())?;
    writeln!(
        out,
        "{:>5}  {:<8} {:<24} {:>12} {:>12}  name",
        "idx", "type", "shape", "offset", "bytes"
    )?;
    let mut by_type: BTreeMap<GgmlType, (usize, u64, u64)> = BTreeMap::new();
    for (i, t) in g.tensors.iter().enumerate() {
        let shape = t
            .shape()
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(" x ");
        writeln!(
            out,
            "{:>5}  {:<8} {:<24} {:>12} {:>12}  {}",
            i + 1,
            t.ggml_type.name(),
            shape,
            t.offset,
            t.n_bytes,
            t.name
        )?;
        let slot = by_type.entry(t.ggml_type).or_default();
        slot.0 += 1;
        slot.1 += t.n_elements();
        slot.2 += t.n_bytes;
    }

    let (elements, bytes) = by_type
        .values()
        .fold((0u64, 0u64), |(e, b), v| (e + v.1, b + v.2));
    writeln!(out, "\ntotals:")?;
    for (ty, (n, e, b)) in &by_type {
        writeln!(
            out,
            "  {:<8} {:>5} tensors {:>14} elements {:>14} bytes ({:.2} bits/weight)",
            ty.name(),
            n,
            e,
            b,
            bits_per_weight(*b, *e)
        )?;
    }
    writeln!(
        out,
        "  all      {:>5} tensors {:>14} elements {:>14} bytes ({:.1} MiB, {:.2} bits/weight); header {} bytes",
        g.tensors.len(),
        elements,
        bytes,
        bytes as f64 / (1024.0 * 1024.0),
        bits_per_weight(bytes, elements),
        g.data_offset
    )
}

fn bits_per_weight(bytes: u64, elements: u64) -> f64 {
    if elements == 0 {
        0.0
    } else {
        bytes as f64 * 8.0 / elements as f64
    }
}

/// Longest string shown whole; a chat template runs to kilobytes.
const MAX_STRING_CHARS: usize = 60;

fn format_value(v: Value<'_>, array_items: usize) -> String {
    match v {
        Value::Str(s) => format_str(s),
        Value::Array(a) => format_array(a, array_items),
        Value::F32(x) => format!("{x}"),
        Value::F64(x) => format!("{x}"),
        Value::Bool(x) => format!("{x}"),
        v => match v.as_i64() {
            Some(i) => i.to_string(),
            // Only a u64 above i64::MAX gets here.
            None => v.as_u64().map(|u| u.to_string()).unwrap_or_default(),
        },
    }
}

fn format_str(s: &str) -> String {
    let n_chars = s.chars().count();
    if n_chars <= MAX_STRING_CHARS {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(MAX_STRING_CHARS).collect();
        format!("{head:?}... ({n_chars} chars)")
    }
}

fn format_array(a: ArrayRef<'_>, array_items: usize) -> String {
    let shown: Vec<String> = a
        .iter()
        .take(array_items)
        .map(|v| format_value(v, array_items))
        .collect();
    let more = a.len.saturating_sub(shown.len() as u64);
    let mut s = format!("[{}", shown.join(", "));
    if more > 0 {
        if !shown.is_empty() {
            s.push_str(", ");
        }
        s.push_str(&format!("... {more} more"));
    }
    s.push(']');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report names a big matrix left on a scalar path: Gemma 3's 262,144-row tied head
    /// on the scalar set is flagged; on this CPU's set nothing is.
    #[test]
    fn a_big_matrix_on_a_scalar_path_is_flagged() {
        let path = crate::test_support::gemma_path();
        let file = MappedFile::open(&path).unwrap();
        let g = Gguf::parse(file.bytes()).unwrap();
        let report = |kernels: &smolrun_core::kernels::KernelSet| {
            let mut out = Vec::new();
            print_kernels(&mut out, "gemma", &g, kernels).unwrap();
            String::from_utf8(out).unwrap()
        };
        let scalar = report(&smolrun_core::kernels::KernelSet::scalar());
        assert!(
            scalar.contains("big matrices on a scalar path")
                && scalar.contains("token_embd.weight (Q8_0, 262144 x 640)"),
            "{scalar}"
        );
        let native = smolrun_core::kernels::KernelSet::select(&smolrun_linux::detect_features());
        if native.name() != "scalar" {
            let r = report(&native);
            assert!(r.contains("every big matrix reaches a SIMD kernel"), "{r}");
        }
    }
}
