//! Per-element time of the special functions defined in `rdyn_ir::special`,
//! single thread: the hand-written routines they replaced (`old.rs`,
//! `old_gamma.rs`), the
//! reference evaluator, and the Cranelift-compiled code the CPU backend
//! calls (`rdyn_codegen_cpu::special`). `tests/hand_written.rs` checks the
//! compiled code against the hand-written routines in ulps.
//!
//! `cargo bench -p rdyn-codegen-cpu --bench special` (release profile).

#[path = "../../tests/hand_written/old.rs"]
mod old;
#[path = "../../tests/hand_written/old_gamma.rs"]
mod old_gamma;

use std::hint::black_box;
use std::time::Instant;

use rdyn_codegen_cpu::special as sp;
use rdyn_ir::special::Special;

/// A function of one argument or of (x, degree).
#[derive(Copy, Clone)]
enum F {
    One(fn(f64) -> f64),
    Two(fn(f64, f64) -> f64),
}

impl F {
    fn at(self, [x, n]: [f64; 2]) -> f64 {
        match self {
            F::One(f) => f(x),
            F::Two(f) => f(x, n),
        }
    }
}

/// One function: its definition, the hand-written routine, the compiled
/// entry point, and the ranges its timing arguments are drawn from (a
/// polynomial's degree rounded down to an integer).
struct Case {
    name: &'static str,
    which: Special,
    old: F,
    new: F,
    range: (f64, f64),
    second: (f64, f64),
    whole: bool,
}

fn cases() -> Vec<Case> {
    let one = |name, which, old, new, range| Case {
        name,
        which,
        old: F::One(old),
        new: F::One(new),
        range,
        second: (0.0, 0.0),
        whole: false,
    };
    let two = |name, which, old, new, range| Case {
        name,
        which,
        old: F::Two(old),
        new: F::Two(new),
        range,
        second: (0.0, 30.0),
        whole: true,
    };
    vec![
        one("i0", Special::I0, old::i0, sp::i0, (-30.0, 30.0)),
        one("i0e", Special::I0e, old::i0e, sp::i0e, (-30.0, 30.0)),
        one("i1", Special::I1, old::i1, sp::i1, (-30.0, 30.0)),
        one("i1e", Special::I1e, old::i1e, sp::i1e, (-30.0, 30.0)),
        one("k0", Special::K0, old::k0, sp::k0, (0.0, 30.0)),
        one("k0e", Special::K0e, old::k0e, sp::k0e, (0.0, 30.0)),
        one("k1", Special::K1, old::k1, sp::k1, (0.0, 30.0)),
        one("k1e", Special::K1e, old::k1e, sp::k1e, (0.0, 30.0)),
        one("airy_ai", Special::AiryAi, old::airy_ai, sp::airy_ai, (-20.0, 20.0)),
        one("spherical_j0", Special::SphericalJ0, old::spherical_j0, sp::spherical_j0, (-10.0, 10.0)),
        one("erfcx", Special::Erfcx, old::erfcx, sp::erfcx, (-10.0, 40.0)),
        two("hermite_h", Special::HermiteH, old::hermite_h, sp::hermite_h, (-2.0, 2.0)),
        two("hermite_he", Special::HermiteHe, old::hermite_he, sp::hermite_he, (-2.0, 2.0)),
        two("laguerre_l", Special::LaguerreL, old::laguerre_l, sp::laguerre_l, (0.0, 10.0)),
        two("legendre_p", Special::LegendreP, old::legendre_p, sp::legendre_p, (-1.0, 1.0)),
        Case { second: (0.5, 20.0), whole: false, ..two("zeta", Special::Zeta, old::zeta, sp::zeta, (1.5, 8.0)) },
        one("ndtri", Special::Ndtri, old_gamma::ndtri, sp::ndtri, (0.0, 1.0)),
        one("erfinv", Special::Erfinv, old_gamma::erfinv, sp::erfinv, (-1.0, 1.0)),
        one("digamma", Special::Digamma, old_gamma::digamma, sp::digamma, (-10.0, 30.0)),
        Case {
            second: (0.0, 60.0),
            whole: false,
            ..two("igamma", Special::Igamma, old_gamma::igamma, sp::igamma, (0.1, 50.0))
        },
        Case {
            second: (0.0, 60.0),
            whole: false,
            ..two("igammac", Special::Igammac, old_gamma::igammac, sp::igammac, (0.1, 50.0))
        },
    ]
}

/// `n` pseudo-random points of `[lo, hi)`.
fn uniform(n: usize, (lo, hi): (f64, f64), seed: u64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

/// Best of 7 passes over `xs`, in ns per element.
fn time(xs: &[[f64; 2]], f: impl Fn([f64; 2]) -> f64) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..7 {
        let start = Instant::now();
        let mut sum = 0.0;
        for x in xs {
            sum += f(black_box(*x));
        }
        black_box(sum);
        best = best.min(start.elapsed().as_nanos() as f64 / xs.len() as f64);
    }
    best
}

fn main() {
    println!("ns per element, single thread, best of 7 passes over 4096 uniform arguments");
    println!("{:<14} {:>12} {:>11} {:>9} {:>9} {:>9}", "function", "x range", "2nd arg", "old", "eval", "compiled");
    for c in cases() {
        let xs = uniform(4096, c.range, 0x2545_F491_4F6C_DD1D);
        let ns = uniform(4096, c.second, 0x9E37_79B9_7F4A_7C15);
        let args: Vec<[f64; 2]> = xs.iter().zip(&ns).map(|(&x, &n)| [x, if c.whole { n.floor() } else { n }]).collect();
        // Compile before timing.
        black_box(c.new.at([1.0, 1.0]));
        let old = time(&args, |a| c.old.at(a));
        let eval = time(&args, |a| c.which.eval(&a));
        let new = time(&args, |a| c.new.at(a));
        let range = format!("[{}, {}]", c.range.0, c.range.1);
        let second = match (c.second.1 > 0.0, c.whole) {
            (false, _) => "-".into(),
            (true, true) => format!("n {}..{}", c.second.0, c.second.1),
            (true, false) => format!("[{}, {}]", c.second.0, c.second.1),
        };
        println!("{:<14} {range:>12} {second:>11} {old:>9.1} {eval:>9.1} {new:>9.1}", c.name);
    }
}
