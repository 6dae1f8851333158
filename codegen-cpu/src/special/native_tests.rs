//! Compiled special functions against the evaluator: bit for bit (NaN
//! against NaN), over NaN, ±inf, ±0, subnormals, huge values, branch
//! edges, grids and random bit patterns.
#![allow(clippy::unwrap_used, clippy::panic)]

use rdyn_ir::special::{eval, Binary, Builder, Cmp, Special, SpecialFn, Unary};

use super::native::{code, compile, Native};

/// Same bits, or both NaN.
fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn arguments() -> Vec<f64> {
    let mut v = vec![f64::NAN, f64::INFINITY, 0.0, 1e-310, 5e-324, 1e-300, 1e300, f64::MAX, f64::MIN_POSITIVE];
    for edge in [0.5_f64, 1.0, 5.5, 8.0, 20.0, 26.0, 40.0, 709.0, 710.0] {
        v.extend([edge, f64::from_bits(edge.to_bits() + 1), f64::from_bits(edge.to_bits() - 1)]);
    }
    v.extend((-2000..=2000).map(|i| f64::from(i) * 0.025));
    v.extend((-320..=308).map(|i| 10f64.powi(i)));
    let mut s = 0x9E37_79B9_7F4A_7C15_u64;
    for _ in 0..4000 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        // Exponents within ±2^10 of 1, and any bit pattern.
        v.push(f64::from_bits((s & 0x800F_FFFF_FFFF_FFFF) | ((1013 + (s >> 52) % 22) << 52)));
        v.push(f64::from_bits(s.rotate_left(17)));
    }
    let neg: Vec<f64> = v.iter().map(|x| -x).collect();
    v.extend(neg);
    v
}

fn check(f: &SpecialFn, native: Native, args: &[[f64; 2]]) {
    for a in args {
        let want = eval(f, a);
        let got = match native {
            Native::One(g) => g(a[0]),
            Native::Two(g) => g(a[0], a[1]),
        };
        assert!(same(got, want), "{}({:e}, {:e}): compiled {got:e}, evaluated {want:e}", f.name, a[0], a[1]);
    }
}

#[test]
fn every_definition_compiles_and_matches_the_evaluator() {
    let xs = arguments();
    let pairs = pairs(&xs);
    for which in Special::ALL {
        let f = which.body();
        let native = code(which).unwrap_or_else(|| panic!("{} did not compile", f.name));
        match native {
            Native::One(_) => check(f, native, &xs.iter().map(|&x| [x, 0.0]).collect::<Vec<_>>()),
            Native::Two(_) => check(f, native, &pairs),
        }
    }
}

/// Every 7th argument (NaN, ±inf and ±0 among them) against the degrees
/// of a polynomial: to 40, big, fractional, negative, beyond 2^63 and not
/// finite (not all of `xs`: a degree of 10^15 runs 2^32 steps).
fn pairs(xs: &[f64]) -> Vec<[f64; 2]> {
    let mut degrees: Vec<f64> = (0..=40).map(f64::from).collect();
    degrees.extend([100.0, 511.0, 512.0, 513.0, 1000.0, 2.5, 0.5, -0.5, -0.0, -1.0, -7.0, 9.3e18, -9.3e18, 1e300]);
    degrees.extend([f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 9_223_372_036_854_775_808.0]);
    xs.iter().step_by(7).flat_map(|&a| degrees.iter().map(move |&n| [a, n])).collect()
}

/// A body with every statement kind: min/max with NaN and ±0 operands,
/// comparisons, connectives, select, floor, the library calls and pow, a
/// polynomial at ±inf, a loop with a break and a return inside.
fn language_tour() -> SpecialFn {
    let mut b = Builder::new("tour");
    let (x, y) = (b.param(), b.param());
    let mn = b.binary(Binary::Min, x, y);
    let mx = b.binary(Binary::Max, x, y);
    let lt = b.lt(x, y);
    let ne = b.cmp(Cmp::Ne, x, y);
    let ge = b.ge(x, 0.0);
    let both = b.and(lt, ge);
    let either = b.or(ne, both);
    let neither = b.not(either);
    let s = b.select(neither, mn, mx);
    let fl = b.unary(Unary::Floor, x);
    let p = b.poly(&[1.5, -2.0, 0.25], y);
    let pw = b.binary(Binary::Pow, x, y);
    let acc = b.var(s);
    b.update(acc, Binary::Add, acc, fl);
    b.update(acc, Binary::Mul, acc, p);
    b.update(acc, Binary::Add, acc, pw);
    let small = b.abs(x);
    let small = b.lt(small, 1e-3);
    b.return_if(small, mn);
    for op in [
        Unary::Exp,
        Unary::Log,
        Unary::Sin,
        Unary::Cos,
        Unary::Sinh,
        Unary::Cosh,
        Unary::Erfc,
        Unary::Sqrt,
        Unary::Log1p,
        Unary::Expm1,
        Unary::Lgamma,
        Unary::Tgamma,
        Unary::Acos,
    ] {
        let v = b.unary(op, y);
        b.update(acc, Binary::Sub, acc, v);
    }
    let sum = b.var(0.0);
    b.repeat(2.0, 9, |b, k| {
        let kx = b.mul(k, x);
        b.update(sum, Binary::Add, sum, kx);
        let big = b.gt(sum, 30.0);
        b.return_if(big, sum);
        let neg = b.lt(sum, -5.0);
        b.break_if(neg);
    });
    let total = b.add(acc, sum);
    let out = b.div(total, mx);
    b.finish(out)
}

#[test]
fn every_statement_kind_matches_the_evaluator() {
    let f = language_tour();
    let native = compile(&f).unwrap();
    let mut xs = vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, 1e-4, -1e-4, 5e-324, 1e308];
    xs.extend((-40..=40).map(|i| f64::from(i) * 0.37));
    let pairs: Vec<[f64; 2]> = xs.iter().flat_map(|&a| xs.iter().map(move |&b| [a, b])).collect();
    check(&f, native, &pairs);
    // Min and max ignore NaN and give the first of equal zeros.
    let mut b = Builder::new("min_max");
    let (x, y) = (b.param(), b.param());
    let mn = b.binary(Binary::Min, x, y);
    let mx = b.binary(Binary::Max, x, y);
    let one = b.c(1.0);
    let sign = b.div(one, mn);
    let v = b.add(sign, mx);
    let f = b.finish(v);
    let native = compile(&f).unwrap();
    let zeros = [[0.0, -0.0], [-0.0, 0.0], [f64::NAN, -0.0], [-0.0, f64::NAN], [f64::NAN, f64::NAN]];
    check(&f, native, &zeros);
    let Native::Two(g) = native else { panic!("arity") };
    assert_eq!(g(0.0, -0.0), f64::INFINITY);
    assert_eq!(g(-0.0, 0.0), f64::NEG_INFINITY);
    assert_eq!(g(f64::NAN, -0.0), f64::NEG_INFINITY);
}

#[test]
fn three_parameters_do_not_compile() {
    let mut b = Builder::new("three");
    let (x, y, z) = (b.param(), b.param(), b.param());
    let s = b.add(x, y);
    let s = b.add(s, z);
    assert!(compile(&b.finish(s)).is_err());
}
