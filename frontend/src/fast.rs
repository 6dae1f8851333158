//! The repeat-call fast path: a call whose arguments have the metadata of
//! the previous call runs what that call ran, without reading each
//! tensor's sizes and strides into Rust and rebuilding the guard key.
//!
//! Reading a tensor's metadata through Python costs about a microsecond;
//! a model's graph takes every parameter as an input, so a ViT paid
//! 100–150 µs per call for it. The fast path checks all sizes and strides
//! in one C++ call (`torch._C._dynamo.guards.assert_size_stride_grouped`,
//! the check Inductor's generated code runs on its inputs), the dtype and
//! device per tensor by identity and flag, and ints by value; then it reads
//! only the data pointers. Any mismatch (a size or stride check that
//! raises included) is a miss: the call takes the full path, which reads
//! everything, selects a specialization by its guard key and records itself
//! here for the next call.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use rdyn_ir::Device;
use rdyn_runtime::compiled::Selected;
use rdyn_runtime::guard::CallArg;

use crate::host::Torch;

/// The previous call's arguments and what ran them.
pub struct LastCall {
    pub selected: Selected,
    /// The arguments' metadata; a repeat call copies it and sets the data
    /// pointers (and version counters, when read).
    args: Vec<CallArg>,
    /// The dtype object of each tensor argument, in argument order.
    dtypes: Vec<Py<PyAny>>,
    /// Sizes and strides of each tensor argument, as tuples, for the grouped check.
    sizes: Py<PyList>,
    strides: Py<PyList>,
    /// Whether a repeat must also match storage offsets (graphs that address
    /// input storage directly).
    offsets: bool,
}

impl LastCall {
    /// Record a call that took the full path (`None` when the host has no
    /// grouped check or an argument's dtype has no torch object).
    pub fn record(
        py: Python<'_>,
        torch: &Torch,
        selected: &Selected,
        args: &[CallArg],
        offsets: bool,
    ) -> PyResult<Option<LastCall>> {
        if torch.assert_size_stride_grouped.is_none() {
            return Ok(None);
        }
        let mut dtypes = Vec::new();
        let sizes = PyList::empty(py);
        let strides = PyList::empty(py);
        for arg in args {
            if let CallArg::Tensor(t) = arg {
                let Some(dtype) = torch.dtype_object(py, t.dtype) else { return Ok(None) };
                dtypes.push(dtype.unbind());
                sizes.append(PyTuple::new(py, &t.sizes)?)?;
                strides.append(PyTuple::new(py, &t.strides)?)?;
            }
        }
        Ok(Some(LastCall {
            selected: selected.clone(),
            args: args.to_vec(),
            dtypes,
            sizes: sizes.unbind(),
            strides: strides.unbind(),
            offsets,
        }))
    }

    /// The recorded arguments; after a successful [`LastCall::repeat`],
    /// those of the repeat call.
    pub fn args(&self) -> &[CallArg] {
        &self.args
    }

    /// Whether this call's arguments have the recorded call's metadata;
    /// if so, the recorded arguments take this call's data pointers (and
    /// version counters, when read) and its argument objects are returned.
    pub fn repeat<'py>(
        &mut self,
        torch: &Torch,
        args: &Bound<'py, PyAny>,
        with_version: bool,
    ) -> PyResult<Option<Vec<Bound<'py, PyAny>>>> {
        let py = args.py();
        let Ok(list) = args.cast::<PyList>() else { return Ok(None) };
        if list.len() != self.args.len() {
            return Ok(None);
        }
        let tensor_type = torch.tensor_type.bind(py);
        let mut objects = Vec::with_capacity(self.args.len());
        let tensors = PyList::empty(py);
        let mut dtypes = self.dtypes.iter();
        for (item, expected) in list.iter().zip(&self.args) {
            let is_tensor = item.is_instance(tensor_type)?;
            let same = match expected {
                CallArg::Tensor(t) => {
                    is_tensor
                        && dtypes.next().is_some_and(|d| item.getattr(intern!(py, "dtype")).is_ok_and(|o| o.is(d)))
                        && same_device(&item, t.device)?
                }
                CallArg::Int(v) => !is_tensor && item.extract::<i64>().is_ok_and(|x| x == *v),
                CallArg::Other => !is_tensor && item.extract::<i64>().is_err(),
            };
            if !same {
                return Ok(None);
            }
            if is_tensor {
                tensors.append(&item)?;
            }
            objects.push(item);
        }
        // Raises AssertionError on the first size or stride that differs.
        let Some(check) = &torch.assert_size_stride_grouped else { return Ok(None) };
        if check.bind(py).call1((tensors, self.sizes.bind(py), self.strides.bind(py))).is_err() {
            return Ok(None);
        }
        if self.offsets {
            for (arg, item) in self.args.iter().zip(&objects) {
                if let CallArg::Tensor(t) = arg {
                    let offset: i64 = item.call_method0(intern!(py, "storage_offset"))?.extract()?;
                    if offset != t.storage_offset {
                        return Ok(None);
                    }
                }
            }
        }
        for (arg, item) in self.args.iter_mut().zip(&objects) {
            if let CallArg::Tensor(t) = arg {
                t.ptr = item.call_method0(intern!(py, "data_ptr"))?.extract()?;
                if t.ptr == 0 && t.sizes.iter().product::<i64>() > 0 {
                    // A tensor without memory (a ZeroTensor): the full path
                    // gives the kernels a materialized copy.
                    return Ok(None);
                }
                t.identity = item.as_ptr() as usize;
                t.version = if with_version { crate::host::version(item) } else { u64::MAX };
            }
        }
        Ok(Some(objects))
    }
}

/// Whether a tensor is on `device` (all CUDA devices read as device 0, as
/// in [`crate::host::call_args`]).
fn same_device(item: &Bound<'_, PyAny>, device: Device) -> PyResult<bool> {
    let py = item.py();
    let flag = |name: &Bound<'_, pyo3::types::PyString>| -> PyResult<bool> { item.getattr(name)?.extract() };
    Ok(match device {
        Device::Cpu => flag(intern!(py, "is_cpu"))?,
        Device::Cuda(_) => flag(intern!(py, "is_cuda"))?,
        Device::Meta => flag(intern!(py, "is_meta"))?,
    })
}
