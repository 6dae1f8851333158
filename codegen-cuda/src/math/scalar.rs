//! The one translator from `rdyn_ir::special` bodies to PTX: the special
//! functions written once there (every `Special`: Bessel, Airy Ai, zeta,
//! the orthogonal polynomials, ψ, ln|Γ|, erfinv, ndtri, erfcx, the
//! incomplete gamma functions) become float64 PTX here, operation for operation as the CPU backend
//! evaluates them. Registers map to `.f64` registers (constants to
//! immediates), flags to predicates, `if` and `loop` to branches; exp, log,
//! pow, log1p, expm1, sinh and cosh use the software float64 routines of
//! `math64.rs`, erfc and lgamma (Γ as its exponential) `lib64.rs`, sin and cos `sincos64.rs`, acos the body `acos_body` (Newton's method on sin and cos). Arguments and results are float32 registers,
//! converted to and from float64 around the body.

use rdyn_ir::special::{Binary, Cmp, Flag, Logic, Reg, SpecialFn, Stmt, Unary};

use crate::math::math64;
use crate::math::sincos64::sincos64;
use crate::ptx::func::{f64_imm as d64, Class, Func};

struct Tr<'a> {
    f: &'a mut Func,
    /// Each register's PTX operand (a register, or an immediate for a constant).
    regs: Vec<String>,
    flags: Vec<String>,
    /// The exit label of each open loop, innermost last.
    loops: Vec<String>,
    result: String,
    end: String,
}

/// `sf` at the float32 registers `args`, as a float32 register.
pub(crate) fn call_f32(f: &mut Func, sf: &SpecialFn, args: &[&str]) -> String {
    let r = call_f64(f, sf, args, true);
    let out = f.reg(Class::F32);
    f.ins(format!("cvt.rn.f32.f64 {out}, {r}"));
    out
}

/// `sf` at `args` (float32 registers when `from_f32`, else float64), as a
/// float64 register.
pub(crate) fn call_f64(f: &mut Func, sf: &SpecialFn, args: &[&str], from_f32: bool) -> String {
    let mut regs: Vec<String> = (0..sf.regs).map(|_| String::new()).collect();
    for &(r, v) in &sf.consts {
        regs[r.0 as usize] = d64(v);
    }
    for slot in regs.iter_mut().filter(|s| s.is_empty()) {
        *slot = f.reg(Class::F64);
    }
    for (i, p) in sf.params.iter().enumerate() {
        let src = args.get(i).copied().unwrap_or("0dFFF8000000000000");
        let cvt = if from_f32 { "cvt.f64.f32" } else { "mov.f64" };
        f.ins(format!("{cvt} {}, {src}", regs[p.0 as usize]));
    }
    let flags = (0..sf.flags).map(|_| f.reg(Class::Pred)).collect();
    let (result, end) = (f.reg(Class::F64), f.label(&format!("{}_end", sf.name)));
    f.ins(format!("mov.f64 {result}, {}", d64(f64::NAN)));
    let mut tr = Tr { f, regs, flags, loops: Vec::new(), result, end };
    tr.block(&sf.body);
    tr.f.place(&tr.end);
    tr.result
}

impl Tr<'_> {
    fn r(&self, r: Reg) -> &str {
        &self.regs[r.0 as usize]
    }

    fn p(&self, p: Flag) -> &str {
        &self.flags[p.0 as usize]
    }

    fn unary(&mut self, op: Unary, a: &str) -> String {
        let f = &mut *self.f;
        let plain = |f: &mut Func, ins: &str| f.op(Class::F64, ins, &[a]);
        match op {
            Unary::Neg => plain(f, "neg"),
            Unary::Abs => plain(f, "abs"),
            Unary::Sqrt => plain(f, "sqrt.rn"),
            Unary::Floor => plain(f, "cvt.rmi.f64"),
            Unary::Exp => math64::exp(f, a),
            Unary::Log => math64::log(f, a),
            Unary::Log1p => math64::log1p(f, a),
            Unary::Expm1 => math64::expm1(f, a),
            Unary::Lgamma => crate::math::lib64::lgamma(f, a),
            Unary::Tgamma => {
                let l = crate::math::lib64::lgamma(f, a);
                math64::exp(f, &l)
            }
            Unary::Sin => sincos64(f, a).0,
            Unary::Cos => sincos64(f, a).1,
            Unary::Sinh => sinh(f, a),
            Unary::Erfc => crate::math::lib64::erfc64(f, a),
            Unary::Acos => call_f64(f, rdyn_ir::special::acos_body(), &[a], false),
            Unary::Cosh => {
                // (e^|a| + 1/e^|a|)/2.
                let aa = f.op(Class::F64, "abs", &[a]);
                let e = math64::exp(f, &aa);
                let inv = f.op(Class::F64, "div.rn", &[&d64(0.5), &e]);
                f.op(Class::F64, "fma.rn", &[&e, &d64(0.5), &inv])
            }
        }
    }

    fn block(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        match s {
            Stmt::Copy { dst, src } => {
                let ins = format!("mov.f64 {}, {}", self.r(*dst), self.r(*src));
                self.f.ins(ins);
            }
            Stmt::Unary { dst, op, a } => {
                let a = self.r(*a).to_string();
                let v = self.unary(*op, &a);
                let ins = format!("mov.f64 {}, {v}", self.r(*dst));
                self.f.ins(ins);
            }
            Stmt::Binary { dst, op, a, b } => {
                let name = match op {
                    Binary::Add => "add.rn",
                    Binary::Sub => "sub.rn",
                    Binary::Mul => "mul.rn",
                    Binary::Div => "div.rn",
                    Binary::Min => "min",
                    Binary::Max => "max",
                    Binary::Pow => {
                        let (a, b) = (self.r(*a).to_string(), self.r(*b).to_string());
                        let v = math64::pow(self.f, &a, &b);
                        let ins = format!("mov.f64 {}, {v}", self.r(*dst));
                        self.f.ins(ins);
                        return;
                    }
                };
                let ins = format!("{name}.f64 {}, {}, {}", self.r(*dst), self.r(*a), self.r(*b));
                self.f.ins(ins);
            }
            Stmt::Fma { dst, a, b, c } => {
                let ins = format!("fma.rn.f64 {}, {}, {}, {}", self.r(*dst), self.r(*a), self.r(*b), self.r(*c));
                self.f.ins(ins);
            }
            Stmt::Poly { dst, coeffs, z } => {
                // Unfused, from 0, as the evaluator: acc·z + c.
                let acc = self.f.mov(Class::F64, &d64(0.0));
                for &c in coeffs.iter() {
                    let ins = format!("mul.rn.f64 {acc}, {acc}, {}", self.r(*z));
                    self.f.ins(ins);
                    self.f.ins(format!("add.rn.f64 {acc}, {acc}, {}", d64(c)));
                }
                let ins = format!("mov.f64 {}, {acc}", self.r(*dst));
                self.f.ins(ins);
            }
            Stmt::Cmp { dst, op, a, b } => {
                // A constant goes second (`setp` takes an immediate there).
                let (mut a, mut b, mut swapped) = (self.r(*a), self.r(*b), false);
                if a.starts_with("0d") && !b.starts_with("0d") {
                    (a, b, swapped) = (b, a, true);
                }
                let cmp = match (op, swapped) {
                    (Cmp::Lt, false) | (Cmp::Gt, true) => "lt",
                    (Cmp::Le, false) | (Cmp::Ge, true) => "le",
                    (Cmp::Gt, false) | (Cmp::Lt, true) => "gt",
                    (Cmp::Ge, false) | (Cmp::Le, true) => "ge",
                    (Cmp::Eq, _) => "eq",
                    (Cmp::Ne, _) => "neu",
                };
                let ins = format!("setp.{cmp}.f64 {}, {a}, {b}", self.p(*dst));
                self.f.ins(ins);
            }
            Stmt::Logic { dst, op, a, b } => {
                let name = if *op == Logic::And { "and" } else { "or" };
                let ins = format!("{name}.pred {}, {}, {}", self.p(*dst), self.p(*a), self.p(*b));
                self.f.ins(ins);
            }
            Stmt::Not { dst, a } => {
                let ins = format!("not.pred {}, {}", self.p(*dst), self.p(*a));
                self.f.ins(ins);
            }
            Stmt::Select { dst, cond, a, b } => {
                let ins = format!("selp.f64 {}, {}, {}, {}", self.r(*dst), self.r(*a), self.r(*b), self.p(*cond));
                self.f.ins(ins);
            }
            Stmt::If { cond, then, els } => self.branch(*cond, then, els),
            Stmt::Loop { counter, first, max_iters, body } => self.repeat(*counter, *first, *max_iters, body),
            Stmt::Break { cond } => {
                let out = self.loops.last().cloned().unwrap_or_else(|| self.end.clone());
                let ins = format!("@{} bra {out}", self.p(*cond));
                self.f.ins(ins);
            }
            Stmt::Return { value } => {
                let ins = format!("mov.f64 {}, {}", self.result, self.r(*value));
                self.f.ins(ins);
                let ins = format!("bra {}", self.end);
                self.f.ins(ins);
            }
        }
    }

    fn branch(&mut self, cond: Flag, then: &[Stmt], els: &[Stmt]) {
        let (other, done) = (self.f.label("sf_else"), self.f.label("sf_fi"));
        let ins = format!("@!{} bra {other}", self.p(cond));
        self.f.ins(ins);
        self.block(then);
        if !els.is_empty() {
            self.f.ins(format!("bra {done}"));
        }
        self.f.place(&other);
        if !els.is_empty() {
            self.block(els);
            self.f.place(&done);
        }
    }

    fn repeat(&mut self, counter: Reg, first: f64, max_iters: u32, body: &[Stmt]) {
        let k = self.r(counter).to_string();
        self.f.ins(format!("mov.f64 {k}, {}", d64(first)));
        let (top, out) = (self.f.label("sf_loop"), self.f.label("sf_loop_end"));
        self.f.place(&top);
        let done = self.f.setp("ge", "f64", &k, &d64(first + f64::from(max_iters)));
        self.f.ins(format!("@{done} bra {out}"));
        self.loops.push(out.clone());
        self.block(body);
        self.loops.pop();
        self.f.ins(format!("add.rn.f64 {k}, {k}, {}", d64(1.0)));
        self.f.ins(format!("bra {top}"));
        self.f.place(&out);
    }
}

/// sinh a: (E + E/(E + 1))/2 with E = expm1(|a|), accurate near 0;
/// e^|a|/2 beyond 20 (where E/(E + 1) would be inf/inf); the sign of a.
fn sinh(f: &mut Func, a: &str) -> String {
    let aa = f.op(Class::F64, "abs", &[a]);
    let e = math64::expm1(f, &aa);
    let e1 = f.op(Class::F64, "add.rn", &[&e, &d64(1.0)]);
    let q = f.op(Class::F64, "div.rn", &[&e, &e1]);
    let s = f.op(Class::F64, "add.rn", &[&e, &q]);
    let near = f.op(Class::F64, "mul.rn", &[&s, &d64(0.5)]);
    let big = math64::exp(f, &aa);
    let far = f.op(Class::F64, "mul.rn", &[&big, &d64(0.5)]);
    let is_far = f.setp("gt", "f64", &aa, &d64(20.0));
    let r = f.selp(Class::F64, &far, &near, &is_far);
    let neg = f.op(Class::F64, "neg", &[&r]);
    let is_neg = f.setp("lt", "f64", a, &d64(0.0));
    f.selp(Class::F64, &neg, &r, &is_neg)
}

#[cfg(test)]
#[path = "scalar_tests.rs"]
mod tests;
