//! Code points, their category groups, and the GPT-2 byte-to-unicode mapping.
//!
//! Decoding follows llama.cpp's lenient decoder on purpose, not the strict one in `core::str`:
//! token ids must match the reference even for text that is not valid UTF-8 (read from a file).
//! It takes a lead byte's length on trust (no overlong or surrogate checks) and turns a byte that
//! starts no complete sequence into one U+FFFD, then moves on by one byte.

// The full set of groups is kept; the pre-tokenizers implemented so far test only some.
#![cfg_attr(not(test), allow(dead_code))]

use super::unicode_tables::{GROUP_RANGE_GROUPS, GROUP_RANGE_STARTS, WHITE_SPACE};

pub(crate) const GROUP_UNDEFINED: u16 = 0x01;
pub(crate) const GROUP_NUMBER: u16 = 0x02;
pub(crate) const GROUP_LETTER: u16 = 0x04;
pub(crate) const GROUP_SEPARATOR: u16 = 0x08;
pub(crate) const GROUP_MARK: u16 = 0x10;
pub(crate) const GROUP_PUNCTUATION: u16 = 0x20;
pub(crate) const GROUP_SYMBOL: u16 = 0x40;
pub(crate) const GROUP_CONTROL: u16 = 0x80;
/// Not a category: the White_Space property, kept in the same flag word.
pub(crate) const WHITESPACE: u16 = 0x100;

pub(crate) const REPLACEMENT_CHARACTER: u32 = 0xFFFD;

/// The flags of a code point: one `GROUP_*` bit plus `WHITESPACE` where it applies. Never zero
/// for a code point; zero is kept for "past the end of the text" in the pre-tokenizers.
pub(crate) fn flags_of(cp: u32) -> u16 {
    if cp >= 0x11_0000 {
        return GROUP_UNDEFINED;
    }
    // Index of the last range that starts at or before `cp` (range 0 starts at 0).
    let i = GROUP_RANGE_STARTS.partition_point(|&start| start <= cp) - 1;
    let mut flags = GROUP_RANGE_GROUPS[i] as u16;
    if WHITE_SPACE.binary_search(&cp).is_ok() {
        flags |= WHITESPACE;
    }
    flags
}

/// Length of the UTF-8 sequence that `lead` starts, judged by its top four bits alone (a stray
/// continuation byte counts as 1), as SentencePiece and llama.cpp split text into symbols.
pub(crate) fn utf8_len_from_lead(lead: u8) -> usize {
    match lead >> 4 {
        0xC | 0xD => 2,
        0xE => 3,
        0xF => 4,
        _ => 1,
    }
}

/// Decodes `bytes` into code points the way the reference does (see the module comment).
pub(crate) fn decode_lenient(bytes: &[u8], out: &mut alloc::vec::Vec<u32>) {
    let mut i = 0;
    while i < bytes.len() {
        let (cp, len) = decode_one(&bytes[i..]);
        out.push(cp);
        i += len;
    }
}

fn decode_one(b: &[u8]) -> (u32, usize) {
    let lead = b[0] as u32;
    let is_cont = |k: usize| b.get(k).is_some_and(|&c| c & 0xC0 == 0x80);
    if lead & 0x80 == 0 {
        (lead, 1)
    } else if lead & 0x40 == 0 {
        (REPLACEMENT_CHARACTER, 1)
    } else if lead & 0x20 == 0 {
        if !is_cont(1) {
            return (REPLACEMENT_CHARACTER, 1);
        }
        (((lead & 0x1F) << 6) | (b[1] as u32 & 0x3F), 2)
    } else if lead & 0x10 == 0 {
        if !(is_cont(1) && is_cont(2)) {
            return (REPLACEMENT_CHARACTER, 1);
        }
        let cp = ((lead & 0x0F) << 12) | ((b[1] as u32 & 0x3F) << 6) | (b[2] as u32 & 0x3F);
        (cp, 3)
    } else if lead & 0x08 == 0 {
        if !(is_cont(1) && is_cont(2) && is_cont(3)) {
            return (REPLACEMENT_CHARACTER, 1);
        }
        let cp = ((lead & 0x07) << 18)
            | ((b[1] as u32 & 0x3F) << 12)
            | ((b[2] as u32 & 0x3F) << 6)
            | (b[3] as u32 & 0x3F);
        (cp, 4)
    } else {
        (REPLACEMENT_CHARACTER, 1)
    }
}

/// Appends the UTF-8 form of `cp`. Surrogates are written as their 3-byte form (the reference
/// does the same); a value past U+10FFFF, which the lenient decoder can produce from an F5..F7
/// lead byte, becomes U+FFFD.
pub(crate) fn push_utf8(cp: u32, out: &mut alloc::vec::Vec<u8>) {
    match cp {
        0..=0x7F => out.push(cp as u8),
        0x80..=0x7FF => out.extend_from_slice(&[0xC0 | (cp >> 6) as u8, 0x80 | (cp & 0x3F) as u8]),
        0x800..=0xFFFF => out.extend_from_slice(&[
            0xE0 | (cp >> 12) as u8,
            0x80 | ((cp >> 6) & 0x3F) as u8,
            0x80 | (cp & 0x3F) as u8,
        ]),
        0x1_0000..=0x10_FFFF => out.extend_from_slice(&[
            0xF0 | (cp >> 18) as u8,
            0x80 | ((cp >> 12) & 0x3F) as u8,
            0x80 | ((cp >> 6) & 0x3F) as u8,
            0x80 | (cp & 0x3F) as u8,
        ]),
        _ => push_utf8(REPLACEMENT_CHARACTER, out),
    }
}

/// GPT-2's byte-level alphabet: every byte gets a printable code point so that BPE can work on
/// text. Printable Latin-1 bytes map to themselves; the other 68 bytes take U+0100, U+0101, ...
/// in byte order.
pub(crate) fn byte_to_unicode(byte: u8) -> u32 {
    let b = byte as u32;
    let printable = |c: u32| (0x21..=0x7E).contains(&c) || (0xA1..=0xAC).contains(&c) || c >= 0xAE;
    if printable(b) {
        return b;
    }
    // Count the non-printable bytes below this one.
    let rank = (0..b).filter(|&c| !printable(c)).count() as u32;
    0x100 + rank
}

/// The inverse of [`byte_to_unicode`], or `None` for a code point outside the alphabet (the
/// readable definition; [`ByteAlphabet::decode`] is the table form).
pub(crate) fn unicode_to_byte(cp: u32) -> Option<u8> {
    let printable = |c: u32| (0x21..=0x7E).contains(&c) || (0xA1..=0xAC).contains(&c) || c >= 0xAE;
    if cp < 0x100 {
        return printable(cp).then_some(cp as u8);
    }
    let rank = cp - 0x100;
    (0u32..256)
        .filter(|&c| !printable(c))
        .nth(rank as usize)
        .map(|c| c as u8)
}

/// The alphabet's code points are all below this.
const ALPHABET_END: usize = 0x144;

/// The byte-level alphabet as tables: `[byte] -> UTF-8 of its code point` (1 or 2 bytes) and
/// back, `[code point] -> byte`.
pub(crate) struct ByteAlphabet {
    encoded: [[u8; 2]; 256],
    encoded_len: [u8; 256],
    /// `u16::MAX` for a code point outside the alphabet.
    decoded: [u16; ALPHABET_END],
}

impl ByteAlphabet {
    pub(crate) fn new() -> ByteAlphabet {
        let mut encoded = [[0u8; 2]; 256];
        let mut encoded_len = [0u8; 256];
        let mut decoded = [u16::MAX; ALPHABET_END];
        let mut buf = alloc::vec::Vec::with_capacity(2);
        for b in 0..=255u8 {
            let cp = byte_to_unicode(b);
            buf.clear();
            push_utf8(cp, &mut buf);
            encoded[b as usize][..buf.len()].copy_from_slice(&buf);
            encoded_len[b as usize] = buf.len() as u8;
            decoded[cp as usize] = b as u16;
        }
        ByteAlphabet {
            encoded,
            encoded_len,
            decoded,
        }
    }

    /// The byte that code point `cp` stands for, if it is in the alphabet.
    pub(crate) fn decode(&self, cp: u32) -> Option<u8> {
        match self.decoded.get(cp as usize) {
            Some(&b) if b != u16::MAX => Some(b as u8),
            _ => None,
        }
    }

    /// The UTF-8 bytes of the code point that stands for `byte`.
    pub(crate) fn encode(&self, byte: u8) -> &[u8] {
        &self.encoded[byte as usize][..self.encoded_len[byte as usize] as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn byte_alphabet_round_trips_and_matches_gpt2() {
        // Known points of GPT-2's table: space is U+0120 'Ġ', newline U+010A 'Ċ'.
        assert_eq!(byte_to_unicode(b' '), 0x120);
        assert_eq!(byte_to_unicode(b'\n'), 0x10A);
        assert_eq!(byte_to_unicode(b'a'), b'a' as u32);
        assert_eq!(byte_to_unicode(0xAD), 0x143);
        let alphabet = ByteAlphabet::new();
        for b in 0..=255u8 {
            assert_eq!(unicode_to_byte(byte_to_unicode(b)), Some(b));
            assert_eq!(alphabet.decode(byte_to_unicode(b)), Some(b));
        }
        assert_eq!(unicode_to_byte(0x20), None);
        assert_eq!(unicode_to_byte(0x200), None);
        assert_eq!(alphabet.decode(0x20), None);
        assert_eq!(alphabet.decode(0x200), None);
    }

    #[test]
    fn lenient_decoding_replaces_each_bad_byte() {
        let mut cps = Vec::new();
        decode_lenient(b"a\xE2\x82z\xFF\xC3\xA9", &mut cps);
        assert_eq!(cps, [0x61, 0xFFFD, 0xFFFD, 0x7A, 0xFFFD, 0xE9]);
    }

    #[test]
    fn flags_cover_the_groups_the_pre_tokenizers_test() {
        assert_eq!(flags_of('a' as u32), GROUP_LETTER);
        assert_eq!(flags_of('7' as u32), GROUP_NUMBER);
        assert_eq!(flags_of(' ' as u32), GROUP_SEPARATOR | WHITESPACE);
        assert_eq!(flags_of('\n' as u32), GROUP_CONTROL | WHITESPACE);
        assert_eq!(flags_of('$' as u32), GROUP_SYMBOL);
        assert_eq!(flags_of('!' as u32), GROUP_PUNCTUATION);
        assert_eq!(flags_of(0x301), GROUP_MARK);
        assert_eq!(flags_of('中' as u32), GROUP_LETTER);
        assert_eq!(flags_of(0x3000), GROUP_SEPARATOR | WHITESPACE);
        assert_eq!(flags_of(0x1F600), GROUP_SYMBOL);
        assert_eq!(flags_of(0x10FFFF), GROUP_UNDEFINED);
        assert_eq!(flags_of(0x110000), GROUP_UNDEFINED);
    }
}
