//! The real engine behind the server's `Backend` seam: `Engine::generate_with`, the generation
//! loop that `run` and `chat` use too (its KV cache keeps the longest common prefix between
//! requests, so a chat's next turn only runs its new tokens), with core's sampler for the
//! choice and the probabilities. What is the server's own is said here: the sampler's
//! parameters, and each token as a `TokenEvent`.

use super::backend::{
    Alternative, Backend, ChatMessage, Control, Finish, SamplingParams, TokenEvent,
};
use crate::chat_template::{self, ChatTemplate};
use crate::engine::{self, Engine, GenerateOptions, ModelFile, StopReason, TokenStep};
use smolrun_core::gguf::Gguf;
use smolrun_core::sampler::SamplerParams;
use std::ops::ControlFlow;

/// Penalties look this far back, over the generated tokens only (a chat prompt is full of turn
/// markers that must stay likely).
const PENALTY_WINDOW: usize = 256;

pub struct EngineBackend {
    engine: Engine<'static>,
    template: ChatTemplate,
    name: String,
    threads: usize,
}

impl EngineBackend {
    /// Maps and loads the model. The server holds one model for the life of the process, so the
    /// mapping and the parsed header are leaked to give the engine the `'static` borrow it needs
    /// (they would be freed only at exit anyway).
    pub fn load(
        model: &str,
        n_ctx: Option<usize>,
        threads: usize,
        mem: &engine::MemoryArgs,
        draft: &crate::speculative::DraftArgs,
    ) -> Result<Self, String> {
        let (path, file) = engine::open_model(model, mem, n_ctx)?;
        let file: &'static ModelFile = Box::leak(Box::new(file));
        let gguf: &'static Gguf<'static> = Box::leak(Box::new(engine::parse_gguf(&path, file)?));
        let guard = engine::check_memory(&path, gguf, file, n_ctx, mem)?;
        let mut engine = Engine::load(&path, gguf, file, n_ctx, threads)?;
        engine.watch_memory(guard);
        engine::leave_embeddings_on_flash(file, gguf)?;
        if let Some(drafting) = engine.set_draft(draft)? {
            eprintln!("smolrun: speculative decoding, drafts from {drafting}");
        }
        let template = engine.chat_template()?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| model.to_string());
        Ok(EngineBackend {
            engine,
            template,
            name,
            threads,
        })
    }
}

/// A generated token as the server reports it, with its bytes and its alternatives'.
fn token_event(step: TokenStep<'_>) -> TokenEvent {
    let sampled = step.sampled;
    TokenEvent {
        id: sampled.token,
        bytes: step.bytes(sampled.token).to_vec(),
        logprob: sampled.logprob,
        alternatives: sampled
            .top
            .iter()
            .map(|t| Alternative {
                id: t.id,
                bytes: step.bytes(t.id).to_vec(),
                logprob: t.logprob,
            })
            .collect(),
    }
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl Backend for EngineBackend {
    fn model_name(&self) -> &str {
        &self.name
    }

    fn n_ctx(&self) -> usize {
        self.engine.n_ctx()
    }

    fn n_threads(&self) -> usize {
        self.threads
    }

    fn render_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, String> {
        let messages: Vec<chat_template::ChatMessage> = messages
            .iter()
            .map(|m| chat_template::ChatMessage::new(&m.role, &m.content))
            .collect();
        self.template.render(&messages, add_generation_prompt)
    }

    fn tokenize(&self, text: &str) -> Result<Vec<u32>, String> {
        Ok(self.engine.tokenize_chat(text, &self.template))
    }

    fn generate(
        &mut self,
        prompt: &[u32],
        params: &SamplingParams,
        on_token: &mut dyn FnMut(TokenEvent) -> Control,
    ) -> Result<Finish, String> {
        let mut sampler = self.engine.sampler(SamplerParams {
            temperature: params.temperature,
            top_k: params.top_k,
            top_p: params.top_p,
            min_p: params.min_p,
            repeat_penalty: 1.0,
            repeat_last_n: PENALTY_WINDOW,
            presence_penalty: params.presence_penalty,
            frequency_penalty: params.frequency_penalty,
            seed: params.seed.unwrap_or_else(clock_seed),
            n_probs: params.n_alternatives,
        })?;
        // No limits of the engine's own: the worker's callback stops at the token budget.
        let gen = self.engine.generate_with(
            prompt,
            &mut sampler,
            GenerateOptions::default(),
            &mut |step| match on_token(token_event(step)) {
                Control::Continue => ControlFlow::Continue(()),
                Control::Stop => ControlFlow::Break(()),
            },
        )?;
        match gen.stop {
            StopReason::EndOfText => Ok(Finish::EndOfGeneration),
            StopReason::ContextFull => Ok(Finish::ContextFull),
            StopReason::LowMemory => Err(self
                .engine
                .low_memory_message()
                .unwrap_or("stopped generating: memory is low")
                .to_string()),
            // Length and Interrupted need limits that were not given.
            StopReason::Stopped | StopReason::Length | StopReason::Interrupted => {
                Ok(Finish::Stopped)
            }
        }
    }
}
