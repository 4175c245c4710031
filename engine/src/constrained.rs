//! A grammar as a token filter for the generation loop (`Engine::generate_with`).
//!
//! The grammar works on bytes (core's `grammar::Matcher`); this turns it into answers about
//! token ids. A token may come next when its bytes may; an end-of-generation token when what
//! was generated is a whole sentence of the grammar; other control tokens never, once the
//! grammar applies. A lazy grammar (tool calls under `tool_choice: auto`) lets everything
//! through until its trigger text appears, then starts at the trigger.
//!
//! Every buffer is sized when the filter is made (once per request): checking, masking and
//! accepting tokens allocate nothing.

use crate::engine::TokenFilter;
use smolrun_core::grammar::{Grammar, Matcher, TokenTrie};
use smolrun_core::tokenizer::Tokenizer;
use std::sync::Arc;

/// Bytes of recent text kept while waiting for a lazy grammar's trigger.
const TRIGGER_WINDOW: usize = 512;

/// The trie of a vocabulary's tokens by their bytes: built once per model (tens of ms on a
/// 150k vocabulary), on the first request that needs it.
pub fn token_trie(tokenizer: &Tokenizer) -> TokenTrie {
    TokenTrie::new(
        (0..tokenizer.n_vocab() as u32)
            .filter(|&id| !tokenizer.is_control(id))
            .map(|id| (id, tokenizer.token_bytes(id))),
    )
}

pub struct GrammarFilter<'t> {
    matcher: Matcher,
    trie: &'t TokenTrie,
    /// Allowed token ids, one bit each (filled by the matcher when a token is refused).
    allowed: Vec<u64>,
    /// The logits with every refused token at -inf.
    masked: Vec<f32>,
    /// A lazy grammar's trigger, and the recent text it is looked for in.
    trigger: Option<Vec<u8>>,
    window: Vec<u8>,
    /// The grammar applies (from the start, or since the trigger appeared).
    active: bool,
    /// Tokens checked, and how many of them the grammar refused (a full mask each).
    pub checked: usize,
    pub refused: usize,
}

impl<'t> GrammarFilter<'t> {
    pub fn new(
        grammar: Arc<Grammar>,
        trigger: Option<&str>,
        trie: &'t TokenTrie,
        n_vocab: usize,
    ) -> Self {
        GrammarFilter {
            matcher: Matcher::new(grammar),
            trie,
            allowed: vec![0; n_vocab.div_ceil(64)],
            masked: vec![0.0; n_vocab],
            trigger: trigger.map(|t| t.as_bytes().to_vec()),
            window: Vec::with_capacity(TRIGGER_WINDOW),
            active: trigger.is_none(),
            checked: 0,
            refused: 0,
        }
    }

    /// Keep the tail of the text, look for the trigger in it, and start the grammar there.
    fn watch_for_trigger(&mut self, bytes: &[u8]) {
        let Some(trigger) = &self.trigger else {
            return;
        };
        let bytes = &bytes[bytes.len().saturating_sub(TRIGGER_WINDOW)..];
        let room = TRIGGER_WINDOW - bytes.len();
        if self.window.len() > room {
            let cut = self.window.len() - room;
            self.window.drain(..cut);
        }
        self.window.extend_from_slice(bytes);
        let Some(at) = self
            .window
            .windows(trigger.len())
            .position(|w| w == &trigger[..])
        else {
            return;
        };
        self.matcher.reset();
        // What follows the trigger in this token must fit the grammar too; if the model wrote
        // something the grammar cannot continue, the answer stays unconstrained (its calls
        // will not parse and are reported as text).
        if self.matcher.advance(&self.window[at..]) {
            self.active = true;
        } else {
            self.trigger = None;
        }
    }
}

impl TokenFilter for GrammarFilter<'_> {
    fn allows(&mut self, tokenizer: &Tokenizer, token: u32) -> bool {
        if !self.active {
            return true;
        }
        self.checked += 1;
        let ok = if tokenizer.is_eog(token) {
            self.matcher.is_complete()
        } else if tokenizer.is_control(token) {
            false
        } else {
            self.matcher.allows(tokenizer.token_bytes(token))
        };
        self.refused += usize::from(!ok);
        ok
    }

    fn masked(&mut self, tokenizer: &Tokenizer, logits: &[f32]) -> &[f32] {
        self.matcher.fill_allowed(self.trie, &mut self.allowed);
        let complete = self.matcher.is_complete();
        for (id, (dst, &src)) in self.masked.iter_mut().zip(logits).enumerate() {
            let allowed = self.allowed[id / 64] & (1 << (id % 64)) != 0;
            *dst = if allowed { src } else { f32::NEG_INFINITY };
        }
        if complete {
            for &id in tokenizer.eog_ids() {
                if let (Some(dst), Some(&src)) =
                    (self.masked.get_mut(id as usize), logits.get(id as usize))
                {
                    *dst = src;
                }
            }
        }
        &self.masked[..logits.len().min(self.masked.len())]
    }

    fn accept(&mut self, tokenizer: &Tokenizer, token: u32) {
        if tokenizer.is_control(token) {
            return;
        }
        let bytes = tokenizer.token_bytes(token);
        if self.active {
            // Only tokens the grammar allows reach here.
            let _ = self.matcher.advance(bytes);
        } else {
            self.watch_for_trigger(bytes);
        }
    }

    fn finished(&self) -> bool {
        self.active && self.matcher.is_finished()
    }
}
