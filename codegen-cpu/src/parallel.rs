//! Where CPU kernels run in parallel: rayon's pool, or the OpenMP team that
//! ATen itself uses.
//!
//! PyTorch's CPU kernels (convolution, attention, eager fallbacks) run on
//! an OpenMP team whose threads spin for a while after each parallel region
//! before sleeping. A kernel that rdyn runs on rayon threads right after one
//! of them competes for the cores with those spinning threads; on a 2-core
//! machine that doubled the time of kernels after every convolution. When
//! the host registers libgomp's entry points (`python/rdyn/_aten_libs.py` does
//! so when torch's parallel backend is OpenMP, as in the PyPI wheels, handing
//! over `GOMP_parallel`), kernels and GEMM row blocks run on that same team:
//! the spinning threads pick up rdyn's work instead of competing with it.
//! A panic on a team thread is caught there and re-raised on the caller.
//! Otherwise (`RDYN_OPENMP=0`, other platforms) kernels run on rayon, whose
//! global pool the frontend builds with the importing thread as worker 0 (so
//! kernels it launches run in place rather than being handed over while it
//! sleeps). `rdyn._rdyn.thread_pool()` says which is in use.
//!
//! On the team, a kernel's work items are cut into one contiguous share per
//! thread; thread t runs share t first, then helps with what is left of the
//! others. Each core thus touches the same part of the data in every kernel and
//! every call, where it is still in that core's L2 (a first-come order handed
//! each core another part each time). The region still asks for the default team:
//! a narrower one makes libgomp retire idle threads and start them again.

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
    thread_num: OmpInt,
}

static OPENMP: OnceLock<OpenMp> = OnceLock::new();

/// The addresses of the libgomp functions kernels run with.
#[derive(Clone, Copy, Debug)]
pub struct GompEntries {
    /// `GOMP_parallel`.
    pub parallel: usize,
    /// `omp_get_max_threads`.
    pub max_threads: usize,
    /// `omp_get_thread_num`.
    pub thread_num: usize,
}

/// Run kernels on the OpenMP team of the libgomp whose entry points are at
/// these addresses (the first registration wins). Returns whether the team
/// is now in use.
///
/// # Safety
/// The addresses must be those functions of a libgomp loaded for the rest
/// of the process's life.
pub unsafe fn use_openmp(gomp: GompEntries) -> bool {
    let GompEntries { parallel, max_threads, thread_num } = gomp;
    if parallel == 0 || max_threads == 0 || thread_num == 0 {
        return false;
    }
    // SAFETY: the caller guarantees the addresses and their signatures.
    let team = unsafe {
        OpenMp {
            parallel: std::mem::transmute::<usize, GompParallel>(parallel),
            max_threads: std::mem::transmute::<usize, OmpInt>(max_threads),
            thread_num: std::mem::transmute::<usize, OmpInt>(thread_num),
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

/// Work shared by a team: `n` items cut into one contiguous share per
/// thread. A thread runs its own share first, in order, then takes what is
/// left of the others' (every item is claimed through its share's counter,
/// so each runs once). Thread t thus works on the same part of the data in
/// every kernel: what it wrote in the last kernel, or read in the last call,
/// is still in its core's cache, where a first-come order would hand each
/// core another part each time.
struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    n: usize,
    /// Per share: the next item to claim (a cache line each, so that
    /// threads claiming from their own shares do not contend).
    next: Vec<Counter>,
    panicked: AtomicBool,
    payload: Mutex<Option<Box<dyn Any + Send>>>,
}

impl<'a> Job<'a> {
    fn new(f: &'a (dyn Fn(usize) + Sync), n: usize, shares: usize) -> Job<'a> {
        let next = (0..shares).map(|s| Counter(AtomicUsize::new(share_start(n, s, shares)))).collect();
        Job { f, n, next, panicked: AtomicBool::new(false), payload: Mutex::new(None) }
    }

    /// A thread's part: its own share, then what is left of the others.
    fn work(&self, own: usize) {
        let shares = self.next.len();
        for s in (own..shares).chain(0..own) {
            self.drain(s);
        }
    }

    /// Run the unclaimed items of share `s`.
    fn drain(&self, s: usize) {
        let end = share_start(self.n, s + 1, self.next.len());
        loop {
            let k = self.next[s].0.fetch_add(1, Ordering::Relaxed);
            if k >= end || self.panicked.load(Ordering::Relaxed) {
                break;
            }
            // A panic must not unwind into C; it is re-raised after the region.
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| (self.f)(k))) {
                self.panicked.store(true, Ordering::Relaxed);
                if let Ok(mut slot) = self.payload.lock() {
                    slot.get_or_insert(payload);
                }
            }
        }
    }
}

/// A share's counter, alone on its cache line(s).
#[repr(align(128))]
struct Counter(AtomicUsize);

/// Where share `s` of `shares` over `n` items starts.
fn share_start(n: usize, s: usize, shares: usize) -> usize {
    n * s / shares
}

extern "C" fn run_job(data: *mut c_void) {
    // SAFETY: `for_each` passes a `Job` that outlives the parallel region.
    let job = unsafe { &*(data as *const Job) };
    // SAFETY: registered by `use_openmp`; called inside the region. Any
    // start is correct: a team smaller than the shares (a nested region)
    // still drains them all, and threads past the last share start on
    // another thread's.
    let t = OPENMP.get().map_or(0, |omp| unsafe { (omp.thread_num)() }).max(0) as usize;
    job.work(t % job.next.len().max(1));
}

/// Run `f` over `0..n` split into a few ranges per thread, in parallel when
/// `parallel` (else in one range on the calling thread): for kernels whose
/// items (lines of a scan or sort) are worth keeping together.
pub fn for_ranges(n: usize, parallel: bool, f: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
    if !parallel || n <= 1 {
        f(0..n);
        return;
    }
    let chunks = (threads() * 4).min(n);
    let per = n.div_ceil(chunks);
    for_each(chunks, &|c| f(c * per..((c + 1) * per).min(n)));
}

/// Run `f(k)` for every `k` in `0..n`, in parallel: thread t first runs the
/// t-th contiguous share of `0..n`, then helps with the rest.
pub fn for_each(n: usize, f: &(dyn Fn(usize) + Sync)) {
    match OPENMP.get() {
        Some(omp) if n > 1 => {
            // SAFETY: registered by `use_openmp`.
            let team = (unsafe { (omp.max_threads)() }).max(1) as usize;
            let job = Job::new(f, n, team.min(n));
            // SAFETY: `run_job` has the signature libgomp expects and `job`
            // lives until GOMP_parallel returns (all threads have joined).
            // The default team (0 threads asked): a narrower region would
            // make libgomp retire the idle threads and start them again for
            // the next full one.
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
    fn shares_run_own_items_first_and_each_once() {
        let order = Mutex::new(Vec::new());
        let f = |k: usize| order.lock().expect("order lock").push(k);
        // One thread owning share 1 of 3 over 10 items runs 3..6 first,
        // then 6..10, then 0..3.
        Job::new(&f, 10, 3).work(1);
        assert_eq!(*order.lock().expect("order lock"), [3, 4, 5, 6, 7, 8, 9, 0, 1, 2]);
        // Several threads, each from its own share: every item once.
        let hits: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
        let count = |k: usize| {
            hits[k].fetch_add(1, Ordering::Relaxed);
        };
        let job = Job::new(&count, hits.len(), 4);
        std::thread::scope(|scope| {
            for own in 0..4 {
                let job = &job;
                scope.spawn(move || job.work(own));
            }
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn every_index_runs_once() {
        let hits: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
        for_each(hits.len(), &|k| {
            hits[k].fetch_add(1, Ordering::Relaxed);
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    }
}
