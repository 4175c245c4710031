//! The Ollama wire format beside the OpenAI one: /api/generate, /api/chat (NDJSON streams by
//! default), /api/embed, /api/tags, /api/show, /api/ps, /api/version. Requests become the same
//! worker jobs as the OpenAI endpoints' (one generation path); only parsing and the answer's
//! shape are Ollama's. Field names follow Ollama's docs/api.md.

use super::backend::{ChatMessage, Constraint, ModelDetails, SamplingParams};
use super::error::ApiError;
use super::models::DirModel;
use super::openai::{
    bad, boolean, embedding_inputs, field, integer, number, parse_object, stop_strings,
};
use super::tools::{self, ToolCallStream};
use super::worker::{EmbedInput, Embeddings, FinishReason, ModelInfo, Prompt, Resident, Summary};
use serde_json::{json, Map, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The Ollama version /api/version reports: the API level these endpoints follow, so clients
/// that check it (for /api/embed, which came in 0.3) accept the server.
pub const API_VERSION: &str = "0.9.0";

/// Which generating endpoint a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Generate,
    Chat,
}

pub struct GenerationRequest {
    pub prompt: Prompt,
    pub params: SamplingParams,
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    /// `options.num_keep`: tokens a context shift keeps (-1: the whole prompt).
    pub num_keep: Option<i64>,
    pub stream: bool,
    /// `format` (JSON or a schema) or the tool-call grammar.
    pub constraint: Option<Constraint>,
    /// `tools` were given: calls of them are read out of the answer.
    pub tool_calls: Option<Vec<String>>,
}

/// A request with nothing to generate (an empty prompt, no messages): Ollama loads the model
/// and answers `done_reason: "load"` at once.
pub enum Parsed {
    Generate(Box<GenerationRequest>),
    LoadOnly { stream: bool },
}

/// Ollama's defaults where they differ from OpenAI's (temperature 0.8, top_p 0.9, no min_p),
/// so a client gets the answers it would get from Ollama.
fn ollama_defaults() -> SamplingParams {
    SamplingParams {
        temperature: 0.8,
        top_p: 0.9,
        top_k: 40,
        min_p: 0.0,
        ..SamplingParams::default()
    }
}

/// `options`: the sampler's parameters, the token budget and the stop strings. Options this
/// server has no use for (num_ctx, num_thread, repeat_penalty, ...) are ignored, as Ollama
/// ignores unknown ones.
fn options(m: &Map<String, Value>) -> Result<Options, ApiError> {
    let empty = Map::new();
    let o = match field(m, "options") {
        None => &empty,
        Some(Value::Object(o)) => o,
        Some(v) => {
            return Err(bad(
                format!("'options' must be an object, got {v}"),
                "options",
            ))
        }
    };
    let d = ollama_defaults();
    let seed = match field(o, "seed") {
        None => None,
        Some(v) => match v.as_i64() {
            Some(s) if s < 0 => None, // -1: a random seed
            Some(s) => Some(s as u64),
            None => return Err(bad(format!("'seed' must be an integer, got {v}"), "seed")),
        },
    };
    let params = SamplingParams {
        temperature: number(o, "temperature", 0.0, 100.0)?.map_or(d.temperature, |x| x as f32),
        top_p: number(o, "top_p", 0.0, 1.0)?.map_or(d.top_p, |x| x as f32),
        top_k: integer(o, "top_k", 0, i64::from(u32::MAX))?.map_or(d.top_k, |x| x as usize),
        min_p: number(o, "min_p", 0.0, 1.0)?.map_or(d.min_p, |x| x as f32),
        seed,
        presence_penalty: number(o, "presence_penalty", -2.0, 2.0)?.map_or(0.0, |x| x as f32),
        frequency_penalty: number(o, "frequency_penalty", -2.0, 2.0)?.map_or(0.0, |x| x as f32),
        n_alternatives: 0,
    };
    // -1: no limit; -2: until the context is full (the same here: generation always stops there).
    let max_tokens = match integer(o, "num_predict", i64::MIN, i64::MAX)? {
        None | Some(-1) | Some(-2) => None,
        Some(n) if n >= 1 => Some(n as usize),
        Some(n) => {
            return Err(bad(
                format!(
                    "'num_predict' must be a positive token count, -1 (no limit) or -2 (fill \
                     the context), got {n}"
                ),
                "num_predict",
            ))
        }
    };
    Ok(Options {
        params,
        max_tokens,
        stop: stop_strings(o)?,
        num_keep: integer(o, "num_keep", -1, i64::MAX)?,
    })
}

/// What `options` holds for a generation.
struct Options {
    params: SamplingParams,
    max_tokens: Option<usize>,
    stop: Vec<String>,
    /// Tokens a context shift keeps (-1: the whole prompt).
    num_keep: Option<i64>,
}

/// Refuse what this server cannot do instead of silently doing something else.
fn refuse_unsupported(m: &Map<String, Value>, keys: &[(&str, &str)]) -> Result<(), ApiError> {
    for (key, why) in keys {
        let given = match field(m, key) {
            None => false,
            Some(Value::String(s)) => !s.is_empty(),
            Some(Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
        };
        if given {
            return Err(bad(format!("'{key}' is not supported: {why}"), key));
        }
    }
    Ok(())
}

const NO_IMAGES: &str = "the server runs text-only models";

fn string<'a>(m: &'a Map<String, Value>, key: &str) -> Result<&'a str, ApiError> {
    match field(m, key) {
        None => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(v) => Err(bad(format!("'{key}' must be a string, got {v}"), key)),
    }
}

fn chat_messages(m: &Map<String, Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let items = match field(m, "messages") {
        None => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(bad("'messages' must be a list of messages", "messages")),
    };
    let mut messages = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Some(msg) = item.as_object() else {
            return Err(bad(format!("messages[{i}] must be an object"), "messages"));
        };
        refuse_unsupported(msg, &[("images", NO_IMAGES)])?;
        messages.push(tools::chat_message(item, i)?);
    }
    Ok(messages)
}

/// Parse the body of POST /api/generate or /api/chat.
pub fn parse_request(endpoint: Endpoint, body: &[u8]) -> Result<Parsed, ApiError> {
    let m = parse_object(body)?;
    // Ollama streams unless told not to.
    let stream = boolean(&m, "stream")?.unwrap_or(true);
    refuse_unsupported(&m, &[("images", NO_IMAGES)])?;
    let format = tools::ollama_format(&m)?;
    let mut structured = tools::Structured {
        constraint: format.clone(),
        ..tools::Structured::default()
    };
    let prompt = match endpoint {
        Endpoint::Chat => {
            structured = tools::chat_structured(&m, format)?;
            let messages = chat_messages(&m)?;
            if messages.is_empty() {
                return Ok(Parsed::LoadOnly { stream });
            }
            Prompt::Chat {
                messages,
                tools: structured.tools.take(),
            }
        }
        Endpoint::Generate => {
            refuse_unsupported(
                &m,
                &[
                    ("suffix", "fill-in-the-middle is not implemented"),
                    (
                        "template",
                        "the model's own chat template is used; send raw: true with a \
                         formatted prompt instead",
                    ),
                ],
            )?;
            let prompt = string(&m, "prompt")?;
            if prompt.is_empty() {
                return Ok(Parsed::LoadOnly { stream });
            }
            if boolean(&m, "raw")?.unwrap_or(false) {
                Prompt::Text(prompt.to_string())
            } else {
                let mut messages = Vec::new();
                let system = string(&m, "system")?;
                if !system.is_empty() {
                    messages.push(ChatMessage::text("system", system));
                }
                messages.push(ChatMessage::text("user", prompt));
                Prompt::Chat {
                    messages,
                    tools: None,
                }
            }
        }
    };
    let Options {
        params,
        max_tokens,
        stop,
        num_keep,
    } = options(&m)?;
    Ok(Parsed::Generate(Box::new(GenerationRequest {
        prompt,
        params,
        max_tokens,
        stop,
        num_keep,
        stream,
        constraint: structured.constraint,
        tool_calls: structured.tool_calls,
    })))
}

pub struct EmbedRequest {
    pub inputs: Vec<EmbedInput>,
    /// Cut inputs longer than the context to its length (Ollama's default) instead of refusing.
    pub truncate: bool,
}

/// Parse the body of POST /api/embed (`input`) or the older /api/embeddings (`prompt`).
pub fn parse_embed(body: &[u8], key: &str) -> Result<EmbedRequest, ApiError> {
    let m = parse_object(body)?;
    if field(&m, "dimensions").is_some() {
        return Err(bad(
            "'dimensions' is not supported: the vectors have the model's width",
            "dimensions",
        ));
    }
    Ok(EmbedRequest {
        inputs: embedding_inputs(&m, key)?,
        truncate: boolean(&m, "truncate")?.unwrap_or(true),
    })
}

/// The name the Ollama API shows for the model: Ollama's form, with the default tag.
pub fn model_name(info: &ModelInfo) -> String {
    format!("{}:latest", info.name)
}

/// RFC 3339 in UTC with nanoseconds, as Ollama writes `created_at`.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        d.subsec_nanos()
    )
}

fn details_json(d: &ModelDetails) -> Value {
    json!({
        "parent_model": "",
        "format": "gguf",
        "family": d.family,
        "families": [d.family],
        "parameter_size": d.parameter_size,
        "quantization_level": d.quantization_level,
    })
}

fn modified_at(d: &ModelDetails) -> String {
    rfc3339(UNIX_EPOCH + Duration::from_secs(d.modified_unix))
}

/// One entry of /api/tags.
fn tag(info: &ModelInfo) -> Value {
    let d = &info.details;
    let name = model_name(info);
    json!({
        "name": name,
        "model": name,
        "modified_at": modified_at(d),
        "size": d.size,
        "digest": d.digest.trim_start_matches("sha256:"),
        "details": details_json(d),
    })
}

/// GET /api/tags: the models this server can run. Without a folder, the one it holds; with
/// `--models-dir`, every model of the folder: the loaded (or last loaded) one with its header's
/// details, the others with their file's size and date only (reading each header would cost
/// a flash read of every file per listing; their details come with their first load).
pub fn tags(info: &ModelInfo, folder: Option<&[DirModel]>) -> Value {
    let Some(folder) = folder else {
        return json!({"models": [tag(info)]});
    };
    let models: Vec<Value> = folder
        .iter()
        .map(|m| {
            if m.name == info.name {
                return tag(info);
            }
            let name = format!("{}:latest", m.name);
            json!({
                "name": name,
                "model": name,
                "modified_at": rfc3339(m.modified),
                "size": m.size,
                "digest": "",
                "details": {"format": "gguf"},
            })
        })
        .collect();
    json!({ "models": models })
}

/// GET /api/ps: the loaded model (none once its keep_alive ran out), all in RAM (no VRAM on
/// these boxes), with when it will be unloaded (far in the future: never).
pub fn ps(resident: &Resident) -> Value {
    if !resident.loaded {
        return json!({"models": []});
    }
    let info = &resident.info;
    let d = &info.details;
    let name = model_name(info);
    let expires = resident
        .expires
        .map_or_else(|| "9999-12-31T23:59:59Z".to_string(), rfc3339);
    json!({"models": [{
        "name": name,
        "model": name,
        "size": d.size,
        "digest": d.digest.trim_start_matches("sha256:"),
        "details": details_json(d),
        "expires_at": expires,
        "size_vram": 0,
        "context_length": info.n_ctx,
    }]})
}

/// What /api/show says the model can do: tools when its chat template takes them (clients
/// such as Home Assistant offer tools only then).
fn capabilities(d: &ModelDetails) -> Value {
    if d.template.contains("tools") {
        json!(["completion", "embedding", "tools"])
    } else {
        json!(["completion", "embedding"])
    }
}

/// POST /api/show (any model name: the server holds one).
pub fn show(info: &ModelInfo) -> Value {
    let d = &info.details;
    json!({
        "modelfile": format!("# served by smolrun\nFROM {}\n", info.name),
        "parameters": "temperature 0.8\ntop_k 40\ntop_p 0.9",
        "template": d.template,
        "license": "",
        "details": details_json(d),
        "model_info": d.model_info,
        "capabilities": capabilities(d),
        "modified_at": modified_at(d),
    })
}

fn nanos(ms: f64) -> u64 {
    (ms * 1e6).max(0.0) as u64
}

/// Builds the JSON objects of one /api/generate or /api/chat answer.
pub struct Writer {
    pub endpoint: Endpoint,
    pub model: String,
    /// Set when the request gave `tools`: calls are read out of the answer.
    pub tool_calls: Option<ToolCallStream>,
}

impl Writer {
    /// An object carrying the part of `text` that can be sent now (not a tool call's).
    pub fn piece(&mut self, text: &str) -> Map<String, Value> {
        match &mut self.tool_calls {
            Some(stream) => {
                let sendable = stream.push(text);
                self.object(&sendable)
            }
            None => self.object(text),
        }
    }

    /// An object carrying `text`, not yet done.
    fn object(&self, text: &str) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("model".into(), json!(self.model));
        m.insert("created_at".into(), json!(rfc3339(SystemTime::now())));
        match self.endpoint {
            Endpoint::Generate => m.insert("response".into(), json!(text)),
            Endpoint::Chat => m.insert(
                "message".into(),
                json!({"role": "assistant", "content": text}),
            ),
        };
        m.insert("done".into(), json!(false));
        m
    }

    /// The last object: `text` (all of it when not streamed, "" when streamed), how it ended
    /// and the timings in nanoseconds. The model was loaded at start, so `load_duration` is 0.
    pub fn done(&mut self, text: &str, s: &Summary, total: Duration) -> Value {
        let mut m = self.object(text);
        if let Some(stream) = &mut self.tool_calls {
            // Streamed: what was held back; whole: the answer, split.
            let answer = if text.is_empty() {
                stream.finish()
            } else {
                stream.parse(text)
            };
            m = self.object(&answer.content);
            if let Some(message) = m.get_mut("message") {
                if !answer.calls.is_empty() && !answer.unfinished {
                    message["tool_calls"] = tools::ollama_calls(&answer.calls);
                }
            }
        }
        let reason = match s.finish_reason {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        };
        m.insert("done".into(), json!(true));
        m.insert("done_reason".into(), json!(reason));
        m.insert("total_duration".into(), json!(total.as_nanos() as u64));
        m.insert("load_duration".into(), json!(0));
        m.insert("prompt_eval_count".into(), json!(s.prompt_tokens));
        m.insert("prompt_eval_duration".into(), json!(nanos(s.prompt_ms)));
        m.insert("eval_count".into(), json!(s.completion_tokens));
        m.insert("eval_duration".into(), json!(nanos(s.generation_ms)));
        super::openai::insert_dropped(&mut m, s);
        Value::Object(m)
    }

    /// The answer to a request with nothing to generate: the model was loaded, or (with
    /// keep_alive 0) unloaded.
    pub fn load_only(&self, loaded: bool) -> Value {
        let mut m = self.object("");
        m.insert("done".into(), json!(true));
        let reason = if loaded { "load" } else { "unload" };
        m.insert("done_reason".into(), json!(reason));
        Value::Object(m)
    }
}

/// POST /api/embed's answer.
pub fn embed_response(model: &str, e: &Embeddings, total: Duration) -> Value {
    json!({
        "model": model,
        "embeddings": e.vectors,
        "total_duration": total.as_nanos() as u64,
        "load_duration": 0,
        "prompt_eval_count": e.prompt_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generation(endpoint: Endpoint, body: &str) -> GenerationRequest {
        match parse_request(endpoint, body.as_bytes()) {
            Ok(Parsed::Generate(r)) => *r,
            Ok(Parsed::LoadOnly { .. }) => panic!("{body}: nothing to generate"),
            Err(e) => panic!("{body}: {}", e.message),
        }
    }

    #[test]
    fn generate_defaults_stream_and_use_the_chat_template() {
        let r = generation(
            Endpoint::Generate,
            r#"{"model":"m","prompt":"hi","system":"be nice"}"#,
        );
        assert!(r.stream);
        assert_eq!(r.params, ollama_defaults());
        assert_eq!(r.max_tokens, None);
        let Prompt::Chat { messages: m, .. } = &r.prompt else {
            panic!("expected a chat prompt")
        };
        assert_eq!(
            (m[0].role.as_str(), m[1].content.as_str()),
            ("system", "hi")
        );
        let raw = generation(Endpoint::Generate, r#"{"prompt":"<|x|>","raw":true}"#);
        assert!(matches!(raw.prompt, Prompt::Text(t) if t == "<|x|>"));
    }

    #[test]
    fn options_map_onto_the_sampler() {
        let r = generation(
            Endpoint::Chat,
            r#"{"messages":[{"role":"user","content":"x"}],"stream":false,
                "options":{"temperature":0,"top_p":0.5,"top_k":3,"seed":42,"num_predict":7,
                "stop":["\n\n"],"num_ctx":2048,"repeat_penalty":1.1}}"#,
        );
        assert!(!r.stream);
        assert_eq!(r.params.temperature, 0.0);
        assert_eq!((r.params.top_p, r.params.top_k), (0.5, 3));
        assert_eq!(r.params.seed, Some(42));
        assert_eq!(r.max_tokens, Some(7));
        assert_eq!(r.stop, ["\n\n"]);
        let r = generation(
            Endpoint::Generate,
            r#"{"prompt":"x","options":{"num_predict":-1,"seed":-1}}"#,
        );
        assert_eq!((r.max_tokens, r.params.seed), (None, None));
    }

    #[test]
    fn nothing_to_generate_is_a_load() {
        for (endpoint, body) in [
            (Endpoint::Generate, r#"{"model":"m"}"#),
            (Endpoint::Chat, r#"{"model":"m","messages":[]}"#),
        ] {
            assert!(matches!(
                parse_request(endpoint, body.as_bytes()),
                Ok(Parsed::LoadOnly { stream: true })
            ));
        }
    }

    #[test]
    fn bad_or_unsupported_requests_are_400() {
        for (endpoint, body) in [
            (Endpoint::Chat, "{nope"),
            (Endpoint::Chat, r#"{"messages":"hi"}"#),
            (Endpoint::Chat, r#"{"messages":[{"content":"x"}]}"#),
            (
                Endpoint::Chat,
                r#"{"messages":[{"role":"user","content":"x","images":["AA=="]}]}"#,
            ),
            (
                Endpoint::Chat,
                r#"{"messages":[{"role":"user","content":"x"}],"tools":[{}]}"#,
            ),
            (Endpoint::Generate, r#"{"prompt":"x","format":"yaml"}"#),
            (
                Endpoint::Generate,
                r#"{"prompt":"x","format":{"type":"string","pattern":"a"}}"#,
            ),
            (Endpoint::Generate, r#"{"prompt":5}"#),
            (
                Endpoint::Generate,
                r#"{"prompt":"x","options":{"temperature":"hot"}}"#,
            ),
            (
                Endpoint::Generate,
                r#"{"prompt":"x","options":{"num_predict":0}}"#,
            ),
            (Endpoint::Generate, r#"{"prompt":"x","options":7}"#),
            (Endpoint::Generate, r#"{"prompt":"x","stream":"no"}"#),
        ] {
            let e = parse_request(endpoint, body.as_bytes())
                .err()
                .unwrap_or_else(|| panic!("{body} should be refused"));
            assert_eq!(e.status, 400, "{body}");
        }
        assert_eq!(
            parse_embed(b"{", "input").err().map(|e| e.status),
            Some(400)
        );
        assert!(
            parse_embed(br#"{"input":["a","b"]}"#, "input")
                .unwrap()
                .truncate
        );
    }

    #[test]
    fn created_at_is_rfc3339_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        let t = UNIX_EPOCH + Duration::new(1_709_251_199, 5); // the day before a leap day
        assert_eq!(rfc3339(t), "2024-02-29T23:59:59.000000005Z");
    }
}
