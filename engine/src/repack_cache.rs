//! The repack cache on disk: weights repacked for this CPU's kernels are written once to a file
//! next to the model (or under `--cache-dir`), and later starts map that file read-only instead
//! of repacking, so the original tensors' pages are not read again. The layout, the key and the
//! validation are core's (`smolrun_core::model::repack`); this module does the I/O, and sends
//! the messages and the progress as [`Event`]s.
//!
//! File name: `<model file name>.<kernel set>.repack`, so caches for two kernel sets (a forced
//! `SMOLRUN_KERNELS`, another CPU sharing the folder) do not overwrite each other.

pub use crate::options::CacheDir;
use crate::options::{Event, Events, RepackOptions};
use crate::EngineError;
use smolrun_core::gguf::Gguf;
use smolrun_core::model::repack::{
    fingerprint_ranges, model_fingerprint, CacheKey, EntrySums, RepackPlan, Verify,
};
use smolrun_core::model::{Model, RepackedWeights, ResidentStore};
use smolrun_linux::{
    advise_random_mapped, drop_cached_range, file_len_and_mtime, prefetch_ranges,
    remove_stale_temporaries, unmap_pages_mapped, CacheFileWriter, MappedFile,
};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The repacked weights for `model` on this kernel set: mapped from a valid cache, or repacked
/// now (and written to the cache unless it is off or cannot be written: then kept in memory,
/// with a message saying why). `None` when no matrix of the model has a repacked kernel on
/// this CPU (then nothing is read or written), or when repacking is off (`enabled: false`,
/// which runs the one-row kernels on the file layout: for measuring what the repacked kernels
/// gain).
pub fn load_or_build(
    model_path: &Path,
    gguf: &Gguf,
    model: &Model,
    options: &RepackOptions,
    log: &Log,
) -> Result<Option<RepackedWeights>, EngineError> {
    if !options.enabled {
        return Ok(None);
    }
    let verify = match options.verify_full {
        true => Verify::Full,
        false => Verify::Sampled,
    };
    let (weights, _) = load_or_build_in(&options.cache_dir, model_path, gguf, model, verify, log)
        .map_err(EngineError::system)?;
    Ok(weights)
}

/// Where this module's messages, timings and progress go.
#[derive(Clone, Default)]
pub struct Log {
    pub events: Events,
    pub verbose: bool,
}

impl Log {
    fn verbose(&self, msg: std::fmt::Arguments) {
        if self.verbose {
            self.events.send(Event::Verbose(&msg.to_string()));
        }
    }
}

/// The repacked matrices' original tensors are not read again (a tied embedding table only a
/// row per token): no readahead there, and the pages the repack read are dropped from the page
/// cache, where on a 1 GB device they would hold the RAM the model needs. Advice only: a
/// failure changes no result, so it is not an error.
fn leave_sources_on_flash(model_path: &Path, gguf: &Gguf, plan: &RepackPlan, log: &Log) {
    for e in &plan.entries {
        let Some(t) = gguf.tensors.get(e.id) else {
            continue;
        };
        let (start, end) = (t.offset, t.offset.saturating_add(t.n_bytes));
        if let Some(bytes) = gguf.bytes().get(start as usize..end as usize) {
            let advised = advise_random_mapped(bytes)
                .and_then(|()| unmap_pages_mapped(bytes))
                .and_then(|()| drop_cached_range(model_path, start..end));
            if let Err(why) = advised {
                log.verbose(format_args!("{}: {why}", e.name));
            }
        }
    }
}

/// What [`load_or_build_in`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No matrix has a repacked kernel on this kernel set.
    NothingToRepack,
    /// A valid cache was mapped.
    Mapped(PathBuf),
    /// No cache existed: repacked and written.
    Built(PathBuf),
    /// The cache was damaged or stale (the reason): repacked and written again.
    Rebuilt(PathBuf, String),
    /// Repacked into memory, written nowhere (the reason: cache off or not writable).
    InMemory(String),
}

pub fn load_or_build_in(
    dir: &CacheDir,
    model_path: &Path,
    gguf: &Gguf,
    model: &Model,
    verify: Verify,
    log: &Log,
) -> Result<(Option<RepackedWeights>, Outcome), String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", model_path.display());
    let plan = RepackPlan::new(model).map_err(|e| at(&e))?;
    if plan.is_empty() {
        return Ok((None, Outcome::NothingToRepack));
    }
    let n_tensors = gguf.tensors.len();
    let in_memory = |why: String| -> Result<(Option<RepackedWeights>, Outcome), String> {
        let mut buf = vec![0u8; plan.file_len];
        repack_all(&plan, gguf, &mut buf, "repacking weights (no cache)", log)?;
        let weights = plan.weights(Box::new(buf), n_tensors).map_err(|e| at(&e))?;
        leave_sources_on_flash(model_path, gguf, &plan, log);
        Ok((Some(weights), Outcome::InMemory(why)))
    };
    let cache_path = match dir {
        CacheDir::Off => return in_memory("--no-repack-cache".into()),
        CacheDir::NextToModel => cache_file_name(model_path, model_path.parent(), model),
        CacheDir::In(d) => cache_file_name(model_path, Some(d), model),
    };
    // A run killed while it wrote this cache left its temporary behind (hundreds of MB on a
    // device whose flash is small): nobody else will finish or remove it.
    for t in remove_stale_temporaries(&cache_path) {
        log.events.notice(&format!(
            "removed {} ({} MB), left by a run (pid {}) that stopped while writing it",
            t.path.display(),
            t.bytes / 1_000_000,
            t.pid
        ));
    }
    let (model_len, model_mtime_ns) = file_len_and_mtime(model_path)?;
    // The fingerprint reads 16 pages spread over the weights: those pages only, all at once.
    let file_len = gguf.bytes().len();
    let samples = fingerprint_ranges(file_len, gguf.data_offset as usize);
    prefetch(model_path, samples, log);
    let key = CacheKey {
        model_len,
        model_mtime_ns,
        model_fingerprint: model_fingerprint(gguf.bytes(), gguf.data_offset as usize),
        kernel_set: model.kernels_name,
    };
    let start = Instant::now();
    let mut rebuilt = None;
    if cache_path.exists() {
        match open_valid(&cache_path, &plan, &key, verify, log) {
            Ok(mapped) => {
                log.verbose(format_args!(
                    "mapped and checked the repack cache {} ({} MB) in {:.2} s",
                    cache_path.display(),
                    plan.repacked_bytes() >> 20,
                    start.elapsed().as_secs_f64()
                ));
                let weights = plan
                    .weights(Box::new(mapped), n_tensors)
                    .map_err(|e| at(&e))?;
                leave_sources_on_flash(model_path, gguf, &plan, log);
                return Ok((Some(weights), Outcome::Mapped(cache_path)));
            }
            Err(why) => {
                log.events.notice(&format!(
                    "repack cache {} {why}; rebuilding it",
                    cache_path.display()
                ));
                rebuilt = Some(why);
            }
        }
    }
    match write_cache(&cache_path, &plan, gguf, &key, log) {
        Ok(()) => {
            log.verbose(format_args!(
                "wrote the repack cache {} in {:.2} s",
                cache_path.display(),
                start.elapsed().as_secs_f64()
            ));
            let mapped = MappedFile::open(&cache_path)?;
            let weights = plan
                .weights(Box::new(mapped), n_tensors)
                .map_err(|e| at(&e))?;
            let outcome = match rebuilt {
                Some(why) => Outcome::Rebuilt(cache_path, why),
                None => Outcome::Built(cache_path),
            };
            leave_sources_on_flash(model_path, gguf, &plan, log);
            Ok((Some(weights), outcome))
        }
        Err(why) => {
            log.events.notice(&format!(
                "cannot write the repack cache ({why}); repacking in memory for this run (give a \
                 writable folder with --cache-dir DIR)"
            ));
            in_memory(why)
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

/// Maps the cache and checks header, key, table and every entry's checksum (of its sampled
/// windows, or of all its bytes).
fn open_valid(
    path: &Path,
    plan: &RepackPlan,
    key: &CacheKey,
    verify: Verify,
    log: &Log,
) -> Result<MappedFile, String> {
    let mapped = MappedFile::open(path).map_err(|e| format!("cannot be read ({e})"))?;
    let bytes = mapped.bytes();
    // The check reads a few windows of each entry: those pages only, all at once. The rest of
    // the cache is read as the forward pass first uses it.
    if verify == Verify::Sampled {
        prefetch(path, plan.sampled_ranges(), log);
    }
    let sums = plan
        .validate_header(bytes, key)
        .map_err(|e| format!("is {e}"))?;
    let mut bar = Progress::new(log, plan.repacked_bytes() as u64, "checking repack cache");
    for (i, &sum) in sums.iter().enumerate() {
        plan.verify_entry(bytes, i, sum, verify)
            .map_err(|e| format!("is {e}"))?;
        bar.inc(plan.entries[i].len as u64);
    }
    bar.finish();
    Ok(mapped)
}

fn write_cache(
    path: &Path,
    plan: &RepackPlan,
    gguf: &Gguf,
    key: &CacheKey,
    log: &Log,
) -> Result<(), String> {
    let mut w = CacheFileWriter::create(path, plan.file_len)?;
    let store = ResidentStore::new(gguf);
    // Each entry's pages are handed to writeback as soon as it is repacked, so that on a
    // small device the dirty pages of a cache bigger than RAM can be reclaimed as they go.
    let sums = repack_each(plan, "repacking weights", log, |i| {
        let sum = plan
            .repack_entry(&store, i, w.bytes_mut())
            .map_err(|err| err.to_string())?;
        let e = &plan.entries[i];
        w.start_writeback(e.offset, e.len)?;
        Ok(sum)
    })?;
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
    log: &Log,
) -> Result<Vec<EntrySums>, String> {
    let store = ResidentStore::new(gguf);
    repack_each(plan, what, log, |i| {
        plan.repack_entry(&store, i, cache)
            .map_err(|err| err.to_string())
    })
}

/// Runs `repack(i)` (which returns entry i's checksum) for every entry, with a progress bar.
fn repack_each(
    plan: &RepackPlan,
    what: &'static str,
    log: &Log,
    mut repack: impl FnMut(usize) -> Result<EntrySums, String>,
) -> Result<Vec<EntrySums>, String> {
    let mut bar = Progress::new(log, plan.repacked_bytes() as u64, what);
    let start = Instant::now();
    let mut sums = Vec::with_capacity(plan.entries.len());
    for (i, e) in plan.entries.iter().enumerate() {
        sums.push(repack(i)?);
        bar.inc(e.len as u64);
    }
    bar.finish();
    log.verbose(format_args!(
        "repacked {} matrices ({} MB) in {:.2} s",
        plan.entries.len(),
        plan.repacked_bytes() >> 20,
        start.elapsed().as_secs_f64()
    ));
    Ok(sums)
}

/// [`prefetch_ranges`] on byte ranges of the file at `path`; a failure is only advice lost.
fn prefetch(path: &Path, ranges: impl Iterator<Item = std::ops::Range<usize>>, log: &Log) {
    let ranges = ranges.map(|r| r.start as u64..r.end as u64);
    if let Err(why) = prefetch_ranges(path, ranges) {
        log.verbose(format_args!("{why}"));
    }
}

/// Byte counts of one long task, sent as [`Event::Progress`] (the CLI draws a bar).
struct Progress<'a> {
    log: &'a Log,
    task: &'static str,
    done: u64,
    total: u64,
}

impl<'a> Progress<'a> {
    fn new(log: &'a Log, total: u64, task: &'static str) -> Self {
        let p = Progress {
            log,
            task,
            done: 0,
            total,
        };
        p.send();
        p
    }

    fn send(&self) {
        self.log.events.send(Event::Progress {
            task: self.task,
            done: self.done,
            total: self.total,
        });
    }

    fn inc(&mut self, bytes: u64) {
        self.done = (self.done + bytes).min(self.total);
        if self.done < self.total {
            self.send();
        }
    }

    fn finish(mut self) {
        self.done = self.total;
        self.send();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smolrun_core::kernels::{KernelSet, RepackedKernel};
    use smolrun_core::model::{ResidentStore, State};
    use smolrun_core::platform::SingleThread;
    use smolrun_core::quant::{q8_0, GgmlType};

    /// A portable stand-in for the aarch64 x4 layouts, so the cache's I/O runs on any CPU:
    /// Q8_0 rows copied as they are, dotted by the scalar reference (same bits as unrepacked).
    const Q8_0_COPY: RepackedKernel = RepackedKernel {
        layout: "test_q8_0_copy",
        group_rows: 4,
        bytes: |rows, cols| cols.is_multiple_of(32).then_some(rows * cols / 32 * 34),
        repack: |src, rows, cols, dst| {
            (src.len() == rows * cols / 32 * 34 && dst.len() == src.len())
                .then(|| dst.copy_from_slice(src))
        },
        rows: |cols, w, act, out| {
            for (y, row) in out.iter_mut().zip(w.chunks_exact(cols / 32 * 34)) {
                *y = q8_0::vec_dot(cols, row, act);
            }
        },
        face: "test",
        act_table: None,
    };

    fn gemma_path() -> PathBuf {
        crate::engine::tests::gemma_path()
    }

    fn logits(model: &Model, store: &ResidentStore) -> Vec<f32> {
        let mut state = State::new(model, 8).unwrap();
        model
            .forward(&mut state, store, &SingleThread, 2, 0)
            .unwrap();
        state.logits().to_vec()
    }

    /// Built once, mapped after; a truncated or damaged cache is rebuilt; an unwritable folder
    /// falls back to memory; the repacked store gives the logits of the plain one.
    #[test]
    fn the_cache_is_built_mapped_and_rebuilt_when_damaged() {
        // A private copy: the page cache of the shared model file is held by whoever else maps
        // it, so only a copy shows what this process leaves in RAM.
        let copy_dir =
            std::env::temp_dir().join(format!("smolrun-repack-src-{}", std::process::id()));
        std::fs::create_dir_all(&copy_dir).unwrap();
        let path = copy_dir.join("gemma-3-270m-q4_k_m.gguf");
        std::fs::copy(gemma_path(), &path).unwrap();
        // Written back, so that its pages are clean and can be dropped.
        std::fs::File::open(&path).unwrap().sync_all().unwrap();
        let file = MappedFile::open(&path).unwrap();
        let gguf = Gguf::parse(file.bytes()).unwrap();
        let mut kernels = KernelSet::scalar();
        kernels.add_repacked(GgmlType::Q8_0, Q8_0_COPY);
        let model = Model::load_with_kernels(&gguf, &kernels).unwrap();
        let plain = logits(&model, &ResidentStore::new(&gguf));

        let dir = std::env::temp_dir().join(format!("smolrun-repack-test-{}", std::process::id()));
        let cache_dir = CacheDir::In(dir.clone());
        let log = Log::default();
        let run_as =
            |verify| load_or_build_in(&cache_dir, &path, &gguf, &model, verify, &log).unwrap();
        let run = || run_as(Verify::Sampled);

        // A run killed while writing this cache left its temporary (its pid runs nowhere).
        std::fs::create_dir_all(&dir).unwrap();
        let stale = dir.join("gemma-3-270m-q4_k_m.gguf.scalar.repack.tmp-99999999");
        std::fs::write(&stale, [0u8; 4096]).unwrap();
        let (weights, outcome) = run();
        let cache = dir.join("gemma-3-270m-q4_k_m.gguf.scalar.repack");
        assert_eq!(outcome, Outcome::Built(cache.clone()));
        assert!(!stale.exists(), "the killed run's temporary is removed");
        // The repack read the sources (178 MB of tied table); a built cache leaves them dropped
        // from RAM (the table is only read a row per token from now on).
        let table = gguf.tensor("token_embd.weight").unwrap();
        let table = table.offset as usize..(table.offset + table.n_bytes) as usize;
        let left = file.resident_bytes(table.clone()).unwrap();
        // A few pages at the table's ends stay: they share fault-around windows (64 KB) with
        // the header and the norms next to it, which this process still maps.
        assert!(
            left <= 256 << 10,
            "{left} bytes of the repacked table still in RAM"
        );
        let weights = weights.unwrap();
        assert!(weights.count() >= 1, "the tied Q8_0 head is repacked");
        let store = ResidentStore::new(&gguf).with_repacked(weights);
        assert_eq!(logits(&model, &store), plain);

        let (weights, outcome) = run();
        assert_eq!(outcome, Outcome::Mapped(cache.clone()));
        let store = ResidentStore::new(&gguf).with_repacked(weights.unwrap());
        assert_eq!(logits(&model, &store), plain);

        // Truncated: rebuilt.
        let len = std::fs::metadata(&cache).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&cache)
            .unwrap()
            .set_len(len - 4096)
            .unwrap();
        match run().1 {
            Outcome::Rebuilt(p, why) => assert!(p == cache && why.contains("truncated"), "{why}"),
            other => panic!("{other:?}"),
        }
        // One flipped bit in the data, inside a sampled window (the last 4 KiB): a start sees it
        // and rebuilds.
        let mut bytes = std::fs::read(&cache).unwrap();
        let last = bytes.len() - 100;
        bytes[last] ^= 4;
        std::fs::write(&cache, &bytes).unwrap();
        match run().1 {
            Outcome::Rebuilt(_, why) => assert!(why.contains("sampled data checksum"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Between the windows: only the full check (SMOLRUN_VERIFY_CACHE=1) reads it.
        let mut bytes = std::fs::read(&cache).unwrap();
        let between = bytes.len() - 5000;
        bytes[between] ^= 4;
        std::fs::write(&cache, &bytes).unwrap();
        assert_eq!(run().1, Outcome::Mapped(cache.clone()));
        match run_as(Verify::Full).1 {
            Outcome::Rebuilt(_, why) => assert!(why.contains("data checksum"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(run().1, Outcome::Mapped(cache.clone()));
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary files left"
        );

        // Off, or a folder that cannot be created: in memory, same logits.
        let (weights, outcome) =
            load_or_build_in(&CacheDir::Off, &path, &gguf, &model, Verify::Sampled, &log).unwrap();
        assert!(matches!(outcome, Outcome::InMemory(_)));
        let store = ResidentStore::new(&gguf).with_repacked(weights.unwrap());
        assert_eq!(logits(&model, &store), plain);
        let blocked = CacheDir::In(cache.join("not-a-folder"));
        let (_, outcome) =
            load_or_build_in(&blocked, &path, &gguf, &model, Verify::Sampled, &log).unwrap();
        assert!(matches!(outcome, Outcome::InMemory(_)), "{outcome:?}");

        // A kernel set with nothing to repack touches nothing.
        let plain_model = Model::load(&gguf).unwrap();
        let (weights, outcome) = load_or_build_in(
            &cache_dir,
            &path,
            &gguf,
            &plain_model,
            Verify::Sampled,
            &log,
        )
        .unwrap();
        assert!(weights.is_none());
        assert_eq!(outcome, Outcome::NothingToRepack);
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&copy_dir).unwrap();
    }
}
