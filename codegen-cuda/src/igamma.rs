//! The regularized incomplete gamma functions P(a, x) (`igamma`) and
//! Q(a, x) (`igammac`) of float32 values as PTX, computed in float64: the
//! series P = x^a e^(−x)/Γ(a+1)·Σ x^n/((a+1)…(a+n)) where x < a + 1,
//! Legendre's continued fraction for Q (modified Lentz) elsewhere, the
//! other one as 1 minus it (no cancellation at float32's resolution: the
//! one subtracted is below about 0.7 in its own region). The prefactor is
//! exp(a·ln x − x − ln Γ(a+1)), ln Γ by upward recurrence to 10 and
//! Stirling's series. PyTorch's edge cases (negative or NaN arguments,
//! a = 0, x = 0, infinities) are applied last, in its order.

use crate::emit::{f64_imm as d64, Class, Func};

const EPS: f64 = 1.110_223_024_625_156_5e-16;
/// The continued fraction's guard against division by zero.
const TINY: f64 = 1e-300;
/// Iterations at most for the series and the continued fraction; both need
/// about √a·10 for large a.
const MAX_ITER: f64 = 5000.0;

fn dd(f: &mut Func, op: &str, a: &str, b: &str) -> String {
    f.op(Class::F64, op, &[a, b])
}

/// `while cond(i) { body }` over a float64 counter `i` from `first`, at
/// most `MAX_ITER` times, `body` branching to `out` to leave early.
fn repeat(f: &mut Func, first: f64, body: impl FnOnce(&mut Func, &str, &str)) {
    let i = f.mov(Class::F64, &d64(first));
    let (top, out) = (f.label("igamma_loop"), f.label("igamma_end"));
    f.place(&top);
    let done = f.setp("ge", "f64", &i, &d64(MAX_ITER));
    f.ins(format!("@{done} bra {out}"));
    body(f, &i, &out);
    f.ins(format!("add.rn.f64 {i}, {i}, {}", d64(1.0)));
    f.ins(format!("bra {top}"));
    f.place(&out);
}

/// ln Γ(z) for z > 0: z·(z+1)…(z+n−1) while z + n < 10, then Stirling's
/// series at z + n (its first omitted term is below 2e-18 there).
fn lgamma64(f: &mut Func, z0: &str) -> String {
    const B: [f64; 8] = [
        1.0 / 12.0,
        -1.0 / 360.0,
        1.0 / 1260.0,
        -1.0 / 1680.0,
        1.0 / 1188.0,
        -691.0 / 360_360.0,
        1.0 / 156.0,
        -3617.0 / 122_400.0,
    ];
    let z = f.mov(Class::F64, z0);
    let prod = f.mov(Class::F64, &d64(1.0));
    let (top, out) = (f.label("lgamma_up"), f.label("lgamma_stirling"));
    f.place(&top);
    let big = f.setp("ge", "f64", &z, &d64(10.0));
    f.ins(format!("@{big} bra {out}"));
    f.ins(format!("mul.rn.f64 {prod}, {prod}, {z}"));
    f.ins(format!("add.rn.f64 {z}, {z}, {}", d64(1.0)));
    f.ins(format!("bra {top}"));
    f.place(&out);
    let w = dd(f, "div.rn", &d64(1.0), &z);
    let w2 = dd(f, "mul.rn", &w, &w);
    let series = f.horner(Class::F64, &w2, &B);
    let series = dd(f, "mul.rn", &series, &w);
    let ln_z = crate::math64::log(f, &z);
    let zh = dd(f, "sub.rn", &z, &d64(0.5));
    let main = f.op(Class::F64, "fma.rn", &[&zh, &ln_z, &series]);
    let main = dd(f, "sub.rn", &main, &z);
    let main = dd(f, "add.rn", &main, &d64(0.5 * (2.0 * std::f64::consts::PI).ln()));
    let ln_prod = crate::math64::log(f, &prod);
    dd(f, "sub.rn", &main, &ln_prod)
}

/// P(a, x) by its series, for 0 < x < a + 1.
fn series_p(f: &mut Func, a: &str, x: &str, ln_pre: &str) -> String {
    let (r, c, sum) = (f.mov(Class::F64, a), f.mov(Class::F64, &d64(1.0)), f.mov(Class::F64, &d64(1.0)));
    repeat(f, 0.0, |f, _, out| {
        f.ins(format!("add.rn.f64 {r}, {r}, {}", d64(1.0)));
        let ratio = dd(f, "div.rn", x, &r);
        f.ins(format!("mul.rn.f64 {c}, {c}, {ratio}"));
        f.ins(format!("add.rn.f64 {sum}, {sum}, {c}"));
        let lim = dd(f, "mul.rn", &sum, &d64(EPS));
        let small = f.setp("le", "f64", &c, &lim);
        f.ins(format!("@{small} bra {out}"));
    });
    let pre = crate::math64::exp(f, ln_pre);
    dd(f, "mul.rn", &pre, &sum)
}

/// |v| raised to at least `TINY`, keeping the sign.
fn nonzero(f: &mut Func, v: &str) {
    let av = f.op(Class::F64, "abs", &[v]);
    let tiny = f.setp("lt", "f64", &av, &d64(TINY));
    f.ins(format!("@{tiny} mov.f64 {v}, {}", d64(TINY)));
}

/// Q(a, x) by Legendre's continued fraction, for x ≥ a + 1.
fn fraction_q(f: &mut Func, a: &str, x: &str, ln_pre: &str) -> String {
    let b = dd(f, "add.rn", x, &d64(1.0));
    let b = dd(f, "sub.rn", &b, a);
    let c = f.mov(Class::F64, &d64(1.0 / TINY));
    let d = f.mov(Class::F64, &b);
    nonzero(f, &d);
    f.ins(format!("div.rn.f64 {d}, {}, {d}", d64(1.0)));
    let h = f.mov(Class::F64, &d);
    repeat(f, 1.0, |f, i, out| {
        // a_i = −i(i − a), b_i = b_(i−1) + 2.
        let ia = dd(f, "sub.rn", i, a);
        let an = dd(f, "mul.rn", i, &ia);
        let an = f.op(Class::F64, "neg", &[&an]);
        f.ins(format!("add.rn.f64 {b}, {b}, {}", d64(2.0)));
        f.ins(format!("fma.rn.f64 {d}, {an}, {d}, {b}"));
        nonzero(f, &d);
        let q = dd(f, "div.rn", &an, &c);
        f.ins(format!("add.rn.f64 {c}, {b}, {q}"));
        nonzero(f, &c);
        f.ins(format!("div.rn.f64 {d}, {}, {d}", d64(1.0)));
        let del = dd(f, "mul.rn", &d, &c);
        f.ins(format!("mul.rn.f64 {h}, {h}, {del}"));
        let off = dd(f, "sub.rn", &del, &d64(1.0));
        let off = f.op(Class::F64, "abs", &[&off]);
        let done = f.setp("le", "f64", &off, &d64(EPS));
        f.ins(format!("@{done} bra {out}"));
    });
    // x^a e^(−x)/Γ(a) = a·x^a e^(−x)/Γ(a+1).
    let pre = crate::math64::exp(f, ln_pre);
    let pre = dd(f, "mul.rn", &pre, a);
    dd(f, "mul.rn", &pre, &h)
}

/// P(a, x) (`upper` false) or Q(a, x) (`upper`) of float32 registers.
pub(crate) fn igamma(f: &mut Func, a32: &str, x32: &str, upper: bool) -> String {
    let (a, x) = (f.reg(Class::F64), f.reg(Class::F64));
    f.ins(format!("cvt.f64.f32 {a}, {a32}"));
    f.ins(format!("cvt.f64.f32 {x}, {x32}"));
    let r = f.reg(Class::F64);
    // ln(x^a e^(−x)/Γ(a+1)), with a clamped positive (NaN too) so that
    // edge cases, overridden below, cannot loop long.
    let a_pos = dd(f, "max", &a, &d64(TINY));
    let a1 = dd(f, "add.rn", &a_pos, &d64(1.0));
    let lg = lgamma64(f, &a1);
    let ln_x = crate::math64::log(f, &x);
    let t = dd(f, "mul.rn", &a_pos, &ln_x);
    let t = dd(f, "sub.rn", &t, &x);
    let ln_pre = dd(f, "sub.rn", &t, &lg);
    let (by_fraction, done) = (f.label("igamma_fraction"), f.label("igamma_done"));
    let far = f.setp("ge", "f64", &x, &a1);
    f.ins(format!("@{far} bra {by_fraction}"));
    let p = series_p(f, &a_pos, &x, &ln_pre);
    if upper {
        f.ins(format!("sub.rn.f64 {r}, {}, {p}", d64(1.0)));
    } else {
        f.ins(format!("mov.f64 {r}, {p}"));
    }
    f.ins(format!("bra {done}"));
    f.place(&by_fraction);
    let q = fraction_q(f, &a_pos, &x, &ln_pre);
    if upper {
        f.ins(format!("mov.f64 {r}, {q}"));
    } else {
        f.ins(format!("sub.rn.f64 {r}, {}, {q}", d64(1.0)));
    }
    f.place(&done);
    // Into [0, 1], NaN kept.
    let below = f.setp("lt", "f64", &r, &d64(0.0));
    f.ins(format!("@{below} mov.f64 {r}, {}", d64(0.0)));
    let above = f.setp("gt", "f64", &r, &d64(1.0));
    f.ins(format!("@{above} mov.f64 {r}, {}", d64(1.0)));
    // Edge cases, lowest priority first; each gives P (Q = 1 − P).
    let set = |f: &mut Func, pred: &str, p: f64| {
        let v = if upper { 1.0 - p } else { p };
        f.ins(format!("@{pred} mov.f64 {r}, {}", d64(v)));
    };
    let a_nan = f.setp("nan", "f64", &a, &a);
    let x_nan = f.setp("nan", "f64", &x, &x);
    let any_nan = f.pred("or", &a_nan, &x_nan);
    set(f, &any_nan, f64::NAN);
    let x_inf = f.setp("eq", "f64", &x, &d64(f64::INFINITY));
    set(f, &x_inf, 1.0);
    let a_inf = f.setp("eq", "f64", &a, &d64(f64::INFINITY));
    let a_inf_x_finite = f.pred("and", &a_inf, &format!("!{x_inf}"));
    set(f, &a_inf_x_finite, 0.0);
    let both_inf = f.pred("and", &a_inf, &x_inf);
    set(f, &both_inf, f64::NAN);
    let x_zero = f.setp("eq", "f64", &x, &d64(0.0));
    set(f, &x_zero, 0.0);
    let a_zero = f.setp("eq", "f64", &a, &d64(0.0));
    let x_pos = f.setp("gt", "f64", &x, &d64(0.0));
    let a_zero_x_pos = f.pred("and", &a_zero, &x_pos);
    set(f, &a_zero_x_pos, 1.0);
    let a_zero_x_not = f.pred("and", &a_zero, &format!("!{x_pos}"));
    set(f, &a_zero_x_not, f64::NAN);
    let a_neg = f.setp("lt", "f64", &a, &d64(0.0));
    let x_neg = f.setp("lt", "f64", &x, &d64(0.0));
    let neg = f.pred("or", &a_neg, &x_neg);
    set(f, &neg, f64::NAN);
    let out = f.reg(Class::F32);
    f.ins(format!("cvt.rn.f32.f64 {out}, {r}"));
    out
}
