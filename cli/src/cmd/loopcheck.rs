//! `smolrun loopcheck`: how often does the model fall into a loop when it answers freely?
//!
//! Each prompt of a fixed set is answered from a fresh context with the chat template and the
//! default sampling of `smolrun chat` (repeat penalty included), up to `-n` tokens, with a fixed
//! seed per prompt so that two models or two heads are compared on the same draws. An answer is
//! looping when it contains a stretch that repeats itself (see [`find_loop`]). Small models and
//! small heads loop more; this is the number that says whether a pruned head made it worse.

use crate::args::{Globals, MemoryArgs, SamplingArgs};
use smolrun_engine::chat_template::ChatMessage;
use smolrun_engine::{Engine, GenerateOptions};

#[derive(clap::Args)]
pub struct Args {
    /// Model: a path to a .gguf file or a short name (gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b).
    #[arg(short = 'm', long)]
    pub model: String,
    /// Longest answer in tokens.
    #[arg(short = 'n', long = "n-predict", default_value_t = 400)]
    pub n_predict: usize,
    /// Threads for the forward pass [default: one per core].
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Print each answer.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Requests that invite long answers of different kinds: explanation, story, list, code,
/// translation, reasoning.
pub const PROMPTS: [&str; 16] = [
    "Explain how a refrigerator keeps food cold.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "List ten ideas for a rainy afternoon with children, with one sentence about each.",
    "Write a Python function that checks whether a string is a palindrome, and explain it.",
    "What are the main causes of the French Revolution?",
    "Describe your ideal weekend in the mountains.",
    "Give me a recipe for a simple vegetable soup.",
    "Translate into French and German: 'The train to the airport leaves every twenty minutes.'",
    "Write a poem about the sea in autumn.",
    "How does a computer store numbers? Explain binary to a twelve-year-old.",
    "Write a JavaScript function that sorts an array of objects by a date field.",
    "What should I pack for a week-long trip to a rainy city?",
    "Summarize the plot of a detective novel you invent, in one paragraph.",
    "Explain the difference between weather and climate.",
    "Write a polite email asking a neighbour to trim a tree that blocks the light.",
    "If I have 3 apples and buy twice as many, then eat 2, how many do I have? Explain step by step.",
];

/// A repeating stretch found in a token sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loop {
    /// Where the repeating stretch starts.
    pub start: usize,
    /// Length of the repeated unit in tokens.
    pub period: usize,
    /// Tokens the stretch covers (at least two copies of the unit).
    pub covered: usize,
}

/// Shortest stretch, in tokens, that counts as a loop.
pub const MIN_LOOP_TOKENS: usize = 48;
/// Longest repeated unit looked for (a repeated paragraph of up to this many tokens).
pub const MAX_LOOP_PERIOD: usize = 120;

/// The longest stretch of `tokens` that is periodic (`t[i] == t[i - period]` throughout), covers
/// at least [`MIN_LOOP_TOKENS`] tokens and holds at least two whole copies of its unit, with a
/// unit of 1..=[`MAX_LOOP_PERIOD`] tokens. A list whose items differ (numbers, names) is not
/// periodic; "the same sentence again and again" or "the same line of code" is.
pub fn find_loop(tokens: &[u32]) -> Option<Loop> {
    let mut best: Option<Loop> = None;
    for period in 1..=MAX_LOOP_PERIOD.min(tokens.len() / 2) {
        // `run` counts consecutive positions i with tokens[i] == tokens[i - period]; such a run
        // ending at i makes tokens[i + 1 - run - period ..= i] periodic.
        let mut run = 0usize;
        for i in period..=tokens.len() {
            let matches = i < tokens.len() && tokens[i] == tokens[i - period];
            if matches {
                run += 1;
                continue;
            }
            let covered = run + period;
            if run >= period
                && covered >= MIN_LOOP_TOKENS
                && best.is_none_or(|b| covered > b.covered)
            {
                best = Some(Loop {
                    start: i - run - period,
                    period,
                    covered,
                });
            }
            run = 0;
        }
    }
    best
}

pub fn run(args: Args, globals: &Globals) -> Result<(), String> {
    // The prompts are well under 256 tokens.
    let ctx = Some(args.n_predict + 256);
    let options = globals.engine_options(ctx, args.threads, &MemoryArgs::default(), None)?;
    let mut engine = Engine::open(&args.model, &options)?;
    let template = engine.chat_template()?;
    engine.set_join_pieces(args.sampling.join_pieces);
    let mut n_looping = 0;
    let mut n_tokens = 0;
    let t0 = std::time::Instant::now();
    for (i, prompt) in PROMPTS.iter().enumerate() {
        let rendered = template.render(&[ChatMessage::new("user", prompt)], true)?;
        let tokens = engine.tokenize_chat(&rendered, &template);
        let mut params = args.sampling.params();
        // One fixed seed per prompt unless -s is given: runs are comparable.
        if args.sampling.seed.is_none() {
            params.seed = 1000 + i as u64;
        }
        let mut sampler = engine.sampler(params)?;
        engine.reset();
        let options = GenerateOptions {
            max_tokens: Some(args.n_predict),
            ..GenerateOptions::default()
        };
        let (g, text) = engine.generate(&tokens, &mut sampler, options, None, |_| {})?;
        n_tokens += g.tokens.len();
        let found = find_loop(&g.tokens);
        if found.is_some() {
            n_looping += 1;
        }
        let verdict = match found {
            Some(l) => format!(
                "LOOP (unit of {} tokens repeated over {} tokens from token {})",
                l.period, l.covered, l.start
            ),
            None => "ok".into(),
        };
        println!(
            "[{:>2}] {:>4} tokens, stop {:<7} {verdict}: {}",
            i + 1,
            g.tokens.len(),
            g.stop.as_str(),
            prompt
        );
        if args.verbose {
            println!("{}\n", text.trim());
        }
    }
    println!(
        "looping: {n_looping} of {} answers ({:.0} %), {n_tokens} tokens in {:.0} s",
        PROMPTS.len(),
        100.0 * n_looping as f64 / PROMPTS.len() as f64,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repeat(unit: &[u32], times: usize) -> Vec<u32> {
        unit.iter()
            .copied()
            .cycle()
            .take(unit.len() * times)
            .collect()
    }

    #[test]
    fn a_repeated_sentence_is_a_loop() {
        let mut t: Vec<u32> = (100..160).collect();
        let unit: Vec<u32> = (1..=12).collect();
        t.extend(repeat(&unit, 5));
        let l = find_loop(&t).unwrap();
        assert_eq!(l.period, 12);
        assert_eq!(l.start, 60);
        assert_eq!(l.covered, 60);
    }

    #[test]
    fn one_token_repeated_is_a_loop_only_when_long_enough() {
        let mut t: Vec<u32> = (100..130).collect();
        t.extend(vec![7; MIN_LOOP_TOKENS - 1]);
        assert_eq!(find_loop(&t), None);
        t.push(7);
        assert_eq!(
            find_loop(&t),
            Some(Loop {
                start: 30,
                period: 1,
                covered: MIN_LOOP_TOKENS
            })
        );
    }

    #[test]
    fn a_numbered_list_is_not_a_loop() {
        // "1 . item x \n", "2 . item x \n", ...: the numbers break the period.
        let mut t = Vec::new();
        for n in 0..40u32 {
            t.extend([1000 + n, 5, 6, 7, 8]);
        }
        assert_eq!(find_loop(&t), None);
    }

    #[test]
    fn fewer_than_two_copies_is_not_a_loop() {
        // A 100-token unit followed by its first 40 tokens: periodic, but not two copies.
        let unit: Vec<u32> = (0..100).collect();
        let mut t = unit.clone();
        t.extend(&unit[..40]);
        assert_eq!(find_loop(&t), None);
        t.extend(&unit[40..]);
        assert_eq!(find_loop(&t).map(|l| l.period), Some(100));
    }

    #[test]
    fn varied_text_is_not_a_loop() {
        let t: Vec<u32> = (0..400u32).map(|i| (i * 7919) % 1009).collect();
        assert_eq!(find_loop(&t), None);
        assert_eq!(find_loop(&[]), None);
        assert_eq!(find_loop(&[1]), None);
    }
}
