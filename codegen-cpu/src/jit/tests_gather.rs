//! Gathers of whole rows (an embedding's lookup) run by rows: the executor
//! fills a table with every row's addresses and calls the compiled stage
//! once, against the interpreter, bit for bit (helpers from `tests.rs`).

use rdyn_ir::loops::{BinaryOp, BufId, Negatives, ReduceOp};
use rdyn_ir::{DType, Expr, Kind};

use super::tests::{buf, compile, f32_inst, f32_stage, one_stage};
use super::Rows;
use crate::exec::run_kernel;
use crate::plan::{BufPlan, IndexFn, Inst, InstOp, KernelPlan, TileMode};
use crate::tile::Memory;

/// `table[bounded(ids[i0])][lane]`, the id loaded and bounds-checked by the
/// executor into registers 0 and 1, the row into `dst`.
fn gathered_row(dst: u16, lane: &Expr) -> Vec<Inst> {
    let int = |dst: u16, op: InstOp| Inst { dst, kind: Kind::I64, narrow: None, op };
    let id = InstOp::Load {
        buf: BufId(3),
        dtype: DType::I64,
        index: IndexFn::new(&Expr::v(0)),
        indirect: vec![],
        mask: None,
    };
    let row = InstOp::Load {
        buf: BufId(0),
        dtype: DType::F32,
        index: IndexFn::new(lane),
        indirect: vec![(1, 37)],
        mask: None,
    };
    vec![int(0, id), int(1, InstOp::Bounded { src: 0, size: 6, negatives: Negatives::Wrap }), f32_inst(dst, row)]
}

/// A 6-row table of 37 lanes, the outputs (4 x 37, 4), and 4 row ids.
fn bufs() -> Vec<BufPlan> {
    vec![
        buf(&[6, 37], &[37, 1], DType::F32),
        buf(&[4, 37], &[37, 1], DType::F32),
        buf(&[4], &[1], DType::F32),
        buf(&[4], &[1], DType::I64),
    ]
}

/// Run `kernel` on a 6-row table and `ids`; the outputs (4 x 37, 4) as
/// bits, or `None` when the kernel failed (an id out of range).
fn run(kernel: &KernelPlan, ids: &[i64; 4]) -> Option<[Vec<u32>; 2]> {
    let bufs = bufs();
    // Distinct rows of values in [-5, 5).
    let table: Vec<f32> = (0..6 * 37).map(|k| ((k * 7919) % 1000) as f32 / 100.0 - 5.0).collect();
    let mut outs = [vec![0f32; 4 * 37], vec![0f32; 4]];
    let ptrs =
        [table.as_ptr() as usize, outs[0].as_mut_ptr() as usize, outs[1].as_mut_ptr() as usize, ids.as_ptr() as usize];
    let ok = run_kernel(kernel, &Memory { ptrs: &ptrs, bufs: &bufs });
    ok.then(|| outs.map(|o| o.iter().map(|x| x.to_bits()).collect()))
}

fn check(kernel: KernelPlan) {
    let bufs = bufs();
    let compiled = compile(&kernel, &bufs);
    assert!(
        compiled.stages.iter().all(|s| s.jit.as_ref().is_some_and(|j| j.rows == Rows::Points && j.table())),
        "the gathers do not run by rows"
    );
    for ids in [[5i64, 0, 3, 5], [1, 2, 4, 0]] {
        let got = run(&compiled, &ids).expect("ids in range");
        assert_eq!(Some(&got), run(&kernel, &ids).as_ref());
        // Rows of different ids differ.
        assert_ne!(got[0][2 * 37..3 * 37], got[0][3 * 37..4 * 37]);
    }
    // An id out of range fails the kernel on both paths.
    assert!(run(&compiled, &[1, 6, 0, 2]).is_none() && run(&kernel, &[1, 6, 0, 2]).is_none());
}

/// Outer tiles of 256 lanes: each row (37 lanes) is `table[ids[i0]] * 2`,
/// several rows per call.
#[test]
fn gathered_rows_run_by_rows_in_outer_tiles() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let mut insts = gathered_row(2, &i1);
    insts.push(f32_inst(3, InstOp::Binary(BinaryOp::Add, 2, 2)));
    let mut stage = f32_stage(1, None, insts, 3, &i0.scale(37).add(&i1), 4);
    stage.regs[0] = Kind::I64;
    stage.regs[1] = Kind::I64;
    let kernel = one_stage(vec![4, 37], TileMode::Outer, stage, 256);
    check(kernel);
}

/// Inner tiles (an embedding's layer norm): the gathered row's sum (folded
/// and stored per row), then the row minus its mean, which reads the sum
/// the first stage stored for the same row.
#[test]
fn gathered_rows_run_by_rows_in_inner_tiles() {
    if !super::enabled() {
        return;
    }
    let (i0, i1, i2) = (Expr::v(0), Expr::v(1), Expr::v(2));
    let mut sum = f32_stage(2, Some((ReduceOp::Sum, vec![37])), gathered_row(2, &i2), 2, &i0, 3);
    sum.inner = vec![1];
    let mut insts = gathered_row(2, &i1);
    insts.extend([
        f32_inst(
            3,
            InstOp::Load { buf: BufId(2), dtype: DType::F32, index: IndexFn::new(&i0), indirect: vec![], mask: None },
        ),
        f32_inst(4, InstOp::Binary(BinaryOp::Div, 3, 5)),
        f32_inst(3, InstOp::Binary(BinaryOp::Sub, 2, 4)),
    ]);
    let mut centre = f32_stage(1, None, insts, 3, &i0.scale(37).add(&i1), 6);
    centre.inner = vec![37];
    centre.consts = vec![(5, InstOp::ConstF(37.0))];
    for stage in [&mut sum, &mut centre] {
        stage.regs[0] = Kind::I64;
        stage.regs[1] = Kind::I64;
    }
    let mut kernel = one_stage(vec![4], TileMode::Inner, sum, 256);
    kernel.stages.push(centre);
    check(kernel);
}

/// An embedding beside an int64 stage the JIT leaves to the executor (an
/// embedding backward's ids, saved by a training forward): 40 rows of 8
/// lanes, `table[ids[i0]] * 2` compiled with every row's addresses in
/// tables filled 8 rows (a register) at a time, `ids[i0] // 3 + 1`
/// interpreted row by row in between (int64 division has no compiled
/// form); the kernel still runs by rows.
#[test]
fn gathered_rows_run_by_rows_beside_an_interpreted_stage() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let bufs = vec![
        buf(&[6, 8], &[8, 1], DType::F32),
        buf(&[40, 8], &[8, 1], DType::F32),
        buf(&[40], &[1], DType::I64),
        buf(&[40], &[1], DType::I64),
    ];
    let ids_load = |dst| Inst {
        dst,
        kind: Kind::I64,
        narrow: None,
        op: InstOp::Load { buf: BufId(3), dtype: DType::I64, index: IndexFn::new(&i0), indirect: vec![], mask: None },
    };
    let mut insts = vec![
        ids_load(0),
        Inst {
            dst: 1,
            kind: Kind::I64,
            narrow: None,
            op: InstOp::Bounded { src: 0, size: 6, negatives: Negatives::Wrap },
        },
    ];
    let row =
        InstOp::Load { buf: BufId(0), dtype: DType::F32, index: IndexFn::new(&i1), indirect: vec![(1, 8)], mask: None };
    insts.extend([f32_inst(2, row), f32_inst(3, InstOp::Binary(BinaryOp::Add, 2, 2))]);
    let mut gather = f32_stage(1, None, insts, 3, &i0.scale(8).add(&i1), 4);
    gather.inner = vec![8];
    gather.regs[..2].fill(Kind::I64);
    let int = |dst, op| Inst { dst, kind: Kind::I64, narrow: None, op };
    let ints = vec![
        ids_load(0),
        int(3, InstOp::Binary(BinaryOp::FloorDiv, 0, 1)),
        int(0, InstOp::Binary(BinaryOp::Add, 3, 2)),
    ];
    let mut ids = f32_stage(2, None, ints, 0, &i0, 4);
    (ids.out_dtype, ids.value_kind, ids.regs) = (DType::I64, Kind::I64, vec![Kind::I64; 4]);
    ids.consts = vec![(1, InstOp::ConstI(3)), (2, InstOp::ConstI(1))];
    let mut kernel = one_stage(vec![40], TileMode::Inner, gather, 256);
    kernel.stages.push(ids);
    let compiled = compile(&kernel, &bufs);
    let gather = compiled.stages[0].jit.as_ref();
    assert!(gather.is_some_and(|j| j.rows == Rows::Points && j.table()), "the gather does not run by rows");
    assert!(compiled.stages[1].jit.is_none(), "the int64 stage compiled");
    let table: Vec<f32> = (0..48).map(|k| ((k * 7919) % 1000) as f32 / 100.0 - 5.0).collect();
    let run = |kernel: &KernelPlan, ids: &[i64]| {
        let (mut out, mut out_ids) = (vec![0f32; 320], vec![0i64; 40]);
        let ptrs =
            [table.as_ptr() as usize, out.as_mut_ptr() as usize, out_ids.as_mut_ptr() as usize, ids.as_ptr() as usize];
        let ok = run_kernel(kernel, &Memory { ptrs: &ptrs, bufs: &bufs });
        ok.then(|| (out.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), out_ids))
    };
    let mut ids: Vec<i64> = (0..40).map(|k| (k * 5 + k / 7) % 6).collect();
    let (got, got_ids) = run(&compiled, &ids).expect("ids in range");
    assert_eq!(Some((got.clone(), got_ids.clone())), run(&kernel, &ids));
    assert_eq!(got_ids, ids.iter().map(|x| x / 3 + 1).collect::<Vec<_>>());
    for r in 0..40 {
        let want: Vec<u32> = (0..8).map(|l| (table[ids[r] as usize * 8 + l] * 2.0).to_bits()).collect();
        assert_eq!(got[r * 8..r * 8 + 8], want[..], "row {r}");
    }
    // An id out of range in the last register's worth of rows fails both.
    ids[37] = 6;
    assert!(run(&compiled, &ids).is_none() && run(&kernel, &ids).is_none());
}

/// A gather whose row differs from lane to lane (a relative-position bias:
/// `x[i0, i1] + bias[i0 + 3 · bounded(ids[i1])]`), compiled with its row
/// ids read and checked per lane, against the interpreter bit for bit:
/// int64 and int32 ids, wrapping and rejecting negatives, outer and inner
/// tiles (50 lanes: 16-lane, 4-lane and 1-lane loops).
#[test]
fn lane_varying_gathers_compile_and_check_their_rows() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    for (id_dtype, negatives, mode) in [
        (DType::I64, Negatives::Reject, TileMode::Outer),
        (DType::I64, Negatives::Wrap, TileMode::Inner),
        (DType::I32, Negatives::Wrap, TileMode::Outer),
        (DType::I32, Negatives::Reject, TileMode::Inner),
    ] {
        let bufs = vec![
            buf(&[3, 50], &[50, 1], DType::F32),
            buf(&[7, 3], &[3, 1], DType::F32),
            buf(&[50], &[1], id_dtype),
            buf(&[3, 50], &[50, 1], DType::F32),
        ];
        let int = |dst, op| Inst { dst, kind: Kind::I64, narrow: None, op };
        let ids =
            InstOp::Load { buf: BufId(2), dtype: id_dtype, index: IndexFn::new(&i1), indirect: vec![], mask: None };
        let bias = InstOp::Load {
            buf: BufId(1),
            dtype: DType::F32,
            index: IndexFn::new(&i0),
            indirect: vec![(1, 3)],
            mask: None,
        };
        let x = InstOp::Load {
            buf: BufId(0),
            dtype: DType::F32,
            index: IndexFn::new(&i0.scale(50).add(&i1)),
            indirect: vec![],
            mask: None,
        };
        let insts = vec![
            int(0, ids),
            int(1, InstOp::Bounded { src: 0, size: 7, negatives }),
            f32_inst(2, bias),
            f32_inst(3, x),
            f32_inst(4, InstOp::Binary(BinaryOp::Add, 3, 2)),
        ];
        let mut stage = f32_stage(3, None, insts, 4, &i0.scale(50).add(&i1), 5);
        stage.regs[..2].fill(Kind::I64);
        let kernel = match mode {
            TileMode::Outer => one_stage(vec![3, 50], mode, stage, 256),
            _ => {
                stage.inner = vec![50];
                one_stage(vec![3], mode, stage, 256)
            }
        };
        let compiled = compile(&kernel, &bufs);
        assert!(
            compiled.stages[0].jit.as_ref().is_some_and(|j| j.pre.is_empty()),
            "{id_dtype:?} {mode:?}: not compiled"
        );
        let xs: Vec<f32> = (0..150).map(|k| ((k * 7919) % 1000) as f32 / 100.0 - 5.0).collect();
        let table: Vec<f32> = (0..21).map(|k| k as f32 * 0.25 - 2.0).collect();
        let run = |kernel: &KernelPlan, ids: &[i64]| {
            let ids32: Vec<i32> = ids.iter().map(|&v| v as i32).collect();
            let id_ptr = if id_dtype == DType::I32 { ids32.as_ptr() as usize } else { ids.as_ptr() as usize };
            let mut out = vec![0f32; 150];
            let ptrs = [xs.as_ptr() as usize, table.as_ptr() as usize, id_ptr, out.as_mut_ptr() as usize];
            let ok = run_kernel(kernel, &Memory { ptrs: &ptrs, bufs: &bufs });
            ok.then(|| out.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
        };
        let mut ids: Vec<i64> = (0..50).map(|k| (k * 5 + k / 7) % 7).collect();
        let got = run(&compiled, &ids).expect("ids in range");
        assert_eq!(Some(&got), run(&kernel, &ids).as_ref(), "{id_dtype:?} {negatives:?} {mode:?}");
        for (k, bits) in got.iter().enumerate() {
            let (r, l) = (k / 50, k % 50);
            assert_eq!(*bits, (xs[k] + table[r + 3 * ids[l] as usize]).to_bits(), "element {k}");
        }
        // A negative id: counted from the end where it wraps, else an error.
        ids[45] = -2;
        let wrapped = run(&compiled, &ids);
        assert_eq!(wrapped, run(&kernel, &ids));
        assert_eq!(wrapped.is_some(), negatives == Negatives::Wrap);
        // An id out of range (in the one-lane tail) fails both paths.
        ids[45] = 1;
        ids[49] = 7;
        assert!(run(&compiled, &ids).is_none() && run(&kernel, &ids).is_none());
    }
}

/// A gather whose row is computed from positions (T5's relative-position
/// buckets): `table[i2 + 4 · bounded(where(i0 + 2·i1 < 5, i0 + 2·i1, 5))]`
/// over [3, 4, 4] in outer tiles of 4 lanes. The row is the same on every
/// lane, so the executor computes it (index, comparison, select, check)
/// along the rows and the function loads each row's address from its table.
#[test]
fn gathers_with_rows_computed_from_positions_compile() {
    if !super::enabled() {
        return;
    }
    let (i0, i1, i2) = (Expr::v(0), Expr::v(1), Expr::v(2));
    let bufs = vec![buf(&[6, 4], &[4, 1], DType::F32), buf(&[3, 4, 4], &[16, 4, 1], DType::F32)];
    let int = |dst, op| Inst { dst, kind: Kind::I64, narrow: None, op };
    let row =
        InstOp::Load { buf: BufId(0), dtype: DType::F32, index: IndexFn::new(&i2), indirect: vec![(4, 4)], mask: None };
    let insts = vec![
        int(0, InstOp::Index(IndexFn::new(&i0.add(&i1.scale(2))))),
        Inst { dst: 2, kind: Kind::I64, narrow: Some(DType::Bool), op: InstOp::Binary(BinaryOp::Lt, 0, 1) },
        int(3, InstOp::Where(2, 0, 1)),
        int(4, InstOp::Bounded { src: 3, size: 6, negatives: Negatives::Reject }),
        f32_inst(5, row),
        f32_inst(6, InstOp::Binary(BinaryOp::Add, 5, 5)),
    ];
    let mut stage = f32_stage(1, None, insts, 6, &i0.scale(16).add(&i1.scale(4)).add(&i2), 7);
    stage.regs[..5].fill(Kind::I64);
    stage.consts = vec![(1, InstOp::ConstI(5))];
    let kernel = one_stage(vec![3, 4, 4], TileMode::Outer, stage, 256);
    let compiled = compile(&kernel, &bufs);
    assert!(compiled.stages[0].jit.as_ref().is_some_and(|j| j.pre.len() == 4), "the row is not the executor's");
    let table: Vec<f32> = (0..24).map(|k| k as f32 * 0.5 - 3.0).collect();
    let run = |kernel: &KernelPlan| {
        let mut out = vec![0f32; 48];
        let ptrs = [table.as_ptr() as usize, out.as_mut_ptr() as usize];
        assert!(run_kernel(kernel, &Memory { ptrs: &ptrs, bufs: &bufs }));
        out.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    };
    let got = run(&compiled);
    assert_eq!(got, run(&kernel));
    for (k, bits) in got.iter().enumerate() {
        let (a, b, c) = (k / 16, k / 4 % 4, k % 4);
        let r = (a + 2 * b).min(5);
        assert_eq!(*bits, (table[c + 4 * r] * 2.0).to_bits(), "element {k}");
    }
}

/// A max pool's backward: `out[4·i0 + bounded(ids[i0, i1])] += x[i0, i1] ·
/// 2`, the row id different on every lane. The value compiles; the executor
/// reads and checks the ids after the call and adds lane by lane (serial:
/// lanes may share a row). Bits as the interpreter's, and an id out of range
/// fails both.
#[test]
fn scatters_with_lane_varying_rows_compile() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let int = |dst: u16, op: InstOp| Inst { dst, kind: Kind::I64, narrow: None, op };
    let id = InstOp::Load {
        buf: BufId(1),
        dtype: DType::I64,
        index: IndexFn::new(&i0.scale(37).add(&i1)),
        indirect: vec![],
        mask: None,
    };
    let x = InstOp::Load {
        buf: BufId(0),
        dtype: DType::F32,
        index: IndexFn::new(&i0.scale(37).add(&i1)),
        indirect: vec![],
        mask: None,
    };
    let insts = vec![
        f32_inst(0, x),
        f32_inst(1, InstOp::Binary(BinaryOp::Mul, 0, 5)),
        int(2, id),
        int(3, InstOp::Bounded { src: 2, size: 4, negatives: Negatives::Reject }),
    ];
    let mut stage = f32_stage(2, None, insts, 1, &i0.scale(4), 6);
    stage.regs[2] = Kind::I64;
    stage.regs[3] = Kind::I64;
    stage.consts = vec![(5, InstOp::ConstF(2.0))];
    stage.store_indirect = vec![(3, 1)];
    stage.accumulate = Some(BinaryOp::Add);
    let bufs =
        vec![buf(&[4, 37], &[37, 1], DType::F32), buf(&[4, 37], &[37, 1], DType::I64), buf(&[16], &[1], DType::F32)];
    let mut kernel = one_stage(vec![4, 37], TileMode::Outer, stage, 16);
    kernel.serial = true;
    let compiled = compile(&kernel, &bufs);
    assert!(
        compiled.stages[0].jit.as_ref().is_some_and(|j| j.scatter_rows == [2, 3]),
        "the scatter's value was not compiled"
    );
    let x: Vec<f32> = (0..4 * 37).map(|k| ((k * 7919) % 1000) as f32 / 100.0 - 5.0).collect();
    let run = |k: &KernelPlan, ids: &[i64]| -> Option<Vec<u32>> {
        let mut out = vec![0f32; 16];
        let ptrs = [x.as_ptr() as usize, ids.as_ptr() as usize, out.as_mut_ptr() as usize];
        run_kernel(k, &Memory { ptrs: &ptrs, bufs: &bufs }).then(|| out.iter().map(|v| v.to_bits()).collect())
    };
    let ids: Vec<i64> = (0..4 * 37).map(|k| (k * 5 + k / 3) % 4).collect();
    let got = run(&compiled, &ids).expect("ids in range");
    assert_eq!(Some(&got), run(&kernel, &ids).as_ref());
    let mut want = [0f32; 16];
    for (k, (&v, &id)) in x.iter().zip(&ids).enumerate() {
        want[4 * (k / 37) + id as usize] += v * 2.0;
    }
    assert_eq!(got, want.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    let mut bad = ids.clone();
    bad[40] = 4;
    assert!(run(&compiled, &bad).is_none() && run(&kernel, &bad).is_none());
}

/// A masked gather (a `cat` of values and an embedding lookup):
/// `i1 < 20 ? x[i0, i1] : table[i0 + 3 · bounded(ids[i1 - 20])]`, the ids
/// and the lookup both masked; masked-off lanes read neither the ids nor the
/// table. Bits as the interpreter's, and an id out of range fails both.
#[test]
fn masked_gathers_compile() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let bufs = vec![
        buf(&[3, 50], &[50, 1], DType::F32),
        buf(&[7, 3], &[3, 1], DType::F32),
        buf(&[30], &[1], DType::I64),
        buf(&[3, 50], &[50, 1], DType::F32),
    ];
    let int = |dst, op| Inst { dst, kind: Kind::I64, narrow: None, op };
    let mask = |dst, op| Inst { dst, kind: Kind::I64, narrow: Some(DType::Bool), op };
    let load = |buf: u32, dtype, index: Expr, indirect: Vec<(u16, i64)>, mask| InstOp::Load {
        buf: BufId(buf),
        dtype,
        index: IndexFn::new(&index),
        indirect,
        mask,
    };
    let insts = vec![
        int(0, InstOp::Index(IndexFn::new(&i1))),
        mask(1, InstOp::Binary(BinaryOp::Ge, 0, 10)),
        int(2, load(2, DType::I64, i1.add_c(-20), vec![], Some(1))),
        int(3, InstOp::Bounded { src: 2, size: 7, negatives: Negatives::Reject }),
        f32_inst(4, load(1, DType::F32, i0.clone(), vec![(3, 3)], Some(1))),
        mask(5, InstOp::Binary(BinaryOp::Lt, 0, 10)),
        f32_inst(6, load(0, DType::F32, i0.scale(50).add(&i1), vec![], Some(5))),
        f32_inst(7, InstOp::Where(1, 4, 6)),
    ];
    let mut stage = f32_stage(3, None, insts, 7, &i0.scale(50).add(&i1), 11);
    for r in [0, 1, 2, 3, 5, 10] {
        stage.regs[r] = Kind::I64;
    }
    stage.consts = vec![(10, InstOp::ConstI(20))];
    let kernel = one_stage(vec![3, 50], TileMode::Outer, stage, 256);
    let compiled = compile(&kernel, &bufs);
    assert!(compiled.stages[0].jit.as_ref().is_some_and(|j| j.pre.is_empty()), "not compiled");
    let xs: Vec<f32> = (0..150).map(|k| ((k * 7919) % 1000) as f32 / 100.0 - 5.0).collect();
    let table: Vec<f32> = (0..21).map(|k| k as f32 * 0.25 - 2.0).collect();
    let run = |kernel: &KernelPlan, ids: &[i64]| {
        let mut out = vec![0f32; 150];
        let ptrs = [xs.as_ptr() as usize, table.as_ptr() as usize, ids.as_ptr() as usize, out.as_mut_ptr() as usize];
        let ok = run_kernel(kernel, &Memory { ptrs: &ptrs, bufs: &bufs });
        ok.then(|| out.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
    };
    let mut ids: Vec<i64> = (0..30).map(|k| (k * 5 + k / 7) % 7).collect();
    let got = run(&compiled, &ids).expect("ids in range");
    assert_eq!(Some(&got), run(&kernel, &ids).as_ref());
    for (k, bits) in got.iter().enumerate() {
        let (r, l) = (k / 50, k % 50);
        let want = if l < 20 { xs[k] } else { table[r + 3 * ids[l - 20] as usize] };
        assert_eq!(*bits, want.to_bits(), "element {k}");
    }
    ids[29] = 7;
    assert!(run(&compiled, &ids).is_none() && run(&kernel, &ids).is_none());
}

/// Two lane-varying row ids loaded into one reused register (a pairwise
/// lookup `t[i0, a[i1], b[i1]]`, as the planner allocates it): each part
/// reads the row load its own check read, not the register's last writer.
/// Plain and masked (beside a `cat`'s other input), against the interpreter
/// and the numbers written out.
#[test]
fn gathers_of_two_rows_in_one_register_compile() {
    if !super::enabled() {
        return;
    }
    let (i0, i1) = (Expr::v(0), Expr::v(1));
    let bufs = vec![
        buf(&[3, 25], &[25, 1], DType::F32),
        buf(&[12], &[1], DType::I64),
        buf(&[12], &[1], DType::I64),
        buf(&[3, 12], &[12, 1], DType::F32),
    ];
    let int = |dst, op| Inst { dst, kind: Kind::I64, narrow: None, op };
    let maskd = |dst, op| Inst { dst, kind: Kind::I64, narrow: Some(DType::Bool), op };
    for masked in [false, true] {
        let m = masked.then_some(9);
        let ids = |buf| InstOp::Load {
            buf: BufId(buf),
            dtype: DType::I64,
            index: IndexFn::new(&i1),
            indirect: vec![],
            mask: m,
        };
        let table = InstOp::Load {
            buf: BufId(0),
            dtype: DType::F32,
            index: IndexFn::new(&i0.scale(25)),
            indirect: vec![(1, 5), (2, 1)],
            mask: m,
        };
        let insts = vec![
            int(8, InstOp::Index(IndexFn::new(&i1))),
            maskd(9, InstOp::Binary(BinaryOp::Ge, 8, 10)),
            int(0, ids(1)),
            int(1, InstOp::Bounded { src: 0, size: 5, negatives: Negatives::Wrap }),
            int(0, ids(2)),
            int(2, InstOp::Bounded { src: 0, size: 5, negatives: Negatives::Wrap }),
            f32_inst(3, table),
        ];
        let mut stage = f32_stage(3, None, insts, 3, &i0.scale(12).add(&i1), 11);
        for r in [0, 1, 2, 8, 9, 10] {
            stage.regs[r] = Kind::I64;
        }
        stage.consts = vec![(10, InstOp::ConstI(3))];
        let kernel = one_stage(vec![3, 12], TileMode::Outer, stage, 256);
        let compiled = compile(&kernel, &bufs);
        assert!(compiled.stages[0].jit.is_some(), "not compiled");
        let t: Vec<f32> = (0..75).map(|k| k as f32).collect();
        let a: Vec<i64> = (0..12).map(|k| (k * 3) % 5 - 1).collect();
        let b: Vec<i64> = (0..12).map(|k| (k * 2 + 1) % 5).collect();
        let run = |kernel: &KernelPlan| {
            let mut out = vec![0f32; 36];
            let ptrs = [t.as_ptr() as usize, a.as_ptr() as usize, b.as_ptr() as usize, out.as_mut_ptr() as usize];
            assert!(run_kernel(kernel, &Memory { ptrs: &ptrs, bufs: &bufs }));
            out
        };
        let got = run(&compiled);
        assert_eq!(got, run(&kernel));
        let want: Vec<f32> = (0..36)
            .map(|k| {
                let (r, l) = (k / 12, k % 12);
                if masked && l < 3 {
                    0.0
                } else {
                    t[25 * r + 5 * a[l].rem_euclid(5) as usize + b[l] as usize]
                }
            })
            .collect();
        assert_eq!(got, want, "masked: {masked}");
    }
}

/// Row ids computed by compiled integer instructions, gathered lane by
/// lane (T5's relative-position bias): `table[row][i0]` over a [4, 32, 32]
/// output, with `row = where(i1 >= i2, min(ids[i1, i2], 31), i2 - i1) + 0`
/// (int64 lanes, negative ids counted from the end) or `i2 - i1 + 31`
/// (32-bit lanes); each compiled, equal to the interpreter's and to the
/// numbers written out, and an id out of range fails both paths.
#[test]
fn computed_row_ids_gather_lane_by_lane() {
    if !super::enabled() {
        return;
    }
    let (i0, i1, i2) = (Expr::v(0), Expr::v(1), Expr::v(2));
    let int = |dst: u16, op: InstOp| Inst { dst, kind: Kind::I64, narrow: None, op };
    let mask = |dst: u16, op: InstOp| Inst { dst, kind: Kind::I64, narrow: Some(DType::Bool), op };
    let index = |e: &Expr| InstOp::Index(IndexFn::new(e));
    let gather = |src: u16| InstOp::Load {
        buf: BufId(0),
        dtype: DType::F32,
        index: IndexFn::new(&i0),
        indirect: vec![(src, 4)],
        mask: None,
    };
    let ids_load = InstOp::Load {
        buf: BufId(1),
        dtype: DType::I64,
        index: IndexFn::new(&i1.scale(32).add(&i2)),
        indirect: vec![],
        mask: None,
    };
    let long_rows = vec![
        int(0, index(&i1)),
        int(1, index(&i2)),
        mask(2, InstOp::Binary(BinaryOp::Ge, 0, 1)),
        int(3, index(&i2.sub(&i1))),
        int(4, ids_load),
        int(5, InstOp::Binary(BinaryOp::Min, 4, 10)),
        int(6, InstOp::Where(2, 5, 3)),
        int(7, InstOp::Binary(BinaryOp::Add, 6, 11)),
        int(8, InstOp::Bounded { src: 7, size: 64, negatives: Negatives::Wrap }),
        f32_inst(9, gather(8)),
    ];
    let int_rows = vec![
        int(3, index(&i2.sub(&i1))),
        int(7, InstOp::Binary(BinaryOp::Add, 3, 12)),
        int(8, InstOp::Bounded { src: 7, size: 64, negatives: Negatives::Reject }),
        f32_inst(9, gather(8)),
    ];
    let table: Vec<f32> = (0..64 * 4).map(|k| ((k * 7919) % 1000) as f32 / 100.0 - 5.0).collect();
    let bufs = [
        buf(&[64, 4], &[4, 1], DType::F32),
        buf(&[32, 32], &[32, 1], DType::I64),
        buf(&[4, 32, 32], &[1024, 32, 1], DType::F32),
    ];
    let out_at = i0.scale(1024).add(&i1.scale(32)).add(&i2);
    for (name, insts) in [("int64", long_rows), ("32-bit", int_rows)] {
        let mut stage = f32_stage(2, None, insts, 9, &out_at, 13);
        (0..9).for_each(|r| stage.regs[r] = Kind::I64);
        stage.consts = vec![(10, InstOp::ConstI(31)), (11, InstOp::ConstI(0)), (12, InstOp::ConstI(31))];
        (10..13).for_each(|r| stage.regs[r] = Kind::I64);
        let kernel = one_stage(vec![4, 32, 32], TileMode::Outer, stage, 16);
        let compiled = compile(&kernel, &bufs);
        assert!(compiled.stages[0].jit.is_some(), "{name}: stage was not compiled");
        let run = |k: &KernelPlan, ids: &[i64]| {
            let mut out = vec![0f32; 4 * 1024];
            let ptrs = [table.as_ptr() as usize, ids.as_ptr() as usize, out.as_mut_ptr() as usize];
            run_kernel(k, &Memory { ptrs: &ptrs, bufs: &bufs })
                .then(|| out.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
        };
        let ids: Vec<i64> = (0..1024).map(|k| (k * 37 % 101) - 40).collect();
        let got = run(&compiled, &ids).expect("ids in range");
        assert_eq!(Some(&got), run(&kernel, &ids).as_ref(), "{name}");
        let want: Vec<u32> = (0..4 * 1024)
            .map(|p| {
                let (h, i, j) = (p / 1024, (p / 32) % 32, p % 32);
                let row = match name {
                    "int64" if i >= j => ids[32 * i + j].min(31).rem_euclid(64),
                    "int64" => (j as i64 - i as i64).rem_euclid(64),
                    _ => j as i64 - i as i64 + 31,
                };
                table[4 * row as usize + h].to_bits()
            })
            .collect();
        assert_eq!(got, want, "{name}");
        if name == "int64" {
            // -70 wraps to -6, still out of range.
            let mut bad = ids.clone();
            bad[32 * 9 + 3] = -70;
            assert!(run(&compiled, &bad).is_none() && run(&kernel, &bad).is_none());
        }
    }
}
