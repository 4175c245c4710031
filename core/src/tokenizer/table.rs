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
/// A tail shorter than eight bytes is read as overlapping loads (the last eight bytes of the
/// string, or two overlapping halves of a short one) instead of being copied byte by byte: with
/// the length hashed in as well, those loads still see every byte exactly as a copy would
/// (strings of one length map to distinct words), and a vocabulary hashes every token at load.
pub(crate) fn hash_bytes(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = (bytes.len() as u64).wrapping_mul(K);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        h = (h.rotate_left(23) ^ le_u64(c)).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let n = bytes.len();
        let tail = if n >= 8 {
            le_u64(&bytes[n - 8..])
        } else if n >= 4 {
            let lo = le_u32(&bytes[..4]) as u64;
            let hi = le_u32(&bytes[n - 4..]) as u64;
            lo | hi << 32
        } else {
            // 1 to 3 bytes: first, middle and last cover them all.
            bytes[0] as u64 | (bytes[n / 2] as u64) << 8 | (bytes[n - 1] as u64) << 16
        };
        h = (h.rotate_left(23) ^ tail).wrapping_mul(K);
    }
    avalanche(h)
}

fn le_u64(b: &[u8]) -> u64 {
    b.first_chunk().map_or(0, |w| u64::from_le_bytes(*w))
}

fn le_u32(b: &[u8]) -> u32 {
    b.first_chunk().map_or(0, |w| u32::from_le_bytes(*w))
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
    fn the_hash_sees_every_byte_and_the_length() {
        // The tail is read with overlapping loads: a change to any one byte, at any length,
        // must still change the hash, and so must a change of length alone.
        let base: Vec<u8> = (1..=40u8).collect();
        for len in 0..base.len() {
            let s = &base[..len];
            let h = hash_bytes(s);
            assert_ne!(h, hash_bytes(&base[..len + 1]), "length {len}");
            for i in 0..len {
                let mut t = s.to_vec();
                t[i] ^= 0x80;
                assert_ne!(h, hash_bytes(&t), "byte {i} of {len}");
            }
        }
        assert_ne!(hash_bytes(b""), hash_bytes(b"\0"));
    }

    #[test]
    fn pair_hash_differs_from_split_elsewhere() {
        assert_ne!(hash_pair(b"ab", b"c"), hash_pair(b"a", b"bc"));
    }
}
