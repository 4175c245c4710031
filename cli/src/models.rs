//! `-m` takes a path, the name of a file in the model folder (what `smolrun pull` wrote, with or
//! without `.gguf`), or a short name of a model that tools/fetch-models.sh knows.
//!
//! The model folder is `$SMOLRUN_MODELS`, or `~/.cache/smolrun/models` when that is unset; the
//! short names' file names are the ones tools/fetch-models.sh writes.

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

/// The folder short names resolve in.
pub fn models_dir() -> PathBuf {
    match std::env::var_os("SMOLRUN_MODELS") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
            .join(".cache/smolrun/models"),
    }
}

/// A path that exists is taken as it is; otherwise the argument must be a known short name
/// whose file is present.
pub fn resolve(name_or_path: &str) -> Result<PathBuf, String> {
    let as_path = Path::new(name_or_path);
    if as_path.is_file() {
        return Ok(as_path.to_path_buf());
    }
    let dir = models_dir();
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
                Err(format!(
                    "model '{name}' is not downloaded: {} does not exist; \
                     run smolrun pull {name} (which runs tools/fetch-models.sh {name} in a \
                     source tree), or set SMOLRUN_MODELS to the folder that holds it",
                    path.display()
                ))
            }
        }
        None => Err(format!(
            "'{name_or_path}' is neither a file, a model in {1} (smolrun list), nor a known \
             short name: {0} (smolrun pull NAME downloads one; in a source tree \
             tools/fetch-models.sh NAME does the same for the short names)",
            KNOWN_MODELS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
            dir.display()
        )),
    }
}
