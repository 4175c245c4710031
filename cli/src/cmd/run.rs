//! `smolrun run`: continue a prompt. stdout gets the generated text and nothing else, as it is
//! produced; speeds go to stderr. With `--json`, stdout gets one JSON object at the end instead.

use crate::args::{Globals, SamplingArgs};
use smolrun_engine::{constrained, json_schema, Engine, GenerateOptions};
use std::io::Write;

#[derive(clap::Args)]
pub struct Args {
    /// Model: a path to a .gguf file or a short name (gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b).
    #[arg(short = 'm', long)]
    pub model: String,
    /// The prompt (raw text, no chat template; control-token texts such as <|im_start|> are parsed).
    #[arg(short = 'p', long)]
    pub prompt: String,
    /// How many tokens to generate at most (-1: until the end of text or a full context).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    pub n_predict: i64,
    /// Context length in tokens [default: 4096, or the model's trained context if smaller].
    #[arg(short = 'c', long = "ctx-size")]
    pub ctx: Option<usize>,
    /// Threads for the forward pass [default: one per core].
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub mem: crate::args::MemoryArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub draft: crate::args::DraftArgs,
    /// Print one JSON object at the end (text, tokens, prompt_tokens, speeds) instead of streaming.
    #[arg(long)]
    pub json: bool,
    /// With --json: add `logits_digest`, a hash of every logit each token was sampled from
    /// (two runs print the same one only if all their logits are bit-identical).
    #[arg(long, requires = "json")]
    pub logits_digest: bool,
    /// Constrain the output to JSON this schema accepts (the schema inline, as llama.cpp's
    /// --json-schema takes it; `{}` for any JSON object).
    #[arg(
        long = "json-schema",
        value_name = "SCHEMA",
        conflicts_with = "json_schema_file"
    )]
    pub json_schema: Option<String>,
    /// The same, the schema read from a file.
    #[arg(long = "json-schema-file", value_name = "FILE")]
    pub json_schema_file: Option<std::path::PathBuf>,
    /// Print the run state's memory plan and what its arena really holds, part by part, to
    /// stderr before generating.
    #[arg(long)]
    pub verbose: bool,
}

/// The grammar of `--json-schema` / `--json-schema-file`, if one was given.
fn schema_grammar(args: &Args) -> Result<Option<smolrun_core::grammar::Grammar>, String> {
    let (text, source) = match (&args.json_schema, &args.json_schema_file) {
        (Some(s), _) => (s.clone(), "--json-schema".to_string()),
        (None, Some(path)) => (
            std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the schema file {}: {e}", path.display()))?,
            path.display().to_string(),
        ),
        (None, None) => return Ok(None),
    };
    let schema: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("{source}: the schema is not valid JSON: {e}"))?;
    let grammar = if schema.as_object().is_some_and(|o| o.is_empty()) {
        json_schema::grammar_for_any_json()
    } else {
        json_schema::grammar_for_schema(&schema).map_err(|e| format!("{source}: {e}"))?
    };
    Ok(Some(grammar))
}

pub fn run(args: Args, globals: &Globals) -> Result<(), String> {
    if args.prompt.is_empty() {
        return Err("the prompt is empty: give the text to continue with -p TEXT".into());
    }
    let options = globals.engine_options(args.ctx, args.threads, &args.mem, Some(&args.draft))?;
    let load_start = std::time::Instant::now();
    let mut engine = Engine::open(&args.model, &options)?;
    // From opening the file until the engine can run a prompt (llama.cpp's "load time"):
    // weights are mapped, not read, so this is the header, the tokenizer and the repack.
    let load_s = load_start.elapsed().as_secs_f64();
    let grammar = schema_grammar(&args)?;
    let trie = grammar
        .as_ref()
        .map(|_| constrained::token_trie(&engine.tokenizer));
    let mut filter = match (grammar, &trie) {
        (Some(g), Some(trie)) => Some(constrained::GrammarFilter::new(
            std::sync::Arc::new(g),
            None,
            trie,
            engine.tokenizer.n_vocab(),
        )),
        _ => None,
    };
    engine.set_join_pieces(args.sampling.join_pieces);
    let drafting = engine.drafting();
    let mut sampler = engine.sampler(args.sampling.params())?;
    if args.verbose {
        eprintln!("{}", engine.arena());
        if let Some(store) = engine.store_arena() {
            eprintln!("the weights' read targets:\n{store}");
        }
    }

    let prompt = engine.tokenize(&args.prompt, true, true);
    if prompt.len() >= engine.n_ctx() {
        return Err(format!(
            "the prompt is {} tokens but the context holds {} (-c {}), which leaves no room to \
             generate: shorten the prompt or raise -c (this model was trained on up to {} tokens)",
            prompt.len(),
            engine.n_ctx(),
            engine.n_ctx(),
            engine.model.hp.n_ctx_train
        ));
    }
    let options = GenerateOptions {
        max_tokens: usize::try_from(args.n_predict).ok(),
        penalize_prompt: true,
        digest_logits: args.logits_digest,
        ..GenerateOptions::default()
    };

    let read_before = engine.stream_bytes_read();
    let moe_before = engine.moe_stats();
    let generation_start = std::time::Instant::now();
    let mut stdout = std::io::stdout().lock();
    let streaming = !args.json;
    let mut write_error = None;
    let filter_ref = filter
        .as_mut()
        .map(|f| f as &mut dyn smolrun_engine::TokenFilter);
    let (gen, text) = engine.generate(&prompt, &mut sampler, options, filter_ref, |piece| {
        if streaming && write_error.is_none() {
            if let Err(e) = stdout
                .write_all(piece.as_bytes())
                .and_then(|_| stdout.flush())
            {
                write_error = Some(e);
            }
        }
    })?;
    if let Some(e) = write_error {
        // A closed pipe (`| head`) is the reader's choice, not an error worth a message.
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(format!("cannot write to stdout: {e}"));
        }
        return Ok(());
    }

    // Flash reads per token over the whole generation, the prompt's pass included.
    let stream = engine.stream_report(
        engine.stream_bytes_read() - read_before,
        gen.tokens.len().max(1),
        generation_start.elapsed().as_secs_f64(),
    );
    let moe = match (engine.moe_stats(), moe_before) {
        (Some(now), Some(before)) => engine.moe_report(&now.since(&before), gen.tokens.len()),
        _ => None,
    };
    if args.json {
        let mut out = serde_json::json!({
            "text": text,
            "tokens": gen.tokens,
            "prompt_tokens": prompt,
            "prompt_tok_s": gen.prompt_tok_s(),
            "gen_tok_s": gen.gen_tok_s(),
            "stop": gen.stop.as_str(),
            "load_s": load_s,
            "draft": drafting,
            "passes": gen.spec.passes,
            "drafted": gen.spec.drafted,
            "draft_accept_rate": gen.spec.accept_rate(),
            "tokens_per_pass": gen.spec.tokens_per_pass(gen.tokens.len()),
        });
        if let Some(d) = gen.logits_digest {
            out["logits_digest"] = format!("{d:016x}").into();
        }
        if let Some(kept) = &engine.model.head_ids {
            // A pruned head: the prompt's ids it cannot write, and the generated text's (as the
            // stock tokenizer spells it; the model wrote those with kept pieces).
            use smolrun_core::model::head::count_outside;
            let text_tokens = engine.tokenize(&text, false, false);
            let share = |n: usize, of: usize| n as f64 / of.max(1) as f64;
            let (in_prompt, in_text) = (
                count_outside(kept, &prompt),
                count_outside(kept, &text_tokens),
            );
            out["head_rows"] = kept.len().into();
            out["prompt_outside_head"] = in_prompt.into();
            out["prompt_outside_head_share"] = share(in_prompt, prompt.len()).into();
            out["text_outside_head"] = in_text.into();
            out["text_outside_head_share"] = share(in_text, text_tokens.len()).into();
        }
        if let Some(report) = &stream {
            report.add_to(&mut out);
        }
        if let Some(report) = &moe {
            report.add_to(&mut out);
        }
        writeln!(stdout, "{out}").map_err(|e| format!("cannot write to stdout: {e}"))?;
    } else {
        let _ = writeln!(stdout);
    }
    eprintln!(
        "load: {load_s:.2} s | prompt: {} tokens, {:.1} tok/s | generated: {} tokens, {:.1} tok/s | \
         stop: {}",
        prompt.len(),
        gen.prompt_tok_s(),
        gen.tokens.len(),
        gen.gen_tok_s(),
        gen.stop.as_str()
    );
    if let Some(report) = &stream {
        eprintln!("{}", report.line());
    }
    if let Some(report) = &moe {
        eprintln!("{}", report.line());
    }
    if let Some(f) = &filter {
        // Each refused token cost one pass of the grammar over the vocabulary.
        eprintln!(
            "grammar: {} tokens checked, {} refused and drawn again from the masked logits",
            f.checked, f.refused
        );
    }
    if let (Some(draft), Some(rate), Some(per_pass)) = (
        &drafting,
        gen.spec.accept_rate(),
        gen.spec.tokens_per_pass(gen.tokens.len()),
    ) {
        eprintln!(
            "draft: {draft} | {} of {} drafted tokens accepted ({:.0} %) | {:.2} tokens per pass",
            gen.spec.accepted,
            gen.spec.drafted,
            rate * 100.0,
            per_pass
        );
    }
    if let Some(why) = engine.low_memory_message() {
        return Err(why.to_string());
    }
    Ok(())
}
