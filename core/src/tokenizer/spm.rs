//! SentencePiece-style BPE by token score ("llama" tokenizer model: Llama 2, Gemma).
//!
//! The text (spaces already escaped to U+2581) starts as one symbol per UTF-8 character. Every
//! pair of neighbours whose concatenation is a token is a candidate; the candidate with the
//! highest score is merged first (leftmost on ties), and the new symbol's neighbours become new
//! candidates. What remains is looked up in the vocabulary; a symbol that is not a token is
//! written as its bytes through the `<0xXX>` byte-fallback tokens.

use super::vocab::Vocab;
use alloc::collections::BinaryHeap;
use alloc::vec::Vec;
use core::cmp::Ordering;

/// A run of the text. Symbols form a linked list; a symbol merged into its left neighbour keeps
/// `n == 0` and drops out of the list.
#[derive(Clone, Copy)]
struct Symbol {
    start: u32,
    n: u32,
    prev: i32,
    next: i32,
}

/// A candidate merge of `left` with its right neighbour `right`.
#[derive(Clone, Copy)]
struct Candidate {
    left: i32,
    right: i32,
    score: f32,
    /// Length in bytes of the merged text when the candidate was made: if either side has
    /// changed since, the lengths no longer add up and the candidate is stale.
    size: u32,
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        // Max-heap: higher score first, then the leftmost pair.
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}

/// How deep the re-splitting of a non-token symbol may recurse. Only text that is not valid
/// UTF-8 can get there at all; the bound keeps a hostile input from recursing without end.
const MAX_RESEGMENT_DEPTH: u32 = 32;

struct Session<'v, 't> {
    vocab: &'v Vocab,
    byte_tokens: &'v [Option<u32>; 256],
    text: &'t [u8],
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Candidate>,
    /// Every candidate ever made, for `resegment`: the reference remembers, for each merged
    /// text, the last pair of symbols that could form it.
    made: Vec<Candidate>,
}

/// Appends the tokens of `text` (spaces escaped, no special tokens in it) to `out`.
pub(crate) fn encode(
    vocab: &Vocab,
    byte_tokens: &[Option<u32>; 256],
    text: &[u8],
    out: &mut Vec<u32>,
) {
    if text.is_empty() {
        return;
    }
    let mut s = Session {
        vocab,
        byte_tokens,
        text,
        symbols: Vec::with_capacity(text.len()),
        queue: BinaryHeap::new(),
        made: Vec::new(),
    };

    let mut offset = 0usize;
    while offset < text.len() {
        let n = super::unicode::utf8_len_from_lead(text[offset]).min(text.len() - offset);
        let index = s.symbols.len() as i32;
        offset += n;
        s.symbols.push(Symbol {
            start: (offset - n) as u32,
            n: n as u32,
            prev: index - 1,
            next: if offset == text.len() { -1 } else { index + 1 },
        });
    }

    for right in 1..s.symbols.len() as i32 {
        s.try_add_candidate(right - 1, right);
    }

    while let Some(c) = s.queue.pop() {
        let (l, r) = (c.left as usize, c.right as usize);
        let (left, right) = (s.symbols[l], s.symbols[r]);
        if left.n == 0 || right.n == 0 || left.n + right.n != c.size {
            continue;
        }
        s.symbols[l].n += right.n;
        s.symbols[r].n = 0;
        s.symbols[l].next = right.next;
        if right.next >= 0 {
            s.symbols[right.next as usize].prev = c.left;
        }
        s.try_add_candidate(left.prev, c.left);
        s.try_add_candidate(c.left, right.next);
    }

    let mut i = 0i32;
    while i != -1 {
        s.resegment(i as usize, out, 0);
        i = s.symbols[i as usize].next;
    }
}

impl Session<'_, '_> {
    fn symbol_text(&self, i: usize) -> &[u8] {
        let sym = self.symbols[i];
        &self.text[sym.start as usize..(sym.start + sym.n) as usize]
    }

    fn try_add_candidate(&mut self, left: i32, right: i32) {
        if left < 0 || right < 0 {
            return;
        }
        let l = self.symbols[left as usize];
        let r = self.symbols[right as usize];
        let merged = &self.text[l.start as usize..(l.start + l.n + r.n) as usize];
        let Some(id) = self.vocab.find(merged) else {
            return;
        };
        let c = Candidate {
            left,
            right,
            score: self.vocab.scores.get(id as usize).copied().unwrap_or(0.0),
            size: l.n + r.n,
        };
        self.queue.push(c);
        self.made.push(c);
    }

    /// Writes symbol `i`: its token if it is one; otherwise the two symbols it was last seen to
    /// be made of; otherwise its bytes.
    fn resegment(&self, i: usize, out: &mut Vec<u32>, depth: u32) {
        let text = self.symbol_text(i);
        if let Some(id) = self.vocab.find(text) {
            out.push(id);
            return;
        }
        if depth < MAX_RESEGMENT_DEPTH && !text.is_empty() {
            let parts = self.made.iter().rev().find(|c| {
                let start = self.symbols[c.left as usize].start as usize;
                c.size as usize == text.len() && &self.text[start..start + text.len()] == text
            });
            if let Some(c) = parts {
                self.resegment(c.left as usize, out, depth + 1);
                self.resegment(c.right as usize, out, depth + 1);
                return;
            }
        }
        // The reference aborts when a byte has no token; a vocabulary without the byte
        // fallback simply loses that byte here.
        out.extend(text.iter().filter_map(|&b| self.byte_tokens[b as usize]));
    }
}
