//! `smolrun perplexity`: llama-perplexity's measurement (chunks of `-c` tokens, each scored on
//! its second half, BOS first when the model uses one) plus bits per byte, which, unlike
//! perplexity, compares models with different tokenizers.
//!
//! On a model with a pruned head, a target the head dropped has probability 0. It is counted,
//! never hidden: PPL covers the targets the head can produce and the dropped ones are reported
//! beside it (count and share); bits per byte covers every scored byte, charging each byte of a
//! dropped token 8 bits, what it costs to spell out a byte with no knowledge at all, which is
//! more than a model pays for a rare word.

use crate::engine::{self, Engine};
use smolrun_core::model;
use std::io::Write;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Model: a path to a .gguf file or a short name (gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b).
    #[arg(short = 'm', long)]
    pub model: String,
    /// The text file to score.
    #[arg(short = 'f', long)]
    pub file: std::path::PathBuf,
    /// Tokens per chunk.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    pub ctx: usize,
    /// Threads for the forward pass [default: one per core].
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Print {"ppl":..,"bits_per_byte":..,"tokens":..} as the last line.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> Result<(), String> {
    let threads = args.threads.unwrap_or_else(engine::default_threads);
    if threads == 0 {
        return Err("-t 0: use at least 1 thread".into());
    }
    if args.ctx < 2 {
        return Err(format!(
            "-c {}: a chunk needs at least 2 tokens (one to read, one to score)",
            args.ctx
        ));
    }
    let text = std::fs::read(&args.file)
        .map_err(|e| format!("cannot read {}: {e}", args.file.display()))?;
    let text = String::from_utf8(text).map_err(|e| {
        format!(
            "{} is not UTF-8 text (invalid byte at offset {}); perplexity needs a text file",
            args.file.display(),
            e.utf8_error().valid_up_to()
        )
    })?;
    let (path, file) = engine::open_model(&args.model)?;
    let gguf = engine::parse_gguf(&path, &file)?;
    let mut engine = Engine::load(&path, &gguf, Some(args.ctx), threads)?;

    let tokens = engine.tokenize(&text, true, false);
    let n_ctx = args.ctx;
    if tokens.len() < 2 * n_ctx {
        return Err(format!(
            "{} is {} tokens; perplexity with -c {n_ctx} needs at least {} (two chunks, as \
             llama-perplexity): use a longer text or a smaller -c",
            args.file.display(),
            tokens.len(),
            2 * n_ctx
        ));
    }
    let n_chunks = tokens.len() / n_ctx;
    eprintln!(
        "perplexity: {} tokens, {n_chunks} chunks of {n_ctx}, scoring the second half of each",
        tokens.len()
    );

    let bos = if engine.tokenizer.adds_bos() {
        engine.tokenizer.bos()
    } else {
        None
    };
    // The model's own loop runs the chunks; we count the bytes each scored token stands for
    // and print the running perplexity after each chunk, as llama-perplexity does.
    let t0 = Instant::now();
    let mut n_bytes = 0usize;
    let mut dropped_bytes = 0usize;
    let mut nll_sum = 0f64;
    let mut n_scored = 0usize;
    let chunk_last = n_ctx - 1;
    let (tokenizer, model, state, store, par) = engine.parts();
    let result = model::perplexity(model, state, store, par, &tokens, n_ctx, bos, |i, nll| {
        let bytes = tokenizer.token_bytes(tokens[i]).len();
        n_bytes += bytes;
        if nll.is_finite() {
            nll_sum += nll;
            n_scored += 1;
        } else {
            dropped_bytes += bytes;
        }
        if i % n_ctx == chunk_last {
            eprint!(
                "[{}]{:.4},",
                i / n_ctx + 1,
                (nll_sum / n_scored as f64).exp()
            );
            let _ = std::io::stderr().flush();
        }
    })
    .map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!();
    let penalty_nats = (8 * dropped_bytes) as f64 * std::f64::consts::LN_2;
    let bpb = model::bits_per_byte(result.nll_sum + penalty_nats, n_bytes);
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "PPL = {:.4} over {} scored tokens in {} chunks; bits per byte = {:.4} ({n_bytes} bytes)",
        result.ppl, result.n_scored, result.n_chunks, bpb
    );
    if engine.model.head_ids.is_some() {
        let total = result.n_scored + result.n_dropped;
        println!(
            "pruned head: {} of {total} scored targets ({:.2} %, {dropped_bytes} bytes) are ids the              head dropped (probability 0): PPL above is over the other {}; bits per byte charges              each dropped byte 8 bits",
            result.n_dropped,
            100.0 * result.n_dropped as f64 / total.max(1) as f64,
            result.n_scored
        );
    }
    eprintln!(
        "{:.1} s, {:.1} tokens/s",
        secs,
        (result.n_chunks * (n_ctx - 1)) as f64 / secs
    );
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "ppl": result.ppl,
                "bits_per_byte": bpb,
                "tokens": tokens.len(),
                "scored": result.n_scored,
                "dropped": result.n_dropped,
                "dropped_bytes": dropped_bytes,
                "chunks": result.n_chunks,
                "n_ctx": n_ctx,
            })
        );
    }
    Ok(())
}
