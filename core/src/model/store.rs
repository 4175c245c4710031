//! Where the model gets its weights. The forward pass asks the store for a tensor's bytes just
//! before its matvec and releases it right after, so that a store may stream weights from flash
//! into a bounded buffer instead of keeping them all mapped (see DESIGN.md, "Where weights
//! live"). The bytes a store hands out are the tensor as stored in the GGUF file.

use super::error::ModelError;
use crate::gguf::Gguf;

/// A tensor's index in the GGUF tensor table.
pub type TensorId = usize;

pub trait WeightStore {
    /// The stored bytes of tensor `id`, valid until `release(id)`.
    fn get(&self, id: TensorId) -> Result<&[u8], ModelError>;
    /// The model is done with tensor `id` for this token.
    fn release(&self, id: TensorId);
}

/// Every tensor resident: read in place from the parsed (normally memory-mapped) file.
pub struct ResidentStore<'g, 'a> {
    gguf: &'g Gguf<'a>,
}

impl<'g, 'a> ResidentStore<'g, 'a> {
    pub fn new(gguf: &'g Gguf<'a>) -> Self {
        ResidentStore { gguf }
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

    fn release(&self, _id: TensorId) {}
}
