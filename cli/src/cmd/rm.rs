//! `smolrun rm NAME`: delete a model from the model folder, with its partial download, the
//! repack caches next to it (`FILE.<kernels>.repack`) and the temporaries that killed writers
//! left (`FILE.tmp-PID`, `FILE.<kernels>.repack.tmp-PID`) when their processes no longer run.

use smolrun_engine::models::KNOWN_MODELS;

#[derive(clap::Args)]
pub struct Args {
    /// A name as `smolrun list` shows it (with or without .gguf), or a short name.
    name: String,
}

pub fn run(a: Args) -> Result<(), String> {
    let dir = crate::args::models_dir();
    if a.name.contains('/') || a.name.starts_with('.') {
        return Err(format!(
            "'{}' is not a model name; smolrun rm only deletes models in {} (see smolrun list)",
            a.name,
            dir.display()
        ));
    }
    let file = match KNOWN_MODELS.iter().find(|(n, _)| *n == a.name) {
        Some((_, f)) => f.to_string(),
        None if a.name.ends_with(".gguf") => a.name.clone(),
        None => format!("{}.gguf", a.name),
    };
    let partial = format!("{file}.partial");
    let repack_prefix = format!("{file}.");
    let mut removed = Vec::new();
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let stale = || {
            smolrun_linux::temporaries(&dir, &file)
                .iter()
                .any(|t| t.stale && t.path == entry.path())
        };
        let ours = name == file
            || name == partial
            || (name.starts_with(&repack_prefix) && name.ends_with(".repack"))
            || (name.starts_with(&file) && name.contains(".tmp-") && stale());
        if ours {
            std::fs::remove_file(entry.path())
                .map_err(|e| format!("cannot remove {}: {e}", entry.path().display()))?;
            removed.push(name);
        }
    }
    if removed.is_empty() {
        return Err(format!(
            "no model '{}' in {} (smolrun list shows what is there)",
            a.name,
            dir.display()
        ));
    }
    removed.sort();
    for name in removed {
        println!("removed {}", dir.join(name).display());
    }
    Ok(())
}
