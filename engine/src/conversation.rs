//! A conversation longer than the context: ollama's answer for a prompt that does not fit.
//!
//! The oldest turns go first, whole (a user message with the answers and tool results that
//! follow it, so the roles still alternate as templates require), the leading system messages
//! and the newest user turn always stay. What a chat then caches is the kept system prompt's
//! tokens, which a context shift during the answer keeps too ([`system_prefix`]).

use std::ops::Range;

/// The prompt for the newest turns that fit, and what was dropped to get it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    pub tokens: Vec<u32>,
    /// Messages dropped from the front (after the system messages).
    pub dropped_messages: usize,
    /// How many tokens shorter the prompt became.
    pub dropped_tokens: usize,
}

/// Why no prompt fits: even the system messages and the newest turn alone are too long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLong {
    /// Tokens of the shortest prompt that could be made (system messages and newest turn).
    pub tokens: usize,
    pub n_ctx: usize,
}

/// Where a conversation may start once its oldest turns are dropped: after the leading system
/// messages, at each user message, oldest first, up to the newest one. Dropping
/// `messages[n_system..starts[k]]` keeps whole turns. `roles` are the messages' roles.
pub fn turn_starts<'a>(roles: impl IntoIterator<Item = &'a str>) -> (usize, Vec<usize>) {
    let roles: Vec<&str> = roles.into_iter().collect();
    let n_system = roles.iter().take_while(|&&r| r == "system").count();
    let mut starts = vec![n_system];
    starts.extend((n_system + 1..roles.len()).filter(|&i| roles[i] == "user"));
    (n_system, starts)
}

/// The prompt of `messages` with as few of the oldest turns dropped as it takes for it to
/// leave a position free in `n_ctx`. `prompt(range)` renders and tokenizes the system
/// messages followed by `messages[range]`. Prompts shrink as turns go, so the cut is found by
/// bisection: a 40-turn chat costs about six renders, not forty.
pub fn fit<E>(
    roles: &[&str],
    n_ctx: usize,
    mut prompt: impl FnMut(Range<usize>) -> Result<Vec<u32>, E>,
) -> Result<Result<Fitted, TooLong>, E> {
    let (n_system, starts) = turn_starts(roles.iter().copied());
    let n = roles.len();
    let whole = prompt(n_system..n)?;
    if whole.len() < n_ctx {
        return Ok(Ok(Fitted {
            tokens: whole,
            dropped_messages: 0,
            dropped_tokens: 0,
        }));
    }
    // starts[0] keeps everything (too long); find the first start whose prompt fits.
    let last = starts.len() - 1;
    let newest = prompt(starts[last]..n)?;
    if newest.len() >= n_ctx {
        return Ok(Err(TooLong {
            tokens: newest.len(),
            n_ctx,
        }));
    }
    let (mut lo, mut hi, mut best) = (0, last, newest);
    // Invariant: starts[lo] does not fit, starts[hi] does (its prompt is `best`).
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        let tokens = prompt(starts[mid]..n)?;
        if tokens.len() < n_ctx {
            hi = mid;
            best = tokens;
        } else {
            lo = mid;
        }
    }
    Ok(Ok(Fitted {
        dropped_messages: starts[hi] - n_system,
        dropped_tokens: whole.len() - best.len(),
        tokens: best,
    }))
}

/// Tokens of `prompt` that the system messages alone render to (the longest prefix the two
/// share): what a context shift keeps so that the model never loses its instructions.
pub fn system_prefix(system_only: &[u32], prompt: &[u32]) -> usize {
    system_only
        .iter()
        .zip(prompt)
        .take_while(|(a, b)| a == b)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each message renders to 10 tokens.
    fn render(n_system: usize) -> impl FnMut(Range<usize>) -> Result<Vec<u32>, ()> {
        move |r: Range<usize>| Ok(vec![0; 10 * (n_system + r.len())])
    }

    #[test]
    fn whole_turns_go_oldest_first_and_the_system_prompt_stays() {
        let roles = ["system", "user", "assistant", "user", "assistant", "user"];
        assert_eq!(turn_starts(roles).1, vec![1, 3, 5]);
        // 60 tokens: fits 61 as it is.
        let fitted = fit(&roles, 61, render(1)).unwrap().unwrap();
        assert_eq!(fitted.dropped_messages, 0);
        // In 50 one turn goes (system + 3 messages = 40 tokens).
        let fitted = fit(&roles, 50, render(1)).unwrap().unwrap();
        assert_eq!((fitted.dropped_messages, fitted.dropped_tokens), (2, 20));
        assert_eq!(fitted.tokens.len(), 40);
        // In 21 only the system prompt and the newest turn are left.
        let fitted = fit(&roles, 21, render(1)).unwrap().unwrap();
        assert_eq!(fitted.dropped_messages, 4);
        // 20 cannot hold even those.
        assert_eq!(
            fit(&roles, 20, render(1)).unwrap(),
            Err(TooLong {
                tokens: 20,
                n_ctx: 20
            })
        );
    }

    #[test]
    fn a_tool_result_goes_with_its_turn() {
        let roles = [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
            "user",
        ];
        let (n_system, starts) = turn_starts(roles);
        assert_eq!((n_system, starts), (0, vec![0, 4, 6]));
        let fitted = fit(&roles, 35, render(0)).unwrap().unwrap();
        assert_eq!(fitted.dropped_messages, 4);
    }

    #[test]
    fn the_cut_is_the_first_that_fits_for_every_context() {
        let roles: Vec<&str> = (0..42)
            .map(|i| match i {
                0 => "system",
                i if i % 2 == 1 => "user",
                _ => "assistant",
            })
            .collect();
        for n_ctx in 21..430 {
            let fitted = fit(&roles, n_ctx, render(1)).unwrap().unwrap();
            let kept = fitted.tokens.len();
            assert!(kept < n_ctx);
            // One more turn would not have fitted.
            if fitted.dropped_messages > 0 {
                assert!(kept + 20 >= n_ctx, "n_ctx {n_ctx}: kept {kept}");
            }
        }
    }
}
