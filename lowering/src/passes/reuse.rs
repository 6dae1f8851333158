//! Reuse: a kernel's other stages read back a pointwise value the kernel
//! stores, where they would compute it again.
//!
//! Fusion inlines a pointwise producer into each of its consumers. When
//! the producer is stored as well (a kernel output, or what a later kernel
//! reads) and its consumers share its kernel, they recompute what the
//! kernel writes anyway: a residual sum `x + bias + r` that a layer norm
//! reads was computed by the mean, the variance and the normalisation, and
//! stored by a fourth stage. The storing stage moves first and the others
//! load its element at the point that wrote it (one load where there were
//! three loads and two adds). Only a stage that reads nothing its kernel
//! writes moves, so every read still follows the write it reads. A value
//! stored narrower than it is computed (float16 from float32) is recomputed,
//! since the load would read it rounded.

use std::collections::{HashMap, HashSet};

use crate::passes::schedule::renaming;
use rdyn_ir::loops::{BufId, Program, ScalarOp, Stage, Step};
use rdyn_ir::{Ctx, DType};

/// Run the pass over `program` (after [`crate::passes::forward`], which would fold
/// a value read back by one stage into it again).
pub fn run(program: &mut Program) {
    for g in 0..program.steps.len() {
        let Step::Kernel(kernel) = &program.steps[g] else { continue };
        let (mut stages, outer_len) = (kernel.stages.clone(), kernel.outer.len());
        // What the kernel writes does not change as stages move or read back.
        let written: HashSet<BufId> = stages.iter().map(|s| program.storage_of(s.out)).collect();
        for p in 0..stages.len() {
            if movable(program, &stages, &written, p) && reuse(program, &mut stages, outer_len, p) {
                // The producer runs first.
                let producer = stages.remove(p);
                stages.insert(0, producer);
            }
        }
        if let Step::Kernel(kernel) = &mut program.steps[g] {
            kernel.stages = stages;
        }
    }
}

/// Whether stage `p` may be read back: pointwise, stored as computed by it
/// alone, more than a load, and reading nothing its kernel writes
/// (`written`; so it may run first). Stored as computed: in the value's
/// dtype, and not half precision, which every backend computes in float32
/// and rounds only at the store (a reader would see the rounded value).
fn movable(program: &Program, stages: &[Stage], written: &HashSet<BufId>, p: usize) -> bool {
    let producer = &stages[p];
    let storage = program.storage_of(producer.out);
    let dtype = program.buffer(producer.out).dtype;
    producer.reduce.is_none()
        && producer.store_indirect.is_empty()
        && program.scalars.dtype(producer.value) == dtype
        && !matches!(dtype, DType::F16 | DType::BF16)
        && stages.iter().filter(|s| program.storage_of(s.out) == storage).count() == 1
        && !matches!(
            program.scalars.get(producer.value).op,
            ScalarOp::Load { .. } | ScalarOp::Const { .. } | ScalarOp::Index(_)
        )
        && program.scalars.loaded_buffers(&[producer.value]).iter().all(|b| !written.contains(&program.storage_of(*b)))
}

/// Replace stage `p`'s value in the kernel's other stages by a load of
/// what `p` stores; whether any stage changed.
fn reuse(program: &mut Program, stages: &mut [Stage], outer_len: usize, p: usize) -> bool {
    let producer = stages[p].clone();
    let dtype = program.buffer(producer.out).dtype;
    let mut changed = false;
    for (r, reader) in stages.iter_mut().enumerate() {
        if r == p || !reader.store_indirect.is_empty() {
            continue;
        }
        let Some(vars) = renaming(&producer, reader, outer_len) else { continue };
        let value = program.scalars.substitute(producer.value, &vars, &Ctx::default());
        if !program.scalars.topo(&[reader.value]).contains(&value) {
            continue;
        }
        let index = producer.store.substitute_vars(&vars, &Ctx::default());
        let load =
            program.scalars.add(ScalarOp::Load { buf: producer.out, index, indirect: vec![], mask: None }, dtype);
        reader.value = program.scalars.replace(reader.value, &HashMap::from([(value, load)]));
        changed = true;
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{buffer, load};
    use rdyn_ir::loops::{BinaryOp, BufRole, Kernel, ProgramOutput, Reduce, ReduceOp, ScalarId};
    use rdyn_ir::Expr;

    /// `h = x + r` stored, and a row sum of `h` and `h · 2` in its kernel:
    /// both read `h` back, and `h`'s stage runs first. Stored as float16
    /// (from float32, or computed as float16, which backends compute in
    /// float32), `h` would be rounded: then it is recomputed.
    #[test]
    fn stored_sum_is_read_back_by_its_kernel() {
        let cases = [(DType::F32, DType::F32, true), (DType::F16, DType::F32, false), (DType::F16, DType::F16, false)];
        for (dtype, compute, reads_back) in cases {
            let mut p = Program::default();
            let x = buffer(&mut p, &[8, 32], BufRole::Input(0));
            let r = buffer(&mut p, &[8, 32], BufRole::Input(1));
            let (total, twice, h) = (
                buffer(&mut p, &[8, 1], BufRole::Temp),
                buffer(&mut p, &[8, 32], BufRole::Temp),
                buffer(&mut p, &[8, 32], BufRole::Temp),
            );
            p.buffers[h.0 as usize].dtype = dtype;
            let sum_at = |p: &mut Program, v: u32| -> ScalarId {
                let at = Expr::v(0).scale(32).add(&Expr::v(v));
                let (a, b) = (load(p, x, at.clone()), load(p, r, at));
                p.scalars.binary(BinaryOp::Add, a, b, compute)
            };
            let (row, point) = (sum_at(&mut p, 2), sum_at(&mut p, 1));
            let two = p.scalars.constant(2.0, compute);
            let doubled = p.scalars.binary(BinaryOp::Mul, point, two, compute);
            let at = Expr::v(0).scale(32).add(&Expr::v(1));
            let (outer, wide) = (vec![Expr::c(8)], vec![Expr::c(8), Expr::c(32)]);
            let reduce = Some(Reduce { op: ReduceOp::Sum, ranges: vec![Expr::c(32)] });
            let stage =
                |out, ranges, reduce, value, store| Stage { out, ranges, reduce, value, store, store_indirect: vec![] };
            p.steps.push(Step::Kernel(Kernel {
                outer,
                stages: vec![
                    stage(total, vec![Expr::c(8), Expr::c(1)], reduce, row, Expr::v(0)),
                    stage(twice, wide.clone(), None, doubled, at.clone()),
                    stage(h, wide, None, point, at),
                ],
            }));
            p.outputs.extend([total, twice, h].map(ProgramOutput::Buffer));
            run(&mut p);
            let stages = p.kernels().next().map(|k| k.stages.clone()).unwrap_or_default();
            assert_eq!(stages[0].out == h, reads_back, "{p}");
            for s in stages.iter().filter(|s| s.out != h) {
                let mut reads = p.scalars.loaded_buffers(&[s.value]);
                reads.sort_by_key(|b| b.0);
                let want = if reads_back { vec![h] } else { vec![x, r] };
                assert_eq!(reads, want, "{p}");
            }
        }
    }
}
