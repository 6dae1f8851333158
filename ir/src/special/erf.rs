//! The error function erf (a building block), the scaled complementary
//! error function erfcx(x) = e^(x²)·erfc(x), and the inverse error function
//! erfinv.

use super::builder::Builder;
use super::{Binary, Reg, SpecialFn, Unary};

const FRAC_1_SQRT_PI: f64 = 0.564_189_583_547_756_3;
const FRAC_2_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;

/// erf(w) for |w| < ½: 2/√π·w·Σ_(n=0..13) (−1)^n·z^n/(n!·(2n + 1)),
/// z = w², by Horner's rule. The first term left out is below 1e-19 of
/// the sum at |w| = ½; a fixed polynomial has no divisions and no exit
/// test, where the term-by-term series took two divisions a term.
fn erf_series(b: &mut Builder, w: Reg) -> Reg {
    let mut coeffs = [0.0; 14];
    let mut factorial = 1.0;
    for (n, c) in coeffs.iter_mut().rev().enumerate() {
        if n > 0 {
            factorial *= n as f64;
        }
        let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
        *c = sign / (factorial * (2 * n + 1) as f64);
    }
    let z = b.mul(w, w);
    let p = b.poly(&coeffs, z);
    let wp = b.mul(w, p);
    b.mul(FRAC_2_SQRT_PI, wp)
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

/// erfinv(y): Giles' single-precision approximation refined by Newton's
/// method until the next step would be negligible (two steps in the
/// centre, as many as four at 1 − |y| = 2^-53); ±inf at ±1, NaN outside [−1, 1].
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
    let ay = b.abs(y);
    let tail = b.gt(ay, 0.5);
    let negative = b.lt(y, 0.0);
    // 1 − |y|, exact in the tails (Sterbenz).
    let q = b.sub(1.0, ay);
    let step = b.var(0.0);
    b.repeat(0.0, 4, |b, _| {
        let xx = b.mul(x, x);
        let nxx = b.neg(xx);
        let g = b.exp(nxx);
        let d = b.mul(FRAC_2_SQRT_PI, g);
        b.if_else(
            tail,
            |b| {
                // Newton on ln erfc(|x|) = ln(1 − |y|): that equation is
                // nearly linear in x², so the steps converge from Giles'
                // estimate even at 1 − |y| = 2^-53, where it is 10% off
                // and Newton on erf(x) = y crawls. ln(erfc/q) is exact
                // relative to q near ±1, where erf(x) − y would cancel.
                let ax = b.abs(x);
                let c = b.unary(Unary::Erfc, ax);
                let r = b.div(c, q);
                let l = b.log(r);
                let lc = b.mul(l, c);
                let s = b.div(lc, d);
                let ns = b.neg(s);
                let v = b.select(negative, s, ns);
                b.set(step, v);
            },
            |b| {
                // Newton on erf(x) = y.
                let e = erf(b, x);
                let err = b.sub(e, y);
                b.update(step, Binary::Div, err, d);
            },
        );
        b.update(x, Binary::Sub, x, step);
        // Both iterations converge quadratically with a constant below
        // |x| ≤ 6 (erf''/2erf' = −x; ½x for ln erfc), so after a step
        // under 1e-9·|x| the next would be under 4e-17·|x|: stop.
        b.break_if_negligible(step, x, 1e-9);
    });
    b.finish(x)
}
