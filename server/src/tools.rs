//! Structured output and tool calls: what a request asks for (`response_format`, `tools`,
//! `tool_choice`, Ollama's `format`), the grammar that enforces it while sampling, and the
//! calls read back out of the answer.
//!
//! Tool calls use the Hermes format that Qwen2.5's chat template teaches the model:
//!
//! ```text
//! <tool_call>
//! {"name": "get_weather", "arguments": {"city": "Paris"}}
//! </tool_call>
//! ```
//!
//! With `tool_choice: "auto"` the model may answer in words or call a tool, so the grammar is
//! lazy: it applies from the moment `<tool_call>` appears in the answer (a single token in
//! Qwen's vocabulary), and from then on the call can only be well-formed JSON naming a tool
//! and matching its parameters. `"required"` and a named function apply it from the first token.

use super::backend::{ChatMessage, Constraint, ToolCall};
use super::error::ApiError;
use super::openai::{bad, field, message_content};
use serde_json::{json, Map, Value};
use smolrun_engine::json_schema::{
    grammar_for_any_json, grammar_for_schema, grammar_for_tool_calls, SchemaError,
};
use std::sync::Arc;

/// Where a tool call begins and ends in the model's answer.
pub const CALL_OPEN: &str = "<tool_call>";
pub const CALL_CLOSE: &str = "</tool_call>";

/// Calls in one answer when `parallel_tool_calls` is on (the default); one when it is off.
const MAX_PARALLEL_CALLS: usize = 8;

/// What a request wants from the answer besides text.
#[derive(Default)]
pub struct Structured {
    /// The tools, as the chat template receives them (OpenAI's list as sent).
    pub tools: Option<Value>,
    pub constraint: Option<Constraint>,
    /// Read calls of these tools back out of the answer.
    pub tool_calls: Option<Vec<String>>,
}

fn schema_error(e: SchemaError, param: &str) -> ApiError {
    bad(format!("{param}: {e}"), param)
}

/// `response_format` (OpenAI), or llama.cpp's top-level `json_schema`.
fn response_format(m: &Map<String, Value>) -> Result<Option<Constraint>, ApiError> {
    let from_schema = |schema: &Value, param: &str| -> Result<Option<Constraint>, ApiError> {
        let grammar = grammar_for_schema(schema).map_err(|e| schema_error(e, param))?;
        Ok(Some(Constraint {
            grammar: Arc::new(grammar),
            trigger: None,
        }))
    };
    if let Some(schema) = field(m, "json_schema") {
        return from_schema(schema, "json_schema");
    }
    let Some(format) = field(m, "response_format") else {
        return Ok(None);
    };
    let param = "response_format";
    let Some(f) = format.as_object() else {
        return Err(bad(
            format!("'{param}' must be an object, got {format}"),
            param,
        ));
    };
    match f.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => match field(f, "schema") {
            // llama.cpp's server takes a schema here too.
            Some(schema) => from_schema(schema, "response_format.schema"),
            None => Ok(Some(Constraint {
                grammar: Arc::new(grammar_for_any_json()),
                trigger: None,
            })),
        },
        Some("json_schema") => {
            let schema = f
                .get("json_schema")
                .and_then(|j| field(j.as_object()?, "schema"))
                .ok_or_else(|| {
                    bad(
                        "response_format of type json_schema needs json_schema.schema",
                        "response_format.json_schema.schema",
                    )
                })?;
            from_schema(schema, "response_format.json_schema.schema")
        }
        other => Err(bad(
            format!(
                "response_format.type must be text, json_object or json_schema, got {}",
                other.map_or("(none)".to_string(), |t| format!("'{t}'"))
            ),
            "response_format.type",
        )),
    }
}

/// Ollama's `format`: "json", or a JSON schema.
pub fn ollama_format(m: &Map<String, Value>) -> Result<Option<Constraint>, ApiError> {
    let grammar = match field(m, "format") {
        None => return Ok(None),
        Some(Value::String(s)) if s.is_empty() => return Ok(None),
        Some(Value::String(s)) if s == "json" => grammar_for_any_json(),
        Some(Value::Object(_)) => {
            grammar_for_schema(&m["format"]).map_err(|e| schema_error(e, "format"))?
        }
        Some(other) => {
            return Err(bad(
                format!("'format' must be \"json\" or a JSON schema, got {other}"),
                "format",
            ))
        }
    };
    Ok(Some(Constraint {
        grammar: Arc::new(grammar),
        trigger: None,
    }))
}

/// Functions by name, with their parameter schemas.
type Functions = Vec<(String, Value)>;

/// `tools`: the list as sent (for the template), and the functions the model may call.
fn tool_list(m: &Map<String, Value>) -> Result<Option<(Value, Functions)>, ApiError> {
    let Some(list) = field(m, "tools") else {
        return Ok(None);
    };
    let Some(items) = list.as_array() else {
        return Err(bad("'tools' must be a list of tools", "tools"));
    };
    if items.is_empty() {
        return Ok(None);
    }
    let mut functions = Vec::with_capacity(items.len());
    for (i, tool) in items.iter().enumerate() {
        let param = format!("tools[{i}]");
        let kind = tool
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("function");
        if kind != "function" {
            return Err(bad(
                format!("{param}.type must be 'function', got '{kind}'"),
                &param,
            ));
        }
        let function = tool.get("function").and_then(Value::as_object);
        let name = function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                bad(
                    format!("{param}.function.name must be a non-empty string"),
                    &param,
                )
            })?;
        if functions.iter().any(|(n, _): &(String, Value)| n == name) {
            return Err(bad(
                format!("{param}: two tools are named '{name}'"),
                &param,
            ));
        }
        // A function without parameters takes an empty object.
        let parameters = function
            .and_then(|f| field(f, "parameters"))
            .cloned()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        functions.push((name.to_string(), parameters));
    }
    Ok(Some((list.clone(), functions)))
}

enum ToolChoice {
    None,
    Auto,
    Required,
    Named(String),
}

fn tool_choice(m: &Map<String, Value>) -> Result<ToolChoice, ApiError> {
    let param = "tool_choice";
    match field(m, param) {
        None => Ok(ToolChoice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "none" => Ok(ToolChoice::None),
            "auto" => Ok(ToolChoice::Auto),
            "required" => Ok(ToolChoice::Required),
            other => Err(bad(
                format!("'{param}' must be none, auto, required or a function, got '{other}'"),
                param,
            )),
        },
        Some(v) => v
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .map(|n| ToolChoice::Named(n.to_string()))
            .ok_or_else(|| {
                bad(
                    format!("'{param}' as an object must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got {v}"),
                    param,
                )
            }),
    }
}

/// The structured-output and tool options of a chat request (OpenAI's or Ollama's: both send
/// `tools` in OpenAI's shape; Ollama has no `tool_choice` and calls tools when it sees fit).
pub fn chat_structured(
    m: &Map<String, Value>,
    format: Option<Constraint>,
) -> Result<Structured, ApiError> {
    let Some((tools_json, functions)) = tool_list(m)? else {
        if field(m, "tool_choice").is_some_and(|c| c != "none") {
            return Err(bad("'tool_choice' needs 'tools'", "tool_choice"));
        }
        return Ok(Structured {
            constraint: format,
            ..Structured::default()
        });
    };
    let max_calls = match field(m, "parallel_tool_calls") {
        Some(Value::Bool(false)) => 1,
        _ => MAX_PARALLEL_CALLS,
    };
    let (functions, trigger) = match tool_choice(m)? {
        // The model is not told about the tools it may not call.
        ToolChoice::None => {
            return Ok(Structured {
                constraint: format,
                ..Structured::default()
            })
        }
        ToolChoice::Auto => (functions, Some(CALL_OPEN.to_string())),
        ToolChoice::Required => (functions, None),
        ToolChoice::Named(name) => {
            let Some(f) = functions.into_iter().find(|(n, _)| *n == name) else {
                return Err(bad(
                    format!("tool_choice names '{name}', which is not in 'tools'"),
                    "tool_choice",
                ));
            };
            (vec![f], None)
        }
    };
    // One grammar per answer: the tool calls', or the format's. Refused rather than one of the
    // two silently ignored.
    if format.is_some() {
        return Err(bad(
            "response_format (or format) together with tools is not supported: send tools \
             with tool_choice \"none\" to get the format, or leave the format out",
            "response_format",
        ));
    }
    let grammar =
        grammar_for_tool_calls(&functions, max_calls).map_err(|e| schema_error(e, "tools"))?;
    Ok(Structured {
        tools: Some(tools_json),
        constraint: Some(Constraint {
            grammar: Arc::new(grammar),
            trigger,
        }),
        tool_calls: Some(functions.into_iter().map(|(name, _)| name).collect()),
    })
}

/// The OpenAI request's `response_format`, `tools` and `tool_choice` (`tools` only on chat).
pub fn openai_structured(m: &Map<String, Value>, chat: bool) -> Result<Structured, ApiError> {
    let format = response_format(m)?;
    if chat {
        chat_structured(m, format)
    } else {
        if field(m, "tools").is_some() {
            return Err(bad(
                "'tools' works on /v1/chat/completions, not /v1/completions",
                "tools",
            ));
        }
        Ok(Structured {
            constraint: format,
            ..Structured::default()
        })
    }
}

/// A message's `tool_calls` (OpenAI: arguments as a JSON string; Ollama: as an object).
fn message_tool_calls(item: &Value, index: usize) -> Result<Vec<ToolCall>, ApiError> {
    let param = format!("messages[{index}].tool_calls");
    let Some(calls) = item.get("tool_calls").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let Some(calls) = calls.as_array() else {
        return Err(bad(format!("{param} must be a list"), &param));
    };
    let mut out = Vec::with_capacity(calls.len());
    for (j, call) in calls.iter().enumerate() {
        let function = call.get("function");
        let name = function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("{param}[{j}].function.name is required"), &param))?;
        let arguments = match function.and_then(|f| f.get("arguments")) {
            None | Some(Value::Null) => json!({}),
            Some(Value::String(s)) => {
                serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
            }
            Some(v) => v.clone(),
        };
        out.push(ToolCall {
            id: call
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            name: name.to_string(),
            arguments,
        });
    }
    Ok(out)
}

/// One message of a chat request: role, content, and a tool-call conversation's fields.
pub fn chat_message(item: &Value, index: usize) -> Result<ChatMessage, ApiError> {
    let role = match item.get("role") {
        Some(Value::String(r)) if !r.is_empty() => r.clone(),
        _ => {
            return Err(bad(
                format!("messages[{index}].role must be a non-empty string"),
                &format!("messages[{index}].role"),
            ))
        }
    };
    let text = |key: &str| item.get(key).and_then(Value::as_str).map(str::to_string);
    Ok(ChatMessage {
        role,
        content: message_content(item.get("content"), index)?,
        tool_calls: message_tool_calls(item, index)?,
        tool_call_id: text("tool_call_id"),
        // OpenAI's tool messages may carry `name`, Ollama's `tool_name`.
        name: text("name").or_else(|| text("tool_name")),
    })
}

/// The calls read out of an answer, and the text around them.
#[derive(Debug, Default, PartialEq)]
pub struct ParsedAnswer {
    /// The text before the first call (trimmed), or the whole answer when it made none.
    pub content: String,
    pub calls: Vec<(String, Value)>,
    /// A call began but did not end (the token budget ran out): its text is dropped, as a
    /// broken call is worse than none.
    pub unfinished: bool,
}

/// Split an answer into its text and its tool calls: Hermes-format `<tool_call>` blocks, or
/// (as llama.cpp's Hermes parser also takes them) an answer that is nothing but a call written
/// as bare JSON, `{"name": ..., "arguments": ...}` or a list of those, maybe in a ```json
/// fence: small models under `tool_choice: auto` often leave the tags out. A bare object counts
/// only when it names one of `tools`, so JSON the user asked for stays text.
pub fn parse_answer(text: &str, tools: &[String]) -> ParsedAnswer {
    let Some(start) = text.find(CALL_OPEN) else {
        if let Some(calls) = bare_calls(text, tools) {
            return ParsedAnswer {
                calls,
                ..ParsedAnswer::default()
            };
        }
        return ParsedAnswer {
            content: text.to_string(),
            ..ParsedAnswer::default()
        };
    };
    let mut answer = ParsedAnswer {
        content: text[..start].trim().to_string(),
        ..ParsedAnswer::default()
    };
    let mut rest = &text[start..];
    while let Some(after_open) = rest.trim_start().strip_prefix(CALL_OPEN) {
        let Some(end) = after_open.find(CALL_CLOSE) else {
            answer.unfinished = true;
            break;
        };
        let call = serde_json::from_str::<Value>(after_open[..end].trim())
            .ok()
            .and_then(|v| call_of(&v));
        match call {
            Some(c) => answer.calls.push(c),
            None => {
                answer.unfinished = true;
                break;
            }
        }
        rest = &after_open[end + CALL_CLOSE.len()..];
    }
    answer
}

/// `{"name": ..., "arguments": ...}` as a call.
fn call_of(v: &Value) -> Option<(String, Value)> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = v.get("arguments").cloned().unwrap_or_else(|| json!({}));
    Some((name, args))
}

/// The answer without a ```json (or ```) fence around it.
fn unfenced(text: &str) -> &str {
    let t = text.trim();
    match t.strip_prefix("```") {
        Some(inner) => {
            let inner = inner.strip_prefix("json").unwrap_or(inner);
            inner.strip_suffix("```").unwrap_or(inner).trim()
        }
        None => t,
    }
}

/// An answer that is only a call (or a list of calls) to listed tools, as bare JSON.
fn bare_calls(text: &str, tools: &[String]) -> Option<Vec<(String, Value)>> {
    let value: Value = serde_json::from_str(unfenced(text)).ok()?;
    let items = match &value {
        Value::Array(items) if !items.is_empty() => items.as_slice(),
        Value::Object(_) => std::slice::from_ref(&value),
        _ => return None,
    };
    items
        .iter()
        .map(|v| call_of(v).filter(|(name, _)| tools.contains(name)))
        .collect()
}

/// Could `text` still grow into a bare-JSON call (see [`parse_answer`])? True while it is
/// empty, an opening fence, or JSON that begins with `{` or `[`.
fn may_be_bare_call(text: &str) -> bool {
    let t = text.trim_start();
    let t = match t.strip_prefix("```") {
        Some(rest) => {
            // "```", "```j", ... "```json", then a newline before the JSON.
            let word_end = rest.find(|c: char| c.is_whitespace()).unwrap_or(rest.len());
            if !"json".starts_with(&rest[..word_end]) {
                return false;
            }
            rest[word_end..].trim_start()
        }
        None if "```".starts_with(t) => return true,
        None => t,
    };
    t.is_empty() || t.starts_with('{') || t.starts_with('[')
}

/// A streamed answer that may hold tool calls: text is sent as it comes until something that
/// may begin a call shows up (`<tool_call>`, or an answer that opens as bare JSON); from there
/// it is held, and the calls are sent whole at the end (the official clients put streamed
/// calls together either way). Held text that turns out to be no call is sent at the end.
pub struct ToolCallStream {
    tools: Vec<String>,
    held: String,
    in_call: bool,
    /// Nothing has been sent yet and the answer so far may be a bare-JSON call.
    maybe_bare: bool,
}

impl ToolCallStream {
    pub fn new(tools: Vec<String>) -> Self {
        ToolCallStream {
            tools,
            held: String::new(),
            in_call: false,
            maybe_bare: true,
        }
    }

    /// The part of `text` that can be sent now.
    pub fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        if self.in_call {
            return String::new();
        }
        if let Some(i) = self.held.find(CALL_OPEN) {
            self.in_call = true;
            self.maybe_bare = false;
            let rest = self.held.split_off(i);
            return std::mem::replace(&mut self.held, rest);
        }
        if self.maybe_bare {
            if may_be_bare_call(&self.held) {
                return String::new();
            }
            self.maybe_bare = false;
        }
        // Hold the longest tail that may still grow into `<tool_call>` (it starts with '<',
        // so it starts on a character boundary).
        let keep = (1..CALL_OPEN.len().min(self.held.len() + 1))
            .rev()
            .find(|&n| {
                self.held.is_char_boundary(self.held.len() - n)
                    && CALL_OPEN.starts_with(&self.held[self.held.len() - n..])
            })
            .unwrap_or(0);
        let rest = self.held.split_off(self.held.len() - keep);
        std::mem::replace(&mut self.held, rest)
    }

    /// A whole answer (not streamed), split.
    pub fn parse(&self, text: &str) -> ParsedAnswer {
        parse_answer(text, &self.tools)
    }

    /// What is left at the end: text not yet sent, and the calls.
    pub fn finish(&mut self) -> ParsedAnswer {
        let held = std::mem::take(&mut self.held);
        if self.in_call || self.maybe_bare {
            let mut answer = parse_answer(&held, &self.tools);
            if self.in_call {
                // Text before the call was sent already.
                answer.content.clear();
            }
            answer
        } else {
            ParsedAnswer {
                content: held,
                ..ParsedAnswer::default()
            }
        }
    }
}

/// Calls in OpenAI's shape: arguments as a JSON string, ids made from the response's id.
pub fn openai_calls(calls: &[(String, Value)], response_id: &str, streamed: bool) -> Value {
    Value::Array(
        calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                let mut call = json!({
                    "id": format!("call_{}_{i}", response_id.rsplit('-').next().unwrap_or("0")),
                    "type": "function",
                    "function": {"name": name, "arguments": args.to_string()},
                });
                if streamed {
                    call["index"] = i.into();
                }
                call
            })
            .collect(),
    )
}

/// Calls in Ollama's shape: arguments as an object.
pub fn ollama_calls(calls: &[(String, Value)]) -> Value {
    Value::Array(
        calls
            .iter()
            .map(|(name, args)| json!({"function": {"name": name, "arguments": args}}))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn answers_split_into_text_and_calls() {
        let tools = names(&["get_weather", "get_time", "f"]);
        let a = parse_answer("plain text", &tools);
        assert_eq!(a.content, "plain text");
        assert!(a.calls.is_empty() && !a.unfinished);

        let a = parse_answer(
            "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
            &tools,
        );
        assert_eq!(a.content, "Let me look.");
        assert_eq!(
            a.calls,
            vec![
                ("get_weather".to_string(), json!({"city": "Paris"})),
                ("get_time".to_string(), json!({})),
            ]
        );
        assert!(!a.unfinished);

        let a = parse_answer("<tool_call>\n{\"name\": \"get_weather\", \"argu", &tools);
        assert!(a.unfinished && a.calls.is_empty() && a.content.is_empty());
    }

    #[test]
    fn a_bare_json_call_counts_when_it_names_a_tool() {
        let tools = names(&["get_weather"]);
        let call = ("get_weather".to_string(), json!({"city": "Rome"}));
        for text in [
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}",
            "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"Rome\"}\n}\n```",
            "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]",
        ] {
            let a = parse_answer(text, &tools);
            assert_eq!(a.calls, vec![call.clone()], "{text}");
            assert!(a.content.is_empty());
        }
        // JSON that names no listed tool is the answer's text.
        for text in [
            "{\"name\": \"Ada\", \"age\": 36}",
            "{\"city\": \"Rome\"}",
            "[1, 2]",
        ] {
            let a = parse_answer(text, &tools);
            assert!(a.calls.is_empty(), "{text}");
            assert_eq!(a.content, text);
        }
    }

    #[test]
    fn a_stream_holds_back_what_may_begin_a_call() {
        let tools = names(&["f"]);
        let mut s = ToolCallStream::new(tools.clone());
        assert_eq!(s.push("Hello <"), "Hello ");
        assert_eq!(s.push("b>bold"), "<b>bold");
        assert_eq!(s.push(" <tool_"), " ");
        assert_eq!(s.push("call>\n{\"name\": \"f\", "), "");
        assert_eq!(s.push("\"arguments\": {}}\n</tool_call>"), "");
        let end = s.finish();
        assert_eq!(end.calls, vec![("f".to_string(), json!({}))]);
        assert!(end.content.is_empty());

        let mut s = ToolCallStream::new(tools.clone());
        assert_eq!(s.push("a < b"), "a < b");
        assert_eq!(s.push(" ends <tool"), " ends ");
        assert_eq!(s.finish().content, "<tool");

        // An answer that opens as JSON is held to the end: a bare call, or text after all.
        let mut s = ToolCallStream::new(tools.clone());
        assert_eq!(s.push("```"), "");
        assert_eq!(s.push("json\n{\"name\": \"f\","), "");
        assert_eq!(s.push(" \"arguments\": {}}\n```"), "");
        assert_eq!(s.finish().calls, vec![("f".to_string(), json!({}))]);
        let mut s = ToolCallStream::new(tools.clone());
        assert_eq!(s.push("{\"x\": 1}"), "");
        let end = s.finish();
        assert!(end.calls.is_empty());
        assert_eq!(end.content, "{\"x\": 1}");
        // A code fence of another language is sent as it comes.
        let mut s = ToolCallStream::new(tools);
        assert_eq!(s.push("``"), "");
        assert_eq!(s.push("`python\nprint(1)"), "```python\nprint(1)");
    }

    #[test]
    fn calls_are_written_in_each_api_shape() {
        let calls = vec![("f".to_string(), json!({"x": 1}))];
        let o = openai_calls(&calls, "chatcmpl-7", false);
        assert_eq!(o[0]["id"], "call_7_0");
        assert_eq!(o[0]["function"]["arguments"], "{\"x\":1}");
        assert!(o[0].get("index").is_none());
        assert_eq!(openai_calls(&calls, "chatcmpl-7", true)[0]["index"], 0);
        assert_eq!(ollama_calls(&calls)[0]["function"]["arguments"]["x"], 1);
    }

    #[test]
    fn history_messages_keep_their_calls_with_arguments_as_objects() {
        let item = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]});
        let m = chat_message(&item, 0).unwrap();
        assert_eq!(m.tool_calls[0].arguments, json!({"city": "Paris"}));
        let t = m.template_json();
        assert_eq!(t["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
        let tool = chat_message(
            &json!({"role": "tool", "tool_call_id": "call_1", "content": "22 C"}),
            1,
        )
        .unwrap();
        assert_eq!(tool.tool_call_id.as_deref(), Some("call_1"));
    }

    #[test]
    fn tool_choice_must_name_a_listed_tool() {
        let m = json!({"tools": [{"type": "function", "function": {"name": "f"}}],
                       "tool_choice": {"type": "function", "function": {"name": "g"}}});
        let e = openai_structured(m.as_object().unwrap(), true)
            .err()
            .unwrap();
        assert!(e.message.contains("'g'"), "{}", e.message);
        let m = json!({"tools": [{"type": "function", "function": {"name": "f"}}]});
        let s = openai_structured(m.as_object().unwrap(), true).unwrap();
        assert!(s.tool_calls == Some(vec!["f".to_string()]) && s.tools.is_some());
        assert_eq!(
            s.constraint.unwrap().trigger.as_deref(),
            Some(CALL_OPEN),
            "auto: the grammar waits for the call to begin"
        );
        let m = json!({"tools": [{"type": "function", "function": {"name": "f"}}],
                       "tool_choice": "none"});
        let s = openai_structured(m.as_object().unwrap(), true).unwrap();
        assert!(s.tool_calls.is_none() && s.tools.is_none() && s.constraint.is_none());
    }

    #[test]
    fn response_formats() {
        let s = |v: Value| openai_structured(v.as_object().unwrap(), true);
        assert!(s(json!({"response_format": {"type": "text"}}))
            .unwrap()
            .constraint
            .is_none());
        assert!(s(json!({"response_format": {"type": "json_object"}}))
            .unwrap()
            .constraint
            .is_some());
        let e = s(json!({"response_format": {"type": "json_schema"}}))
            .err()
            .unwrap();
        assert!(e.message.contains("json_schema.schema"));
        let e = s(
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x",
            "schema": {"type": "string", "pattern": "^a+$"}}}}),
        )
        .err()
        .unwrap();
        assert!(e.message.contains("pattern"), "{}", e.message);
        let e = s(json!({"response_format": {"type": "yaml"}}))
            .err()
            .unwrap();
        assert!(e.message.contains("'yaml'"));
        // Tools and a format cannot both hold the answer.
        let tools = json!([{"type": "function", "function": {"name": "f"}}]);
        let e = s(json!({"response_format": {"type": "json_object"}, "tools": tools}))
            .err()
            .unwrap();
        assert!(e.message.contains("together with tools"), "{}", e.message);
        let none = json!({"response_format": {"type": "json_object"}, "tool_choice": "none",
                          "tools": tools});
        assert!(s(none).unwrap().constraint.is_some());
    }
}
