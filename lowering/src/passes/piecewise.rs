//! Piecewise stages (CPU): a stage that picks between sources by index
//! ranges (a `cat`, a `constant_pad_nd`, both, with whatever pointwise ops
//! follow) evaluates every source's masked read, and the selects between them,
//! at every element (the JIT computes a masked load lane by lane). This pass
//! splits such a stage's iteration space where its range conditions change, so
//! each piece reads one source, unmasked: a `cat` of two tensors becomes two
//! copies. The pieces write disjoint parts of the same buffer, each a
//! kernel over its own space ([`schedule`] fuses pieces of equal ranges,
//! and does not narrow the outer space to put the others side by side:
//! a pad's 3-wide column as a short inner loop per row costs more than its
//! own kernel).
//!
//! Wherever a range condition `c·v + r ≥ 0` turns at one index of a variable `v`
//! whatever the other variables are, the space is cut there: recursively,
//! outermost variable first, only along conditions that still matter in the
//! piece (not decided by its ranges, nor under a select they decide). Each piece
//! is a stage over its own ranges, its variables shifted to the piece's start,
//! with the conditions its ranges decide folded away (`loops/simplify.rs`): one
//! unmasked copy per `cat` input, one fill per padded side. A stage is split only
//! into at most `MAX_STAGES` (64) pieces of at most `MAX_PIECES` (16) shapes,
//! each shape a kernel of at least `piecewise_min` elements on
//! average ([`PIECEWISE_MIN_ELEMENTS`], 2048, by default; `RDYN_PIECEWISE_MIN`
//! sets it, and the fuzz tests run every seed again at 1, which splits the small
//! tensors they use). `forward.rs` leaves buffers written in pieces stored.
//!
//! GPU backends keep the masked form (predicated loads there cost no more than
//! the selects).
//!
//! Runs before [`schedule`], when every kernel still holds one stage whose
//! outer space is its output space.
//!
//! [`schedule`]: crate::passes::schedule

use std::collections::{HashMap, HashSet};

use rdyn_ir::loops::{BinaryOp, Kernel, Program, ScalarId, ScalarOp, Scalars, Stage, Step};
use rdyn_ir::{Atom, Ctx, DType, Expr, Var};

/// More pieces of distinct shapes than this cost more in loop overhead than
/// the masks do: each is a kernel of its own.
const MAX_PIECES: usize = 16;

/// At most this many pieces in all. Pieces of one shape fuse into one
/// kernel, a stage each ([`schedule`]), so many cost little more than a few:
/// a DenseNet layer reads the concatenation of every earlier layer's 32
/// channels, 20-odd pieces of one shape, whose masked form evaluated every
/// source's read and select at each element (118 instructions; half the
/// model's kernel time).
const MAX_STAGES: usize = 64;

/// Elements per piece below which a piece's own loop costs more than the
/// masked reads it saves (about 0.7 ns an element on the CPU): the
/// default of [`crate::LowerOptions::piecewise_min`].
pub const PIECEWISE_MIN_ELEMENTS: i64 = 2048;

/// One piece: per output variable, its first index and its extent.
type Piece = Vec<(i64, i64)>;

/// Run the pass over `program`: split stages into pieces of at least
/// `min_elements` elements on average.
pub fn run(program: &mut Program, min_elements: i64) {
    let steps = std::mem::take(&mut program.steps);
    for step in steps {
        let split = match &step {
            Step::Kernel(kernel) if kernel.stages.len() == 1 && kernel.outer.len() == kernel.stages[0].ranges.len() => {
                split(program, &kernel.stages[0], min_elements)
            }
            _ => None,
        };
        match split {
            Some(stages) => program
                .steps
                .extend(stages.into_iter().map(|s| Step::Kernel(Kernel { outer: s.ranges.clone(), stages: vec![s] }))),
            None => program.steps.push(step),
        }
    }
}

/// `stage` as pieces, when its range conditions split its output space.
fn split(program: &mut Program, stage: &Stage, min_elements: i64) -> Option<Vec<Stage>> {
    if !stage.store_indirect.is_empty() {
        return None;
    }
    let sizes: Vec<i64> = stage.ranges.iter().map(Expr::as_const).collect::<Option<_>>()?;
    let reduce: Vec<i64> = match &stage.reduce {
        Some(r) => r.ranges.iter().map(Expr::as_const).collect::<Option<_>>()?,
        None => Vec::new(),
    };
    if conditions(&program.scalars, stage.value).is_empty() && masked(&program.scalars, stage.value) == 0 {
        return None;
    }
    let parts = residues(&mut program.scalars, stage, &sizes, &reduce).unwrap_or_else(|| vec![stage.clone()]);
    let mut pieces = Vec::new();
    for (k, part) in parts.iter().enumerate() {
        let whole: Piece = part.ranges.iter().map(|r| (0, r.as_const().unwrap_or(0))).collect();
        let mut out = Vec::new();
        cut(&mut program.scalars, part.value, whole, &reduce, &mut out);
        pieces.extend(out.into_iter().map(|(piece, value)| (k, piece, value)));
    }
    // Saturating: a malformed graph's stage may have more points than an i64 counts.
    let elements = sizes.iter().chain(&reduce).fold(1i64, |n, &m| n.saturating_mul(m));
    // Kernels: pieces of one shape fuse into one. An interleave's residue
    // parts count one each: fused, their strided stores would replace the
    // contiguous ones `split.rs` in the CPU backend makes of the whole.
    let kernels = if parts.len() > 1 {
        pieces.len()
    } else {
        pieces
            .iter()
            .map(|(_, piece, _)| piece.iter().map(|&(_, n)| n).collect::<Vec<_>>())
            .collect::<HashSet<_>>()
            .len()
    };
    if pieces.len() < 2
        || pieces.len() > MAX_STAGES
        || kernels > MAX_PIECES
        || elements < min_elements.saturating_mul(kernels as i64)
    {
        return None;
    }
    Some(
        pieces
            .into_iter()
            .map(|(k, piece, value)| piece_stage(&mut program.scalars, &parts[k], &piece, value, &reduce))
            .collect(),
    )
}

/// `stage` as one stage per residue `r` of an output variable `v` modulo
/// `k` (`v = k·w + r`, `w` the part's variable), when its conditions test
/// `v` through `v % k` or `v // k` (an interleave: `stack(.., -1).flatten(-2)`,
/// the backward of `x[..., ::2]` and `x[..., 1::2]`). In each part those
/// atoms are affine in `w` and the conditions on them constants, so the
/// part's selects and masked loads fold away; a cut along `v` itself could
/// not decide them (they change at every other index). Of the variables that
/// qualify, the one leaving the fewest masked values per element, if fewer
/// than the stage has; at most [`MAX_RESIDUES`] parts.
fn residues(scalars: &mut Scalars, stage: &Stage, sizes: &[i64], reduce: &[i64]) -> Option<Vec<Stage>> {
    let indices = index_exprs(scalars, stage.value);
    if !indices.iter().chain([&stage.store]).all(small) {
        return None;
    }
    let whole = sizes.iter().product::<i64>().max(1) as f64;
    let mut best = (masked(scalars, stage.value) as f64, None);
    for v in 0..sizes.len() {
        let k = divisor(&indices, Var(v as u32));
        if !(2..=MAX_RESIDUES).contains(&k) || sizes[v] < k {
            continue;
        }
        let parts: Vec<Stage> = (0..k).map(|r| residue_stage(scalars, stage, sizes, reduce, (v, k, r))).collect();
        let cost = parts
            .iter()
            .map(|p| {
                masked(scalars, p.value) as f64 * p.ranges.iter().filter_map(Expr::as_const).product::<i64>() as f64
            })
            .sum::<f64>()
            / whole;
        if cost < best.0 {
            best = (cost, Some(parts));
        }
    }
    best.1
}

/// Most parts [`residues`] splits a stage into: an interleave of two or
/// four sources (complex numbers, RGBA pixels); a larger divisor (a head
/// split) is a reshape that `split.rs` in the CPU backend already makes
/// affine without a condition to decide.
const MAX_RESIDUES: i64 = 4;

/// `stage` over the points where variable `v` is `k·w + r` (`(v, k, r)`),
/// `w` in place of `v`, its conditions folded.
fn residue_stage(scalars: &mut Scalars, stage: &Stage, sizes: &[i64], reduce: &[i64], at: (usize, i64, i64)) -> Stage {
    let (v, k, r) = at;
    let mut part: Piece = sizes.iter().map(|&n| (0, n)).collect();
    part[v].1 = (sizes[v] - r + k - 1) / k;
    let ctx = piece_ctx(&part, reduce);
    let map: Vec<Expr> = (0..sizes.len() + reduce.len())
        .map(|j| if j == v { Expr::v(j as u32).scale(k).add_c(r) } else { Expr::v(j as u32) })
        .collect();
    let value = scalars.substitute(stage.value, &map, &ctx);
    Stage {
        out: stage.out,
        ranges: part.iter().map(|&(_, n)| Expr::c(n)).collect(),
        reduce: stage.reduce.clone(),
        value: fold(scalars, value, &ctx),
        store: stage.store.substitute_vars(&map, &ctx),
        store_indirect: Vec::new(),
    }
}

/// How many values under `root` a condition picks: masked loads and selects.
fn masked(scalars: &Scalars, root: ScalarId) -> usize {
    let picked =
        |id: &ScalarId| matches!(scalars.get(*id).op, ScalarOp::Load { mask: Some(_), .. } | ScalarOp::Where(..));
    scalars.topo(&[root]).iter().filter(|id| picked(id)).count()
}

/// The range conditions under `root`, each as `e ≥ 0`; an (in)equality
/// `a == b` as the two, `a - b ≥ 0` and `b - a ≥ 0`, whose turning points
/// bound where it holds (the backward of `unbind`: `i // 256 == k` picks
/// one gradient per block of rows).
fn conditions(scalars: &Scalars, root: ScalarId) -> Vec<Expr> {
    let mut out = Vec::new();
    for id in scalars.topo(&[root]) {
        if let Some(e) = condition(scalars, id) {
            out.push(e);
        } else if let ScalarOp::Binary(BinaryOp::Eq | BinaryOp::Ne, a, b) = scalars.get(id).op {
            if let Some(e) = difference(scalars, a, b) {
                out.extend([e.neg(), e]);
            }
        }
    }
    out
}

/// A comparison of two index values as `e ≥ 0`.
fn condition(scalars: &Scalars, id: ScalarId) -> Option<Expr> {
    let ScalarOp::Binary(op, a, b) = scalars.get(id).op else { return None };
    let (a, b) = (scalars.as_index(a)?, scalars.as_index(b)?);
    Some(match op {
        BinaryOp::Ge => a.sub(&b),
        BinaryOp::Gt => a.sub(&b).add_c(-1),
        BinaryOp::Le => b.sub(&a),
        BinaryOp::Lt => b.sub(&a).add_c(-1),
        _ => return None,
    })
}

/// `a - b` for index values `a` and `b` whose coefficients are small enough
/// that it cannot overflow (a malformed graph's index may hold any i64).
fn difference(scalars: &Scalars, a: ScalarId, b: ScalarId) -> Option<Expr> {
    Some(scalars.as_index(a).filter(small)?.sub(&scalars.as_index(b).filter(small)?))
}

/// Whether `e`'s coefficients leave room for the arithmetic of this pass
/// (sums, and products by small divisors) without overflow.
fn small(e: &Expr) -> bool {
    e.constant().unsigned_abs() < 1 << 40 && e.terms().iter().all(|(_, c)| c.unsigned_abs() < 1 << 40)
}

/// The truth of a comparison of two index values that `ctx` decides: a
/// range condition by its bounds, an (in)equality whose difference is
/// constant or cannot be zero there (`(v + 1) % 2 == 0` once `v` is odd).
fn decided(scalars: &Scalars, id: ScalarId, ctx: &Ctx) -> Option<bool> {
    if let Some((lo, hi)) = condition(scalars, id).and_then(|e| e.bounds(ctx)) {
        return if lo >= 0 { Some(true) } else { (hi < 0).then_some(false) };
    }
    let ScalarOp::Binary(op @ (BinaryOp::Eq | BinaryOp::Ne), a, b) = scalars.get(id).op else { return None };
    let (lo, hi) = difference(scalars, a, b)?.bounds(ctx)?;
    let equal = if lo == 0 && hi == 0 {
        true
    } else if lo > 0 || hi < 0 {
        false
    } else {
        return None;
    };
    Some(equal == (op == BinaryOp::Eq))
}

/// Where each variable ranges inside `piece` (reduction variables follow).
fn piece_ctx(piece: &Piece, reduce: &[i64]) -> Ctx {
    let mut ctx = Ctx::default();
    let ranges = piece.iter().copied().chain(reduce.iter().map(|&n| (0, n)));
    for (k, (lo, n)) in ranges.enumerate() {
        ctx.var_ranges.insert(Var(k as u32), (lo, lo + (n - 1).max(0)));
    }
    ctx
}

/// Split `piece` along the outermost variable where a condition that still
/// matters there (one the piece's ranges do not decide, under a select
/// they do not decide) turns from false to true (or back) at one index,
/// and recurse; a piece where no condition splits is final, with `value`
/// folded for it (in the stage's own variables).
fn cut(scalars: &mut Scalars, value: ScalarId, piece: Piece, reduce: &[i64], out: &mut Vec<(Piece, ScalarId)>) {
    if out.len() > MAX_STAGES {
        return;
    }
    let ctx = piece_ctx(&piece, reduce);
    let value = fold(scalars, value, &ctx);
    let undecided = conditions(scalars, value);
    let indices = index_exprs(scalars, value);
    for (v, &(lo, n)) in piece.iter().enumerate() {
        let step = divisor(&indices, Var(v as u32));
        let mut points: Vec<i64> = undecided
            .iter()
            .filter_map(|e| turning_point(e, Var(v as u32), &ctx))
            .map(|p| lo + (p - lo).div_euclid(step) * step)
            .filter(|&p| p > lo && p < lo + n)
            .collect();
        if points.is_empty() {
            continue;
        }
        points.sort_unstable();
        points.dedup();
        let mut start = lo;
        for end in points.into_iter().chain([lo + n]) {
            let mut sub = piece.clone();
            sub[v] = (start, end - start);
            cut(scalars, value, sub, reduce, out);
            start = end;
        }
        return;
    }
    out.push((piece, value));
}

/// Every index expression under `root`: its loads' and its index values.
fn index_exprs(scalars: &Scalars, root: ScalarId) -> Vec<Expr> {
    let of = |id: ScalarId| match &scalars.get(id).op {
        ScalarOp::Load { index, .. } => Some(index.clone()),
        ScalarOp::Index(e) => Some(e.clone()),
        _ => None,
    };
    scalars.topo(&[root]).into_iter().filter_map(of).collect()
}

/// The step pieces cut along `var` keep: the least common multiple of the constant
/// divisors `k` of the atoms `(var + c) // k` and `(var + c) % k` in the
/// indices (a strided `slice_scatter`, an interleave), or 1. A cut between
/// two multiples of it (an interleave's odd half starting at 1) would save
/// one stripe of masked reads and leave pieces no split divides, whose
/// divided indices the CPU computes lane by lane; the condition stays a
/// mask there instead (a rotary backward: 37 ms interpreted, against 1 ms
/// as one piece split in two halves).
fn divisor(indices: &[Expr], var: Var) -> i64 {
    fn visit(e: &Expr, var: Var, step: &mut i64) {
        for (atom, _) in e.terms() {
            visit_atom(atom, var, step);
        }
    }
    fn visit_atom(atom: &Atom, var: Var, step: &mut i64) {
        match atom {
            Atom::FloorDiv(x, d) | Atom::Mod(x, d) => {
                if let (Some(k), Some(1)) = (d.as_const(), x.linear_coef(var)) {
                    if k > 1 && *step % k != 0 {
                        *step = (*step / rdyn_ir::expr::gcd(*step, k)).saturating_mul(k).min(1 << 20);
                    }
                }
                visit(x, var, step);
            }
            Atom::Prod(factors) => factors.iter().for_each(|f| visit_atom(f, var, step)),
            Atom::Var(_) | Atom::Sym(_) => {}
        }
    }
    let mut step = 1;
    indices.iter().for_each(|e| visit(e, var, &mut step));
    step
}

/// The index of `var` at which `e ≥ 0` changes, when it is the same for
/// every value of the other variables: `e = c·var + r` with the bounds of
/// `r` giving one point.
/// Also when `var` enters `e` only as `(var + s) // k`: the point where
/// `e` turns in that quotient, times `k`, less `s` (a `cat` read through a
/// reshape: `128·(i // 256) + (j % 128) ≥ 128` turns at `i = 256`).
fn turning_point(e: &Expr, var: Var, ctx: &Ctx) -> Option<i64> {
    if let Some(c) = e.linear_coef(var).filter(|&c| c != 0) {
        return turning_point_of(e.sub(&Expr::var(var).scale(c)), c, ctx);
    }
    let mut quotients = e.terms().iter().filter(|(atom, _)| atom.mentions_var(var));
    let (atom, c) = quotients.next()?;
    let Atom::FloorDiv(x, k) = atom else { return None };
    let k = k.as_const().filter(|&k| k > 0)?;
    let s = x.sub(&Expr::var(var)).as_const()?;
    if quotients.next().is_some() {
        return None;
    }
    let rest = e.sub(&Expr::atom_expr(atom.clone()).scale(*c));
    turning_point_of(rest, *c, ctx)?.checked_mul(k)?.checked_sub(s)
}

/// The value of `u` at which `c·u + rest ≥ 0` changes, when it is the same
/// for every value of `rest`.
fn turning_point_of(rest: Expr, c: i64, ctx: &Ctx) -> Option<i64> {
    let (rmin, rmax) = rest.bounds(ctx)?;
    // c > 0: true from ceil(-r / c) on; c < 0: true up to floor(r / -c).
    let (a, b) = if c > 0 {
        (ceil_div(rmin.checked_neg()?, c), ceil_div(rmax.checked_neg()?, c))
    } else {
        (rmin.div_euclid(-c) + 1, rmax.div_euclid(-c) + 1)
    };
    (a == b).then_some(a)
}

fn ceil_div(a: i64, b: i64) -> i64 {
    -((-a).div_euclid(b))
}

/// `stage` over `piece` alone, computing `value` (the stage's value folded
/// for the piece): its variables shifted to the piece's start.
fn piece_stage(scalars: &mut Scalars, stage: &Stage, piece: &Piece, value: ScalarId, reduce: &[i64]) -> Stage {
    let n = piece.len();
    let shift: Vec<Expr> =
        (0..n + reduce.len()).map(|k| Expr::v(k as u32).add_c(piece.get(k).map_or(0, |p| p.0))).collect();
    let local: Piece = piece.iter().map(|&(_, len)| (0, len)).collect();
    let ctx = piece_ctx(&local, reduce);
    Stage {
        out: stage.out,
        ranges: piece.iter().map(|&(_, len)| Expr::c(len)).collect(),
        reduce: stage.reduce.clone(),
        value: scalars.substitute(value, &shift, &ctx),
        store: stage.store.substitute_vars(&shift, &ctx),
        store_indirect: Vec::new(),
    }
}

/// Rebuild `root` with the range conditions that `ctx` decides as
/// constants; the constructors fold what follows (`and`, `or`, `not`,
/// selects), and a load whose mask is decided loses it or reads nothing.
fn fold(scalars: &mut Scalars, root: ScalarId, ctx: &Ctx) -> ScalarId {
    let mut memo: HashMap<ScalarId, ScalarId> = HashMap::new();
    for id in scalars.topo(&[root]) {
        let node = scalars.get(id).clone();
        let get = |x: ScalarId| memo.get(&x).copied().unwrap_or(x);
        let out = match node.op {
            ScalarOp::Load { buf, index, indirect, mask } => {
                let indirect = indirect.iter().map(|(s, stride)| (get(*s), stride.clone())).collect();
                let mask = mask.map(get);
                match mask.and_then(|m| scalars.bool_const(m)) {
                    Some(false) => scalars.constant(0.0, node.dtype),
                    Some(true) => scalars.add(ScalarOp::Load { buf, index, indirect, mask: None }, node.dtype),
                    None => scalars.add(ScalarOp::Load { buf, index, indirect, mask }, node.dtype),
                }
            }
            ScalarOp::Binary(op, a, b) => {
                let rebuilt = scalars.binary(op, get(a), get(b), node.dtype);
                match decided(scalars, rebuilt, ctx) {
                    Some(truth) => scalars.int_constant(i64::from(truth), DType::Bool),
                    None => rebuilt,
                }
            }
            ScalarOp::Where(c, a, b) => scalars.select(get(c), get(a), get(b), node.dtype),
            ScalarOp::Unary(op, x) => scalars.unary(op, get(x), node.dtype),
            ScalarOp::Cast(x) => scalars.cast(get(x), node.dtype),
            ScalarOp::Bounded(x, size, negatives) => {
                scalars.add(ScalarOp::Bounded(get(x), size, negatives), node.dtype)
            }
            ScalarOp::Const { .. } | ScalarOp::Index(_) => id,
        };
        memo.insert(id, out);
    }
    memo.get(&root).copied().unwrap_or(root)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)] // a test reports failure by panicking
    use super::*;
    use crate::testing::{buffer, load, single_stage};
    use rdyn_ir::loops::{BufId, BufRole};

    /// A stand-in for memory: what buffer `buf` holds at `address`.
    fn memory(buf: BufId, address: i64) -> f64 {
        (buf.0 as f64) * 1e6 + address as f64
    }

    /// The value of `id` at the point `vars` (loads read [`memory`]).
    fn eval(scalars: &Scalars, id: ScalarId, vars: &[i64]) -> f64 {
        let get = |x: ScalarId| eval(scalars, x, vars);
        let truth = |b: bool| f64::from(u8::from(b));
        match &scalars.get(id).op {
            ScalarOp::Load { buf, index, mask, .. } => match mask {
                Some(m) if get(*m) == 0.0 => 0.0,
                _ => memory(*buf, index.eval(vars, &[])),
            },
            ScalarOp::Const { bits } if scalars.dtype(id).is_float() => f64::from_bits(*bits),
            ScalarOp::Const { bits } => *bits as i64 as f64,
            ScalarOp::Index(e) => e.eval(vars, &[]) as f64,
            ScalarOp::Binary(op, a, b) => {
                let (a, b) = (get(*a), get(*b));
                match op {
                    BinaryOp::Ge => truth(a >= b),
                    BinaryOp::Gt => truth(a > b),
                    BinaryOp::Le => truth(a <= b),
                    BinaryOp::Lt => truth(a < b),
                    BinaryOp::Eq => truth(a == b),
                    BinaryOp::And => truth(a != 0.0 && b != 0.0),
                    BinaryOp::Or => truth(a != 0.0 || b != 0.0),
                    BinaryOp::Mul => a * b,
                    other => panic!("eval: {other:?}"),
                }
            }
            ScalarOp::Where(c, a, b) => {
                if get(*c) != 0.0 {
                    get(*a)
                } else {
                    get(*b)
                }
            }
            ScalarOp::Cast(x) => get(*x),
            other => panic!("eval: {other:?}"),
        }
    }

    /// Every point of `sizes`, as index vectors.
    fn points(sizes: &[i64]) -> Vec<Vec<i64>> {
        let mut all = vec![vec![]];
        for &n in sizes {
            all = all.into_iter().flat_map(|p| (0..n).map(move |i| [p.clone(), vec![i]].concat())).collect();
        }
        all
    }

    /// What a program's stages store: address → value (each address once).
    fn stored(p: &Program) -> HashMap<i64, f64> {
        let mut out = HashMap::new();
        for kernel in p.kernels() {
            for stage in &kernel.stages {
                let sizes: Vec<i64> = stage.ranges.iter().map(|r| r.as_const().unwrap()).collect();
                for point in points(&sizes) {
                    let address = stage.store.eval(&point, &[]);
                    let value = eval(&p.scalars, stage.value, &point);
                    assert!(out.insert(address, value).is_none(), "{address} stored twice");
                }
            }
        }
        out
    }

    /// `cat(pieces, dim=-1)` of `[rows, w]` inputs, as lowering builds it
    /// (masked loads chosen by selects), viewed as `[rows, groups, w / groups]`
    /// when `groups > 1` (attention's q, k, v gradients).
    fn cat(widths: &[i64], rows: i64, groups: i64) -> Program {
        let mut p = Program::default();
        let total: i64 = widths.iter().sum();
        let inner = total / groups;
        let out = buffer(&mut p, &[rows, total], BufRole::Temp);
        let column = Expr::v(1).scale(inner).add(&Expr::v(2));
        let ranges = [rows, groups, inner];
        let col = p.scalars.index(column.clone());
        let mut acc = p.scalars.constant(0.0, DType::F32);
        let mut start = 0;
        for (k, &w) in widths.iter().enumerate() {
            let src = buffer(&mut p, &[rows, w], BufRole::Input(k));
            let value = load(&mut p, src, Expr::v(0).scale(w).add(&column).add_c(-start));
            let lo = p.scalars.int_constant(start, DType::I64);
            let hi = p.scalars.int_constant(start + w, DType::I64);
            let ge = p.scalars.binary(BinaryOp::Ge, col, lo, DType::Bool);
            let lt = p.scalars.binary(BinaryOp::Lt, col, hi, DType::Bool);
            let inside = p.scalars.binary(BinaryOp::And, ge, lt, DType::Bool);
            let masked = p.scalars.add_mask(value, inside);
            acc = p.scalars.select(inside, masked, acc, DType::F32);
            start += w;
        }
        let ranges: Vec<Expr> = ranges.iter().map(|&n| Expr::c(n)).collect();
        let store = Expr::v(0).scale(total).add(&column);
        p.steps.push(single_stage(ranges.clone(), out, ranges, None, acc, store));
        p
    }

    fn masked_loads(p: &Program) -> usize {
        let roots: Vec<ScalarId> = p.kernels().flat_map(|k| k.stages.iter().map(|s| s.value)).collect();
        p.scalars
            .topo(&roots)
            .into_iter()
            .filter(|id| matches!(p.scalars.get(*id).op, ScalarOp::Load { mask: Some(_), .. } | ScalarOp::Where(..)))
            .count()
    }

    #[test]
    fn cat_becomes_one_unmasked_copy_per_input() {
        for (widths, groups) in [(vec![300, 212], 1), (vec![128, 128, 128], 12), (vec![5, 7, 500], 1)] {
            let mut p = cat(&widths, 64, groups);
            let before = stored(&p);
            run(&mut p, PIECEWISE_MIN_ELEMENTS);
            assert_eq!(p.kernels().map(|k| k.stages.len()).sum::<usize>(), widths.len(), "{p}");
            assert_eq!(masked_loads(&p), 0, "{p}");
            assert_eq!(stored(&p), before, "{p}");
        }
    }

    #[test]
    fn small_or_diagonal_selects_stay_whole() {
        // Too few elements for three loops.
        let mut p = cat(&[4, 4, 4], 8, 1);
        run(&mut p, PIECEWISE_MIN_ELEMENTS);
        assert_eq!(p.kernels().count(), 1);
        // `where(i0 >= i1, ..)` changes along a diagonal: no index splits it.
        let mut p = Program::default();
        let x = buffer(&mut p, &[256, 256], BufRole::Input(0));
        let y = buffer(&mut p, &[256, 256], BufRole::Temp);
        let at = Expr::v(0).scale(256).add(&Expr::v(1));
        let xv = load(&mut p, x, at.clone());
        let (i, j) = (p.scalars.index(Expr::v(0)), p.scalars.index(Expr::v(1)));
        let lower = p.scalars.binary(BinaryOp::Ge, i, j, DType::Bool);
        let zero = p.scalars.constant(0.0, DType::F32);
        let tril = p.scalars.select(lower, xv, zero, DType::F32);
        let ranges = vec![Expr::c(256), Expr::c(256)];
        p.steps.push(single_stage(ranges.clone(), y, ranges, None, tril, at));
        run(&mut p, PIECEWISE_MIN_ELEMENTS);
        assert_eq!(p.kernels().count(), 1);
    }

    #[test]
    fn two_dim_pad_splits_into_interior_and_borders() {
        // pad [16, 30, 30] by 1 on the last two dims with -1.
        let mut p = Program::default();
        let x = buffer(&mut p, &[16, 30, 30], BufRole::Input(0));
        let y = buffer(&mut p, &[16, 32, 32], BufRole::Temp);
        let (h, w) = (Expr::v(1).add_c(-1), Expr::v(2).add_c(-1));
        let xv = load(&mut p, x, Expr::v(0).scale(900).add(&h.scale(30)).add(&w));
        let inside = p.scalars.in_range(&[(h, Expr::c(30)), (w, Expr::c(30))]).unwrap();
        let masked = p.scalars.add_mask(xv, inside);
        let fill = p.scalars.constant(-1.0, DType::F32);
        let value = p.scalars.select(inside, masked, fill, DType::F32);
        let ranges = vec![Expr::c(16), Expr::c(32), Expr::c(32)];
        let store = Expr::v(0).scale(1024).add(&Expr::v(1).scale(32)).add(&Expr::v(2));
        p.steps.push(single_stage(ranges.clone(), y, ranges, None, value, store));
        let before = stored(&p);
        run(&mut p, PIECEWISE_MIN_ELEMENTS);
        // Top and bottom rows; left, interior and right of the middle rows.
        assert_eq!(p.kernels().count(), 5, "{p}");
        assert_eq!(masked_loads(&p), 0, "{p}");
        assert_eq!(stored(&p), before);
    }
    /// The backward of an interleave: `out[r, i] = (i % 2 == 1 && i >= 1) ?
    /// x[r, (i - 1) // 2] : 0` over a 64-wide row. The row splits into its
    /// even and odd columns (`residues`): a fill of zeros and an unmasked
    /// copy, rather than a cut at the turning point of `i >= 1` (a 1-wide
    /// and a 63-wide piece that no split divides).
    #[test]
    fn interleaves_split_by_residue() {
        let mut p = Program::default();
        let x = buffer(&mut p, &[64, 32], BufRole::Input(0));
        let y = buffer(&mut p, &[64, 64], BufRole::Temp);
        let ctx = Ctx::with_extents(&[64, 64]);
        let shifted = Expr::v(1).add_c(-1);
        let half = shifted.floordiv(&Expr::c(2), &ctx);
        let xv = load(&mut p, x, Expr::v(0).scale(32).add(&half));
        let i = p.scalars.index(Expr::v(1));
        let one = p.scalars.int_constant(1, DType::I64);
        let started = p.scalars.binary(BinaryOp::Ge, i, one, DType::Bool);
        let odd = p.scalars.index(shifted.modulo(&Expr::c(2), &ctx));
        let zero_i = p.scalars.int_constant(0, DType::I64);
        let even_step = p.scalars.binary(BinaryOp::Ge, zero_i, odd, DType::Bool);
        let inside = p.scalars.binary(BinaryOp::And, started, even_step, DType::Bool);
        let masked = p.scalars.add_mask(xv, inside);
        let zero = p.scalars.constant(0.0, DType::F32);
        let value = p.scalars.select(inside, masked, zero, DType::F32);
        let ranges = vec![Expr::c(64), Expr::c(64)];
        let store = Expr::v(0).scale(64).add(&Expr::v(1));
        p.steps.push(single_stage(ranges.clone(), y, ranges, None, value, store));
        let before = stored(&p);
        run(&mut p, PIECEWISE_MIN_ELEMENTS);
        assert_eq!(p.kernels().count(), 2, "{p}");
        assert_eq!(masked_loads(&p), 0, "{p}");
        assert_eq!(stored(&p), before);
        // Without the division, the same condition cuts at 1.
        let mut p = Program::default();
        let x = buffer(&mut p, &[64, 64], BufRole::Input(0));
        let y = buffer(&mut p, &[64, 64], BufRole::Temp);
        let xv = load(&mut p, x, Expr::v(0).scale(64).add(&Expr::v(1)));
        let i = p.scalars.index(Expr::v(1));
        let one = p.scalars.int_constant(1, DType::I64);
        let started = p.scalars.binary(BinaryOp::Ge, i, one, DType::Bool);
        let masked = p.scalars.add_mask(xv, started);
        let zero = p.scalars.constant(0.0, DType::F32);
        let value = p.scalars.select(started, masked, zero, DType::F32);
        let ranges = vec![Expr::c(64), Expr::c(64)];
        let store = Expr::v(0).scale(64).add(&Expr::v(1));
        p.steps.push(single_stage(ranges.clone(), y, ranges, None, value, store));
        run(&mut p, PIECEWISE_MIN_ELEMENTS);
        assert_eq!(p.kernels().count(), 2, "{p}");
    }

    /// `stack([a, b], -1).flatten(-2)`: `out[r, i] = i % 2 == 0 ? a[r, i // 2]
    /// : b[r, i // 2]`, an equality no range decides, becomes two unmasked
    /// copies (the even and the odd columns); a stride-4 interleave of two
    /// sources splits no further than its 4 residues.
    #[test]
    fn equality_conditions_split_by_residue() {
        for (stride, width) in [(2, 64), (4, 64), (2, 63)] {
            let mut p = Program::default();
            let ctx = Ctx::with_extents(&[64, width]);
            let half = (width + 1) / 2;
            let a = buffer(&mut p, &[64, half], BufRole::Input(0));
            let b = buffer(&mut p, &[64, half], BufRole::Input(1));
            let y = buffer(&mut p, &[64, width], BufRole::Temp);
            let i = Expr::v(1);
            let at = Expr::v(0).scale(half).add(&i.floordiv(&Expr::c(2), &ctx));
            let (av, bv) = (load(&mut p, a, at.clone()), load(&mut p, b, at));
            let phase = p.scalars.index(i.modulo(&Expr::c(stride), &ctx));
            let zero = p.scalars.int_constant(0, DType::I64);
            let even = p.scalars.binary(BinaryOp::Eq, phase, zero, DType::Bool);
            let value = p.scalars.select(even, av, bv, DType::F32);
            let ranges = vec![Expr::c(64), Expr::c(width)];
            let store = Expr::v(0).scale(width).add(&Expr::v(1));
            p.steps.push(single_stage(ranges.clone(), y, ranges, None, value, store));
            let before = stored(&p);
            run(&mut p, 1);
            assert_eq!(p.kernels().count(), stride as usize, "{p}");
            assert_eq!(masked_loads(&p), 0, "{p}");
            assert_eq!(stored(&p), before, "{p}");
        }
    }

    /// A `cat` along rows read through a reshape: `out[i, j]` picks `b` where
    /// `64·(i // 8) + (j % 64) ≥ 64`, i.e. from row 8 on: cut there.
    #[test]
    fn quotients_turn_where_their_variable_does() {
        let mut p = Program::default();
        let ctx = Ctx::with_extents(&[16, 64]);
        let a = buffer(&mut p, &[8, 64], BufRole::Input(0));
        let b = buffer(&mut p, &[8, 64], BufRole::Input(1));
        let y = buffer(&mut p, &[16, 64], BufRole::Temp);
        let (i, j) = (Expr::v(0), Expr::v(1));
        let at = i.modulo(&Expr::c(8), &ctx).scale(64).add(&j);
        let (av, bv) = (load(&mut p, a, at.clone()), load(&mut p, b, at));
        let picked = i.floordiv(&Expr::c(8), &ctx).scale(64).add(&j.modulo(&Expr::c(64), &ctx));
        let picked = p.scalars.index(picked);
        let from = p.scalars.int_constant(64, DType::I64);
        let second = p.scalars.binary(BinaryOp::Ge, picked, from, DType::Bool);
        let bv = p.scalars.add_mask(bv, second);
        let value = p.scalars.select(second, bv, av, DType::F32);
        let ranges = vec![Expr::c(16), Expr::c(64)];
        let store = Expr::v(0).scale(64).add(&Expr::v(1));
        p.steps.push(single_stage(ranges.clone(), y, ranges, None, value, store));
        let before = stored(&p);
        run(&mut p, 1);
        assert_eq!(p.kernels().count(), 2, "{p}");
        assert_eq!(masked_loads(&p), 0, "{p}");
        assert_eq!(stored(&p), before, "{p}");
    }
}
