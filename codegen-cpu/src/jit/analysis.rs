//! Which stages the JIT compiles, and what each instruction becomes.
//!
//! Registers are reused by the planner, so each instruction's operands are
//! first resolved to the instruction (or constant) that last wrote them;
//! the function is then SSA over those definitions. An instruction is
//! invariant when its value is the same on every lane of the tile
//! ([`StagePlan::uniform_insts`]): it is emitted once, before the loops.
//! Invariant integer instructions that do not compile (an embedding's token
//! id, loaded as int64 and bounds-checked) are left to the executor, which
//! runs them on one lane before each call ([`Class::Pre`]); a gather whose
//! row they pick is then an affine load from the address the executor
//! passes.

use cranelift_codegen::ir::condcodes::IntCC;
use rdyn_ir::loops::{BinaryOp, UnaryOp};
use rdyn_ir::ops::Jit;
use rdyn_ir::{DType, Kind};

use super::gather::{self, GatherPart, RowSource};
use super::int::{self, Range};
use super::stage::JitLoad;
use crate::plan::{IndexFn, InstOp, Reg, StagePlan};
use crate::tile::TILE;

/// What a definition holds in the compiled code.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    Float,
    Mask,
    /// An integer index (`I32`/`I32X4`): only compared, into masks.
    Int,
    /// An int64 loaded from memory (`I64`, or two `I64X2` for four
    /// lanes): only compared, into masks (a position id against another).
    Long,
    /// An invariant integer the executor computes (interpreted, one lane)
    /// before each call; only the indirect parts of loads read it.
    Pre,
    /// A row id that differs from lane to lane (an integer load, and its
    /// bounds check): only a gathered load's indirect part reads it, and
    /// that load reads and checks it per lane ([`super::gather`]).
    Row,
}

/// Where an operand's value comes from.
#[derive(Clone, Copy)]
pub(super) enum Def {
    Const(Reg),
    Inst(usize),
}

pub(super) struct Analysis {
    /// Per instruction: its operands' definitions.
    pub operands: Vec<Vec<Def>>,
    pub class: Vec<Class>,
    pub invariant: Vec<bool>,
    /// Per instruction: the load's (or index's) step along the tile.
    pub step: Vec<i64>,
    /// Per instruction: the [`super::call_code`] of a transcendental, run
    /// through the interpreter's routine (over the whole tile between two
    /// loops, or once on one lane when invariant) rather than inline.
    pub call: Vec<Option<u32>>,
    /// Per instruction: a gathered load's lane-varying indirect parts
    /// (empty for anything else).
    pub gathers: Vec<Vec<GatherPart>>,
    /// Per instruction: a [`Class::Int`] value's bounds over the kernel's
    /// ranges (`None`: unknown, as a hash's; see [`super::int`]).
    pub range: Vec<Option<Range>>,
    pub value: Def,
}

impl Analysis {
    /// Whether the stage's value is a mask (a bool stage), not a float.
    pub fn value_is_mask(&self) -> bool {
        match self.value {
            Def::Inst(i) => self.class[i] == Class::Mask,
            Def::Const(_) => false,
        }
    }

    /// Whether the stage's value is an integer ([`Class::Int`]), stored
    /// to its int64 output.
    pub fn value_is_int(&self) -> bool {
        matches!(self.value, Def::Inst(i) if matches!(self.class[i], Class::Int | Class::Long))
    }

    /// Whether a load gathers lane-varying rows (the function then has an
    /// error flag for their bounds checks).
    pub fn gathers_rows(&self) -> bool {
        self.gathers.iter().any(|g| !g.is_empty())
    }

    /// The [`Class::Pre`] instructions, in order.
    pub fn pre(&self) -> Vec<usize> {
        (0..self.class.len()).filter(|&i| self.class[i] == Class::Pre).collect()
    }
}

pub(super) fn operand_regs(op: &InstOp) -> Vec<Reg> {
    match op {
        InstOp::Load { mask: Some(m), .. } => vec![*m],
        InstOp::Unary(_, x) => vec![*x],
        InstOp::Binary(_, a, b) => vec![*a, *b],
        InstOp::Where(c, a, b) => vec![*c, *a, *b],
        InstOp::Cast { src, .. } => vec![*src],
        _ => Vec::new(),
    }
}

/// How [`analyse`] reads what is the same on every lane and int64 loads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Try {
    /// Indices as compiled lanes; int64 loads as [`Class::Long`] only when
    /// compared, else executor-computed when invariant.
    Plain,
    /// Invariant indices executor-computed too (a gather's row computed
    /// from positions).
    PreIndex,
    /// Every plain int64 load as [`Class::Long`], for int64 arithmetic
    /// (a position id's difference, a step counter's increment).
    LongArith,
}

fn analyse(stage: &StagePlan, tile_var: Option<usize>, extents: &[i64], how: Try) -> Option<Analysis> {
    let pre_index = how == Try::PreIndex;
    let mut current: Vec<Option<Def>> = vec![None; stage.regs.len()];
    // `None`: a float64 constant, which no compiled instruction may use.
    let mut const_class = vec![None; stage.regs.len()];
    for (reg, op) in &stage.consts {
        current[*reg as usize] = Some(Def::Const(*reg));
        const_class[*reg as usize] = match op {
            InstOp::ConstF(_) if stage.regs[*reg as usize] == Kind::F32 => Some(Class::Float),
            InstOp::ConstI(_) if stage.regs[*reg as usize] == Kind::I64 => Some(Class::Mask),
            _ => None,
        };
    }
    let n = stage.insts.len();
    let mut a = Analysis {
        operands: Vec::with_capacity(n),
        class: Vec::with_capacity(n),
        invariant: stage.uniform_insts(tile_var),
        step: vec![0; n],
        call: vec![None; n],
        gathers: vec![Vec::new(); n],
        range: Vec::with_capacity(n),
        value: Def::Const(0),
    };
    let class_of = |a: &Analysis, d: Def| match d {
        Def::Const(r) => const_class[r as usize],
        Def::Inst(i) => Some(a.class[i]),
    };
    for (i, inst) in stage.insts.iter().enumerate() {
        let ops: Vec<Def> = operand_regs(&inst.op).iter().map(|r| current[*r as usize]).collect::<Option<Vec<_>>>()?;
        let cls: Vec<Class> = ops.iter().map(|d| class_of(&a, *d)).collect::<Option<_>>()?;
        // A row id is read only by a gathered load, through its bounds check.
        if cls.contains(&Class::Row) {
            return None;
        }
        let is_pre = |r: &Reg| matches!(current[*r as usize], Some(Def::Inst(j)) if a.class[j] == Class::Pre);
        let long = long_load(&inst.op) && (compared(stage, i) || how == Try::LongArith);
        if a.invariant[i] && inst.kind == Kind::I64 && !long && pre_inst(stage, &inst.op, &is_pre, pre_index) {
            a.operands.push(ops);
            a.range.push(None);
            a.class.push(Class::Pre);
            current[inst.dst as usize] = Some(Def::Inst(i));
            continue;
        }
        let one = One { i, ops: &ops, cls: &cls, long, tile_var, extents, how };
        let (class, range, ops_extra) = classify(stage, &mut a, &current, &one)?;
        if class == Class::Float && !inline_op(stage, &inst.op) {
            // A float transcendental runs through the interpreter's routine.
            let InstOp::Unary(op, _) = &inst.op else { return None };
            a.call[i] = Some(super::call_code(*op)?);
        }
        a.operands.push(ops.into_iter().chain(ops_extra).collect());
        a.class.push(class);
        a.range.push(range);
        current[inst.dst as usize] = Some(Def::Inst(i));
    }
    a.value = current[stage.value as usize]?;
    let value_class = class_of(&a, a.value);
    value_fits(stage, &a, value_class).then_some(a)
}

/// Whether the stage's value can leave compiled code: a float, a mask
/// computed by the stage (a bool stage; an integer constant's value stays
/// the interpreter's, its fill needs no loop) or an integer (a pool's
/// argmax index, stored as int64). A float converted to 32-bit lanes
/// saturates where the interpreter's int64 would not: only a hash (which
/// reads the low 32 bits of keys that fit) may read one.
fn value_fits(stage: &StagePlan, a: &Analysis, value_class: Option<Class>) -> bool {
    let float_to_int = |d: &Def| match d {
        Def::Inst(i) => matches!(stage.insts[*i].op, InstOp::Cast { from: Kind::F32, .. }) && a.class[*i] == Class::Int,
        Def::Const(_) => false,
    };
    let hashes = |k: usize| matches!(stage.insts[k].op, InstOp::Binary(BinaryOp::HashMix, ..));
    if (0..stage.insts.len()).any(|k| !hashes(k) && a.operands[k].iter().any(float_to_int)) || float_to_int(&a.value) {
        return false;
    }
    let float = stage.value_kind == Kind::F32 && value_class == Some(Class::Float);
    let mask = stage.value_kind == Kind::I64 && matches!(a.value, Def::Inst(_)) && value_class == Some(Class::Mask);
    let int = stage.value_kind == Kind::I64 && a.value_is_int();
    float || mask || int
}

/// One instruction as [`classify`] sees it: its operands' definitions and
/// classes, and whether it is an int64 load kept as [`Class::Long`].
struct One<'o> {
    i: usize,
    ops: &'o [Def],
    cls: &'o [Class],
    long: bool,
    tile_var: Option<usize>,
    extents: &'o [i64],
    how: Try,
}

/// Instruction `one.i`'s class, its integer range, and operands it reads
/// beyond its registers (a gather's computed row ids); `None` when no
/// compiled form exists.
fn classify(
    stage: &StagePlan,
    a: &mut Analysis,
    current: &[Option<Def>],
    one: &One,
) -> Option<(Class, Option<Range>, Vec<Def>)> {
    let (i, cls) = (one.i, one.cls);
    let inst = &stage.insts[i];
    let all_float = cls.iter().all(|c| *c == Class::Float);
    let all_mask = cls.iter().all(|c| *c == Class::Mask);
    let float_inst = inst.kind == Kind::F32 && inst.narrow.is_none();
    let mask_inst = inst.kind == Kind::I64 && matches!(inst.narrow, None | Some(DType::Bool));
    let plain_i64 = inst.kind == Kind::I64 && inst.narrow.is_none();
    let int_result = plain_i64.then(|| int_result(stage, a, &inst.op, one.ops, cls)).flatten();
    let class = match &inst.op {
        InstOp::Load { .. } => return classify_load(stage, a, current, one),
        InstOp::Index(index) if plain_i64 => {
            let step = match one.tile_var {
                Some(v) => index.step(v as u32)?,
                None => 0,
            };
            if !fits_i32(index, one.extents) {
                return None;
            }
            a.step[i] = step;
            return Some((Class::Int, int::index_range(index, one.extents), Vec::new()));
        }
        InstOp::Binary(op, x, y)
            if mask_inst
                && int_cc(*op).is_some()
                && [x, y].iter().all(|r| int_operand(stage, a, current[**r as usize])) =>
        {
            Class::Mask
        }
        InstOp::Bounded { src, .. }
            if plain_i64
                && matches!(current[*src as usize], Some(Def::Inst(j))
                    if a.class[j] == Class::Row && gather::bounded_row(stage, i, j).is_some()) =>
        {
            Class::Row
        }
        // A row id computed by compiled integer instructions (T5's
        // buckets: a loaded id clamped, or a position difference).
        InstOp::Bounded { src, .. }
            if plain_i64 && matches!(current[*src as usize], Some(Def::Inst(j)) if computed_row(a, j)) =>
        {
            Class::Row
        }
        // Integer arithmetic on index lanes, while it stays in 32 bits.
        InstOp::Binary(..) | InstOp::Unary(..) | InstOp::Where(..) if int_result.is_some() => {
            return Some((Class::Int, int_result, Vec::new()));
        }
        // int64 arithmetic with a loaded int64 side.
        _ if plain_i64 && cls.contains(&Class::Long) && long_arith(stage, a, &inst.op, one.ops) => Class::Long,
        // A mask as the integer 0 or 1.
        InstOp::Cast { from: Kind::I64, to: DType::I64, .. } if inst.kind == Kind::I64 && cls == [Class::Mask] => {
            return Some((Class::Int, Some((0, 1)), Vec::new()));
        }
        InstOp::ConstF(_) if float_inst => Class::Float,
        InstOp::ConstI(_) if mask_inst => Class::Mask,
        InstOp::Unary(UnaryOp::Not, _) if mask_inst && all_mask => Class::Mask,
        InstOp::Unary(..) if float_inst && all_float => Class::Float,
        // The product of two truth values (0 or 1) is their `and`: PyTorch's
        // decompositions write `a & b` of bools as `a * b` (`logaddexp`).
        InstOp::Binary(BinaryOp::And | BinaryOp::Or | BinaryOp::Xor | BinaryOp::Mul, ..) if mask_inst && all_mask => {
            Class::Mask
        }
        InstOp::Binary(..) if float_inst && all_float => Class::Float,
        InstOp::Where(..) if float_inst && cls == [Class::Mask, Class::Float, Class::Float] => Class::Float,
        InstOp::Cast { from: Kind::F32, to: DType::F32 | DType::BF16, .. } if float_inst && all_float => Class::Float,
        InstOp::Cast { from: Kind::I64, to: DType::F32, .. } if float_inst && all_mask => Class::Float,
        // Random bits: the hash of 32-bit integer lanes (positions, and
        // a key read as a float), converted exactly to float32.
        InstOp::Binary(BinaryOp::HashMix, ..) if mask_inst && cls == [Class::Int, Class::Int] => Class::Int,
        // A float truncated to int64 (saturating, NaN to 0), for int64
        // arithmetic after it (T5's log-scaled position buckets).
        InstOp::Cast { from: Kind::F32, to: DType::I64, .. } if one.how == Try::LongArith && plain_i64 && all_float => {
            Class::Long
        }
        InstOp::Cast { from: Kind::F32, to: DType::I64, .. } if mask_inst && all_float => Class::Int,
        InstOp::Cast { from: Kind::I64, to: DType::F32, .. } if float_inst && cls == [Class::Int] => Class::Float,
        // An int64 converted to float32 (a count dividing a sum).
        InstOp::Cast { from: Kind::I64, to: DType::F32, .. } if float_inst && cls == [Class::Long] => Class::Float,
        InstOp::Cast { from: Kind::F32, to: DType::Bool, .. } if mask_inst && all_float => Class::Mask,
        InstOp::Cast { from: Kind::I64, to: DType::Bool, .. } if mask_inst && all_mask => Class::Mask,
        _ => return None,
    };
    Some((class, None, Vec::new()))
}

/// The range of an integer instruction's result over the kernel's
/// ranges, from its operands' (a select's condition is a mask, not a
/// number).
fn int_result(stage: &StagePlan, a: &Analysis, op: &InstOp, ops: &[Def], cls: &[Class]) -> Option<Range> {
    let ranges: Vec<Option<Range>> = ops.iter().map(|d| int::operand_range(stage, a, *d)).collect();
    let cond_ok = !matches!(op, InstOp::Where(..)) || cls.first() == Some(&Class::Mask);
    let ranges: Vec<Option<Range>> = match op {
        InstOp::Where(..) => [None].into_iter().chain(ranges.into_iter().skip(1)).collect(),
        _ => ranges,
    };
    cond_ok.then(|| int::result_range(stage, op, &ranges)).flatten()
}

/// A load's class: float32/bfloat16/bool lanes, an int64 kept whole
/// ([`Class::Long`]) or a lane-varying row id ([`Class::Row`]); its step
/// along the tile and gathered parts are recorded in `a`.
fn classify_load(
    stage: &StagePlan,
    a: &mut Analysis,
    current: &[Option<Def>],
    one: &One,
) -> Option<(Class, Option<Range>, Vec<Def>)> {
    let (i, cls, long) = (one.i, one.cls, one.long);
    let inst = &stage.insts[i];
    let InstOp::Load { index, indirect, mask, dtype, .. } = &inst.op else { return None };
    let is_pre = |r: &Reg| matches!(current[*r as usize], Some(Def::Inst(j)) if a.class[j] == Class::Pre);
    // A lane-varying row id: an integer load no comparison reads.
    let row = gather::row_dtype(*dtype)
        && indirect.is_empty()
        && !long
        && !a.invariant[i]
        && inst.kind == Kind::I64
        && inst.narrow.is_none();
    let parts = gather_parts(stage, a, current, indirect, &is_pre)?;
    let gathered_ok = parts.is_empty() || matches!(dtype, DType::F32 | DType::BF16);
    // A masked load: its mask a compiled one; float32 at an
    // address the executor computes, or lane by lane as a row id
    // or a gather (a `cat` of embedding lookups).
    let masked_ok = mask.is_none()
        || (cls == [Class::Mask] && (row || (*dtype == DType::F32 && (indirect.is_empty() || !parts.is_empty()))));
    if !masked_ok || !gathered_ok || !(matches!(dtype, DType::F32 | DType::BF16 | DType::Bool) || long || row) {
        return None;
    }
    // A computed row id is an operand (after the mask, if any):
    // its value must reach the gather's phase.
    let extra = parts
        .iter()
        .filter_map(|p| match p.row {
            RowSource::Value(k) => Some(Def::Inst(k)),
            RowSource::Load(_) => None,
        })
        .collect();
    a.gathers[i] = parts;
    let step = match one.tile_var {
        Some(v) => index.step(v as u32)?,
        None => 0,
    };
    // Group offsets within an iteration are 32-bit immediates.
    if step.checked_mul(16 * dtype.itemsize() as i64).is_none_or(|b| b.abs() > i64::from(i32::MAX)) {
        return None;
    }
    a.step[i] = step;
    let class = if long {
        Class::Long
    } else if row {
        Class::Row
    } else if inst.kind == Kind::F32 {
        Class::Float
    } else {
        Class::Mask
    };
    Some((class, None, extra))
}

/// A load's lane-varying indirect parts: each must be a checked row id
/// ([`Class::Row`]) or executor-computed ([`Class::Pre`], not listed);
/// `None` for anything else.
fn gather_parts(
    stage: &StagePlan,
    a: &Analysis,
    current: &[Option<Def>],
    indirect: &[(Reg, i64)],
    is_pre: &dyn Fn(&Reg) -> bool,
) -> Option<Vec<GatherPart>> {
    let mut parts = Vec::new();
    for (reg, stride) in indirect {
        if is_pre(reg) {
            continue;
        }
        let Some(Def::Inst(check)) = current[*reg as usize] else { return None };
        let src = checked_load(stage, check)?;
        let InstOp::Bounded { size, negatives, .. } = stage.insts[check].op else { return None };
        if a.class.get(check) != Some(&Class::Row) {
            return None;
        }
        let row = match a.class.get(src) {
            Some(Class::Row) if gather::bounded_row(stage, check, src).is_some() => RowSource::Load(src),
            _ if computed_row(a, src) => RowSource::Value(src),
            _ => return None,
        };
        parts.push(GatherPart { reg: *reg, stride: *stride, row, size, negatives });
    }
    Some(parts)
}

/// Whether instruction `j` is a compiled integer value a gather may take
/// its row ids from, lane by lane: int64 lanes, or 32-bit ones of known
/// range. Not an invariant one: the executor computes that row once
/// (`Try::PreIndex`), and the gather is a vector load.
fn computed_row(a: &Analysis, j: usize) -> bool {
    !a.invariant[j] && (a.class[j] == Class::Long || (a.class[j] == Class::Int && a.range[j].is_some()))
}

/// Whether `op`, an invariant integer instruction, is left to the executor
/// ([`Class::Pre`]): an integer load (its indirect parts executor-computed
/// too), or arithmetic, a select, a cast or a bounds check on such values;
/// with `pre_index`, an index too (a row id computed from positions, as
/// T5's relative-position buckets).
fn pre_inst(stage: &StagePlan, op: &InstOp, is_pre: &dyn Fn(&Reg) -> bool, pre_index: bool) -> bool {
    let int_const = |r: &Reg| stage.consts.iter().any(|(c, _)| c == r) && stage.regs[*r as usize] == Kind::I64;
    match op {
        InstOp::Index(_) => pre_index,
        InstOp::Where(c, x, y) => {
            [c, x, y].iter().any(|r| is_pre(r)) && [c, x, y].into_iter().all(|r| is_pre(r) || int_const(r))
        }
        InstOp::Load { dtype, indirect, mask, .. } => {
            !matches!(dtype, DType::F32 | DType::BF16 | DType::Bool)
                && mask.is_none()
                && indirect.iter().all(|(r, _)| is_pre(r))
        }
        InstOp::Bounded { src, .. } | InstOp::Cast { src, from: Kind::I64, .. } | InstOp::Unary(_, src) => is_pre(src),
        InstOp::Binary(_, x, y) => (is_pre(x) || is_pre(y)) && [x, y].into_iter().all(|r| is_pre(r) || int_const(r)),
        _ => false,
    }
}

/// Whether `op` is int64 arithmetic the JIT runs on [`Class::Long`] lanes:
/// add, subtract, multiply, min, max, negate, or a select by a mask, each
/// operand a compiled int64 value, a 32-bit index (sign-extended) or an
/// integer constant.
fn long_arith(stage: &StagePlan, a: &Analysis, op: &InstOp, ops: &[Def]) -> bool {
    let side = |d: &Def| match d {
        Def::Inst(i) => a.class[*i] == Class::Long || (a.class[*i] == Class::Int && a.range[*i].is_some()),
        Def::Const(r) => int_const(stage, *r).is_some(),
    };
    match op {
        InstOp::Binary(BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Max | BinaryOp::Min, ..)
        | InstOp::Unary(UnaryOp::Neg, _) => ops.iter().all(side),
        InstOp::Where(..) => {
            matches!(ops.first(), Some(Def::Inst(c)) if a.class[*c] == Class::Mask) && ops[1..].iter().all(side)
        }
        _ => false,
    }
}

/// A plain int64 load (no mask, no indirect part), which compiles as
/// [`Class::Long`] when it is compared.
fn long_load(op: &InstOp) -> bool {
    matches!(op, InstOp::Load { dtype: DType::I64, mask: None, indirect, .. } if indirect.is_empty())
}

/// Whether instruction `i`'s value is read by an integer comparison
/// (before its register is written again).
fn compared(stage: &StagePlan, i: usize) -> bool {
    let dst = stage.insts[i].dst;
    for inst in &stage.insts[i + 1..] {
        if let InstOp::Binary(op, x, y) = &inst.op {
            if int_cc(*op).is_some() && (*x == dst || *y == dst) {
                return true;
            }
        }
        if inst.dst == dst {
            return false;
        }
    }
    false
}

/// Whether register `r` holds, at the end of the stage, a value a
/// [`Class::Pre`] instruction wrote (the last instruction writing it).
fn pre_register(stage: &StagePlan, a: &Analysis, r: Reg) -> bool {
    stage.insts.iter().rposition(|inst| inst.dst == r).is_some_and(|i| a.class[i] == Class::Pre)
}

/// A stage the JIT can compile: its analysis, and its compiled loads in
/// instruction order.
pub(super) struct Supported {
    pub analysis: Analysis,
    pub loads: Vec<JitLoad>,
    /// See `JitStage::scatter_rows`.
    pub scatter_rows: Vec<usize>,
}

pub(super) fn supported(stage: &StagePlan, tile_var: Option<usize>, extents: &[i64]) -> Option<Supported> {
    // An invariant index stays a compiled lane value where it can (a causal
    // mask compares it with a varying one); only a stage that does not
    // compile so tries it as the executor's (feeding a gather's row).
    let analysis = [Try::Plain, Try::PreIndex, Try::LongArith]
        .into_iter()
        .find_map(|how| analyse(stage, tile_var, extents, how))?;
    // A scatter's store stays with the executor (its value is the compiled
    // function's output): its indirect index is the same on every lane, an
    // executor-computed instruction (an `index_add`'s row), or a checked row
    // id the executor reads after the call (a max pool's backward).
    let scatter_rows = scatter_rows(stage, &analysis)?;
    let loads = stage
        .insts
        .iter()
        .enumerate()
        .filter(|(i, _)| analysis.class[*i] != Class::Pre)
        .filter_map(|(i, inst)| {
            let pre_before = analysis.class[..i].iter().filter(|c| **c == Class::Pre).count();
            match &inst.op {
                InstOp::Load { buf, index, dtype, indirect, .. } => Some(JitLoad {
                    buf: Some(*buf),
                    index: index.clone(),
                    size: dtype.itemsize() as i64,
                    // The executor adds its own parts; the function the rows.
                    indirect: indirect
                        .iter()
                        .filter(|(r, s)| !analysis.gathers[i].iter().any(|p| p.reg == *r && p.stride == *s))
                        .copied()
                        .collect(),
                    pre_before,
                }),
                InstOp::Index(index) => {
                    Some(JitLoad { buf: None, index: index.clone(), size: 1, indirect: Vec::new(), pre_before })
                }
                _ => None,
            }
        })
        .collect();
    Some(Supported { analysis, loads, scatter_rows })
}

/// The instruction whose value bounds check `check` reads: the last
/// writer of its register before it (registers are reused: two row ids
/// may share one).
fn checked_load(stage: &StagePlan, check: usize) -> Option<usize> {
    let InstOp::Bounded { src, .. } = &stage.insts[check].op else { return None };
    stage.insts[..check].iter().rposition(|inst| inst.dst == *src)
}

/// The instructions that compute a scatter's lane-varying row ids (each a
/// [`Class::Row`] load and its bounds check, which nothing compiled reads),
/// for the executor to run over the tile after the call; `None` when some
/// indirect part of the store is neither that nor executor-computed.
fn scatter_rows(stage: &StagePlan, a: &Analysis) -> Option<Vec<usize>> {
    let mut rows = Vec::new();
    for (r, _) in &stage.store_indirect {
        if pre_register(stage, a, *r) {
            continue;
        }
        let check = stage.insts.iter().rposition(|inst| inst.dst == *r)?;
        let load = checked_load(stage, check)?;
        if a.class[check] != Class::Row || a.class[load] != Class::Row {
            return None;
        }
        rows.extend([load, check]);
    }
    // Run after the call, they must not overwrite the value it leaves.
    if rows.iter().any(|&k| stage.insts[k].dst == stage.value) {
        return None;
    }
    rows.sort_unstable();
    rows.dedup();
    Some(rows)
}

/// Whether an index stays within 32 bits over `extents` (with room for a
/// tile's lanes), as compiled integer lanes hold it. Its non-affine part
/// (`i // 2`, `i % 2`) must not vary along the tile (the caller checks
/// that it has a step): the executor passes its value at the first lane.
fn fits_i32(index: &IndexFn, extents: &[i64]) -> bool {
    let room: Vec<i64> = extents.iter().map(|n| n.saturating_add(TILE as i64)).collect();
    int::index_range(index, &room).is_some()
}

/// The integer comparison of a comparison op.
pub(super) fn int_cc(op: BinaryOp) -> Option<IntCC> {
    Some(match op {
        BinaryOp::Eq => IntCC::Equal,
        BinaryOp::Ne => IntCC::NotEqual,
        BinaryOp::Lt => IntCC::SignedLessThan,
        BinaryOp::Le => IntCC::SignedLessThanOrEqual,
        BinaryOp::Gt => IntCC::SignedGreaterThan,
        BinaryOp::Ge => IntCC::SignedGreaterThanOrEqual,
        _ => return None,
    })
}

/// An operand an integer comparison can take: a compiled index or int64
/// load, or an integer constant that fits in 32 bits.
fn int_operand(stage: &StagePlan, a: &Analysis, d: Option<Def>) -> bool {
    match d {
        Some(Def::Inst(i)) => matches!(a.class.get(i), Some(Class::Int | Class::Long)),
        Some(Def::Const(r)) => int_const(stage, r).is_some(),
        None => false,
    }
}

pub(super) fn int_const(stage: &StagePlan, r: Reg) -> Option<i32> {
    stage.consts.iter().find_map(|(reg, op)| match op {
        InstOp::ConstI(v) if *reg == r => i32::try_from(*v).ok(),
        _ => None,
    })
}

/// Whether instruction `k` has an inline form (`Jit::Inline` in
/// `rdyn_ir::ops`). Transcendentals do not: at four lanes (about 110
/// instructions per 4 lanes for erf) they lose to the interpreter's 8-lane
/// AVX2 tile loops, measured 2x on gelu.
pub(super) fn inline_op(stage: &StagePlan, op: &InstOp) -> bool {
    match op {
        InstOp::Unary(op, _) => op.info().jit == Jit::Inline,
        InstOp::Binary(op, _, y) => op.info().jit == Jit::Inline || (*op == BinaryOp::Pow && square(stage, *y)),
        _ => true,
    }
}

/// Whether register `y` is the constant 2 (x² is exactly rounded either way).
fn square(stage: &StagePlan, y: Reg) -> bool {
    stage.consts.iter().any(|(r, c)| *r == y && matches!(c, InstOp::ConstF(v) if *v == 2.0))
}
