//! The memory guard: before a model is loaded, work out what the run will hold in RAM (core's
//! [`MemoryPlan`]) and refuse, with the numbers and what to try, when the device cannot give it;
//! then, while generating, look at the available memory every few tokens and stop cleanly
//! below a floor instead of being killed by the OOM killer (or Android's low-memory killer).
//!
//! A model whose per-token weights do not fit would not crash at once: the kernel would evict
//! and re-read its mapped pages from flash on every token (llama.cpp reads 9 GB for 8 tokens of
//! a 1.5B model in 1 GB). Refusing says so up front; `--no-mem-guard` runs it anyway.

use smolrun_core::gguf::Gguf;
use smolrun_core::model::{Family, HParams, MemoryPlan};
use smolrun_linux::{MappedFile, MemoryReading, MemorySource, MemoryWatch};
use std::path::Path;

/// Tokens between two looks at the available memory while generating (a reading is a few
/// preads of /proc and cgroup files, ~20 us).
pub const CHECK_EVERY_TOKENS: u32 = 16;

/// The smallest context the guard suggests.
const MIN_SUGGESTED_CTX: usize = 256;

/// Environment variable that turns the guard off like `--no-mem-guard` (for scripts and the
/// server's launchers).
pub const NO_GUARD_ENV: &str = "SMOLRUN_NO_MEM_GUARD";

/// The guard's flags, shared by run, chat, serve, bench and perplexity.
#[derive(clap::Args, Debug, Clone)]
pub struct MemoryArgs {
    /// RAM this run may use in all (e.g. 800M, 1.5G; K/M/G/T are powers of 1024), instead of
    /// what the device reports available (cgroup limit, MemAvailable).
    #[arg(long = "mem-budget", value_name = "SIZE", value_parser = parse_size)]
    pub budget: Option<u64>,
    /// Load even when the model does not fit, and do not stop when memory runs low (weights
    /// that do not fit are re-read from flash every token: very slow). SMOLRUN_NO_MEM_GUARD=1
    /// does the same.
    #[arg(long = "no-mem-guard")]
    pub no_guard: bool,
    /// While generating, stop when less than this is left.
    #[arg(long = "mem-floor", value_name = "SIZE", value_parser = parse_size, default_value = "32M")]
    pub floor: u64,
    /// How the weights are reached: `resident` maps the file; `stream` keeps a resident set
    /// in RAM and streams the rest from flash every token, read ahead by reader threads with
    /// direct reads (for a model bigger than RAM); `pread` maps nothing and reads each weight
    /// into one scratch buffer just before its matvec (slow); `auto` maps the file when the
    /// model fits, streams it when it does not, and reads it with pread when it is bigger than
    /// the address space this process may map (iOS, 32-bit, `ulimit -v`) and cannot stream.
    #[arg(long = "weights", value_enum, default_value_t = WeightsMode::Auto)]
    pub weights: WeightsMode,
    /// MTP drafting may run (`--draft mtp` or `auto`): a streamed model keeps its MTP layer
    /// and LM head in RAM (the draft steps read them between two passes). Set by the command.
    #[arg(skip)]
    pub pin_mtp: bool,
    /// With streaming: MB (10^6 bytes) of weights kept in RAM (the resident set); the stream
    /// zones come on top [default: what the memory probe leaves, zones included].
    #[arg(long = "resident-mb", value_name = "MB")]
    pub resident_mb: Option<u64>,
    /// With streaming: the flash's read bandwidth in MB/s, for the reported limit (flash MB/s
    /// over MB streamed per token) [default: probed with a short direct read at start].
    #[arg(long = "flash-mbps", value_name = "MB/S")]
    pub flash_mbps: Option<f64>,
    /// Mixture of experts: keep N experts per layer in RAM and read the others from flash
    /// when the router picks them (the expert pager; everything else stays mapped); `all`
    /// keeps every expert resident [default: paged when the model does not fit, the pools
    /// sized by the memory probe].
    #[arg(long = "moe-pool", value_name = "N|all", value_parser = parse_moe_pool)]
    pub moe_pool: Option<MoePool>,
    /// Mixture of experts, paged: a selection bonus for experts already in RAM (added to
    /// the router's score when choosing, never to an expert's weight). Fewer reads from flash
    /// for a small change of routing; 0 routes as the model does.
    #[arg(long = "moe-cache-bias", value_name = "B", default_value_t = 0.0)]
    pub moe_cache_bias: f32,
    /// Mixture of experts, paged: each layer guesses the experts of the layer this many ahead
    /// from its own input (that layer's router on this hidden state) and has them read while
    /// it computes; 0 turns it off.
    #[arg(long = "moe-prefetch", value_name = "LAYERS", default_value_t = 1)]
    pub moe_prefetch: usize,
    /// Mixture of experts: experts per token instead of the model's own count (fewer: less
    /// to read and compute, at some cost in quality).
    #[arg(long = "experts", value_name = "K")]
    pub experts: Option<usize>,
    /// Mixture of experts, paged: start with the experts listed in FILE (each layer's most
    /// used, written by an earlier run) in the pools, and write the list of this run to FILE
    /// when it ends.
    #[arg(long = "moe-warm", value_name = "FILE")]
    pub moe_warm: Option<std::path::PathBuf>,
    /// Mixture of experts, paged: which expert leaves a full pool.
    #[arg(long = "moe-policy", value_enum, default_value_t = MoePolicy::Decay)]
    pub moe_policy: MoePolicy,
    /// Recurrent models (Qwen3.5): keep the delta-rule state of the recurrent layers as f16
    /// instead of f32: half its memory and of the bytes each token reads and writes there,
    /// for a rounding of every state value at every token.
    #[arg(long = "state-f16")]
    pub state_f16: bool,
}

/// `--moe-pool`: experts per layer kept in RAM, or all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoePool {
    Slots(usize),
    All,
}

fn parse_moe_pool(text: &str) -> Result<MoePool, String> {
    match text {
        "all" => Ok(MoePool::All),
        n => match n.parse::<usize>() {
            Ok(0) | Err(_) => Err(format!(
                "'{text}' is not a pool size: give a number of experts per layer (1 or more) or \
                 'all'"
            )),
            Ok(n) => Ok(MoePool::Slots(n)),
        },
    }
}

/// `--moe-policy`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MoePolicy {
    /// The least valued by a use count that decays by 0.95 per token.
    #[default]
    Decay,
    /// The least recently used.
    Lru,
}

/// Where the weights live while running (`--weights`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightsMode {
    #[default]
    Auto,
    Resident,
    Stream,
    Pread,
}

impl Default for MemoryArgs {
    fn default() -> Self {
        MemoryArgs {
            budget: None,
            no_guard: false,
            floor: 32 << 20,
            weights: WeightsMode::Auto,
            resident_mb: None,
            flash_mbps: None,
            pin_mtp: false,
            moe_pool: None,
            moe_cache_bias: 0.0,
            moe_prefetch: 1,
            experts: None,
            moe_warm: None,
            moe_policy: MoePolicy::Decay,
            state_f16: false,
        }
    }
}

/// Parses a size: bytes, or a number with a K, M, G or T suffix (powers of 1024, like
/// `numfmt --from=iec`), optionally followed by `B` or `iB`: `800M`, `1.5G`, `512MiB`, `2048`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let bad = |why: &str| {
        format!("'{text}' is not a memory size ({why}); write it like 800M, 1.5G or 536870912")
    };
    let s = text.trim();
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(digits_end);
    if number.is_empty() {
        return Err(bad("no number"));
    }
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(bad("the unit must be K, M, G or T")),
    };
    let value = match number.split_once('.') {
        None => number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(1 << shift)),
        Some((whole, frac)) => {
            if shift == 0 {
                return Err(bad("a fraction of a byte"));
            }
            if frac.is_empty() || frac.contains('.') || frac.len() > 6 {
                return Err(bad("the fraction must have 1 to 6 digits"));
            }
            let whole: u64 = if whole.is_empty() {
                0
            } else {
                whole.parse().map_err(|_| bad("not a number"))?
            };
            let frac_value: u64 = frac.parse().map_err(|_| bad("not a number"))?;
            let scale = 10u64.pow(frac.len() as u32);
            whole.checked_mul(1 << shift).and_then(|w| {
                // frac_value < 10^6 and shift <= 40: the product fits in u64.
                w.checked_add(frac_value * (1u64 << shift) / scale)
            })
        }
    };
    match value {
        None => Err(bad("too large")),
        Some(0) => Err(bad("it must be more than 0")),
        Some(v) => Ok(v),
    }
}

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
pub fn leave_embeddings_on_flash(file: &MappedFile, gguf: &Gguf) -> Result<(), String> {
    if gguf.tensor("output.weight").is_none() {
        // Tied: the table is the LM head and is read whole for every token.
        return Ok(());
    }
    let Some(t) = gguf.tensor("token_embd.weight") else {
        return Ok(());
    };
    let table = t.offset as usize..(t.offset + t.n_bytes) as usize;
    file.advise_random(table.clone())?;
    file.drop_cached(table)
}

/// Plans the run's memory for `n_ctx` tokens and compares it with what the device (or
/// `--mem-budget`) allows. Returns the guard to watch generation with (None when turned off),
/// or an error that gives the numbers and what to try. Touches nothing but the header.
pub fn check_memory(
    path: &Path,
    gguf: &Gguf,
    n_ctx: usize,
    args: &MemoryArgs,
    weights_held: Option<u64>,
) -> Result<Option<MemoryGuard>, String> {
    if guard_off(args) {
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
    if args.pin_mtp {
        // The most drafts llama.cpp's draft-mtp makes by default, as `--draft mtp` does.
        plan = plan.with_mtp_drafting(&hp, n_ctx, crate::speculative::DEFAULT_MTP_DRAFT);
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
        return Err(refusal(path, gguf, &hp, &plan, n_ctx, allowed, &from_where));
    }
    Ok(Some(MemoryGuard {
        watch,
        floor: args.floor,
        budget: args.budget,
        tokens_since_check: 0,
    }))
}

/// What this run may use in all, and where that figure comes from (for messages); `None` when
/// there is no `--mem-budget` and nothing readable says (a sandbox that hides /proc).
fn allowed_memory(watch: &MemoryWatch, args: &MemoryArgs) -> Option<(u64, String)> {
    let reading = watch.read();
    let (allowed, from_where) = match args.budget {
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
    if args.budget.is_none() && reading.source == MemorySource::Unknown {
        return None;
    }
    // Android's low-memory killer and iOS's jetsam act before the kernel's own limits do.
    Some(
        match (args.budget, crate::platform::mobile_memory_ceiling()) {
            (None, Some((available, held, name))) if available.saturating_add(held) < allowed => (
                available.saturating_add(held),
                format!(
                    "{} available ({name}) + {} this process already holds",
                    mb(available),
                    mb(held)
                ),
            ),
            _ => (allowed, from_where),
        },
    )
}

/// Kept free beside the streaming store's budget: the page cache of the buffered reads
/// (embedding rows, the header) and the allocator's churn, above the floor.
pub const STREAM_SLACK_BYTES: u64 = 16 << 20;

/// When the whole model does not fit: the bytes left for weights (resident set and stream
/// zones) once everything else the run needs for `n_ctx` tokens, the floor and a slack are
/// counted. `None` when it fits, when the guard is off, or when memory cannot be read.
pub fn room_for_weights(gguf: &Gguf, n_ctx: usize, args: &MemoryArgs) -> Option<u64> {
    match weights_room(gguf, n_ctx, args)? {
        (room, false) => Some(room),
        (_, true) => None,
    }
}

/// The budget for the streaming store's weights when nothing else says: the room for weights
/// (whether the whole model fits or not), or, when the guard is off or memory cannot be read,
/// the whole plan's weights, so that `--weights stream` keeps nearly everything resident.
pub fn stream_weights_budget(gguf: &Gguf, n_ctx: usize, args: &MemoryArgs) -> u64 {
    if let Some((room, _)) = weights_room(gguf, n_ctx, args) {
        return room;
    }
    planned_hparams(gguf, args).map_or(0, |hp| {
        MemoryPlan::new(&hp, &gguf.tensors, gguf.data_offset, n_ctx).weights
            + crate::engine::MIN_ZONE_BYTES
    })
}

/// The bytes left for weights once everything else the run needs for `n_ctx` tokens, the
/// floor and a slack are counted, and whether the whole model fits; `None` when the guard is
/// off, the file is no model smolrun runs, or memory cannot be read.
fn weights_room(gguf: &Gguf, n_ctx: usize, args: &MemoryArgs) -> Option<(u64, bool)> {
    if guard_off(args) {
        return None;
    }
    let hp = planned_hparams(gguf, args).ok()?;
    Family::from_arch(&hp.arch)?;
    let mut plan = MemoryPlan::new(&hp, &gguf.tensors, gguf.data_offset, n_ctx);
    if args.pin_mtp {
        // As check_memory plans it: the weights get what MTP drafting's state leaves.
        plan = plan.with_mtp_drafting(&hp, n_ctx, crate::speculative::DEFAULT_MTP_DRAFT);
    }
    let (allowed, _) = allowed_memory(&MemoryWatch::new(), args)?;
    let rest = plan.total() - plan.weights - plan.embedding_rows;
    let room = allowed.saturating_sub(rest + args.floor + STREAM_SLACK_BYTES);
    Some((room, plan.total() <= allowed))
}

/// The header's hyperparameters with this run's state choices (`--state-f16`), which the
/// plan sizes the recurrent state from.
fn planned_hparams(
    gguf: &Gguf,
    args: &MemoryArgs,
) -> Result<HParams, smolrun_core::model::ModelError> {
    HParams::from_gguf(gguf).map(|hp| hp.with_state_f16(args.state_f16))
}

/// `--no-mem-guard` or SMOLRUN_NO_MEM_GUARD.
fn guard_off(args: &MemoryArgs) -> bool {
    args.no_guard || std::env::var(NO_GUARD_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
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
    fn sizes_with_units() {
        assert_eq!(parse_size("800M"), Ok(800 << 20));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("512MB"), Ok(512 << 20));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("536870912"), Ok(536_870_912));
        assert_eq!(parse_size("4096B"), Ok(4096));
        assert_eq!(parse_size(" 1G "), Ok(1 << 30));
        assert_eq!(parse_size(".5G"), Ok(1 << 29));
        // numfmt --from=iec rounds 0.1G up; we round down to the byte.
        assert_eq!(parse_size("0.1G"), Ok(107_374_182));
    }

    #[test]
    fn bad_sizes_are_refused_with_the_right_form() {
        for bad in [
            "",
            "M",
            "abc",
            "-5M",
            "0",
            "0M",
            "1.5",
            "12X",
            "1.2.3G",
            "1.G",
            "5 M M",
            "99999999999T",
            "1.1234567G",
        ] {
            let e = parse_size(bad).expect_err(bad);
            assert!(e.contains("write it like 800M"), "{bad}: {e}");
        }
    }

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
