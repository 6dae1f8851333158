//! Writing a [`SpecialFn`]: fresh registers per value, constants interned
//! once per function, blocks opened and closed by closures.

use super::{Binary, Cmp, Flag, Logic, Reg, SpecialFn, Stmt, Unary};

/// A [`SpecialFn`] under construction.
pub struct Builder {
    name: &'static str,
    params: Vec<Reg>,
    consts: Vec<(Reg, f64)>,
    regs: u32,
    flags: u32,
    /// The open blocks, innermost last.
    blocks: Vec<Vec<Stmt>>,
}

/// A register, or a constant (interned into a constant register).
pub trait Operand {
    fn reg(self, b: &mut Builder) -> Reg;
}

impl Operand for Reg {
    fn reg(self, _: &mut Builder) -> Reg {
        self
    }
}

impl Operand for f64 {
    fn reg(self, b: &mut Builder) -> Reg {
        b.c(self)
    }
}

impl Builder {
    pub fn new(name: &'static str) -> Builder {
        Builder { name, params: Vec::new(), consts: Vec::new(), regs: 0, flags: 0, blocks: vec![Vec::new()] }
    }

    /// The next parameter.
    pub fn param(&mut self) -> Reg {
        let r = self.fresh();
        self.params.push(r);
        r
    }

    fn fresh(&mut self) -> Reg {
        self.regs += 1;
        Reg(self.regs - 1)
    }

    fn fresh_flag(&mut self) -> Flag {
        self.flags += 1;
        Flag(self.flags - 1)
    }

    fn push(&mut self, s: Stmt) {
        if let Some(block) = self.blocks.last_mut() {
            block.push(s);
        }
    }

    /// The constant register holding `v` (bitwise: 0 and −0 differ).
    pub fn c(&mut self, v: f64) -> Reg {
        if let Some(&(r, _)) = self.consts.iter().find(|(_, c)| c.to_bits() == v.to_bits()) {
            return r;
        }
        let r = self.fresh();
        self.consts.push((r, v));
        r
    }

    /// A fresh mutable register holding `init`.
    pub fn var(&mut self, init: impl Operand) -> Reg {
        let src = init.reg(self);
        let dst = self.fresh();
        self.push(Stmt::Copy { dst, src });
        dst
    }

    /// `dst = src`.
    pub fn set(&mut self, dst: Reg, src: impl Operand) {
        let src = src.reg(self);
        self.push(Stmt::Copy { dst, src });
    }

    pub fn unary(&mut self, op: Unary, a: impl Operand) -> Reg {
        let a = a.reg(self);
        let dst = self.fresh();
        self.push(Stmt::Unary { dst, op, a });
        dst
    }

    pub fn binary(&mut self, op: Binary, a: impl Operand, b: impl Operand) -> Reg {
        let dst = self.fresh();
        self.update(dst, op, a, b);
        dst
    }

    /// `dst = a op b` into an existing register.
    pub fn update(&mut self, dst: Reg, op: Binary, a: impl Operand, b: impl Operand) {
        let (a, b) = (a.reg(self), b.reg(self));
        self.push(Stmt::Binary { dst, op, a, b });
    }

    pub fn add(&mut self, a: impl Operand, b: impl Operand) -> Reg {
        self.binary(Binary::Add, a, b)
    }
    pub fn sub(&mut self, a: impl Operand, b: impl Operand) -> Reg {
        self.binary(Binary::Sub, a, b)
    }
    pub fn mul(&mut self, a: impl Operand, b: impl Operand) -> Reg {
        self.binary(Binary::Mul, a, b)
    }
    pub fn div(&mut self, a: impl Operand, b: impl Operand) -> Reg {
        self.binary(Binary::Div, a, b)
    }
    pub fn neg(&mut self, a: impl Operand) -> Reg {
        self.unary(Unary::Neg, a)
    }
    pub fn abs(&mut self, a: impl Operand) -> Reg {
        self.unary(Unary::Abs, a)
    }
    pub fn sqrt(&mut self, a: impl Operand) -> Reg {
        self.unary(Unary::Sqrt, a)
    }
    pub fn exp(&mut self, a: impl Operand) -> Reg {
        self.unary(Unary::Exp, a)
    }
    pub fn log(&mut self, a: impl Operand) -> Reg {
        self.unary(Unary::Log, a)
    }

    /// a·b + c, rounded once.
    pub fn fma(&mut self, a: impl Operand, b: impl Operand, c: impl Operand) -> Reg {
        let (a, b, c) = (a.reg(self), b.reg(self), c.reg(self));
        let dst = self.fresh();
        self.push(Stmt::Fma { dst, a, b, c });
        dst
    }

    /// c[0]·z^(n−1) + … + c[n−1] (highest degree first), unfused.
    pub fn poly(&mut self, coeffs: &[f64], z: impl Operand) -> Reg {
        let z = z.reg(self);
        let dst = self.fresh();
        self.push(Stmt::Poly { dst, coeffs: coeffs.into(), z });
        dst
    }

    pub fn cmp(&mut self, op: Cmp, a: impl Operand, b: impl Operand) -> Flag {
        let (a, b) = (a.reg(self), b.reg(self));
        let dst = self.fresh_flag();
        self.push(Stmt::Cmp { dst, op, a, b });
        dst
    }
    pub fn lt(&mut self, a: impl Operand, b: impl Operand) -> Flag {
        self.cmp(Cmp::Lt, a, b)
    }
    pub fn le(&mut self, a: impl Operand, b: impl Operand) -> Flag {
        self.cmp(Cmp::Le, a, b)
    }
    pub fn gt(&mut self, a: impl Operand, b: impl Operand) -> Flag {
        self.cmp(Cmp::Gt, a, b)
    }
    pub fn ge(&mut self, a: impl Operand, b: impl Operand) -> Flag {
        self.cmp(Cmp::Ge, a, b)
    }
    pub fn eq(&mut self, a: impl Operand, b: impl Operand) -> Flag {
        self.cmp(Cmp::Eq, a, b)
    }
    /// Whether `a` is NaN.
    pub fn is_nan(&mut self, a: Reg) -> Flag {
        self.cmp(Cmp::Ne, a, a)
    }

    pub fn and(&mut self, a: Flag, b: Flag) -> Flag {
        let dst = self.fresh_flag();
        self.push(Stmt::Logic { dst, op: Logic::And, a, b });
        dst
    }
    pub fn or(&mut self, a: Flag, b: Flag) -> Flag {
        let dst = self.fresh_flag();
        self.push(Stmt::Logic { dst, op: Logic::Or, a, b });
        dst
    }
    pub fn not(&mut self, a: Flag) -> Flag {
        let dst = self.fresh_flag();
        self.push(Stmt::Not { dst, a });
        dst
    }

    /// `cond ? a : b`.
    pub fn select(&mut self, cond: Flag, a: impl Operand, b: impl Operand) -> Reg {
        let (a, b) = (a.reg(self), b.reg(self));
        let dst = self.fresh();
        self.push(Stmt::Select { dst, cond, a, b });
        dst
    }

    fn block(&mut self, body: impl FnOnce(&mut Builder)) -> Vec<Stmt> {
        self.blocks.push(Vec::new());
        body(self);
        self.blocks.pop().unwrap_or_default()
    }

    /// `if cond { then } else { els }`.
    pub fn if_else(&mut self, cond: Flag, then: impl FnOnce(&mut Builder), els: impl FnOnce(&mut Builder)) {
        let then = self.block(then);
        let els = self.block(els);
        self.push(Stmt::If { cond, then, els });
    }

    /// `if cond { then }`.
    pub fn when(&mut self, cond: Flag, then: impl FnOnce(&mut Builder)) {
        self.if_else(cond, then, |_| {});
    }

    /// `if cond { return value }`.
    pub fn return_if(&mut self, cond: Flag, value: impl Operand) {
        let value = value.reg(self);
        self.when(cond, |b| b.ret(value));
    }

    /// `for k in first.. (at most max_iters values) { body(k) }`; the
    /// counter is a float64 register (exact: trip counts are small).
    pub fn repeat(&mut self, first: f64, max_iters: u32, body: impl FnOnce(&mut Builder, Reg)) {
        let counter = self.fresh();
        let body = self.block(|b| body(b, counter));
        self.push(Stmt::Loop { counter, first, max_iters, body });
    }

    /// Leaves the innermost loop once `term` is negligible beside `sum`:
    /// |term| ≤ `rel`·|sum| (a series' stopping rule).
    pub fn break_if_negligible(&mut self, term: Reg, sum: Reg, rel: f64) {
        let at = self.abs(term);
        let asum = self.abs(sum);
        let lim = self.mul(asum, rel);
        let small = self.le(at, lim);
        self.break_if(small);
    }

    /// Whether `a` is an integer: `floor(a) == a` (true for ±inf, false
    /// for NaN).
    pub fn is_integer(&mut self, a: Reg) -> Flag {
        let fl = self.unary(Unary::Floor, a);
        self.eq(a, fl)
    }

    /// Leaves the innermost loop when `cond` holds.
    pub fn break_if(&mut self, cond: Flag) {
        self.push(Stmt::Break { cond });
    }

    pub fn ret(&mut self, value: impl Operand) {
        let value = value.reg(self);
        self.push(Stmt::Return { value });
    }

    /// The function, returning `value` after the body.
    pub fn finish(mut self, value: impl Operand) -> SpecialFn {
        self.ret(value);
        let body = self.blocks.pop().unwrap_or_default();
        SpecialFn {
            name: self.name,
            params: self.params,
            consts: self.consts,
            regs: self.regs,
            flags: self.flags,
            body,
        }
    }
}
