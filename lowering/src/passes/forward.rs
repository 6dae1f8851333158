//! Forwarding: a pointwise stage whose buffer is read by one later stage of
//! the same kernel only, each element at the point that wrote it, is folded
//! into that reader, and the buffer is never stored.
//!
//! Lowering stores a value with several expensive users once (more than
//! `RECOMPUTE_LIMIT` ops, a transcendental counting 12), not knowing
//! where its users will end up; when fusion puts every one of them in the
//! same stage (layer norm's output feeding both halves of GELU; a max-pool's
//! partial maxima), the store and the reload are pure cost. Folding
//! substitutes the producer's value for the loads and drops the stage, so each
//! element is still computed once. Outputs, extern inputs and buffers read
//! through views or scattered into stay stored, and so does a buffer written by
//! several stages (the pieces of `piecewise.rs`). Nor is a store folded into one
//! piece: readers are known by their output buffer, which pieces share (fuzzing
//! found a value folded into one piece of two and never stored for the other).

use std::collections::{HashMap, HashSet};

use crate::passes::schedule::renaming;
use rdyn_ir::loops::{BufId, BufRole, Program, ScalarId, ScalarOp, Stage, Step};
use rdyn_ir::{Ctx, Expr};

/// Run the pass over `program` (after [`crate::passes::schedule`]).
pub fn run(program: &mut Program) {
    let pinned = pinned(program);
    let mut readers = readers(program);
    for g in 0..program.steps.len() {
        let mut s = 0;
        while s < stage_count(program, g) {
            let Some(plan) = candidate(program, g, s, &pinned, &readers) else {
                s += 1;
                continue;
            };
            let Some((producer, reader, produced)) = fold(program, g, s, plan) else {
                s += 1;
                continue;
            };
            // The producer's reads become the reader's.
            for b in program.scalars.loaded_buffers(&[produced]) {
                let set = readers.entry(program.storage_of(b)).or_default();
                set.remove(&(g, producer));
                set.insert((g, reader));
            }
        }
    }
}

fn stage_count(program: &Program, g: usize) -> usize {
    match &program.steps[g] {
        Step::Kernel(kernel) => kernel.stages.len(),
        Step::Extern(_) => 0,
    }
}

/// Storages that must stay in memory whoever reads them: outputs and
/// viewed storages, what extern calls read or write, scatter targets,
/// storages written in pieces (by several stages).
fn pinned(program: &Program) -> HashSet<BufId> {
    let mut pinned = program.pinned_storages();
    let mut written = HashSet::new();
    for step in &program.steps {
        match step {
            Step::Extern(ext) => pinned.extend(ext.inputs.iter().chain(&ext.outputs).map(|b| program.storage_of(*b))),
            Step::Kernel(kernel) => {
                for stage in &kernel.stages {
                    let storage = program.storage_of(stage.out);
                    if !stage.store_indirect.is_empty() || !written.insert(storage) {
                        pinned.insert(storage);
                    }
                }
            }
        }
    }
    pinned
}

/// For each storage, the stages that read it: (step, the stage's output).
fn readers(program: &Program) -> HashMap<BufId, HashSet<(usize, BufId)>> {
    let mut readers: HashMap<BufId, HashSet<(usize, BufId)>> = HashMap::new();
    for (g, step) in program.steps.iter().enumerate() {
        let Step::Kernel(kernel) = step else { continue };
        for stage in &kernel.stages {
            let mut roots = vec![stage.value];
            roots.extend(stage.store_indirect.iter().map(|(s, _)| *s));
            for b in program.scalars.loaded_buffers(&roots) {
                readers.entry(program.storage_of(b)).or_default().insert((g, stage.out));
            }
        }
    }
    readers
}

/// How stage `s` folds into a later stage of its kernel.
struct Fold {
    /// The reader's index in the kernel.
    reader: usize,
    /// The producer's variables in the reader's terms.
    vars: Vec<Expr>,
    /// The reader's loads of the producer's buffer.
    loads: Vec<ScalarId>,
}

/// How stage `s` of step `g` folds into its only reader, if it may.
fn candidate(
    program: &Program,
    g: usize,
    s: usize,
    pinned: &HashSet<BufId>,
    readers: &HashMap<BufId, HashSet<(usize, BufId)>>,
) -> Option<Fold> {
    let Step::Kernel(kernel) = &program.steps[g] else { return None };
    let producer = &kernel.stages[s];
    let out = producer.out;
    if producer.reduce.is_some()
        || !producer.store_indirect.is_empty()
        || program.buffer(out).role != BufRole::Temp
        || pinned.contains(&out)
        || program.scalars.dtype(producer.value) != program.buffer(out).dtype
        || kernel.stages.iter().filter(|st| st.out == out).count() != 1
    {
        return None;
    }
    let [(rg, reader_out)] = readers.get(&out)?.iter().copied().collect::<Vec<_>>()[..] else { return None };
    if rg != g {
        return None;
    }
    let t = kernel.stages.iter().position(|st| st.out == reader_out)?;
    let reader = &kernel.stages[t];
    // Readers are known by their output: pieces of one buffer
    // ([`crate::passes::piecewise`]) would all be one reader.
    let pieces = kernel.stages.iter().filter(|st| st.out == reader_out).count();
    if t <= s || !reader.store_indirect.is_empty() || pieces != 1 {
        return None;
    }
    let vars = renaming(producer, reader, kernel.outer.len())?;
    let written = producer.store.substitute_vars(&vars, &Ctx::default());
    let loads = loads_of(program, reader, out);
    let fits = !loads.is_empty()
        && loads.iter().all(|id| {
            matches!(&program.scalars.get(*id).op, ScalarOp::Load { index, indirect, mask: None, .. }
                if indirect.is_empty() && *index == written)
        });
    fits.then_some(Fold { reader: t, vars, loads })
}

/// The loads of `buf` under `stage`'s value.
fn loads_of(program: &Program, stage: &Stage, buf: BufId) -> Vec<ScalarId> {
    program
        .scalars
        .topo(&[stage.value])
        .into_iter()
        .filter(|id| matches!(&program.scalars.get(*id).op, ScalarOp::Load { buf: b, .. } if *b == buf))
        .collect()
}

/// Fold stage `s` of step `g` into its reader and drop it; the producer's
/// and the reader's buffers, and the producer's value.
fn fold(program: &mut Program, g: usize, s: usize, plan: Fold) -> Option<(BufId, BufId, ScalarId)> {
    let Step::Kernel(kernel) = &program.steps[g] else { return None };
    let (producer, reader) = (kernel.stages[s].clone(), kernel.stages[plan.reader].clone());
    let value = program.scalars.substitute(producer.value, &plan.vars, &Ctx::default());
    let with: HashMap<ScalarId, ScalarId> = plan.loads.into_iter().map(|id| (id, value)).collect();
    let folded = program.scalars.replace(reader.value, &with);
    let Step::Kernel(kernel) = &mut program.steps[g] else { return None };
    kernel.stages[plan.reader].value = folded;
    kernel.stages.remove(s);
    Some((producer.out, reader.out, producer.value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{buffer, load};
    use rdyn_ir::loops::{BinaryOp, Kernel, ProgramOutput, UnaryOp};
    use rdyn_ir::DType;

    fn stage(out: BufId, value: ScalarId, store: Expr) -> Stage {
        Stage { out, ranges: vec![Expr::c(8), Expr::c(32)], reduce: None, value, store, store_indirect: vec![] }
    }

    /// `t = exp(x)`, `y = t * t + t` in one kernel: `t` folds into `y`'s stage
    /// (one stage, no load of `t`); read at a neighbour, it must not.
    #[test]
    fn single_reader_at_the_same_point_folds() {
        for (read, folds) in [(Expr::v(1), true), (Expr::c(31).sub(&Expr::v(1)), false)] {
            let mut p = Program::default();
            let x = buffer(&mut p, &[8, 32], BufRole::Input(0));
            let tmp = buffer(&mut p, &[8, 32], BufRole::Temp);
            let y = buffer(&mut p, &[8, 32], BufRole::Temp);
            let at = Expr::v(0).scale(32).add(&Expr::v(1));
            let xv = load(&mut p, x, at.clone());
            let e = p.scalars.unary(UnaryOp::Exp, xv, DType::F32);
            let tv = load(&mut p, tmp, Expr::v(0).scale(32).add(&read));
            let sq = p.scalars.binary(BinaryOp::Mul, tv, tv, DType::F32);
            let yv = p.scalars.binary(BinaryOp::Add, sq, tv, DType::F32);
            p.steps.push(Step::Kernel(Kernel {
                outer: vec![Expr::c(8), Expr::c(32)],
                stages: vec![stage(tmp, e, at.clone()), stage(y, yv, at)],
            }));
            p.outputs.push(ProgramOutput::Buffer(y));
            run(&mut p);
            let stages = &p.kernels().next().map(|k| k.stages.clone()).unwrap_or_default();
            assert_eq!(stages.len() == 1, folds, "{p}");
            if folds {
                let reads = p.scalars.loaded_buffers(&[stages[0].value]);
                assert_eq!(reads, vec![x], "{p}");
            }
        }
    }

    /// A buffer two stages read stays stored.
    #[test]
    fn two_readers_keep_the_store() {
        let mut p = Program::default();
        let x = buffer(&mut p, &[8, 32], BufRole::Input(0));
        let tmp = buffer(&mut p, &[8, 32], BufRole::Temp);
        let (y, z) = (buffer(&mut p, &[8, 32], BufRole::Temp), buffer(&mut p, &[8, 32], BufRole::Temp));
        let at = Expr::v(0).scale(32).add(&Expr::v(1));
        let xv = load(&mut p, x, at.clone());
        let e = p.scalars.unary(UnaryOp::Exp, xv, DType::F32);
        let tv = load(&mut p, tmp, at.clone());
        let yv = p.scalars.unary(UnaryOp::Neg, tv, DType::F32);
        let zv = p.scalars.unary(UnaryOp::Abs, tv, DType::F32);
        p.steps.push(Step::Kernel(Kernel {
            outer: vec![Expr::c(8), Expr::c(32)],
            stages: vec![stage(tmp, e, at.clone()), stage(y, yv, at.clone()), stage(z, zv, at)],
        }));
        p.outputs.extend([ProgramOutput::Buffer(y), ProgramOutput::Buffer(z)]);
        run(&mut p);
        assert_eq!(p.kernels().next().map(|k| k.stages.len()), Some(3), "{p}");
    }
}
