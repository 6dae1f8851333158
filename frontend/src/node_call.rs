//! Library and eager nodes called from Rust.
//!
//! A node whose tensors are top-level arguments of its op (a position or a
//! keyword) and which reads no int-valued node (most library calls: mm,
//! addmm, convolution, attention) is called here directly: its op's C++
//! binding with the node's constant arguments and this call's tensors in
//! their slots (`GraphRunner.fast_node` gives the op, the constant arguments,
//! the tensor slots and the output paths once). Its results are taken apart and
//! checked against the metadata's layouts here too. Going through the Python
//! runner for each such call cost about 1.7 µs more per node (a Python frame, the
//! layouts converted to Python lists, the outputs walked and checked in Python),
//! which a transformer's 50 or more library calls per forward pay every
//! call. Other nodes keep the runner's general path (`run_node`), which computes
//! the scalars such a node reads per call: a size, stride or offset of an input
//! from the input, of a computed value from its metadata's expression over the
//! call's size symbols, and float scalars (`size / 5`, an upsampling scale under
//! dynamic shapes). Library calls and fallbacks whose op has only a default (and
//! `out`) overload call its C++ binding (`torch.convolution`,
//! `torch._C._nn.max_pool2d_with_indices`) rather than the boxed `OpOverload`
//! (`python/rdyn/_runner.py`'s `_binding`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

/// Where a tensor goes in a node's call.
enum Slot {
    Arg(usize),
    Kwarg(Py<PyString>),
}

/// A node's op and constant arguments, and where its tensors and outputs are.
pub struct NodeCall {
    target: Py<PyAny>,
    /// The positional arguments, tensors' slots holding `None`.
    args: Vec<Py<PyAny>>,
    kwargs: Option<Py<PyDict>>,
    /// The slot of each tensor, in the order the node mentions them.
    slots: Vec<Slot>,
    /// Each output's index path into the op's result.
    outputs: Vec<Vec<usize>>,
}

/// What `runner.fast_node` returns for a node with a fast form.
type Found<'py> = (Bound<'py, PyAny>, Bound<'py, PyTuple>, Bound<'py, PyDict>, Vec<Bound<'py, PyAny>>, Vec<Vec<usize>>);

/// Each node's call as loaded from the runner (`None`: the node takes the
/// general path), per compiled graph.
pub type NodeCalls = Mutex<HashMap<u32, Option<Arc<NodeCall>>>>;

impl NodeCall {
    /// The node's call, loaded from the runner the first time it is asked for.
    pub fn get(calls: &NodeCalls, runner: &Bound<'_, PyAny>, node: u32) -> PyResult<Option<Arc<NodeCall>>> {
        if let Some(call) = calls.lock().ok().and_then(|c| c.get(&node).cloned()) {
            return Ok(call);
        }
        let call = NodeCall::load(runner, node)?.map(Arc::new);
        if let Ok(mut c) = calls.lock() {
            c.insert(node, call.clone());
        }
        Ok(call)
    }

    /// `runner.fast_node(node)`: `None`, or `(op, args, kwargs, slots,
    /// output paths)`.
    fn load(runner: &Bound<'_, PyAny>, node: u32) -> PyResult<Option<NodeCall>> {
        let py = runner.py();
        let found = runner.call_method1(intern!(py, "fast_node"), (node,))?;
        if found.is_none() {
            return Ok(None);
        }
        let (target, args, kwargs, slots, outputs): Found<'_> = found.extract()?;
        let slots = slots
            .into_iter()
            .map(|s| match s.cast::<PyString>() {
                Ok(name) => Ok(Slot::Kwarg(name.clone().unbind())),
                Err(_) => Ok(Slot::Arg(s.extract()?)),
            })
            .collect::<PyResult<_>>()?;
        Ok(Some(NodeCall {
            target: target.unbind(),
            args: args.iter().map(Bound::unbind).collect(),
            kwargs: (!kwargs.is_empty()).then(|| kwargs.unbind()),
            slots,
            outputs,
        }))
    }

    /// Call the op on `tensors` (in slot order); returns each output.
    pub fn call<'py>(&self, py: Python<'py>, tensors: Vec<Bound<'py, PyAny>>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let mut args: Vec<Bound<'py, PyAny>> = self.args.iter().map(|a| a.bind(py).clone()).collect();
        let mut kwargs = self.kwargs.as_ref().map(|k| k.bind(py).clone());
        let mut copied = false;
        for (slot, tensor) in self.slots.iter().zip(tensors) {
            match slot {
                Slot::Arg(pos) => args[*pos] = tensor,
                Slot::Kwarg(name) => {
                    let dict = match kwargs.take() {
                        Some(d) if copied => d,
                        Some(d) => d.copy()?,
                        None => PyDict::new(py),
                    };
                    copied = true;
                    dict.set_item(name.bind(py), tensor)?;
                    kwargs = Some(dict);
                }
            }
        }
        let result = self.target.bind(py).call(PyTuple::new(py, args)?, kwargs.as_ref())?;
        self.outputs.iter().map(|path| path.iter().try_fold(result.clone(), |t, &i| t.get_item(i))).collect()
    }
}

/// `t`, an eager result for a buffer of `sizes` and `strides`, with that
/// layout (a copy through `runner.with_layout` if the kernel chose other
/// strides), and whether its layout is exactly that.
pub fn with_layout<'py>(
    runner: &Bound<'py, PyAny>,
    node: u32,
    t: Bound<'py, PyAny>,
    sizes: &[i64],
    strides: &[i64],
) -> PyResult<(Bound<'py, PyAny>, bool)> {
    let py = runner.py();
    let have: Vec<i64> = t.call_method0(intern!(py, "size"))?.extract()?;
    if have != sizes {
        return Err(crate::errors::of_kind(
            rdyn_runtime::ErrorKind::Internal,
            format!("rdyn: eager result of node {node} has shape {have:?}, metadata said {sizes:?}"),
        ));
    }
    let have: Vec<i64> = t.call_method0(intern!(py, "stride"))?.extract()?;
    if have == strides {
        return Ok((t, true));
    }
    // A size-1 dim's stride is never used.
    if have.iter().zip(strides).zip(sizes).all(|((h, w), s)| h == w || *s <= 1) {
        return Ok((t, false));
    }
    let copy = runner.call_method1(intern!(py, "with_layout"), (t, sizes.to_vec(), strides.to_vec()))?;
    Ok((copy, true))
}
