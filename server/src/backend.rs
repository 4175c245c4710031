//! The seam between the HTTP server and the engine.
//!
//! The server never touches a model directly: it talks to one `Backend`, owned by the single
//! generation worker thread (see `worker.rs`). A backend is created on that thread, so it need
//! not be `Send`. The real engine implements this trait; `fake.rs` implements it
//! deterministically for tests.

use smolrun_core::grammar::Grammar;
use std::sync::Arc;

/// One message of a chat, as the chat template sees it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ChatMessage {
    /// "system", "user", "assistant", "tool", or whatever role the client sent.
    pub role: String,
    pub content: String,
    /// The calls an assistant's turn made (an earlier step of a tool-call conversation).
    pub tool_calls: Vec<ToolCall>,
    /// A tool's answer: which call it answers, and the tool's name.
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
}

impl ChatMessage {
    pub fn text(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            ..ChatMessage::default()
        }
    }

    /// The message as Hugging Face templates read it: a call's arguments are an object (the
    /// templates write them with `tojson`), not the string OpenAI sends.
    pub fn template_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("role".into(), self.role.clone().into());
        m.insert("content".into(), self.content.clone().into());
        if !self.tool_calls.is_empty() {
            let calls = self
                .tool_calls
                .iter()
                .map(|c| {
                    serde_json::json!({
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    })
                })
                .collect();
            m.insert("tool_calls".into(), serde_json::Value::Array(calls));
        }
        if let Some(id) = &self.tool_call_id {
            m.insert("tool_call_id".into(), id.clone().into());
        }
        if let Some(name) = &self.name {
            m.insert("name".into(), name.clone().into());
        }
        serde_json::Value::Object(m)
    }
}

/// A function call, as a chat's history holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// Parsed from OpenAI's JSON string when it is JSON (else the string itself).
    pub arguments: serde_json::Value,
}

/// What the answer must be: a grammar enforced while sampling (a JSON schema, tool calls).
#[derive(Clone)]
pub struct Constraint {
    pub grammar: Arc<Grammar>,
    /// The grammar applies from where this text first appears in the answer (tool calls the
    /// model may or may not make, `tool_choice: auto`); None: from the first token.
    pub trigger: Option<String>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("trigger", &self.trigger)
            .finish_non_exhaustive()
    }
}

/// How to pick the next token. The server fills it from the request; the backend applies it.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy (argmax).
    pub temperature: f32,
    /// Nucleus sampling: keep the smallest set of tokens whose probability sums to `top_p`; 1 keeps all.
    pub top_p: f32,
    /// Keep only the `top_k` most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Drop tokens less likely than `min_p` times the most likely one; 0 keeps all.
    pub min_p: f32,
    /// Same seed, same prompt, same parameters: same tokens. None: the backend picks a seed.
    pub seed: Option<u64>,
    /// OpenAI's penalties: subtract `presence_penalty` once from the logit of every token that
    /// appeared in the generated text, and `frequency_penalty` times its count.
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// How many alternatives each `TokenEvent` must carry (0..=20). The chosen token's own
    /// probability is always reported.
    pub n_alternatives: usize,
}

/// Defaults: OpenAI's temperature and top_p; top_k and min_p as llama.cpp's server sets them
/// (OpenAI has neither), which also spares sorting the whole vocabulary at every token.
impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 40,
            min_p: 0.05,
            seed: None,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            n_alternatives: 0,
        }
    }
}

/// A token the model could have chosen at this position.
#[derive(Clone, Debug, PartialEq)]
pub struct Alternative {
    pub id: u32,
    /// The bytes this token decodes to (may be part of a UTF-8 character).
    pub bytes: Vec<u8>,
    /// Natural log of its probability.
    pub logprob: f32,
}

/// One generated token, handed to the server as soon as it is sampled.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenEvent {
    pub id: u32,
    /// The bytes this token decodes to. A multi-byte character may be split across tokens; the
    /// server holds partial characters back, the backend must not.
    pub bytes: Vec<u8>,
    /// Natural log of the probability the model gave this token: the softmax of the logits at
    /// temperature 1, before top-k/top-p/min-p truncation (after repetition penalties), so it
    /// says how sure the model was.
    pub logprob: f32,
    /// The `n_alternatives` most likely tokens under that same distribution, most likely first.
    pub alternatives: Vec<Alternative>,
}

/// What the server answers to each token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Continue,
    /// Stop now: a stop string matched, the token budget is spent, or the client went away.
    Stop,
}

/// Why `generate` returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// The model produced an end-of-generation token (not reported as a `TokenEvent`).
    EndOfGeneration,
    /// `on_token` answered `Control::Stop`.
    Stopped,
    /// The context window is full.
    ContextFull,
}

/// How `generate` returned, and what it did to the context on the way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generated {
    pub finish: Finish,
    /// Tokens the context shift dropped from the cache to make room (0: none).
    pub shifted_out: usize,
}

impl From<Finish> for Generated {
    fn from(finish: Finish) -> Generated {
        Generated {
            finish,
            shifted_out: 0,
        }
    }
}

/// What Ollama's /api/tags and /api/show report about the loaded model.
#[derive(Clone, Debug, Default)]
pub struct ModelDetails {
    /// Size of the model file in bytes.
    pub size: u64,
    /// "sha256:<hex>" naming the file (see `EngineBackend::load` for what is hashed).
    pub digest: String,
    /// Seconds since the epoch at which the file was last modified.
    pub modified_unix: u64,
    /// The GGUF architecture ("qwen2", "llama", ...).
    pub family: String,
    /// Ollama's short form of the parameter count: "494.03M", "1.54B".
    pub parameter_size: String,
    /// "Q4_K_M", "Q8_0", ...
    pub quantization_level: String,
    /// The chat template's source, as the file holds it.
    pub template: String,
    /// The file's scalar metadata (arrays such as the vocabulary left out), for /api/show.
    pub model_info: serde_json::Map<String, serde_json::Value>,
}

pub trait Backend {
    /// The name reported by /v1/models and in every response.
    fn model_name(&self) -> &str;
    /// Context length in tokens: prompt plus generated tokens must fit in it.
    fn n_ctx(&self) -> usize;
    /// Compute threads used by the forward pass (shown on the status page).
    fn n_threads(&self) -> usize;
    /// Render messages through the model's chat template. With `add_generation_prompt` the
    /// result ends where the assistant's answer begins.
    fn render_chat(
        &self,
        messages: &[ChatMessage],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, String>;
    /// Token ids of a prompt: special tokens written in the text (e.g. `<|im_start|>`) are
    /// parsed as such, and BOS is added when the model wants it and the text lacks it.
    fn tokenize(&self, text: &str) -> Result<Vec<u32>, String>;
    /// Evaluate `prompt` and generate until end-of-generation, a full context or `Stop`.
    /// `on_token` is called once per generated token, right after it is sampled. The backend
    /// may reuse cached state from the previous call when the prompts share a prefix.
    /// With a `constraint`, only text its grammar allows is generated; the grammar's end
    /// ends the answer (`Finish::EndOfGeneration`). With `shift_keep`, a context that fills
    /// while generating keeps its first `shift_keep` tokens, drops half of the rest and goes
    /// on (llama.cpp's context shift), where the model can. `prefix`: the prompt's first
    /// tokens that other conversations share (a chat's system prompt), which a backend with a
    /// prompt cache reads back instead of running.
    fn generate(
        &mut self,
        prompt: &[u32],
        params: &SamplingParams,
        constraint: Option<&Constraint>,
        shift_keep: Option<usize>,
        prefix: usize,
        on_token: &mut dyn FnMut(TokenEvent) -> Control,
    ) -> Result<Generated, String>;
    /// The model file's details for the Ollama API.
    fn details(&self) -> ModelDetails;
    /// The embedding of `tokens` (at most `n_ctx` of them): pooled over the positions and at
    /// unit length. It runs on a fresh cache; the next `generate` starts from nothing.
    fn embed(&mut self, tokens: &[u32]) -> Result<Vec<f32>, String>;
    /// Saves the cache (its tokens and state) to `path`: (tokens, bytes written).
    fn save_cache(&mut self, _path: &std::path::Path) -> Result<(usize, u64), String> {
        Err("this model cannot save its cache".into())
    }
    /// Reads a cache `save_cache` wrote: (tokens, bytes read).
    fn restore_cache(&mut self, _path: &std::path::Path) -> Result<(usize, u64), String> {
        Err("this model cannot restore a cache".into())
    }
    /// Forgets the cache; returns how many tokens it held.
    fn erase_cache(&mut self) -> usize {
        0
    }
    /// Tokens in the cache.
    fn cached_tokens(&self) -> usize {
        0
    }
}
