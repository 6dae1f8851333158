//! Index and size expressions: a small symbolic integer algebra.
//!
//! Every index in the loop IR is an [`Expr`] over loop variables ([`Var`]) and
//! size symbols ([`Sym`]). Expressions are kept in a canonical linear form,
//! `c0 + Σ ci·atomi`, where an atom is a variable, a symbol, a product of atoms,
//! or a floor division / floor modulo of an expression. Canonical form gives
//! structural equality real meaning: two views that address the same element
//! compare equal, which is what fusion decisions rest on.
//!
//! Floor semantics throughout (Python's `//` and `%`), matching PyTorch.
//!
//! Simplification uses what [`Ctx`] knows of variable ranges and symbol values:
//! `(6·i0 + i1) // 6 = i0` when `0 ≤ i1 < 6`; `k·(e // k) + e % k = e` folds a
//! reshape back into a plain index (also for `z // (m·k)` with `e = z // m`, a view
//! of a view); `(g·B + S) // (g·m) = B // m` when `0 ≤ S < g` keeps merged strided
//! dims a view; a variable over a size-1 range is 0.
//! A property test checks that simplification never changes an expression's value.

use std::collections::BTreeMap;
use std::fmt;

/// A loop variable (`i0`, `i1`, …), positional within a kernel stage.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Var(pub u32);

/// A size symbol (`s0`, …) bound at run time from input shapes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym(pub u32);

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "i{}", self.0)
    }
}

impl fmt::Display for Sym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}", self.0)
    }
}

/// A non-constant building block of an expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Atom {
    Var(Var),
    Sym(Sym),
    /// Product of two or more non-product atoms, sorted.
    Prod(Vec<Atom>),
    /// `lhs // rhs` (floor division), rhs non-zero.
    FloorDiv(Box<Expr>, Box<Expr>),
    /// `lhs % rhs` (floor modulo), rhs non-zero.
    Mod(Box<Expr>, Box<Expr>),
}

/// Canonical linear combination of atoms plus a constant.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Expr {
    /// Sorted by atom, unique atoms, no zero coefficients.
    terms: Vec<(Atom, i64)>,
    constant: i64,
}

/// What simplification may assume: the inclusive range of each variable and
/// the concrete value of each size symbol, where known.
#[derive(Clone, Debug, Default)]
pub struct Ctx {
    pub var_ranges: BTreeMap<Var, (i64, i64)>,
    pub sym_values: BTreeMap<Sym, i64>,
}

impl Ctx {
    /// Context where `Var(k)` ranges over `0..sizes[k]`.
    pub fn with_extents(sizes: &[i64]) -> Ctx {
        let mut ctx = Ctx::default();
        for (k, &n) in sizes.iter().enumerate() {
            ctx.var_ranges.insert(Var(k as u32), (0, (n - 1).max(0)));
        }
        ctx
    }
}

/// Greatest common divisor of non-negative values.
pub fn gcd(mut a: i64, mut b: i64) -> i64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn floor_div(a: i64, b: i64) -> i64 {
    let q = a / b;
    if (a % b != 0) && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    }
}

fn floor_mod(a: i64, b: i64) -> i64 {
    a - floor_div(a, b) * b
}

impl Expr {
    pub fn c(value: i64) -> Expr {
        Expr { terms: Vec::new(), constant: value }
    }

    pub fn zero() -> Expr {
        Expr::c(0)
    }

    pub fn var(var: Var) -> Expr {
        Expr::atom(Atom::Var(var))
    }

    pub fn v(index: u32) -> Expr {
        Expr::var(Var(index))
    }

    pub fn sym(sym: Sym) -> Expr {
        Expr::atom(Atom::Sym(sym))
    }

    fn atom(atom: Atom) -> Expr {
        Expr { terms: vec![(atom, 1)], constant: 0 }
    }

    /// The expression consisting of one atom.
    pub fn atom_expr(atom: Atom) -> Expr {
        Expr::atom(atom)
    }

    /// The constant value, if the expression has no atoms.
    pub fn as_const(&self) -> Option<i64> {
        self.terms.is_empty().then_some(self.constant)
    }

    pub fn is_const(&self, value: i64) -> bool {
        self.as_const() == Some(value)
    }

    pub fn terms(&self) -> &[(Atom, i64)] {
        &self.terms
    }

    pub fn constant(&self) -> i64 {
        self.constant
    }

    fn from_map(map: BTreeMap<Atom, i64>, constant: i64) -> Expr {
        let terms = map.into_iter().filter(|(_, c)| *c != 0).collect();
        let mut expr = Expr { terms, constant };
        expr.fold_div_mod_pairs();
        expr
    }

    /// `k·(e // k)·c + (e % k)·c` → `e·c`: the rule that turns a reshape of a
    /// contiguous buffer back into a plain index. The quotient may also be
    /// written `z // (m·k)` for `e = z // m` (nested divisions combine), as
    /// a view of a view leaves it (a weight reshaped, then transposed).
    fn fold_div_mod_pairs(&mut self) {
        loop {
            let mut found = None;
            'search: for (atom, coef) in &self.terms {
                if let Atom::Mod(inner, divisor) = atom {
                    let Some(k) = divisor.as_const() else {
                        continue;
                    };
                    for (other, other_coef) in &self.terms {
                        if let Atom::FloorDiv(inner2, divisor2) = other {
                            let quotient = (inner2 == inner && divisor2 == divisor)
                                || nested_quotient(inner, k, inner2, divisor2.as_const());
                            if quotient && *other_coef == coef * k {
                                found = Some((atom.clone(), other.clone(), *coef, (**inner).clone()));
                                break 'search;
                            }
                        }
                    }
                }
            }
            let Some((mod_atom, div_atom, coef, inner)) = found else {
                return;
            };
            let mut map: BTreeMap<Atom, i64> = self.terms.drain(..).collect();
            map.remove(&mod_atom);
            map.remove(&div_atom);
            let rest = Expr { terms: map.into_iter().collect(), constant: self.constant };
            *self = rest.add(&inner.scale(coef));
        }
    }

    pub fn add(&self, other: &Expr) -> Expr {
        let mut map: BTreeMap<Atom, i64> = self.terms.iter().cloned().collect();
        for (atom, coef) in &other.terms {
            *map.entry(atom.clone()).or_insert(0) += coef;
        }
        Expr::from_map(map, self.constant + other.constant)
    }

    pub fn add_c(&self, value: i64) -> Expr {
        let mut out = self.clone();
        out.constant += value;
        out
    }

    pub fn neg(&self) -> Expr {
        self.scale(-1)
    }

    pub fn sub(&self, other: &Expr) -> Expr {
        self.add(&other.neg())
    }

    pub fn scale(&self, factor: i64) -> Expr {
        if factor == 0 {
            return Expr::zero();
        }
        Expr {
            terms: self.terms.iter().map(|(a, c)| (a.clone(), c * factor)).collect(),
            constant: self.constant * factor,
        }
    }

    pub fn mul(&self, other: &Expr) -> Expr {
        if let Some(k) = other.as_const() {
            return self.scale(k);
        }
        if let Some(k) = self.as_const() {
            return other.scale(k);
        }
        let mut map: BTreeMap<Atom, i64> = BTreeMap::new();
        for (a, ca) in &self.terms {
            for (b, cb) in &other.terms {
                *map.entry(product(a, b)).or_insert(0) += ca * cb;
            }
            if other.constant != 0 {
                *map.entry(a.clone()).or_insert(0) += ca * other.constant;
            }
        }
        if self.constant != 0 {
            for (b, cb) in &other.terms {
                *map.entry(b.clone()).or_insert(0) += cb * self.constant;
            }
        }
        Expr::from_map(map, self.constant * other.constant)
    }

    /// Floor division, simplified with what `ctx` knows about ranges.
    pub fn floordiv(&self, divisor: &Expr, ctx: &Ctx) -> Expr {
        let Some(k) = divisor.as_const() else {
            if self == divisor {
                return Expr::c(1);
            }
            if self.is_const(0) {
                return Expr::zero();
            }
            return Expr::atom(Atom::FloorDiv(Box::new(self.clone()), Box::new(divisor.clone())));
        };
        if k == 1 {
            return self.clone();
        }
        if k <= 0 {
            // Negative divisors never come from shapes; keep them opaque.
            return Expr::atom(Atom::FloorDiv(Box::new(self.clone()), Box::new(divisor.clone())));
        }
        // Split off the part that divides exactly: (k·q + r) // k = q + r // k.
        let mut quotient = BTreeMap::new();
        let mut rest = BTreeMap::new();
        for (atom, coef) in &self.terms {
            if coef % k == 0 {
                quotient.insert(atom.clone(), coef / k);
            } else {
                rest.insert(atom.clone(), *coef);
            }
        }
        let q_const = floor_div(self.constant, k);
        let r_const = floor_mod(self.constant, k);
        let quotient = Expr::from_map(quotient, q_const);
        let rest = Expr::from_map(rest, r_const);
        if let Some((lo, hi)) = rest.bounds(ctx) {
            if floor_div(lo, k) == floor_div(hi, k) {
                return quotient.add_c(floor_div(lo, k));
            }
        }
        // A common factor: (g·B + S) // (g·m) = B // m when 0 ≤ S < g
        // (reshaping merged dims of a strided view).
        if let Some((big, _, g)) = rest.split_common_factor(k, ctx) {
            return quotient.add(&big.floordiv(&Expr::c(k / g), ctx));
        }
        // (e // a) // b = e // (a·b)
        if rest.constant == 0 && rest.terms.len() == 1 && rest.terms[0].1 == 1 {
            if let Atom::FloorDiv(inner, inner_div) = &rest.terms[0].0 {
                if let Some(a) = inner_div.as_const() {
                    if a > 0 {
                        return quotient.add(&inner.floordiv(&Expr::c(a * k), ctx));
                    }
                }
            }
        }
        quotient.add(&Expr::atom(Atom::FloorDiv(Box::new(rest), Box::new(Expr::c(k)))))
    }

    /// Floor modulo, simplified with what `ctx` knows about ranges.
    pub fn modulo(&self, divisor: &Expr, ctx: &Ctx) -> Expr {
        let Some(k) = divisor.as_const() else {
            if self == divisor || self.is_const(0) {
                return Expr::zero();
            }
            return Expr::atom(Atom::Mod(Box::new(self.clone()), Box::new(divisor.clone())));
        };
        if k == 1 {
            return Expr::zero();
        }
        if k <= 0 {
            return Expr::atom(Atom::Mod(Box::new(self.clone()), Box::new(divisor.clone())));
        }
        // (k·q + r) % k = r % k, and coefficients reduce modulo k.
        let mut rest = BTreeMap::new();
        for (atom, coef) in &self.terms {
            let reduced = floor_mod(*coef, k);
            if reduced != 0 {
                rest.insert(atom.clone(), reduced);
            }
        }
        let rest = Expr::from_map(rest, floor_mod(self.constant, k));
        if let Some((lo, hi)) = rest.bounds(ctx) {
            if lo >= 0 && hi < k {
                return rest;
            }
        }
        // (g·B + S) % (g·m) = g·(B % m) + S when 0 ≤ S < g.
        if let Some((big, small, g)) = rest.split_common_factor(k, ctx) {
            return big.modulo(&Expr::c(k / g), ctx).scale(g).add(&small);
        }
        // (e % (a·k)) % k = e % k when a·k is a multiple of k.
        if rest.constant == 0 && rest.terms.len() == 1 && rest.terms[0].1 == 1 {
            if let Atom::Mod(inner, inner_div) = &rest.terms[0].0 {
                if let Some(a) = inner_div.as_const() {
                    if a > 0 && a % k == 0 {
                        return inner.modulo(divisor, ctx);
                    }
                }
            }
        }
        Expr::atom(Atom::Mod(Box::new(rest), Box::new(Expr::c(k))))
    }

    /// `self = g·big + small` with `g` a proper divisor of `k` (from the
    /// terms' coefficients), `big` non-empty and `0 ≤ small < g`; the
    /// largest such `g`.
    fn split_common_factor(&self, k: i64, ctx: &Ctx) -> Option<(Expr, Expr, i64)> {
        let mut candidates: Vec<i64> =
            self.terms.iter().map(|(_, c)| gcd(c.unsigned_abs() as i64, k)).filter(|g| *g > 1 && *g < k).collect();
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        candidates.dedup();
        for g in candidates {
            let mut big = BTreeMap::new();
            let mut small = BTreeMap::new();
            for (atom, coef) in &self.terms {
                if coef % g == 0 {
                    big.insert(atom.clone(), coef / g);
                } else {
                    small.insert(atom.clone(), *coef);
                }
            }
            let small = Expr::from_map(small, self.constant);
            if big.is_empty() {
                continue;
            }
            if let Some((lo, hi)) = small.bounds(ctx) {
                if lo >= 0 && hi < g {
                    return Some((Expr::from_map(big, 0), small, g));
                }
            }
        }
        None
    }

    /// Inclusive bounds of the expression, if every atom is bounded.
    pub fn bounds(&self, ctx: &Ctx) -> Option<(i64, i64)> {
        let mut lo = self.constant;
        let mut hi = self.constant;
        for (atom, coef) in &self.terms {
            let (alo, ahi) = atom_bounds(atom, ctx)?;
            let (a, b) = (alo.checked_mul(*coef)?, ahi.checked_mul(*coef)?);
            lo = lo.checked_add(a.min(b))?;
            hi = hi.checked_add(a.max(b))?;
        }
        Some((lo, hi))
    }

    /// Rebuild bottom-up through the smart constructors, replacing variables
    /// and symbols as `map_var` / `ctx.sym_values` say.
    pub fn subst(&self, map_var: &dyn Fn(Var) -> Option<Expr>, ctx: &Ctx) -> Expr {
        let mut out = Expr::c(self.constant);
        for (atom, coef) in &self.terms {
            out = out.add(&subst_atom(atom, map_var, ctx).scale(*coef));
        }
        out
    }

    /// Simplify with the ranges and symbol values in `ctx`.
    pub fn simplify(&self, ctx: &Ctx) -> Expr {
        self.subst(&|_| None, ctx)
    }

    /// Replace variables by expressions given positionally.
    pub fn substitute_vars(&self, vars: &[Expr], ctx: &Ctx) -> Expr {
        self.subst(&|v: Var| vars.get(v.0 as usize).cloned(), ctx)
    }

    /// Evaluate with concrete variable and symbol values.
    pub fn eval(&self, vars: &[i64], syms: &[i64]) -> i64 {
        let mut acc = self.constant;
        for (atom, coef) in &self.terms {
            acc = acc.wrapping_add(coef.wrapping_mul(eval_atom(atom, vars, syms)));
        }
        acc
    }

    /// `Some(c)` when the expression is `c·var + (terms free of var)`.
    pub fn linear_coef(&self, var: Var) -> Option<i64> {
        self.linear_coef_expr(var)?.as_const()
    }

    /// `Some(k)` when the expression is `k·var + (terms free of var)` for
    /// an expression `k` free of variables: a symbolic stride (`var·s1`)
    /// as well as a constant one.
    pub fn linear_coef_expr(&self, var: Var) -> Option<Expr> {
        let mut coef = Expr::zero();
        for (atom, c) in &self.terms {
            match atom {
                Atom::Var(v) if *v == var => coef = coef.add(&Expr::c(*c)),
                Atom::Prod(factors) if factors.iter().filter(|f| **f == Atom::Var(var)).count() == 1 => {
                    let mut rest = Expr::c(*c);
                    for f in factors.iter().filter(|f| **f != Atom::Var(var)) {
                        if f.max_var().is_some() {
                            return None;
                        }
                        rest = rest.mul(&Expr::atom(f.clone()));
                    }
                    coef = coef.add(&rest);
                }
                other if other.mentions_var(var) => return None,
                _ => {}
            }
        }
        Some(coef)
    }

    pub fn mentions_var(&self, var: Var) -> bool {
        self.terms.iter().any(|(a, _)| a.mentions_var(var))
    }

    pub fn mentions_any_sym(&self) -> bool {
        self.terms.iter().any(|(a, _)| a.mentions_any_sym())
    }

    /// Largest variable index mentioned, if any.
    pub fn max_var(&self) -> Option<u32> {
        self.terms.iter().filter_map(|(a, _)| a.max_var()).max()
    }
}

/// Whether `z // d` is `e // k` for `e = z // m` (floor divisions by
/// positive constants, `d = m·k`).
fn nested_quotient(e: &Expr, k: i64, z: &Expr, d: Option<i64>) -> bool {
    match (e.terms(), e.constant()) {
        ([(Atom::FloorDiv(inner, m), 1)], 0) => {
            let m = m.as_const().filter(|m| *m > 0 && k > 0);
            **inner == *z && m.and_then(|m| m.checked_mul(k)).is_some_and(|mk| Some(mk) == d)
        }
        _ => false,
    }
}

fn product(a: &Atom, b: &Atom) -> Atom {
    let mut factors = Vec::new();
    for atom in [a, b] {
        match atom {
            Atom::Prod(inner) => factors.extend(inner.iter().cloned()),
            other => factors.push(other.clone()),
        }
    }
    factors.sort();
    Atom::Prod(factors)
}

fn atom_bounds(atom: &Atom, ctx: &Ctx) -> Option<(i64, i64)> {
    match atom {
        Atom::Var(v) => ctx.var_ranges.get(v).copied(),
        Atom::Sym(s) => ctx.sym_values.get(s).map(|&n| (n, n)),
        Atom::Prod(factors) => {
            let mut lo = 1i64;
            let mut hi = 1i64;
            for f in factors {
                let (flo, fhi) = atom_bounds(f, ctx)?;
                let cands = [lo.checked_mul(flo)?, lo.checked_mul(fhi)?, hi.checked_mul(flo)?, hi.checked_mul(fhi)?];
                lo = *cands.iter().min()?;
                hi = *cands.iter().max()?;
            }
            Some((lo, hi))
        }
        Atom::FloorDiv(e, d) => {
            let k = d.as_const().filter(|k| *k > 0)?;
            let (lo, hi) = e.bounds(ctx)?;
            Some((floor_div(lo, k), floor_div(hi, k)))
        }
        Atom::Mod(e, d) => {
            let k = d.as_const().filter(|k| *k > 0)?;
            match e.bounds(ctx) {
                Some((lo, hi)) if lo >= 0 && hi < k => Some((lo, hi)),
                _ => Some((0, k - 1)),
            }
        }
    }
}

fn subst_atom(atom: &Atom, map_var: &dyn Fn(Var) -> Option<Expr>, ctx: &Ctx) -> Expr {
    match atom {
        Atom::Var(v) => match map_var(*v) {
            Some(e) => e,
            // A variable over a size-1 range is always 0.
            None if ctx.var_ranges.get(v) == Some(&(0, 0)) => Expr::zero(),
            None => Expr::var(*v),
        },
        Atom::Sym(s) => match ctx.sym_values.get(s) {
            Some(&n) => Expr::c(n),
            None => Expr::sym(*s),
        },
        Atom::Prod(factors) => {
            let mut out = Expr::c(1);
            for f in factors {
                out = out.mul(&subst_atom(f, map_var, ctx));
            }
            out
        }
        Atom::FloorDiv(e, d) => e.subst(map_var, ctx).floordiv(&d.subst(map_var, ctx), ctx),
        Atom::Mod(e, d) => e.subst(map_var, ctx).modulo(&d.subst(map_var, ctx), ctx),
    }
}

fn eval_atom(atom: &Atom, vars: &[i64], syms: &[i64]) -> i64 {
    match atom {
        Atom::Var(v) => vars.get(v.0 as usize).copied().unwrap_or(0),
        Atom::Sym(s) => syms.get(s.0 as usize).copied().unwrap_or(0),
        Atom::Prod(factors) => factors.iter().fold(1i64, |acc, f| acc.wrapping_mul(eval_atom(f, vars, syms))),
        Atom::FloorDiv(e, d) => {
            let d = d.eval(vars, syms);
            if d == 0 {
                0
            } else {
                floor_div(e.eval(vars, syms), d)
            }
        }
        Atom::Mod(e, d) => {
            let d = d.eval(vars, syms);
            if d == 0 {
                0
            } else {
                floor_mod(e.eval(vars, syms), d)
            }
        }
    }
}

impl Atom {
    pub fn mentions_var(&self, var: Var) -> bool {
        match self {
            Atom::Var(v) => *v == var,
            Atom::Sym(_) => false,
            Atom::Prod(fs) => fs.iter().any(|f| f.mentions_var(var)),
            Atom::FloorDiv(e, d) | Atom::Mod(e, d) => e.mentions_var(var) || d.mentions_var(var),
        }
    }

    fn mentions_any_sym(&self) -> bool {
        match self {
            Atom::Var(_) => false,
            Atom::Sym(_) => true,
            Atom::Prod(fs) => fs.iter().any(|f| f.mentions_any_sym()),
            Atom::FloorDiv(e, d) | Atom::Mod(e, d) => e.mentions_any_sym() || d.mentions_any_sym(),
        }
    }

    fn max_var(&self) -> Option<u32> {
        match self {
            Atom::Var(v) => Some(v.0),
            Atom::Sym(_) => None,
            Atom::Prod(fs) => fs.iter().filter_map(|f| f.max_var()).max(),
            Atom::FloorDiv(e, d) | Atom::Mod(e, d) => e.max_var().max(d.max_var()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx2(a: i64, b: i64) -> Ctx {
        Ctx::with_extents(&[a, b])
    }

    #[test]
    fn reshape_of_contiguous_folds_back() {
        // view [24] as [4, 6] then flatten again: 6*(q//6) + q%6 == q
        let ctx = Ctx::with_extents(&[24]);
        let q = Expr::v(0);
        let six = Expr::c(6);
        let e = q.floordiv(&six, &ctx).scale(6).add(&q.modulo(&six, &ctx));
        assert_eq!(e, q);
        assert_eq!(e.to_string(), "i0");
    }

    #[test]
    fn div_mod_with_ranges() {
        let ctx = ctx2(4, 6);
        // (6*i0 + i1) // 6 == i0 when 0 <= i1 < 6
        let flat = Expr::v(0).scale(6).add(&Expr::v(1));
        assert_eq!(flat.floordiv(&Expr::c(6), &ctx), Expr::v(0));
        assert_eq!(flat.modulo(&Expr::c(6), &ctx), Expr::v(1));
        // (6*i0 + i1) // 3 stays symbolic but splits: 2*i0 + i1//3
        let d = flat.floordiv(&Expr::c(3), &ctx);
        assert_eq!(d.to_string(), "2*i0 + (i1 // 3)");
    }

    #[test]
    fn common_factor_splits_merged_dims() {
        // [16, 64, 32] flattened, divided by a multiple of the inner block:
        // (2048·i0 + 32·i1 + i2) // 8192 = i0 // 4 and the remainder keeps
        // the inner part.
        let ctx = Ctx::with_extents(&[16, 64, 32]);
        let flat = Expr::v(0).scale(2048).add(&Expr::v(1).scale(32)).add(&Expr::v(2));
        let q = flat.floordiv(&Expr::c(8192), &ctx);
        assert_eq!(q, Expr::v(0).floordiv(&Expr::c(4), &ctx));
        let r = flat.modulo(&Expr::c(8192), &ctx);
        let want = Expr::v(0).modulo(&Expr::c(4), &ctx).scale(2048).add(&Expr::v(1).scale(32)).add(&Expr::v(2));
        assert_eq!(r, want);
        // Recombined as a strided view: 8192·(f // 8192) + (f % 8192) = f.
        assert_eq!(q.scale(8192).add(&r), flat);
        for a in 0..16 {
            for b in [0, 1, 63] {
                for c in [0, 31] {
                    let f = 2048 * a + 32 * b + c;
                    assert_eq!(q.eval(&[a, b, c], &[]), f / 8192);
                    assert_eq!(r.eval(&[a, b, c], &[]), f % 8192);
                }
            }
        }
    }

    #[test]
    fn nested_division_combines() {
        let ctx = Ctx::default();
        let e = Expr::v(0).floordiv(&Expr::c(4), &ctx).floordiv(&Expr::c(3), &ctx);
        assert_eq!(e, Expr::v(0).floordiv(&Expr::c(12), &ctx));
    }

    #[test]
    fn eval_matches_python_floor_semantics() {
        let e = Expr::v(0).floordiv(&Expr::c(4), &Ctx::default());
        assert_eq!(e.eval(&[-1], &[]), -1);
        let m = Expr::v(0).modulo(&Expr::c(4), &Ctx::default());
        assert_eq!(m.eval(&[-1], &[]), 3);
    }

    #[test]
    fn symbols_and_products() {
        let s = Expr::sym(Sym(0));
        let e = s.mul(&Expr::v(0)).add(&Expr::v(1));
        assert_eq!(e.to_string(), "i1 + i0*s0");
        let mut ctx = ctx2(3, 5);
        ctx.sym_values.insert(Sym(0), 5);
        assert_eq!(e.simplify(&ctx), Expr::v(0).scale(5).add(&Expr::v(1)));
        assert_eq!(e.eval(&[2, 1], &[5]), 11);
    }

    #[test]
    fn quotient_and_remainder_recombine() {
        // 768·i1 + 256·(i0 // 256) + 16·((i0 // 16) % 16) + i0 % 16 is
        // 768·i1 + i0: a [64, 3, 16, 16] weight viewed as [64, 768], then
        // transposed.
        let ctx = Ctx::default();
        let i0 = Expr::v(0);
        let e = Expr::v(1)
            .scale(768)
            .add(&i0.floordiv(&Expr::c(256), &ctx).scale(256))
            .add(&i0.floordiv(&Expr::c(16), &ctx).modulo(&Expr::c(16), &ctx).scale(16))
            .add(&i0.modulo(&Expr::c(16), &ctx));
        let s = e.simplify(&ctx);
        assert_eq!(s, Expr::v(1).scale(768).add(&i0));
        for (a, b) in [(0, 0), (5, 700), (63, 767)] {
            assert_eq!(e.eval(&[b, a], &[]), s.eval(&[b, a], &[]));
        }
        // A remainder without its quotient stays.
        let lone = i0.modulo(&Expr::c(16), &ctx).add(&i0.floordiv(&Expr::c(16), &ctx).scale(8));
        assert_eq!(lone.simplify(&ctx), lone);
    }

    #[test]
    fn linear_coefficients() {
        let ctx = ctx2(4, 6);
        let e = Expr::v(0).scale(7).add(&Expr::v(1).floordiv(&Expr::c(2), &ctx));
        assert_eq!(e.linear_coef(Var(0)), Some(7));
        assert_eq!(e.linear_coef(Var(1)), None);
        assert_eq!(e.linear_coef(Var(2)), Some(0));
    }

    /// Property: simplification never changes the value.
    #[test]
    fn simplification_preserves_value() {
        let extents = [3i64, 5, 7];
        let ctx = Ctx::with_extents(&extents);
        let raw = Ctx::default();
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as i64
        };
        for _ in 0..500 {
            let mut e = Expr::c(next() % 5);
            for _ in 0..3 {
                let v = Expr::v((next() % 3) as u32);
                let k = next() % 9 + 1;
                e = match next() % 4 {
                    0 => e.add(&v.scale(k)),
                    1 => e.floordiv(&Expr::c(k), &raw).add(&v),
                    2 => e.modulo(&Expr::c(k), &raw).scale(k).add(&v),
                    _ => e.scale(k).sub(&v),
                };
            }
            let simple = e.simplify(&ctx);
            for a in 0..3 {
                for b in 0..5 {
                    for c in 0..7 {
                        assert_eq!(e.eval(&[a, b, c], &[]), simple.eval(&[a, b, c], &[]), "{e} vs {simple}");
                    }
                }
            }
        }
    }
}
