//! `smolrun serve`: the model as an OpenAI-compatible server with a live chat page at `/`.

use smolrun_engine::saved_state::PromptCache;
use smolrun_server::{
    self as serve, backend::Backend, engine_backend::EngineBackend, fake::FakeBackend,
    models::ModelsDir, Loader, ServeConfig,
};
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// Model: a path to a .gguf file or a short name (gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b).
    #[arg(short = 'm', long, required_unless_present_any = ["fake_backend", "models_dir"])]
    pub model: Option<String>,

    /// Serve every .gguf file of this folder, by file name: a request naming another model
    /// unloads the current one and loads it (one at a time, under the memory guard), and a
    /// model idle for its keep_alive (ollama's; 5 minutes by default) is unloaded. -m names
    /// the model loaded at start [default: the folder's first by name]
    #[arg(long = "models-dir", value_name = "DIR")]
    pub models_dir: Option<std::path::PathBuf>,
    /// Address to listen on. The default answers only this machine; 0.0.0.0 opens the server
    /// to the network (then consider --api-key).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// TCP port (0 picks a free one; the address is printed on start).
    #[arg(long, default_value_t = 8090)]
    pub port: u16,
    /// Context length in tokens, prompt plus answer [default: 4096, or the model's trained
    /// context if smaller].
    #[arg(short = 'c', long = "ctx-size")]
    pub ctx: Option<usize>,
    /// Require 'Authorization: Bearer KEY' on /v1/* (the page asks for it).
    #[arg(long)]
    pub api_key: Option<String>,
    /// Requests that may wait while one is generating; more get 503.
    #[arg(long, default_value_t = 8)]
    pub queue: usize,

    /// End an answer when the context is full instead of dropping half of what follows the
    /// system prompt (or the request's n_keep) and going on, as ollama does and llama-server
    /// with --context-shift (models with recurrent or convolution layers always end it)
    #[arg(long)]
    pub no_context_shift: bool,

    /// Folder for llama-server's /slots/0?action=save|restore (the cache saved to a file and
    /// read back, so a long prompt is not run again)
    #[arg(long, value_name = "DIR")]
    pub slot_save_path: Option<std::path::PathBuf>,

    /// Save the cache after a chat's system prompt (128 tokens or more) in this folder, keyed
    /// by the model and the prompt's tokens, and read it back for the next conversation with
    /// the same system prompt, in this run or the next, instead of running it again
    #[arg(long, value_name = "DIR")]
    pub prompt_cache: Option<std::path::PathBuf>,

    /// The prompt cache's size on flash; the least recently used files go first
    #[arg(long, value_name = "MB", default_value_t = 512)]
    pub prompt_cache_mb: u64,
    /// Compute threads [default: one per core].
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub mem: crate::args::MemoryArgs,
    #[command(flatten)]
    pub draft: crate::args::DraftArgs,
    /// Tests only: serve a deterministic fake model that echoes the prompt.
    #[arg(long, hide = true)]
    pub fake_backend: bool,
    /// Tests only: milliseconds the fake model spends per token.
    #[arg(long, hide = true, default_value_t = 0)]
    pub fake_token_ms: u64,
}

pub fn run(args: Args, globals: &crate::args::Globals) -> Result<(), String> {
    if let Some(n) = args.ctx.filter(|&n| n < 16) {
        return Err(format!("-c {n} is too small; use at least 16 tokens"));
    }
    if args.threads == Some(0) {
        return Err("-t 0: use at least one thread".into());
    }
    if let Some(dir) = &args.slot_save_path {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("--slot-save-path {}: {e}", dir.display()))?;
    }
    let options = globals.engine_options(args.ctx, args.threads, &args.mem, Some(&args.draft))?;
    let config = ServeConfig {
        host: args.host,
        port: args.port,
        api_key: args.api_key.filter(|k| !k.is_empty()),
        queue: args.queue,
        context_shift: !args.no_context_shift,
        slot_save_path: args.slot_save_path,
    };
    let prompt_cache = args.prompt_cache.map(|dir| PromptCache {
        dir,
        max_bytes: args.prompt_cache_mb << 20,
        min_tokens: 128,
    });
    let n_ctx = args.ctx;
    if args.fake_backend {
        let delay = Duration::from_millis(args.fake_token_ms);
        return serve::run(config, move || {
            let fake = FakeBackend::new(n_ctx.unwrap_or(2048), delay);
            Ok(Box::new(fake) as Box<dyn Backend>)
        });
    }
    if let Some(dir) = args.models_dir {
        let folder = ModelsDir { dir };
        folder.check()?;
        let default = match args.model {
            Some(name) => {
                folder
                    .find(&name)
                    .ok_or_else(|| {
                        format!(
                            "-m {name}: not a model of --models-dir {}",
                            folder.dir.display()
                        )
                    })?
                    .name
            }
            None => folder.list()[0].name.clone(),
        };
        let lookup = folder.clone();
        let cache = prompt_cache;
        // Each model is loaded on the generation thread, which owns it until it is unloaded.
        let loader = Loader {
            load: Box::new(move |name: &str| {
                let found = lookup
                    .find(name)
                    .ok_or_else(|| format!("model '{name}' is no longer in the folder"))?;
                let path = found.path.to_string_lossy().into_owned();
                EngineBackend::load(&path, &options)
                    .map(|b| Box::new(b.with_prompt_cache(cache.clone())) as Box<dyn Backend>)
            }),
            default,
            models_dir: Some(folder),
        };
        return serve::run_with(config, loader);
    }
    let model = args.model.unwrap_or_default();
    // The model is loaded on the generation thread, which owns it from then on.
    serve::run(config, move || {
        EngineBackend::load(&model, &options)
            .map(|b| Box::new(b.with_prompt_cache(prompt_cache)) as Box<dyn Backend>)
    })
}
