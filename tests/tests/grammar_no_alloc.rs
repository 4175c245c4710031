//! After `Matcher::new`, the grammar matcher allocates nothing: `advance`, `allows`,
//! `fill_allowed`, `is_complete` and `reset`, run many times on a JSON grammar with a
//! vocabulary of JSON fragments, under a counting global allocator. Its own `main`, no libtest
//! harness (see decode_no_alloc.rs): nothing else in the process allocates meanwhile.

use smolrun_core::grammar::{Element, Grammar, GrammarBuilder, Matcher, RuleId, TokenTrie};
use smolrun_tests::counting_alloc::{allocations, CountingAllocator};
use std::sync::Arc;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn main() {
    matching_json_allocates_nothing();
    println!("grammar_no_alloc: ok");
}

fn lit(s: &str) -> Element {
    Element::literal(s.as_bytes())
}

/// Any JSON value, llama.cpp style: every value followed by bounded whitespace.
fn json_grammar() -> Grammar {
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

fn matching_json_allocates_nothing() {
    let grammar = Arc::new(json_grammar());
    let mut vocab: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    for piece in [
        "{\"",
        "\":",
        "\": ",
        "\"}",
        "\"},",
        "}}",
        "]}",
        "[{",
        "true",
        "null",
        "\n  ",
        "\n    ",
        ", \"",
        "name",
        "value",
        "12",
        "345",
        "\\n",
        "\\u00e9",
        "é",
        "😀",
        "\" ",
        "{}",
        "[]",
        "\"a\"",
        "hello world",
    ] {
        vocab.push(piece.as_bytes().to_vec());
    }
    let trie = TokenTrie::new(
        vocab
            .iter()
            .enumerate()
            .map(|(i, t)| (i as u32, t.as_slice())),
    );
    let document = "{\"name\": \"h\u{e9}llo \u{1F600}\", \"list\": [1, -23, {\"deep\": [[[null]]]}, true],\n  \"s\": \"a\\nb\\u00e9\"}";
    let mut matcher = Matcher::new(grammar);
    let mut allowed = vec![0u64; vocab.len().div_ceil(64)];

    // Warm-up (the spin lock, first touches).
    matcher.fill_allowed(&trie, &mut allowed);
    assert!(matcher.allows(b"{"));
    matcher.reset();

    let before = allocations();
    let mut steps = 0;
    for _ in 0..50 {
        matcher.reset();
        for b in document.bytes() {
            matcher.fill_allowed(&trie, &mut allowed);
            // The next byte's single-byte token must be in the mask.
            assert!(allowed[b as usize / 64] >> (b % 64) & 1 == 1);
            assert!(matcher.allows(&[b]));
            assert!(!matcher.advance(b"\x01"));
            assert!(matcher.advance(&[b]));
            steps += 1;
        }
        assert!(matcher.is_complete());
        assert!(!matcher.is_finished());
    }
    let after = allocations();
    assert_eq!(
        after - before,
        0,
        "{} allocations in {steps} steps",
        after - before
    );
    println!("grammar_no_alloc: {steps} steps of fill_allowed, allows and advance, 0 allocations");
}
