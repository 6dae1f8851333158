//! The text form of a [`SpecialFn`] (see the module docs).

use std::fmt::{self, Display, Formatter};

use super::{Binary, Cmp, Logic, SpecialFn, Stmt, Unary};

impl Display for Unary {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let s = match self {
            Unary::Neg => "neg",
            Unary::Abs => "abs",
            Unary::Sqrt => "sqrt",
            Unary::Floor => "floor",
            Unary::Exp => "exp",
            Unary::Log => "log",
            Unary::Sin => "sin",
            Unary::Cos => "cos",
            Unary::Sinh => "sinh",
            Unary::Cosh => "cosh",
            Unary::Erfc => "erfc",
            Unary::Log1p => "log1p",
            Unary::Expm1 => "expm1",
            Unary::Lgamma => "lgamma",
            Unary::Tgamma => "tgamma",
            Unary::Acos => "acos",
        };
        f.write_str(s)
    }
}

impl Display for Binary {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let s = match self {
            Binary::Add => "add",
            Binary::Sub => "sub",
            Binary::Mul => "mul",
            Binary::Div => "div",
            Binary::Min => "min",
            Binary::Max => "max",
            Binary::Pow => "pow",
        };
        f.write_str(s)
    }
}

impl Display for Cmp {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let s = match self {
            Cmp::Lt => "lt",
            Cmp::Le => "le",
            Cmp::Gt => "gt",
            Cmp::Ge => "ge",
            Cmp::Eq => "eq",
            Cmp::Ne => "ne",
        };
        f.write_str(s)
    }
}

fn block(f: &mut Formatter<'_>, stmts: &[Stmt], depth: usize) -> fmt::Result {
    let pad = "  ".repeat(depth);
    for s in stmts {
        match s {
            Stmt::Copy { dst, src } => writeln!(f, "{pad}%{} = %{}", dst.0, src.0)?,
            Stmt::Unary { dst, op, a } => writeln!(f, "{pad}%{} = {op} %{}", dst.0, a.0)?,
            Stmt::Binary { dst, op, a, b } => writeln!(f, "{pad}%{} = {op} %{}, %{}", dst.0, a.0, b.0)?,
            Stmt::Fma { dst, a, b, c } => writeln!(f, "{pad}%{} = fma %{}, %{}, %{}", dst.0, a.0, b.0, c.0)?,
            Stmt::Poly { dst, coeffs, z } => writeln!(f, "{pad}%{} = poly {coeffs:?} at %{}", dst.0, z.0)?,
            Stmt::Cmp { dst, op, a, b } => writeln!(f, "{pad}?{} = {op} %{}, %{}", dst.0, a.0, b.0)?,
            Stmt::Logic { dst, op, a, b } => {
                let op = if *op == Logic::And { "and" } else { "or" };
                writeln!(f, "{pad}?{} = {op} ?{}, ?{}", dst.0, a.0, b.0)?;
            }
            Stmt::Not { dst, a } => writeln!(f, "{pad}?{} = not ?{}", dst.0, a.0)?,
            Stmt::Select { dst, cond, a, b } => {
                writeln!(f, "{pad}%{} = select ?{}, %{}, %{}", dst.0, cond.0, a.0, b.0)?
            }
            Stmt::If { cond, then, els } => {
                writeln!(f, "{pad}if ?{} {{", cond.0)?;
                block(f, then, depth + 1)?;
                if !els.is_empty() {
                    writeln!(f, "{pad}}} else {{")?;
                    block(f, els, depth + 1)?;
                }
                writeln!(f, "{pad}}}")?;
            }
            Stmt::Loop { counter, first, max_iters, body } => {
                writeln!(f, "{pad}loop %{} from {first:?} max {max_iters} {{", counter.0)?;
                block(f, body, depth + 1)?;
                writeln!(f, "{pad}}}")?;
            }
            Stmt::Break { cond } => writeln!(f, "{pad}break if ?{}", cond.0)?,
            Stmt::Return { value } => writeln!(f, "{pad}return %{}", value.0)?,
        }
    }
    Ok(())
}

impl Display for SpecialFn {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let params: Vec<String> = self.params.iter().map(|r| format!("%{}", r.0)).collect();
        writeln!(f, "fn {}({}) {{", self.name, params.join(", "))?;
        for (r, v) in &self.consts {
            writeln!(f, "  %{} = const {v:?}", r.0)?;
        }
        block(f, &self.body, 1)?;
        writeln!(f, "}}")
    }
}
