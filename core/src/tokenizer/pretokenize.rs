//! Pre-tokenizers: cut a text into words before BPE, as the regexes named by
//! `tokenizer.ggml.pre` do, each written out by hand as a scan over code points.
//!
//! They reproduce llama.cpp's hand-written versions of these regexes, including where those
//! differ from a real regex engine (for example, a lone space before punctuation at the very end
//! of a text): token ids must match the reference, not the original Python tokenizer.
//!
//! A stage turns a list of pieces (lengths in code points) into a finer list; a pre-tokenizer
//! is a sequence of stages, each applied to every piece the previous one produced.

use super::unicode::{
    flags_of, GROUP_LETTER, GROUP_MARK, GROUP_NUMBER, GROUP_PUNCTUATION, WHITESPACE,
};
use alloc::vec::Vec;

/// A pre-tokenizer and the BPE options that come with its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreTokenizerSetup {
    pub pre: PreTokenizer,
    /// A word that is a token as a whole skips the merges.
    pub ignore_merges: bool,
    /// Add BOS unless `tokenizer.ggml.add_bos_token` says otherwise.
    pub add_bos_default: bool,
}

/// The pre-tokenizers smolrun knows, by the regexes llama.cpp uses for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)` (GPT-2).
    Gpt2,
    /// Llama 3: case-insensitive contractions, `[^\r\n\p{L}\p{N}]?\p{L}+`, `\p{N}{1,3}`,
    /// ` ?[^\s\p{L}\p{N}]+[\r\n]*`, `\s*[\r\n]+`, `\s+(?!\S)`, `\s+`.
    Llama3,
    /// Qwen2: as Llama 3 but one digit per word (`\p{N}`).
    Qwen2,
    /// Qwen3.5: as Qwen2, but combining marks count as letters: `[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+`
    /// and ` ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*` (Qwen2 cuts a mark such as U+0301 off the word
    /// before it).
    Qwen35,
    /// StarCoder and others: `\p{N}` first (every digit alone), then GPT-2.
    Starcoder,
    /// What llama.cpp uses when `tokenizer.ggml.pre` is "default" or missing:
    /// `[\p{P}\$\+<=>\^~\|]+`, then GPT-2, then `\p{N}+`, then `[0-9][0-9][0-9]`.
    Default,
}

impl PreTokenizer {
    /// What llama.cpp sets up for a `tokenizer.ggml.pre` value: the regexes, and for the
    /// Llama 3 family also `ignore_merges` and a BOS by default. `None` for a name smolrun does
    /// not implement.
    pub fn from_name(name: &str) -> Option<PreTokenizerSetup> {
        let setup = |pre, llama3_family| PreTokenizerSetup {
            pre,
            ignore_merges: llama3_family,
            add_bos_default: llama3_family,
        };
        Some(match name {
            "default" | "" => setup(PreTokenizer::Default, false),
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" | "jina-v5-nano" => setup(PreTokenizer::Llama3, true),
            "dbrx" | "smaug-bpe" => setup(PreTokenizer::Llama3, false),
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "stablelm2" | "hunyuan"
            | "solar-open" => setup(PreTokenizer::Qwen2, false),
            "qwen35" => setup(PreTokenizer::Qwen35, false),
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert" | "mpt" | "olmo" | "jais"
            | "trillion" | "granite-docling" => setup(PreTokenizer::Gpt2, false),
            "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone"
            | "minerva-7b" | "mellum2" => setup(PreTokenizer::Starcoder, false),
            _ => return None,
        })
    }

    /// Splits `cps` (with `flags[i] == flags_of(cps[i])`) into words; appends each word's
    /// length in code points to `out`.
    pub(crate) fn split(&self, cps: &[u32], flags: &[u16], out: &mut Vec<usize>) {
        let text = Text { cps, flags };
        let mut pieces = Vec::new();
        pieces.push(cps.len());
        let mut next = Vec::with_capacity(cps.len() / 4 + 1);
        let mut run_stage =
            |pieces: &mut Vec<usize>, stage: &dyn Fn(usize, usize, &mut Vec<usize>)| {
                next.clear();
                let mut start = 0;
                for &len in pieces.iter() {
                    stage(start, start + len, &mut next);
                    start += len;
                }
                core::mem::swap(pieces, &mut next);
            };
        match self {
            PreTokenizer::Gpt2 => run_stage(&mut pieces, &|a, b, o| text.gpt2(a, b, o)),
            PreTokenizer::Llama3 => run_stage(&mut pieces, &|a, b, o| {
                text.llama3(a, b, 3, GROUP_LETTER, o)
            }),
            PreTokenizer::Qwen2 => run_stage(&mut pieces, &|a, b, o| {
                text.llama3(a, b, 1, GROUP_LETTER, o)
            }),
            PreTokenizer::Qwen35 => run_stage(&mut pieces, &|a, b, o| {
                text.llama3(a, b, 1, GROUP_LETTER | GROUP_MARK, o)
            }),
            PreTokenizer::Starcoder => {
                run_stage(&mut pieces, &|a, b, o| text.each_alone(a, b, is_number, o));
                run_stage(&mut pieces, &|a, b, o| text.gpt2(a, b, o));
            }
            PreTokenizer::Default => {
                run_stage(&mut pieces, &|a, b, o| text.runs(a, b, is_default_punct, o));
                run_stage(&mut pieces, &|a, b, o| text.gpt2(a, b, o));
                run_stage(&mut pieces, &|a, b, o| text.runs(a, b, is_number, o));
                run_stage(&mut pieces, &|a, b, o| text.ascii_digit_triples(a, b, o));
            }
        }
        out.extend(pieces.iter().copied().filter(|&l| l > 0));
    }
}

/// `\p{N}`.
fn is_number(_cp: u32, flags: u16) -> bool {
    flags & GROUP_NUMBER != 0
}

/// `[\p{P}\$\+<=>\^~\|]`.
fn is_default_punct(cp: u32, flags: u16) -> bool {
    flags & GROUP_PUNCTUATION != 0 || matches!(cp, 0x24 | 0x2B | 0x3C..=0x3E | 0x5E | 0x7E | 0x7C)
}

/// Marks a position past the end of the piece being scanned: the regexes cannot look across
/// piece boundaries.
const OUT_OF_RANGE: u32 = u32::MAX;

struct Text<'a> {
    cps: &'a [u32],
    flags: &'a [u16],
}

/// Emits pieces: each call ends the current piece at `end` (nothing if it would be empty).
struct Emitter<'o> {
    prev_end: usize,
    out: &'o mut Vec<usize>,
}

impl Emitter<'_> {
    fn add(&mut self, end: usize) {
        if end > self.prev_end {
            self.out.push(end - self.prev_end);
        }
        self.prev_end = end;
    }
}

impl Text<'_> {
    /// Runs of code points that match `pred`, and the text between them, as separate pieces.
    fn runs(&self, ini: usize, end: usize, pred: fn(u32, u16) -> bool, out: &mut Vec<usize>) {
        let mut e = Emitter { prev_end: ini, out };
        let mut pos = ini;
        while pos < end {
            if pred(self.cps[pos], self.flags[pos]) {
                e.add(pos);
                while pos < end && pred(self.cps[pos], self.flags[pos]) {
                    pos += 1;
                }
                e.add(pos);
            } else {
                pos += 1;
            }
        }
        e.add(end);
    }

    /// Every code point matching `pred` alone, and the text between them as pieces.
    fn each_alone(&self, ini: usize, end: usize, pred: fn(u32, u16) -> bool, out: &mut Vec<usize>) {
        let mut e = Emitter { prev_end: ini, out };
        for pos in ini..end {
            if pred(self.cps[pos], self.flags[pos]) {
                e.add(pos);
                e.add(pos + 1);
            }
        }
        e.add(end);
    }

    /// `[0-9][0-9][0-9]`: leftmost groups of three ASCII digits, the rest between them.
    fn ascii_digit_triples(&self, ini: usize, end: usize, out: &mut Vec<usize>) {
        let is_digit = |p: usize| p < end && (0x30..=0x39).contains(&self.cps[p]);
        let mut e = Emitter { prev_end: ini, out };
        let mut pos = ini;
        while pos < end {
            if is_digit(pos) && is_digit(pos + 1) && is_digit(pos + 2) {
                e.add(pos);
                e.add(pos + 3);
                pos += 3;
            } else {
                pos += 1;
            }
        }
        e.add(end);
    }

    /// GPT-2's regex, as llama.cpp scans it.
    fn gpt2(&self, ini: usize, end: usize, out: &mut Vec<usize>) {
        let cpt = |p: usize| {
            if p >= ini && p < end {
                self.cps[p]
            } else {
                OUT_OF_RANGE
            }
        };
        let flags = |p: usize| {
            if p >= ini && p < end {
                self.flags[p]
            } else {
                0
            }
        };
        let mut e = Emitter { prev_end: ini, out };
        let mut pos = ini;
        while pos < end {
            let c = cpt(pos);
            let f = flags(pos);

            // 's|'t|'re|'ve|'m|'ll|'d
            if c == '\'' as u32 && pos + 1 < end {
                let n = cpt(pos + 1);
                if matches!(char_of(n), 's' | 't' | 'm' | 'd') {
                    pos += 2;
                    e.add(pos);
                    continue;
                }
                if pos + 2 < end {
                    let nn = cpt(pos + 2);
                    if matches!(
                        (char_of(n), char_of(nn)),
                        ('r', 'e') | ('v', 'e') | ('l', 'l')
                    ) {
                        pos += 3;
                        e.add(pos);
                        continue;
                    }
                }
            }

            let space = c == ' ' as u32;
            let mut f2 = if space { flags(pos + 1) } else { f };
            // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
            let classes: [&dyn Fn(u16) -> bool; 3] = [
                &|f: u16| f & GROUP_LETTER != 0,
                &|f: u16| f & GROUP_NUMBER != 0,
                &|f: u16| f & (WHITESPACE | GROUP_LETTER | GROUP_NUMBER) == 0 && f != 0,
            ];
            if let Some(class) = classes.iter().find(|class| class(f2)) {
                pos += space as usize;
                while class(f2) {
                    pos += 1;
                    f2 = flags(pos);
                }
                e.add(pos);
                continue;
            }

            let mut n_ws = 0;
            while flags(pos + n_ws) & WHITESPACE != 0 {
                n_ws += 1;
            }
            // '\s+(?!\S)': all but the last white space, which goes with the next word.
            if n_ws > 1 && cpt(pos + n_ws) != OUT_OF_RANGE {
                pos += n_ws - 1;
                e.add(pos);
                continue;
            }
            // '\s+'
            if n_ws > 0 {
                pos += n_ws;
                e.add(pos);
                continue;
            }
            pos += 1;
            e.add(pos);
        }
    }

    /// The Llama 3 regex (`max_digits` 3), Qwen2's (`max_digits` 1) and Qwen3.5's (`max_digits`
    /// 1, `word` also taking marks), as llama.cpp scans them. `word` is the class a word is a run
    /// of: `\p{L}` (`GROUP_LETTER`), or `[\p{L}\p{M}]` for Qwen3.5, whose punctuation class
    /// leaves marks out as well.
    fn llama3(&self, ini: usize, end: usize, max_digits: usize, word: u16, out: &mut Vec<usize>) {
        let cpt = |p: usize| {
            if p >= ini && p < end {
                self.cps[p]
            } else {
                OUT_OF_RANGE
            }
        };
        let flags = |p: usize| {
            if p >= ini && p < end {
                self.flags[p]
            } else {
                0
            }
        };
        let is_cr_lf = |c: u32| c == '\r' as u32 || c == '\n' as u32;
        let mut e = Emitter { prev_end: ini, out };
        let mut pos = ini;
        while pos < end {
            let c = cpt(pos);
            let f = flags(pos);

            // (?i:'s|'t|'re|'ve|'m|'ll|'d)
            if c == '\'' as u32 && pos + 1 < end {
                let n = lowercase(cpt(pos + 1));
                if matches!(char_of(n), 's' | 't' | 'm' | 'd') {
                    pos += 2;
                    e.add(pos);
                    continue;
                }
                if pos + 2 < end {
                    let nn = lowercase(cpt(pos + 2));
                    if matches!(
                        (char_of(n), char_of(nn)),
                        ('r', 'e') | ('v', 'e') | ('l', 'l')
                    ) {
                        pos += 3;
                        e.add(pos);
                        continue;
                    }
                }
            }

            // [^\r\n\p{L}\p{N}]?\p{L}+ (or [\p{L}\p{M}]+)
            if !(is_cr_lf(c) || f & GROUP_NUMBER != 0)
                && (f & word != 0 || flags(pos + 1) & word != 0)
            {
                pos += 1;
                while flags(pos) & word != 0 {
                    pos += 1;
                }
                e.add(pos);
                continue;
            }

            // \p{N}{1,max_digits}
            if f & GROUP_NUMBER != 0 {
                let mut group_start = pos;
                while flags(pos) & GROUP_NUMBER != 0 {
                    pos += 1;
                    if pos - group_start >= max_digits {
                        e.add(pos);
                        group_start = pos;
                    }
                }
                e.add(pos);
                continue;
            }

            // ' ?[^\s\p{L}\p{N}]+[\r\n]*' (or [^\s\p{L}\p{M}\p{N}]). The reference tests that the *current* code point
            // is in range here (not the one after the space); kept as is.
            let space = c == ' ' as u32;
            let mut f2 = if space { flags(pos + 1) } else { f };
            let is_other = |f: u16| f & (WHITESPACE | word | GROUP_NUMBER) == 0;
            if is_other(f2) && f != 0 {
                pos += space as usize;
                while is_other(f2) && f2 != 0 {
                    pos += 1;
                    f2 = flags(pos);
                }
                while is_cr_lf(cpt(pos)) {
                    pos += 1;
                }
                e.add(pos);
                continue;
            }

            let mut n_ws = 0;
            let mut last_cr_lf_end = 0;
            while flags(pos + n_ws) & WHITESPACE != 0 {
                if is_cr_lf(cpt(pos + n_ws)) {
                    last_cr_lf_end = pos + n_ws + 1;
                }
                n_ws += 1;
            }
            // \s*[\r\n]+
            if last_cr_lf_end > 0 {
                pos = last_cr_lf_end;
                e.add(pos);
                continue;
            }
            // \s+(?!\S)
            if n_ws > 1 && cpt(pos + n_ws) != OUT_OF_RANGE {
                pos += n_ws - 1;
                e.add(pos);
                continue;
            }
            // \s+
            if n_ws > 0 {
                pos += n_ws;
                e.add(pos);
                continue;
            }
            pos += 1;
            e.add(pos);
        }
    }
}

/// The code point as a `char` for matching against ASCII letters (anything else maps to NUL).
fn char_of(cp: u32) -> char {
    if cp < 0x80 {
        cp as u8 as char
    } else {
        '\0'
    }
}

/// Lowercase for the contraction rules. Only ASCII letters lowercase to the ASCII letters those
/// rules test (tools/gen-unicode-tables.py checks this against the Unicode data), so ASCII
/// lowercasing gives the same answers as a full table.
fn lowercase(cp: u32) -> u32 {
    if (0x41..=0x5A).contains(&cp) {
        cp + 0x20
    } else {
        cp
    }
}

/// Fills `flags` with the flags of each code point of `cps`.
pub(crate) fn flags_for(cps: &[u32], flags: &mut Vec<u16>) {
    flags.clear();
    flags.extend(cps.iter().map(|&cp| flags_of(cp)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;

    fn words(pre: PreTokenizer, text: &str) -> Vec<String> {
        let cps: Vec<u32> = text.chars().map(|c| c as u32).collect();
        let mut flags = Vec::new();
        flags_for(&cps, &mut flags);
        let mut lens = Vec::new();
        pre.split(&cps, &flags, &mut lens);
        let mut out = Vec::new();
        let mut start = 0;
        for l in lens {
            out.push(
                cps[start..start + l]
                    .iter()
                    .map(|&c| char::from_u32(c).unwrap())
                    .collect(),
            );
            start += l;
        }
        assert_eq!(start, cps.len(), "pieces must cover the text");
        out
    }

    #[test]
    fn qwen2_splits_like_its_regex() {
        assert_eq!(
            words(PreTokenizer::Qwen2, "Hello world's 123  x\n\n  y!!\n"),
            ["Hello", " world", "'s", " ", "1", "2", "3", " ", " x", "\n\n", " ", " y", "!!\n"]
        );
    }

    #[test]
    fn qwen35_keeps_combining_marks_in_words() {
        // U+0301 (combining acute, category Mn): Qwen2 cuts it off the word before it (it opens
        // the next word as its optional prefix, or joins the punctuation after it); Qwen3.5
        // keeps it in the word, and a space before a mark opens a word.
        let text = "re\u{301}sume\u{301}! \u{301}a 12";
        assert_eq!(
            words(PreTokenizer::Qwen2, text),
            [
                "re",
                "\u{301}sume",
                "\u{301}!",
                " \u{301}",
                "a",
                " ",
                "1",
                "2"
            ]
        );
        assert_eq!(
            words(PreTokenizer::Qwen35, text),
            ["re\u{301}sume\u{301}", "!", " \u{301}a", " ", "1", "2"]
        );
    }

    #[test]
    fn llama3_groups_three_digits_and_lowercases_contractions() {
        assert_eq!(
            words(PreTokenizer::Llama3, "I'M 1234567"),
            ["I", "'M", " ", "123", "456", "7"]
        );
    }

    #[test]
    fn gpt2_keeps_a_space_with_the_next_word() {
        assert_eq!(
            words(PreTokenizer::Gpt2, "a   b 12 !?"),
            ["a", "  ", " b", " 12", " !?"]
        );
    }

    #[test]
    fn starcoder_isolates_every_digit() {
        assert_eq!(
            words(PreTokenizer::Starcoder, "x12 3"),
            ["x", "1", "2", " ", "3"]
        );
    }

    #[test]
    fn names_map_to_the_reference_setups() {
        let llama3 = PreTokenizer::from_name("llama-bpe").unwrap();
        assert_eq!(llama3.pre, PreTokenizer::Llama3);
        assert!(llama3.ignore_merges && llama3.add_bos_default);
        let qwen2 = PreTokenizer::from_name("qwen2").unwrap();
        assert_eq!(qwen2.pre, PreTokenizer::Qwen2);
        assert!(!qwen2.ignore_merges && !qwen2.add_bos_default);
        let qwen35 = PreTokenizer::from_name("qwen35").unwrap();
        assert_eq!(qwen35.pre, PreTokenizer::Qwen35);
        assert!(!qwen35.ignore_merges && !qwen35.add_bos_default);
        assert_eq!(
            PreTokenizer::from_name("gpt-2").unwrap().pre,
            PreTokenizer::Gpt2
        );
        assert_eq!(
            PreTokenizer::from_name("default").unwrap().pre,
            PreTokenizer::Default
        );
        assert!(PreTokenizer::from_name("tekken").is_none());
    }

    #[test]
    fn default_splits_punctuation_then_digit_triples() {
        assert_eq!(
            words(PreTokenizer::Default, "x=12345+y"),
            ["x", "=", "123", "45", "+", "y"]
        );
    }
}
