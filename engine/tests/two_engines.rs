//! Engines with different options share a process: no option is process-wide. Three engines
//! run side by side, on threads of their own and interleaved, each with what used to be a
//! global setting of its own: the recurrent state in f16 (synthetic-qwen35), a paged mixture of
//! experts with a cache bias and a prefetch (synthetic-qwen3moe), and a draft model
//! (synthetic-qwen3 drafting for synthetic-qwen35, whose MoE and state options it must not
//! take). Each gives the greedy tokens it gives when it is alone in the process.
//!
//! Each run is compared by its tokens and, bit for bit, by the logits it ends with. The options
//! are chosen so that each one changes its engine's logits from the defaults' (the f16 state
//! and the cache bias; checked below), so an option leaking from one engine to another would
//! show.

use smolrun_core::sampler::SamplerParams;
use smolrun_engine::{
    DraftChoice, DraftOptions, Engine, EngineOptions, GenerateOptions, MoePool, PagerOptions,
};

const N: usize = 40;

fn path(model: &str) -> String {
    smolrun_tests::model_path(model)
        .to_string_lossy()
        .into_owned()
}

/// The greedy tokens after `text`, and the logits the engine ends with.
fn greedy(engine: &mut Engine, text: &str) -> (Vec<u32>, Vec<f32>) {
    let prompt = engine.tokenize(text, false, false);
    let mut sampler = engine.sampler(SamplerParams::greedy()).unwrap();
    for id in 0..engine.tokenizer.n_vocab() as u32 {
        if engine.tokenizer.is_eog(id) {
            sampler.ban(id);
        }
    }
    let limit = GenerateOptions {
        max_tokens: Some(N),
        ..GenerateOptions::default()
    };
    let (gen, _) = engine
        .generate(&prompt, &mut sampler, limit, None, |_| {})
        .unwrap();
    assert_eq!(gen.tokens.len(), N);
    (gen.tokens, engine.logits().to_vec())
}

struct Case {
    model: String,
    options: EngineOptions,
    prompt: &'static str,
}

fn cases() -> Vec<Case> {
    let base = EngineOptions {
        n_ctx: Some(256),
        threads: Some(1),
        ..EngineOptions::default()
    };
    vec![
        Case {
            model: path("synthetic-qwen35"),
            options: EngineOptions {
                state_f16: true,
                ..base.clone()
            },
            prompt: "The cat sat on the mat. The dog",
        },
        Case {
            model: path("synthetic-qwen3moe"),
            options: EngineOptions {
                pager: PagerOptions {
                    pool: Some(MoePool::Slots(4)),
                    cache_bias: 2.0,
                    prefetch: 1,
                    ..PagerOptions::default()
                },
                ..base.clone()
            },
            prompt: "Once upon a time, in a land",
        },
        Case {
            model: path("synthetic-qwen35"),
            options: EngineOptions {
                draft: DraftOptions {
                    choice: DraftChoice::Model(path("synthetic-qwen3")),
                    max: Some(4),
                },
                ..base.clone()
            },
            prompt: "The cat sat on the mat. The dog",
        },
    ]
}

#[test]
fn engines_with_different_options_give_their_own_tokens_side_by_side() {
    let cases = cases();
    // Alone: one engine in the process at a time.
    let alone: Vec<(Vec<u32>, Vec<f32>)> = cases
        .iter()
        .map(|c| greedy(&mut Engine::open(&c.model, &c.options).unwrap(), c.prompt))
        .collect();
    // The options matter: without them, the f16 state and the cache bias change the logits
    // (the draft model must not change the tokens: drafts never change greedy tokens).
    let plain = |i: usize| {
        let c = &cases[i];
        let options = EngineOptions {
            n_ctx: c.options.n_ctx,
            threads: c.options.threads,
            ..EngineOptions::default()
        };
        greedy(&mut Engine::open(&c.model, &options).unwrap(), c.prompt)
    };
    assert_ne!(alone[0].1, plain(0).1, "--state-f16 changes nothing here");
    assert_ne!(
        alone[1].1,
        plain(1).1,
        "the cache bias changes nothing here"
    );
    assert_eq!(alone[2].0, plain(0).0, "drafts changed greedy tokens");

    // Together, interleaved on this thread: all three open at once, each generating in turn.
    let mut engines: Vec<Engine> = cases
        .iter()
        .map(|c| Engine::open(&c.model, &c.options).unwrap())
        .collect();
    for round in 0..2 {
        for (i, (engine, case)) in engines.iter_mut().zip(&cases).enumerate() {
            assert_eq!(
                greedy(engine, case.prompt),
                alone[i],
                "engine {i}, round {round}"
            );
        }
    }
    drop(engines);

    // Together, on threads of their own at the same time.
    std::thread::scope(|scope| {
        let handles: Vec<_> = cases
            .iter()
            .map(|c| {
                scope.spawn(|| greedy(&mut Engine::open(&c.model, &c.options).unwrap(), c.prompt))
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            assert_eq!(h.join().unwrap(), alone[i], "engine {i} on its own thread");
        }
    });
}
