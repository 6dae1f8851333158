#![allow(clippy::panic)] // a test reports failure by panicking
//! Round trips of programs built through the API and written by hand, and
//! the errors malformed text gets.

use super::*;
use crate::expr::{Ctx, Expr, Sym};
use crate::loops::contiguous_strides;

fn buffer(p: &mut Program, dtype: DType, sizes: &[Expr], role: BufRole) -> BufId {
    let strides = contiguous_strides(sizes);
    p.add_buffer(Buffer { dtype, sizes: sizes.to_vec(), strides, offset: Expr::zero(), role })
}

/// Print, parse, print again: the same text, the same steps, buffers and
/// outputs, and every printed node at its id.
fn round_trip(p: &Program) -> Program {
    let text = p.to_string();
    let back = match program(&text) {
        Ok(back) => back,
        Err(e) => panic!("{e}\n{text}"),
    };
    assert_eq!(back.to_string(), text);
    assert_eq!(back.steps, p.steps, "{text}");
    assert_eq!(back.buffers, p.buffers, "{text}");
    assert_eq!(back.outputs, p.outputs, "{text}");
    let mut roots = Vec::new();
    for kernel in p.kernels() {
        for stage in &kernel.stages {
            roots.push(stage.value);
            roots.extend(stage.store_indirect.iter().map(|(s, _)| *s));
        }
    }
    for id in p.scalars.topo(&roots) {
        assert_eq!(back.scalars.get(id), p.scalars.get(id), "{id} in\n{text}");
    }
    back
}

/// Index expressions of every shape the printer writes: products,
/// negative coefficients, floor divisions and remainders by constants,
/// symbols and sums, nested.
fn exprs() -> Vec<Expr> {
    let ctx = Ctx::default();
    let (i0, i1, s0) = (Expr::v(0), Expr::v(1), Expr::sym(Sym(0)));
    let flat = i0.scale(6).add(&i1).add_c(-3);
    vec![
        Expr::zero(),
        Expr::c(-7),
        i0.mul(&s0).scale(2).sub(&i1).add_c(5),
        flat.floordiv(&Expr::c(4), &ctx),
        flat.modulo(&Expr::c(4), &ctx).scale(-3),
        i0.floordiv(&s0.add_c(1), &ctx).add(&i1.modulo(&s0.scale(2), &ctx)),
        i1.mul(&i0.floordiv(&Expr::c(2), &ctx)).neg(),
        Expr::atom_expr(Atom::FloorDiv(Box::new(i0.clone()), Box::new(Expr::c(-4)))),
        i0.floordiv(&Expr::c(3), &ctx).floordiv(&s0, &ctx).modulo(&Expr::c(5), &ctx),
    ]
}

use crate::expr::Atom;

/// One stage per expression and per op: every `ScalarOp`, every unary and
/// binary op, loads with indirect parts and masks, scatters, reductions,
/// constants of every kind; then every kind of extern.
fn every_kind() -> Program {
    let mut p = Program::default();
    let n = Expr::c(8);
    let x = buffer(&mut p, DType::F32, &[n.clone(), n.clone()], BufRole::Input(0));
    let ix = buffer(&mut p, DType::I64, std::slice::from_ref(&n), BufRole::Input(1));
    let out = buffer(&mut p, DType::F32, &[n.clone(), n.clone()], BufRole::Temp);
    let ext = buffer(&mut p, DType::F32, &[n.clone(), n.clone()], BufRole::ExternOut);
    let view = p.add_buffer(Buffer { role: BufRole::View(out), offset: Expr::c(3), ..p.buffer(out).clone() });
    let s = &mut p.scalars;
    let garbage = s.constant(123.0, DType::F64); // a node nothing reads: a gap in the printed ids
    let _ = garbage;
    let at = Expr::v(0).scale(8).add(&Expr::v(1));
    let a = s.add(ScalarOp::Load { buf: x, index: at.clone(), indirect: vec![], mask: None }, DType::F32);
    let b = s.add(ScalarOp::Load { buf: x, index: Expr::v(1), indirect: vec![], mask: None }, DType::F32);
    let row = s.add(ScalarOp::Load { buf: ix, index: Expr::v(0), indirect: vec![], mask: None }, DType::I64);
    let checked = s.add(ScalarOp::Bounded(row, Expr::c(8), Negatives::Wrap), DType::I64);
    let rejected = s.add(ScalarOp::Bounded(row, Expr::sym(Sym(1)), Negatives::Reject), DType::I64);
    let lo = s.index(Expr::v(1).add_c(-2));
    let zero = s.int_constant(0, DType::I64);
    let mask = s.add(ScalarOp::Binary(BinaryOp::Ge, lo, zero), DType::Bool);
    let indirect = vec![(checked, Expr::c(8)), (rejected, Expr::c(1))];
    let gathered = s.add(ScalarOp::Load { buf: view, index: Expr::v(1), indirect, mask: Some(mask) }, DType::F32);
    let mut values = vec![gathered];
    for op in UnaryOp::ALL {
        values.push(s.add(ScalarOp::Unary(*op, a), DType::F32));
    }
    for op in BinaryOp::ALL {
        let dtype = if op.is_comparison() { DType::Bool } else { DType::F32 };
        values.push(s.add(ScalarOp::Binary(*op, a, b), dtype));
    }
    let consts = [0.5, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e-300, 3.0e38, 0.1];
    for v in consts {
        values.push(s.add(ScalarOp::Const { bits: v.to_bits() }, DType::F64));
    }
    values.push(s.add(ScalarOp::Const { bits: (-f64::NAN).to_bits() }, DType::F64));
    values.push(s.add(ScalarOp::Const { bits: 0x7ff0_0000_0000_0001 }, DType::F64));
    values.push(s.int_constant(-5, DType::I8));
    values.push(s.int_constant(i64::MIN, DType::I64));
    values.push(s.int_constant(1, DType::Bool));
    let cast = s.add(ScalarOp::Cast(a), DType::F16);
    values.push(s.add(ScalarOp::Where(mask, cast, cast), DType::F16));
    for e in exprs() {
        values.push(s.add(ScalarOp::Index(e), DType::I64));
    }
    let ranges = vec![n.clone(), n.clone()];
    let mut stages: Vec<Stage> = values
        .iter()
        .map(|&value| Stage {
            out,
            ranges: ranges.clone(),
            reduce: None,
            value,
            store: at.clone(),
            store_indirect: vec![],
        })
        .collect();
    let reduce = Some(Reduce { op: ReduceOp::ArgMax, ranges: vec![Expr::sym(Sym(0))] });
    stages.push(Stage { out, ranges: ranges.clone(), reduce, value: a, store: at.clone(), store_indirect: vec![] });
    let scatter = vec![(checked, Expr::c(8)), (row, Expr::c(1))];
    stages.push(Stage {
        out,
        ranges: ranges.clone(),
        reduce: None,
        value: b,
        store: Expr::v(1),
        store_indirect: scatter,
    });
    p.steps.push(Step::Kernel(Kernel { outer: vec![n.clone()], stages }));
    // A stage whose ranges do not start with the outer ones (verify rejects it).
    let odd =
        Stage { out, ranges: vec![Expr::c(4)], reduce: None, value: a, store: Expr::v(0), store_indirect: vec![] };
    p.steps.push(Step::Kernel(Kernel { outer: vec![n.clone()], stages: vec![odd] }));
    p.steps.push(Step::Kernel(Kernel { outer: vec![], stages: vec![] }));
    for kind in extern_kinds() {
        p.steps.push(Step::Extern(Extern { kind, inputs: vec![x, out], outputs: vec![ext] }));
    }
    p.outputs = vec![ProgramOutput::Buffer(ext), ProgramOutput::Int(Expr::sym(Sym(0)).add_c(1)), ProgramOutput::None];
    p
}

fn extern_kinds() -> Vec<ExternKind> {
    let mut kinds = vec![
        ExternKind::Gemm { scale_bits: 1f64.to_bits() },
        ExternKind::Gemm { scale_bits: 0.125f64.to_bits() },
        ExternKind::DepthwiseConv2d { stride: [1, 2], padding: [0, 3], dilation: [2, 1] },
        ExternKind::DepthwiseWeightGrad { stride: [2, 1], padding: [3, 0], dilation: [1, 2] },
        ExternKind::Search { right: false },
        ExternKind::Search { right: true },
        ExternKind::Library { node: 4, target: "aten.convolution.default".into() },
        ExternKind::Fallback { node: 17, target: "aten.histc.default".into() },
    ];
    kinds.extend(ScanOp::ALL.iter().map(|&op| ExternKind::Scan { op, dim: 1 }));
    let selects =
        [SortSelect::All, SortSelect::Leading(3), SortSelect::Kth(2), SortSelect::Median, SortSelect::NanMedian];
    for (k, select) in selects.into_iter().enumerate() {
        kinds.push(ExternKind::Sort(SortSpec { dim: k % 2, descending: k % 2 == 1, select }));
    }
    kinds
}

#[test]
fn every_op_and_step_round_trips() {
    let p = every_kind();
    let back = round_trip(&p);
    // The node nothing reads is not printed; its id holds a placeholder.
    assert_eq!(back.scalars.len(), p.scalars.len());
    assert!(!p.to_string().contains("t0:"), "{p}");
}

#[test]
fn an_empty_program_round_trips() {
    let p = round_trip(&Program::default());
    assert_eq!(p.to_string(), "return ()\n");
}

#[test]
fn op_names_are_unambiguous() {
    let mut seen = HashSet::new();
    for name in ["load", "const", "index", "cast", "where", "bounded"] {
        assert!(seen.insert(name));
    }
    for name in UnaryOp::ALL.iter().map(|op| op.name()).chain(BinaryOp::ALL.iter().map(|op| op.name())) {
        assert!(seen.insert(name), "{name} names two ops");
    }
}

/// Text written by hand: sums come back canonical (`s0*i0` as `i0*s0`,
/// `3 + i0` as `i0 + 3`), `;` lines and blank lines are skipped, ids may
/// leave gaps.
#[test]
fn hand_written_text_is_read_canonically() {
    let text = "\
; a comment
buf0: float32[s0*4] strides [1] offset 0 (input 0)
buf1: float32[4*s0] strides [1] offset 0 (temp)

kernel k0 outer [4*s0]
  buf1[i0] = stage inner []:
    t3: float32 = load buf0[3 + i0 - 3]
    t9: float32 = exp t3
    -> t9
return (buf1, 2 + s0*2)
";
    let p = match program(text) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    let printed = p.to_string();
    assert!(printed.contains("buf0: float32[4*s0] strides [1]"), "{printed}");
    assert!(printed.contains("t3: float32 = load buf0[i0]"), "{printed}");
    assert!(printed.contains("return (buf1, 2*s0 + 2)"), "{printed}");
    assert_eq!(p.scalars.len(), 10);
    assert_eq!(program(&printed).map(|q| q.to_string()), Ok(printed));
}

/// Each malformed text and the error it gets.
#[test]
fn malformed_text_names_the_line_and_what_was_expected() {
    let head = "buf0: float32[8] strides [1] offset 0 (input 0)\nbuf1: float32[8] strides [1] offset 0 (temp)\n";
    let kernel = "kernel k0 outer [8]\n  buf1[i0] = stage inner []:\n";
    let cases: Vec<(String, &str)> = vec![
        ("buf1: float32[8] strides [1] offset 0 (temp)\n".into(), "line 1: expected buf0 (buffers are numbered in order), found `buf1: float32[8] strides [1] offset 0 (temp)`"),
        ("buf0: float31[8] strides [1] offset 0 (temp)\n".into(), "line 1: expected a dtype, found `float31[8] strides [1] offset 0 (temp)`"),
        ("buf0: float32[8, 4] strides [1] offset 0 (temp)\n".into(), "line 1: expected 2 strides, one per size, found `[1] offset 0 (temp)`"),
        ("buf0: float32[8] strides [1] offset 0 (scratch)\n".into(), "line 1: expected a role: `input N`, `temp`, `extern` or `view of bufN`, found `scratch)`"),
        ("buf0: float32[8 +] strides [1] offset 0 (temp)\n".into(), "line 1: expected an index expression, found `] strides [1] offset 0 (temp)`"),
        ("buf0: float32[(i0 // 2] strides [1] offset 0 (temp)\n".into(), "line 1: expected `)`, found `] strides [1] offset 0 (temp)`"),
        ("buf0: float32[8] strides [1] offset 0 (view of buf0)\nreturn ()\n".into(), "line 1: expected views that end at a buffer's own storage, found a cycle of views"),
        ("buf0: float32[8] strides [1] offset 0 (view of buf5)\nreturn ()\n".into(), "line 1: expected a view of a buffer the text defines, found buf5"),
        (format!("{head}kernel k1 outer [8]\n"), "line 3: expected k0 (kernels are numbered in order), found `k1 outer [8]`"),
        (format!("{head}  buf1[i0] = stage inner []:\n"), "line 3: expected `kernel kN outer [...]` before its stages, found `buf1[i0] = stage inner []:`"),
        (format!("{head}kernel k0 outer [8]\n  buf1[i0] = stage over [8]:\n"), "line 4: expected `inner [...]` or `ranges [...]`, found `over [8]:`"),
        (format!("{head}kernel k0 outer [8]\n  buf1[i0] = stage inner [] total over [8]:\n"), "line 4: expected `:` or a reduction (`sum over [...]`), found `total over [8]:`"),
        (format!("{head}{kernel}    t0: float32 = frobnicate t1\n"), "line 5: expected an operation: `load`, `const`, `index`, `cast`, `where`, `bounded` or an op name, found `frobnicate t1`"),
        (format!("{head}{kernel}    t0: float32 = load buf0[i0]\n    t1: float32 = add t0 t0\n"), "line 6: expected `,`, found `t0`"),
        (format!("{head}{kernel}    t0: float32 = const 1.5.2\n"), "line 5: expected a float constant, found `1.5.2`"),
        (format!("{head}{kernel}    t0: int64 = const 1.5\n"), "line 5: expected end of line, found `.5`"),
        (format!("{head}{kernel}    t0: float32 = exp t0\n"), "line 5: expected operands of t0 numbered below it, found t0"),
        (format!("{head}{kernel}    t1: float32 = exp t0\n    -> t1\nreturn (buf1)\n"), "line 5: expected a node line defining t0, found none in the text"),
        (format!("{head}{kernel}    t0: float32 = load buf0[i0]\n    t0: float32 = load buf0[i0 + 1]\n"), "line 6: expected t0 as line 5 defines it, found another definition"),
        (format!("{head}{kernel}    t0: float32 = load buf0[i0]\n    t1: float32 = load buf0[i0]\n    -> t1\nreturn (buf1)\n"), "line 6: expected t1 to differ from t0, found the same node"),
        (format!("{head}{kernel}    t0: float32 = load buf0[i0]\nreturn (buf1)\n"), "line 6: expected a node, or `-> tN` ending the stage of line 4, found `return (buf1)`"),
        (format!("{head}{kernel}    t0: float32 = load buf0[i0]\n"), "line 5: expected `-> tN` ending the stage of line 4, found end of text"),
        (format!("{head}{kernel}    t0: float32 = load buf0[i0]\n    -> t0\n"), "line 6: expected `return (...)` ending the program, found end of text"),
        (format!("{head}    t0: float32 = load buf0[i0]\n"), "line 3: expected a stage header before its nodes, found `t0: float32 = load buf0[i0]`"),
        (format!("{head}    -> t0\n"), "line 3: expected a stage header before `->`, found `-> t0`"),
        (format!("{head}extern gemm (buf0) -> buf1\n"), "line 3: expected `(`, found `buf1`"),
        (format!("{head}extern matmul (buf0) -> (buf1)\n"), "line 3: expected an extern: `gemm`, `depthwise_conv2d`, a scan, `sort`, `searchsorted`, `library` or `fallback`, found `matmul (buf0) -> (buf1)`"),
        (format!("{head}extern fallback aten.histc.default (buf0) -> (buf1)\n"), "line 3: expected `node`, found end of line"),
        (format!("{head}extern depthwise_conv2d stride [1] padding [0, 0] dilation [1, 1] (buf0) -> (buf1)\n"), "line 3: expected two integers for stride, found `[1] padding [0, 0] dilation [1, 1] (buf0) -> (bu...`"),
        (format!("{head}extern sort dim 0 sideways (buf0) -> (buf1)\n"), "line 3: expected `ascending` or `descending`, found `sideways (buf0) -> (buf1)`"),
        (format!("{head}return (buf1)\nreturn (buf1)\n"), "line 4: expected nothing after `return`, found `return (buf1)`"),
        (format!("{head}frobnicate\n"), "line 3: expected a buffer, `kernel`, a stage, a node, `extern` or `return`, found `frobnicate`"),
        (format!("{head}{kernel}    t99999999: float32 = load buf0[i0]\n"), "line 5: expected a scalar id below 4194304, found `t99999999: float32 = load buf0[i0]`"),
    ];
    for (text, want) in cases {
        match program(&text) {
            Ok(p) => panic!("parsed:\n{text}as\n{p}"),
            Err(e) => assert_eq!(e.to_string(), want, "{text}"),
        }
    }
}

/// What `verify` rejects still parses: the filetests give it such programs.
#[test]
fn structurally_broken_programs_parse() {
    let text = "\
buf0: float32[8] strides [1] offset 0 (temp)
kernel k0 outer [8]
  buf9[i0] = stage ranges [4]:
    t0: float32 = load buf0[i3]
    -> t0
return (buf0)
";
    assert_eq!(program(text).map(|p| p.to_string()), Ok(text.to_string()));
}
