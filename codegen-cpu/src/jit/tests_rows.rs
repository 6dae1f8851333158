//! Compiled stages run by rows (`exec/rows.rs`): several rows a call,
//! outer and inner tiles, point stages (one lane a row), against the
//! interpreter bit for bit (helpers from `tests.rs`).

use rdyn_ir::loops::{BinaryOp, BufId, ReduceOp, UnaryOp};
use rdyn_ir::{DType, Expr};

use super::tests::{buf, compile, f32_inst, f32_stage, inputs, load, reduce_stage, run_on_inputs};
use crate::plan::{InstOp, KernelPlan, TileMode};

/// Rows of 37 lanes in tiles of 256: each call covers several rows, and
/// what is invariant along a row (`exp(b[i0])`, `sqrt(b[i0])`) changes
/// from row to row, so it is recomputed per row. Two stages: the second
/// reads the first's output at the same point.
#[test]
fn stages_run_by_rows_bitwise() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let at = i0.scale(37).add(&i1);
    let first = f32_stage(
        2,
        None,
        vec![
            load(0, 0, at.clone()),
            load(1, 1, i0.clone()),
            f32_inst(2, InstOp::Unary(UnaryOp::Exp, 1)),
            f32_inst(3, InstOp::Unary(UnaryOp::Sqrt, 1)),
            f32_inst(1, InstOp::Binary(BinaryOp::Mul, 0, 2)),
            f32_inst(0, InstOp::Binary(BinaryOp::Add, 1, 3)),
        ],
        0,
        &at,
        4,
    );
    let second = f32_stage(
        3,
        None,
        vec![load(0, 2, at.clone()), load(1, 1, i1.clone()), f32_inst(2, InstOp::Binary(BinaryOp::Sub, 0, 1))],
        2,
        &at,
        3,
    );
    let kernel = KernelPlan {
        name: "k".into(),
        outer: vec![4, 37],
        mode: TileMode::Outer,
        stages: vec![first, second],
        serial: false,
        disjoint: 0,
        tile: 256,
        columns: false,
        transpose: None,
    };
    let bufs = vec![
        buf(&[4, 37], &[37, 1], DType::F32),
        buf(&[37], &[1], DType::F32),
        buf(&[4, 37], &[37, 1], DType::F32),
        buf(&[4, 37], &[37, 1], DType::F32),
    ];
    let compiled = compile(&kernel, &bufs);
    assert!(
        compiled.stages.iter().all(|s| s.jit.as_ref().is_some_and(|j| j.rows == super::Rows::Points)),
        "not compiled by rows"
    );
    let [_, jit] = run_on_inputs(&compiled, &bufs, [4 * 37, 4 * 37]);
    let [_, interp] = run_on_inputs(&kernel, &bufs, [4 * 37, 4 * 37]);
    assert_eq!(jit, interp);
}

/// Inner tiles by rows: a row's sum (one call per row, folded and stored
/// by the function), then `a - sum / 37` along the row, which reads the
/// sum the first stage stored for the same row.
#[test]
fn inner_stages_run_by_rows_bitwise() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let mut sum = reduce_stage(ReduceOp::Sum);
    sum.inner = vec![1];
    let mut centre = f32_stage(
        2,
        None,
        vec![
            load(0, 0, i0.scale(37).add(&i1)),
            load(1, 3, i0.clone()),
            f32_inst(2, InstOp::Binary(BinaryOp::Div, 1, 3)),
            f32_inst(1, InstOp::Binary(BinaryOp::Sub, 0, 2)),
        ],
        1,
        &i0.scale(37).add(&i1),
        4,
    );
    centre.inner = vec![37];
    centre.consts = vec![(3, InstOp::ConstF(37.0))];
    let kernel = KernelPlan {
        name: "k".into(),
        outer: vec![4],
        mode: TileMode::Inner,
        stages: vec![sum, centre],
        serial: false,
        disjoint: 0,
        tile: 256,
        columns: false,
        transpose: None,
    };
    let bufs = vec![
        buf(&[4, 37], &[37, 1], DType::F32),
        buf(&[37], &[1], DType::F32),
        buf(&[4, 37], &[37, 1], DType::F32),
        buf(&[4], &[1], DType::F32),
    ];
    let compiled = compile(&kernel, &bufs);
    assert!(
        compiled.stages.iter().all(|s| s.jit.as_ref().is_some_and(|j| j.rows == super::Rows::Points)),
        "not compiled by rows"
    );
    assert_eq!(run_on_inputs(&compiled, &bufs, [4 * 37, 4]), run_on_inputs(&kernel, &bufs, [4 * 37, 4]));
}

/// Inner tiles by rows with a point stage (`inner []`, one lane a row: a
/// batch norm's running mean beside its per-channel sums): a row's sum,
/// then `sum · 0.5 + b[row]`, all by rows, as the interpreter computes.
#[test]
fn point_stages_run_by_rows_bitwise() {
    if !super::enabled() {
        return;
    }
    let i0 = Expr::v(0);
    let mut sum = reduce_stage(ReduceOp::Sum);
    sum.out = BufId(2);
    sum.inner = vec![1];
    let mut point = f32_stage(
        3,
        None,
        vec![
            load(0, 2, i0.clone()),
            f32_inst(1, InstOp::Binary(BinaryOp::Mul, 0, 4)),
            load(2, 1, i0.clone()),
            f32_inst(3, InstOp::Binary(BinaryOp::Add, 1, 2)),
        ],
        3,
        &i0,
        5,
    );
    point.consts = vec![(4, InstOp::ConstF(0.5))];
    let kernel = KernelPlan {
        name: "k".into(),
        outer: vec![4],
        mode: TileMode::Inner,
        stages: vec![sum, point],
        serial: false,
        disjoint: 0,
        tile: 256,
        columns: false,
        transpose: None,
    };
    let bufs = vec![
        buf(&[4, 37], &[37, 1], DType::F32),
        buf(&[37], &[1], DType::F32),
        buf(&[4], &[1], DType::F32),
        buf(&[4], &[1], DType::F32),
    ];
    let compiled = compile(&kernel, &bufs);
    assert!(
        compiled.stages.iter().all(|s| s.jit.as_ref().is_some_and(|j| j.rows == super::Rows::Points)),
        "not compiled by rows"
    );
    let [jit, interp] = [&compiled, &kernel].map(|k| run_on_inputs(k, &bufs, [4, 4]));
    assert_eq!(jit, interp);
    let (a, b) = inputs();
    let sums = jit[0].iter().map(|x| f32::from_bits(*x));
    for (r, (s, p)) in sums.zip(&jit[1]).enumerate() {
        let want: f32 = (0..37).map(|j| (a[37 * r + j] - b[j]).powi(2)).sum();
        assert!(s.to_bits() == want.to_bits() || (s - want).abs() <= 1e-4 * want.abs() || s.is_nan(), "row {r}");
        assert_eq!(*p, (s * 0.5 + b[r]).to_bits(), "row {r}");
    }
}
