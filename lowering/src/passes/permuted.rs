//! Permuted copies: a temporary that only copies another copy's elements in
//! a permuted order, and that only library calls read, becomes a strided
//! view of the first copy, and its stage goes.
//!
//! A matrix product's operand is materialised in the layout the product
//! wants. A training backward needs the same gradient as `[tokens, dim]`
//! for the input's gradient and as `[dim, tokens]` for the weight's: two
//! copies of one gather (BERT's attention gradients, stored by head, three
//! per layer). [`crate::passes::cse`] does not see them as one (the ranges and
//! stores differ); the GEMM reads a transposed view as well as a copy.
//!
//! Only copies (a stage whose value is one plain load) whose readers are all
//! extern calls: a kernel's loads address a buffer's storage, which the
//! view changes, while an extern call reads the buffer through its sizes
//! and strides.

use std::collections::{HashMap, HashSet};

use crate::passes::cse::{drop_stages, write_counts};
use rdyn_ir::loops::{BufId, BufRole, Program, ScalarOp, Stage, Step};
use rdyn_ir::{Ctx, DType, Expr};

/// What a copy reads, over which ranges: equal keys under a permutation of
/// the variables are the same elements.
#[derive(PartialEq, Eq, Hash)]
struct Key {
    buf: BufId,
    index: Expr,
    ranges: Vec<Expr>,
    dtype: DType,
}

/// Permutations of the ranks this pass tries (beyond 4 it does not look).
const MAX_RANK: usize = 4;

/// Run the pass over `program` (lowering's single-stage kernels, after
/// [`crate::passes::cse`]).
pub fn run(program: &mut Program) {
    let writes = write_counts(program);
    let pinned = program.output_storages();
    let kernel_reads = kernel_reads(program);
    let viewed: HashSet<BufId> = program
        .buffers
        .iter()
        .filter_map(|b| match b.role {
            BufRole::View(base) => Some(base),
            _ => None,
        })
        .collect();
    let mut first: HashMap<Key, BufId> = HashMap::new();
    let mut dropped: HashSet<(usize, usize)> = HashSet::new();
    for (s, step) in program.steps.iter().enumerate() {
        let Step::Kernel(kernel) = step else { continue };
        for (k, stage) in kernel.stages.iter().enumerate() {
            let Some(key) = copy_key(program, stage, &writes) else { continue };
            let later = stage.out;
            let movable = !pinned.contains(&later) && !kernel_reads.contains(&later) && !viewed.contains(&later);
            let earlier = if movable { find_permuted(&first, &key) } else { None };
            match earlier {
                Some((base, perm)) => {
                    dropped.insert((s, k));
                    let strides = perm.iter().map(|&p| program.buffer(base).strides[p].clone()).collect();
                    let offset = program.buffer(base).offset.clone();
                    let view = &mut program.buffers[later.0 as usize];
                    (view.role, view.strides, view.offset) = (BufRole::View(base), strides, offset);
                }
                None => {
                    first.entry(key).or_insert(later);
                }
            }
        }
    }
    drop_stages(program, &dropped);
}

/// A stage that copies one plain load, over all of a temporary written once
/// in its own order (its store is the buffer's address of the point), from
/// a buffer that is written at most once: what it reads and over what.
fn copy_key(program: &Program, stage: &Stage, writes: &HashMap<BufId, usize>) -> Option<Key> {
    let out = program.buffer(stage.out);
    let rank = stage.ranges.len();
    if out.role != BufRole::Temp || writes.get(&stage.out) != Some(&1) || stage.reduce.is_some() {
        return None;
    }
    if !stage.store_indirect.is_empty() || !(2..=MAX_RANK).contains(&rank) || out.sizes != stage.ranges {
        return None;
    }
    let vars: Vec<Expr> = (0..rank).map(|v| Expr::v(v as u32)).collect();
    if out.address(&vars) != stage.store {
        return None;
    }
    let node = program.scalars.get(stage.value);
    let ScalarOp::Load { buf, index, indirect, mask: None } = &node.op else { return None };
    let source = program.storage_of(*buf);
    if !indirect.is_empty() || writes.get(&source).copied().unwrap_or(0) > 1 || node.dtype != out.dtype {
        return None;
    }
    Some(Key { buf: *buf, index: index.clone(), ranges: stage.ranges.clone(), dtype: node.dtype })
}

/// An earlier copy of the same elements with the variables permuted: its
/// buffer and, per variable of `key`, the earlier copy's variable.
fn find_permuted(first: &HashMap<Key, BufId>, key: &Key) -> Option<(BufId, Vec<usize>)> {
    let rank = key.ranges.len();
    let ctx = Ctx::default();
    permutations(rank).into_iter().skip(1).find_map(|perm| {
        let mut ranges = vec![Expr::c(0); rank];
        for (k, &p) in perm.iter().enumerate() {
            ranges[p] = key.ranges[k].clone();
        }
        let vars: Vec<Expr> = perm.iter().map(|&p| Expr::v(p as u32)).collect();
        let index = key.index.substitute_vars(&vars, &ctx);
        let found = first.get(&Key { buf: key.buf, index, ranges, dtype: key.dtype })?;
        Some((*found, perm))
    })
}

/// Every permutation of `0..n` (n at most [`MAX_RANK`]), the identity first.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    let tuples = (0..n.pow(n as u32)).map(|mut code| {
        (0..n)
            .map(|_| {
                let digit = code % n;
                code /= n;
                digit
            })
            .collect::<Vec<_>>()
    });
    let mut out: Vec<Vec<usize>> = tuples.filter(|t| (0..n).all(|v| t.contains(&v))).collect();
    out.sort_by_key(|p| p.iter().enumerate().filter(|(i, v)| i != *v).count());
    out
}

/// Buffers a kernel stage loads (directly; views are buffers of their own).
fn kernel_reads(program: &Program) -> HashSet<BufId> {
    let mut reads = HashSet::new();
    for kernel in program.kernels() {
        for stage in &kernel.stages {
            let mut roots = vec![stage.value];
            roots.extend(stage.store_indirect.iter().map(|(v, _)| *v));
            reads.extend(program.scalars.loaded_buffers(&roots));
        }
    }
    reads
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{buffer, load, single_stage};
    use rdyn_ir::loops::{Buffer, Extern, ExternKind, ProgramOutput};

    /// `x` [6, 4]: `a = x` copied [6, 4], `b = x^T` copied [4, 6], each
    /// read by a GEMM; `b` becomes `a` viewed with strides [1, 4].
    #[test]
    fn a_transposed_copy_read_by_a_gemm_is_a_view() {
        for b_read_by_kernel in [false, true] {
            let mut p = Program::default();
            let x = buffer(&mut p, &[6, 4], BufRole::Input(0));
            let a = buffer(&mut p, &[6, 4], BufRole::Temp);
            let b = buffer(&mut p, &[4, 6], BufRole::Temp);
            let (i0, i1) = (Expr::v(0), Expr::v(1));
            let xa = load(&mut p, x, i0.scale(4).add(&i1));
            let xb = load(&mut p, x, i1.scale(4).add(&i0));
            let ranges = |r: [i64; 2]| r.iter().map(|&n| Expr::c(n)).collect::<Vec<_>>();
            p.steps.push(single_stage(ranges([6, 4]), a, ranges([6, 4]), None, xa, i0.scale(4).add(&i1)));
            p.steps.push(single_stage(ranges([4, 6]), b, ranges([4, 6]), None, xb, i0.scale(6).add(&i1)));
            let [ab, ba] = [[6, 6], [4, 4]].map(|s| buffer(&mut p, &s, BufRole::Temp));
            let gemm = |inputs, out| {
                Step::Extern(Extern {
                    kind: ExternKind::Gemm { scale_bits: 1f64.to_bits() },
                    inputs,
                    outputs: vec![out],
                })
            };
            p.steps.push(gemm(vec![a, b], ab));
            p.steps.push(gemm(vec![b, a], ba));
            p.outputs.extend([ProgramOutput::Buffer(ab), ProgramOutput::Buffer(ba)]);
            if b_read_by_kernel {
                let y = buffer(&mut p, &[4, 6], BufRole::Temp);
                let bv = load(&mut p, b, i0.scale(6).add(&i1));
                p.steps.push(single_stage(ranges([4, 6]), y, ranges([4, 6]), None, bv, i0.scale(6).add(&i1)));
                p.outputs.push(ProgramOutput::Buffer(y));
            }
            run(&mut p);
            let view = Buffer { role: BufRole::View(a), strides: vec![Expr::c(1), Expr::c(4)], ..p.buffer(b).clone() };
            if b_read_by_kernel {
                assert_eq!(p.buffer(b).role, BufRole::Temp, "{p}");
                assert_eq!(p.kernels().count(), 3, "{p}");
            } else {
                assert_eq!(p.buffer(b), &view, "{p}");
                assert_eq!(p.kernels().count(), 1, "{p}");
            }
        }
    }

    #[test]
    fn permutations_are_all_there_identity_first() {
        let perms = permutations(4);
        assert_eq!(perms.len(), 24);
        assert_eq!(perms[0], vec![0, 1, 2, 3]);
        assert_eq!(perms.iter().collect::<HashSet<_>>().len(), 24);
    }
}
