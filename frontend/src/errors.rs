//! Rust errors as Python exceptions of their kind (`rdyn._errors`).

use pyo3::exceptions::{PyIndexError, PyNotImplementedError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use rdyn_runtime::{ErrorKind, RuntimeError};

pub(crate) fn to_py(e: RuntimeError) -> PyErr {
    let msg = format!("rdyn: {e}");
    match e.kind() {
        ErrorKind::OutOfMemory => out_of_memory(msg),
        kind => of_kind(kind, msg),
    }
}

/// The `rdyn._errors` exception of `kind` (each subclasses the builtin
/// eager code catches: `ValueError`, `NotImplementedError`, `IndexError`,
/// `RuntimeError`), or that builtin where the module cannot be imported.
pub(crate) fn of_kind(kind: ErrorKind, msg: String) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("rdyn._errors")
            .and_then(|m| m.getattr("BY_KIND"))
            .and_then(|table| table.get_item(kind.name()))
            .and_then(|class| class.call1((msg.clone(),)));
        match made {
            Ok(err) => PyErr::from_value(err),
            Err(_) => match kind {
                ErrorKind::Input => PyValueError::new_err(msg),
                ErrorKind::Unsupported => PyNotImplementedError::new_err(msg),
                ErrorKind::DeviceCheck => PyIndexError::new_err(msg),
                _ => PyRuntimeError::new_err(msg),
            },
        }
    })
}

/// `torch.OutOfMemoryError` (a `RuntimeError`, as eager's allocator
/// raises), or a plain `RuntimeError` where torch lacks it.
fn out_of_memory(msg: String) -> PyErr {
    Python::attach(|py| {
        match py.import("torch").and_then(|t| t.getattr("OutOfMemoryError")).and_then(|c| c.call1((msg.clone(),))) {
            Ok(err) => PyErr::from_value(err),
            Err(_) => PyRuntimeError::new_err(msg),
        }
    })
}
