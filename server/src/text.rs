//! Turns generated token bytes into text that is safe to send: never half a UTF-8 character,
//! never any part of a stop string.
//!
//! Bytes arrive token by token. Released text is everything except a tail that is held back
//! while it might still become something else: an incomplete UTF-8 character, or the beginning
//! of a stop string. Because any tail that could start a stop string is held, a match always
//! begins inside the held bytes, so released text never has to be taken back.

use std::collections::VecDeque;

/// Text and tokens that became final after one push (or at the end).
#[derive(Debug, PartialEq)]
pub struct Released<T> {
    pub text: String,
    /// Tokens whose bytes are now all released (or, at a stop, that contributed visible bytes),
    /// in order. A token whose bytes are partly held back is released with a later piece.
    pub tokens: Vec<T>,
    /// A stop string matched: `text` ends right before it, and generation must end.
    pub stopped: bool,
}

impl<T> Released<T> {
    fn empty() -> Self {
        Released {
            text: String::new(),
            tokens: Vec::new(),
            stopped: false,
        }
    }

    /// Nothing to send (a stop with no text before it still has nothing to send).
    pub fn is_empty(&self) -> bool {
        self.text.is_empty() && self.tokens.is_empty()
    }
}

pub struct TextStream<T> {
    stop: Vec<Vec<u8>>,
    /// Bytes received but not released yet; `held[0]` is at absolute offset `released_len`.
    held: Vec<u8>,
    released_len: usize,
    /// Tokens not yet released, with the absolute [start, end) of their bytes.
    tokens: VecDeque<(T, usize, usize)>,
    total_len: usize,
    stopped: bool,
}

impl<T> TextStream<T> {
    /// Empty stop strings are ignored (they would match everywhere).
    pub fn new(stop: &[String]) -> Self {
        TextStream {
            stop: stop
                .iter()
                .filter(|s| !s.is_empty())
                .map(|s| s.as_bytes().to_vec())
                .collect(),
            held: Vec::new(),
            released_len: 0,
            tokens: VecDeque::new(),
            total_len: 0,
            stopped: false,
        }
    }

    /// Add one token's bytes; returns what can be sent now. After a stop, pushes release nothing.
    pub fn push(&mut self, token: T, bytes: &[u8]) -> Released<T> {
        if self.stopped {
            return Released::empty();
        }
        let start = self.total_len;
        self.total_len += bytes.len();
        self.tokens.push_back((token, start, self.total_len));
        self.held.extend_from_slice(bytes);

        if let Some(at) = self.earliest_stop_match() {
            self.stopped = true;
            let visible_end = self.released_len + at;
            let mut out = self.release(at);
            // Tokens that contributed bytes before the stop string are reported; the rest
            // (the stop string itself) vanish with it.
            while let Some((t, s, _)) = self.tokens.pop_front() {
                if s < visible_end {
                    out.tokens.push(t);
                }
            }
            self.held.clear();
            out.stopped = true;
            return out;
        }

        let hold = self
            .stop_prefix_tail()
            .max(incomplete_utf8_tail(&self.held));
        self.release(self.held.len() - hold)
    }

    /// Generation ended without a stop string: release everything still held. An incomplete
    /// character at the very end becomes U+FFFD.
    pub fn finish(&mut self) -> Released<T> {
        if self.stopped {
            return Released::empty();
        }
        let mut out = self.release(self.held.len());
        out.tokens.extend(self.tokens.drain(..).map(|(t, _, _)| t));
        out
    }

    /// Release the first `n` held bytes and the tokens that end within them.
    fn release(&mut self, n: usize) -> Released<T> {
        let text = String::from_utf8_lossy(&self.held[..n]).into_owned();
        self.held.drain(..n);
        self.released_len += n;
        let mut tokens = Vec::new();
        while self
            .tokens
            .front()
            .is_some_and(|&(_, _, end)| end <= self.released_len)
        {
            if let Some((t, _, _)) = self.tokens.pop_front() {
                tokens.push(t);
            }
        }
        Released {
            text,
            tokens,
            stopped: false,
        }
    }

    /// Offset in `held` of the first complete stop string, if any.
    fn earliest_stop_match(&self) -> Option<usize> {
        self.stop.iter().filter_map(|s| find(&self.held, s)).min()
    }

    /// Length of the longest tail of `held` that is a proper beginning of some stop string.
    fn stop_prefix_tail(&self) -> usize {
        let mut longest = 0;
        for s in &self.stop {
            let max = (s.len() - 1).min(self.held.len());
            for len in (longest + 1..=max).rev() {
                if self.held[self.held.len() - len..] == s[..len] {
                    longest = len;
                    break;
                }
            }
        }
        longest
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Length (0..=3) of an unfinished UTF-8 character at the end of `bytes`: a lead byte whose
/// continuation bytes have not all arrived yet.
pub fn incomplete_utf8_tail(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let b = bytes[bytes.len() - back];
        if b & 0xC0 == 0x80 {
            continue; // continuation byte: keep looking for the lead byte
        }
        let needed = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1, // ASCII or an invalid byte: nothing to wait for
        };
        return if needed > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Push each piece as one token (numbered from 0); collect (text, tokens, stopped) per push
    /// and for the final flush.
    fn run(stop: &[&str], pieces: &[&[u8]]) -> (Vec<String>, Vec<Vec<usize>>, bool) {
        let stop: Vec<String> = stop.iter().map(|s| s.to_string()).collect();
        let mut ts = TextStream::new(&stop);
        let mut texts = Vec::new();
        let mut toks = Vec::new();
        let mut stopped = false;
        for (i, p) in pieces.iter().enumerate() {
            let r = ts.push(i, p);
            stopped |= r.stopped;
            texts.push(r.text);
            toks.push(r.tokens);
        }
        let r = ts.finish();
        texts.push(r.text);
        toks.push(r.tokens);
        (texts, toks, stopped)
    }

    #[test]
    fn plain_ascii_passes_through_token_by_token() {
        let (texts, toks, stopped) = run(&[], &[b"Hel", b"lo", b" world"]);
        assert_eq!(texts, ["Hel", "lo", " world", ""]);
        assert_eq!(toks, [vec![0], vec![1], vec![2], vec![]]);
        assert!(!stopped);
    }

    #[test]
    fn utf8_character_split_across_tokens_is_held_until_complete() {
        // "é" = C3 A9, "漢" = E6 BC A2, "😀" = F0 9F 98 80
        let pieces: &[&[u8]] = &[
            b"a\xC3",
            b"\xA9\xE6",
            b"\xBC",
            b"\xA2\xF0\x9F",
            b"\x98\x80!",
        ];
        let (texts, toks, _) = run(&[], pieces);
        assert_eq!(texts, ["a", "é", "", "漢", "😀!", ""]);
        // A token is reported with the piece that releases its last byte.
        assert_eq!(
            toks,
            [vec![], vec![0], vec![], vec![1, 2], vec![3, 4], vec![]]
        );
        for t in &texts {
            assert!(std::str::from_utf8(t.as_bytes()).is_ok());
        }
    }

    #[test]
    fn incomplete_character_at_the_end_becomes_replacement_char() {
        let (texts, toks, _) = run(&[], &[b"ok\xE6\xBC"]);
        assert_eq!(texts, ["ok", "\u{FFFD}"]);
        assert_eq!(toks, [vec![], vec![0]]);
    }

    #[test]
    fn invalid_byte_is_not_held_forever() {
        let (texts, _, _) = run(&[], &[b"\x80", b"a"]);
        assert_eq!(texts, ["\u{FFFD}", "a", ""]);
    }

    #[test]
    fn stop_string_split_across_tokens_is_never_emitted() {
        let (texts, toks, stopped) = run(&["STOP"], &[b"abc S", b"TO", b"P def"]);
        assert!(stopped);
        assert_eq!(texts, ["abc ", "", "", ""]);
        // Token 0 contributed "abc " (visible); tokens 1 and 2 are part of the stop string.
        assert_eq!(toks, [vec![], vec![], vec![0], vec![]]);
    }

    #[test]
    fn partial_match_that_fails_is_released() {
        let (texts, _, stopped) = run(&["STOP"], &[b"a ST", b"ILL", b" here"]);
        assert!(!stopped);
        assert_eq!(texts, ["a ", "STILL", " here", ""]);
    }

    #[test]
    fn held_partial_match_is_released_at_the_end() {
        let (texts, toks, stopped) = run(&["STOP"], &[b"a ST"]);
        assert!(!stopped);
        assert_eq!(texts, ["a ", "ST"]);
        assert_eq!(toks, [vec![], vec![0]]);
    }

    #[test]
    fn stop_inside_one_token_keeps_text_before_it() {
        let (texts, toks, stopped) = run(&["\n\n"], &[b"line", b"one\n\nline two"]);
        assert!(stopped);
        assert_eq!(texts, ["line", "one", ""]);
        assert_eq!(toks, [vec![0], vec![1], vec![]]);
    }

    #[test]
    fn earliest_of_several_stop_strings_wins() {
        let (texts, _, stopped) = run(&["world", "lo w"], &[b"hello world"]);
        assert!(stopped);
        assert_eq!(texts[0], "hel");
    }

    #[test]
    fn stop_string_at_the_very_start_yields_nothing() {
        let (texts, toks, stopped) = run(&["<|end|>"], &[b"<|", b"end|>", b"more"]);
        assert!(stopped);
        assert_eq!(texts, ["", "", "", ""]);
        assert!(toks.iter().all(|t| t.is_empty()));
    }

    #[test]
    fn multibyte_stop_string_and_utf8_hold_back_together() {
        // Stop on "漢字"; the first character arrives split across two tokens.
        let (texts, _, stopped) = run(&["漢字"], &[b"x\xE6", b"\xBC\xA2", b"\xE5\xAD\x97y"]);
        assert!(stopped);
        assert_eq!(texts.concat(), "x");
    }

    #[test]
    fn incomplete_tail_lengths() {
        assert_eq!(incomplete_utf8_tail(b""), 0);
        assert_eq!(incomplete_utf8_tail(b"abc"), 0);
        assert_eq!(incomplete_utf8_tail(b"a\xC3"), 1);
        assert_eq!(incomplete_utf8_tail(b"\xC3\xA9"), 0);
        assert_eq!(incomplete_utf8_tail(b"\xE6\xBC"), 2);
        assert_eq!(incomplete_utf8_tail(b"\xF0\x9F\x98"), 3);
        assert_eq!(incomplete_utf8_tail(b"\xF0\x9F\x98\x80"), 0);
    }
}
