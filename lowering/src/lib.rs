//! Lowering: ATen graph IR → loop-level IR, then the passes over it.
//!
//! Every graph value becomes a lazy tensor (`lazy.rs`): a scalar expression
//! over its own index variables (`i0..ndim`). Pointwise ops and views build new
//! lazies by substitution and never touch memory; a lazy is *realized* into a
//! buffer only where something needs memory (below). The `schedule` pass then
//! groups stages into kernels.
//!
//! Errors: [`LowerError::Unsupported`] for one node means "run this node
//! eagerly" and is handled here (the node becomes a fallback extern); any other
//! error is a compiler bug and fails the whole graph. Malformed input is
//! `Invalid`, never a panic: `lower.rs` checks what every rule takes for
//! granted (values that exist, metadata a tensor can have, each rule's
//! result of its output's rank and sizes), and each rule what its own
//! arguments imply (`repeat`'s counts, a split's sizes, a diagonal's dims, an
//! embedding's integer indices), naming the op, the input and what was
//! expected; `tests/malformed.rs` sweeps mutations of one graph per rule.
//!
//! # Where things are
//!
//! From the bottom up; a file imports only from files above it in this list
//! (no import circles):
//!
//! - `error.rs`: [`LowerError`]. `lazy.rs`: the lazy tensor.
//! - `lowerer.rs`: the state every rule works on (the program so far, each
//!   value's lazy), [`LowerOptions`], [`NodeCounts`], the recompute costs, and
//!   the primitives rules build lazies with (loads, views, broadcasts, operands,
//!   casts). `store.rs`: when a lazy becomes a buffer (`realize`, views of
//!   existing buffers, library and eager calls).
//! - `rules/`: per ATen op, the function that lowers its node, grouped by
//!   family, one file each; `rules/mod.rs` is the single dispatch (`rule(op)`, one
//!   exhaustive match) and says which file owns what. Which scalar op an
//!   elementwise ATen op is, and what a scalar op costs or takes, is data in
//!   `rdyn_ir::ops`, not code here.
//! - `passes/`: the passes over a loop-IR program, one file each with `pub fn
//!   run`; `passes/mod.rs` names them ([`Pass`], [`run_pass`]).
//!   `pipeline.rs`: the passes `lower_with` runs, as one list, in order.
//! - `outputs.rs`: the graph outputs' buffers (which alias which).
//!   `lower.rs`: the driver ([`lower_with`]): inputs, each node by its rule,
//!   outputs, then the pipeline.
//!
//! Invariants: a node whose rule returns `Unsupported` runs eagerly, its outputs
//! the call's buffers (what the rule built before is left unreferenced, so rules
//! fail before they store anything); each pass leaves a program
//! [`rdyn_ir::verify::verify`] accepts (checked after every pass in debug builds,
//! and after each pass a filetest runs); lowering is deterministic: the same
//! graph and options give the same program text.
//!
//! # Filetests
//!
//! `tests/filetests/*.loop` pin the passes' decisions without torch: loop IR
//! in the text form (`rdyn_ir::parse`), a `; run: cse, dce` line naming the
//! passes ([`Pass`]) to run on it, and `; check:` / `; not:` lines matched in
//! order against the printed result (`; error:` lines for a program the parser
//! or a pass must reject). `cargo test -p rdyn-lowering --test filetests` runs
//! them all (`RDYN_FILETESTS=word` those whose name contains `word`). To add
//! one, write the IR (print a program a pass's unit test builds, or start from
//! a file here) with its `; run:` line and a first comment saying what it
//! pins; run it without checks, and it fails printing the result: check that
//! the passes decided what they should, and write the checks from it.
//!
//! # When a lazy becomes a buffer
//!
//! A reduction's output; a graph output (with PyTorch's strides); an extern
//! call's input; a value with several users whose body costs more than
//! `RECOMPUTE_LIMIT` (12; an op `rdyn_ir::ops` marks costly, such as a
//! transcendental, or a bounds-checked index counts 12, any other op 1), stored with its metadata's
//! strides; a piece of a `cat` whose body costs more than `CAT_PIECE_LIMIT`
//! (ShuffleNet hands half of each block on through the next block's `cat` and
//! channel shuffle: fused, every block evaluated all earlier ones per element).
//! Each materialisation is a single-stage `Kernel` (`realize`), written in storage
//! order. Masked loads implement `cat` and padding; `Bounded` scalars check
//! data-dependent indices (`rules/index.rs`).
//!
//! # Options per graph ([`LowerOptions`])
//!
//! `cublas`: CUDA GEMMs are GEMM steps run by cuBLAS (else ATen calls).
//! `cpu_kernels`: rdyn's CPU-only kernels exist (scans, sorts, searches) and
//! stages may be split piecewise; otherwise (GPU devices) scans are prefix
//! reductions, sorts rank (`rules/sort.rs`) and searches unroll.
//! `piecewise_min`: the fewest elements per piece (`RDYN_PIECEWISE_MIN`).
//! `split_reduce`: narrow column reductions run as partials over blocks of
//! rows and a combine (`RDYN_SPLIT_REDUCE=0` keeps them whole).
//! `relayout`: a stage whose loads cross its store's layout computes in
//! theirs, then a copy stores it (`passes/relayout.rs`; `RDYN_RELAYOUT=0`).
//! `host_partials`: those partials run in the row kernel before them when it
//! covers the same rows, by blocks, while the rows are in cache
//! (`passes/host_partials.rs`; `RDYN_HOST_PARTIALS=0` keeps them apart).
//! `opmath_scalars`: how a Python float meets a half-precision tensor
//! (`rules/binary.rs`).
//!
//! # What arrives
//!
//! AOTAutograd hands over graphs decomposed with `rdyn.DECOMPOSITIONS`
//! (`python/rdyn/backend.py`): PyTorch's table, minus `KEPT_WHOLE` (ops lowered
//! whole here because tracing each decomposed op costs capture time: clamps and
//! `hardtanh`, `silu`, `native_layer_norm`, `logsumexp`, `t`, `transpose`,
//! `_unsafe_view`, `squeeze`; exact `gelu_backward` too), plus rdyn's own:
//! `_decomp.py` (layouts as ATen's kernels give them, max pooling unrolled over
//! the window, `cdist`, adaptive pooling, `masked_scatter`, `_softmax` by a
//! reciprocal), `_decomp_index.py` (`nonzero_static`, `put`, `histc`, boolean
//! `index_put`, the embedding's gradient), `_random.py` (random ops from
//! `hash_mix`) and `_attention.py` (CPU flash attention and its backward as
//! batched GEMMs around fused softmax kernels). Each file's docstrings give the
//! details. A training graph is split by AOTAutograd's min-cut partitioner, so
//! backwards recompute cheap pointwise values rather than reading many saved ones.
//! `prims.convert_element_type`, the one prim decompositions leave, is a cast.

mod error;
mod lazy;
mod lower;
mod lowerer;
mod outputs;
mod passes;
mod pipeline;
mod rules;
mod store;
#[cfg(test)]
mod testing;

pub use error::LowerError;
pub use lower::{lower, lower_with, InputLayout, Lowered};
pub use lowerer::{LowerOptions, NodeCounts};
pub use passes::{run_pass, Pass, PassError, PIECEWISE_MIN_ELEMENTS};
