//! `-m` takes a path, the name of a file in the model folder (what `smolrun pull` wrote, with or
//! without `.gguf`), or a short name of a model that tools/fetch-models.sh knows.
//!
//! The model folder is [`EngineOptions::models_dir`](crate::EngineOptions::models_dir) (the CLI
//! sets it from `$SMOLRUN_MODELS`, or `~/.cache/smolrun/models`); the short names' file names
//! are the ones tools/fetch-models.sh writes.

use crate::EngineError;
use smolrun_core::gguf::Gguf;
use smolrun_core::quant::GgmlType;
use smolrun_linux::MappedFile;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// (short name, file name) as in tools/fetch-models.sh.
pub const KNOWN_MODELS: &[(&str, &str)] = &[
    ("gemma3-270m", "gemma-3-270m-q4_k_m.gguf"),
    (
        "qwen2.5-coder-0.5b",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    ),
    (
        "qwen2.5-coder-1.5b",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    ),
];

/// The short names, for messages.
pub fn short_names() -> String {
    KNOWN_MODELS
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The model folder an environment names: `$SMOLRUN_MODELS` (`smolrun_models`), else
/// `~/.cache/smolrun/models` under `home`. The CLI reads the variables and hands them here.
pub fn models_dir_from(
    smolrun_models: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> PathBuf {
    match smolrun_models {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => home
            .map(PathBuf::from)
            .unwrap_or_default()
            .join(".cache/smolrun/models"),
    }
}

/// A path that exists is taken as it is; otherwise the argument must be a known short name
/// whose file is present.
pub fn resolve(name_or_path: &str, dir: Option<&Path>) -> Result<PathBuf, EngineError> {
    let as_path = Path::new(name_or_path);
    if as_path.is_file() {
        return Ok(as_path.to_path_buf());
    }
    let Some(dir) = dir else {
        // No model folder: only paths, and a missing one is reported by the caller.
        return Ok(as_path.to_path_buf());
    };
    // A model `smolrun pull` fetched, by its file name with or without .gguf.
    if !name_or_path.contains('/') && !name_or_path.is_empty() {
        for file in [name_or_path.to_string(), format!("{name_or_path}.gguf")] {
            let path = dir.join(file);
            if path.is_file() {
                return Ok(path);
            }
        }
    }
    match KNOWN_MODELS.iter().find(|(name, _)| *name == name_or_path) {
        Some((name, file)) => {
            let path = dir.join(file);
            if path.is_file() {
                Ok(path)
            } else {
                Err(not_found(
                    name_or_path,
                    format!(
                        "model '{name}' is not downloaded: {} does not exist; \
                     run smolrun pull {name} (which runs tools/fetch-models.sh {name} in a \
                     source tree), or set SMOLRUN_MODELS to the folder that holds it",
                        path.display()
                    ),
                ))
            }
        }
        None => Err(not_found(
            name_or_path,
            format!(
                "'{name_or_path}' is neither a file, a model in {1} (smolrun list), nor a known \
             short name: {0} (smolrun pull NAME downloads one; in a source tree \
             tools/fetch-models.sh NAME does the same for the short names)",
                short_names(),
                dir.display()
            ),
        )),
    }
}

fn not_found(model: &str, message: String) -> EngineError {
    EngineError::ModelNotFound {
        model: model.to_string(),
        message,
    }
}

/// One file of the model folder, as `smolrun list` and the server's /api/tags show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelEntry {
    /// The file name without `.gguf` (a short name's file: "NAME (short)").
    pub name: String,
    pub path: PathBuf,
    pub size: u64,
    /// The architecture, or "?" with `quant` saying why the header cannot be read.
    pub arch: String,
    pub quant: String,
    /// A `.gguf.partial` download that `smolrun pull` can resume.
    pub partial: bool,
}

/// The models in `dir`, sorted by name (`Ok(None)` when the folder does not exist).
pub fn list(dir: &Path) -> Result<Option<Vec<ModelEntry>>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let mut rows = Vec::new();
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
        if let Some(stem) = file.strip_suffix(".gguf.partial") {
            rows.push(ModelEntry {
                name: stem.to_string(),
                path: entry.path(),
                size,
                arch: "(partial download: smolrun pull resumes it)".to_string(),
                quant: String::new(),
                partial: true,
            });
        } else if let Some(stem) = file.strip_suffix(".gguf") {
            let (arch, quant) = describe(&entry.path());
            let name = match KNOWN_MODELS.iter().find(|(_, f)| *f == file) {
                Some((short, _)) => format!("{stem} ({short})"),
                None => stem.to_string(),
            };
            rows.push(ModelEntry {
                name,
                path: entry.path(),
                size,
                arch,
                quant,
                partial: false,
            });
        }
    }
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Some(rows))
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
