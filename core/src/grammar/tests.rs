use super::*;
use alloc::sync::Arc;
use alloc::vec;

fn lit(s: &str) -> Element {
    Element::literal(s.as_bytes())
}

/// `list ::= "[" (item ("," item)*)? "]"`, `item ::= [a-z]+ | list`: right recursion through
/// repetitions, nesting through `list`.
fn nested_lists() -> Grammar {
    let mut b = GrammarBuilder::new();
    let list = b.declare("list");
    let item = b.declare("item");
    let letters = b.repeat(vec![Element::range(b'a', b'z')], 1, None);
    b.define(item, vec![vec![letters], vec![Element::rule(list)]])
        .unwrap();
    let more = b.repeat(vec![lit(","), Element::rule(item)], 0, None);
    let items = b
        .rule("items", vec![vec![], vec![Element::rule(item), more]])
        .unwrap();
    b.define(list, vec![vec![lit("["), Element::rule(items), lit("]")]])
        .unwrap();
    b.build(list).unwrap()
}

fn accepts(g: &Arc<Grammar>, text: &str) -> bool {
    let mut m = Matcher::new(g.clone());
    m.advance(text.as_bytes()) && m.is_complete()
}

#[test]
fn nested_lists_accept_and_reject() {
    let g = Arc::new(nested_lists());
    for good in ["[]", "[a]", "[ab,c]", "[[],[x,[y]]]", "[[[[[[a]]]]]]"] {
        assert!(accepts(&g, good), "{good}");
    }
    for bad in ["", "[", "[a,]", "[,a]", "[a]]", "[A]", "a", "[[a]"] {
        assert!(!accepts(&g, bad), "{bad}");
    }
}

#[test]
fn rejected_bytes_leave_the_state_unchanged() {
    let g = Arc::new(nested_lists());
    let mut m = Matcher::new(g);
    assert!(m.advance(b"[ab"));
    assert!(!m.advance(b",]"));
    assert!(m.allows(b",c]"));
    assert!(!m.allows(b"]]"));
    assert!(m.advance(b"]"));
    assert!(m.is_complete());
    assert!(m.is_finished());
    m.reset();
    assert!(!m.is_complete());
    assert!(m.advance(b"[]"));
}

#[test]
fn complete_is_not_finished_when_more_may_follow() {
    let mut b = GrammarBuilder::new();
    let digits = b.repeat(vec![Element::range(b'0', b'9')], 1, Some(3));
    let root = b.rule("root", vec![vec![digits]]).unwrap();
    let mut m = Matcher::new(Arc::new(b.build(root).unwrap()));
    assert!(!m.is_complete());
    assert!(m.advance(b"1"));
    assert!(m.is_complete() && !m.is_finished());
    assert!(m.advance(b"23"));
    assert!(m.is_finished());
    assert!(!m.allows(b"4"));
}

#[test]
fn empty_alternatives_and_nullable_prefixes() {
    // root ::= a? b? "x", with a ::= "a" and b ::= "" | "b": the byte after a skipped rule.
    let mut b = GrammarBuilder::new();
    let a = b.rule("a", vec![vec![lit("a")]]).unwrap();
    let opt_a = b.repeat(vec![Element::rule(a)], 0, Some(1));
    let bb = b.rule("b", vec![vec![], vec![lit("b")]]).unwrap();
    let root = b
        .rule("root", vec![vec![opt_a, Element::rule(bb), lit("x")]])
        .unwrap();
    let g = Arc::new(b.build(root).unwrap());
    for good in ["x", "ax", "bx", "abx"] {
        assert!(accepts(&g, good), "{good}");
    }
    for bad in ["ba", "bax", "aax", "a"] {
        assert!(!accepts(&g, bad), "{bad}");
    }
}

#[test]
fn ambiguous_grammars_are_deduplicated() {
    // root ::= x* x*, x ::= "a": every split of "aaaa..." is a parse; the set stays small.
    let mut b = GrammarBuilder::new();
    let x = b.rule("x", vec![vec![lit("a")]]).unwrap();
    let s1 = b.repeat(vec![Element::rule(x)], 0, None);
    let s2 = b.repeat(vec![Element::rule(x)], 0, None);
    let root = b.rule("root", vec![vec![s1, s2]]).unwrap();
    let g = Arc::new(b.build(root).unwrap());
    let mut m = Matcher::new(g);
    for _ in 0..1000 {
        assert!(m.advance(b"a"));
    }
    assert!(m.is_complete());
}

#[test]
fn build_errors() {
    let mut b = GrammarBuilder::new();
    let root = b.declare("root");
    let missing = b.declare("missing");
    b.define(root, vec![vec![Element::rule(missing)]]).unwrap();
    assert_eq!(
        b.build(root).unwrap_err(),
        GrammarError::UndefinedRule {
            name: "missing".into()
        }
    );

    let mut b = GrammarBuilder::new();
    let expr = b.declare("expr");
    let maybe = b.rule("maybe", vec![vec![], vec![lit("-")]]).unwrap();
    b.define(
        expr,
        vec![
            vec![Element::rule(maybe), Element::rule(expr), lit("+1")],
            vec![lit("1")],
        ],
    )
    .unwrap();
    assert_eq!(
        b.build(expr).unwrap_err(),
        GrammarError::LeftRecursion {
            name: "expr".into()
        }
    );

    let mut b = GrammarBuilder::new();
    let forever = b.declare("forever");
    b.define(forever, vec![vec![lit("a"), Element::rule(forever)]])
        .unwrap();
    assert_eq!(
        b.build(forever).unwrap_err(),
        GrammarError::Unproductive {
            name: "forever".into()
        }
    );

    let mut b = GrammarBuilder::new();
    let r = b.rule("r", vec![vec![lit("a")]]).unwrap();
    assert_eq!(
        b.define(r, vec![]).unwrap_err(),
        GrammarError::Redefined { name: "r".into() }
    );
}

#[test]
fn nesting_beyond_the_depth_limit_is_not_allowed() {
    let g = Arc::new(nested_lists());
    let limits = MatcherLimits {
        max_depth: 20,
        ..MatcherLimits::default()
    };
    let mut m = Matcher::with_limits(g, limits);
    let mut depth = 0;
    while m.advance(b"[") {
        depth += 1;
        assert!(depth < 100);
    }
    assert!(depth > 3, "{depth}");
    // The deepest list still closes.
    for _ in 0..depth {
        assert!(m.advance(b"]"));
    }
    assert!(m.is_finished());
}

#[test]
fn long_inputs_compact_the_arena() {
    let g = Arc::new(nested_lists());
    let limits = MatcherLimits {
        max_nodes: 64,
        ..MatcherLimits::default()
    };
    let m = Matcher::with_limits(g.clone(), limits);
    let mut text = alloc::string::String::from("[");
    for _ in 0..500 {
        text.push_str("abc,[de],");
    }
    text.push_str("z]");
    // `allows` runs the whole text through the scratch area, compacting on the way.
    assert!(m.allows(text.as_bytes()));
    let mut m = Matcher::with_limits(g, limits);
    assert!(m.advance(text.as_bytes()));
    assert!(m.is_finished());
}

#[test]
fn token_masks() {
    let g = Arc::new(nested_lists());
    let vocab: &[&[u8]] = &[
        b"[", b"]", b"[[", b"[]", b"a", b"ab", b"abc", b",", b",a", b"]]", b"", b"A", b"[a", b"a",
    ];
    let trie = TokenTrie::new(vocab.iter().enumerate().map(|(i, b)| (i as u32, *b)));
    assert_eq!(trie.token_count(), vocab.len() - 1);
    let mut m = Matcher::new(g);
    let mut allowed = [u64::MAX; 1];
    let ids = |mask: &[u64]| -> Vec<usize> {
        (0..vocab.len())
            .filter(|&i| mask[i / 64] >> (i % 64) & 1 == 1)
            .collect()
    };
    m.fill_allowed(&trie, &mut allowed);
    assert_eq!(ids(&allowed), [0, 2, 3, 12]);
    assert!(m.advance(b"[a"));
    m.fill_allowed(&trie, &mut allowed);
    assert_eq!(ids(&allowed), [1, 4, 5, 6, 7, 8, 13]);
    // Brute force agrees, token by token.
    for (i, bytes) in vocab.iter().enumerate() {
        let expected = !bytes.is_empty() && m.allows(bytes);
        assert_eq!(allowed[0] >> i & 1 == 1, expected, "token {i}");
    }
}

/// The mask walk's shortcuts (a sibling's set reused for a byte of the same class, a string's
/// loop recognised as mapping a set to itself) against `allows`, token by token, on every
/// token of four letters or fewer over a small alphabet, in several states.
#[test]
fn token_masks_match_allows_everywhere() {
    // root ::= "\"" [a-z ]* "\"" [0-9] ("x" | "")
    let mut b = GrammarBuilder::new();
    let chars = b.repeat(vec![Element::set(&[(b'a', b'z'), (b' ', b' ')])], 0, None);
    let tail = b.rule("tail", vec![vec![lit("x")], vec![]]).unwrap();
    let root = b
        .rule(
            "root",
            vec![vec![
                lit("\""),
                chars,
                lit("\""),
                Element::range(b'0', b'9'),
                Element::rule(tail),
            ]],
        )
        .unwrap();
    let g = Arc::new(b.build(root).unwrap());
    let alphabet = b"ab \"1x";
    let mut vocab: Vec<Vec<u8>> = Vec::new();
    for len in 1..=4u32 {
        for mut k in 0..alphabet.len().pow(len) {
            let mut t = Vec::new();
            for _ in 0..len {
                t.push(alphabet[k % alphabet.len()]);
                k /= alphabet.len();
            }
            vocab.push(t);
        }
    }
    let trie = TokenTrie::new(vocab.iter().enumerate().map(|(i, t)| (i as u32, &t[..])));
    let mut allowed = vec![0u64; vocab.len().div_ceil(64)];
    for prefix in ["", "\"", "\"ab", "\"a b\"", "\"a\"1"] {
        let mut m = Matcher::new(g.clone());
        assert!(m.advance(prefix.as_bytes()));
        m.fill_allowed(&trie, &mut allowed);
        for (i, t) in vocab.iter().enumerate() {
            let bit = allowed[i / 64] >> (i % 64) & 1 == 1;
            assert_eq!(
                bit,
                m.allows(t),
                "after {prefix:?}: {:?}",
                core::str::from_utf8(t)
            );
        }
    }
}
