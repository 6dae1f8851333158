//! Average pooling (2-D and 3-D) as a reduction over the window.

use crate::ir::graph::Node;
use crate::ir::loops::{BinaryOp, ReduceOp};
use crate::ir::op::Op;
use crate::ir::{DType, Expr};
use crate::lazy::Lazy;
use crate::lower::{Handled, Lowerer};
use crate::shape::int_list;
use crate::LowerError;

type Res = Result<Handled, LowerError>;

impl Lowerer<'_> {
    /// `avg_pool2d` / `avg_pool3d`: each output sums its window (padding
    /// reads nothing) and divides by PyTorch's count — the window clipped to
    /// the padded input (`count_include_pad`) or to the input itself, unless
    /// `divisor_override` is given.
    pub(crate) fn avg_pool(&mut self, node: &Node) -> Res {
        let op = node.target.as_str();
        let sp = if node.op == Op::AvgPool3d { 3 } else { 2 };
        let (sizes, out) = self.out_meta(node)?;
        if !out.is_float() {
            return Err(crate::unsupported(op, format!("average pooling of {out}")));
        }
        let x = self.tensor_arg(node, 0, "self")?;
        let x = self.cast_lazy(x, if matches!(out, DType::F16 | DType::BF16) { DType::F32 } else { out });
        let n = x.ndim();
        if n < sp || sizes.len() != n {
            return Err(crate::invalid(op, "input has too few dims"));
        }
        let lead = n - sp;
        let spread = |v: Vec<i64>, default: &[i64]| -> Vec<i64> {
            match v.len() {
                0 => default.to_vec(),
                1 => vec![v[0]; sp],
                _ => v,
            }
        };
        let kernel = spread(int_list(node.arg(1, "kernel_size"), op)?, &[]);
        let stride = spread(int_list(node.arg(2, "stride"), op).unwrap_or_default(), &kernel);
        let pad = spread(int_list(node.arg(3, "padding"), op).unwrap_or_else(|_| vec![0]), &[0]);
        let count_include_pad = node.arg(5, "count_include_pad").as_bool().unwrap_or(true);
        let divisor = node.arg(6, "divisor_override").as_int();
        if kernel.len() != sp || stride.len() != sp || pad.len() != sp {
            return Err(crate::invalid(op, "kernel_size, stride and padding need one value per spatial dim"));
        }
        // Window position k_m of output o_m reads input o_m·s_m − p_m + k_m.
        let mut ext = sizes.clone();
        ext.extend(kernel.iter().map(|k| Expr::c(*k)));
        let mut map: Vec<Expr> = (0..n as u32).map(Expr::v).collect();
        let mut starts = Vec::new();
        for m in 0..sp {
            let start = Expr::v((lead + m) as u32).mul(&Expr::c(stride[m])).add_c(-pad[m]);
            map[lead + m] = start.add(&Expr::v((n + m) as u32));
            starts.push(start);
        }
        let xw = self.view(&x, ext.clone(), &map);
        let s = &mut self.prog.scalars;
        let bounds: Vec<(Expr, Expr)> = (0..sp).map(|m| (map[lead + m].clone(), x.sizes[lead + m].clone())).collect();
        let inside = s.in_range(&bounds).ok_or_else(|| crate::invalid(op, "no spatial dims"))?;
        let masked = s.add_mask(xw.value, inside);
        let zero = s.constant(0.0, xw.dtype);
        let value = s.select(inside, masked, zero, xw.dtype);
        let dtype = xw.dtype;
        let red: Vec<usize> = (n..n + sp).collect();
        let sum = self.reduce(&Lazy { sizes: ext, value, dtype }, &red, false, ReduceOp::Sum, dtype);
        // The divisor, from the output index alone.
        let s = &mut self.prog.scalars;
        let count = match divisor {
            Some(d) => s.int_constant(d, DType::I64),
            None => {
                let mut count = s.int_constant(1, DType::I64);
                for m in 0..sp {
                    let size = x.sizes[lead + m].clone();
                    let start = s.index(starts[m].clone());
                    let k = s.int_constant(kernel[m], DType::I64);
                    let end = s.binary(BinaryOp::Add, start, k, DType::I64);
                    let padded_end = s.index(size.add_c(pad[m]));
                    let end = s.binary(BinaryOp::Min, end, padded_end, DType::I64);
                    let extent = if count_include_pad {
                        s.binary(BinaryOp::Sub, end, start, DType::I64)
                    } else {
                        let zero = s.int_constant(0, DType::I64);
                        let lo = s.binary(BinaryOp::Max, start, zero, DType::I64);
                        let n_c = s.index(size);
                        let hi = s.binary(BinaryOp::Min, end, n_c, DType::I64);
                        s.binary(BinaryOp::Sub, hi, lo, DType::I64)
                    };
                    count = s.binary(BinaryOp::Mul, count, extent, DType::I64);
                }
                count
            }
        };
        let count = s.cast(count, dtype);
        let v = s.binary(BinaryOp::Div, sum.value, count, dtype);
        let result = self.cast_lazy(Lazy { sizes: sum.sizes, value: v, dtype }, out);
        Ok(Handled::Native(vec![result]))
    }
}
