//! Pointwise kernels over groups of `VEC` consecutive points, with vector
//! loads and stores (`ld.global.v4`, `st.global.v4`).
//!
//! A pointwise kernel whose innermost outer dim is a multiple of `VEC`
//! runs its grid-stride loop over groups: a thread unravels the group's
//! first point once, loads each element that the group reads contiguously
//! with one vector load (an element every point shares, such as a bias,
//! with one scalar load), computes the `VEC` points, and stores each
//! contiguous output with one vector store.
//!
//! An access vectorises when its storage is float32, float16, bfloat16 or
//! float64, its index moves by one element with the innermost variable and
//! by multiples of `VEC` with everything else (so a group's first element
//! sits at a multiple of `VEC` elements from the storage's base), and it
//! does not touch storage that the kernel both reads and writes (such
//! elements keep the scalar path's order); other accesses are made per
//! point. The kernel checks at entry that every vector-accessed base
//! address is aligned to its vector's bytes, and otherwise runs the scalar
//! loop (an input that starts at an odd element, such as `x[1:]` passed in
//! by itself), on the vector loop's grid. Kernels whose points take many
//! instructions (more than `HEAVY_LINES`, 300 PTX lines: special functions with
//! loops) are not vectorised: their arithmetic bounds them, and 4 copies would
//! only lengthen the module. Loads are `ld.global.v4.f32`, `.v4.b16` for half
//! precision, two `.v2.f64` for float64.

use std::collections::{BTreeSet, HashMap, HashSet};

use rdyn_ir::loops::{BufId, Kernel, ScalarOp};
use rdyn_ir::{Atom, DType, Expr, Var};

use crate::emitter::Emitter;
use crate::kernel::launch::{grid_stride, BLOCK, MAX_GRID};
use crate::kernel::loops::{counted_loop, unravel};
use crate::kernel::stage::{pointwise_stage_at, value};
use crate::ptx::convert::widen_half;
use crate::ptx::func::{Class, Func};
use crate::ptx::memory::{load, memory_value};
use crate::types::PtxError;

/// Points per group.
pub const VEC: i64 = 4;

/// How an access's index moves across a group's points.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Along {
    /// The same element at every point.
    Shared,
    /// Consecutive elements, the first at a multiple of `VEC`.
    Contiguous,
}

fn along(index: &Expr, last: Var) -> Option<Along> {
    match index.linear_coef(last)? {
        0 => Some(Along::Shared),
        1 => {
            let aligned = index.constant() % VEC == 0
                && index.terms().iter().all(|(a, c)| matches!(a, Atom::Var(v) if *v == last) || c % VEC == 0);
            let affine = index.terms().iter().all(|(a, _)| matches!(a, Atom::Var(_)));
            (aligned && affine).then_some(Along::Contiguous)
        }
        _ => None,
    }
}

fn vector_dtype(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
}

/// The memory type and elements per instruction of a vector access
/// (16 bytes at most per instruction).
fn pieces(dtype: DType) -> (&'static str, usize) {
    match dtype {
        DType::F64 => ("f64", 2),
        DType::F16 | DType::BF16 => ("b16", VEC as usize),
        _ => ("f32", VEC as usize),
    }
}

/// Bytes a vector access's base must be aligned to.
fn alignment(dtype: DType) -> i64 {
    (VEC * dtype.itemsize() as i64).min(16)
}

/// What a kernel's groups load and store with vector instructions.
struct Plan {
    /// Plain loads: (storage root, simplified index, dtype, along).
    loads: Vec<(BufId, Expr, DType, Along)>,
    /// Stages (by position) whose stores are vector stores.
    stores: BTreeSet<usize>,
}

fn plan(em: &Emitter<'_>, kernel: &Kernel, last: Var) -> Plan {
    let program = em.program;
    let mut written: HashMap<BufId, usize> = HashMap::new();
    let mut read = HashSet::new();
    let mut loads = Vec::new();
    for stage in &kernel.stages {
        *written.entry(program.storage_of(stage.out)).or_default() += 1;
        let mut roots = vec![stage.value];
        roots.extend(stage.store_indirect.iter().map(|(s, _)| *s));
        for id in program.scalars.topo(&roots) {
            if let ScalarOp::Load { buf, index, indirect, mask } = &program.scalars.get(id).op {
                let root = program.storage_of(*buf);
                read.insert(root);
                let dtype = program.buffer(*buf).dtype;
                if !indirect.is_empty() || mask.is_some() || !vector_dtype(dtype) {
                    continue;
                }
                let index = index.simplify(em.syms);
                if let Some(a) = along(&index, last) {
                    if !loads.iter().any(|(r, i, _, _)| *r == root && *i == index) {
                        loads.push((root, index, dtype, a));
                    }
                }
            }
        }
    }
    loads.retain(|(root, _, _, _)| !written.contains_key(root));
    let stores = kernel
        .stages
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            let root = program.storage_of(s.out);
            let dtype = program.buffer(s.out).dtype;
            s.store_indirect.is_empty()
                && vector_dtype(dtype)
                && written[&root] == 1
                && !read.contains(&root)
                && !em.row.unstored.contains(&root)
                && along(&s.store.simplify(em.syms), last) == Some(Along::Contiguous)
        })
        .map(|(k, _)| k)
        .collect();
    Plan { loads, stores }
}

/// A pointwise kernel's loop over `outer`: vectorised where the plan finds
/// vector accesses and the innermost dim allows, with the scalar loop as
/// the fallback for misaligned bases. Returns the grid.
pub fn pointwise(f: &mut Func, em: &mut Emitter<'_>, kernel: &Kernel, outer: &[i64]) -> Result<i64, PtxError> {
    let outer_n: i64 = outer.iter().product();
    let m = outer.len();
    let blocks = |points: i64| ((points.max(1) + BLOCK as i64 - 1) / BLOCK as i64).min(MAX_GRID);
    let last = Var(m.saturating_sub(1) as u32);
    let p = plan(em, kernel, last);
    let contiguous = p.loads.iter().any(|l| l.3 == Along::Contiguous);
    let eligible = m > 0 && outer[m - 1] % VEC == 0 && outer_n > 0 && (contiguous || !p.stores.is_empty());
    if !eligible || heavy(em, kernel, outer)? {
        let grid = blocks(outer_n);
        let (start, step, _) = grid_stride(f, grid);
        scalar_loop(f, em, kernel, outer, &start, &step)?;
        return Ok(grid);
    }
    let grid = blocks(outer_n / VEC);
    let (start, step, _) = grid_stride(f, grid);
    // Misaligned bases of vector accesses take the scalar loop.
    let mut bases: Vec<(BufId, DType)> =
        p.loads.iter().filter(|l| l.3 == Along::Contiguous).map(|l| (l.0, l.2)).collect();
    for k in &p.stores {
        let out = kernel.stages[*k].out;
        bases.push((em.program.storage_of(out), em.program.buffer(out).dtype));
    }
    let low = f.mov(Class::S64, "0");
    for (root, dtype) in bases {
        let base = em.bases.get(&root).ok_or(PtxError::Internal("buffer without a parameter"))?;
        let bits = f.reg(Class::S64);
        f.ins(format!("and.b64 {bits}, {base}, {}", alignment(dtype) - 1));
        f.ins(format!("or.b64 {low}, {low}, {bits}"));
    }
    let (scalar, done) = (f.label("scalar"), f.label("vector_done"));
    let misaligned = f.setp("ne", "s64", &low, "0");
    f.ins(format!("@{misaligned} bra {scalar}"));
    counted_loop(f, &start, outer_n / VEC, &step, |f, g| group(f, em, kernel, outer, &p, g))?;
    f.ins(format!("bra {done}"));
    f.place(&scalar);
    scalar_loop(f, em, kernel, outer, &start, &step)?;
    f.place(&done);
    Ok(grid)
}

/// PTX lines of one point's stages above which a kernel is not vectorised:
/// its arithmetic (a Bessel function's loops, say), not its memory access,
/// bounds it, and its 4 copies would only lengthen the module.
const HEAVY_LINES: usize = 300;

/// Whether one point's stages take more than `HEAVY_LINES` lines of PTX
/// (emitted into a scratch body to count them).
fn heavy(em: &mut Emitter<'_>, kernel: &Kernel, outer: &[i64]) -> Result<bool, PtxError> {
    let mut probe = Func::default();
    let (start, step) = (probe.reg(Class::S64), probe.reg(Class::S64));
    scalar_loop(&mut probe, em, kernel, outer, &start, &step)?;
    Ok(probe.body.lines().count() > HEAVY_LINES)
}

fn scalar_loop(
    f: &mut Func,
    em: &mut Emitter<'_>,
    kernel: &Kernel,
    outer: &[i64],
    start: &str,
    step: &str,
) -> Result<(), PtxError> {
    let outer_n: i64 = outer.iter().product();
    counted_loop(f, start, outer_n, step, |f, o| {
        unravel(f, em, o, outer, 0);
        for stage in &kernel.stages {
            pointwise_stage_at(f, em, stage)?;
        }
        Ok(())
    })
}

/// One group `g`: its vector loads, its `VEC` points, its vector stores.
fn group(
    f: &mut Func,
    em: &mut Emitter<'_>,
    kernel: &Kernel,
    outer: &[i64],
    p: &Plan,
    g: &str,
) -> Result<(), PtxError> {
    let m = outer.len();
    let first = f.reg(Class::S64);
    f.ins(format!("mul.lo.s64 {first}, {g}, {VEC}"));
    unravel(f, em, &first, outer, 0);
    let base_var = em.vars[m - 1].clone();
    em.lanes.loads.clear();
    for (root, index, dtype, a) in &p.loads {
        let idx = em.index(f, index)?;
        let buf = *root;
        let addr = em.address(f, buf, &idx)?;
        em.row.loaded_unplain(buf);
        let regs = match a {
            Along::Shared => vec![load(f, &addr, *dtype, None)],
            Along::Contiguous => vector_load(f, &addr, *dtype),
        };
        em.lanes.loads.insert((buf, index.clone()), regs);
    }
    // Each vector-stored stage's values, in its memory type, per point.
    let mut pending: Vec<Vec<String>> = vec![Vec::new(); kernel.stages.len()];
    let mut addrs: Vec<Option<String>> = vec![None; kernel.stages.len()];
    for lane in 0..VEC as usize {
        em.lanes.lane = lane;
        em.vars[m - 1] = if lane == 0 {
            base_var.clone()
        } else {
            let v = f.reg(Class::S64);
            f.ins(format!("add.s64 {v}, {base_var}, {lane}"));
            v
        };
        for (k, stage) in kernel.stages.iter().enumerate() {
            if !p.stores.contains(&k) {
                pointwise_stage_at(f, em, stage)?;
                continue;
            }
            let (v, _) = value(f, em, stage)?;
            let kind = em.program.scalars.dtype(stage.value).kind();
            let dtype = em.program.buffer(stage.out).dtype;
            if lane == 0 {
                let idx = em.index(f, &stage.store)?;
                addrs[k] = Some(em.address(f, stage.out, &idx)?);
            }
            pending[k].push(memory_value(f, &v, kind, dtype));
        }
    }
    em.lanes.lane = 0;
    em.lanes.loads.clear();
    for (k, values) in pending.iter().enumerate() {
        if let Some(addr) = &addrs[k] {
            vector_store(f, addr, values, em.program.buffer(kernel.stages[k].out).dtype);
        }
    }
    Ok(())
}

/// `VEC` elements from `addr`, each widened into a register of its kind.
fn vector_load(f: &mut Func, addr: &str, dtype: DType) -> Vec<String> {
    let (ty, per) = pieces(dtype);
    let mut out = Vec::new();
    for piece in 0..VEC as usize / per {
        let class = match dtype {
            DType::F16 | DType::BF16 => Class::B16,
            d => Class::of(d.kind()),
        };
        let regs: Vec<String> = (0..per).map(|_| f.reg(class)).collect();
        f.ins(format!("ld.global.v{per}.{ty} {{{}}}, [{}]", regs.join(", "), at(addr, piece * per * dtype.itemsize())));
        for r in regs {
            out.push(if class == Class::B16 { widen_half(f, &r, dtype) } else { r });
        }
    }
    out
}

fn vector_store(f: &mut Func, addr: &str, values: &[String], dtype: DType) {
    let (ty, per) = pieces(dtype);
    for (piece, regs) in values.chunks(per).enumerate() {
        f.ins(format!("st.global.v{per}.{ty} [{}], {{{}}}", at(addr, piece * per * dtype.itemsize()), regs.join(", ")));
    }
}

/// `addr` or `addr+offset`, as an address operand's text.
fn at(addr: &str, offset: usize) -> String {
    if offset == 0 {
        addr.to_string()
    } else {
        format!("{addr}+{offset}")
    }
}
