//! Shared helpers for the integration tests.

pub mod counting_alloc;
pub mod gguf_bytes;
pub mod golden;
mod model_helpers;

pub use model_helpers::*;

use smolrun_core::gguf::{ArrayRef, Gguf, GgufWriter, MetaValue, Value};
use smolrun_core::grammar::{Element, Grammar, GrammarBuilder, RuleId};

/// Parses `bytes` and then touches everything a model loader could touch: every metadata value
/// (walking arrays, nested ones included, as strings, ints and floats), every tensor's data and
/// shape helpers, and the `Display` of the error. Whatever parses is also written back with
/// [`GgufWriter`]: the writer must accept everything the reader accepts, and writing what it
/// wrote must give the same bytes. Used by the fuzz target and by the test that replays the
/// committed fuzz corpus, so both check the same thing. Returns a number derived from what it
/// read so the work cannot be optimised away.
pub fn exercise_gguf(bytes: &[u8]) -> u64 {
    match Gguf::parse(bytes) {
        Err(e) => e.to_string().len() as u64,
        Ok(g) => {
            let mut acc = g.version as u64 ^ g.alignment ^ g.data_offset;
            for entry in &g.metadata {
                acc = acc.wrapping_add(entry.key.len() as u64);
                acc = acc.wrapping_add(exercise_value(entry.value));
                // Lookups by key must find the entry itself (keys are unique). Compared by
                // type and encoding, not `==`: a NaN float is not equal to itself.
                let found = g.get(entry.key).map(|v| v.value_type());
                assert_eq!(found, Some(entry.value.value_type()));
                let _ = g.get_u64(entry.key).map_err(|e| e.to_string());
                let _ = g.get_f32(entry.key).map_err(|e| e.to_string());
                let _ = g.get_str(entry.key).map_err(|e| e.to_string());
            }
            for t in &g.tensors {
                let data = g.tensor_data(t);
                assert_eq!(data.len() as u64, t.n_bytes);
                assert!(std::ptr::eq(g.tensor(t.name).unwrap(), t));
                acc = acc.wrapping_add(data.iter().map(|&b| b as u64).sum::<u64>());
                acc = acc.wrapping_add(t.n_elements() ^ t.row_bytes() as u64);
                let (rows, cols) = t.rows_cols();
                acc = acc.wrapping_add(rows ^ cols ^ t.shape().len() as u64);
            }
            let written = rewrite(&g);
            let reparsed = Gguf::parse(&written)
                .unwrap_or_else(|e| panic!("the writer's output does not parse: {e}"));
            assert_eq!(reparsed.metadata.len(), g.metadata.len());
            for (a, b) in g.tensors.iter().zip(&reparsed.tensors) {
                assert_eq!(
                    (a.name, a.ggml_type, a.shape()),
                    (b.name, b.ggml_type, b.shape())
                );
                assert_eq!(g.tensor_data(a), reparsed.tensor_data(b));
            }
            assert!(rewrite(&reparsed) == written, "writing is not idempotent");
            acc ^ written.len() as u64
        }
    }
}

/// `g` written anew: the same metadata in the same order, the same tensors laid out densely.
pub fn rewrite(g: &Gguf<'_>) -> Vec<u8> {
    let mut w = GgufWriter::new().with_version(g.version).unwrap();
    for e in &g.metadata {
        w.add(e.key, MetaValue::from(e.value))
            .unwrap_or_else(|err| panic!("the writer refuses key '{}': {err}", e.key));
    }
    for t in &g.tensors {
        w.add_tensor(t.name, t.ggml_type, t.shape())
            .unwrap_or_else(|err| panic!("the writer refuses tensor '{}': {err}", t.name));
    }
    let data: Vec<&[u8]> = g.tensors.iter().map(|t| g.tensor_data(t)).collect();
    w.to_bytes(&data).unwrap()
}

fn exercise_value(v: Value<'_>) -> u64 {
    match v {
        Value::Array(a) => exercise_array(a),
        Value::Str(s) => s.len() as u64,
        v => v.as_u64().unwrap_or(0) ^ v.as_f32().map(f32::to_bits).unwrap_or(0) as u64,
    }
}

fn exercise_array(a: ArrayRef<'_>) -> u64 {
    let mut acc = a.len() as u64;
    let mut n = 0u64;
    for v in a.iter() {
        acc = acc.wrapping_add(exercise_value(v));
        n += 1;
    }
    assert_eq!(n, a.len, "an array that parsed must yield all its elements");
    if let Some(strings) = a.strings() {
        let (count, bytes) = strings.fold((0u64, 0u64), |(n, b), s| (n + 1, b + s.len() as u64));
        assert_eq!(count, a.len);
        acc = acc.wrapping_add(bytes);
    }
    if let Some(ints) = a.ints() {
        assert_eq!(ints.count() as u64, a.len);
    }
    if let Some(floats) = a.f32s() {
        acc = acc.wrapping_add(floats.map(|f| f.to_bits() as u64).sum::<u64>());
    }
    acc
}

fn lit(s: &str) -> Element {
    Element::literal(s.as_bytes())
}

/// Any JSON value, llama.cpp style (grammar_no_alloc.rs, examples/load_memory.rs): every value followed by bounded whitespace.
pub fn json_grammar() -> Grammar {
    let mut b = GrammarBuilder::new();
    let value = b.declare("value");
    let blanks = b.repeat(
        vec![Element::set(&[(b' ', b' '), (b'\t', b'\t')])],
        0,
        Some(20),
    );
    let space = b
        .rule(
            "space",
            vec![vec![], vec![lit(" ")], vec![lit("\n"), blanks]],
        )
        .unwrap();
    let ws = Element::rule(space);
    let cont = || Element::range(0x80, 0xBF);
    let hex = Element::set(&[(b'0', b'9'), (b'a', b'f'), (b'A', b'F')]);
    let hex4 = b.repeat(vec![hex], 4, Some(4));
    let char_rule = b
        .rule(
            "char",
            vec![
                vec![Element::set(&[(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E)])],
                vec![
                    lit("\\"),
                    Element::set(&[(b'"', b'"'), (b'\\', b'\\'), (b'n', b'n')]),
                ],
                vec![lit("\\u"), hex4],
                vec![Element::range(0xC2, 0xDF), cont()],
                vec![Element::range(0xE1, 0xEF), cont(), cont()],
                vec![Element::range(0xF0, 0xF4), cont(), cont(), cont()],
            ],
        )
        .unwrap();
    let chars = b.repeat(vec![Element::rule(char_rule)], 0, None);
    let string = b
        .rule(
            "string",
            vec![vec![lit("\""), chars, lit("\""), ws.clone()]],
        )
        .unwrap();
    let digits = b.repeat(vec![Element::range(b'0', b'9')], 1, Some(16));
    let number = b
        .rule(
            "number",
            vec![
                vec![lit("-"), digits.clone(), ws.clone()],
                vec![digits, ws.clone()],
            ],
        )
        .unwrap();
    let list = |b: &mut GrammarBuilder, item: Vec<Element>| -> Element {
        let mut more = vec![lit(","), ws.clone()];
        more.extend(item.iter().cloned());
        let rest = b.repeat(more, 0, None);
        let mut items = item;
        items.push(rest);
        b.repeat(items, 0, Some(1))
    };
    let member = vec![
        Element::rule(string),
        lit(":"),
        ws.clone(),
        Element::rule(value),
    ];
    let members = list(&mut b, member);
    let object = b
        .rule(
            "object",
            vec![vec![lit("{"), ws.clone(), members, lit("}"), ws.clone()]],
        )
        .unwrap();
    let items = list(&mut b, vec![Element::rule(value)]);
    let array = b
        .rule(
            "array",
            vec![vec![lit("["), ws.clone(), items, lit("]"), ws.clone()]],
        )
        .unwrap();
    let alternatives: Vec<Vec<Element>> = [object, array, string, number]
        .iter()
        .map(|r: &RuleId| vec![Element::rule(*r)])
        .chain([vec![lit("true"), ws.clone()], vec![lit("null"), ws]])
        .collect();
    b.define(value, alternatives).unwrap();
    b.build(object).unwrap()
}
