//! Register numbers and indices as functions of the stage variables: the
//! vocabulary plan types and compiled stages share.

use rdyn_ir::{Atom, Expr, Var};

/// A register number.
pub type Reg = u16;

/// An index as a function of the stage variables: an affine part
/// `c0 + Σ coef·var` plus, when needed, a residual expression of the terms
/// that are not affine (divisions and moduli from reshapes and pooling).
#[derive(Clone, Debug)]
pub struct IndexFn {
    pub c0: i64,
    pub coefs: Vec<(u32, i64)>,
    pub rest: Option<Expr>,
}

impl IndexFn {
    pub fn new(expr: &Expr) -> IndexFn {
        let mut coefs = Vec::new();
        let mut rest = Expr::zero();
        for (atom, coef) in expr.terms() {
            match atom {
                Atom::Var(v) => coefs.push((v.0, *coef)),
                other => rest = rest.add(&Expr::atom_expr(other.clone()).scale(*coef)),
            }
        }
        IndexFn { c0: expr.constant(), coefs, rest: if rest.is_const(0) { None } else { Some(rest) } }
    }

    #[inline]
    pub fn eval(&self, env: &[i64]) -> i64 {
        let affine = self.coefs.iter().fold(self.c0, |acc, (v, c)| acc + c * env[*v as usize]);
        match &self.rest {
            None => affine,
            Some(e) => affine + e.eval(env, &[]),
        }
    }

    /// Step per unit of `var`, when the index is affine in it.
    pub fn step(&self, var: u32) -> Option<i64> {
        if self.rest.as_ref().is_some_and(|e| e.mentions_var(Var(var))) {
            return None;
        }
        Some(self.coefs.iter().find(|(v, _)| *v == var).map_or(0, |(_, c)| *c))
    }

    pub fn is_affine(&self) -> bool {
        self.rest.is_none()
    }
}

impl std::fmt::Display for IndexFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut e = Expr::c(self.c0);
        for (v, c) in &self.coefs {
            e = e.add(&Expr::v(*v).scale(*c));
        }
        if let Some(rest) = &self.rest {
            e = e.add(rest);
        }
        write!(f, "{e}")
    }
}
