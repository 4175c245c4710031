//! Feeds arbitrary bytes to `Gguf::parse` and, when it succeeds, touches every value and
//! tensor (see `smolrun_tests::exercise_gguf`). Any panic, out-of-bounds read or runaway
//! allocation is a bug in the reader.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    std::hint::black_box(smolrun_tests::exercise_gguf(bytes));
});
