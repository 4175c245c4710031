//! Replays the committed fuzz corpus (fuzz/corpus/gguf_parse) and the seed files through the
//! same code the fuzz target runs, so CI checks every input the fuzzer ever kept, on stable and
//! without fuzzing.

use std::path::Path;

fn replay_dir(dir: &Path) -> usize {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    let mut n = 0;
    for entry in entries {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        // A panic names the file, so a failure can be replayed with the fuzz target.
        let result = std::panic::catch_unwind(|| smolrun_tests::exercise_gguf(&bytes));
        assert!(result.is_ok(), "{} makes the reader panic", path.display());
        n += 1;
    }
    n
}

#[test]
fn committed_fuzz_corpus_parses_without_panic() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let corpus = replay_dir(&fuzz.join("corpus/gguf_parse"));
    let seeds = replay_dir(&fuzz.join("seeds"));
    assert!(
        corpus > 100,
        "only {corpus} corpus files; was the corpus committed?"
    );
    assert!(seeds >= 4, "only {seeds} seed files");
}

#[test]
fn seed_files_are_valid_gguf() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds");
    for entry in std::fs::read_dir(&seeds).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        if let Err(e) = smolrun_core::gguf::Gguf::parse(&bytes) {
            panic!("seed {} does not parse: {e}", path.display());
        }
    }
}
