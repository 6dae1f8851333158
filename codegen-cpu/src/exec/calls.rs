//! Calls of compiled stages ([`crate::jit`]): the executor's instructions
//! a stage leaves to it (row ids and their bounds checks, on one lane), the
//! load addresses, then the function; by rows, a table of every row's
//! addresses for stages whose rows those instructions pick.
//!
//! Such a stage (a gather's row ids, the `Class::Pre` instructions) runs by rows
//! too: the executor runs those instructions along the rows, as many rows at once
//! as a register holds, interleaved with the loads that read them, in program
//! order since registers are reused, and `fill_table` writes every row's load
//! addresses, which the function reads in place of constant steps
//! (`RowSteps::table` when compiled). An outer-tiled reduction (a column sum)
//! runs its last reduction dimension in one call the same way, one reduction step
//! per row, its accumulator fixed (`jit::Rows::Reduction`; the executor calls it
//! once per point of any other reduction dimensions).

use super::{exec_inst, indirect, Memory, Scratch, Tile};
use crate::jit::stage::{JitLoad, JitStage, Output};
use crate::plan::StagePlan;

/// Run a compiled stage's function for `len` lanes at the current point
/// (`at`: the stage, its index and its tile variable; `out`: the output and
/// how many rows from it, 1 unless the stage runs by rows): the instructions it
/// leaves to the executor on one lane, the load addresses at the tile's
/// start, then one call. Nothing is called when one of those instructions
/// failed (an index out of range, which the kernel then reports).
///
/// # Safety
/// `out` must point at the lanes the function writes (see [`Output`]).
pub(super) unsafe fn call_jit(
    jit: &JitStage,
    at: (&StagePlan, usize, usize),
    out: (*mut f32, usize),
    len: usize,
    mem: &Memory,
    sc: &mut Scratch,
) {
    sc.addrs.clear();
    let ran = push_addrs(jit, at, mem, sc);
    if sc.error {
        return;
    }
    // SAFETY: as the caller says.
    unsafe { invoke(jit, out, len, sc) };
    // The executor's instructions after the last load: a scatter's row (and
    // its bounds check), the same on every lane, which the store reads.
    run_pre(jit, ran, at, mem, sc);
}

/// [`call_jit`] for `out.1` rows, consecutive points of variable `row_var`
/// from the current one. A stage whose rows the executor's instructions
/// pick (a gather's row ids) was compiled to read every row's addresses
/// from a table (`jit::row_steps`): the executor fills it row by row, then
/// calls once; any other stage steps its addresses itself.
///
/// # Safety
/// As [`call_jit`], for every row.
pub(super) unsafe fn call_jit_rows(
    jit: &JitStage,
    at: (&StagePlan, usize, usize),
    out: (*mut f32, usize),
    row_var: usize,
    len: usize,
    mem: &Memory,
    sc: &mut Scratch,
) {
    if !jit.table() {
        // SAFETY: as the caller says.
        return unsafe { call_jit(jit, at, out, len, mem, sc) };
    }
    fill_table(jit, at, out.1, row_var, mem, sc);
    if sc.error {
        return;
    }
    // SAFETY: as the caller says; the table holds every row's addresses.
    unsafe { invoke(jit, out, len, sc) };
}

/// Fill `sc.addrs` with `rows` rows' load addresses (row-major: row `r`'s
/// `k`-th load at `r * loads + k`), rows consecutive points of `row_var`
/// from the current one.
///
/// The executor's instructions are the same on every lane of a row but
/// differ between rows, so they run along the rows: each over as many rows
/// as a register holds, interleaved with the loads that read them (registers
/// are reused). One instruction per row at a time had been a third of
/// BERT's embedding + layer norm kernel (`push_addrs` and `exec_pre`).
fn fill_table(
    jit: &JitStage,
    at: (&StagePlan, usize, usize),
    rows: usize,
    row_var: usize,
    mem: &Memory,
    sc: &mut Scratch,
) {
    let (stage, s, _) = at;
    let loads = jit.loads.len();
    sc.addrs.clear();
    sc.addrs.resize(rows * loads, 0);
    let first = sc.env[row_var];
    let chunk = sc.lane_index.len().max(1);
    for start in (0..rows).step_by(chunk) {
        let n = chunk.min(rows - start);
        sc.env[row_var] = first + start as i64;
        let mut ran = 0;
        for (k, load) in jit.loads.iter().enumerate() {
            for &p in &jit.pre[ran..load.pre_before] {
                exec_inst(&stage.insts[p], s, row_var, n, mem, sc);
            }
            ran = load.pre_before;
            for r in 0..n {
                sc.env[row_var] = first + (start + r) as i64;
                sc.addrs[(start + r) * loads + k] = address(load, s, r, mem, sc);
            }
            sc.env[row_var] = first + start as i64;
        }
        for &p in &jit.pre[ran..] {
            exec_inst(&stage.insts[p], s, row_var, n, mem, sc);
        }
    }
    sc.env[row_var] = first;
}

/// The function over the addresses in `sc.addrs`.
///
/// # Safety
/// As [`call_jit`].
unsafe fn invoke(jit: &JitStage, out: (*mut f32, usize), len: usize, sc: &mut Scratch) {
    // SAFETY: the addresses are lanes of buffers the plan indexes in bounds
    // (as for the interpreter; a gather's row was bounds-checked when its
    // address was taken, or is checked by the function per lane); `out` as
    // the caller says.
    let bad = unsafe { (jit.func)(sc.addrs.as_ptr(), out.0, len as i64, jit.constants.as_ptr(), out.1 as i64) };
    if bad != 0 {
        sc.error = true;
    }
}

/// The executor's instructions for a compiled stage from the `from`-th on.
fn run_pre(jit: &JitStage, from: usize, at: (&StagePlan, usize, usize), mem: &Memory, sc: &mut Scratch) {
    let (stage, s, tile_var) = at;
    for &k in &jit.pre[from..] {
        indirect::exec_pre(&stage.insts[k], s, tile_var, mem, sc);
    }
}

/// Append a compiled stage's load addresses at the current point to
/// `sc.addrs`, running the executor's instructions each load's indirect
/// parts read first (in program order: registers are reused). Returns how
/// many of those instructions ran.
fn push_addrs(jit: &JitStage, at: (&StagePlan, usize, usize), mem: &Memory, sc: &mut Scratch) -> usize {
    let (stage, s, tile_var) = at;
    let mut ran = 0;
    for load in &jit.loads {
        for &k in &jit.pre[ran..load.pre_before] {
            indirect::exec_pre(&stage.insts[k], s, tile_var, mem, sc);
        }
        ran = load.pre_before;
        let addr = address(load, s, 0, mem, sc);
        sc.addrs.push(addr);
    }
    ran
}

/// A load's byte address at the current point, its indirect parts read
/// from lane `lane` of the executor's registers of stage `s` (or the
/// element index itself, for a load whose buffer the function does not
/// read through a pointer).
fn address(load: &JitLoad, s: usize, lane: usize, mem: &Memory, sc: &Scratch) -> i64 {
    let mut index = load.index.eval(&sc.env);
    for (reg, stride) in &load.indirect {
        if let Tile::I64(v) = &sc.regs[s][*reg as usize] {
            index += v[lane] * stride;
        }
    }
    match load.buf {
        Some(buf) => mem.ptrs[buf.0 as usize] as i64 + index * load.size,
        None => index,
    }
}

/// Evaluate a compiled stage into its value register.
pub(super) fn run_jit(jit: &JitStage, at: (&StagePlan, usize, usize), len: usize, mem: &Memory, sc: &mut Scratch) {
    let (stage, s, _) = at;
    // A float32 value, or int64 lanes (`Output::ValueLong`).
    let (out, lanes) = match (&mut sc.regs[s][stage.value as usize], jit.output) {
        (Tile::F32(v), Output::Value) => (v.as_mut_ptr(), v.len()),
        (Tile::I64(v), Output::ValueLong) => (v.as_mut_ptr().cast::<f32>(), v.len()),
        _ => return,
    };
    debug_assert!(lanes >= len);
    // SAFETY: the value register holds at least `len` lanes of the type the
    // function writes.
    unsafe { call_jit(jit, at, (out, 1), len.min(lanes), mem, sc) };
}
