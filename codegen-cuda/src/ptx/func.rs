//! PTX function bodies: register classes, virtual registers, labels,
//! instructions, and immediates.

use std::collections::BTreeMap;
use std::fmt::Write;

use rdyn_ir::Kind;

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
