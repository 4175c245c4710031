//! After `Matcher::new`, the grammar matcher allocates nothing: `advance`, `allows`,
//! `fill_allowed`, `is_complete` and `reset`, run many times on a JSON grammar with a
//! vocabulary of JSON fragments, under a counting global allocator. Its own `main`, no libtest
//! harness (see decode_no_alloc.rs): nothing else in the process allocates meanwhile.

use smolrun_core::grammar::{Matcher, TokenTrie};
use smolrun_tests::counting_alloc::{allocations, CountingAllocator};
use smolrun_tests::json_grammar;
use std::sync::Arc;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn main() {
    matching_json_allocates_nothing();
    println!("grammar_no_alloc: ok");
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
