//! Compiled reductions of masks and integers, and int64 lanes converted
//! to float32, against the interpreter and the numbers written out (the
//! helpers are `tests.rs`'s).

use rdyn_ir::loops::{BinaryOp, BufId, ReduceOp, UnaryOp};
use rdyn_ir::{DType, Expr, Kind};

use super::stage::Output;
use super::tests::{buf, compile, f32_inst, f32_stage, load, mask_inst, one_stage};
use crate::exec::run_kernel;
use crate::plan::{IndexFn, Inst, InstOp, KernelPlan, TileMode};
use crate::tile::Memory;
use rdyn_memplan::BufPlan;

/// Rows of `a` against `b` (per column): all equal, all but one, none,
/// and a third NaN (never equal).
fn rows_against(b: &[f32]) -> Vec<f32> {
    let n = b.len();
    (0..4 * n)
        .map(|k| {
            let (r, j) = (k / n, k % n);
            match r {
                0 => b[j],
                1 if j == n - 7 => b[j] + 1.0,
                1 => b[j],
                2 => -1.0,
                _ if j % 3 == 0 => f32::NAN,
                _ => b[j],
            }
        })
        .collect()
}

/// Run `kernel` compiled (asserting it compiled, with int64 value lanes)
/// and interpreted over `ptrs` (the last one the output, `out` elements of
/// `T`); both results.
fn both<T: Copy + Default>(kernel: &KernelPlan, bufs: &[BufPlan], ins: &[usize], out: usize) -> [Vec<T>; 2] {
    let compiled = compile(kernel, bufs);
    let jit = compiled.stages[0].jit.as_ref().expect("stage was not compiled");
    assert_eq!(jit.output, Output::ValueLong);
    [&compiled, kernel].map(|k| {
        let mut o = vec![T::default(); out];
        let ptrs: Vec<usize> = ins.iter().copied().chain([o.as_mut_ptr() as usize]).collect();
        assert!(run_kernel(k, &Memory { ptrs: &ptrs, bufs }));
        o
    })
}

/// `any`/`all` of `a == b` (and of its negation, T5's "is any score not
/// -inf") along each row, lanes along the row, one tile per row and three.
#[test]
fn bool_reductions_compile() {
    if !super::enabled() {
        return;
    }
    let (i0, i2) = (Expr::v(0), Expr::v(2));
    let b: Vec<f32> = (0..37).map(|j| j as f32 * 0.5 - 3.0).collect();
    let a = rows_against(&b);
    let bufs = [buf(&[4, 37], &[37, 1], DType::F32), buf(&[37], &[1], DType::F32), buf(&[4], &[1], DType::Bool)];
    for (op, negate, tile) in [ReduceOp::Any, ReduceOp::All]
        .into_iter()
        .flat_map(|op| [(op, false, 16), (op, true, 16), (op, false, 256), (op, true, 256)])
    {
        let mut insts = vec![
            load(0, 0, i0.scale(37).add(&i2)),
            load(1, 1, i2.clone()),
            f32_inst(2, InstOp::Binary(BinaryOp::Eq, 0, 1)),
            mask_inst(3, InstOp::Cast { src: 2, from: Kind::F32, to: DType::Bool }),
        ];
        if negate {
            insts.push(mask_inst(4, InstOp::Unary(UnaryOp::Not, 3)));
        }
        let mut stage = f32_stage(2, Some((op, vec![37])), insts, if negate { 4 } else { 3 }, &i0, 5);
        stage.inner = vec![1];
        stage.out_dtype = DType::Bool;
        stage.value_kind = Kind::I64;
        stage.regs[3] = Kind::I64;
        stage.regs[4] = Kind::I64;
        let kernel = one_stage(vec![4], TileMode::Inner, stage, tile);
        let [jit, interp] = both::<u8>(&kernel, &bufs, &[a.as_ptr() as usize, b.as_ptr() as usize], 4);
        assert_eq!(jit, interp, "{op:?}, negated {negate}, tile {tile}");
        let want: Vec<u8> = (0..4)
            .map(|r| {
                let mut eq = (0..37).map(|j| (a[37 * r + j] == b[j]) != negate);
                u8::from(if op == ReduceOp::Any { eq.any(|x| x) } else { eq.all(|x| x) })
            })
            .collect();
        assert_eq!(jit, want, "{op:?}, negated {negate}, tile {tile}");
    }
}

/// Per column, how many of 4 rows equal the column's value (an int64 sum
/// of a mask, lanes across the columns: softmax's backward through
/// `amax`), and the largest row index that does (an int64 max).
#[test]
fn integer_reductions_compile() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let b: Vec<f32> = (0..37).map(|j| j as f32 * 0.25).collect();
    let a = rows_against(&b);
    let int = |dst, op| Inst { dst, kind: Kind::I64, narrow: None, op };
    let bufs = [buf(&[4, 37], &[37, 1], DType::F32), buf(&[37], &[1], DType::F32), buf(&[37], &[1], DType::I64)];
    for op in [ReduceOp::Sum, ReduceOp::Max] {
        let insts = vec![
            load(0, 0, i1.scale(37).add(&i0)),
            load(1, 1, i0.clone()),
            f32_inst(2, InstOp::Binary(BinaryOp::Eq, 0, 1)),
            mask_inst(3, InstOp::Cast { src: 2, from: Kind::F32, to: DType::Bool }),
            int(4, InstOp::Cast { src: 3, from: Kind::I64, to: DType::I64 }),
            int(5, InstOp::Index(IndexFn::new(&i1))),
            int(6, InstOp::Binary(BinaryOp::Mul, 4, 5)),
        ];
        let value = if op == ReduceOp::Sum { 4 } else { 6 };
        let mut stage = f32_stage(2, Some((op, vec![4])), insts, value, &i0, 7);
        stage.out_dtype = DType::I64;
        stage.value_kind = Kind::I64;
        (3..7).for_each(|r| stage.regs[r] = Kind::I64);
        let kernel = one_stage(vec![37], TileMode::Outer, stage, 16);
        let [jit, interp] = both::<i64>(&kernel, &bufs, &[a.as_ptr() as usize, b.as_ptr() as usize], 37);
        assert_eq!(jit, interp, "{op:?}");
        let want: Vec<i64> = (0..37)
            .map(|j| {
                let eq = (0..4i64).filter(|&r| a[37 * r as usize + j] == b[j]);
                if op == ReduceOp::Sum {
                    eq.count() as i64
                } else {
                    eq.max().unwrap_or(0)
                }
            })
            .collect();
        assert_eq!(jit, want, "{op:?}");
    }
}

/// `a / float(n)` with `n` loaded as int64 (a mean's count): beyond 2^24
/// (rounded to nearest, as `as f32`), negative, zero; contiguous and
/// strided, over tiles with and without a tail.
#[test]
fn int64_to_float_compiles() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let at = i0.scale(37).add(&i1);
    let n: Vec<i64> = (0..2 * 4 * 37)
        .map(|k: i64| match k % 5 {
            0 => (1 << 24) + 2 * k + 1,
            1 => -k,
            2 => 0,
            3 => (1 << 40) + k * 12345,
            _ => k,
        })
        .collect();
    let a: Vec<f32> = (0..4 * 37).map(|k| k as f32 * 1.5 - 20.0).collect();
    let bufs = [
        buf(&[4, 37], &[37, 1], DType::F32),
        buf(&[2 * 4 * 37], &[1], DType::I64),
        buf(&[4, 37], &[37, 1], DType::F32),
    ];
    for (step, tile) in [(1, 16), (2, 16), (1, 256)] {
        let count = Inst {
            dst: 1,
            kind: Kind::I64,
            narrow: None,
            op: InstOp::Load {
                buf: BufId(1),
                dtype: DType::I64,
                index: IndexFn::new(&at.scale(step)),
                indirect: vec![],
                mask: None,
            },
        };
        let insts = vec![
            load(0, 0, at.clone()),
            count,
            f32_inst(2, InstOp::Cast { src: 1, from: Kind::I64, to: DType::F32 }),
            f32_inst(3, InstOp::Binary(BinaryOp::Div, 0, 2)),
        ];
        let mut stage = f32_stage(2, None, insts, 3, &at, 4);
        stage.regs[1] = Kind::I64;
        let kernel = one_stage(vec![4, 37], TileMode::Outer, stage, tile);
        let compiled = compile(&kernel, &bufs);
        assert!(compiled.stages[0].jit.is_some(), "stage was not compiled");
        let mut results = Vec::new();
        for k in [&compiled, &kernel] {
            let mut out = vec![0f32; 4 * 37];
            let ptrs = [a.as_ptr() as usize, n.as_ptr() as usize, out.as_mut_ptr() as usize];
            assert!(run_kernel(k, &Memory { ptrs: &ptrs, bufs: &bufs }));
            results.push(out.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
        }
        assert_eq!(results[0], results[1], "step {step}, tile {tile}");
        let want: Vec<u32> = (0..4 * 37).map(|p| (a[p] / n[p * step as usize] as f32).to_bits()).collect();
        assert_eq!(results[0], want, "step {step}, tile {tile}");
    }
}
