//! Memory planning: where every buffer of a loop-IR program lives, for every
//! device.
//!
//! A [`MemPlan`] is built once per specialization (the shape-generic program
//! is planned per call) from the [`Program`](rdyn_ir::loops::Program) alone,
//! before any device plans its kernels, so planning for CUDA or wgpu never
//! runs the CPU code generator. It gives each buffer its concrete layout
//! ([`BufPlan`]) and its [`Storage`]:
//!
//! - temporaries live in a per-call arena (reused across calls) at offsets
//!   assigned by liveness (`build.rs`); on CUDA the arena is one device
//!   allocation per call;
//! - outputs and tensors that eager ops read are allocated by torch (`Host`);
//! - tensors only library calls read (a convolution's input) are `Pooled`,
//!   kept by the compiled graph for its next call, since allocating them again
//!   page-faulted on every call;
//! - a kernel that reads no input (only what such kernels wrote, or nothing: a
//!   mask from `arange`, `diff` and `cumsum`) computes the same values on every
//!   call ([`MemPlan::once`]): its buffers get arena space no other buffer
//!   reuses, each pooled arena remembers whether it holds them, and later calls
//!   with that arena may skip those kernels. A buffer such a kernel writes for a
//!   library call (a convolution's weight computed from `arange`) is `Kept`:
//!   the graph keeps that torch tensor per specialization after a successful
//!   call, and a call that gets it back skips its kernels too.
//!
//! Invariants: `buffers[k]` describes the program's `BufId(k)`; a `View`'s
//! base is never itself a view; `once[i]` is about the program's step `i`.

mod build;

use rdyn_ir::loops::BufId;
use rdyn_ir::DType;

pub use build::{plan, step_io};

/// Why a memory plan could not be built.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlanError {
    /// A size the plan needs is still symbolic.
    #[error("plan needs a concrete {0}")]
    Symbolic(String),
}

/// Where a buffer's storage comes from at run time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Storage {
    Input(usize),
    /// Scratch at a byte offset of the per-call arena.
    Arena(usize),
    /// Allocated by the host as a torch tensor (graph outputs, and buffers
    /// that eager fallbacks read).
    Host,
    /// A torch tensor only library calls read (a convolution's input): the
    /// host may keep it for the next call instead of allocating again.
    Pooled,
    /// A torch tensor only library calls read, written only by input-free
    /// steps ([`MemPlan::once`]): the host keeps it for the plan with its
    /// values, so those steps run on the plan's first call only (GPT-2's
    /// attention mask, an input of ATen's attention).
    Kept,
    /// Produced by an extern call.
    Extern,
    View(BufId),
}

/// One buffer's concrete layout and storage.
#[derive(Clone, Debug)]
pub struct BufPlan {
    pub dtype: DType,
    pub sizes: Vec<i64>,
    pub strides: Vec<i64>,
    pub offset: i64,
    pub storage: Storage,
}

impl BufPlan {
    /// Elements from storage element 0 to one past the last element reached.
    pub fn extent_elems(&self) -> i64 {
        (self.extent_bytes() / self.dtype.itemsize()) as i64
    }

    /// Bytes from storage element 0 to one past the last element reached.
    pub fn extent_bytes(&self) -> usize {
        if self.sizes.contains(&0) {
            return 0;
        }
        let mut last = self.offset;
        for (s, st) in self.sizes.iter().zip(&self.strides) {
            last += (s - 1) * st.max(&0);
        }
        ((last + 1).max(0) as usize) * self.dtype.itemsize()
    }
}

/// One output of the program, concrete.
#[derive(Clone, Debug)]
pub enum OutputPlan {
    Buffer(BufId),
    Int(i64),
    None,
}

/// Every buffer's layout and storage, the arena's size, and the outputs.
#[derive(Clone, Debug)]
pub struct MemPlan {
    pub buffers: Vec<BufPlan>,
    /// Per program step: whether it depends on no input (a causal mask built
    /// from `arange`), so an arena that already holds its results may skip it.
    pub once: Vec<bool>,
    pub arena_bytes: usize,
    pub outputs: Vec<OutputPlan>,
}

/// The buffer that owns `b`'s storage (a view's base, else `b` itself).
pub fn storage_root(bufs: &[BufPlan], b: BufId) -> usize {
    match bufs[b.0 as usize].storage {
        Storage::View(base) => base.0 as usize,
        _ => b.0 as usize,
    }
}

/// Point every view at its base's address (after the bases are known).
pub fn resolve_views(bufs: &[BufPlan], ptrs: &mut [usize]) {
    for (k, buf) in bufs.iter().enumerate() {
        if let Storage::View(base) = buf.storage {
            ptrs[k] = ptrs[base.0 as usize];
        }
    }
}
