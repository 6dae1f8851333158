//! Size symbols PyTorch defines from others, and float scalars computed
//! from sizes: what a graph captured with dynamic sizes computes on the
//! host. Both are evaluated when a call's symbols are bound.
//!
//! A `DerivedSym` (PyTorch's `Max(1, s0 - 2)`, a valid convolution's output length
//! over a dynamic size) is imported as a symbol of its own with its definition; the
//! runtime computes it when it binds a call's symbols, and an input whose size bound
//! that symbol to another value is a user error. A `SymFloat` (batch norm's
//! `n / (n - 1)` under dynamic sizes) is a constant where the lowering's symbols are
//! bound, and float64 arithmetic on `Index` values in a shape-generic program.

use std::fmt;

use crate::expr::{Ctx, Expr, Sym};

/// How a derived size symbol combines its arguments.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum SymFn {
    Max,
    Min,
}

impl SymFn {
    pub fn name(self) -> &'static str {
        match self {
            SymFn::Max => "max",
            SymFn::Min => "min",
        }
    }

    pub fn parse(name: &str) -> Option<SymFn> {
        match name {
            "max" => Some(SymFn::Max),
            "min" => Some(SymFn::Min),
            _ => None,
        }
    }
}

/// A size symbol PyTorch defines from others, `Max(1, s0 - 2)` (the
/// output length of a convolution over a dynamic size): an ordinary symbol
/// everywhere, whose value a call computes from its arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct DerivedSym {
    pub sym: Sym,
    pub func: SymFn,
    pub args: Vec<Expr>,
}

impl DerivedSym {
    /// The value under `ctx`, when every argument's symbols are bound there.
    pub fn eval(&self, ctx: &Ctx) -> Option<i64> {
        let values = self.args.iter().map(|a| a.simplify(ctx).as_const()).collect::<Option<Vec<i64>>>()?;
        match self.func {
            SymFn::Max => values.into_iter().max(),
            SymFn::Min => values.into_iter().min(),
        }
    }
}

impl fmt::Display for DerivedSym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let args: Vec<String> = self.args.iter().map(|a| a.to_string()).collect();
        write!(f, "{} = {}({})", self.sym, self.func.name(), args.join(", "))
    }
}

/// A float scalar PyTorch computes from sizes: batch norm's unbiased
/// variance factor `n / (n - 1)` with `n` the elements per channel, under
/// dynamic sizes. A closed tree over integer size expressions.
#[derive(Clone, Debug, PartialEq)]
pub enum SymFloat {
    Const(f64),
    /// An integer size expression, as a float.
    Int(Expr),
    Add(Box<SymFloat>, Box<SymFloat>),
    Mul(Box<SymFloat>, Box<SymFloat>),
    Div(Box<SymFloat>, Box<SymFloat>),
}

impl SymFloat {
    /// The value under `ctx`, when every symbol it reads is bound there.
    pub fn eval(&self, ctx: &Ctx) -> Option<f64> {
        Some(match self {
            SymFloat::Const(x) => *x,
            SymFloat::Int(e) => e.simplify(ctx).as_const()? as f64,
            SymFloat::Add(a, b) => a.eval(ctx)? + b.eval(ctx)?,
            SymFloat::Mul(a, b) => a.eval(ctx)? * b.eval(ctx)?,
            SymFloat::Div(a, b) => a.eval(ctx)? / b.eval(ctx)?,
        })
    }
}

impl fmt::Display for SymFloat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SymFloat::Const(x) => write!(f, "{x:?}"),
            SymFloat::Int(e) => write!(f, "float({e})"),
            SymFloat::Add(a, b) => write!(f, "({a} + {b})"),
            SymFloat::Mul(a, b) => write!(f, "({a} * {b})"),
            SymFloat::Div(a, b) => write!(f, "({a} / {b})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derived(func: SymFn) -> DerivedSym {
        // s1 = func(1, s0 - 2): a valid convolution's output length.
        DerivedSym { sym: Sym(1), func, args: vec![Expr::c(1), Expr::sym(Sym(0)).add_c(-2)] }
    }

    #[test]
    fn sym_floats_evaluate_once_their_symbols_are_bound() {
        // n / (n - 1) with n = s0 * s1.
        let n = || Box::new(SymFloat::Int(Expr::sym(Sym(0)).mul(&Expr::sym(Sym(1)))));
        let factor = SymFloat::Div(n(), Box::new(SymFloat::Add(n(), Box::new(SymFloat::Const(-1.0)))));
        let mut ctx = Ctx::default();
        ctx.sym_values.insert(Sym(0), 4);
        assert_eq!(factor.eval(&ctx), None);
        ctx.sym_values.insert(Sym(1), 5);
        assert_eq!(factor.eval(&ctx), Some(20.0 / 19.0));
        assert_eq!(factor.to_string(), "(float(s0*s1) / (float(s0*s1) + -1.0))");
    }

    #[test]
    fn derived_symbols_evaluate_once_their_arguments_are_bound() {
        let mut ctx = Ctx::default();
        assert_eq!(derived(SymFn::Max).eval(&ctx), None);
        for (s0, max, min) in [(9, 7, 1), (3, 1, 1), (1, 1, -1)] {
            ctx.sym_values.insert(Sym(0), s0);
            assert_eq!(derived(SymFn::Max).eval(&ctx), Some(max), "s0 = {s0}");
            assert_eq!(derived(SymFn::Min).eval(&ctx), Some(min), "s0 = {s0}");
        }
        assert_eq!(derived(SymFn::Max).to_string(), "s1 = max(1, s0 - 2)");
    }
}
