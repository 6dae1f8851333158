//! float32 special functions as PTX: the erfc fit (erf, erfc). ln|Γ|,
//! Bessel J, Y, I and K, Airy Ai, spherical j0, zeta, erfcx, ndtri,
//! digamma, erfinv and the incomplete gamma functions come from
//! `rdyn_ir::special` through `scalar.rs`.

use crate::math::math32::exp;
use crate::ptx::arith::{div, fma, k, mul, op1, poly, sub};
use crate::ptx::func::Func;

/// erfc for x ≥ 0 as t·exp(p(t)) (Numerical Recipes' Chebyshev fit,
/// fractional error below 1.2e-7); returns (erfc(|x|), x).
pub(crate) fn erfc_abs(f: &mut Func, x: &str) -> String {
    let z = op1(f, "abs", x);
    let (t, p) = erfc_fit(f, &z);
    let zz = mul(f, &z, &z);
    let arg = sub(f, &p, &zz);
    let e = exp(f, &arg);
    mul(f, &t, &e)
}

/// t = 1/(1 + z/2) and p(t), with erfc(z) = t·e^(p(t) − z²) for z ≥ 0.
fn erfc_fit(f: &mut Func, z: &str) -> (String, String) {
    let d = fma(f, z, &k(0.5), &k(1.0));
    let t = div(f, &k(1.0), &d);
    let p = poly(
        f,
        &t,
        &[
            -1.265_512_23,
            1.000_023_68,
            0.374_091_96,
            0.096_784_18,
            -0.186_288_06,
            0.278_868_07,
            -1.135_203_98,
            1.488_515_87,
            -0.822_152_23,
            0.170_872_77,
        ],
    );
    (t, p)
}
