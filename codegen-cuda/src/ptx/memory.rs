//! Global loads and stores of one element in its dtype's width.

use rdyn_ir::{DType, Kind};

use crate::ptx::convert::{convert_kind, widen_half};
use crate::ptx::func::{imm, Class, Func};

/// The memory type of a dtype in `ld`/`st`.
pub fn mem_ty(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool | DType::U8 => "u8",
        DType::I8 => "s8",
        DType::I16 => "s16",
        DType::I32 => "s32",
        DType::I64 => "s64",
        DType::F16 | DType::BF16 => "b16",
        DType::F32 => "f32",
        DType::F64 => "f64",
    }
}

/// Load one element into a register of its kind (masked: zero where the
/// predicate is false).
pub fn load(f: &mut Func, addr: &str, dtype: DType, pred: Option<&str>) -> String {
    let guard = pred.map(|p| format!("@{p} ")).unwrap_or_default();
    let class = Class::of(dtype.kind());
    match dtype {
        DType::F16 | DType::BF16 => {
            let h = f.mov(Class::B16, "0");
            f.ins(format!("{guard}ld.global.b16 {h}, [{addr}]"));
            widen_half(f, &h, dtype)
        }
        _ => {
            let r = f.mov(class, &imm(class, 0.0));
            f.ins(format!("{guard}ld.global.{} {r}, [{addr}]", mem_ty(dtype)));
            r
        }
    }
}

/// Store `value` (a register of `kind`) into an element of `dtype`.
pub fn store(f: &mut Func, addr: &str, value: &str, kind: Kind, dtype: DType) {
    let v = memory_value(f, value, kind, dtype);
    f.ins(format!("st.global.{} [{addr}], {v}", mem_ty(dtype)));
}

/// `value` (a register of `kind`) as the register a store of `dtype`
/// writes: converted to its kind, float16/bfloat16 rounded to 16 bits.
pub fn memory_value(f: &mut Func, value: &str, kind: Kind, dtype: DType) -> String {
    let v = convert_kind(f, value, kind, dtype.kind());
    match dtype {
        DType::F16 | DType::BF16 => {
            let h = f.reg(Class::B16);
            let t = if dtype == DType::F16 { "f16" } else { "bf16" };
            f.ins(format!("cvt.rn.{t}.f32 {h}, {v}"));
            h
        }
        _ => v,
    }
}
