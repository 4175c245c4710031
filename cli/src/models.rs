//! `-m` takes a path or a short name of a model that tools/fetch-models.sh knows.
//!
//! A short name resolves to its file in `$SMOLRUN_MODELS`, or `~/.cache/smolrun/models` when
//! that is unset; the file names are the ones tools/fetch-models.sh writes.

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
    match KNOWN_MODELS.iter().find(|(name, _)| *name == name_or_path) {
        Some((name, file)) => {
            let path = dir.join(file);
            if path.is_file() {
                Ok(path)
            } else {
                Err(format!(
                    "model '{name}' is not downloaded: {} does not exist; \
                     run tools/fetch-models.sh {name} (or set SMOLRUN_MODELS to the folder that holds it)",
                    path.display()
                ))
            }
        }
        None => Err(format!(
            "'{name_or_path}' is neither a file nor a known model name; known names: {} \
             (looked for in {}; run tools/fetch-models.sh NAME to download one)",
            KNOWN_MODELS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
            dir.display()
        )),
    }
}
