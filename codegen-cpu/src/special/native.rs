//! The functions of `rdyn_ir::special` as machine code: each body
//! translated to one Cranelift function, `extern "C" fn(f64, …) -> f64`,
//! compiled on first use and kept for the life of the process.
//!
//! The translation is statement for statement: registers and flags become
//! Cranelift variables, `If` and `Loop` become blocks, `Return` a return,
//! and every arithmetic statement one exactly rounded instruction in the
//! evaluator's order (a multiply-add only where the body says `fma`, no
//! reassociation). The
//! library functions (`exp`, `log`, `sin`, `cos`, `sinh`, `cosh`, `erfc`,
//! `pow`) are calls of the very Rust routines [`rdyn_ir::special::eval`] uses, so compiled
//! code and evaluator agree bit for bit (up to a NaN's sign and payload;
//! `native_tests.rs` checks).
//!
//! Where Cranelift is unavailable (`RDYN_JIT=0`, a host without SSE4.1) or
//! fails on a body, the function is evaluated instead ([`call`]).
//! `RDYN_JIT_DISASM=1` prints each compiled function's machine code.

use std::sync::OnceLock;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, AbiParam, Block, FuncRef, InstBuilder, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module};
use rdyn_ir::special::{Binary, Cmp, Logic, Special, SpecialFn, Stmt, Unary};

/// `f(args)` for a function of `rdyn_ir::special`: its compiled code, or
/// the evaluator where it has none. Arguments past the function's
/// parameters are ignored; missing ones read as NaN (as [`Special::eval`]).
#[inline]
pub fn call(which: Special, args: [f64; 2]) -> f64 {
    match code(which) {
        Some(Native::One(f)) => f(args[0]),
        Some(Native::Two(f)) => f(args[0], args[1]),
        None => which.eval(&args),
    }
}

/// Compiled code of one arity.
#[derive(Copy, Clone)]
pub enum Native {
    One(extern "C" fn(f64) -> f64),
    Two(extern "C" fn(f64, f64) -> f64),
}

/// The compiled code of `which`, compiled on first use; `None` where
/// Cranelift is off or failed on it.
pub fn code(which: Special) -> Option<Native> {
    static CODE: [OnceLock<Option<Native>>; Special::ALL.len()] = [const { OnceLock::new() }; Special::ALL.len()];
    *CODE[which as usize].get_or_init(|| compile(which.body()).ok())
}

/// A float64 library routine compiled bodies call.
type Routine = extern "C" fn(f64) -> f64;

/// The library routines compiled bodies call, by symbol: the evaluator's.
const LIBRARY: [(Unary, &str, Routine); 12] = [
    (Unary::Exp, "rdyn_special_exp", exp),
    (Unary::Log, "rdyn_special_log", log),
    (Unary::Sin, "rdyn_special_sin", sin),
    (Unary::Cos, "rdyn_special_cos", cos),
    (Unary::Sinh, "rdyn_special_sinh", sinh),
    (Unary::Cosh, "rdyn_special_cosh", cosh),
    (Unary::Erfc, "rdyn_special_erfc", erfc),
    (Unary::Log1p, "rdyn_special_log1p", log1p),
    (Unary::Expm1, "rdyn_special_expm1", expm1),
    (Unary::Lgamma, "rdyn_special_lgamma", lgamma),
    (Unary::Tgamma, "rdyn_special_tgamma", tgamma),
    (Unary::Acos, "rdyn_special_acos", acos),
];

extern "C" fn acos(x: f64) -> f64 {
    x.acos()
}
extern "C" fn lgamma(x: f64) -> f64 {
    libm::lgamma(x)
}
extern "C" fn tgamma(x: f64) -> f64 {
    libm::tgamma(x)
}
extern "C" fn log1p(x: f64) -> f64 {
    x.ln_1p()
}
extern "C" fn expm1(x: f64) -> f64 {
    x.exp_m1()
}
extern "C" fn exp(x: f64) -> f64 {
    x.exp()
}
extern "C" fn log(x: f64) -> f64 {
    x.ln()
}
extern "C" fn sin(x: f64) -> f64 {
    x.sin()
}
extern "C" fn cos(x: f64) -> f64 {
    x.cos()
}
extern "C" fn sinh(x: f64) -> f64 {
    x.sinh()
}
extern "C" fn cosh(x: f64) -> f64 {
    x.cosh()
}
extern "C" fn erfc(x: f64) -> f64 {
    libm::erfc(x)
}

/// `Binary::Pow`'s routine, by symbol.
const POW: &str = "rdyn_special_pow";

extern "C" fn pow(a: f64, b: f64) -> f64 {
    a.powf(b)
}

/// One body as machine code. The module is leaked: the code lives as long
/// as the process, like the `OnceLock` that holds its address.
pub(super) fn compile(f: &SpecialFn) -> Result<Native, String> {
    if !crate::jit::target::enabled() {
        return Err("Cranelift is off".into());
    }
    let isa = crate::jit::target::isa().ok_or("no Cranelift target")?;
    let arity = f.params.len();
    if !(1..=2).contains(&arity) {
        return Err(format!("{} has {arity} parameters", f.name));
    }
    let mut jb = JITBuilder::with_isa(isa.clone(), cranelift_module::default_libcall_names());
    for (_, name, routine) in LIBRARY {
        jb.symbol(name, routine as *const u8);
    }
    jb.symbol(POW, pow as extern "C" fn(f64, f64) -> f64 as *const u8);
    let mut module = JITModule::new(jb);
    let mut ctx = module.make_context();
    ctx.func.signature.params.extend(vec![AbiParam::new(types::F64); arity]);
    ctx.func.signature.returns.push(AbiParam::new(types::F64));
    let id = module
        // Not `rdyn_special_*`: the library routines' symbols (a body named
        // like one, `lgamma`, would call itself).
        .declare_function(&format!("rdyn_body_{}", f.name), Linkage::Local, &ctx.func.signature)
        .map_err(|e| e.to_string())?;
    let mut library = Vec::new();
    for (op, name, _) in LIBRARY {
        let mut sig = module.make_signature();
        sig.params.push(AbiParam::new(types::F64));
        sig.returns.push(AbiParam::new(types::F64));
        let callee = module.declare_function(name, Linkage::Import, &sig).map_err(|e| e.to_string())?;
        library.push((op, module.declare_func_in_func(callee, &mut ctx.func)));
    }
    let mut sig = module.make_signature();
    sig.params.extend([AbiParam::new(types::F64), AbiParam::new(types::F64)]);
    sig.returns.push(AbiParam::new(types::F64));
    let callee = module.declare_function(POW, Linkage::Import, &sig).map_err(|e| e.to_string())?;
    let pow = module.declare_func_in_func(callee, &mut ctx.func);
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
    Translator::new(&mut b, f, library, pow).function(f);
    b.seal_all_blocks();
    b.finalize(module.target_config());
    let disasm = std::env::var_os("RDYN_JIT_DISASM").is_some();
    ctx.set_disasm(disasm);
    module.define_function(id, &mut ctx).map_err(|e| format!("{e:?}"))?;
    if let Some(code) = ctx.compiled_code().and_then(|c| c.vcode.as_ref()).filter(|_| disasm) {
        eprintln!("[special {}]\n{code}", f.name);
    }
    module.clear_context(&mut ctx);
    module.finalize_definitions().map_err(|e| e.to_string())?;
    let ptr = module.get_finalized_function(id);
    // Never freed: the code is called for the rest of the process.
    std::mem::forget(module);
    // SAFETY: the function was built just above with `arity` float64
    // parameters and one float64 return, the platform's calling convention.
    Ok(unsafe {
        if arity == 1 {
            Native::One(std::mem::transmute::<*const u8, extern "C" fn(f64) -> f64>(ptr))
        } else {
            Native::Two(std::mem::transmute::<*const u8, extern "C" fn(f64, f64) -> f64>(ptr))
        }
    })
}

/// Where a block of statements leaves control.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Flow {
    /// Falls through to what follows.
    Next,
    /// Ended in `return` (what follows is unreachable).
    Returned,
}

struct Translator<'a, 'b> {
    b: &'a mut FunctionBuilder<'b>,
    regs: Vec<Variable>,
    flags: Vec<Variable>,
    /// The constant of each constant register.
    consts: Vec<Option<f64>>,
    library: Vec<(Unary, FuncRef)>,
    pow: FuncRef,
    /// Exit blocks of the open loops, innermost last.
    exits: Vec<Block>,
}

impl<'a, 'b> Translator<'a, 'b> {
    fn new(b: &'a mut FunctionBuilder<'b>, f: &SpecialFn, library: Vec<(Unary, FuncRef)>, pow: FuncRef) -> Self {
        let regs = (0..f.regs).map(|_| b.declare_var(types::F64)).collect();
        let flags = (0..f.flags).map(|_| b.declare_var(types::I8)).collect();
        let mut consts = vec![None; f.regs as usize];
        for &(r, v) in &f.consts {
            if let Some(slot) = consts.get_mut(r.0 as usize) {
                *slot = Some(v);
            }
        }
        Translator { b, regs, flags, consts, library, pow, exits: Vec::new() }
    }

    /// The whole function: registers start at 0 and flags false, as the
    /// evaluator's; a body that falls off its end returns NaN.
    fn function(&mut self, f: &SpecialFn) {
        let entry = self.b.create_block();
        self.b.append_block_params_for_function_params(entry);
        self.b.switch_to_block(entry);
        let params = self.b.block_params(entry).to_vec();
        let (zero, no) = (self.b.ins().f64const(0.0), self.b.ins().iconst(types::I8, 0));
        for &r in &self.regs {
            self.b.def_var(r, zero);
        }
        for &p in &self.flags {
            self.b.def_var(p, no);
        }
        for (reg, value) in f.params.iter().zip(params) {
            self.def(reg.0, value);
        }
        if self.block(&f.body) == Flow::Next {
            let nan = self.b.ins().f64const(f64::NAN);
            self.b.ins().return_(&[nan]);
        }
    }

    fn reg(&mut self, r: u32) -> Value {
        match self.consts.get(r as usize).copied().flatten() {
            Some(v) => self.b.ins().f64const(v),
            None => self.b.use_var(self.regs[r as usize]),
        }
    }

    fn def(&mut self, r: u32, v: Value) {
        self.b.def_var(self.regs[r as usize], v);
    }

    fn flag(&mut self, p: u32) -> Value {
        self.b.use_var(self.flags[p as usize])
    }

    fn block(&mut self, stmts: &[Stmt]) -> Flow {
        for s in stmts {
            if self.stmt(s) == Flow::Returned {
                return Flow::Returned;
            }
        }
        Flow::Next
    }

    fn stmt(&mut self, s: &Stmt) -> Flow {
        match s {
            Stmt::Copy { dst, src } => {
                let v = self.reg(src.0);
                self.def(dst.0, v);
            }
            Stmt::Unary { dst, op, a } => {
                let a = self.reg(a.0);
                let v = self.unary(*op, a);
                self.def(dst.0, v);
            }
            Stmt::Binary { dst, op, a, b } => {
                let (a, b) = (self.reg(a.0), self.reg(b.0));
                let v = self.binary(*op, a, b);
                self.def(dst.0, v);
            }
            Stmt::Fma { dst, a, b, c } => {
                let (a, b, c) = (self.reg(a.0), self.reg(b.0), self.reg(c.0));
                let v = self.b.ins().fma(a, b, c);
                self.def(dst.0, v);
            }
            Stmt::Poly { dst, coeffs, z } => {
                let z = self.reg(z.0);
                let mut acc = self.b.ins().f64const(0.0);
                for &c in coeffs.iter() {
                    let c = self.b.ins().f64const(c);
                    let m = self.b.ins().fmul(acc, z);
                    acc = self.b.ins().fadd(m, c);
                }
                self.def(dst.0, acc);
            }
            Stmt::Cmp { dst, op, a, b } => {
                let (a, b) = (self.reg(a.0), self.reg(b.0));
                let v = self.b.ins().fcmp(float_cc(*op), a, b);
                self.b.def_var(self.flags[dst.0 as usize], v);
            }
            Stmt::Logic { dst, op, a, b } => {
                let (a, b) = (self.flag(a.0), self.flag(b.0));
                let v = match op {
                    Logic::And => self.b.ins().band(a, b),
                    Logic::Or => self.b.ins().bor(a, b),
                };
                self.b.def_var(self.flags[dst.0 as usize], v);
            }
            Stmt::Not { dst, a } => {
                let a = self.flag(a.0);
                let v = self.b.ins().bxor_imm_u(a, 1);
                self.b.def_var(self.flags[dst.0 as usize], v);
            }
            Stmt::Select { dst, cond, a, b } => {
                let (c, a, b) = (self.flag(cond.0), self.reg(a.0), self.reg(b.0));
                let v = self.b.ins().select(c, a, b);
                self.def(dst.0, v);
            }
            Stmt::If { cond, then, els } => return self.if_else(cond.0, then, els),
            Stmt::Loop { counter, first, max_iters, body } => self.repeat(counter.0, *first, *max_iters, body),
            Stmt::Break { cond } => {
                let c = self.flag(cond.0);
                let next = self.b.create_block();
                match self.exits.last() {
                    Some(&exit) => self.b.ins().brif(c, exit, &[], next, &[]),
                    // Outside a loop, as the evaluator: the function ends with NaN.
                    None => {
                        let stop = self.b.create_block();
                        let branch = self.b.ins().brif(c, stop, &[], next, &[]);
                        self.b.switch_to_block(stop);
                        let nan = self.b.ins().f64const(f64::NAN);
                        self.b.ins().return_(&[nan]);
                        branch
                    }
                };
                self.b.switch_to_block(next);
            }
            Stmt::Return { value } => {
                let v = self.reg(value.0);
                self.b.ins().return_(&[v]);
                return Flow::Returned;
            }
        }
        Flow::Next
    }

    fn if_else(&mut self, cond: u32, then: &[Stmt], els: &[Stmt]) -> Flow {
        let c = self.flag(cond);
        let (then_block, else_block, merge) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
        self.b.ins().brif(c, then_block, &[], else_block, &[]);
        let mut flows = [Flow::Returned; 2];
        for (k, (block, stmts)) in [(then_block, then), (else_block, els)].into_iter().enumerate() {
            self.b.switch_to_block(block);
            flows[k] = self.block(stmts);
            if flows[k] == Flow::Next {
                self.b.ins().jump(merge, &[]);
            }
        }
        self.b.switch_to_block(merge);
        if flows == [Flow::Returned; 2] {
            // Nothing reaches the merge block; end it (what follows is dead).
            let nan = self.b.ins().f64const(f64::NAN);
            self.b.ins().return_(&[nan]);
            return Flow::Returned;
        }
        Flow::Next
    }

    /// `counter` takes `first`, `first + 1`, … for at most `max_iters`
    /// trips; `break` leaves to the block after the loop.
    fn repeat(&mut self, counter: u32, first: f64, max_iters: u32, body: &[Stmt]) {
        let k = self.b.declare_var(types::F64);
        let trips = self.b.declare_var(types::I64);
        let (k0, t0) = (self.b.ins().f64const(first), self.b.ins().iconst(types::I64, 0));
        self.b.def_var(k, k0);
        self.b.def_var(trips, t0);
        let (header, body_block, exit) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(header);
        let t = self.b.use_var(trips);
        let more = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, t, i64::from(max_iters));
        self.b.ins().brif(more, body_block, &[], exit, &[]);
        self.b.switch_to_block(body_block);
        let kv = self.b.use_var(k);
        self.def(counter, kv);
        self.exits.push(exit);
        let flow = self.block(body);
        self.exits.pop();
        if flow == Flow::Next {
            let (kv, t) = (self.b.use_var(k), self.b.use_var(trips));
            let one = self.b.ins().f64const(1.0);
            let kn = self.b.ins().fadd(kv, one);
            let tn = self.b.ins().iadd_imm_s(t, 1);
            self.b.def_var(k, kn);
            self.b.def_var(trips, tn);
            self.b.ins().jump(header, &[]);
        }
        self.b.switch_to_block(exit);
    }

    fn unary(&mut self, op: Unary, a: Value) -> Value {
        match op {
            Unary::Neg => self.b.ins().fneg(a),
            Unary::Abs => self.b.ins().fabs(a),
            Unary::Sqrt => self.b.ins().sqrt(a),
            Unary::Floor => self.b.ins().floor(a),
            Unary::Exp
            | Unary::Log
            | Unary::Sin
            | Unary::Cos
            | Unary::Sinh
            | Unary::Cosh
            | Unary::Erfc
            | Unary::Log1p
            | Unary::Expm1
            | Unary::Lgamma
            | Unary::Tgamma
            | Unary::Acos => {
                let callee = self.library.iter().find(|(o, _)| *o == op).map(|(_, f)| *f);
                match callee {
                    Some(callee) => {
                        let call = self.b.ins().call(callee, &[a]);
                        self.b.inst_results(call)[0]
                    }
                    None => self.b.ins().f64const(f64::NAN),
                }
            }
        }
    }

    fn binary(&mut self, op: Binary, a: Value, b: Value) -> Value {
        match op {
            Binary::Add => self.b.ins().fadd(a, b),
            Binary::Sub => self.b.ins().fsub(a, b),
            Binary::Mul => self.b.ins().fmul(a, b),
            Binary::Div => self.b.ins().fdiv(a, b),
            Binary::Pow => {
                let call = self.b.ins().call(self.pow, &[a, b]);
                self.b.inst_results(call)[0]
            }
            // `b` if strictly smaller (larger) or `a` is NaN, else `a`.
            Binary::Min | Binary::Max => {
                let cc = if op == Binary::Min { FloatCC::LessThan } else { FloatCC::GreaterThan };
                let better = self.b.ins().fcmp(cc, b, a);
                let a_nan = self.b.ins().fcmp(FloatCC::Unordered, a, a);
                let take_b = self.b.ins().bor(better, a_nan);
                self.b.ins().select(take_b, b, a)
            }
        }
    }
}

fn float_cc(op: Cmp) -> FloatCC {
    match op {
        Cmp::Lt => FloatCC::LessThan,
        Cmp::Le => FloatCC::LessThanOrEqual,
        Cmp::Gt => FloatCC::GreaterThan,
        Cmp::Ge => FloatCC::GreaterThanOrEqual,
        Cmp::Eq => FloatCC::Equal,
        Cmp::Ne => FloatCC::NotEqual,
    }
}
