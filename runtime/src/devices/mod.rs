//! One module per device; [`by_name`] is the one place a device name is
//! matched.

pub mod cpu;
pub mod cuda;
pub mod cuda_sim;
pub mod wgpu;

use std::sync::Arc;

pub use rdyn_codegen_cuda::IndexChecks;

use crate::device::Device;

/// The device options `torch.compile(options=...)` passes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceOptions {
    /// How CUDA kernels report an index out of range.
    pub index_checks: IndexChecks,
    /// CUDA GEMMs are cuBLAS calls rdyn plans (else ATen library calls).
    pub cublas: bool,
}

impl Default for DeviceOptions {
    fn default() -> DeviceOptions {
        DeviceOptions { index_checks: IndexChecks::Device, cublas: true }
    }
}

/// The devices by the names `options={"device": ...}` takes.
pub const NAMES: [&str; 4] = ["cpu", "cuda", "cuda-sim", "wgpu"];

/// The device called `name`, or `None` for a name rdyn does not know
/// ([`NAMES`] lists them).
pub fn by_name(name: &str, options: DeviceOptions) -> Option<Arc<dyn Device>> {
    let DeviceOptions { index_checks, cublas } = options;
    Some(match name {
        "cpu" => Arc::new(cpu::Cpu),
        "wgpu" => Arc::new(wgpu::Wgpu),
        "cuda" => Arc::new(cuda::Cuda { index_checks, cublas }),
        "cuda-sim" => Arc::new(cuda_sim::CudaSim { index_checks, cublas }),
        _ => return None,
    })
}

/// Whether the wgpu device has an adapter here; its description.
pub fn wgpu_adapter() -> Result<String, crate::RuntimeError> {
    wgpu::adapter_description()
}
