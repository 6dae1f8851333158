//! One stage at the current loop variables: its value, and its store
//! (plain, scattered, or left to the row cache when nothing reads it).

use std::collections::HashMap;

use rdyn_ir::loops::{ScalarId, Stage};
use rdyn_ir::Kind;

use crate::emitter::Emitter;
use crate::ptx::func::{Class, Func};
use crate::ptx::memory::store;
use crate::types::PtxError;

/// Compute a stage's value at the current loop variables; its register.
pub(crate) fn value(
    f: &mut Func,
    em: &Emitter<'_>,
    stage: &Stage,
) -> Result<(String, HashMap<ScalarId, String>), PtxError> {
    let mut roots = vec![stage.value];
    roots.extend(stage.store_indirect.iter().map(|(s, _)| *s));
    let regs = em.scalars(f, &roots)?;
    let v = regs.get(&stage.value).cloned().ok_or(PtxError::Internal("stage value not emitted"))?;
    Ok((v, regs))
}

/// Store `v` (of `kind`) as the stage's output at the current variables.
pub(crate) fn store_stage(
    f: &mut Func,
    em: &Emitter<'_>,
    stage: &Stage,
    v: &str,
    kind: Kind,
    regs: &HashMap<ScalarId, String>,
) -> Result<(), PtxError> {
    let dtype = em.program.buffer(stage.out).dtype;
    let root = em.program.storage_of(stage.out);
    let plain = stage.store_indirect.is_empty() && kind == dtype.kind();
    if plain && em.row.unstored.contains(&root) {
        em.row.stored(root, Some(&stage.store), dtype, em.syms, v);
        return Ok(());
    }
    let mut idx = em.index(f, &stage.store)?;
    for (s, stride) in &stage.store_indirect {
        let st = em.index(f, stride)?;
        let r = regs.get(s).ok_or(PtxError::Internal("scatter index not emitted"))?;
        let next = f.reg(Class::S64);
        f.ins(format!("mad.lo.s64 {next}, {r}, {st}, {idx}"));
        idx = next;
    }
    let addr = em.address(f, stage.out, &idx)?;
    store(f, &addr, v, kind, dtype);
    em.row.stored(root, Some(&stage.store).filter(|_| plain), dtype, em.syms, v);
    Ok(())
}

pub(crate) fn pointwise_stage_at(f: &mut Func, em: &Emitter<'_>, stage: &Stage) -> Result<(), PtxError> {
    let (v, regs) = value(f, em, stage)?;
    let kind = em.program.scalars.dtype(stage.value).kind();
    store_stage(f, em, stage, &v, kind, &regs)
}
