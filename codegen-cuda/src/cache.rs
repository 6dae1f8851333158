//! Registers already holding loaded elements: rows held across a block
//! kernel's stages ([`RowCache`]) and a vector group's lanes ([`Lanes`],
//! `kernel/pointwise.rs`).
//!
//! A softmax or layer norm kernel runs several stages over the same row
//! (a max, a sum, the output). When a stage's row has at most
//! `max_chunks(block)` points per thread (32, or 16 at 1024 threads), its loop
//! is unrolled into chunks (`kernel/loops.rs` `chunked_loop`):
//! chunk `k` is point `tid + k·block`, the same point in every stage with
//! the same row shape. A float element loaded or stored at a chunk's point
//! is remembered by (storage, canonical index, chunk, row shape), and a
//! later stage's load of the same element takes the register instead of
//! reading memory again. A row is then read from memory once, and with the
//! stores to private temporaries left out (`kernel_ptx`'s second emission) a
//! softmax or layer norm reads its row once and writes its output once. Results
//! are bit-identical (the same operations in the same order).
//!
//! Safety of the reuse: elements of storage the kernel never writes are
//! reused freely; elements of storage it writes are reused only from the
//! thread's own store at that point, and every store made outside a chunk
//! (a reduction's result) forgets its storage. Masked and indirect loads
//! are never reused.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use rdyn_ir::loops::BufId;
use rdyn_ir::{Ctx, DType, Expr, Var};

/// Canonical row variables start here (above any stage's own variables).
const CANON: u32 = 1 << 16;

/// Chunks per thread a row may have to be unrolled: registers per thread
/// are 64 at 1024 threads per block, 255 at 256.
pub fn max_chunks(block: u32) -> i64 {
    if block >= 1024 {
        16
    } else {
        32
    }
}

/// The point a block thread is emitting code for.
#[derive(Clone)]
struct Point {
    chunk: i64,
    /// Each loop variable's canonical form: outer variables stay, a
    /// stage's row variables become `CANON + d`, size-1 inner variables 0.
    canon: Vec<Expr>,
    row: Vec<i64>,
    /// In the partial chunk, which only some threads run: its registers
    /// may stand for the same chunk only, not for every chunk.
    partial: bool,
}

type Key = (BufId, Expr, i64, Vec<i64>);

/// Registers holding row elements (see the module comment).
#[derive(Default)]
pub struct RowCache {
    point: Option<Point>,
    /// Storage roots some stage of the kernel writes.
    written: HashSet<BufId>,
    values: RefCell<HashMap<Key, String>>,
    /// Elements of written storage, for the current stage only.
    stage_values: RefCell<HashMap<Key, String>>,
    /// Storage roots some load read from memory.
    memory_loads: RefCell<HashSet<BufId>>,
    /// Storage roots whose stores are left out: nothing reads them from
    /// memory (see `kernel/mod.rs` `private_storages`).
    pub unstored: HashSet<BufId>,
}

fn reusable(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F64)
}

impl RowCache {
    pub fn new(written: HashSet<BufId>, unstored: HashSet<BufId>) -> RowCache {
        RowCache { written, unstored, ..RowCache::default() }
    }

    /// A chunked loop begins: forget the previous stage's elements of
    /// written storage.
    pub fn begin_chunks(&self) {
        self.stage_values.borrow_mut().clear();
    }

    /// Code is emitted for chunk `chunk` of a row (see `Point`).
    pub fn set_point(&mut self, chunk: i64, canon: Vec<Expr>, row: Vec<i64>, partial: bool) {
        self.point = Some(Point { chunk, canon, row, partial });
    }

    /// Code is emitted outside any chunk.
    pub fn clear_point(&mut self) {
        self.point = None;
    }

    /// Storage roots some load of the kernel read from memory.
    pub fn memory_loads(&self) -> HashSet<BufId> {
        self.memory_loads.borrow().clone()
    }

    /// An element's key at the current point; an index that does not
    /// depend on the row is the same element at every chunk (`-1`).
    fn key(&self, root: BufId, index: &Expr, syms: &Ctx) -> Option<Key> {
        let p = self.point.as_ref()?;
        let canon = index.substitute_vars(&p.canon, syms);
        let chunk = if canon.max_var().is_some_and(|v| v >= CANON) { p.chunk } else { -1 };
        if chunk == -1 && p.partial {
            return None;
        }
        Some((root, canon, chunk, p.row.clone()))
    }

    /// The register already holding element `index` of `root`.
    pub fn lookup(&self, root: BufId, index: &Expr, dtype: DType, syms: &Ctx) -> Option<String> {
        if !reusable(dtype) {
            return None;
        }
        let key = self.key(root, index, syms)?;
        let found = self.values.borrow().get(&key).cloned();
        found.or_else(|| self.stage_values.borrow().get(&key).cloned())
    }

    /// A masked or indirect load read `root` from memory.
    pub fn loaded_unplain(&self, root: BufId) {
        self.memory_loads.borrow_mut().insert(root);
    }

    /// `reg` was loaded from element `index` of `root`. An element the
    /// kernel writes is kept only while the stage runs, and only when it
    /// does not depend on the row (a reduction's result, stored before the
    /// stage's barrier).
    pub fn loaded(&self, root: BufId, index: &Expr, dtype: DType, syms: &Ctx, reg: &str) {
        self.memory_loads.borrow_mut().insert(root);
        let Some(key) = self.key(root, index, syms).filter(|_| reusable(dtype)) else { return };
        if !self.written.contains(&root) {
            self.values.borrow_mut().insert(key, reg.to_string());
        } else if key.2 == -1 {
            self.stage_values.borrow_mut().insert(key, reg.to_string());
        }
    }

    /// `reg` (of the buffer's own kind) was stored at element `index` of
    /// `root`; `None`: a store the cache cannot follow.
    pub fn stored(&self, root: BufId, index: Option<&Expr>, dtype: DType, syms: &Ctx, reg: &str) {
        let key = index.filter(|_| reusable(dtype)).and_then(|i| self.key(root, i, syms));
        self.stage_values.borrow_mut().retain(|k, _| k.0 != root);
        let mut values = self.values.borrow_mut();
        match key {
            Some(key) => {
                values.insert(key, reg.to_string());
            }
            None => values.retain(|k, _| k.0 != root),
        }
    }
}

/// The canonical form of each loop variable for a stage whose row
/// variables start at `first` (`zeroed` size-1 inner variables before
/// them, from `m`).
pub fn canonical(m: usize, zeroed: usize, row: usize) -> Vec<Expr> {
    let mut canon: Vec<Expr> = (0..m as u32).map(|v| Expr::var(Var(v))).collect();
    canon.extend((0..zeroed).map(|_| Expr::c(0)));
    canon.extend((0..row as u32).map(|d| Expr::var(Var(CANON + d))));
    canon
}

/// Registers of a group's vector-loaded elements, for the emitter's loads.
#[derive(Default)]
pub struct Lanes {
    /// The point of the group being emitted.
    pub lane: usize,
    /// (storage root, simplified index) → one register per point, or one
    /// register that every point shares.
    pub loads: HashMap<(BufId, Expr), Vec<String>>,
}

impl Lanes {
    /// Whether no group is being emitted (nothing to look up).
    pub fn is_empty(&self) -> bool {
        self.loads.is_empty()
    }

    /// The register holding element `index` (simplified) of `root` at the
    /// current point.
    pub fn lookup(&self, root: BufId, index: &Expr) -> Option<String> {
        let regs = self.loads.get(&(root, index.clone()))?;
        regs.get(if regs.len() == 1 { 0 } else { self.lane }).cloned()
    }
}
