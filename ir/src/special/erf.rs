//! The error function erf (a building block), the scaled complementary
//! error function erfcx(x) = e^(x²)·erfc(x), and the inverse error function
//! erfinv.

use super::builder::Builder;
use super::{Binary, Reg, SpecialFn, Unary};

const FRAC_1_SQRT_PI: f64 = 0.564_189_583_547_756_3;
const FRAC_2_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;
const EPS: f64 = 1.1102230246251565e-16;

/// erf(w) for |w| < ½ by 2/√π·Σ t_n/(2n+1), t_0 = w, t_n = t_(n−1)·(−w²)/n
/// (under 20 terms there).
fn erf_series(b: &mut Builder, w: Reg) -> Reg {
    let w2 = b.mul(w, w);
    let nw2 = b.neg(w2);
    let (t, sum) = (b.var(w), b.var(w));
    b.repeat(1.0, 30, |b, n| {
        let ratio = b.div(nw2, n);
        b.update(t, Binary::Mul, t, ratio);
        let k = b.fma(n, 2.0, 1.0);
        let term = b.div(t, k);
        b.update(sum, Binary::Add, sum, term);
        b.break_if_negligible(term, sum, 0.01 * EPS);
    });
    b.mul(FRAC_2_SQRT_PI, sum)
}

/// erf(w): the series below |w| = ½, ±(1 − erfc(|w|)) beyond, where erf
/// is above ½ and the difference loses nothing.
pub(super) fn erf(b: &mut Builder, w: Reg) -> Reg {
    let r = b.var(0.0);
    let aw = b.abs(w);
    let small = b.lt(aw, 0.5);
    b.if_else(
        small,
        |b| {
            let v = erf_series(b, w);
            b.set(r, v);
        },
        |b| {
            let c = b.unary(Unary::Erfc, aw);
            let v = b.sub(1.0, c);
            let neg = b.lt(w, 0.0);
            let nv = b.neg(v);
            let v = b.select(neg, nv, v);
            b.set(r, v);
        },
    );
    r
}

/// e^(x²) with the rounding error of x·x compensated (x² = h + l exactly).
fn exp_sq(b: &mut Builder, x: Reg) -> Reg {
    let h = b.mul(x, x);
    let nh = b.neg(h);
    let l = b.fma(x, x, nh);
    let e = b.exp(h);
    let c = b.add(1.0, l);
    b.mul(e, c)
}

/// erfcx(x) for x ≥ 0 (or NaN): e^(x²)·erfc(x) below 26, beyond it
/// Laplace's continued fraction 1/(√π·(x + (1/2)/(x + 1/(x + (3/2)/(x + …))))),
/// 40 levels deep.
pub(super) fn erfcx_nonneg(b: &mut Builder, x: Reg) -> Reg {
    let r = b.var(0.0);
    let near = b.lt(x, 26.0);
    b.if_else(
        near,
        |b| {
            let e = exp_sq(b, x);
            let c = b.unary(Unary::Erfc, x);
            b.update(r, super::Binary::Mul, e, c);
        },
        |b| {
            let mut f = x;
            for k in (1..=40).rev() {
                let q = b.div(0.5 * f64::from(k), f);
                f = b.add(x, q);
            }
            b.update(r, super::Binary::Div, FRAC_1_SQRT_PI, f);
        },
    );
    r
}

/// erfcx: for x < 0, 2e^(x²) − erfcx(−x), +inf below −26.7 (where e^(x²)
/// overflows).
pub(super) fn erfcx() -> SpecialFn {
    let mut b = Builder::new("erfcx");
    let x = b.param();
    let below = b.lt(x, 0.0);
    b.when(below, |b| {
        let far = b.lt(x, -26.7);
        b.return_if(far, f64::INFINITY);
        let e = exp_sq(b, x);
        let twice = b.mul(2.0, e);
        let nx = b.neg(x);
        let r = erfcx_nonneg(b, nx);
        let v = b.sub(twice, r);
        b.ret(v);
    });
    let v = erfcx_nonneg(&mut b, x);
    b.finish(v)
}

/// Giles' single-precision approximations of erfinv (2010), highest degree
/// first, in w − 2.5 for w = −ln(1 − y²) < 5 and in √w − 3 beyond.
#[allow(clippy::excessive_precision)]
const GILES: [[f64; 9]; 2] = [
    [
        2.810_226_36e-08,
        3.432_739_39e-07,
        -3.523_387_7e-06,
        -4.391_506_54e-06,
        0.000_218_580_87,
        -0.001_253_725_03,
        -0.004_177_681_64,
        0.246_640_727,
        1.501_409_41,
    ],
    [
        -0.000_200_214_257,
        0.000_100_950_558,
        0.001_349_343_22,
        -0.003_673_428_44,
        0.005_739_507_73,
        -0.007_622_461_3,
        0.009_438_870_47,
        1.001_674_06,
        2.832_976_82,
    ],
];

/// erfinv(y): Giles' approximation refined by two Newton steps; ±inf at
/// ±1, NaN outside [−1, 1].
pub(super) fn erfinv() -> SpecialFn {
    let mut b = Builder::new("erfinv");
    let y = b.param();
    let minus_one = b.eq(y, -1.0);
    b.return_if(minus_one, f64::NEG_INFINITY);
    let one = b.eq(y, 1.0);
    b.return_if(one, f64::INFINITY);
    let above = b.gt(y, -1.0);
    let below = b.lt(y, 1.0);
    let inside = b.and(above, below);
    let outside = b.not(inside);
    b.return_if(outside, f64::NAN);
    let (ym, yp) = (b.sub(1.0, y), b.add(1.0, y));
    let prod = b.mul(ym, yp);
    let l = b.log(prod);
    let w = b.neg(l);
    let x = b.var(0.0);
    let central = b.lt(w, 5.0);
    b.if_else(
        central,
        |b| {
            let t = b.sub(w, 2.5);
            let p = b.poly(&GILES[0], t);
            b.update(x, Binary::Mul, p, y);
        },
        |b| {
            let s = b.sqrt(w);
            let t = b.sub(s, 3.0);
            let p = b.poly(&GILES[1], t);
            b.update(x, Binary::Mul, p, y);
        },
    );
    for _ in 0..2 {
        // x − (erf(x) − y)/(2/√π·e^(−x²)).
        let e = erf(&mut b, x);
        let err = b.sub(e, y);
        let xx = b.mul(x, x);
        let nxx = b.neg(xx);
        let g = b.exp(nxx);
        let d = b.mul(FRAC_2_SQRT_PI, g);
        let step = b.div(err, d);
        b.update(x, Binary::Sub, x, step);
    }
    b.finish(x)
}
