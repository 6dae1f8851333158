//! Which library runs a product that both torch's BLAS and the `gemm` crate
//! can run: measured on the first call of each product shape, then kept
//! for the life of the process.
//!
//! Neither library is the faster one everywhere, and which one wins depends
//! on the CPU more than on the shape. MKL (the BLAS of torch's x86-64 wheels)
//! takes its fastest paths on Intel CPUs. On an AMD EPYC (2 threads, torch
//! 2.15) the crate's AVX-512 kernels ran 15 of 18 corpus-like float32
//! products about twice as fast as MKL (392×384 by 384×192, a 2x2 stride-2
//! convolution: 297 against 142 µs; 1024×768 by 768×3072: 24.3 against
//! 11.9 ms), and MKL stayed ahead on products of few rows (8×1024 by
//! 1024×4096: 1.0 against 3.8 ms; 64×4096 by 4096×4096: 14 against 19 ms).
//! A size rule tuned on one CPU is wrong on the next, so the first call
//! times both libraries (alternating, several times each, the fastest run of
//! each) and the process keeps the faster for that shape. BLAS keeps the
//! products where the crate is not faster by [`MARGIN`], so that timer noise
//! on near ties does not move a shape between runs.
//!
//! Products the size rules give to the crate ([`super::Call::blas_route`])
//! are not measured: below 64 columns or terms BLAS lost on every CPU
//! measured. `RDYN_BLAS=1` turns measuring off (BLAS wherever the rules
//! allow, reproducible bit for bit across processes); `RDYN_BLAS=0` keeps
//! every product on the crate.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rdyn_ir::DType;

use super::{BlasRoute, Call, Library};

/// Timed runs of each library on a shape's first call: at least
/// [`MIN_ROUNDS`], and more while all of them took less than
/// [`BUDGET`], up to [`MAX_ROUNDS`]; the fastest run of each counts. A
/// library's first runs on a shape pay for cold caches and packing buffers
/// (and, for MKL, waking its threads): a 1024×128 by 128×128 product took
/// the crate's AVX2 kernels 236 µs on their second run and 152 µs from the
/// fifth on.
const MIN_ROUNDS: usize = 3;
const MAX_ROUNDS: usize = 20;
const BUDGET: Duration = Duration::from_millis(5);

/// How much faster the crate must be to take a shape from BLAS: 5%, above
/// the ±2-3% that repeated timings of one product spread on a quiet machine,
/// below the 10-25% the crate wins by where it wins.
const MARGIN: f64 = 0.05;

/// The most shapes remembered: a process under dynamic shapes meets a new
/// product at each batch size, and past this many it stops measuring (BLAS,
/// as the rules say) rather than grow without bound.
const MAX_SHAPES: usize = 4096;

static MEASURING: AtomicBool = AtomicBool::new(true);

/// Turn measuring on (the default) or off (BLAS wherever the rules give it).
pub fn set_measuring(on: bool) {
    MEASURING.store(on, Ordering::Relaxed);
}

/// What a product's choice depends on: its sizes, strides and dtype, the
/// BLAS route, and the threads both libraries get.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Shape {
    dtype: DType,
    batch: i64,
    mnk: (i64, i64, i64),
    strides: [(i64, i64); 3],
    route: BlasRoute,
    threads: usize,
}

impl Shape {
    fn of(call: &Call, route: BlasRoute) -> Shape {
        let p = &call.product;
        Shape {
            dtype: call.dtype,
            batch: call.batch,
            mnk: (p.m, p.n, p.k),
            strides: [p.a, p.b, p.c],
            route,
            threads: crate::parallel::threads(),
        }
    }
}

/// A shape's timings and the library they chose.
#[derive(Clone, Copy, Debug)]
struct Measured {
    library: Library,
    blas: Duration,
    krate: Duration,
}

fn choices() -> std::sync::MutexGuard<'static, HashMap<Shape, Measured>> {
    static CHOICES: OnceLock<Mutex<HashMap<Shape, Measured>>> = OnceLock::new();
    let lock = CHOICES.get_or_init(|| Mutex::new(HashMap::new())).lock();
    // A panic while the lock was held cannot leave the map half-written
    // (inserts are single calls), so a poisoned lock is still good.
    lock.unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The library that runs `call`, which the rules give to BLAS along `route`:
/// measured on its shape's first call (running the product several times;
/// the caller runs it once more with the library returned).
pub(super) fn library(call: &Call, route: BlasRoute) -> Library {
    if !MEASURING.load(Ordering::Relaxed) {
        return Library::Blas;
    }
    let shape = Shape::of(call, route);
    {
        let known = choices();
        if let Some(m) = known.get(&shape) {
            return m.library;
        }
        if known.len() >= MAX_SHAPES {
            return Library::Blas;
        }
    }
    // Not under the lock: another thread's first call of another shape may
    // measure at the same time (each then times a loaded machine, which
    // slows both libraries alike).
    let measured = measure(call, route);
    choices().insert(shape, measured);
    measured.library
}

fn measure(call: &Call, route: BlasRoute) -> Measured {
    let time = |run: &dyn Fn()| {
        let start = Instant::now();
        run();
        start.elapsed()
    };
    let (mut blas, mut krate) = (Duration::MAX, Duration::MAX);
    let start = Instant::now();
    for round in 0..MAX_ROUNDS {
        if round >= MIN_ROUNDS && start.elapsed() > BUDGET {
            break;
        }
        blas = blas.min(time(&|| call.run_blas(route)));
        krate = krate.min(time(&|| call.run_crate()));
    }
    Measured { library: pick(blas, krate), blas, krate }
}

/// The crate where it is faster than BLAS by more than [`MARGIN`].
fn pick(blas: Duration, krate: Duration) -> Library {
    if krate.as_secs_f64() < blas.as_secs_f64() * (1.0 - MARGIN) {
        Library::Crate
    } else {
        Library::Blas
    }
}

/// One measured shape as `gemm_choices()` reports it.
pub type Choice = (i64, i64, i64, i64, &'static str, f64, f64);

/// The shapes measured so far: (m, n, k, batch, library, BLAS µs, crate µs),
/// the library "blas" or "gemm" (the crate), the times the fastest runs.
pub fn measured() -> Vec<Choice> {
    let mut out: Vec<Choice> = choices()
        .iter()
        .map(|(s, m)| {
            let name = match m.library {
                Library::Blas => "blas",
                Library::Crate => "gemm",
            };
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            (s.mnk.0, s.mnk.1, s.mnk.2, s.batch, name, us(m.blas), us(m.krate))
        })
        .collect();
    out.sort_unstable_by_key(|a| (a.0, a.1, a.2, a.3));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crate_must_win_by_the_margin() {
        let us = Duration::from_micros;
        assert_eq!(pick(us(100), us(90)), Library::Crate);
        assert_eq!(pick(us(100), us(97)), Library::Blas);
        assert_eq!(pick(us(100), us(120)), Library::Blas);
    }
}
