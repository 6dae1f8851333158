//! Conversions of register values: between kinds, to narrow floats and
//! integer widths, and to a node's dtype.

use rdyn_ir::{DType, Kind};

use crate::ptx::func::{Class, Func};

/// An f32 register with the value of a float16/bfloat16 in `h`.
pub fn widen_half(f: &mut Func, h: &str, dtype: DType) -> String {
    let r = f.reg(Class::F32);
    if dtype == DType::F16 {
        f.ins(format!("cvt.f32.f16 {r}, {h}"));
    } else {
        let w = f.reg(Class::B32);
        f.ins(format!("cvt.u32.u16 {w}, {h}"));
        f.ins(format!("shl.b32 {w}, {w}, 16"));
        f.ins(format!("mov.b32 {r}, {w}"));
    }
    r
}

/// A value of `from` kind as a register of `to` kind (float → int truncates).
pub fn convert_kind(f: &mut Func, x: &str, from: Kind, to: Kind) -> String {
    let r = match (from, to) {
        (a, b) if a == b => return x.to_string(),
        (Kind::F32, Kind::F64) => ("cvt.f64.f32", Class::F64),
        (Kind::F64, Kind::F32) => ("cvt.rn.f32.f64", Class::F32),
        (Kind::I64, Kind::F32) => ("cvt.rn.f32.s64", Class::F32),
        (Kind::I64, Kind::F64) => ("cvt.rn.f64.s64", Class::F64),
        (Kind::F32, _) => ("cvt.rzi.s64.f32", Class::S64),
        (_, _) => ("cvt.rzi.s64.f64", Class::S64),
    };
    let out = f.reg(r.1);
    f.ins(format!("{} {out}, {x}", r.0));
    out
}

/// Wrap an s64 value to the range of integer dtype `to` (bool: 0/1).
pub fn wrap_int(f: &mut Func, x: &str, to: DType) -> String {
    let cvt = match to {
        DType::Bool => {
            let p = f.setp("ne", "s64", x, "0");
            return f.bool_of(&p);
        }
        DType::U8 => "cvt.u64.u8",
        DType::I8 => "cvt.s64.s8",
        DType::I16 => "cvt.s64.s16",
        DType::I32 => "cvt.s64.s32",
        _ => return x.to_string(),
    };
    let r = f.reg(Class::S64);
    f.ins(format!("{cvt} {r}, {x}"));
    r
}

/// A scalar `Cast` node: kind conversion, narrow-float rounding, integer
/// wrapping, bool normalisation.
pub fn cast(f: &mut Func, x: &str, from: DType, to: DType) -> String {
    if to == DType::Bool {
        let p = match from.kind() {
            Kind::F32 => f.setp("neu", "f32", x, "0f00000000"),
            Kind::F64 => f.setp("neu", "f64", x, "0d0000000000000000"),
            Kind::I64 => f.setp("ne", "s64", x, "0"),
        };
        return f.bool_of(&p);
    }
    let v = convert_kind(f, x, from.kind(), to.kind());
    match to {
        DType::F16 | DType::BF16 => {
            let h = f.reg(Class::B16);
            let t = if to == DType::F16 { "f16" } else { "bf16" };
            f.ins(format!("cvt.rn.{t}.f32 {h}, {v}"));
            widen_half(f, &h, to)
        }
        d if d.is_int() => wrap_int(f, &v, d),
        _ => v,
    }
}

/// Bring a result computed in `kind` to the node's dtype `to`.
pub fn fit(f: &mut Func, r: String, kind: Kind, to: DType) -> String {
    if kind == to.kind() {
        // Integer results wrap to their dtype; a bool sum (`True + True`) is
        // True.
        if to.is_int() || to == DType::Bool {
            return wrap_int(f, &r, to);
        }
        return r;
    }
    let from = match kind {
        Kind::F32 => DType::F32,
        Kind::F64 => DType::F64,
        Kind::I64 => DType::I64,
    };
    cast(f, &r, from, to)
}
