//! Import: the plain-data form of an FX graph (built by
//! `python/rdyn/_import.py`) → [`rdyn_ir::graph::Graph`].
//!
//! Every value is a tagged tuple: `("tensor", 3)`, `("int", expr)`, … and
//! every size an expression: an int, `("sym", k)`, or `(op, a, b)` with op in
//! add, mul, floordiv, mod.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use rdyn_ir::graph::{Arg, DerivedSym, Graph, Input, Node, SymFloat, SymFn, TensorMeta, ValueId};
use rdyn_ir::op::parse_target;
use rdyn_ir::{Ctx, DType, Device, Expr, Sym};

fn err(msg: impl Into<String>) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(format!("rdyn graph import: {}", msg.into()))
}

pub fn expr(obj: &Bound<'_, PyAny>) -> PyResult<Expr> {
    if let Ok(v) = obj.extract::<i64>() {
        return Ok(Expr::c(v));
    }
    let tuple = obj.cast::<PyTuple>().map_err(|_| err(format!("bad size expression {obj}")))?;
    let tag: String = tuple.get_item(0)?.extract()?;
    let ctx = Ctx::default();
    match tag.as_str() {
        "sym" => Ok(Expr::sym(Sym(tuple.get_item(1)?.extract()?))),
        "add" | "mul" | "floordiv" | "mod" => {
            let a = expr(&tuple.get_item(1)?)?;
            let b = expr(&tuple.get_item(2)?)?;
            Ok(match tag.as_str() {
                "add" => a.add(&b),
                "mul" => a.mul(&b),
                "floordiv" => a.floordiv(&b, &ctx),
                _ => a.modulo(&b, &ctx),
            })
        }
        other => Err(err(format!("unknown expression tag {other}"))),
    }
}

/// A float computed from sizes: a float, `("int", expr)`, or `(op, a, b)`
/// with op in add, mul, div.
fn sym_float(obj: &Bound<'_, PyAny>) -> PyResult<SymFloat> {
    if let Ok(v) = obj.extract::<f64>() {
        return Ok(SymFloat::Const(v));
    }
    let tuple = obj.cast::<PyTuple>().map_err(|_| err(format!("bad float expression {obj}")))?;
    let tag: String = tuple.get_item(0)?.extract()?;
    if tag == "int" {
        return Ok(SymFloat::Int(expr(&tuple.get_item(1)?)?));
    }
    let a = Box::new(sym_float(&tuple.get_item(1)?)?);
    let b = Box::new(sym_float(&tuple.get_item(2)?)?);
    match tag.as_str() {
        "add" => Ok(SymFloat::Add(a, b)),
        "mul" => Ok(SymFloat::Mul(a, b)),
        "div" => Ok(SymFloat::Div(a, b)),
        other => Err(err(format!("unknown float expression tag {other}"))),
    }
}

fn exprs(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Expr>> {
    obj.try_iter()?.map(|item| expr(&item?)).collect()
}

pub fn arg(obj: &Bound<'_, PyAny>) -> PyResult<Arg> {
    let tuple = obj.cast::<PyTuple>().map_err(|_| err(format!("bad argument {obj}")))?;
    let tag: String = tuple.get_item(0)?.extract()?;
    let item = || tuple.get_item(1);
    Ok(match tag.as_str() {
        "none" => Arg::None,
        "bool" => Arg::Bool(item()?.extract()?),
        "int" => Arg::Int(expr(&item()?)?),
        "float" => Arg::Float(item()?.extract()?),
        "symfloat" => Arg::SymFloat(sym_float(&item()?)?),
        "str" => Arg::Str(item()?.extract()?),
        "dtype" => {
            let name: String = item()?.extract()?;
            match DType::from_name(&name) {
                Some(d) => Arg::DType(d),
                None => Arg::Str(name),
            }
        }
        "device" => {
            let name: String = item()?.extract()?;
            match Device::parse(&name) {
                Some(d) => Arg::Device(d),
                None => Arg::Str(name),
            }
        }
        "tensor" => Arg::Tensor(ValueId(item()?.extract()?)),
        "list" => Arg::List(item()?.try_iter()?.map(|a| arg(&a?)).collect::<PyResult<_>>()?),
        other => return Err(err(format!("unknown argument tag {other}"))),
    })
}

/// Build the graph IR from the dict `_import.py` produces.
pub fn graph(data: &Bound<'_, PyAny>) -> PyResult<Graph> {
    let mut graph = Graph { sym_names: data.get_item("sym_names")?.extract()?, ..Graph::default() };
    for derived in data.get_item("derived_syms")?.try_iter()? {
        let derived = derived?;
        let t = derived.cast::<PyTuple>()?;
        let name: String = t.get_item(1)?.extract()?;
        graph.derived_syms.push(DerivedSym {
            sym: Sym(t.get_item(0)?.extract()?),
            func: SymFn::parse(&name).ok_or_else(|| err(format!("unknown size function {name}")))?,
            args: exprs(&t.get_item(2)?)?,
        });
    }
    for value in data.get_item("values")?.try_iter()? {
        let value = value?;
        let t = value.cast::<PyTuple>()?;
        let dtype_name: String = t.get_item(3)?.extract()?;
        let device_name: String = t.get_item(4)?.extract()?;
        graph.values.push(TensorMeta {
            sizes: exprs(&t.get_item(0)?)?,
            strides: exprs(&t.get_item(1)?)?,
            offset: expr(&t.get_item(2)?)?,
            dtype: DType::from_name(&dtype_name).ok_or_else(|| err(format!("unsupported dtype {dtype_name}")))?,
            device: Device::parse(&device_name).ok_or_else(|| err(format!("unsupported device {device_name}")))?,
        });
    }
    for input in data.get_item("inputs")?.try_iter()? {
        let input = input?;
        let t = input.cast::<PyTuple>()?;
        let tag: String = t.get_item(0)?.extract()?;
        graph.inputs.push(match tag.as_str() {
            "tensor" => Input::Tensor(ValueId(t.get_item(1)?.extract()?)),
            "symint" => Input::SymInt(Sym(t.get_item(1)?.extract()?)),
            _ => Input::Opaque,
        });
    }
    for node in data.get_item("nodes")?.try_iter()? {
        let node = node?;
        let t = node.cast::<PyTuple>()?;
        let target: String = t.get_item(1)?.extract()?;
        let (op, _) = parse_target(&target);
        let args = t.get_item(2)?.try_iter()?.map(|a| arg(&a?)).collect::<PyResult<_>>()?;
        let mut kwargs = Vec::new();
        for kv in t.get_item(3)?.try_iter()? {
            let kv = kv?;
            let kv = kv.cast::<PyTuple>()?;
            kwargs.push((kv.get_item(0)?.extract()?, arg(&kv.get_item(1)?)?));
        }
        let outputs: Vec<u32> = t.get_item(4)?.extract()?;
        graph.nodes.push(Node {
            index: t.get_item(0)?.extract()?,
            op,
            target,
            args,
            kwargs,
            outputs: outputs.into_iter().map(ValueId).collect(),
        });
    }
    let outputs = data.get_item("outputs")?;
    let outputs = outputs.cast::<PyList>()?;
    graph.outputs = outputs.iter().map(|a| arg(&a)).collect::<PyResult<_>>()?;
    if let Ok(free) = data.get_item("free_layout") {
        graph.free_layout = free.extract()?;
    }
    Ok(graph)
}
