//! The Python side of a call: reading torch tensors, allocating outputs and
//! running eager nodes through the Python runner object.
//!
//! CPU outputs are allocated with `torch._C._dynamo.guards._empty_strided_cpu`
//! (about half the cost of `torch.empty_strided`). After a fast-path call (which
//! reads only data pointers), an input's storage offset is read only when a view
//! of that input must be handed to Python.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use rdyn_ir::loops::BufId;
use rdyn_ir::{DType, Device};
use rdyn_memplan::{storage_root, BufPlan};
use rdyn_runtime::guard::{CallArg, TensorArg};
use rdyn_runtime::host::Host;
use rdyn_runtime::RuntimeError;

use crate::node_call::{with_layout, NodeCall, NodeCalls};

/// torch objects looked up once.
pub struct Torch {
    pub tensor_type: Py<PyAny>,
    pub dtypes: Vec<(Py<PyAny>, DType)>,
    pub as_strided: Py<PyAny>,
    pub empty_strided: Py<PyAny>,
    pub empty: Py<PyAny>,
    /// `torch.cuda.current_stream` (the module exists without CUDA too).
    pub current_stream: Py<PyAny>,
    /// `torch._C._cuda_getCurrentRawStream(device)`, the current stream's
    /// handle as an int without building a `Stream` object (Inductor's
    /// `get_raw_stream`), when this torch has it.
    pub raw_stream: Option<Py<PyAny>>,
    /// `torch._C._dynamo.guards.assert_size_stride_grouped`, which checks
    /// many tensors' sizes and strides in one call (when this torch has it).
    pub assert_size_stride_grouped: Option<Py<PyAny>>,
    /// `torch._C._dynamo.guards._empty_strided_cpu(sizes, strides, dtype)`,
    /// Inductor's allocator for CPU outputs: half the cost of
    /// `torch.empty_strided`'s argument parsing.
    pub empty_strided_cpu: Option<Py<PyAny>>,
}

impl Torch {
    pub fn load(py: Python<'_>) -> PyResult<Torch> {
        let torch = py.import("torch")?;
        let dtypes = DType::ALL.iter().map(|d| Ok((torch.getattr(d.name())?.unbind(), *d))).collect::<PyResult<_>>()?;
        Ok(Torch {
            tensor_type: torch.getattr("Tensor")?.unbind(),
            dtypes,
            as_strided: torch.getattr("as_strided")?.unbind(),
            empty_strided: torch.getattr("empty_strided")?.unbind(),
            empty: torch.getattr("empty")?.unbind(),
            current_stream: torch.getattr("cuda")?.getattr("current_stream")?.unbind(),
            raw_stream: torch.getattr("_C")?.getattr("_cuda_getCurrentRawStream").ok().map(Bound::unbind),
            assert_size_stride_grouped: guards_function(&torch, "assert_size_stride_grouped"),
            empty_strided_cpu: guards_function(&torch, "_empty_strided_cpu"),
        })
    }

    pub fn dtype_of(&self, obj: &Bound<'_, PyAny>) -> Option<DType> {
        self.dtypes.iter().find(|(o, _)| o.bind(obj.py()).is(obj)).map(|(_, d)| *d)
    }

    pub fn dtype_object<'py>(&self, py: Python<'py>, dtype: DType) -> Option<Bound<'py, PyAny>> {
        self.dtypes.iter().find(|(_, d)| *d == dtype).map(|(o, _)| o.bind(py).clone())
    }
}

/// A tensor's version counter, `u64::MAX` when it has none (tensors
/// made under `torch.inference_mode` raise on `_version`).
pub fn version(item: &Bound<'_, PyAny>) -> u64 {
    item.getattr(intern!(item.py(), "_version")).ok().and_then(|v| v.extract().ok()).unwrap_or(u64::MAX)
}

/// A callable of `torch._C._dynamo.guards`, if this torch has it.
fn guards_function(torch: &Bound<'_, PyModule>, name: &str) -> Option<Py<PyAny>> {
    let f = torch.getattr("_C").ok()?.getattr("_dynamo").ok()?.getattr("guards").ok()?.getattr(name).ok()?;
    f.is_callable().then(|| f.unbind())
}

/// Read the metadata of each call argument. `with_ptr` is false for fake
/// tensors (explain), which have no storage.
pub fn call_args(
    torch: &Torch,
    args: &Bound<'_, PyAny>,
    with_ptr: bool,
    with_version: bool,
) -> PyResult<(Vec<CallArg>, Vec<Py<PyAny>>)> {
    let py = args.py();
    let tensor_type = torch.tensor_type.bind(py);
    let mut out = Vec::new();
    let mut objects = Vec::new();
    for item in args.try_iter()? {
        let mut item = item?;
        if item.is_instance(tensor_type)? {
            let dtype_obj = item.getattr(intern!(py, "dtype"))?;
            let dtype = torch.dtype_of(&dtype_obj).ok_or_else(|| {
                pyo3::exceptions::PyTypeError::new_err(format!(
                    "rdyn: input tensor has dtype {dtype_obj}, which rdyn does not support; use a real floating, integer or bool dtype"
                ))
            })?;
            let is_cpu: bool = item.getattr(intern!(py, "is_cpu"))?.extract()?;
            let device_name: String = if is_cpu {
                String::from("cpu")
            } else {
                item.getattr(intern!(py, "device"))?.getattr(intern!(py, "type"))?.extract()?
            };
            let device = match device_name.as_str() {
                "cpu" => Device::Cpu,
                "cuda" => Device::Cuda(0),
                "meta" => Device::Meta,
                other => {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "rdyn: tensors on device '{other}' are not supported; move them to the CPU"
                    )))
                }
            };
            let sizes: Vec<i64> = item.call_method0(intern!(py, "size"))?.extract()?;
            let strides: Vec<i64> = item.call_method0(intern!(py, "stride"))?.extract()?;
            let storage_offset: i64 = item.call_method0(intern!(py, "storage_offset"))?.extract()?;
            let mut ptr: usize = if with_ptr { item.call_method0(intern!(py, "data_ptr"))?.extract()? } else { 0 };
            if with_ptr && ptr == 0 && sizes.iter().product::<i64>() > 0 {
                // A ZeroTensor (torch.func's forward-mode AD makes them) has
                // no memory to read: the kernels read a materialized copy,
                // which `objects` keeps alive for the call.
                item = item.call_method0(intern!(py, "clone"))?;
                ptr = item.call_method0(intern!(py, "data_ptr"))?.extract()?;
            }
            let version = if with_version { version(&item) } else { u64::MAX };
            let identity = item.as_ptr() as usize;
            out.push(CallArg::Tensor(TensorArg {
                ptr,
                dtype,
                device,
                sizes,
                strides,
                storage_offset,
                version,
                identity,
            }));
        } else if let Ok(v) = item.extract::<i64>() {
            out.push(CallArg::Int(v));
        } else {
            out.push(CallArg::Other);
        }
        objects.push(item.unbind());
    }
    Ok((out, objects))
}

/// A tensor kept between calls for a [`rdyn_memplan::Storage::Pooled`]
/// buffer of this layout (on the graph's device).
pub struct Pooled {
    dtype: DType,
    sizes: Vec<i64>,
    strides: Vec<i64>,
    tensor: Py<PyAny>,
}

/// A compiled graph's kept tensors (at most [`POOL_LIMIT`]).
pub type Pool = std::sync::Mutex<Vec<Pooled>>;

/// Tensors a graph keeps between calls at most.
const POOL_LIMIT: usize = 64;

/// Tensors a graph keeps with the values of its plans' input-free steps
/// ([`rdyn_memplan::Storage::Kept`]), by plan address and buffer,
/// each with its data pointer.
pub type Kept = std::sync::Mutex<std::collections::HashMap<(usize, u32), (Py<PyAny>, usize)>>;

/// A call in progress: the torch tensors behind buffers.
pub struct PyHost<'py, 'a> {
    pub py: Python<'py>,
    pub torch: &'a Torch,
    pub runner: &'a Bound<'py, PyAny>,
    /// The tensor that owns each storage root, and the storage offset of
    /// that root's element 0 (`None` for an input tensor: its
    /// `storage_offset()` less the input buffer's offset, read only when a
    /// view of it is needed).
    pub tensors: Vec<Option<(Bound<'py, PyAny>, Option<i64>)>>,
    /// Whether that tensor was allocated here with exactly the buffer's
    /// layout (so it can be returned without checking).
    pub exact: Vec<bool>,
    pub error: Option<PyErr>,
    /// Buffers live on the CUDA device (PyTorch's current one).
    pub cuda: bool,
    /// Device scratch tensors kept alive for the call.
    pub scratch: Vec<Bound<'py, PyAny>>,
    /// The graph's kept tensors, and the buffers this call took from it or
    /// allocated for it (returned by [`PyHost::return_pooled`]).
    pub pool: &'a Pool,
    pub pooled: Vec<BufId>,
    /// The graph's kept tensors, and those this call allocated (kept by
    /// [`PyHost::keep_fresh`] once the call has succeeded).
    pub kept: &'a Kept,
    pub fresh_kept: Vec<(usize, BufId)>,
    /// The graph's library and eager nodes called from Rust.
    pub calls: &'a NodeCalls,
}

impl<'py> PyHost<'py, '_> {
    /// Give the call's pooled tensors back to the graph's pool (libraries
    /// only read them, so nothing else holds them now).
    pub fn return_pooled(&mut self, bufs: &[BufPlan]) {
        if self.pooled.is_empty() {
            return;
        }
        let Ok(mut pool) = self.pool.lock() else { return };
        for b in self.pooled.drain(..) {
            let Some((t, _)) = self.tensors[b.0 as usize].take() else { continue };
            if pool.len() < POOL_LIMIT {
                let plan = &bufs[b.0 as usize];
                pool.push(Pooled {
                    dtype: plan.dtype,
                    sizes: plan.sizes.clone(),
                    strides: plan.strides.clone(),
                    tensor: t.unbind(),
                });
            }
        }
    }

    /// Keep the tensors this (successful) call's input-free steps filled,
    /// for the next calls of their plans.
    pub fn keep_fresh(&mut self) {
        if self.fresh_kept.is_empty() {
            return;
        }
        let Ok(mut kept) = self.kept.lock() else { return };
        for (owner, b) in self.fresh_kept.drain(..) {
            let Some((t, _)) = &self.tensors[b.0 as usize] else { continue };
            // Its address too: later calls need no `data_ptr()` call.
            let Ok(ptr) = t.call_method0("data_ptr").and_then(|p| p.extract::<usize>()) else { continue };
            kept.entry((owner, b.0)).or_insert_with(|| (t.clone().unbind(), ptr));
        }
    }

    /// Make `t`, a tensor kept from an earlier call with exactly `plan`'s
    /// layout from its element 0, the tensor behind `buf` for this call.
    fn adopt(&mut self, buf: BufId, plan: &BufPlan, t: Bound<'py, PyAny>) {
        self.tensors[buf.0 as usize] = Some((t, Some(0)));
        self.exact[buf.0 as usize] = plan.offset == 0;
    }

    fn fail(&mut self, e: PyErr) -> RuntimeError {
        let msg = e.to_string();
        self.error = Some(e);
        RuntimeError::Host(msg)
    }

    /// A torch tensor for buffer `b` (the root tensor itself, or a view).
    pub fn tensor(&self, b: BufId, bufs: &[BufPlan]) -> PyResult<Bound<'py, PyAny>> {
        let root = storage_root(bufs, b);
        let Some((tensor, base)) = &self.tensors[root] else {
            return Err(crate::errors::of_kind(
                rdyn_runtime::ErrorKind::Internal,
                format!("rdyn internal error: buffer {b} has no torch tensor"),
            ));
        };
        let plan = &bufs[b.0 as usize];
        if root == b.0 as usize && self.exact[root] {
            return Ok(tensor.clone());
        }
        if root == b.0 as usize && plan.offset == 0 {
            let sizes: Vec<i64> = tensor.call_method0("size")?.extract()?;
            let strides: Vec<i64> = tensor.call_method0("stride")?.extract()?;
            if sizes == plan.sizes && strides == plan.strides {
                return Ok(tensor.clone());
            }
        }
        let base = match base {
            Some(base) => *base,
            None => tensor.call_method0(intern!(self.py, "storage_offset"))?.extract::<i64>()? - bufs[root].offset,
        };
        let args = PyTuple::new(
            self.py,
            [
                tensor.clone().into_any(),
                PyList::new(self.py, &plan.sizes)?.into_any(),
                PyList::new(self.py, &plan.strides)?.into_any(),
                (base + plan.offset).into_pyobject(self.py)?.into_any(),
            ],
        )?;
        self.torch.as_strided.bind(self.py).call1(args)
    }
}

impl Host for PyHost<'_, '_> {
    fn cuda_stream(&mut self) -> Result<usize, RuntimeError> {
        let result = (|| -> PyResult<usize> {
            // CUDA graphs run on device 0.
            match &self.torch.raw_stream {
                Some(raw) => raw.bind(self.py).call1((0,))?.extract(),
                None => self.torch.current_stream.bind(self.py).call0()?.getattr("cuda_stream")?.extract(),
            }
        })();
        result.map_err(|e| self.fail(e))
    }

    fn alloc_device(&mut self, bytes: usize) -> Result<usize, RuntimeError> {
        let result = (|| -> PyResult<(Bound<'_, PyAny>, usize)> {
            let kwargs = pyo3::types::PyDict::new(self.py);
            kwargs.set_item("dtype", self.torch.dtype_object(self.py, DType::U8))?;
            kwargs.set_item("device", "cuda")?;
            let t = self.torch.empty.bind(self.py).call((bytes.max(1),), Some(&kwargs))?;
            let ptr: usize = t.call_method0("data_ptr")?.extract()?;
            Ok((t, ptr))
        })();
        match result {
            Ok((t, ptr)) => {
                self.scratch.push(t);
                Ok(ptr)
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    fn alloc_pooled(&mut self, buf: BufId, plan: &BufPlan) -> Result<usize, RuntimeError> {
        let kept = self.pool.lock().ok().and_then(|mut pool| {
            let at = pool
                .iter()
                .position(|p| p.dtype == plan.dtype && p.sizes == plan.sizes && p.strides == plan.strides)?;
            Some(pool.swap_remove(at).tensor)
        });
        self.pooled.push(buf);
        let Some(tensor) = kept else { return self.alloc(buf, plan) };
        let t = tensor.into_bound(self.py);
        let ptr: usize = t.call_method0("data_ptr").and_then(|p| p.extract()).map_err(|e| self.fail(e))?;
        self.adopt(buf, plan, t);
        Ok(ptr)
    }

    fn alloc_kept(&mut self, buf: BufId, plan: &BufPlan, owner: Option<usize>) -> Result<(usize, bool), RuntimeError> {
        let Some(owner) = owner else { return Ok((self.alloc(buf, plan)?, false)) };
        let held =
            self.kept.lock().ok().and_then(|kept| kept.get(&(owner, buf.0)).map(|(t, p)| (t.clone_ref(self.py), *p)));
        let Some((tensor, ptr)) = held else {
            self.fresh_kept.push((owner, buf));
            return Ok((self.alloc(buf, plan)?, false));
        };
        self.adopt(buf, plan, tensor.into_bound(self.py));
        Ok((ptr, true))
    }

    fn alloc(&mut self, buf: BufId, plan: &BufPlan) -> Result<usize, RuntimeError> {
        let result = (|| -> PyResult<(Bound<'_, PyAny>, usize)> {
            let dtype = self
                .torch
                .dtype_object(self.py, plan.dtype)
                .ok_or_else(|| pyo3::exceptions::PyTypeError::new_err("dtype"))?;
            let (sizes, strides) = (PyTuple::new(self.py, &plan.sizes)?, PyTuple::new(self.py, &plan.strides)?);
            let t = match &self.torch.empty_strided_cpu {
                Some(empty) if !self.cuda => empty.bind(self.py).call1((sizes, strides, dtype))?,
                _ => {
                    let kwargs = pyo3::types::PyDict::new(self.py);
                    kwargs.set_item("dtype", dtype)?;
                    if self.cuda {
                        kwargs.set_item("device", "cuda")?;
                    }
                    self.torch.empty_strided.bind(self.py).call((sizes, strides), Some(&kwargs))?
                }
            };
            let ptr: usize = t.call_method0(intern!(self.py, "data_ptr"))?.extract()?;
            Ok((t, ptr))
        })();
        match result {
            Ok((t, ptr)) => {
                self.tensors[buf.0 as usize] = Some((t, Some(0)));
                self.exact[buf.0 as usize] = plan.offset == 0;
                Ok(ptr)
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    fn run_node(
        &mut self,
        node: u32,
        inputs: &[BufId],
        outputs: &[BufId],
        bufs: &[BufPlan],
        ptrs: &mut [usize],
    ) -> Result<(), RuntimeError> {
        let result = (|| -> PyResult<Vec<(Bound<'_, PyAny>, bool)>> {
            let tensors: Vec<Bound<'_, PyAny>> =
                inputs.iter().map(|b| self.tensor(*b, bufs)).collect::<PyResult<_>>()?;
            if let Some(call) = NodeCall::get(self.calls, self.runner, node)? {
                let results = call.call(self.py, tensors)?;
                if results.len() != outputs.len() {
                    return Ok(results.into_iter().map(|t| (t, false)).collect());
                }
                return results
                    .into_iter()
                    .zip(outputs)
                    .enumerate()
                    .map(|(k, (t, b))| {
                        let plan = &bufs[b.0 as usize];
                        if plan.sizes.contains(&0) {
                            // ATen may return None or a workspace for a result the metadata sizes 0.
                            let args = (node, k, t, plan.sizes.clone(), plan.strides.clone());
                            return Ok((self.runner.call_method1(intern!(self.py, "empty_result"), args)?, false));
                        }
                        let (t, exact) = with_layout(self.runner, node, t, &plan.sizes, &plan.strides)?;
                        Ok((t, exact && plan.offset == 0))
                    })
                    .collect();
            }
            let layouts: Vec<(Vec<i64>, Vec<i64>)> = outputs
                .iter()
                .map(|b| (bufs[b.0 as usize].sizes.clone(), bufs[b.0 as usize].strides.clone()))
                .collect();
            let results = self.runner.call_method1("run_node", (node, PyList::new(self.py, tensors)?, layouts))?;
            results.try_iter()?.map(|r| Ok((r?, false))).collect()
        })();
        let results = match result {
            Ok(results) => results,
            Err(e) => return Err(self.fail(e)),
        };
        if results.len() != outputs.len() {
            return Err(RuntimeError::Host(format!(
                "eager node {node} returned {} tensors, expected {}",
                results.len(),
                outputs.len()
            )));
        }
        for (b, (t, exact)) in outputs.iter().zip(results) {
            let read = (|| -> PyResult<(usize, i64)> {
                let ptr: usize = t.call_method0(intern!(self.py, "data_ptr"))?.extract()?;
                let so: i64 = t.call_method0(intern!(self.py, "storage_offset"))?.extract()?;
                Ok((ptr, so))
            })();
            let (mut ptr, so) = read.map_err(|e| self.fail(e))?;
            let mut t = t;
            if ptr == 0 && bufs[b.0 as usize].sizes.iter().product::<i64>() > 0 {
                // An eager node's ZeroTensor (`_efficientzerotensor`): its
                // readers need memory holding its zeros.
                t = t.call_method0(intern!(self.py, "clone")).map_err(|e| self.fail(e))?;
                ptr =
                    t.call_method0(intern!(self.py, "data_ptr")).and_then(|p| p.extract()).map_err(|e| self.fail(e))?;
            }
            ptrs[b.0 as usize] = ptr;
            self.tensors[b.0 as usize] = Some((t, Some(so)));
            self.exact[b.0 as usize] = exact;
        }
        Ok(())
    }
}
