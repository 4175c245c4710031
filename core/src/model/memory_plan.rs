//! What running a model will cost in RAM, worked out from the file's header alone, before a
//! single weight is touched: the memory guard compares it with what the device allows and
//! refuses a model that would be killed (or would re-read its weights from flash every token).
//!
//! The parts, by where they live:
//! - **weights**: every matrix the forward pass reads for every token: all of them except the
//!   embedding table, which is read one row per token, unless the table is also the LM head
//!   (tied), then all of it is read for every token's logits. Mapped (or repacked) pages that
//!   must stay in RAM, or decoding re-reads them from flash token after token.
//! - **embedding rows**: an untied table stays on flash; each distinct token of the context
//!   faults in the page(s) of its row, so at most `min(n_ctx, n_vocab)` rows.
//! - **metadata**: the file's header (vocabulary, merges, chat template), read once at load.
//! - **tokenizer**: the tokenizer's own tables built from that header.
//! - **norms**: the small F32 vectors (norms, biases) copied to RAM at load.
//! - **kv cache**, **recurrent state**, **activations**, **logits**: the parts of the arena's
//!   plan ([`ArenaPlan`], the one [`State::new`](super::State::new) carves its region by) for
//!   `n_ctx`, plus the sampler's per-token arrays; activations include the layer table and
//!   the matvec scratch, and with MTP drafting the kv cache includes the MTP block's state.
//! - **runtime**: the program itself, its libraries, thread stacks and allocator slack.

use super::hparams::HParams;
use super::tensor_use::TensorUse;
use super::StateShape;
use crate::arena::{ArenaPlan, Part};
use crate::gguf::TensorInfo;
use crate::math;
use crate::quant::GgmlType;

/// Size of a page as far as residency goes: a row read from a mapped file brings in at least
/// this much.
pub const PAGE_BYTES: u64 = 4096;

/// The tokenizer's tables (token strings, the lookup maps, merge ranks) take about twice the
/// bytes of the header they are built from: measured 2.0x on Gemma 3 (262K tokens, no merges)
/// and 2.4x on Qwen2.5 (152K tokens and 151K merges); 5/2 leaves room.
pub const TOKENIZER_BYTES_PER_METADATA_BYTE: (u64, u64) = (5, 2);

/// The sampler keeps four arrays of the vocabulary's size: counts (u32), logits (f32),
/// candidates (f32 + u32) and weights (f32).
pub const SAMPLER_BYTES_PER_TOKEN: u64 = 20;

/// The binary's code and data, libc, thread stacks and the allocator's slack: 12-16 MB
/// measured on x86-64 (RSS before loading minus the header); rounded up.
pub const RUNTIME_BYTES: u64 = 24 << 20;

/// Bytes of RAM one run of a model needs, by part. Built by [`MemoryPlan::new`]; every field is
/// in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPlan {
    pub weights: u64,
    pub embedding_rows: u64,
    pub metadata: u64,
    pub tokenizer: u64,
    pub norms: u64,
    /// The attention layers' KV cache (grows with the context).
    pub kv_cache: u64,
    /// The recurrent layers' fixed state (qwen35's DeltaNet: a conv window and a dv x dk matrix
    /// per value head), whatever the context.
    pub recurrent_state: u64,
    pub activations: u64,
    pub logits: u64,
    pub runtime: u64,
    /// The embedding table's size: counted in `weights` when it is the LM head, otherwise left
    /// on flash (only `embedding_rows` of it come into RAM).
    pub embedding_table: u64,
    /// The file has no `output.weight`: the embedding table is the LM head.
    pub head_is_embedding: bool,
    /// What the run's state is sized for, and the arena's plan for it: `kv_cache`,
    /// `recurrent_state`, `activations` and `logits` (less the sampler) are its parts.
    pub state: StateShape,
    pub arena: ArenaPlan,
}

impl MemoryPlan {
    /// The plan for `hp` (already validated), the file's tensor table, the offset where its
    /// tensor data starts (= the header's size) and a context of `n_ctx` tokens.
    pub fn new(hp: &HParams, tensors: &[TensorInfo], data_offset: u64, n_ctx: usize) -> MemoryPlan {
        let head_is_embedding = super::tensor_use::head_is_embedding(tensors);
        let mut weights = 0u64;
        let mut norms = 0u64;
        let mut embedding_table = 0u64;
        let mut embedding_row_bytes = 0u64;
        for t in tensors {
            if t.name == "token_embd.weight" {
                embedding_table = t.n_bytes;
                embedding_row_bytes = t.n_bytes / t.dims[1].max(1);
            }
            match TensorUse::of(t, head_is_embedding) {
                TensorUse::Whole | TensorUse::Experts => weights += t.n_bytes,
                // Copied to RAM as f32 at load (stored F32, so the same size).
                TensorUse::Vector => norms += t.n_bytes,
                // Left on flash: `embedding_rows` below counts what comes into RAM.
                TensorUse::Rows => {}
            }
        }
        let embedding_rows = if head_is_embedding {
            0
        } else {
            // Each row brings in the pages it spans (no readahead: the table is advised random).
            let pages_per_row = embedding_row_bytes.div_ceil(PAGE_BYTES) + 1;
            let rows = (n_ctx as u64).min(hp.n_vocab as u64);
            (rows * pages_per_row * PAGE_BYTES).min(embedding_table)
        };

        // The State's buffers as State::new sizes them (prompt batches of DEFAULT_BATCH); a
        // pruned head (fewer output rows than the vocabulary) has a row buffer of its own.
        let n_vocab = hp.n_vocab as u64;
        let head_rows = tensors
            .iter()
            .find(|t| t.name == "output.weight")
            .map_or(0, |t| t.dims[1])
            .min(n_vocab);
        let pruned_head_rows = if head_rows < n_vocab { head_rows } else { 0 };
        // The Q1_0 / Q2_0 lookup-table kernels' activation tables (aarch64 sets install them;
        // counted on every CPU, at most ~1.6 MB, so that the plan does not depend on kernels).
        let act_tables = tensors
            .iter()
            .filter(|t| TensorUse::of(t, head_is_embedding) != TensorUse::Vector)
            .filter_map(|t| match t.ggml_type {
                GgmlType::Q1_0 => crate::quant::q1_0_lut::table_bytes(t.dims[0] as usize),
                GgmlType::Q2_0 => crate::quant::q2_0_lut::table_bytes(t.dims[0] as usize),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let state = StateShape::new(hp, n_ctx, super::DEFAULT_BATCH, pruned_head_rows as usize)
            .with_act_tables(act_tables);
        let arena = state.plan(hp);
        let (kv_cache, recurrent_state, activations, logits) = state_parts(&arena, n_vocab);
        let (num, den) = TOKENIZER_BYTES_PER_METADATA_BYTE;
        // GELU models keep the activation's table over every f16 input (Model::gelu).
        let gelu_table = match hp.family.switches.activation {
            super::Activation::GeluTanh => math::GeluTable::BYTES as u64,
            super::Activation::Silu | super::Activation::Relu => 0,
        };
        MemoryPlan {
            weights,
            embedding_rows,
            metadata: data_offset,
            tokenizer: data_offset * num / den,
            norms,
            kv_cache,
            recurrent_state,
            activations,
            logits,
            runtime: RUNTIME_BYTES + gelu_table,
            embedding_table,
            head_is_embedding,
            state,
            arena,
        }
    }

    /// The plan for a store that maps nothing and holds `held` bytes of weights (its scratch
    /// buffers): the weights and embedding rows are read into those, not kept.
    pub fn with_weights_held(self, held: u64) -> MemoryPlan {
        MemoryPlan {
            weights: held,
            embedding_rows: 0,
            ..self
        }
    }

    /// This plan with the state MTP drafting adds for `n_draft` drafts per pass (a model with
    /// an MTP layer smolrun runs; unchanged otherwise): the copies of the recurrent state a
    /// verify pass keeps, the MTP block's KV cache and buffers.
    pub fn with_mtp_drafting(self, hp: &HParams, n_ctx: usize, n_draft: usize) -> MemoryPlan {
        if hp.n_nextn != 1 || hp.mtp_layer().is_none() {
            return self;
        }
        let state = StateShape {
            n_ctx,
            ..self.state
        }
        .with_logit_rows(n_draft + 1)
        .with_mtp(hp);
        let arena = state.plan(hp);
        let (kv_cache, recurrent_state, activations, logits) =
            state_parts(&arena, hp.n_vocab as u64);
        MemoryPlan {
            kv_cache,
            recurrent_state,
            activations,
            logits,
            state,
            arena,
            ..self
        }
    }

    /// Everything added up: what the process will hold once it is decoding at a full context.
    /// Saturating: a plan too big for any device reads as u64::MAX, never as a small number.
    pub fn total(&self) -> u64 {
        self.parts()
            .iter()
            .fold(0u64, |sum, p| sum.saturating_add(p.1))
    }

    /// The parts with their names, biggest first in a typical model, for messages.
    pub fn parts(&self) -> [(&'static str, u64); 10] {
        [
            ("weights read every token", self.weights),
            ("kv cache", self.kv_cache),
            ("recurrent state", self.recurrent_state),
            ("embedding rows", self.embedding_rows),
            ("metadata", self.metadata),
            ("tokenizer", self.tokenizer),
            ("norms", self.norms),
            ("activations", self.activations),
            ("logits and sampler", self.logits),
            ("runtime", self.runtime),
        ]
    }

    /// KV cache bytes per token of context: what one step less of `-c` saves. Only attention
    /// layers keep one (a recurrent layer's state does not grow).
    pub fn kv_bytes_per_token(hp: &HParams) -> u64 {
        hp.layers
            .iter()
            .filter_map(|l| match l.mixer {
                super::MixerShape::Attention(a) => Some(
                    (hp.kv_type.row_bytes(a.kv_dim()) + hp.kv_type.row_bytes(a.v_dim())) as u64,
                ),
                _ => None,
            })
            .sum()
    }
}

/// The memory plan's state parts from the arena's: (kv cache with the MTP block's state,
/// recurrent state, activations with the layer table and the scratch, logits with the
/// sampler's arrays for `n_vocab` tokens).
fn state_parts(arena: &ArenaPlan, n_vocab: u64) -> (u64, u64, u64, u64) {
    let part = |p| arena.bytes(p);
    let sum = |parts: &[Part]| parts.iter().fold(0u64, |s, &p| s.saturating_add(part(p)));
    (
        sum(&[Part::KvCache, Part::Mtp]),
        part(Part::RecurrentState),
        sum(&[Part::LayerTable, Part::Activations, Part::Scratch]),
        part(Part::Logits).saturating_add(SAMPLER_BYTES_PER_TOKEN.saturating_mul(n_vocab)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::hparams::RopeScaling;
    use crate::model::Family;
    use crate::model::{AttentionShape, FfnShape, LayerShape, MixerShape};
    use crate::quant::GgmlType;
    use alloc::string::{String, ToString};
    use alloc::vec;
    use alloc::vec::Vec;

    fn hparams() -> HParams {
        HParams {
            family: Family::from_arch("qwen2").unwrap(),
            arch: String::from("qwen2"),
            n_layer: 2,
            n_nextn: 0,
            n_embd: 64,
            n_ff: 128,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 16,
            head_dim_v: 16,
            n_vocab: 1000,
            rms_eps: 1e-6,
            n_rot: 16,
            rope_freq_base: 10000.0,
            rope_freq_base_swa: 10000.0,
            rope_scaling: RopeScaling::None,
            rope_freq_scale: 1.0,
            rope_n_ctx_orig: 512,
            rope_attn_factor: 1.0,
            n_ctx_train: 512,
            sliding_window: None,
            is_swa: vec![false; 2],
            final_logit_softcap: None,
            attn_logit_softcap: None,
            scales: Default::default(),
            layers: vec![
                LayerShape {
                    mixer: MixerShape::Attention(AttentionShape {
                        n_head: 4,
                        n_head_kv: 2,
                        head_dim: 16,
                        head_dim_v: 16,
                        window: None,
                        fused_qkv: false,
                        output_gate: false,
                        rope: true,
                    }),
                    ffn: FfnShape::Dense {
                        n_ff: 128,
                        fused_gate_up: false,
                    },
                };
                2
            ],
            kv_type: Default::default(),
        }
    }

    fn tensor(name: &'static str, ty: GgmlType, dims: [u64; 4]) -> TensorInfo<'static> {
        let n = dims.iter().product::<u64>();
        TensorInfo {
            name,
            ggml_type: ty,
            dims,
            n_dims: dims.iter().rposition(|&d| d != 1).map_or(1, |i| i + 1),
            offset: 0,
            n_bytes: ty.bytes_for(n).unwrap(),
        }
    }

    /// Two layers of a small model; the table is Q8_0 (34 bytes per 32 values).
    fn table(with_output: bool) -> Vec<TensorInfo<'static>> {
        let mut t = vec![
            tensor("token_embd.weight", GgmlType::Q8_0, [64, 1000, 1, 1]),
            tensor("output_norm.weight", GgmlType::F32, [64, 1, 1, 1]),
        ];
        for name in ["blk.0.attn_q.weight", "blk.1.attn_q.weight"] {
            t.push(tensor(name, GgmlType::Q8_0, [64, 64, 1, 1]));
        }
        t.push(tensor(
            "blk.0.attn_norm.weight",
            GgmlType::F32,
            [64, 1, 1, 1],
        ));
        if with_output {
            t.push(tensor("output.weight", GgmlType::Q8_0, [64, 1000, 1, 1]));
        }
        t
    }

    #[test]
    fn tied_head_counts_the_whole_table_as_weights() {
        let plan = MemoryPlan::new(&hparams(), &table(false), 10_000, 100);
        let table_bytes = 1000 * 2 * 34;
        let layer_bytes = 2 * 64 * 2 * 34;
        assert!(plan.head_is_embedding);
        assert_eq!(plan.embedding_table, table_bytes);
        assert_eq!(plan.weights, table_bytes + layer_bytes);
        assert_eq!(plan.embedding_rows, 0);
        assert_eq!(plan.norms, 2 * 64 * 4);
        assert_eq!(plan.metadata, 10_000);
        assert_eq!(plan.tokenizer, 25_000);
    }

    #[test]
    fn untied_table_stays_on_flash_but_its_rows_are_counted() {
        let plan = MemoryPlan::new(&hparams(), &table(true), 0, 100);
        let table_bytes = 1000 * 2 * 34;
        assert!(!plan.head_is_embedding);
        // The output matrix and the two layer matrices, not the embedding table.
        assert_eq!(plan.weights, table_bytes + 2 * 64 * 2 * 34);
        // 100 rows of 68 bytes, each charged the two pages it may straddle, capped by the
        // table's own size.
        assert_eq!(plan.embedding_rows, table_bytes.min(100 * 2 * 4096));
        let short = MemoryPlan::new(&hparams(), &table(true), 0, 5);
        assert_eq!(short.embedding_rows, 5 * 2 * 4096);
    }

    #[test]
    fn kv_cache_and_state_follow_the_context() {
        let hp = hparams();
        let a = MemoryPlan::new(&hp, &table(false), 0, 100);
        let b = MemoryPlan::new(&hp, &table(false), 0, 200);
        // 2 layers x (2 kv heads x (16 + 16)) x 2 bytes = 256 bytes per token.
        assert_eq!(MemoryPlan::kv_bytes_per_token(&hp), 256);
        assert_eq!(a.kv_cache, 100 * 256);
        assert_eq!(b.kv_cache - a.kv_cache, 100 * 256);
        // Scores grow by n_head f32 per token; nothing else in the activations does.
        assert_eq!(b.activations - a.activations, 100 * 4 * 4);
        // One row of 1000 f32 logits, rounded up to a cache line in the arena (4000 -> 4032),
        // and the sampler's arrays.
        assert_eq!(a.logits, 4032 + 1000 * SAMPLER_BYTES_PER_TOKEN);
        assert_eq!(a.arena.bytes(Part::Logits), 4032);
        assert_eq!(a.runtime, RUNTIME_BYTES);
        assert_eq!(a.total(), a.parts().iter().map(|p| p.1).sum::<u64>());
    }

    /// A context a 32-bit device cannot address: 2^24 positions of this model's KV cache
    /// (256 bytes each) are 4 GB, plus the activations. The plan says so in u64 on every
    /// target; a 32-bit target refuses it when making the state (never a wrapped, small size);
    /// a 64-bit one accepts it.
    #[test]
    fn a_context_beyond_a_32_bit_address_space_is_refused_never_wrapped() {
        let mut hp = hparams();
        hp.n_ctx_train = 1 << 24;
        let plan = MemoryPlan::new(&hp, &table(false), 0, 1 << 24);
        assert_eq!(plan.kv_cache, 256 << 24);
        assert!(plan.arena.total() > u32::MAX as u64);
        let err = plan.arena.fits_in(u32::MAX as u64).unwrap_err();
        assert!(
            err.to_string()
                .contains("more than this device can address"),
            "{err}"
        );
        let fits = plan.arena.total_usize();
        if usize::BITS == 64 {
            assert_eq!(fits.unwrap() as u64, plan.arena.total());
        } else {
            let e = fits.unwrap_err().to_string();
            assert!(e.contains("4294967295 bytes"), "{e}");
        }
    }
}
