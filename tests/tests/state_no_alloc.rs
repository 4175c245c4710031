//! The state of a run comes from the arena, not the global allocator: after `Model::load`,
//! making the state (its plan, the platform's region, the carving) and running the prompt's
//! first pass allocate nothing on the heap, for every model family, with the MTP block's state
//! too. A counting global allocator checks it; this file holds a single test, run from its own
//! `main` (no libtest thread allocating meanwhile).
//!
//! What a run does take from the global allocator, all of it at load, is listed in
//! docs/hot-path.md ("What still uses the global allocator").

use smolrun_core::gguf::Gguf;
use smolrun_core::model::{Model, ResidentStore, State, StateOptions};
use smolrun_core::platform::{Parallel, SingleThread};
use smolrun_linux::{anonymous_region_for, MappedFile, ThreadPool};
use smolrun_tests::counting_alloc::{allocated_bytes, allocations, CountingAllocator};
use smolrun_tests::model_path;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn main() {
    making_the_state_and_running_the_prompt_allocate_nothing();
    println!("state_no_alloc: ok");
}

fn making_the_state_and_running_the_prompt_allocate_nothing() {
    for model in [
        "gemma3-270m",
        "qwen2.5-coder-0.5b",
        "synthetic-llama",
        "synthetic-qwen3",
        "synthetic-qwen3moe",
        "synthetic-qwen2moe",
        "synthetic-bailingmoe2",
        "synthetic-qwen35",
        "synthetic-smollm3",
        "synthetic-phi3",
        "synthetic-olmoe",
        "synthetic-qwen35moe",
        "synthetic-lfm2",
        "synthetic-lfm2moe",
        "synthetic-smallthinker",
        "synthetic-granitehybrid",
    ] {
        let path = model_path(model);
        let file = MappedFile::open(&path).unwrap();
        let gguf = Gguf::parse(file.bytes()).unwrap();
        let mut m = Model::load(&gguf).unwrap();
        let store = ResidentStore::new(&gguf);
        let mtp = m.hp.mtp_layer().is_some() && m.hp.n_nextn == 1;
        if mtp {
            m.load_mtp(&gguf, &store, &smolrun_core::kernels::KernelSet::scalar())
                .unwrap();
        }
        // Its workers allocate as they start (thread-local storage): started and done with
        // before counting.
        let pool = ThreadPool::new(2).unwrap();
        pool.run(&|_| {});
        let prompt = [2u32, 818, 5279, 529, 7001, 563];
        for (opts, what) in [
            (StateOptions::new(256), "state for 256 tokens"),
            (
                StateOptions {
                    n_ctx: 128,
                    n_batch: 8,
                    n_logits: 4,
                    mtp,
                },
                "state for verify passes of 4 (and MTP drafting where the model has it)",
            ),
        ] {
            let (count, bytes) = (allocations(), allocated_bytes());
            let plan = State::plan(&m, &opts).unwrap();
            let region = anonymous_region_for(&plan).unwrap();
            let mut state = State::in_region(&m, &opts, region).unwrap();
            let made = (allocations() - count, allocated_bytes() - bytes);
            assert_eq!(
                made,
                (0, 0),
                "{model}, {what}: making the state allocated {} times ({} bytes)",
                made.0,
                made.1
            );
            assert_eq!(state.memory_bytes() as u64, plan.total(), "{model}, {what}");
            // The prompt's first pass, on one thread and on the pool.
            let (count, bytes) = (allocations(), allocated_bytes());
            m.forward_batch(&mut state, &store, &SingleThread, &prompt, 0)
                .unwrap();
            state.reset();
            m.forward_batch(&mut state, &store, &pool, &prompt, 0)
                .unwrap();
            let ran = (allocations() - count, allocated_bytes() - bytes);
            assert_eq!(
                ran,
                (0, 0),
                "{model}, {what}: the prompt's first pass allocated {} times ({} bytes)",
                ran.0,
                ran.1
            );
        }
    }
}
