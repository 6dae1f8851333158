//! Loop-IR kernels → PTX entry functions.
//!
//! Pointwise kernels: a grid-stride loop, one element per thread (or 4, `vector.rs`).
//! Row kernels: a thread per row (rows of at most `SHORT_ROW` points, or strided
//! rows), a warp per row (at most `WARP_ROW` points; shuffles only), else a block per
//! row (`BLOCK`, or `LONG_BLOCK` threads for rows of `LONG_ROW` points or more); row
//! loops take `UNROLL` points per thread, in the plain loop's order (bit-identical).
//! Scatter kernels run on one thread. `kernel_ptx` emits twice where it can: the
//! second emission drops stores to private temporaries that no load reads.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;

use rdyn_ir::loops::{BufId, BufRole, Kernel, Program, ReduceOp, ScalarId, ScalarOp, Stage, Step};
use rdyn_ir::{Atom, Ctx, Expr, Kind, Var};

use crate::emit::{imm, sel_ty, store, Class, Emitter, Func};
use crate::row::{canonical, chunked_loop, max_chunks, RowCache};
use crate::{IndexChecks, PtxError, PTX_TARGET, PTX_VERSION};

/// Threads per block.
pub const BLOCK: u32 = 256;
/// Threads per block of a row kernel whose rows hold at least `LONG_ROW`
/// points: fewer rows in flight, so a row that several stages read (a
/// softmax reads its input three times) stays in L2 between them.
const LONG_BLOCK: u32 = 1024;
const LONG_ROW: i64 = 8192;
/// Blocks a grid-stride kernel launches at most.
pub(crate) const MAX_GRID: i64 = 65_535;

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

fn concrete(e: &Expr, syms: &Ctx) -> Result<i64, PtxError> {
    e.simplify(syms).as_const().ok_or_else(|| PtxError::Unsupported(format!("symbolic size {e}")))
}

fn concrete_all(es: &[Expr], syms: &Ctx) -> Result<Vec<i64>, PtxError> {
    es.iter().map(|e| concrete(e, syms)).collect()
}

/// Set the loop variables `first..` from `linear` unravelled over `sizes`.
pub(crate) fn unravel(f: &mut Func, em: &mut Emitter<'_>, linear: &str, sizes: &[i64], first: usize) {
    if em.vars.len() < first + sizes.len() {
        em.vars.resize(first + sizes.len(), String::new());
    }
    // Below 2^31 points the divisions are 32-bit (a multiply-high by a
    // constant each); 64-bit division is far slower on GPUs.
    let small = sizes.iter().map(|s| s.max(&1)).product::<i64>() < (1 << 31);
    if small {
        let rem = f.reg(Class::B32);
        f.ins(format!("cvt.u32.u64 {rem}, {linear}"));
        for k in (0..sizes.len()).rev() {
            let v = f.reg(Class::S64);
            if k == 0 {
                f.ins(format!("cvt.u64.u32 {v}, {rem}"));
            } else if sizes[k] <= 1 {
                f.ins(format!("mov.b64 {v}, 0"));
            } else {
                let size = sizes[k];
                let r = f.reg(Class::B32);
                f.ins(format!("rem.u32 {r}, {rem}, {size}"));
                f.ins(format!("div.u32 {rem}, {rem}, {size}"));
                f.ins(format!("cvt.u64.u32 {v}, {r}"));
            }
            em.vars[first + k] = v;
        }
        return;
    }
    let rem = f.mov(Class::S64, linear);
    for k in (0..sizes.len()).rev() {
        let v = f.reg(Class::S64);
        if k == 0 {
            f.ins(format!("mov.b64 {v}, {rem}"));
        } else {
            let size = sizes[k].max(1);
            f.ins(format!("rem.u64 {v}, {rem}, {size}"));
            f.ins(format!("div.u64 {rem}, {rem}, {size}"));
        }
        em.vars[first + k] = v;
    }
}

/// `for (i = start; i < end; i += step) { body }` over an s64 register.
pub(crate) fn counted_loop(
    f: &mut Func,
    start: &str,
    end: i64,
    step: &str,
    body: impl FnOnce(&mut Func, &str) -> Result<(), PtxError>,
) -> Result<(), PtxError> {
    let i = f.mov(Class::S64, start);
    let (top, done) = (f.label("loop"), f.label("done"));
    f.place(&top);
    let p = f.setp("ge", "s64", &i, &end.to_string());
    f.ins(format!("@{p} bra {done}"));
    body(f, &i)?;
    f.ins(format!("add.s64 {i}, {i}, {step}"));
    f.ins(format!("bra {top}"));
    f.place(&done);
    Ok(())
}

/// Points a block thread handles together in its reduction and row loops.
const UNROLL: i64 = 4;

/// `for (i = start; i < end; i += step)`, `UNROLL` points at a time while
/// that many remain: `compute` emits each point's value before `consume`
/// folds or stores any of them, so their loads are in flight together
/// (a thread with one load outstanding cannot fill HBM's pipe). The points
/// are consumed in the loop's order, so results match the plain loop
/// bit for bit. The rest run one at a time.
fn unrolled_loop<T>(
    f: &mut Func,
    em: &mut Emitter<'_>,
    start: &str,
    end: i64,
    step: i64,
    mut compute: impl FnMut(&mut Func, &mut Emitter<'_>, &str) -> Result<T, PtxError>,
    mut consume: impl FnMut(&mut Func, &mut Emitter<'_>, &str, T) -> Result<(), PtxError>,
) -> Result<(), PtxError> {
    let i = f.mov(Class::S64, start);
    if end >= UNROLL * step {
        let (top, rest) = (f.label("unrolled"), f.label("rest"));
        f.place(&top);
        let last = f.reg(Class::S64);
        f.ins(format!("add.s64 {last}, {i}, {}", (UNROLL - 1) * step));
        let p = f.setp("ge", "s64", &last, &end.to_string());
        f.ins(format!("@{p} bra {rest}"));
        let mut points = Vec::new();
        for u in 0..UNROLL {
            let at = f.reg(Class::S64);
            f.ins(format!("add.s64 {at}, {i}, {}", u * step));
            let value = compute(f, em, &at)?;
            points.push((at, value));
        }
        for (at, value) in points {
            consume(f, em, &at, value)?;
        }
        f.ins(format!("add.s64 {i}, {i}, {}", UNROLL * step));
        f.ins(format!("bra {top}"));
        f.place(&rest);
    }
    counted_loop(f, &i, end, &step.to_string(), |f, at| {
        let value = compute(f, em, at)?;
        consume(f, em, at, value)
    })
}

/// Compute a stage's value at the current loop variables; its register.
pub(crate) fn value(
    f: &mut Func,
    em: &Emitter<'_>,
    stage: &Stage,
) -> Result<(String, HashMap<ScalarId, String>), PtxError> {
    let mut roots = vec![stage.value];
    roots.extend(stage.store_indirect.iter().map(|(s, _)| *s));
    let regs = em.scalars(f, &roots)?;
    let v = regs.get(&stage.value).cloned().ok_or(PtxError::Internal("stage value not emitted"))?;
    Ok((v, regs))
}

/// Store `v` (of `kind`) as the stage's output at the current variables.
fn store_stage(
    f: &mut Func,
    em: &Emitter<'_>,
    stage: &Stage,
    v: &str,
    kind: Kind,
    regs: &HashMap<ScalarId, String>,
) -> Result<(), PtxError> {
    let dtype = em.program.buffer(stage.out).dtype;
    let root = em.program.storage_of(stage.out);
    let plain = stage.store_indirect.is_empty() && kind == dtype.kind();
    if plain && em.row.unstored.contains(&root) {
        em.row.stored(root, Some(&stage.store), dtype, em.syms, v);
        return Ok(());
    }
    let mut idx = em.index(f, &stage.store)?;
    for (s, stride) in &stage.store_indirect {
        let st = em.index(f, stride)?;
        let r = regs.get(s).ok_or(PtxError::Internal("scatter index not emitted"))?;
        let next = f.reg(Class::S64);
        f.ins(format!("mad.lo.s64 {next}, {r}, {st}, {idx}"));
        idx = next;
    }
    let addr = em.address(f, stage.out, &idx)?;
    store(f, &addr, v, kind, dtype);
    em.row.stored(root, Some(&stage.store).filter(|_| plain), dtype, em.syms, v);
    Ok(())
}

pub(crate) fn pointwise_stage_at(f: &mut Func, em: &Emitter<'_>, stage: &Stage) -> Result<(), PtxError> {
    let (v, regs) = value(f, em, stage)?;
    let kind = em.program.scalars.dtype(stage.value).kind();
    store_stage(f, em, stage, &v, kind, &regs)
}

fn identity(op: ReduceOp, class: Class) -> String {
    let float = class != Class::S64;
    match op {
        ReduceOp::Sum | ReduceOp::Any => imm(class, 0.0),
        ReduceOp::Prod | ReduceOp::All => imm(class, 1.0),
        ReduceOp::Max | ReduceOp::ArgMax if float => imm(class, f64::NEG_INFINITY),
        ReduceOp::Min | ReduceOp::ArgMin if float => imm(class, f64::INFINITY),
        ReduceOp::Max | ReduceOp::ArgMax => "0x8000000000000000".to_string(),
        ReduceOp::Min | ReduceOp::ArgMin => i64::MAX.to_string(),
    }
}

/// `acc = acc ⊕ v` in place.
fn combine(f: &mut Func, op: ReduceOp, class: Class, acc: &str, v: &str) -> Result<(), PtxError> {
    let ty = class.ty();
    let float = class != Class::S64;
    match op {
        ReduceOp::Sum if float => f.ins(format!("add.rn.{ty} {acc}, {acc}, {v}")),
        ReduceOp::Sum => f.ins(format!("add.s64 {acc}, {acc}, {v}")),
        ReduceOp::Prod if float => f.ins(format!("mul.rn.{ty} {acc}, {acc}, {v}")),
        ReduceOp::Prod => f.ins(format!("mul.lo.s64 {acc}, {acc}, {v}")),
        ReduceOp::Max | ReduceOp::Min => {
            let m = if op == ReduceOp::Max { "max" } else { "min" };
            if class == Class::F32 {
                f.ins(format!("{m}.NaN.f32 {acc}, {acc}, {v}"));
            } else if class == Class::F64 {
                // max.f64 has no .NaN form: a NaN on either side stays.
                let nan = f.setp("nan", "f64", acc, v);
                f.ins(format!("{m}.f64 {acc}, {acc}, {v}"));
                f.ins(format!("@{nan} add.rn.f64 {acc}, {acc}, {v}"));
            } else {
                f.ins(format!("{m}.s64 {acc}, {acc}, {v}"));
            }
        }
        ReduceOp::Any | ReduceOp::All if !float => {
            let pa = f.setp("ne", "s64", acc, "0");
            let pv = f.setp("ne", "s64", v, "0");
            let p = f.pred(if op == ReduceOp::Any { "or" } else { "and" }, &pa, &pv);
            f.ins(format!("selp.b64 {acc}, 1, 0, {p}"));
        }
        other => return Err(PtxError::Unsupported(format!("{other} reduction of floats"))),
    }
    Ok(())
}

/// Whether candidate `(v, vi)` beats `(acc, acci)` for an arg-reduction:
/// NaN first, then the extreme, ties to the lower index; index −1 is empty.
fn arg_better(f: &mut Func, is_max: bool, class: Class, acc: &str, acci: &str, v: &str, vi: &str) -> String {
    let ty = class.ty();
    let float = class != Class::S64;
    let cmp = if is_max { "gt" } else { "lt" };
    let strictly = f.setp(cmp, ty, v, acc);
    let equal = f.setp("eq", ty, v, acc);
    let lower = f.setp("lt", "s64", vi, acci);
    let tie = f.pred("and", &equal, &lower);
    let mut better = f.pred("or", &strictly, &tie);
    if float {
        // NaN beats numbers; between NaNs the lower index wins: with a NaN
        // on either side, the NaN rule decides instead.
        let an = f.setp("nan", ty, acc, acc);
        let vn = f.setp("nan", ty, v, v);
        let any_nan = f.pred("or", &an, &vn);
        let first = f.pred("or", &format!("!{an}"), &lower);
        let nan_rule = f.pred("and", &vn, &first);
        let by_nan = f.pred("and", &any_nan, &nan_rule);
        let by_value = f.pred("and", &format!("!{any_nan}"), &better);
        better = f.pred("or", &by_nan, &by_value);
    }
    let empty_v = f.setp("lt", "s64", vi, "0");
    let empty_acc = f.setp("lt", "s64", acci, "0");
    let r = f.pred("or", &better, &empty_acc);
    f.ins(format!("and.pred {r}, {r}, !{empty_v}"));
    r
}

/// Exchange a register with the lane `offset` away (butterfly), any class.
fn shuffle(f: &mut Func, class: Class, x: &str, offset: u32) -> String {
    let out = f.reg(class);
    if class == Class::F32 {
        f.ins(format!("shfl.sync.bfly.b32 {out}, {x}, {offset}, 31, -1"));
        return out;
    }
    let (lo, hi) = (f.reg(Class::B32), f.reg(Class::B32));
    f.ins(format!("mov.b64 {{{lo}, {hi}}}, {x}"));
    f.ins(format!("shfl.sync.bfly.b32 {lo}, {lo}, {offset}, 31, -1"));
    f.ins(format!("shfl.sync.bfly.b32 {hi}, {hi}, {offset}, 31, -1"));
    f.ins(format!("mov.b64 {out}, {{{lo}, {hi}}}"));
    out
}

/// Fold `(acc, acci)` across the lanes of each warp (`lanes` = 32 or fewer).
fn warp_reduce(f: &mut Func, op: ReduceOp, class: Class, acc: &str, acci: &str, lanes: u32) -> Result<(), PtxError> {
    let arg = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
    let mut offset = lanes / 2;
    while offset > 0 {
        let other = shuffle(f, class, acc, offset);
        if arg {
            let other_i = shuffle(f, Class::S64, acci, offset);
            let p = arg_better(f, op == ReduceOp::ArgMax, class, acc, acci, &other, &other_i);
            f.ins(format!("@{p} mov.{} {acc}, {other}", sel_ty(class)));
            f.ins(format!("@{p} mov.b64 {acci}, {other_i}"));
        } else {
            combine(f, op, class, acc, &other)?;
        }
        offset /= 2;
    }
    Ok(())
}

/// Who runs one row of a row kernel.
#[derive(Copy, Clone, PartialEq, Eq)]
enum RowShape {
    /// A thread, alone (`thread_per_row`): no shuffles, no shared memory,
    /// no barriers.
    Thread,
    /// A warp (rows of at most `WARP_ROW` points): shuffles and
    /// `bar.warp.sync`, no shared memory.
    Warp,
    /// A block: shuffles, shared memory across warps, `bar.sync`.
    Block,
}

struct Launch {
    shape: RowShape,
    /// Threads per block.
    block: u32,
    /// Where a row loop starts (the thread's index among the row's
    /// threads) and its stride (the row's threads).
    start: String,
    step: i64,
    tid: String,
    lane: String,
    warp: String,
    smem: String,
}

/// Rows of at most this many points in every stage run a warp per row.
const WARP_ROW: i64 = 1024;

/// Rows of at most this many points (every stage's inner points times its
/// reduced points) run a thread per row.
const SHORT_ROW: i64 = 16;
/// Strided rows (see `strided_rows`) of at most this many points run a
/// thread per row when there are at least `STRIDED_OUTER` rows.
const STRIDED_ROW: i64 = 1024;
const STRIDED_OUTER: i64 = 1024;

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

/// A grid-stride loop's start (the global thread index) and step (the
/// grid's threads), and the thread index in the block.
pub(crate) fn grid_stride(f: &mut Func, grid: i64) -> (String, String, String) {
    let sreg = |f: &mut Func, name: &str| {
        let r32 = f.reg(Class::B32);
        f.ins(format!("mov.u32 {r32}, {name}"));
        let r = f.reg(Class::S64);
        f.ins(format!("cvt.u64.u32 {r}, {r32}"));
        r
    };
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
fn thread_per_row(program: &Program, kernel: &Kernel, m: usize, outer_n: i64, longest: i64, syms: &Ctx) -> bool {
    longest <= SHORT_ROW
        || (longest <= STRIDED_ROW && outer_n >= STRIDED_OUTER && strided_rows(program, kernel, m, syms))
}

/// Lane and warp registers of thread index `tid`.
fn lane_warp(f: &mut Func, tid: &str) -> (String, String) {
    let lane = f.reg(Class::S64);
    f.ins(format!("and.b64 {lane}, {tid}, 31"));
    let warp = f.reg(Class::S64);
    f.ins(format!("shr.u64 {warp}, {tid}, 5"));
    (lane, warp)
}

/// The most points any stage of `kernel` has per outer point.
fn longest_row(kernel: &Kernel, m: usize, syms: &Ctx) -> Result<i64, PtxError> {
    let mut longest = 0;
    for stage in &kernel.stages {
        let inner = concrete_all(&stage.ranges[m..], syms)?;
        let red = stage.reduce.as_ref().map(|r| concrete_all(&r.ranges, syms)).transpose()?;
        longest = longest.max(inner.iter().chain(red.iter().flatten()).product());
    }
    Ok(longest)
}

fn reduce_stage(f: &mut Func, em: &mut Emitter<'_>, l: &Launch, stage: &Stage, m: usize) -> Result<(), PtxError> {
    let Some(reduce) = &stage.reduce else { return Err(PtxError::Internal("not a reduction")) };
    let inner = concrete_all(&stage.ranges[m..], em.syms)?;
    let red = concrete_all(&reduce.ranges, em.syms)?;
    let kind = em.program.scalars.dtype(stage.value).kind();
    let class = Class::of(kind);
    let arg = matches!(reduce.op, ReduceOp::ArgMax | ReduceOp::ArgMin);
    let inner_n: i64 = inner.iter().product();
    let red_n: i64 = red.iter().product();
    let point = |f: &mut Func, em: &mut Emitter<'_>, r: &str| {
        unravel(f, em, r, &red, m + inner.len());
        Ok(value(f, em, stage)?.0)
    };
    let fold = |acc: &str, acci: &str| {
        let (acc, acci) = (acc.to_string(), acci.to_string());
        move |f: &mut Func, _: &mut Emitter<'_>, r: &str, v: String| {
            if arg {
                let p = arg_better(f, reduce.op == ReduceOp::ArgMax, class, &acc, &acci, &v, r);
                f.ins(format!("@{p} mov.{} {acc}, {v}", sel_ty(class)));
                f.ins(format!("@{p} mov.b64 {acci}, {r}"));
                Ok(())
            } else {
                combine(f, reduce.op, class, &acc, &v)
            }
        }
    };
    let result = |f: &mut Func, acc: &str, acci: &str| {
        if arg {
            let i = f.reg(Class::S64);
            f.ins(format!("max.s64 {i}, {acci}, 0"));
            (i, Kind::I64)
        } else {
            (acc.to_string(), kind)
        }
    };
    if l.shape == RowShape::Thread {
        // The thread reduces its row's inner points one after another.
        return counted_loop(f, "0", inner_n, "1", |f, j| {
            unravel(f, em, j, &inner, m);
            let acc = f.mov(class, &identity(reduce.op, class));
            let acci = f.mov(Class::S64, "-1");
            let zero = f.mov(Class::S64, "0");
            unrolled_loop(f, em, &zero, red_n, 1, point, fold(&acc, &acci))?;
            let (v, v_kind) = result(f, &acc, &acci);
            store_stage(f, em, stage, &v, v_kind, &HashMap::new())
        });
    }
    let one = f.mov(Class::S64, "1");
    let zero = f.mov(Class::S64, "0");
    counted_loop(f, &zero, inner_n, &one, |f, ii| {
        unravel(f, em, ii, &inner, m);
        let acc = f.mov(class, &identity(reduce.op, class));
        let acci = f.mov(Class::S64, "-1");
        let fold = fold(&acc, &acci);
        if inner_n == 1 && red_n <= l.step * max_chunks(l.block) {
            let canon = canonical(m, inner.len(), red.len());
            chunked_loop(f, em, &l.start, red_n, l.step, canon, red.clone(), point, fold)?;
        } else {
            unrolled_loop(f, em, &l.start, red_n, l.step, point, fold)?;
        }
        warp_reduce(f, reduce.op, class, &acc, &acci, 32)?;
        if l.shape == RowShape::Warp {
            // Every lane holds the row's result; lane 0 stores it.
            let stored = f.label("stored");
            let not_lane0 = f.setp("ne", "s64", &l.lane, "0");
            f.ins(format!("@{not_lane0} bra {stored}"));
            let (v, v_kind) = result(f, &acc, &acci);
            store_stage(f, em, stage, &v, v_kind, &HashMap::new())?;
            f.place(&stored);
            f.ins("bar.warp.sync -1");
            return Ok(());
        }
        // Lane 0 of each warp parks its result in shared memory.
        let lane0 = f.setp("eq", "s64", &l.lane, "0");
        let slot = f.reg(Class::S64);
        f.ins(format!("mad.lo.s64 {slot}, {}, 16, {}", l.warp, l.smem));
        let mty = if class == Class::F32 { "f32" } else { sel_ty(class) };
        f.ins(format!("@{lane0} st.shared.{mty} [{slot}], {acc}"));
        f.ins(format!("@{lane0} st.shared.b64 [{slot}+8], {acci}"));
        f.ins("bar.sync 0");
        // Warp 0 folds the per-warp results; thread 0 stores.
        let (skip, stored) = (f.label("skip"), f.label("stored"));
        let not_w0 = f.setp("ne", "s64", &l.warp, "0");
        f.ins(format!("@{not_w0} bra {skip}"));
        let warps = l.block / 32;
        let have = f.setp("lt", "s64", &l.lane, &warps.to_string());
        let slot0 = f.reg(Class::S64);
        f.ins(format!("mad.lo.s64 {slot0}, {}, 16, {}", l.lane, l.smem));
        f.ins(format!("mov.{} {acc}, {}", sel_ty(class), identity(reduce.op, class)));
        f.ins(format!("mov.b64 {acci}, -1"));
        f.ins(format!("@{have} ld.shared.{mty} {acc}, [{slot0}]"));
        f.ins(format!("@{have} ld.shared.b64 {acci}, [{slot0}+8]"));
        warp_reduce(f, reduce.op, class, &acc, &acci, warps)?;
        let t0 = f.setp("ne", "s64", &l.tid, "0");
        f.ins(format!("@{t0} bra {stored}"));
        let (v, v_kind) = result(f, &acc, &acci);
        store_stage(f, em, stage, &v, v_kind, &HashMap::new())?;
        f.place(&stored);
        f.place(&skip);
        f.ins("bar.sync 0");
        Ok(())
    })
}

fn inner_pointwise_stage(
    f: &mut Func,
    em: &mut Emitter<'_>,
    l: &Launch,
    stage: &Stage,
    m: usize,
) -> Result<(), PtxError> {
    let inner = concrete_all(&stage.ranges[m..], em.syms)?;
    let n: i64 = inner.iter().product();
    if l.shape == RowShape::Thread {
        return counted_loop(f, "0", n, "1", |f, j| {
            unravel(f, em, j, &inner, m);
            pointwise_stage_at(f, em, stage)
        });
    }
    let kind = em.program.scalars.dtype(stage.value).kind();
    let point = |f: &mut Func, em: &mut Emitter<'_>, j: &str| {
        unravel(f, em, j, &inner, m);
        let (v, regs) = value(f, em, stage)?;
        Ok((v, regs, em.vars.clone()))
    };
    // Each point is stored at its own loop variables.
    let put = |f: &mut Func,
               em: &mut Emitter<'_>,
               _: &str,
               (v, regs, vars): (String, HashMap<ScalarId, String>, Vec<String>)| {
        em.vars = vars;
        store_stage(f, em, stage, &v, kind, &regs)
    };
    if n <= l.step * max_chunks(l.block) {
        let canon = canonical(m, 0, inner.len());
        return chunked_loop(f, em, &l.start, n, l.step, canon, inner.clone(), point, put);
    }
    unrolled_loop(f, em, &l.start, n, l.step, point, put)
}

/// A row kernel's stages at outer point `o` (a linear index over `outer`).
fn row_stages(
    f: &mut Func,
    em: &mut Emitter<'_>,
    l: &Launch,
    kernel: &Kernel,
    outer: &[i64],
    o: &str,
) -> Result<(), PtxError> {
    let m = outer.len();
    unravel(f, em, o, outer, 0);
    for stage in &kernel.stages {
        if stage.reduce.is_some() {
            reduce_stage(f, em, l, stage, m)?;
        } else {
            inner_pointwise_stage(f, em, l, stage, m)?;
            match l.shape {
                RowShape::Thread => {}
                RowShape::Warp => f.ins("bar.warp.sync -1"),
                RowShape::Block => f.ins("bar.sync 0"),
            }
        }
    }
    Ok(())
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
    let outer_n: i64 = outer.iter().product();
    // Parameters: every storage root the kernel touches.
    let mut touched: BTreeMap<BufId, ()> = BTreeMap::new();
    for stage in &kernel.stages {
        let mut roots = vec![stage.value];
        roots.extend(stage.store_indirect.iter().map(|(s, _)| *s));
        for b in program.scalars.loaded_buffers(&roots) {
            touched.insert(program.storage_of(b), ());
        }
        touched.insert(program.storage_of(stage.out), ());
    }
    let params: Vec<BufId> = touched.into_keys().collect();
    let mut f = Func::default();
    let written = kernel.stages.iter().map(|s| program.storage_of(s.out)).collect();
    let mut em = Emitter {
        program,
        syms,
        bases: Default::default(),
        vars: Vec::new(),
        error_addr: None,
        checks,
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
    em.error_addr = Some(err);
    let sreg = |f: &mut Func, sreg: &str| {
        let r32 = f.reg(Class::B32);
        f.ins(format!("mov.u32 {r32}, {sreg}"));
        let r = f.reg(Class::S64);
        f.ins(format!("cvt.u64.u32 {r}, {r32}"));
        r
    };
    let serial = kernel.stages.iter().any(|s| !s.store_indirect.is_empty());
    let pointwise = !serial && kernel.stages.iter().all(|s| s.ranges.len() == m && s.reduce.is_none());
    let (grid, shared);
    let mut block = BLOCK;
    let longest = if serial || pointwise { 0 } else { longest_row(kernel, m, syms)? };
    if serial {
        grid = 1;
        shared = false;
        let zero = f.mov(Class::S64, "0");
        let one = f.mov(Class::S64, "1");
        counted_loop(&mut f, &zero, outer_n, &one, |f, o| {
            unravel(f, &mut em, o, &outer, 0);
            for stage in &kernel.stages {
                if stage.reduce.is_some() || stage.ranges.len() != m {
                    return Err(PtxError::Unsupported("scatter with inner dims".into()));
                }
                pointwise_stage_at(f, &em, stage)?;
            }
            Ok(())
        })?;
    } else if pointwise {
        grid = crate::vector::pointwise(&mut f, &mut em, kernel, &outer)?;
        shared = false;
    } else if thread_per_row(program, kernel, m, outer_n, longest, syms) {
        // A thread per outer point runs its stages in order.
        grid = ((outer_n.max(1) + BLOCK as i64 - 1) / BLOCK as i64).min(MAX_GRID);
        shared = false;
        let (start, step, tid) = grid_stride(&mut f, grid);
        let none = String::new;
        let l = Launch {
            shape: RowShape::Thread,
            block,
            start: none(),
            step: 1,
            tid,
            lane: none(),
            warp: none(),
            smem: none(),
        };
        counted_loop(&mut f, &start, outer_n, &step, |f, o| row_stages(f, &mut em, &l, kernel, &outer, o))?;
    } else if longest <= WARP_ROW {
        // A warp per row: row ctaid·warps + warp, then every grid's worth.
        let warps = i64::from(BLOCK / 32);
        grid = ((outer_n.max(1) + warps - 1) / warps).min(MAX_GRID);
        shared = false;
        let cta = sreg(&mut f, "%ctaid.x");
        let tid = sreg(&mut f, "%tid.x");
        let (lane, warp) = lane_warp(&mut f, &tid);
        let first = f.reg(Class::S64);
        f.ins(format!("mad.lo.s64 {first}, {cta}, {warps}, {warp}"));
        let l = Launch {
            shape: RowShape::Warp,
            block,
            start: lane.clone(),
            step: 32,
            tid,
            lane,
            warp,
            smem: String::new(),
        };
        let step = (grid * warps).to_string();
        counted_loop(&mut f, &first, outer_n, &step, |f, o| row_stages(f, &mut em, &l, kernel, &outer, o))?;
    } else {
        grid = outer_n.clamp(1, MAX_GRID);
        shared = true;
        let cta = sreg(&mut f, "%ctaid.x");
        let tid = sreg(&mut f, "%tid.x");
        let (lane, warp) = lane_warp(&mut f, &tid);
        let smem = f.reg(Class::S64);
        f.ins(format!("mov.u64 {smem}, {name}_smem"));
        if longest >= LONG_ROW {
            block = LONG_BLOCK;
        }
        let l =
            Launch { shape: RowShape::Block, block, start: tid.clone(), step: i64::from(block), tid, lane, warp, smem };
        let step = grid.to_string();
        counted_loop(&mut f, &cta, outer_n, &step, |f, o| row_stages(f, &mut em, &l, kernel, &outer, o))?;
    }
    let error_flag = f.error_flag;
    let mut src = String::new();
    let _ = writeln!(src, ".version {PTX_VERSION}\n.target {PTX_TARGET}\n.address_size 64\n");
    let _ = writeln!(src, ".visible .entry {name}(");
    for k in 0..params.len() {
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
    let ptx =
        PtxKernel { name, source: src, params, grid: grid as u32, block: if serial { 1 } else { block }, error_flag };
    Ok((ptx, em.row.memory_loads()))
}
