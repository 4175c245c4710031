//! A fitted file's run profile: what `smolrun fit` decided for its device, kept in the file's
//! metadata (`smolrun.profile.*`), so that run, chat, serve, bench and plan take it as their
//! defaults. Anything the caller sets wins; a profile the device cannot honour is planned
//! again without it (see `file::place`).

use crate::options::{EngineOptions, MoePool};
use smolrun_core::gguf::Gguf;

/// The device the file was fitted for (its preset name or profile file), for messages.
pub const DEVICE_KEY: &str = "smolrun.profile.device";
/// Experts per layer the pools hold.
pub const MOE_POOL_KEY: &str = "smolrun.profile.moe_pool";
/// Context length, tokens.
pub const CTX_KEY: &str = "smolrun.profile.ctx";
/// Threads the device runs with (informational: the CLI's default thread count is the
/// device's fast cores already).
pub const THREADS_KEY: &str = "smolrun.profile.threads";

/// What a file's run profile says; every field optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunProfile {
    pub device: Option<String>,
    pub moe_pool: Option<usize>,
    pub ctx: Option<usize>,
    pub threads: Option<usize>,
}

impl RunProfile {
    /// The profile in `gguf`'s metadata (empty for a file `fit` did not write). A value of
    /// the wrong type or zero is ignored: the profile only sets defaults.
    pub fn of(gguf: &Gguf) -> RunProfile {
        let count = |key: &str| {
            gguf.get(key)
                .and_then(|v| v.as_u64())
                .filter(|&n| n > 0)
                .and_then(|n| usize::try_from(n).ok())
        };
        RunProfile {
            device: gguf
                .get(DEVICE_KEY)
                .and_then(|v| v.as_str())
                .map(String::from),
            moe_pool: count(MOE_POOL_KEY),
            ctx: count(CTX_KEY),
            threads: count(THREADS_KEY),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.moe_pool.is_none() && self.ctx.is_none()
    }

    /// `options` with what they leave unset taken from the profile.
    pub fn apply(&self, options: &EngineOptions) -> EngineOptions {
        let mut with = options.clone();
        if with.pager.pool.is_none() {
            with.pager.pool = self.moe_pool.map(MoePool::Slots);
        }
        if with.n_ctx.is_none() {
            with.n_ctx = self.ctx;
        }
        with
    }

    /// "fitted for tv-box: 34 experts per layer, context 4096".
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(n) = self.moe_pool {
            parts.push(format!("{n} experts per layer"));
        }
        if let Some(n) = self.ctx {
            parts.push(format!("context {n}"));
        }
        format!(
            "fitted for {}: {}",
            self.device.as_deref().unwrap_or("a device"),
            parts.join(", ")
        )
    }
}
