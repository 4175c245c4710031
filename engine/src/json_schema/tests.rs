use super::*;
use serde_json::json;
use smolrun_core::grammar::Matcher;
use std::sync::Arc;

/// Whether the whole text is a sentence of the grammar.
fn accepts(grammar: &Arc<Grammar>, text: &str) -> bool {
    let mut m = Matcher::new(grammar.clone());
    m.advance(text.as_bytes()) && m.is_complete()
}

/// Whether the text is a prefix of a sentence but not a whole one.
fn incomplete(grammar: &Arc<Grammar>, text: &str) -> bool {
    let mut m = Matcher::new(grammar.clone());
    m.advance(text.as_bytes()) && !m.is_complete()
}

fn check(schema: Value, good: &[&str], bad: &[&str]) {
    let g = Arc::new(grammar_for_schema(&schema).unwrap_or_else(|e| panic!("{schema}: {e}")));
    for text in good {
        assert!(accepts(&g, text), "{schema} should accept {text}");
    }
    for text in bad {
        assert!(!accepts(&g, text), "{schema} should reject {text}");
    }
}

fn error_keyword(schema: Value) -> (String, String) {
    let e = grammar_for_schema(&schema).expect_err(&schema.to_string());
    (e.keyword, e.path)
}

#[test]
fn primitive_types() {
    check(
        json!({"type": "string"}),
        &[
            r#""""#,
            r#""abc""#,
            r#""a\"b\\c\n\u00e9""#,
            "\"h\u{e9}llo \u{1F600}\"",
            "\"x\" ",
        ],
        &[
            "",
            "abc",
            r#""abc"#,
            "\"a\nb\"",
            r#""\x""#,
            r#""\u00g0""#,
            "\"\u{1}\"",
            "1",
        ],
    );
    // Bytes that are not UTF-8: a lone continuation byte, an overlong form, a surrogate.
    let g = Arc::new(grammar_for_schema(&json!({"type": "string"})).unwrap());
    for bad in [
        &b"\"\x80\""[..],
        b"\"\xC0\xAF\"",
        b"\"\xED\xA0\x80\"",
        b"\"\xF5\x80\x80\x80\"",
    ] {
        assert!(!Matcher::new(g.clone()).advance(bad), "{bad:?}");
    }
    check(
        json!({"type": "integer"}),
        &["0", "-7", "12345678901234567890", "42 "],
        &["01", "1.5", "-", "+1", "123456789012345678901", "1e3"],
    );
    check(
        json!({"type": "number"}),
        &[
            "0",
            "-0.5",
            "1e10",
            "2.5E-3",
            "3.0",
            "1.7976931348623157e308",
        ],
        &[".5", "1.", "1e", "--1", "1e1234", "0x10"],
    );
    check(
        json!({"type": "boolean"}),
        &["true", "false"],
        &["True", "1", "null"],
    );
    check(json!({"type": "null"}), &["null"], &["nul", "None"]);
    check(
        json!({"type": ["string", "null"]}),
        &["null", "\"a\""],
        &["1", "true"],
    );
}

#[test]
fn whitespace_is_bounded() {
    let g = Arc::new(
        grammar_for_schema(&json!({"type": "array", "items": {"type": "integer"}})).unwrap(),
    );
    assert!(accepts(&g, "[\n  1,\n  2\n]"));
    assert!(accepts(&g, "[1, 2] "));
    assert!(!accepts(&g, "[1,  2]"), "two spaces");
    assert!(!accepts(&g, "[1,\n\n2]"), "two newlines");
    let deep = format!("[\n{}1]", " ".repeat(20));
    assert!(accepts(&g, &deep));
    let too_deep = format!("[\n{}1]", " ".repeat(21));
    assert!(!accepts(&g, &too_deep));
}

#[test]
fn objects_properties_required_and_order() {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["name"],
    });
    check(
        schema,
        &[
            r#"{"name": "a"}"#,
            r#"{"name":"a","age":3}"#,
            r#"{"name": "a", "tags": []}"#,
            r#"{"name": "a", "age": 3, "tags": ["x", "y"]}"#,
            "{\n  \"name\": \"a\",\n  \"age\": 3\n}",
        ],
        &[
            "{}",
            r#"{"age": 3}"#,
            r#"{"age": 3, "name": "a"}"#,
            r#"{"name": "a",}"#,
            r#"{"name": "a", "extra": 1}"#,
            r#"{"name": 1}"#,
            r#"{"name": "a", "age": "3"}"#,
            r#"{"name": "a" "age": 3}"#,
        ],
    );
    let g = Arc::new(
        grammar_for_schema(&json!({"properties": {"a": {"type": "integer"}}, "required": ["a"]}))
            .unwrap(),
    );
    assert!(incomplete(&g, r#"{"a": 1"#));
    assert!(incomplete(&g, "{"));
    // Optional properties only: the empty object is fine.
    check(
        json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}),
        &["{}", r#"{"a": 1}"#, r#"{"b": 2}"#, r#"{"a": 1, "b": 2}"#],
        &[r#"{"b": 2, "a": 1}"#, r#"{, "b": 2}"#, r#"{"a": 1, }"#],
    );
}

#[test]
fn additional_properties() {
    let props = json!({"a": {"type": "integer"}});
    check(
        json!({"type": "object", "properties": props, "additionalProperties": false}),
        &["{}", r#"{"a": 1}"#],
        &[r#"{"b": 1}"#],
    );
    check(
        json!({"type": "object", "properties": props, "additionalProperties": true}),
        &[
            r#"{"a": 1, "b": [true]}"#,
            r#"{"b": 1}"#,
            r#"{"ab": 1}"#,
            r#"{"": 1}"#,
            r#"{"A": null, "c": {}}"#,
        ],
        // A known key cannot come back as an extra one.
        &[
            r#"{"a": 1, "a": 2}"#,
            r#"{"a": "x"}"#,
            r#"{"b": 1, "a": 1}"#,
        ],
    );
    check(
        json!({"type": "object", "additionalProperties": {"type": "integer"}}),
        &["{}", r#"{"x": 1, "y": 2}"#],
        &[r#"{"x": "1"}"#],
    );
    check(
        json!({"type": "object"}),
        &["{}", r#"{"x": [1, {"y": null}]}"#],
        &["[]", "1"],
    );
}

#[test]
fn arrays() {
    check(
        json!({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}),
        &["[1]", "[1, 2, 3]"],
        &["[]", "[1, 2, 3, 4]", "[1,]", "[\"a\"]"],
    );
    check(
        json!({"type": "array", "items": {"type": "boolean"}, "minItems": 2}),
        &["[true, false]", "[true, true, true, true, true]"],
        &["[true]", "[]"],
    );
    check(
        json!({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]}),
        &["[1, \"a\"]"],
        &["[1]", "[\"a\", 1]", "[1, \"a\", 2]"],
    );
    check(
        json!({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "string"}}),
        &["[1]", "[1, \"a\", \"b\"]"],
        &["[1, 2]"],
    );
    check(
        json!({"type": "array"}),
        &["[]", "[1, \"a\", [null]]"],
        &["{}"],
    );
}

#[test]
fn enum_const_any_of_one_of() {
    check(
        json!({"enum": ["red", "green", 3, null, {"a": [1]}]}),
        &["\"red\"", "\"green\"", "3", "null", r#"{"a":[1]}"#],
        &["\"blue\"", "\"re\"", "4", r#"{"a": [1]}"#],
    );
    check(json!({"const": "x"}), &["\"x\""], &["\"y\""]);
    check(
        json!({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]}),
        &["1", "\"ab\""],
        &["\"abc\"", "true"],
    );
    check(
        json!({"oneOf": [{"type": "null"}, {"type": "array", "items": {"type": "null"}}]}),
        &["null", "[null]"],
        &["[1]"],
    );
}

#[test]
fn all_of_merges_objects() {
    check(
        json!({
            "$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
            "allOf": [
                {"$ref": "#/$defs/base"},
                {"properties": {"name": {"type": "string"}}, "required": ["name"]}
            ]
        }),
        &[r#"{"id": 1, "name": "x"}"#],
        &[
            r#"{"id": 1}"#,
            r#"{"name": "x"}"#,
            r#"{"name": "x", "id": 1}"#,
        ],
    );
}

#[test]
fn refs_including_recursive_ones() {
    check(
        json!({
            "$defs": {"node": {
                "type": "object",
                "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                "required": ["value"]
            }},
            "$ref": "#/$defs/node"
        }),
        &[
            r#"{"value": 1}"#,
            r#"{"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]}"#,
        ],
        &[r#"{"value": 1, "children": [{}]}"#],
    );
    check(
        json!({"definitions": {"n": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/definitions/n"}}),
        &["[1, 2]"],
        &["[\"1\"]"],
    );
}

#[test]
fn string_lengths_and_formats() {
    check(
        json!({"type": "string", "minLength": 2, "maxLength": 3}),
        &["\"ab\"", "\"abc\"", "\"\u{e9}\u{e9}\"", r#""\n\t""#],
        &["\"a\"", "\"abcd\""],
    );
    check(
        json!({"type": "string", "format": "date"}),
        &["\"2024-02-29\""],
        &["\"2024-13-01\"", "\"24-01-01\""],
    );
    check(
        json!({"type": "string", "format": "date-time"}),
        &[
            "\"2024-02-29T12:30:00Z\"",
            "\"2024-02-29T23:59:59.123+02:00\"",
        ],
        &["\"2024-02-29 12:30:00\"", "\"2024-02-29T24:00:00Z\""],
    );
    check(
        json!({"type": "string", "format": "uuid"}),
        &["\"123e4567-e89b-12d3-a456-426614174000\""],
        &["\"123e4567e89b12d3a456426614174000\""],
    );
}

#[test]
fn integer_ranges() {
    let check_range = |schema: Value, lo: i64, hi: i64| {
        let g = Arc::new(grammar_for_schema(&schema).unwrap());
        for n in lo - 150..=hi + 150 {
            assert_eq!(
                accepts(&g, &n.to_string()),
                (lo..=hi).contains(&n),
                "{schema}: {n}"
            );
        }
        assert!(!accepts(&g, "-0") || lo <= 0);
        assert!(!accepts(&g, "007"));
    };
    check_range(
        json!({"type": "integer", "minimum": 0, "maximum": 100}),
        0,
        100,
    );
    check_range(
        json!({"type": "integer", "minimum": -37, "maximum": 1234}),
        -37,
        1234,
    );
    check_range(
        json!({"type": "integer", "minimum": -1200, "maximum": -3}),
        -1200,
        -3,
    );
    check_range(
        json!({"type": "integer", "exclusiveMinimum": 9, "exclusiveMaximum": 100}),
        10,
        99,
    );
    check_range(
        json!({"type": "integer", "minimum": 1.5, "maximum": 7.9}),
        2,
        7,
    );
    // One side open.
    let g = Arc::new(grammar_for_schema(&json!({"type": "integer", "minimum": 18})).unwrap());
    for (n, ok) in [
        ("17", false),
        ("18", true),
        ("99999999999", true),
        ("-5", false),
        ("0", false),
    ] {
        assert_eq!(accepts(&g, n), ok, "{n}");
    }
    let g = Arc::new(grammar_for_schema(&json!({"type": "integer", "maximum": -2})).unwrap());
    for (n, ok) in [
        ("-2", true),
        ("-1", false),
        ("0", false),
        ("-123456789", true),
    ] {
        assert_eq!(accepts(&g, n), ok, "{n}");
    }
}

#[test]
fn unsupported_keywords_are_errors_with_their_path() {
    assert_eq!(
        error_keyword(
            json!({"type": "object", "properties": {"age": {"type": "string", "pattern": "^[0-9]+$"}}})
        ),
        ("pattern".into(), "/properties/age".into())
    );
    let e = grammar_for_schema(&json!({"properties": {"age": {"pattern": "x"}}})).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("json_schema at /properties/age: keyword \"pattern\" is not supported; "),
        "{e}"
    );
    assert_eq!(
        error_keyword(json!({"type": "number", "multipleOf": 2})).0,
        "multipleOf"
    );
    assert_eq!(error_keyword(json!({"not": {"type": "null"}})).0, "not");
    assert_eq!(error_keyword(json!({"if": {}, "then": {}})).0, "if");
    assert_eq!(
        error_keyword(json!({"type": "array", "items": {"type": "string", "format": "email"}})),
        ("format".into(), "/items".into())
    );
    assert_eq!(
        error_keyword(json!({"type": "number", "minimum": 0})).0,
        "minimum"
    );
    assert_eq!(error_keyword(json!({"$ref": "#/$defs/missing"})).0, "$ref");
    assert_eq!(
        error_keyword(
            json!({"type": "array", "items": {"anyOf": [{"type": "integer"}], "minimum": 3}})
        ),
        ("minimum".into(), "/items".into())
    );
    assert_eq!(
        error_keyword(json!({"type": "object", "properties": {}, "required": ["x"]})).0,
        "required"
    );
    assert_eq!(
        error_keyword(
            json!({"$defs": {"a": {"type": "string", "pattern": "x"}}, "$ref": "#/$defs/a"})
        ),
        ("pattern".into(), "/$defs/a".into())
    );
    // Annotations are fine.
    grammar_for_schema(&json!({
        "title": "t", "description": "d", "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "x", "$comment": "c", "strict": true, "examples": [1], "default": 1, "type": "integer"
    }))
    .unwrap();
}

#[test]
fn any_json_is_an_object() {
    let g = Arc::new(grammar_for_any_json());
    assert!(accepts(
        &g,
        r#"{"a": [1, 2.5, "x", null, true, {"b": {}}]}"#
    ));
    assert!(accepts(&g, "{}"));
    assert!(!accepts(&g, "[]"));
    assert!(!accepts(&g, "\"a\""));
    assert!(incomplete(&g, r#"{"a": [1"#));
}

#[test]
fn tool_calls() {
    let tools = vec![
        (
            "get_weather".to_string(),
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        ),
        (
            "get_time".to_string(),
            json!({"type": "object", "properties": {}}),
        ),
    ];
    let g = Arc::new(grammar_for_tool_calls(&tools, 2).unwrap());
    let weather = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    let time = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    assert!(accepts(&g, weather));
    assert!(accepts(&g, time));
    assert!(accepts(&g, &format!("{weather}\n{time}")));
    assert!(
        !accepts(&g, &format!("{weather}\n{time}\n{time}")),
        "three calls, two allowed"
    );
    assert!(!accepts(&g, &weather.replace("get_weather", "get_news")));
    assert!(!accepts(&g, &weather.replace("city", "town")));
    assert!(!accepts(
        &g,
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
    ));
    let mut m = Matcher::new(g.clone());
    assert!(m.advance(weather.as_bytes()));
    assert!(m.is_complete() && !m.is_finished());
    let e = grammar_for_tool_calls(
        &[("f".into(), json!({"properties": {"x": {"pattern": "a"}}}))],
        1,
    )
    .unwrap_err();
    assert_eq!(
        (e.keyword.as_str(), e.path.as_str()),
        ("pattern", "/properties/x")
    );
    assert!(e.to_string().contains("tool \"f\""), "{e}");
}

/// xorshift64*: deterministic, no crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// Characters of every kind: plain, escaped by serde_json, two, three and four UTF-8 bytes.
/// Not DEL: serde_json writes it raw, and the grammar (as llama.cpp's) wants it escaped.
fn random_string(rng: &mut Rng, min: usize, max: usize) -> String {
    const CHARS: &[char] = &[
        'a',
        'Z',
        '0',
        ' ',
        '"',
        '\\',
        '\n',
        '\t',
        '\u{1}',
        '/',
        '\u{e9}',
        '\u{20ac}',
        '\u{1F600}',
        '\u{ffff}',
    ];
    let len = min + rng.below(max - min + 1);
    (0..len).map(|_| CHARS[rng.below(CHARS.len())]).collect()
}

fn random_any(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth == 0 { 4 } else { 6 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(50)),
        2 => {
            if rng.chance(50) {
                json!(rng.next() as i64 >> rng.below(64))
            } else {
                json!(f64::from_bits(rng.next() >> 2) * if rng.chance(50) { 1.0 } else { -1e-300 })
            }
        }
        3 => Value::String(random_string(rng, 0, 6)),
        4 => Value::Array(
            (0..rng.below(4))
                .map(|_| random_any(rng, depth - 1))
                .collect(),
        ),
        _ => Value::Object(
            (0..rng.below(4))
                .map(|_| (random_string(rng, 0, 4), random_any(rng, depth - 1)))
                .collect(),
        ),
    }
}

/// A random value the schema accepts (for the subset of schemas the tests use).
fn generate(schema: &Value, root: &Value, rng: &mut Rng, depth: usize) -> Value {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        return generate(root.pointer(&r[1..]).unwrap(), root, rng, depth);
    }
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        return e[rng.below(e.len())].clone();
    }
    if let Some(alts) = schema
        .get("anyOf")
        .or(schema.get("oneOf"))
        .and_then(Value::as_array)
    {
        return generate(&alts[rng.below(alts.len())], root, rng, depth);
    }
    let t = match schema.get("type") {
        Some(Value::Array(ts)) => ts[rng.below(ts.len())].as_str().unwrap().to_string(),
        Some(t) => t.as_str().unwrap().to_string(),
        None if schema.get("properties").is_some() => "object".into(),
        None => return random_any(rng, depth.min(3)),
    };
    match t.as_str() {
        "null" => Value::Null,
        "boolean" => Value::Bool(rng.chance(50)),
        "integer" => {
            let lo = schema
                .get("minimum")
                .and_then(Value::as_i64)
                .unwrap_or(-1_000_000_000_000);
            let hi = schema
                .get("maximum")
                .and_then(Value::as_i64)
                .unwrap_or(1_000_000_000_000);
            json!(lo + (rng.next() % (hi - lo + 1) as u64) as i64)
        }
        "number" => json!((rng.next() as i64 >> rng.below(64)) as f64 / 1024.0),
        "string" => {
            let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
            let max = schema.get("maxLength").and_then(Value::as_u64).unwrap_or(8) as usize;
            Value::String(random_string(rng, min, max))
        }
        "array" => {
            let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
            let max = schema.get("maxItems").and_then(Value::as_u64).unwrap_or(4) as usize;
            let max = if depth == 0 { min } else { max };
            let item = schema.get("items").cloned().unwrap_or(json!({}));
            Value::Array(
                (0..min + rng.below(max - min + 1))
                    .map(|_| generate(&item, root, rng, depth.saturating_sub(1)))
                    .collect(),
            )
        }
        _ => {
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut out = serde_json::Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (name, s) in props {
                    if required.contains(&name.as_str()) || (depth > 0 && rng.chance(50)) {
                        out.insert(
                            name.clone(),
                            generate(s, root, rng, depth.saturating_sub(1)),
                        );
                    }
                }
            }
            if let Some(extra) = schema
                .get("additionalProperties")
                .filter(|a| **a != json!(false))
            {
                for _ in 0..rng.below(3) {
                    let key = random_string(rng, 0, 4);
                    let known = schema.get("properties").and_then(|p| p.get(&key));
                    if known.is_none() && !out.contains_key(&key) {
                        out.insert(key, generate(extra, root, rng, depth.saturating_sub(1)));
                    }
                }
            }
            Value::Object(out)
        }
    }
}

#[test]
fn random_values_of_a_schema_are_accepted() {
    let schemas = [
        json!({
            "type": "object",
            "properties": {
                "id": {"type": "integer", "minimum": -50, "maximum": 5000},
                "name": {"type": "string", "minLength": 1, "maxLength": 5},
                "score": {"type": "number"},
                "flag": {"type": ["boolean", "null"]},
                "kind": {"enum": ["a", "b", 7]},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                "child": {"$ref": "#/$defs/node"},
                "anything": {},
                "choice": {"anyOf": [{"type": "integer"}, {"type": "object", "properties": {"x": {"const": "y"}}}]}
            },
            "required": ["id", "kind"],
            "additionalProperties": {"type": "integer"},
            "$defs": {"node": {
                "type": "object",
                "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                "required": ["v"]
            }}
        }),
        json!({"type": "array", "items": {}, "minItems": 1, "maxItems": 5}),
        json!({"type": "object", "additionalProperties": true}),
    ];
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    for schema in &schemas {
        let g = Arc::new(grammar_for_schema(schema).unwrap());
        for _ in 0..300 {
            let value = generate(schema, schema, &mut rng, 3);
            let compact = serde_json::to_string(&value).unwrap();
            let pretty = serde_json::to_string_pretty(&value).unwrap();
            assert!(accepts(&g, &compact), "{schema}\n{compact}");
            assert!(accepts(&g, &pretty), "{schema}\n{pretty}");
        }
    }
}

/// The token mask on Qwen2.5's 151,665-token vocabulary, in three states: inside a string
/// (nearly everything allowed), right after `{` of an object schema (a few tokens), and at
/// a value of any JSON. Checks each mask against `allows` token by token, then prints how
/// long a mask takes (information for the README, not a pass/fail criterion):
/// `cargo test --release -p smolrun fill_allowed -- --nocapture`
#[test]
fn fill_allowed_matches_allows_on_qwen_vocabulary() {
    use smolrun_core::gguf::Gguf;
    use smolrun_core::grammar::TokenTrie;
    use smolrun_core::tokenizer::Tokenizer;
    use std::time::Instant;

    let path = smolrun_tests::model_path("qwen2.5-coder-0.5b");
    let file = smolrun_linux::MappedFile::open(&path).unwrap();
    let gguf = Gguf::parse(file.bytes()).unwrap();
    let tokenizer = Tokenizer::from_gguf(&gguf).unwrap();
    let n_vocab = tokenizer.n_vocab();
    let start = Instant::now();
    let tokens = (0..n_vocab as u32)
        .filter(|&id| !tokenizer.is_control(id))
        .map(|id| (id, tokenizer.token_bytes(id)));
    let trie = TokenTrie::new(tokens);
    eprintln!(
        "trie: {} tokens, {} nodes, longest {} bytes, built in {:.1} ms",
        trie.token_count(),
        trie.len(),
        trie.longest_token(),
        start.elapsed().as_secs_f64() * 1e3
    );

    let object = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "text": {"type": "string"}},
        "required": ["name", "age"]
    });
    let states = [
        (
            "inside a string",
            grammar_for_schema(&object).unwrap(),
            "{\"name\": \"Hello wor",
        ),
        (
            "after { of an object schema",
            grammar_for_schema(&object).unwrap(),
            "{",
        ),
        (
            "value position of any JSON",
            grammar_for_any_json(),
            "{\"a\": ",
        ),
    ];
    let mut allowed = vec![0u64; n_vocab.div_ceil(64)];
    for (what, grammar, prefix) in states {
        let mut m = Matcher::new(Arc::new(grammar));
        assert!(m.advance(prefix.as_bytes()));
        m.fill_allowed(&trie, &mut allowed);
        let mut count = 0;
        for id in 0..n_vocab as u32 {
            let bit = allowed[id as usize / 64] >> (id % 64) & 1 == 1;
            let bytes = tokenizer.token_bytes(id);
            let expected = !tokenizer.is_control(id) && !bytes.is_empty() && m.allows(bytes);
            assert_eq!(
                bit,
                expected,
                "{what}: token {id} {:?}",
                String::from_utf8_lossy(bytes)
            );
            count += bit as usize;
        }
        // The best of 30 runs: the machine is shared, the minimum is the matcher's own time.
        let mut best = f64::MAX;
        let mut total = 0.0;
        for _ in 0..30 {
            let start = Instant::now();
            m.fill_allowed(&trie, &mut allowed);
            let ms = start.elapsed().as_secs_f64() * 1e3;
            best = best.min(ms);
            total += ms;
        }
        eprintln!(
            "{what}: {count} tokens allowed, fill_allowed {best:.2} ms best, {:.2} ms mean",
            total / 30.0
        );
    }
}
