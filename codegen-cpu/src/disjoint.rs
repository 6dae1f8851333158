//! Scatter kernels whose writes fall apart along their leading loops.
//!
//! A scatter (`Stage::store_indirect`) runs in index order because two of
//! its points may write one element. Where the store index is
//! `Σ a_k·i_k + Σ c_j·idx_j` (affine in the loop variables, each indirect
//! index checked into `0..n_j`) and the leading loops' strides step over
//! everything the other loops and the indirect indices can reach, no two
//! points that differ in those leading loops write the same element: the
//! work splits across threads at their points, and index order is kept
//! among the writes that can meet. The gradient of a gather along inner
//! dims (`index_put(accumulate=True)` into `[N, C, H, W]` at per-row and
//! per-column indices) is such a scatter, parallel over `N·C`; an
//! embedding's gradient (rows chosen by token) is not.

use rdyn_ir::loops::{Kernel, Program, ScalarOp};
use rdyn_ir::{Ctx, Expr, Var};

/// How many leading outer loops of `kernel` (with extents `outer`) split
/// its writes into disjoint sets; 0 when none do, or the kernel is not one
/// scatter stage with an affine store.
pub(crate) fn disjoint_prefix(program: &Program, kernel: &Kernel, outer: &[i64], syms: &Ctx) -> usize {
    let [stage] = &kernel.stages[..] else { return 0 };
    if stage.reduce.is_some() || stage.store_indirect.is_empty() {
        return 0;
    }
    let m = outer.len();
    let mut extents = outer.to_vec();
    for r in &stage.ranges[m.min(stage.ranges.len())..] {
        match r.simplify(syms).as_const() {
            Some(n) => extents.push(n),
            None => return 0,
        }
    }
    let Some(coefs) = affine_coefs(&stage.store.simplify(syms), extents.len()) else { return 0 };
    // What the indirect part of the index can add: `(n - 1)·|c|` each.
    let mut indirect = 0i64;
    for (scalar, stride) in &stage.store_indirect {
        let ScalarOp::Bounded(_, size, _) = &program.scalars.get(*scalar).op else { return 0 };
        let (Some(n), Some(c)) = (size.simplify(syms).as_const(), stride.simplify(syms).as_const()) else {
            return 0;
        };
        indirect = indirect.saturating_add((n - 1).max(0).saturating_mul(c.abs()));
    }
    (1..=m).rev().find(|&p| separates(&coefs, &extents, p, indirect)).unwrap_or(0)
}

/// The coefficient of each of the first `vars` variables when `e` is
/// affine in them (constant coefficients), else None.
fn affine_coefs(e: &Expr, vars: usize) -> Option<Vec<i64>> {
    let coefs: Vec<i64> = (0..vars).map(|v| e.linear_coef(Var(v as u32))).collect::<Option<_>>()?;
    // Nothing else may vary: the rest of `e` is a constant.
    let mut rest = e.clone();
    for (v, c) in coefs.iter().enumerate() {
        rest = rest.add(&Expr::v(v as u32).scale(-c));
    }
    rest.as_const().map(|_| coefs)
}

/// Whether points that differ in the first `p` variables write disjoint
/// elements: sorted by stride, each of those variables steps over the whole
/// range the later variables, the indirect indices (`indirect`) and the
/// leading variables of smaller stride can cover.
fn separates(coefs: &[i64], extents: &[i64], p: usize, indirect: i64) -> bool {
    let mut reach = indirect;
    for (&c, &n) in coefs.iter().zip(extents).skip(p) {
        reach = reach.saturating_add((n - 1).max(0).saturating_mul(c.abs()));
    }
    let mut lead: Vec<(i64, i64)> = coefs[..p].iter().zip(&extents[..p]).map(|(c, n)| (c.abs(), *n)).collect();
    lead.sort_unstable();
    for (c, n) in lead {
        if n <= 1 {
            continue;
        }
        if c <= reach {
            return false;
        }
        reach = reach.saturating_add((n - 1).saturating_mul(c));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::separates;

    #[test]
    fn leading_loops_over_disjoint_slices() {
        // out[1024·i0 + 32·r + s] over i0 < 64, i1 < 64, i2 < 64 (source
        // positions, stride 0), r, s < 32: the first loop separates.
        let (coefs, extents) = ([1024, 0, 0], [64, 64, 64]);
        assert!(separates(&coefs, &extents, 1, 31 * 32 + 31));
        assert!(!separates(&coefs, &extents, 2, 31 * 32 + 31));
        // An indirect index reaching the next slice: no loop separates.
        assert!(!separates(&coefs, &extents, 1, 1024));
        // Strides out of loop order, and a loop of extent 1.
        assert!(separates(&[4, 64, 0], &[16, 1, 8], 2, 3));
        assert!(!separates(&[4, 8, 0], &[16, 2, 8], 2, 3));
    }
}
