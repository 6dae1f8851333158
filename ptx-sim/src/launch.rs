//! Launches: the memory a launch may touch, its threads and the block
//! scheduler (threads run to a barrier, a warp-wide instruction or their
//! end; warp-wide instructions and barriers then execute together).

use crate::error::SimError;
use crate::parse::Kernel;

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

    pub(crate) fn check(&self, addr: u64, bytes: usize) -> Result<usize, String> {
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
pub(crate) enum Wait {
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
pub(crate) struct Thread {
    pub(crate) pc: usize,
    pub(crate) regs: Vec<u64>,
    pub(crate) wait: Wait,
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
pub(crate) struct Launch<'a> {
    pub(crate) kernel: &'a Kernel,
    pub(crate) params: &'a [u64],
    pub(crate) memory: &'a Memory,
    pub(crate) block: u32,
    pub(crate) grid: u32,
    pub(crate) ctaid: u32,
    pub(crate) traffic: &'a std::cell::Cell<Traffic>,
}

impl Launch<'_> {
    pub(crate) fn count(&self, f: impl FnOnce(&mut Traffic)) {
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

    pub(crate) fn error(&self, pc: usize, block: u32, thread: u32, why: String) -> SimError {
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
