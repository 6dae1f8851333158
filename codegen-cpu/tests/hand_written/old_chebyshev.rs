//! The hand-written Chebyshev polynomials (four kinds, plain and shifted)
//! as `codegen-cpu/src/special/poly.rs` had them before they were defined
//! once in `rdyn_ir::special` (a baseline for `hand_written.rs`; the
//! trigonometric form here uses the library's acos).

/// The degree as PyTorch converts it (C++ float → int64 truncation on x86):
/// NaN, ±inf and values beyond ±2^63 become i64::MIN, i.e. read as n < 0.
fn degree(n: f64) -> i64 {
    if n.is_finite() && n.abs() < i64::MAX as f64 {
        n as i64
    } else {
        i64::MIN
    }
}

/// The four kinds of Chebyshev polynomials.
#[derive(Clone, Copy)]
enum Kind {
    T,
    U,
    V,
    W,
}

/// Chebyshev polynomial of kind `kind`, degree n, at y with PyTorch's special
/// cases: `at_pos`/`at_neg` say the argument is at the +1/-1 end (x == ±1, or
/// x == 1 / x == 0 for the shifted forms); above degree `trig_from` the
/// trigonometric form is used for |y| < 1.
fn chebyshev(kind: Kind, y: f64, n: i64, ends: (bool, bool), trig_from: i64, shifted: bool) -> f64 {
    if n < 0 {
        return 0.0;
    }
    let parity = if n % 2 == 0 { 1.0 } else { -1.0 };
    let (n1, n2) = (n.wrapping_add(1) as f64, n.wrapping_add(n).wrapping_add(1) as f64);
    let (v_pos, v_neg, first) = match kind {
        Kind::T => (1.0, parity, y),
        Kind::U => (n1, parity * n1, y + y),
        Kind::V => (1.0, parity * n2, y + y - 1.0),
        Kind::W => (n2, parity, y + y + 1.0),
    };
    if ends.0 || ends.1 {
        return if ends.0 { v_pos } else { v_neg };
    }
    if n > trig_from && y.abs() < 1.0 {
        let (th, nh) = (y.acos(), n as f64 + 0.5);
        let half = th / 2.0;
        return match kind {
            Kind::T => (n as f64 * th).cos(),
            Kind::U if th.sin() != 0.0 => (n1 * th).sin() / th.sin(),
            Kind::U => n1 * (n1 * th).cos() / y,
            Kind::V if half.sin() != 1.0 => (nh * th).cos() / half.cos(),
            Kind::W if half.cos() != 1.0 => (nh * th).sin() / half.sin(),
            Kind::W if !shifted && y > 0.0 => v_pos,
            Kind::V | Kind::W => v_neg,
        };
    }
    if n == 0 {
        return 1.0;
    }
    // r = 2y·q - p from (p, q) = (1, first); stops early once NaN.
    let (mut p, mut q, mut r, mut k) = (1.0, first, first, 2);
    while k <= n && !q.is_nan() {
        r = (y + y) * q - p;
        (p, q) = (q, r);
        k += 1;
    }
    r
}

fn plain_chebyshev(kind: Kind, x: f64, n: f64, trig_from: i64) -> f64 {
    let one = x.abs() == 1.0;
    chebyshev(kind, x, degree(n), (one && x > 0.0, one && x < 0.0), trig_from, false)
}

fn shifted_chebyshev(kind: Kind, x: f64, n: f64, trig_from: i64) -> f64 {
    chebyshev(kind, x + x - 1.0, degree(n), (x == 1.0, x == 0.0), trig_from, true)
}

/// Chebyshev polynomial of the first kind T_n(x).
pub fn chebyshev_t(x: f64, n: f64) -> f64 {
    plain_chebyshev(Kind::T, x, n, 6)
}
/// Chebyshev polynomial of the second kind U_n(x).
pub fn chebyshev_u(x: f64, n: f64) -> f64 {
    plain_chebyshev(Kind::U, x, n, 8)
}
/// Chebyshev polynomial of the third kind V_n(x).
pub fn chebyshev_v(x: f64, n: f64) -> f64 {
    plain_chebyshev(Kind::V, x, n, 8)
}
/// Chebyshev polynomial of the fourth kind W_n(x).
pub fn chebyshev_w(x: f64, n: f64) -> f64 {
    plain_chebyshev(Kind::W, x, n, 8)
}
/// Shifted Chebyshev polynomial T*_n(x) = T_n(2x - 1).
pub fn shifted_chebyshev_t(x: f64, n: f64) -> f64 {
    shifted_chebyshev(Kind::T, x, n, 6)
}
/// Shifted Chebyshev polynomial U*_n(x) = U_n(2x - 1).
pub fn shifted_chebyshev_u(x: f64, n: f64) -> f64 {
    shifted_chebyshev(Kind::U, x, n, 6)
}
/// Shifted Chebyshev polynomial V*_n(x) = V_n(2x - 1).
pub fn shifted_chebyshev_v(x: f64, n: f64) -> f64 {
    shifted_chebyshev(Kind::V, x, n, 6)
}
/// Shifted Chebyshev polynomial W*_n(x) = W_n(2x - 1).
pub fn shifted_chebyshev_w(x: f64, n: f64) -> f64 {
    shifted_chebyshev(Kind::W, x, n, 4)
}
