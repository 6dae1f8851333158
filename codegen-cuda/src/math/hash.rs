//! `hash_mix` in PTX: rdyn's counter-based random bits
//! ([`rdyn_ir::random`]) on 32-bit words, the operands' low halves.

use rdyn_ir::random::{FMIX, GOLDEN};

use crate::ptx::func::{Class, Func};

/// MurmurHash3's finalizer of the 32-bit register `x`.
fn fmix32(f: &mut Func, x: &str) -> String {
    let mut h = x.to_string();
    for (shift, mul) in [(16, Some(FMIX[0])), (13, Some(FMIX[1])), (16, None)] {
        let s = f.reg(Class::B32);
        f.ins(format!("shr.u32 {s}, {h}, {shift}"));
        let x = f.reg(Class::B32);
        f.ins(format!("xor.b32 {x}, {h}, {s}"));
        h = match mul {
            Some(m) => {
                let r = f.reg(Class::B32);
                f.ins(format!("mul.lo.u32 {r}, {x}, {m}"));
                r
            }
            None => x,
        };
    }
    h
}

/// The 24 random bits for the 64-bit registers `position` and `key`, as a
/// 64-bit register.
pub(crate) fn hash_mix(f: &mut Func, position: &str, key: &str) -> String {
    let (p, k) = (f.reg(Class::B32), f.reg(Class::B32));
    f.ins(format!("cvt.u32.u64 {p}, {position}"));
    f.ins(format!("cvt.u32.u64 {k}, {key}"));
    let kx = f.reg(Class::B32);
    f.ins(format!("xor.b32 {kx}, {k}, {GOLDEN}"));
    let k = fmix32(f, &kx);
    let spread = f.reg(Class::B32);
    f.ins(format!("mad.lo.u32 {spread}, {p}, {GOLDEN}, {k}"));
    let h = fmix32(f, &spread);
    let hk = f.reg(Class::B32);
    f.ins(format!("xor.b32 {hk}, {h}, {k}"));
    let h = fmix32(f, &hk);
    let top = f.reg(Class::B32);
    f.ins(format!("shr.u32 {top}, {h}, 8"));
    let r = f.reg(Class::S64);
    f.ins(format!("cvt.u64.u32 {r}, {top}"));
    r
}
