//! PTX function bodies: virtual registers, labels, index arithmetic, and the
//! scalar expression DAG of a stage.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use rdyn_ir::loops::{BufId, Negatives, Program, ScalarId, ScalarOp};
use rdyn_ir::{Atom, Ctx, DType, Expr, Kind};

use crate::PtxError;

/// A register class (one `.reg` declaration each).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    Pred,
    B16,
    B32,
    F32,
    F64,
    S64,
}

impl Class {
    const ALL: [Class; 6] = [Class::Pred, Class::B16, Class::B32, Class::F32, Class::F64, Class::S64];

    fn prefix(self) -> &'static str {
        match self {
            Class::Pred => "%p",
            Class::B16 => "%h",
            Class::B32 => "%r",
            Class::F32 => "%f",
            Class::F64 => "%fd",
            Class::S64 => "%rd",
        }
    }

    fn decl(self) -> &'static str {
        match self {
            Class::Pred => ".pred",
            Class::B16 => ".b16",
            Class::B32 => ".b32",
            Class::F32 => ".f32",
            Class::F64 => ".f64",
            Class::S64 => ".s64",
        }
    }

    /// The register class values of `kind` live in.
    pub fn of(kind: Kind) -> Class {
        match kind {
            Kind::F32 => Class::F32,
            Kind::F64 => Class::F64,
            Kind::I64 => Class::S64,
        }
    }

    /// The instruction type suffix for arithmetic in this class.
    pub fn ty(self) -> &'static str {
        match self {
            Class::F32 => "f32",
            Class::F64 => "f64",
            Class::S64 => "s64",
            Class::B32 => "b32",
            Class::B16 => "b16",
            Class::Pred => "pred",
        }
    }
}

/// A PTX function body under construction.
#[derive(Default)]
pub struct Func {
    pub body: String,
    counts: BTreeMap<Class, u32>,
    labels: u32,
    /// Set when the kernel reports data-dependent errors (its last parameter
    /// is then the error flag's address).
    pub error_flag: bool,
}

impl Func {
    pub fn reg(&mut self, class: Class) -> String {
        let n = self.counts.entry(class).or_insert(0);
        *n += 1;
        format!("{}{}", class.prefix(), *n - 1)
    }

    pub fn label(&mut self, stem: &str) -> String {
        self.labels += 1;
        format!("$L_{stem}_{}", self.labels)
    }

    /// One instruction (without its `;`).
    pub fn ins(&mut self, text: impl AsRef<str>) {
        let _ = writeln!(self.body, "\t{};", text.as_ref());
    }

    pub fn place(&mut self, label: &str) {
        let _ = writeln!(self.body, "{label}:");
    }

    /// A fresh register holding `src` (a register or an immediate).
    pub fn mov(&mut self, class: Class, src: &str) -> String {
        let r = self.reg(class);
        let ty = if class == Class::S64 { "b64" } else { class.ty() };
        self.ins(format!("mov.{ty} {r}, {src}"));
        r
    }

    /// `.reg` declarations for every register used.
    pub fn decls(&self) -> String {
        let mut out = String::new();
        for class in Class::ALL {
            if let Some(n) = self.counts.get(&class).filter(|n| **n > 0) {
                let _ = writeln!(out, "\t.reg {} {}<{}>;", class.decl(), class.prefix(), n);
            }
        }
        out
    }

    /// A predicate register set by `setp.{cmp}.{ty} a, b`.
    pub fn setp(&mut self, cmp: &str, ty: &str, a: &str, b: &str) -> String {
        let p = self.reg(Class::Pred);
        self.ins(format!("setp.{cmp}.{ty} {p}, {a}, {b}"));
        p
    }

    /// A predicate register `a {op} b` (`and`, `or`, `xor`; operands may be
    /// negated as `!%pN`).
    pub fn pred(&mut self, op: &str, a: &str, b: &str) -> String {
        let p = self.reg(Class::Pred);
        self.ins(format!("{op}.pred {p}, {a}, {b}"));
        p
    }

    /// `op.{type} r, args…` into a fresh register of `class`.
    pub fn op(&mut self, class: Class, op: &str, args: &[&str]) -> String {
        let r = self.reg(class);
        self.ins(format!("{op}.{} {r}, {}", class.ty(), args.join(", ")));
        r
    }

    /// Horner evaluation of `c[0] + c[1]·z + …` with FMAs, in `class`.
    pub fn horner(&mut self, class: Class, z: &str, c: &[f64]) -> String {
        let mut acc = self.mov(class, &imm(class, c[c.len() - 1]));
        for &coef in c[..c.len() - 1].iter().rev() {
            acc = self.op(class, "fma.rn", &[&acc, z, &imm(class, coef)]);
        }
        acc
    }

    /// `p ? a : b` in `class`.
    pub fn selp(&mut self, class: Class, a: &str, b: &str, p: &str) -> String {
        let r = self.reg(class);
        self.ins(format!("selp.{} {r}, {a}, {b}, {p}", sel_ty(class)));
        r
    }

    /// 0/1 in an s64 register from a predicate.
    pub fn bool_of(&mut self, p: &str) -> String {
        self.selp(Class::S64, "1", "0", p)
    }

    /// Floor division and floor modulo of s64 registers (`b` non-zero).
    pub fn floor_divmod(&mut self, a: &str, b: &str) -> (String, String) {
        let q = self.reg(Class::S64);
        let r = self.reg(Class::S64);
        self.ins(format!("div.s64 {q}, {a}, {b}"));
        self.ins(format!("rem.s64 {r}, {a}, {b}"));
        let x = self.reg(Class::S64);
        self.ins(format!("xor.b64 {x}, {r}, {b}"));
        let nz = self.setp("ne", "s64", &r, "0");
        let diff = self.setp("lt", "s64", &x, "0");
        let fix = self.pred("and", &nz, &diff);
        self.ins(format!("@{fix} sub.s64 {q}, {q}, 1"));
        self.ins(format!("@{fix} add.s64 {r}, {r}, {b}"));
        (q, r)
    }
}

/// The `selp` type of a class (`selp` has no `.b64` form for s64 values).
pub fn sel_ty(class: Class) -> &'static str {
    match class {
        Class::S64 => "b64",
        Class::B32 => "b32",
        c => c.ty(),
    }
}

/// An f32 immediate (exact, as bits).
pub fn f32_imm(v: f64) -> String {
    format!("0f{:08X}", (v as f32).to_bits())
}

/// An f64 immediate (exact, as bits).
pub fn f64_imm(v: f64) -> String {
    format!("0d{:016X}", v.to_bits())
}

/// An immediate of `class` for the value `v`.
pub fn imm(class: Class, v: f64) -> String {
    match class {
        Class::F32 => f32_imm(v),
        Class::F64 => f64_imm(v),
        _ => format!("{}", v as i64),
    }
}

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

/// Emits index expressions and scalar DAGs into a [`Func`].
pub struct Emitter<'a> {
    pub program: &'a Program,
    pub syms: &'a Ctx,
    /// Storage root → register with its global address.
    pub bases: HashMap<BufId, String>,
    /// Register of each loop variable (`v0..`).
    pub vars: Vec<String>,
    /// Register with the error flag's global address.
    pub error_addr: Option<String>,
    pub checks: crate::IndexChecks,
    /// Row elements already in registers (block kernels).
    pub row: crate::row::RowCache,
    /// A vectorised group's loaded elements (pointwise kernels).
    pub lanes: crate::vector::Lanes,
}

impl Emitter<'_> {
    /// An s64 register with the value of index expression `e`.
    pub fn index(&self, f: &mut Func, e: &Expr) -> Result<String, PtxError> {
        let e = e.simplify(self.syms);
        let acc = f.mov(Class::S64, &e.constant().to_string());
        for (atom, coef) in e.terms() {
            let a = self.atom(f, atom)?;
            f.ins(format!("mad.lo.s64 {acc}, {a}, {coef}, {acc}"));
        }
        Ok(acc)
    }

    fn atom(&self, f: &mut Func, atom: &Atom) -> Result<String, PtxError> {
        Ok(match atom {
            Atom::Var(v) => self.vars.get(v.0 as usize).cloned().ok_or(PtxError::Internal("unbound loop variable"))?,
            Atom::Sym(s) => return Err(PtxError::Unsupported(format!("symbolic size {s}"))),
            Atom::Prod(fs) => {
                let acc = f.mov(Class::S64, "1");
                for a in fs {
                    let r = self.atom(f, a)?;
                    f.ins(format!("mul.lo.s64 {acc}, {acc}, {r}"));
                }
                acc
            }
            Atom::FloorDiv(a, b) => {
                let (a, b) = (self.index(f, a)?, self.index(f, b)?);
                f.floor_divmod(&a, &b).0
            }
            Atom::Mod(a, b) => {
                let (a, b) = (self.index(f, a)?, self.index(f, b)?);
                f.floor_divmod(&a, &b).1
            }
        })
    }

    /// The global address of element `index` of `buf`'s storage.
    pub fn address(&self, f: &mut Func, buf: BufId, index: &str) -> Result<String, PtxError> {
        let root = self.program.storage_of(buf);
        let base = self.bases.get(&root).ok_or(PtxError::Internal("buffer without a parameter"))?;
        let size = self.program.buffer(buf).dtype.itemsize();
        let addr = f.reg(Class::S64);
        f.ins(format!("mad.lo.s64 {addr}, {index}, {size}, {base}"));
        Ok(addr)
    }

    /// Registers for every node under `roots`, in dependency order.
    pub fn scalars(&self, f: &mut Func, roots: &[ScalarId]) -> Result<HashMap<ScalarId, String>, PtxError> {
        let scalars = &self.program.scalars;
        let mut regs: HashMap<ScalarId, String> = HashMap::new();
        for id in scalars.topo(roots) {
            let node = scalars.get(id);
            let class = Class::of(node.dtype.kind());
            let get = |s: &ScalarId| regs.get(s).cloned().ok_or(PtxError::Internal("scalar used before defined"));
            let r = match &node.op {
                ScalarOp::Load { buf, index, indirect, mask } => {
                    let (root, dtype) = (self.program.storage_of(*buf), self.program.buffer(*buf).dtype);
                    let plain = indirect.is_empty() && mask.is_none();
                    let found = || {
                        let lane = || self.lanes.lookup(root, &index.simplify(self.syms));
                        let lane = if self.lanes.is_empty() { None } else { lane() };
                        lane.or_else(|| self.row.lookup(root, index, dtype, self.syms))
                    };
                    if let Some(r) = plain.then(found).flatten() {
                        regs.insert(id, r);
                        continue;
                    }
                    let mut idx = self.index(f, index)?;
                    for (s, stride) in indirect {
                        let st = self.index(f, stride)?;
                        let v = get(s)?;
                        let next = f.reg(Class::S64);
                        f.ins(format!("mad.lo.s64 {next}, {v}, {st}, {idx}"));
                        idx = next;
                    }
                    let pred = match mask {
                        Some(m) => Some(f.setp("ne", "s64", &get(m)?, "0")),
                        None => None,
                    };
                    let addr = self.address(f, *buf, &idx)?;
                    let r = load(f, &addr, dtype, pred.as_deref());
                    if plain {
                        self.row.loaded(root, index, dtype, self.syms, &r);
                    } else {
                        self.row.loaded_unplain(root);
                    }
                    r
                }
                ScalarOp::Const { bits } => {
                    let v = if node.dtype.is_float() { f64::from_bits(*bits) } else { *bits as i64 as f64 };
                    match class {
                        Class::S64 => f.mov(class, &(*bits as i64).to_string()),
                        _ => f.mov(class, &imm(class, v)),
                    }
                }
                ScalarOp::Index(e) => self.index(f, e)?,
                ScalarOp::Unary(op, x) => {
                    let from = scalars.dtype(*x);
                    crate::math::unary(f, *op, &get(x)?, from, node.dtype)?
                }
                ScalarOp::Binary(op, a, b) => {
                    let from = scalars.dtype(*a);
                    crate::math::binary(f, self, *op, &get(a)?, &get(b)?, from, node.dtype)?
                }
                ScalarOp::Where(c, a, b) => {
                    let p = f.setp("ne", "s64", &get(c)?, "0");
                    f.selp(class, &get(a)?, &get(b)?, &p)
                }
                ScalarOp::Cast(x) => cast(f, &get(x)?, scalars.dtype(*x), node.dtype),
                ScalarOp::Bounded(x, size, negatives) => {
                    let n = self.index(f, size)?;
                    let x = get(x)?;
                    let w = if *negatives == Negatives::Wrap {
                        let neg = f.setp("lt", "s64", &x, "0");
                        let w = f.reg(Class::S64);
                        f.ins(format!("add.s64 {w}, {x}, {n}"));
                        f.selp(Class::S64, &w, &x, &neg)
                    } else {
                        x
                    };
                    let low = f.setp("lt", "s64", &w, "0");
                    let high = f.setp("ge", "s64", &w, &n);
                    let bad = f.pred("or", &low, &high);
                    self.raise_index(f, &bad)?;
                    f.selp(Class::S64, "0", &w, &bad)
                }
            };
            regs.insert(id, r);
        }
        Ok(regs)
    }

    /// An index out of range where `pred` holds: the kernel traps
    /// (`IndexChecks::Device`) or sets its error flag.
    pub fn raise_index(&self, f: &mut Func, pred: &str) -> Result<(), PtxError> {
        if self.checks == crate::IndexChecks::Device {
            f.ins(format!("@{pred} trap"));
            return Ok(());
        }
        self.raise(f, pred)
    }

    /// An integer division by zero where `pred` holds: the error flag under
    /// `IndexChecks::Sync`; unchecked otherwise.
    pub fn raise_division(&self, f: &mut Func, pred: &str) -> Result<(), PtxError> {
        match self.checks {
            crate::IndexChecks::Device => Ok(()),
            crate::IndexChecks::Sync => self.raise(f, pred),
        }
    }

    /// Set the kernel's error flag where `pred` holds.
    fn raise(&self, f: &mut Func, pred: &str) -> Result<(), PtxError> {
        let addr = self.error_addr.as_ref().ok_or(PtxError::Internal("no error flag"))?;
        f.error_flag = true;
        f.ins(format!("@{pred} st.global.u32 [{addr}], 1"));
        Ok(())
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
