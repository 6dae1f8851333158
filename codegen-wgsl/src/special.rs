//! Special functions from their one definition: each [`SpecialFn`] body of
//! `rdyn_ir::special` translated statement for statement into a WGSL
//! function of `f32` (WGSL has no float64).
//!
//! The bodies are written for float64 arithmetic, so only those whose
//! algorithm keeps float32 accuracy when every operation rounds to float32
//! run on the device ([`in_f32`]): ψ, erfinv and ln|Γ|. Each is a
//! recurrence or rational form with no cancellation beyond what the
//! function itself has (erfinv's Newton steps take the residual from
//! erfc in the tails, so near ±1 it is relative to 1 − |y|). The rest
//! (the Bessel power series, which cancel to ~1e4 times their value near
//! |x| = 12; zeta's and the incomplete gammas' sums) would lose most of
//! a float32 ulp's digits there and stay on the CPU (`Unsupported`).
//!
//! The primitives a body calls (`Unary`) map to WGSL built-ins, or to the
//! prelude's helpers: `erfcf` (float32 erfc, relative accuracy in both
//! tails), `log1pf`, `expm1f`; and `lgammaf_pos` below (ln Γ for x ≥ ½,
//! the range in which the body calls the library's).

use std::fmt::Write;

use rdyn_ir::loops::UnaryOp;
use rdyn_ir::special::{Binary, Cmp, Logic, Reg, Special, SpecialFn, Stmt, Unary};

use crate::lit::float_lit;
use crate::WgslError;

/// The special functions the device evaluates from their definitions
/// (see the module docs for why only these).
pub const ON_DEVICE: [Special; 3] = [Special::Digamma, Special::Erfinv, Special::Lgamma];

/// The special function behind `op`, if the device evaluates it.
pub fn in_f32(op: UnaryOp) -> Option<Special> {
    Special::of_unary(op).filter(|which| ON_DEVICE.contains(which))
}

/// The WGSL name of `sp`'s function.
pub fn name(sp: Special) -> String {
    format!("sp_{}", format!("{sp:?}").to_lowercase())
}

/// ln Γ(x) for x ≥ ½ in float32 (what `Unary::Lgamma` means in a body
/// on this device). From 8 up, Stirling's series to the x^−7 term (the
/// next is below 1e-9 there). Below, the recurrence Γ(x) = (x − 1)Γ(x − 1)
/// brings x into [½, 2½) and ln Γ(2 + z), |z| ≤ ½, is its Taylor series
/// at 2: (1 − γ)z + Σ (−1)^k (ζ(k) − 1)/k·z^k, k = 2 … 14 (the first term
/// left out is below 2e-11), less ln(1 + z) for x < 1½. The series is
/// relative-accurate at the roots 1 and 2, which Stirling's is not (it
/// left 6e-4 relative at 0.9963).
const LGAMMA_POS: &str = "
fn lgammaf_pos(x0: f32) -> f32 {
    if (x0 >= 8.0f) {
        let inv = 1.0f / x0;
        let inv2 = inv * inv;
        let series = inv * (0.0833333333f - inv2 * (0.00277777778f - inv2 * (0.000793650794f - inv2 * 0.000595238095f)));
        return (x0 - 0.5f) * log(x0) - x0 + 0.918938533f + series;
    }
    var x = x0;
    var prod = 1.0f;
    loop { if (x < 2.5f) { break; } x = x - 1.0f; prod = prod * x; }
    var z = x - 2.0f;
    var fix = 0.0f;
    if (x < 1.5f) { z = x - 1.0f; fix = log1pf(z); }
    var p = 4.374866789907488e-06f;
    p = fma(p, z, -9.439488275268397e-06f); p = fma(p, z, 2.050721277567069e-05f);
    p = fma(p, z, -4.492623673813314e-05f); p = fma(p, z, 9.945751278180853e-05f);
    p = fma(p, z, -0.00022315475845357939f); p = fma(p, z, 0.0005096695247430425f);
    p = fma(p, z, -0.001192753911703261f); p = fma(p, z, 0.0028905103307415234f);
    p = fma(p, z, -0.007385551028673986f); p = fma(p, z, 0.020580808427784546f);
    p = fma(p, z, -0.0673523010531981f); p = fma(p, z, 0.3224670334241132f);
    p = fma(p, z, 0.42278433509846713f);
    return p * z - fix + log(prod);
}
";

/// The WGSL source of `sp`'s function (and the helpers it calls).
pub fn source(sp: Special) -> Result<String, WgslError> {
    let f = sp.body();
    let mut w = Writer { out: String::new(), loops: 0, uses_lgamma: false };
    let params: Vec<String> = (0..f.params.len()).map(|i| format!("a{i}: f32")).collect();
    let _ = writeln!(w.out, "fn {}({}) -> f32 {{", name(sp), params.join(", "));
    declare(f, &mut w.out);
    w.block(&f.body, 1)?;
    w.out.push_str("}\n");
    if w.uses_lgamma {
        w.out.push_str(LGAMMA_POS);
    }
    Ok(w.out)
}

/// One `let` per constant register, one `var` per other register (the
/// parameters' copied in) and per flag.
fn declare(f: &SpecialFn, out: &mut String) {
    for r in 0..f.regs {
        let reg = Reg(r);
        if let Some(&(_, v)) = f.consts.iter().find(|(c, _)| *c == reg) {
            let _ = writeln!(out, "    let r{r} = {};", float_lit(v));
        } else if let Some(i) = f.params.iter().position(|p| *p == reg) {
            let _ = writeln!(out, "    var r{r} = a{i};");
        } else {
            let _ = writeln!(out, "    var r{r} = 0.0f;");
        }
    }
    for q in 0..f.flags {
        let _ = writeln!(out, "    var q{q} = false;");
    }
}

struct Writer {
    out: String,
    /// Loops emitted so far (names their counters).
    loops: u32,
    uses_lgamma: bool,
}

impl Writer {
    fn block(&mut self, body: &[Stmt], depth: usize) -> Result<(), WgslError> {
        for s in body {
            self.stmt(s, depth)?;
        }
        Ok(())
    }

    fn line(&mut self, depth: usize, text: &str) {
        let _ = writeln!(self.out, "{}{text}", "    ".repeat(depth));
    }

    fn stmt(&mut self, s: &Stmt, depth: usize) -> Result<(), WgslError> {
        let r = |reg: &Reg| format!("r{}", reg.0);
        match s {
            Stmt::Copy { dst, src } => self.line(depth, &format!("{} = {};", r(dst), r(src))),
            Stmt::Unary { dst, op, a } => {
                let e = self.unary(*op, &r(a))?;
                self.line(depth, &format!("{} = {e};", r(dst)));
            }
            Stmt::Binary { dst, op, a, b } => {
                self.line(depth, &format!("{} = {};", r(dst), binary(*op, &r(a), &r(b))));
            }
            Stmt::Fma { dst, a, b, c } => {
                self.line(depth, &format!("{} = fma({}, {}, {});", r(dst), r(a), r(b), r(c)));
            }
            Stmt::Poly { dst, coeffs, z } => {
                // Horner's rule from 0, as the evaluator runs it.
                let mut e = "0.0f".to_string();
                for c in coeffs.iter() {
                    e = format!("({e} * {} + {})", r(z), float_lit(*c));
                }
                self.line(depth, &format!("{} = {e};", r(dst)));
            }
            Stmt::Cmp { dst, op, a, b } => {
                let sym = match op {
                    Cmp::Lt => "<",
                    Cmp::Le => "<=",
                    Cmp::Gt => ">",
                    Cmp::Ge => ">=",
                    Cmp::Eq => "==",
                    Cmp::Ne => "!=",
                };
                self.line(depth, &format!("q{} = {} {sym} {};", dst.0, r(a), r(b)));
            }
            Stmt::Logic { dst, op, a, b } => {
                let sym = if *op == Logic::And { "&&" } else { "||" };
                self.line(depth, &format!("q{} = q{} {sym} q{};", dst.0, a.0, b.0));
            }
            Stmt::Not { dst, a } => self.line(depth, &format!("q{} = !q{};", dst.0, a.0)),
            Stmt::Select { dst, cond, a, b } => {
                self.line(depth, &format!("{} = select({}, {}, q{});", r(dst), r(b), r(a), cond.0));
            }
            Stmt::If { cond, then, els } => {
                self.line(depth, &format!("if (q{}) {{", cond.0));
                self.block(then, depth + 1)?;
                if !els.is_empty() {
                    self.line(depth, "} else {");
                    self.block(els, depth + 1)?;
                }
                self.line(depth, "}");
            }
            Stmt::Loop { counter, first, max_iters, body } => {
                // The counter register is the loop's own count, rewritten at
                // the top of every trip (the body may not write it).
                let n = self.loops;
                self.loops += 1;
                self.line(depth, &format!("var k{n} = {};", float_lit(*first)));
                self.line(depth, &format!("for (var i{n} = 0u; i{n} < {max_iters}u; i{n} = i{n} + 1u) {{"));
                self.line(depth + 1, &format!("{} = k{n};", r(counter)));
                self.block(body, depth + 1)?;
                self.line(depth + 1, &format!("k{n} = k{n} + 1.0f;"));
                self.line(depth, "}");
            }
            Stmt::Break { cond } => self.line(depth, &format!("if (q{}) {{ break; }}", cond.0)),
            Stmt::Return { value } => self.line(depth, &format!("return {};", r(value))),
        }
        Ok(())
    }

    fn unary(&mut self, op: Unary, a: &str) -> Result<String, WgslError> {
        Ok(match op {
            Unary::Neg => format!("-{a}"),
            Unary::Abs => format!("abs({a})"),
            Unary::Sqrt => format!("sqrt({a})"),
            Unary::Floor => format!("floor({a})"),
            Unary::Exp => format!("exp({a})"),
            Unary::Log => format!("log({a})"),
            Unary::Sin => format!("sin({a})"),
            Unary::Cos => format!("cos({a})"),
            Unary::Sinh => format!("sinh({a})"),
            Unary::Cosh => format!("cosh({a})"),
            Unary::Erfc => format!("erfcf({a})"),
            Unary::Log1p => format!("log1pf({a})"),
            Unary::Expm1 => format!("expm1f({a})"),
            Unary::Lgamma => {
                self.uses_lgamma = true;
                format!("lgammaf_pos({a})")
            }
            Unary::Acos => format!("acos({a})"),
            Unary::Tgamma => return Err(WgslError::Unsupported("Γ inside a special function in WGSL".into())),
        })
    }
}

/// A binary body operation; `Min`/`Max` ignore a NaN operand and give the
/// first of two equal ones, as the evaluator does.
fn binary(op: Binary, a: &str, b: &str) -> String {
    match op {
        Binary::Add => format!("{a} + {b}"),
        Binary::Sub => format!("{a} - {b}"),
        Binary::Mul => format!("{a} * {b}"),
        Binary::Div => format!("{a} / {b}"),
        Binary::Min => format!("select({b}, {a}, {a} <= {b} || is_nan({b}))"),
        Binary::Max => format!("select({b}, {a}, {a} >= {b} || is_nan({b}))"),
        Binary::Pow => format!("powf({a}, {b})"),
    }
}
