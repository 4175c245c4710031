#[derive(clap::Subcommand)]
pub enum GgufCommand {
    /// Print metadata and the tensor table, like gguf-dump.
    Info {
        /// Path to a .gguf file or a short model name.
        file: String,
    },
}

pub fn run(c: GgufCommand) -> Result<(), String> {
    match c {
        GgufCommand::Info { file } => {
            let _ = crate::models::resolve(&file)?;
            Err("'gguf info' is not built yet".into())
        }
    }
}
