//! The semantics of each simulated instruction.
//!
//! Registers hold 64-bit patterns: floats as their bits (float32 in the low
//! half), integers sign- or zero-extended from their type's width,
//! predicates as 0 or 1. Each instruction reads the low bits its type names.

use crate::error::SimError;
use crate::launch::{Launch, Thread, Wait};
use crate::parse::{Cmp, Ins, Op, Opd, Round, Shfl, Space, Special, Test, Ty};

/// Instructions one thread may run between two synchronisations before the
/// simulator calls it an endless loop.
const MAX_STEPS: u64 = 1 << 30;

/// `$e` evaluated with `$x…` bound to the operands as floats of `$ty`
/// (float32 arithmetic for `.f32`, so each operation rounds as on a GPU).
macro_rules! float {
    ($ty:expr, [$($x:ident = $v:expr),*], $e:expr) => {
        match $ty {
            Ty::F64 => {
                $(let $x = f64::from_bits($v);)*
                (($e) as f64).to_bits()
            }
            _ => {
                $(let $x = f32::from_bits($v as u32);)*
                u64::from((($e) as f32).to_bits())
            }
        }
    };
}

/// The value of `bits` as an integer of `ty` (sign- or zero-extended).
fn int(bits: u64, ty: Ty) -> i128 {
    let width = ty.size() * 8;
    if width == 64 {
        return if ty.is_signed() { bits as i64 as i128 } else { bits as i128 };
    }
    let low = bits & ((1u64 << width) - 1);
    if ty.is_signed() && low >> (width - 1) == 1 {
        low as i128 - (1i128 << width)
    } else {
        low as i128
    }
}

/// `v` wrapped to `ty`'s width, in register form.
fn wrap(v: i128, ty: Ty) -> u64 {
    let width = ty.size() * 8;
    if width == 64 {
        return v as u64;
    }
    let low = (v as u64) & ((1u64 << width) - 1);
    if ty.is_signed() {
        int(low, ty) as u64
    } else {
        low
    }
}

fn as_f64(bits: u64, ty: Ty) -> f64 {
    match ty {
        Ty::F64 => f64::from_bits(bits),
        Ty::F16 => half::f16::from_bits(bits as u16).to_f64(),
        Ty::BF16 => half::bf16::from_bits(bits as u16).to_f64(),
        _ => f64::from(f32::from_bits(bits as u32)),
    }
}

fn compare(cmp: Cmp, a: u64, b: u64, ty: Ty) -> bool {
    use std::cmp::Ordering::*;
    let ord = if ty.is_float() { as_f64(a, ty).partial_cmp(&as_f64(b, ty)) } else { Some(int(a, ty).cmp(&int(b, ty))) };
    match (cmp, ord) {
        (Cmp::Num, o) => o.is_some(),
        (Cmp::Nan, o) => o.is_none(),
        (Cmp::Equ | Cmp::Neu | Cmp::Ltu | Cmp::Leu | Cmp::Gtu | Cmp::Geu, None) => true,
        (_, None) => false,
        (Cmp::Eq | Cmp::Equ, Some(o)) => o == Equal,
        (Cmp::Ne | Cmp::Neu, Some(o)) => o != Equal,
        (Cmp::Lt | Cmp::Ltu, Some(o)) => o == Less,
        (Cmp::Le | Cmp::Leu, Some(o)) => o != Greater,
        (Cmp::Gt | Cmp::Gtu, Some(o)) => o == Greater,
        (Cmp::Ge | Cmp::Geu, Some(o)) => o != Less,
    }
}

/// Float min/max: `.NaN` forms return NaN when either operand is; plain
/// forms return the other operand. −0 orders below +0.
fn min_max(a: u64, b: u64, ty: Ty, max: bool, nan: bool) -> u64 {
    let (x, y) = (as_f64(a, ty), as_f64(b, ty));
    let canonical = if ty == Ty::F64 { f64::NAN.to_bits() } else { 0x7fff_ffff };
    match (x.is_nan(), y.is_nan()) {
        (true, true) => return canonical,
        (true, false) | (false, true) if nan => return canonical,
        (true, false) => return b,
        (false, true) => return a,
        _ => {}
    }
    let key = |v: f64| (v, v.is_sign_positive());
    let pick_a = if max { key(x) >= key(y) } else { key(x) <= key(y) };
    if pick_a {
        a
    } else {
        b
    }
}

fn integral(v: f64, round: Round) -> f64 {
    match round {
        Round::Nearest => v.round_ties_even(),
        Round::Zero => v.trunc(),
        Round::Down => v.floor(),
        Round::Up => v.ceil(),
        Round::Float => v,
    }
}

fn convert(bits: u64, from: Ty, to: Ty, round: Round) -> u64 {
    if from.is_float() {
        let v = integral(as_f64(bits, from), round);
        return match to {
            Ty::F64 => v.to_bits(),
            // float32 from float64 rounds once (`as` is round-to-nearest).
            Ty::F32 => u64::from((v as f32).to_bits()),
            Ty::F16 => u64::from(half::f16::from_f64(v).to_bits()),
            Ty::BF16 => u64::from(half::bf16::from_f64(v).to_bits()),
            _ if v.is_nan() => 0,
            _ => {
                let width = to.size() * 8;
                let (lo, hi) = if to.is_signed() {
                    (-(1i128 << (width - 1)), (1i128 << (width - 1)) - 1)
                } else {
                    (0, (1i128 << width) - 1)
                };
                wrap((v as i128).clamp(lo, hi), to)
            }
        };
    }
    let v = int(bits, from);
    match to {
        Ty::F64 => (v as f64).to_bits(),
        Ty::F32 => u64::from((v as f32).to_bits()),
        Ty::F16 => u64::from(half::f16::from_f32(v as f32).to_bits()),
        Ty::BF16 => u64::from(half::bf16::from_f32(v as f32).to_bits()),
        _ => wrap(v, to),
    }
}

fn test(t: Test, bits: u64, ty: Ty) -> bool {
    let v = as_f64(bits, ty);
    match t {
        Test::Finite => v.is_finite(),
        Test::Infinite => v.is_infinite(),
        Test::Number => !v.is_nan(),
        Test::NotANumber => v.is_nan(),
        Test::Normal => {
            if ty == Ty::F64 {
                v.is_normal()
            } else {
                f32::from_bits(bits as u32).is_normal()
            }
        }
        Test::Subnormal => {
            if ty == Ty::F64 {
                v.is_subnormal()
            } else {
                f32::from_bits(bits as u32).is_subnormal()
            }
        }
    }
}

fn int_binary(op: &Op, a: u64, b: u64, ty: Ty) -> Result<u64, String> {
    let width = ty.size() as u32 * 8;
    let (x, y) = (int(a, ty), int(b, ty));
    Ok(match op {
        Op::Add => wrap(x.wrapping_add(y), ty),
        Op::Sub => wrap(x.wrapping_sub(y), ty),
        Op::Mul => wrap(x.wrapping_mul(y), ty),
        Op::MulHi if width == 64 && ty.is_signed() => ((x * y) >> 64) as u64,
        Op::MulHi if width == 64 => (((x as u128) * (y as u128)) >> 64) as u64,
        Op::MulHi => wrap((x * y) >> width, ty),
        // The hardware's results for a zero divisor (no trap).
        Op::Div if y == 0 => wrap(-1, ty),
        Op::Rem if y == 0 => a,
        Op::Div => wrap(x.wrapping_div(y), ty),
        Op::Rem => wrap(x.wrapping_rem(y), ty),
        Op::Min { .. } => wrap(x.min(y), ty),
        Op::Max { .. } => wrap(x.max(y), ty),
        Op::And => wrap(x & y, ty),
        Op::Or => wrap(x | y, ty),
        Op::Xor => wrap(x ^ y, ty),
        Op::Shl => {
            let s = (b as u32).min(width);
            if s >= width {
                0
            } else {
                wrap(x << s, ty)
            }
        }
        Op::Shr => {
            let s = (b as u32).min(width);
            if ty.is_signed() {
                wrap(x >> s.min(width - 1), ty)
            } else if s >= width {
                0
            } else {
                wrap(x >> s, ty)
            }
        }
        other => return Err(format!("{other:?} on {ty:?}")),
    })
}

fn float_binary(op: &Op, a: u64, b: u64, ty: Ty) -> Result<u64, String> {
    Ok(match op {
        Op::Add => float!(ty, [x = a, y = b], x + y),
        Op::Sub => float!(ty, [x = a, y = b], x - y),
        Op::Mul => float!(ty, [x = a, y = b], x * y),
        Op::Div => float!(ty, [x = a, y = b], x / y),
        Op::Min { nan } => min_max(a, b, ty, false, *nan),
        Op::Max { nan } => min_max(a, b, ty, true, *nan),
        // copysign d, a, b: b's magnitude with a's sign.
        Op::Copysign => float!(ty, [x = a, y = b], y.abs().copysign(x)),
        other => return Err(format!("{other:?} on {ty:?}")),
    })
}

fn unary(op: &Op, a: u64, ty: Ty) -> Result<u64, String> {
    if !ty.is_float() {
        let width = ty.size() as u32 * 8;
        let x = int(a, ty);
        let low = a & if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
        return Ok(match op {
            Op::Neg => wrap(x.wrapping_neg(), ty),
            Op::Abs => wrap(x.abs(), ty),
            Op::Not if ty == Ty::Pred => u64::from(a == 0),
            Op::Not => wrap(!x, ty),
            Op::Popc => u64::from(low.count_ones()),
            Op::Clz => u64::from(low.leading_zeros() - (64 - width)),
            Op::Brev => low.reverse_bits() >> (64 - width),
            other => return Err(format!("{other:?} on {ty:?}")),
        });
    }
    Ok(match op {
        Op::Neg => float!(ty, [x = a], -x),
        Op::Abs => float!(ty, [x = a], x.abs()),
        // Full-precision stand-ins for the `.approx` instructions.
        Op::Ex2 => float!(ty, [x = a], (x as f64).exp2()),
        Op::Lg2 => float!(ty, [x = a], (x as f64).log2()),
        Op::Sin => float!(ty, [x = a], (x as f64).sin()),
        Op::Cos => float!(ty, [x = a], (x as f64).cos()),
        Op::Tanh => float!(ty, [x = a], (x as f64).tanh()),
        Op::Rcp => float!(ty, [x = a], 1.0 / x),
        Op::Sqrt => float!(ty, [x = a], x.sqrt()),
        Op::Rsqrt => float!(ty, [x = a], 1.0 / (x as f64).sqrt()),
        other => return Err(format!("{other:?} on {ty:?}")),
    })
}

impl Launch<'_> {
    fn read(&self, o: &Opd, t: &Thread, tid: u32) -> Result<u64, String> {
        Ok(match o {
            Opd::Reg(r) => t.regs[*r as usize],
            Opd::NotReg(r) => u64::from(t.regs[*r as usize] == 0),
            Opd::Imm(v) => *v,
            Opd::Shared => 0,
            Opd::Special(s) => u64::from(match s {
                Special::Tid => tid,
                Special::Ntid => self.block,
                Special::Ctaid => self.ctaid,
                Special::Nctaid => self.grid,
                Special::LaneId => tid % 32,
            }),
            other => return Err(format!("operand {other:?} read as a value")),
        })
    }

    fn address(&self, o: &Opd, t: &Thread) -> Result<u64, String> {
        match o {
            Opd::Mem(Some(r), off) => Ok(t.regs[*r as usize].wrapping_add(*off as u64)),
            Opd::Mem(None, off) => Ok(*off as u64),
            other => Err(format!("operand {other:?} used as an address")),
        }
    }

    fn load(&self, space: Space, addr: u64, ty: Ty, shared: &[u8]) -> Result<u64, String> {
        let n = ty.size();
        let mut raw = [0u8; 8];
        match space {
            Space::Global => {
                let a = self.memory.check(addr, n)?;
                // SAFETY: `check` found the bytes inside a region the caller
                // of `launch` vouched for.
                unsafe { std::ptr::copy_nonoverlapping(a as *const u8, raw.as_mut_ptr(), n) };
                self.count(|t| t.bytes_loaded += n as u64);
            }
            Space::Shared => {
                let a = addr as usize;
                let src = shared
                    .get(a..a + n)
                    .ok_or_else(|| format!("shared load at {a} past its {} bytes", shared.len()))?;
                raw[..n].copy_from_slice(src);
            }
            Space::Param => return Err("ld.param of an address".into()),
        }
        let bits = u64::from_le_bytes(raw);
        Ok(if ty.is_float() { bits } else { wrap(int(bits, ty), ty) })
    }

    fn store(&self, addr: u64, ty: Ty, value: u64, space: Space, shared: &mut [u8]) -> Result<(), String> {
        let n = ty.size();
        let raw = value.to_le_bytes();
        match space {
            Space::Global => {
                let a = self.memory.check(addr, n)?;
                // SAFETY: as in `load`.
                unsafe { std::ptr::copy_nonoverlapping(raw.as_ptr(), a as *mut u8, n) };
                self.count(|t| t.bytes_stored += n as u64);
            }
            Space::Shared => {
                let a = addr as usize;
                let len = shared.len();
                let dst =
                    shared.get_mut(a..a + n).ok_or_else(|| format!("shared store at {a} past its {len} bytes"))?;
                dst.copy_from_slice(&raw[..n]);
            }
            Space::Param => return Err("st.param".into()),
        }
        Ok(())
    }

    /// Run one thread until it synchronises or ends.
    pub(crate) fn run(&self, t: &mut Thread, tid: u32, shared: &mut [u8]) -> Result<(), SimError> {
        let mut executed = 0;
        let result = self.run_counted(t, tid, shared, &mut executed);
        self.count(|c| c.instructions += executed);
        result
    }

    fn run_counted(&self, t: &mut Thread, tid: u32, shared: &mut [u8], executed: &mut u64) -> Result<(), SimError> {
        let code = &self.kernel.code;
        for _ in 0..MAX_STEPS {
            let Some(ins) = code.get(t.pc) else {
                t.wait = Wait::Exited;
                return Ok(());
            };
            if let Some((p, negated)) = ins.guard {
                if (t.regs[p as usize] != 0) == negated {
                    t.pc += 1;
                    continue;
                }
            }
            *executed += 1;
            match ins.op {
                Op::Bar => t.wait = Wait::Barrier(t.pc),
                Op::Shfl(_) | Op::WarpSync => t.wait = Wait::Warp(t.pc),
                Op::Ret => t.wait = Wait::Exited,
                Op::Trap => {
                    return Err(SimError::Trap { kernel: self.kernel.name.clone(), block: self.ctaid, thread: tid });
                }
                Op::Bra(target) => {
                    t.pc = target;
                    continue;
                }
                _ => {
                    self.step(ins, t, tid, shared).map_err(|why| self.kernel.error(t.pc, self.ctaid, tid, why))?;
                    t.pc += 1;
                    continue;
                }
            }
            return Ok(());
        }
        Err(self.kernel.error(t.pc, self.ctaid, tid, format!("no synchronisation in {MAX_STEPS} instructions")))
    }

    fn step(&self, ins: &Ins, t: &mut Thread, tid: u32, shared: &mut [u8]) -> Result<(), String> {
        let ty = ins.ty;
        let o = &ins.opds;
        let arg = |k: usize| -> Result<u64, String> {
            self.read(o.get(k).ok_or_else(|| format!("operand {k} missing"))?, t, tid)
        };
        let value = match &ins.op {
            Op::St(space) => {
                let addr = self.address(&o[0], t)?;
                aligned(addr, ty, &o[1])?;
                return match &o[1] {
                    Opd::Vector(regs) => {
                        for (k, r) in regs.iter().enumerate() {
                            let v = t.regs[*r as usize];
                            self.store(addr + (k * ty.size()) as u64, ty, v, *space, shared)?;
                        }
                        Ok(())
                    }
                    v => self.store(addr, ty, self.read(v, t, tid)?, *space, shared),
                };
            }
            Op::Ld(Space::Param) => match &o[1] {
                Opd::Param(i) => self.params[*i],
                other => return Err(format!("ld.param of {other:?}")),
            },
            Op::Ld(space) => {
                let addr = self.address(&o[1], t)?;
                aligned(addr, ty, &o[0])?;
                if let Opd::Vector(regs) = &o[0] {
                    for (k, r) in regs.iter().enumerate() {
                        t.regs[*r as usize] = self.load(*space, addr + (k * ty.size()) as u64, ty, shared)?;
                    }
                    return Ok(());
                }
                self.load(*space, addr, ty, shared)?
            }
            // `mov.b64 {lo, hi}, x` splits, `mov.b64 x, {lo, hi}` joins.
            Op::Mov => match (&o[0], &o[1]) {
                (Opd::Vector(parts), _) => {
                    let bits = arg(1)?;
                    let width = 64 / parts.len().max(1);
                    for (k, r) in parts.iter().enumerate() {
                        t.regs[*r as usize] = (bits >> (k * width)) & (u64::MAX >> (64 - width));
                    }
                    return Ok(());
                }
                (_, Opd::Vector(parts)) => {
                    let width = 64 / parts.len().max(1);
                    parts
                        .iter()
                        .enumerate()
                        .fold(0, |acc, (k, r)| acc | (t.regs[*r as usize] & (u64::MAX >> (64 - width))) << (k * width))
                }
                _ => arg(1)?,
            },
            Op::Cvta => arg(1)?,
            Op::Setp(cmp) => u64::from(compare(*cmp, arg(1)?, arg(2)?, ty)),
            Op::Selp => {
                if arg(3)? != 0 {
                    arg(1)?
                } else {
                    arg(2)?
                }
            }
            Op::Testp(test_op) => u64::from(test(*test_op, arg(1)?, ty)),
            Op::Cvt(round, from) => convert(arg(1)?, *from, ty, *round),
            Op::Fma => float!(ty, [x = arg(1)?, y = arg(2)?, z = arg(3)?], x.mul_add(y, z)),
            Op::Mad => {
                let p = int_binary(&Op::Mul, arg(1)?, arg(2)?, ty)?;
                int_binary(&Op::Add, p, arg(3)?, ty)?
            }
            Op::And | Op::Or | Op::Xor if ty == Ty::Pred => {
                let (a, b) = (arg(1)? != 0, arg(2)? != 0);
                u64::from(match ins.op {
                    Op::And => a && b,
                    Op::Or => a || b,
                    _ => a ^ b,
                })
            }
            op @ (Op::Add
            | Op::Sub
            | Op::Mul
            | Op::MulHi
            | Op::Div
            | Op::Rem
            | Op::Min { .. }
            | Op::Max { .. }
            | Op::Copysign
            | Op::And
            | Op::Or
            | Op::Xor
            | Op::Shl
            | Op::Shr) => {
                if ty.is_float() {
                    float_binary(op, arg(1)?, arg(2)?, ty)?
                } else {
                    int_binary(op, arg(1)?, arg(2)?, ty)?
                }
            }
            op => unary(op, arg(1)?, ty)?,
        };
        match o.first() {
            Some(Opd::Reg(r)) => t.regs[*r as usize] = value,
            other => return Err(format!("result operand {other:?}")),
        }
        Ok(())
    }

    /// Execute the warp-wide instruction at `pc` (a shuffle or
    /// `bar.warp.sync`) for every lane of a warp.
    pub(crate) fn warp_wide(&self, lanes: &mut [Thread], pc: usize) -> Result<(), SimError> {
        let ins = &self.kernel.code[pc];
        let Op::Shfl(mode) = ins.op else {
            // `bar.warp.sync`: every lane is here; go on.
            for t in lanes.iter_mut() {
                t.pc += 1;
                t.wait = Wait::Ready;
            }
            return Ok(());
        };
        let base = self.ctaid;
        let read = |t: &Thread, k: usize| {
            ins.opds.get(k).ok_or_else(|| "operand missing".to_string()).and_then(|o| self.read(o, t, 0))
        };
        let err = |why: String| self.kernel.error(pc, base, 0, why);
        let values: Vec<u64> = lanes.iter().map(|t| read(t, 1)).collect::<Result<_, _>>().map_err(err)?;
        let mut results = Vec::with_capacity(lanes.len());
        for (lane, t) in lanes.iter().enumerate() {
            let b = (read(t, 2).map_err(err)? & 31) as usize;
            let c = read(t, 3).map_err(err)? as usize;
            let seg = (c >> 8) & 31;
            let max_lane = (lane & seg) | (c & 31 & !seg);
            let min_lane = lane & seg;
            let (j, ok) = match mode {
                Shfl::Up => (lane.wrapping_sub(b), lane >= b && lane - b >= max_lane),
                Shfl::Down => (lane + b, lane + b <= max_lane),
                Shfl::Bfly => (lane ^ b, (lane ^ b) <= max_lane),
                Shfl::Idx => (min_lane | (b & !seg), (min_lane | (b & !seg)) <= max_lane),
            };
            let j = if ok && j < lanes.len() { j } else { lane };
            results.push(values[j]);
        }
        for (t, v) in lanes.iter_mut().zip(results) {
            match ins.opds.first() {
                Some(Opd::Reg(r)) => t.regs[*r as usize] = v,
                _ => return Err(err("shuffle without a result register".into())),
            }
            t.pc += 1;
            t.wait = Wait::Ready;
        }
        Ok(())
    }
}

/// A memory access must sit at a multiple of its bytes (a vector's: all
/// its elements'), as on the GPU, where a misaligned one faults.
fn aligned(addr: u64, ty: Ty, data: &Opd) -> Result<(), String> {
    let n = match data {
        Opd::Vector(regs) => regs.len(),
        _ => 1,
    };
    let bytes = (n * ty.size()) as u64;
    if !addr.is_multiple_of(bytes) {
        return Err(format!("misaligned access: {bytes} bytes at address {addr:#x}"));
    }
    Ok(())
}
