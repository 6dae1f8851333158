//! Relayout: a computed pointwise stage whose loads walk memory along
//! another dim than its store (NCHW operands, a channels-last result: a
//! ReLU's gradient feeding a channels-last convolution's backward) is
//! computed in its loads' layout into a temporary, and a copy kernel after
//! it stores the temporary in the result's layout.
//!
//! As one stage, the CPU tiles along the store's contiguous dim and every
//! such load is a gather, a lane per cache line: 0.19 ms for the `[2, 64,
//! 64, 32]` ReLU-masked gradient of a U-Net decoder, 0.7 ns an element. In
//! the loads' layout every load is contiguous, and the copy is
//! `codegen-cpu`'s blocked transpose (8 x 8 squares through registers):
//! 0.023 ms computing, 0.021 ms copying.
//!
//! Only single-stage kernels over constant sizes, whose every load either
//! does not move along the store's contiguous dim (a per-channel
//! parameter) or crosses it, all crossing loads contiguous along one
//! other dim, both dims at least [`MIN_SIDE`] long: the shapes the blocked
//! copy takes. A stage that only copies is that copy already.

use rdyn_ir::loops::{contiguous_strides, BufId, BufRole, Buffer, Kernel, Program, ScalarOp, Stage, Step};

use crate::lazy::vars;
use rdyn_ir::{Ctx, Expr, Var};

/// The shortest dim either side of a blocked transpose walks (as
/// `codegen-cpu`'s transposing copy asks).
const MIN_SIDE: i64 = 8;

/// The smallest step along the store's contiguous dim at which a load's
/// lanes are far apart (half a cache line of float32 and more).
const FAR: i64 = 8;

/// Run the pass over `program` (on the CPU, after the kernels are final).
pub fn run(program: &mut Program) {
    let mut steps = std::mem::take(&mut program.steps);
    let mut i = 0;
    while i < steps.len() {
        if let Step::Kernel(kernel) = &mut steps[i] {
            if let Some(copy) = relayout(program, kernel) {
                steps.insert(i + 1, Step::Kernel(copy));
                i += 1;
            }
        }
        i += 1;
    }
    program.steps = steps;
}

/// Rewrite `kernel` to store into a temporary in its loads' layout; the
/// copy kernel to run after it.
fn relayout(program: &mut Program, kernel: &mut Kernel) -> Option<Kernel> {
    let [stage] = &kernel.stages[..] else { return None };
    if stage.reduce.is_some() || !stage.store_indirect.is_empty() || stage.ranges.len() != kernel.outer.len() {
        return None;
    }
    let sizes: Vec<i64> = kernel.outer.iter().map(Expr::as_const).collect::<Option<_>>()?;
    let unit = |e: &Expr| (0..sizes.len()).find(|&v| sizes[v] >= MIN_SIDE && e.linear_coef(Var(v as u32)) == Some(1));
    let a = unit(&stage.store)?;
    let crossing = crossing_load(program, stage, a, &unit)?;
    let b = unit(&crossing)?;
    if stage.store.linear_coef(Var(b as u32))?.abs() < FAR {
        return None;
    }
    let steps: Vec<i64> =
        (0..sizes.len()).map(|v| crossing.linear_coef(Var(v as u32)).map(i64::abs)).collect::<Option<_>>()?;
    let order = load_order(&steps);
    // The temporary: dense, its dims laid out in `order` (outermost first),
    // so the dim the crossing load walks by one is contiguous in it too.
    let outer: Vec<Expr> = order.iter().map(|&v| kernel.outer[v].clone()).collect();
    let mut strides = vec![Expr::zero(); order.len()];
    // The computing kernel's variables in that order: its tiles run along
    // the dim its loads walk by one. Old variable `v` is `position[v]`.
    let mut position = vec![Expr::zero(); order.len()];
    for (p, stride) in contiguous_strides(&outer).into_iter().enumerate() {
        strides[order[p]] = stride;
        position[order[p]] = Expr::v(p as u32);
    }
    let dtype = program.buffer(stage.out).dtype;
    let buffer = Buffer { dtype, sizes: kernel.outer.clone(), strides, offset: Expr::zero(), role: BufRole::Temp };
    let (read, write) = (buffer.address(&vars(order.len())), buffer.address(&position));
    let temp = program.add_buffer(buffer);
    let copy = copy_kernel(program, kernel, (temp, read), (stage.out, stage.store.clone()));
    let value = program.scalars.substitute(kernel.stages[0].value, &position, &Ctx::default());
    let stage = &mut kernel.stages[0];
    stage.out = temp;
    stage.store = write;
    stage.value = value;
    stage.ranges = outer.clone();
    kernel.outer = outer;
    Some(copy)
}

/// The variables in the order of a load's steps, outermost first: the
/// largest step first, the dims it does not move along (step 0, an
/// upsampling's split) before all.
fn load_order(steps: &[i64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..steps.len()).collect();
    order.sort_by_key(|&v| (steps[v] != 0, std::cmp::Reverse(steps[v])));
    order
}

/// The index of the stage's loads that cross its store's contiguous dim
/// `a` (one of them), when every other load stays put along `a` and the
/// stage computes more than a copy; `None` otherwise.
fn crossing_load(program: &Program, stage: &Stage, a: usize, unit: &dyn Fn(&Expr) -> Option<usize>) -> Option<Expr> {
    let scalars = &program.scalars;
    let mut crossing: Option<(usize, Expr)> = None;
    let mut computes = false;
    for id in scalars.topo(&[stage.value]) {
        match &scalars.get(id).op {
            ScalarOp::Load { index, indirect, .. } => {
                if !indirect.is_empty() {
                    return None;
                }
                let step = index.linear_coef(Var(a as u32))?;
                if step == 0 {
                    continue;
                }
                let b = unit(index).filter(|_| step.abs() >= FAR)?;
                if crossing.as_ref().is_some_and(|(other, _)| *other != b) {
                    return None;
                }
                crossing = Some((b, index.clone()));
            }
            ScalarOp::Const { .. } | ScalarOp::Index(_) => {}
            _ => computes = true,
        }
    }
    crossing.filter(|_| computes).map(|(_, index)| index)
}

/// A kernel over `kernel`'s points copying `from` (a buffer and its index
/// there) to `to` (the stage's own output and store).
fn copy_kernel(program: &mut Program, kernel: &Kernel, from: (BufId, Expr), to: (BufId, Expr)) -> Kernel {
    let dtype = program.buffer(from.0).dtype;
    let load = ScalarOp::Load { buf: from.0, index: from.1, indirect: Vec::new(), mask: None };
    let value = program.scalars.add(load, dtype);
    Kernel {
        outer: kernel.outer.clone(),
        stages: vec![Stage {
            out: to.0,
            ranges: kernel.outer.clone(),
            reduce: None,
            value,
            store: to.1,
            store_indirect: Vec::new(),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_temporary_follows_the_load() {
        // NCHW steps over (n, h, w, c) vars: c outermost after n, w innermost.
        assert_eq!(load_order(&[512, 8, 1, 32]), vec![0, 3, 1, 2]);
        // A dim the load does not move along (an upsampling's split) goes outermost.
        assert_eq!(load_order(&[0, 8, 1]), vec![0, 1, 2]);
        assert_eq!(load_order(&[8, 0, 1]), vec![1, 0, 2]);
    }
}
