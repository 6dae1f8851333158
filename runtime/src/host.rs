//! What the runtime needs from its host (the Python frontend): torch-owned
//! memory and eager ATen calls.

use rdyn_ir::loops::BufId;
use rdyn_memplan::BufPlan;

use crate::RuntimeError;

/// Memory PyTorch must own (outputs, tensors handed to eager ops) and eager
/// calls. The frontend implements it per call.
pub trait Host {
    /// Allocate a tensor with this layout; return the address of its storage
    /// element 0.
    fn alloc(&mut self, buf: BufId, plan: &BufPlan) -> Result<usize, RuntimeError>;
    /// As `alloc`, for a buffer only library calls read
    /// ([`rdyn_memplan::Storage::Pooled`]): the host may hand out a tensor of
    /// this layout kept from an earlier call.
    fn alloc_pooled(&mut self, buf: BufId, plan: &BufPlan) -> Result<usize, RuntimeError> {
        self.alloc(buf, plan)
    }
    /// As `alloc`, for a buffer input-free steps write
    /// ([`rdyn_memplan::Storage::Kept`]): the host may hand back the tensor it
    /// kept for this buffer of the plan `owner` (its address; `None`: keep
    /// nothing) from an earlier, successful call. Returns the address and
    /// whether the tensor holds the steps' values.
    fn alloc_kept(&mut self, buf: BufId, plan: &BufPlan, _owner: Option<usize>) -> Result<(usize, bool), RuntimeError> {
        Ok((self.alloc(buf, plan)?, false))
    }
    /// Run graph node `node` eagerly on the given buffers; fill `ptrs` for
    /// its outputs.
    fn run_node(
        &mut self,
        node: u32,
        inputs: &[BufId],
        outputs: &[BufId],
        bufs: &[BufPlan],
        ptrs: &mut [usize],
    ) -> Result<(), RuntimeError>;
    /// The CUDA stream PyTorch is using (a `CUstream` address).
    fn cuda_stream(&mut self) -> Result<usize, RuntimeError> {
        Err(RuntimeError::Unavailable("CUDA not available in this host".into()))
    }
    /// Device scratch memory of `bytes` bytes, alive until the call ends.
    fn alloc_device(&mut self, _bytes: usize) -> Result<usize, RuntimeError> {
        Err(RuntimeError::Unavailable("CUDA not available in this host".into()))
    }
}
