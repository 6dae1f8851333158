//! Where CPU kernels run in parallel: rayon's pool, or the OpenMP team that
//! ATen itself uses.
//!
//! PyTorch's CPU kernels (convolution, attention, eager fallbacks) run on
//! an OpenMP team whose threads spin for a while after each parallel region
//! before sleeping. A kernel that rdyn runs on rayon threads right after one
//! of them competes for the cores with those spinning threads; on a 2-core
//! machine that doubled the time of kernels after every convolution. When
//! the host registers libgomp's entry points (`rdyn` does so from Python
//! when torch's parallel backend is OpenMP), kernels run on that same team:
//! the spinning threads pick up rdyn's work instead of competing with it.

use std::any::Any;
use std::ffi::c_void;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use rayon::prelude::*;

type GompParallel = unsafe extern "C" fn(extern "C" fn(*mut c_void), *mut c_void, u32, u32);
type OmpInt = unsafe extern "C" fn() -> i32;

struct OpenMp {
    parallel: GompParallel,
    max_threads: OmpInt,
}

static OPENMP: OnceLock<OpenMp> = OnceLock::new();

/// Run kernels on the OpenMP team of the libgomp whose `GOMP_parallel` and
/// `omp_get_max_threads` are at these addresses (the first registration
/// wins). Returns whether the team is now in use.
///
/// # Safety
/// The addresses must be those functions of a libgomp loaded for the rest
/// of the process's life.
pub unsafe fn use_openmp(parallel: usize, max_threads: usize) -> bool {
    if parallel == 0 || max_threads == 0 {
        return false;
    }
    // SAFETY: the caller guarantees the addresses and their signatures.
    let team = unsafe {
        OpenMp {
            parallel: std::mem::transmute::<usize, GompParallel>(parallel),
            max_threads: std::mem::transmute::<usize, OmpInt>(max_threads),
        }
    };
    // A second registration keeps the first.
    let _ = OPENMP.set(team);
    true
}

/// Whether kernels run on the OpenMP team (else on rayon).
pub fn on_openmp() -> bool {
    OPENMP.get().is_some()
}

/// Which pool runs kernels: `"openmp"` or `"rayon"`.
pub fn backend() -> &'static str {
    if on_openmp() {
        "openmp"
    } else {
        "rayon"
    }
}

/// Threads a parallel kernel runs on.
pub fn threads() -> usize {
    match OPENMP.get() {
        // SAFETY: registered by `use_openmp`.
        Some(omp) => (unsafe { (omp.max_threads)() }).max(1) as usize,
        None => rayon::current_num_threads().max(1),
    }
}

struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    n: usize,
    next: AtomicUsize,
    panicked: AtomicBool,
    payload: Mutex<Option<Box<dyn Any + Send>>>,
}

extern "C" fn run_job(data: *mut c_void) {
    // SAFETY: `for_each` passes a `Job` that outlives the parallel region.
    let job = unsafe { &*(data as *const Job) };
    loop {
        let k = job.next.fetch_add(1, Ordering::Relaxed);
        if k >= job.n || job.panicked.load(Ordering::Relaxed) {
            break;
        }
        // A panic must not unwind into C; it is re-raised after the region.
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| (job.f)(k))) {
            job.panicked.store(true, Ordering::Relaxed);
            if let Ok(mut slot) = job.payload.lock() {
                slot.get_or_insert(payload);
            }
        }
    }
}

/// Run `f(k)` for every `k` in `0..n`, in parallel; each thread takes the
/// next `k` when it finishes one.
pub fn for_each(n: usize, f: &(dyn Fn(usize) + Sync)) {
    match OPENMP.get() {
        Some(omp) if n > 1 => {
            let job =
                Job { f, n, next: AtomicUsize::new(0), panicked: AtomicBool::new(false), payload: Mutex::new(None) };
            // SAFETY: `run_job` has the signature libgomp expects and `job`
            // lives until GOMP_parallel returns (all threads have joined).
            unsafe { (omp.parallel)(run_job, &job as *const Job as *mut c_void, 0, 0) };
            // Re-raise a kernel's panic on the calling thread, where the
            // frontend turns it into a Python error.
            if let Some(payload) = job.payload.into_inner().ok().flatten() {
                resume_unwind(payload);
            }
        }
        Some(_) => (0..n).for_each(f),
        None => (0..n).into_par_iter().for_each(f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_index_runs_once() {
        let hits: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
        for_each(hits.len(), &|k| {
            hits[k].fetch_add(1, Ordering::Relaxed);
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    }
}
