//! How a kernel launches: block and grid sizes, who runs a row (a thread, a
//! warp or a block, by row length and layout), and the thread's indices.

use rdyn_ir::loops::{Kernel, Program, ScalarOp};
use rdyn_ir::{Atom, Ctx, Expr, Var};

use crate::ptx::func::{Class, Func};
use crate::types::PtxError;

/// Threads per block.
pub const BLOCK: u32 = 256;

/// Threads per block of a row kernel whose rows hold at least `LONG_ROW`
/// points: fewer rows in flight, so a row that several stages read (a
/// softmax reads its input three times) stays in L2 between them.
pub(crate) const LONG_BLOCK: u32 = 1024;

pub(crate) const LONG_ROW: i64 = 8192;

/// Blocks a grid-stride kernel launches at most.
pub(crate) const MAX_GRID: i64 = 65_535;

/// Rows of at most this many points in every stage run a warp per row.
pub(crate) const WARP_ROW: i64 = 1024;

/// Rows of at most this many points (every stage's inner points times its
/// reduced points) run a thread per row.
const SHORT_ROW: i64 = 16;

/// Strided rows (see `strided_rows`) of at most this many points run a
/// thread per row when there are at least `STRIDED_OUTER` rows.
const STRIDED_ROW: i64 = 1024;

const STRIDED_OUTER: i64 = 1024;

fn concrete(e: &Expr, syms: &Ctx) -> Result<i64, PtxError> {
    e.simplify(syms).as_const().ok_or_else(|| PtxError::Unsupported(format!("symbolic size {e}")))
}

pub(crate) fn concrete_all(es: &[Expr], syms: &Ctx) -> Result<Vec<i64>, PtxError> {
    es.iter().map(|e| concrete(e, syms)).collect()
}

/// Who runs one row of a row kernel.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(crate) enum RowShape {
    /// A thread, alone (`thread_per_row`): no shuffles, no shared memory,
    /// no barriers.
    Thread,
    /// A warp (rows of at most `WARP_ROW` points): shuffles and
    /// `bar.warp.sync`, no shared memory.
    Warp,
    /// A block: shuffles, shared memory across warps, `bar.sync`.
    Block,
}

pub(crate) struct Launch {
    pub(crate) shape: RowShape,
    /// Threads per block.
    pub(crate) block: u32,
    /// Where a row loop starts (the thread's index among the row's
    /// threads) and its stride (the row's threads).
    pub(crate) start: String,
    pub(crate) step: i64,
    pub(crate) tid: String,
    pub(crate) lane: String,
    pub(crate) warp: String,
    pub(crate) smem: String,
}

/// Whether the kernel's rows run across memory while its outer points run
/// along it (a reduction over a leading or middle dim: `x.sum(0)`): every
/// load that moves with the row moves by more than one element, and some
/// load moves by one element with the innermost outer variable. A thread
/// per row then reads consecutive elements across a warp.
fn strided_rows(program: &Program, kernel: &Kernel, m: usize, syms: &Ctx) -> bool {
    if m == 0 {
        return false;
    }
    let coef = |e: &Expr, v: usize| {
        e.simplify(syms).terms().iter().find(|(a, _)| *a == Atom::Var(Var(v as u32))).map_or(0, |(_, c)| *c)
    };
    let mut along_outer = false;
    for stage in &kernel.stages {
        // Variables: outer, then inner, then reduced; the last moves fastest.
        let vars = stage.ranges.len() + stage.reduce.as_ref().map_or(0, |r| r.ranges.len());
        if vars == m {
            continue;
        }
        for id in program.scalars.topo(&[stage.value]) {
            if let ScalarOp::Load { index, .. } = &program.scalars.get(id).op {
                if coef(index, vars - 1).abs() == 1 {
                    return false;
                }
                along_outer |= coef(index, m - 1).abs() == 1;
            }
        }
    }
    along_outer
}

/// An s64 register with the value of special register `name` (`%tid.x`).
pub(crate) fn sreg(f: &mut Func, name: &str) -> String {
    let r32 = f.reg(Class::B32);
    f.ins(format!("mov.u32 {r32}, {name}"));
    let r = f.reg(Class::S64);
    f.ins(format!("cvt.u64.u32 {r}, {r32}"));
    r
}

/// A grid-stride loop's start (the global thread index) and step (the
/// grid's threads), and the thread index in the block.
pub(crate) fn grid_stride(f: &mut Func, grid: i64) -> (String, String, String) {
    let (cta, ntid, tid) = (sreg(f, "%ctaid.x"), sreg(f, "%ntid.x"), sreg(f, "%tid.x"));
    let start = f.reg(Class::S64);
    f.ins(format!("mad.lo.s64 {start}, {cta}, {ntid}, {tid}"));
    let step = f.reg(Class::S64);
    f.ins(format!("mul.lo.s64 {step}, {ntid}, {grid}"));
    (start, step, tid)
}

/// Whether a row kernel runs a thread per outer point: its rows are short,
/// or strided ones (see `strided_rows`) that fit.
/// `longest` is `longest_row`.
pub(crate) fn thread_per_row(
    program: &Program,
    kernel: &Kernel,
    m: usize,
    outer_n: i64,
    longest: i64,
    syms: &Ctx,
) -> bool {
    longest <= SHORT_ROW
        || (longest <= STRIDED_ROW && outer_n >= STRIDED_OUTER && strided_rows(program, kernel, m, syms))
}

/// Lane and warp registers of thread index `tid`.
pub(crate) fn lane_warp(f: &mut Func, tid: &str) -> (String, String) {
    let lane = f.reg(Class::S64);
    f.ins(format!("and.b64 {lane}, {tid}, 31"));
    let warp = f.reg(Class::S64);
    f.ins(format!("shr.u64 {warp}, {tid}, 5"));
    (lane, warp)
}

/// The most points any stage of `kernel` has per outer point.
pub(crate) fn longest_row(kernel: &Kernel, m: usize, syms: &Ctx) -> Result<i64, PtxError> {
    let mut longest = 0;
    for stage in &kernel.stages {
        let inner = concrete_all(&stage.ranges[m..], syms)?;
        let red = stage.reduce.as_ref().map(|r| concrete_all(&r.ranges, syms)).transpose()?;
        longest = longest.max(inner.iter().chain(red.iter().flatten()).product());
    }
    Ok(longest)
}
