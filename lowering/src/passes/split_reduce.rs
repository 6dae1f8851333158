//! Split reductions over rows: a kernel of column reductions becomes one
//! kernel of partial reductions over blocks of rows and one that combines
//! the blocks' partials.
//!
//! A reduction over a leading dim (`x.sum(0)`, a bias or LayerNorm weight
//! gradient) of a `[R, C]` layout runs tiled along its C columns, each tile
//! streaming all R rows. With few columns the tiles are narrow (64 lanes
//! for C = 256, so that two threads get two tiles each), and a tile reads
//! 256 bytes of each 1 KB row: from memory, a `[2048, 256]` column sum took
//! 137 µs where eager's took 53. Split into B blocks of rows, every block's
//! tile spans the whole row, each block streams its rows' contiguous
//! memory, and the blocks are the parallel work; the `[B, C]` partials
//! are combined by a second, small kernel in block order. The result does
//! not depend on the thread count (the blocks are fixed by R).
//!
//! Only plain column reductions split:
//! - one outer dim C, after dims of size 1 (unit dims after it are dropped
//!   first: `squeeze_trailing`), and reduction dims of constant
//!   sizes, split along the first with a divisor from 4 to 16 (the rows of
//!   a `[16, 128, 256]` activation split by its batch);
//! - an associative op (sum, prod, max, min) whose value and output share
//!   a float dtype, and no scatter;
//! - no reduction reading what the kernel writes (pointwise stages after
//!   the reductions, a mean's division, move to the combining kernel); a
//!   kernel whose later reductions read its earlier ones (a variance reads
//!   the mean) is first cut in two where they start (`cut_chain`), and each
//!   part splits on its own;
//! - loads affine in every reduction variable, some walking the columns
//!   contiguously and none walking a matrix along its rows (a per-row
//!   statistic may).
//!
//! Wide layouts (C > [`MAX_COLUMNS`]) already tile whole cache lines across
//! enough columns and are left as they are.

use std::collections::HashSet;

use rdyn_ir::loops::{
    contiguous_strides, BufId, BufRole, Buffer, Kernel, Program, Reduce, ReduceOp, ScalarOp, Stage, Step,
};
use rdyn_ir::{Ctx, Expr, Var};

/// Columns at most: at 1024 float32 columns (4 KB rows) the planner's
/// column tiles give two threads two tiles of 256 lanes, a whole KB of
/// each row per tile, and splitting stops paying for its second kernel.
pub const MAX_COLUMNS: i64 = 1024;

/// The fewest points (R·C) worth a second kernel: below, the reduction is
/// a few µs and runs on one thread anyway.
const MIN_POINTS: i64 = 1 << 15;

/// At most this many blocks, each of at least [`MIN_BLOCK_ROWS`] rows: 16
/// blocks keep two to eight threads busy with a few blocks each, and the
/// combining kernel reads 16 partials per column.
const MAX_BLOCKS: i64 = 16;
const MIN_BLOCK_ROWS: i64 = 32;

/// Run the pass over `program` (last: it works on scheduled kernels, and
/// on constant sizes only; a shape-generic program keeps its kernels).
pub fn run(program: &mut Program, host: bool) {
    use super::host_partials::{host_ahead, host_behind, hostable, Mark};
    let mut steps = std::mem::take(&mut program.steps);
    let mut marks = vec![Mark::Open; steps.len()];
    let mut i = 0;
    while i < steps.len() {
        let (Step::Kernel(k), Mark::Open) = (&mut steps[i], marks[i]) else {
            i += 1;
            continue;
        };
        // Taken out while the steps around it may change; put back if it stays.
        let kernel = std::mem::replace(k, Kernel { outer: Vec::new(), stages: Vec::new() });
        let kernel = match squeeze_trailing(program, &kernel) {
            Some(squeezed) if columns(program, &squeezed).is_some() || cut_chain(program, &squeezed).is_some() => {
                squeezed
            }
            _ => kernel,
        };
        let Some(cols) = columns(program, &kernel) else {
            if let Some((first, second)) = cut_chain(program, &kernel) {
                // Both parts are column reductions: the first is looked at
                // next, where the kernel was, then the second.
                steps[i] = Step::Kernel(first);
                steps.insert(i + 1, Step::Kernel(second));
                marks.insert(i + 1, Mark::Open);
                continue;
            }
            steps[i] = Step::Kernel(kernel);
            i += 1;
            continue;
        };
        if let Some(h) = host.then(|| hostable(program, &cols)).flatten() {
            if let Some(combine) = host_behind(program, (&mut steps[..i], &mut marks[..i]), &cols, &h) {
                steps[i] = Step::Kernel(combine);
                marks[i] = Mark::Done;
                i += 1;
                continue;
            }
            if let Some((at, combine)) = host_ahead(program, (&mut steps[i + 1..], &mut marks[i + 1..]), &cols, &h) {
                // The combine runs right after the kernel that now hosts
                // the partials; the column kernel is gone.
                steps.insert(i + 2 + at, Step::Kernel(combine));
                marks.insert(i + 2 + at, Mark::Done);
                steps.remove(i);
                marks.remove(i);
                continue;
            }
        }
        match split(program, &cols) {
            Some((partial, combine)) => {
                steps[i] = Step::Kernel(partial);
                steps.insert(i + 1, Step::Kernel(combine));
                marks[i] = Mark::Done;
                marks.insert(i + 1, Mark::Done);
                i += 2;
            }
            None => {
                drop(cols);
                steps[i] = Step::Kernel(kernel);
                i += 1;
            }
        }
    }
    program.steps = steps;
}

/// How the rows split: into `blocks` blocks along reduction dim `dim`
/// (whose other dims each block covers whole).
struct Rows {
    sizes: Vec<i64>,
    dim: usize,
    blocks: i64,
}

impl Rows {
    /// The first reduction dim with a divisor in 4..=[`MAX_BLOCKS`] that
    /// leaves blocks of [`MIN_BLOCK_ROWS`] rows or more (the largest one).
    fn choose(sizes: Vec<i64>) -> Option<Rows> {
        let total: i64 = sizes.iter().product();
        (0..sizes.len()).find_map(|dim| {
            let n = sizes[dim];
            let blocks = (4..=MAX_BLOCKS).rev().find(|b| n % b == 0 && total / b >= MIN_BLOCK_ROWS)?;
            Some(Rows { sizes: sizes.clone(), dim, blocks })
        })
    }

    /// The partial stage's reduction ranges: `dim` divided by the blocks.
    fn block_ranges(&self) -> Vec<i64> {
        let mut r = self.sizes.clone();
        r[self.dim] /= self.blocks;
        r
    }

    /// The original reduction variables over the partial kernel's
    /// (block, column, reduction variables...).
    fn vars(&self) -> Vec<Expr> {
        let per_block = self.sizes[self.dim] / self.blocks;
        (0..self.sizes.len())
            .map(|j| {
                let own = Expr::v(2 + j as u32);
                if j == self.dim {
                    Expr::v(0).scale(per_block).add(&own)
                } else {
                    own
                }
            })
            .collect()
    }
}

/// A plain column reduction: what both forms of the split (blocks of its
/// own here, or partials hosted by a row kernel: `host_partials.rs`) need.
pub(super) struct Columns<'k> {
    /// The column kernel's outer ranges (the combine's).
    pub outer: &'k [Expr],
    /// Leading dims of size 1 (a `keepdim` result) before the column dim.
    pub k: usize,
    pub columns: i64,
    /// The reduction ranges every reduction stage shares, as sizes.
    pub sizes: Vec<i64>,
    pub reductions: Vec<&'k Stage>,
    /// Pointwise stages over the columns (a mean's division), which run
    /// after the combine, in the combining kernel.
    pub after: Vec<&'k Stage>,
}

/// `kernel` as a plain column reduction worth splitting, if it is one.
pub(super) fn columns<'k>(program: &Program, kernel: &'k Kernel) -> Option<Columns<'k>> {
    let (c_expr, ones) = kernel.outer.split_last()?;
    if !ones.iter().all(|e| e.is_const(1)) {
        return None;
    }
    let k = ones.len();
    let columns = c_expr.as_const()?;
    let first = kernel.stages.iter().find(|s| s.reduce.is_some())?;
    let ranges = &first.reduce.as_ref()?.ranges;
    let sizes: Vec<i64> = ranges.iter().map(Expr::as_const).collect::<Option<_>>()?;
    let rows: i64 = sizes.iter().product();
    if columns > MAX_COLUMNS || columns * rows < MIN_POINTS {
        return None;
    }
    let written: HashSet<_> = kernel.stages.iter().map(|s| program.storage_of(s.out)).collect();
    let pointwise = |s: &Stage| s.reduce.is_none() && s.store_indirect.is_empty() && s.ranges == kernel.outer;
    let (reductions, after): (Vec<&Stage>, Vec<&Stage>) = kernel.stages.iter().partition(|s| s.reduce.is_some());
    if !reductions.iter().all(|s| splittable(program, s, (k, columns), ranges, &written))
        || !after.iter().all(|s| pointwise(s))
        || pointwise_first(kernel)
    {
        return None;
    }
    Some(Columns { outer: &kernel.outer, k, columns, sizes, reductions, after })
}

impl Columns<'_> {
    /// A `[blocks, columns]` buffer for `stage`'s partials.
    pub(super) fn partial_buffer(&self, program: &mut Program, stage: &Stage, blocks: i64) -> BufId {
        let dtype = program.buffer(stage.out).dtype;
        let sizes = vec![Expr::c(blocks), Expr::c(self.columns)];
        let strides = contiguous_strides(&sizes);
        program.add_buffer(Buffer { dtype, sizes, strides, offset: Expr::zero(), role: BufRole::Temp })
    }

    /// The partial stage of `stage` (at `kernel`'s variables `vars`, over
    /// `extents`): `[blocks, columns]` points reducing `block_ranges`.
    pub(super) fn partial_stage(
        &self,
        program: &mut Program,
        stage: &Stage,
        (out, blocks): (BufId, i64),
        block_ranges: &[i64],
        (vars, extents): (&[Expr], &[i64]),
    ) -> Option<Stage> {
        let op = stage.reduce.as_ref()?.op;
        let value = program.scalars.substitute(stage.value, vars, &Ctx::with_extents(extents));
        Some(Stage {
            out,
            ranges: vec![Expr::c(blocks), Expr::c(self.columns)],
            reduce: Some(Reduce { op, ranges: block_ranges.iter().map(|&n| Expr::c(n)).collect() }),
            value,
            store: Expr::v(0).scale(self.columns).add(&Expr::v(1)),
            store_indirect: Vec::new(),
        })
    }

    /// The kernel combining the `[blocks, columns]` partials `parts` (one
    /// per reduction stage, in order) into the original outputs, then the
    /// pointwise stages after them.
    pub(super) fn combine(&self, program: &mut Program, parts: &[BufId], blocks: i64) -> Kernel {
        let k = self.k as u32;
        let mut stages = Vec::new();
        for (stage, &part) in self.reductions.iter().zip(parts) {
            let op = stage.reduce.as_ref().map_or(ReduceOp::Sum, |r| r.op);
            let dtype = program.buffer(stage.out).dtype;
            // The kernel's variables, then the block.
            let index = Expr::v(k + 1).scale(self.columns).add(&Expr::v(k));
            let load =
                program.scalars.add(ScalarOp::Load { buf: part, index, indirect: Vec::new(), mask: None }, dtype);
            stages.push(Stage {
                out: stage.out,
                ranges: stage.ranges.clone(),
                reduce: Some(Reduce { op, ranges: vec![Expr::c(blocks)] }),
                value: load,
                store: stage.store.clone(),
                store_indirect: Vec::new(),
            });
        }
        stages.extend(self.after.iter().map(|s| (*s).clone()));
        Kernel { outer: self.outer.to_vec(), stages }
    }
}

/// `kernel` as a partial kernel and a combining one, if it is a plain
/// column reduction worth splitting.
fn split(program: &mut Program, cols: &Columns) -> Option<(Kernel, Kernel)> {
    let split_rows = Rows::choose(cols.sizes.clone())?;
    let b = split_rows.blocks;
    let block_ranges = split_rows.block_ranges();
    // Partial kernel: variables (block, column, reduction variables...).
    let mut extents = vec![b, cols.columns];
    extents.extend(&block_ranges);
    let mut vars = vec![Expr::zero(); cols.k];
    vars.push(Expr::v(1));
    vars.extend(split_rows.vars());
    let mut partials = Vec::new();
    let mut parts = Vec::new();
    for stage in &cols.reductions {
        let part = cols.partial_buffer(program, stage, b);
        partials.push(cols.partial_stage(program, stage, (part, b), &block_ranges, (&vars, &extents))?);
        parts.push(part);
    }
    let partial = Kernel { outer: vec![Expr::c(b), Expr::c(cols.columns)], stages: partials };
    let combine = cols.combine(program, &parts, b);
    Some((partial, combine))
}

/// `kernel` without the unit dims after its last dim larger than one (a
/// `keepdim` statistic's `[1, C, 1, 1]`, as batch norm's): their variables
/// are always 0, and the reduction variables move down in their place.
/// None if there are none, or a size is not constant.
fn squeeze_trailing(program: &mut Program, kernel: &Kernel) -> Option<Kernel> {
    let sizes: Vec<i64> = kernel.outer.iter().map(Expr::as_const).collect::<Option<_>>()?;
    let keep = sizes.iter().rposition(|&n| n != 1)? + 1;
    let dropped = sizes.len() - keep;
    if dropped == 0 || kernel.stages.iter().any(|s| s.ranges != kernel.outer || !s.store_indirect.is_empty()) {
        return None;
    }
    let mut stages = Vec::with_capacity(kernel.stages.len());
    for stage in &kernel.stages {
        let reduced: Vec<i64> = match &stage.reduce {
            Some(r) => r.ranges.iter().map(Expr::as_const).collect::<Option<_>>()?,
            None => Vec::new(),
        };
        let vars: Vec<Expr> = (0..sizes.len() + reduced.len())
            .map(|v| match v {
                v if v < keep => Expr::v(v as u32),
                v if v < sizes.len() => Expr::zero(),
                v => Expr::v((v - dropped) as u32),
            })
            .collect();
        let extents: Vec<i64> = sizes[..keep].iter().chain(&reduced).copied().collect();
        let ctx = Ctx::with_extents(&extents);
        stages.push(Stage {
            out: stage.out,
            ranges: stage.ranges[..keep].to_vec(),
            reduce: stage.reduce.clone(),
            value: program.scalars.substitute(stage.value, &vars, &ctx),
            store: stage.store.substitute_vars(&vars, &ctx),
            store_indirect: Vec::new(),
        });
    }
    Some(Kernel { outer: kernel.outer[..keep].to_vec(), stages })
}

/// A kernel of column reductions in which a later one reads what an earlier
/// one writes (a variance's sum of squared deviations reads the sum that
/// gives the mean): cut before the first stage that does, when both parts
/// are plain column reductions, so that each splits. Both parts still read
/// the rows once each, as the two stages did.
fn cut_chain(program: &Program, kernel: &Kernel) -> Option<(Kernel, Kernel)> {
    let mut written = HashSet::new();
    let at = kernel.stages.iter().position(|stage| {
        let reads = program.scalars.topo(&[stage.value]).into_iter().any(|id| {
            matches!(&program.scalars.get(id).op, ScalarOp::Load { buf, .. } if written.contains(&program.storage_of(*buf)))
        });
        written.insert(program.storage_of(stage.out));
        reads
    })?;
    if at == 0 {
        return None;
    }
    let part = |stages: &[Stage]| Kernel { outer: kernel.outer.clone(), stages: stages.to_vec() };
    let (first, second) = (part(&kernel.stages[..at]), part(&kernel.stages[at..]));
    (columns(program, &first).is_some() && columns(program, &second).is_some()).then_some((first, second))
}

/// Whether a pointwise stage comes before a reduction (it would then run
/// before the combine it might read).
fn pointwise_first(kernel: &Kernel) -> bool {
    let first_pointwise = kernel.stages.iter().position(|s| s.reduce.is_none());
    let last_reduction = kernel.stages.iter().rposition(|s| s.reduce.is_some());
    matches!((first_pointwise, last_reduction), (Some(p), Some(r)) if p < r)
}

/// Whether `stage` is a column reduction the split keeps exact in meaning.
/// `(k, columns)`: the column variable's position and the number of columns.
fn splittable(
    program: &Program,
    stage: &Stage,
    (k, columns): (usize, i64),
    rows: &[Expr],
    written: &HashSet<rdyn_ir::loops::BufId>,
) -> bool {
    let Some(reduce) = &stage.reduce else { return false };
    let dtype = program.buffer(stage.out).dtype;
    let associative = matches!(reduce.op, ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Max | ReduceOp::Min);
    let plain = reduce.ranges == rows
        && stage.store_indirect.is_empty()
        && stage.ranges.len() == k + 1
        && stage.ranges[k].as_const() == Some(columns)
        && dtype.is_float()
        && program.scalars.dtype(stage.value) == dtype;
    if !(associative && plain) {
        return false;
    }
    let col = Var(k as u32);
    let row_vars: Vec<Var> = (0..rows.len()).map(|j| Var((k + 1 + j) as u32)).collect();
    let mut walks_columns = false;
    for id in program.scalars.topo(&[stage.value]) {
        let index = match &program.scalars.get(id).op {
            ScalarOp::Load { buf, index, indirect, .. } => {
                if written.contains(&program.storage_of(*buf)) || !indirect.is_empty() {
                    return false;
                }
                index
            }
            ScalarOp::Index(e) => e,
            _ => continue,
        };
        let row_coefs: Option<Vec<i64>> = row_vars.iter().map(|v| index.linear_coef(*v)).collect();
        let (Some(c), Some(row_coefs)) = (index.linear_coef(col), row_coefs) else { return false };
        // A matrix walked contiguously along its rows: an inner reduction
        // (a per-row statistic, constant along the columns, is not one).
        if c != 0 && row_coefs.iter().any(|r| r.abs() == 1) {
            return false;
        }
        walks_columns |= c == 1 && row_coefs.iter().any(|r| *r != 0);
    }
    walks_columns
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use rdyn_ir::loops::BufId;
    use rdyn_ir::DType;

    /// `out[c] = Σ_r x[r, c]·y[r, c]` over an `[r, c]` layout, as one kernel.
    fn column_sum(rows: i64, columns: i64, op: ReduceOp) -> Program {
        let mut p = Program::default();
        let sizes = vec![Expr::c(rows), Expr::c(columns)];
        let input = |p: &mut Program, n| {
            let strides = contiguous_strides(&sizes);
            p.add_buffer(Buffer {
                dtype: DType::F32,
                sizes: sizes.clone(),
                strides,
                offset: Expr::zero(),
                role: BufRole::Input(n),
            })
        };
        let (x, y) = (input(&mut p, 0), input(&mut p, 1));
        let out = p.add_buffer(Buffer {
            dtype: DType::F32,
            sizes: vec![Expr::c(columns)],
            strides: vec![Expr::c(1)],
            offset: Expr::zero(),
            role: BufRole::Temp,
        });
        let index = Expr::v(1).scale(columns).add(&Expr::v(0));
        let load = |p: &mut Program, buf: BufId| {
            p.scalars.add(ScalarOp::Load { buf, index: index.clone(), indirect: Vec::new(), mask: None }, DType::F32)
        };
        let (a, b) = (load(&mut p, x), load(&mut p, y));
        let value = p.scalars.binary(rdyn_ir::loops::BinaryOp::Mul, a, b, DType::F32);
        let stage = Stage {
            out,
            ranges: vec![Expr::c(columns)],
            reduce: Some(Reduce { op, ranges: vec![Expr::c(rows)] }),
            value,
            store: Expr::v(0),
            store_indirect: Vec::new(),
        };
        p.steps.push(Step::Kernel(Kernel { outer: vec![Expr::c(columns)], stages: vec![stage] }));
        p.outputs.push(rdyn_ir::loops::ProgramOutput::Buffer(out));
        p
    }

    #[test]
    fn column_sums_split_into_blocks_and_a_combine() {
        let mut p = column_sum(2048, 256, ReduceOp::Sum);
        run(&mut p, false);
        rdyn_ir::verify::verify(&p).unwrap();
        let kernels: Vec<&Kernel> = p.kernels().collect();
        assert_eq!(kernels.len(), 2);
        assert_eq!(kernels[0].outer, vec![Expr::c(16), Expr::c(256)]);
        assert_eq!(kernels[0].stages[0].reduce.as_ref().unwrap().ranges, vec![Expr::c(128)]);
        assert_eq!(kernels[1].stages[0].reduce.as_ref().unwrap().ranges, vec![Expr::c(16)]);
        // Row r = 128·block + row-in-block, column = variable 1.
        let text = p.to_string();
        assert!(text.contains("32768*i0 + i1 + 256*i2") || text.contains("i1 + 256*i2 + 32768*i0"), "{text}");
    }

    /// A variance's two sums over an `[r, c]` layout in one kernel: `s[c] =
    /// Σ x[r, c]`, then `v[c] = Σ (x[r, c] - s[c]/r)²`, then `m[c] = s[c]/r`.
    fn column_variance(rows: i64, columns: i64) -> Program {
        use rdyn_ir::loops::BinaryOp;
        let mut p = column_sum(rows, columns, ReduceOp::Sum);
        let Some(Step::Kernel(kernel)) = p.steps.first().cloned() else { panic!("one kernel") };
        let first = kernel.stages[0].clone();
        let x = match &p.scalars.get(p.scalars.topo(&[first.value])[0]).op {
            ScalarOp::Load { buf, .. } => *buf,
            other => panic!("{other:?}"),
        };
        let temp = |p: &mut Program| {
            p.add_buffer(Buffer {
                dtype: DType::F32,
                sizes: vec![Expr::c(columns)],
                strides: vec![Expr::c(1)],
                offset: Expr::zero(),
                role: BufRole::Temp,
            })
        };
        let (var, mean) = (temp(&mut p), temp(&mut p));
        let f32 = DType::F32;
        let load = |p: &mut Program, buf, index| {
            p.scalars.add(ScalarOp::Load { buf, index, indirect: Vec::new(), mask: None }, f32)
        };
        let xv = load(&mut p, x, Expr::v(1).scale(columns).add(&Expr::v(0)));
        let sum = load(&mut p, first.out, Expr::v(0));
        let n = p.scalars.constant(rows as f64, f32);
        let m = p.scalars.binary(BinaryOp::Div, sum, n, f32);
        let d = p.scalars.binary(BinaryOp::Sub, xv, m, f32);
        let sq = p.scalars.binary(BinaryOp::Mul, d, d, f32);
        let stage = |out, value, reduce| Stage {
            out,
            ranges: vec![Expr::c(columns)],
            reduce,
            value,
            store: Expr::v(0),
            store_indirect: Vec::new(),
        };
        let rows_sum = Some(Reduce { op: ReduceOp::Sum, ranges: vec![Expr::c(rows)] });
        let stages = vec![first, stage(var, sq, rows_sum), stage(mean, m, None)];
        p.steps = vec![Step::Kernel(Kernel { outer: vec![Expr::c(columns)], stages })];
        p.outputs.push(rdyn_ir::loops::ProgramOutput::Buffer(var));
        p.outputs.push(rdyn_ir::loops::ProgramOutput::Buffer(mean));
        p
    }

    #[test]
    fn a_variance_after_its_mean_splits_in_two_parts() {
        let mut p = column_variance(6272, 32);
        run(&mut p, false);
        rdyn_ir::verify::verify(&p).unwrap();
        let kernels: Vec<&Kernel> = p.kernels().collect();
        // The sum's partials and combine, then the squared deviations'
        // partials and a combine that also divides the mean.
        assert_eq!(kernels.len(), 4, "{p}");
        assert_eq!(kernels[0].outer, vec![Expr::c(16), Expr::c(32)]);
        assert_eq!(kernels[2].outer, vec![Expr::c(16), Expr::c(32)]);
        assert_eq!(kernels[3].stages.len(), 2, "{p}");
        assert!(kernels[3].stages[1].reduce.is_none());
    }

    #[test]
    fn what_does_not_pay_or_would_change_meaning_stays() {
        for (rows, columns, op) in [
            (2048, 4096, ReduceOp::Sum), // wide rows tile well already
            (64, 256, ReduceOp::Sum),    // too little work
            (2039, 256, ReduceOp::Sum),  // a prime number of rows
            (2048, 256, ReduceOp::ArgMax),
        ] {
            let mut p = column_sum(rows, columns, op);
            run(&mut p, false);
            assert_eq!(p.kernels().count(), 1, "{rows}x{columns} {op}");
        }
    }
}
