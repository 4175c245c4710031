//! `smolrun bench`: prompt and generation speed and peak memory, measured the way llama-bench
//! measures them, so the two can be run side by side (tools/bench-vs-llama.py) and compared as
//! a ratio. pp: one batch of `-p` prompt tokens from an empty cache; tg: `-n` tokens decoded one
//! at a time from an empty cache. Token ids are fixed pseudo-random ids (llama-bench also uses
//! random tokens): speed does not depend on which tokens they are. One warm-up run, then `-r`
//! timed repetitions; the median is reported. With `--draft` (speculative decoding), tg is
//! instead `-n` tokens generated greedily after an 8-token prompt (drafts are only accepted
//! where they are the model's own choice, which random tokens never are), with tokens per pass
//! and the drafts' acceptance beside the speed. `-d N` (llama-bench's `-d`) runs each test on
//! top of N tokens already in the context (processed untimed before it): how speed falls as a
//! chat grows, which a KV cache makes it do and a recurrent layer's fixed state does not.

use crate::args::Globals;
use smolrun_core::sampler::SamplerParams;
use smolrun_engine::{Engine, GenerateOptions};
use std::ops::ControlFlow;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Model: a path to a .gguf file or a short name (gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b).
    #[arg(short = 'm', long)]
    pub model: String,
    /// Prompt tokens processed in one batch (0 skips the prompt test).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 128)]
    pub n_prompt: usize,
    /// Tokens generated one by one (0 skips the generation test).
    #[arg(short = 'n', long = "n-gen", default_value_t = 64)]
    pub n_gen: usize,
    /// Tokens already in the context before each test (processed untimed first), as
    /// llama-bench's -d: the speed at that depth of a chat.
    #[arg(short = 'd', long = "n-depth", default_value_t = 0)]
    pub n_depth: usize,
    /// Threads [default: the fastest cores].
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub mem: crate::args::MemoryArgs,
    /// Timed repetitions (after one warm-up run); the median is reported.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub reps: usize,
    /// Print one JSON object on the last line.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub draft: crate::args::DraftArgs,
}

/// Deterministic, spread-out token ids below `n_vocab` (a linear congruential walk).
fn bench_tokens(n: usize, n_vocab: usize, seed: u64) -> Vec<u32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) % n_vocab as u64) as u32
        })
        .collect()
}

/// Puts `n` untimed tokens in the context, in prompt batches, before a test at depth `n`.
fn fill_context(engine: &mut Engine, n: usize, n_vocab: usize) -> Result<(), String> {
    if n > 0 {
        engine.prefill(&bench_tokens(n, n_vocab, 99))?;
    }
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

pub fn run(args: Args, globals: &Globals) -> Result<(), String> {
    if args.reps == 0 {
        return Err("-r 0: run at least one repetition".into());
    }
    if args.n_prompt == 0 && args.n_gen == 0 {
        return Err("-p 0 and -n 0: nothing to measure".into());
    }
    if args.n_depth > 0 && args.draft.options().choice != smolrun_engine::DraftChoice::Off {
        return Err("-d with --draft: drafted generation runs from an empty context".into());
    }
    let n_ctx = args.n_depth + args.n_prompt.max(args.n_gen + GEN_PROMPT).max(1);
    let options =
        globals.engine_options(Some(n_ctx), args.threads, &args.mem, Some(&args.draft))?;
    let mut engine = Engine::open(&args.model, &options)?;
    let path = engine.path.clone();
    let threads = args.threads.unwrap_or_else(crate::args::default_threads);
    let drafting = engine.drafting();
    let n_vocab = engine.tokenizer.n_vocab().min(engine.n_vocab());
    let mut spec = smolrun_engine::speculative::SpecStats::default();
    let kernels = engine.kernels_name();

    let mut pp = Vec::new();
    let mut tg = Vec::new();
    // Flash reads over the timed generation runs (streamed weights only).
    let (mut tg_read, mut tg_seconds) = (0u64, 0.0);
    // The expert pager's counts over the timed generation runs (paged experts only).
    let mut tg_moe: Option<smolrun_core::model::pager::MoeStats> = None;
    for rep in 0..=args.reps {
        let timed = rep > 0;
        if args.n_prompt > 0 {
            let prompt = bench_tokens(args.n_prompt, n_vocab, 7 + rep as u64);
            engine.reset();
            fill_context(&mut engine, args.n_depth, n_vocab)?;
            let t = Instant::now();
            engine.prefill(&prompt)?;
            if timed {
                pp.push(args.n_prompt as f64 / t.elapsed().as_secs_f64());
            }
        }
        if args.n_gen > 0 {
            let tokens = bench_tokens(args.n_gen, n_vocab, 1000 + rep as u64);
            engine.reset();
            fill_context(&mut engine, args.n_depth, n_vocab)?;
            let read_before = engine.stream_bytes_read();
            let moe_before = engine.moe_stats();
            let t = Instant::now();
            let elapsed = match drafting {
                None => {
                    for &tok in &tokens {
                        engine.decode(tok)?;
                    }
                    t.elapsed().as_secs_f64()
                }
                Some(_) => {
                    let gen = generate(&mut engine, &tokens[..GEN_PROMPT], args.n_gen)?;
                    if timed {
                        spec.passes += gen.spec.passes;
                        spec.drafted += gen.spec.drafted;
                        spec.accepted += gen.spec.accepted;
                    }
                    gen.gen_time.as_secs_f64()
                }
            };
            if timed {
                tg_seconds += elapsed;
                tg_read += engine.stream_bytes_read() - read_before;
                if let (Some(now), Some(before)) = (engine.moe_stats(), moe_before) {
                    let run = now.since(&before);
                    tg_moe = Some(tg_moe.map_or(run, |sum| sum.plus(&run)));
                }
                tg.push(args.n_gen as f64 / elapsed);
            }
        }
    }
    let (pp_tok_s, tg_tok_s) = (median(pp), median(tg));
    let depth = match args.n_depth {
        0 => String::new(),
        d => format!(" @ d{d}"),
    };
    // The prompt runs between generation runs read too: count the generation runs alone.
    let stream = engine.stream_report(tg_read, args.n_gen * args.reps, tg_seconds);
    let moe = tg_moe.and_then(|m| engine.moe_report(&m, args.n_gen * args.reps));
    let peak_rss_mb =
        smolrun_linux::LinuxMemory::new().peak_used_bytes() as f64 / (1024.0 * 1024.0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    println!(
        "| model | threads | kernels | test | t/s (median of {}) |",
        args.reps
    );
    println!("|---|---|---|---|---|");
    if args.n_prompt > 0 {
        println!(
            "| {name} | {threads} | {kernels} | pp{}{depth} | {pp_tok_s:.2} |",
            args.n_prompt
        );
    }
    if args.n_gen > 0 {
        println!(
            "| {name} | {threads} | {kernels} | tg{}{depth} | {tg_tok_s:.2} |",
            args.n_gen
        );
    }
    println!("peak RSS: {peak_rss_mb:.1} MB");
    if let Some(d) = &drafting {
        println!(
            "draft: {d} | {} of {} drafted tokens accepted | {:.2} tokens per pass",
            spec.accepted,
            spec.drafted,
            spec.tokens_per_pass(args.n_gen * args.reps).unwrap_or(1.0)
        );
    }
    if let Some(report) = &stream {
        println!("{}", report.line());
    }
    if let Some(report) = &moe {
        println!("{}", report.line());
    }
    if args.json {
        let mut out = serde_json::json!({
                "model": name,
                "threads": threads,
                "n_prompt": args.n_prompt,
                "n_gen": args.n_gen,
                "n_depth": args.n_depth,
                "reps": args.reps,
                "pp_tok_s": pp_tok_s,
                "tg_tok_s": tg_tok_s,
                "peak_rss_mb": peak_rss_mb,
                "kernels": kernels,
                "kv_cache_type": engine.options().kv_type().map_or("?", |t| t.name()),
        });
        if let Some(d) = &drafting {
            out["draft"] = d.clone().into();
            out["draft_accept_rate"] = spec.accept_rate().into();
            out["tokens_per_pass"] = spec.tokens_per_pass(args.n_gen * args.reps).into();
        }
        if let Some(report) = &stream {
            report.add_to(&mut out);
        }
        if let Some(report) = &moe {
            report.add_to(&mut out);
        }
        println!("{out}");
    }
    Ok(())
}

/// Prompt tokens before a drafted tg run.
const GEN_PROMPT: usize = 8;

/// `n` tokens generated greedily after `prompt` from an empty cache (end-of-generation tokens
/// banned, so every run generates all `n`).
fn generate(
    engine: &mut Engine,
    prompt: &[u32],
    n: usize,
) -> Result<smolrun_engine::Generation, String> {
    engine.reset();
    let mut sampler = engine.sampler(SamplerParams::greedy())?;
    for id in 0..engine.tokenizer.n_vocab() as u32 {
        if engine.tokenizer.is_eog(id) {
            sampler.ban(id);
        }
    }
    let options = GenerateOptions {
        max_tokens: Some(n),
        ..GenerateOptions::default()
    };
    let gen = engine.generate_with(prompt, &mut sampler, options, None, &mut |_| {
        ControlFlow::Continue(())
    })?;
    Ok(gen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
    }

    #[test]
    fn bench_tokens_are_in_range_and_repeatable() {
        let a = bench_tokens(500, 1000, 3);
        assert!(a.iter().all(|&t| t < 1000));
        assert_eq!(a, bench_tokens(500, 1000, 3));
        assert_ne!(a, bench_tokens(500, 1000, 4));
    }
}
