//! GPT-2 style byte-level BPE ("gpt2" tokenizer model: Qwen2/2.5/3, Llama 3).
//!
//! The pre-tokenizer cuts the text into words; each word's UTF-8 bytes are spelled in the
//! byte-level alphabet (see `unicode::byte_to_unicode`), then split into characters and merged
//! pairwise: always the pair with the lowest merge rank (leftmost on ties), until no
//! neighbouring pair has a merge. Each resulting piece is a token.

use super::table::{hash_pair, IdTable};
use super::vocab::Vocab;
use alloc::collections::BinaryHeap;
use alloc::vec::Vec;
use core::cmp::Ordering;

/// `tokenizer.ggml.merges`: entry `rank` is "left right"; lower ranks merge first.
pub(crate) struct MergeTable {
    /// Left then right of every merge, back to back.
    text: Vec<u8>,
    /// Per rank: start of the left part in `text`, and the lengths of both parts.
    parts: Vec<(u32, u32, u32)>,
    index: IdTable,
}

impl MergeTable {
    /// `None` if the merges add up to 4 GiB or more (offsets are 32-bit).
    /// `text_bytes`: what the merge texts add up to (bytes that exist in the file).
    pub(crate) fn new<'s>(
        merges: impl Iterator<Item = &'s [u8]>,
        n_merges: usize,
        text_bytes: usize,
    ) -> Option<MergeTable> {
        let mut text = Vec::with_capacity(text_bytes);
        let mut parts = Vec::with_capacity(n_merges);
        for m in merges {
            // The separator is the first space after the first byte: a merge's left part may
            // itself be a lone space in vocabularies that do not byte-encode.
            let start = u32::try_from(text.len()).ok()?;
            match m.iter().skip(1).position(|&b| b == b' ') {
                Some(p) => {
                    let (left, right) = (&m[..p + 1], &m[p + 2..]);
                    text.extend_from_slice(left);
                    text.extend_from_slice(right);
                    parts.push((start, left.len() as u32, right.len() as u32));
                }
                // No separator: the reference files it under an empty pair, which no pair of
                // (non-empty) symbols can ask for. Keep the rank numbering intact.
                None => parts.push((start, 0, 0)),
            }
        }
        let mut table = MergeTable {
            text,
            parts,
            index: IdTable::with_capacity(0),
        };
        let mut index = IdTable::with_capacity(table.parts.len());
        for rank in 0..table.parts.len() as u32 {
            let (l, r) = table.pair(rank);
            if l.is_empty() {
                continue;
            }
            // A duplicate merge keeps its first (lowest) rank.
            index.insert(hash_pair(l, r), rank, true, |other| {
                table.pair(other) == (l, r)
            });
        }
        table.index = index;
        Some(table)
    }

    fn pair(&self, rank: u32) -> (&[u8], &[u8]) {
        let (start, l, r) = self.parts[rank as usize];
        let (start, l, r) = (start as usize, l as usize, r as usize);
        (
            &self.text[start..start + l],
            &self.text[start + l..start + l + r],
        )
    }

    pub(crate) fn rank(&self, left: &[u8], right: &[u8]) -> Option<u32> {
        self.index.find(hash_pair(left, right), |rank| {
            self.pair(rank) == (left, right)
        })
    }

    pub(crate) fn bytes_used(&self) -> usize {
        self.text.len() + self.parts.len() * 12 + self.index.bytes_used()
    }
}

#[derive(Clone, Copy)]
struct Symbol {
    start: u32,
    n: u32,
    prev: i32,
    next: i32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct Candidate {
    left: i32,
    right: i32,
    rank: u32,
    /// Merged length when made; a changed neighbour makes the sum differ (stale candidate).
    size: u32,
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        // Max-heap of the lowest rank, then the leftmost pair.
        other
            .rank
            .cmp(&self.rank)
            .then_with(|| other.left.cmp(&self.left))
    }
}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Reusable buffers for encoding many words.
#[derive(Default)]
pub(crate) struct WordScratch {
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Candidate>,
}

/// Appends the tokens of one pre-tokenized, byte-level-encoded `word` to `out`.
///
/// With `ignore_merges` (Llama 3) a word that is a token as a whole is taken as is.
pub(crate) fn encode_word(
    vocab: &Vocab,
    merges: &MergeTable,
    ignore_merges: bool,
    word: &[u8],
    scratch: &mut WordScratch,
    out: &mut Vec<u32>,
) {
    if word.is_empty() {
        return;
    }
    if ignore_merges {
        if let Some(id) = vocab.find(word) {
            out.push(id);
            return;
        }
    }
    let symbols = &mut scratch.symbols;
    let queue = &mut scratch.queue;
    symbols.clear();
    queue.clear();

    let mut offset = 0usize;
    while offset < word.len() {
        let n = super::unicode::utf8_len_from_lead(word[offset]).min(word.len() - offset);
        let index = symbols.len() as i32;
        offset += n;
        symbols.push(Symbol {
            start: (offset - n) as u32,
            n: n as u32,
            prev: index - 1,
            next: if offset == word.len() { -1 } else { index + 1 },
        });
    }

    let add_candidate = |symbols: &[Symbol], queue: &mut BinaryHeap<Candidate>, l: i32, r: i32| {
        if l < 0 || r < 0 {
            return;
        }
        let (ls, rs) = (symbols[l as usize], symbols[r as usize]);
        let left = &word[ls.start as usize..(ls.start + ls.n) as usize];
        let right = &word[rs.start as usize..(rs.start + rs.n) as usize];
        if let Some(rank) = merges.rank(left, right) {
            queue.push(Candidate {
                left: l,
                right: r,
                rank,
                size: ls.n + rs.n,
            });
        }
    };

    for r in 1..symbols.len() as i32 {
        add_candidate(symbols, queue, r - 1, r);
    }

    while let Some(c) = queue.pop() {
        let (l, r) = (c.left as usize, c.right as usize);
        let (left, right) = (symbols[l], symbols[r]);
        // The reference compares the texts; while both sides are alive `right` is still the
        // neighbour of `left`, so the texts are unchanged exactly when the lengths are.
        if left.n == 0 || right.n == 0 || left.n + right.n != c.size {
            continue;
        }
        symbols[l].n += right.n;
        symbols[r].n = 0;
        symbols[l].next = right.next;
        if right.next >= 0 {
            symbols[right.next as usize].prev = c.left;
        }
        add_candidate(symbols, queue, left.prev, c.left);
        add_candidate(symbols, queue, c.left, right.next);
    }

    let mut i = 0i32;
    while i != -1 {
        let s = symbols[i as usize];
        let piece = &word[s.start as usize..(s.start + s.n) as usize];
        match vocab.find(piece) {
            Some(id) => out.push(id),
            // Not a token: the reference tries each byte as a one-byte token and drops those
            // that are not (in a byte-level vocabulary every single character is a token, so
            // this only happens with incomplete vocabularies).
            None => out.extend(piece.iter().filter_map(|&b| vocab.find(&[b]))),
        }
        i = s.next;
    }
}
