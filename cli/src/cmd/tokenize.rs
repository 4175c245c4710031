//! `smolrun tokenize`: the token ids of a text, printed like `llama-tokenize --ids`.

use smolrun_core::gguf::Gguf;
use smolrun_core::tokenizer::Tokenizer;
use smolrun_linux::MappedFile;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Model: a path to a .gguf file or a short name (gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b).
    #[arg(short = 'm', long)]
    pub model: String,
    /// The text to tokenize.
    #[arg(
        short = 'p',
        long,
        conflicts_with = "file",
        required_unless_present = "file"
    )]
    pub prompt: Option<String>,
    /// Read the text from a file instead (its bytes as they are; need not be valid UTF-8).
    #[arg(short = 'f', long)]
    pub file: Option<std::path::PathBuf>,
    /// Print a JSON array of ids.
    #[arg(long)]
    pub json: bool,
    /// Print each token's id and text, one per line, instead of the id list.
    #[arg(long, conflicts_with = "json")]
    pub pieces: bool,
    /// Do not add BOS/EOS even where the model's metadata asks for them.
    #[arg(long)]
    pub no_bos: bool,
    /// Tokenize control-token texts such as <|im_start|> as plain text.
    #[arg(long)]
    pub no_parse_special: bool,
    /// Print the tokenizer's load and encode times to stderr.
    #[arg(long)]
    pub timing: bool,
}

pub fn run(args: Args) -> Result<(), String> {
    let path = crate::args::resolve(&args.model)?;
    let text: Vec<u8> = match (&args.prompt, &args.file) {
        (Some(p), _) => p.as_bytes().to_vec(),
        (None, Some(f)) => {
            std::fs::read(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?
        }
        (None, None) => return Err("give the text with -p TEXT or -f FILE".into()),
    };

    let file = MappedFile::open(&path)?;
    let gguf = Gguf::parse(file.bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    let t0 = Instant::now();
    let tokenizer = Tokenizer::from_gguf(&gguf).map_err(|e| format!("{}: {e}", path.display()))?;
    let load = t0.elapsed();

    let t1 = Instant::now();
    let mut ids = Vec::new();
    tokenizer.encode_bytes(&text, !args.no_bos, !args.no_parse_special, &mut ids);
    let encode = t1.elapsed();

    if args.json {
        println!(
            "{}",
            serde_json::to_string(&ids).map_err(|e| e.to_string())?
        );
    } else if args.pieces {
        for &id in &ids {
            let piece = String::from_utf8_lossy(tokenizer.token_bytes(id));
            println!("{id:6} -> '{piece}'");
        }
    } else {
        let list: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
        println!("[{}]", list.join(", "));
    }
    if args.timing {
        eprintln!(
            "tokenizer: {} tokens in the vocabulary, {:.1} MB, loaded in {:.1} ms; \
             {} bytes -> {} tokens in {:.2} ms",
            tokenizer.n_vocab(),
            tokenizer.bytes_used() as f64 / 1e6,
            load.as_secs_f64() * 1e3,
            text.len(),
            ids.len(),
            encode.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
