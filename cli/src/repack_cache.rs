//! The repack cache on disk: weights repacked for this CPU's kernels are written once to a file
//! next to the model (or under `--cache-dir`), and later starts map that file read-only instead
//! of repacking, so the original tensors' pages are not read again. The layout, the key and the
//! validation are core's (`smolrun_core::model::repack`); this module does the I/O, the
//! messages and the progress bars.
//!
//! File name: `<model file name>.<kernel set>.repack`, so caches for two kernel sets (a forced
//! `SMOLRUN_KERNELS`, another CPU sharing the folder) do not overwrite each other.

use indicatif::{ProgressBar, ProgressStyle};
use smolrun_core::gguf::Gguf;
use smolrun_core::model::repack::{model_fingerprint, CacheKey, RepackPlan};
use smolrun_core::model::{Model, RepackedWeights};
use smolrun_linux::{file_len_and_mtime, CacheFileWriter, MappedFile};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

/// Where caches go, set once from the command line (`--cache-dir`, `--no-repack-cache`).
#[derive(Debug, Clone, Default)]
pub enum CacheDir {
    /// Beside the model file.
    #[default]
    NextToModel,
    In(PathBuf),
    /// Repack in memory at every start, write nothing.
    Off,
}

static CACHE_DIR: OnceLock<CacheDir> = OnceLock::new();

/// Called once by `main` before a command runs.
pub fn set_cache_dir(dir: CacheDir) {
    let _ = CACHE_DIR.set(dir);
}

/// The repacked weights for `model` on this kernel set: mapped from a valid cache, or repacked
/// now (and written to the cache unless it is off or cannot be written: then kept in memory,
/// with a message saying why). `None` when no matrix of the model has a repacked kernel on
/// this CPU (then nothing is read or written), or when SMOLRUN_REPACK=0.
pub fn load_or_build(
    model_path: &Path,
    gguf: &Gguf,
    model: &Model,
) -> Result<Option<RepackedWeights>, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", model_path.display());
    let plan = RepackPlan::new(model).map_err(|e| at(&e))?;
    // SMOLRUN_REPACK=0 runs the one-row kernels on the file layout: for measuring what the
    // repacked kernels gain.
    if plan.is_empty() || std::env::var("SMOLRUN_REPACK").as_deref() == Ok("0") {
        return Ok(None);
    }
    let n_tensors = gguf.tensors.len();
    let dir = CACHE_DIR.get().cloned().unwrap_or_default();
    let cache_path = match &dir {
        CacheDir::Off => {
            let mut buf = vec![0u8; plan.file_len];
            repack_all(&plan, gguf, &mut buf, "repacking (no cache)")?;
            return plan
                .weights(Box::new(buf), n_tensors)
                .map(Some)
                .map_err(|e| at(&e));
        }
        CacheDir::NextToModel => cache_file_name(model_path, model_path.parent(), model),
        CacheDir::In(d) => cache_file_name(model_path, Some(d), model),
    };
    let (model_len, model_mtime_ns) = file_len_and_mtime(model_path)?;
    let key = CacheKey {
        model_len,
        model_mtime_ns,
        model_fingerprint: model_fingerprint(gguf.bytes(), gguf.data_offset as usize),
        kernel_set: model.kernels_name,
    };
    let start = Instant::now();
    if cache_path.exists() {
        match open_valid(&cache_path, &plan, &key) {
            Ok(mapped) => {
                verbose(format_args!(
                    "mapped and checked the repack cache {} ({} MB) in {:.2} s",
                    cache_path.display(),
                    plan.repacked_bytes() >> 20,
                    start.elapsed().as_secs_f64()
                ));
                return plan
                    .weights(Box::new(mapped), n_tensors)
                    .map(Some)
                    .map_err(|e| at(&e));
            }
            Err(why) => eprintln!(
                "smolrun: repack cache {} {why}; rebuilding it",
                cache_path.display()
            ),
        }
    }
    match write_cache(&cache_path, &plan, gguf, &key) {
        Ok(()) => {
            verbose(format_args!(
                "wrote the repack cache {} in {:.2} s",
                cache_path.display(),
                start.elapsed().as_secs_f64()
            ));
            let mapped = MappedFile::open(&cache_path)?;
            plan.weights(Box::new(mapped), n_tensors)
                .map(Some)
                .map_err(|e| at(&e))
        }
        Err(why) => {
            eprintln!(
                "smolrun: cannot write the repack cache ({why}); repacking in memory for this \
                 run (give a writable folder with --cache-dir DIR)"
            );
            let mut buf = vec![0u8; plan.file_len];
            repack_all(&plan, gguf, &mut buf, "repacking (no cache)")?;
            plan.weights(Box::new(buf), n_tensors)
                .map(Some)
                .map_err(|e| at(&e))
        }
    }
}

fn cache_file_name(model_path: &Path, dir: Option<&Path>, model: &Model) -> PathBuf {
    let name = model_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    dir.unwrap_or(Path::new("."))
        .join(format!("{name}.{}.repack", model.kernels_name))
}

/// Maps the cache and checks header, key, table and every entry's checksum.
fn open_valid(path: &Path, plan: &RepackPlan, key: &CacheKey) -> Result<MappedFile, String> {
    let mapped = MappedFile::open(path).map_err(|e| format!("cannot be read ({e})"))?;
    let bytes = mapped.bytes();
    let sums = plan
        .validate_header(bytes, key)
        .map_err(|e| format!("is {e}"))?;
    let bar = bar(plan.repacked_bytes() as u64, "checking repack cache");
    for (i, &sum) in sums.iter().enumerate() {
        plan.verify_entry(bytes, i, sum)
            .map_err(|e| format!("is {e}"))?;
        bar.inc(plan.entries[i].len as u64);
    }
    bar.finish_and_clear();
    Ok(mapped)
}

fn write_cache(path: &Path, plan: &RepackPlan, gguf: &Gguf, key: &CacheKey) -> Result<(), String> {
    let mut w = CacheFileWriter::create(path, plan.file_len)?;
    let sums = repack_all(plan, gguf, w.bytes_mut(), "repacking weights")?;
    plan.write_header(key, &sums, w.bytes_mut())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    w.finish()
}

/// Repacks every entry into `cache`, with a progress bar; returns the checksums.
fn repack_all(
    plan: &RepackPlan,
    gguf: &Gguf,
    cache: &mut [u8],
    what: &'static str,
) -> Result<Vec<u64>, String> {
    let bar = bar(plan.repacked_bytes() as u64, what);
    let start = Instant::now();
    let mut sums = Vec::with_capacity(plan.entries.len());
    for (i, e) in plan.entries.iter().enumerate() {
        sums.push(
            plan.repack_entry(gguf, i, cache)
                .map_err(|err| err.to_string())?,
        );
        bar.inc(e.len as u64);
    }
    bar.finish_and_clear();
    verbose(format_args!(
        "repacked {} matrices ({} MB) in {:.2} s",
        plan.entries.len(),
        plan.repacked_bytes() >> 20,
        start.elapsed().as_secs_f64()
    ));
    Ok(sums)
}

/// Timings for measuring load time (SMOLRUN_VERBOSE=1).
fn verbose(msg: std::fmt::Arguments) {
    if std::env::var_os("SMOLRUN_VERBOSE").is_some() {
        eprintln!("smolrun: {msg}");
    }
}

/// A byte-count progress bar on stderr (indicatif draws nothing when stderr is no terminal).
fn bar(total: u64, what: &'static str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what);
    bar
}
