//! Process-wide counters behind `rdyn.stats()` (and `rdyn.reset_stats()`):
//! graphs, specializations and generic programs, kernels, nodes lowered, run as
//! library calls and fallen back (`nodes_fallback`, `fallback_ops`), guard hits
//! and misses, compile time, wgpu steps run on the CPU, the `cuda-sim`
//! simulator's traffic, and the CPU planner's kernels and stages (compiled by
//! the JIT or left to the interpreter). With `RDYN_PROFILE=1` every CPU step
//! is timed: `rdyn.stats()["profile"]` lists `(step, calls, seconds)`, slowest
//! first (a step is named by its kernel's sizes and stages, its GEMM operand
//! sizes, or its ATen op and input sizes; `devices/cpu.rs`'s `step_label`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rdyn_codegen_cpu::build::{plan_counts, PlanCounts};
use rdyn_lowering::NodeCounts;

#[derive(Default)]
pub struct Stats {
    pub graphs: AtomicU64,
    pub specializations: AtomicU64,
    pub generic_programs: AtomicU64,
    pub kernels: AtomicU64,
    pub nodes_native: AtomicU64,
    pub nodes_extern: AtomicU64,
    pub nodes_fallback: AtomicU64,
    pub guard_hits: AtomicU64,
    pub guard_misses: AtomicU64,
    pub compile_ns: AtomicU64,
    /// Kernels of wgpu graphs that have no WGSL form and ran on the CPU.
    pub wgpu_cpu_kernels: AtomicU64,
    /// The PTX simulator's (`cuda-sim`) global memory traffic and executed
    /// instructions, over every launch.
    pub sim_bytes_loaded: AtomicU64,
    pub sim_bytes_stored: AtomicU64,
    pub sim_instructions: AtomicU64,
    pub fallback_ops: Mutex<BTreeMap<String, u64>>,
    /// Per step label: calls and nanoseconds, when `RDYN_PROFILE` is set.
    pub profile: Mutex<BTreeMap<String, (u64, u64)>>,
    /// The CPU planner's counts at the last reset (they are the code
    /// generator's, process-wide).
    cpu_base: Mutex<PlanCounts>,
}

/// Whether `RDYN_PROFILE` asks for per-step timings (read once).
pub fn profiling() -> bool {
    static ON: std::sync::LazyLock<bool> =
        std::sync::LazyLock::new(|| std::env::var("RDYN_PROFILE").is_ok_and(|v| !v.is_empty() && v != "0"));
    *ON
}

/// A plain copy of the counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub counters: Vec<(&'static str, u64)>,
    pub compile_seconds: f64,
    pub fallback_ops: BTreeMap<String, u64>,
    /// Step label -> (calls, seconds), slowest first.
    pub profile: Vec<(String, u64, f64)>,
}

pub static STATS: std::sync::LazyLock<Stats> = std::sync::LazyLock::new(Stats::default);

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Stats {
    /// Count the nodes of one lowered specialization.
    pub fn record_lowering(&self, counts: &NodeCounts, kernels: usize, compile_ns: u64) {
        add(&self.specializations, 1);
        add(&self.kernels, kernels as u64);
        add(&self.nodes_native, counts.native as u64);
        add(&self.nodes_extern, counts.extern_ as u64);
        add(&self.nodes_fallback, counts.fallback as u64);
        add(&self.compile_ns, compile_ns);
        if let Ok(mut ops) = self.fallback_ops.lock() {
            for (op, n) in &counts.fallback_ops {
                *ops.entry(op.clone()).or_insert(0) += *n as u64;
            }
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let (now, base) = (plan_counts(), self.cpu_base.lock().map(|b| *b).unwrap_or_default());
        Snapshot {
            counters: vec![
                ("graphs", get(&self.graphs)),
                ("specializations", get(&self.specializations)),
                ("generic_programs", get(&self.generic_programs)),
                ("kernels", get(&self.kernels)),
                ("nodes_native", get(&self.nodes_native)),
                ("nodes_extern", get(&self.nodes_extern)),
                ("nodes_fallback", get(&self.nodes_fallback)),
                ("guard_hits", get(&self.guard_hits)),
                ("guard_misses", get(&self.guard_misses)),
                ("wgpu_cpu_kernels", get(&self.wgpu_cpu_kernels)),
                ("cuda_sim_bytes_loaded", get(&self.sim_bytes_loaded)),
                ("cuda_sim_bytes_stored", get(&self.sim_bytes_stored)),
                ("cuda_sim_instructions", get(&self.sim_instructions)),
                ("cpu_kernels_planned", now.kernels - base.kernels),
                ("cpu_stages_compiled", now.stages_compiled - base.stages_compiled),
                ("cpu_stages_interpreted", now.stages_interpreted - base.stages_interpreted),
            ],
            compile_seconds: get(&self.compile_ns) as f64 * 1e-9,
            fallback_ops: self.fallback_ops.lock().map(|m| m.clone()).unwrap_or_default(),
            profile: self.profile_rows(),
        }
    }

    /// Count one simulated launch.
    pub fn record_simulated(&self, bytes_loaded: u64, bytes_stored: u64, instructions: u64) {
        add(&self.sim_bytes_loaded, bytes_loaded);
        add(&self.sim_bytes_stored, bytes_stored);
        add(&self.sim_instructions, instructions);
    }

    /// Add one timed run of a step.
    pub fn record_step(&self, label: &str, ns: u64) {
        if let Ok(mut p) = self.profile.lock() {
            let entry = p.entry(label.to_string()).or_insert((0, 0));
            entry.0 += 1;
            entry.1 += ns;
        }
    }

    fn profile_rows(&self) -> Vec<(String, u64, f64)> {
        let mut rows: Vec<_> = match self.profile.lock() {
            Ok(p) => p.iter().map(|(k, &(calls, ns))| (k.clone(), calls, ns as f64 * 1e-9)).collect(),
            Err(_) => Vec::new(),
        };
        rows.sort_by(|a, b| b.2.total_cmp(&a.2));
        rows
    }

    pub fn reset(&self) {
        for c in [
            &self.graphs,
            &self.specializations,
            &self.generic_programs,
            &self.kernels,
            &self.nodes_native,
            &self.nodes_extern,
            &self.nodes_fallback,
            &self.guard_hits,
            &self.guard_misses,
            &self.compile_ns,
            &self.wgpu_cpu_kernels,
            &self.sim_bytes_loaded,
            &self.sim_bytes_stored,
            &self.sim_instructions,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        if let Ok(mut ops) = self.fallback_ops.lock() {
            ops.clear();
        }
        if let Ok(mut base) = self.cpu_base.lock() {
            *base = plan_counts();
        }
        if let Ok(mut p) = self.profile.lock() {
            p.clear();
        }
    }
}
