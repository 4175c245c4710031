//! smolrun's engine as a library: what an app, a router daemon, the server, the C ABI and the
//! `smolrun` binary embed.
//!
//! ```no_run
//! use smolrun_engine::{Engine, EngineOptions, GenerateOptions};
//! use smolrun_core::sampler::SamplerParams;
//!
//! let options = EngineOptions { n_ctx: Some(512), ..EngineOptions::default() };
//! let mut engine = Engine::open("gemma-3-270m-q4_k_m.gguf", &options)?;
//! let prompt = engine.tokenize("The three laws of robotics are", true, true);
//! let mut sampler = engine.sampler(SamplerParams::greedy())?;
//! let limit = GenerateOptions { max_tokens: Some(32), ..GenerateOptions::default() };
//! let (_, text) = engine.generate(&prompt, &mut sampler, limit, None, |piece| print!("{piece}"))?;
//! # Ok::<(), smolrun_engine::EngineError>(())
//! ```
//!
//! One load sequence opens every model ([`Engine::open`]), from one options value
//! ([`EngineOptions`]); nothing here reads a flag, an environment variable or a process-wide
//! setting, so engines with different options share a process. Errors are typed
//! ([`EngineError`]). The modules, in the order a model goes through them:
//!
//! ```text
//! options.rs       EngineOptions: weights mode, memory, pager, drafts, kernels, caches, threads
//! models.rs        a name to a path; the model folder's listing
//! file.rs          open the file as the store will reach it (mapped, streamed, pread, paged)
//! memory_guard.rs  the memory plan against what the device gives; the floor while generating
//! platform.rs      CPU features, memory ceilings of mobile OSes, address space, default threads
//! load.rs          the store, the repacked weights, the model, the state, the thread pool
//! repack_cache.rs  weights repacked for this CPU, written once and mapped after
//! moe.rs           the expert pager: pool sizes, warm lists, its report
//! engine.rs        Engine: prefill, decode, the generation loop, embeddings
//! plan.rs          what a model needs on a device and will do there, from its header alone
//! speculative.rs   drafts: prompt lookup, a draft model, the MTP layer
//! constrained.rs   a grammar as a token filter; json_schema.rs: JSON schema to grammar
//! chat_template.rs the model's chat template (Jinja) or a built-in one
//! ```
//!
//! Module dependencies point one way: options and error at the bottom; platform, models,
//! memory_guard, moe and repack_cache above them; file and load above those; engine (with
//! speculative) on top; chat_template, constrained and json_schema beside it.

pub mod chat_template;
pub mod constrained;
pub mod conversation;
mod engine;
mod error;
pub mod file;
pub mod json_schema;
pub mod load;
pub mod memory_guard;
pub mod models;
pub mod moe;
pub mod options;
pub mod plan;
pub mod platform;
pub mod profile;
pub mod repack_cache;
pub mod saved_state;
pub mod speculative;

pub use engine::{
    Engine, GenerateOptions, Generation, StopReason, StreamReport, TokenFilter, TokenStep,
};
pub use error::EngineError;
pub use options::{
    CacheDir, DraftChoice, DraftOptions, EngineOptions, Event, Events, KernelChoice, MemoryOptions,
    MoePolicy, MoePool, PagerOptions, RepackOptions, StreamOptions, WeightsMode, DEFAULT_CTX,
};
pub use smolrun_core;
