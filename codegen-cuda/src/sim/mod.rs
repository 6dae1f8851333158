//! A PTX simulator for the subset this crate emits: runs a kernel's blocks
//! and threads on the CPU, on host memory, so the CUDA generator's numbers
//! can be tested without a GPU (the `cuda-sim` device: `options={"device":
//! "cuda-sim"}` or `RDYN_DEVICE=cuda-sim` lowers a CPU-tensor graph exactly as for
//! CUDA, its values relabelled `cuda:0`, then runs each PTX kernel here on the CPU
//! tensors; library and eager steps run on the CPU, GEMM steps through
//! `GemmCall::emulate`).
//!
//! `parse.rs` decodes the PTX into instructions with typed operands; `exec.rs`
//! gives each its PTX meaning (IEEE arithmetic in the instruction's type, `cvt`
//! saturation and rounding modes, `min`/`max` NaN rules, shuffle lane rules).
//! Blocks run one after another. Within a block, each thread runs until it
//! reaches a `bar.sync`, a warp-wide instruction (`shfl.sync`,
//! `bar.warp.sync`) or its end; a warp-wide instruction executes once every
//! lane of its warp has reached it, a barrier once every live thread of the
//! block has. Lanes that disagree (one warp split between a shuffle and a
//! barrier, or between two shuffles) are reported as errors, as are an endless
//! loop, global accesses outside the memory a launch is given, a misaligned
//! access, or a `.vN` access naming another number of registers (as ptxas and
//! the GPU would reject them); each error names the kernel, block, thread and
//! instruction. A kernel's `trap` is reported at once, as a `KernelCheckError`.
//!
//! Arithmetic is IEEE in the instruction's type; `.approx` instructions
//! (`ex2`, `lg2`, `sin`, `cos`, `rcp`, `rsqrt`) are computed to full
//! precision, so a result within tolerance here can still be off by the
//! hardware approximation's error on a GPU: the simulator checks algorithms and
//! index arithmetic, not the hardware's approximation error, nor speed. It counts
//! the bytes global loads and stores move and the instructions executed
//! (`rdyn.stats()`: `cuda_sim_bytes_loaded`, `cuda_sim_bytes_stored`,
//! `cuda_sim_instructions`; `benches/cuda_sim_traffic.py`), which shows a kernel
//! change's traffic before a GPU times it. The OpInfo suite (float32, float16,
//! bfloat16), the model tests and the fuzzer run on it in CI.

mod exec;
mod parse;

pub use parse::{parse, Kernel};

/// Why a simulated kernel did not run to the end.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SimError {
    #[error("PTX line {line} (`{text}`) is outside the simulated subset: {why}")]
    Parse { line: usize, text: String, why: String },
    #[error("kernel {kernel}, block {block}, thread {thread}, at {ins}: {why}")]
    Run { kernel: String, block: u32, thread: u32, ins: String, why: String },
    /// A `trap`: a device-side check of the kernel failed.
    #[error("kernel {kernel} trapped in block {block}, thread {thread}: a device-side index check failed")]
    Trap { kernel: String, block: u32, thread: u32 },
}

/// The host memory a launch may touch: `[start, end)` byte ranges.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    regions: Vec<(usize, usize)>,
}

impl Memory {
    pub fn new() -> Memory {
        Memory::default()
    }

    /// Allow `bytes` bytes from `start`.
    pub fn allow(&mut self, start: usize, bytes: usize) {
        if bytes > 0 {
            self.regions.push((start, start + bytes));
        }
    }

    fn check(&self, addr: u64, bytes: usize) -> Result<usize, String> {
        let a = addr as usize;
        if self.regions.iter().any(|&(s, e)| a >= s && a.checked_add(bytes).is_some_and(|end| end <= e)) {
            Ok(a)
        } else {
            Err(format!("global access of {bytes} bytes at {addr:#x} is outside every buffer"))
        }
    }
}

/// Where a thread stopped.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Wait {
    /// Runnable.
    Ready,
    /// At the barrier instruction with this index.
    Barrier(usize),
    /// At the warp-wide instruction (a shuffle, `bar.warp.sync`) with this
    /// index.
    Warp(usize),
    Exited,
}

/// One thread's registers and position.
struct Thread {
    pc: usize,
    regs: Vec<u64>,
    wait: Wait,
}

/// What a launch did: global memory traffic and instructions executed
/// (every thread's, guarded-off ones excluded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub bytes_loaded: u64,
    pub bytes_stored: u64,
    pub instructions: u64,
}

/// What a launch shares between its threads.
struct Launch<'a> {
    kernel: &'a Kernel,
    params: &'a [u64],
    memory: &'a Memory,
    block: u32,
    grid: u32,
    ctaid: u32,
    traffic: &'a std::cell::Cell<Traffic>,
}

impl Launch<'_> {
    fn count(&self, f: impl FnOnce(&mut Traffic)) {
        let mut t = self.traffic.get();
        f(&mut t);
        self.traffic.set(t);
    }
}

impl Kernel {
    /// Run `grid` blocks of `block` threads with these parameter values.
    ///
    /// # Safety
    ///
    /// Every region of `memory` must be valid host memory for reads and
    /// writes for the whole call, and nothing else may access it meanwhile.
    pub unsafe fn launch(&self, grid: u32, block: u32, params: &[u64], memory: &Memory) -> Result<Traffic, SimError> {
        if params.len() != self.params {
            return Err(self.error(0, 0, 0, format!("{} parameters given, {} declared", params.len(), self.params)));
        }
        let mut shared = vec![0u8; self.shared_bytes];
        let traffic = std::cell::Cell::new(Traffic::default());
        for ctaid in 0..grid {
            let launch = Launch { kernel: self, params, memory, block, grid, ctaid, traffic: &traffic };
            shared.fill(0);
            launch.block(&mut shared)?;
        }
        Ok(traffic.get())
    }

    fn error(&self, pc: usize, block: u32, thread: u32, why: String) -> SimError {
        let ins = match (self.code.get(pc), self.lines.get(pc)) {
            (Some(i), Some(text)) => format!("line {}: {text}", i.line),
            _ => String::new(),
        };
        SimError::Run { kernel: self.name.clone(), block, thread, ins, why }
    }
}

impl Launch<'_> {
    fn block(&self, shared: &mut [u8]) -> Result<(), SimError> {
        let n = self.block as usize;
        let mut threads: Vec<Thread> =
            (0..n).map(|_| Thread { pc: 0, regs: vec![0; self.kernel.registers], wait: Wait::Ready }).collect();
        loop {
            for (tid, t) in threads.iter_mut().enumerate() {
                if t.wait == Wait::Ready {
                    self.run(t, tid as u32, shared)?;
                }
            }
            // Warp-wide instructions, warp by warp.
            let mut moved = false;
            for warp in 0..n.div_ceil(32) {
                let lanes = warp * 32..((warp + 1) * 32).min(n);
                let waits: Vec<Wait> = threads[lanes.clone()].iter().map(|t| t.wait).collect();
                let Some(&Wait::Warp(pc)) = waits.iter().find(|w| matches!(w, Wait::Warp(_))) else {
                    continue;
                };
                if let Some(other) = waits.iter().position(|w| *w != Wait::Warp(pc)) {
                    let why =
                        format!("lane {other} of the warp is not at this warp-wide instruction ({:?})", waits[other]);
                    return Err(self.kernel.error(pc, self.ctaid, (warp * 32) as u32, why));
                }
                self.warp_wide(&mut threads[lanes], pc)?;
                moved = true;
            }
            if moved {
                continue;
            }
            // A barrier, once every live thread reached it.
            let live: Vec<Wait> = threads.iter().map(|t| t.wait).filter(|w| *w != Wait::Exited).collect();
            let Some(&first) = live.first() else { return Ok(()) };
            if let Some(other) = live.iter().find(|w| !matches!(w, Wait::Barrier(_))) {
                let why = format!("threads wait at different places ({first:?}, {other:?})");
                return Err(self.kernel.error(0, self.ctaid, 0, why));
            }
            for t in threads.iter_mut().filter(|t| t.wait != Wait::Exited) {
                t.wait = Wait::Ready;
                t.pc += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests;
