//! Guards: the metadata of a call, packed so that checking a cached
//! specialization is one slice comparison.
//!
//! A call's key packs, per tensor input, dtype, rank, sizes and strides (plus
//! the storage offset when the graph addresses storage directly, through
//! `as_strided`); per int input its value. A miss binds size symbols, computes
//! the derived ones (`rdyn_ir::sym`), checks sizes against the captured metadata
//! (a mismatch is a user error naming the input) and builds a new
//! specialization (`compiled.rs`). The frontend's repeat-call fast path
//! (`frontend/src/fast.rs`) skips building the key when a call repeats the
//! previous call's metadata.

use rdyn_ir::{DType, Device};

/// What the runtime sees of one tensor argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorArg {
    /// Address of element 0 of the view (`tensor.data_ptr()`).
    pub ptr: usize,
    pub dtype: DType,
    pub device: Device,
    pub sizes: Vec<i64>,
    pub strides: Vec<i64>,
    pub storage_offset: i64,
    /// PyTorch's version counter (`tensor._version`), `u64::MAX` if unknown:
    /// lets a device keep a copy of an input that did not change.
    pub version: u64,
    /// Identity of the tensor object (the frontend keeps the last call's
    /// inputs alive, so an identity is never reused while a cache holds it).
    pub identity: usize,
}

/// One call argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallArg {
    Tensor(TensorArg),
    Int(i64),
    Other,
}

/// Packed guard key: per tensor input its dtype, rank, sizes and strides
/// (and storage offset when the graph addresses storage directly); per int
/// input its value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GuardKey(pub Vec<i64>);

impl GuardKey {
    /// Build the key of a call into `out` (reused across calls).
    pub fn fill(out: &mut Vec<i64>, args: &[CallArg], with_offsets: bool) {
        out.clear();
        for arg in args {
            match arg {
                CallArg::Tensor(t) => {
                    out.push(t.dtype as i64);
                    out.push(t.sizes.len() as i64);
                    out.extend_from_slice(&t.sizes);
                    out.extend_from_slice(&t.strides);
                    if with_offsets {
                        out.push(t.storage_offset);
                    }
                }
                CallArg::Int(v) => out.push(*v),
                CallArg::Other => out.push(i64::MIN),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(sizes: &[i64], strides: &[i64]) -> CallArg {
        CallArg::Tensor(TensorArg {
            ptr: 0,
            dtype: DType::F32,
            device: Device::Cpu,
            sizes: sizes.to_vec(),
            strides: strides.to_vec(),
            storage_offset: 0,
            version: 0,
            identity: 0,
        })
    }

    #[test]
    fn keys_differ_on_strides_and_match_on_repeat() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        GuardKey::fill(&mut a, &[arg(&[4, 8], &[8, 1])], false);
        GuardKey::fill(&mut b, &[arg(&[4, 8], &[1, 4])], false);
        assert_ne!(a, b);
        GuardKey::fill(&mut b, &[arg(&[4, 8], &[8, 1])], false);
        assert_eq!(a, b);
    }
}
