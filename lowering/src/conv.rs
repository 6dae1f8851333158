//! Convolutions: a depthwise 2-D convolution on the CPU runs rdyn's own
//! kernel ([`ExternKind::DepthwiseConv2d`]); every other convolution is a
//! library call through ATen.
//!
//! ATen sends a depthwise convolution of a contiguous (NCHW) tensor to
//! oneDNN, which reorders the input into its blocked layout and back on
//! every call: 100–230 µs for the 3x3 depthwise layers of MobileNetV2 at
//! 112 px, whose arithmetic is a few hundred thousand multiply-adds. rdyn's
//! kernel reads NCHW as it is, one channel plane at a time.

use crate::ir::graph::{Arg, Node};
use crate::ir::loops::{BinaryOp, Extern, ExternKind, Step};
use crate::ir::{DType, Device, Expr};
use crate::lower::{Handled, Lowerer};
use crate::shape::int_list;
use crate::LowerError;

type Res = Result<Handled, LowerError>;

/// A pair from a convolution's int-list argument (one value means both).
fn pair(arg: &Arg, op: &str) -> Option<[i64; 2]> {
    match int_list(arg, op).ok()?[..] {
        [v] => Some([v, v]),
        [a, b] => Some([a, b]),
        _ => None,
    }
}

impl Lowerer<'_> {
    pub(crate) fn convolution(&mut self, node: &Node) -> Res {
        match self.depthwise_geometry(node) {
            Some(kind) => self.depthwise(node, kind),
            None => self.library(node),
        }
    }

    /// The kernel's parameters when `node` is a depthwise 2-D convolution
    /// rdyn's CPU kernel computes: float32 or float64 on the CPU, not
    /// transposed, `groups` equal to the input's channels, one filter per
    /// channel, constant channel and kernel sizes.
    fn depthwise_geometry(&self, node: &Node) -> Option<ExternKind> {
        let op = node.target.as_str();
        let out = *node.outputs.first()?;
        let meta = self.graph.meta(out);
        if meta.device != Device::Cpu || !matches!(meta.dtype, DType::F32 | DType::F64) {
            return None;
        }
        let (Arg::Tensor(x), Arg::Tensor(w)) = (node.arg(0, "input"), node.arg(1, "weight")) else { return None };
        let (x, w) = (self.graph.meta(*x), self.graph.meta(*w));
        if x.dtype != meta.dtype || w.dtype != meta.dtype || x.sizes.len() != 4 || w.sizes.len() != 4 {
            return None;
        }
        let channels = x.sizes[1].as_const()?;
        let groups = node.arg(8, "groups").as_int()?;
        let transposed = matches!(node.arg(6, "transposed"), Arg::Bool(true));
        let filters = w.sizes[0].as_const()? == channels && w.sizes[1].as_const()? == 1;
        if transposed || groups != channels || !filters || w.sizes[2].as_const()? < 1 || w.sizes[3].as_const()? < 1 {
            return None;
        }
        let stride = pair(node.arg(3, "stride"), op)?;
        let padding = pair(node.arg(4, "padding"), op)?;
        let dilation = pair(node.arg(5, "dilation"), op)?;
        let positive = stride.iter().chain(&dilation).all(|&v| v >= 1) && padding.iter().all(|&v| v >= 0);
        positive.then_some(ExternKind::DepthwiseConv2d { stride, padding, dilation })
    }

    fn depthwise(&mut self, node: &Node, kind: ExternKind) -> Res {
        let (sizes, dtype) = self.out_meta(node)?;
        let x = self.tensor_arg(node, 0, "input")?;
        let w = self.tensor_arg(node, 1, "weight")?;
        let (x_buf, w_buf) = (self.buffer_for_extern(&x), self.buffer_for_extern(&w));
        let out_v = node.outputs.first().copied().ok_or_else(|| crate::invalid(&node.target, "no output"))?;
        let out_buf = self.extern_output(out_v, sizes.clone(), dtype);
        self.prog.steps.push(Step::Extern(Extern { kind, inputs: vec![x_buf, w_buf], outputs: vec![out_buf] }));
        let mut result = self.load_buffer(out_buf);
        // The bias, per channel, is added by the consumers (it fuses into a
        // batch norm's scale and shift, or an activation).
        if let Arg::Tensor(_) = node.arg(2, "bias") {
            let bias = self.tensor_arg(node, 2, "bias")?;
            let bias = self.view(&bias, sizes, &[Expr::v(1)]);
            result.value = self.prog.scalars.binary(BinaryOp::Add, result.value, bias.value, dtype);
        }
        Ok(Handled::Extern(vec![result]))
    }
}
