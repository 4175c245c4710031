//! One module per subcommand. Each has an `Args` (clap) and a `run(Args) -> Result<(), String>`:
//! the error string is printed as `smolrun: <error>` and must say what to do next.

pub mod bench;
pub mod chat;
pub mod experts_last;
pub mod fit;
pub mod gguf;
pub mod gguf_out;
pub mod head;
pub mod list;
pub mod loopcheck;
pub mod moe_trace;
pub mod moefy;
pub mod perplexity;
pub mod plan;
pub mod pull;
pub mod requant;
pub mod rm;
pub mod run;
pub mod serve;
pub mod tokenize;
