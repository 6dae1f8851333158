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
//! into at most `MAX_PIECES` (16) pieces of at least `piecewise_min` elements on
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

use std::collections::HashMap;

use rdyn_ir::loops::{BinaryOp, Kernel, Program, ScalarId, ScalarOp, Scalars, Stage, Step};
use rdyn_ir::{Atom, Ctx, DType, Expr, Var};

/// More pieces than this cost more in loop overhead than the masks do.
const MAX_PIECES: usize = 16;

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
    if conditions(&program.scalars, stage.value).is_empty() {
        return None;
    }
    let whole: Piece = sizes.iter().map(|&n| (0, n)).collect();
    let mut pieces = Vec::new();
    cut(&mut program.scalars, stage.value, whole, &reduce, &mut pieces);
    // Saturating: a malformed graph's stage may have more points than an i64 counts.
    let elements = sizes.iter().chain(&reduce).fold(1i64, |n, &m| n.saturating_mul(m));
    if pieces.len() < 2 || pieces.len() > MAX_PIECES || elements < min_elements.saturating_mul(pieces.len() as i64) {
        return None;
    }
    Some(
        pieces
            .into_iter()
            .map(|(piece, value)| piece_stage(&mut program.scalars, stage, &piece, value, &reduce))
            .collect(),
    )
}

/// The range conditions under `root`, each as `e ≥ 0`.
fn conditions(scalars: &Scalars, root: ScalarId) -> Vec<Expr> {
    scalars.topo(&[root]).into_iter().filter_map(|id| condition(scalars, id)).collect()
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
    if out.len() > MAX_PIECES {
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

/// The step pieces cut along `var` keep: the product of the constant
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
                        *step = step.saturating_mul(k).min(1 << 20);
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
fn turning_point(e: &Expr, var: Var, ctx: &Ctx) -> Option<i64> {
    let c = e.linear_coef(var).filter(|&c| c != 0)?;
    let rest = e.sub(&Expr::var(var).scale(c));
    let (rmin, rmax) = rest.bounds(ctx)?;
    // c > 0: true from ceil(-r / c) on; c < 0: true up to floor(r / -c).
    let (a, b) = if c > 0 {
        (ceil_div(-rmin, c), ceil_div(-rmax, c))
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
                match condition(scalars, rebuilt).and_then(|e| e.bounds(ctx)) {
                    Some((lo, _)) if lo >= 0 => scalars.int_constant(1, DType::Bool),
                    Some((_, hi)) if hi < 0 => scalars.int_constant(0, DType::Bool),
                    _ => rebuilt,
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
    /// x[r, (i - 1) // 2] : 0` over a 64-wide row. The turning point of
    /// `i >= 1` is between two multiples of the divisor 2, so the row stays
    /// whole (its 64 points split into 32 pairs later) instead of a 1-wide
    /// and a 63-wide piece that no split divides.
    #[test]
    fn cuts_keep_the_step_of_divided_indices() {
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
        assert_eq!(p.kernels().count(), 1, "{p}");
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
}
