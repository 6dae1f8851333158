//! Common stages: a stage that computes the same values into a buffer of
//! the same layout as an earlier one is dropped, and its readers read the
//! earlier buffer.
//!
//! Scalar expressions are hash-consed, so equal computations are equal
//! `ScalarId`s; what repeats is the *store*: a graph that builds the same
//! tensor twice (GPT-2's causal mask, once per layer, from the same inputs)
//! gets two identical kernels. The readers of the second, and views of it
//! (not outputs' storage or scattered buffers, which are never keys), are
//! pointed at the first. Runs before [`crate::passes::dce`], which then drops
//! the stage nothing reads any more.
//!
//! When the later stage stores an output and the earlier one a temporary
//! (a forward's head-merge copy, read by the next GEMM and saved again for
//! the backward), the earlier stage stores into the output instead, the
//! later one goes, and the temporary's readers read the output.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use rdyn_ir::loops::{BufId, BufRole, Buffer, Program, Reduce, ScalarId, ScalarOp, Stage, Step};
use rdyn_ir::Expr;

/// What makes two stages interchangeable: the same values stored at the same
/// places of buffers with the same layout.
#[derive(PartialEq, Eq, Hash)]
struct Key {
    value: ScalarId,
    ranges: Vec<Expr>,
    reduce: Option<Reduce>,
    store: Expr,
    layout: Buffer,
}

/// Run the pass over `program` (lowering's single-stage kernels).
pub fn run(program: &mut Program) {
    // Outputs keep their own buffer (a viewed storage's views move to the
    // earlier buffer, laid out the same); scatter targets and
    // non-temporaries are not written once, so never keys.
    let pinned = program.output_storages();
    let once = written_once(program);
    let mut first: HashMap<Key, BufId> = HashMap::new();
    // Duplicate buffer -> the buffer that already holds its values.
    let mut same: HashMap<BufId, BufId> = HashMap::new();
    let mut memo: HashMap<ScalarId, ScalarId> = HashMap::new();
    // Earlier temporary -> the later output that repeats it, and where
    // that output's stage is.
    let mut promoted: HashMap<BufId, BufId> = HashMap::new();
    let mut repeats: HashSet<(usize, usize)> = HashSet::new();
    for s in 0..program.steps.len() {
        let stages = match &mut program.steps[s] {
            Step::Extern(ext) => {
                ext.inputs.iter_mut().for_each(|b| *b = *same.get(b).unwrap_or(b));
                continue;
            }
            Step::Kernel(kernel) => kernel.stages.clone(),
        };
        for (k, mut stage) in stages.into_iter().enumerate() {
            redirect_stage(program, &mut stage, &same, &mut memo);
            if stage.store_indirect.is_empty() && once.contains(&stage.out) {
                let key = Key {
                    value: stage.value,
                    ranges: stage.ranges.clone(),
                    reduce: stage.reduce.clone(),
                    store: stage.store.clone(),
                    layout: program.buffer(stage.out).clone(),
                };
                match first.entry(key) {
                    Entry::Occupied(earlier) if !pinned.contains(&stage.out) => {
                        same.insert(stage.out, *earlier.get());
                    }
                    Entry::Occupied(mut earlier) if !pinned.contains(earlier.get()) => {
                        promoted.insert(*earlier.get(), stage.out);
                        repeats.insert((s, k));
                        earlier.insert(stage.out);
                    }
                    Entry::Occupied(_) => {}
                    Entry::Vacant(slot) => {
                        slot.insert(stage.out);
                    }
                }
            }
            if let Step::Kernel(kernel) = &mut program.steps[s] {
                kernel.stages[k] = stage;
            }
        }
    }
    move_views(program, &same);
    if !promoted.is_empty() {
        promote(program, &promoted, &repeats);
    }
}

/// Each temporary in `promoted` is stored into its output instead (the
/// earlier stage writes the output's buffer, laid out the same), the
/// output's own stage (`repeats`: step, stage) goes, and every read of the
/// temporary, directly, by an extern call or through a view, reads the
/// output.
fn promote(program: &mut Program, promoted: &HashMap<BufId, BufId>, repeats: &HashSet<(usize, usize)>) {
    drop_stages(program, repeats);
    let mut memo = HashMap::new();
    for s in 0..program.steps.len() {
        let stages = match &mut program.steps[s] {
            Step::Extern(ext) => {
                ext.inputs.iter_mut().for_each(|b| *b = *promoted.get(b).unwrap_or(b));
                continue;
            }
            Step::Kernel(kernel) => kernel.stages.clone(),
        };
        let stages: Vec<Stage> = stages
            .into_iter()
            .map(|mut stage| {
                stage.out = *promoted.get(&stage.out).unwrap_or(&stage.out);
                redirect_stage(program, &mut stage, promoted, &mut memo);
                stage
            })
            .collect();
        if let Step::Kernel(kernel) = &mut program.steps[s] {
            kernel.stages = stages;
        }
    }
    move_views(program, promoted);
}

/// `stage` reading, for each buffer in `to`, the buffer it maps to.
fn redirect_stage(
    program: &mut Program,
    stage: &mut Stage,
    to: &HashMap<BufId, BufId>,
    memo: &mut HashMap<ScalarId, ScalarId>,
) {
    stage.value = redirect(program, stage.value, to, memo);
    for (v, _) in &mut stage.store_indirect {
        *v = redirect(program, *v, to, memo);
    }
}

/// Views of a buffer in `to` made views of the buffer it maps to.
fn move_views(program: &mut Program, to: &HashMap<BufId, BufId>) {
    for buffer in &mut program.buffers {
        if let BufRole::View(base) = buffer.role {
            buffer.role = BufRole::View(*to.get(&base).unwrap_or(&base));
        }
    }
}

/// Temporaries exactly one stage writes (and nothing writes through a view):
/// their values, once stored, stay.
fn written_once(program: &Program) -> HashSet<BufId> {
    let writes = write_counts(program);
    writes.into_iter().filter(|(b, n)| *n == 1 && program.buffer(*b).role == BufRole::Temp).map(|(b, _)| b).collect()
}

/// How many kernel stages and extern calls write each storage.
pub(crate) fn write_counts(program: &Program) -> HashMap<BufId, usize> {
    let mut writes: HashMap<BufId, usize> = HashMap::new();
    for step in &program.steps {
        let outs: Vec<BufId> = match step {
            Step::Kernel(kernel) => kernel.stages.iter().map(|s| s.out).collect(),
            Step::Extern(ext) => ext.outputs.clone(),
        };
        for b in outs {
            *writes.entry(program.storage_of(b)).or_default() += 1;
        }
    }
    writes
}

/// Remove the stages at `positions` (step, stage), then the kernels left
/// without a stage.
pub(crate) fn drop_stages(program: &mut Program, positions: &HashSet<(usize, usize)>) {
    for (s, step) in program.steps.iter_mut().enumerate() {
        if let Step::Kernel(kernel) = step {
            let mut k = 0;
            kernel.stages.retain(|_| {
                k += 1;
                !positions.contains(&(s, k - 1))
            });
        }
    }
    program.steps.retain(|step| !matches!(step, Step::Kernel(kernel) if kernel.stages.is_empty()));
}

/// `root` with its loads of duplicate buffers reading the originals.
fn redirect(
    program: &mut Program,
    root: ScalarId,
    same: &HashMap<BufId, BufId>,
    memo: &mut HashMap<ScalarId, ScalarId>,
) -> ScalarId {
    if same.is_empty() {
        return root;
    }
    let mut with = HashMap::new();
    for id in program.scalars.topo(&[root]) {
        if let ScalarOp::Load { buf, index, indirect, mask } = &program.scalars.get(id).op {
            let Some(&to) = same.get(buf) else { continue };
            let moved = match memo.get(&id) {
                Some(&m) => m,
                None => {
                    let op = ScalarOp::Load { buf: to, index: index.clone(), indirect: indirect.clone(), mask: *mask };
                    let dtype = program.scalars.dtype(id);
                    let m = program.scalars.add(op, dtype);
                    memo.insert(id, m);
                    m
                }
            };
            with.insert(id, moved);
        }
    }
    if with.is_empty() {
        root
    } else {
        program.scalars.replace(root, &with)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{buffer, load, single_stage};
    use rdyn_ir::loops::{ProgramOutput, UnaryOp};
    use rdyn_ir::DType;

    fn kernel(out: BufId, value: ScalarId) -> Step {
        single_stage(vec![Expr::c(64)], out, vec![Expr::c(64)], None, value, Expr::v(0))
    }

    /// Three temporaries `a`, `b`, `y` of 64 elements, and `exp(x)` of an
    /// input `x`, for `a` and `b` to store twice.
    fn exp_twice(p: &mut Program) -> ([BufId; 3], ScalarId) {
        let x = buffer(p, &[64], BufRole::Input(0));
        let temps = [(); 3].map(|_| buffer(p, &[64], BufRole::Temp));
        let xv = load(p, x, Expr::v(0));
        (temps, p.scalars.unary(UnaryOp::Exp, xv, DType::F32))
    }

    /// `a = exp(x)`, `b = exp(x)`, `y = -b`: `y` reads `a`, and only the
    /// first exp is left after DCE; an output computed twice keeps both.
    #[test]
    fn a_stage_computed_twice_is_stored_once() {
        for b_is_output in [false, true] {
            let mut p = Program::default();
            let ([a, b, y], e) = exp_twice(&mut p);
            let bv = load(&mut p, b, Expr::v(0));
            let neg = p.scalars.unary(UnaryOp::Neg, bv, DType::F32);
            p.steps.extend([kernel(a, e), kernel(b, e), kernel(y, neg)]);
            p.outputs.push(ProgramOutput::Buffer(a));
            p.outputs.push(ProgramOutput::Buffer(y));
            if b_is_output {
                p.outputs.push(ProgramOutput::Buffer(b));
            }
            run(&mut p);
            crate::passes::dce::run(&mut p);
            assert_eq!(p.kernels().count(), if b_is_output { 3 } else { 2 }, "{p}");
            let last = p.kernels().last().map(|k| k.stages[0].value);
            let reads = last.map(|v| p.scalars.loaded_buffers(&[v])).unwrap_or_default();
            assert_eq!(reads, vec![if b_is_output { b } else { a }], "{p}");
        }
    }

    /// `a = exp(x)`, `y = -a` (also through a view of `a`), then an output
    /// `b = exp(x)`: the first stage stores `b`, `y` reads `b`, and the
    /// repeat goes.
    #[test]
    fn a_temporary_repeated_as_an_output_is_stored_there() {
        let mut p = Program::default();
        let ([a, b, y], e) = exp_twice(&mut p);
        let view = p.add_buffer(Buffer { role: BufRole::View(a), ..p.buffer(a).clone() });
        let av = load(&mut p, a, Expr::v(0));
        let through_view = load(&mut p, view, Expr::c(63).sub(&Expr::v(0)));
        let sum = p.scalars.binary(rdyn_ir::loops::BinaryOp::Add, av, through_view, DType::F32);
        let neg = p.scalars.unary(UnaryOp::Neg, sum, DType::F32);
        p.steps.extend([kernel(a, e), kernel(y, neg), kernel(b, e)]);
        p.outputs.extend([ProgramOutput::Buffer(y), ProgramOutput::Buffer(b)]);
        run(&mut p);
        crate::passes::dce::run(&mut p);
        let stages: Vec<_> = p.kernels().map(|k| k.stages[0].clone()).collect();
        assert_eq!(stages.len(), 2, "{p}");
        assert_eq!((stages[0].out, stages[0].value), (b, e), "{p}");
        assert_eq!(p.scalars.loaded_buffers(&[stages[1].value]), vec![b, view], "{p}");
        assert_eq!(p.buffer(view).role, BufRole::View(b), "{p}");
    }

    /// `a = exp(x)`, then `b = exp(x)` read through a view (a GEMM's
    /// transposed operand): the view moves to `a`, and `b` goes.
    #[test]
    fn a_view_of_a_repeated_stage_reads_the_first() {
        let mut p = Program::default();
        let ([a, b, y], e) = exp_twice(&mut p);
        let view = p.add_buffer(Buffer { role: BufRole::View(b), ..p.buffer(b).clone() });
        let through_view = load(&mut p, view, Expr::c(63).sub(&Expr::v(0)));
        let neg = p.scalars.unary(UnaryOp::Neg, through_view, DType::F32);
        p.steps.extend([kernel(a, e), kernel(b, e), kernel(y, neg)]);
        p.outputs.extend([ProgramOutput::Buffer(a), ProgramOutput::Buffer(y)]);
        run(&mut p);
        crate::passes::dce::run(&mut p);
        assert_eq!(p.buffer(view).role, BufRole::View(a), "{p}");
        assert_eq!(p.kernels().count(), 2, "{p}");
    }
}
