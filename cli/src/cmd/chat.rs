//! `smolrun chat`: a conversation in the terminal with the model's chat template.
//!
//! Each turn renders the whole history with the template; the engine keeps the KV cache of the
//! previous turns and only runs the new tokens. Ctrl-C stops an answer and returns to the prompt;
//! `/reset` starts over; end of input (Ctrl-D) quits. A conversation that outgrows the
//! context loses its oldest turns (the system message stays), and an answer that fills it goes
//! on past the context by a context shift, as ollama's do.

use crate::args::{Globals, SamplingArgs};
use smolrun_engine::chat_template::ChatMessage;
use smolrun_engine::conversation;
use smolrun_engine::{Engine, GenerateOptions, StopReason};
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(clap::Args)]
pub struct Args {
    /// Model: a path to a .gguf file or a short name (gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b).
    #[arg(short = 'm', long)]
    pub model: String,
    /// A system message put first in the conversation.
    #[arg(long)]
    pub system: Option<String>,
    /// Longest answer in tokens (-1: until the end of the turn or a full context).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    pub n_predict: i64,
    /// Context length in tokens, for the whole conversation [default: 4096, or the model's
    /// trained context if smaller].
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
    /// End an answer when the context is full instead of dropping half of what follows the
    /// system message and going on (models with recurrent or convolution layers always end it)
    #[arg(long)]
    pub no_context_shift: bool,
}

/// Set by SIGINT; the generation loop checks it between tokens.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    // Only an atomic store: the one thing a signal handler may safely do here.
    INTERRUPTED.store(true, Ordering::Relaxed);
}

fn install_sigint_handler() -> Result<(), String> {
    // SAFETY: sigaction with a handler that only stores to an atomic; the struct is zeroed and
    // then filled as sigaction(2) describes. SA_RESTART keeps a read of stdin going when Ctrl-C
    // comes while waiting for input.
    let rc = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigint as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(format!(
            "cannot install the Ctrl-C handler: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

const HELP: &str = "Type a message and press Enter. /reset starts over, Ctrl-C stops an answer, \
                    Ctrl-D (end of input) or /exit quits.";

pub fn run(args: Args, globals: &Globals) -> Result<(), String> {
    let options = globals.engine_options(args.ctx, args.threads, &args.mem, Some(&args.draft))?;
    let mut engine = Engine::open(&args.model, &options)?;
    let path = engine.path.clone();
    let template = engine.chat_template()?;
    engine.set_join_pieces(args.sampling.join_pieces);
    let mut sampler = engine.sampler(args.sampling.params())?;
    let max_tokens = usize::try_from(args.n_predict).ok();
    install_sigint_handler()?;

    let fresh_history = || -> Vec<ChatMessage> {
        match &args.system {
            Some(s) => vec![ChatMessage::new("system", s)],
            None => Vec::new(),
        }
    };
    let mut history = fresh_history();
    eprintln!(
        "smolrun chat: {} ({}, context {} tokens, {:?} template). {HELP}",
        path.display(),
        engine.architecture(),
        engine.n_ctx(),
        template.kind()
    );

    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    let mut line = String::new();
    loop {
        print!("> ");
        let _ = stdout.flush();
        line.clear();
        let n = stdin
            .lock()
            .read_line(&mut line)
            .map_err(|e| format!("cannot read stdin: {e}"))?;
        if n == 0 {
            println!();
            return Ok(());
        }
        let message = line.trim_end_matches(['\n', '\r']);
        match message.trim() {
            "" => continue,
            "/exit" | "/quit" => return Ok(()),
            "/reset" => {
                history = fresh_history();
                engine.reset();
                sampler.reset();
                println!("(conversation reset)");
                continue;
            }
            "/help" => {
                println!("{HELP}");
                continue;
            }
            _ => {}
        }

        history.push(ChatMessage::new("user", message));
        let roles: Vec<&str> = history.iter().map(|m| m.role.as_str()).collect();
        let (n_sys, _) = conversation::turn_starts(roles.iter().copied());
        let prompt_of = |range: std::ops::Range<usize>| {
            let kept: Vec<ChatMessage> = history[..n_sys]
                .iter()
                .chain(&history[range])
                .cloned()
                .collect();
            let rendered = template.render(&kept, true)?;
            Ok::<_, String>(engine.tokenize_chat(&rendered, &template))
        };
        let fitted = match conversation::fit(&roles, engine.n_ctx(), prompt_of) {
            Ok(Ok(f)) => f,
            Ok(Err(too_long)) => {
                history.pop();
                eprintln!(
                    "smolrun: this message and the system message are {} tokens, the context \
                     holds {}: shorten it, or restart with a larger -c",
                    too_long.tokens, too_long.n_ctx
                );
                continue;
            }
            Err(e) => {
                history.pop();
                eprintln!("smolrun: {e}");
                continue;
            }
        };
        if fitted.dropped_messages > 0 {
            history.drain(n_sys..n_sys + fitted.dropped_messages);
            eprintln!(
                "(the {} oldest messages, {} tokens, no longer fit the context of {} and were \
                 left out)",
                fitted.dropped_messages,
                fitted.dropped_tokens,
                engine.n_ctx()
            );
        }
        let prompt = fitted.tokens;
        // A context shift keeps the system message's tokens.
        let n_keep = match n_sys {
            0 => 0,
            // A template that cannot render the system message alone keeps nothing.
            _ => template
                .render(&history[..n_sys], false)
                .map_or(0, |system| {
                    conversation::system_prefix(&engine.tokenize_chat(&system, &template), &prompt)
                }),
        };

        INTERRUPTED.store(false, Ordering::Relaxed);
        // Penalties look at this answer only: the prompt is full of turn markers.
        sampler.reset();
        let options = GenerateOptions {
            max_tokens,
            interrupt: Some(&INTERRUPTED),
            penalize_prompt: false,
            context_shift: (!args.no_context_shift).then_some(n_keep),
            ..GenerateOptions::default()
        };
        let (gen, text) = engine.generate(&prompt, &mut sampler, options, None, |p| {
            print!("{p}");
            let _ = std::io::stdout().flush();
        })?;
        println!();
        if gen.shifted_out > 0 {
            eprintln!(
                "(the context filled: {} tokens after the system message were shifted out)",
                gen.shifted_out
            );
        }
        match gen.stop {
            StopReason::Interrupted | StopReason::Stopped => println!("(stopped)"),
            StopReason::ContextFull => {
                println!("(the context is full: /reset to start over)")
            }
            StopReason::LowMemory => {
                let why = engine.low_memory_message().unwrap_or("memory is low");
                return Err(why.to_string());
            }
            StopReason::Length | StopReason::EndOfText => {}
        }
        eprintln!(
            "[{} tokens, {:.1} tok/s; prompt {} new tokens, {:.1} tok/s; context {}/{}]",
            gen.tokens.len(),
            gen.gen_tok_s(),
            gen.prompt_evaluated,
            gen.prompt_tok_s(),
            engine.n_cached(),
            engine.n_ctx()
        );
        history.push(ChatMessage::new("assistant", &text));
    }
}
