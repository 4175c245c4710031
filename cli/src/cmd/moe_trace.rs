//! `smolrun moe-trace`: runs a mixture of experts over a text and writes which experts each
//! token chose in each MoE layer. `smolrun moe-sim`: replays such a trace against pools of
//! several sizes under each eviction policy, and under Belady's optimum (the fewest misses any
//! policy can have on that trace with that pool), so the pager's policy is judged against the
//! best possible on the same routing.
//!
//! Trace format (text): comment lines start with `#`; every other line is
//! `TOKEN LAYER: E E E ...`, the experts in the router's order.

use crate::args::{Globals, MemoryArgs};
use smolrun_core::model::expert_cache::{replay, replay_belady, Eviction, ReplayCount};
use smolrun_core::model::pager::MoeStats;
use smolrun_core::model::{StoreError, TensorId, Weight, WeightKey, WeightStore};
use smolrun_engine::Engine;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    /// Model (path or short name): a mixture of experts.
    #[arg(short = 'm', long)]
    pub model: String,
    /// Text file to run (the model's routing on real text).
    #[arg(short = 'f', long)]
    pub file: PathBuf,
    /// Tokens of the text to run, at most.
    #[arg(long, default_value_t = 4096)]
    pub tokens: usize,
    /// Tokens per window: the text runs in windows of this many tokens, each from an empty
    /// context, as perplexity runs it.
    #[arg(short = 'c', long, default_value_t = 512)]
    pub ctx: usize,
    /// Output trace file.
    #[arg(short = 'o', long)]
    pub out: PathBuf,
    /// Run the text one token at a time, as decoding does (with `--moe-pool N`, through the
    /// pager, its guesses included), instead of in batches; the pager's own misses are printed,
    /// to set beside `moe-sim`'s replay of the same routing.
    #[arg(long)]
    pub decode: bool,
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub mem: MemoryArgs,
}

/// Records the experts of each routing: the model hints one token's chosen experts of one
/// layer at a time (`prefetch`), before it asks for them.
struct TraceStore<'a> {
    inner: &'a dyn WeightStore,
    /// Gate tensor id -> MoE layer number.
    layer_of: BTreeMap<TensorId, usize>,
    routings: std::sync::Mutex<Vec<(usize, Vec<u16>)>>,
}

impl WeightStore for TraceStore<'_> {
    fn get(&self, key: WeightKey) -> Result<Weight<'_>, StoreError> {
        self.inner.get(key)
    }
    fn get_repacked(&self, key: WeightKey, layout: &str) -> Option<Weight<'_>> {
        self.inner.get_repacked(key, layout)
    }
    fn read_rows(
        &self,
        key: WeightKey,
        first_row: usize,
        n_rows: usize,
        out: &mut [u8],
    ) -> Result<(), StoreError> {
        self.inner.read_rows(key, first_row, n_rows, out)
    }
    fn prefetch(&self, keys: &[WeightKey]) {
        let mut layer = None;
        let mut experts = Vec::new();
        for k in keys {
            if let (Some(e), Some(&l)) = (k.expert, self.layer_of.get(&k.tensor)) {
                layer = Some(l);
                experts.push(e);
            }
        }
        if let Some(l) = layer {
            if let Ok(mut r) = self.routings.lock() {
                r.push((l, experts));
            }
        }
        self.inner.prefetch(keys)
    }
    fn predict(&self, keys: &[WeightKey]) {
        self.inner.predict(keys)
    }
    fn experts_held(&self, tensor: TensorId, held: &mut [bool]) -> bool {
        self.inner.experts_held(tensor, held)
    }
    fn release(&self, _key: WeightKey) {
        // Guards from `inner` release into it directly.
    }
    fn moe_stats(&self) -> Option<MoeStats> {
        self.inner.moe_stats()
    }
}

pub fn trace(args: TraceArgs, globals: &Globals) -> Result<(), String> {
    if args.ctx == 0 || args.tokens == 0 {
        return Err("-c and --tokens must be at least 1".into());
    }
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| format!("cannot read {}: {e}", args.file.display()))?;
    let options = globals.engine_options(Some(args.ctx), args.threads, &args.mem, None)?;
    let mut engine = Engine::open(&args.model, &options)?;
    let path = engine.path.clone();
    let mut tokens = engine.tokenize(&text, true, false);
    tokens.truncate(args.tokens);
    let groups = engine.model.expert_groups();
    if groups.is_empty() {
        return Err(format!(
            "{} is not a mixture of experts: it has no routing to trace",
            path.display()
        ));
    }
    let (n_expert, n_used) = (groups[0].n_expert, groups[0].n_used);
    let moe_before = engine.moe_stats();
    let (_, model, state, store, par) = engine.parts();
    let tracer = TraceStore {
        inner: store,
        layer_of: groups.iter().map(|g| (g.tensors[0], g.layer)).collect(),
        routings: std::sync::Mutex::new(Vec::new()),
    };
    let mut out = String::new();
    out += &format!(
        "# smolrun moe-trace v1\n# model: {}\n# moe layers: {}  experts: {n_expert}  used: {n_used}\n\
         # text: {} ({} tokens, windows of {})\n",
        path.display(),
        groups.len(),
        args.file.display(),
        tokens.len(),
        args.ctx
    );
    let mut token_index = 0usize;
    for window in tokens.chunks(args.ctx) {
        state.reset();
        let at = |e: smolrun_core::model::ModelError| format!("{}: {e}", path.display());
        if args.decode {
            for (pos, &token) in window.iter().enumerate() {
                model.forward(state, &tracer, par, token, pos).map_err(at)?;
            }
        } else {
            model
                .forward_batch_all(state, &tracer, par, window, 0, 0, &mut |_, _| {})
                .map_err(at)?;
        }
        // Each layer routes the window's tokens in order; layers run one after another.
        let routings =
            std::mem::take(&mut *tracer.routings.lock().unwrap_or_else(|p| p.into_inner()));
        let mut per_layer: BTreeMap<usize, Vec<Vec<u16>>> = BTreeMap::new();
        for (l, experts) in routings {
            per_layer.entry(l).or_default().push(experts);
        }
        for t in 0..window.len() {
            for (l, steps) in &per_layer {
                if let Some(experts) = steps.get(t) {
                    let list: Vec<String> = experts.iter().map(u16::to_string).collect();
                    out += &format!("{} {l}: {}\n", token_index + t, list.join(" "));
                }
            }
        }
        token_index += window.len();
    }
    std::fs::write(&args.out, out)
        .map_err(|e| format!("cannot write {}: {e}", args.out.display()))?;
    if let (Some(now), Some(before)) = (engine.moe_stats(), moe_before) {
        let stats = now.since(&before);
        if let Some(report) = engine.moe_report(&stats, token_index) {
            eprintln!("smolrun: the pager on this routing: {}", report.line());
        }
    }
    eprintln!(
        "smolrun: {} tokens x {} MoE layers traced into {}",
        token_index,
        groups.len(),
        args.out.display()
    );
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct SimArgs {
    /// Trace file written by `smolrun moe-trace`.
    pub trace: PathBuf,
    /// Pool sizes (experts per layer) to replay, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "8,16,24,32,48,64")]
    pub pool: Vec<usize>,
    /// Print one JSON object per pool size instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A trace's routings, each layer's in token order; the expert count (largest id + 1).
type Trace = (BTreeMap<usize, Vec<Vec<u16>>>, usize);

pub fn read_trace(path: &std::path::Path) -> Result<Trace, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut layers: BTreeMap<usize, Vec<Vec<u16>>> = BTreeMap::new();
    let mut n_expert = 0usize;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || {
            format!(
                "{}:{}: not a trace line ('TOKEN LAYER: E E ...'): {line}",
                path.display(),
                i + 1
            )
        };
        let (head, experts) = line.split_once(':').ok_or_else(bad)?;
        let mut head = head.split_whitespace();
        let (_token, layer) = (head.next().ok_or_else(bad)?, head.next().ok_or_else(bad)?);
        let layer: usize = layer.parse().map_err(|_| bad())?;
        let experts: Vec<u16> = experts
            .split_whitespace()
            .map(|e| e.parse::<u16>().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        if let Some(&m) = experts.iter().max() {
            n_expert = n_expert.max(m as usize + 1);
        }
        layers.entry(layer).or_default().push(experts);
    }
    if layers.is_empty() {
        return Err(format!("{}: no routings in the trace", path.display()));
    }
    Ok((layers, n_expert))
}

/// The policies the simulator compares, by name.
pub const POLICIES: [(&str, Eviction); 6] = [
    ("lru", Eviction::Lru),
    ("decay 0.8", Eviction::DecayedFrequency { decay: 0.8 }),
    ("decay 0.9", Eviction::DecayedFrequency { decay: 0.9 }),
    ("decay 0.95", Eviction::DecayedFrequency { decay: 0.95 }),
    ("decay 0.99", Eviction::DecayedFrequency { decay: 0.99 }),
    ("decay 0.999", Eviction::DecayedFrequency { decay: 0.999 }),
];

/// Misses of every layer of `trace` replayed with `slots` per layer under `policy` (`None`:
/// Belady's optimum).
pub fn simulate(trace: &Trace, slots: usize, policy: Option<Eviction>) -> ReplayCount {
    let (layers, n_expert) = trace;
    let mut total = ReplayCount::default();
    for steps in layers.values() {
        let steps: Vec<&[u16]> = steps.iter().map(Vec::as_slice).collect();
        let c = match policy {
            Some(p) => replay(&steps, *n_expert, slots, p),
            None => replay_belady(&steps, *n_expert, slots),
        };
        total.lookups += c.lookups;
        total.misses += c.misses;
    }
    total
}

pub fn sim(args: SimArgs) -> Result<(), String> {
    let trace = read_trace(&args.trace)?;
    let (layers, n_expert) = &trace;
    let steps = layers.values().map(Vec::len).max().unwrap_or(0);
    let mut stdout = std::io::stdout().lock();
    let w = |out: &mut std::io::StdoutLock, s: String| {
        writeln!(out, "{s}").map_err(|e| format!("cannot write to stdout: {e}"))
    };
    if !args.json {
        w(
            &mut stdout,
            format!(
                "{} MoE layers, {n_expert} experts, {steps} tokens: miss rate by pool size and policy",
                layers.len()
            ),
        )?;
        let names: Vec<&str> = POLICIES.iter().map(|p| p.0).collect();
        w(
            &mut stdout,
            format!("| pool | {} | belady | best / belady |", names.join(" | ")),
        )?;
        w(
            &mut stdout,
            format!("|---|{}---|---|", "---|".repeat(names.len())),
        )?;
    }
    for &slots in &args.pool {
        if slots == 0 {
            return Err("--pool: a pool holds at least 1 expert".into());
        }
        let rates: Vec<(String, f64)> = POLICIES
            .iter()
            .map(|(name, p)| {
                (
                    name.to_string(),
                    simulate(&trace, slots, Some(*p)).miss_rate(),
                )
            })
            .collect();
        let opt = simulate(&trace, slots, None).miss_rate();
        let best = rates.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
        let ratio = if opt > 0.0 { best / opt } else { 1.0 };
        if args.json {
            let mut obj =
                serde_json::json!({ "pool": slots, "belady": opt, "best_over_belady": ratio });
            for (name, rate) in &rates {
                obj[name.as_str()] = serde_json::json!(rate);
            }
            w(&mut stdout, obj.to_string())?;
        } else {
            let cells: Vec<String> = rates.iter().map(|r| format!("{:.3}", r.1)).collect();
            w(
                &mut stdout,
                format!(
                    "| {slots} | {} | {opt:.3} | {ratio:.2} |",
                    cells.join(" | ")
                ),
            )?;
        }
    }
    Ok(())
}
