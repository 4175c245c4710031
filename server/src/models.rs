//! `serve --models-dir DIR`: the models a server can switch between, and how long one stays
//! loaded (ollama's `keep_alive`).
//!
//! Each `*.gguf` file in the folder is a model named by its file stem; a request may name it
//! as ollama does (`name`, `name:latest`). One model is loaded at a time: a request for
//! another unloads the current one first, so that the memory guard sees the whole budget.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// One model file of the folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirModel {
    pub name: String,
    pub path: PathBuf,
    pub size: u64,
    pub modified: SystemTime,
}

#[derive(Clone, Debug)]
pub struct ModelsDir {
    pub dir: PathBuf,
}

impl ModelsDir {
    /// The folder's models, by name. A folder that cannot be read lists nothing (the error is
    /// said when the server starts, by `check`).
    pub fn list(&self) -> Vec<DirModel> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut models: Vec<DirModel> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let path = e.path();
                if path.extension()? != "gguf" {
                    return None;
                }
                let meta = std::fs::metadata(&path).ok().filter(|m| m.is_file())?;
                Some(DirModel {
                    name: path.file_stem()?.to_str()?.to_string(),
                    size: meta.len(),
                    modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    path,
                })
            })
            .collect();
        models.sort_by(|a, b| a.name.cmp(&b.name));
        models
    }

    /// The folder exists and holds at least one model; else what to do.
    pub fn check(&self) -> Result<(), String> {
        if !self.dir.is_dir() {
            return Err(format!(
                "--models-dir {}: not a folder; give a folder of .gguf files",
                self.dir.display()
            ));
        }
        if self.list().is_empty() {
            return Err(format!(
                "--models-dir {}: no .gguf file in it; put models there (smolrun pull NAME -o \
                 DIR/NAME.gguf)",
                self.dir.display()
            ));
        }
        Ok(())
    }

    /// The model a request names: its file stem, with ollama's `:latest` tag or without.
    pub fn find(&self, name: &str) -> Option<DirModel> {
        let stem = name.strip_suffix(":latest").unwrap_or(name);
        // A name is a file name, never a path.
        if stem.is_empty() || stem.contains(['/', '\\']) || stem.starts_with('.') {
            return None;
        }
        self.list().into_iter().find(|m| m.name == stem)
    }
}

/// How long a model stays loaded after a request: ollama's `keep_alive`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepAlive {
    /// Unloaded this long after its last request ends (0: at once).
    For(Duration),
    /// Never unloaded for being idle (`-1`, or any negative value).
    Forever,
}

/// Ollama's default: five minutes.
pub const DEFAULT_KEEP_ALIVE: KeepAlive = KeepAlive::For(Duration::from_secs(300));

impl KeepAlive {
    /// A JSON `keep_alive`: seconds as a number, or a Go duration string ("5m", "1h30m",
    /// "10s", "0", "-1").
    pub fn parse(v: &serde_json::Value) -> Result<KeepAlive, String> {
        let seconds = match v {
            serde_json::Value::Number(n) => n
                .as_f64()
                .ok_or_else(|| format!("'keep_alive' {n} is not a number of seconds"))?,
            serde_json::Value::String(s) => go_duration_seconds(s.trim()).ok_or_else(|| {
                format!(
                    "'keep_alive' \"{s}\" is not a duration: give seconds, or a number with a \
                     unit (\"30s\", \"5m\", \"1h\"), 0 to unload at once or -1 to keep loaded"
                )
            })?,
            other => {
                return Err(format!(
                    "'keep_alive' must be a number or a string, got {other}"
                ))
            }
        };
        Ok(if seconds < 0.0 {
            KeepAlive::Forever
        } else {
            KeepAlive::For(Duration::from_secs_f64(seconds.min(1e9)))
        })
    }
}

/// Seconds of a Go duration ("1h30m", "-1", "250ms"); a bare number is seconds.
fn go_duration_seconds(s: &str) -> Option<f64> {
    if let Ok(x) = s.parse::<f64>() {
        return Some(x);
    }
    let (sign, mut rest) = match s.strip_prefix('-') {
        Some(r) => (-1.0, r),
        None => (1.0, s),
    };
    let mut total = 0.0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&i| i > 0)?;
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Some(sign * total)
}

/// Whether `path` is inside `dir` (a model the server may delete).
pub fn is_in(dir: &Path, path: &Path) -> bool {
    path.parent() == Some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keep_alive_takes_ollamas_forms() {
        let s = |x: u64| KeepAlive::For(Duration::from_secs(x));
        assert_eq!(KeepAlive::parse(&json!(0)).unwrap(), s(0));
        assert_eq!(KeepAlive::parse(&json!(-1)).unwrap(), KeepAlive::Forever);
        assert_eq!(KeepAlive::parse(&json!("-1")).unwrap(), KeepAlive::Forever);
        assert_eq!(KeepAlive::parse(&json!("5m")).unwrap(), s(300));
        assert_eq!(KeepAlive::parse(&json!("1h30m")).unwrap(), s(5400));
        assert_eq!(KeepAlive::parse(&json!("10s")).unwrap(), s(10));
        assert_eq!(KeepAlive::parse(&json!("0")).unwrap(), s(0));
        assert_eq!(KeepAlive::parse(&json!(30)).unwrap(), s(30));
        assert!(KeepAlive::parse(&json!("soon")).is_err());
        assert!(KeepAlive::parse(&json!("5x")).is_err());
        assert!(KeepAlive::parse(&json!(true)).is_err());
    }

    #[test]
    fn a_model_is_found_by_name_never_by_path() {
        let dir = std::env::temp_dir().join(format!("smolrun-models-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tiny.gguf"), b"GGUF").unwrap();
        std::fs::write(dir.join("notes.txt"), b"x").unwrap();
        let models = ModelsDir { dir: dir.clone() };
        assert_eq!(models.list().len(), 1);
        assert_eq!(models.find("tiny").unwrap().size, 4);
        assert!(models.find("tiny:latest").is_some());
        for bad in ["../tiny", "/etc/passwd", "", ".tiny", "notes"] {
            assert!(models.find(bad).is_none(), "{bad}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
