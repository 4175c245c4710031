#[derive(clap::Args)]
pub struct Args {
    /// Model: a path to a .gguf file or a short name (gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b).
    #[arg(short = 'm', long)]
    pub model: String,
}

pub fn run(args: Args) -> Result<(), String> {
    let _ = crate::models::resolve(&args.model)?;
    Err("'tokenize' is not built yet".into())
}
