//! Builders the passes' unit tests share: float32 buffers, loads and the
//! one-stage kernels lowering emits.

use rdyn_ir::loops::{
    contiguous_strides, BufId, BufRole, Buffer, Kernel, Program, Reduce, ScalarId, ScalarOp, Stage, Step,
};
use rdyn_ir::{DType, Expr};

/// A contiguous float32 buffer of `sizes`.
pub(crate) fn buffer(program: &mut Program, sizes: &[i64], role: BufRole) -> BufId {
    let sizes: Vec<Expr> = sizes.iter().map(|s| Expr::c(*s)).collect();
    program.add_buffer(Buffer {
        dtype: DType::F32,
        strides: contiguous_strides(&sizes),
        sizes,
        offset: Expr::zero(),
        role,
    })
}

/// A plain float32 load of `buf` at `index`.
pub(crate) fn load(program: &mut Program, buf: BufId, index: Expr) -> ScalarId {
    program.scalars.add(ScalarOp::Load { buf, index, indirect: vec![], mask: None }, DType::F32)
}

/// A kernel of one stage (as lowering emits them).
pub(crate) fn single_stage(
    outer: Vec<Expr>,
    out: BufId,
    ranges: Vec<Expr>,
    reduce: Option<Reduce>,
    value: ScalarId,
    store: Expr,
) -> Step {
    Step::Kernel(Kernel { outer, stages: vec![Stage { out, ranges, reduce, value, store, store_indirect: vec![] }] })
}
