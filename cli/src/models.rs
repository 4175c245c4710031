//! `-m` takes a path or a short name of a model that tools/fetch-models.sh knows.

use std::path::PathBuf;

pub fn resolve(name_or_path: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(name_or_path))
}
