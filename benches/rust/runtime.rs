//! Rust micro-benchmarks: the guard check, compiling a fixed graph, and
//! kernel throughput. Run with `cargo bench -p rdyn-runtime`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rdyn_ir::graph::{Arg, Graph, Input, Node, TensorMeta, ValueId};
use rdyn_ir::loops::{contiguous_strides, BufId};
use rdyn_ir::op::parse_target;
use rdyn_ir::{Ctx, DType, Device, Expr};
use rdyn_memplan::BufPlan;
use rdyn_runtime::compiled::{execute, CompiledGraph};
use rdyn_runtime::devices::cpu::Cpu;
use rdyn_runtime::guard::{CallArg, TensorArg};
use rdyn_runtime::host::Host;
use rdyn_runtime::RuntimeError;

fn meta(sizes: &[i64]) -> TensorMeta {
    let sizes: Vec<Expr> = sizes.iter().map(|s| Expr::c(*s)).collect();
    TensorMeta {
        strides: contiguous_strides(&sizes),
        sizes,
        offset: Expr::zero(),
        dtype: DType::F32,
        device: Device::Cpu,
    }
}

/// `((x0 + x1) + x2) + ...` over `inputs` tensors of `sizes`.
fn add_chain(inputs: usize, sizes: &[i64]) -> Graph {
    let mut g = Graph::default();
    for k in 0..inputs {
        g.values.push(meta(sizes));
        g.inputs.push(Input::Tensor(ValueId(k as u32)));
    }
    let mut acc = ValueId(0);
    for k in 1..inputs {
        g.values.push(meta(sizes));
        let out = ValueId(g.values.len() as u32 - 1);
        g.nodes.push(Node {
            index: k as u32,
            op: parse_target("aten.add.Tensor").0,
            target: "aten.add.Tensor".into(),
            args: vec![Arg::Tensor(acc), Arg::Tensor(ValueId(k as u32))],
            kwargs: vec![],
            outputs: vec![out],
        });
        acc = out;
    }
    g.outputs = vec![Arg::Tensor(acc)];
    g
}

/// Allocates outputs as plain vectors (no Python).
struct VecHost {
    keep: Vec<Vec<f32>>,
}

impl Host for VecHost {
    fn alloc(&mut self, _buf: BufId, plan: &BufPlan) -> Result<usize, RuntimeError> {
        let mut v = vec![0f32; plan.extent_elems().max(1) as usize];
        let ptr = v.as_mut_ptr() as usize;
        self.keep.push(v);
        Ok(ptr)
    }
    fn run_node(
        &mut self,
        _: u32,
        _: &[BufId],
        _: &[BufId],
        _: &[BufPlan],
        _: &mut [usize],
    ) -> Result<(), RuntimeError> {
        Err(RuntimeError::Host("no eager nodes in benchmarks".into()))
    }
}

fn args(data: &[Vec<f32>], sizes: &[i64]) -> Vec<CallArg> {
    let strides: Vec<i64> = contiguous_strides(&sizes.iter().map(|s| Expr::c(*s)).collect::<Vec<_>>())
        .iter()
        .map(|e| e.as_const().unwrap_or(1))
        .collect();
    data.iter()
        .map(|d| {
            CallArg::Tensor(TensorArg {
                ptr: d.as_ptr() as usize,
                dtype: DType::F32,
                device: Device::Cpu,
                sizes: sizes.to_vec(),
                strides: strides.clone(),
                storage_offset: 0,
                version: 0,
                identity: 0,
            })
        })
        .collect()
}

fn guard_check(c: &mut Criterion) {
    let sizes = [8, 16, 32, 32];
    let inputs = 4;
    let graph = CompiledGraph::new(add_chain(inputs, &sizes), std::sync::Arc::new(Cpu));
    let data: Vec<Vec<f32>> = (0..inputs).map(|_| vec![1.0; 8 * 16 * 32 * 32]).collect();
    let call = args(&data, &sizes);
    let mut key = Vec::new();
    let _ = graph.select(&call, &mut key);
    let mut group = c.benchmark_group("guard");
    group.throughput(Throughput::Elements(inputs as u64));
    group.bench_function("hit, 4 rank-4 inputs", |b| {
        b.iter(|| black_box(graph.select(black_box(&call), &mut key).is_ok()));
    });
    group.finish();
}

fn compile(c: &mut Criterion) {
    let graph = add_chain(8, &[64, 128]);
    let layouts: Vec<_> = (0..8)
        .map(|_| {
            Some(rdyn_lowering::InputLayout {
                sizes: vec![Expr::c(64), Expr::c(128)],
                strides: vec![Expr::c(128), Expr::c(1)],
                offset: Expr::zero(),
            })
        })
        .collect();
    c.bench_function("compile: lower + plan, 7-op graph", |b| {
        b.iter(|| {
            let lowered = rdyn_lowering::lower(black_box(&graph), &layouts, &Ctx::default());
            let planned = lowered.ok().and_then(|l| {
                let mem = rdyn_memplan::plan(&l.program, &Ctx::default()).ok()?;
                rdyn_codegen_cpu::build::plan(&l.program, &mem, &Ctx::default()).ok()
            });
            black_box(planned.is_some())
        })
    });
}

fn throughput(c: &mut Criterion) {
    let n = 1 << 22;
    let sizes = [n];
    let graph = CompiledGraph::new(add_chain(2, &sizes), std::sync::Arc::new(Cpu));
    let data: Vec<Vec<f32>> = (0..2).map(|_| vec![1.0; n as usize]).collect();
    let call = args(&data, &sizes);
    let mut key = Vec::new();
    let mut group = c.benchmark_group("kernel");
    group.throughput(Throughput::Bytes(3 * 4 * n as u64));
    group.sample_size(20);
    group.bench_function("add 4M f32 (bytes = 2 reads + 1 write)", |b| {
        b.iter(|| {
            let selected = graph.select(&call, &mut key);
            let mut host = VecHost { keep: Vec::new() };
            black_box(selected.map(|s| execute(&s, &call, &mut host).is_ok()).is_ok())
        })
    });
    group.finish();
}

criterion_group!(benches, guard_check, compile, throughput);
criterion_main!(benches);
