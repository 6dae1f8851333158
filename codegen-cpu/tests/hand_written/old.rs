//! The hand-written float64 routines of the functions now defined once in
//! `rdyn_ir::special`, as they were before: Bessel I/K, Airy Ai and
//! spherical j0 (commit 97b36b6's `codegen-cpu/src/special/old.rs`), the
//! Hermite, Laguerre and Legendre polynomials (`special/poly.rs`), Hurwitz
//! zeta and erfcx (`special/mod.rs`). Only a baseline: `hand_written.rs`
//! checks the compiled definitions against them in ulps, `benches/special`
//! times both.

use std::f64::consts::{FRAC_1_SQRT_2, LN_2, PI};

use rdyn_ir::approx::{airy_u_ratio, AIRY_AI0, AIRY_DAI0, AIRY_SERIES};

const EPS: f64 = 1.1102230246251565e-16;
const EULER_GAMMA: f64 = 0.577_215_664_901_532_9;
const SQRT_2PI: f64 = 2.506_628_274_631_000_5;
const FRAC_1_SQRT_PI: f64 = 0.564_189_583_547_756_3;
// ---- Modified Bessel functions I0, I1 (and exponentially scaled forms) ----

/// I_ν(x) for 0 ≤ x ≤ 20, ν ∈ {0, 1}: power series, all terms positive.
fn bessel_i_series(x: f64, nu: u32) -> f64 {
    let (y, nu_f) = (0.25 * x * x, f64::from(nu));
    let (mut term, mut sum) = (1.0, 1.0);
    for k in 1..200 {
        let k = f64::from(k);
        term *= y / (k * (k + nu_f));
        sum += term;
        if term < 0.1 * EPS * sum {
            break;
        }
    }
    sum * if nu == 0 { 1.0 } else { 0.5 * x }
}

/// e^{-x}·I_ν(x) for x > 20 from the large-argument expansion
/// √(2πx)·e^{-x}·I_ν(x) ~ Σ_k Π_{j≤k} ((2j-1)² - 4ν²)/(8jx).
fn bessel_i_scaled_asymptotic(x: f64, nu: u32) -> f64 {
    let mu = f64::from(4 * nu * nu);
    let (mut term, mut sum) = (1.0_f64, 1.0);
    for j in 1..80 {
        let (j, odd) = (f64::from(j), f64::from(2 * j - 1));
        let next = term * (odd * odd - mu) / (8.0 * j * x);
        if next.abs() > term.abs() {
            break;
        }
        term = next;
        sum += term;
        if term.abs() < 0.1 * EPS * sum.abs() {
            break;
        }
    }
    sum / (SQRT_2PI * x.sqrt())
}

fn bessel_i(x: f64, nu: u32, scaled: bool) -> f64 {
    let ax = x.abs();
    let r = match (ax <= 20.0, scaled) {
        (true, false) => bessel_i_series(ax, nu),
        (true, true) => (-ax).exp() * bessel_i_series(ax, nu),
        (false, false) => ax.exp() * bessel_i_scaled_asymptotic(ax, nu),
        (false, true) => bessel_i_scaled_asymptotic(ax, nu),
    };
    // I1 is odd; like PyTorch, -0.0 maps to +0.0.
    r * if nu == 1 && x < 0.0 { -1.0 } else { 1.0 }
}

/// Modified Bessel function of the first kind, order 0.
pub fn i0(x: f64) -> f64 {
    bessel_i(x, 0, false)
}
/// exp(-|x|)·I0(x).
pub fn i0e(x: f64) -> f64 {
    bessel_i(x, 0, true)
}
/// Modified Bessel function of the first kind, order 1.
pub fn i1(x: f64) -> f64 {
    bessel_i(x, 1, false)
}
/// exp(-|x|)·I1(x).
pub fn i1e(x: f64) -> f64 {
    bessel_i(x, 1, true)
}

// ---- Modified Bessel functions K0, K1 (and exponentially scaled forms) ----

/// (K0(x), K1(x)) for 0 < x ≤ 1 from the ascending series (y = x²/4, H_k the
/// harmonic numbers, L = ln(x/2) + γ):
/// K0 = -L·I0 + Σ_{k≥1} H_k y^k/(k!)²,
/// K1 = 1/x + L·I1 - (x/4)·Σ_{k≥0} (H_k + H_{k+1}) y^k/(k!(k+1)!).
fn bessel_k_small(x: f64) -> [f64; 2] {
    let y = 0.25 * x * x;
    let l = x.ln() - LN_2 + EULER_GAMMA;
    let (mut t0, mut t1) = (1.0, 1.0); // y^k/(k!)², y^k/(k!(k+1)!)
    let (mut i0s, mut i1s, mut s0, mut s1, mut h) = (1.0, 1.0, 0.0, 1.0, 0.0);
    for k in 1..60 {
        let kf = f64::from(k);
        h += 1.0 / kf;
        t0 *= y / (kf * kf);
        t1 *= y / (kf * (kf + 1.0));
        i0s += t0;
        i1s += t1;
        s0 += h * t0;
        s1 += (2.0 * h + 1.0 / (kf + 1.0)) * t1;
        if t0 < 0.01 * EPS {
            break;
        }
    }
    [s0 - l * i0s, 1.0 / x + l * 0.5 * x * i1s - 0.25 * x * s1]
}

/// (e^x·K0(x), e^x·K1(x)) for x > 1 from
/// e^x·K_ν(x) = ∫_0^∞ exp(-2x·sinh²(t/2))·cosh(νt) dt by the trapezoidal
/// rule, which converges exponentially for this analytic integrand.
fn bessel_k_scaled_integral(x: f64) -> [f64; 2] {
    let sx = x.sqrt();
    // Step from the error bound exp(x(1 - cos d) - 2πd/h) over the strip
    // |Im t| < d: d → π/2 for moderate x, d ~ 2π/(hx) for large x.
    let h = if x <= 40.0 { (PI * PI / (45.0 + x)).min(0.65 / sx) } else { 0.65 / sx };
    let (mut s0, mut s1) = (0.5, 0.5);
    for j in 1..2000 {
        let t = f64::from(j) * h;
        let u = (0.5 * t).sinh() * sx; // scaled so that sinh² cannot underflow
        let e = (-2.0 * u * u).exp();
        s0 += e;
        s1 += e * t.cosh();
        if e * t.cosh() < 1e-18 * s1 {
            break;
        }
    }
    [h * s0, h * s1]
}

fn bessel_k(x: f64, nu: usize, scaled: bool) -> f64 {
    match x {
        _ if x.is_nan() || x < 0.0 => f64::NAN,
        _ if x == 0.0 => f64::INFINITY,
        _ if x == f64::INFINITY => 0.0,
        _ if x <= 1.0 => bessel_k_small(x)[nu] * if scaled { x.exp() } else { 1.0 },
        _ => bessel_k_scaled_integral(x)[nu] * if scaled { 1.0 } else { (-x).exp() },
    }
}

/// Modified Bessel function of the second kind, order 0.
pub fn k0(x: f64) -> f64 {
    bessel_k(x, 0, false)
}
/// Modified Bessel function of the second kind, order 1.
pub fn k1(x: f64) -> f64 {
    bessel_k(x, 1, false)
}
/// exp(x)·K0(x).
pub fn k0e(x: f64) -> f64 {
    bessel_k(x, 0, true)
}
/// exp(x)·K1(x).
pub fn k1e(x: f64) -> f64 {
    bessel_k(x, 1, true)
}

/// Airy function Ai(x): the Maclaurin series on `AIRY_SERIES`, beyond it
/// the large-argument expansions (DLMF 9.7.5 and 9.7.9) with ζ = (2/3)|x|^(3/2),
/// summed until a term is negligible or grows. NaN at ±inf, as PyTorch.
pub fn airy_ai(x: f64) -> f64 {
    let (lo, hi) = AIRY_SERIES;
    if x.is_nan() || x.is_infinite() {
        return f64::NAN;
    }
    if (lo..=hi).contains(&x) {
        // f = Σ t_k, t_k = t_(k−1)·x³/((3k−1)·3k); g = Σ u_k from x,
        // u_k = u_(k−1)·x³/(3k·(3k+1)).
        let x3 = x * x * x;
        let (mut t, mut u, mut f, mut g) = (1.0, x, 1.0, x);
        for k in 1..200 {
            let k = f64::from(k);
            t *= x3 / ((3.0 * k - 1.0) * (3.0 * k));
            u *= x3 / ((3.0 * k) * (3.0 * k + 1.0));
            f += t;
            g += u;
            if t.abs() + u.abs() < 0.1 * EPS * (f.abs() + g.abs()) {
                break;
            }
        }
        return AIRY_AI0 * f - AIRY_DAI0 * g;
    }
    let z = x.abs();
    let zeta = 2.0 / 3.0 * z * z.sqrt();
    // Terms u_k/ζ^k, with the sign pattern of each expansion.
    let (mut term, mut even, mut odd, mut alt) = (1.0, 1.0, 0.0, 1.0);
    for k in 1..100 {
        let next = term * airy_u_ratio(f64::from(k)) / zeta;
        if next.abs() > term.abs() {
            break;
        }
        term = next;
        if x > 0.0 {
            // Σ (−1)^k u_k ζ^(−k), kept in `even`.
            alt = -alt;
            even += alt * term;
        } else if k % 2 == 0 {
            // P = Σ (−1)^j u_2j ζ^(−2j), Q = Σ (−1)^j u_(2j+1) ζ^(−2j−1).
            even += if k % 4 == 0 { term } else { -term };
        } else {
            odd += if k % 4 == 1 { term } else { -term };
        }
        if term < 0.1 * EPS {
            break;
        }
    }
    let scale = FRAC_1_SQRT_PI / z.sqrt().sqrt();
    if x > 0.0 {
        0.5 * scale * (-zeta).exp() * even
    } else {
        // cos(ζ − π/4)·P + sin(ζ − π/4)·Q.
        let (s, c) = zeta.sin_cos();
        scale * FRAC_1_SQRT_2 * ((c + s) * even + (s - c) * odd)
    }
}

/// Spherical Bessel function j0(x) = sin(x)/x (0 at ±inf).
pub fn spherical_j0(x: f64) -> f64 {
    if x.is_infinite() {
        return 0.0;
    }
    if x.abs() >= 0.5 {
        return x.sin() / x;
    }
    // Σ_k (-1)^k x^{2k}/(2k+1)! to x^12, nested.
    let z = x * x;
    (1..=6).rev().fold(1.0, |acc, k| {
        let k = f64::from(k);
        1.0 - z / ((2.0 * k) * (2.0 * k + 1.0)) * acc
    })
}

// ---- Orthogonal polynomials ----

/// The degree as PyTorch converts it (C++ float → int64 truncation on x86):
/// NaN, ±inf and values beyond ±2^63 become i64::MIN, i.e. read as n < 0.
fn degree(n: f64) -> i64 {
    if n.is_finite() && n.abs() < i64::MAX as f64 {
        n as i64
    } else {
        i64::MIN
    }
}

/// Physicists' Hermite polynomial H_n(x); NaN above degree 512 like PyTorch.
pub fn hermite_h(x: f64, n: f64) -> f64 {
    match degree(n) {
        n if n < 0 => 0.0,
        0 => 1.0,
        1 => x + x,
        n if n > 512 => f64::NAN,
        n => {
            let (mut p, mut q, mut r) = (1.0, x + x, 0.0);
            for k in (2..n + n).step_by(2) {
                r = (x + x) * q - k as f64 * p;
                (p, q) = (q, r);
            }
            r
        }
    }
}

/// Probabilists' Hermite polynomial He_n(x); NaN above degree 512.
pub fn hermite_he(x: f64, n: f64) -> f64 {
    match degree(n) {
        n if n < 0 => 0.0,
        0 => 1.0,
        n if n > 512 => f64::NAN,
        n => {
            let (mut p, mut q) = (1.0, x);
            for k in 1..n {
                (p, q) = (q, x * q - k as f64 * p);
            }
            q
        }
    }
}

/// Laguerre polynomial L_n(x).
pub fn laguerre_l(x: f64, n: f64) -> f64 {
    match degree(n) {
        n if n < 0 => 0.0,
        _ if x == 0.0 => 1.0,
        0 => 1.0,
        n => {
            let (mut p, mut q, mut k) = (1.0, 1.0 - x, 1);
            while k < n && !q.is_nan() {
                let kf = k as f64;
                (p, q) = (q, ((kf + kf + (1.0 - x)) * q - kf * p) / (kf + 1.0));
                k += 1;
            }
            q
        }
    }
}

/// Legendre polynomial P_n(x).
pub fn legendre_p(x: f64, n: f64) -> f64 {
    match degree(n) {
        n if n < 0 => 0.0,
        n if x.abs() == 1.0 => {
            if x > 0.0 || n % 2 == 0 {
                1.0
            } else {
                -1.0
            }
        }
        0 => 1.0,
        n => {
            let (mut p, mut q, mut k) = (1.0, x, 1);
            while k < n && !q.is_nan() {
                let kf = k as f64;
                (p, q) = (q, ((kf + kf + 1.0) * x * q - kf * p) / (kf + 1.0));
                k += 1;
            }
            q
        }
    }
}

// ---- Hurwitz zeta ----

/// Hurwitz zeta ζ(x, q) = Σ_{k≥0} (k + q)^{-x} with the Cephes/PyTorch domain
/// conventions: direct summation plus an Euler–Maclaurin tail.
pub fn zeta(x: f64, q: f64) -> f64 {
    // B_{2k}/(2k)! for k = 1..12.
    #[rustfmt::skip]
    const B2K: [f64; 12] = [
        1.0 / 12.0, -1.0 / 720.0, 1.0 / 30240.0, -1.0 / 1209600.0, 1.0 / 47900160.0,
        -691.0 / 1307674368000.0, 1.0 / 74724249600.0, -3617.0 / 10670622842880000.0,
        43867.0 / 5109094217170944000.0, -174611.0 / 802857662698291200000.0,
        854513.0 / 155112100433309859840000.0, -236364091.0 / 1693824136731743669452800000.0,
    ];
    if x <= 1.0 {
        return if x == 1.0 { f64::INFINITY } else { f64::NAN };
    }
    if q <= 0.0 && q == q.floor() {
        return f64::INFINITY;
    }
    if q <= 0.0 && x != x.floor() {
        return f64::NAN;
    }
    let (mut sum, mut w, mut b, mut n) = (q.powf(-x), q, 0.0, 0);
    while n < 9 || w <= 9.0 {
        n += 1;
        w += 1.0;
        b = w.powf(-x);
        sum += b;
        if b.abs() < EPS * sum {
            return sum;
        }
    }
    // Tail beyond w (b = w^{-x} already counted): ∫ - ½f(w) + Σ_k B_2k/(2k)!·x(x+1)…(x+2k-2)·w^{-x-2k+1}.
    sum += b * w / (x - 1.0) - 0.5 * b;
    let (mut rising, mut pw, mut k) = (1.0, b, 0.0);
    for coef in B2K {
        rising *= x + k;
        pw /= w;
        let t = coef * rising * pw;
        sum += t;
        if (t / sum).abs() < EPS {
            break;
        }
        rising *= x + k + 1.0;
        pw /= w;
        k += 2.0;
    }
    sum
}

// ---- erfcx ----

/// exp(x²) with the rounding error of x·x compensated (x² = h + l exactly).
fn exp_sq(x: f64) -> f64 {
    let h = x * x;
    h.exp() * (1.0 + x.mul_add(x, -h))
}

/// erfcx for x ≥ 0.
fn erfcx_nonneg(x: f64) -> f64 {
    if x < 26.0 {
        return exp_sq(x) * libm::erfc(x);
    }
    // erfc(x) = e^{-x²}/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + …)))).
    let f = (1..=40).rev().fold(x, |f, k| x + 0.5 * f64::from(k) / f);
    FRAC_1_SQRT_PI / f
}

/// Scaled complementary error function exp(x²)·erfc(x).
pub fn erfcx(x: f64) -> f64 {
    match x {
        _ if x.is_nan() || x >= 0.0 => erfcx_nonneg(x),
        _ if x < -26.7 => f64::INFINITY,
        _ => 2.0 * exp_sq(x) - erfcx_nonneg(-x),
    }
}
