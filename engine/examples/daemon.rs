//! A router daemon's loop around the engine: load the model once, then answer each line of
//! stdin with a greedy continuation of at most N tokens, streamed to stdout.
//!
//!     cargo run --release -p smolrun-engine --example daemon -- MODEL.gguf [N]
//!
//! Errors are typed: a model that does not fit is told apart from a bad prompt, and the daemon
//! keeps serving after the latter.

use smolrun_engine::smolrun_core::sampler::SamplerParams;
use smolrun_engine::{Engine, EngineError, EngineOptions, Event, Events, GenerateOptions};
use std::io::{BufRead, Write};

fn main() -> Result<(), EngineError> {
    let mut args = std::env::args().skip(1);
    let model = args
        .next()
        .unwrap_or_else(|| "gemma-3-270m-q4_k_m.gguf".into());
    let n: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(64);
    let options = EngineOptions {
        n_ctx: Some(1024),
        // Notices ("does not fit: streamed from flash") to stderr; no progress bars.
        events: Events::new(|e| {
            if let Event::Notice(text) = e {
                eprintln!("daemon: {text}");
            }
        }),
        ..EngineOptions::default()
    };
    let mut engine = match Engine::open(&model, &options) {
        Err(EngineError::DoesNotFit {
            needed, allowed, ..
        }) => {
            eprintln!(
                "daemon: {model} needs {needed} bytes, {allowed} allowed: pick a smaller one"
            );
            std::process::exit(2);
        }
        other => other?,
    };
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let prompt = engine.tokenize(&line, true, false);
        let mut sampler = engine.sampler(SamplerParams::greedy())?;
        let limit = GenerateOptions {
            max_tokens: Some(n),
            ..GenerateOptions::default()
        };
        let result = engine.generate(&prompt, &mut sampler, limit, None, |piece| {
            print!("{piece}");
            let _ = std::io::stdout().flush();
        });
        match result {
            Ok(_) => println!(),
            Err(e @ EngineError::BadPrompt { .. }) => eprintln!("daemon: {e}"),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
