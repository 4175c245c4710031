//! A deterministic stand-in for the engine, for tests of the server (`smolrun serve --fake-backend`).
//!
//! Its "tokens" are up to 3 bytes of text, packed into the id, so a multi-byte character is
//! regularly split across two tokens, as with a real byte-level BPE vocabulary. It answers the
//! last user message (or the whole prompt when there is no chat template in it) with
//! `echo: <that text>`, then ends. Markers in that text change its behaviour:
//! `[loop]` repeats the answer until told to stop or the context is full; `[fail]` makes
//! `generate` fail after the first token; `[tool]` answers with a Hermes-format call of `echo`
//! with the text as its argument (as Qwen2.5 writes one), for the tool-call plumbing. Its embedding of a text is the histogram of the
//! text's bytes over 16 buckets (byte mod 16), at unit length: texts that share letters point
//! the same way.

use super::backend::{
    Alternative, Backend, ChatMessage, Constraint, Control, Finish, Generated, ModelDetails,
    SamplingParams, TokenEvent,
};
use std::time::Duration;

const BYTES_PER_TOKEN: usize = 3;
/// Width of the fake's embeddings.
pub const EMBEDDING_WIDTH: usize = 16;

pub struct FakeBackend {
    n_ctx: usize,
    /// Time "spent" on each generated token, so that tests can catch a generation in flight.
    token_delay: Duration,
}

impl FakeBackend {
    pub fn new(n_ctx: usize, token_delay: Duration) -> Self {
        FakeBackend { n_ctx, token_delay }
    }
}

fn token_id(bytes: &[u8]) -> u32 {
    let mut id = (bytes.len() as u32) << 24;
    for (i, &b) in bytes.iter().enumerate() {
        id |= (b as u32) << (16 - 8 * i);
    }
    id
}

fn token_bytes(id: u32) -> Vec<u8> {
    let len = ((id >> 24) as usize).min(BYTES_PER_TOKEN);
    (0..len).map(|i| (id >> (16 - 8 * i)) as u8).collect()
}

/// The text the fake answers: the last user turn of a rendered chat, or the whole prompt.
fn subject_of(prompt: &str) -> &str {
    match prompt.rfind("<|user|>\n") {
        Some(at) => {
            let rest = &prompt[at + "<|user|>\n".len()..];
            rest.split("\n<|").next().unwrap_or(rest)
        }
        None => prompt,
    }
}

/// Probabilities cycle through confident and unsure values so the page shows every colour.
fn fake_probability(position: usize) -> f32 {
    [0.95, 0.7, 0.4, 0.12][position % 4]
}

impl Backend for FakeBackend {
    fn model_name(&self) -> &str {
        "fake-echo"
    }

    fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    fn n_threads(&self) -> usize {
        1
    }

    fn render_chat(
        &self,
        messages: &[ChatMessage],
        _tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, String> {
        let mut out = String::new();
        for m in messages {
            out.push_str(&format!("<|{}|>\n{}\n", m.role, m.content));
        }
        if add_generation_prompt {
            out.push_str("<|assistant|>\n");
        }
        Ok(out)
    }

    fn tokenize(&self, text: &str) -> Result<Vec<u32>, String> {
        Ok(text
            .as_bytes()
            .chunks(BYTES_PER_TOKEN)
            .map(token_id)
            .collect())
    }

    fn generate(
        &mut self,
        prompt: &[u32],
        params: &SamplingParams,
        // The fake echoes; it has no vocabulary for a grammar to choose from.
        _constraint: Option<&Constraint>,
        shift_keep: Option<usize>,
        _prefix: usize,
        on_token: &mut dyn FnMut(TokenEvent) -> Control,
    ) -> Result<Generated, String> {
        if prompt.len() >= self.n_ctx {
            return Err(format!(
                "prompt of {} tokens does not fit the context of {}",
                prompt.len(),
                self.n_ctx
            ));
        }
        let prompt_bytes: Vec<u8> = prompt.iter().flat_map(|&id| token_bytes(id)).collect();
        let prompt_text = String::from_utf8_lossy(&prompt_bytes);
        let subject = subject_of(&prompt_text);
        let answer = if subject.contains("[tool]") {
            let call = serde_json::json!({"name": "echo", "arguments": {"text": subject}});
            format!("<tool_call>\n{call}\n</tool_call>")
        } else {
            format!("echo: {subject}")
        };
        let looping = subject.contains("[loop]");
        let failing = subject.contains("[fail]");

        let mut n_generated = 0;
        // Tokens in the context, and those a context shift dropped (as the engine shifts).
        let mut used = prompt.len();
        let mut shifted_out = 0;
        loop {
            for chunk in answer.as_bytes().chunks(BYTES_PER_TOKEN) {
                if used >= self.n_ctx {
                    let Some(keep) = shift_keep else {
                        return Ok(Finish::ContextFull.into());
                    };
                    let keep = keep.min(self.n_ctx - 4);
                    let discard = (used - keep) / 2;
                    used -= discard;
                    shifted_out += discard;
                }
                if failing && n_generated == 1 {
                    return Err("the fake engine failed on purpose ([fail] in the prompt)".into());
                }
                std::thread::sleep(self.token_delay);
                let p = fake_probability(n_generated);
                let id = token_id(chunk);
                let mut alternatives = vec![Alternative {
                    id,
                    bytes: chunk.to_vec(),
                    logprob: p.ln(),
                }];
                // The rest of the probability mass goes to made-up rivals, in decreasing shares.
                let mut rest = 1.0 - p;
                for k in 1..params.n_alternatives.max(1) {
                    rest *= 0.5;
                    alternatives.push(Alternative {
                        id: id ^ k as u32,
                        bytes: format!("alt{k}").into_bytes(),
                        logprob: rest.ln(),
                    });
                }
                alternatives.sort_by(|a, b| b.logprob.total_cmp(&a.logprob));
                alternatives.truncate(params.n_alternatives);
                n_generated += 1;
                used += 1;
                let event = TokenEvent {
                    id,
                    bytes: chunk.to_vec(),
                    logprob: p.ln(),
                    alternatives,
                };
                if on_token(event) == Control::Stop {
                    return Ok(Generated {
                        finish: Finish::Stopped,
                        shifted_out,
                    });
                }
            }
            if !looping {
                return Ok(Generated {
                    finish: Finish::EndOfGeneration,
                    shifted_out,
                });
            }
        }
    }

    fn details(&self) -> ModelDetails {
        ModelDetails {
            size: 1234,
            digest: format!("sha256:{}", "0".repeat(64)),
            modified_unix: 0,
            family: "fake".into(),
            parameter_size: "1K".into(),
            quantization_level: "F32".into(),
            template: "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\n{% endfor %}"
                .into(),
            model_info: [
                ("general.architecture".to_string(), "fake".into()),
                ("fake.context_length".to_string(), self.n_ctx.into()),
            ]
            .into_iter()
            .collect(),
        }
    }

    fn embed(&mut self, tokens: &[u32]) -> Result<Vec<f32>, String> {
        if tokens.is_empty() || tokens.len() > self.n_ctx {
            return Err(format!(
                "cannot embed {} tokens with a context of {}",
                tokens.len(),
                self.n_ctx
            ));
        }
        let mut v = vec![0.0f32; EMBEDDING_WIDTH];
        for b in tokens.iter().flat_map(|&id| token_bytes(id)) {
            v[b as usize % EMBEDDING_WIDTH] += 1.0;
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_ids_round_trip_bytes() {
        for bytes in [&b""[..], b"a", b"ab", b"\xE6\xBC\xA2", b"\xFF\x00\x01"] {
            assert_eq!(token_bytes(token_id(bytes)), bytes);
        }
    }

    #[test]
    fn echoes_the_last_user_message() {
        let mut fake = FakeBackend::new(512, Duration::ZERO);
        let messages = [
            ChatMessage::text("user", "first"),
            ChatMessage::text("assistant", "ok"),
            ChatMessage::text("user", "héllo"),
        ];
        let prompt = fake.render_chat(&messages, None, true).unwrap();
        let tokens = fake.tokenize(&prompt).unwrap();
        let mut out = Vec::new();
        let finish = fake
            .generate(
                &tokens,
                &SamplingParams::default(),
                None,
                None,
                0,
                &mut |t| {
                    out.extend_from_slice(&t.bytes);
                    Control::Continue
                },
            )
            .unwrap();
        assert_eq!(finish, Finish::EndOfGeneration.into());
        assert_eq!(String::from_utf8(out).unwrap(), "echo: héllo");
    }

    #[test]
    fn loop_runs_until_the_context_is_full() {
        let mut fake = FakeBackend::new(40, Duration::ZERO);
        let tokens = fake.tokenize("[loop]").unwrap();
        let mut n = 0;
        let finish = fake
            .generate(
                &tokens,
                &SamplingParams::default(),
                None,
                None,
                0,
                &mut |_| {
                    n += 1;
                    Control::Continue
                },
            )
            .unwrap();
        assert_eq!(finish, Finish::ContextFull.into());
        assert_eq!(n + tokens.len(), 40);
    }
}
