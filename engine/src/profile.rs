//! A fitted file's run profile: what `smolrun fit` decided for its device, kept in the file's
//! metadata (`smolrun.profile.*`), so that run, chat, serve, bench and plan take it as their
//! defaults. Anything the caller sets wins; a profile the device cannot honour is planned
//! again without it (see `file::place`).

use crate::options::{EngineOptions, KvCacheType, MoePool};
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
/// The KV cache's type, keys and values: "q8_0" or "f16" (`--cache-type-k/-v`); fit writes
/// q8_0 where memory buys speed (experts paged, weights streamed).
pub const CACHE_TYPE_KEY: &str = "smolrun.profile.cache_type";

/// What a file's run profile says; every field optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunProfile {
    pub device: Option<String>,
    pub moe_pool: Option<usize>,
    pub ctx: Option<usize>,
    pub threads: Option<usize>,
    pub cache_type: Option<KvCacheType>,
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
            cache_type: gguf
                .get(CACHE_TYPE_KEY)
                .and_then(|v| v.as_str())
                .and_then(KvCacheType::parse),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.moe_pool.is_none() && self.ctx.is_none() && self.cache_type.is_none()
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
        // Only when neither type is set: `-ctk f16` alone keeps the f16 cache it says.
        if with.cache_type_k.is_none() && with.cache_type_v.is_none() {
            with.cache_type_k = self.cache_type;
            with.cache_type_v = self.cache_type;
        }
        with
    }

    /// "fitted for tv-box: 34 experts per layer, context 4096, KV cache q8_0".
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(n) = self.moe_pool {
            parts.push(format!("{n} experts per layer"));
        }
        if let Some(n) = self.ctx {
            parts.push(format!("context {n}"));
        }
        if let Some(t) = self.cache_type {
            parts.push(format!("KV cache {}", t.name()));
        }
        format!(
            "fitted for {}: {}",
            self.device.as_deref().unwrap_or("a device"),
            parts.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smolrun_core::gguf::{GgufWriter, MetaValue};

    fn profile_of(entries: &[(&str, MetaValue)]) -> RunProfile {
        let mut w = GgufWriter::new();
        for (key, value) in entries {
            w.add(key, value.clone()).unwrap();
        }
        let bytes = w.header();
        let g = Gguf::parse_header(&bytes, bytes.len() as u64).unwrap();
        RunProfile::of(&g)
    }

    /// The cache type reads back from its name; a wrong name or type is ignored; it is applied
    /// only when the caller set neither type, and `describe` says it.
    #[test]
    fn profile_cache_type_reads_back_and_applies_when_unset() {
        let p = profile_of(&[
            (CTX_KEY, MetaValue::from(1024u32)),
            (CACHE_TYPE_KEY, MetaValue::from("q8_0")),
        ]);
        assert_eq!(p.cache_type, Some(KvCacheType::Q8_0));
        assert!(p.describe().contains("KV cache q8_0"), "{}", p.describe());
        for bad in [
            MetaValue::from("q4_1"),
            MetaValue::from(""),
            MetaValue::from(8u32),
        ] {
            let p = profile_of(&[(CACHE_TYPE_KEY, bad)]);
            assert_eq!(p.cache_type, None);
            assert!(p.is_empty());
        }
        let p = profile_of(&[(CACHE_TYPE_KEY, MetaValue::from("q8_0"))]);
        assert!(!p.is_empty());
        let unset = EngineOptions::default();
        assert_eq!(p.apply(&unset).kv_type().unwrap(), KvCacheType::Q8_0);
        let f16 = unset.with_kv_type(KvCacheType::F16);
        assert_eq!(p.apply(&f16).kv_type().unwrap(), KvCacheType::F16);
        // One type given: the profile stays out (f16 beside an unset f16).
        let k_only = EngineOptions {
            cache_type_k: Some(KvCacheType::F16),
            ..EngineOptions::default()
        };
        assert_eq!(p.apply(&k_only).kv_type().unwrap(), KvCacheType::F16);
    }
}
