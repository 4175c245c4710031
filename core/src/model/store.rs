//! Where the model gets its weights. The forward pass asks the store for a tensor's bytes just
//! before its matvec and releases it right after, so that a store may stream weights from flash
//! into a bounded buffer instead of keeping them all mapped (see DESIGN.md, "Where weights
//! live"). The bytes a store hands out are the tensor as stored in the GGUF file, or, where the
//! store holds one, a copy repacked for the matrix's kernel ([`WeightStore::get_repacked`]).

use super::error::ModelError;
use crate::gguf::Gguf;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ops::Range;

/// A tensor's index in the GGUF tensor table.
pub type TensorId = usize;

pub trait WeightStore {
    /// The stored bytes of tensor `id`, valid until `release(id)`.
    fn get(&self, id: TensorId) -> Result<&[u8], ModelError>;
    /// The copy of tensor `id` repacked into `layout` (a `RepackedKernel::layout`), valid until
    /// `release(id)`; `None` if this store has none, and the model then runs the kernel on the
    /// file layout from `get`.
    fn get_repacked(&self, id: TensorId, layout: &str) -> Option<&[u8]> {
        let _ = (id, layout);
        None
    }
    /// The model is done with tensor `id` for this token.
    fn release(&self, id: TensorId);
}

/// Repacked copies of some tensors, all inside one buffer: the mapped repack cache, or memory
/// the platform filled at load. Looked up by tensor id in O(1) for every matvec.
pub struct RepackedWeights {
    bytes: Box<dyn AsRef<[u8]> + Send + Sync>,
    slots: Vec<Option<RepackedSlot>>,
}

struct RepackedSlot {
    layout: &'static str,
    range: Range<usize>,
}

impl RepackedWeights {
    /// An empty table over `bytes` for a file of `n_tensors` tensors.
    pub fn new(bytes: Box<dyn AsRef<[u8]> + Send + Sync>, n_tensors: usize) -> RepackedWeights {
        RepackedWeights {
            bytes,
            slots: (0..n_tensors).map(|_| None).collect(),
        }
    }

    /// Tensor `id`'s copy in `layout` is `bytes[range]`.
    pub fn insert(
        &mut self,
        id: TensorId,
        layout: &'static str,
        range: Range<usize>,
    ) -> Result<(), ModelError> {
        let n_bytes = (*self.bytes).as_ref().len();
        let n_tensors = self.slots.len();
        let reason = if range.start > range.end || range.end > n_bytes {
            Some(alloc::format!(
                "repacked bytes {}..{} lie outside the {n_bytes}-byte buffer",
                range.start,
                range.end
            ))
        } else if id >= n_tensors {
            Some(alloc::format!("no such tensor (the file has {n_tensors})"))
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(ModelError::Store {
                tensor: alloc::format!("#{id}"),
                reason,
            });
        }
        self.slots[id] = Some(RepackedSlot { layout, range });
        Ok(())
    }

    /// The copy of tensor `id` in `layout`, if there is one.
    pub fn get(&self, id: TensorId, layout: &str) -> Option<&[u8]> {
        let slot = self.slots.get(id)?.as_ref()?;
        if slot.layout != layout {
            return None;
        }
        (*self.bytes).as_ref().get(slot.range.clone())
    }

    /// How many tensors have a repacked copy.
    pub fn count(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Bytes of all the repacked copies together.
    pub fn total_bytes(&self) -> usize {
        self.slots.iter().flatten().map(|s| s.range.len()).sum()
    }
}

/// Every tensor resident: read in place from the parsed (normally memory-mapped) file, and,
/// for the matrices in `repacked`, from their repacked copies.
pub struct ResidentStore<'g, 'a> {
    gguf: &'g Gguf<'a>,
    repacked: Option<RepackedWeights>,
}

impl<'g, 'a> ResidentStore<'g, 'a> {
    pub fn new(gguf: &'g Gguf<'a>) -> Self {
        ResidentStore {
            gguf,
            repacked: None,
        }
    }

    /// The file's tensors, plus repacked copies that the model's matvecs use instead of the
    /// file layout (the original pages of those tensors are then never touched).
    pub fn with_repacked(gguf: &'g Gguf<'a>, repacked: RepackedWeights) -> Self {
        ResidentStore {
            gguf,
            repacked: Some(repacked),
        }
    }

    pub fn repacked(&self) -> Option<&RepackedWeights> {
        self.repacked.as_ref()
    }
}

impl WeightStore for ResidentStore<'_, '_> {
    fn get(&self, id: TensorId) -> Result<&[u8], ModelError> {
        match self.gguf.tensors.get(id) {
            Some(t) => Ok(self.gguf.tensor_data(t)),
            None => Err(ModelError::Store {
                tensor: alloc::format!("#{id}"),
                reason: alloc::format!("no such tensor (the file has {})", self.gguf.tensors.len()),
            }),
        }
    }

    fn get_repacked(&self, id: TensorId, layout: &str) -> Option<&[u8]> {
        self.repacked.as_ref()?.get(id, layout)
    }

    fn release(&self, _id: TensorId) {}
}
