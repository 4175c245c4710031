//! What a run takes from the global allocator, part by part, measured with a counting
//! allocator (the bytes each step leaves allocated): the header's tables, the tokenizer, the
//! model's own tables and vectors, the repacked weights when no cache file is mapped, the
//! sampler, a grammar (the JSON grammar, its matcher and the vocabulary's token trie), and for
//! comparison the run's state, which comes from its arena (here a heap region, `State::new`).
//! docs/hot-path.md quotes the table this prints.
//!
//!   cargo run --release -p smolrun-tests --example load_memory [MODEL...]

use smolrun_core::gguf::Gguf;
use smolrun_core::grammar::{Matcher, TokenTrie};
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::repack::RepackPlan;
use smolrun_core::model::{Model, State};
use smolrun_core::sampler::{Sampler, SamplerParams};
use smolrun_core::tokenizer::Tokenizer;
use smolrun_linux::MappedFile;
use smolrun_tests::counting_alloc::{live_bytes, CountingAllocator};
use smolrun_tests::{json_grammar, model_path};
use std::sync::Arc;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn mb(bytes: usize) -> String {
    format!("{:.2}", bytes as f64 / 1e6)
}

fn main() {
    let mut models: Vec<String> = std::env::args().skip(1).collect();
    if models.is_empty() {
        models = vec!["gemma3-270m".into(), "qwen2.5-coder-0.5b".into()];
    }
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    println!(
        "| model | header (tensor table, metadata index) | tokenizer | model (vectors, tables) | \
         repacked copy ({}) | sampler | grammar (JSON rules + matcher + token trie) | state (arena, -c 4096) |",
        kernels.name()
    );
    println!("|---|---|---|---|---|---|---|---|");
    for name in models {
        let path = model_path(&name);
        let file = MappedFile::open(&path).unwrap();
        let step = |before: &mut usize| {
            let now = live_bytes();
            let d = now - *before;
            *before = now;
            d
        };
        let mut at = live_bytes();
        let gguf = Gguf::parse(file.bytes()).unwrap();
        let header = step(&mut at);
        let tokenizer = Tokenizer::from_gguf(&gguf).unwrap();
        let tok = step(&mut at);
        let model = Model::load_with_kernels(&gguf, &kernels).unwrap();
        let loaded = step(&mut at);
        let plan = RepackPlan::new(&model).unwrap();
        let repacked = plan.file_len * usize::from(!plan.is_empty());
        drop(plan);
        let _ = step(&mut at);
        let sampler = Sampler::new(model.n_vocab(), SamplerParams::default()).unwrap();
        let sampled = step(&mut at);
        let grammar = Arc::new(json_grammar());
        let matcher = Matcher::new(grammar);
        let trie = TokenTrie::new(
            (0..tokenizer.n_vocab() as u32)
                .filter(|&id| !tokenizer.is_control(id))
                .map(|id| (id, tokenizer.token_bytes(id))),
        );
        let grammared = step(&mut at);
        let n_ctx = 4096.min(model.hp.n_ctx_train);
        let state = State::new(&model, n_ctx).unwrap();
        let arena = state.memory_bytes();
        let _ = step(&mut at);
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} |",
            mb(header),
            mb(tok),
            mb(loaded),
            mb(repacked),
            mb(sampled),
            mb(grammared),
            mb(arena)
        );
        drop((state, trie, matcher, sampler, model, tokenizer, gguf));
    }
}
