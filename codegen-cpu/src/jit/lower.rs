//! One stage's register program → one Cranelift function.
//!
//! Registers are reused by the planner, so each instruction's operands are
//! first resolved to the instruction (or constant) that last wrote them;
//! the function is then SSA over those definitions. Definitions that do not
//! change along the tile are emitted once before the loops.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Linkage, Module};
use rdyn_ir::loops::{BinaryOp, BufId, UnaryOp};
use rdyn_ir::{DType, Kind};

use super::emit::Em;
use crate::plan::{IndexFn, InstOp, Reg, StagePlan};

/// What a definition holds in the compiled code.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Float,
    Mask,
}

/// Where an operand's value comes from.
#[derive(Clone, Copy)]
enum Def {
    Const(Reg),
    Inst(usize),
}

pub(super) struct Analysis {
    /// Per instruction: its operands' definitions.
    operands: Vec<Vec<Def>>,
    class: Vec<Class>,
    invariant: Vec<bool>,
    /// Per instruction: the load's step along the tile (loads only).
    step: Vec<i64>,
    value: Def,
}

fn operand_regs(op: &InstOp) -> Vec<Reg> {
    match op {
        InstOp::Unary(_, x) => vec![*x],
        InstOp::Binary(_, a, b) => vec![*a, *b],
        InstOp::Where(c, a, b) => vec![*c, *a, *b],
        InstOp::Cast { src, .. } => vec![*src],
        _ => Vec::new(),
    }
}

fn analyse(stage: &StagePlan, tile_var: Option<usize>) -> Option<Analysis> {
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
        invariant: Vec::with_capacity(n),
        step: vec![0; n],
        value: Def::Const(0),
    };
    let class_of = |a: &Analysis, d: Def| match d {
        Def::Const(r) => const_class[r as usize],
        Def::Inst(i) => Some(a.class[i]),
    };
    let inv_of = |a: &Analysis, d: Def| match d {
        Def::Const(_) => true,
        Def::Inst(i) => a.invariant[i],
    };
    for (i, inst) in stage.insts.iter().enumerate() {
        let ops: Vec<Def> = operand_regs(&inst.op).iter().map(|r| current[*r as usize]).collect::<Option<Vec<_>>>()?;
        let cls: Vec<Class> = ops.iter().map(|d| class_of(&a, *d)).collect::<Option<_>>()?;
        let all_float = cls.iter().all(|c| *c == Class::Float);
        let all_mask = cls.iter().all(|c| *c == Class::Mask);
        let float_inst = inst.kind == Kind::F32 && inst.narrow.is_none();
        let mask_inst = inst.kind == Kind::I64 && matches!(inst.narrow, None | Some(DType::Bool));
        let (class, mut invariant) = match &inst.op {
            InstOp::Load { index, indirect, mask, dtype, .. } => {
                if !indirect.is_empty() || mask.is_some() || !matches!(dtype, DType::F32 | DType::Bool) {
                    return None;
                }
                let step = match tile_var {
                    Some(v) => index.step(v as u32)?,
                    None => 0,
                };
                a.step[i] = step;
                let class = if inst.kind == Kind::F32 { Class::Float } else { Class::Mask };
                (class, step == 0)
            }
            InstOp::ConstF(_) if float_inst => (Class::Float, true),
            InstOp::ConstI(_) if mask_inst => (Class::Mask, true),
            InstOp::Unary(UnaryOp::Not, _) if mask_inst && all_mask => (Class::Mask, false),
            InstOp::Unary(..) if float_inst && all_float => (Class::Float, false),
            InstOp::Binary(BinaryOp::And | BinaryOp::Or | BinaryOp::Xor, ..) if mask_inst && all_mask => {
                (Class::Mask, false)
            }
            InstOp::Binary(..) if float_inst && all_float => (Class::Float, false),
            InstOp::Where(..) if float_inst && cls == [Class::Mask, Class::Float, Class::Float] => {
                (Class::Float, false)
            }
            InstOp::Cast { from: Kind::F32, to: DType::F32, .. } if float_inst && all_float => (Class::Float, false),
            InstOp::Cast { from: Kind::I64, to: DType::F32, .. } if float_inst && all_mask => (Class::Float, false),
            InstOp::Cast { from: Kind::F32, to: DType::Bool, .. } if mask_inst && all_float => (Class::Mask, false),
            InstOp::Cast { from: Kind::I64, to: DType::Bool, .. } if mask_inst && all_mask => (Class::Mask, false),
            _ => return None,
        };
        if !matches!(inst.op, InstOp::Load { .. } | InstOp::ConstF(_) | InstOp::ConstI(_)) {
            invariant = ops.iter().all(|d| inv_of(&a, *d));
        }
        if class == Class::Float && !inline_op(stage, &inst.op) {
            return None;
        }
        a.operands.push(ops);
        a.class.push(class);
        a.invariant.push(invariant);
        current[inst.dst as usize] = Some(Def::Inst(i));
    }
    a.value = current[stage.value as usize]?;
    (stage.value_kind == Kind::F32 && class_of(&a, a.value) == Some(Class::Float)).then_some(a)
}

/// A stage the JIT can compile: its analysis, and its loads (buffer,
/// index, element size) in instruction order.
pub(super) struct Supported {
    analysis: Analysis,
    pub loads: Vec<(BufId, IndexFn, i64)>,
}

pub(super) fn supported(stage: &StagePlan, tile_var: Option<usize>) -> Option<Supported> {
    if !stage.store_indirect.is_empty() {
        return None;
    }
    let analysis = analyse(stage, tile_var)?;
    let loads = stage
        .insts
        .iter()
        .filter_map(|inst| match &inst.op {
            InstOp::Load { buf, index, dtype, .. } => Some((*buf, index.clone(), dtype.itemsize() as i64)),
            _ => None,
        })
        .collect();
    Some(Supported { analysis, loads })
}

/// Values of definitions at one width.
#[derive(Clone)]
struct Env {
    consts: Vec<Option<Value>>,
    insts: Vec<Option<Value>>,
}

impl Env {
    fn get(&self, d: Def) -> Option<Value> {
        match d {
            Def::Const(r) => self.consts[r as usize],
            Def::Inst(i) => self.insts[i],
        }
    }
}

/// `out_step`: elements between consecutive lanes of the output (1 for the
/// value register; the store index's step when the stage stores itself).
pub(super) fn compile_stage(
    module: &mut JITModule,
    stage: &StagePlan,
    supported: &Supported,
    out_step: i64,
    name: &str,
) -> Result<FuncId, String> {
    let a = &supported.analysis;
    let ptr = types::I64;
    let mut ctx = module.make_context();
    ctx.func.signature.params.extend([AbiParam::new(ptr), AbiParam::new(ptr), AbiParam::new(types::I64)]);
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);

    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let (addrs, out, len) = (b.block_params(entry)[0], b.block_params(entry)[1], b.block_params(entry)[2]);
    // Load addresses, in load order.
    let mut load_addr = vec![None; stage.insts.len()];
    let mut slot = 0;
    for (i, inst) in stage.insts.iter().enumerate() {
        if matches!(inst.op, InstOp::Load { .. }) {
            load_addr[i] = Some(b.ins().load(ptr, MemFlagsData::trusted(), addrs, 8 * slot));
            slot += 1;
        }
    }
    // Invariants: once, as scalars, then splatted for the 4-lane loops.
    let mut scalar = Env { consts: vec![None; stage.regs.len()], insts: vec![None; stage.insts.len()] };
    let mut wide = scalar.clone();
    {
        let mut em = Em { b: &mut b, wide: false };
        for (reg, op) in &stage.consts {
            let v = match op {
                InstOp::ConstF(x) => em.fc(*x as f32),
                InstOp::ConstI(x) => em.ic(if *x != 0 { -1 } else { 0 }),
                _ => continue,
            };
            scalar.consts[*reg as usize] = Some(v);
        }
    }
    let zero = b.ins().iconst(types::I64, 0);
    let invariant: Vec<usize> = (0..stage.insts.len()).filter(|&i| a.invariant[i]).collect();
    let mut envs = vec![scalar];
    emit_insts(&mut b, stage, a, &invariant, &mut envs, false, &[zero], &load_addr)?;
    let scalar = envs.pop().ok_or("no environment")?;
    {
        let mut em = Em { b: &mut b, wide: true };
        for (k, v) in scalar.consts.iter().enumerate() {
            wide.consts[k] = v.map(|v| em.widen(v));
        }
        for (k, v) in scalar.insts.iter().enumerate() {
            wide.insts[k] = v.map(|v| em.widen(v));
        }
    }
    let varying: Vec<usize> = (0..stage.insts.len()).filter(|&i| !a.invariant[i]).collect();
    // for (i = 0; i + 16 <= len; i += 16) { four 4-lane groups, interleaved }
    // for (; i + 4 <= len; i += 4) { one group }
    // for (; i < len; i += 1) { one lane }
    // Interleaving gives the core independent chains to overlap.
    let mut i = zero;
    for (groups, wide_loop) in [(4i64, true), (1, true), (1, false)] {
        let step = if wide_loop { 4 * groups } else { 1 };
        let head = b.create_block();
        let blk = b.create_block();
        let after = b.create_block();
        b.append_block_param(head, types::I64);
        b.append_block_param(after, types::I64);
        b.ins().jump(head, &[i.into()]);
        b.switch_to_block(head);
        let at = b.block_params(head)[0];
        let next = b.ins().iadd_imm_s(at, step);
        let fits = b.ins().icmp(IntCC::SignedLessThanOrEqual, next, len);
        b.ins().brif(fits, blk, &[], after, &[at.into()]);
        b.switch_to_block(blk);
        b.seal_block(blk);
        let lanes: Vec<Value> = (0..groups).map(|g| if g == 0 { at } else { b.ins().iadd_imm_s(at, 4 * g) }).collect();
        let base = if wide_loop { &wide } else { &scalar };
        let mut envs = vec![base.clone(); groups as usize];
        emit_insts(&mut b, stage, a, &varying, &mut envs, wide_loop, &lanes, &load_addr)?;
        for (env, lane) in envs.iter().zip(&lanes) {
            let v = env.get(a.value).ok_or("stage value undefined")?;
            let off = b.ins().imul_imm_s(*lane, 4 * out_step);
            let p = b.ins().iadd(out, off);
            if !wide_loop || out_step == 1 {
                b.ins().store(MemFlagsData::new().with_notrap(), v, p, 0);
            } else {
                for l in 0..4u8 {
                    let x = b.ins().extractlane(v, l);
                    b.ins().store(MemFlagsData::trusted(), x, p, (4 * out_step * i64::from(l)) as i32);
                }
            }
        }
        b.ins().jump(head, &[next.into()]);
        b.seal_block(head);
        b.switch_to_block(after);
        b.seal_block(after);
        i = b.block_params(after)[0];
    }
    b.ins().return_(&[]);
    b.finalize(module.target_config());

    let id = module.declare_function(name, Linkage::Local, &ctx.func.signature).map_err(|e| e.to_string())?;
    module.define_function(id, &mut ctx).map_err(|e| e.to_string())?;
    module.clear_context(&mut ctx);
    Ok(id)
}

/// Emit instructions `which` for every group (one environment and lane
/// offset per group), instruction by instruction across the groups.
#[allow(clippy::too_many_arguments)]
fn emit_insts(
    b: &mut FunctionBuilder,
    stage: &StagePlan,
    a: &Analysis,
    which: &[usize],
    envs: &mut [Env],
    wide: bool,
    lanes: &[Value],
    load_addr: &[Option<Value>],
) -> Result<(), String> {
    for &k in which {
        let args: Vec<Vec<Value>> = envs
            .iter()
            .map(|env| a.operands[k].iter().map(|d| env.get(*d)).collect::<Option<Vec<_>>>())
            .collect::<Option<Vec<_>>>()
            .ok_or("operand undefined")?;
        let mut em = Em { b, wide };
        let results: Vec<Value> = args
            .iter()
            .zip(lanes)
            .map(|(ops, lane)| inst_value(&mut em, stage, a, k, ops, load_addr[k], *lane))
            .collect::<Result<_, _>>()?;
        for (env, v) in envs.iter_mut().zip(results) {
            env.insts[k] = Some(v);
        }
    }
    Ok(())
}

/// Whether instruction `k` has an inline form. Transcendentals do not: at
/// four lanes they lose to the interpreter's AVX2 tile loops.
fn inline_op(stage: &StagePlan, op: &InstOp) -> bool {
    match op {
        InstOp::Unary(op, _) => matches!(
            op,
            UnaryOp::Neg
                | UnaryOp::Abs
                | UnaryOp::Sqrt
                | UnaryOp::Rsqrt
                | UnaryOp::Reciprocal
                | UnaryOp::Floor
                | UnaryOp::Ceil
                | UnaryOp::Trunc
                | UnaryOp::Round
                | UnaryOp::IsNan
                | UnaryOp::Not
        ),
        InstOp::Binary(op, _, y) => {
            matches!(
                op,
                BinaryOp::Add
                    | BinaryOp::Sub
                    | BinaryOp::Mul
                    | BinaryOp::Div
                    | BinaryOp::Max
                    | BinaryOp::Min
                    | BinaryOp::Eq
                    | BinaryOp::Ne
                    | BinaryOp::Lt
                    | BinaryOp::Le
                    | BinaryOp::Gt
                    | BinaryOp::Ge
            ) || (*op == BinaryOp::Pow && square(stage, *y))
        }
        _ => true,
    }
}

/// Whether register `y` is the constant 2 (x² is exactly rounded either way).
fn square(stage: &StagePlan, y: Reg) -> bool {
    stage.consts.iter().any(|(r, c)| *r == y && matches!(c, InstOp::ConstF(v) if *v == 2.0))
}

/// Emit inline instruction `k` for one group.
fn inst_value(
    em: &mut Em,
    stage: &StagePlan,
    a: &Analysis,
    k: usize,
    ops: &[Value],
    addr: Option<Value>,
    lane: Value,
) -> Result<Value, String> {
    let inst = &stage.insts[k];
    Ok(match &inst.op {
        InstOp::Load { dtype, .. } => {
            let addr = addr.ok_or("load without address")?;
            load(em, addr, lane, a.step[k], *dtype)
        }
        InstOp::ConstF(x) => em.fc(*x as f32),
        InstOp::ConstI(x) => em.ic(if *x != 0 { -1 } else { 0 }),
        InstOp::Unary(_, _) if a.class[k] == Class::Mask => em.b.ins().bnot(ops[0]),
        InstOp::Unary(op, _) => unary(em, *op, ops[0]),
        InstOp::Binary(op, _, _) if a.class[k] == Class::Mask => match op {
            BinaryOp::And => em.b.ins().band(ops[0], ops[1]),
            BinaryOp::Or => em.b.ins().bor(ops[0], ops[1]),
            _ => em.b.ins().bxor(ops[0], ops[1]),
        },
        InstOp::Binary(op, _, _) => binary(em, *op, ops[0], ops[1]),
        InstOp::Where(..) => em.sel(ops[0], ops[1], ops[2]),
        InstOp::Cast { from: Kind::I64, to: DType::F32, .. } => em.one_if(ops[0]),
        InstOp::Cast { from: Kind::F32, to: DType::Bool, .. } => em.truthy(ops[0]),
        InstOp::Cast { .. } => ops[0],
        _ => return Err("unsupported instruction".into()),
    })
}

fn load(em: &mut Em, addr: Value, lane: Value, step: i64, dtype: DType) -> Value {
    let size = dtype.itemsize() as i64;
    let off = em.b.ins().imul_imm_s(lane, step * size);
    let p = em.b.ins().iadd(addr, off);
    let flags = MemFlagsData::trusted();
    let one = |em: &mut Em, at: i32| -> Value {
        if dtype == DType::Bool {
            let byte = em.b.ins().uload8(types::I32, flags, p, at);
            let c = em.b.ins().icmp_imm_s(IntCC::NotEqual, byte, 0);
            em.b.ins().bmask(types::I32, c)
        } else {
            em.b.ins().load(types::F32, flags, p, at)
        }
    };
    if !em.wide || step == 0 {
        let v = one(em, 0);
        return em.widen(v);
    }
    if dtype == DType::F32 && step == 1 {
        // Tiles start anywhere in a row: an unaligned 16-byte load.
        return em.b.ins().load(types::F32X4, MemFlagsData::new().with_notrap(), p, 0);
    }
    let ty = if dtype == DType::Bool { types::I32X4 } else { types::F32X4 };
    let first = one(em, 0);
    let mut v = em.b.ins().scalar_to_vector(ty, first);
    for l in 1..4u8 {
        let x = one(em, (step * size * i64::from(l)) as i32);
        v = em.b.ins().insertlane(v, x, l);
    }
    v
}

fn unary(em: &mut Em, op: UnaryOp, x: Value) -> Value {
    match op {
        UnaryOp::Neg => em.b.ins().fneg(x),
        UnaryOp::Abs => em.b.ins().fabs(x),
        UnaryOp::Sqrt => em.b.ins().sqrt(x),
        UnaryOp::Rsqrt => {
            let s = em.b.ins().sqrt(x);
            let one = em.fc(1.0);
            em.div(one, s)
        }
        UnaryOp::Reciprocal => {
            let one = em.fc(1.0);
            em.div(one, x)
        }
        UnaryOp::Floor => em.b.ins().floor(x),
        UnaryOp::Ceil => em.b.ins().ceil(x),
        UnaryOp::Trunc => em.b.ins().trunc(x),
        UnaryOp::Round => em.b.ins().nearest(x),
        UnaryOp::IsNan => {
            let m = em.is_nan(x);
            em.one_if(m)
        }
        // `Not` (nothing else passes `inline`).
        _ => {
            let m = em.cmpc(FloatCC::Equal, x, 0.0);
            em.one_if(m)
        }
    }
}

fn binary(em: &mut Em, op: BinaryOp, x: Value, y: Value) -> Value {
    let cc = match op {
        BinaryOp::Add => return em.add(x, y),
        BinaryOp::Sub => return em.sub(x, y),
        BinaryOp::Mul | BinaryOp::Pow => return if op == BinaryOp::Mul { em.mul(x, y) } else { em.mul(x, x) },
        BinaryOp::Div => return em.div(x, y),
        // NaN-propagating, and `y` on ties, as the interpreter.
        BinaryOp::Max | BinaryOp::Min => {
            let cc = if op == BinaryOp::Max { FloatCC::GreaterThan } else { FloatCC::LessThan };
            let nan = em.is_nan(x);
            let better = em.cmp(cc, x, y);
            let m = em.b.ins().bor(nan, better);
            return em.sel(m, x, y);
        }
        BinaryOp::Eq => FloatCC::Equal,
        BinaryOp::Ne => FloatCC::NotEqual,
        BinaryOp::Lt => FloatCC::LessThan,
        BinaryOp::Le => FloatCC::LessThanOrEqual,
        BinaryOp::Gt => FloatCC::GreaterThan,
        // `Ge` (nothing else passes `inline`).
        _ => FloatCC::GreaterThanOrEqual,
    };
    let m = em.cmp(cc, x, y);
    em.one_if(m)
}
