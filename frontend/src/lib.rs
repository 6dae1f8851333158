//! `rdyn._rdyn`: the Python extension. Owns the boundary: importing FX graphs,
//! reading tensors, and making sure no Rust panic reaches Python (every entry
//! point catches unwinding and raises `RuntimeError` instead of pyo3's
//! `PanicException`, which `except Exception` would not catch).
//!
//! Modules: `import.rs` (the plain-data graph → `rdyn_ir::graph::Graph`),
//! `host.rs` (reading tensors, allocating outputs, the runtime's `Host` on
//! torch), `fast.rs` (the repeat-call fast path), `node_call.rs` (library and
//! eager nodes called from Rust). `explain()` (`describe`) shows each
//! library call and fallback with its tensors' sizes and strides (a library
//! call's inputs may be laid out for it, channels-last).
//!
//! Errors reach Python by their kind (`RuntimeError::kind`), as the classes of
//! `rdyn._errors`: a user error (bad input shape or dtype, naming the input) →
//! `InputError` (a `ValueError`); a kernel's index check → `KernelCheckError`
//! (an `IndexError` and a `RuntimeError`); a kernel the device's generator
//! cannot express → `UnsupportedError` (a `NotImplementedError`), on which the
//! Python backend runs the graph eagerly; a missing device →
//! `UnavailableError`; out of memory → `torch.OutOfMemoryError`; anything else,
//! panics included, → `InternalError` (a `RuntimeError`).
//! The Python package around this extension (`python/rdyn/`): `backend.py`
//! (the `torch.compile` backend, AOTAutograd, `RDYN_STRICT`), `_import.py` (the
//! FX graph as tagged tuples; data-dependent sizes rejected), `_runner.py` (the
//! host side of a call), `_cache.py` (the on-disk cache of inference ATen
//! graphs), `config.py` (options and `RDYN_*` variables), `explain.py`.

mod errors;
mod fast;
mod host;
mod import;
mod node_call;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use rdyn_memplan::{MemPlan, OutputPlan, Storage};
use rdyn_runtime::compiled::{execute, CompiledGraph as RtGraph, Selected};
use rdyn_runtime::devices::cpu as cpu_device;
use rdyn_runtime::devices::{self, DeviceOptions, IndexChecks};
use rdyn_runtime::guard::CallArg;
use rdyn_runtime::stats::STATS;
use rdyn_runtime::ErrorKind;

use errors::{of_kind, to_py};
use fast::LastCall;
use host::{call_args, PyHost, Torch};

static TORCH: OnceLock<Torch> = OnceLock::new();

fn torch(py: Python<'_>) -> PyResult<&'static Torch> {
    if let Some(t) = TORCH.get() {
        return Ok(t);
    }
    let loaded = Torch::load(py)?;
    Ok(TORCH.get_or_init(|| loaded))
}

/// Run `f`, turning a panic into a Python `RuntimeError`.
fn guarded<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".to_string());
            Err(of_kind(ErrorKind::Internal, format!("rdyn internal error (please report): {msg}")))
        }
    }
}

fn log_enabled(topic: &str) -> bool {
    static TOPICS: OnceLock<String> = OnceLock::new();
    let topics = TOPICS.get_or_init(|| std::env::var("RDYN_LOG").unwrap_or_default());
    topics.split(',').any(|t| t.trim() == topic || t.trim() == "all")
}

/// The next graph's number: logs name graphs `g0`, `g1`, ...
static NEXT_GRAPH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A call's inputs as the guards read them, labelled: `input 0: float32
/// sizes [4, 8] strides [8, 1], input 1: int 5`.
fn describe_call(call: &[CallArg]) -> String {
    let parts: Vec<String> = call
        .iter()
        .enumerate()
        .map(|(k, arg)| match arg {
            CallArg::Tensor(t) => format!(
                "input {k}: {} sizes {:?} strides {:?} offset {}",
                t.dtype.name(),
                t.sizes,
                t.strides,
                t.storage_offset
            ),
            CallArg::Int(v) => format!("input {k}: int {v}"),
            CallArg::Other => format!("input {k}: other"),
        })
        .collect();
    parts.join(", ")
}

/// A graph compiled by rdyn; calling it runs the graph.
#[pyclass(module = "rdyn._rdyn")]
struct CompiledGraph {
    /// Its number, for logs (`g3`).
    id: u64,
    inner: RtGraph,
    runner: Py<PyAny>,
    /// Library calls' input tensors kept between calls.
    pool: host::Pool,
    /// Tensors holding the values of input-free steps, per plan.
    kept: host::Kept,
    /// Library and eager nodes called from Rust, loaded on first use.
    calls: node_call::NodeCalls,
    /// The previous call, for the repeat-call fast path.
    last: std::sync::Mutex<Option<LastCall>>,
}

#[pymethods]
impl CompiledGraph {
    #[new]
    #[pyo3(signature = (graph_data, runner, device = "cpu", index_checks = "device", cuda_gemm = "cublas"))]
    fn new(
        graph_data: &Bound<'_, PyAny>,
        runner: Py<PyAny>,
        device: &str,
        index_checks: &str,
        cuda_gemm: &str,
    ) -> PyResult<Self> {
        guarded(|| {
            let index_checks = match index_checks {
                "device" => IndexChecks::Device,
                "sync" => IndexChecks::Sync,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "rdyn: unknown index_checks {other:?}; use 'device' or 'sync'"
                    )))
                }
            };
            let cublas = match cuda_gemm {
                "cublas" => true,
                "aten" => false,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "rdyn: unknown cuda_gemm {other:?}; use 'cublas' or 'aten'"
                    )))
                }
            };
            let options = DeviceOptions { index_checks, cublas };
            let device = devices::by_name(device, options).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "rdyn: unknown device {device:?}; use one of {}",
                    devices::NAMES.map(|n| format!("'{n}'")).join(", ")
                ))
            })?;
            let graph = import::graph(graph_data)?;
            let inner = RtGraph::new(graph, device);
            Ok(CompiledGraph {
                id: NEXT_GRAPH.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                inner,
                runner,
                pool: host::Pool::default(),
                kept: host::Kept::default(),
                calls: Default::default(),
                last: Default::default(),
            })
        })
    }

    /// Run on a list of inputs; returns the list of outputs.
    fn __call__<'py>(&self, py: Python<'py>, args: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        guarded(|| {
            let torch = torch(py)?;
            // Only the wgpu input cache reads tensors' version counters.
            let with_version = self.inner.caps().input_versions;
            // The previous call's record (unless another thread's call holds it).
            let mut last = self.last.try_lock().ok();
            if let Some(record) = last.as_deref_mut().and_then(Option::as_mut) {
                if let Some(objects) = record.repeat(torch, args, with_version)? {
                    STATS.guard_hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if log_enabled("guards") {
                        eprintln!("[rdyn guards] g{} hit: the previous call's dtypes, sizes and strides", self.id);
                    }
                    let selected = record.selected.clone();
                    return self.run(py, torch, &selected, record.args(), &objects);
                }
            }
            let (call, objects) = call_args(torch, args, true, with_version)?;
            let objects: Vec<Bound<'py, PyAny>> = objects.into_iter().map(|o| o.into_bound(py)).collect();
            let mut key = Vec::new();
            let misses = STATS.guard_misses.load(std::sync::atomic::Ordering::Relaxed);
            let selected = self.inner.select(&call, &mut key).map_err(to_py)?;
            if log_enabled("guards") {
                let missed = STATS.guard_misses.load(std::sync::atomic::Ordering::Relaxed) != misses;
                let what = match (&selected, missed) {
                    (Selected::Generic(_), _) => "the shape-generic program for",
                    (_, true) => "miss, new specialization for",
                    (_, false) => "hit, specialization for",
                };
                eprintln!(
                    "[rdyn guards] g{} {what} {} ({} specializations)",
                    self.id,
                    describe_call(&call),
                    self.inner.specializations().len()
                );
            }
            if let Some(slot) = last.as_deref_mut() {
                *slot = LastCall::record(py, torch, &selected, &call, self.inner.guard_offsets())?;
            }
            drop(last);
            self.run(py, torch, &selected, &call, &objects)
        })
    }

    /// Build (without running) the specialization for inputs with this
    /// metadata (real or fake tensors) and describe it: a dict with the loop
    /// IR, the kernels' sources and node counts.
    fn describe<'py>(&self, py: Python<'py>, args: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        guarded(|| {
            let selected = self.built(py, args)?;
            let out = PyDict::new(py);
            out.set_item("graph", self.inner.graph.to_string())?;
            let kernels = PyList::empty(py);
            for step in selected.planned().device.describe(selected.mem()) {
                kernels.append((step.name, step.device, step.source))?;
            }
            out.set_item("kernels", kernels)?;
            if let Selected::Spec(spec) = &selected {
                out.set_item("ir", spec.program.to_string())?;
                out.set_item("nodes_native", spec.counts.native)?;
                out.set_item("nodes_extern", spec.counts.extern_)?;
                out.set_item("nodes_fallback", spec.counts.fallback)?;
                out.set_item("fallback_ops", spec.counts.fallback_ops.clone())?;
                out.set_item("fallback_reasons", spec.counts.fallback_reasons.clone())?;
            }
            Ok(out)
        })
    }

    /// Per output, the strides a call with inputs of this metadata (real
    /// or fake tensors) returns it with: a tuple of ints, or None for an
    /// output that is no tensor or of a shape-generic program. Builds the
    /// specialization, as `describe` does; `backend.py` reports these to
    /// AOTAutograd for the outputs whose layout rdyn chose.
    fn output_strides<'py>(&self, py: Python<'py>, args: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        guarded(|| {
            let selected = self.built(py, args)?;
            let plan = selected.mem();
            let list = PyList::empty(py);
            for out in &plan.outputs {
                match (out, &selected) {
                    (OutputPlan::Buffer(b), Selected::Spec(_)) => {
                        list.append(PyTuple::new(py, &plan.buffers[b.0 as usize].strides)?)?
                    }
                    _ => list.append(py.None())?,
                }
            }
            Ok(list)
        })
    }

    /// Number of cached specializations.
    fn specializations(&self) -> usize {
        self.inner.specializations().len()
    }

    /// The graph's name in logs (`g3`).
    #[getter]
    fn name(&self) -> String {
        format!("g{}", self.id)
    }

    /// The ATen graph in rdyn's text form.
    fn graph_text(&self) -> String {
        self.inner.graph.to_string()
    }
}

impl CompiledGraph {
    /// The specialization for inputs with this metadata (real or fake
    /// tensors), built if it is not yet: what `describe` and
    /// `output_strides` read.
    fn built(&self, py: Python<'_>, args: &Bound<'_, PyAny>) -> PyResult<Selected> {
        let (call, _) = call_args(torch(py)?, args, false, false)?;
        let mut key = Vec::new();
        self.inner.select_for(&call, &mut key, true).map_err(to_py)
    }

    /// Run `selected` on a call's arguments (`objects` the Python objects).
    fn run<'py>(
        &self,
        py: Python<'py>,
        torch: &Torch,
        selected: &Selected,
        call: &[CallArg],
        objects: &[Bound<'py, PyAny>],
    ) -> PyResult<Bound<'py, PyList>> {
        let runner = self.runner.bind(py);
        let n = selected.mem().buffers.len();
        let mut host = PyHost {
            py,
            torch,
            runner,
            tensors: vec![None; n],
            exact: vec![false; n],
            error: None,
            cuda: self.inner.caps().cuda_tensors,
            scratch: Vec::new(),
            pool: &self.pool,
            pooled: Vec::new(),
            kept: &self.kept,
            fresh_kept: Vec::new(),
            calls: &self.calls,
        };
        for (k, buf) in selected.mem().buffers.iter().enumerate() {
            if let Storage::Input(n) = buf.storage {
                if let (Some(obj), Some(CallArg::Tensor(_))) = (objects.get(n), call.get(n)) {
                    host.tensors[k] = Some((obj.clone(), None));
                }
            }
        }
        let result = execute(selected, call, &mut host);
        host.return_pooled(&selected.mem().buffers);
        if let Some(err) = host.error.take() {
            return Err(err);
        }
        result.map_err(to_py)?;
        host.keep_fresh();
        outputs(&host, selected.mem())
    }
}

fn outputs<'py>(host: &PyHost<'py, '_>, plan: &MemPlan) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(host.py);
    for out in &plan.outputs {
        match out {
            OutputPlan::Buffer(b) => list.append(host.tensor(*b, &plan.buffers)?)?,
            OutputPlan::Int(v) => list.append(*v)?,
            OutputPlan::None => list.append(host.py.None())?,
        }
    }
    Ok(list)
}

#[pyfunction]
fn stats<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    let snap = STATS.snapshot();
    let out = PyDict::new(py);
    for (name, value) in snap.counters {
        out.set_item(name, value)?;
    }
    out.set_item("compile_seconds", snap.compile_seconds)?;
    out.set_item("fallback_ops", snap.fallback_ops)?;
    if !snap.profile.is_empty() {
        out.set_item("profile", snap.profile)?;
    }
    Ok(out)
}

/// The wgpu adapter rdyn uses (opening it if needed), or a RuntimeError
/// saying why there is none.
#[pyfunction]
fn wgpu_adapter() -> PyResult<String> {
    guarded(|| rdyn_runtime::devices::wgpu_adapter().map_err(to_py))
}

#[pyfunction]
fn reset_stats() {
    STATS.reset();
}

/// How many worker threads CPU kernels use.
#[pyfunction]
fn num_threads() -> usize {
    cpu_device::threads()
}

/// Run float32/float64 matrix products through the Fortran `sgemm_` and
/// `dgemm_` at these addresses (torch's own BLAS, found by
/// `rdyn._aten_libs`). Returns whether they were taken.
#[pyfunction]
#[pyo3(signature = (sgemm, dgemm, sgemm_batch=0, dgemm_batch=0))]
fn use_blas(sgemm: usize, dgemm: usize, sgemm_batch: usize, dgemm_batch: usize) -> bool {
    let entries = cpu_device::BlasEntries { sgemm, dgemm, sgemm_batch, dgemm_batch };
    // SAFETY: `rdyn._aten_libs` passes the LP64 routines of libtorch_cpu,
    // which torch keeps loaded for the life of the process.
    unsafe { cpu_device::use_blas(entries) }
}

/// Whether batched float32 products run as one call of a BLAS batch routine
/// (MKL's `sgemm_batch_`).
#[pyfunction]
fn blas_batched() -> bool {
    cpu_device::blas_batched()
}

/// Whether a product that both BLAS and the `gemm` crate can run goes to the
/// faster of the two, timed on its shape's first call (the default), or to
/// BLAS (`RDYN_BLAS=1`).
#[pyfunction]
fn measure_gemms(on: bool) {
    cpu_device::measure_gemms(on)
}

/// The product shapes timed so far: `(m, n, k, batch, library, blas_us,
/// crate_us)`, library "blas" or "gemm" (the crate), with the fastest run of
/// each.
#[pyfunction]
fn gemm_choices() -> Vec<(i64, i64, i64, i64, &'static str, f64, f64)> {
    cpu_device::gemm_choices()
}

/// Which thread pool runs CPU kernels: "openmp" (ATen's own team) or "rayon".
#[pyfunction]
fn thread_pool() -> &'static str {
    cpu_device::thread_backend()
}

/// Run CPU kernels on the OpenMP team of the libgomp torch loaded, given the
/// addresses of its `GOMP_parallel`, `omp_get_max_threads` and
/// `omp_get_thread_num` (found by `rdyn._aten_libs`). Returns whether they
/// were taken (only the first call's are).
#[pyfunction]
fn use_openmp(parallel: usize, max_threads: usize, thread_num: usize) -> bool {
    let gomp = cpu_device::GompEntries { parallel, max_threads, thread_num };
    // SAFETY: `rdyn._aten_libs` passes those functions of the libgomp that
    // torch keeps loaded for the life of the process.
    unsafe { cpu_device::use_openmp(gomp) }
}

/// Make the importing thread (the one that runs compiled graphs, as a
/// rule) worker 0 of rayon's global pool. Kernels it launches then run in
/// place, and it works on its share of them, instead of handing each
/// kernel to the pool and sleeping until it is done: on small machines
/// that sleep and wake-up cost tens of microseconds per kernel. Other
/// threads still use the pool as before. With one thread there would be no
/// worker left for them, so the default pool is kept.
fn join_thread_pool() {
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if threads >= 2 {
        // Fails only when the pool already exists; it then stays as it is.
        let _ = rayon::ThreadPoolBuilder::new().num_threads(threads).use_current_thread().build_global();
    }
}

#[pymodule]
fn _rdyn(m: &Bound<'_, PyModule>) -> PyResult<()> {
    join_thread_pool();
    m.add_class::<CompiledGraph>()?;
    m.add_function(wrap_pyfunction!(stats, m)?)?;
    m.add_function(wrap_pyfunction!(reset_stats, m)?)?;
    m.add_function(wrap_pyfunction!(num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(thread_pool, m)?)?;
    m.add_function(wrap_pyfunction!(use_openmp, m)?)?;
    m.add_function(wrap_pyfunction!(use_blas, m)?)?;
    m.add_function(wrap_pyfunction!(blas_batched, m)?)?;
    m.add_function(wrap_pyfunction!(measure_gemms, m)?)?;
    m.add_function(wrap_pyfunction!(gemm_choices, m)?)?;
    m.add_function(wrap_pyfunction!(wgpu_adapter, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
