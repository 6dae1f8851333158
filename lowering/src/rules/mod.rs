//! The rules: per ATen op, the function that lowers its node ([`rule`]).
//!
//! A rule is a plain function `fn(&mut Lowerer, &Node) -> Res`, grouped by
//! family, one file each: `unary.rs` (one scalar op of one operand, or a short
//! expression of it), `binary.rs` (of two), `pointwise.rs` (the other
//! elementwise ops: selects, clamps, copies and casts), `reduce.rs`, `scan.rs`,
//! `sort.rs`, `search.rs`, `views.rs` (index rewrites), `data.rs` (concatenation,
//! padding, creation, writes into a slice or diagonal), `index.rs` (gathers,
//! indexing and scatters through data), `gemm.rs`, `conv.rs`, `pool.rs`,
//! `norm.rs`; `common.rs` holds what several read (argument readers, dtypes,
//! library calls). Which scalar op an elementwise ATen op is, and what a scalar
//! op costs or takes, is data in `rdyn_ir::ops`, not code here.
//!
//! The dispatch is one `match` without a wildcard arm rather than a table
//! indexed by op: the compiler then names any new `Op` variant that has no
//! rule, and one function can serve a family (`sum` and `prod`) without a row
//! per op. A rule returns `LowerError::Unsupported` to leave its node to eager
//! (`lower.rs` makes it a fallback): what it built before is left unreferenced,
//! so a rule checks what it needs before it stores anything.

use rdyn_ir::graph::Node;
use rdyn_ir::op::Op;

use crate::error::unsupported;
use crate::lowerer::{Lowerer, Res};

mod binary;
mod common;
mod conv;
mod data;
mod gemm;
mod index;
mod norm;
mod pointwise;
mod pool;
mod reduce;
mod scan;
mod search;
mod sort;
mod unary;
mod views;

/// How one node is lowered.
pub(crate) type Rule = fn(&mut Lowerer<'_>, &Node) -> Res;

/// Lower `node` by its op's rule.
pub(crate) fn lower_node(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    rule(node.op)(lw, node)
}

/// The rule for `op`: the single dispatch point.
pub(crate) fn rule(op: Op) -> Rule {
    use Op::*;
    match op {
        Abs | Neg | Exp | Exp2 | Expm1 | Log | Log2 | Log10 | Log1p | Sqrt | Rsqrt | Sin | Cos | Tan | Asin | Acos
        | Atan | Sinh | Cosh | Tanh | Asinh | Acosh | Atanh | Sigmoid | Erf | Erfc | Erfinv | Floor | Ceil | Trunc
        | Sign | Sgn | Reciprocal | LogicalNot | BitwiseNot | IsNan | IsInf | Signbit | Lgamma | Digamma | Gelu
        | Silu | Relu | Square | Frac | IsFinite | IsPosInf | IsNegInf | Positive | Deg2Rad | Rad2Deg | Round
        | Sinc | I0 | SpecialI0 | SpecialI0e | SpecialI1 | SpecialModI1 | SpecialI1e | SpecialK0 | SpecialK1
        | SpecialK0e | SpecialK1e | SpecialJ0 | SpecialJ1 | SpecialY0 | SpecialY1 | SpecialSphericalJ0
        | SpecialErfcx | SpecialNdtri | SpecialAiryAi => unary::unary,
        Angle => unary::angle,
        Add | Sub | Rsub | Mul | Div | TrueDivide | FloorDivide | Remainder | Fmod | Pow | Maximum | Minimum | Fmax
        | Fmin | Atan2 | Hypot | Copysign | Nextafter | Eq | Ne | Lt | Le | Gt | Ge | LogicalAnd | LogicalOr
        | LogicalXor | BitwiseAnd | BitwiseOr | BitwiseXor | BitwiseLeftShift | BitwiseRightShift | Xlogy
        | Heaviside | LogAddExp | SpecialZeta | Igamma | Igammac | ChebyshevT | ChebyshevU | ChebyshevV
        | ChebyshevW | ShiftedChebyshevT | ShiftedChebyshevU | ShiftedChebyshevV | ShiftedChebyshevW | HermiteH
        | HermiteHe | LaguerreL | LegendreP | HashMix => binary::binary,
        Polygamma => binary::polygamma,
        Where => pointwise::where_,
        Clamp | ClampMin | ClampMax | HardTanh => pointwise::clamp,
        Lerp => pointwise::lerp,
        GeluBackward => pointwise::gelu_backward,
        Addcmul | Addcdiv => pointwise::addc,
        Clone | ToCopy | ConvertElementType | Alias | LiftFreshCopy | Contiguous | Detach | Copy => pointwise::copy,
        Sum | Prod => reduce::sum_prod,
        Mean => reduce::mean,
        Amax | Amin | Max | Min => reduce::extreme,
        Argmax | Argmin => reduce::arg_extreme,
        Any | All => reduce::any_all,
        Var | Std | VarMean => reduce::variance,
        Logsumexp => reduce::logsumexp,
        Cumsum | Cumprod | Cummax | Cummin | Logcumsumexp => scan::scan,
        Sort | Topk | Kthvalue | Median | Nanmedian => sort::sort,
        Searchsorted | Bucketize => search::search_sorted,
        View | UnsafeView | Reshape => views::reshape,
        Permute => views::permute,
        T | Transpose => views::transpose,
        Expand => views::expand,
        Unsqueeze => views::unsqueeze,
        Squeeze => views::squeeze,
        Slice => views::slice,
        Select => views::select,
        Unfold => views::unfold,
        Diagonal => views::diagonal,
        Flip => views::flip,
        Repeat => views::repeat,
        AsStrided => views::as_strided,
        SplitWithSizes => views::split,
        Cat => data::cat,
        ConstantPadNd => data::constant_pad,
        Iota | Arange => data::arange,
        Full | FullLike | Fill => data::full,
        ScalarTensor => data::scalar_tensor,
        Zeros | ZerosLike | Empty | EmptyLike | EmptyStrided | EmptyPermuted => data::zeros,
        Ones | OnesLike => data::ones,
        Tril | Triu => data::tril,
        Roll => data::roll,
        SliceScatter | SelectScatter => data::slice_scatter,
        DiagonalScatter => data::diagonal_scatter,
        Gather | IndexSelect => index::gather,
        Embedding => index::embedding,
        Index => index::index,
        Scatter | IndexPut | ScatterAdd | ScatterReduce | IndexReduce => index::scatter,
        AvgPool2d | AvgPool3d => pool::avg_pool,
        AvgPool2dBackward | AvgPool3dBackward => pool::avg_pool_backward,
        BatchNormInference => norm::batch_norm_inference,
        NativeBatchNorm => norm::native_batch_norm,
        LayerNorm => norm::layer_norm,
        Mm | Bmm | Addmm => gemm::gemm,
        Convolution => conv::convolution,
        // ATen's fused attention: what `_attention.py` leaves to it (long
        // sequences, where its flash kernel wins; shapes it does not take).
        ConvolutionBackward => conv::convolution_backward,
        FlashAttentionCpu | FlashAttentionCpuBackward => common::library,
        // Decomposed before they get here (`python/rdyn/backend.py`); in a
        // graph that still has one, eager's.
        LeakyRelu | Elu | NanToNum | Hardsigmoid | Hardswish | Mish | Softplus | Logit => none,
        Other => none,
    }
}

/// No rule: the node runs eagerly.
fn none(_: &mut Lowerer<'_>, node: &Node) -> Res {
    Err(unsupported(&node.target, "no lowering for this op"))
}
