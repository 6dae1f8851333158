//! A one-node graph as data ([`Case`]), the mutations the sweep in
//! `malformed.rs` applies to it ([`mutations`]), and lowering one under
//! `catch_unwind` ([`outcome`]).

pub mod cases;

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use rdyn_ir::graph::{Arg, Graph, Input, Node, TensorMeta, ValueId};
use rdyn_ir::op::parse_target;
use rdyn_ir::{Ctx, DType, Device, Expr};
use rdyn_lowering::{lower_with, InputLayout, LowerOptions};

/// An argument: `T(k)` is tensor value `k` (the inputs first, then the
/// outputs).
#[derive(Clone, Debug, PartialEq)]
pub enum A {
    T(usize),
    I(i64),
    F(f64),
    B(bool),
    S(&'static str),
    N,
    L(Vec<A>),
}

/// A tensor's sizes and dtype, stored row-major or (`transposed`) with its
/// dims in reverse order.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub sizes: Vec<i64>,
    pub dtype: DType,
    pub transposed: bool,
}

/// A graph of one node: its tensor inputs are the graph's inputs, its
/// outputs the graph's outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub target: &'static str,
    pub inputs: Vec<Tensor>,
    pub args: Vec<A>,
    pub kwargs: Vec<(&'static str, A)>,
    pub outputs: Vec<Tensor>,
}

/// How a graph is lowered: the options, and whether its tensors are on CUDA.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub name: &'static str,
    pub options: LowerOptions,
    pub cuda: bool,
}

pub const CONFIGS: [Config; 3] = [
    Config {
        name: "default",
        options: LowerOptions {
            cublas: false,
            cpu_kernels: false,
            piecewise_min: 0,
            split_reduce: false,
            host_partials: false,
            conv_backward_channels_last: false,
            relayout: false,
            opmath_scalars: false,
        },
        cuda: false,
    },
    Config {
        name: "cpu",
        options: LowerOptions {
            cublas: false,
            cpu_kernels: true,
            piecewise_min: 1,
            split_reduce: true,
            host_partials: true,
            conv_backward_channels_last: true,
            relayout: true,
            opmath_scalars: false,
        },
        cuda: false,
    },
    Config {
        name: "cuda",
        options: LowerOptions {
            cublas: true,
            cpu_kernels: false,
            piecewise_min: 0,
            split_reduce: false,
            host_partials: false,
            conv_backward_channels_last: false,
            relayout: false,
            opmath_scalars: true,
        },
        cuda: true,
    },
];

fn arg(a: &A) -> Arg {
    match a {
        A::T(k) => Arg::Tensor(ValueId(*k as u32)),
        A::I(v) => Arg::Int(Expr::c(*v)),
        A::F(x) => Arg::Float(*x),
        A::B(b) => Arg::Bool(*b),
        A::S(s) => Arg::Str((*s).to_string()),
        A::N => Arg::None,
        A::L(items) => Arg::List(items.iter().map(arg).collect()),
    }
}

impl Case {
    /// The graph: values `0..inputs` are the inputs, then the outputs.
    pub fn graph(&self, cuda: bool) -> Graph {
        let mut graph = Graph::default();
        let device = if cuda { Device::Cuda(0) } else { Device::Cpu };
        for t in self.inputs.iter().chain(&self.outputs) {
            let sizes: Vec<Expr> = t.sizes.iter().map(|s| Expr::c(*s)).collect();
            // Row-major (wrapping: a malformed tensor may have more elements
            // than an int64 counts), reversed when transposed.
            let mut order: Vec<usize> = (0..t.sizes.len()).collect();
            if !t.transposed {
                order.reverse();
            }
            let mut strides = vec![Expr::c(1); t.sizes.len()];
            let mut step = 1i64;
            for d in order {
                strides[d] = Expr::c(step);
                step = step.wrapping_mul(t.sizes[d].max(1));
            }
            graph.values.push(TensorMeta { sizes, strides, offset: Expr::zero(), dtype: t.dtype, device });
        }
        graph.inputs = (0..self.inputs.len()).map(|k| Input::Tensor(ValueId(k as u32))).collect();
        let outputs: Vec<ValueId> = (0..self.outputs.len()).map(|k| ValueId((self.inputs.len() + k) as u32)).collect();
        graph.nodes.push(Node {
            index: 0,
            op: parse_target(self.target).0,
            target: self.target.to_string(),
            args: self.args.iter().map(arg).collect(),
            kwargs: self.kwargs.iter().map(|(k, a)| ((*k).to_string(), arg(a))).collect(),
            outputs: outputs.clone(),
        });
        graph.outputs = outputs.into_iter().map(Arg::Tensor).collect();
        graph
    }
}

/// What lowering a graph did.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The program's text.
    Ok(String),
    Err(String),
    /// The panic's message and location.
    Panic(String),
}

thread_local! {
    /// Whether [`outcome`] is catching panics, and where the last one was.
    static CATCHING: RefCell<(bool, String)> = const { RefCell::new((false, String::new())) };
}

/// Silence the panics [`outcome`] catches, recording where each happened;
/// others report as usual.
pub fn quiet_panics() {
    let usual = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
        let caught = CATCHING.with(|c| {
            let mut c = c.borrow_mut();
            c.1 = at;
            c.0
        });
        if !caught {
            usual(info);
        }
    }));
}

/// Lower `case` in `config`, catching a panic.
pub fn outcome(case: &Case, config: &Config) -> Outcome {
    let graph = case.graph(config.cuda);
    let layouts: Vec<Option<InputLayout>> = graph
        .inputs
        .iter()
        .map(|input| match input {
            Input::Tensor(v) => {
                let m = graph.meta(*v);
                Some(InputLayout { sizes: m.sizes.clone(), strides: m.strides.clone(), offset: Expr::zero() })
            }
            _ => None,
        })
        .collect();
    // The program's text too: a backend reads every expression printing does.
    let lowered = || lower_with(&graph, &layouts, &Ctx::default(), config.options).map(|l| l.program.to_string());
    CATCHING.with(|c| c.borrow_mut().0 = true);
    let result = catch_unwind(AssertUnwindSafe(lowered));
    CATCHING.with(|c| c.borrow_mut().0 = false);
    match result {
        Ok(Ok(text)) => Outcome::Ok(text),
        Ok(Err(e)) => Outcome::Err(e.to_string()),
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let at = CATCHING.with(|c| c.borrow().1.clone());
            Outcome::Panic(format!("{at}: {message}"))
        }
    }
}

/// Values an int argument is replaced with.
const INTS: [i64; 12] = [-100, -4, -3, -1, 0, 1, 2, 3, 100, 1 << 40, i64::MIN, i64::MAX];

/// Values a size is replaced with.
const SIZES: [i64; 6] = [0, 1, 2, 7, -3, 1 << 40];

const DTYPES: [DType; 6] = [DType::F32, DType::F64, DType::F16, DType::I64, DType::I32, DType::Bool];

/// Every argument leaf (or list) of `args`, by its path, replaced by each
/// of `replace`'s answers for it.
fn arg_mutations(args: &[A], replace: &dyn Fn(&A) -> Vec<A>) -> Vec<(String, Vec<A>)> {
    let mut out = Vec::new();
    for (k, a) in args.iter().enumerate() {
        for new in replace(a) {
            let mut changed = args.to_vec();
            changed[k] = new.clone();
            out.push((format!("arg{k}={new:?}"), changed));
        }
        if let A::L(items) = a {
            for (path, items) in arg_mutations(items, replace) {
                let mut changed = args.to_vec();
                changed[k] = A::L(items);
                out.push((format!("arg{k}.{path}"), changed));
            }
        }
    }
    out
}

/// What one argument is replaced with.
fn replacements(a: &A, tensors: usize) -> Vec<A> {
    match a {
        A::I(v) => INTS.iter().filter(|n| *n != v).map(|n| A::I(*n)).collect(),
        A::T(k) => vec![A::I(0), A::N, A::T((k + 1) % tensors), A::T(tensors + 5)],
        A::F(_) => vec![A::N, A::I(0), A::F(f64::NAN)],
        A::B(b) => vec![A::N, A::B(!b), A::I(5)],
        A::S(_) => vec![A::S("bogus"), A::N],
        A::N => vec![A::I(1), A::T(0), A::L(vec![])],
        A::L(items) => {
            let mut shorter = items.clone();
            shorter.pop();
            let mut longer = items.clone();
            longer.push(A::I(1));
            let mut with_tensor = items.clone();
            with_tensor.push(A::T(0));
            vec![A::L(shorter), A::L(longer), A::L(with_tensor), A::L(vec![]), A::I(2)]
        }
    }
}

/// A tensor's mutations: each size replaced, each dim dropped, one added
/// first or last, the dtype changed.
fn tensor_mutations(t: &Tensor) -> Vec<(String, Tensor)> {
    let mut out = Vec::new();
    for j in 0..t.sizes.len() {
        for s in SIZES.iter().filter(|s| **s != t.sizes[j]) {
            let mut m = t.clone();
            m.sizes[j] = *s;
            out.push((format!("size{j}={s}"), m));
        }
        let mut m = t.clone();
        m.sizes.remove(j);
        out.push((format!("drop dim {j}"), m));
    }
    let mut huge = t.clone();
    huge.sizes.iter_mut().for_each(|s| *s <<= 20);
    out.push(("every size << 20".into(), huge));
    out.push(("transposed".into(), Tensor { transposed: !t.transposed, ..t.clone() }));
    let mut first = t.clone();
    first.sizes.insert(0, 2);
    out.push(("new first dim".into(), first));
    let mut last = t.clone();
    last.sizes.push(3);
    out.push(("new last dim".into(), last));
    for d in DTYPES.iter().filter(|d| **d != t.dtype) {
        out.push((format!("dtype {d}"), Tensor { dtype: *d, ..t.clone() }));
    }
    out
}

/// Every mutation of `case`, described.
pub fn mutations(case: &Case) -> Vec<(String, Case)> {
    let tensors = case.inputs.len() + case.outputs.len();
    let mut out = Vec::new();
    for (k, t) in case.outputs.iter().enumerate() {
        for (what, m) in tensor_mutations(t) {
            let mut c = case.clone();
            c.outputs[k] = m;
            out.push((format!("output {k} {what}"), c));
        }
    }
    for (k, t) in case.inputs.iter().enumerate() {
        for (what, m) in tensor_mutations(t) {
            let mut c = case.clone();
            c.inputs[k] = m;
            out.push((format!("input {k} {what}"), c));
        }
    }
    let replace = |a: &A| replacements(a, tensors);
    for (what, args) in arg_mutations(&case.args, &replace) {
        out.push((what, Case { args, ..case.clone() }));
    }
    for k in 0..case.kwargs.len() {
        for new in replace(&case.kwargs[k].1) {
            let mut c = case.clone();
            c.kwargs[k].1 = new.clone();
            out.push((format!("kwarg {}={new:?}", case.kwargs[k].0), c));
        }
    }
    for n in 0..case.args.len() {
        out.push((format!("only {n} args"), Case { args: case.args[..n].to_vec(), ..case.clone() }));
    }
    let mut more = case.clone();
    more.outputs.push(case.outputs.first().cloned().unwrap_or(Tensor {
        sizes: vec![2],
        dtype: DType::F32,
        transposed: false,
    }));
    out.push(("one more output".into(), more));
    if !case.outputs.is_empty() {
        let mut fewer = case.clone();
        fewer.outputs.pop();
        out.push(("one output fewer".into(), fewer));
    }
    out
}
