//! The scaled complementary error function erfcx(x) = e^(x²)·erfc(x).

use super::builder::Builder;
use super::{Reg, SpecialFn, Unary};

const FRAC_1_SQRT_PI: f64 = 0.564_189_583_547_756_3;

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
fn erfcx_nonneg(b: &mut Builder, x: Reg) -> Reg {
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
