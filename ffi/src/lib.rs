//! smolrun's C ABI: what a C program, a Swift or Kotlin app or a router daemon links to run a
//! model. The header is `include/smolrun.h` (written by hand; `tests/header.rs` checks it
//! against what this library exports); `examples/c/main.c` at the repository's root uses it,
//! and `tools/build-c-example.sh` builds that program for the host or a device.
//!
//! Every exported function runs its body inside [`status::boundary`]: an error becomes a
//! status and a message (`smolrun_last_error`, per thread), a panic becomes `SMOLRUN_PANIC`
//! instead of unwinding into C. An engine is an [`Engine`](smolrun_engine::Engine) behind a
//! lock, beside the flag `smolrun_cancel` sets without that lock.
//!
//! ```text
//! status.rs   smolrun_status, the last error, the panic boundary
//! options.rs  smolrun_options: EngineOptions filled in by setters
//! engine.rs   smolrun_open/free, smolrun_tokenize, smolrun_generate, smolrun_cancel
//! ```

pub mod engine;
pub mod options;
pub mod status;

pub use engine::{smolrun_engine, smolrun_piece_fn, smolrun_result, smolrun_stop};
pub use options::smolrun_options;
pub use status::smolrun_status;
