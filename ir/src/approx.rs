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

/// Airy Ai's Maclaurin series `Ai(x) = AIRY_AI0·f(x) − AIRY_DAI0·g(x)`
/// (`AIRY_DAI0` = −Ai'(0)) is used on `AIRY_SERIES`; beyond it, the
/// large-argument expansions. At 5.5 the series' cancellation costs about
/// 2e-8 relative and the decaying expansion's smallest term is about 3e-8;
/// at −8 the oscillating expansion's smallest term is about e^(−30).
pub const AIRY_AI0: f64 = 0.355_028_053_887_817_2;
pub const AIRY_DAI0: f64 = 0.258_819_403_792_806_8;
pub const AIRY_SERIES: (f64, f64) = (-8.0, 5.5);

/// The ratio u_k / u_(k−1) of the coefficients of Airy's large-argument
/// expansions (DLMF 9.7.2): (6k−5)(6k−3)(6k−1) / ((2k−1)·216·k).
pub fn airy_u_ratio(k: f64) -> f64 {
    (6.0 * k - 5.0) * (6.0 * k - 3.0) * (6.0 * k - 1.0) / ((2.0 * k - 1.0) * 216.0 * k)
}
