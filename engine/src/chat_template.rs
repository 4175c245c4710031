//! Chat templates: turning a conversation into the prompt text the model was trained on.
//!
//! A GGUF file usually carries its Hugging Face Jinja template in `tokenizer.chat_template`; we
//! render it with minijinja set up the way transformers sets up Jinja2 (trim_blocks,
//! lstrip_blocks, loop controls, `raise_exception`, `strftime_now`, Python string methods,
//! `tojson` with Python's `json.dumps` spacing). A file without a template gets a built-in one
//! chosen by architecture: Gemma's turn markers, ChatML for Qwen, a plain transcript otherwise.
//! The built-ins match the text llama.cpp's own templates ("gemma", "chatml") produce.

use minijinja::value::Kwargs;
use minijinja::{Environment, Error, ErrorKind, Value};
use serde_json::json;
use smolrun_core::gguf::Gguf;

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// "system", "user", "assistant" (or "tool" for the server).
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.to_string(),
            content: content.to_string(),
        }
    }
}

/// Where the template came from: the model file, or one of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateKind {
    FromModel,
    Gemma,
    ChatMl,
    Plain,
}

/// Gemma's turns, as llama.cpp's "gemma" template writes them: no system role (a system message
/// is put in front of the next user turn), "assistant" is called "model", contents are trimmed.
/// No `<bos>` here: the tokenizer adds it.
const GEMMA_TEMPLATE: &str = "\
{%- set ns = namespace(system='') -%}
{%- for message in messages -%}
  {%- if message.role == 'system' -%}
    {%- set ns.system = ns.system ~ (message.content | trim) -%}
  {%- else -%}
    {%- set role = 'model' if message.role == 'assistant' else message.role -%}
    {{- '<start_of_turn>' ~ role ~ '\\n' -}}
    {%- if ns.system and role != 'model' -%}
      {{- ns.system ~ '\\n\\n' -}}
      {%- set ns.system = '' -%}
    {%- endif -%}
    {{- (message.content | trim) ~ '<end_of_turn>\\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}";

/// ChatML (Qwen and many others), as llama.cpp's "chatml" template writes it.
const CHATML_TEMPLATE: &str = "\
{%- for message in messages -%}
  {{- '<|im_start|>' ~ message.role ~ '\\n' ~ message.content ~ '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

/// A transcript for base models that were never tuned on a chat format.
const PLAIN_TEMPLATE: &str = "\
{%- for message in messages -%}
  {{- (message.role | capitalize) ~ ': ' ~ (message.content | trim) ~ '\\n\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%}";

pub struct ChatTemplate {
    env: Environment<'static>,
    kind: TemplateKind,
    /// The template reads `tools` (Qwen2.5's does); else tools are described in a system
    /// message of our own (see `render_json`).
    takes_tools: bool,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    /// The model's own template, or the built-in one for its architecture when it has none.
    pub fn from_gguf(gguf: &Gguf) -> Result<ChatTemplate, String> {
        let token_text = |key: &str| -> String {
            let id = match gguf.get_u64(key) {
                Ok(id) => id as usize,
                Err(_) => return String::new(),
            };
            gguf.get("tokenizer.ggml.tokens")
                .and_then(|v| v.as_array())
                .and_then(|a| a.strings().and_then(|mut s| s.nth(id)))
                .unwrap_or("")
                .to_string()
        };
        let bos = token_text("tokenizer.ggml.bos_token_id");
        let eos = token_text("tokenizer.ggml.eos_token_id");
        match gguf.get("tokenizer.chat_template").and_then(|v| v.as_str()) {
            Some(source) if !source.trim().is_empty() => {
                ChatTemplate::new(source, TemplateKind::FromModel, &bos, &eos)
            }
            _ => {
                let arch = gguf.architecture().unwrap_or("");
                ChatTemplate::builtin(TemplateKind::for_architecture(arch), &bos, &eos)
            }
        }
    }

    pub fn builtin(kind: TemplateKind, bos: &str, eos: &str) -> Result<ChatTemplate, String> {
        let source = match kind {
            TemplateKind::Gemma => GEMMA_TEMPLATE,
            TemplateKind::ChatMl => CHATML_TEMPLATE,
            TemplateKind::Plain | TemplateKind::FromModel => PLAIN_TEMPLATE,
        };
        ChatTemplate::new(source, kind, bos, eos)
    }

    /// Compiles a Jinja template. An error names the line minijinja could not parse.
    pub fn new(
        source: &str,
        kind: TemplateKind,
        bos: &str,
        eos: &str,
    ) -> Result<ChatTemplate, String> {
        let mut env = Environment::new();
        // Hugging Face renders templates with these two on; without them every `{% if %}` line
        // leaves its newline and indentation in the prompt.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| format!("the chat template does not parse: {e:#}"))?;
        Ok(ChatTemplate {
            env,
            kind,
            takes_tools: source.contains("tools"),
            bos_token: bos.to_string(),
            eos_token: eos.to_string(),
        })
    }

    pub fn kind(&self) -> TemplateKind {
        self.kind
    }

    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// Renders `messages`; with `add_generation_prompt` the text ends where the assistant's
    /// answer begins.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, String> {
        let messages: Vec<serde_json::Value> = messages
            .iter()
            .map(|m| json!({"role": m.role, "content": m.content}))
            .collect();
        self.render_json(
            &serde_json::Value::Array(messages),
            None,
            add_generation_prompt,
        )
    }

    /// Renders messages given as JSON (OpenAI's shape: content, tool_calls, ...) and an optional
    /// list of tools, for the server.
    pub fn render_json(
        &self,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, String> {
        let template = self
            .env
            .get_template("chat")
            .map_err(|e| format!("chat template: {e:#}"))?;
        let rewritten;
        let (messages, tools) = match tools {
            Some(tools) if !self.takes_tools => {
                rewritten = tools_in_messages(messages, tools);
                (&rewritten, None)
            }
            _ => (messages, tools),
        };
        let ctx = minijinja::context! {
            messages => Value::from_serialize(messages),
            tools => tools.map(Value::from_serialize),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
        };
        template
            .render(ctx)
            .map_err(|e| format!("the chat template failed to render: {e:#}"))
    }
}

/// For a template that knows nothing of tools: the tools described in the system message the
/// way Qwen2.5's template describes them (the Hermes format, which the server reads back),
/// earlier calls written into the assistant's text, and tool answers sent as user turns.
fn tools_in_messages(messages: &serde_json::Value, tools: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value as J;
    let mut system = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for tool in tools.as_array().into_iter().flatten() {
        system.push('\n');
        system.push_str(&tool.to_string());
    }
    system.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and \
         arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n\
         {\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    let mut out = Vec::new();
    let items = messages.as_array().map(Vec::as_slice).unwrap_or_default();
    let content = |m: &J| {
        m.get("content")
            .and_then(J::as_str)
            .unwrap_or("")
            .to_string()
    };
    match items.first() {
        Some(first) if first.get("role").and_then(J::as_str) == Some("system") => {
            out.push(
                json!({"role": "system", "content": format!("{}\n\n{system}", content(first))}),
            );
        }
        _ => out.push(json!({"role": "system", "content": system})),
    }
    for (i, m) in items.iter().enumerate() {
        let role = m.get("role").and_then(J::as_str).unwrap_or("");
        if i == 0 && role == "system" {
            continue;
        }
        match role {
            "tool" => out.push(json!({"role": "user", "content":
                format!("<tool_response>\n{}\n</tool_response>", content(m))})),
            "assistant" if m.get("tool_calls").is_some() => {
                let mut text = content(m);
                for call in m["tool_calls"].as_array().into_iter().flatten() {
                    let f = call.get("function").unwrap_or(call);
                    let call = json!({"name": f.get("name"), "arguments": f.get("arguments")});
                    text.push_str(&format!("\n<tool_call>\n{call}\n</tool_call>"));
                }
                out.push(json!({"role": "assistant", "content": text.trim_start()}));
            }
            _ => out.push(m.clone()),
        }
    }
    J::Array(out)
}

impl TemplateKind {
    pub fn for_architecture(arch: &str) -> TemplateKind {
        if arch.starts_with("gemma") {
            TemplateKind::Gemma
        } else if arch.starts_with("qwen") {
            TemplateKind::ChatMl
        } else {
            TemplateKind::Plain
        }
    }
}

/// `raise_exception(msg)`: templates call it to refuse a conversation they cannot format
/// (e.g. roles that do not alternate); the message reaches the user.
fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// `strftime_now(format)`: the local time, as Python's `datetime.now().strftime(format)`
/// (templates put today's date in the system prompt).
fn strftime_now(format: String) -> Result<String, Error> {
    let c_format = std::ffi::CString::new(format)
        .map_err(|_| Error::new(ErrorKind::InvalidOperation, "strftime format contains NUL"))?;
    let mut buf = [0u8; 256];
    // SAFETY: time/localtime_r write only into our local tm; strftime writes at most buf.len()
    // bytes into buf and returns how many it wrote.
    let written = unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&now, &mut tm);
        libc::strftime(
            buf.as_mut_ptr() as *mut libc::c_char,
            buf.len(),
            c_format.as_ptr(),
            &tm,
        )
    };
    Ok(String::from_utf8_lossy(&buf[..written]).into_owned())
}

/// `tojson`, written the way Python's `json.dumps` writes it (transformers uses that): ", " and
/// ": " as separators, non-ASCII kept as is, and `indent` for pretty printing. minijinja's own
/// tojson writes compact JSON with HTML escapes, which would change the prompt the model sees.
fn tojson(value: Value, indent: Option<Value>, kwargs: Kwargs) -> Result<String, Error> {
    let json = serde_json::to_value(&value).map_err(|e| {
        Error::new(ErrorKind::InvalidOperation, "cannot serialize to JSON").with_source(e)
    })?;
    let indent = match indent {
        None => kwargs.get::<Option<usize>>("indent")?,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => Some(usize::try_from(v)?),
    };
    // Non-ASCII is always written as is, which is what the templates ask for.
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_python_json(&json, indent, 0, &mut out);
    Ok(out)
}

fn write_python_json(v: &serde_json::Value, indent: Option<usize>, depth: usize, out: &mut String) {
    use serde_json::Value as J;
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    // With an indent, Python puts items on their own lines and drops the space after ",".
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v {
        J::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                write_python_json(item, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push(']');
        }
        J::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                out.push_str(&J::String(key.clone()).to_string());
                out.push_str(": ");
                write_python_json(item, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversation() -> Vec<ChatMessage> {
        vec![
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hi there"),
            ChatMessage::new("assistant", "Hello!"),
            ChatMessage::new("user", "  What is 2+2?  "),
        ]
    }

    /// Phi-3's own template, from llama.cpp's Phi-3 vocabulary file (the tokenizer of the
    /// synthetic phi3 model): turns in `<|user|>` / `<|end|>` markers, the system turn dropped.
    #[test]
    fn phi3_template_from_its_file_renders_its_turns() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/golden/vocab/ggml-vocab-phi-3.gguf"
        );
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let gguf = Gguf::parse(&bytes).unwrap();
        let t = ChatTemplate::from_gguf(&gguf).unwrap();
        assert_eq!(t.kind(), TemplateKind::FromModel);
        assert_eq!(
            t.render(&conversation(), true).unwrap(),
            "<s><|user|>\nHi there<|end|>\n<|assistant|>\nHello!<|end|>\n\
             <|user|>\n  What is 2+2?  <|end|>\n<|assistant|>\n"
        );
    }

    #[test]
    fn gemma_builtin_matches_llama_cpp_gemma_format() {
        let t = ChatTemplate::builtin(TemplateKind::Gemma, "<bos>", "<eos>").unwrap();
        // llama.cpp's "gemma": system merged into the first user turn, contents trimmed.
        assert_eq!(
            t.render(&conversation(), true).unwrap(),
            "<start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n\
             <start_of_turn>model\nHello!<end_of_turn>\n\
             <start_of_turn>user\nWhat is 2+2?<end_of_turn>\n\
             <start_of_turn>model\n"
        );
        assert_eq!(
            t.render(&[ChatMessage::new("user", "Hi")], false).unwrap(),
            "<start_of_turn>user\nHi<end_of_turn>\n"
        );
    }

    #[test]
    fn a_template_without_tools_gets_them_in_the_system_message() {
        let t = ChatTemplate::builtin(TemplateKind::ChatMl, "", "").unwrap();
        let tools = json!([{"type": "function", "function": {"name": "get_weather"}}]);
        let messages = json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "tool_call_id": "c", "content": "22 C"},
        ]);
        let text = t.render_json(&messages, Some(&tools), true).unwrap();
        assert!(
            text.starts_with("<|im_start|>system\nBe brief.\n\n# Tools"),
            "{text}"
        );
        assert!(text.contains("<tools>\n{\"type\":\"function\""), "{text}");
        assert!(text.contains("<|im_start|>assistant\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call><|im_end|>"), "{text}");
        assert!(
            text.contains("<|im_start|>user\n<tool_response>\n22 C\n</tool_response><|im_end|>"),
            "{text}"
        );
        // Without tools, the conversation is rendered as it is.
        let plain = t.render_json(&messages, None, true).unwrap();
        assert!(!plain.contains("<tools>"));
    }

    #[test]
    fn chatml_builtin_matches_llama_cpp_chatml_format() {
        let t = ChatTemplate::builtin(TemplateKind::ChatMl, "", "<|im_end|>").unwrap();
        assert_eq!(
            t.render(&conversation(), true).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n\
             <|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n  What is 2+2?  <|im_end|>\n\
             <|im_start|>assistant\n"
        );
    }

    #[test]
    fn plain_builtin_is_a_transcript() {
        let t = ChatTemplate::builtin(TemplateKind::Plain, "", "").unwrap();
        assert_eq!(
            t.render(&[ChatMessage::new("user", "Hi")], true).unwrap(),
            "User: Hi\n\nAssistant:"
        );
    }

    #[test]
    fn architecture_picks_the_builtin() {
        assert_eq!(
            TemplateKind::for_architecture("gemma3"),
            TemplateKind::Gemma
        );
        assert_eq!(
            TemplateKind::for_architecture("qwen2"),
            TemplateKind::ChatMl
        );
        assert_eq!(TemplateKind::for_architecture("llama"), TemplateKind::Plain);
    }

    #[test]
    fn hf_features_work() {
        let source = "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}\
                      {{ m.content.strip().upper() }}|{% endfor %}\
                      {{ tools | tojson }}|{{ tools[0] | tojson(indent=2) }}|{{ bos_token }}";
        let t = ChatTemplate::new(source, TemplateKind::FromModel, "<s>", "</s>").unwrap();
        let msgs = json!([{"role": "user", "content": " a "}, {"role": "user", "content": "b"},
                          {"role": "user", "content": "c"}]);
        let tools = json!([{"name": "f", "parameters": {"x": "é<>", "n": [1, 2]}}]);
        assert_eq!(
            t.render_json(&msgs, Some(&tools), false).unwrap(),
            "A|B|[{\"name\": \"f\", \"parameters\": {\"x\": \"é<>\", \"n\": [1, 2]}}]|\
             {\n  \"name\": \"f\",\n  \"parameters\": {\n    \"x\": \"é<>\",\n    \"n\": [\n      1,\n      2\n    ]\n  }\n}|<s>"
        );
        let t = ChatTemplate::new(
            "{{ raise_exception('roles must alternate') }}",
            TemplateKind::FromModel,
            "",
            "",
        )
        .unwrap();
        let err = t.render(&[], true).unwrap_err();
        assert!(err.contains("roles must alternate"), "{err}");
        let t =
            ChatTemplate::new("{{ strftime_now('%Y') }}", TemplateKind::FromModel, "", "").unwrap();
        let year = t.render(&[], true).unwrap();
        assert!(year.len() == 4 && year.starts_with('2'), "{year}");
    }

    #[test]
    fn a_broken_template_is_an_error() {
        let err = ChatTemplate::new("{% for %}", TemplateKind::FromModel, "", "")
            .err()
            .unwrap();
        assert!(err.contains("does not parse"), "{err}");
    }

    /// A real model file; missing models fail the test with the way to get them.
    fn model_file(name: &str) -> smolrun_linux::MappedFile {
        let path = smolrun_tests::models_dir().join(name);
        assert!(
            path.exists(),
            "{} is missing: run tools/fetch-models.sh (or set SMOLRUN_MODELS)",
            path.display()
        );
        smolrun_linux::MappedFile::open(&path).unwrap()
    }

    #[test]
    fn qwen_template_from_the_model_file_renders_like_transformers() {
        // Expected strings: the same template rendered by Python's Jinja2 the way transformers
        // and llama.cpp's Jinja engine set it up (trim_blocks, lstrip_blocks, json.dumps).
        let file = model_file("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
        let gguf = Gguf::parse(file.bytes()).unwrap();
        let t = ChatTemplate::from_gguf(&gguf).unwrap();
        assert_eq!(t.kind(), TemplateKind::FromModel);
        assert_eq!(t.bos_token(), "<|endoftext|>");
        assert_eq!(
            t.render(&[ChatMessage::new("user", "Hi there")], true)
                .unwrap(),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful \
             assistant.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            t.render(&conversation(), true).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n\
             <|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n  What is 2+2?  <|im_end|>\n\
             <|im_start|>assistant\n"
        );
        let tools = json!([{"type": "function", "function": {"name": "get_time",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}]);
        let msgs = json!([{"role": "user", "content": "Hi there"}]);
        assert_eq!(
            t.render_json(&msgs, Some(&tools), true).unwrap(),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\
             \n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
             You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n\
             {\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"parameters\": \
             {\"type\": \"object\", \"properties\": {\"tz\": {\"type\": \"string\"}}}}}\n</tools>\n\n\
             For each function call, return a json object with function name and arguments within \
             <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \
             \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nHi there\
             <|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn gemma3_270m_has_no_template_and_gets_the_gemma_builtin() {
        let file = model_file("gemma-3-270m-q4_k_m.gguf");
        let gguf = Gguf::parse(file.bytes()).unwrap();
        assert!(gguf.get("tokenizer.chat_template").is_none());
        let t = ChatTemplate::from_gguf(&gguf).unwrap();
        assert_eq!(t.kind(), TemplateKind::Gemma);
        assert_eq!(t.bos_token(), "<bos>");
        assert_eq!(
            t.render(&[ChatMessage::new("user", "Hi")], true).unwrap(),
            "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
        );
    }
}
