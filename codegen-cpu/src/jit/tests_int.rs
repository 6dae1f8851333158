//! Compiled bool stores and random bits against the interpreter, bit for
//! bit (the helpers are `tests.rs`'s).

use rdyn_ir::loops::{BinaryOp, BufId};
use rdyn_ir::{DType, Expr, Kind};

use super::tests::{buf, compile, f32_inst, f32_stage, inputs, load, mask_inst, one_stage};
use crate::exec::run_kernel;
use crate::plan::{IndexFn, Inst, InstOp, TileMode};
use crate::tile::Memory;

/// `a > b` (b per column), stored as bytes, contiguous and transposed,
/// over tiles with and without a tail.
#[test]
fn mask_stores_compile_bytewise() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let (a, b) = inputs();
    for (store, tile) in [(i0.scale(37).add(&i1), 16), (i1.scale(4).add(&i0), 16), (i0.scale(37).add(&i1), 256)] {
        let insts = vec![
            load(0, 0, i0.scale(37).add(&i1)),
            load(1, 1, i1.clone()),
            f32_inst(2, InstOp::Binary(BinaryOp::Gt, 0, 1)),
            mask_inst(3, InstOp::Cast { src: 2, from: Kind::F32, to: DType::Bool }),
        ];
        let mut stage = f32_stage(2, None, insts, 3, &store, 4);
        stage.out_dtype = DType::Bool;
        stage.value_kind = Kind::I64;
        stage.regs[3] = Kind::I64;
        let bufs = vec![
            buf(&[4, 37], &[37, 1], DType::F32),
            buf(&[37], &[1], DType::F32),
            buf(&[4, 37], &[37, 1], DType::Bool),
        ];
        let kernel = one_stage(vec![4, 37], TileMode::Outer, stage, tile);
        let compiled = compile(&kernel, &bufs);
        assert!(compiled.stages.iter().all(|s| s.jit.is_some()), "stage was not compiled");
        let mut results = Vec::new();
        for k in [&compiled, &kernel] {
            // Bytes around the output stay untouched.
            let mut out = vec![7u8; 4 * 37 + 8];
            let ptrs = [a.as_ptr() as usize, b.as_ptr() as usize, out[4..].as_mut_ptr() as usize];
            assert!(run_kernel(k, &Memory { ptrs: &ptrs, bufs: &bufs }));
            results.push(out);
        }
        assert_eq!(results[0], results[1]);
        assert!(results[0][..4].iter().chain(&results[0][4 + 4 * 37..]).all(|&x| x == 7));
        assert!(results[0][4..4 + 4 * 37].iter().all(|&x| x <= 1));
    }
}

/// `hash_mix(position, key) · 2^-24` with the key read from a float
/// buffer: the compiled 32-bit lanes give the interpreter's bits.
#[test]
fn random_bits_compile_bitwise() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let at = i0.scale(37).add(&i1);
    let int = |dst, op| Inst { dst, kind: Kind::I64, narrow: None, op };
    let key = [12345.0f32, 0.0, 16_777_215.0];
    for k in 0..key.len() {
        let insts = vec![
            int(0, InstOp::Index(IndexFn::new(&at))),
            load(1, 1, Expr::c(k as i64)),
            int(2, InstOp::Cast { src: 1, from: Kind::F32, to: DType::I64 }),
            int(3, InstOp::Binary(BinaryOp::HashMix, 0, 2)),
            f32_inst(4, InstOp::Cast { src: 3, from: Kind::I64, to: DType::F32 }),
            f32_inst(5, InstOp::Binary(BinaryOp::Mul, 4, 9)),
        ];
        let mut stage = f32_stage(2, None, insts, 5, &at, 10);
        for r in [0, 2, 3] {
            stage.regs[r] = Kind::I64;
        }
        stage.consts = vec![(9, InstOp::ConstF(1.0 / 16_777_216.0))];
        let bufs =
            vec![buf(&[4, 37], &[37, 1], DType::F32), buf(&[3], &[1], DType::F32), buf(&[4, 37], &[37, 1], DType::F32)];
        let kernel = one_stage(vec![4, 37], TileMode::Outer, stage, 16);
        let compiled = compile(&kernel, &bufs);
        assert!(compiled.stages.iter().all(|s| s.jit.is_some()), "stage was not compiled");
        let mut results = Vec::new();
        for kern in [&compiled, &kernel] {
            let mut out = vec![0f32; 4 * 37];
            let a = vec![0f32; 4 * 37];
            let ptrs = [a.as_ptr() as usize, key.as_ptr() as usize, out.as_mut_ptr() as usize];
            assert!(run_kernel(kern, &Memory { ptrs: &ptrs, bufs: &bufs }));
            results.push(out);
        }
        assert_eq!(results[0], results[1]);
        let want: Vec<f32> =
            (0..4 * 37).map(|p| rdyn_ir::random::hash_mix(p, key[k] as i64) as f32 / 16_777_216.0).collect();
        assert_eq!(results[0], want);
        assert_eq!(BufId(2), kernel.stages[0].out);
    }
}

/// An int64 stage that stores a constant (a count's fill) stays with the
/// interpreter: its value has no float32 register and is no mask to store
/// as bytes (compiled, it was never written, and the fill was garbage).
#[test]
fn integer_constant_fills_stay_interpreted() {
    if !super::enabled() {
        return;
    }
    let i0 = Expr::v(0);
    let mut stage = f32_stage(0, None, vec![], 0, &i0, 1);
    stage.out_dtype = DType::I64;
    stage.value_kind = Kind::I64;
    stage.regs[0] = Kind::I64;
    stage.consts = vec![(0, InstOp::ConstI(1))];
    let bufs = vec![buf(&[37], &[1], DType::I64)];
    let kernel = one_stage(vec![37], TileMode::Outer, stage, 16);
    let compiled = compile(&kernel, &bufs);
    assert!(compiled.stages[0].jit.is_none());
    let mut out = vec![0i64; 37];
    let ptrs = [out.as_mut_ptr() as usize];
    assert!(run_kernel(&compiled, &Memory { ptrs: &ptrs, bufs: &bufs }));
    assert!(out.iter().all(|&x| x == 1));
}

/// int64 loads compared with each other, with a 32-bit index and with a
/// constant (contiguous, strided and invariant along the tile; values
/// that differ only above bit 32), into a float `where`: the compiled
/// stage gives the interpreter's values, and both the comparisons'.
#[test]
fn int64_comparisons_compile() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let long = |dst, buf, index: Expr| Inst {
        dst,
        kind: Kind::I64,
        narrow: None,
        op: InstOp::Load {
            buf: BufId(buf),
            dtype: DType::I64,
            index: IndexFn::new(&index),
            indirect: vec![],
            mask: None,
        },
    };
    let int = |dst, op| Inst { dst, kind: Kind::I64, narrow: None, op };
    let ids: Vec<i64> = (0..4 * 37).map(|p| (p % 3) + (1 << 33) * ((p / 3) % 2) - 2).collect();
    let rows: Vec<i64> = vec![-2, 1 << 33, 0, -1];
    let cols: Vec<i64> = (0..37 * 4).map(|p| (p % 5) - 3).collect();
    let at = i0.scale(37).add(&i1);
    for tile in [16, 256] {
        let insts = vec![
            int(0, InstOp::Index(IndexFn::new(&i1))),
            long(1, 0, at.clone()),
            long(2, 1, i0.clone()),
            long(3, 2, i1.scale(4).add(&i0)),
            mask_inst(4, InstOp::Binary(BinaryOp::Eq, 1, 2)),
            mask_inst(5, InstOp::Binary(BinaryOp::Lt, 3, 0)),
            mask_inst(6, InstOp::Binary(BinaryOp::Ge, 1, 12)),
            mask_inst(7, InstOp::Binary(BinaryOp::And, 4, 5)),
            mask_inst(8, InstOp::Binary(BinaryOp::Or, 7, 6)),
            f32_inst(9, InstOp::Where(8, 10, 11)),
        ];
        let mut stage = f32_stage(3, None, insts, 9, &at, 13);
        for r in [0, 1, 2, 3, 4, 5, 6, 7, 8, 12] {
            stage.regs[r] = Kind::I64;
        }
        stage.consts =
            vec![(10, InstOp::ConstF(1.0)), (11, InstOp::ConstF(f64::NEG_INFINITY)), (12, InstOp::ConstI(-1))];
        let bufs = vec![
            buf(&[4, 37], &[37, 1], DType::I64),
            buf(&[4], &[1], DType::I64),
            buf(&[37, 4], &[4, 1], DType::I64),
            buf(&[4, 37], &[37, 1], DType::F32),
        ];
        let kernel = one_stage(vec![4, 37], TileMode::Outer, stage, tile);
        let compiled = compile(&kernel, &bufs);
        assert!(compiled.stages.iter().all(|s| s.jit.is_some()), "stage was not compiled");
        let mut results = Vec::new();
        for k in [&compiled, &kernel] {
            let mut out = vec![0f32; 4 * 37];
            let ptrs =
                [ids.as_ptr() as usize, rows.as_ptr() as usize, cols.as_ptr() as usize, out.as_mut_ptr() as usize];
            assert!(run_kernel(k, &Memory { ptrs: &ptrs, bufs: &bufs }));
            results.push(out);
        }
        assert_eq!(results[0], results[1]);
        let want: Vec<f32> = (0..4 * 37)
            .map(|p| {
                let (r, c) = (p / 37, p % 37);
                let x = ids[p];
                let keep = (x == rows[r] && cols[4 * c + r] < c as i64) || x >= -1;
                if keep {
                    1.0
                } else {
                    f32::NEG_INFINITY
                }
            })
            .collect();
        assert_eq!(results[0], want);
        assert!(want.contains(&1.0) && want.contains(&f32::NEG_INFINITY));
    }
}

/// int64 arithmetic on loaded values beyond 32 bits, stored as int64:
/// `where(ids[p + 1] - ids[p] != 1, max(-ids[p], ids[p] · 3), min(ids[p] +
/// 2^40, i1))`, over tiles with and without a tail, and a 0-dim counter's
/// increment (`n + 1`), each compiled and equal to the interpreter's and to
/// the numbers written out.
#[test]
fn int64_arithmetic_compiles() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let long = |dst, index: Expr| Inst {
        dst,
        kind: Kind::I64,
        narrow: None,
        op: InstOp::Load {
            buf: BufId(0),
            dtype: DType::I64,
            index: IndexFn::new(&index),
            indirect: vec![],
            mask: None,
        },
    };
    let int = |dst, op| Inst { dst, kind: Kind::I64, narrow: None, op };
    let ids: Vec<i64> = (0..4 * 38).map(|p| if p % 5 == 0 { p + (3 << 33) } else { p - (p % 7 == 0) as i64 }).collect();
    let at = i0.scale(38).add(&i1);
    let out_at = i0.scale(37).add(&i1);
    for tile in [16, 256] {
        let insts = vec![
            long(0, at.add_c(1)),
            long(1, at.clone()),
            int(2, InstOp::Binary(BinaryOp::Sub, 0, 1)),
            mask_inst(3, InstOp::Binary(BinaryOp::Ne, 2, 12)),
            int(4, InstOp::Unary(rdyn_ir::loops::UnaryOp::Neg, 1)),
            int(5, InstOp::Binary(BinaryOp::Mul, 1, 13)),
            int(6, InstOp::Binary(BinaryOp::Max, 4, 5)),
            int(7, InstOp::Binary(BinaryOp::Add, 1, 14)),
            int(8, InstOp::Index(IndexFn::new(&i1))),
            int(9, InstOp::Binary(BinaryOp::Min, 7, 8)),
            int(10, InstOp::Where(3, 6, 9)),
        ];
        let mut stage = f32_stage(1, None, insts, 10, &out_at, 15);
        stage.out_dtype = DType::I64;
        stage.value_kind = Kind::I64;
        stage.regs = vec![Kind::I64; 15];
        stage.consts = vec![(12, InstOp::ConstI(1)), (13, InstOp::ConstI(3)), (14, InstOp::ConstI(1 << 20))];
        let bufs = vec![buf(&[4 * 38], &[1], DType::I64), buf(&[4, 37], &[37, 1], DType::I64)];
        let kernel = one_stage(vec![4, 37], TileMode::Outer, stage, tile);
        let compiled = compile(&kernel, &bufs);
        assert!(compiled.stages.iter().all(|s| s.jit.is_some()), "stage was not compiled");
        let mut results = Vec::new();
        for k in [&compiled, &kernel] {
            let mut out = vec![0i64; 4 * 37];
            let ptrs = [ids.as_ptr() as usize, out.as_mut_ptr() as usize];
            assert!(run_kernel(k, &Memory { ptrs: &ptrs, bufs: &bufs }));
            results.push(out);
        }
        assert_eq!(results[0], results[1]);
        let want: Vec<i64> = (0..4 * 37)
            .map(|p| {
                let (r, c) = (p / 37, p % 37);
                let x = ids[38 * r + c];
                if ids[38 * r + c + 1] - x != 1 {
                    (-x).max(3 * x)
                } else {
                    (x + (1 << 20)).min(c as i64)
                }
            })
            .collect();
        assert_eq!(results[0], want);
        assert!(want.iter().any(|&v| v > 1 << 33), "values beyond 32 bits are covered");
    }
    // A 0-dim counter: n + 1.
    let insts = vec![long(0, Expr::c(0)), int(1, InstOp::Binary(BinaryOp::Add, 0, 2))];
    let mut stage = f32_stage(1, None, insts, 1, &Expr::c(0), 3);
    stage.out_dtype = DType::I64;
    stage.value_kind = Kind::I64;
    stage.regs = vec![Kind::I64; 3];
    stage.consts = vec![(2, InstOp::ConstI(1))];
    let bufs = vec![buf(&[], &[], DType::I64), buf(&[], &[], DType::I64)];
    let kernel = one_stage(vec![], TileMode::Inner, stage, 16);
    let compiled = compile(&kernel, &bufs);
    assert!(compiled.stages[0].jit.is_some(), "the counter was not compiled");
    let n = [(5i64 << 40) + 7];
    let mut out = [0i64];
    let ptrs = [n.as_ptr() as usize, out.as_mut_ptr() as usize];
    assert!(run_kernel(&compiled, &Memory { ptrs: &ptrs, bufs: &bufs }));
    assert_eq!(out[0], n[0] + 1);
}

/// A float truncated to int64, then int64 arithmetic (T5's position
/// buckets: `(log(x) · 8) as i64 + 8`): saturating at ±inf and beyond
/// 2^63, NaN to 0, as the interpreter's `as i64`.
#[test]
fn floats_truncated_to_int64_compile() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let at = i0.scale(37).add(&i1);
    let (a, _) = inputs();
    let a: Vec<f32> = a.iter().enumerate().map(|(k, x)| if k % 11 == 3 { x * 1e18 } else { *x }).collect();
    let int = |dst, op| Inst { dst, kind: Kind::I64, narrow: None, op };
    let insts = vec![
        load(0, 0, at.clone()),
        f32_inst(1, InstOp::Binary(BinaryOp::Mul, 0, 4)),
        int(2, InstOp::Cast { src: 1, from: Kind::F32, to: DType::I64 }),
        int(3, InstOp::Binary(BinaryOp::Add, 2, 5)),
    ];
    let mut stage = f32_stage(1, None, insts, 3, &at, 6);
    stage.out_dtype = DType::I64;
    stage.value_kind = Kind::I64;
    stage.regs[2] = Kind::I64;
    stage.regs[3] = Kind::I64;
    stage.regs[5] = Kind::I64;
    stage.consts = vec![(4, InstOp::ConstF(8.0)), (5, InstOp::ConstI(8))];
    let bufs = vec![buf(&[4, 37], &[37, 1], DType::F32), buf(&[4, 37], &[37, 1], DType::I64)];
    let kernel = one_stage(vec![4, 37], TileMode::Outer, stage, 16);
    let compiled = compile(&kernel, &bufs);
    assert!(compiled.stages[0].jit.is_some(), "stage was not compiled");
    let mut results = Vec::new();
    for k in [&compiled, &kernel] {
        let mut out = vec![0i64; 4 * 37];
        let ptrs = [a.as_ptr() as usize, out.as_mut_ptr() as usize];
        assert!(run_kernel(k, &Memory { ptrs: &ptrs, bufs: &bufs }));
        results.push(out);
    }
    assert_eq!(results[0], results[1]);
    let want: Vec<i64> = a.iter().map(|x| ((x * 8.0) as i64).wrapping_add(8)).collect();
    assert_eq!(results[0], want);
    assert!(want.contains(&i64::MIN.wrapping_add(8)) && want.contains(&8), "saturation and NaN are covered");
}
