//! Compiled stages against the interpreter, bit for bit, on values that
//! exercise NaN, infinities, signed zeros and ties. A NaN matches any NaN:
//! its sign and payload follow the operand order the machine code happens
//! to use (a product of NaNs), which neither side promises.

use rdyn_ir::loops::{BinaryOp, BufId, Negatives, ReduceOp, UnaryOp};
use rdyn_ir::{DType, Expr, Kind};

use crate::exec::run_kernel;
use crate::plan::{BufPlan, CpuStep, IndexFn, Inst, InstOp, KernelPlan, StagePlan, TileMode};
use crate::tile::Memory;
use rdyn_memplan::Storage;

pub(super) fn buf(sizes: &[i64], strides: &[i64], dtype: DType) -> BufPlan {
    BufPlan { dtype, sizes: sizes.to_vec(), strides: strides.to_vec(), offset: 0, storage: Storage::Input(0) }
}

pub(super) fn f32_inst(dst: u16, op: InstOp) -> Inst {
    Inst { dst, kind: Kind::F32, narrow: None, op }
}

/// An integer instruction whose value is a boolean (a mask).
pub(super) fn mask_inst(dst: u16, op: InstOp) -> Inst {
    Inst { dst, kind: Kind::I64, narrow: Some(DType::Bool), op }
}

pub(super) fn load(dst: u16, buf: u32, index: Expr) -> Inst {
    f32_inst(
        dst,
        InstOp::Load { buf: BufId(buf), dtype: DType::F32, index: IndexFn::new(&index), indirect: vec![], mask: None },
    )
}

/// A float32 stage writing `out` at `store`, with `n_regs` float registers
/// and no constants.
pub(super) fn f32_stage(
    out: u32,
    reduce: Option<(ReduceOp, Vec<i64>)>,
    insts: Vec<Inst>,
    value: u16,
    store: &Expr,
    n_regs: usize,
) -> StagePlan {
    StagePlan {
        out: BufId(out),
        out_dtype: DType::F32,
        inner: vec![],
        reduce,
        insts,
        value,
        value_kind: Kind::F32,
        store: IndexFn::new(store),
        store_indirect: vec![],
        regs: vec![Kind::F32; n_regs],
        consts: vec![],
        jit: None,
        uniform: None,
        accumulate: None,
        vertical: false,
    }
}

/// 4x37 inputs a (row-major), b (per column); output either row-major or
/// transposed (`out_t`).
fn pointwise_stage(out_t: bool) -> StagePlan {
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let a_index = i0.scale(37).add(&i1);
    let store = if out_t { i1.scale(4).add(&i0) } else { a_index.clone() };
    use BinaryOp as B;
    use InstOp::{Binary, Cast, Unary, Where};
    let insts = vec![
        load(0, 0, a_index),
        load(1, 1, i1.clone()),
        f32_inst(2, Binary(B::Max, 0, 1)),
        f32_inst(3, Binary(B::Min, 0, 1)),
        f32_inst(4, Binary(B::Div, 2, 3)),
        f32_inst(5, Unary(UnaryOp::Sqrt, 4)),
        f32_inst(4, Unary(UnaryOp::Round, 0)),
        f32_inst(6, Binary(B::Sub, 4, 5)),
        f32_inst(4, Binary(B::Lt, 0, 1)),
        Inst { dst: 7, kind: Kind::I64, narrow: None, op: Cast { src: 4, from: Kind::F32, to: DType::Bool } },
        f32_inst(4, Unary(UnaryOp::Rsqrt, 1)),
        f32_inst(5, Binary(B::Mul, 4, 8)),
        f32_inst(2, Where(7, 6, 5)),
        f32_inst(3, Unary(UnaryOp::Floor, 2)),
        f32_inst(4, Binary(B::Pow, 3, 9)),
        f32_inst(6, Unary(UnaryOp::IsInf, 0)),
        f32_inst(3, Binary(B::Add, 4, 6)),
        f32_inst(5, Binary(B::Add, 3, 2)),
    ];
    let mut stage = f32_stage(2, None, insts, 5, &store, 10);
    stage.regs[7] = Kind::I64;
    stage.consts = vec![(8, InstOp::ConstF(-0.5)), (9, InstOp::ConstF(2.0))];
    stage
}

/// `op` over the 37 columns of (a - b)², one lane per column.
pub(super) fn reduce_stage(op: ReduceOp) -> StagePlan {
    let (i0, i2) = (Expr::v(0), Expr::v(2));
    let insts = vec![
        load(0, 0, i0.scale(37).add(&i2)),
        load(1, 1, i2.clone()),
        f32_inst(2, InstOp::Binary(BinaryOp::Sub, 0, 1)),
        f32_inst(0, InstOp::Binary(BinaryOp::Mul, 2, 2)),
    ];
    let mut stage = f32_stage(3, Some((op, vec![37])), insts, 0, &i0, 3);
    stage.inner = vec![1];
    stage
}

pub(super) fn inputs() -> (Vec<f32>, Vec<f32>) {
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 2.5, -2.5, 0.5, 1e-40, 3.0];
    let a = (0..4 * 37)
        .map(|k| if k % 7 == 0 { specials[(k / 7) % specials.len()] } else { (k as f32 * 0.37).sin() * 5.0 })
        .collect();
    let b = (0..37).map(|k| if k % 5 == 0 { specials[k % specials.len()] } else { (k as f32 * 0.11).cos() }).collect();
    (a, b)
}

/// A parallel kernel of one stage.
pub(super) fn one_stage(outer: Vec<i64>, mode: TileMode, stage: StagePlan, tile: usize) -> KernelPlan {
    KernelPlan {
        name: "k".into(),
        outer,
        mode,
        stages: vec![stage],
        serial: false,
        disjoint: 0,
        tile,
        columns: false,
        transpose: None,
    }
}

/// `kernel` as `compile_program` leaves it for these buffers.
pub(super) fn compile(kernel: &KernelPlan, bufs: &[BufPlan]) -> KernelPlan {
    let mut steps = vec![CpuStep::Kernel(kernel.clone())];
    super::compile_program(&mut steps, bufs);
    match steps.pop() {
        Some(CpuStep::Kernel(k)) => k,
        _ => unreachable!(),
    }
}

/// The bits of float results, every NaN as one (see the module comment).
fn bits<'a>(values: impl IntoIterator<Item = &'a f32>) -> Vec<u32> {
    values.into_iter().map(|x| if x.is_nan() { f32::NAN.to_bits() } else { x.to_bits() }).collect()
}

/// Run `kernel` with `inputs()` in buffers 0 and 1 and zeroed outputs of
/// `lens` elements in buffers 2 and 3; return the outputs' bits.
pub(super) fn run_on_inputs(kernel: &KernelPlan, bufs: &[BufPlan], lens: [usize; 2]) -> [Vec<u32>; 2] {
    let (a, b) = inputs();
    let mut outs = lens.map(|n| vec![0f32; n]);
    let ptrs = [a.as_ptr() as usize, b.as_ptr() as usize, outs[0].as_mut_ptr() as usize, outs[1].as_mut_ptr() as usize];
    assert!(run_kernel(kernel, &Memory { ptrs: &ptrs, bufs }));
    outs.map(|o| bits(&o))
}

/// Run `kernel` as compiled and as interpreted; return both outputs' bits.
fn both(kernel: KernelPlan, out: usize, out_len: usize) -> (Vec<u32>, Vec<u32>, bool) {
    let bufs = vec![
        buf(&[4, 37], &[37, 1], DType::F32),
        buf(&[37], &[1], DType::F32),
        buf(&[4, 37], &[37, 1], DType::F32),
        buf(&[4], &[1], DType::F32),
    ];
    let compiled = compile(&kernel, &bufs);
    let jitted = compiled.stages.iter().all(|s| s.jit.is_some());
    let mut results = Vec::new();
    for k in [&compiled, &kernel] {
        let outs = run_on_inputs(k, &bufs, [4 * 37, 4]);
        results.push(outs[out - 2][..out_len].to_vec());
    }
    let interp = results.pop().unwrap_or_default();
    (results.pop().unwrap_or_default(), interp, jitted)
}

#[test]
fn pointwise_matches_interpreter_bitwise() {
    if !super::enabled() {
        return;
    }
    for out_t in [false, true] {
        let kernel = one_stage(vec![4, 37], TileMode::Outer, pointwise_stage(out_t), 16);
        let (jit, interp, compiled) = both(kernel, 2, 4 * 37);
        assert!(compiled, "stage was not compiled");
        assert_eq!(jit, interp, "transposed store: {out_t}");
    }
}

const ACCUMULATED: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];

#[test]
fn reduction_prologue_matches_interpreter_bitwise() {
    if !super::enabled() {
        return;
    }
    // One tile per row (256 lanes) and three tiles per row (16 lanes).
    for (op, tile) in ACCUMULATED.iter().flat_map(|op| [(*op, 256), (*op, 16)]) {
        let kernel = one_stage(vec![4], TileMode::Inner, reduce_stage(op), tile);
        let (jit, interp, compiled) = both(kernel, 3, 4);
        assert!(compiled, "stage was not compiled");
        assert_eq!(jit, interp, "{op:?}, tile {tile}");
    }
}

/// Lanes across the columns, reducing down the 4 rows of a - b into a
/// 37-wide output (the accumulator combines lane by lane), all four steps
/// in one call; or down rows `r0 + 2·r1` over two reduction dims, the last
/// one in one call per point of the first.
#[test]
fn column_reduction_matches_interpreter_bitwise() {
    if !super::enabled() {
        return;
    }
    let (i0, i1, i2) = (Expr::v(0), Expr::v(1), Expr::v(2));
    let one_dim = (vec![4], i1.scale(37).add(&i0));
    let two_dims = (vec![2, 2], i1.scale(37).add(&i2.scale(74)).add(&i0));
    for (op, (red, rows)) in ACCUMULATED.into_iter().flat_map(|op| [(op, one_dim.clone()), (op, two_dims.clone())]) {
        let insts = vec![load(0, 0, rows), load(1, 1, i0.clone()), f32_inst(2, InstOp::Binary(BinaryOp::Sub, 0, 1))];
        let stage = f32_stage(2, Some((op, red)), insts, 2, &i0, 3);
        let kernel = one_stage(vec![37], TileMode::Outer, stage, 16);
        let bufs = [buf(&[4, 37], &[37, 1], DType::F32), buf(&[37], &[1], DType::F32), buf(&[37], &[1], DType::F32)];
        let whole = compile(&kernel, &bufs).stages[0].jit.as_ref().is_some_and(|j| j.rows == super::Rows::Reduction);
        assert!(whole, "{op:?}: one call does not run the whole reduction");
        let (jit, interp, compiled) = both(kernel, 2, 37);
        assert!(compiled, "stage was not compiled");
        assert_eq!(jit, interp, "{op:?}");
    }
}

/// `x = a - b; t = tanh(x); e = exp(x * t); out = erf(e * 0.5) + x * t`:
/// three calls, values crossing them (x, t), a mask computed before a call
/// and used after it, and a call whose operand is a call result.
fn transcendental_stage(store: &Expr, reduce: Option<(ReduceOp, Vec<i64>)>, a_index: Expr, b_index: Expr) -> StagePlan {
    use BinaryOp as B;
    use InstOp::{Binary, Cast, Unary, Where};
    let insts = vec![
        load(0, 0, a_index),
        load(1, 1, b_index),
        f32_inst(2, Binary(B::Sub, 0, 1)),
        f32_inst(3, Binary(B::Lt, 0, 1)),
        Inst { dst: 9, kind: Kind::I64, narrow: None, op: Cast { src: 3, from: Kind::F32, to: DType::Bool } },
        f32_inst(3, Unary(UnaryOp::Tanh, 2)),
        f32_inst(4, Binary(B::Mul, 2, 3)),
        f32_inst(5, Unary(UnaryOp::Exp, 4)),
        f32_inst(6, Binary(B::Mul, 5, 8)),
        f32_inst(0, Unary(UnaryOp::Erf, 6)),
        f32_inst(1, Unary(UnaryOp::Sigmoid, 0)),
        f32_inst(6, Binary(B::Add, 1, 4)),
        f32_inst(7, Where(9, 6, 2)),
    ];
    let mut stage = f32_stage(2, reduce, insts, 7, store, 10);
    stage.regs[9] = Kind::I64;
    stage.consts = vec![(8, InstOp::ConstF(0.5))];
    stage
}

#[test]
fn transcendentals_compile_as_calls_bitwise() {
    if !super::enabled() {
        return;
    }
    let (i0, i1, i2) = (Expr::v(0), Expr::v(1), Expr::v(2));
    // Pointwise over 4x37, tiles of 16 (16-, 4- and 1-lane loops) and 256.
    for tile in [16, 256] {
        let stage = transcendental_stage(&i0.scale(37).add(&i1), None, i0.scale(37).add(&i1), i1.clone());
        let kernel = one_stage(vec![4, 37], TileMode::Outer, stage, tile);
        let (jit, interp, compiled) = both(kernel, 2, 4 * 37);
        assert!(compiled, "stage was not compiled");
        assert_eq!(jit, interp, "pointwise, tile {tile}");
    }
    // Folded along rows (sum, max), and accumulated down columns.
    for (op, tile) in [(ReduceOp::Sum, 256), (ReduceOp::Sum, 16), (ReduceOp::Max, 16)] {
        let mut stage = transcendental_stage(&i0, Some((op, vec![37])), i0.scale(37).add(&i2), i2.clone());
        stage.out = BufId(3);
        stage.inner = vec![1];
        let kernel = one_stage(vec![4], TileMode::Inner, stage, tile);
        let (jit, interp, compiled) = both(kernel, 3, 4);
        assert!(compiled, "stage was not compiled");
        assert_eq!(jit, interp, "{op:?} along rows, tile {tile}");
    }
    let stage = transcendental_stage(&i0, Some((ReduceOp::Sum, vec![4])), i1.scale(37).add(&i0), i0.clone());
    let kernel = one_stage(vec![37], TileMode::Outer, stage, 16);
    let (jit, interp, compiled) = both(kernel, 2, 37);
    assert!(compiled, "stage was not compiled");
    assert_eq!(jit, interp, "sum down columns");
}

/// A causal mask from integer indices: `where(!(i1 - i0 <= 0 && true),
/// -inf, a) - b`, then exp, as attention's softmax builds it.
#[test]
fn index_masks_compile_bitwise() {
    if !super::enabled() {
        return;
    }
    use BinaryOp as B;
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    for tile in [16, 256] {
        let insts = vec![
            Inst { dst: 0, kind: Kind::I64, narrow: None, op: InstOp::Index(IndexFn::new(&i1.sub(&i0))) },
            mask_inst(1, InstOp::Binary(B::Le, 0, 7)),
            mask_inst(0, InstOp::Binary(B::And, 1, 8)),
            mask_inst(1, InstOp::Unary(UnaryOp::Not, 0)),
            load(2, 0, i0.scale(37).add(&i1)),
            f32_inst(3, InstOp::Where(1, 9, 2)),
            load(2, 1, i1.clone()),
            f32_inst(4, InstOp::Binary(B::Sub, 3, 2)),
            f32_inst(3, InstOp::Unary(UnaryOp::Exp, 4)),
        ];
        let mut stage = f32_stage(2, None, insts, 3, &i0.scale(37).add(&i1), 10);
        for r in [0, 1, 7, 8] {
            stage.regs[r] = Kind::I64;
        }
        stage.consts = vec![(7, InstOp::ConstI(0)), (8, InstOp::ConstI(1)), (9, InstOp::ConstF(f64::NEG_INFINITY))];
        let kernel = one_stage(vec![4, 37], TileMode::Outer, stage, tile);
        let (jit, interp, compiled) = both(kernel, 2, 4 * 37);
        assert!(compiled, "stage was not compiled");
        assert_eq!(jit, interp, "tile {tile}");
    }
}

/// exp(b[i2]) with lanes along i0: the operand is the same on every lane,
/// so the call runs once before the loops.
#[test]
fn transcendentals_of_invariants_run_once_bitwise() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    // Down the 4 rows of each column: sum of a·exp(b) over rows, b per column.
    let insts = vec![
        load(0, 0, i1.scale(37).add(&i0)),
        load(1, 1, i0.clone()),
        f32_inst(2, InstOp::Unary(UnaryOp::Exp, 1)),
        f32_inst(1, InstOp::Unary(UnaryOp::Log, 2)),
        f32_inst(2, InstOp::Binary(BinaryOp::Mul, 0, 1)),
    ];
    let stage = f32_stage(2, Some((ReduceOp::Sum, vec![4])), insts, 2, &i0, 3);
    // Lanes along i0 (columns): b[i0] varies. Along i1 it would not.
    assert!(super::analysis::supported(&stage, Some(1), &[37, 4]).is_some());
    let kernel = one_stage(vec![37], TileMode::Outer, stage, 16);
    let (jit, interp, compiled) = both(kernel, 2, 37);
    assert!(compiled, "stage was not compiled");
    assert_eq!(jit, interp);
    // Rows: lanes along the reduction of a row, b[i0] the same on all.
    let (i2,) = (Expr::v(2),);
    let insts = vec![
        load(0, 0, i0.scale(37).add(&i2)),
        load(1, 1, i0.clone()),
        f32_inst(2, InstOp::Unary(UnaryOp::Exp, 1)),
        f32_inst(1, InstOp::Unary(UnaryOp::Tanh, 0)),
        f32_inst(0, InstOp::Binary(BinaryOp::Mul, 1, 2)),
    ];
    let mut stage = f32_stage(3, Some((ReduceOp::Sum, vec![37])), insts, 0, &i0, 3);
    stage.inner = vec![1];
    let kernel = one_stage(vec![4], TileMode::Inner, stage, 16);
    let (jit, interp, compiled) = both(kernel, 3, 4);
    assert!(compiled, "stage was not compiled");
    assert_eq!(jit, interp);
}

/// `out[i0, i1] = exp(a[i0, i1]) * sqrt(exp(b[i0]))` along a tile over
/// i1: the `b` part is the same on every lane, so the executor computes
/// it on one lane and copies it; the result must not change.
#[test]
fn uniform_instructions_match_full_tiles() {
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let insts = vec![
        load(0, 0, i0.scale(37).add(&i1)),
        f32_inst(1, InstOp::Unary(UnaryOp::Exp, 0)),
        load(2, 1, i0.clone()),
        f32_inst(3, InstOp::Unary(UnaryOp::Exp, 2)),
        f32_inst(0, InstOp::Unary(UnaryOp::Sqrt, 3)),
        f32_inst(2, InstOp::Binary(BinaryOp::Mul, 1, 0)),
    ];
    let mut stage = f32_stage(2, None, insts, 2, &i0.scale(37).add(&i1), 4);
    assert_eq!(stage.uniform_insts(Some(1)), vec![false, false, true, true, true, false]);
    // Along i0 every value changes from lane to lane.
    assert_eq!(stage.uniform_insts(Some(0)), vec![false; 6]);
    let plain = one_stage(vec![4, 37], TileMode::Outer, stage.clone(), 16);
    stage.uniform = Some((1, stage.uniform_insts(Some(1))));
    let with_uniform = KernelPlan { stages: vec![stage], ..plain.clone() };
    let bufs =
        vec![buf(&[4, 37], &[37, 1], DType::F32), buf(&[37], &[1], DType::F32), buf(&[4, 37], &[37, 1], DType::F32)];
    let (a, b) = inputs();
    let mut results = Vec::new();
    for kernel in [&plain, &with_uniform] {
        let mut out = vec![0f32; 4 * 37];
        let ptrs = [a.as_ptr() as usize, b.as_ptr() as usize, out.as_mut_ptr() as usize];
        assert!(run_kernel(kernel, &Memory { ptrs: &ptrs, bufs: &bufs }));
        results.push(out.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    }
    assert_eq!(results[0], results[1]);
}

/// Two embedding lookups: `out[i0, i1] = table[ids[i0], i1] + table[ids[3 -
/// i0], i1]`, lanes along i1. The ids are loaded and bounds-checked by the
/// executor on one lane (into the same registers: each row address must be
/// taken before the next id overwrites them); the row loads compile as
/// affine loads. An id out of range fails the kernel on both paths.
#[test]
fn gathers_of_invariant_rows_compile() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let int = |dst: u16, op: InstOp| Inst { dst, kind: Kind::I64, narrow: None, op };
    let id = |at: &Expr| InstOp::Load {
        buf: BufId(3),
        dtype: DType::I64,
        index: IndexFn::new(at),
        indirect: vec![],
        mask: None,
    };
    let row = InstOp::Load {
        buf: BufId(0),
        dtype: DType::F32,
        index: IndexFn::new(&i1),
        indirect: vec![(1, 37)],
        mask: None,
    };
    let insts = vec![
        int(0, id(&i0)),
        int(1, InstOp::Bounded { src: 0, size: 6, negatives: Negatives::Wrap }),
        f32_inst(2, row.clone()),
        int(0, id(&Expr::c(3).sub(&i0))),
        int(1, InstOp::Bounded { src: 0, size: 6, negatives: Negatives::Wrap }),
        f32_inst(3, row),
        f32_inst(4, InstOp::Binary(BinaryOp::Add, 2, 3)),
    ];
    let mut stage = f32_stage(2, None, insts, 4, &i0.scale(37).add(&i1), 5);
    stage.regs[0] = Kind::I64;
    stage.regs[1] = Kind::I64;
    let kernel = one_stage(vec![4, 37], TileMode::Outer, stage, 16);
    let bufs = vec![
        buf(&[6, 37], &[37, 1], DType::F32),
        buf(&[37], &[1], DType::F32),
        buf(&[4, 37], &[37, 1], DType::F32),
        buf(&[4], &[1], DType::I64),
    ];
    let compiled = compile(&kernel, &bufs);
    let jit = compiled.stages[0].jit.as_ref().expect("the gather stage compiles");
    assert_eq!(jit.pre, vec![0, 1, 3, 4]);
    let (a, _) = inputs();
    let table: Vec<f32> = a.iter().chain(&a).take(6 * 37).copied().collect();
    for (ids, ok) in [([5i64, 0, 3, 5], true), ([1, 6, 0, 2], false)] {
        let mut results = Vec::new();
        for k in [&compiled, &kernel] {
            let mut out = vec![0f32; 4 * 37];
            let ptrs = [table.as_ptr() as usize, 0, out.as_mut_ptr() as usize, ids.as_ptr() as usize];
            assert_eq!(run_kernel(k, &Memory { ptrs: &ptrs, bufs: &bufs }), ok);
            results.push(bits(&out));
        }
        if ok {
            assert_eq!(results[0], results[1]);
            // Row 1: ids[1] = 0 and ids[3 - 1] = 3.
            assert_eq!(results[0][37 + 2], (table[2] + table[3 * 37 + 2]).to_bits());
        }
    }
}

/// Constant padding as `constant_pad_nd` lowers it: `out[i0, i1] = a[i0,
/// i1 - 1]` where `1 <= i1 < 37`, else -inf. The masked-off lanes (the
/// first of each row: element -1 for row 0) must read nothing.
#[test]
fn masked_loads_compile_bitwise() {
    if !super::enabled() {
        return;
    }
    use BinaryOp as B;
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    for tile in [16, 256] {
        let insts = vec![
            Inst { dst: 0, kind: Kind::I64, narrow: None, op: InstOp::Index(IndexFn::new(&i1.sub(&Expr::c(1)))) },
            mask_inst(1, InstOp::Binary(B::Ge, 0, 7)),
            f32_inst(
                2,
                InstOp::Load {
                    buf: BufId(0),
                    dtype: DType::F32,
                    index: IndexFn::new(&i0.scale(37).add(&i1).sub(&Expr::c(1))),
                    indirect: vec![],
                    mask: Some(1),
                },
            ),
            f32_inst(3, InstOp::Where(1, 2, 9)),
        ];
        let mut stage = f32_stage(2, None, insts, 3, &i0.scale(37).add(&i1), 10);
        for r in [0, 1, 7] {
            stage.regs[r] = Kind::I64;
        }
        stage.consts = vec![(7, InstOp::ConstI(0)), (9, InstOp::ConstF(f64::NEG_INFINITY))];
        let kernel = one_stage(vec![4, 37], TileMode::Outer, stage, tile);
        let (jit, interp, compiled) = both(kernel, 2, 4 * 37);
        assert!(compiled, "stage was not compiled");
        assert_eq!(jit, interp, "tile {tile}");
        assert_eq!(jit[0], f32::NEG_INFINITY.to_bits());
    }
}

/// Every other element, both parities (`x[..., ::2] - x[..., 1::2]`):
/// the 4-lane loop reads stride-2 lanes with two loads and a shuffle; the
/// last row's odd lanes end at the buffer's last element. Tiles of 16 and
/// 256 cover the 16-, 4- and 1-lane loops.
#[test]
fn stride_two_loads_compile_bitwise() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let even = i0.scale(74).add(&i1.scale(2));
    for tile in [16, 256] {
        let insts = vec![
            load(0, 0, even.clone()),
            load(1, 0, even.add(&Expr::c(1))),
            f32_inst(2, InstOp::Binary(BinaryOp::Sub, 0, 1)),
        ];
        let stage = f32_stage(2, None, insts, 2, &i0.scale(37).add(&i1), 3);
        let kernel = one_stage(vec![2, 37], TileMode::Outer, stage, tile);
        let (jit, interp, compiled) = both(kernel, 2, 2 * 37);
        assert!(compiled, "stage was not compiled");
        assert_eq!(jit, interp, "tile {tile}");
    }
}

/// `where(mask, a, -inf)` with the mask read from a row-major bool buffer
/// (bytes 0, 1 and 2: any non-zero byte is true), four bytes per load in
/// the 4-lane loops; tiles of 16 and 256 cover the 16-, 4- and 1-lane loops.
#[test]
fn bool_loads_compile_bitwise() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let at = i0.scale(37).add(&i1);
    let (a, _) = inputs();
    let mask: Vec<u8> = (0..4 * 37).map(|k| [0u8, 1, 1, 0, 2, 0, 0][k % 7]).collect();
    let bufs = vec![
        buf(&[4, 37], &[37, 1], DType::F32),
        buf(&[4, 37], &[37, 1], DType::Bool),
        buf(&[4, 37], &[37, 1], DType::F32),
    ];
    for tile in [16, 256] {
        let insts = vec![
            load(0, 0, at.clone()),
            mask_inst(
                1,
                InstOp::Load {
                    buf: BufId(1),
                    dtype: DType::Bool,
                    index: IndexFn::new(&at),
                    indirect: vec![],
                    mask: None,
                },
            ),
            f32_inst(2, InstOp::Where(1, 0, 9)),
        ];
        let mut stage = f32_stage(2, None, insts, 2, &at, 10);
        stage.regs[1] = Kind::I64;
        stage.consts = vec![(9, InstOp::ConstF(f64::NEG_INFINITY))];
        let kernel = one_stage(vec![4, 37], TileMode::Outer, stage, tile);
        let compiled = compile(&kernel, &bufs);
        assert!(compiled.stages.iter().all(|s| s.jit.is_some()), "stage was not compiled");
        let mut results = Vec::new();
        for k in [&compiled, &kernel] {
            let mut out = vec![0f32; 4 * 37];
            let ptrs = [a.as_ptr() as usize, mask.as_ptr() as usize, out.as_mut_ptr() as usize];
            assert!(run_kernel(k, &Memory { ptrs: &ptrs, bufs: &bufs }));
            results.push(bits(&out));
        }
        assert_eq!(results[0], results[1], "tile {tile}");
        let expected: Vec<u32> =
            bits(&a.iter().zip(&mask).map(|(x, m)| if *m != 0 { *x } else { f32::NEG_INFINITY }).collect::<Vec<_>>());
        assert_eq!(results[0], expected, "tile {tile}");
    }
}

/// Calls that read their operand where it is in memory and write the
/// output directly: a lone `exp(a)`, two calls of one load with the value
/// computed after them, a store that is not contiguous (transposed) and a
/// fold, each against the interpreter bit for bit.
#[test]
fn calls_in_place_match_interpreter_bitwise() {
    if !super::enabled() {
        return;
    }
    use InstOp::{Binary, Unary};
    let (i0, i1, i2) = (Expr::v(0), Expr::v(1), Expr::v(2));
    let a_index = i0.scale(37).add(&i1);
    let lone = |store: &Expr| {
        f32_stage(2, None, vec![load(0, 0, a_index.clone()), f32_inst(1, Unary(UnaryOp::Exp, 0))], 1, store, 2)
    };
    let two_calls = f32_stage(
        2,
        None,
        vec![
            load(0, 0, a_index.clone()),
            f32_inst(1, Unary(UnaryOp::Exp, 0)),
            f32_inst(2, Unary(UnaryOp::Sigmoid, 0)),
            f32_inst(3, Binary(BinaryOp::Mul, 1, 2)),
            f32_inst(1, Binary(BinaryOp::Add, 3, 0)),
        ],
        1,
        &a_index,
        4,
    );
    let transposed = i1.scale(4).add(&i0);
    for tile in [16, 256] {
        for (name, stage) in
            [("lone", lone(&a_index)), ("transposed", lone(&transposed)), ("two calls", two_calls.clone())]
        {
            let (jit, interp, compiled) = both(one_stage(vec![4, 37], TileMode::Outer, stage, tile), 2, 4 * 37);
            assert!(compiled, "{name}: stage was not compiled");
            assert_eq!(jit, interp, "{name}, tile {tile}");
        }
    }
    let insts = vec![load(0, 0, i0.scale(37).add(&i2)), f32_inst(1, Unary(UnaryOp::Exp, 0))];
    let mut fold = f32_stage(3, Some((ReduceOp::Sum, vec![37])), insts, 1, &i0, 2);
    fold.inner = vec![1];
    let (jit, interp, compiled) = both(one_stage(vec![4], TileMode::Inner, fold, 16), 3, 4);
    assert!(compiled, "fold: stage was not compiled");
    assert_eq!(jit, interp, "fold");
}

/// `a = exp(a)` in place: the call's operand and its output are the same
/// memory, read before it is written (through a copy in the tile routine).
#[test]
fn call_whose_output_is_its_input() {
    if !super::enabled() {
        return;
    }
    let index = Expr::v(0).scale(37).add(&Expr::v(1));
    let insts = vec![load(0, 0, index.clone()), f32_inst(1, InstOp::Unary(UnaryOp::Exp, 0))];
    let mut stage = f32_stage(0, None, insts, 1, &index, 2);
    stage.out = BufId(0);
    let bufs = vec![buf(&[4, 37], &[37, 1], DType::F32)];
    let kernel = one_stage(vec![4, 37], TileMode::Outer, stage, 256);
    let compiled = compile(&kernel, &bufs);
    assert!(compiled.stages[0].jit.is_some(), "stage was not compiled");
    let (a, _) = inputs();
    let want: Vec<f32> = a.iter().map(|&x| crate::fastmath::exp::<false>(x)).collect();
    let mut data = a.clone();
    let ptrs = [data.as_mut_ptr() as usize];
    assert!(run_kernel(&compiled, &Memory { ptrs: &ptrs, bufs: &bufs }));
    // The AVX builds fuse the polynomial: compare to within an ulp or two.
    for (k, (&got, &w)) in data.iter().zip(&want).enumerate() {
        let close = (got.is_nan() && w.is_nan()) || got == w || ((got - w) / w).abs() < 1e-6;
        assert!(close, "lane {k}: exp({}) = {got}, want {w}", a[k]);
    }
}

/// Rows of 100: the fold's 32-lane loop runs several times, then the 4-
/// and 1-lane loops. One row has no NaN (signed zeros, ties), one
/// infinities and a NaN in the middle, one a NaN in the tail, one its
/// maximum at zeros of both signs; each reduction
/// matches the interpreter bit for bit, one tile per row or three, and
/// max/min match a plain scan.
#[test]
fn long_row_folds_match_interpreter_bitwise() {
    if !super::enabled() {
        return;
    }
    const N: usize = 100;
    let mut a: Vec<f32> = (0..4 * N).map(|k| ((k as f32) * 0.731).sin() * 3.0).collect();
    for k in (0..N).step_by(9) {
        a[k] = [0.0, -0.0, 2.999, -2.999][k / 9 % 4];
        a[N + k] = [f32::INFINITY, f32::NEG_INFINITY][k / 9 % 2];
    }
    a[N + 50] = f32::NAN;
    a[2 * N + 98] = f32::NAN;
    // Max 0 and min -0, both zeros several times: which one wins is the
    // fold's order, and must be the interpreter's.
    for (k, x) in a[3 * N..].iter_mut().enumerate() {
        *x = if k % 3 == 0 { [0.0, -0.0][k / 16 % 2] } else { -x.abs() - 1.0 };
    }
    let bufs = vec![buf(&[4, N as i64], &[N as i64, 1], DType::F32), buf(&[4], &[1], DType::F32)];
    let (i0, i2) = (Expr::v(0), Expr::v(2));
    for op in ACCUMULATED {
        for tile in [256, 48] {
            let mut stage =
                f32_stage(1, Some((op, vec![N as i64])), vec![load(0, 0, i0.scale(N as i64).add(&i2))], 0, &i0, 1);
            stage.inner = vec![1];
            let kernel = one_stage(vec![4], TileMode::Inner, stage, tile);
            let compiled = compile(&kernel, &bufs);
            assert!(compiled.stages[0].jit.is_some(), "{op:?}: stage was not compiled");
            let mut results = Vec::new();
            for k in [&compiled, &kernel] {
                let mut out = [0f32; 4];
                let ptrs = [a.as_ptr() as usize, out.as_mut_ptr() as usize];
                assert!(run_kernel(k, &Memory { ptrs: &ptrs, bufs: &bufs }));
                results.push(out);
            }
            assert_eq!(bits(&results[0]), bits(&results[1]), "{op:?}, tile {tile}");
            if matches!(op, ReduceOp::Max | ReduceOp::Min) {
                let max = op == ReduceOp::Max;
                let scan = |r: &[f32]| {
                    r.iter().fold(if max { f32::NEG_INFINITY } else { f32::INFINITY }, |m, &x| {
                        if max {
                            m.max(x)
                        } else {
                            m.min(x)
                        }
                    })
                };
                assert_eq!(results[0][0], scan(&a[..N]), "{op:?}, tile {tile}");
                assert!(results[0][1].is_nan() && results[0][2].is_nan(), "{op:?}, tile {tile}: a NaN was lost");
            }
        }
    }
}
