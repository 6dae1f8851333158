//! Building a [`MemPlan`]: concrete layouts, storage kinds, input-free
//! steps and arena offsets by liveness.

use rdyn_ir::loops::{BufRole, ExternKind, Program, ProgramOutput, Step};
use rdyn_ir::{Ctx, Expr};

use crate::{storage_root, BufPlan, MemPlan, OutputPlan, PlanError, Storage};

/// Arena blocks start on cache lines, so no two buffers share one and the
/// CPU's vector loads of a block never straddle a neighbour's.
const ARENA_ALIGN: usize = 64;

fn concrete(e: &Expr, ctx: &Ctx, what: &str) -> Result<i64, PlanError> {
    e.simplify(ctx).as_const().ok_or_else(|| PlanError::Symbolic(format!("{what} {e}")))
}

fn concrete_all(es: &[Expr], ctx: &Ctx, what: &str) -> Result<Vec<i64>, PlanError> {
    es.iter().map(|e| concrete(e, ctx, what)).collect()
}

/// Build the memory plan of `program` with the symbol values in `syms`.
pub fn plan(program: &Program, syms: &Ctx) -> Result<MemPlan, PlanError> {
    let mut buffers = layouts(program, syms)?;
    let once = input_free(program, &buffers);
    for (step, _) in program.steps.iter().zip(&once).filter(|(_, &once)| once) {
        for w in step_io(program, &buffers, step).1 {
            if buffers[w].storage == Storage::Pooled {
                buffers[w].storage = Storage::Kept;
            }
        }
    }
    let arena_bytes = assign_arena(program, &mut buffers, &once);
    let outputs = program
        .outputs
        .iter()
        .map(|o| match o {
            ProgramOutput::Buffer(b) => Ok(OutputPlan::Buffer(*b)),
            ProgramOutput::Int(e) => Ok(OutputPlan::Int(concrete(e, syms, "output")?)),
            ProgramOutput::None => Ok(OutputPlan::None),
        })
        .collect::<Result<_, PlanError>>()?;
    Ok(MemPlan { buffers, once, arena_bytes, outputs })
}

/// Every buffer's concrete layout and storage kind (arena offsets still 0).
/// Torch tensors: what the caller gets or an eager call may keep
/// (`host_visible`), and what only library calls read (`library_read`),
/// which never alias their inputs into their results.
fn layouts(program: &Program, syms: &Ctx) -> Result<Vec<BufPlan>, PlanError> {
    let mut host_visible = vec![false; program.buffers.len()];
    let mut library_read = vec![false; program.buffers.len()];
    for out in &program.outputs {
        if let ProgramOutput::Buffer(b) = out {
            host_visible[program.storage_of(*b).0 as usize] = true;
        }
    }
    for step in &program.steps {
        if let Step::Extern(ext) = step {
            let seen = match ext.kind {
                ExternKind::Library { .. } => &mut library_read,
                ExternKind::Fallback { .. } => &mut host_visible,
                _ => continue,
            };
            for b in &ext.inputs {
                seen[program.storage_of(*b).0 as usize] = true;
            }
        }
    }
    let mut buffers = Vec::with_capacity(program.buffers.len());
    for (k, buf) in program.buffers.iter().enumerate() {
        let storage = match &buf.role {
            BufRole::Input(n) => Storage::Input(*n),
            BufRole::ExternOut => Storage::Extern,
            BufRole::View(base) => Storage::View(*base),
            BufRole::Temp if host_visible[k] => Storage::Host,
            BufRole::Temp if library_read[k] => Storage::Pooled,
            BufRole::Temp => Storage::Arena(0),
        };
        buffers.push(BufPlan {
            dtype: buf.dtype,
            sizes: concrete_all(&buf.sizes, syms, "buffer size")?,
            strides: concrete_all(&buf.strides, syms, "buffer stride")?,
            offset: concrete(&buf.offset, syms, "buffer offset")?,
            storage,
        });
    }
    Ok(buffers)
}

/// Storage roots a step reads and writes. A scatter reads the buffer it
/// updates.
pub fn step_io(program: &Program, bufs: &[BufPlan], step: &Step) -> (Vec<usize>, Vec<usize>) {
    let root = |b: &rdyn_ir::loops::BufId| storage_root(bufs, *b);
    match step {
        Step::Kernel(k) => {
            let mut reads = Vec::new();
            let mut writes = Vec::new();
            for s in &k.stages {
                writes.push(root(&s.out));
                let mut roots = vec![s.value];
                roots.extend(s.store_indirect.iter().map(|(id, _)| *id));
                reads.extend(program.scalars.loaded_buffers(&roots).iter().map(root));
                if !s.store_indirect.is_empty() {
                    reads.push(root(&s.out));
                }
            }
            (reads, writes)
        }
        Step::Extern(e) => (e.inputs.iter().map(root).collect(), e.outputs.iter().map(root).collect()),
    }
}

/// The kernels whose results depend on no input: they read only what such
/// kernels wrote (or nothing: `arange`, `full`), and write arena (or
/// library-read, then kept) buffers no other step writes. Their values are
/// the same on every call of the plan.
fn input_free(program: &Program, buffers: &[BufPlan]) -> Vec<bool> {
    let n = buffers.len();
    let mut writers = vec![0usize; n];
    for step in &program.steps {
        let (_, mut writes) = step_io(program, buffers, step);
        writes.sort_unstable();
        writes.dedup();
        writes.into_iter().for_each(|w| writers[w] += 1);
    }
    let mut constant = vec![false; n];
    let mut once = vec![false; program.steps.len()];
    for (i, step) in program.steps.iter().enumerate() {
        if !matches!(step, Step::Kernel(_)) {
            continue;
        }
        let (reads, writes) = step_io(program, buffers, step);
        let own = writes
            .iter()
            .all(|&w| writers[w] == 1 && matches!(buffers[w].storage, Storage::Arena(_) | Storage::Pooled));
        if own && reads.iter().all(|r| constant[*r] || writes.contains(r)) {
            once[i] = true;
            writes.into_iter().for_each(|w| constant[w] = true);
        }
    }
    once
}

/// Give arena buffers offsets, reusing space whose buffer is dead. What
/// input-free steps (`once`) write stays for the arena's next call: live
/// throughout, its space never reused.
fn assign_arena(program: &Program, buffers: &mut [BufPlan], once: &[bool]) -> usize {
    let n = buffers.len();
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    for (at, step) in program.steps.iter().enumerate() {
        let (reads, writes) = step_io(program, buffers, step);
        if once[at] {
            for &b in &writes {
                (first[b], last[b]) = (0, usize::MAX);
            }
        }
        for b in reads.into_iter().chain(writes) {
            first[b] = first[b].min(at);
            last[b] = last[b].max(at);
        }
    }
    let mut order: Vec<usize> =
        (0..n).filter(|&b| matches!(buffers[b].storage, Storage::Arena(_)) && first[b] != usize::MAX).collect();
    order.sort_by_key(|&b| first[b]);
    // (offset, size, last use) of placed blocks.
    let mut placed: Vec<(usize, usize, usize)> = Vec::new();
    let mut total = 0usize;
    for b in order {
        let size = buffers[b].extent_bytes().div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        let mut live: Vec<(usize, usize)> =
            placed.iter().filter(|(_, _, end)| *end >= first[b]).map(|(o, s, _)| (*o, *s)).collect();
        live.sort();
        let mut offset = 0usize;
        for (o, s) in live {
            if offset + size <= o {
                break;
            }
            offset = offset.max(o + s);
        }
        buffers[b].storage = Storage::Arena(offset);
        placed.push((offset, size, last[b]));
        total = total.max(offset + size);
    }
    total
}
