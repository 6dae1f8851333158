//! `diagonal_scatter`: the input with one diagonal replaced.

use crate::ir::graph::Node;
use crate::ir::loops::BinaryOp;
use crate::ir::{DType, Expr};
use crate::lazy::Lazy;
use crate::lower::{Handled, Lowerer};
use crate::LowerError;

impl Lowerer<'_> {
    /// Element `i` is `src[other dims…, position on the diagonal]` where
    /// `i[dim2] − i[dim1] == offset`, else `input[i]`.
    pub(crate) fn diagonal_scatter(&mut self, node: &Node) -> Result<Handled, LowerError> {
        let op = node.target.as_str();
        let (sizes, out) = self.out_meta(node)?;
        let x = self.tensor_arg(node, 0, "self")?;
        let src = self.tensor_arg(node, 1, "src")?;
        let n = x.ndim();
        let offset = node.arg(2, "offset").as_int().unwrap_or(0);
        let norm = |d: i64| if d < 0 { d + n as i64 } else { d };
        let dim1 = norm(node.arg(3, "dim1").as_int().unwrap_or(0));
        let dim2 = norm(node.arg(4, "dim2").as_int().unwrap_or(1));
        if n < 2 || !(0..n as i64).contains(&dim1) || !(0..n as i64).contains(&dim2) || dim1 == dim2 {
            return Err(crate::invalid(op, format!("bad dims {dim1}, {dim2} for {n} dims")));
        }
        let (d1, d2) = (dim1 as usize, dim2 as usize);
        if src.ndim() != n - 1 {
            return Err(crate::invalid(op, "src must have one dim fewer than the input"));
        }
        // src is indexed by the other dims in order, then the diagonal position.
        let mut map: Vec<Expr> = (0..n).filter(|d| *d != d1 && *d != d2).map(|d| Expr::v(d as u32)).collect();
        map.push(Expr::v(if offset >= 0 { d1 } else { d2 } as u32));
        let ctx = self.ctx_for(&sizes);
        let src_v = self.prog.scalars.substitute(src.value, &map, &ctx);
        let s = &mut self.prog.scalars;
        let diff = s.index(Expr::v(d2 as u32).sub(&Expr::v(d1 as u32)));
        let k = s.int_constant(offset, DType::I64);
        let on = s.binary(BinaryOp::Eq, diff, k, DType::Bool);
        let masked = s.add_mask(src_v, on);
        let masked = s.cast(masked, out);
        let xv = s.cast(x.value, out);
        let v = s.select(on, masked, xv, out);
        Ok(Handled::Native(vec![Lazy { sizes, value: v, dtype: out }]))
    }
}
