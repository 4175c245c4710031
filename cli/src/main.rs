//! The `smolrun` binary: flags to `EngineOptions` (args.rs) and one subcommand per job, each in
//! its own module under `cmd/`. The engine (smolrun-engine) and the server (smolrun-server)
//! are libraries; this crate parses arguments and prints.

mod args;
mod cmd;
mod download;

#[cfg(test)]
mod test_support {
    use smolrun_engine::{Engine, EngineOptions};
    use std::path::{Path, PathBuf};

    /// Gemma 3 270M in the model folder.
    pub fn gemma_path() -> PathBuf {
        smolrun_tests::model_path("gemma3-270m")
    }

    /// `path` opened by the engine's load sequence for `n_ctx` tokens on `threads` threads.
    pub fn open(path: &Path, n_ctx: usize, threads: usize) -> Engine {
        let options = EngineOptions {
            n_ctx: Some(n_ctx),
            threads: Some(threads),
            ..EngineOptions::default()
        };
        Engine::open(path.to_str().unwrap(), &options).unwrap()
    }
}

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "smolrun",
    version,
    about = "Run the biggest language model a small device can hold"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Folder for the repack cache (weights repacked for this CPU's kernels, mapped on later
    /// starts) [default: next to the model file].
    #[arg(long, global = true, value_name = "DIR")]
    cache_dir: Option<std::path::PathBuf>,
    /// Repack in memory at every start and write no repack cache.
    #[arg(long, global = true)]
    no_repack_cache: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt.
    Run(cmd::run::Args),
    /// Prompt and generation speed and peak memory, like llama-bench.
    Bench(cmd::bench::Args),
    /// Chat in the terminal with the model's chat template.
    Chat(cmd::chat::Args),
    /// Print the token ids of a text.
    Tokenize(cmd::tokenize::Args),
    /// Serve the model over an OpenAI-compatible HTTP API, with a live chat page at /.
    Serve(cmd::serve::Args),
    /// Perplexity and bits per byte of a text file.
    Perplexity(cmd::perplexity::Args),
    /// What a model needs on a device and what it will do there, from its header alone (a
    /// local file, a URL or a Hugging Face reference: nothing else is downloaded).
    Plan(cmd::plan::Args),
    /// The fastest file of a model that fits a device, in one streamed pass: the LM head
    /// pruned, the experts requantized and written last, a run profile in its metadata.
    Fit(cmd::fit::Args),
    /// Share of free-running chat answers that fall into a repeating loop.
    Loopcheck(cmd::loopcheck::Args),
    /// Download a GGUF model (Hugging Face org/repo:QUANT, a URL, or a short name) into the
    /// model folder; resumes a broken download.
    Pull(cmd::pull::Args),
    /// The models in the model folder.
    List(cmd::list::Args),
    /// Delete a model from the model folder.
    Rm(cmd::rm::Args),
    /// Record which experts a mixture of experts chooses, token by token, on a text.
    MoeTrace(cmd::moe_trace::TraceArgs),
    /// Replay an expert trace against pool sizes and eviction policies, Belady's optimum
    /// included.
    MoeSim(cmd::moe_trace::SimArgs),
    /// Inspect and rewrite GGUF files.
    #[command(subcommand)]
    Gguf(cmd::gguf::GgufCommand),
}

/// llama.cpp's one-dash long flags that smolrun takes as they are (clap's short flags are
/// one letter): `-ctk q8_0` is `--cache-type-k q8_0`.
fn llama_cpp_flags(arg: std::ffi::OsString) -> std::ffi::OsString {
    match arg.to_str() {
        Some("-ctk") => "--cache-type-k".into(),
        Some("-ctv") => "--cache-type-v".into(),
        _ => arg,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(std::env::args_os().map(llama_cpp_flags));
    let globals = args::Globals {
        cache_dir: match (cli.no_repack_cache, cli.cache_dir) {
            (true, _) => smolrun_engine::CacheDir::Off,
            (false, Some(dir)) => smolrun_engine::CacheDir::In(dir),
            (false, None) => smolrun_engine::CacheDir::NextToModel,
        },
    };
    let g = &globals;
    let result = match cli.command {
        Command::Run(a) => cmd::run::run(a, g),
        Command::Bench(a) => cmd::bench::run(a, g),
        Command::Chat(a) => cmd::chat::run(a, g),
        Command::Tokenize(a) => cmd::tokenize::run(a),
        Command::Perplexity(a) => cmd::perplexity::run(a, g),
        Command::Plan(a) => cmd::plan::run(a, g),
        Command::Fit(a) => cmd::fit::run(a, g),
        Command::Serve(a) => cmd::serve::run(a, g),
        Command::Loopcheck(a) => cmd::loopcheck::run(a, g),
        Command::Pull(a) => cmd::pull::run(a),
        Command::List(a) => cmd::list::run(a),
        Command::Rm(a) => cmd::rm::run(a),
        Command::MoeTrace(a) => cmd::moe_trace::trace(a, g),
        Command::MoeSim(a) => cmd::moe_trace::sim(a),
        Command::Gguf(c) => cmd::gguf::run(c, g),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("smolrun: {e}");
            ExitCode::FAILURE
        }
    }
}
