//! `smolrun perplexity`: llama-perplexity's measurement (chunks of `-c` tokens, each scored on
//! its second half, BOS first when the model uses one) plus bits per byte, which, unlike
//! perplexity, compares models with different tokenizers.
//!
//! On a model with a pruned head, a token the head dropped has probability 0: the model cannot
//! write it, only spell the same text with ids it kept (" miller" as " mill" + "er"). So the
//! text is scored the way the pruned model would have to write it: every dropped token is
//! re-spelled with kept ids, and the model is scored on that stream. The model itself chooses
//! each spelling, as it would when generating: of the ways to write the token in kept pieces
//! (up to one piece more than the greedy longest-prefix spelling, `--greedy-respell`), the one
//! it finds most likely after the text before it. Bits per byte then covers the same text as
//! the full model's and is directly comparable (an upper bound of the pruned model's cost: the
//! other spellings of the same text only add probability). PPL is per token of the re-spelled
//! stream, so it is not comparable with the full model's; the share of dropped tokens is
//! printed beside it. `--join-pieces` scores what `run --join-pieces` generates: the model reads
//! a dropped token instead of its pieces once they are complete.
//! `--no-respell` scores the stock tokenization instead: PPL over the kept targets, and bits per
//! byte charging each byte of a dropped target 8 bits (what a byte costs with no knowledge).

use crate::args::Globals;
use smolrun_core::model;
use smolrun_core::tokenizer::Tokenizer;
use smolrun_engine::Engine;
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
    /// Score windows of -c tokens every N tokens, each on its last N targets, as
    /// llama-perplexity's --ppl-stride (e.g. -c 512 --stride 256), and the rest of the text in a
    /// last window: every token after the first window's head is scored once, so a pruned head's
    /// re-spelled text and the stock text are scored on the same bytes (the chunk method scores
    /// every other half chunk).
    #[arg(long)]
    pub stride: Option<usize>,
    /// Threads for the forward pass [default: one per core].
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub mem: crate::args::MemoryArgs,
    /// Print {"ppl":..,"bits_per_byte":..,"tokens":..} as the last line.
    #[arg(long)]
    pub json: bool,
    /// Pruned head: score the stock tokenization (dropped targets counted apart, 8 bits per
    /// byte) instead of re-spelling dropped tokens with kept ids.
    #[arg(long)]
    pub no_respell: bool,
    /// Pruned head: re-spell each dropped token greedily (longest kept prefix first) instead of
    /// letting the model choose among its spellings.
    #[arg(long, conflicts_with = "no_respell")]
    pub greedy_respell: bool,
    /// Pruned head: the model reads a dropped token instead of the pieces that spelled it, once
    /// they are complete, as `run --join-pieces` generates (see `head::join_pieces`).
    #[arg(long, conflicts_with = "no_respell")]
    pub join_pieces: bool,
}

/// Replaces every token that is not in `kept` (sorted) by kept ids spelling the same text: the
/// longest kept vocabulary entry that prefixes the rest of its text, repeatedly; a character
/// with no kept entry goes out as byte tokens (`<0xNN>`, always kept). Returns the new stream
/// and how many tokens were re-spelled.
pub fn respell_dropped(tokens: &[u32], tok: &Tokenizer, kept: &[u32]) -> (Vec<u32>, usize) {
    let is_kept = |id: u32| kept.binary_search(&id).is_ok();
    let mut out = Vec::with_capacity(tokens.len());
    let mut n_respelled = 0;
    for &t in tokens {
        if is_kept(t) {
            out.push(t);
            continue;
        }
        n_respelled += 1;
        let mut rest = tok.token_text(t).unwrap_or(&[]);
        while !rest.is_empty() {
            let longest_kept = (1..=rest.len()).rev().find_map(|n| {
                tok.token_id(&rest[..n])
                    .filter(|&id| is_kept(id))
                    .map(|id| (n, id))
            });
            if let Some((n, id)) = longest_kept {
                out.push(id);
                rest = &rest[n..];
                continue;
            }
            // SentencePiece's byte fallback: one character as its UTF-8 bytes, <0xNN> each
            // (its space mark U+2581 is the byte 0x20).
            let n = utf8_len(rest[0]).min(rest.len());
            let space_mark = "\u{2581}".as_bytes();
            let bytes: &[u8] = if rest.starts_with(space_mark) {
                b" "
            } else {
                &rest[..n]
            };
            for &b in bytes {
                if let Some(id) = tok.token_id(format!("<0x{b:02X}>").as_bytes()) {
                    out.push(id);
                }
            }
            rest = &rest[n..];
        }
    }
    (out, n_respelled)
}

/// Tokens of left context the model reads to choose a dropped token's spelling.
const SPELLING_CONTEXT: usize = 256;
/// Spellings tried per dropped token, at most.
const MAX_SPELLINGS: usize = 32;

/// Ways to write `text` (a dropped token's vocabulary text) as kept ids, in at most
/// `max_pieces` pieces; longest first pieces first, so the greedy spelling comes first.
fn kept_spellings(
    text: &[u8],
    tok: &Tokenizer,
    is_kept: &dyn Fn(u32) -> bool,
    max_pieces: usize,
) -> Vec<Vec<u32>> {
    fn walk(
        rest: &[u8],
        tok: &Tokenizer,
        is_kept: &dyn Fn(u32) -> bool,
        max_pieces: usize,
        pieces: &mut Vec<u32>,
        out: &mut Vec<Vec<u32>>,
    ) {
        if rest.is_empty() {
            out.push(pieces.clone());
            return;
        }
        if pieces.len() == max_pieces || out.len() == MAX_SPELLINGS {
            return;
        }
        for n in (1..=rest.len()).rev() {
            if let Some(id) = tok.token_id(&rest[..n]).filter(|&id| is_kept(id)) {
                pieces.push(id);
                walk(&rest[n..], tok, is_kept, max_pieces, pieces, out);
                pieces.pop();
            }
        }
    }
    let mut out = Vec::new();
    walk(text, tok, is_kept, max_pieces, &mut Vec::new(), &mut out);
    out
}

/// Like [`respell_dropped`], but the model chooses each dropped token's spelling: every way to
/// write it with kept ids in up to one piece more than the greedy spelling (at most
/// [`MAX_SPELLINGS`]) is scored by the pruned model itself after the [`SPELLING_CONTEXT`]
/// tokens before it, together with the token that follows, and the cheapest is kept. This is
/// what the pruned model would write there (it samples pieces, not tokenizer output), and any
/// single spelling's probability is a lower bound of the text's, so the bits per byte stay an
/// upper bound of the pruned model's cost. The greedy spelling is always among those tried.
pub fn respell_by_model(
    engine: &mut Engine,
    tokens: &[u32],
    kept: &[u32],
    join: bool,
) -> Result<(Vec<u32>, usize), String> {
    let path = engine.path.clone();
    let n_ctx = engine.n_ctx();
    let (tok, model, state, store, par) = engine.parts();
    let is_kept = |id: u32| kept.binary_search(&id).is_ok();
    let bos = tok.bos().filter(|_| tok.adds_bos());
    let mut out: Vec<u32> = Vec::with_capacity(tokens.len());
    let mut n_respelled = 0;
    let mut first_logits = Vec::new();
    let mut context = Vec::with_capacity(SPELLING_CONTEXT + 1);
    for (i, &t) in tokens.iter().enumerate() {
        if is_kept(t) {
            out.push(t);
            continue;
        }
        n_respelled += 1;
        let (greedy, _) = respell_dropped(&[t], tok, kept);
        let text = tok.token_text(t).unwrap_or(&[]);
        let mut spellings = kept_spellings(text, tok, &is_kept, greedy.len() + 1);
        if !spellings.contains(&greedy) {
            // It needed byte tokens, which the search does not try.
            spellings.insert(0, greedy.clone());
        }
        if spellings.len() < 2 {
            out.extend_from_slice(&greedy);
            continue;
        }
        // Without joining, the token after the pieces reads them, so it counts too.
        let after = match tokens.get(i + 1) {
            Some(&n) if !join && is_kept(n) => Some(n),
            _ => None,
        };
        // The context and the longest spelling after it must fit in the model's context
        // (a small -c leaves less than SPELLING_CONTEXT tokens of it).
        let longest = spellings.iter().map(Vec::len).max().unwrap_or(1);
        let room = SPELLING_CONTEXT.min(n_ctx.saturating_sub(longest + 2));
        context.clear();
        let from = out.len().saturating_sub(room);
        if from > 0 || out.first() != bos.as_ref() {
            context.extend(bos);
        }
        context.extend_from_slice(&out[from..]);
        if context.is_empty() {
            // Nothing to predict the first token from: no choice to make.
            out.extend_from_slice(&greedy);
            continue;
        }
        let err = |e: smolrun_core::model::ModelError| format!("{}: {e}", path.display());
        state.reset();
        let logits = model
            .forward_batch(state, store, par, &context, 0)
            .map_err(err)?;
        first_logits.clear();
        first_logits.extend_from_slice(logits);
        let first_lse = smolrun_core::math::log_sum_exp(&first_logits);
        let mut best: Option<(f64, usize)> = None;
        for (s, spelling) in spellings.iter().enumerate() {
            let mut nll = first_lse - first_logits[spelling[0] as usize] as f64;
            // Piece p runs at position context.len() + p and predicts the next piece (the last
            // one, without joining, the token after the pieces).
            for (p, &piece) in spelling.iter().enumerate() {
                if best.is_some_and(|(b, _)| nll >= b) {
                    break;
                }
                let Some(target) = spelling
                    .get(p + 1)
                    .copied()
                    .or(after.filter(|_| p + 1 == spelling.len()))
                else {
                    break;
                };
                let logits = model
                    .forward(state, store, par, piece, context.len() + p)
                    .map_err(err)?;
                nll += smolrun_core::math::log_sum_exp(logits) - logits[target as usize] as f64;
            }
            if best.is_none_or(|(b, _)| nll < b) {
                best = Some((nll, s));
            }
        }
        let chosen = best.map_or(&greedy, |(_, s)| &spellings[s]);
        out.extend_from_slice(chosen);
    }
    Ok((out, n_respelled))
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xF0.. => 4,
        0xE0.. => 3,
        0xC0.. => 2,
        _ => 1,
    }
}

pub fn run(args: Args, globals: &Globals) -> Result<(), String> {
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
    let options = globals.engine_options(Some(args.ctx), args.threads, &args.mem, None)?;
    let mut engine = Engine::open(&args.model, &options)?;
    let path = engine.path.clone();

    // llama-perplexity drops one trailing newline before tokenizing (its -f reader does)
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let stock_tokens = engine.tokenize(text, true, false);
    let (tokens, n_respelled) = match &engine.model.head_ids {
        Some(kept) if !args.no_respell && args.greedy_respell => {
            respell_dropped(&stock_tokens, &engine.tokenizer, kept)
        }
        Some(kept) if !args.no_respell => {
            let kept = kept.clone();
            respell_by_model(&mut engine, &stock_tokens, &kept, args.join_pieces)?
        }
        _ => (stock_tokens.clone(), 0),
    };
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
    if let Some(stride) = args.stride {
        if stride == 0 || stride >= n_ctx {
            return Err(format!(
                "--stride {stride}: give 1 to {} (less than -c {n_ctx})",
                n_ctx - 1
            ));
        }
    }
    let (n_chunks, scored_tokens) = match (args.chunks, args.stride) {
        (Some(0), _) => return Err("--chunks 0: score at least one chunk".into()),
        (n, Some(stride)) => {
            let all = model::strided_windows(tokens.len(), n_ctx, stride).count();
            match n {
                // Fewer windows than there are: the first N, all whole, so the text is cut
                // where the N-th ends.
                Some(n) if n < all => (n, &tokens[..n_ctx + (n - 1) * stride]),
                _ => (all, &tokens[..]),
            }
        }
        (n, None) => {
            let n = n.map_or(tokens.len() / n_ctx, |n| n.min(tokens.len() / n_ctx));
            (n, &tokens[..n * n_ctx])
        }
    };
    match args.stride {
        Some(stride) => {
            // Whole windows end every `stride` tokens after the first; past that, a tail window.
            let tail = !(scored_tokens.len() - n_ctx).is_multiple_of(stride);
            eprintln!(
                "perplexity: {} tokens, {n_chunks} windows of {n_ctx} every {stride}, scoring the \
                 last {stride} of each{}",
                tokens.len(),
                if tail {
                    " (the last window: the rest of the text)"
                } else {
                    ""
                }
            )
        }
        None => eprintln!(
            "perplexity: {} tokens, {n_chunks} chunks of {n_ctx}, scoring the second half of each",
            tokens.len()
        ),
    }

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
    // The last target of each chunk or window (and of the text, where a strided run's last
    // window ends), where the running perplexity is printed.
    let step = args.stride.unwrap_or(n_ctx);
    let n_scored_tokens = scored_tokens.len();
    let window_end = |i: usize| {
        i + 1 == n_scored_tokens || (i + 1 >= n_ctx && (i + 1 - n_ctx).is_multiple_of(step))
    };
    let mut n_printed = 0;
    let moe_before = engine.moe_stats();
    let (tokenizer, model, state, store, par) = engine.parts();
    let join_with_head = |context: &[u32], next: u32| {
        let kept = model.head_ids.as_deref()?;
        model::head::join_pieces(tokenizer, kept, context, next)
    };
    let join: Option<&model::perplexity::JoinPieces> =
        (!args.no_respell && args.join_pieces).then_some(&join_with_head);
    let on_token = |i: usize, nll: f64| {
        let bytes = tokenizer.token_bytes(tokens[i]).len();
        n_bytes += bytes;
        if nll.is_finite() {
            nll_sum += nll;
            n_scored += 1;
        } else {
            dropped_bytes += bytes;
        }
        if window_end(i) {
            n_printed += 1;
            eprint!("[{n_printed}]{:.4},", (nll_sum / n_scored as f64).exp());
            let _ = std::io::stderr().flush();
        }
    };
    let result = match args.stride {
        Some(stride) => model::perplexity_strided(
            model,
            state,
            store,
            par,
            scored_tokens,
            n_ctx,
            stride,
            bos,
            join,
            on_token,
        ),
        None => model::perplexity(
            model,
            state,
            store,
            par,
            scored_tokens,
            n_ctx,
            bos,
            join,
            on_token,
        ),
    }
    .map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!();
    let penalty_nats = (8 * dropped_bytes) as f64 * std::f64::consts::LN_2;
    let bpb = model::bits_per_byte(result.nll_sum + penalty_nats, n_bytes);
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "PPL = {:.4} over {} scored tokens in {} {}; bits per byte = {:.4} ({n_bytes} bytes)",
        result.ppl,
        result.n_scored,
        result.n_chunks,
        if args.stride.is_some() {
            "windows"
        } else {
            "chunks"
        },
        bpb
    );
    if engine.model.head_ids.is_some() {
        println!(
            "pruned head: {n_respelled} of {} text tokens ({:.2} %) are ids the head dropped, \
             re-spelled with kept ids ({} tokens scored; PPL is per token of that stream); \
             {} scored targets are dropped ids ({dropped_bytes} bytes, charged 8 bits per byte)",
            stock_tokens.len(),
            100.0 * n_respelled as f64 / stock_tokens.len() as f64,
            tokens.len(),
            result.n_dropped,
        );
    }
    eprintln!(
        "{:.1} s, {:.1} tokens/s",
        secs,
        (result.n_chunks * (n_ctx - 1)) as f64 / secs
    );
    // Experts paged: the misses over the text (each token routed once per layer).
    let moe = match (engine.moe_stats(), moe_before) {
        (Some(now), Some(before)) => {
            engine.moe_report(&now.since(&before), result.n_chunks * n_ctx)
        }
        _ => None,
    };
    if let Some(report) = &moe {
        eprintln!("{}", report.line());
    }
    if args.json {
        let mut out = serde_json::json!({
                "ppl": result.ppl,
                "bits_per_byte": bpb,
                "tokens": tokens.len(),
                "scored": result.n_scored,
                "dropped": result.n_dropped,
                "dropped_bytes": dropped_bytes,
                "respelled": n_respelled,
                "chunks": result.n_chunks,
                "n_ctx": n_ctx,
                "stride": args.stride,
        });
        if let Some(kept) = &engine.model.head_ids {
            // The stock tokenization's ids the head cannot write, whether or not they were
            // re-spelled (`--no-respell` scores them as 8 bits per byte instead).
            let outside = smolrun_core::model::head::count_outside(kept, &stock_tokens);
            out["head_rows"] = kept.len().into();
            out["outside_head"] = outside.into();
            out["outside_head_share"] = (outside as f64 / stock_tokens.len().max(1) as f64).into();
        }
        if let Some(report) = &moe {
            report.add_to(&mut out);
        }
        println!("{out}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use smolrun_core::gguf::Gguf;
    use smolrun_core::tokenizer::attr;

    #[test]
    fn respelled_tokens_are_kept_and_spell_the_same_bytes() {
        let file = smolrun_linux::MappedFile::open(&crate::test_support::gemma_path()).unwrap();
        let tok = Tokenizer::from_gguf(&Gguf::parse(file.bytes()).unwrap()).unwrap();
        // A small head: the first 3000 ids and the byte tokens.
        let kept: Vec<u32> = (0..tok.n_vocab() as u32)
            .filter(|&i| i < 3000 || tok.token_text(i).is_some_and(|t| t.starts_with(b"<0x")))
            .collect();
        let text = "The miller oiled the rattled gears; Zürich's Bäckerei sold 🥨 pretzels.";
        let mut stock = Vec::new();
        tok.encode(text, true, false, &mut stock);
        let (respelled, n) = respell_dropped(&stock, &tok, &kept);
        assert!(n >= 4, "the rare words should be dropped ({n} re-spelled)");
        assert!(respelled.len() > stock.len());
        assert!(respelled.iter().all(|id| kept.binary_search(id).is_ok()));
        let bytes = |ids: &[u32]| -> Vec<u8> {
            ids.iter()
                .flat_map(|&i| tok.token_bytes(i).to_vec())
                .collect()
        };
        assert_eq!(bytes(&respelled), bytes(&stock));
    }

    /// The model's spelling choice: kept ids only, the same bytes, each dropped token spelled
    /// by one of its spellings (the greedy one is the first tried, so it is among them).
    #[test]
    fn the_model_chooses_a_kept_spelling_of_each_dropped_token() {
        let mut engine = crate::test_support::open(&crate::test_support::gemma_path(), 256, 2);
        let tok = &engine.tokenizer;
        let kept: Vec<u32> = (0..tok.n_vocab() as u32)
            .filter(|&i| i < 3000 || tok.token_text(i).is_some_and(|t| t.starts_with(b"<0x")))
            .collect();
        let text = "The miller oiled the rattled gears, and the lantern flickered.";
        let mut stock = Vec::new();
        tok.encode(text, true, false, &mut stock);
        let is_kept = |id: u32| kept.binary_search(&id).is_ok();
        let dropped: Vec<u32> = stock.iter().copied().filter(|&t| !is_kept(t)).collect();
        for &t in &dropped {
            let (greedy, _) = respell_dropped(&[t], tok, &kept);
            let all = kept_spellings(tok.token_text(t).unwrap(), tok, &is_kept, greedy.len() + 1);
            assert!(all.iter().all(|s| s.iter().all(|&id| is_kept(id))));
            // The search tries vocabulary pieces, longest first: the greedy spelling comes
            // first unless it needed byte tokens (" oiled" as " o" + "ile" + <0x64>).
            let bytes_in_greedy = greedy
                .iter()
                .any(|&id| tok.token_attr(id) & attr::BYTE != 0);
            if !bytes_in_greedy {
                assert_eq!(all.first(), Some(&greedy), "token {t}");
            }
        }
        let bytes = |tok: &Tokenizer, ids: &[u32]| -> Vec<u8> {
            ids.iter()
                .flat_map(|&i| tok.token_bytes(i).to_vec())
                .collect()
        };
        let want = bytes(&engine.tokenizer, &stock);
        let (chosen, n) = respell_by_model(&mut engine, &stock, &kept, false).unwrap();
        assert_eq!(n, dropped.len());
        assert!(n >= 3, "the rare words should be dropped ({n} re-spelled)");
        assert!(chosen.iter().all(|&id| is_kept(id)));
        assert_eq!(bytes(&engine.tokenizer, &chosen), want);
    }
}
