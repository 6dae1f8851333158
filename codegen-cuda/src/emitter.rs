//! Emits index expressions and a stage's scalar DAG into a [`Func`]: loads
//! (or the registers a row or vector group already holds, `cache.rs`), ops
//! (`ops/`), casts, bounds-checked indices.

use std::collections::HashMap;

use rdyn_ir::loops::{BufId, Negatives, Program, ScalarId, ScalarOp};
use rdyn_ir::{Atom, Ctx, Expr};

use crate::cache::{Lanes, RowCache};
use crate::ops::binary::binary;
use crate::ops::unary::unary;
use crate::ptx::checks::Checks;
use crate::ptx::convert::cast;
use crate::ptx::func::{imm, Class, Func};
use crate::ptx::memory::load;
use crate::types::PtxError;

/// Emits index expressions and scalar DAGs into a [`Func`].
pub struct Emitter<'a> {
    pub program: &'a Program,
    pub syms: &'a Ctx,
    /// Storage root → register with its global address.
    pub bases: HashMap<BufId, String>,
    /// Register of each loop variable (`v0..`).
    pub vars: Vec<String>,
    /// How the kernel reports errors, and its error flag's register.
    pub checks: Checks,
    /// Row elements already in registers (block kernels).
    pub row: RowCache,
    /// A vectorised group's loaded elements (pointwise kernels).
    pub lanes: Lanes,
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
                    unary(f, *op, &get(x)?, from, node.dtype)?
                }
                ScalarOp::Binary(op, a, b) => {
                    let from = scalars.dtype(*a);
                    binary(f, &self.checks, *op, &get(a)?, &get(b)?, from, node.dtype)?
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
                    self.checks.raise_index(f, &bad)?;
                    f.selp(Class::S64, "0", &w, &bad)
                }
            };
            regs.insert(id, r);
        }
        Ok(regs)
    }
}
