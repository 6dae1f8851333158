//! Coefficients of function approximations that more than one backend
//! evaluates, so each scalar op means the same numbers everywhere.

/// Acklam's rational approximations of the standard normal quantile
/// (`ndtri`), highest degree first, relative error below 1.2e-9:
/// `[central numerator, central denominator]` in (p − ½)², used for
/// 0.02425 ≤ p ≤ 0.97575 as `(p − ½)·num/den`, and `[tail numerator, tail
/// denominator]` in `q = √(−2 ln p)` (of 1 − p in the upper tail, negated).
#[rustfmt::skip]
#[allow(clippy::excessive_precision)]
pub const NDTRI_ACKLAM: [[f64; 6]; 4] = [
    [-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
     1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00],
    [-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
     6.680131188771972e+01, -1.328068155288572e+01, 1.0],
    [-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
     -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00],
    [0.0, 7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00, 1.0],
];

/// Where `NDTRI_ACKLAM`'s tail fractions take over from the central one.
pub const NDTRI_TAIL: f64 = 0.02425;
