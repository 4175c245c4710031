//! Sentence embeddings: the final normed hidden state of every prompt position
//! ([`Model::forward_batch_hidden`](super::Model::forward_batch_hidden)), pooled into one vector
//! and scaled to unit length, as llama-server and Ollama answer /embeddings.
//!
//! ```text
//! h[t] = rms_norm(x[t]) * output_norm     for every position t (no LM head)
//! mean: e = sum_t h[t] / n    cls: e = h[0]    last: e = h[n-1]
//! e = e / |e|_2                           (a zero vector stays zero)
//! ```

use super::ModelError;
use crate::gguf::Gguf;
use alloc::format;
use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

/// How the hidden states of a prompt become one vector: llama.cpp's `<arch>.pooling_type`
/// (0 none, 1 mean, 2 cls, 3 last, 4 rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    Mean,
    /// The first token's state (BERT's [CLS]).
    Cls,
    /// The last token's state: the only one that has seen the whole text in a causal model.
    Last,
}

impl Pooling {
    /// The pooling the file asks for. A causal LM has no `pooling_type` key (or says 0, none:
    /// per-token vectors, which the one-vector-per-input APIs cannot return); it gets mean,
    /// the pooling Ollama and llama-server's `--pooling mean` use for such models: it averages
    /// every token's view of the text instead of trusting the last token alone, whose state is
    /// shaped to predict the next token rather than to summarise.
    pub fn from_gguf(g: &Gguf) -> Result<Pooling, ModelError> {
        let arch = g.architecture()?;
        let key = format!("{arch}.pooling_type");
        let Some(value) = g.get(&key) else {
            return Ok(Pooling::Mean);
        };
        match value.as_i64() {
            Some(0 | 1) => Ok(Pooling::Mean),
            Some(2) => Ok(Pooling::Cls),
            Some(3) => Ok(Pooling::Last),
            found => Err(ModelError::BadHParam {
                key,
                expected: "0 (none), 1 (mean), 2 (cls) or 3 (last); a rank model (4) scores \
                           query-document pairs and gives no embedding"
                    .to_string(),
                found: found.map_or_else(|| value.type_name().to_string(), |v| format!("{v}")),
            }),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        }
    }
}

/// Pools hidden-state rows handed over one at a time, in position order.
pub struct Pooler {
    pooling: Pooling,
    /// Mean: the running sum; cls and last: the row kept.
    acc: Vec<f32>,
    n: usize,
}

impl Pooler {
    pub fn new(pooling: Pooling, n_embd: usize) -> Self {
        Pooler {
            pooling,
            acc: vec![0.0; n_embd],
            n: 0,
        }
    }

    /// Row `t` of the prompt (t counts from 0 in order).
    pub fn add(&mut self, t: usize, row: &[f32]) {
        match self.pooling {
            Pooling::Mean => self.acc.iter_mut().zip(row).for_each(|(a, &h)| *a += h),
            Pooling::Cls if t == 0 => self.acc.copy_from_slice(row),
            Pooling::Cls => {}
            Pooling::Last => self.acc.copy_from_slice(row),
        }
        self.n += 1;
    }

    /// The pooled vector at unit L2 length.
    pub fn finish(mut self) -> Vec<f32> {
        if self.pooling == Pooling::Mean && self.n > 0 {
            let inv = 1.0 / self.n as f32;
            self.acc.iter_mut().for_each(|a| *a *= inv);
        }
        l2_normalize(&mut self.acc);
        self.acc
    }
}

/// v /= |v|_2, the sum of squares in f64 as llama.cpp's `common_embd_normalize` takes it; a
/// zero vector stays zero instead of becoming NaN.
pub fn l2_normalize(v: &mut [f32]) {
    let sum: f64 = v.iter().map(|&x| x as f64 * x as f64).sum();
    let norm = libm::sqrt(sum);
    let scale = if norm > 0.0 { (1.0 / norm) as f32 } else { 0.0 };
    v.iter_mut().for_each(|x| *x *= scale);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(pooling: Pooling, rows: &[[f32; 2]]) -> Vec<f32> {
        let mut p = Pooler::new(pooling, 2);
        for (t, r) in rows.iter().enumerate() {
            p.add(t, r);
        }
        p.finish()
    }

    #[test]
    fn mean_cls_and_last_then_unit_length() {
        let rows = [[3.0, 0.0], [1.0, 4.0], [0.0, -2.0]];
        // mean (4/3, 2/3) has the direction of (2, 1)
        let m = pool(Pooling::Mean, &rows);
        let s = 1.0 / 5f32.sqrt();
        assert!(
            (m[0] - 2.0 * s).abs() < 1e-6 && (m[1] - s).abs() < 1e-6,
            "{m:?}"
        );
        assert_eq!(pool(Pooling::Cls, &rows), [1.0, 0.0]);
        assert_eq!(pool(Pooling::Last, &rows), [0.0, -1.0]);
    }

    #[test]
    fn zero_vector_stays_zero() {
        let mut v = [0.0f32; 4];
        l2_normalize(&mut v);
        assert_eq!(v, [0.0; 4]);
    }
}
