//! Ids to text, a token at a time, never splitting a UTF-8 character.
//!
//! A token can end in the middle of a character (byte-fallback tokens carry one byte each; a
//! byte-level BPE token can hold the first two bytes of a three-byte character). The decoder
//! holds such a tail back until the next token completes it. Bytes that can never form a
//! character become U+FFFD, so the output is always valid text.

use super::Tokenizer;
use alloc::string::String;

const REPLACEMENT: char = '\u{FFFD}';

#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    /// The start of an unfinished character (at most 3 bytes; one more completes or breaks it).
    held: [u8; 4],
    n_held: usize,
    show_control: bool,
}

impl StreamDecoder {
    /// A decoder that writes nothing for control tokens (BOS, `<end_of_turn>`, ...).
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// A decoder that writes control tokens' text too (`<|im_end|>`), for debugging.
    pub fn showing_control_tokens() -> StreamDecoder {
        StreamDecoder {
            show_control: true,
            ..StreamDecoder::default()
        }
    }

    /// Appends to `out` the text that token `id` completes.
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32, out: &mut String) {
        if !self.show_control && tokenizer.is_control(id) {
            return;
        }
        self.push_bytes(tokenizer.token_bytes(id), out);
    }

    /// Appends to `out` the complete characters that `bytes` (after what is held) make.
    pub fn push_bytes(&mut self, mut bytes: &[u8], out: &mut String) {
        // First finish or give up on the held character, one byte at a time.
        while self.n_held > 0 && !bytes.is_empty() {
            self.held[self.n_held] = bytes[0];
            self.n_held += 1;
            bytes = &bytes[1..];
            match core::str::from_utf8(&self.held[..self.n_held]) {
                Ok(s) => {
                    out.push_str(s);
                    self.n_held = 0;
                }
                Err(e) => match e.error_len() {
                    None => {} // still unfinished
                    Some(bad) => {
                        // The held bytes cannot start a character; what follows them may.
                        out.push(REPLACEMENT);
                        let mut rest = [0u8; 4];
                        let n_rest = self.n_held - bad;
                        rest[..n_rest].copy_from_slice(&self.held[bad..self.n_held]);
                        self.n_held = 0;
                        self.push_bytes(&rest[..n_rest], out);
                    }
                },
            }
        }
        loop {
            match core::str::from_utf8(bytes) {
                Ok(s) => {
                    out.push_str(s);
                    return;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    if let Ok(s) = core::str::from_utf8(&bytes[..good]) {
                        out.push_str(s);
                    }
                    match e.error_len() {
                        None => {
                            // An unfinished character at the end (at most 3 bytes): hold it.
                            let tail = &bytes[good..];
                            self.held[..tail.len()].copy_from_slice(tail);
                            self.n_held = tail.len();
                            return;
                        }
                        Some(bad) => {
                            out.push(REPLACEMENT);
                            bytes = &bytes[good + bad..];
                        }
                    }
                }
            }
        }
    }

    /// Whether an unfinished character is held back.
    pub fn has_pending(&self) -> bool {
        self.n_held > 0
    }

    /// Ends the stream: an unfinished character becomes U+FFFD.
    pub fn finish(&mut self, out: &mut String) {
        if self.n_held > 0 {
            out.push(REPLACEMENT);
            self.n_held = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> (String, alloc::vec::Vec<String>) {
        let mut d = StreamDecoder::new();
        let mut all = String::new();
        let mut each = alloc::vec::Vec::new();
        for c in chunks {
            let mut s = String::new();
            d.push_bytes(c, &mut s);
            all.push_str(&s);
            each.push(s);
        }
        d.finish(&mut all);
        (all, each)
    }

    #[test]
    fn holds_a_character_split_across_tokens() {
        // "é" = C3 A9, "€" = E2 82 AC, "😀" = F0 9F 98 80
        let (all, each) = decode(&[
            b"a\xC3",
            b"\xA9\xE2",
            b"\x82",
            b"\xAC\xF0\x9F\x98",
            b"\x80!",
        ]);
        assert_eq!(all, "aé€😀!");
        assert_eq!(each, ["a", "é", "", "€", "😀!"]);
    }

    #[test]
    fn byte_fallback_tokens_one_byte_each() {
        let (all, each) = decode(&[b"\xF0", b"\x9F", b"\xA6", b"\x99"]);
        assert_eq!(all, "🦙");
        assert_eq!(each, ["", "", "", "🦙"]);
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        // A lead byte followed by a non-continuation: the lead is lost, the 'x' kept.
        let (all, _) = decode(&[b"\xE2", b"x", b"\xFF", b"ok"]);
        assert_eq!(all, "\u{FFFD}x\u{FFFD}ok");
        // A stray continuation byte, and an unfinished character at the end of the stream.
        let (all, _) = decode(&[b"\x80a\xE2\x82"]);
        assert_eq!(all, "\u{FFFD}a\u{FFFD}");
    }

    #[test]
    fn held_bytes_then_a_new_lead_byte() {
        let (all, _) = decode(&[b"\xC3", b"\xE2\x82\xAC"]);
        assert_eq!(all, "\u{FFFD}€");
    }
}
