//! smolrun-core: everything about running a model that needs no operating system.
//!
//! Formats ([`gguf`], [`quant`]), the model code, the tokenizers and the policies live here.
//! The core does no I/O and starts no threads: the platform crates hand it the bytes of a
//! mapped file, the region its [`arena`] carves a run's state from, and a way to run work on
//! several cores (see [`platform`]).
//!
//! # Glossary
//!
//! The words the code uses for its own things:
//!
//! - **face**: one implementation of a kernel for one instruction set (the scalar face, the AVX2
//!   face, the NEON dotprod face). Every face of a kernel gives the scalar face's bits, or stays
//!   within a summation-order bound written beside its exactness test.
//! - **twin**: the scalar reference that a SIMD face is tested against, kept next to it; a
//!   *generic twin* is the portable face a per-core variant falls back to in the dispatch table.
//! - **kernel set**: the table of faces chosen once per model for this CPU ([`kernels::KernelSet`]).
//! - **repacked**: weights rewritten at load into the layout a face wants (rows interleaved for
//!   dotprod, bit planes for 1-bit types), kept in RAM or in the repack cache on flash.
//! - **pass**: one run of the forward pass over a batch of tokens (a decode step, a prompt chunk,
//!   a verify pass over a draft); [`model::pass::Pass`] carries its pool, store and scratch.
//! - **store**: where a pass gets each weight from ([`model::WeightStore`]): resident (mapped),
//!   streamed, paged or read with pread. The model asks just before a matvec and releases after.
//! - **zone**: a stretch of the streaming store's ring buffer that holds one streamed weight
//!   from its read until its matvec is done.
//! - **slot**: a place for one expert (its gate, up and down slices) in an MoE layer's pool.
//! - **tap**: a hook on the state that sees each layer's hidden state as a pass computes it
//!   (`State::tap`: `gguf moefy` captures activations through it); also a convolution's kernel
//!   weights in the DeltaNet layer ("the conv taps").
//! - **arena**: the one region of memory the caller hands the core for a run's state, carved by a
//!   plan ([`arena::ArenaPlan`]) into KV cache or recurrent state, activations, logits and scratch.
#![no_std]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod arena;
pub mod gguf;
pub mod grammar;
pub mod kernels;
pub mod kv_q8;
pub mod math;
pub mod model;
pub mod platform;
pub mod quant;
pub mod sampler;
pub mod tokenizer;
