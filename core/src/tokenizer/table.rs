//! An open-addressing hash table of `u32` ids, for vocabularies of up to a few hundred thousand
//! entries (Gemma 3 has 262,144 tokens, Qwen2 151,387 merges).
//!
//! The table stores only ids; the caller keeps the keys (token text, merge pairs) in its own
//! arrays and hands a comparison closure to each call. Linear probing over a power-of-two table
//! at most half full keeps probe runs short without storing hashes.

use alloc::vec;
use alloc::vec::Vec;

const EMPTY: u32 = u32::MAX;

pub(crate) struct IdTable {
    slots: Vec<u32>,
    mask: usize,
}

impl IdTable {
    /// A table for up to `n` ids.
    pub(crate) fn with_capacity(n: usize) -> IdTable {
        let size = (n.max(4) * 2).next_power_of_two();
        IdTable {
            slots: vec![EMPTY; size],
            mask: size - 1,
        }
    }

    pub(crate) fn bytes_used(&self) -> usize {
        self.slots.len() * core::mem::size_of::<u32>()
    }

    /// Inserts `id` under `hash` unless an equal key (`same_key(existing)`) is there already; in
    /// that case the slot keeps its old id if `keep_first`, otherwise takes the new one.
    pub(crate) fn insert(
        &mut self,
        hash: u64,
        id: u32,
        keep_first: bool,
        same_key: impl Fn(u32) -> bool,
    ) {
        let mut i = hash as usize & self.mask;
        loop {
            let slot = self.slots[i];
            if slot == EMPTY {
                self.slots[i] = id;
                return;
            }
            if same_key(slot) {
                if !keep_first {
                    self.slots[i] = id;
                }
                return;
            }
            i = (i + 1) & self.mask;
        }
    }

    pub(crate) fn find(&self, hash: u64, same_key: impl Fn(u32) -> bool) -> Option<u32> {
        let mut i = hash as usize & self.mask;
        loop {
            let slot = self.slots[i];
            if slot == EMPTY {
                return None;
            }
            if same_key(slot) {
                return Some(slot);
            }
            i = (i + 1) & self.mask;
        }
    }
}

/// A fast hash of a short byte string (token texts average under 10 bytes): eight bytes at a
/// time, multiply-rotate, then a final avalanche so the low bits (the slot index) are mixed.
pub(crate) fn hash_bytes(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = (bytes.len() as u64).wrapping_mul(K);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h.rotate_left(23) ^ w).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(23) ^ u64::from_le_bytes(last)).wrapping_mul(K);
    }
    avalanche(h)
}

/// The hash of a pair of strings (a BPE merge): distinct from the hash of their concatenation.
pub(crate) fn hash_pair(left: &[u8], right: &[u8]) -> u64 {
    avalanche(
        hash_bytes(left)
            ^ hash_bytes(right)
                .rotate_left(31)
                .wrapping_mul(0xC2B2_AE3D_27D4_EB4F),
    )
}

fn avalanche(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    h ^= h >> 33;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_was_inserted_and_respects_keep_first() {
        let keys: [&[u8]; 5] = [b"a", b"ab", b"abc", b"", b"a"];
        let mut t = IdTable::with_capacity(keys.len());
        for (id, k) in keys.iter().enumerate() {
            t.insert(hash_bytes(k), id as u32, false, |other| {
                keys[other as usize] == *k
            });
        }
        let find = |k: &[u8]| t.find(hash_bytes(k), |id| keys[id as usize] == k);
        assert_eq!(find(b"a"), Some(4)); // the later duplicate replaced the earlier one
        assert_eq!(find(b"ab"), Some(1));
        assert_eq!(find(b""), Some(3));
        assert_eq!(find(b"abcd"), None);

        let mut first = IdTable::with_capacity(keys.len());
        for (id, k) in keys.iter().enumerate() {
            first.insert(hash_bytes(k), id as u32, true, |other| {
                keys[other as usize] == *k
            });
        }
        assert_eq!(
            first.find(hash_bytes(b"a"), |id| keys[id as usize] == b"a"),
            Some(0)
        );
    }

    #[test]
    fn pair_hash_differs_from_split_elsewhere() {
        assert_ne!(hash_pair(b"ab", b"c"), hash_pair(b"a", b"bc"));
    }
}
