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
    // Each step's storage roots, once: turning `Pooled` into `Kept` and
    // placing arena blocks below change no root.
    let ios: Vec<Io> = program.steps.iter().map(|step| step_io(program, &buffers, step)).collect();
    let once = input_free(&ios, &buffers, program);
    for ((_, writes), _) in ios.iter().zip(&once).filter(|(_, &once)| once) {
        for &w in writes {
            if buffers[w].storage == Storage::Pooled {
                buffers[w].storage = Storage::Kept;
            }
        }
    }
    let arena_bytes = assign_arena(&ios, &mut buffers, &once);
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

/// Storage roots a step reads, and those it writes.
type Io = (Vec<usize>, Vec<usize>);

/// Storage roots a step reads and writes. A scatter reads the buffer it
/// updates.
pub fn step_io(program: &Program, bufs: &[BufPlan], step: &Step) -> Io {
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
fn input_free(ios: &[Io], buffers: &[BufPlan], program: &Program) -> Vec<bool> {
    let n = buffers.len();
    let mut writers = vec![0usize; n];
    for (_, writes) in ios {
        let mut writes = writes.clone();
        writes.sort_unstable();
        writes.dedup();
        writes.into_iter().for_each(|w| writers[w] += 1);
    }
    let mut constant = vec![false; n];
    let mut once = vec![false; program.steps.len()];
    for (i, (step, (reads, writes))) in program.steps.iter().zip(ios).enumerate() {
        if !matches!(step, Step::Kernel(_)) {
            continue;
        }
        let own = writes
            .iter()
            .all(|&w| writers[w] == 1 && matches!(buffers[w].storage, Storage::Arena(_) | Storage::Pooled));
        if own && reads.iter().all(|r| constant[*r] || writes.contains(r)) {
            once[i] = true;
            writes.iter().for_each(|&w| constant[w] = true);
        }
    }
    once
}

/// Give arena buffers offsets, reusing space whose buffer is dead. What
/// input-free steps (`once`) write stays for the arena's next call: live
/// throughout, its space never reused.
fn assign_arena(ios: &[Io], buffers: &mut [BufPlan], once: &[bool]) -> usize {
    let n = buffers.len();
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    for (at, (reads, writes)) in ios.iter().enumerate() {
        if once[at] {
            for &b in writes {
                (first[b], last[b]) = (0, usize::MAX);
            }
        }
        for &b in reads.iter().chain(writes) {
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

#[cfg(test)]
mod tests {
    use rdyn_ir::{Ctx, Sym};

    use super::*;

    fn program(text: &str) -> Program {
        rdyn_ir::parse::program(text).expect("the test program parses")
    }

    /// `x → a = exp(x) → b = -a → out = b + 1`: `a` and `out`'s producer
    /// overlap only through `b`, so `a`'s block is free again when `out`'s
    /// kernel would need one; the output is a host tensor.
    const CHAIN: &str = "\
buf0: float32[64] strides [1] offset 0 (input 0)
buf1: float32[64] strides [1] offset 0 (temp)
buf2: float32[64] strides [1] offset 0 (temp)
buf3: float32[64] strides [1] offset 0 (temp)
buf4: float32[64] strides [1] offset 0 (temp)
kernel k0 outer [64]
  buf1[i0] = stage inner []:
    t0: float32 = load buf0[i0]
    t1: float32 = exp t0
    -> t1
kernel k1 outer [64]
  buf2[i0] = stage inner []:
    t2: float32 = load buf1[i0]
    t3: float32 = neg t2
    -> t3
kernel k2 outer [64]
  buf3[i0] = stage inner []:
    t4: float32 = load buf2[i0]
    t5: float32 = exp t4
    -> t5
kernel k3 outer [64]
  buf4[i0] = stage inner []:
    t6: float32 = load buf3[i0]
    t7: float32 = neg t6
    -> t7
return (buf4)
";

    #[test]
    fn dead_temporaries_share_arena_space_and_outputs_are_host_tensors() {
        let mem = plan(&program(CHAIN), &Ctx::default()).expect("plans");
        let storage = |b: usize| mem.buffers[b].storage.clone();
        assert_eq!(storage(0), Storage::Input(0));
        assert_eq!(storage(4), Storage::Host);
        // buf1 is dead once k1 ran, so buf3 (written by k2) takes its block.
        assert_eq!(storage(1), Storage::Arena(0));
        assert_eq!(storage(2), Storage::Arena(256));
        assert_eq!(storage(3), Storage::Arena(0));
        assert_eq!(mem.arena_bytes, 512);
        assert_eq!(mem.once, vec![false; 4]);
    }

    #[test]
    fn an_input_free_kernel_runs_once_and_keeps_its_block() {
        // k0 reads nothing (an `arange`), so its buffer is computed once
        // per arena and no later buffer may reuse its space.
        let text = "\
buf0: float32[16] strides [1] offset 0 (input 0)
buf1: int64[16] strides [1] offset 0 (temp)
buf2: float32[16] strides [1] offset 0 (temp)
buf3: float32[16] strides [1] offset 0 (temp)
kernel k0 outer [16]
  buf1[i0] = stage inner []:
    t0: int64 = index i0
    -> t0
kernel k1 outer [16]
  buf2[i0] = stage inner []:
    t1: float32 = load buf0[i0]
    t2: float32 = exp t1
    -> t2
kernel k2 outer [16]
  buf3[i0] = stage inner []:
    t3: float32 = load buf2[i0]
    t4: int64 = load buf1[i0]
    t5: float32 = cast t4
    t6: float32 = add t3, t5
    -> t6
return (buf3)
";
        let mem = plan(&program(text), &Ctx::default()).expect("plans");
        assert_eq!(mem.once, vec![true, false, false]);
        let arena = |b: usize| match mem.buffers[b].storage {
            Storage::Arena(offset) => Some(offset),
            _ => None,
        };
        assert!(arena(1).is_some() && arena(2).is_some(), "{:?}", mem.buffers);
        assert_ne!(arena(1), arena(2));
        assert_eq!(step_io(&program(text), &mem.buffers, &program(text).steps[2]), (vec![2, 1], vec![3]));
    }

    #[test]
    fn a_symbolic_size_is_an_error_naming_it() {
        let text = CHAIN.replace("buf2: float32[64]", "buf2: float32[s0]");
        let err = plan(&program(&text), &Ctx::default()).expect_err("s0 is unbound");
        assert!(err.to_string().contains("concrete buffer size s0"), "{err}");
        let mut ctx = Ctx::default();
        ctx.sym_values.insert(Sym(0), 64);
        assert!(plan(&program(&text), &ctx).is_ok());
    }
}
