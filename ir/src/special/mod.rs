//! Special functions written once: a tiny scalar-function language, the
//! functions written in it, and its reference evaluator.
//!
//! Each special function (Bessel J, Y, I and K, Airy Ai, spherical j0, the
//! Chebyshev, Hermite, Laguerre and Legendre polynomials, Hurwitz zeta,
//! erfcx, ndtri, digamma, erfinv, ln|Γ|, the incomplete gamma functions) used to
//! be written twice, as float64 Rust for the CPU backend and as a PTX
//! emitter for CUDA, and the two drifted apart. Here each is a builder
//! function producing a [`SpecialFn`]: a body of float64 registers
//! ([`Reg`]) and boolean flags ([`Flag`]) with straight-line arithmetic,
//! constant tables (polynomial coefficients), and structured control flow
//! ([`Stmt::If`], [`Stmt::Loop`] with a bounded trip count, `break if`,
//! `return`). Both backends derive from the body: [`eval`] is the
//! language's meaning (operation for operation as the hand-written routines
//! computed it: no fusion, no reassociation), which the CPU backend
//! compiles to machine code with Cranelift, bit for bit the same
//! (`codegen-cpu/src/special/native.rs`), and the CUDA backend translates
//! it to PTX with one generic translator (`codegen-cuda/src/math/scalar.rs`). Registers are mutable (a loop
//! updates its accumulators in place); constants live in registers that are
//! never written, so the evaluator loads them once per call and PTX reads
//! them as immediates.
//!
//! The text form (`Display`) prints one statement a line:
//! `%4 = mul %2, %3`, `?1 = lt %4, %0`, `if ?1 { … } else { … }`,
//! `loop %5 from 1 max 199 { … }`, `break if ?2`, `return %7`.

mod bessel;
mod bessel_jy;
mod builder;
mod chebyshev;
mod erf;
mod eval;
mod gamma;
mod ndtri;
mod poly;
mod print;
mod psi;
mod zeta;

pub use builder::{Builder, Operand};
pub use eval::eval;

use std::sync::OnceLock;

use crate::loops::{BinaryOp, UnaryOp};

pub use chebyshev::acos_body;

/// A float64 register.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reg(pub u32);

/// A boolean register.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Flag(pub u32);

/// One-operand float64 operations. `Exp`, `Log`, `Sin`, `Cos`, `Sinh`,
/// `Cosh`, `Erfc`, `Log1p`, `Expm1`, `Lgamma` and `Tgamma` are library functions on the CPU (Rust's, `libm`'s
/// erfc, lgamma and tgamma), accurate to an ulp or so, and float64 software routines in PTX
/// (erfc within a few hundred float64 ulps near 2, where its series
/// cancels: far below a float32 ulp).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Unary {
    Neg,
    Abs,
    Sqrt,
    Floor,
    Exp,
    Log,
    Sin,
    Cos,
    Sinh,
    Cosh,
    Erfc,
    Log1p,
    Expm1,
    /// ln|Γ(x)| (PTX: for x > 0 only).
    Lgamma,
    /// Γ(x) (PTX: for x > 0 only).
    Tgamma,
    /// acos(x) for |x| ≤ 1 (the library's on the CPU; in PTX the body
    /// [`acos_body`], Newton's method on sin and cos).
    Acos,
}

/// Two-operand float64 operations (each rounded once). `Min`/`Max` ignore
/// a NaN operand, as `f64::min` and PTX's `min` do, and of two equal
/// operands (±0) give the first (PTX's may give either zero). `Pow` is C's
/// `pow` on the CPU (special cases included) and the float64 software
/// routine in PTX (within a few ulps of it).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Min,
    Max,
    Pow,
}

/// Comparisons: ordered (false on NaN) except `Ne`, true on NaN.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

/// Boolean connectives of two flags.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Logic {
    And,
    Or,
}

/// A statement of a [`SpecialFn`] body.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Copy {
        dst: Reg,
        src: Reg,
    },
    Unary {
        dst: Reg,
        op: Unary,
        a: Reg,
    },
    Binary {
        dst: Reg,
        op: Binary,
        a: Reg,
        b: Reg,
    },
    /// `dst = a·b + c`, rounded once.
    Fma {
        dst: Reg,
        a: Reg,
        b: Reg,
        c: Reg,
    },
    /// c[0]·z^(n−1) + … + c[n−1] by Horner's rule from 0, unfused.
    Poly {
        dst: Reg,
        coeffs: Box<[f64]>,
        z: Reg,
    },
    Cmp {
        dst: Flag,
        op: Cmp,
        a: Reg,
        b: Reg,
    },
    Logic {
        dst: Flag,
        op: Logic,
        a: Flag,
        b: Flag,
    },
    Not {
        dst: Flag,
        a: Flag,
    },
    /// `dst = cond ? a : b`.
    Select {
        dst: Reg,
        cond: Flag,
        a: Reg,
        b: Reg,
    },
    If {
        cond: Flag,
        then: Vec<Stmt>,
        els: Vec<Stmt>,
    },
    /// `for counter in first, first + 1, … (max_iters values) { body }`.
    Loop {
        counter: Reg,
        first: f64,
        max_iters: u32,
        body: Vec<Stmt>,
    },
    /// Leaves the innermost loop when `cond` holds.
    Break {
        cond: Flag,
    },
    Return {
        value: Reg,
    },
}

/// A scalar function of float64 parameters returning float64.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecialFn {
    pub name: &'static str,
    pub params: Vec<Reg>,
    /// Registers holding constants (never written by the body).
    pub consts: Vec<(Reg, f64)>,
    pub regs: u32,
    pub flags: u32,
    /// Ends in a `Return` on every path.
    pub body: Vec<Stmt>,
}

/// The special functions defined here.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Special {
    I0,
    I0e,
    I1,
    I1e,
    K0,
    K0e,
    K1,
    K1e,
    AiryAi,
    SphericalJ0,
    HermiteH,
    HermiteHe,
    LaguerreL,
    LegendreP,
    Zeta,
    Erfcx,
    Ndtri,
    Igamma,
    Igammac,
    Digamma,
    Erfinv,
    J0,
    J1,
    Y0,
    Y1,
    Lgamma,
    ChebyshevT,
    ChebyshevU,
    ChebyshevV,
    ChebyshevW,
    ShiftedChebyshevT,
    ShiftedChebyshevU,
    ShiftedChebyshevV,
    ShiftedChebyshevW,
}

impl Special {
    pub const ALL: [Special; 34] = [
        Special::I0,
        Special::I0e,
        Special::I1,
        Special::I1e,
        Special::K0,
        Special::K0e,
        Special::K1,
        Special::K1e,
        Special::AiryAi,
        Special::SphericalJ0,
        Special::HermiteH,
        Special::HermiteHe,
        Special::LaguerreL,
        Special::LegendreP,
        Special::Zeta,
        Special::Erfcx,
        Special::Ndtri,
        Special::Igamma,
        Special::Igammac,
        Special::Digamma,
        Special::Erfinv,
        Special::J0,
        Special::J1,
        Special::Y0,
        Special::Y1,
        Special::Lgamma,
        Special::ChebyshevT,
        Special::ChebyshevU,
        Special::ChebyshevV,
        Special::ChebyshevW,
        Special::ShiftedChebyshevT,
        Special::ShiftedChebyshevU,
        Special::ShiftedChebyshevV,
        Special::ShiftedChebyshevW,
    ];

    /// The function's body, built on first use.
    pub fn body(self) -> &'static SpecialFn {
        static BODIES: [OnceLock<SpecialFn>; Special::ALL.len()] = [const { OnceLock::new() }; Special::ALL.len()];
        BODIES[self as usize].get_or_init(|| self.build())
    }

    fn build(self) -> SpecialFn {
        use bessel as b;
        use chebyshev as ch;
        match self {
            Special::I0 => b::bessel_i("i0", 0, false),
            Special::I0e => b::bessel_i("i0e", 0, true),
            Special::I1 => b::bessel_i("i1", 1, false),
            Special::I1e => b::bessel_i("i1e", 1, true),
            Special::K0 => b::bessel_k("k0", 0, false),
            Special::K0e => b::bessel_k("k0e", 0, true),
            Special::K1 => b::bessel_k("k1", 1, false),
            Special::K1e => b::bessel_k("k1e", 1, true),
            Special::AiryAi => b::airy_ai(),
            Special::SphericalJ0 => b::spherical_j0(),
            Special::HermiteH => poly::hermite_h(),
            Special::HermiteHe => poly::hermite_he(),
            Special::LaguerreL => poly::laguerre_l(),
            Special::LegendreP => poly::legendre_p(),
            Special::Zeta => zeta::zeta(),
            Special::Erfcx => erf::erfcx(),
            Special::Ndtri => ndtri::ndtri(),
            Special::Igamma => gamma::igamma(),
            Special::Igammac => gamma::igammac(),
            Special::Digamma => psi::digamma(),
            Special::Erfinv => erf::erfinv(),
            Special::J0 => bessel_jy::bessel_jy("j0", 0, bessel_jy::Kind::J),
            Special::J1 => bessel_jy::bessel_jy("j1", 1, bessel_jy::Kind::J),
            Special::Y0 => bessel_jy::bessel_jy("y0", 0, bessel_jy::Kind::Y),
            Special::Y1 => bessel_jy::bessel_jy("y1", 1, bessel_jy::Kind::Y),
            Special::Lgamma => psi::lgamma(),
            Special::ChebyshevT => ch::chebyshev("chebyshev_t", ch::Kind::T, false, 6.0),
            Special::ChebyshevU => ch::chebyshev("chebyshev_u", ch::Kind::U, false, 8.0),
            Special::ChebyshevV => ch::chebyshev("chebyshev_v", ch::Kind::V, false, 8.0),
            Special::ChebyshevW => ch::chebyshev("chebyshev_w", ch::Kind::W, false, 8.0),
            Special::ShiftedChebyshevT => ch::chebyshev("shifted_chebyshev_t", ch::Kind::T, true, 6.0),
            Special::ShiftedChebyshevU => ch::chebyshev("shifted_chebyshev_u", ch::Kind::U, true, 6.0),
            Special::ShiftedChebyshevV => ch::chebyshev("shifted_chebyshev_v", ch::Kind::V, true, 6.0),
            Special::ShiftedChebyshevW => ch::chebyshev("shifted_chebyshev_w", ch::Kind::W, true, 4.0),
        }
    }

    /// Evaluates the function at `args` (see [`eval`]).
    pub fn eval(self, args: &[f64]) -> f64 {
        eval(self.body(), args)
    }

    /// The function a one-operand op computes, if it is one of these
    /// (every backend emits such an op as its definition).
    pub fn of_unary(op: UnaryOp) -> Option<Special> {
        Some(match op {
            UnaryOp::I0 => Special::I0,
            UnaryOp::I0e => Special::I0e,
            UnaryOp::I1 => Special::I1,
            UnaryOp::I1e => Special::I1e,
            UnaryOp::K0 => Special::K0,
            UnaryOp::K0e => Special::K0e,
            UnaryOp::K1 => Special::K1,
            UnaryOp::K1e => Special::K1e,
            UnaryOp::AiryAi => Special::AiryAi,
            UnaryOp::SphericalJ0 => Special::SphericalJ0,
            UnaryOp::Erfcx => Special::Erfcx,
            UnaryOp::Ndtri => Special::Ndtri,
            UnaryOp::Digamma => Special::Digamma,
            UnaryOp::Erfinv => Special::Erfinv,
            UnaryOp::BesselJ0 => Special::J0,
            UnaryOp::BesselJ1 => Special::J1,
            UnaryOp::BesselY0 => Special::Y0,
            UnaryOp::BesselY1 => Special::Y1,
            UnaryOp::Lgamma => Special::Lgamma,
            _ => return None,
        })
    }

    /// The function a two-operand op computes (the orthogonal
    /// polynomials of `(x, n)`, zeta, the incomplete gamma functions), if
    /// it is one of these.
    pub fn of_binary(op: BinaryOp) -> Option<Special> {
        Some(match op {
            BinaryOp::HermiteH => Special::HermiteH,
            BinaryOp::HermiteHe => Special::HermiteHe,
            BinaryOp::LaguerreL => Special::LaguerreL,
            BinaryOp::LegendreP => Special::LegendreP,
            BinaryOp::ChebyshevT => Special::ChebyshevT,
            BinaryOp::ChebyshevU => Special::ChebyshevU,
            BinaryOp::ChebyshevV => Special::ChebyshevV,
            BinaryOp::ChebyshevW => Special::ChebyshevW,
            BinaryOp::ShiftedChebyshevT => Special::ShiftedChebyshevT,
            BinaryOp::ShiftedChebyshevU => Special::ShiftedChebyshevU,
            BinaryOp::ShiftedChebyshevV => Special::ShiftedChebyshevV,
            BinaryOp::ShiftedChebyshevW => Special::ShiftedChebyshevW,
            BinaryOp::Zeta => Special::Zeta,
            BinaryOp::Igamma => Special::Igamma,
            BinaryOp::Igammac => Special::Igammac,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    #[test]
    fn text_form_and_evaluation() {
        let text = Special::SphericalJ0.body().to_string();
        assert!(text.starts_with("fn spherical_j0(%0) {\n"), "{text}");
        assert!(text.contains("= sin %0") && text.contains("return"), "{text}");
        let i0 = Special::I0.body().to_string();
        assert!(i0.contains("loop %") && i0.contains("max 199 {") && i0.contains("break if ?"), "{i0}");
        assert_eq!(Special::I0.eval(&[0.0]), 1.0);
        assert!(Special::K0.eval(&[f64::NAN]).is_nan());
        assert_eq!(Special::K1.eval(&[0.0]), f64::INFINITY);
        assert!((Special::SphericalJ0.eval(&[3.0]) - 3f64.sin() / 3.0).abs() < 1e-16);
    }

    /// The functions ported last, against closed forms: ψ(1) = −γ,
    /// ψ(½) = −γ − 2 ln 2, ψ(−½) = ψ(½) + 2 (reflection and recurrence),
    /// erfinv(erf(x)) = x, Φ(ndtri(p)) = p, P(1, x) = 1 − e^(−x),
    /// Q(½, x) = erfc(√x).
    #[test]
    fn closed_forms() {
        const EULER: f64 = 0.577_215_664_901_532_9;
        let close = |got: f64, want: f64, tol: f64| {
            assert!((got - want).abs() <= tol * want.abs().max(1e-300), "{got:e} vs {want:e}")
        };
        close(Special::Digamma.eval(&[1.0]), -EULER, 1e-15);
        let half = -EULER - 2.0 * std::f64::consts::LN_2;
        close(Special::Digamma.eval(&[0.5]), half, 1e-15);
        // (−1.96 + 2: the cancellation costs two digits of relative error.)
        close(Special::Digamma.eval(&[-0.5]), half + 2.0, 1e-13);
        assert_eq!(Special::Digamma.eval(&[-0.0]), f64::INFINITY);
        assert!(Special::Digamma.eval(&[-3.0]).is_nan());
        for x in [-2.5, -0.7, -1e-9, 3e-5, 0.3, 1.1, 2.9] {
            close(Special::Erfinv.eval(&[libm::erf(x)]), x, 1e-13);
        }
        assert_eq!(Special::Erfinv.eval(&[-1.0]), f64::NEG_INFINITY);
        assert!(Special::Erfinv.eval(&[1.5]).is_nan());
        for p in [1e-300, 1e-12, 0.01, 0.2, 0.5 + 1e-9, 0.7, 0.99, 1.0 - 1e-10] {
            let x = Special::Ndtri.eval(&[p]);
            let phi = 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2);
            close(phi, p, 1e-13);
        }
        for x in [1e-8, 0.3, 1.0, 2.5, 40.0] {
            close(Special::Igamma.eval(&[1.0, x]), -(-x).exp_m1(), 1e-14);
            close(Special::Igammac.eval(&[0.5, x]), libm::erfc(x.sqrt()), 1e-13);
        }
        assert!(Special::Igamma.eval(&[-1.0, 1.0]).is_nan());
        // ln|Γ| below ½ by reflection, against libm's own.
        for x in [-0.4, -1.5, -2.7, -7.25, -30.1, -1e6 - 0.5, 0.0001, 0.3, 0.5, 2.0, 40.0] {
            close(Special::Lgamma.eval(&[x]), libm::lgamma(x), 1e-13);
        }
        for x in [0.0, -0.0, -1.0, -3.0, -1e20, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(Special::Lgamma.eval(&[x]), f64::INFINITY, "lgamma({x})");
        }
        assert!(Special::Lgamma.eval(&[f64::NAN]).is_nan());
        assert_eq!(Special::Igammac.eval(&[1.0, f64::INFINITY]), 0.0);
    }

    #[test]
    fn constants_are_interned_and_never_written() {
        for which in Special::ALL {
            let f = which.body();
            let consts: Vec<u32> = f.consts.iter().map(|(r, _)| r.0).collect();
            fn written(stmts: &[Stmt], out: &mut Vec<u32>) {
                for s in stmts {
                    match s {
                        Stmt::Copy { dst, .. }
                        | Stmt::Fma { dst, .. }
                        | Stmt::Unary { dst, .. }
                        | Stmt::Binary { dst, .. }
                        | Stmt::Poly { dst, .. }
                        | Stmt::Select { dst, .. } => out.push(dst.0),
                        Stmt::Loop { counter, body, .. } => {
                            out.push(counter.0);
                            written(body, out);
                        }
                        Stmt::If { then, els, .. } => {
                            written(then, out);
                            written(els, out);
                        }
                        _ => {}
                    }
                }
            }
            let mut w = Vec::new();
            written(&f.body, &mut w);
            assert!(w.iter().all(|r| !consts.contains(r)), "{which:?} writes a constant");
        }
    }
}
