//! `smolrun perplexity`: llama-perplexity's measurement (chunks of `-c` tokens, each scored on
//! its second half, BOS first when the model uses one) plus bits per byte, which, unlike
//! perplexity, compares models with different tokenizers.

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
    /// Score only the first N chunks [default: every whole chunk of the text], as
    /// llama-perplexity's --chunks.
    #[arg(long)]
    pub chunks: Option<usize>,
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

    // llama-perplexity drops one trailing newline before tokenizing (its -f reader does)
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let tokens = engine.tokenize(text, true, false);
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
    let n_chunks = match args.chunks {
        Some(0) => return Err("--chunks 0: score at least one chunk".into()),
        Some(n) => n.min(tokens.len() / n_ctx),
        None => tokens.len() / n_ctx,
    };
    let scored_tokens = &tokens[..n_chunks * n_ctx];
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
    let mut nll_sum = 0f64;
    let mut n_scored = 0usize;
    let chunk_last = n_ctx - 1;
    let (tokenizer, model, state, store, par) = engine.parts();
    let result = model::perplexity(
        model,
        state,
        store,
        par,
        scored_tokens,
        n_ctx,
        bos,
        |i, nll| {
            n_bytes += tokenizer.token_bytes(tokens[i]).len();
            nll_sum += nll;
            n_scored += 1;
            if i % n_ctx == chunk_last {
                eprint!(
                    "[{}]{:.4},",
                    i / n_ctx + 1,
                    (nll_sum / n_scored as f64).exp()
                );
                let _ = std::io::stderr().flush();
            }
        },
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!();
    let bpb = model::bits_per_byte(result.nll_sum, n_bytes);
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "PPL = {:.4} over {} scored tokens in {} chunks; bits per byte = {:.4} ({n_bytes} bytes)",
        result.ppl, result.n_scored, result.n_chunks, bpb
    );
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
                "chunks": result.n_chunks,
                "n_ctx": n_ctx,
            })
        );
    }
    Ok(())
}
