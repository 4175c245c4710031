//! A conversation's cache saved to a file and read back: llama-server's slot save and restore,
//! and the prompt cache on flash (a long system prompt read back instead of run again).
//!
//! The file holds the cached tokens and the state's byte pieces (`State::pieces`: each
//! attention layer's key and value rows for those tokens, each recurrent layer's state), behind
//! a header that names the model by a hash of its GGUF header, so that a file from another
//! model, another cache type or a damaged one is refused before the cache is touched:
//!
//! ```text
//! "SMOLSTAT"  u32 version  u64 model key  u32 n_tokens  u32 n_pieces  u64 piece lengths[n_pieces]
//! u32 tokens[n_tokens]  piece bytes...  u64 FNV-1a of everything before
//! ```
//!
//! Everything little-endian. Written to a temporary file and renamed, so a full disk leaves
//! the old file (if any) and the cache as they were.

use crate::engine::Engine;
use crate::error::EngineError;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

const MAGIC: &[u8; 8] = b"SMOLSTAT";
const VERSION: u32 = 1;
use crate::engine::{Fnv, FNV_OFFSET};
/// A reader that hashes what it reads.
struct Hashed {
    r: BufReader<std::fs::File>,
    h: Fnv,
}

impl Hashed {
    fn take(&mut self, buf: &mut [u8]) -> std::io::Result<()> {
        self.r.read_exact(buf)?;
        self.h.feed(buf);
        Ok(())
    }
}

/// What a save wrote or a restore read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavedState {
    pub tokens: usize,
    pub bytes: u64,
}

impl Engine {
    /// The model's identity in saved files: a hash of its GGUF header (metadata and tensor
    /// table). The state's layout (cache type, recurrent state) is checked apart, by the size
    /// of each part.
    pub fn state_key(&self) -> u64 {
        let mut h = Fnv(FNV_OFFSET);
        h.feed(self.header_bytes());
        h.0
    }

    /// Saves the cache's first `n` tokens (all of them when `None`) to `path`. A recurrent
    /// state can only be saved whole; with MTP drafting nothing can be.
    pub fn save_state(&self, path: &Path, n: Option<usize>) -> Result<SavedState, EngineError> {
        let n = n.unwrap_or(self.n_cached()).min(self.n_cached());
        let key = self.state_key();
        let pieces = self.state_ref().pieces(n).ok_or_else(|| {
            EngineError::option(
                "slot save",
                format!(
                    "this state cannot be saved at {n} of its {} tokens: a recurrent model's \
                     state is saved whole, and MTP drafting keeps a cache of its own",
                    self.n_cached()
                ),
            )
        })?;
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        let written = (|| -> std::io::Result<u64> {
            let mut w = BufWriter::new(std::fs::File::create(&tmp)?);
            let mut h = Fnv(FNV_OFFSET);
            let mut put = |w: &mut BufWriter<std::fs::File>, bytes: &[u8]| {
                h.feed(bytes);
                w.write_all(bytes)
            };
            put(&mut w, MAGIC)?;
            put(&mut w, &VERSION.to_le_bytes())?;
            put(&mut w, &key.to_le_bytes())?;
            put(&mut w, &(n as u32).to_le_bytes())?;
            put(&mut w, &(pieces.len() as u32).to_le_bytes())?;
            for p in &pieces {
                put(&mut w, &(p.len() as u64).to_le_bytes())?;
            }
            for t in &self.cached_tokens()[..n] {
                put(&mut w, &t.to_le_bytes())?;
            }
            for p in &pieces {
                put(&mut w, p)?;
            }
            let sum = h.0;
            w.write_all(&sum.to_le_bytes())?;
            let file = w.into_inner().map_err(|e| e.into_error())?;
            file.sync_all()?;
            Ok(file.metadata()?.len())
        })();
        let bytes = written
            .and_then(|len| std::fs::rename(&tmp, path).map(|_| len))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                EngineError::system(format!(
                    "cannot save the cache to {}: {e} (nothing was changed)",
                    path.display()
                ))
            })?;
        Ok(SavedState { tokens: n, bytes })
    }

    /// Reads a cache saved by [`Engine::save_state`] back: the cached tokens are then the
    /// file's, and a prompt that starts with them runs only what follows. A file of another
    /// model or layout, or a truncated one, is refused before the cache is touched; one whose
    /// bytes were damaged is found at the end, and the cache is then forgotten.
    pub fn restore_state(&mut self, path: &Path) -> Result<SavedState, EngineError> {
        let bad =
            |message: String| EngineError::bad_file(path, format!("{}: {message}", path.display()));
        let io = |e: std::io::Error| bad(format!("cannot read it: {e}"));
        let file = std::fs::File::open(path).map_err(io)?;
        let file_len = file.metadata().map_err(io)?.len();
        let mut r = Hashed {
            r: BufReader::new(file),
            h: Fnv(FNV_OFFSET),
        };
        let truncated = |e: std::io::Error| bad(format!("truncated ({e})"));
        let take = |r: &mut Hashed, buf: &mut [u8]| r.take(buf).map_err(truncated);
        let mut head = [0u8; 28];
        take(&mut r, &mut head)?;
        let u32_at = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().unwrap_or_default());
        if &head[..8] != MAGIC || u32_at(8) != VERSION {
            return Err(bad(
                "not a saved smolrun cache (or of another version)".into()
            ));
        }
        let key = u64::from_le_bytes(head[12..20].try_into().unwrap_or_default());
        let (n, n_pieces) = (u32_at(20) as usize, u32_at(24) as usize);
        if n > self.n_ctx() {
            return Err(bad(format!(
                "it holds {n} tokens, more than this context of {} (-c)",
                self.n_ctx()
            )));
        }
        // The layout this state has for n tokens; the file must have the same.
        let expected: Vec<u64> = self
            .state_mut_ref()
            .pieces_mut(n)
            .map(|p| p.iter().map(|p| p.len() as u64).collect())
            .ok_or_else(|| bad("this state cannot be restored (MTP drafting)".into()))?;
        if n_pieces != expected.len() {
            return Err(bad(format!(
                "it has {n_pieces} parts, this model's state {}: it was saved from another model",
                expected.len()
            )));
        }
        let mut lens = vec![0u8; 8 * n_pieces];
        take(&mut r, &mut lens)?;
        let lens: Vec<u64> = lens
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        if key != self.state_key() || lens != expected {
            return Err(bad(
                "it was saved from another model, or with another cache type or context layout \
                 (its key or part sizes differ); save it again with this model"
                    .into(),
            ));
        }
        let total = 28 + 8 * n_pieces as u64 + 4 * n as u64 + lens.iter().sum::<u64>() + 8;
        if file_len != total {
            return Err(bad(format!(
                "it is {file_len} bytes, its header says {total}: truncated or damaged"
            )));
        }
        let mut tokens = vec![0u8; 4 * n];
        take(&mut r, &mut tokens)?;
        let tokens: Vec<u32> = tokens
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        if let Some(t) = tokens.iter().find(|&&t| t as usize >= self.n_vocab()) {
            return Err(bad(format!(
                "token {t} is outside the vocabulary of {}",
                self.n_vocab()
            )));
        }
        // From here the cache is being overwritten: any failure forgets it.
        let result = (|| {
            let mut pieces = self
                .state_mut_ref()
                .pieces_mut(n)
                .ok_or_else(|| bad("this state cannot be restored".into()))?;
            for p in pieces.iter_mut() {
                take(&mut r, p)?;
            }
            let mut sum = [0u8; 8];
            r.r.read_exact(&mut sum).map_err(io)?;
            if u64::from_le_bytes(sum) != r.h.0 {
                return Err(bad(
                    "its checksum does not match: the file is damaged".into()
                ));
            }
            Ok(())
        })();
        match result {
            Ok(()) => {
                self.set_cached_tokens(&tokens);
                Ok(SavedState {
                    tokens: n,
                    bytes: file_len,
                })
            }
            Err(e) => {
                self.reset();
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::tests::{gemma_path, open_test};
    use std::path::PathBuf;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("smolrun-saved-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    const TEXT: &str = "You are a helpful assistant who answers in one short sentence. The \
                        user asks about the history of lighthouses on the northern coast.";

    /// A saved cache read back gives the next token's logits bit for bit, whole or as a
    /// prefix that a longer prompt then extends (only the rest runs); on Gemma 3 (attention)
    /// and synthetic-qwen35 (recurrent: saved whole).
    #[test]
    fn a_restored_cache_gives_the_same_logits() {
        for model in ["gemma3-270m", "synthetic-qwen35"] {
            let path = smolrun_tests::model_path(model);
            let mut engine = open_test(&path, 128, 2);
            let tokens = engine.tokenize(TEXT, true, false);
            let (head, rest) = tokens.split_at(tokens.len() / 2);
            let file = scratch(&format!("{model}.state"));

            engine.prefill(head).unwrap();
            let saved = engine.save_state(&file, None).unwrap();
            assert_eq!(saved.tokens, head.len());
            engine.prefill(&tokens).unwrap();
            let whole = engine.logits().to_vec();

            engine.reset();
            let read = engine.restore_state(&file).unwrap();
            assert_eq!((read.tokens, read.bytes), (saved.tokens, saved.bytes));
            assert_eq!(engine.cached_tokens(), head);
            // Only what follows the restored tokens runs.
            assert_eq!(engine.prefill(&tokens).unwrap(), rest.len());
            assert_eq!(engine.logits(), &whole[..], "{model}");
            std::fs::remove_file(&file).unwrap();
        }
    }

    /// The prompt cache: the first conversation with a prefix runs it and saves it, the next
    /// reads it back (bit for bit the same logits after the rest of the prompt), a prefix
    /// already in the engine's cache needs nothing, and the folder keeps to its budget by
    /// dropping the least recently used file.
    #[test]
    fn the_prompt_cache_reads_a_prefix_back_and_keeps_to_its_budget() {
        let dir = scratch("prompt-cache");
        let _ = std::fs::remove_dir_all(&dir);
        let mut cache = super::PromptCache {
            dir: dir.clone(),
            max_bytes: u64::MAX,
            min_tokens: 8,
        };
        let mut engine = open_test(&gemma_path(), 128, 2);
        let tokens = engine.tokenize(TEXT, true, false);
        let prefix = tokens.len() / 2;
        use super::PrefixCache::*;
        assert_eq!(
            cache.prepare(&mut engine, &tokens, prefix).unwrap(),
            Saved { tokens: prefix }
        );
        assert_eq!(
            cache.prepare(&mut engine, &tokens, prefix).unwrap(),
            NotNeeded
        );
        engine.prefill(&tokens).unwrap();
        let logits = engine.logits().to_vec();
        engine.reset();
        assert_eq!(
            cache.prepare(&mut engine, &tokens, prefix).unwrap(),
            Restored { tokens: prefix }
        );
        assert_eq!(engine.prefill(&tokens).unwrap(), tokens.len() - prefix);
        assert_eq!(engine.logits(), &logits[..]);
        assert_eq!(cache.prepare(&mut engine, &tokens, 4).unwrap(), NotNeeded);

        // Room for one file: a second prefix pushes the first out.
        let one = std::fs::read_dir(&dir)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .metadata()
            .unwrap()
            .len();
        cache.max_bytes = one + one / 2;
        engine.reset();
        let other = engine.tokenize(
            "A different system prompt, long enough to be saved.",
            true,
            false,
        );
        let saved = cache.prepare(&mut engine, &other, other.len() - 1).unwrap();
        assert!(matches!(saved, Saved { .. }), "{saved:?}");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        engine.reset();
        assert!(matches!(
            cache.prepare(&mut engine, &tokens, prefix).unwrap(),
            Saved { .. }
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file of another model, a truncated or damaged one, and a save that cannot be written
    /// are clear errors; the first two leave the cache as it was, a damaged one (found at the
    /// end) forgets it; a failed save leaves no temporary file.
    #[test]
    fn bad_saved_files_are_refused() {
        let mut engine = open_test(&gemma_path(), 128, 1);
        let tokens = engine.tokenize(TEXT, true, false);
        engine.prefill(&tokens).unwrap();
        let file = scratch("gemma.state");
        engine.save_state(&file, None).unwrap();
        let bytes = std::fs::read(&file).unwrap();

        let mut other = open_test(&smolrun_tests::model_path("synthetic-qwen3"), 128, 1);
        let other_tokens = other.tokenize("The cat sat on the mat.", false, false);
        other.prefill(&other_tokens).unwrap();
        let e = other.restore_state(&file).unwrap_err().to_string();
        assert!(e.contains("another model"), "{e}");
        assert_eq!(other.cached_tokens(), &other_tokens[..]);

        let truncated = scratch("truncated.state");
        std::fs::write(&truncated, &bytes[..bytes.len() - 100]).unwrap();
        let e = engine.restore_state(&truncated).unwrap_err().to_string();
        assert!(e.contains("truncated"), "{e}");
        assert_eq!(engine.cached_tokens(), &tokens[..]);

        let mut damaged = bytes.clone();
        let at = damaged.len() - 1000;
        damaged[at] ^= 0x40;
        std::fs::write(&truncated, &damaged).unwrap();
        let e = engine.restore_state(&truncated).unwrap_err().to_string();
        assert!(e.contains("checksum"), "{e}");
        assert_eq!(engine.n_cached(), 0);

        std::fs::write(&truncated, b"not a cache at all").unwrap();
        assert!(engine.restore_state(&truncated).is_err());

        engine.prefill(&tokens).unwrap();
        let nowhere = scratch("no-such-folder").join("x.state");
        let e = engine.save_state(&nowhere, None).unwrap_err().to_string();
        assert!(e.contains("cannot save"), "{e}");
        assert!(!nowhere.parent().unwrap().exists());
        for f in [file, truncated] {
            std::fs::remove_file(f).unwrap();
        }
    }
}

/// The prompt cache on flash: the state after a long prompt prefix (a chat's system prompt)
/// saved under a name made of the model's key and the prefix's tokens, so that the next
/// conversation with the same prefix, in this process or the next, reads it back instead of
/// running it again. Bounded in bytes; the least recently used files go first.
#[derive(Debug, Clone)]
pub struct PromptCache {
    pub dir: std::path::PathBuf,
    pub max_bytes: u64,
    /// Shorter prefixes are cheaper to run than to read back.
    pub min_tokens: usize,
}

/// What the prompt cache did for one prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefixCache {
    /// The prefix was in the engine's cache already, or too short to be worth a file.
    NotNeeded,
    /// Read back from a file.
    Restored { tokens: usize },
    /// Run, then saved to a file.
    Saved { tokens: usize },
}

impl PromptCache {
    fn file_for(&self, key: u64, prefix: &[u32]) -> std::path::PathBuf {
        let mut h = Fnv(key);
        for t in prefix {
            h.feed(&t.to_le_bytes());
        }
        self.dir
            .join(format!("{:016x}-{}.state", h.0, prefix.len()))
    }

    /// Makes the engine's cache hold `prompt[..prefix]` the cheap way: already there, read
    /// from a file, or run and then saved (a damaged or foreign file is run again and
    /// replaced). What follows the prefix is the caller's to run.
    pub fn prepare(
        &self,
        engine: &mut Engine,
        prompt: &[u32],
        prefix: usize,
    ) -> Result<PrefixCache, EngineError> {
        let prefix = prefix.min(prompt.len().saturating_sub(1));
        let cached = engine
            .cached_tokens()
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        if prefix < self.min_tokens || cached >= prefix {
            return Ok(PrefixCache::NotNeeded);
        }
        let file = self.file_for(engine.state_key(), &prompt[..prefix]);
        if file.is_file() {
            if let Ok(read) = engine.restore_state(&file) {
                if engine.cached_tokens() == &prompt[..prefix] {
                    // Used: the last to be evicted.
                    let _ = std::fs::File::options()
                        .append(true)
                        .open(&file)
                        .and_then(|f| f.set_modified(std::time::SystemTime::now()));
                    return Ok(PrefixCache::Restored {
                        tokens: read.tokens,
                    });
                }
            }
            engine.reset();
        }
        engine.prefill(&prompt[..prefix])?;
        std::fs::create_dir_all(&self.dir).map_err(|e| {
            EngineError::system(format!("--prompt-cache {}: {e}", self.dir.display()))
        })?;
        engine.save_state(&file, Some(prefix))?;
        self.evict();
        Ok(PrefixCache::Saved { tokens: prefix })
    }

    /// Removes the least recently used files until the folder holds at most `max_bytes`.
    fn evict(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut files: Vec<(std::time::SystemTime, u64, std::path::PathBuf)> = entries
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "state"))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect();
        files.sort();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        for (_, len, path) in files {
            if total <= self.max_bytes {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
    }
}
