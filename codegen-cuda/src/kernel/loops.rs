//! Loops a kernel body runs: unravelling a linear index into loop
//! variables, counted loops, loops unrolled by `UNROLL` points, and loops
//! unrolled into chunks for the row cache (`cache.rs`).

use rdyn_ir::Expr;

use crate::emitter::Emitter;
use crate::ptx::func::{Class, Func};
use crate::types::PtxError;

/// Set the loop variables `first..` from `linear` unravelled over `sizes`.
pub(crate) fn unravel(f: &mut Func, em: &mut Emitter<'_>, linear: &str, sizes: &[i64], first: usize) {
    if em.vars.len() < first + sizes.len() {
        em.vars.resize(first + sizes.len(), String::new());
    }
    // Below 2^31 points the divisions are 32-bit (a multiply-high by a
    // constant each); 64-bit division is far slower on GPUs.
    let small = sizes.iter().map(|s| s.max(&1)).product::<i64>() < (1 << 31);
    if small {
        let rem = f.reg(Class::B32);
        f.ins(format!("cvt.u32.u64 {rem}, {linear}"));
        for k in (0..sizes.len()).rev() {
            let v = f.reg(Class::S64);
            if k == 0 {
                f.ins(format!("cvt.u64.u32 {v}, {rem}"));
            } else if sizes[k] <= 1 {
                f.ins(format!("mov.b64 {v}, 0"));
            } else {
                let size = sizes[k];
                let r = f.reg(Class::B32);
                f.ins(format!("rem.u32 {r}, {rem}, {size}"));
                f.ins(format!("div.u32 {rem}, {rem}, {size}"));
                f.ins(format!("cvt.u64.u32 {v}, {r}"));
            }
            em.vars[first + k] = v;
        }
        return;
    }
    let rem = f.mov(Class::S64, linear);
    for k in (0..sizes.len()).rev() {
        let v = f.reg(Class::S64);
        if k == 0 {
            f.ins(format!("mov.b64 {v}, {rem}"));
        } else {
            let size = sizes[k].max(1);
            f.ins(format!("rem.u64 {v}, {rem}, {size}"));
            f.ins(format!("div.u64 {rem}, {rem}, {size}"));
        }
        em.vars[first + k] = v;
    }
}

/// `for (i = start; i < end; i += step) { body }` over an s64 register.
pub(crate) fn counted_loop(
    f: &mut Func,
    start: &str,
    end: i64,
    step: &str,
    body: impl FnOnce(&mut Func, &str) -> Result<(), PtxError>,
) -> Result<(), PtxError> {
    let i = f.mov(Class::S64, start);
    let (top, done) = (f.label("loop"), f.label("done"));
    f.place(&top);
    let p = f.setp("ge", "s64", &i, &end.to_string());
    f.ins(format!("@{p} bra {done}"));
    body(f, &i)?;
    f.ins(format!("add.s64 {i}, {i}, {step}"));
    f.ins(format!("bra {top}"));
    f.place(&done);
    Ok(())
}

/// Points a block thread handles together in its reduction and row loops.
const UNROLL: i64 = 4;

/// `for (i = start; i < end; i += step)`, `UNROLL` points at a time while
/// that many remain: `compute` emits each point's value before `consume`
/// folds or stores any of them, so their loads are in flight together
/// (a thread with one load outstanding cannot fill HBM's pipe). The points
/// are consumed in the loop's order, so results match the plain loop
/// bit for bit. The rest run one at a time.
pub(crate) fn unrolled_loop<T>(
    f: &mut Func,
    em: &mut Emitter<'_>,
    start: &str,
    end: i64,
    step: i64,
    mut compute: impl FnMut(&mut Func, &mut Emitter<'_>, &str) -> Result<T, PtxError>,
    mut consume: impl FnMut(&mut Func, &mut Emitter<'_>, &str, T) -> Result<(), PtxError>,
) -> Result<(), PtxError> {
    let i = f.mov(Class::S64, start);
    if end >= UNROLL * step {
        let (top, rest) = (f.label("unrolled"), f.label("rest"));
        f.place(&top);
        let last = f.reg(Class::S64);
        f.ins(format!("add.s64 {last}, {i}, {}", (UNROLL - 1) * step));
        let p = f.setp("ge", "s64", &last, &end.to_string());
        f.ins(format!("@{p} bra {rest}"));
        let mut points = Vec::new();
        for u in 0..UNROLL {
            let at = f.reg(Class::S64);
            f.ins(format!("add.s64 {at}, {i}, {}", u * step));
            let value = compute(f, em, &at)?;
            points.push((at, value));
        }
        for (at, value) in points {
            consume(f, em, &at, value)?;
        }
        f.ins(format!("add.s64 {i}, {i}, {}", UNROLL * step));
        f.ins(format!("bra {top}"));
        f.place(&rest);
    }
    counted_loop(f, &i, end, &step.to_string(), |f, at| {
        let value = compute(f, em, at)?;
        consume(f, em, at, value)
    })
}

/// `for (i = start; i < end; i += step)` unrolled into chunks, each with
/// its point set for the row cache: every full chunk's value is computed
/// before any is consumed (their loads are in flight together), then they
/// are consumed in the loop's order, then the last, partial chunk runs
/// where its point exists. Results match the plain loop bit for bit.
#[allow(clippy::too_many_arguments)]
pub fn chunked_loop<T>(
    f: &mut Func,
    em: &mut Emitter<'_>,
    start: &str,
    end: i64,
    step: i64,
    canon: Vec<Expr>,
    row: Vec<i64>,
    mut compute: impl FnMut(&mut Func, &mut Emitter<'_>, &str) -> Result<T, PtxError>,
    mut consume: impl FnMut(&mut Func, &mut Emitter<'_>, &str, T) -> Result<(), PtxError>,
) -> Result<(), PtxError> {
    let full = end / step;
    em.row.begin_chunks();
    let at = |f: &mut Func, k: i64| {
        let r = f.reg(Class::S64);
        f.ins(format!("add.s64 {r}, {start}, {}", k * step));
        r
    };
    let point = |em: &mut Emitter<'_>, k: i64| em.row.set_point(k, canon.clone(), row.clone(), k == full);
    let mut values = Vec::new();
    for k in 0..full {
        let i = at(f, k);
        point(em, k);
        values.push((k, i.clone(), compute(f, em, &i)?));
    }
    for (k, i, v) in values {
        point(em, k);
        consume(f, em, &i, v)?;
    }
    if end % step != 0 {
        let i = at(f, full);
        let skip = f.label("chunk_end");
        let outside = f.setp("ge", "s64", &i, &end.to_string());
        f.ins(format!("@{outside} bra {skip}"));
        point(em, full);
        let v = compute(f, em, &i)?;
        consume(f, em, &i, v)?;
        f.place(&skip);
    }
    em.row.clear_point();
    Ok(())
}
