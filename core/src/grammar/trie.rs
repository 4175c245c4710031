//! A vocabulary's token bytes as a trie, for [`Matcher::fill_allowed`](super::Matcher::fill_allowed).

use alloc::vec::Vec;

/// The trie's nodes (the root left out) in depth-first order, which is the tokens' sorted
/// order: a walk is a linear scan, and skipping a subtree is a jump to `subtree_end`.
pub struct TokenTrie {
    /// The byte on the edge into node i.
    pub(crate) byte: Vec<u8>,
    /// Node i's distance from the root (1 for a first byte).
    pub(crate) depth: Vec<u16>,
    /// The index just past node i's subtree.
    pub(crate) subtree_end: Vec<u32>,
    /// The tokens whose bytes end at node i: `token_ids[token_start[i]..token_start[i + 1]]`
    /// (several ids can share their bytes).
    token_start: Vec<u32>,
    token_ids: Vec<u32>,
    longest: usize,
}

impl TokenTrie {
    /// The trie of `(id, bytes)` pairs. Tokens with no bytes are left out: control tokens
    /// should be passed with empty bytes (or not at all), since their text (`<|im_end|>`) is
    /// not what they stand for.
    pub fn new<'a>(tokens: impl Iterator<Item = (u32, &'a [u8])>) -> Self {
        let mut sorted: Vec<(u32, &[u8])> = tokens.filter(|(_, b)| !b.is_empty()).collect();
        sorted.sort_unstable_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(&b.0)));
        let longest = sorted.iter().map(|(_, b)| b.len()).max().unwrap_or(0);
        let mut trie = TokenTrie {
            byte: Vec::new(),
            depth: Vec::new(),
            subtree_end: Vec::new(),
            token_start: Vec::new(),
            token_ids: Vec::new(),
            longest,
        };
        // The nodes of the previous token's path, root excluded.
        let mut path: Vec<u32> = Vec::new();
        let mut previous: &[u8] = &[];
        for (id, bytes) in sorted {
            let shared = bytes
                .iter()
                .zip(previous)
                .take_while(|(a, b)| a == b)
                .count();
            // Nodes deeper than the shared prefix are finished: their subtrees end here.
            let next_node = trie.byte.len() as u32;
            for &closed in &path[shared..] {
                trie.subtree_end[closed as usize] = next_node;
            }
            path.truncate(shared);
            for (k, &b) in bytes.iter().enumerate().skip(shared) {
                path.push(trie.byte.len() as u32);
                trie.byte.push(b);
                trie.depth.push((k + 1) as u16);
                trie.subtree_end.push(0);
                trie.token_start.push(trie.token_ids.len() as u32);
            }
            trie.token_ids.push(id);
            previous = bytes;
        }
        let end = trie.byte.len() as u32;
        for &open in &path {
            trie.subtree_end[open as usize] = end;
        }
        trie.token_start.push(trie.token_ids.len() as u32);
        trie
    }

    /// The number of trie nodes (distinct token prefixes).
    pub fn len(&self) -> usize {
        self.byte.len()
    }

    pub fn is_empty(&self) -> bool {
        self.byte.is_empty()
    }

    /// The number of tokens in the trie.
    pub fn token_count(&self) -> usize {
        self.token_ids.len()
    }

    /// The longest token, in bytes.
    pub fn longest_token(&self) -> usize {
        self.longest
    }

    pub(crate) fn tokens_at(&self, node: usize) -> &[u32] {
        &self.token_ids[self.token_start[node] as usize..self.token_start[node + 1] as usize]
    }
}
