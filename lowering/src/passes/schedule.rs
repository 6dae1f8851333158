//! Fusion: merge consecutive kernels into groups that share an outer
//! iteration space.
//!
//! Lowering emits one single-stage kernel per realized buffer. This pass
//! walks them in order and appends a kernel's stage to the group that produced
//! its last input, or a later group,
//! when (1) both share a non-trivial outer prefix of their ranges, and
//! (2) every read of a buffer written inside the group happens at the outer
//! point that wrote it — so running the stages one after another per outer
//! point is the same as running them one after another over everything.
//! That single rule gives softmax and layer norm as one kernel (reductions
//! plus their epilogue), reductions with fused prologue and epilogue,
//! horizontal fusion of sibling reductions, and multi-output pointwise kernels.
//! Scatter stages are never merged.
//!
//! Narrowing a group's outer space to a shorter prefix costs every stage its
//! tiling (rows become short inner loops). It is allowed only for a stage that
//! reads what the group wrote or, where a reduction is involved, one sharing an
//! input with the group, and never to an outer space of fewer than
//! `MIN_PARALLEL_OUTER` points: two unrelated copies out of one buffer
//! (attention's q and k^T) merged over their shared prefix ran every row as a
//! short inner loop, and a head-merge copy saved for the backward, put beside a
//! layer norm, cut that kernel's rows per call.
//!
//! A stage whose first range is the product of the group's leading ranges (a
//! batched product reads a `[4, 4, 64, 64]` softmax as `[16, 64, 64]`) is first
//! rewritten over those ranges — its variable 0 becomes `v0·4 + v1` and the
//! others shift — and then merged by the same rule: attention's softmax and the
//! division feeding the product are one kernel.

use rdyn_ir::loops::{BufId, Kernel, Program, ScalarOp, Stage, Step};
use rdyn_ir::{Ctx, Expr};

/// Outer spaces smaller than this are not worth losing parallelism for.
const MIN_PARALLEL_OUTER: i64 = 16;

/// Run the pass over `program`.
pub fn run(program: &mut Program) {
    let steps = std::mem::take(&mut program.steps);
    let mut out: Vec<Step> = Vec::with_capacity(steps.len());
    for step in steps {
        let Step::Kernel(kernel) = step else {
            out.push(step);
            continue;
        };
        // The kernel may join the group that produced its last input, or any
        // group after it: nothing in between writes what it reads, and
        // nothing yet reads what it writes.
        let first = last_dependency(program, &out, &kernel).unwrap_or(0);
        let merged = (first..out.len()).any(|g| match &mut out[g] {
            Step::Kernel(group) => try_merge(program, group, &kernel),
            Step::Extern(_) => false,
        });
        if !merged {
            out.push(Step::Kernel(kernel));
        }
    }
    program.steps = out;
}

/// Index of the last step in `steps` that writes a buffer `kernel` reads.
fn last_dependency(program: &Program, steps: &[Step], kernel: &Kernel) -> Option<usize> {
    let mut roots = Vec::new();
    for stage in &kernel.stages {
        roots.push(stage.value);
        roots.extend(stage.store_indirect.iter().map(|(s, _)| *s));
    }
    let mut reads: Vec<BufId> =
        program.scalars.loaded_buffers(&roots).into_iter().map(|b| program.storage_of(b)).collect();
    // A scatter also depends on whatever wrote the buffer it updates.
    for stage in &kernel.stages {
        if !stage.store_indirect.is_empty() {
            reads.push(program.storage_of(stage.out));
        }
    }
    steps.iter().rposition(|step| match step {
        Step::Kernel(group) => group.stages.iter().any(|s| reads.contains(&program.storage_of(s.out))),
        Step::Extern(ext) => ext.outputs.iter().any(|b| reads.contains(&program.storage_of(*b))),
    })
}

fn common_prefix(a: &[Expr], b: &[Expr]) -> Vec<Expr> {
    a.iter().zip(b).take_while(|(x, y)| x == y).map(|(x, _)| x.clone()).collect()
}

fn numel(sizes: &[Expr]) -> Option<i64> {
    sizes.iter().try_fold(1i64, |acc, s| s.as_const().map(|n| acc * n))
}

/// The ranges a stage iterates beyond the outer prefix (inner, or reduction).
fn tail_ranges(stage: &Stage, outer_len: usize) -> Vec<Expr> {
    let mut tail: Vec<Expr> = stage.ranges[outer_len.min(stage.ranges.len())..].to_vec();
    if let Some(r) = &stage.reduce {
        tail.extend(r.ranges.iter().cloned());
    }
    tail
}

fn try_merge(program: &mut Program, group: &mut Kernel, next: &Kernel) -> bool {
    let [stage] = next.stages.as_slice() else {
        return false;
    };
    if merge_stage(program, group, stage) {
        return true;
    }
    match split_first_range(program, stage, &group.outer) {
        Some(split) => merge_stage(program, group, &split),
        None => false,
    }
}

/// `stage` with its first range split into the first ranges of `outer`
/// when their product is that range: the same points, walked as the group
/// walks them (a batched product reads a [4, 4, 64, 64] softmax as
/// [16, 64, 64]). Variable 0 becomes `((v0·n1 + v1)·n2 + v2)…` over the
/// split ranges n0, n1, …; the later variables shift up.
fn split_first_range(program: &mut Program, stage: &Stage, outer: &[Expr]) -> Option<Stage> {
    let first = stage.ranges.first()?;
    let n = first.as_const()?;
    if outer.first() == Some(first) || !stage.store_indirect.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    let mut product = 1i64;
    for size in outer {
        if product >= n {
            break;
        }
        let k = size.as_const()?;
        product = product.checked_mul(k)?;
        parts.push(k);
    }
    if product != n || parts.len() < 2 {
        return None;
    }
    let j = parts.len();
    let v0 = (1..j).fold(Expr::v(0), |acc, i| acc.scale(parts[i]).add(&Expr::v(i as u32)));
    let reduce_len = stage.reduce.as_ref().map_or(0, |r| r.ranges.len());
    let vars: Vec<Expr> =
        std::iter::once(v0).chain((1..stage.ranges.len() + reduce_len).map(|m| Expr::v((m + j - 1) as u32))).collect();
    let ranges: Vec<Expr> = outer[..j].iter().chain(&stage.ranges[1..]).cloned().collect();
    let extents: Option<Vec<i64>> =
        ranges.iter().chain(stage.reduce.iter().flat_map(|r| &r.ranges)).map(Expr::as_const).collect();
    let ctx = extents.map_or_else(Ctx::default, |e| Ctx::with_extents(&e));
    let value = program.scalars.substitute(stage.value, &vars, &ctx);
    let store = stage.store.substitute_vars(&vars, &ctx);
    Some(Stage { ranges, value, store, ..stage.clone() })
}

/// Append `stage` to `group` when the two share an outer space and the
/// stage reads what the group writes only where it was written.
fn merge_stage(program: &Program, group: &mut Kernel, stage: &Stage) -> bool {
    if !stage.store_indirect.is_empty() || group.stages.iter().any(|s| !s.store_indirect.is_empty()) {
        return false;
    }
    let outer = common_prefix(&group.outer, &stage.ranges);
    if outer.is_empty() {
        return false;
    }
    let shrinks = outer.len() < group.outer.len() || outer.len() < stage.ranges.len();
    if shrinks && numel(&outer).is_some_and(|n| n < MIN_PARALLEL_OUTER) {
        return false;
    }
    // Every group stage must still have the new outer as a prefix.
    if group.stages.iter().any(|s| s.ranges.len() < outer.len() || s.ranges[..outer.len()] != outer[..]) {
        return false;
    }
    if !reads_are_local(program, group, stage, outer.len()) {
        return false;
    }
    // Narrowing the outer space costs every stage its tiling (rows become
    // short inner loops): worth it for what reads the group's values, and,
    // with a reduction, for a stage sharing an input (its loads hit the
    // cache), not for stages that share nothing: a head-merge copy saved for
    // the backward, put beside a layer norm, made that kernel walk [4, 64]
    // points of 64 lanes where it had walked 256 rows at once (13 µs to 50).
    let reduces = stage.reduce.is_some() || group.stages.iter().any(|s| s.reduce.is_some());
    let related = reads_group(program, group, stage) || (reduces && shares_input(program, group, stage));
    if shrinks && !related {
        return false;
    }
    group.outer = outer;
    group.stages.push(stage.clone());
    true
}

/// Whether `stage` reads a buffer that `group` writes.
fn reads_group(program: &Program, group: &Kernel, stage: &Stage) -> bool {
    let written: Vec<BufId> = group.stages.iter().map(|s| program.storage_of(s.out)).collect();
    program.scalars.loaded_buffers(&[stage.value]).into_iter().any(|b| written.contains(&program.storage_of(b)))
}

/// Whether `stage` loads a buffer that a stage of `group` also loads.
fn shares_input(program: &Program, group: &Kernel, stage: &Stage) -> bool {
    let storages = |roots: &[_]| -> Vec<BufId> {
        program.scalars.loaded_buffers(roots).into_iter().map(|b| program.storage_of(b)).collect()
    };
    let theirs = storages(&group.stages.iter().map(|s| s.value).collect::<Vec<_>>());
    storages(&[stage.value]).iter().any(|b| theirs.contains(b))
}

/// Whether every load `stage` makes of a buffer written in `group` reads the
/// element written at the same outer point.
fn reads_are_local(program: &Program, group: &Kernel, stage: &Stage, outer_len: usize) -> bool {
    let writers: Vec<(BufId, &Stage)> = group.stages.iter().map(|s| (program.storage_of(s.out), s)).collect();
    let mut roots = vec![stage.value];
    roots.extend(stage.store_indirect.iter().map(|(s, _)| *s));
    for id in program.scalars.topo(&roots) {
        let ScalarOp::Load { buf, index, indirect, .. } = &program.scalars.get(id).op else {
            continue;
        };
        let storage = program.storage_of(*buf);
        for (written, producer) in &writers {
            if *written != storage {
                continue;
            }
            if !indirect.is_empty() || *buf != producer.out {
                return false;
            }
            if producer.reduce.is_some() {
                // One element per outer point: the read must not vary inside.
                if *index != producer.store || index.max_var().is_some_and(|v| v as usize >= outer_len) {
                    return false;
                }
            } else if !same_element(producer, stage, index, outer_len) {
                return false;
            }
        }
    }
    true
}

/// Whether `index`, read by `stage`, is the element `producer` (pointwise)
/// wrote at the same point of their tails (see [`renaming`]).
fn same_element(producer: &Stage, stage: &Stage, index: &Expr, outer_len: usize) -> bool {
    renaming(producer, stage, outer_len)
        .is_some_and(|vars| producer.store.substitute_vars(&vars, &Ctx::default()) == *index)
}

/// The producer's variables in terms of the reader's, when the two stages
/// walk the same points: the tails' ranges of size > 1 must match one to
/// one (e.g. a row written along an inner range and read along a reduction
/// range of the same size). Outer variables stay; a variable over a size-1
/// range is 0.
pub(crate) fn renaming(producer: &Stage, stage: &Stage, outer_len: usize) -> Option<Vec<Expr>> {
    let tail = |s: &Stage| -> Vec<(usize, Expr)> {
        tail_ranges(s, outer_len)
            .into_iter()
            .enumerate()
            .filter(|(_, r)| !r.is_const(1))
            .map(|(k, r)| (outer_len + k, r))
            .collect()
    };
    let (written, read) = (tail(producer), tail(stage));
    if written.len() != read.len() || written.iter().zip(&read).any(|((_, a), (_, b))| a != b) {
        return None;
    }
    let count = outer_len + tail_ranges(producer, outer_len).len();
    Some(
        (0..count)
            .map(|v| {
                if v < outer_len {
                    return Expr::v(v as u32);
                }
                written
                    .iter()
                    .zip(&read)
                    .find(|((w, _), _)| *w == v)
                    .map_or(Expr::zero(), |(_, (r, _))| Expr::v(*r as u32))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{buffer, load, single_stage};
    use rdyn_ir::loops::{BufRole, Reduce, ReduceOp};
    use rdyn_ir::DType;

    /// sum over rows, then x / sum: one kernel with two stages.
    #[test]
    fn reduction_and_epilogue_fuse() {
        let mut p = Program::default();
        let x = buffer(&mut p, &[64, 32], BufRole::Input(0));
        let s = buffer(&mut p, &[64, 1], BufRole::Temp);
        let y = buffer(&mut p, &[64, 32], BufRole::Temp);
        let row = Expr::v(0).scale(32).add(&Expr::v(1));
        let xv = load(&mut p, x, row.clone());
        let row_sum = load(&mut p, x, Expr::v(0).scale(32).add(&Expr::v(2)));
        p.steps.push(single_stage(
            vec![Expr::c(64), Expr::c(1)],
            s,
            vec![Expr::c(64), Expr::c(1)],
            Some(Reduce { op: ReduceOp::Sum, ranges: vec![Expr::c(32)] }),
            row_sum,
            Expr::v(0),
        ));
        let sv = load(&mut p, s, Expr::v(0));
        // (stores over size-1 dims are simplified to the outer index by lowering)
        let div = p.scalars.binary(rdyn_ir::loops::BinaryOp::Div, xv, sv, DType::F32);
        p.steps.push(single_stage(vec![Expr::c(64), Expr::c(32)], y, vec![Expr::c(64), Expr::c(32)], None, div, row));
        run(&mut p);
        assert_eq!(p.kernels().count(), 1, "{p}");
        assert_eq!(p.kernels().next().map(|k| k.stages.len()), Some(2));
    }

    /// e = exp-like(x) stored per row, then summed along the row: the sum
    /// reads, along its reduction range, the row the pointwise stage wrote
    /// along its inner range at the same outer point, so they fuse; a sum
    /// over a different row must not.
    #[test]
    fn stored_row_and_its_reduction_fuse() {
        for (read_row, fused) in [(Expr::v(0), true), (Expr::c(63).sub(&Expr::v(0)), false)] {
            let mut p = Program::default();
            let x = buffer(&mut p, &[64, 32], BufRole::Input(0));
            let e = buffer(&mut p, &[64, 32], BufRole::Temp);
            let s = buffer(&mut p, &[64, 1], BufRole::Temp);
            let xv = load(&mut p, x, Expr::v(0).scale(32).add(&Expr::v(1)));
            let ev = p.scalars.unary(rdyn_ir::loops::UnaryOp::Exp, xv, DType::F32);
            p.steps.push(single_stage(
                vec![Expr::c(64), Expr::c(32)],
                e,
                vec![Expr::c(64), Expr::c(32)],
                None,
                ev,
                Expr::v(0).scale(32).add(&Expr::v(1)),
            ));
            let row = load(&mut p, e, read_row.scale(32).add(&Expr::v(2)));
            p.steps.push(single_stage(
                vec![Expr::c(64), Expr::c(1)],
                s,
                vec![Expr::c(64), Expr::c(1)],
                Some(Reduce { op: ReduceOp::Sum, ranges: vec![Expr::c(32)] }),
                row,
                Expr::v(0),
            ));
            run(&mut p);
            assert_eq!(p.kernels().count() == 1, fused, "{p}");
        }
    }

    /// Two unrelated copies out of one buffer (attention's q and k^T) with
    /// different inner shapes stay two kernels: sharing only the [4, 4]
    /// prefix would cost both their row tiling.
    #[test]
    fn unrelated_pointwise_stages_do_not_narrow_the_outer_space() {
        let mut p = Program::default();
        let x = buffer(&mut p, &[4, 4, 64, 32], BufRole::Input(0));
        let q = buffer(&mut p, &[4, 4, 64, 32], BufRole::Temp);
        let kt = buffer(&mut p, &[4, 4, 32, 64], BufRole::Temp);
        let at = |a: u32, b: u32| {
            Expr::v(0).scale(8192).add(&Expr::v(1).scale(2048)).add(&Expr::v(a).scale(32)).add(&Expr::v(b))
        };
        let qv = load(&mut p, x, at(2, 3));
        let kv = load(&mut p, x, at(3, 2));
        let sizes = |a: i64, b: i64| vec![Expr::c(4), Expr::c(4), Expr::c(a), Expr::c(b)];
        let q_store = at(2, 3);
        let k_store = Expr::v(0).scale(8192).add(&Expr::v(1).scale(2048)).add(&Expr::v(2).scale(64)).add(&Expr::v(3));
        p.steps.push(single_stage(sizes(64, 32), q, sizes(64, 32), None, qv, q_store));
        p.steps.push(single_stage(sizes(32, 64), kt, sizes(32, 64), None, kv, k_store));
        run(&mut p);
        assert_eq!(p.kernels().count(), 2, "{p}");
    }

    /// A row sum over x as [4, 4, 32], then x / sum over x viewed as
    /// [16, 32] (a batched product's reshape): the consumer's first range
    /// splits into the group's [4, 4] and the two fuse; a consumer whose
    /// first range is not a product of the group's leading ranges does not.
    #[test]
    fn reshaped_consumer_splits_into_the_group_outer_space() {
        for (rows, fused) in [(16, true), (8, false)] {
            let mut p = Program::default();
            let x = buffer(&mut p, &[4, 4, 32], BufRole::Input(0));
            let s = buffer(&mut p, &[4, 4], BufRole::Temp);
            let y = buffer(&mut p, &[rows, 32], BufRole::Temp);
            let at = Expr::v(0).scale(128).add(&Expr::v(1).scale(32)).add(&Expr::v(2));
            let xs = load(&mut p, x, at);
            let four = vec![Expr::c(4), Expr::c(4)];
            let sum = Some(Reduce { op: ReduceOp::Sum, ranges: vec![Expr::c(32)] });
            let sum_store = Expr::v(0).scale(4).add(&Expr::v(1));
            p.steps.push(single_stage(four.clone(), s, four, sum, xs, sum_store));
            let row = Expr::v(0).scale(32).add(&Expr::v(1));
            let xv = load(&mut p, x, row.clone());
            let sv = load(&mut p, s, Expr::v(0));
            let div = p.scalars.binary(rdyn_ir::loops::BinaryOp::Div, xv, sv, DType::F32);
            let sizes = vec![Expr::c(rows), Expr::c(32)];
            p.steps.push(single_stage(sizes.clone(), y, sizes, None, div, row));
            run(&mut p);
            assert_eq!(p.kernels().count() == 1, fused, "{p}");
            if fused {
                let kernel = p.kernels().next().expect("one kernel");
                assert_eq!(kernel.stages[1].ranges, vec![Expr::c(4), Expr::c(4), Expr::c(32)], "{p}");
                assert_eq!(kernel.stages[1].store, Expr::v(0).scale(128).add(&Expr::v(1).scale(32)).add(&Expr::v(2)));
            }
        }
    }

    /// A consumer reading a neighbour's element must not fuse.
    #[test]
    fn shifted_read_does_not_fuse() {
        let mut p = Program::default();
        let x = buffer(&mut p, &[64], BufRole::Input(0));
        let a = buffer(&mut p, &[64], BufRole::Temp);
        let b = buffer(&mut p, &[64], BufRole::Temp);
        let xv = load(&mut p, x, Expr::v(0));
        let shifted = load(&mut p, a, Expr::c(63).sub(&Expr::v(0)));
        for (out, value) in [(a, xv), (b, shifted)] {
            p.steps.push(single_stage(vec![Expr::c(64)], out, vec![Expr::c(64)], None, value, Expr::v(0)));
        }
        run(&mut p);
        assert_eq!(p.kernels().count(), 2);
    }
}
