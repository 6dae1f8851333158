//! Loop-IR kernels → PTX entry functions.
//!
//! Pointwise kernels: a grid-stride loop, one element per thread (or 4,
//! `pointwise.rs`). Row kernels (`row.rs`): a thread per row (rows of at most
//! `SHORT_ROW` points, or strided rows), a warp per row (at most `WARP_ROW`
//! points; shuffles only), else a block per row (`BLOCK`, or `LONG_BLOCK` threads
//! for rows of `LONG_ROW` points or more; `launch.rs`); row loops take `UNROLL`
//! points per thread, in the plain loop's order (bit-identical; `loops.rs`).
//! Scatter kernels run on one thread. `kernel_ptx` emits twice where it can: the
//! second emission drops stores to private temporaries that no load reads.

pub mod fold;
pub mod launch;
pub mod loops;
pub mod pointwise;
pub mod row;
pub mod stage;

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;

use rdyn_ir::loops::{BufId, BufRole, Kernel, Program, Step};
use rdyn_ir::Ctx;

use crate::cache::RowCache;
use crate::emitter::Emitter;
use crate::kernel::launch::{concrete_all, BLOCK};
use crate::kernel::loops::{counted_loop, unravel};
use crate::kernel::pointwise::pointwise;
use crate::kernel::row::rows;
use crate::kernel::stage::pointwise_stage_at;
use crate::ptx::checks::Checks;
use crate::ptx::func::{Class, Func};
use crate::types::{IndexChecks, PtxError, PTX_TARGET, PTX_VERSION};

/// A generated kernel and how to launch it.
#[derive(Clone, Debug)]
pub struct PtxKernel {
    pub name: String,
    /// A complete PTX module holding just this kernel.
    pub source: String,
    /// The storage root behind each pointer parameter, in order; one more
    /// parameter follows them: the address of a `u32` error flag.
    pub params: Vec<BufId>,
    pub grid: u32,
    pub block: u32,
    /// The kernel may set the error flag (a data-dependent index out of
    /// range, an integer division by zero).
    pub error_flag: bool,
}

/// The PTX for `kernel`, with sizes from `syms`. A first emission finds
/// which storages the kernel reads back from memory; stores to its private
/// temporaries that no load reads from memory are then left out.
pub fn kernel_ptx(
    program: &Program,
    kernel: &Kernel,
    syms: &Ctx,
    name: String,
    checks: IndexChecks,
) -> Result<PtxKernel, PtxError> {
    let target = Target { program, kernel, syms, checks };
    let (ptx, memory_loads) = emit_kernel(&target, name.clone(), HashSet::new())?;
    let unstored = private_storages(program, kernel, &memory_loads);
    if unstored.is_empty() {
        return Ok(ptx);
    }
    Ok(emit_kernel(&target, name, unstored)?.0)
}

/// Temporaries `kernel` writes that no other step reads, that are no
/// output and that none of its own loads read from memory.
fn private_storages(program: &Program, kernel: &Kernel, memory_loads: &HashSet<BufId>) -> HashSet<BufId> {
    let mut read = program.pinned_storages();
    read.extend(memory_loads);
    for step in &program.steps {
        match step {
            Step::Kernel(k) if !std::ptr::eq(k, kernel) => {
                for stage in &k.stages {
                    let mut roots = vec![stage.value];
                    roots.extend(stage.store_indirect.iter().map(|(s, _)| *s));
                    read.extend(program.scalars.loaded_buffers(&roots).into_iter().map(|b| program.storage_of(b)));
                }
            }
            Step::Kernel(_) => {}
            Step::Extern(e) => read.extend(e.inputs.iter().map(|b| program.storage_of(*b))),
        }
    }
    kernel
        .stages
        .iter()
        .map(|s| program.storage_of(s.out))
        .filter(|r| program.buffer(*r).role == BufRole::Temp && !read.contains(r))
        .collect()
}

/// What `emit_kernel` generates code for.
struct Target<'a> {
    program: &'a Program,
    kernel: &'a Kernel,
    syms: &'a Ctx,
    checks: IndexChecks,
}

fn emit_kernel(
    target: &Target<'_>,
    name: String,
    unstored: HashSet<BufId>,
) -> Result<(PtxKernel, HashSet<BufId>), PtxError> {
    let Target { program, kernel, syms, checks } = *target;
    let outer = concrete_all(&kernel.outer, syms)?;
    let m = outer.len();
    let params = parameters(program, kernel);
    let mut f = Func::default();
    let written = kernel.stages.iter().map(|s| program.storage_of(s.out)).collect();
    let mut em = Emitter {
        program,
        syms,
        bases: Default::default(),
        vars: Vec::new(),
        checks: Checks { mode: checks, flag_addr: None },
        row: RowCache::new(written, unstored),
        lanes: Default::default(),
    };
    for (k, buf) in params.iter().enumerate() {
        let r = f.reg(Class::S64);
        f.ins(format!("ld.param.u64 {r}, [{name}_p{k}]"));
        f.ins(format!("cvta.to.global.u64 {r}, {r}"));
        em.bases.insert(*buf, r);
    }
    let err = f.reg(Class::S64);
    f.ins(format!("ld.param.u64 {err}, [{name}_err]"));
    f.ins(format!("cvta.to.global.u64 {err}, {err}"));
    em.checks.flag_addr = Some(err);
    let serial = kernel.stages.iter().any(|s| !s.store_indirect.is_empty());
    let pointwise_only = !serial && kernel.stages.iter().all(|s| s.ranges.len() == m && s.reduce.is_none());
    let (grid, block, shared) = if serial {
        (serial_body(&mut f, &mut em, kernel, &outer)?, BLOCK, false)
    } else if pointwise_only {
        (pointwise(&mut f, &mut em, kernel, &outer)?, BLOCK, false)
    } else {
        rows(&mut f, &mut em, kernel, &outer, &name)?
    };
    let error_flag = f.error_flag;
    let src = module(&name, params.len(), &f, serial, block, shared);
    let ptx =
        PtxKernel { name, source: src, params, grid: grid as u32, block: if serial { 1 } else { block }, error_flag };
    Ok((ptx, em.row.memory_loads()))
}

/// Parameters: every storage root the kernel touches.
fn parameters(program: &Program, kernel: &Kernel) -> Vec<BufId> {
    let mut touched: BTreeMap<BufId, ()> = BTreeMap::new();
    for stage in &kernel.stages {
        let mut roots = vec![stage.value];
        roots.extend(stage.store_indirect.iter().map(|(s, _)| *s));
        for b in program.scalars.loaded_buffers(&roots) {
            touched.insert(program.storage_of(b), ());
        }
        touched.insert(program.storage_of(stage.out), ());
    }
    touched.into_keys().collect()
}

/// A scatter kernel: one thread runs the outer points in order. Returns
/// the grid.
fn serial_body(f: &mut Func, em: &mut Emitter<'_>, kernel: &Kernel, outer: &[i64]) -> Result<i64, PtxError> {
    let m = outer.len();
    let outer_n: i64 = outer.iter().product();
    let zero = f.mov(Class::S64, "0");
    let one = f.mov(Class::S64, "1");
    counted_loop(f, &zero, outer_n, &one, |f, o| {
        unravel(f, em, o, outer, 0);
        for stage in &kernel.stages {
            if stage.reduce.is_some() || stage.ranges.len() != m {
                return Err(PtxError::Unsupported("scatter with inner dims".into()));
            }
            pointwise_stage_at(f, em, stage)?;
        }
        Ok(())
    })?;
    Ok(1)
}

/// The PTX module holding kernel `name` with body `f`.
fn module(name: &str, params: usize, f: &Func, serial: bool, block: u32, shared: bool) -> String {
    let mut src = String::new();
    let _ = writeln!(src, ".version {PTX_VERSION}\n.target {PTX_TARGET}\n.address_size 64\n");
    let _ = writeln!(src, ".visible .entry {name}(");
    for k in 0..params {
        let _ = writeln!(src, "\t.param .u64 {name}_p{k},");
    }
    let _ = writeln!(src, "\t.param .u64 {name}_err\n)");
    if !serial {
        let _ = writeln!(src, ".maxntid {block}, 1, 1");
    }
    let _ = writeln!(src, "{{");
    src.push_str(&f.decls());
    if shared {
        let _ = writeln!(src, "\t.shared .align 16 .b8 {name}_smem[{}];", block / 32 * 16);
    }
    src.push_str(&f.body);
    let _ = writeln!(src, "\tret;\n}}");
    src
}
