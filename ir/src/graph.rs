//! The graph IR: an ATen FX graph as plain data.
//!
//! The frontend fills this from TorchDynamo/AOTAutograd's FX graph. Every
//! tensor value carries the FakeTensor metadata PyTorch computed (sizes,
//! strides, dtype, device), so lowering never re-derives shapes or type
//! promotion: it trusts PyTorch's own answer.

use std::fmt;

use crate::dtype::{DType, Device};
use crate::expr::{Expr, Sym};
use crate::op::Op;
pub use crate::sym::{DerivedSym, SymFloat, SymFn};

/// A tensor value in the graph (`%3`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// Layout and type of one tensor value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorMeta {
    pub sizes: Vec<Expr>,
    pub strides: Vec<Expr>,
    pub offset: Expr,
    pub dtype: DType,
    pub device: Device,
}

impl TensorMeta {
    pub fn ndim(&self) -> usize {
        self.sizes.len()
    }

    pub fn numel(&self) -> Expr {
        self.sizes.iter().fold(Expr::c(1), |acc, s| acc.mul(s))
    }
}

/// A node argument, as FX holds it.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    None,
    Bool(bool),
    /// An integer, possibly symbolic (a SymInt).
    Int(Expr),
    Float(f64),
    /// A float computed from sizes (a SymFloat).
    SymFloat(SymFloat),
    Str(String),
    DType(DType),
    Device(Device),
    Tensor(ValueId),
    List(Vec<Arg>),
}

impl Arg {
    pub fn as_tensor(&self) -> Option<ValueId> {
        match self {
            Arg::Tensor(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Arg::Int(e) => e.as_const(),
            Arg::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }

    pub fn as_expr(&self) -> Option<Expr> {
        match self {
            Arg::Int(e) => Some(e.clone()),
            Arg::Bool(b) => Some(Expr::c(*b as i64)),
            _ => None,
        }
    }

    pub fn as_float(&self) -> Option<f64> {
        match self {
            Arg::Float(x) => Some(*x),
            Arg::Int(e) => e.as_const().map(|v| v as f64),
            Arg::Bool(b) => Some(*b as i64 as f64),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Arg::Bool(b) => Some(*b),
            Arg::Int(e) => e.as_const().map(|v| v != 0),
            _ => None,
        }
    }

    pub fn as_list(&self) -> Option<&[Arg]> {
        match self {
            Arg::List(items) => Some(items),
            _ => None,
        }
    }

    pub fn is_none(&self) -> bool {
        matches!(self, Arg::None)
    }

    /// Every tensor value this argument mentions, in order.
    pub fn tensors(&self, out: &mut Vec<ValueId>) {
        match self {
            Arg::Tensor(v) => out.push(*v),
            Arg::List(items) => items.iter().for_each(|a| a.tensors(out)),
            _ => {}
        }
    }
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::None => f.write_str("None"),
            Arg::Bool(b) => write!(f, "{b}"),
            Arg::Int(e) => write!(f, "{e}"),
            Arg::Float(x) => write!(f, "{x:?}"),
            Arg::SymFloat(x) => write!(f, "{x}"),
            Arg::Str(s) => write!(f, "{s:?}"),
            Arg::DType(d) => write!(f, "{d}"),
            Arg::Device(d) => write!(f, "{d}"),
            Arg::Tensor(v) => write!(f, "{v}"),
            Arg::List(items) => {
                f.write_str("[")?;
                for (k, item) in items.iter().enumerate() {
                    if k > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// One ATen call.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Position of the node in the FX graph, used to run it eagerly.
    pub index: u32,
    pub op: Op,
    /// The full overload name, e.g. `aten.div.Tensor_mode`.
    pub target: String,
    pub args: Vec<Arg>,
    pub kwargs: Vec<(String, Arg)>,
    /// One entry per tensor output (tuple outputs give several).
    pub outputs: Vec<ValueId>,
}

impl Node {
    pub fn overload(&self) -> &str {
        self.target.rsplit('.').next().unwrap_or("")
    }

    /// Positional argument `pos`, or keyword `name`, or `None`.
    pub fn arg(&self, pos: usize, name: &str) -> &Arg {
        if let Some(a) = self.args.get(pos) {
            return a;
        }
        self.kwargs.iter().find(|(k, _)| k == name).map(|(_, a)| a).unwrap_or(&Arg::None)
    }

    pub fn kwarg(&self, name: &str) -> &Arg {
        self.kwargs.iter().find(|(k, _)| k == name).map(|(_, a)| a).unwrap_or(&Arg::None)
    }

    pub fn tensor_inputs(&self) -> Vec<ValueId> {
        let mut out = Vec::new();
        self.args.iter().for_each(|a| a.tensors(&mut out));
        self.kwargs.iter().for_each(|(_, a)| a.tensors(&mut out));
        out
    }
}

/// A graph input.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    Tensor(ValueId),
    /// A SymInt passed as a Python int; binds the size symbol.
    SymInt(Sym),
    /// Any other scalar input (passed through untouched).
    Opaque,
}

/// A whole ATen graph.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    pub values: Vec<TensorMeta>,
    pub inputs: Vec<Input>,
    pub nodes: Vec<Node>,
    pub outputs: Vec<Arg>,
    /// Positions in `outputs` whose layout rdyn may choose: activations a
    /// training forward saves for its backward, which AOTAutograd hands the
    /// backward as they are once told their strides (`backend.py`). Every
    /// other output has its metadata's strides.
    pub free_layout: Vec<usize>,
    /// Names of size symbols as PyTorch printed them (`s0`, `s77`).
    pub sym_names: Vec<String>,
    /// Symbols defined from others, each after the symbols it reads.
    pub derived_syms: Vec<DerivedSym>,
}

impl Graph {
    pub fn meta(&self, value: ValueId) -> &TensorMeta {
        &self.values[value.0 as usize]
    }

    /// How many node arguments and graph outputs read each value.
    pub fn use_counts(&self) -> Vec<u32> {
        let mut counts = vec![0u32; self.values.len()];
        for node in &self.nodes {
            for v in node.tensor_inputs() {
                counts[v.0 as usize] += 1;
            }
        }
        let mut outs = Vec::new();
        self.outputs.iter().for_each(|a| a.tensors(&mut outs));
        for v in outs {
            counts[v.0 as usize] += 1;
        }
        counts
    }
}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let meta_str = |v: ValueId| {
            let m = self.meta(v);
            let sizes: Vec<String> = m.sizes.iter().map(|s| s.to_string()).collect();
            format!("{}[{}]", m.dtype, sizes.join(", "))
        };
        for input in &self.inputs {
            match input {
                Input::Tensor(v) => writeln!(f, "input {v}: {}", meta_str(*v))?,
                Input::SymInt(s) => writeln!(f, "input {s}: symint")?,
                Input::Opaque => writeln!(f, "input _: opaque")?,
            }
        }
        for derived in &self.derived_syms {
            writeln!(f, "sym {derived}")?;
        }
        for node in &self.nodes {
            let outs: Vec<String> = node.outputs.iter().map(|v| format!("{v}: {}", meta_str(*v))).collect();
            let args: Vec<String> = node
                .args
                .iter()
                .map(|a| a.to_string())
                .chain(node.kwargs.iter().map(|(k, a)| format!("{k}={a}")))
                .collect();
            writeln!(f, "{} = {}({})", outs.join(", "), node.target, args.join(", "))?;
        }
        let outs: Vec<String> = self.outputs.iter().map(|a| a.to_string()).collect();
        writeln!(f, "return ({})", outs.join(", "))?;
        if !self.free_layout.is_empty() {
            let free: Vec<String> = self.free_layout.iter().map(|k| k.to_string()).collect();
            writeln!(f, "any layout: outputs {}", free.join(", "))?;
        }
        Ok(())
    }
}
