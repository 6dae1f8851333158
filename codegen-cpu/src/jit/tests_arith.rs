//! Integer arithmetic on compiled index lanes (`int.rs`) against the
//! interpreter and against the numbers written out: a pool's divisor into a
//! float stage, an argmax index into an int64 output, and the interval check
//! that keeps a stage whose values leave 32 bits interpreted.

use rdyn_ir::loops::{BinaryOp, UnaryOp};
use rdyn_ir::{DType, Expr, Kind};

use super::tests::{buf, compile, f32_inst, f32_stage, inputs, load, mask_inst, one_stage};
use crate::exec::run_kernel;
use crate::plan::{IndexFn, Inst, InstOp, KernelPlan, TileMode};
use crate::tile::Memory;

fn int(dst: u16, op: InstOp) -> Inst {
    Inst { dst, kind: Kind::I64, narrow: None, op }
}

fn index(dst: u16, e: &Expr) -> Inst {
    int(dst, InstOp::Index(IndexFn::new(e)))
}

/// Run `kernel` and its compiled form over `a` (`[4, 37]`) into an output
/// of `T`; both results.
fn both<T: Copy + Default>(kernel: &KernelPlan, bufs: &[crate::plan::BufPlan], a: &[f32]) -> [Vec<T>; 2] {
    let compiled = compile(kernel, bufs);
    assert!(compiled.stages.iter().all(|s| s.jit.is_some()), "stage was not compiled");
    [&compiled, kernel].map(|k| {
        let mut out = vec![T::default(); 4 * 37];
        let ptrs = [a.as_ptr() as usize, out.as_mut_ptr() as usize];
        assert!(run_kernel(k, &Memory { ptrs: &ptrs, bufs }));
        out
    })
}

/// An average pool's backward divisor: `x / ((min(2·i0 + 2, 7) - 2·i0) ·
/// (min(2·i1 + 2, 73) - 2·i1))`, plus `i1 // 4 - i1 % 4` and `|i1 - 20|`,
/// over tiles with and without a tail.
#[test]
fn pool_divisors_compile() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let at = i0.scale(37).add(&i1);
    let (a, _) = inputs();
    for tile in [16, 256] {
        let insts = vec![
            index(0, &i0.scale(2).add_c(2)),
            int(1, InstOp::Binary(BinaryOp::Min, 0, 20)),
            index(2, &i0.scale(2)),
            int(3, InstOp::Binary(BinaryOp::Sub, 1, 2)),
            index(4, &i1.scale(2).add_c(2)),
            int(5, InstOp::Binary(BinaryOp::Min, 4, 21)),
            index(6, &i1.scale(2)),
            int(7, InstOp::Binary(BinaryOp::Sub, 5, 6)),
            int(8, InstOp::Binary(BinaryOp::Mul, 3, 7)),
            index(9, &i1),
            int(10, InstOp::Binary(BinaryOp::FloorDiv, 9, 22)),
            int(11, InstOp::Binary(BinaryOp::Rem, 9, 22)),
            int(12, InstOp::Binary(BinaryOp::Sub, 10, 11)),
            int(13, InstOp::Binary(BinaryOp::Sub, 9, 23)),
            int(14, InstOp::Unary(UnaryOp::Abs, 13)),
            int(15, InstOp::Binary(BinaryOp::Add, 12, 14)),
            int(16, InstOp::Binary(BinaryOp::Add, 8, 15)),
            f32_inst(17, InstOp::Cast { src: 16, from: Kind::I64, to: DType::F32 }),
            load(18, 0, at.clone()),
            f32_inst(19, InstOp::Binary(BinaryOp::Div, 18, 17)),
        ];
        let mut stage = f32_stage(1, None, insts, 19, &at, 24);
        for r in (0..=16).chain(20..=23) {
            stage.regs[r] = Kind::I64;
        }
        stage.consts =
            vec![(20, InstOp::ConstI(7)), (21, InstOp::ConstI(73)), (22, InstOp::ConstI(4)), (23, InstOp::ConstI(20))];
        let bufs = vec![buf(&[4, 37], &[37, 1], DType::F32), buf(&[4, 37], &[37, 1], DType::F32)];
        let kernel = one_stage(vec![4, 37], TileMode::Outer, stage, tile);
        let [got, interpreted] = both::<f32>(&kernel, &bufs, &a);
        let bits = |v: &[f32]| v.iter().map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() }).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&interpreted));
        let want: Vec<f32> = (0..4 * 37)
            .map(|p| {
                let (r, c) = (p as i64 / 37, p as i64 % 37);
                let d = ((2 * r + 2).min(7) - 2 * r) * ((2 * c + 2).min(73) - 2 * c) + c / 4 - c % 4 + (c - 20).abs();
                a[p] / d as f32
            })
            .collect();
        assert_eq!(bits(&got), bits(&want));
    }
}

/// A max pool's argmax: `where(x > 0, 96·i0 + 2·i1 - 49, max(0, -(2·i1 -
/// 5)) + i0)`, stored as int64 (contiguous, and a transposed store).
#[test]
fn argmax_indices_store_as_int64() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let (a, _) = inputs();
    for store in [i0.scale(37).add(&i1), i1.scale(4).add(&i0)] {
        let insts = vec![
            load(0, 0, i0.scale(37).add(&i1)),
            f32_inst(9, InstOp::Binary(BinaryOp::Gt, 0, 10)),
            mask_inst(1, InstOp::Cast { src: 9, from: Kind::F32, to: DType::Bool }),
            index(2, &i0.scale(96).add(&i1.scale(2)).add_c(-49)),
            index(3, &i1.scale(2).add_c(-5)),
            int(4, InstOp::Unary(UnaryOp::Neg, 3)),
            int(5, InstOp::Binary(BinaryOp::Max, 11, 4)),
            index(6, &i0),
            int(7, InstOp::Binary(BinaryOp::Add, 5, 6)),
            int(8, InstOp::Where(1, 2, 7)),
        ];
        let mut stage = f32_stage(1, None, insts, 8, &store, 12);
        stage.out_dtype = DType::I64;
        stage.value_kind = Kind::I64;
        for r in [1, 2, 3, 4, 5, 6, 7, 8, 11] {
            stage.regs[r] = Kind::I64;
        }
        stage.consts = vec![(10, InstOp::ConstF(0.0)), (11, InstOp::ConstI(0))];
        let bufs = vec![buf(&[4, 37], &[37, 1], DType::F32), buf(&[4, 37], &[37, 1], DType::I64)];
        let kernel = one_stage(vec![4, 37], TileMode::Outer, stage, 16);
        let [got, interpreted] = both::<i64>(&kernel, &bufs, &a);
        assert_eq!(got, interpreted);
        let mut want = vec![0i64; 4 * 37];
        for p in 0..4 * 37 {
            let (r, c) = (p as i64 / 37, p as i64 % 37);
            let v = if a[p as usize] > 0.0 { 96 * r + 2 * c - 49 } else { (5 - 2 * c).max(0) + r };
            want[store.eval(&[r, c], &[]) as usize] = v;
        }
        assert_eq!(got, want);
        assert!(want.iter().any(|&v| v < 0), "the test covers negative indices");
    }
}

/// `i1 · 2^27 · 37` leaves 32 bits: the stage stays with the interpreter
/// (compiled, its lanes would wrap), and gives the int64 products.
#[test]
fn products_past_32_bits_stay_interpreted() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let at = i0.scale(37).add(&i1);
    let insts = vec![index(0, &i1), int(1, InstOp::Binary(BinaryOp::Mul, 0, 2))];
    let mut stage = f32_stage(1, None, insts, 1, &at, 3);
    stage.out_dtype = DType::I64;
    stage.value_kind = Kind::I64;
    stage.regs = vec![Kind::I64; 3];
    stage.consts = vec![(2, InstOp::ConstI(1 << 27))];
    let bufs = vec![buf(&[4, 37], &[37, 1], DType::F32), buf(&[4, 37], &[37, 1], DType::I64)];
    let kernel = one_stage(vec![4, 37], TileMode::Outer, stage, 16);
    let compiled = compile(&kernel, &bufs);
    assert!(compiled.stages[0].jit.is_none());
    let a = vec![0f32; 4 * 37];
    let mut out = vec![0i64; 4 * 37];
    let ptrs = [a.as_ptr() as usize, out.as_mut_ptr() as usize];
    assert!(run_kernel(&compiled, &Memory { ptrs: &ptrs, bufs: &bufs }));
    assert!((0..4 * 37).all(|p| out[p] == (p as i64 % 37) << 27));
}
