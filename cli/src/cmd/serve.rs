//! `smolrun serve`: the model as an OpenAI-compatible server with a live chat page at `/`.

use crate::serve::{self, backend::Backend, fake::FakeBackend, ServeConfig};
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// Model: a path to a .gguf file or a short name (gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b).
    #[arg(short = 'm', long, required_unless_present = "fake_backend")]
    pub model: Option<String>,
    /// Address to listen on. The default answers only this machine; 0.0.0.0 opens the server
    /// to the network (then consider --api-key).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// TCP port (0 picks a free one; the address is printed on start).
    #[arg(long, default_value_t = 8090)]
    pub port: u16,
    /// Context length in tokens (prompt plus answer).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 2048)]
    pub ctx: usize,
    /// Require 'Authorization: Bearer KEY' on /v1/* (the page asks for it).
    #[arg(long)]
    pub api_key: Option<String>,
    /// Requests that may wait while one is generating; more get 503.
    #[arg(long, default_value_t = 8)]
    pub queue: usize,
    /// Compute threads (default: all cores).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Tests only: serve a deterministic fake model that echoes the prompt.
    #[arg(long, hide = true)]
    pub fake_backend: bool,
    /// Tests only: milliseconds the fake model spends per token.
    #[arg(long, hide = true, default_value_t = 0)]
    pub fake_token_ms: u64,
}

pub fn run(args: Args) -> Result<(), String> {
    if args.ctx < 16 {
        return Err(format!(
            "-c {} is too small; use at least 16 tokens",
            args.ctx
        ));
    }
    let config = ServeConfig {
        host: args.host.clone(),
        port: args.port,
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        queue: args.queue,
    };
    if args.fake_backend {
        let (n_ctx, delay) = (args.ctx, Duration::from_millis(args.fake_token_ms));
        return serve::run(config, move || {
            Ok(Box::new(FakeBackend::new(n_ctx, delay)) as Box<dyn Backend>)
        });
    }
    let model_name = args.model.as_deref().unwrap_or_default();
    let path = crate::models::resolve(model_name)?;
    let _ = (path, args.threads);
    // The seam: once cli/src/engine.rs exists, load the model here (on the generation
    // thread, inside the closure) and wrap it in a `Backend` impl.
    Err("'serve' needs the engine, which is not wired in yet; \
         `smolrun serve --fake-backend` runs the server with a fake model"
        .into())
}
