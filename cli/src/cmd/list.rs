//! `smolrun list`: the models in the model folder, with the architecture and quantization read
//! from each GGUF header (mapped, so only the header pages are read), and the downloads that
//! `smolrun pull` can resume.

use smolrun_engine::models;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_: Args) -> Result<(), String> {
    let dir = crate::args::models_dir();
    let Some(rows) = models::list(&dir)? else {
        println!(
            "no models: {} does not exist yet (smolrun pull NAME fills it)",
            dir.display()
        );
        return Ok(());
    };
    if rows.is_empty() {
        println!("no models in {} (smolrun pull NAME)", dir.display());
        return Ok(());
    }
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
    // What killed writers left behind (repack caches, requantized or fitted files): the flash
    // they take, and whether their writer still runs.
    let temporaries = smolrun_linux::temporaries(&dir, "");
    if !temporaries.is_empty() {
        println!("temporary files:");
        for t in &temporaries {
            println!(
                "  {}  {:>6} MB  {}",
                t.path.file_name().unwrap_or_default().to_string_lossy(),
                t.bytes.div_ceil(1_000_000),
                if t.stale {
                    "left by a run that stopped: the next run of the same model removes it, or \
                     smolrun rm NAME"
                } else {
                    "being written"
                }
            );
        }
    }
    Ok(())
}
