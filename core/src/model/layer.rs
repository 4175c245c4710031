//! A layer is a token mixer and an FFN, each one of a few kinds, each kind in its own file:
//!
//! | part | kinds now | next |
//! |---|---|---|
//! | [`TokenMixer`] | [`Attention`] (attention.rs), [`DeltaNet`] (delta_net.rs: Qwen3.5's recurrent Gated DeltaNet), [`ShortConv`] (short_conv.rs: LFM2's gated short convolution), [`Mamba2`] (mamba2.rs: Granite 4.0 H's selective scan) | |
//! | [`Ffn`] | [`DenseFfn`] (dense_ffn.rs), [`MoeFfn`] (moe_ffn.rs: softmax or sigmoid routers, selection bias, groups, shared expert) | |
//!
//! Adding a kind is a new file plus a match arm in each `match` below: its tensors
//! ([`Layer::matrices`], which the repack plan and the prefetch hints read), its state
//! ([`LayerShape::state_bytes`], [`LayerState`]: its plan and its carving from the state's
//! arena), its forward, and its load (`load_layer` in mod.rs). The family's file (arch/) says
//! which kinds each layer is from the header ([`LayerShape`], in `HParams::layers`), so the
//! memory plan sizes the state before a tensor is read.

use super::attention::{Attention, AttentionShape, KvCache, KvCacheType};
use super::delta_net::{DeltaNet, DeltaNetShape, RecurrentState};
use super::dense_ffn::DenseFfn;
use super::error::ModelError;
use super::mamba2::{Mamba2, Mamba2Shape};
use super::matrix::Matrix;
use super::moe_ffn::{MoeFfn, Routing};
use super::pass::Pass;
use super::short_conv::{ShortConv, ShortConvShape};
use super::state::Activations;
use super::store::WeightKey;
use crate::arena::{Arena, ArenaError, ArenaPlan, Part};
use alloc::vec::Vec;

/// What the header says layer `l` is made of, before any tensor is read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerShape {
    pub mixer: MixerShape,
    pub ffn: FfnShape,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MixerShape {
    Attention(AttentionShape),
    /// A recurrent layer: a fixed state instead of a KV cache.
    DeltaNet(DeltaNetShape),
    /// A gated short convolution (LFM2): a fixed conv window instead of a KV cache.
    ShortConv(ShortConvShape),
    /// A Mamba-2 selective scan (Granite 4.0 H): a conv window and a scan state instead of a
    /// KV cache.
    Mamba2(Mamba2Shape),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FfnShape {
    /// A gated MLP of hidden width `n_ff`; `fused_gate_up`: its gate and up projections are
    /// one matrix (`ffn_up`, 2 x `n_ff` rows: the gate's, then the up's; Phi-3).
    Dense { n_ff: usize, fused_gate_up: bool },
    /// `n_expert` gated MLPs of hidden width `n_ff`, `n_expert_used` of them per token, chosen
    /// and weighted as `routing` says; plus a shared expert of width `n_ff_shared` (0: none).
    Moe {
        n_ff: usize,
        n_expert: usize,
        n_expert_used: usize,
        routing: Routing,
        n_ff_shared: usize,
    },
}

impl LayerShape {
    /// Bytes of this layer's state for a context of `n_ctx` tokens (an attention layer's KV
    /// cache grows with the context; a recurrent layer's state will not).
    /// In u64: a long context on a 32-bit device can take more bytes than its usize counts.
    pub fn state_bytes(&self, n_ctx: usize) -> u64 {
        match self.mixer {
            MixerShape::Attention(a) => 2 * n_ctx as u64 * (a.kv_dim() + a.v_dim()) as u64,
            MixerShape::DeltaNet(d) => d.state_bytes(),
            MixerShape::ShortConv(c) => c.state_bytes(),
            MixerShape::Mamba2(m) => m.state_bytes(),
        }
    }

    /// Widths of the activation rows this layer writes, for sizing the shared buffers:
    /// (q, k, v, attention output, FFN hidden).
    pub fn widths(&self) -> LayerWidths {
        let mut w = LayerWidths::default();
        match self.mixer {
            MixerShape::Attention(a) => {
                w.q = a.q_dim();
                w.k = a.kv_dim();
                w.v = a.v_dim();
                w.o = a.o_dim();
                w.n_head = a.n_head;
                w.qkv = a.qkv_dim();
                if a.output_gate {
                    // Wq's rows hold each head's query and its gate; the gates move out.
                    w.q = 2 * a.q_dim();
                    w.gate = a.o_dim();
                }
            }
            MixerShape::DeltaNet(d) => {
                w.qkv = d.conv_dim();
                w.gate = d.value_dim();
                w.o = d.value_dim();
                w.ssm_gates = 2 * d.n_v_heads;
            }
            MixerShape::ShortConv(c) => {
                // in_proj's [b | c | x] rows in qkv, the conv's rows in the output's.
                w.qkv = c.in_dim();
                w.o = c.channels;
            }
            MixerShape::Mamba2(m) => {
                // ssm_in's [z | xBC | dt] rows in qkv, the convolved xBC in gate, y in the
                // output's.
                w.qkv = m.in_dim();
                w.gate = m.conv_dim();
                w.o = m.d_inner;
            }
        }
        match self.ffn {
            FfnShape::Dense {
                n_ff,
                fused_gate_up,
            } => {
                w.ff = n_ff;
                // The fused matrix writes the gate's and the up's rows together into hb2.
                w.ff_up = if fused_gate_up { 2 * n_ff } else { n_ff };
            }
            FfnShape::Moe {
                n_ff,
                n_expert,
                n_ff_shared,
                ..
            } => {
                w.ff = n_ff.max(n_ff_shared);
                w.ff_up = w.ff;
                w.router = n_expert;
            }
        }
        w
    }
}

/// The widths of one layer's activation rows (0 where the kind has none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayerWidths {
    pub q: usize,
    pub k: usize,
    pub v: usize,
    pub o: usize,
    pub ff: usize,
    /// The up projection's output (`hb2`): `ff`, or twice it when gate and up are one matrix.
    pub ff_up: usize,
    pub n_head: usize,
    /// Router logits of a mixture-of-experts FFN (its expert count).
    pub router: usize,
    /// A fused QKV matrix's output (0 when Q, K and V are separate); a recurrent layer's
    /// convolution channels.
    pub qkv: usize,
    /// An output gate: gated attention's (one per output value), a recurrent layer's z.
    pub gate: usize,
    /// A recurrent layer's beta and alpha (two per value head).
    pub ssm_gates: usize,
}

impl LayerWidths {
    /// The widest of each over `layers`.
    pub fn max_over(layers: &[LayerShape]) -> LayerWidths {
        layers
            .iter()
            .map(LayerShape::widths)
            .fold(LayerWidths::default(), |a, b| LayerWidths {
                q: a.q.max(b.q),
                k: a.k.max(b.k),
                v: a.v.max(b.v),
                o: a.o.max(b.o),
                ff: a.ff.max(b.ff),
                ff_up: a.ff_up.max(b.ff_up),
                n_head: a.n_head.max(b.n_head),
                router: a.router.max(b.router),
                qkv: a.qkv.max(b.qkv),
                gate: a.gate.max(b.gate),
                ssm_gates: a.ssm_gates.max(b.ssm_gates),
            })
    }
}

#[derive(Debug, Clone)]
pub enum TokenMixer {
    Attention(Attention),
    DeltaNet(DeltaNet),
    ShortConv(ShortConv),
    Mamba2(Mamba2),
}

// One per layer, built once: the size of the largest kind costs nothing worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Ffn {
    Dense(DenseFfn),
    Moe(MoeFfn),
}

#[derive(Debug, Clone)]
pub struct Layer {
    pub mixer: TokenMixer,
    pub ffn: Ffn,
    /// Every weight key of the layer in the order `forward` asks for them (the prefetch hint).
    pub keys: Vec<WeightKey>,
}

/// What a layer keeps from token to token.
pub enum LayerState {
    Kv(KvCache),
    Recurrent(RecurrentState),
}

impl LayerState {
    /// Counts a layer's state in `plan`: its KV cache of `n_ctx` positions in `part`
    /// (`Part::KvCache` for the trunk), or its recurrent state with room for `n_steps` copies
    /// of itself in a verify pass (see `RecurrentState::steps`; a KV cache needs none: a
    /// rejected draft's entries are simply overwritten).
    pub fn plan(
        plan: &mut ArenaPlan,
        part: Part,
        shape: &LayerShape,
        n_ctx: usize,
        n_steps: usize,
        kv_type: KvCacheType,
    ) {
        match shape.mixer {
            MixerShape::Attention(a) => KvCache::plan(plan, part, &a, n_ctx, kv_type),
            MixerShape::DeltaNet(d) => RecurrentState::plan(plan, &d, n_steps),
            MixerShape::ShortConv(c) => {
                RecurrentState::plan_conv(plan, c.conv_state_len(), n_steps)
            }
            MixerShape::Mamba2(m) => {
                RecurrentState::plan_conv_ssm(plan, m.conv_state_len(), m.ssm_state_len(), n_steps)
            }
        }
    }

    /// Takes the state [`LayerState::plan`] counted from `arena`.
    ///
    /// # Safety
    /// The region under `arena` must outlive the state (see [`ArenaSlice::detach`]).
    pub unsafe fn carve(
        arena: &mut Arena<'_>,
        part: Part,
        shape: &LayerShape,
        n_ctx: usize,
        n_steps: usize,
        kv_type: KvCacheType,
    ) -> Result<LayerState, ArenaError> {
        // SAFETY: the caller's promise.
        unsafe {
            Ok(match shape.mixer {
                MixerShape::Attention(a) => {
                    LayerState::Kv(KvCache::carve(arena, part, &a, n_ctx, kv_type)?)
                }
                MixerShape::DeltaNet(d) => {
                    LayerState::Recurrent(RecurrentState::carve(arena, &d, n_steps)?)
                }
                MixerShape::ShortConv(c) => LayerState::Recurrent(RecurrentState::carve_conv(
                    arena,
                    c.conv_state_len(),
                    n_steps,
                )?),
                MixerShape::Mamba2(m) => LayerState::Recurrent(RecurrentState::carve_conv_ssm(
                    arena,
                    m.conv_state_len(),
                    m.ssm_state_len(),
                    n_steps,
                )?),
            })
        }
    }

    pub fn bytes(&self) -> usize {
        match self {
            LayerState::Kv(kv) => kv.bytes(),
            LayerState::Recurrent(r) => r.bytes(),
        }
    }

    /// Forgets the sequence: a recurrent state is zeroed (a KV cache is simply overwritten as
    /// positions are refilled).
    pub fn clear(&mut self) {
        match self {
            LayerState::Kv(_) => {}
            LayerState::Recurrent(r) => r.clear(),
        }
    }
}

impl Layer {
    pub fn new(mixer: TokenMixer, ffn: Ffn) -> Layer {
        let mut layer = Layer {
            mixer,
            ffn,
            keys: Vec::new(),
        };
        layer.keys = layer.matrices().iter().map(|m| m.key).collect();
        layer
    }

    /// The layer's weight matrices asked for whole, in the order `forward` uses them (what
    /// the repack plan repacks and the prefetch hint names).
    pub fn matrices(&self) -> Vec<&Matrix> {
        let mut all = Vec::new();
        match &self.mixer {
            TokenMixer::Attention(a) => all.extend(a.matrices()),
            TokenMixer::DeltaNet(d) => all.extend(d.matrices()),
            TokenMixer::ShortConv(c) => all.extend(c.matrices()),
            TokenMixer::Mamba2(m) => all.extend(m.matrices()),
        }
        match &self.ffn {
            Ffn::Dense(f) => all.extend(f.matrices()),
            Ffn::Moe(f) => all.extend(f.matrices()),
        }
        all
    }

    /// The expert tensors, asked for one expert at a time (none in a dense layer).
    pub fn expert_matrices(&self) -> Vec<&Matrix> {
        match &self.ffn {
            Ffn::Dense(_) => Vec::new(),
            Ffn::Moe(f) => f.expert_matrices().to_vec(),
        }
    }

    /// x += mixer(x); x += ffn(x), for the pass's tokens at positions `pos..`. `predict`: a
    /// later layer whose experts a mixture-of-experts FFN guesses from its input (pre-gated
    /// prefetch).
    pub fn forward(
        &self,
        p: &mut Pass,
        l: usize,
        a: &mut Activations,
        state: &mut LayerState,
        pos: usize,
        predict: Option<&Layer>,
    ) -> Result<(), ModelError> {
        if let Ffn::Moe(ffn) = &self.ffn {
            if ffn.routing.early_router {
                ffn.route_early(p, l, a)?;
            }
        }
        match (&self.mixer, state) {
            (TokenMixer::Attention(att), LayerState::Kv(cache)) => {
                att.forward(p, l, a, cache, pos)?
            }
            (TokenMixer::DeltaNet(dn), LayerState::Recurrent(s)) => dn.forward(p, l, a, s)?,
            (TokenMixer::ShortConv(sc), LayerState::Recurrent(s)) => sc.forward(p, l, a, s)?,
            (TokenMixer::Mamba2(m), LayerState::Recurrent(s)) => m.forward(p, l, a, s)?,
            _ => unreachable!("a layer's state is made from its own shape"),
        }
        match &self.ffn {
            Ffn::Dense(ffn) => ffn.forward(p, l, a),
            Ffn::Moe(ffn) => {
                let predict = predict.and_then(|next| match &next.ffn {
                    Ffn::Moe(next) => Some(next),
                    Ffn::Dense(_) => None,
                });
                ffn.forward(p, l, a, predict)
            }
        }
    }
}
