//! `smolrun list`: the models in the model folder, with the architecture and quantization read
//! from each GGUF header (mapped, so only the header pages are read), and the downloads that
//! `smolrun pull` can resume.

use crate::models::{self, KNOWN_MODELS};
use smolrun_core::gguf::Gguf;
use smolrun_core::quant::GgmlType;
use smolrun_linux::MappedFile;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(clap::Args)]
pub struct Args {}

struct Row {
    name: String,
    size: u64,
    arch: String,
    quant: String,
}

pub fn run(_: Args) -> Result<(), String> {
    let dir = models::models_dir();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!(
                "no models: {} does not exist yet (smolrun pull NAME fills it)",
                dir.display()
            );
            return Ok(());
        }
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let mut rows = Vec::new();
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
        if let Some(stem) = file.strip_suffix(".gguf.partial") {
            rows.push(Row {
                name: stem.to_string(),
                size,
                arch: "(partial download: smolrun pull resumes it)".to_string(),
                quant: String::new(),
            });
        } else if let Some(stem) = file.strip_suffix(".gguf") {
            let (arch, quant) = describe(&entry.path());
            let name = match KNOWN_MODELS.iter().find(|(_, f)| *f == file) {
                Some((short, _)) => format!("{stem} ({short})"),
                None => stem.to_string(),
            };
            rows.push(Row {
                name,
                size,
                arch,
                quant,
            });
        }
    }
    if rows.is_empty() {
        println!("no models in {} (smolrun pull NAME)", dir.display());
        return Ok(());
    }
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    let arch_width = rows
        .iter()
        .filter(|r| !r.quant.is_empty())
        .map(|r| r.arch.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "{:<width$}  {:>9}  {:<arch_width$}  QUANT",
        "NAME", "SIZE", "ARCH"
    );
    for r in &rows {
        println!(
            "{:<width$}  {:>6} MB  {:<arch_width$}  {}",
            r.name,
            r.size.div_ceil(1_000_000),
            r.arch,
            r.quant
        );
    }
    println!("({}; run one with -m NAME)", dir.display());
    Ok(())
}

/// (architecture, quantization) from the header, or why it cannot be read.
fn describe(path: &Path) -> (String, String) {
    let mapped = match MappedFile::open(path) {
        Ok(m) => m,
        Err(e) => return ("?".to_string(), e),
    };
    let g = match Gguf::parse(mapped.bytes()) {
        Ok(g) => g,
        Err(e) => return ("?".to_string(), format!("not a usable GGUF file: {e}")),
    };
    let arch = g.architecture().unwrap_or("?").to_string();
    (arch, quantization(&g))
}

/// The quantization of a model: its `general.file_type` name ("Q4_K_M"), else the tensor
/// type holding the most bytes, else "?".
pub fn quantization(g: &Gguf<'_>) -> String {
    g.get_u64("general.file_type")
        .ok()
        .and_then(file_type_name)
        .map(str::to_string)
        .or_else(|| dominant_type(g).map(|t| t.name().to_string()))
        .unwrap_or_else(|| "?".to_string())
}

/// llama.cpp's `general.file_type` (enum llama_ftype in llama.h, b11434) names.
fn file_type_name(ftype: u64) -> Option<&'static str> {
    Some(match ftype {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        39 => "NVFP4",
        40 => "Q1_0",
        41 => "Q2_0",
        _ => return None,
    })
}

/// The tensor type holding the most bytes, for files without a known file_type.
fn dominant_type(g: &Gguf<'_>) -> Option<GgmlType> {
    let mut bytes: BTreeMap<GgmlType, u64> = BTreeMap::new();
    for t in &g.tensors {
        *bytes.entry(t.ggml_type).or_default() += t.n_bytes;
    }
    bytes.into_iter().max_by_key(|&(_, b)| b).map(|(t, _)| t)
}
