//! Lane arithmetic for the JIT, written once for both widths: the main loop
//! runs four lanes per step (`F32X4`), the tail one lane (`F32`).
//!
//! Booleans are lane masks (`I32X4`/`I32`, all ones or zero), so `where`
//! is a bit select. Only exactly rounded operations are inline (no FMA
//! contraction), so a compiled stage gives the tile interpreter's bits.
//! A `where` whose mask is an integer comparison (a bool load, an index test)
//! selects on the integer bits, which x86 lowers to one `pblendvb` (Cranelift
//! sees a blend through a bitcast of a float comparison, not of an integer one).
//! Random bits (`hash_mix`) are computed on 32-bit integer lanes: the position
//! an affine index, the key a float32 load converted, the bits converted exactly
//! to float32.

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Opcode, Type, Value, ValueDef};
use cranelift_frontend::FunctionBuilder;
use rdyn_ir::loops::{BinaryOp, ReduceOp, UnaryOp};
use rdyn_ir::random::{FMIX, GOLDEN};

/// Zero words after a stage's constants in its table: a load whose mask is
/// the same on every lane reads its groups (four of four lanes, `step`
/// elements apart) from here when the mask is off, so steps up to
/// [`UNIFORM_MASK_MAX_STEP`] stay inside.
pub(super) const ZERO_BLOCK: usize = 64;
pub(super) const UNIFORM_MASK_MAX_STEP: i64 = (ZERO_BLOCK / 16) as i64;

/// The function's constants, loaded once on entry from a table the caller
/// passes (bit patterns). Cranelift rematerialises immediate constants at
/// every use, which pins whatever depends on them inside the loop; loaded
/// constants are defined before the loops, so invariant arithmetic on them
/// stays there.
pub(super) struct Pool {
    pub bits: Vec<u32>,
    /// The table: its first entry is 0.0 (every table holds it, and the
    /// bits are sorted), so a masked-off lane reads its zero from here.
    pub zero_addr: Value,
    /// [`ZERO_BLOCK`] zeros after the constants, which a masked-off group
    /// of a load whose mask is the same on every lane reads instead.
    pub zero_block: Value,
    /// Where a stage that gathers lane-varying rows ORs 1 for a row out of
    /// range (an `I32` on the stack, returned by the function).
    pub error: Option<Value>,
    /// Per bit pattern: float and mask values, scalar and 4-lane.
    values: HashMap<u32, [Value; 4]>,
}

impl Pool {
    /// Load `bits` (deduplicated) from `table` in the current block.
    pub fn load(b: &mut FunctionBuilder, table: Value, mut bits: Vec<u32>) -> Pool {
        bits.sort_unstable();
        bits.dedup();
        let mut values = HashMap::new();
        for (k, &x) in bits.iter().enumerate() {
            let at = 4 * k as i32;
            // One load per constant; the mask view and the splats are pure,
            // so the ones a stage does not use are never emitted.
            let f = b.ins().load(types::F32, MemFlagsData::trusted(), table, at);
            let i = b.ins().bitcast(types::I32, MemFlagsData::new(), f);
            let (fw, iw) = (b.ins().splat(types::F32X4, f), b.ins().splat(types::I32X4, i));
            values.insert(x, [f, i, fw, iw]);
        }
        let zero_block = b.ins().iadd_imm_s(table, 4 * bits.len() as i64);
        Pool { bits, zero_addr: table, zero_block, error: None, values }
    }
}

/// A builder at one lane width.
pub(super) struct Em<'a, 'b> {
    pub b: &'a mut FunctionBuilder<'b>,
    pub wide: bool,
    pub pool: &'a Pool,
}

impl Em<'_, '_> {
    /// Four float32 lanes picked from `a` (lanes 0-3) and `b` (lanes 4-7):
    /// lane `l` of the result is lane `from[l]` (one shuffle).
    pub fn pick_lanes(&mut self, a: Value, b: Value, from: [u8; 4]) -> Value {
        let le = MemFlagsData::new().with_endianness(Endianness::Little);
        let (a, b) = (self.b.ins().bitcast(types::I8X16, le, a), self.b.ins().bitcast(types::I8X16, le, b));
        let order: Vec<u8> = from.iter().flat_map(|&l| (0..4).map(move |k| 4 * l + k)).collect();
        let order = self.b.func.dfg.immediates.push(order.as_slice().into());
        let v = self.b.ins().shuffle(a, b, order);
        self.b.ins().bitcast(types::F32X4, le, v)
    }

    pub fn fty(&self) -> Type {
        if self.wide {
            types::F32X4
        } else {
            types::F32
        }
    }

    pub fn ity(&self) -> Type {
        if self.wide {
            types::I32X4
        } else {
            types::I32
        }
    }

    /// A scalar invariant at this width (splatted in the 4-lane loop).
    pub fn widen(&mut self, scalar: Value) -> Value {
        if self.wide {
            let ty = if self.b.func.dfg.value_type(scalar) == types::F32 { types::F32X4 } else { types::I32X4 };
            self.b.ins().splat(ty, scalar)
        } else {
            scalar
        }
    }

    /// A float constant: from the pool (an immediate if it is missing there).
    pub fn fc(&mut self, x: f32) -> Value {
        if let Some(v) = self.pool.values.get(&x.to_bits()) {
            return v[if self.wide { 2 } else { 0 }];
        }
        let c = self.b.ins().f32const(x);
        self.widen(c)
    }

    /// A mask/bit-pattern constant, as [`Em::fc`].
    pub fn ic(&mut self, x: i32) -> Value {
        if let Some(v) = self.pool.values.get(&(x as u32)) {
            return v[if self.wide { 3 } else { 1 }];
        }
        let c = self.b.ins().iconst(types::I32, i64::from(x));
        self.widen(c)
    }

    pub fn add(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fadd(a, b)
    }

    pub fn sub(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fsub(a, b)
    }

    pub fn mul(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fmul(a, b)
    }

    pub fn div(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fdiv(a, b)
    }

    /// Comparison as a lane mask.
    pub fn cmp(&mut self, cc: FloatCC, a: Value, b: Value) -> Value {
        let c = self.b.ins().fcmp(cc, a, b);
        if self.wide {
            c
        } else {
            self.b.ins().bmask(types::I32, c)
        }
    }

    pub fn cmpc(&mut self, cc: FloatCC, a: Value, c: f32) -> Value {
        let c = self.fc(c);
        self.cmp(cc, a, c)
    }

    pub fn bits(&mut self, f: Value) -> Value {
        let ty = self.ity();
        self.b.ins().bitcast(ty, MemFlagsData::new(), f)
    }

    pub fn float(&mut self, i: Value) -> Value {
        let ty = self.fty();
        self.b.ins().bitcast(ty, MemFlagsData::new(), i)
    }

    /// `mask ? a : b` on floats, bit by bit.
    pub fn sel(&mut self, mask: Value, a: Value, b: Value) -> Value {
        if self.wide {
            // A comparison mask: x86 lowers this to one blend. Cranelift
            // sees through a bitcast of a float comparison (and keeps its
            // maxps/minps forms), not of an integer one (a bool load, an
            // index test): those select on the integer bits instead.
            let dfg = &self.b.func.dfg;
            let int_compare =
                matches!(dfg.value_def(mask), ValueDef::Result(inst, _) if dfg.insts[inst].opcode() == Opcode::Icmp);
            if int_compare {
                let (ai, bi) = (self.bits(a), self.bits(b));
                let r = self.b.ins().bitselect(mask, ai, bi);
                return self.float(r);
            }
            let m = self.float(mask);
            return self.b.ins().bitselect(m, a, b);
        }
        let (ai, bi) = (self.bits(a), self.bits(b));
        let x = self.b.ins().band(ai, mask);
        let y = self.b.ins().band_not(bi, mask);
        let r = self.b.ins().bor(x, y);
        self.float(r)
    }

    /// 1.0 where the mask is set, else 0.0.
    /// Mask lanes (all ones or zero) as the integers 1 or 0.
    pub fn mask_bits(&mut self, mask: Value) -> Value {
        let one = self.b.ins().iconst(types::I32, 1);
        let one = self.widen(one);
        self.b.ins().band(mask, one)
    }

    pub fn one_if(&mut self, mask: Value) -> Value {
        let one = self.ic(1.0f32.to_bits() as i32);
        let r = self.b.ins().band(mask, one);
        self.float(r)
    }

    /// Mask of lanes that are not zero (NaN counts as true).
    pub fn truthy(&mut self, x: Value) -> Value {
        self.cmpc(FloatCC::NotEqual, x, 0.0)
    }

    pub fn is_nan(&mut self, x: Value) -> Value {
        self.cmp(FloatCC::Unordered, x, x)
    }

    /// `x` rounded to bfloat16 (to nearest, ties to even), as a float32:
    /// exactly `half::bf16::from_f32(x).to_f32()`, which the interpreter
    /// uses. A NaN keeps its upper bits with the quiet bit set.
    pub fn round_bf16(&mut self, x: Value) -> Value {
        let bits = self.bits(x);
        let lsb = self.b.ins().ushr_imm_u(bits, 16);
        let one = self.int(1);
        let lsb = self.b.ins().band(lsb, one);
        let half = self.int(0x7FFF);
        let r = self.b.ins().iadd(bits, lsb);
        let r = self.b.ins().iadd(r, half);
        let high = self.int(0xFFFF_0000);
        let rounded = self.b.ins().band(r, high);
        let quiet = self.int(0x0040_0000);
        let nan_bits = self.b.ins().bor(bits, quiet);
        let nan_bits = self.b.ins().band(nan_bits, high);
        let nan = self.is_nan(x);
        let (rounded, nan_bits) = (self.float(rounded), self.float(nan_bits));
        self.sel(nan, nan_bits, rounded)
    }

    /// A bfloat16's bits (in the low 16 of each 32-bit lane) as float32.
    pub fn widen_bf16(&mut self, low: Value) -> Value {
        let shifted = self.b.ins().ishl_imm_u(low, 16);
        self.float(shifted)
    }

    /// An integer constant at this width (not from the pool: the hash's
    /// multipliers are not stage constants).
    fn int(&mut self, x: u32) -> Value {
        let c = self.b.ins().iconst(types::I32, i64::from(x as i32));
        self.widen(c)
    }

    /// MurmurHash3's 32-bit finalizer, lane by lane.
    fn fmix32(&mut self, mut h: Value) -> Value {
        for (shift, mul) in [(16, Some(FMIX[0])), (13, Some(FMIX[1])), (16, None)] {
            let s = self.b.ins().ushr_imm_u(h, shift);
            h = self.b.ins().bxor(h, s);
            if let Some(m) = mul {
                let m = self.int(m);
                h = self.b.ins().imul(h, m);
            }
        }
        h
    }

    /// [`rdyn_ir::random::hash_mix`] of 32-bit integer lanes.
    pub fn hash_mix(&mut self, position: Value, key: Value) -> Value {
        let golden = self.int(GOLDEN);
        let k = self.b.ins().bxor(key, golden);
        let k = self.fmix32(k);
        let spread = self.b.ins().imul(position, golden);
        let spread = self.b.ins().iadd(spread, k);
        let h = self.fmix32(spread);
        let h = self.b.ins().bxor(h, k);
        let h = self.fmix32(h);
        self.b.ins().ushr_imm_u(h, 8)
    }
}

/// An inline float unary op (`Jit::Inline` in `rdyn_ir::ops`).
pub(super) fn unary(em: &mut Em, op: UnaryOp, x: Value) -> Value {
    match op {
        UnaryOp::Neg => em.b.ins().fneg(x),
        UnaryOp::Abs => em.b.ins().fabs(x),
        UnaryOp::Sqrt => em.b.ins().sqrt(x),
        UnaryOp::Rsqrt => {
            let s = em.b.ins().sqrt(x);
            let one = em.fc(1.0);
            em.div(one, s)
        }
        UnaryOp::Reciprocal => {
            let one = em.fc(1.0);
            em.div(one, x)
        }
        UnaryOp::Floor => em.b.ins().floor(x),
        UnaryOp::Ceil => em.b.ins().ceil(x),
        UnaryOp::Trunc => em.b.ins().trunc(x),
        UnaryOp::Round => em.b.ins().nearest(x),
        UnaryOp::IsNan => {
            let m = em.is_nan(x);
            em.one_if(m)
        }
        UnaryOp::IsInf => {
            let size = em.b.ins().fabs(x);
            let m = em.cmpc(FloatCC::Equal, size, f32::INFINITY);
            em.one_if(m)
        }
        // `Not` (nothing else passes `inline`).
        _ => {
            let m = em.cmpc(FloatCC::Equal, x, 0.0);
            em.one_if(m)
        }
    }
}

/// An inline float binary op (`Jit::Inline`, or `pow` by 2).
pub(super) fn binary(em: &mut Em, op: BinaryOp, x: Value, y: Value) -> Value {
    let cc = match op {
        BinaryOp::Add => return em.add(x, y),
        BinaryOp::Sub => return em.sub(x, y),
        BinaryOp::Mul | BinaryOp::Pow => return if op == BinaryOp::Mul { em.mul(x, y) } else { em.mul(x, x) },
        BinaryOp::Div => return em.div(x, y),
        // NaN-propagating, and `y` on ties, as the interpreter: `x` if NaN,
        // else `x` if strictly better, else `y` (one maxps/minps and a blend
        // in the vector loops).
        BinaryOp::Max | BinaryOp::Min => {
            let better =
                if op == BinaryOp::Max { em.cmp(FloatCC::LessThan, y, x) } else { em.cmp(FloatCC::LessThan, x, y) };
            let r = em.sel(better, x, y);
            let nan = em.is_nan(x);
            return em.sel(nan, x, r);
        }
        BinaryOp::Eq => FloatCC::Equal,
        BinaryOp::Ne => FloatCC::NotEqual,
        BinaryOp::Lt => FloatCC::LessThan,
        BinaryOp::Le => FloatCC::LessThanOrEqual,
        BinaryOp::Gt => FloatCC::GreaterThan,
        // `Ge` (nothing else passes `inline`).
        _ => FloatCC::GreaterThanOrEqual,
    };
    let m = em.cmp(cc, x, y);
    em.one_if(m)
}

/// Whether a fold's first loop tracks NaNs apart from its accumulators.
pub(super) fn tracks_nan(op: ReduceOp) -> bool {
    matches!(op, ReduceOp::Max | ReduceOp::Min)
}

/// `x` if strictly better than `acc`, else `acc` (also when either is NaN):
/// one maxps/minps in the vector loops.
pub(super) fn best(em: &mut Em, op: ReduceOp, acc: Value, x: Value) -> Value {
    let better =
        if op == ReduceOp::Max { em.cmp(FloatCC::LessThan, acc, x) } else { em.cmp(FloatCC::LessThan, x, acc) };
    em.sel(better, x, acc)
}

/// The interpreter's lane combine `acc ⊕ x` (max/min keep `acc` on ties
/// and propagate NaN; which NaN, when both are, is unspecified).
pub(super) fn combine(em: &mut Em, op: ReduceOp, acc: Value, x: Value) -> Value {
    match op {
        ReduceOp::Prod => em.mul(acc, x),
        ReduceOp::Max | ReduceOp::Min => {
            let r = best(em, op, acc, x);
            let x_nan = em.is_nan(x);
            em.sel(x_nan, x, r)
        }
        // `Sum` (`output` accumulates nothing else).
        _ => em.add(acc, x),
    }
}
