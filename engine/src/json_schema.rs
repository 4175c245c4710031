//! JSON schemas as grammars, for the OpenAI `response_format` (`json_schema`, `json_object`)
//! and for tool calls.
//!
//! The translation follows llama.cpp's json-schema-to-grammar: every value rule ends with
//! `space` (at most one newline and twenty blanks, so a model cannot loop on whitespace);
//! objects list their properties in the schema's order, required ones always, optional ones
//! possibly left out; numbers have bounded digit counts. What the grammar can enforce is
//! enforced; a keyword that constrains but is not implemented (`pattern`, `multipleOf`, `not`,
//! ...) is an error naming the keyword and where it is, never silently dropped. Annotations
//! (`title`, `description`, ...) and keywords unknown to JSON Schema are ignored, as the
//! specification says.

use serde_json::Value;
use smolrun_core::grammar::{ByteSet, Element, Grammar, GrammarBuilder, RuleId};
use std::collections::HashMap;
use std::fmt;

/// A schema the grammar cannot express: the keyword, where it is (a JSON pointer into the
/// schema), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    pub keyword: String,
    pub path: String,
    pub message: String,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(f, "json_schema at {path}: {}", self.message)
    }
}

impl std::error::Error for SchemaError {}

/// The grammar of JSON values `schema` accepts (followed by at most one bounded run of
/// whitespace).
pub fn grammar_for_schema(schema: &Value) -> Result<Grammar, SchemaError> {
    let mut c = Converter::new(vec![schema]);
    let root = c.visit(schema, 0, "")?;
    c.finish(root)
}

/// Any JSON object (OpenAI's `json_object` mode, as llama.cpp does it).
pub fn grammar_for_any_json() -> Grammar {
    let mut c = Converter::new(Vec::new());
    let root = c.primitive(Primitive::Object);
    c.finish(root).expect("the JSON grammar is well formed")
}

/// Qwen2.5/Hermes tool calls: `<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>`
/// where NAME is one of the tools and ARGS matches that tool's parameters schema. `max_calls`
/// >= 1 calls, separated by "\n".
pub fn grammar_for_tool_calls(
    tools: &[(String, Value)],
    max_calls: usize,
) -> Result<Grammar, SchemaError> {
    if tools.is_empty() {
        return Err(SchemaError {
            keyword: "tools".into(),
            path: String::new(),
            message: "no tools to call".into(),
        });
    }
    let mut c = Converter::new(tools.iter().map(|(_, schema)| schema).collect());
    let space = c.space();
    let mut alternatives = Vec::new();
    for (i, (name, parameters)) in tools.iter().enumerate() {
        let arguments = c.visit(parameters, i, "").map_err(|e| SchemaError {
            message: format!("tool \"{name}\": {}", e.message),
            ..e
        })?;
        alternatives.push(vec![
            literal(&json_string(name)),
            space.clone(),
            literal(","),
            space.clone(),
            literal("\"arguments\""),
            space.clone(),
            literal(":"),
            space.clone(),
            Element::rule(arguments),
        ]);
    }
    let name_and_arguments = c.rule("tool-call-body", alternatives);
    let call = c.rule(
        "tool-call",
        vec![vec![
            literal("<tool_call>\n{"),
            space.clone(),
            literal("\"name\""),
            space.clone(),
            literal(":"),
            space,
            Element::rule(name_and_arguments),
            literal("}\n</tool_call>"),
        ]],
    );
    let more = c.b.repeat(
        vec![literal("\n"), Element::rule(call)],
        0,
        Some(max_calls.max(1) - 1),
    );
    let root = c.rule("root", vec![vec![Element::rule(call), more]]);
    c.finish(root)
}

/// Keywords that only describe: ignored.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "$schema",
    "$id",
    "$comment",
    "strict",
    "readOnly",
    "writeOnly",
    "deprecated",
    "$defs",
    "definitions",
    "contentEncoding",
    "contentMediaType",
];

/// Keywords that constrain and are not implemented: an error wherever they appear.
const UNSUPPORTED: &[&str] = &[
    "pattern",
    "multipleOf",
    "not",
    "if",
    "then",
    "else",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "unevaluatedItems",
    "additionalItems",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "contentSchema",
    "$dynamicRef",
    "$recursiveRef",
    "nullable",
];

/// Formats with a grammar; any other `format` is refused.
const FORMATS: &[&str] = &["date", "time", "date-time", "uuid"];

/// Longest integer part, fraction and exponent a number may have: enough for any u64, and for
/// any f64 as serde_json writes it (17 significant digits after up to 5 zeros, `0.0000123..`),
/// and a bound so a model cannot stream digits forever.
const INTEGER_DIGITS: usize = 20;
const FRACTION_DIGITS: usize = 24;
const EXPONENT_DIGITS: usize = 3;
/// The most items a `minItems`/`maxItems` bound may spell out (each is a few rules).
const MAX_COUNTED_ITEMS: u64 = 1000;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Primitive {
    Value,
    Object,
    Array,
    String,
    Number,
    Integer,
    Boolean,
    Null,
    /// One character of a JSON string (no quotes).
    Char,
}

struct Converter<'s> {
    b: GrammarBuilder,
    /// The documents `$ref`s resolve in (one per tool).
    roots: Vec<&'s Value>,
    refs: HashMap<(usize, String), RuleId>,
    primitives: HashMap<Primitive, RuleId>,
    space: Option<RuleId>,
}

fn literal(s: &str) -> Element {
    Element::literal(s.as_bytes())
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

fn digit() -> Element {
    Element::range(b'0', b'9')
}

fn err(keyword: &str, path: &str, message: impl Into<String>) -> SchemaError {
    SchemaError {
        keyword: keyword.into(),
        path: path.into(),
        message: message.into(),
    }
}

fn pointer(path: &str, key: &str) -> String {
    format!("{path}/{}", key.replace('~', "~0").replace('/', "~1"))
}

/// The alternatives of one JSON string character, each as (its first byte, the rest): a
/// printable ASCII character but `"` and `\`, an escape, or a well-formed UTF-8 sequence.
fn char_classes(escape_tail: RuleId) -> Vec<(ByteSet, Vec<Element>)> {
    let cont = || Element::range(0x80, 0xBF);
    vec![
        (
            ByteSet::from_ranges(&[(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E)]),
            vec![],
        ),
        (ByteSet::single(b'\\'), vec![Element::rule(escape_tail)]),
        (ByteSet::from_ranges(&[(0xC2, 0xDF)]), vec![cont()]),
        (
            ByteSet::single(0xE0),
            vec![Element::range(0xA0, 0xBF), cont()],
        ),
        (
            ByteSet::from_ranges(&[(0xE1, 0xEC), (0xEE, 0xEF)]),
            vec![cont(), cont()],
        ),
        (
            ByteSet::single(0xED),
            vec![Element::range(0x80, 0x9F), cont()],
        ),
        (
            ByteSet::single(0xF0),
            vec![Element::range(0x90, 0xBF), cont(), cont()],
        ),
        (
            ByteSet::from_ranges(&[(0xF1, 0xF3)]),
            vec![cont(), cont(), cont()],
        ),
        (
            ByteSet::single(0xF4),
            vec![Element::range(0x80, 0x8F), cont(), cont()],
        ),
    ]
}

impl<'s> Converter<'s> {
    fn new(roots: Vec<&'s Value>) -> Self {
        Converter {
            b: GrammarBuilder::new(),
            roots,
            refs: HashMap::new(),
            primitives: HashMap::new(),
            space: None,
        }
    }

    fn finish(self, root: RuleId) -> Result<Grammar, SchemaError> {
        self.b
            .build(root)
            .map_err(|e| err("", "", format!("the schema's grammar is invalid: {e}")))
    }

    fn rule(&mut self, name: &str, alternatives: Vec<Vec<Element>>) -> RuleId {
        self.b
            .rule(name, alternatives)
            .expect("a fresh rule is defined once")
    }

    /// `space ::= "" | " " | "\n" [ \t]{0,20}`
    fn space(&mut self) -> Element {
        if let Some(id) = self.space {
            return Element::rule(id);
        }
        let blanks = self.b.repeat(
            vec![Element::set(&[(b' ', b' '), (b'\t', b'\t')])],
            0,
            Some(20),
        );
        let id = self.rule(
            "space",
            vec![vec![], vec![literal(" ")], vec![literal("\n"), blanks]],
        );
        self.space = Some(id);
        Element::rule(id)
    }

    /// The shared rules for JSON's own types, each value followed by `space`.
    fn primitive(&mut self, p: Primitive) -> RuleId {
        if let Some(&id) = self.primitives.get(&p) {
            return id;
        }
        let id = self.b.declare(&format!("{p:?}").to_lowercase());
        // Registered before the body is built: value, object and array refer to each other.
        self.primitives.insert(p, id);
        let space = self.space();
        let alternatives = match p {
            Primitive::Value => [
                Primitive::Object,
                Primitive::Array,
                Primitive::String,
                Primitive::Number,
                Primitive::Boolean,
                Primitive::Null,
            ]
            .into_iter()
            .map(|q| vec![Element::rule(self.primitive(q))])
            .collect(),
            Primitive::Object => {
                let key = Element::rule(self.primitive(Primitive::String));
                let value = Element::rule(self.primitive(Primitive::Value));
                let member = vec![key, literal(":"), space.clone(), value];
                let members = self.list(member, 0, None);
                vec![vec![
                    literal("{"),
                    space.clone(),
                    members,
                    literal("}"),
                    space,
                ]]
            }
            Primitive::Array => {
                let value = vec![Element::rule(self.primitive(Primitive::Value))];
                let items = self.list(value, 0, None);
                vec![vec![
                    literal("["),
                    space.clone(),
                    items,
                    literal("]"),
                    space,
                ]]
            }
            Primitive::String => {
                let chars = self.string_chars(0, None);
                vec![vec![literal("\""), chars, literal("\""), space]]
            }
            Primitive::Number => {
                let fraction_digits = self.b.repeat(vec![digit()], 1, Some(FRACTION_DIGITS));
                let fraction = self
                    .b
                    .repeat(vec![literal("."), fraction_digits], 0, Some(1));
                let sign = self.b.repeat(
                    vec![Element::set(&[(b'-', b'-'), (b'+', b'+')])],
                    0,
                    Some(1),
                );
                let exponent_digits = self.b.repeat(vec![digit()], 1, Some(EXPONENT_DIGITS));
                let exponent = self.b.repeat(
                    vec![
                        Element::set(&[(b'e', b'e'), (b'E', b'E')]),
                        sign,
                        exponent_digits,
                    ],
                    0,
                    Some(1),
                );
                let integer = self.integer_digits();
                vec![vec![integer, fraction, exponent, space]]
            }
            Primitive::Integer => vec![vec![self.integer_digits(), space]],
            Primitive::Boolean => vec![
                vec![literal("true"), space.clone()],
                vec![literal("false"), space],
            ],
            Primitive::Null => vec![vec![literal("null"), space]],
            Primitive::Char => {
                let escape_tail = self.escape_tail();
                char_classes(escape_tail)
                    .into_iter()
                    .map(|(first, rest)| {
                        let mut alt = vec![Element::Bytes(first)];
                        alt.extend(rest);
                        alt
                    })
                    .collect()
            }
        };
        self.b.define(id, alternatives).expect("declared above");
        id
    }

    /// `"-"? ("0" | [1-9] [0-9]{0,19})`
    fn integer_digits(&mut self) -> Element {
        let minus = self.b.repeat(vec![literal("-")], 0, Some(1));
        let rest = self.b.repeat(vec![digit()], 0, Some(INTEGER_DIGITS - 1));
        let magnitude = self.rule(
            "integer-part",
            vec![vec![literal("0")], vec![Element::range(b'1', b'9'), rest]],
        );
        let id = self.rule(
            "integer-digits",
            vec![vec![minus, Element::rule(magnitude)]],
        );
        Element::rule(id)
    }

    /// What follows a backslash in a JSON string.
    fn escape_tail(&mut self) -> RuleId {
        let hex = Element::set(&[(b'0', b'9'), (b'a', b'f'), (b'A', b'F')]);
        let hex4 = self.b.repeat(vec![hex], 4, Some(4));
        self.rule(
            "escape",
            vec![
                vec![Element::Bytes(ByteSet::from_ranges(&[
                    (b'"', b'"'),
                    (b'\\', b'\\'),
                    (b'/', b'/'),
                    (b'b', b'b'),
                    (b'f', b'f'),
                    (b'n', b'n'),
                    (b'r', b'r'),
                    (b't', b't'),
                ]))],
                vec![literal("u"), hex4],
            ],
        )
    }

    fn string_chars(&mut self, min: usize, max: Option<usize>) -> Element {
        let char = Element::rule(self.primitive(Primitive::Char));
        self.b.repeat(vec![char], min, max)
    }

    /// `(item ("," space item){min-1,max-1})?` (the whole list optional when `min` is 0).
    fn list(&mut self, item: Vec<Element>, min: usize, max: Option<usize>) -> Element {
        if max == Some(0) {
            return Element::literal(b"");
        }
        let space = self.space();
        let mut separated = vec![literal(","), space];
        separated.extend(item.iter().cloned());
        let rest = self
            .b
            .repeat(separated, min.saturating_sub(1), max.map(|m| m - 1));
        let mut nonempty = item;
        nonempty.push(rest);
        if min == 0 {
            self.b.repeat(nonempty, 0, Some(1))
        } else {
            Element::rule(self.rule("list", vec![nonempty]))
        }
    }

    fn visit(&mut self, schema: &'s Value, root: usize, path: &str) -> Result<RuleId, SchemaError> {
        let object = match schema {
            Value::Bool(true) => return Ok(self.primitive(Primitive::Value)),
            Value::Bool(false) => {
                return Err(err("false", path, "the schema `false` matches no value"))
            }
            Value::Object(o) => o,
            _ => return Err(err("", path, "a schema must be an object or a boolean")),
        };
        for key in object.keys() {
            if UNSUPPORTED.contains(&key.as_str()) {
                return Err(err(
                    key,
                    path,
                    format!(
                        "keyword \"{key}\" is not supported; the grammar cannot enforce it \
                         (remove it, or describe the constraint in \"description\")"
                    ),
                ));
            }
        }
        if let Some(reference) = object.get("$ref") {
            let others = object
                .keys()
                .find(|k| *k != "$ref" && !ANNOTATIONS.contains(&k.as_str()));
            if let Some(other) = others {
                return Err(err(
                    other,
                    path,
                    format!("keyword \"{other}\" next to \"$ref\" is not supported; move it into the referenced schema or use \"allOf\""),
                ));
            }
            return self.reference(reference, root, path);
        }
        if let Some(value) = object.get("const") {
            let text = serde_json::to_string(value).expect("a JSON value serializes");
            let space = self.space();
            return Ok(self.rule("const", vec![vec![literal(&text), space]]));
        }
        if let Some(values) = object.get("enum") {
            let values = values
                .as_array()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| err("enum", path, "\"enum\" must be a non-empty array"))?;
            let space = self.space();
            let alternatives = values
                .iter()
                .map(|v| {
                    let text = serde_json::to_string(v).expect("a JSON value serializes");
                    vec![literal(&text), space.clone()]
                })
                .collect();
            return Ok(self.rule("enum", alternatives));
        }
        for keyword in ["anyOf", "oneOf"] {
            if let Some(schemas) = object.get(keyword) {
                let ignored =
                    |k: &String| k == keyword || k == "type" || ANNOTATIONS.contains(&k.as_str());
                if let Some(other) = object.keys().find(|k| !ignored(k)) {
                    return Err(err(
                        other,
                        path,
                        format!("keyword \"{other}\" next to \"{keyword}\" is not supported; move it into each alternative"),
                    ));
                }
                let schemas = schemas
                    .as_array()
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| {
                        err(
                            keyword,
                            path,
                            format!("\"{keyword}\" must be a non-empty array"),
                        )
                    })?;
                let mut alternatives = Vec::new();
                for (i, s) in schemas.iter().enumerate() {
                    let p = format!("{path}/{keyword}/{i}");
                    alternatives.push(vec![Element::rule(self.visit(s, root, &p)?)]);
                }
                return Ok(self.rule(keyword, alternatives));
            }
        }
        if let Some(schemas) = object.get("allOf") {
            return self.all_of(object, schemas, root, path);
        }
        match object.get("type") {
            Some(Value::Array(types)) => {
                if types.is_empty() {
                    return Err(err("type", path, "\"type\" must not be an empty array"));
                }
                let mut alternatives = Vec::new();
                for t in types {
                    let t = t.as_str().ok_or_else(|| {
                        err(
                            "type",
                            path,
                            "\"type\" must be a string or an array of strings",
                        )
                    })?;
                    alternatives.push(vec![Element::rule(self.typed(object, t, root, path)?)]);
                }
                Ok(self.rule("types", alternatives))
            }
            Some(Value::String(t)) => self.typed(object, t, root, path),
            Some(_) => Err(err(
                "type",
                path,
                "\"type\" must be a string or an array of strings",
            )),
            None => {
                let has = |keys: &[&str]| keys.iter().any(|k| object.contains_key(*k));
                if has(&["properties", "additionalProperties", "required"]) {
                    self.typed(object, "object", root, path)
                } else if has(&["items", "prefixItems", "minItems", "maxItems"]) {
                    self.typed(object, "array", root, path)
                } else if has(&["minLength", "maxLength", "format"]) {
                    self.typed(object, "string", root, path)
                } else if has(&["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]) {
                    self.typed(object, "number", root, path)
                } else {
                    Ok(self.primitive(Primitive::Value))
                }
            }
        }
    }

    fn reference(
        &mut self,
        reference: &Value,
        root: usize,
        path: &str,
    ) -> Result<RuleId, SchemaError> {
        let text = reference
            .as_str()
            .ok_or_else(|| err("$ref", path, "\"$ref\" must be a string"))?;
        let key = (root, text.to_string());
        if let Some(&id) = self.refs.get(&key) {
            return Ok(id);
        }
        let target = text
            .strip_prefix('#')
            .and_then(|pointer| {
                let decoded = pointer.replace("%25", "%");
                self.roots[root].pointer(&decoded)
            })
            .ok_or_else(|| {
                err(
                    "$ref",
                    path,
                    format!("\"$ref\": \"{text}\" does not resolve (only references inside the schema, \"#/$defs/NAME\", are supported)"),
                )
            })?;
        // Declared before the target is visited, so that recursive references find it.
        let id = self.b.declare(&format!("ref {text}"));
        self.refs.insert(key, id);
        let body = self.visit(target, root, &text[1..])?;
        self.b
            .define(id, vec![vec![Element::rule(body)]])
            .expect("declared above");
        Ok(id)
    }

    /// `allOf` of object schemas: one object with every part's properties (a property in
    /// several parts takes the last part's schema) and every part's required list.
    fn all_of(
        &mut self,
        object: &'s serde_json::Map<String, Value>,
        schemas: &'s Value,
        root: usize,
        path: &str,
    ) -> Result<RuleId, SchemaError> {
        let schemas = schemas
            .as_array()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| err("allOf", path, "\"allOf\" must be a non-empty array"))?;
        let mut properties: Vec<(&'s String, &'s Value, String)> = Vec::new();
        let mut required: Vec<&'s str> = Vec::new();
        let mut additional: Option<(&'s Value, String)> = None;
        let mut parts: Vec<(&'s serde_json::Map<String, Value>, String)> =
            vec![(object, path.to_string())];
        for (i, s) in schemas.iter().enumerate() {
            let mut p = format!("{path}/allOf/{i}");
            let mut s = s;
            // Follow references to the object schema they name.
            while let Some(r) = s.get("$ref").and_then(Value::as_str) {
                s = r
                    .strip_prefix('#')
                    .and_then(|ptr| self.roots[root].pointer(ptr))
                    .ok_or_else(|| {
                        err("$ref", &p, format!("\"$ref\": \"{r}\" does not resolve"))
                    })?;
                p = r[1..].to_string();
            }
            let part = s
                .as_object()
                .ok_or_else(|| err("allOf", &p, "\"allOf\" parts must be object schemas"))?;
            parts.push((part, p));
        }
        for (part, p) in parts {
            for key in part.keys() {
                let allowed = [
                    "type",
                    "properties",
                    "required",
                    "additionalProperties",
                    "allOf",
                ];
                if UNSUPPORTED.contains(&key.as_str()) {
                    return Err(err(key, &p, format!("keyword \"{key}\" is not supported")));
                }
                if !allowed.contains(&key.as_str()) && !ANNOTATIONS.contains(&key.as_str()) {
                    return Err(err(
                        key,
                        &p,
                        format!("\"allOf\" is supported for object schemas only (properties, required, additionalProperties); \"{key}\" is not"),
                    ));
                }
            }
            if part.get("type").is_some_and(|t| t != "object") {
                return Err(err(
                    "allOf",
                    &p,
                    "\"allOf\" is supported for object schemas only",
                ));
            }
            if part.contains_key("allOf") && !std::ptr::eq(part, object) {
                return Err(err("allOf", &p, "nested \"allOf\" is not supported"));
            }
            if let Some(props) = part.get("properties") {
                let props = props
                    .as_object()
                    .ok_or_else(|| err("properties", &p, "\"properties\" must be an object"))?;
                for (name, s) in props {
                    let sp = pointer(&format!("{p}/properties"), name);
                    match properties.iter_mut().find(|(n, _, _)| *n == name) {
                        Some(slot) => *slot = (name, s, sp),
                        None => properties.push((name, s, sp)),
                    }
                }
            }
            required.extend(required_names(part, &p)?);
            if let Some(a) = part.get("additionalProperties") {
                additional = Some((a, format!("{p}/additionalProperties")));
            }
        }
        self.object(&properties, &required, additional, root, path)
    }

    fn typed(
        &mut self,
        object: &'s serde_json::Map<String, Value>,
        t: &str,
        root: usize,
        path: &str,
    ) -> Result<RuleId, SchemaError> {
        match t {
            "object" => {
                if !object.contains_key("properties")
                    && !object.contains_key("additionalProperties")
                {
                    if let Some(r) = object.get("required").and_then(Value::as_array) {
                        if !r.is_empty() {
                            return Err(err(
                                "required",
                                path,
                                "\"required\" without \"properties\" is not supported",
                            ));
                        }
                    }
                    return Ok(self.primitive(Primitive::Object));
                }
                let mut properties = Vec::new();
                if let Some(props) = object.get("properties") {
                    let props = props.as_object().ok_or_else(|| {
                        err("properties", path, "\"properties\" must be an object")
                    })?;
                    for (name, s) in props {
                        properties.push((name, s, pointer(&format!("{path}/properties"), name)));
                    }
                }
                let required = required_names(object, path)?;
                let additional = object
                    .get("additionalProperties")
                    .map(|a| (a, format!("{path}/additionalProperties")));
                self.object(&properties, &required, additional, root, path)
            }
            "array" => self.array(object, root, path),
            "string" => self.string(object, path),
            "integer" => self.integer(object, path),
            "number" => {
                for k in ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"] {
                    if object.contains_key(k) {
                        return Err(err(k, path, format!("keyword \"{k}\" is supported for \"type\": \"integer\" only, not for numbers")));
                    }
                }
                Ok(self.primitive(Primitive::Number))
            }
            "boolean" => Ok(self.primitive(Primitive::Boolean)),
            "null" => Ok(self.primitive(Primitive::Null)),
            other => Err(err("type", path, format!("unknown type \"{other}\""))),
        }
    }

    /// Members in the schema's order, each required one present, each optional one maybe;
    /// then, if `additionalProperties` allows, more members whose keys are not the known ones.
    /// Rule `members[i][f]` matches the members from property i on, `f` saying whether one was
    /// written already (so a comma comes first).
    fn object(
        &mut self,
        properties: &[(&'s String, &'s Value, String)],
        required: &[&str],
        additional: Option<(&'s Value, String)>,
        root: usize,
        path: &str,
    ) -> Result<RuleId, SchemaError> {
        for name in required {
            if !properties.iter().any(|(n, _, _)| n == name) {
                return Err(err(
                    "required",
                    path,
                    format!("required property \"{name}\" is not in \"properties\""),
                ));
            }
        }
        let space = self.space();
        let mut members = Vec::new();
        for (name, schema, p) in properties {
            let value = self.visit(schema, root, p)?;
            members.push((
                vec![
                    literal(&json_string(name)),
                    space.clone(),
                    literal(":"),
                    space.clone(),
                    Element::rule(value),
                ],
                required.contains(&name.as_str()),
            ));
        }
        let extra_value = match additional {
            None | Some((Value::Bool(false), _)) => None,
            Some((Value::Bool(true), _)) => Some(self.primitive(Primitive::Value)),
            Some((s, p)) => Some(self.visit(s, root, &p)?),
        };
        // After the known members: extra ones, or nothing.
        let (mut after_none, mut after_some) = match extra_value {
            None => (Vec::new(), Vec::new()),
            Some(value) => {
                let names: Vec<&str> = properties.iter().map(|(n, _, _)| n.as_str()).collect();
                let key = self.string_except(&names);
                let member = vec![
                    Element::rule(key),
                    literal(":"),
                    space.clone(),
                    Element::rule(value),
                ];
                let first = self.list(member.clone(), 0, None);
                let mut more = vec![literal(","), space.clone()];
                more.extend(member);
                let rest = self.b.repeat(more, 0, None);
                (vec![first], vec![rest])
            }
        };
        for (member, is_required) in members.into_iter().rev() {
            let mut present_first = member.clone();
            present_first.push(Element::rule(
                self.rule("members", vec![after_some.clone()]),
            ));
            let mut present_later = vec![literal(","), space.clone()];
            present_later.extend(present_first.iter().cloned());
            let (first_alts, later_alts) = if is_required {
                (vec![present_first], vec![present_later])
            } else {
                (
                    vec![present_first, after_none.clone()],
                    vec![present_later, after_some.clone()],
                )
            };
            after_none = vec![Element::rule(self.rule("members", first_alts))];
            after_some = vec![Element::rule(self.rule("members", later_alts))];
        }
        let mut alt = vec![literal("{"), space.clone()];
        alt.extend(after_none);
        alt.extend([literal("}"), space]);
        Ok(self.rule("object", vec![alt]))
    }

    /// A JSON string (with its quotes and trailing space) that is none of `names`: a walk
    /// down the trie of the names' encoded bytes that either leaves it at a character
    /// boundary or ends where no name ends. (A character that shares its lead byte with a
    /// name's character at that spot must follow the name there.)
    fn string_except(&mut self, names: &[&str]) -> RuleId {
        let encoded: Vec<Vec<u8>> = names
            .iter()
            .map(|n| {
                let s = json_string(n);
                s.as_bytes()[1..s.len() - 1].to_vec()
            })
            .collect();
        if encoded.is_empty() {
            return self.primitive(Primitive::String);
        }
        let escape_tail = self.escape_tail();
        let classes = char_classes(escape_tail);
        let chars = self.string_chars(0, None);
        let space = self.space();
        let tail = self.rule("string-tail", vec![vec![chars, literal("\"")]]);
        let rest = self.trie_rule(&encoded, 0, &classes, tail);
        self.rule("key", vec![vec![literal("\""), Element::rule(rest), space]])
    }

    /// The rest of a string after `depth` bytes shared by the names in `names` (all of which
    /// are at least that long and agree on those bytes).
    fn trie_rule(
        &mut self,
        names: &[Vec<u8>],
        depth: usize,
        classes: &[(ByteSet, Vec<Element>)],
        tail: RuleId,
    ) -> RuleId {
        let mut alternatives = Vec::new();
        let boundary = at_char_boundary(&names[0][..depth]);
        // The string may end here if no name does (and not inside an escape or a character).
        if boundary && !names.iter().any(|n| n.len() == depth) {
            alternatives.push(vec![literal("\"")]);
        }
        let mut children = ByteSet::EMPTY;
        let mut next_bytes: Vec<u8> = names.iter().filter_map(|n| n.get(depth).copied()).collect();
        next_bytes.sort_unstable();
        next_bytes.dedup();
        for &b in &next_bytes {
            children.insert(b);
            let longer: Vec<Vec<u8>> = names
                .iter()
                .filter(|n| n.get(depth) == Some(&b))
                .cloned()
                .collect();
            let child = self.trie_rule(&longer, depth + 1, classes, tail);
            alternatives.push(vec![Element::literal(&[b]), Element::rule(child)]);
        }
        if boundary {
            for (first, rest) in classes {
                let mut leave = *first;
                for b in 0..=255u8 {
                    if children.contains(b) && leave.contains(b) {
                        leave = without(leave, b);
                    }
                }
                if leave.is_empty() {
                    continue;
                }
                let mut alt = vec![Element::Bytes(leave)];
                alt.extend(rest.iter().cloned());
                alt.push(Element::rule(tail));
                alternatives.push(alt);
            }
        }
        self.rule("key-rest", alternatives)
    }

    fn array(
        &mut self,
        object: &'s serde_json::Map<String, Value>,
        root: usize,
        path: &str,
    ) -> Result<RuleId, SchemaError> {
        let count = |k: &str| -> Result<Option<u64>, SchemaError> {
            match object.get(k) {
                None => Ok(None),
                Some(v) => match v.as_u64() {
                    Some(n) if n <= MAX_COUNTED_ITEMS => Ok(Some(n)),
                    _ => Err(err(
                        k,
                        path,
                        format!("\"{k}\" must be an integer from 0 to {MAX_COUNTED_ITEMS}"),
                    )),
                },
            }
        };
        let min = count("minItems")?.unwrap_or(0) as usize;
        let max = count("maxItems")?.map(|m| m as usize);
        if max.is_some_and(|m| m < min) {
            return Err(err("maxItems", path, "\"maxItems\" is below \"minItems\""));
        }
        let space = self.space();
        let items = match object.get("items") {
            None | Some(Value::Bool(true)) => Some(self.primitive(Primitive::Value)),
            Some(Value::Bool(false)) => None,
            Some(s) => Some(self.visit(s, root, &format!("{path}/items"))?),
        };
        let mut alt = vec![literal("["), space.clone()];
        if let Some(prefix) = object.get("prefixItems") {
            let prefix = prefix
                .as_array()
                .ok_or_else(|| err("prefixItems", path, "\"prefixItems\" must be an array"))?;
            // Every prefix item, as llama.cpp does; more only if "items" is given.
            for (i, s) in prefix.iter().enumerate() {
                if i > 0 {
                    alt.extend([literal(","), space.clone()]);
                }
                alt.push(Element::rule(self.visit(
                    s,
                    root,
                    &format!("{path}/prefixItems/{i}"),
                )?));
            }
            if let Some(item) = items.filter(|_| object.contains_key("items")) {
                // More items of the "items" schema after the prefix.
                let n = prefix.len();
                let (extra_min, extra_max) =
                    (min.saturating_sub(n), max.map(|m| m.saturating_sub(n)));
                if n == 0 {
                    alt.push(self.list(vec![Element::rule(item)], extra_min, extra_max));
                } else {
                    let more = vec![literal(","), space.clone(), Element::rule(item)];
                    alt.push(self.b.repeat(more, extra_min, extra_max));
                }
            } else if max.is_some_and(|m| m < prefix.len()) || min > prefix.len() {
                return Err(err(
                    "minItems",
                    path,
                    "\"minItems\"/\"maxItems\" contradict \"prefixItems\" with no \"items\"",
                ));
            }
        } else if let Some(item) = items {
            alt.push(self.list(vec![Element::rule(item)], min, max));
        } else if min > 0 {
            return Err(err(
                "minItems",
                path,
                "\"items\": false with \"minItems\" above 0 matches nothing",
            ));
        }
        alt.extend([literal("]"), space]);
        Ok(self.rule("array", vec![alt]))
    }

    fn string(
        &mut self,
        object: &serde_json::Map<String, Value>,
        path: &str,
    ) -> Result<RuleId, SchemaError> {
        let space = self.space();
        if let Some(format) = object.get("format") {
            let format = format.as_str().unwrap_or("");
            if !FORMATS.contains(&format) {
                return Err(err(
                    "format",
                    path,
                    format!("keyword \"format\": \"{format}\" is not supported (supported: {}); remove it, or describe the format in \"description\"", FORMATS.join(", ")),
                ));
            }
            let body = self.format(format);
            return Ok(self.rule(
                "string",
                vec![vec![literal("\""), body, literal("\""), space]],
            ));
        }
        let length = |k: &str| -> Result<Option<usize>, SchemaError> {
            match object.get(k) {
                None => Ok(None),
                Some(v) => match v.as_u64() {
                    Some(n) if n <= 10_000 => Ok(Some(n as usize)),
                    _ => Err(err(
                        k,
                        path,
                        format!("\"{k}\" must be an integer from 0 to 10000"),
                    )),
                },
            }
        };
        let min = length("minLength")?;
        let max = length("maxLength")?;
        if min.is_none() && max.is_none() {
            return Ok(self.primitive(Primitive::String));
        }
        let min = min.unwrap_or(0);
        if max.is_some_and(|m| m < min) {
            return Err(err(
                "maxLength",
                path,
                "\"maxLength\" is below \"minLength\"",
            ));
        }
        let chars = self.string_chars(min, max);
        Ok(self.rule(
            "string",
            vec![vec![literal("\""), chars, literal("\""), space]],
        ))
    }

    /// The inside of a string of a supported `format`.
    fn format(&mut self, format: &str) -> Element {
        let d = digit;
        let two_digit_hour = self.rule(
            "hour",
            vec![
                vec![Element::range(b'0', b'1'), d()],
                vec![literal("2"), Element::range(b'0', b'3')],
            ],
        );
        let minute = vec![Element::range(b'0', b'5'), d()];
        let date = {
            let month = self.rule(
                "month",
                vec![
                    vec![literal("0"), Element::range(b'1', b'9')],
                    vec![literal("1"), Element::range(b'0', b'2')],
                ],
            );
            let day = self.rule(
                "day",
                vec![
                    vec![literal("0"), Element::range(b'1', b'9')],
                    vec![Element::range(b'1', b'2'), d()],
                    vec![literal("3"), Element::range(b'0', b'1')],
                ],
            );
            self.rule(
                "date",
                vec![vec![
                    d(),
                    d(),
                    d(),
                    d(),
                    literal("-"),
                    Element::rule(month),
                    literal("-"),
                    Element::rule(day),
                ]],
            )
        };
        let time = {
            let fraction_digits = self.b.repeat(vec![d()], 1, Some(9));
            let millis = self
                .b
                .repeat(vec![literal("."), fraction_digits], 0, Some(1));
            let mut offset = vec![
                Element::set(&[(b'+', b'+'), (b'-', b'-')]),
                Element::rule(two_digit_hour),
                literal(":"),
            ];
            offset.extend(minute.clone());
            let zone = self.rule(
                "zone",
                vec![vec![Element::set(&[(b'Z', b'Z'), (b'z', b'z')])], offset],
            );
            let mut t = vec![Element::rule(two_digit_hour), literal(":")];
            t.extend(minute.clone());
            t.push(literal(":"));
            t.extend(minute);
            t.extend([millis, Element::rule(zone)]);
            self.rule("time", vec![t])
        };
        match format {
            "date" => Element::rule(date),
            "time" => Element::rule(time),
            "date-time" => Element::rule(self.rule(
                "date-time",
                vec![vec![
                    Element::rule(date),
                    Element::set(&[(b'T', b'T'), (b't', b't')]),
                    Element::rule(time),
                ]],
            )),
            _ => {
                let hex = Element::set(&[(b'0', b'9'), (b'a', b'f'), (b'A', b'F')]);
                let mut uuid = Vec::new();
                for (i, n) in [8, 4, 4, 4, 12].into_iter().enumerate() {
                    if i > 0 {
                        uuid.push(literal("-"));
                    }
                    uuid.push(self.b.repeat(vec![hex.clone()], n, Some(n)));
                }
                Element::rule(self.rule("uuid", vec![uuid]))
            }
        }
    }

    /// An integer, bounded by `minimum`/`maximum` (and their exclusive forms) if given.
    fn integer(
        &mut self,
        object: &serde_json::Map<String, Value>,
        path: &str,
    ) -> Result<RuleId, SchemaError> {
        let bound = |k: &str| -> Result<Option<f64>, SchemaError> {
            match object.get(k) {
                None => Ok(None),
                Some(v) => v
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| err(k, path, format!("\"{k}\" must be a number"))),
            }
        };
        // As i128 so that ±1 for the exclusive forms cannot overflow.
        let mut lo: Option<i128> = None;
        let mut hi: Option<i128> = None;
        let limit = 1e18;
        for (k, exclusive, is_min) in [
            ("minimum", false, true),
            ("exclusiveMinimum", true, true),
            ("maximum", false, false),
            ("exclusiveMaximum", true, false),
        ] {
            let Some(v) = bound(k)? else { continue };
            if v.abs() > limit {
                return Err(err(
                    k,
                    path,
                    format!("\"{k}\" beyond ±10^18 is not supported"),
                ));
            }
            if is_min {
                let mut b = v.ceil() as i128;
                if exclusive && v.ceil() == v {
                    b += 1;
                }
                lo = Some(lo.map_or(b, |l| l.max(b)));
            } else {
                let mut b = v.floor() as i128;
                if exclusive && v.floor() == v {
                    b -= 1;
                }
                hi = Some(hi.map_or(b, |h| h.min(b)));
            }
        }
        if lo.is_none() && hi.is_none() {
            return Ok(self.primitive(Primitive::Integer));
        }
        if let (Some(l), Some(h)) = (lo, hi) {
            if l > h {
                return Err(err(
                    "minimum",
                    path,
                    "the integer range is empty (minimum above maximum)",
                ));
            }
        }
        let mut alternatives = Vec::new();
        // Zero and up.
        if hi.is_none_or(|h| h >= 0) {
            let from = lo.map_or(0, |l| l.max(0)) as u128;
            let to = hi.map(|h| h as u128);
            alternatives.extend(self.magnitudes(from, to));
        }
        // Below zero: "-" and a magnitude from max(1, -hi) up to -lo.
        if lo.is_none_or(|l| l < 0) {
            let from = hi.map_or(1, |h| (-h).max(1)) as u128;
            let to = lo.map(|l| (-l) as u128);
            for mut alt in self.magnitudes(from, to) {
                alt.insert(0, literal("-"));
                alternatives.push(alt);
            }
        }
        let space = self.space();
        for alt in &mut alternatives {
            alt.push(space.clone());
        }
        Ok(self.rule("integer-range", alternatives))
    }

    /// Decimal numbers (no leading zeros) from `from` to `to` (`None`: up to the longest
    /// integer part), one alternative per digit count.
    fn magnitudes(&mut self, from: u128, to: Option<u128>) -> Vec<Vec<Element>> {
        let top = to.unwrap_or(10u128.pow(INTEGER_DIGITS as u32) - 1);
        let mut alternatives = Vec::new();
        let digits = |n: u128| n.to_string().len();
        for len in digits(from)..=digits(top) {
            let lo = if len == digits(from) {
                from
            } else {
                10u128.pow(len as u32 - 1)
            };
            let hi = if len == digits(top) {
                top
            } else {
                10u128.pow(len as u32) - 1
            };
            if lo > hi {
                continue;
            }
            let range = self.same_length(lo.to_string().as_bytes(), hi.to_string().as_bytes());
            alternatives.push(vec![range]);
        }
        alternatives
    }

    /// Digit strings of one length from `lo` to `hi`: shared leading digits, then the low
    /// end's tail, the full middle, and the high end's tail.
    fn same_length(&mut self, lo: &[u8], hi: &[u8]) -> Element {
        if lo == hi {
            return Element::literal(lo);
        }
        let n = lo.len();
        if lo.iter().all(|&c| c == b'0') && hi.iter().all(|&c| c == b'9') {
            return self.b.repeat(vec![digit()], n, Some(n));
        }
        if lo[0] == hi[0] {
            let rest = self.same_length(&lo[1..], &hi[1..]);
            return Element::rule(
                self.rule("digits", vec![vec![Element::literal(&lo[..1]), rest]]),
            );
        }
        let nines = vec![b'9'; n - 1];
        let zeros = vec![b'0'; n - 1];
        let mut alternatives = Vec::new();
        // The low first digit (or from it on, if the low tail is all zeros).
        let (mut mid_lo, mut mid_hi) = (lo[0] + 1, hi[0] - 1);
        if lo[1..] == zeros[..] {
            mid_lo = lo[0];
        } else {
            alternatives.push(vec![
                Element::literal(&lo[..1]),
                self.same_length(&lo[1..], &nines),
            ]);
        }
        let high_alt = if hi[1..] == nines[..] {
            mid_hi = hi[0];
            None
        } else {
            Some(vec![
                Element::literal(&hi[..1]),
                self.same_length(&zeros, &hi[1..]),
            ])
        };
        if mid_lo <= mid_hi {
            let mut alt = vec![Element::range(mid_lo, mid_hi)];
            if n > 1 {
                alt.push(self.b.repeat(vec![digit()], n - 1, Some(n - 1)));
            }
            alternatives.push(alt);
        }
        alternatives.extend(high_alt);
        Element::rule(self.rule("digits", alternatives))
    }
}

fn required_names<'a>(
    object: &'a serde_json::Map<String, Value>,
    path: &str,
) -> Result<Vec<&'a str>, SchemaError> {
    match object.get("required") {
        None => Ok(Vec::new()),
        Some(Value::Array(names)) => names
            .iter()
            .map(|n| {
                n.as_str()
                    .ok_or_else(|| err("required", path, "\"required\" must list property names"))
            })
            .collect(),
        Some(_) => Err(err("required", path, "\"required\" must be an array")),
    }
}

/// Whether `encoded` (JSON string contents, escapes included) ends between characters.
fn at_char_boundary(encoded: &[u8]) -> bool {
    let mut i = 0;
    while i < encoded.len() {
        let c = encoded[i];
        let len = if c == b'\\' {
            if encoded.get(i + 1) == Some(&b'u') {
                6
            } else {
                2
            }
        } else if c < 0x80 {
            1
        } else if c >= 0xF0 {
            4
        } else if c >= 0xE0 {
            3
        } else {
            2
        };
        i += len;
    }
    i == encoded.len()
}

fn without(set: ByteSet, byte: u8) -> ByteSet {
    let mut out = ByteSet::EMPTY;
    for b in 0..=255u8 {
        if b != byte && set.contains(b) {
            out.insert(b);
        }
    }
    out
}

#[cfg(test)]
mod tests;
