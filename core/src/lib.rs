//! smolrun-core: everything about running a model that needs no operating system.
//!
//! Formats ([`gguf`], [`quant`]), the model code, the tokenizers and the policies live here.
//! The core does no I/O and starts no threads: the platform crates hand it the bytes of a
//! mapped file, memory for its arena, and a way to run work on several cores
//! (see [`platform`]).
#![no_std]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod gguf;
pub mod grammar;
pub mod kernels;
pub mod math;
pub mod model;
pub mod platform;
pub mod quant;
pub mod sampler;
pub mod tokenizer;
