//! The hand-written float64 routines replaced by definitions in
//! `rdyn_ir::special` after the first batch (`old.rs`): ndtri
//! (`special/mod.rs`), the incomplete gamma functions (`special/gamma.rs`),
//! digamma and erfinv (`ops.rs`), as of commit e59074d. Only a baseline:
//! `hand_written.rs` measures the compiled definitions against them,
//! `benches/special` times both.
#![allow(clippy::excessive_precision)]

use std::f64::consts::{FRAC_1_SQRT_2, PI};

use rdyn_ir::approx::{LN_GAMMA_1P_ZM1 as ZM1, NDTRI_ACKLAM as ACKLAM, NDTRI_TAIL, TEMME_D};

const EPS: f64 = 1.1102230246251565e-16;
const EULER_GAMMA: f64 = 0.577_215_664_901_532_9;
const SQRT_2PI: f64 = 2.506_628_274_631_000_5;

fn horner(c: &[f64], z: f64) -> f64 {
    c.iter().fold(0.0, |acc, &v| acc * z + v)
}

// ---- ndtri ----

/// Acklam's fractions (`rdyn_ir::approx`): the starting point of the
/// Halley refinement.
fn ndtri_guess(p: f64) -> f64 {
    if p < NDTRI_TAIL {
        let q = (-2.0 * p.ln()).sqrt();
        return horner(&ACKLAM[2], q) / horner(&ACKLAM[3], q);
    }
    let c = p - 0.5;
    c * horner(&ACKLAM[0], c * c) / horner(&ACKLAM[1], c * c)
}

/// Inverse of the standard normal CDF.
pub fn ndtri(p: f64) -> f64 {
    if p.is_nan() || !(0.0..=1.0).contains(&p) {
        return f64::NAN;
    }
    if p == 0.0 || p == 1.0 {
        return if p == 0.0 { f64::NEG_INFINITY } else { f64::INFINITY };
    }
    let c = p - 0.5; // exact for p ≥ 0.25
    if c.abs() > 0.25 {
        // Tails; 1 - p is exact for p > 0.5.
        return if p < 0.5 { ndtri_lower(p) } else { -ndtri_lower(1.0 - p) };
    }
    let mut x = ndtri_guess(p);
    for _ in 0..2 {
        // Halley step on Φ(x) - p = ½erf(x/√2) - c, free of cancellation.
        let u = (0.5 * libm::erf(x * FRAC_1_SQRT_2) - c) * SQRT_2PI * (0.5 * x * x).exp();
        x -= u / (1.0 + 0.5 * x * u);
    }
    x
}

/// ndtri for 0 < p < 0.25: Halley steps on (Φ(x) - p)/φ(x), with
/// Φ(x)/φ(x) = √(π/2)·erfcx(-x/√2) so that the residual stays accurate deep
/// into the tail (subnormal p included).
fn ndtri_lower(p: f64) -> f64 {
    let mut x = ndtri_guess(p);
    for _ in 0..2 {
        // (−x > 0 here: erfcx's nonnegative branch.)
        let mills = (0.5 * PI).sqrt() * super::old::erfcx(-x * FRAC_1_SQRT_2);
        let half_sq = 0.5 * x * x;
        let ratio = if half_sq < 700.0 { p * SQRT_2PI * half_sq.exp() } else { SQRT_2PI * (p.ln() + half_sq).exp() };
        let u = mills - ratio;
        x -= u / (1.0 + 0.5 * x * u);
    }
    x
}

// ---- incomplete gamma ----

/// λ - 1 - ln λ for λ = x/a, accurate also near λ = 1.
fn lambda_m1_mlog(a: f64, x: f64) -> f64 {
    let s = (x - a) / a;
    if s.abs() >= 0.5 {
        return s - (x / a).ln();
    }
    // ln(1+s) = 2·atanh(u), u = s/(2+s), so s - ln(1+s) = s·u - 2(u³/3 + u⁵/5 + …).
    let u = s / (2.0 + s);
    let (mut pw, mut tail, mut k) = (u * u * u, 0.0, 3.0);
    while k < 80.0 {
        tail += pw / k;
        if (pw / k).abs() <= 1e-3 * EPS * tail.abs() {
            break;
        }
        pw *= u * u;
        k += 2.0;
    }
    s * u - 2.0 * tail
}

/// ln Γ*(a) = ln Γ(a) - ((a - ½)·ln a - a + ½·ln 2π), Stirling series (a ≥ 10).
fn ln_gamma_star(a: f64) -> f64 {
    #[rustfmt::skip]
    const C: [f64; 8] = [
        -3617.0 / 122400.0, 1.0 / 156.0, -691.0 / 360360.0, 1.0 / 1188.0,
        -1.0 / 1680.0, 1.0 / 1260.0, -1.0 / 360.0, 1.0 / 12.0,
    ];
    horner(&C, 1.0 / (a * a)) / a
}

/// ln Γ(1 + a), accurate also for tiny a (where 1 + a would round).
fn ln_gamma_1p(a: f64) -> f64 {
    if a.abs() >= 0.2 {
        return libm::lgamma(1.0 + a);
    }
    // ln Γ(1+a) = -γa + Σ_{k≥2} (-a)^k ζ(k)/k; the ζ(k) → 1 part sums to a - ln(1+a).
    -EULER_GAMMA * a + (a - a.ln_1p()) + horner(&ZM1, -a) * a * a
}

/// x^a e^{-x} / Γ(a+1) for a > 0, 0 < x < ∞.
fn igam_prefactor(a: f64, x: f64) -> f64 {
    if a >= 10.0 {
        (-a * lambda_m1_mlog(a, x) - ln_gamma_star(a)).exp() / (2.0 * PI * a).sqrt()
    } else if x < 700.0 {
        x.powf(a) * (-x).exp() / libm::tgamma(a + 1.0)
    } else {
        (a * x.ln() - x - libm::lgamma(a + 1.0)).exp()
    }
}

/// P(a, x) = x^a e^{-x}/Γ(a+1) · Σ_n x^n/((a+1)…(a+n)).
fn igam_series(a: f64, x: f64) -> f64 {
    let pre = igam_prefactor(a, x);
    let (mut r, mut c, mut sum) = (a, 1.0, 1.0);
    for _ in 0..20000 {
        if pre == 0.0 {
            break;
        }
        r += 1.0;
        c *= x / r;
        sum += c;
        if c <= EPS * sum {
            break;
        }
    }
    pre * sum
}

/// Q(a, x) for x > 1 from Legendre's continued fraction (modified Lentz).
fn igamc_continued_fraction(a: f64, x: f64) -> f64 {
    let pre = a * igam_prefactor(a, x); // x^a e^{-x} / Γ(a)
    let nonzero = |v: f64| v.abs().max(1e-300).copysign(v);
    let mut b = x + 1.0 - a;
    let (mut c, mut d) = (1e300, 1.0 / nonzero(b));
    let mut h = d;
    for i in 1..20000 {
        if pre == 0.0 {
            break;
        }
        let an = -f64::from(i) * (f64::from(i) - a);
        b += 2.0;
        d = 1.0 / nonzero(an * d + b);
        c = nonzero(b + an / c);
        h *= d * c;
        if (d * c - 1.0).abs() <= EPS {
            break;
        }
    }
    pre * h
}

/// Q(a, x) for x ≤ 1.1 and small a without the cancellation of 1 - P:
/// Q = 1 - x^a/Γ(a+1) - x^a/Γ(a)·Σ_{n≥1} (-x)^n/(n!(a+n)).
fn igamc_small_x(a: f64, x: f64) -> f64 {
    let (mut fac, mut sum) = (1.0, 0.0);
    for n in 1..2000 {
        let n = f64::from(n);
        fac *= -x / n;
        sum += fac / (a + n);
        if (fac / (a + n)).abs() <= EPS * sum.abs() {
            break;
        }
    }
    let lg = a * x.ln() - ln_gamma_1p(a);
    -lg.exp_m1() - a * lg.exp() * sum
}

/// Temme's uniform expansion for large a with x near a (DLMF 8.12):
/// Q = ½erfc(η√(a/2)) + R, P = ½erfc(-η√(a/2)) - R, where ½η² = λ - 1 - ln λ
/// and R = e^{-aη²/2}/√(2πa) · Σ_k C_k(η) a^{-k}.
fn igam_temme(a: f64, x: f64, lower: bool) -> f64 {
    let phi = lambda_m1_mlog(a, x);
    let eta = (2.0 * phi).sqrt().copysign(x - a);
    let (mut sum, mut afac) = (0.0, 1.0);
    for row in &TEMME_D {
        sum += row.iter().rev().fold(0.0, |ck, &d| ck * eta + d) * afac;
        afac /= a;
    }
    let r = (-a * phi).exp() / (2.0 * PI * a).sqrt() * sum;
    let z = eta * (0.5 * a).sqrt();
    if lower {
        0.5 * libm::erfc(-z) - r
    } else {
        0.5 * libm::erfc(z) + r
    }
}

/// Edge cases shared by P and Q (PyTorch's `calc_igamma`); `Some(P)` if decided.
fn igam_edge(a: f64, x: f64) -> Option<f64> {
    if x < 0.0 || a < 0.0 {
        Some(f64::NAN)
    } else if a == 0.0 {
        Some(if x > 0.0 { 1.0 } else { f64::NAN })
    } else if x == 0.0 {
        Some(0.0)
    } else if a.is_infinite() {
        Some(if x.is_infinite() { f64::NAN } else { 0.0 })
    } else if x.is_infinite() {
        Some(1.0)
    } else if a.is_nan() || x.is_nan() {
        Some(f64::NAN)
    } else {
        None
    }
}

/// Whether Temme's expansion (with the truncated table) is used.
fn use_temme(a: f64, x: f64) -> bool {
    a > 100.0 && ((x - a) / a).abs() < 0.1
}

/// Regularized lower incomplete gamma function P(a, x).
pub fn igamma(a: f64, x: f64) -> f64 {
    if let Some(p) = igam_edge(a, x) {
        return p;
    }
    let p = if use_temme(a, x) {
        igam_temme(a, x, true)
    } else if x > 1.0 && x > a {
        1.0 - igammac(a, x)
    } else {
        igam_series(a, x)
    };
    p.clamp(0.0, 1.0)
}

/// Regularized upper incomplete gamma function Q(a, x).
pub fn igammac(a: f64, x: f64) -> f64 {
    if let Some(p) = igam_edge(a, x) {
        return 1.0 - p;
    }
    let p_is_small = match x {
        _ if x > 1.1 => x < a,
        _ if x <= 0.5 => -0.4 / x.ln() < a,
        _ => x * 1.1 < a,
    };
    let q = if use_temme(a, x) {
        igam_temme(a, x, false)
    } else if p_is_small {
        1.0 - igam_series(a, x)
    } else if x > 1.1 {
        igamc_continued_fraction(a, x)
    } else {
        igamc_small_x(a, x)
    };
    q.clamp(0.0, 1.0)
}

// ---- digamma, erfinv ----

/// Inverse error function (Giles, 2010), refined by two Newton steps.
pub fn erfinv(y: f64) -> f64 {
    if y <= -1.0 {
        return if y == -1.0 { f64::NEG_INFINITY } else { f64::NAN };
    }
    if y >= 1.0 {
        return if y == 1.0 { f64::INFINITY } else { f64::NAN };
    }
    let yd = y;
    let w = -((1.0 - yd) * (1.0 + yd)).ln();
    let mut x = if w < 5.0 {
        let w = w - 2.5;
        let mut p = 2.810_226_36e-08;
        for c in [
            3.432_739_39e-07,
            -3.523_387_7e-06,
            -4.391_506_54e-06,
            0.000_218_580_87,
            -0.001_253_725_03,
            -0.004_177_681_64,
            0.246_640_727,
            1.501_409_41,
        ] {
            p = c + p * w;
        }
        p * yd
    } else {
        let w = w.sqrt() - 3.0;
        let mut p = -0.000_200_214_257;
        for c in [
            0.000_100_950_558,
            0.001_349_343_22,
            -0.003_673_428_44,
            0.005_739_507_73,
            -0.007_622_461_3,
            0.009_438_870_47,
            1.001_674_06,
            2.832_976_82,
        ] {
            p = c + p * w;
        }
        p * yd
    };
    for _ in 0..2 {
        let err = libm::erf(x) - yd;
        x -= err / (2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp());
    }
    x
}

/// Digamma by recurrence to x ≥ 6 and the asymptotic series.
pub fn digamma(x: f64) -> f64 {
    let mut x = x;
    if x == 0.0 {
        return if x.is_sign_negative() { f64::INFINITY } else { f64::NEG_INFINITY };
    }
    if x < 0.0 && x == x.floor() {
        return f64::NAN;
    }
    let mut result = 0.0;
    if x < 0.0 {
        // Reflection: ψ(1 - x) - ψ(x) = π cot(πx)
        let pi = std::f64::consts::PI;
        result -= pi / (pi * x).tan();
        x = 1.0 - x;
    }
    while x < 6.0 {
        result -= 1.0 / x;
        x += 1.0;
    }
    let inv = 1.0 / x;
    let inv2 = inv * inv;
    result += x.ln()
        - 0.5 * inv
        - inv2 * (1.0 / 12.0 - inv2 * (1.0 / 120.0 - inv2 * (1.0 / 252.0 - inv2 * (1.0 / 240.0 - inv2 / 132.0))));
    result
}
