//! The `smolrun` binary: one subcommand per job, each in its own module under `cmd/`.

mod chat_template;
mod cmd;
mod engine;
mod memory_guard;
mod models;
mod platform;
mod serve;

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
    /// Share of free-running chat answers that fall into a repeating loop.
    Loopcheck(cmd::loopcheck::Args),
    /// Inspect and rewrite GGUF files.
    #[command(subcommand)]
    Gguf(cmd::gguf::GgufCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(a) => cmd::run::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Chat(a) => cmd::chat::run(a),
        Command::Tokenize(a) => cmd::tokenize::run(a),
        Command::Perplexity(a) => cmd::perplexity::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Loopcheck(a) => cmd::loopcheck::run(a),
        Command::Gguf(c) => cmd::gguf::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("smolrun: {e}");
            ExitCode::FAILURE
        }
    }
}
