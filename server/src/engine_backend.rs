//! The real engine behind the server's `Backend` seam: `Engine::generate_with`, the generation
//! loop that `run` and `chat` use too (its KV cache keeps the longest common prefix between
//! requests, so a chat's next turn only runs its new tokens), with core's sampler for the
//! choice and the probabilities. What is the server's own is said here: the sampler's
//! parameters, and each token as a `TokenEvent`.

use super::backend::{
    Alternative, Backend, ChatMessage, Constraint, Control, Finish, Generated, ModelDetails,
    SamplingParams, TokenEvent,
};
use sha2::{Digest, Sha256};
use smolrun_core::gguf::Value;
use smolrun_core::grammar::TokenTrie;
use smolrun_core::model::embedding::Pooling;
use smolrun_core::sampler::SamplerParams;
use smolrun_engine::chat_template::ChatTemplate;
use smolrun_engine::constrained::{token_trie, GrammarFilter};
use smolrun_engine::saved_state::PromptCache;
use smolrun_engine::{Engine, EngineOptions, GenerateOptions, StopReason, TokenStep};
use std::ops::ControlFlow;

/// Penalties look this far back, over the generated tokens only (a chat prompt is full of turn
/// markers that must stay likely).
const PENALTY_WINDOW: usize = 256;

pub struct EngineBackend {
    engine: Engine,
    template: ChatTemplate,
    name: String,
    threads: usize,
    details: ModelDetails,
    /// The file's pooling, or why it gives no embeddings (a rank model): said per request, so
    /// that such a model still generates.
    pooling: Result<Pooling, String>,
    /// The vocabulary by bytes, for grammars: built by the first request that has one.
    trie: Option<TokenTrie>,
    /// `--prompt-cache`: system prompts saved on flash and read back.
    prompt_cache: Option<PromptCache>,
}

impl EngineBackend {
    /// Opens and loads the model with the engine's load sequence. The server holds one model
    /// for the life of the process.
    pub fn load(model: &str, options: &EngineOptions) -> Result<Self, String> {
        let engine = Engine::open(model, options)?;
        if let Some(drafting) = engine.drafting() {
            options
                .events
                .notice(&format!("speculative decoding, drafts from {drafting}"));
        }
        let template = engine.chat_template()?;
        let path = &engine.path;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| model.to_string());
        let details = model_details(&engine);
        let pooling =
            Pooling::from_gguf(engine.gguf()).map_err(|e| format!("{}: {e}", path.display()));
        Ok(EngineBackend {
            threads: options
                .threads
                .unwrap_or_else(smolrun_engine::platform::default_threads),
            engine,
            template,
            name,
            details,
            pooling,
            trie: None,
            prompt_cache: None,
        })
    }

    /// Reads long prompt prefixes (system prompts) back from `cache` instead of running them.
    pub fn with_prompt_cache(mut self, cache: Option<PromptCache>) -> Self {
        self.prompt_cache = cache;
        self
    }
}

/// Ollama's `HumanNumber`: "494.03M", "1.5B", "7B".
fn human_number(n: u64) -> String {
    let (scale, suffix, decimals) = match n {
        1_000_000_000.. => (1e9, "B", 1),
        1_000_000.. => (1e6, "M", 2),
        1_000.. => (1e3, "K", 0),
        _ => return n.to_string(),
    };
    let x = n as f64 / scale;
    if x == x.floor() {
        format!("{x:.0}{suffix}")
    } else {
        format!("{x:.decimals$}{suffix}")
    }
}

/// A scalar metadata value as JSON; arrays (the vocabulary, merges) are left out: /api/show
/// would otherwise send megabytes.
fn meta_json(v: &Value<'_>) -> Option<serde_json::Value> {
    Some(match *v {
        Value::U8(x) => x.into(),
        Value::I8(x) => x.into(),
        Value::U16(x) => x.into(),
        Value::I16(x) => x.into(),
        Value::U32(x) => x.into(),
        Value::I32(x) => x.into(),
        Value::U64(x) => x.into(),
        Value::I64(x) => x.into(),
        Value::F32(x) => serde_json::Value::from(x as f64),
        Value::F64(x) => x.into(),
        Value::Bool(x) => x.into(),
        Value::Str(x) => x.into(),
        Value::Array(_) => return None,
    })
}

/// The details /api/tags and /api/show report. The digest is the SHA-256 of the GGUF header
/// (metadata and tensor table, every tensor's type, shape and offset): hashing the whole file
/// would cost seconds of flash reads at every start on a TV box, and the header already changes
/// with any requantization or other model. Two files that differ only in weight values share
/// it, which a server that holds one model can live with.
fn model_details(engine: &Engine) -> ModelDetails {
    let (path, gguf, file) = (&engine.path, engine.gguf(), engine.model_file());
    let digest: String = Sha256::digest(engine.header_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let modified_unix = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    // The converter's count when it wrote one; else every tensor in the file (an untied
    // output matrix counts, as llama.cpp's llama_model_n_params counts it).
    let n_params = gguf
        .get_u64("general.parameter_count")
        .unwrap_or_else(|_| gguf.tensors.iter().map(|t| t.n_elements()).sum());
    let mut model_info: serde_json::Map<String, serde_json::Value> = gguf
        .metadata
        .iter()
        .filter_map(|e| Some((e.key.to_string(), meta_json(&e.value)?)))
        .filter(|(k, _)| k != "tokenizer.chat_template")
        .collect();
    model_info
        .entry("general.parameter_count")
        .or_insert(n_params.into());
    ModelDetails {
        size: file.len(),
        digest: format!("sha256:{digest}"),
        modified_unix,
        family: gguf.architecture().unwrap_or("").to_string(),
        parameter_size: human_number(n_params),
        quantization_level: smolrun_engine::models::quantization(gguf),
        template: gguf
            .get_str("tokenizer.chat_template")
            .unwrap_or("")
            .to_string(),
        model_info,
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
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, String> {
        let messages: Vec<serde_json::Value> =
            messages.iter().map(ChatMessage::template_json).collect();
        self.template.render_json(
            &serde_json::Value::Array(messages),
            tools,
            add_generation_prompt,
        )
    }

    fn tokenize(&self, text: &str) -> Result<Vec<u32>, String> {
        Ok(self.engine.tokenize_chat(text, &self.template))
    }

    fn generate(
        &mut self,
        prompt: &[u32],
        params: &SamplingParams,
        constraint: Option<&Constraint>,
        shift_keep: Option<usize>,
        prefix: usize,
        on_token: &mut dyn FnMut(TokenEvent) -> Control,
    ) -> Result<Generated, String> {
        if let Some(cache) = &self.prompt_cache {
            // A failure here costs only the cache: the prompt then runs as usual.
            if let Err(e) = cache.prepare(&mut self.engine, prompt, prefix) {
                eprintln!("smolrun serve: prompt cache: {e}");
            }
        }
        if constraint.is_some() && self.trie.is_none() {
            self.trie = Some(token_trie(&self.engine.tokenizer));
        }
        let n_vocab = self.engine.tokenizer.n_vocab();
        let mut filter = match (constraint, &self.trie) {
            (Some(c), Some(trie)) => Some(GrammarFilter::new(
                c.grammar.clone(),
                c.trigger.as_deref(),
                trie,
                n_vocab,
            )),
            _ => None,
        };
        let mut sampler = self
            .engine
            .sampler(SamplerParams {
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
            })
            .map_err(String::from)?;
        // No limits of the engine's own: the worker's callback stops at the token budget.
        let gen = self
            .engine
            .generate_with(
                prompt,
                &mut sampler,
                GenerateOptions {
                    context_shift: shift_keep,
                    ..GenerateOptions::default()
                },
                filter
                    .as_mut()
                    .map(|f| f as &mut dyn smolrun_engine::TokenFilter),
                &mut |step| match on_token(token_event(step)) {
                    Control::Continue => ControlFlow::Continue(()),
                    Control::Stop => ControlFlow::Break(()),
                },
            )
            .map_err(String::from)?;
        let finish = match gen.stop {
            StopReason::EndOfText => Finish::EndOfGeneration,
            StopReason::ContextFull => Finish::ContextFull,
            StopReason::LowMemory => {
                return Err(self
                    .engine
                    .low_memory_message()
                    .unwrap_or("stopped generating: memory is low")
                    .to_string())
            }
            // Length and Interrupted need limits that were not given.
            StopReason::Stopped | StopReason::Length | StopReason::Interrupted => Finish::Stopped,
        };
        Ok(Generated {
            finish,
            shifted_out: gen.shifted_out,
        })
    }

    fn details(&self) -> ModelDetails {
        self.details.clone()
    }

    fn embed(&mut self, tokens: &[u32]) -> Result<Vec<f32>, String> {
        let pooling = self.pooling.clone()?;
        self.engine.embed(tokens, pooling).map_err(String::from)
    }

    fn save_cache(&mut self, path: &std::path::Path) -> Result<(usize, u64), String> {
        let saved = self.engine.save_state(path, None).map_err(String::from)?;
        Ok((saved.tokens, saved.bytes))
    }

    fn restore_cache(&mut self, path: &std::path::Path) -> Result<(usize, u64), String> {
        let read = self.engine.restore_state(path).map_err(String::from)?;
        Ok((read.tokens, read.bytes))
    }

    fn erase_cache(&mut self) -> usize {
        let n = self.engine.n_cached();
        self.engine.reset();
        n
    }

    fn cached_tokens(&self) -> usize {
        self.engine.n_cached()
    }
}

#[cfg(test)]
mod tests {
    use super::human_number;

    #[test]
    fn parameter_sizes_as_ollama_prints_them() {
        assert_eq!(human_number(494_032_768), "494.03M");
        assert_eq!(human_number(1_543_714_304), "1.5B");
        assert_eq!(human_number(7_000_000_000), "7B");
        assert_eq!(human_number(268_000_000), "268M");
        assert_eq!(human_number(999), "999");
    }
}
