//! The OpenAI wire format: parsing requests into jobs, and writing responses and stream chunks
//! the way the official clients read them.

use super::backend::{ChatMessage, SamplingParams, TokenEvent};
use super::error::ApiError;
use super::tools::{self, Structured, ToolCallStream};
use super::worker::{EmbedInput, Embeddings, Prompt, Summary};
use serde_json::{json, Map, Value};

/// Which endpoint a request came in on: they share options but not the wire format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completion,
}

/// Logprobs as requested: whether to report them, and how many alternatives per token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogprobRequest {
    pub top: usize,
}

pub struct GenerationRequest {
    pub prompt: Prompt,
    pub params: SamplingParams,
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    /// llama-server's `n_keep`: tokens a context shift keeps (-1: the whole prompt).
    pub n_keep: Option<i64>,
    pub stream: bool,
    pub include_usage: bool,
    pub logprobs: Option<LogprobRequest>,
    /// response_format, tools and tool_choice.
    pub structured: Structured,
}

const MAX_STOP_STRINGS: usize = 16;
const MAX_TOP_LOGPROBS: usize = 20;

/// A conversation that outgrew the context says what it lost: llama-server's `truncated`, and
/// `dropped` with the old messages left out of the prompt and the tokens shifted out while
/// answering (absent when nothing was).
pub(super) fn insert_dropped(m: &mut Map<String, Value>, summary: &Summary) {
    if summary.dropped.any() {
        m.insert("truncated".into(), Value::Bool(true));
        m.insert("dropped".into(), summary.dropped.to_json());
    }
}

pub(super) fn bad(message: impl Into<String>, param: &str) -> ApiError {
    ApiError::invalid_request(message).with_param(param)
}

pub(super) fn parse_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid_request(format!("the request body is not valid JSON: {e}"))
    })?;
    match value {
        Value::Object(m) => Ok(m),
        _ => Err(ApiError::invalid_request(
            "the request body must be a JSON object",
        )),
    }
}

/// Read an optional field; `null` counts as absent, like in OpenAI's API.
pub(super) fn field<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    m.get(key).filter(|v| !v.is_null())
}

pub(super) fn number(
    m: &Map<String, Value>,
    key: &str,
    min: f64,
    max: f64,
) -> Result<Option<f64>, ApiError> {
    match field(m, key) {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if (min..=max).contains(&x) => Ok(Some(x)),
            Some(x) => Err(bad(
                format!("'{key}' must be between {min} and {max}, got {x}"),
                key,
            )),
            None => Err(bad(format!("'{key}' must be a number, got {v}"), key)),
        },
    }
}

pub(super) fn integer(
    m: &Map<String, Value>,
    key: &str,
    min: i64,
    max: i64,
) -> Result<Option<i64>, ApiError> {
    match field(m, key) {
        None => Ok(None),
        Some(v) => match v.as_i64() {
            Some(x) if (min..=max).contains(&x) => Ok(Some(x)),
            Some(x) => Err(bad(
                format!("'{key}' must be between {min} and {max}, got {x}"),
                key,
            )),
            None => Err(bad(format!("'{key}' must be an integer, got {v}"), key)),
        },
    }
}

pub(super) fn boolean(m: &Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    match field(m, key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(bad(format!("'{key}' must be true or false, got {v}"), key)),
    }
}

pub(super) fn stop_strings(m: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let list = match field(m, "stop") {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => {
            let mut list = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Value::String(s) => list.push(s.clone()),
                    _ => return Err(bad("'stop' must be a string or a list of strings", "stop")),
                }
            }
            list
        }
        Some(_) => return Err(bad("'stop' must be a string or a list of strings", "stop")),
    };
    if list.len() > MAX_STOP_STRINGS {
        return Err(bad(
            format!(
                "'stop' holds at most {MAX_STOP_STRINGS} strings, got {}",
                list.len()
            ),
            "stop",
        ));
    }
    Ok(list.into_iter().filter(|s| !s.is_empty()).collect())
}

/// A message's content: a string, or a list of parts of which only text parts are supported.
pub(super) fn message_content(v: Option<&Value>, index: usize) -> Result<String, ApiError> {
    let param = format!("messages[{index}].content");
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("text"), Some(Value::String(t))) => text.push_str(t),
                    (kind, _) => {
                        return Err(bad(
                            format!(
                                "{param}: only text parts are supported, got a part of type {}",
                                kind.unwrap_or("(none)")
                            ),
                            &param,
                        ))
                    }
                }
            }
            Ok(text)
        }
        Some(other) => Err(bad(
            format!("{param} must be a string or a list of parts, got {other}"),
            &param,
        )),
    }
}

fn chat_messages(m: &Map<String, Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let items = match field(m, "messages") {
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => return Err(bad("'messages' must not be empty", "messages")),
        Some(_) => return Err(bad("'messages' must be a list of messages", "messages")),
        None => return Err(bad("'messages' is required", "messages")),
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| tools::chat_message(item, i))
        .collect()
}

/// `prompt` of /v1/completions: a string, a list of token ids, or a list of one of those.
fn completion_prompt(m: &Map<String, Value>) -> Result<Prompt, ApiError> {
    fn token_ids(items: &[Value]) -> Option<Vec<u32>> {
        items
            .iter()
            .map(|v| v.as_u64().and_then(|x| u32::try_from(x).ok()))
            .collect()
    }
    let one_prompt = "this server answers one prompt per request";
    match field(m, "prompt") {
        None => Err(bad("'prompt' is required", "prompt")),
        Some(Value::String(s)) => Ok(Prompt::Text(s.clone())),
        Some(Value::Array(items)) => match items.as_slice() {
            [Value::String(s)] => Ok(Prompt::Text(s.clone())),
            [Value::Array(inner)] => token_ids(inner)
                .map(Prompt::Tokens)
                .ok_or_else(|| bad("'prompt' token ids must be integers", "prompt")),
            [] => Err(bad("'prompt' must not be empty", "prompt")),
            [Value::String(_) | Value::Array(_), ..] => Err(bad(
                format!("{one_prompt}; 'prompt' holds {}", items.len()),
                "prompt",
            )),
            _ => token_ids(items)
                .map(Prompt::Tokens)
                .ok_or_else(|| bad("'prompt' must be a string or a list of token ids", "prompt")),
        },
        Some(_) => Err(bad(
            "'prompt' must be a string or a list of token ids",
            "prompt",
        )),
    }
}

/// Parse the body of POST /v1/chat/completions or /v1/completions.
pub fn parse_request(endpoint: Endpoint, body: &[u8]) -> Result<GenerationRequest, ApiError> {
    let m = parse_object(body)?;
    let structured = tools::openai_structured(&m, endpoint == Endpoint::Chat)?;
    let prompt = match endpoint {
        Endpoint::Chat => Prompt::Chat {
            messages: chat_messages(&m)?,
            tools: structured.tools.clone(),
        },
        Endpoint::Completion => completion_prompt(&m)?,
    };
    if let Some(n) = integer(&m, "n", 1, i64::MAX)? {
        if n != 1 {
            return Err(bad(
                format!("'n' must be 1 (one answer per request), got {n}"),
                "n",
            ));
        }
    }
    if endpoint == Endpoint::Completion && boolean(&m, "echo")? == Some(true) {
        return Err(bad("'echo' is not supported", "echo"));
    }
    if endpoint == Endpoint::Completion && field(&m, "suffix").is_some() {
        return Err(bad("'suffix' is not supported", "suffix"));
    }
    // max_completion_tokens is the newer name; it wins when both are sent.
    let max_tokens = match integer(&m, "max_completion_tokens", 1, i64::MAX)? {
        Some(n) => Some(n),
        None => integer(&m, "max_tokens", 1, i64::MAX)?,
    }
    .map(|n| n as usize);

    let logprobs = match endpoint {
        // Chat: logprobs is a bool, top_logprobs the number of alternatives.
        Endpoint::Chat => {
            let on = boolean(&m, "logprobs")?.unwrap_or(false);
            let top = integer(&m, "top_logprobs", 0, MAX_TOP_LOGPROBS as i64)?;
            if top.is_some() && !on {
                return Err(bad("'top_logprobs' needs 'logprobs': true", "top_logprobs"));
            }
            on.then_some(LogprobRequest {
                top: top.unwrap_or(0) as usize,
            })
        }
        // Completions (legacy): logprobs is the number of alternatives.
        Endpoint::Completion => integer(&m, "logprobs", 0, MAX_TOP_LOGPROBS as i64)?
            .map(|n| LogprobRequest { top: n as usize }),
    };

    let defaults = SamplingParams::default();
    let seed = match field(&m, "seed") {
        None => None,
        Some(v) => match (v.as_u64(), v.as_i64()) {
            (Some(u), _) => Some(u),
            (None, Some(i)) => Some(i as u64), // OpenAI allows negative seeds; keep their bits
            _ => return Err(bad(format!("'seed' must be an integer, got {v}"), "seed")),
        },
    };
    let params = SamplingParams {
        temperature: number(&m, "temperature", 0.0, 2.0)?
            .map_or(defaults.temperature, |x| x as f32),
        top_p: number(&m, "top_p", 0.0, 1.0)?.map_or(defaults.top_p, |x| x as f32),
        top_k: integer(&m, "top_k", 0, i64::from(u32::MAX))?.map_or(defaults.top_k, |x| x as usize),
        min_p: number(&m, "min_p", 0.0, 1.0)?.map_or(defaults.min_p, |x| x as f32),
        seed,
        presence_penalty: number(&m, "presence_penalty", -2.0, 2.0)?.map_or(0.0, |x| x as f32),
        frequency_penalty: number(&m, "frequency_penalty", -2.0, 2.0)?.map_or(0.0, |x| x as f32),
        n_alternatives: logprobs.map_or(0, |l| l.top),
    };

    let stream = boolean(&m, "stream")?.unwrap_or(false);
    let include_usage = match field(&m, "stream_options") {
        None => false,
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                return Err(bad(
                    format!("'stream_options.include_usage' must be true or false, got {v}"),
                    "stream_options",
                ))
            }
        },
        Some(v) => {
            return Err(bad(
                format!("'stream_options' must be an object, got {v}"),
                "stream_options",
            ))
        }
    };

    Ok(GenerationRequest {
        prompt,
        params,
        max_tokens,
        stop: stop_strings(&m)?,
        n_keep: integer(&m, "n_keep", -1, i64::MAX)?,
        stream,
        include_usage,
        logprobs,
        structured,
    })
}

/// Inputs of one embeddings request, at most this many.
pub const MAX_EMBEDDING_INPUTS: usize = 256;

/// How /v1/embeddings sends each vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodingFormat {
    /// A JSON list of numbers.
    Float,
    /// Base64 of the little-endian f32 bytes (what the official Python client asks for by
    /// default, a third of the size).
    Base64,
}

pub struct EmbeddingsRequest {
    pub inputs: Vec<EmbedInput>,
    pub encoding: EncodingFormat,
}

/// `input` of /v1/embeddings and Ollama's /api/embed: a string, a list of strings, a list of
/// token ids, or a list of lists of token ids.
pub fn embedding_inputs(m: &Map<String, Value>, key: &str) -> Result<Vec<EmbedInput>, ApiError> {
    let what = format!("'{key}' must be a string, a list of strings, or token ids");
    let token_ids = |items: &[Value]| -> Result<Vec<u32>, ApiError> {
        items
            .iter()
            .map(|v| v.as_u64().and_then(|x| u32::try_from(x).ok()))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| {
                bad(
                    format!("'{key}' token ids must be non-negative integers"),
                    key,
                )
            })
    };
    let inputs = match field(m, key) {
        None => return Err(bad(format!("'{key}' is required"), key)),
        Some(Value::String(s)) => vec![EmbedInput::Text(s.clone())],
        Some(Value::Array(items)) => match items.first() {
            None => return Err(bad(format!("'{key}' must not be empty"), key)),
            Some(Value::Number(_)) => vec![EmbedInput::Tokens(token_ids(items)?)],
            Some(_) => {
                let mut inputs = Vec::with_capacity(items.len());
                for item in items {
                    inputs.push(match item {
                        Value::String(s) => EmbedInput::Text(s.clone()),
                        Value::Array(ids) => EmbedInput::Tokens(token_ids(ids)?),
                        _ => return Err(bad(what.clone(), key)),
                    });
                }
                inputs
            }
        },
        Some(_) => return Err(bad(what, key)),
    };
    if inputs.len() > MAX_EMBEDDING_INPUTS {
        return Err(bad(
            format!(
                "'{key}' holds at most {MAX_EMBEDDING_INPUTS} inputs per request, got {}",
                inputs.len()
            ),
            key,
        ));
    }
    for (i, input) in inputs.iter().enumerate() {
        let empty = match input {
            EmbedInput::Text(t) => t.is_empty(),
            EmbedInput::Tokens(t) => t.is_empty(),
        };
        if empty {
            return Err(bad(format!("'{key}'[{i}] is empty"), key));
        }
    }
    Ok(inputs)
}

/// Parse the body of POST /v1/embeddings.
pub fn parse_embeddings(body: &[u8]) -> Result<EmbeddingsRequest, ApiError> {
    let m = parse_object(body)?;
    let inputs = embedding_inputs(&m, "input")?;
    let encoding = match field(&m, "encoding_format") {
        None => EncodingFormat::Float,
        Some(Value::String(f)) if f == "float" => EncodingFormat::Float,
        Some(Value::String(f)) if f == "base64" => EncodingFormat::Base64,
        Some(v) => {
            return Err(bad(
                format!("'encoding_format' must be \"float\" or \"base64\", got {v}"),
                "encoding_format",
            ))
        }
    };
    if field(&m, "dimensions").is_some() {
        return Err(bad(
            "'dimensions' is not supported: the vectors have the model's width",
            "dimensions",
        ));
    }
    Ok(EmbeddingsRequest { inputs, encoding })
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let b = [
            group[0],
            *group.get(1).unwrap_or(&0),
            *group.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The /v1/embeddings answer.
pub fn embeddings_response(model: &str, e: &Embeddings, encoding: EncodingFormat) -> Value {
    let data: Vec<Value> = e
        .vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = match encoding {
                EncodingFormat::Float => json!(v),
                EncodingFormat::Base64 => {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    json!(base64(&bytes))
                }
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": e.prompt_tokens, "total_tokens": e.prompt_tokens},
    })
}

/// The fields every response and chunk of one request shares.
pub struct ResponseHead {
    pub endpoint: Endpoint,
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl ResponseHead {
    fn object(&self, stream: bool) -> &'static str {
        match (self.endpoint, stream) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completion, _) => "text_completion",
        }
    }

    fn wrap(&self, stream: bool, choices: Value) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("id".into(), json!(self.id));
        m.insert("object".into(), json!(self.object(stream)));
        m.insert("created".into(), json!(self.created));
        m.insert("model".into(), json!(self.model));
        m.insert(
            "system_fingerprint".into(),
            json!(concat!("smolrun-", env!("CARGO_PKG_VERSION"))),
        );
        m.insert("choices".into(), choices);
        m
    }
}

pub fn usage(s: &Summary) -> Value {
    json!({
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "total_tokens": s.prompt_tokens + s.completion_tokens,
    })
}

/// llama.cpp's `timings` object (extra field; the OpenAI clients ignore it, the page reads it).
pub fn timings(s: &Summary) -> Value {
    json!({
        "prompt_n": s.prompt_tokens,
        "prompt_ms": s.prompt_ms,
        "predicted_n": s.completion_tokens,
        "predicted_ms": s.generation_ms,
        "predicted_per_second": s.tokens_per_second(),
    })
}

fn token_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Chat logprobs: `{"content": [{token, logprob, bytes, top_logprobs: [...]}]}`.
fn chat_logprobs(tokens: &[TokenEvent]) -> Value {
    let content: Vec<Value> = tokens
        .iter()
        .map(|t| {
            let top: Vec<Value> = t
                .alternatives
                .iter()
                .map(|a| json!({"token": token_text(&a.bytes), "logprob": a.logprob, "bytes": a.bytes}))
                .collect();
            json!({
                "token": token_text(&t.bytes),
                "logprob": t.logprob,
                "bytes": t.bytes,
                "top_logprobs": top,
            })
        })
        .collect();
    json!({ "content": content })
}

/// Completions (legacy) logprobs: parallel lists, `top_logprobs` as {token: logprob} maps.
/// `text_offset` counts characters from the start of the answer; `offset` is where this piece
/// starts.
fn completion_logprobs(tokens: &[TokenEvent], offset: &mut usize) -> Value {
    let mut names = Vec::new();
    let mut lps = Vec::new();
    let mut tops = Vec::new();
    let mut offsets = Vec::new();
    for t in tokens {
        let text = token_text(&t.bytes);
        offsets.push(*offset);
        *offset += text.chars().count();
        names.push(text);
        lps.push(t.logprob);
        let top: Map<String, Value> = t
            .alternatives
            .iter()
            .map(|a| (token_text(&a.bytes), json!(a.logprob)))
            .collect();
        tops.push(Value::Object(top));
    }
    json!({"tokens": names, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

/// Builds the JSON of one request's answer, whole or in chunks.
pub struct Writer {
    pub head: ResponseHead,
    logprobs: Option<LogprobRequest>,
    /// Character offset of the next token (completions' `text_offset`).
    text_offset: usize,
    /// Set when the answer may hold tool calls: they are read out of the text.
    tool_calls: Option<ToolCallStream>,
}

impl Writer {
    pub fn new(head: ResponseHead, logprobs: Option<LogprobRequest>) -> Self {
        Writer {
            head,
            logprobs,
            text_offset: 0,
            tool_calls: None,
        }
    }

    /// Read calls of `tools` out of the answer.
    pub fn with_tool_calls(mut self, tools: Vec<String>) -> Self {
        self.tool_calls = Some(ToolCallStream::new(tools));
        self
    }

    fn logprobs_value(&mut self, tokens: &[TokenEvent]) -> Value {
        match (self.logprobs, self.head.endpoint) {
            (None, _) => Value::Null,
            (Some(_), Endpoint::Chat) => chat_logprobs(tokens),
            (Some(_), Endpoint::Completion) => completion_logprobs(tokens, &mut self.text_offset),
        }
    }

    /// The whole answer (stream: false).
    pub fn complete(&mut self, text: &str, tokens: &[TokenEvent], summary: &Summary) -> Value {
        let logprobs = self.logprobs_value(tokens);
        let mut finish = summary.finish_reason.as_str();
        let mut message = json!({"role": "assistant", "content": text});
        if let Some(stream) = &self.tool_calls {
            let answer = stream.parse(text);
            message["content"] = answer.content.clone().into();
            if !answer.calls.is_empty() && !answer.unfinished {
                if answer.content.is_empty() {
                    message["content"] = Value::Null;
                }
                message["tool_calls"] = tools::openai_calls(&answer.calls, &self.head.id, false);
                finish = "tool_calls";
            }
        }
        let choice = match self.head.endpoint {
            Endpoint::Chat => json!({
                "index": 0,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": finish,
            }),
            Endpoint::Completion => json!({
                "index": 0,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": finish,
            }),
        };
        let mut m = self.head.wrap(false, json!([choice]));
        m.insert("usage".into(), usage(summary));
        m.insert("timings".into(), timings(summary));
        insert_dropped(&mut m, summary);
        Value::Object(m)
    }

    fn chunk(&self, choice: Value, include_usage: bool) -> Map<String, Value> {
        let mut m = self.head.wrap(true, json!([choice]));
        if include_usage {
            m.insert("usage".into(), Value::Null);
        }
        m
    }

    /// The first chunk of a chat stream announces the role; completions have none.
    pub fn first_chunk(&self, include_usage: bool) -> Option<Value> {
        (self.head.endpoint == Endpoint::Chat).then(|| {
            let choice = json!({
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": null,
                "finish_reason": null,
            });
            Value::Object(self.chunk(choice, include_usage))
        })
    }

    pub fn piece_chunk(&mut self, text: &str, tokens: &[TokenEvent], include_usage: bool) -> Value {
        let logprobs = self.logprobs_value(tokens);
        let held;
        let text = match &mut self.tool_calls {
            Some(stream) => {
                held = stream.push(text);
                held.as_str()
            }
            None => text,
        };
        let choice = match self.head.endpoint {
            Endpoint::Chat => json!({
                "index": 0,
                "delta": {"content": text},
                "logprobs": logprobs,
                "finish_reason": null,
            }),
            Endpoint::Completion => json!({
                "index": 0,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": null,
            }),
        };
        Value::Object(self.chunk(choice, include_usage))
    }

    /// The chunks that end the answer: text held back and tool calls, then the one that
    /// carries finish_reason (and our timings).
    pub fn final_chunks(&mut self, summary: &Summary, include_usage: bool) -> Vec<Value> {
        let mut chunks = Vec::new();
        let mut finish = summary.finish_reason.as_str();
        if let Some(stream) = &mut self.tool_calls {
            let answer = stream.finish();
            let mut delta = Map::new();
            if !answer.content.is_empty() {
                delta.insert("content".into(), answer.content.into());
            }
            if !answer.calls.is_empty() && !answer.unfinished {
                let calls = tools::openai_calls(&answer.calls, &self.head.id, true);
                delta.insert("tool_calls".into(), calls);
                finish = "tool_calls";
            }
            if !delta.is_empty() {
                let choice = json!({"index": 0, "delta": delta, "logprobs": null,
                                    "finish_reason": null});
                chunks.push(Value::Object(self.chunk(choice, include_usage)));
            }
        }
        chunks.push(self.finish_chunk(finish, summary, include_usage));
        chunks
    }

    fn finish_chunk(&self, finish: &str, summary: &Summary, include_usage: bool) -> Value {
        let choice = match self.head.endpoint {
            Endpoint::Chat => {
                json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish})
            }
            Endpoint::Completion => {
                json!({"index": 0, "text": "", "logprobs": null, "finish_reason": finish})
            }
        };
        let mut m = self.chunk(choice, include_usage);
        m.insert("timings".into(), timings(summary));
        insert_dropped(&mut m, summary);
        Value::Object(m)
    }

    /// With stream_options.include_usage: one more chunk with no choices and the usage.
    pub fn usage_chunk(&self, summary: &Summary) -> Value {
        let mut m = self.head.wrap(true, json!([]));
        m.insert("usage".into(), usage(summary));
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: &str) -> Result<GenerationRequest, ApiError> {
        parse_request(Endpoint::Chat, body.as_bytes())
    }

    fn completion(body: &str) -> Result<GenerationRequest, ApiError> {
        parse_request(Endpoint::Completion, body.as_bytes())
    }

    #[test]
    fn minimal_chat_request_gets_defaults() {
        let r = chat(r#"{"model":"x","messages":[{"role":"user","content":"hi"}]}"#).unwrap();
        match &r.prompt {
            Prompt::Chat { messages, tools } => {
                assert_eq!(messages, &[ChatMessage::text("user", "hi")]);
                assert!(tools.is_none());
            }
            _ => panic!("expected a chat prompt"),
        }
        assert_eq!(r.params, SamplingParams::default());
        assert_eq!(r.max_tokens, None);
        assert!(r.stop.is_empty());
        assert!(!r.stream && !r.include_usage);
        assert_eq!(r.logprobs, None);
    }

    #[test]
    fn chat_request_with_every_option() {
        let r = chat(
            r#"{"messages":[{"role":"system","content":"be brief"},
                {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
                {"role":"assistant","content":null}],
                "max_tokens":5,"max_completion_tokens":7,"temperature":0.5,"top_p":0.9,
                "seed":-1,"presence_penalty":0.5,"frequency_penalty":-1.5,"stop":["\n",""],
                "stream":true,"stream_options":{"include_usage":true},
                "logprobs":true,"top_logprobs":3,"n":1,"user":"ignored","top_k":5,"min_p":0.1}"#,
        )
        .unwrap();
        let Prompt::Chat { messages: m, .. } = &r.prompt else {
            panic!("expected a chat prompt")
        };
        assert_eq!(m[1].content, "ab");
        assert_eq!(m[2].content, "");
        assert_eq!(r.max_tokens, Some(7));
        assert_eq!(r.params.temperature, 0.5);
        assert_eq!(r.params.top_p, 0.9);
        assert_eq!(r.params.seed, Some(u64::MAX));
        assert_eq!(r.params.presence_penalty, 0.5);
        assert_eq!(r.params.frequency_penalty, -1.5);
        assert_eq!(r.params.n_alternatives, 3);
        assert_eq!((r.params.top_k, r.params.min_p), (5, 0.1));
        assert_eq!(r.stop, ["\n"]);
        assert!(r.stream && r.include_usage);
        assert_eq!(r.logprobs, Some(LogprobRequest { top: 3 }));
    }

    #[test]
    fn stop_may_be_a_single_string() {
        let r = chat(r#"{"messages":[{"role":"user","content":"x"}],"stop":"END"}"#).unwrap();
        assert_eq!(r.stop, ["END"]);
    }

    #[test]
    fn completion_prompt_forms() {
        let text = |b: &str| match completion(b).unwrap().prompt {
            Prompt::Text(t) => t,
            _ => panic!("expected text"),
        };
        let tokens = |b: &str| match completion(b).unwrap().prompt {
            Prompt::Tokens(t) => t,
            _ => panic!("expected tokens"),
        };
        assert_eq!(text(r#"{"prompt":"abc"}"#), "abc");
        assert_eq!(text(r#"{"prompt":["abc"]}"#), "abc");
        assert_eq!(tokens(r#"{"prompt":[1,2,3]}"#), [1, 2, 3]);
        assert_eq!(tokens(r#"{"prompt":[[4,5]]}"#), [4, 5]);
        let r = completion(r#"{"prompt":"a","logprobs":2}"#).unwrap();
        assert_eq!(r.logprobs, Some(LogprobRequest { top: 2 }));
        assert_eq!(r.params.n_alternatives, 2);
    }

    #[test]
    fn bad_requests_are_400_with_the_parameter_named() {
        let cases = [
            (Endpoint::Chat, "{not json", None),
            (Endpoint::Chat, "[1,2]", None),
            (Endpoint::Chat, r#"{"model":"x"}"#, Some("messages")),
            (Endpoint::Chat, r#"{"messages":[]}"#, Some("messages")),
            (
                Endpoint::Chat,
                r#"{"messages":[{"content":"x"}]}"#,
                Some("messages[0].role"),
            ),
            (
                Endpoint::Chat,
                r#"{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#,
                Some("messages[0].content"),
            ),
            (
                Endpoint::Chat,
                r#"{"messages":[{"role":"user","content":"x"}],"temperature":3}"#,
                Some("temperature"),
            ),
            (
                Endpoint::Chat,
                r#"{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}"#,
                Some("temperature"),
            ),
            (
                Endpoint::Chat,
                r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":0}"#,
                Some("max_tokens"),
            ),
            (
                Endpoint::Chat,
                r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":1.5}"#,
                Some("max_tokens"),
            ),
            (
                Endpoint::Chat,
                r#"{"messages":[{"role":"user","content":"x"}],"n":2}"#,
                Some("n"),
            ),
            (
                Endpoint::Chat,
                r#"{"messages":[{"role":"user","content":"x"}],"stop":5}"#,
                Some("stop"),
            ),
            (
                Endpoint::Chat,
                r#"{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}"#,
                Some("top_logprobs"),
            ),
            (
                Endpoint::Chat,
                r#"{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}"#,
                Some("top_logprobs"),
            ),
            (
                Endpoint::Chat,
                r#"{"messages":[{"role":"user","content":"x"}],"stream":"yes"}"#,
                Some("stream"),
            ),
            (
                Endpoint::Completion,
                r#"{"prompt":["a","b"]}"#,
                Some("prompt"),
            ),
            (Endpoint::Completion, r#"{"prompt":7}"#, Some("prompt")),
            (Endpoint::Completion, r#"{"prompt":[1,-2]}"#, Some("prompt")),
            (
                Endpoint::Completion,
                r#"{"prompt":"a","echo":true}"#,
                Some("echo"),
            ),
        ];
        for (endpoint, body, param) in cases {
            let e = parse_request(endpoint, body.as_bytes())
                .err()
                .unwrap_or_else(|| panic!("{body} should be refused"));
            assert_eq!(e.status, 400, "{body}");
            assert_eq!(e.kind, "invalid_request_error", "{body}");
            assert_eq!(e.param.as_deref(), param, "{body}: {}", e.message);
        }
    }

    fn summary() -> Summary {
        Summary {
            finish_reason: super::super::worker::FinishReason::Length,
            dropped: Default::default(),
            prompt_tokens: 3,
            completion_tokens: 2,
            prompt_ms: 1.0,
            generation_ms: 10.0,
        }
    }

    fn head(endpoint: Endpoint) -> ResponseHead {
        ResponseHead {
            endpoint,
            id: "id-1".into(),
            created: 7,
            model: "m".into(),
        }
    }

    fn token(bytes: &[u8], logprob: f32) -> TokenEvent {
        TokenEvent {
            id: 1,
            bytes: bytes.to_vec(),
            logprob,
            alternatives: vec![super::super::backend::Alternative {
                id: 1,
                bytes: bytes.to_vec(),
                logprob,
            }],
        }
    }

    #[test]
    fn embedding_input_forms() {
        let kinds = |body: &str| -> Vec<String> {
            parse_embeddings(body.as_bytes())
                .unwrap()
                .inputs
                .iter()
                .map(|i| match i {
                    EmbedInput::Text(t) => format!("text {t}"),
                    EmbedInput::Tokens(t) => format!("tokens {t:?}"),
                })
                .collect()
        };
        assert_eq!(kinds(r#"{"input":"a"}"#), ["text a"]);
        assert_eq!(kinds(r#"{"input":["a","b"]}"#), ["text a", "text b"]);
        assert_eq!(kinds(r#"{"input":[1,2]}"#), ["tokens [1, 2]"]);
        assert_eq!(
            kinds(r#"{"input":[[1],[2,3]]}"#),
            ["tokens [1]", "tokens [2, 3]"]
        );
        let r = parse_embeddings(br#"{"input":"a","encoding_format":"base64"}"#).unwrap();
        assert_eq!(r.encoding, EncodingFormat::Base64);
        for body in [
            "{oops",
            r#"{"model":"m"}"#,
            r#"{"input":[]}"#,
            r#"{"input":""}"#,
            r#"{"input":["a",""]}"#,
            r#"{"input":[1,-1]}"#,
            r#"{"input":7}"#,
            r#"{"input":"a","encoding_format":"int8"}"#,
            r#"{"input":"a","dimensions":8}"#,
        ] {
            let e = parse_embeddings(body.as_bytes())
                .err()
                .unwrap_or_else(|| panic!("{body} should be refused"));
            assert_eq!(e.status, 400, "{body}");
        }
    }

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(&1.0f32.to_le_bytes()), "AACAPw==");
    }

    #[test]
    fn chat_answer_shape() {
        let mut w = Writer::new(head(Endpoint::Chat), Some(LogprobRequest { top: 1 }));
        let v = w.complete("hi", &[token(b"hi", -0.5)], &summary());
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["choices"][0]["message"]["content"], "hi");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(v["choices"][0]["logprobs"]["content"][0]["token"], "hi");
        assert_eq!(
            v["choices"][0]["logprobs"]["content"][0]["bytes"],
            json!([104, 105])
        );
        assert_eq!(
            v["choices"][0]["logprobs"]["content"][0]["top_logprobs"][0]["logprob"],
            -0.5
        );
        assert_eq!(v["usage"]["total_tokens"], 5);
    }

    #[test]
    fn completion_logprobs_are_legacy_lists() {
        let mut w = Writer::new(head(Endpoint::Completion), Some(LogprobRequest { top: 1 }));
        let a = w.piece_chunk("ab", &[token(b"a", -1.0), token(b"b", -2.0)], false);
        let b = w.piece_chunk("c", &[token(b"c", -3.0)], false);
        assert_eq!(a["object"], "text_completion");
        assert_eq!(a["choices"][0]["logprobs"]["tokens"], json!(["a", "b"]));
        assert_eq!(
            a["choices"][0]["logprobs"]["top_logprobs"][1],
            json!({"b": -2.0})
        );
        assert_eq!(b["choices"][0]["logprobs"]["text_offset"], json!([2]));
    }

    #[test]
    fn stream_chunks_carry_usage_only_when_asked() {
        let mut w = Writer::new(head(Endpoint::Chat), None);
        let plain = w.piece_chunk("x", &[], false);
        assert!(plain.get("usage").is_none());
        let with = w.piece_chunk("x", &[], true);
        assert_eq!(with["usage"], Value::Null);
        assert_eq!(
            w.first_chunk(false).unwrap()["choices"][0]["delta"]["role"],
            "assistant"
        );
        let last = w.usage_chunk(&summary());
        assert_eq!(last["choices"], json!([]));
        assert_eq!(last["usage"]["completion_tokens"], 2);
    }
}
