//! `smolrun gguf moefy`: turn a dense Qwen2/Qwen2.5 model into an ordinary `qwen2moe` GGUF
//! (Qwen1.5-MoE's architecture, which llama.cpp runs too) whose experts route on real hidden
//! states, a workload for the expert pager that random weights cannot give.
//!
//! ```text
//! calibration text -> dense forward pass, tapped at every layer:
//!     x_t   = ffn_norm output            [T x n_embd]
//!     h_t   = silu(gate x_t) * up x_t    [T x n_ff]   one value per FFN neuron
//! per layer:
//!     shared expert  = the S neurons of largest mean |h|
//!     experts 0..E   = the other neurons in E equal clusters: balanced k-means on each neuron's
//!                      normalised |h| profile over the T tokens (neurons that fire together)
//!     router W       = ridge least squares  x_t -> (sum of |h| over each expert's neurons)
//!                      scaled down so its softmax is within 2^-10 of uniform (see below)
//!     gate/up_exps   = the neurons' rows of ffn_gate / ffn_up, bytes as they are
//!     down_exps      = the neurons' columns of ffn_down, times E, requantized (Q8_0 or F16)
//! ```
//! Why scaled: llama.cpp's qwen2moe weights each chosen expert by its softmax probability over
//! all E experts, unnormalised, where the dense FFN weighs every neuron by 1. A router whose
//! logits differ by at most 2^-10 keeps the choice (top-k of the same ranking) and makes every
//! probability 1/E within 0.1 %; the down projections carry the factor E back. With all experts
//! used (K = E) the expert part is then the dense FFN to that 0.1 %, and F16 (exact for E a power
//! of two) or Q8_0 rounding.
//!
//! The shared expert cannot be left out (qwen2moe requires one) nor gated off by a zero gate:
//! llama.cpp computes its sigmoid as silu(g)/g, NaN at g = 0. Its gate is a ridge fit of a
//! constant 1 on the calibration tokens, times [`SHARED_GATE_GAIN`]: a logit near 64, so the
//! sigmoid is 1 to f32 precision wherever the fit stays above a quarter; the smallest gate met
//! on the calibration text is reported.
//!
//! Everything but the FFN tensors is copied byte for byte.

use smolrun_core::gguf::writer::{GgufWriter, MetaValue};
use smolrun_core::gguf::{Gguf, TensorInfo};
use smolrun_core::model::Model;
use smolrun_core::quant::{self, GgmlType};
use smolrun_core::tokenizer::Tokenizer;
use smolrun_engine::Engine;
use smolrun_linux::MappedFile;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[derive(clap::Args, Debug, Clone)]
pub struct MoefyArgs {
    /// Dense qwen2 model (path or short name).
    #[arg(short = 'm', long)]
    pub model: String,
    /// Output .gguf file (architecture qwen2moe).
    #[arg(short = 'o', long)]
    pub out: PathBuf,
    /// Routed experts per layer (E).
    #[arg(long)]
    pub experts: usize,
    /// Experts each token uses (K).
    #[arg(long)]
    pub used: usize,
    /// Neurons of the shared expert (a multiple of 32, at least 32: qwen2moe requires one).
    #[arg(long, default_value_t = 256)]
    pub shared_ff: usize,
    /// Calibration text files or directories [default: tools/head-corpus of the source tree].
    #[arg(long, num_args = 1..)]
    pub calib: Vec<PathBuf>,
    /// Calibration tokens (spread over the calibration files in windows of 256).
    #[arg(long, default_value_t = 2048)]
    pub tokens: usize,
    /// Type of the requantized down projections: q8_0 or f16.
    #[arg(long, default_value = "q8_0")]
    pub down_type: String,
    /// What "fire together" means for the clustering: `correlation` (each token weighed the
    /// same, profiles centred) or `magnitude` (cosine of the raw |h| profiles, which big tokens
    /// dominate).
    #[arg(long, default_value = "correlation")]
    pub profile: String,
    /// Threads for the calibration pass [default: one per core].
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
}

/// Calibration windows: long enough for real context, short enough to spread over the files.
const WINDOW: usize = 256;
/// The shared expert's gate: a ridge fit of the constant 1, times this (sigmoid(16) is 1 - 1e-7).
const SHARED_GATE_GAIN: f64 = 64.0;
/// The router's largest logit spread on the calibration tokens (see the module docs).
const ROUTER_SPREAD: f64 = 1.0 / 1024.0;
/// Balanced k-means rounds.
const KMEANS_ROUNDS: usize = 10;
/// Refuse a calibration capture larger than this (f32 activations of every layer in RAM).
const MAX_CAPTURE_BYTES: usize = 6 << 30;

/// What the tap collects: per layer, the ffn_norm output and the FFN activations of the first
/// `cap` tokens. A `fn` tap has no state of its own, hence the static.
struct Capture {
    cap: usize,
    x: Vec<Vec<f32>>,
    h: Vec<Vec<f32>>,
    n_embd: usize,
    n_ff: usize,
}

static CAPTURE: Mutex<Option<Capture>> = Mutex::new(None);

fn capture_tap(name: &str, layer: usize, v: &[f32]) {
    let mut guard = CAPTURE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(c) = guard.as_mut() else { return };
    let (buf, width) = match name {
        "ffn_norm" => (&mut c.x, c.n_embd),
        "ffn_act" => (&mut c.h, c.n_ff),
        _ => return,
    };
    if let Some(b) = buf.get_mut(layer) {
        if b.len() < c.cap * width && v.len() == width {
            b.extend_from_slice(v);
        }
    }
}

/// One layer's plan: which neurons go where, and the router and shared gate.
struct LayerPlan {
    shared: Vec<usize>,
    /// `experts[e]`: expert e's neurons, ascending.
    experts: Vec<Vec<usize>>,
    /// `[E][n_embd]` router rows.
    router: Vec<f32>,
    shared_gate: Vec<f32>,
}

pub fn moefy(a: &MoefyArgs, globals: &crate::args::Globals) -> Result<(), String> {
    let path = crate::args::resolve(&a.model)?;
    if a.out == path {
        return Err("-o must not be the input file".into());
    }
    let file = MappedFile::open(&path)?;
    let bytes = file.bytes();
    let g = Gguf::parse(bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let p = path.display();
    let arch = g.architecture().map_err(|e| format!("{p}: {e}"))?;
    if arch != "qwen2" {
        return Err(format!(
            "{p}: architecture is '{arch}', expected 'qwen2' (moefy maps Qwen2/Qwen2.5's attention \
             unchanged onto qwen2moe)"
        ));
    }
    let down_type = match a.down_type.to_ascii_lowercase().as_str() {
        "q8_0" => GgmlType::Q8_0,
        "f16" => GgmlType::F16,
        other => return Err(format!("--down-type {other}: expected q8_0 or f16")),
    };
    let hp = smolrun_core::model::HParams::from_gguf(&g).map_err(|e| format!("{p}: {e}"))?;
    let (n_layer, n_embd, n_ff) = (hp.n_layer, hp.n_embd, hp.n_ff);
    let (n_exp, k, n_sh) = (a.experts, a.used, a.shared_ff);
    let correlation = match a.profile.as_str() {
        "correlation" => true,
        "magnitude" => false,
        other => {
            return Err(format!(
                "--profile {other}: expected correlation or magnitude"
            ))
        }
    };
    check_sizes(n_ff, n_exp, k, n_sh)?;
    let n_fe = (n_ff - n_sh) / n_exp;

    // Calibration: the dense model's own hidden states on real text.
    let capture_bytes = a
        .tokens
        .checked_mul(n_layer * (n_ff + n_embd) * 4)
        .filter(|&b| b <= MAX_CAPTURE_BYTES)
        .ok_or_else(|| {
            format!(
                "--tokens {}: the capture would exceed {} GB; use fewer tokens",
                a.tokens,
                MAX_CAPTURE_BYTES >> 30
            )
        })?;
    eprintln!(
        "moefy: {p}: {n_layer} layers, n_ff {n_ff} -> shared {n_sh} + {n_exp} experts of {n_fe}, \
         {k} used; capturing {} tokens ({} MB)",
        a.tokens,
        capture_bytes >> 20
    );
    let tokens = calibration_tokens(&g, &a.calib, a.tokens)?;
    let threads = a.threads.unwrap_or_else(crate::args::default_threads);
    let (xs, hs, n_tok) = capture(&path, globals, &tokens, n_layer, n_embd, n_ff, threads)?;

    let mut plans = Vec::with_capacity(n_layer);
    let mut stats = Stats::default();
    for l in 0..n_layer {
        let plan = plan_layer(
            &xs[l],
            &hs[l],
            n_tok,
            n_embd,
            n_ff,
            n_exp,
            k,
            n_sh,
            correlation,
            &mut stats,
        );
        eprint!("\rmoefy: planned layer {}/{n_layer}", l + 1);
        plans.push(plan);
    }
    eprintln!();
    drop((xs, hs));
    stats.report(n_exp, k);

    write_moe(&g, bytes, &a.out, &plans, n_exp, k, n_fe, n_sh, down_type)?;

    // Read it back as smolrun would run it.
    let check = MappedFile::open(&a.out)?;
    let out = a.out.display();
    let g2 = Gguf::parse(check.bytes()).map_err(|e| format!("{out}: {e}"))?;
    Model::load(&g2).map_err(|e| format!("{out}: written, but does not load: {e}"))?;
    eprintln!(
        "moefy: wrote {out} ({} MB)",
        check.bytes().len() as u64 / 1_000_000
    );
    Ok(())
}

fn check_sizes(n_ff: usize, n_exp: usize, k: usize, n_sh: usize) -> Result<(), String> {
    if !(2..=4096).contains(&n_exp) {
        return Err(format!("--experts {n_exp}: expected 2..=4096"));
    }
    if k < 1 || k > n_exp || k > smolrun_core::model::moe_ffn::MAX_EXPERTS_USED {
        return Err(format!(
            "--used {k}: expected 1..={}",
            n_exp.min(smolrun_core::model::moe_ffn::MAX_EXPERTS_USED)
        ));
    }
    if n_sh < 32 || !n_sh.is_multiple_of(32) || n_sh >= n_ff {
        return Err(format!(
            "--shared-ff {n_sh}: expected a multiple of 32, at least 32 and below n_ff ({n_ff})"
        ));
    }
    let rest = n_ff - n_sh;
    if !rest.is_multiple_of(n_exp) || !(rest / n_exp).is_multiple_of(32) {
        return Err(format!(
            "n_ff {n_ff} less --shared-ff {n_sh} leaves {rest} neurons, which {n_exp} experts \
             cannot share in multiples of 32 (the down projection's Q8_0 blocks); pick --experts \
             and --shared-ff so that (n_ff - shared) / experts is a multiple of 32"
        ));
    }
    Ok(())
}

/// Up to `n` tokens of the calibration files, in windows of [`WINDOW`] spread evenly over
/// each file, the files taking turns.
fn calibration_tokens(g: &Gguf, calib: &[PathBuf], n: usize) -> Result<Vec<Vec<u32>>, String> {
    let tok = Tokenizer::from_gguf(g).map_err(|e| format!("tokenizer: {e}"))?;
    let files = super::head::corpus_files(calib)?;
    let mut streams = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f)
            .map_err(|e| format!("cannot read calibration file {}: {e}", f.display()))?;
        let mut ids = Vec::new();
        tok.encode(&text, false, false, &mut ids);
        streams.push(ids);
    }
    let n_windows = n.div_ceil(WINDOW);
    let per_file = n_windows.div_ceil(files.len());
    let mut windows = Vec::new();
    let mut total = 0;
    'outer: for w in 0..per_file {
        for s in &streams {
            if total >= n {
                break 'outer;
            }
            let stride = (s.len() / per_file).max(1);
            let start = w * stride;
            let end = (start + WINDOW).min(s.len()).min(start + n - total);
            if start < end {
                windows.push(s[start..end].to_vec());
                total += end - start;
            }
        }
    }
    if total == 0 {
        return Err("the calibration text has no tokens: give text files with --calib".into());
    }
    Ok(windows)
}

/// Runs the dense model over the windows with the tap set; returns per layer x (T x n_embd),
/// h (T x n_ff), and T.
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn capture(
    path: &Path,
    globals: &crate::args::Globals,
    windows: &[Vec<u32>],
    n_layer: usize,
    n_embd: usize,
    n_ff: usize,
    threads: usize,
) -> Result<(Vec<Vec<f32>>, Vec<Vec<f32>>, usize), String> {
    let cap: usize = windows.iter().map(Vec::len).sum();
    *CAPTURE.lock().unwrap_or_else(|e| e.into_inner()) = Some(Capture {
        cap,
        x: (0..n_layer)
            .map(|_| Vec::with_capacity(cap * n_embd))
            .collect(),
        h: (0..n_layer)
            .map(|_| Vec::with_capacity(cap * n_ff))
            .collect(),
        n_embd,
        n_ff,
    });
    let options = smolrun_engine::EngineOptions {
        n_ctx: Some(WINDOW),
        threads: Some(threads),
        ..globals.base_options()
    };
    let mut engine = Engine::open(&path.to_string_lossy(), &options)?;
    let (_, model, state, store, par) = engine.parts();
    state.tap = Some(capture_tap);
    let mut done = 0;
    for w in windows {
        state.reset();
        model
            .forward_batch_all(state, store, par, w, 0, w.len(), &mut |_, _| {})
            .map_err(|e| format!("{}: {e}", path.display()))?;
        done += w.len();
        eprint!("\rmoefy: calibration {done}/{cap} tokens");
    }
    eprintln!();
    state.tap = None;
    let c = CAPTURE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .ok_or("the calibration capture vanished")?;
    let complete =
        c.x.iter().all(|x| x.len() == cap * n_embd) && c.h.iter().all(|h| h.len() == cap * n_ff);
    if !complete {
        return Err(format!(
            "{}: the forward pass did not report ffn_norm and ffn_act for all {cap} tokens of \
             every layer (is every layer a dense SiLU FFN?)",
            path.display()
        ));
    }
    Ok((c.x, c.h, cap))
}

/// Figures over all layers, for the report.
#[derive(Default)]
struct Stats {
    /// Per layer, how often each expert is chosen by the derived router on the calibration
    /// tokens.
    counts: Vec<Vec<u64>>,
    /// Chosen experts that are among the K of largest true activation mass.
    oracle_hits: u64,
    chosen: u64,
    /// Share of the FFN's activation mass (sum |h|) in the chosen experts plus the shared one.
    mass_kept: f64,
    mass_total: f64,
    min_shared_gate: f64,
    shared_gate_below_099: u64,
    gate_count: u64,
}

impl Stats {
    fn report(&self, n_exp: usize, k: usize) {
        let top = n_exp.div_ceil(10);
        let mut top_share = 0.0;
        for c in &self.counts {
            let mut c = c.clone();
            c.sort_unstable_by(|a, b| b.cmp(a));
            let all: u64 = c.iter().sum();
            top_share += c[..top].iter().sum::<u64>() as f64 / all.max(1) as f64;
        }
        top_share /= self.counts.len().max(1) as f64;
        eprintln!(
            "moefy: on held-out calibration tokens (the last eighth): the top {top} of {n_exp} experts (10 %) take {:.1} % \
             of the choices (uniform: {:.1} %); {:.1} % of the router's choices are among the {k} \
             experts of largest activation mass; chosen + shared experts hold {:.1} % of the \
             FFN's activation mass; shared gate min {:.4}, below 0.99 at {:.2} % of tokens",
            100.0 * top_share,
            100.0 * top as f64 / n_exp as f64,
            100.0 * self.oracle_hits as f64 / self.chosen.max(1) as f64,
            100.0 * self.mass_kept / self.mass_total.max(1e-30),
            self.min_shared_gate,
            100.0 * self.shared_gate_below_099 as f64 / self.gate_count.max(1) as f64,
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn plan_layer(
    x: &[f32],
    h: &[f32],
    n_tok: usize,
    n_embd: usize,
    n_ff: usize,
    n_exp: usize,
    k: usize,
    n_sh: usize,
    correlation: bool,
    stats: &mut Stats,
) -> LayerPlan {
    // Each neuron's |h| over the tokens (a row per neuron), and its mean.
    let mut profile = vec![0f32; n_ff * n_tok];
    let mut mass = vec![0f64; n_ff];
    for t in 0..n_tok {
        let ht = &h[t * n_ff..(t + 1) * n_ff];
        // Every token weighs the same in the profiles: a few tokens (a window's first, with its
        // massive activations) would otherwise make every neuron's profile look alike.
        let token_mean = ht.iter().map(|v| v.abs() as f64).sum::<f64>() / n_ff as f64;
        let inv = if !correlation {
            1.0
        } else if token_mean > 0.0 {
            1.0 / token_mean
        } else {
            0.0
        };
        for (i, v) in ht.iter().enumerate() {
            profile[i * n_tok + t] = (v.abs() as f64 * inv) as f32;
            mass[i] += v.abs() as f64;
        }
    }
    // The shared expert: the neurons of largest mass.
    let mut by_mass: Vec<usize> = (0..n_ff).collect();
    by_mass.sort_by(|&a, &b| mass[b].total_cmp(&mass[a]).then(a.cmp(&b)));
    let mut shared: Vec<usize> = by_mass[..n_sh].to_vec();
    shared.sort_unstable();
    let mut rest: Vec<usize> = by_mass[n_sh..].to_vec();
    rest.sort_unstable();
    for &i in &rest {
        // Centred, then unit length: cosine similarity becomes the correlation of two neurons'
        // activity, which is what "fire together" means.
        let p = &mut profile[i * n_tok..(i + 1) * n_tok];
        if correlation {
            let mean = p.iter().map(|&v| v as f64).sum::<f64>() / n_tok as f64;
            p.iter_mut().for_each(|v| *v = (*v as f64 - mean) as f32);
        }
        normalise(p);
    }
    let experts = balanced_kmeans(&profile, n_tok, &rest, n_exp);

    // Targets: each expert's activation mass per token; the shared gate's constant logit.
    let mut targets = vec![0f64; n_tok * (n_exp + 1)];
    for t in 0..n_tok {
        let ht = &h[t * n_ff..(t + 1) * n_ff];
        for (e, members) in experts.iter().enumerate() {
            targets[t * (n_exp + 1) + e] = members.iter().map(|&i| ht[i].abs() as f64).sum();
        }
        targets[t * (n_exp + 1) + n_exp] = 1.0;
    }
    // w: [n_embd][E + 1], the router's columns and the shared gate's. The one written is fitted
    // on every token; the figures of the report come from one fitted without the last eighth of
    // the tokens, on those (with fewer tokens than dimensions, a fit is perfect on its own data).
    let w = ridge(x, n_tok, n_embd, &targets, n_exp + 1);
    let n_fit = n_tok - n_tok / 8;
    let m = n_exp + 1;
    let w_fit = ridge(
        &x[..n_fit * n_embd],
        n_fit,
        n_embd,
        &targets[..n_fit * m],
        m,
    );
    let logit = |w: &[f64], t: usize, e: usize| -> f64 {
        let xt = &x[t * n_embd..(t + 1) * n_embd];
        (0..n_embd).map(|j| xt[j] as f64 * w[j * m + e]).sum()
    };
    let mut spread = 0f64;
    for t in 0..n_tok {
        let l: Vec<f64> = (0..n_exp).map(|e| logit(&w, t, e)).collect();
        let (lo, hi) = l
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
        spread = spread.max(hi - lo);
    }
    let mut layer_counts = vec![0u64; n_exp];
    for t in n_fit..n_tok {
        let l: Vec<f64> = (0..n_exp).map(|e| logit(&w_fit, t, e)).collect();
        let chosen = top_k(&l, k);
        let truth: Vec<f64> = (0..n_exp).map(|e| targets[t * (n_exp + 1) + e]).collect();
        let best = top_k(&truth, k);
        for &e in &chosen {
            layer_counts[e] += 1;
            stats.oracle_hits += best.contains(&e) as u64;
            stats.mass_kept += truth[e];
        }
        stats.chosen += k as u64;
        let ht = &h[t * n_ff..(t + 1) * n_ff];
        let shared_mass: f64 = shared.iter().map(|&i| ht[i].abs() as f64).sum();
        stats.mass_kept += shared_mass;
        stats.mass_total += shared_mass + truth.iter().sum::<f64>();
        let gate = 1.0 / (1.0 + (-SHARED_GATE_GAIN * logit(&w_fit, t, n_exp)).exp());
        if stats.gate_count == 0 || gate < stats.min_shared_gate {
            stats.min_shared_gate = gate;
        }
        stats.shared_gate_below_099 += (gate < 0.99) as u64;
        stats.gate_count += 1;
    }
    stats.counts.push(layer_counts);
    let scale = if spread > 0.0 {
        ROUTER_SPREAD / spread
    } else {
        1.0
    };
    let mut router = vec![0f32; n_exp * n_embd];
    for e in 0..n_exp {
        for j in 0..n_embd {
            router[e * n_embd + j] = (w[j * (n_exp + 1) + e] * scale) as f32;
        }
    }
    let shared_gate = (0..n_embd)
        .map(|j| (SHARED_GATE_GAIN * w[j * (n_exp + 1) + n_exp]) as f32)
        .collect();
    LayerPlan {
        shared,
        experts,
        router,
        shared_gate,
    }
}

fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|&a| a as f64 * a as f64).sum::<f64>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|a| *a = (*a as f64 / norm) as f32);
    }
}

/// The `k` indices of largest value (the lower index on a tie), largest first.
fn top_k(v: &[f64], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

/// Splits `neurons` into `n_exp` clusters of equal size by cosine similarity of their profiles
/// (rows of `profile`, unit length): k-means whose assignment step gives the most similar
/// (neuron, centroid) pairs first, each cluster taking neurons until it is full.
fn balanced_kmeans(
    profile: &[f32],
    n_tok: usize,
    neurons: &[usize],
    n_exp: usize,
) -> Vec<Vec<usize>> {
    let size = neurons.len() / n_exp;
    let row = |i: usize| &profile[i * n_tok..(i + 1) * n_tok];
    // Start from neurons spread over the index range: deterministic, and FFN neuron order
    // carries no meaning.
    let mut centroids: Vec<Vec<f32>> = (0..n_exp)
        .map(|e| row(neurons[e * neurons.len() / n_exp]).to_vec())
        .collect();
    let mut clusters = vec![Vec::new(); n_exp];
    for _ in 0..KMEANS_ROUNDS {
        let mut pairs: Vec<(f32, u32, u32)> = Vec::with_capacity(neurons.len() * n_exp);
        for (n, &i) in neurons.iter().enumerate() {
            let r = row(i);
            for (e, c) in centroids.iter().enumerate() {
                let sim: f32 = r.iter().zip(c).map(|(a, b)| a * b).sum();
                pairs.push((sim, n as u32, e as u32));
            }
        }
        pairs.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let mut taken = vec![false; neurons.len()];
        clusters.iter_mut().for_each(Vec::clear);
        for &(_, n, e) in &pairs {
            let (n, e) = (n as usize, e as usize);
            if !taken[n] && clusters[e].len() < size {
                taken[n] = true;
                clusters[e].push(neurons[n]);
            }
        }
        for (c, members) in centroids.iter_mut().zip(&clusters) {
            c.iter_mut().for_each(|v| *v = 0.0);
            for &i in members {
                c.iter_mut().zip(row(i)).for_each(|(a, b)| *a += b);
            }
            normalise(c);
        }
    }
    clusters.iter_mut().for_each(|c| c.sort_unstable());
    clusters
}

/// Ridge least squares: W = (X^T X + lambda I)^-1 X^T Y, X `[n x d]` (f32), Y `[n x m]`; W is
/// `[d x m]`. lambda is 1e-3 of X^T X's mean diagonal: enough to make a rank-deficient X (fewer
/// tokens than dimensions) solvable, small against real directions.
fn ridge(x: &[f32], n: usize, d: usize, y: &[f64], m: usize) -> Vec<f64> {
    let mut a = vec![0f64; d * d];
    let mut b = vec![0f64; d * m];
    for t in 0..n {
        let xt = &x[t * d..(t + 1) * d];
        let yt = &y[t * m..(t + 1) * m];
        for i in 0..d {
            let xi = xt[i] as f64;
            let row = &mut a[i * d..i * d + i + 1];
            for (j, r) in row.iter_mut().enumerate() {
                *r += xi * xt[j] as f64;
            }
            for (bj, &yj) in b[i * m..(i + 1) * m].iter_mut().zip(yt) {
                *bj += xi * yj;
            }
        }
    }
    let mean_diag = (0..d).map(|i| a[i * d + i]).sum::<f64>() / d as f64;
    let lambda = 1e-3 * mean_diag.max(1e-12);
    for i in 0..d {
        a[i * d + i] += lambda;
    }
    cholesky_solve(&mut a, d, &mut b, m);
    b
}

/// Solves A X = B in place for a symmetric positive definite `[d x d]` A (only its lower
/// triangle is read; it becomes L of A = L L^T) and `[d x m]` B (becomes X).
fn cholesky_solve(a: &mut [f64], d: usize, b: &mut [f64], m: usize) {
    for j in 0..d {
        let mut s = a[j * d + j];
        for p in 0..j {
            s -= a[j * d + p] * a[j * d + p];
        }
        // The ridge term keeps s positive; guard against rounding all the same.
        let ljj = s.max(1e-300).sqrt();
        a[j * d + j] = ljj;
        for i in j + 1..d {
            let mut s = a[i * d + j];
            for p in 0..j {
                s -= a[i * d + p] * a[j * d + p];
            }
            a[i * d + j] = s / ljj;
        }
    }
    // L Y = B, then L^T X = Y.
    for i in 0..d {
        for p in 0..i {
            let l = a[i * d + p];
            for c in 0..m {
                b[i * m + c] -= l * b[p * m + c];
            }
        }
        let l = a[i * d + i];
        b[i * m..(i + 1) * m].iter_mut().for_each(|v| *v /= l);
    }
    for i in (0..d).rev() {
        for p in i + 1..d {
            let l = a[p * d + i];
            for c in 0..m {
                b[i * m + c] -= l * b[p * m + c];
            }
        }
        let l = a[i * d + i];
        b[i * m..(i + 1) * m].iter_mut().for_each(|v| *v /= l);
    }
}

/// Where each output tensor's bytes come from.
enum Source {
    Copy {
        offset: u64,
        len: u64,
    },
    Router(usize),
    SharedGate(usize),
    /// Rows of a dense ffn_gate / ffn_up, chosen by the plan: (layer, tensor, routed or shared).
    Rows(usize, usize, bool),
    /// Columns of the dense ffn_down: (layer, tensor, routed or shared).
    DownCols(usize, usize, bool),
}

/// `blk.{l}.{what}` -> (l, what).
fn block_tensor(name: &str) -> Option<(usize, &str)> {
    let rest = name.strip_prefix("blk.")?;
    let (l, what) = rest.split_once('.')?;
    Some((l.parse().ok()?, what))
}

#[allow(clippy::too_many_arguments)]
fn write_moe(
    g: &Gguf,
    bytes: &[u8],
    out: &Path,
    plans: &[LayerPlan],
    n_exp: usize,
    k: usize,
    n_fe: usize,
    n_sh: usize,
    down_type: GgmlType,
) -> Result<(), String> {
    let err = |e: smolrun_core::gguf::GgufError| format!("{}: {e}", out.display());
    let mut w = GgufWriter::new().with_version(g.version).map_err(err)?;
    for entry in &g.metadata {
        let key = match entry.key.strip_prefix("qwen2.") {
            Some(rest) => format!("qwen2moe.{rest}"),
            None => entry.key.to_string(),
        };
        let value = match entry.key {
            "general.architecture" => MetaValue::from("qwen2moe"),
            _ => MetaValue::from(entry.value),
        };
        w.add(&key, value).map_err(err)?;
    }
    w.add("qwen2moe.expert_count", n_exp as u32).map_err(err)?;
    w.add("qwen2moe.expert_used_count", k as u32).map_err(err)?;
    w.add("qwen2moe.expert_feed_forward_length", n_fe as u32)
        .map_err(err)?;
    w.add("qwen2moe.expert_shared_feed_forward_length", n_sh as u32)
        .map_err(err)?;

    let mut sources = Vec::new();
    let mut add = |w: &mut GgufWriter, name: &str, ty: GgmlType, dims: &[u64], s: Source| {
        w.add_tensor(name, ty, dims).map_err(err)?;
        sources.push(s);
        Ok::<(), String>(())
    };
    let n_e = n_exp as u64;
    for (ti, t) in g.tensors.iter().enumerate() {
        let ffn = block_tensor(t.name).filter(|(l, _)| *l < plans.len());
        let n_embd = t.dims[0];
        match ffn {
            Some((l, "ffn_gate.weight")) => {
                let b = |s: &str| format!("blk.{l}.{s}");
                add(
                    &mut w,
                    &b("ffn_gate_inp.weight"),
                    GgmlType::F32,
                    &[n_embd, n_e],
                    Source::Router(l),
                )?;
                add(
                    &mut w,
                    &b("ffn_gate_exps.weight"),
                    t.ggml_type,
                    &[n_embd, n_fe as u64, n_e],
                    Source::Rows(l, ti, true),
                )?;
                add(
                    &mut w,
                    &b("ffn_gate_inp_shexp.weight"),
                    GgmlType::F32,
                    &[n_embd],
                    Source::SharedGate(l),
                )?;
                add(
                    &mut w,
                    &b("ffn_gate_shexp.weight"),
                    t.ggml_type,
                    &[n_embd, n_sh as u64],
                    Source::Rows(l, ti, false),
                )?;
            }
            Some((l, "ffn_up.weight")) => {
                let b = |s: &str| format!("blk.{l}.{s}");
                add(
                    &mut w,
                    &b("ffn_up_exps.weight"),
                    t.ggml_type,
                    &[n_embd, n_fe as u64, n_e],
                    Source::Rows(l, ti, true),
                )?;
                add(
                    &mut w,
                    &b("ffn_up_shexp.weight"),
                    t.ggml_type,
                    &[n_embd, n_sh as u64],
                    Source::Rows(l, ti, false),
                )?;
            }
            Some((l, "ffn_down.weight")) => {
                let b = |s: &str| format!("blk.{l}.{s}");
                let n_out = t.dims[1];
                add(
                    &mut w,
                    &b("ffn_down_exps.weight"),
                    down_type,
                    &[n_fe as u64, n_out, n_e],
                    Source::DownCols(l, ti, true),
                )?;
                add(
                    &mut w,
                    &b("ffn_down_shexp.weight"),
                    down_type,
                    &[n_sh as u64, n_out],
                    Source::DownCols(l, ti, false),
                )?;
            }
            _ => add(
                &mut w,
                t.name,
                t.ggml_type,
                t.shape(),
                Source::Copy {
                    offset: t.offset,
                    len: t.n_bytes,
                },
            )?,
        }
    }

    let tmp = out.with_extension("gguf.partial");
    let dst = File::create(&tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let mut f = BufWriter::with_capacity(1 << 20, dst);
    let io = |e: std::io::Error| format!("writing {}: {e}", tmp.display());
    f.write_all(&w.header()).map_err(io)?;
    let zeros = vec![0u8; w.alignment() as usize];
    let mut written = 0u64;
    for (i, s) in sources.iter().enumerate() {
        let start = w.tensor_offset(i);
        f.write_all(&zeros[..(start - written) as usize])
            .map_err(io)?;
        let data = tensor_bytes(g, bytes, s, plans, down_type, n_exp)?;
        if data.len() as u64 != w.tensor_bytes(i) {
            return Err(format!(
                "moefy: tensor {i} has {} bytes, the header says {} (a bug)",
                data.len(),
                w.tensor_bytes(i)
            ));
        }
        f.write_all(&data).map_err(io)?;
        written = start + data.len() as u64;
    }
    f.write_all(&zeros[..(w.data_len() - written) as usize])
        .map_err(io)?;
    let dst = f.into_inner().map_err(|e| io(e.into_error()))?;
    dst.sync_all().map_err(io)?;
    drop(dst);
    std::fs::rename(&tmp, out).map_err(|e| format!("cannot rename {}: {e}", tmp.display()))
}

fn tensor_bytes(
    g: &Gguf,
    bytes: &[u8],
    s: &Source,
    plans: &[LayerPlan],
    down_type: GgmlType,
    n_exp: usize,
) -> Result<Vec<u8>, String> {
    let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let dense = |ti: usize| -> &TensorInfo { &g.tensors[ti] };
    Ok(match *s {
        Source::Copy { offset, len } => bytes[offset as usize..(offset + len) as usize].to_vec(),
        Source::Router(l) => f32s(&plans[l].router),
        Source::SharedGate(l) => f32s(&plans[l].shared_gate),
        Source::Rows(l, ti, routed) => {
            let t = dense(ti);
            let data = g.tensor_data(t);
            let rb = t.row_bytes();
            let neurons: Vec<usize> = match routed {
                true => plans[l].experts.concat(),
                false => plans[l].shared.clone(),
            };
            let mut v = Vec::with_capacity(neurons.len() * rb);
            for i in neurons {
                v.extend_from_slice(&data[i * rb..(i + 1) * rb]);
            }
            v
        }
        Source::DownCols(l, ti, routed) => {
            let t = dense(ti);
            let data = g.tensor_data(t);
            let (n_in, n_out) = (t.dims[0] as usize, t.dims[1] as usize);
            let rb = t.row_bytes();
            let qerr = |e| format!("{}: {e}", t.name);
            let mut full = vec![0f32; n_in * n_out];
            for r in 0..n_out {
                quant::dequantize_row(
                    t.ggml_type,
                    &data[r * rb..(r + 1) * rb],
                    &mut full[r * n_in..(r + 1) * n_in],
                )
                .map_err(qerr)?;
            }
            // Routed experts carry the factor E their ~1/E router probability takes away.
            let (groups, scale) = match routed {
                true => (plans[l].experts.clone(), n_exp as f32),
                false => (vec![plans[l].shared.clone()], 1.0),
            };
            let mut v = Vec::new();
            let mut col = Vec::new();
            for members in &groups {
                let orb = quant::row_bytes(down_type, members.len()).map_err(qerr)?;
                let mut q = vec![0u8; orb];
                for r in 0..n_out {
                    col.clear();
                    col.extend(members.iter().map(|&i| full[r * n_in + i] * scale));
                    quant::quantize_row(down_type, &col, &mut q).map_err(qerr)?;
                    v.extend_from_slice(&q);
                }
            }
            v
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ridge_recovers_an_exact_linear_map() {
        // y = x W for a known W [3 x 2], on 6 tokens spanning the space: the ridge term (1e-3
        // of the mean diagonal) moves the solution by well under 1 %.
        let x: Vec<f32> = vec![
            1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0,
            1.0,
        ];
        let w = [2.0, -1.0, 0.5, 3.0, -4.0, 0.25];
        let y: Vec<f64> = (0..6)
            .flat_map(|t| {
                let xt = &x[t * 3..t * 3 + 3];
                (0..2).map(move |c| (0..3).map(|j| xt[j] as f64 * w[j * 2 + c]).sum::<f64>())
            })
            .collect();
        let got = ridge(&x, 6, 3, &y, 2);
        for (g, w) in got.iter().zip(w) {
            assert!((g - w).abs() < 0.01 * w.abs().max(1.0), "{got:?} vs {w:?}");
        }
    }

    #[test]
    fn balanced_kmeans_finds_equal_clusters_of_co_active_neurons() {
        // 8 neurons over 4 tokens: 0, 2, 5, 7 fire on tokens 0-1, the others on tokens 2-3.
        let n_tok = 4;
        let mut profile = vec![0f32; 8 * n_tok];
        for i in 0..8 {
            let first = if [0, 2, 5, 7].contains(&i) { 0 } else { 2 };
            profile[i * n_tok + first] = 0.6;
            profile[i * n_tok + first + 1] = 0.8;
        }
        let neurons: Vec<usize> = (0..8).collect();
        let mut clusters = balanced_kmeans(&profile, n_tok, &neurons, 2);
        clusters.sort();
        assert_eq!(clusters, vec![vec![0, 2, 5, 7], vec![1, 3, 4, 6]]);
    }

    #[test]
    fn sizes_that_break_the_q8_0_blocks_are_refused() {
        assert!(check_sizes(4864, 8, 2, 256).is_ok());
        assert!(check_sizes(4864, 16, 2, 256).is_ok());
        assert!(check_sizes(4864, 16, 2, 0).is_err());
        assert!(check_sizes(4864, 7, 2, 256).is_err());
        assert!(check_sizes(4864, 8, 9, 256).is_err());
    }
}
