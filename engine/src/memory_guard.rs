//! The memory guard: before a model is loaded, work out what the run will hold in RAM (core's
//! [`MemoryPlan`]) and refuse, with the numbers and what to try, when the device cannot give it;
//! then, while generating, look at the available memory every few tokens and stop cleanly
//! below a floor instead of being killed by the OOM killer (or Android's low-memory killer).
//!
//! A model whose per-token weights do not fit would not crash at once: the kernel would evict
//! and re-read its mapped pages from flash on every token (llama.cpp reads 9 GB for 8 tokens of
//! a 1.5B model in 1 GB). Refusing says so up front; `--no-mem-guard` runs it anyway.

use crate::options::EngineOptions;
use crate::EngineError;
use smolrun_core::gguf::Gguf;
use smolrun_core::model::{Family, HParams, MemoryPlan};
use smolrun_linux::{MappedFile, MemoryReading, MemorySource, MemoryWatch};
use std::path::Path;

/// Tokens between two looks at the available memory while generating (a reading is a few
/// preads of /proc and cgroup files, ~20 us).
pub const CHECK_EVERY_TOKENS: u32 = 16;

/// The smallest context the guard suggests.
const MIN_SUGGESTED_CTX: usize = 256;

/// Megabytes (10^6 bytes, as smoldevice and the reports print them) with one decimal.
pub fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// What the guard watches while generating.
pub struct MemoryGuard {
    watch: MemoryWatch,
    floor: u64,
    budget: Option<u64>,
    tokens_since_check: u32,
}

impl MemoryGuard {
    /// Called once per generated token; every [`CHECK_EVERY_TOKENS`] it reads the available
    /// memory. Allocates nothing unless it has to stop, then the error says why.
    pub fn check(&mut self) -> Result<(), String> {
        self.tokens_since_check += 1;
        if self.tokens_since_check < CHECK_EVERY_TOKENS {
            return Ok(());
        }
        self.tokens_since_check = 0;
        let r = self.watch.read();
        if r.source != MemorySource::Unknown && r.available < self.floor {
            return Err(format!(
                "stopped generating: only {} of memory is left ({}), below the floor of {} \
                 (--mem-floor); something else on the device is using memory, or the context \
                 grew past what was planned. Free some memory, use a smaller -c, or lower \
                 --mem-floor",
                mb(r.available),
                describe_source(&self.watch, &r),
                mb(self.floor)
            ));
        }
        if let Some(budget) = self.budget {
            if r.process_rss > budget {
                return Err(format!(
                    "stopped generating: this process holds {} (VmRSS), more than --mem-budget {}; \
                     raise --mem-budget or use a smaller -c",
                    mb(r.process_rss),
                    mb(budget)
                ));
            }
        }
        Ok(())
    }
}

/// Where a reading's number came from, for messages.
fn describe_source(watch: &MemoryWatch, r: &MemoryReading) -> String {
    match (r.source, r.cgroup) {
        (MemorySource::Cgroup(i), Some((limit, usage, inactive))) => format!(
            "cgroup {}: limit {}, in use {} of which {} is reclaimable file cache",
            watch
                .cgroup_dir(i)
                .map_or_else(|| "?".into(), |d| d.display().to_string()),
            mb(limit),
            mb(usage),
            mb(inactive)
        ),
        (MemorySource::System, _) => "MemAvailable in /proc/meminfo".to_string(),
        _ => "nothing readable in /proc or the cgroup files".to_string(),
    }
}

/// What the whole process may use: what is still available plus what it already holds (the
/// plan counts the program and the header it has parsed), but never more than a cgroup's limit
/// (the process's pages are already part of the cgroup's usage).
fn allowance(r: &MemoryReading) -> u64 {
    let total = r.available.saturating_add(r.process_rss);
    match r.cgroup {
        Some((limit, _, _)) => total.min(limit),
        None => total,
    }
}

/// Leaves an embedding table that is not the LM head on flash: the kernel is told the table
/// is read at random, so faulting in one row does not read ahead the rows around it, and the
/// pages that reading the header read ahead into it are dropped from the page cache. Call it
/// after the header (tokenizer included) has been read.
pub fn leave_embeddings_on_flash(file: &MappedFile, gguf: &Gguf) -> Result<(), EngineError> {
    if gguf.tensor("output.weight").is_none() {
        // Tied: the table is the LM head and is read whole for every token.
        return Ok(());
    }
    let Some(t) = gguf.tensor("token_embd.weight") else {
        return Ok(());
    };
    let table = t.offset as usize..(t.offset + t.n_bytes) as usize;
    let at = |e: String| EngineError::system(format!("token_embd.weight: {e}"));
    file.advise_random(table.clone()).map_err(at)?;
    file.drop_cached(table).map_err(at)
}

/// Plans the run's memory for `n_ctx` tokens and compares it with what the device (or
/// `--mem-budget`) allows. Returns the guard to watch generation with (None when turned off),
/// or an error that gives the numbers and what to try. Touches nothing but the header.
pub fn check_memory(
    path: &Path,
    gguf: &Gguf,
    n_ctx: usize,
    args: &EngineOptions,
    weights_held: Option<u64>,
) -> Result<Option<MemoryGuard>, EngineError> {
    if args.memory.no_guard {
        return Ok(None);
    }
    // A file that is not a model smolrun runs: the loader says what is wrong with it.
    let Ok(hp) = planned_hparams(gguf, args) else {
        return Ok(None);
    };
    if Family::from_arch(&hp.arch).is_none() {
        return Ok(None);
    }
    let mut plan = MemoryPlan::new(&hp, &gguf.tensors, gguf.data_offset, n_ctx);
    if args.pin_mtp() {
        // The most drafts llama.cpp's draft-mtp makes by default, as `--draft mtp` does.
        plan = plan.with_mtp_drafting(&hp, n_ctx, crate::options::DEFAULT_MTP_DRAFT);
    }
    if let Some(held) = weights_held {
        // A store that maps nothing holds its scratch buffer, not the weights.
        plan = plan.with_weights_held(held);
    }
    let watch = MemoryWatch::new();
    let Some((allowed, from_where)) = allowed_memory(&watch, args) else {
        // A sandbox that hides /proc: nothing to compare with; the floor check cannot work
        // either. Say nothing rather than refuse every model.
        return Ok(None);
    };
    if plan.total() > allowed {
        return Err(EngineError::DoesNotFit {
            path: path.to_path_buf(),
            needed: plan.total(),
            allowed,
            message: refusal(path, gguf, &hp, &plan, n_ctx, allowed, &from_where),
        });
    }
    Ok(Some(MemoryGuard {
        watch,
        floor: args.memory.floor,
        budget: args.memory.budget,
        tokens_since_check: 0,
    }))
}

/// What this run may use in all, and where that figure comes from (for messages); `None` when
/// there is no `--mem-budget` and nothing readable says (a sandbox that hides /proc).
fn allowed_memory(watch: &MemoryWatch, args: &EngineOptions) -> Option<(u64, String)> {
    let reading = watch.read();
    let budget = args.memory.budget;
    let (allowed, from_where) = match budget {
        Some(b) => (b, "--mem-budget".to_string()),
        // The process already holds the program, the header it has parsed and so on; the plan
        // counts those, so they are part of what it may use.
        None => (
            allowance(&reading),
            format!(
                "{} available ({}) + {} this process already holds",
                mb(reading.available),
                describe_source(watch, &reading),
                mb(reading.process_rss)
            ),
        ),
    };
    if budget.is_none() && reading.source == MemorySource::Unknown {
        return None;
    }
    // Android's low-memory killer and iOS's jetsam act before the kernel's own limits do.
    Some(match (budget, crate::platform::mobile_memory_ceiling()) {
        (None, Some((available, held, name))) if available.saturating_add(held) < allowed => (
            available.saturating_add(held),
            format!(
                "{} available ({name}) + {} this process already holds",
                mb(available),
                mb(held)
            ),
        ),
        _ => (allowed, from_where),
    })
}

/// Kept free beside the streaming store's budget: the page cache of the buffered reads
/// (embedding rows, the header) and the allocator's churn, above the floor.
pub const STREAM_SLACK_BYTES: u64 = 16 << 20;

/// When the whole model does not fit: the bytes left for weights (resident set and stream
/// zones) once everything else the run needs for `n_ctx` tokens, the floor and a slack are
/// counted. `None` when it fits, when the guard is off, or when memory cannot be read.
pub fn room_for_weights(gguf: &Gguf, n_ctx: usize, args: &EngineOptions) -> Option<u64> {
    match weights_room(gguf, n_ctx, args)? {
        (room, false) => Some(room),
        (_, true) => None,
    }
}

/// The budget for the streaming store's weights when nothing else says: the room for weights
/// (whether the whole model fits or not), or, when the guard is off or memory cannot be read,
/// the whole plan's weights, so that `--weights stream` keeps nearly everything resident.
pub fn stream_weights_budget(gguf: &Gguf, n_ctx: usize, args: &EngineOptions) -> u64 {
    if let Some((room, _)) = weights_room(gguf, n_ctx, args) {
        return room;
    }
    planned_hparams(gguf, args).map_or(0, |hp| {
        MemoryPlan::new(&hp, &gguf.tensors, gguf.data_offset, n_ctx).weights
            + smolrun_core::model::stream::MIN_ZONE_BYTES
    })
}

/// The bytes left for weights once everything else the run needs for `n_ctx` tokens, the
/// floor and a slack are counted, and whether the whole model fits; `None` when the guard is
/// off, the file is no model smolrun runs, or memory cannot be read.
fn weights_room(gguf: &Gguf, n_ctx: usize, args: &EngineOptions) -> Option<(u64, bool)> {
    if args.memory.no_guard {
        return None;
    }
    let hp = planned_hparams(gguf, args).ok()?;
    Family::from_arch(&hp.arch)?;
    let mut plan = MemoryPlan::new(&hp, &gguf.tensors, gguf.data_offset, n_ctx);
    if args.pin_mtp() {
        // As check_memory plans it: the weights get what MTP drafting's state leaves.
        plan = plan.with_mtp_drafting(&hp, n_ctx, crate::options::DEFAULT_MTP_DRAFT);
    }
    let (allowed, _) = allowed_memory(&MemoryWatch::new(), args)?;
    let rest = plan.total() - plan.weights - plan.embedding_rows;
    let room = allowed.saturating_sub(rest + args.memory.floor + STREAM_SLACK_BYTES);
    Some((room, plan.total() <= allowed))
}

/// The header's hyperparameters with this run's state choices (`--state-f16`, the KV cache's
/// type), which the
/// plan sizes the recurrent state from.
fn planned_hparams(
    gguf: &Gguf,
    args: &EngineOptions,
) -> Result<HParams, smolrun_core::model::ModelError> {
    let kv_type = args.kv_type().unwrap_or_default();
    HParams::from_gguf(gguf).map(|hp| hp.with_state_f16(args.state_f16).with_kv_type(kv_type))
}

/// The refusal: needed by part, allowed and from where, and what to try.
fn refusal(
    path: &Path,
    gguf: &Gguf,
    hp: &HParams,
    plan: &MemoryPlan,
    n_ctx: usize,
    allowed: u64,
    from_where: &str,
) -> String {
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut msg = format!(
        "{name} does not fit in memory: with -c {n_ctx} it needs {}, and this run may use {} \
         ({from_where}).\n  needed, by part:\n",
        mb(plan.total()),
        mb(allowed)
    );
    let head_bytes = if plan.head_is_embedding {
        plan.embedding_table
    } else {
        gguf.tensor("output.weight").map_or(0, |t| t.n_bytes)
    };
    for (part, bytes) in plan.parts() {
        if part == "recurrent state" && bytes == 0 {
            continue; // no recurrent layers
        }
        let note = match part {
            "weights read every token" if plan.head_is_embedding => format!(
                "all matrices; the LM head is the {} embedding table (tied)",
                mb(head_bytes)
            ),
            "weights read every token" => format!(
                "all matrices but the {} embedding table, which stays on flash; the LM head is {} of them",
                mb(plan.embedding_table),
                mb(head_bytes)
            ),
            "kv cache" => format!(
                "{:.1} KB per token of context",
                MemoryPlan::kv_bytes_per_token(hp) as f64 / 1e3
            ),
            "recurrent state" if bytes > 0 => {
                "the recurrent layers' fixed state: the same at any context".to_string()
            }
            _ => String::new(),
        };
        msg += &format!("    {part:<26} {:>10}", mb(bytes));
        if !note.is_empty() {
            msg += &format!("  ({note})");
        }
        msg.push('\n');
    }
    msg += "  what to try:\n";
    // The largest power-of-two context down to MIN_SUGGESTED_CTX that fits, if any.
    let mut ctx = n_ctx.next_power_of_two() / 2;
    let mut fitting = None;
    while ctx >= MIN_SUGGESTED_CTX {
        let smaller = MemoryPlan::new(hp, &gguf.tensors, gguf.data_offset, ctx);
        if smaller.total() <= allowed {
            fitting = Some((ctx, smaller.total()));
            break;
        }
        ctx /= 2;
    }
    match fitting {
        Some((c, bytes)) => {
            msg += &format!("    - a smaller context: -c {c} needs {}\n", mb(bytes));
        }
        None if n_ctx > MIN_SUGGESTED_CTX => {
            msg += &format!(
                "    - a smaller context is not enough: even -c {MIN_SUGGESTED_CTX} needs {}\n",
                mb(MemoryPlan::new(hp, &gguf.tensors, gguf.data_offset, MIN_SUGGESTED_CTX).total())
            );
        }
        None => {}
    }
    msg += &format!(
        "    - a pruned LM head ({} now): smolrun gguf head-ids -m MODEL --keep 32768 -o ids.txt, \
         then smolrun gguf prune-head -m MODEL --ids ids.txt -o pruned.gguf\n",
        mb(head_bytes)
    );
    msg += "    - a smaller model, or a smaller quantization of this one\n";
    msg += "    - a budget that holds the stream zones (twice the largest weight not kept in RAM, \
            32 MB at least) beside the rest: the weights are then streamed from flash \
            (--weights stream)\n";
    msg += "    - --mem-budget SIZE if the device really has more room, or --no-mem-guard to run \
            anyway (weights that do not fit are re-read from flash every token: very slow)";
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_check_only_reads_every_16_tokens() {
        let mut guard = MemoryGuard {
            watch: MemoryWatch::new(),
            // No machine has this much left: the check must fail when it looks.
            floor: u64::MAX,
            budget: None,
            tokens_since_check: 0,
        };
        for _ in 1..CHECK_EVERY_TOKENS {
            guard.check().unwrap();
        }
        let e = guard.check().unwrap_err();
        assert!(e.contains("below the floor"), "{e}");
        assert!(e.contains("--mem-floor"), "{e}");
    }

    #[test]
    fn a_budget_smaller_than_the_process_stops_generation() {
        let mut guard = MemoryGuard {
            watch: MemoryWatch::new(),
            floor: 1,
            budget: Some(1 << 20),
            tokens_since_check: CHECK_EVERY_TOKENS - 1,
        };
        let e = guard.check().unwrap_err();
        assert!(e.contains("more than --mem-budget"), "{e}");
    }
}
