//! Orthogonal polynomials of float32 values as PTX: Chebyshev (four kinds,
//! plain and shifted), Hermite (both), Laguerre and Legendre, each its
//! `rdyn_ir::special` definition through the generic translator
//! (`scalar.rs`), computed in float64 and rounded once.

use rdyn_ir::loops::BinaryOp;
use rdyn_ir::special::Special;

use crate::ptx::func::Func;

/// The float32 polynomial `op` of `x` and degree `n`, if `op` is one.
pub fn polynomial(f: &mut Func, op: BinaryOp, x: &str, n: &str) -> Option<String> {
    use BinaryOp::*;
    Some(match op {
        ChebyshevT => scalar(f, Special::ChebyshevT, x, n),
        ChebyshevU => scalar(f, Special::ChebyshevU, x, n),
        ChebyshevV => scalar(f, Special::ChebyshevV, x, n),
        ChebyshevW => scalar(f, Special::ChebyshevW, x, n),
        ShiftedChebyshevT => scalar(f, Special::ShiftedChebyshevT, x, n),
        ShiftedChebyshevU => scalar(f, Special::ShiftedChebyshevU, x, n),
        ShiftedChebyshevV => scalar(f, Special::ShiftedChebyshevV, x, n),
        ShiftedChebyshevW => scalar(f, Special::ShiftedChebyshevW, x, n),
        HermiteH => scalar(f, Special::HermiteH, x, n),
        HermiteHe => scalar(f, Special::HermiteHe, x, n),
        LaguerreL => scalar(f, Special::LaguerreL, x, n),
        LegendreP => scalar(f, Special::LegendreP, x, n),
        _ => return None,
    })
}

/// The definition of `which` at float32 `x` and degree `n`.
fn scalar(f: &mut Func, which: Special, x: &str, n: &str) -> String {
    crate::math::scalar::call_f32(f, which.body(), &[x, n])
}
