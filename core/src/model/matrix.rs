//! Finding and checking a model's tensors at load: weight matrices (with their kernel, chosen
//! once here) and the small F32 vectors (norms, biases) copied to RAM. Every layer kind loads
//! its tensors through one [`Loader`], which reads nothing but through the weight store.

use super::error::ModelError;
use super::store::{TensorId, WeightKey, WeightStore};
use crate::gguf::{Gguf, TensorInfo};
use crate::kernels::{KernelSet, WeightKernel};
use crate::quant::{self, GgmlType};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// A weight matrix of `n_rows` rows of `n_cols`, as stored, with its kernel chosen at load.
#[derive(Debug, Clone)]
pub struct Matrix {
    pub id: TensorId,
    /// What the forward pass asks the store for.
    pub key: WeightKey,
    pub name: String,
    pub ty: GgmlType,
    pub n_rows: usize,
    pub n_cols: usize,
    pub row_bytes: usize,
    /// The format the input vector is quantized to before the dot products.
    pub act_ty: GgmlType,
    /// Bytes of one input vector in `act_ty`.
    pub act_bytes: usize,
    /// The matvec kernel for `ty` on this CPU, picked once from the model's [`KernelSet`].
    pub kernel: WeightKernel,
}

/// What every layer kind loads its tensors with: the parsed header (names, shapes, types),
/// the store (the bytes of the small vectors), and the kernel set (each matrix's kernel).
pub struct Loader<'l> {
    pub gguf: &'l Gguf<'l>,
    pub store: &'l dyn WeightStore,
    pub kernels: &'l KernelSet,
}

impl<'l> Loader<'l> {
    /// The tensor `name` and its index, checked to have the ggml dims `expected`.
    fn tensor(
        &self,
        name: &str,
        expected: [u64; 4],
    ) -> Result<(TensorId, &'l TensorInfo<'l>), ModelError> {
        let g = self.gguf;
        let id = g
            .tensors
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| ModelError::MissingTensor { name: name.into() })?;
        let t = &g.tensors[id];
        if t.dims != expected {
            return Err(ModelError::BadTensorShape {
                name: name.into(),
                expected,
                found: t.dims,
            });
        }
        Ok((id, t))
    }

    /// The matrix `name` of `n_rows` x `n_cols` (ggml dims `[n_cols, n_rows]`) whose type has a
    /// matvec kernel in the kernel set.
    pub fn matrix(&self, name: &str, n_cols: usize, n_rows: usize) -> Result<Matrix, ModelError> {
        self.shaped(name, n_cols, n_rows, 1)
    }

    fn shaped(
        &self,
        name: &str,
        n_cols: usize,
        n_rows: usize,
        n_expert: usize,
    ) -> Result<Matrix, ModelError> {
        let (id, t) = self.tensor(name, [n_cols as u64, n_rows as u64, n_expert as u64, 1])?;
        let quant_err = |err| ModelError::Quant {
            tensor: name.into(),
            err,
        };
        let kernel = *self.kernels.weight(t.ggml_type).map_err(quant_err)?;
        let act_ty = kernel.act_type;
        let act_bytes =
            quant::row_bytes(act_ty, n_cols).map_err(|_| ModelError::BadTensorShape {
                name: name.into(),
                expected: [
                    (n_cols as u64).div_ceil(act_ty.block_size() as u64)
                        * act_ty.block_size() as u64,
                    n_rows as u64,
                    1,
                    1,
                ],
                found: t.dims,
            })?;
        Ok(Matrix {
            id,
            key: WeightKey::tensor(id),
            name: name.into(),
            ty: t.ggml_type,
            n_rows,
            n_cols,
            row_bytes: t.row_bytes(),
            act_ty,
            act_bytes,
            kernel,
        })
    }

    /// The expert tensor `name`: `n_expert` matrices of `n_rows` x `n_cols` (ggml dims
    /// `[n_cols, n_rows, n_expert]`). The matrix returned has one expert's shape; the forward
    /// pass asks for expert `e` with `WeightKey::expert(m.id, e)`.
    pub fn experts(
        &self,
        name: &str,
        n_cols: usize,
        n_rows: usize,
        n_expert: usize,
    ) -> Result<Matrix, ModelError> {
        self.shaped(name, n_cols, n_rows, n_expert)
    }

    /// The F32 vector `name` of `len` values, read through the store once, here: a few KB per
    /// layer, kept in RAM.
    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        self.f32_rows(name, len, 1)
    }

    /// The F32 table `name` of `n_rows` rows of `n_cols` values (ggml dims `[n_cols, n_rows]`),
    /// row after row, read through the store once, here (a recurrent layer's conv kernel).
    pub fn f32_rows(
        &self,
        name: &str,
        n_cols: usize,
        n_rows: usize,
    ) -> Result<Vec<f32>, ModelError> {
        let len = n_cols * n_rows;
        let (id, t) = self.tensor(name, [n_cols as u64, n_rows as u64, 1, 1])?;
        if t.ggml_type != GgmlType::F32 {
            return Err(ModelError::BadTensorType {
                name: name.into(),
                expected: "F32",
                found: t.ggml_type,
            });
        }
        // `len` was checked against the file's own shape above, and the tensor's extent
        // against the file's length at parse time.
        let mut bytes = vec![0u8; len * 4];
        self.store
            .read_rows(WeightKey::tensor(id), 0, n_rows, &mut bytes)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// [`Loader::vector`] if the file has the tensor.
    pub fn opt_vector(&self, name: &str, len: usize) -> Result<Option<Vec<f32>>, ModelError> {
        match self.gguf.tensor(name) {
            None => Ok(None),
            Some(_) => self.vector(name, len).map(Some),
        }
    }

    /// [`Loader::vector`] when `required`, nothing otherwise.
    pub fn vector_if(
        &self,
        required: bool,
        name: &str,
        len: usize,
    ) -> Result<Option<Vec<f32>>, ModelError> {
        if required {
            self.vector(name, len).map(Some)
        } else {
            Ok(None)
        }
    }
}
