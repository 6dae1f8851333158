//! The translated bodies run by the PTX simulator against the reference
//! evaluator (`rdyn_ir::special::eval`, what the CPU backend computes),
//! rounded to float32: NaN, ±inf, ±0, branch edges, a grid and a
//! logarithmic sweep; the polynomials and zeta at a grid of x for second
//! arguments (degrees, q) to 40, big, fractional, negative and non-finite.
#![allow(clippy::unwrap_used, clippy::panic)]

use rdyn_ir::special::Special;

use super::call_f32;
use crate::ptx::func::{Class, Func};

/// A kernel computing `which` of `n` floats (and `n` degrees), one per
/// block.
fn kernel(which: Special) -> String {
    let mut f = Func::default();
    let (xs, ns, dst) = (f.reg(Class::S64), f.reg(Class::S64), f.reg(Class::S64));
    f.ins(format!("ld.param.u64 {xs}, [t_p0]"));
    f.ins(format!("ld.param.u64 {ns}, [t_p1]"));
    f.ins(format!("ld.param.u64 {dst}, [t_p2]"));
    let (id, id64) = (f.reg(Class::B32), f.reg(Class::S64));
    f.ins(format!("mov.u32 {id}, %ctaid.x"));
    f.ins(format!("cvt.u64.u32 {id64}, {id}"));
    let (a, n, b) = (f.reg(Class::S64), f.reg(Class::S64), f.reg(Class::S64));
    f.ins(format!("mad.lo.s64 {a}, {id64}, 4, {xs}"));
    f.ins(format!("mad.lo.s64 {n}, {id64}, 4, {ns}"));
    f.ins(format!("mad.lo.s64 {b}, {id64}, 4, {dst}"));
    let (x, degree) = (f.reg(Class::F32), f.reg(Class::F32));
    f.ins(format!("ld.global.f32 {x}, [{a}]"));
    f.ins(format!("ld.global.f32 {degree}, [{n}]"));
    let y = call_f32(&mut f, which.body(), &[&x, &degree]);
    f.ins(format!("st.global.f32 [{b}], {y}"));
    f.ins("ret");
    format!(
        ".version 7.8\n.target sm_80\n.address_size 64\n\n.visible .entry t(\n\t.param .u64 t_p0,\n\t.param .u64 t_p1,\n\t.param .u64 t_p2\n)\n{{\n{}{}}}\n",
        f.decls(),
        f.body
    )
}

fn run(ptx: &str, input: &[f32], degrees: &[f32]) -> Vec<f32> {
    let kernel = rdyn_ptx_sim::parse(ptx).unwrap();
    let mut out = vec![0.0_f32; input.len()];
    let mut memory = rdyn_ptx_sim::Memory::new();
    memory.allow(input.as_ptr() as usize, input.len() * 4);
    memory.allow(degrees.as_ptr() as usize, degrees.len() * 4);
    memory.allow(out.as_ptr() as usize, out.len() * 4);
    let params = [input.as_ptr() as u64, degrees.as_ptr() as u64, out.as_mut_ptr() as u64];
    // SAFETY: the regions are this test's own buffers, allowed above.
    unsafe { kernel.launch(input.len() as u32, 1, &params, &memory) }.unwrap();
    out
}

/// Within 2 float32 ulps, or 1e-30 absolutely (results near a zero of
/// Ai), NaN for NaN.
fn close(got: f32, want: f32) -> bool {
    if got.is_nan() || want.is_nan() {
        return got.is_nan() && want.is_nan();
    }
    let key = |v: f32| {
        let i = v.to_bits() as i32;
        if i < 0 {
            i32::MIN - i
        } else {
            i
        }
    };
    key(got).abs_diff(key(want)) <= 2 || (got - want).abs() <= 1e-30
}

fn inputs() -> Vec<f32> {
    let mut v = vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1e-40, 1.0, 20.0, 40.0, 5.5, -8.0, 0.5];
    v.extend((-120..=120).map(|i| i as f32 * 0.125));
    v.extend((-30..=30).map(|i| 10f32.powf(i as f32 * 0.5)));
    v.extend([20.000002, 19.999998, 1.0000001, 0.99999994, 5.5000005, -8.000001, 40.000004, 3e38]);
    let neg: Vec<f32> = v.iter().map(|x| -x).collect();
    v.extend(neg);
    v
}

#[test]
fn translated_bodies_match_the_evaluator() {
    let xs = inputs();
    for which in Special::ALL.into_iter().filter(|w| w.body().params.len() == 1) {
        let got = run(&kernel(which), &xs, &vec![0.0; xs.len()]);
        for (&x, &g) in xs.iter().zip(&got) {
            let want = which.eval(&[f64::from(x)]) as f32;
            if which == Special::AiryAi && x < -1e20 && x.is_finite() {
                // ζ beyond 2^62: `sincos64` loses the phase, the result
                // stays within Ai's amplitude 1/(√π·|x|^¼).
                let amplitude = 0.565 / (-x).powf(0.25);
                assert!(g.abs() <= amplitude, "AiryAi({x:e}) = {g:e}");
                continue;
            }
            let hankel = matches!(which, Special::J0 | Special::J1 | Special::Y0 | Special::Y1);
            if hankel && x.abs() > 2f32.powi(62) && x.is_finite() && !want.is_nan() {
                // The same: J and Y within their amplitude √(2/(π|x|)).
                let amplitude = (2.0 / (std::f64::consts::PI * f64::from(x.abs()))).sqrt() * 1.001;
                assert!(f64::from(g.abs()) <= amplitude, "{which:?}({x:e}) = {g:e}");
                continue;
            }
            assert!(close(g, want), "{which:?}({x:e}) = {g:e} in PTX, {want:e} evaluated");
        }
    }
}

#[test]
fn translated_two_argument_functions_match_the_evaluator() {
    let mut degrees: Vec<f32> = (0..=40).map(|n| n as f32).collect();
    degrees.extend([100.0, 512.0, 513.0, 2.5, 0.5, -0.5, -1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e19]);
    let mut base: Vec<f32> = (-60..=60).map(|i| i as f32 * 0.05).collect();
    base.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 1e-30, 7.5, -12.0]);
    let (mut xs, mut ns) = (Vec::new(), Vec::new());
    for &n in &degrees {
        xs.extend(&base);
        ns.extend(std::iter::repeat_n(n, base.len()));
    }
    for which in Special::ALL.into_iter().filter(|w| w.body().params.len() == 2) {
        let got = run(&kernel(which), &xs, &ns);
        for ((&x, &n), &g) in xs.iter().zip(&ns).zip(&got) {
            let want = which.eval(&[f64::from(x), f64::from(n)]) as f32;
            // Chebyshev's trigonometric form takes acos from sin and cos in
            // PTX and from the library in the evaluator: an ulp of θ, n-fold
            // in (n + 1)θ, which is all there is at its zeros (U_11(−½) = 0).
            let zero_noise = (g - want).abs() <= 1e-13 * (1.0 + n.abs().min(1e3));
            assert!(close(g, want) || zero_noise, "{which:?}({x:e}, {n:e}) = {g:e} in PTX, {want:e} evaluated");
        }
    }
}
