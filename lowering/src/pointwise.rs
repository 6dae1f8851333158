//! Node dispatch and elementwise ops.
//!
//! Result dtypes come from PyTorch's FakeTensor metadata; an op computes in
//! the result dtype, except comparisons, which compute in the promoted dtype
//! of their operands.
//!
//! Python scalar operands follow ATen's conversions:
//! - on integers, a Python scalar is converted to the compute dtype first, wrapping
//!   (`DType::wrap_int`): `x % -3` of a uint8 `x` is `x % 253`, `x < 300` of an
//!   int8 `x` is `x < 44`; clamp's bounds are not converted, as in ATen;
//! - a Python float meeting a float16/bfloat16 tensor is rounded to its dtype on
//!   the CPU (TensorIterator converts the wrapped scalar), except by mul and div,
//!   which read it in float32; on CUDA every op reads it in float32
//!   (`LowerOptions::opmath_scalars`). A true division of a half-precision tensor
//!   by a Python float is a multiplication by its float32 reciprocal, as ATen's.
//!
//! Half precision: backends compute float16/bfloat16 values in float32 and round
//! them where they store or convert them (`Scalars::rounded` for a GEMM operand
//! that a fused producer computes in half precision, as eager's stored operand is;
//! other fused readers, such as a float32 sum, read the float32 value, as
//! Inductor's fused kernels do).
//!
//! Clamps, `clamp_min`/`clamp_max` and `hardtanh` (ReLU6) are not decomposed:
//! each is `max(lo, x)` then `min(hi, x)`, the bound first, which in
//! `BinaryOp::Max`'s semantics (the first operand if NaN or strictly greater)
//! keeps x's NaN and the sign of its zero exactly as ATen's kernel and makes a NaN
//! bound NaN. Exact GELU is one scalar op (`UnaryOp::Gelu`), not its
//! decomposition `x/2 · (1 + erf(x/√2))`, whose compiled CPU loop spilled tiles
//! around the erf call; the tanh approximation is lowered as its expression. Exact
//! `gelu_backward` is the gradient times one op, `UnaryOp::GeluGrad` =
//! `Φ(x) + x·φ(x)`, where the decomposition took erf, exp and eight more ops.
//! `x ** 2` and `x ** 3` (float32/float64) are multiplications and `x ** 1` is `x`,
//! as ATen computes them.

use crate::ir::graph::{Arg, Node};
use crate::ir::loops::{BinaryOp, ScalarId, UnaryOp};
use crate::ir::op::Op;
use crate::ir::{DType, Expr};
use crate::lazy::Lazy;
use crate::lower::{Handled, Lowerer};
use crate::LowerError;

type Res = Result<Handled, LowerError>;

impl Lowerer<'_> {
    pub(crate) fn lower_node(&mut self, node: &Node) -> Res {
        use Op::*;
        match node.op {
            Abs | Neg | Exp | Exp2 | Expm1 | Log | Log2 | Log10 | Log1p | Sqrt | Rsqrt | Sin | Cos | Tan | Asin
            | Acos | Atan | Sinh | Cosh | Tanh | Asinh | Acosh | Atanh | Sigmoid | Erf | Erfc | Erfinv | Floor
            | Ceil | Trunc | Sign | Sgn | Reciprocal | LogicalNot | BitwiseNot | IsNan | IsInf | Signbit | Lgamma
            | Digamma | Gelu | Silu | Relu | Square | Frac | IsFinite | IsPosInf | IsNegInf | Positive | Deg2Rad
            | Rad2Deg | Round | Sinc | I0 | SpecialI0 | SpecialI0e | SpecialI1 | SpecialModI1 | SpecialI1e
            | SpecialK0 | SpecialK1 | SpecialK0e | SpecialK1e | SpecialJ0 | SpecialJ1 | SpecialY0 | SpecialY1
            | SpecialSphericalJ0 | SpecialErfcx | SpecialNdtri | SpecialAiryAi => self.unary(node),
            Add | Sub | Rsub | Mul | Div | TrueDivide | FloorDivide | Remainder | Fmod | Pow | Maximum | Minimum
            | Fmax | Fmin | Atan2 | Hypot | Copysign | Nextafter | Eq | Ne | Lt | Le | Gt | Ge | LogicalAnd
            | LogicalOr | LogicalXor | BitwiseAnd | BitwiseOr | BitwiseXor | BitwiseLeftShift | BitwiseRightShift
            | Xlogy | Heaviside | LogAddExp | SpecialZeta | Igamma | Igammac | ChebyshevT | ChebyshevU | ChebyshevV
            | ChebyshevW | ShiftedChebyshevT | ShiftedChebyshevU | ShiftedChebyshevV | ShiftedChebyshevW | HermiteH
            | HermiteHe | LaguerreL | LegendreP | HashMix => self.binary(node),
            Where => self.where_(node),
            Clamp | ClampMin | ClampMax | HardTanh => self.clamp(node),
            Lerp => self.lerp(node),
            GeluBackward => self.gelu_backward(node),
            Addcmul | Addcdiv => self.addc(node),
            Clone | ToCopy | ConvertElementType | Alias | LiftFreshCopy | Contiguous | Detach | Copy => {
                self.copy_like(node)
            }
            Sum | Mean | Prod | Amax | Amin | Argmax | Argmin | Any | All | Var | Std | VarMean | Max | Min
            | Logsumexp => self.reduction(node),
            Cumsum | Cumprod | Cummax | Cummin | Logcumsumexp => self.scan(node),
            Sort | Topk | Kthvalue | Median | Nanmedian => self.sort(node),
            Searchsorted | Bucketize => self.search_sorted(node),
            AvgPool2d | AvgPool3d => self.avg_pool(node),
            AvgPool2dBackward | AvgPool3dBackward => self.avg_pool_backward(node),
            DiagonalScatter => self.diagonal_scatter(node),
            View | UnsafeView | Reshape | Permute | Expand | Squeeze | Unsqueeze | Slice | Select | AsStrided
            | Unfold | T | Transpose | Diagonal | Flip | Repeat => self.view_op(node),
            Cat | ConstantPadNd | Gather | Index | IndexSelect | Embedding | Scatter | IndexPut | Iota | Arange
            | Full | FullLike | Zeros | ZerosLike | Ones | OnesLike | ScalarTensor | Fill | Empty | EmptyLike
            | EmptyStrided | Tril | Triu | Roll | ScatterAdd | ScatterReduce | IndexReduce | SliceScatter
            | SelectScatter | EmptyPermuted => self.data_op(node),
            SplitWithSizes => self.split(node),
            Angle => self.angle(node),
            Polygamma => self.polygamma(node),
            Mm | Bmm | Addmm => self.gemm(node),
            Convolution => self.convolution(node),
            // ATen's fused attention: what `flash_attention_cpu` (Python)
            // leaves to it, attention with a mask.
            ConvolutionBackward | FlashAttentionCpu => self.library(node),
            BatchNormInference => self.batch_norm_inference(node, 6),
            // Batch statistics (training) are not lowered: eager.
            NativeBatchNorm if matches!(node.arg(5, "training"), Arg::Bool(false)) => {
                self.batch_norm_inference(node, 7)
            }
            LayerNorm => self.layer_norm(node),
            _ => Err(crate::unsupported(&node.target, "no lowering for this op")),
        }
    }

    /// The result's sizes and dtype, from PyTorch's metadata.
    pub(crate) fn out_meta(&self, node: &Node) -> Result<(Vec<Expr>, DType), LowerError> {
        let v = node.outputs.first().ok_or_else(|| crate::invalid(&node.target, "node has no tensor output"))?;
        Ok((self.meta_sizes(*v), self.graph.meta(*v).dtype))
    }

    fn native(&self, sizes: Vec<Expr>, value: ScalarId, dtype: DType) -> Res {
        Ok(Handled::Native(vec![Lazy { sizes, value, dtype }]))
    }

    /// The promoted dtype of the operands (PyTorch's category rules: tensors
    /// with dimensions win over zero-dim tensors, which win over numbers).
    pub(crate) fn promote_args(&self, args: &[&Arg]) -> DType {
        let mut dims: Option<DType> = None;
        let mut zero_dim: Option<DType> = None;
        let mut number: Option<DType> = None;
        for arg in args {
            let (slot, dt) = match arg {
                Arg::Tensor(v) => {
                    let meta = self.graph.meta(*v);
                    if meta.ndim() == 0 {
                        (&mut zero_dim, meta.dtype)
                    } else {
                        (&mut dims, meta.dtype)
                    }
                }
                Arg::Float(_) | Arg::SymFloat(_) => (&mut number, DType::F32),
                Arg::Int(_) => (&mut number, DType::I64),
                Arg::Bool(_) => (&mut number, DType::Bool),
                _ => continue,
            };
            *slot = Some(slot.map_or(dt, |d| DType::promote(d, dt)));
        }
        let category = |d: DType| {
            if d.is_float() {
                2
            } else if d == DType::Bool {
                0
            } else {
                1
            }
        };
        let mut result = dims;
        for candidate in [zero_dim, number].into_iter().flatten() {
            match result {
                Some(r) if category(candidate) <= category(r) => {}
                _ => result = Some(candidate),
            }
        }
        result.unwrap_or(DType::F32)
    }

    fn unary(&mut self, node: &Node) -> Res {
        use Op::*;
        let (sizes, out) = self.out_meta(node)?;
        let input = self.tensor_arg(node, 0, "self")?;
        let x_dtype = input.dtype;
        let compute =
            if matches!(node.op, IsNan | IsInf | IsFinite | IsPosInf | IsNegInf | Signbit) { x_dtype } else { out };
        let x = self.operand(node.arg(0, "self"), &sizes, compute, &node.target)?;
        let gelu_tanh = node.op == Gelu && gelu_is_tanh(node, 1)?;
        let s = &mut self.prog.scalars;
        let simple = |op| Some(op);
        let op = match node.op {
            Gelu if !gelu_tanh => simple(UnaryOp::Gelu),
            Abs => simple(UnaryOp::Abs),
            Neg => simple(UnaryOp::Neg),
            Exp => simple(UnaryOp::Exp),
            Exp2 => simple(UnaryOp::Exp2),
            Expm1 => simple(UnaryOp::Expm1),
            Log => simple(UnaryOp::Log),
            Log2 => simple(UnaryOp::Log2),
            Log10 => simple(UnaryOp::Log10),
            Log1p => simple(UnaryOp::Log1p),
            Sqrt => simple(UnaryOp::Sqrt),
            Rsqrt => simple(UnaryOp::Rsqrt),
            Sin => simple(UnaryOp::Sin),
            Cos => simple(UnaryOp::Cos),
            Tan => simple(UnaryOp::Tan),
            Asin => simple(UnaryOp::Asin),
            Acos => simple(UnaryOp::Acos),
            Atan => simple(UnaryOp::Atan),
            Sinh => simple(UnaryOp::Sinh),
            Cosh => simple(UnaryOp::Cosh),
            Tanh => simple(UnaryOp::Tanh),
            Asinh => simple(UnaryOp::Asinh),
            Acosh => simple(UnaryOp::Acosh),
            Atanh => simple(UnaryOp::Atanh),
            Sigmoid => simple(UnaryOp::Sigmoid),
            Erf => simple(UnaryOp::Erf),
            Erfc => simple(UnaryOp::Erfc),
            Erfinv => simple(UnaryOp::Erfinv),
            Floor => simple(UnaryOp::Floor),
            Ceil => simple(UnaryOp::Ceil),
            Trunc => simple(UnaryOp::Trunc),
            Sign | Sgn => simple(UnaryOp::Sign),
            Reciprocal => simple(UnaryOp::Reciprocal),
            LogicalNot => simple(UnaryOp::Not),
            BitwiseNot => simple(if out == DType::Bool { UnaryOp::Not } else { UnaryOp::BitNot }),
            IsNan => simple(UnaryOp::IsNan),
            IsInf => simple(UnaryOp::IsInf),
            Signbit => simple(UnaryOp::Signbit),
            Lgamma => simple(UnaryOp::Lgamma),
            Digamma => simple(UnaryOp::Digamma),
            I0 | SpecialI0 => simple(UnaryOp::I0),
            SpecialI0e => simple(UnaryOp::I0e),
            SpecialI1 | SpecialModI1 => simple(UnaryOp::I1),
            SpecialI1e => simple(UnaryOp::I1e),
            SpecialK0 => simple(UnaryOp::K0),
            SpecialK1 => simple(UnaryOp::K1),
            SpecialK0e => simple(UnaryOp::K0e),
            SpecialK1e => simple(UnaryOp::K1e),
            SpecialJ0 => simple(UnaryOp::BesselJ0),
            SpecialJ1 => simple(UnaryOp::BesselJ1),
            SpecialY0 => simple(UnaryOp::BesselY0),
            SpecialY1 => simple(UnaryOp::BesselY1),
            SpecialSphericalJ0 => simple(UnaryOp::SphericalJ0),
            SpecialAiryAi => simple(UnaryOp::AiryAi),
            SpecialErfcx => simple(UnaryOp::Erfcx),
            SpecialNdtri => simple(UnaryOp::Ndtri),
            _ => None,
        };
        if let Some(op) = op {
            if out == DType::F64
                && matches!(op, UnaryOp::BesselJ0 | UnaryOp::BesselJ1 | UnaryOp::BesselY0 | UnaryOp::BesselY1)
            {
                // PyTorch's float64 Bessel J/Y differ from the accurate
                // (libm) values by up to 1e-5 near zeros: keep eager's.
                return Err(crate::unsupported(&node.target, "float64 Bessel J/Y (eager's own numerics)"));
            }
            if !out.is_float() && needs_float(op) {
                return Err(crate::unsupported(&node.target, format!("{op} on {out}")));
            }
            let v = s.unary(op, x, out);
            return self.native(sizes, v, out);
        }
        let value = match node.op {
            Positive => x,
            Relu => {
                let zero = s.constant(0.0, out);
                s.binary(BinaryOp::Max, x, zero, out)
            }
            Square => s.binary(BinaryOp::Mul, x, x, out),
            Silu => {
                // x · sigmoid(x), as PyTorch's reference writes it.
                let sg = s.unary(UnaryOp::Sigmoid, x, out);
                s.binary(BinaryOp::Mul, x, sg, out)
            }
            Gelu => {
                // approximate="tanh", as ATen writes it:
                // x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³))).
                let cube = s.binary(BinaryOp::Mul, x, x, out);
                let cube = s.binary(BinaryOp::Mul, cube, x, out);
                let kappa = s.constant(0.044715, out);
                let t = s.binary(BinaryOp::Mul, kappa, cube, out);
                let t = s.binary(BinaryOp::Add, x, t, out);
                let beta = s.constant((2.0 / std::f64::consts::PI).sqrt(), out);
                let t = s.binary(BinaryOp::Mul, beta, t, out);
                let t = s.unary(UnaryOp::Tanh, t, out);
                let one = s.constant(1.0, out);
                let t = s.binary(BinaryOp::Add, one, t, out);
                let half = s.constant(0.5, out);
                let h = s.binary(BinaryOp::Mul, half, x, out);
                s.binary(BinaryOp::Mul, h, t, out)
            }
            Frac => {
                let t = s.unary(UnaryOp::Trunc, x, out);
                s.binary(BinaryOp::Sub, x, t, out)
            }
            Deg2Rad | Rad2Deg => {
                let k = if node.op == Deg2Rad { std::f64::consts::PI / 180.0 } else { 180.0 / std::f64::consts::PI };
                let k = s.constant(k, out);
                s.binary(BinaryOp::Mul, x, k, out)
            }
            IsFinite | IsPosInf | IsNegInf => {
                if !x_dtype.is_float() {
                    let v = (node.op == IsFinite) as i64;
                    s.int_constant(v, DType::Bool)
                } else {
                    let target = match node.op {
                        IsPosInf => f64::INFINITY,
                        IsNegInf => f64::NEG_INFINITY,
                        _ => f64::NAN,
                    };
                    if node.op == IsFinite {
                        let nan = s.unary(UnaryOp::IsNan, x, DType::Bool);
                        let inf = s.unary(UnaryOp::IsInf, x, DType::Bool);
                        let bad = s.binary(BinaryOp::Or, nan, inf, DType::Bool);
                        s.unary(UnaryOp::Not, bad, DType::Bool)
                    } else {
                        let t = s.constant(target, x_dtype);
                        s.binary(BinaryOp::Eq, x, t, DType::Bool)
                    }
                }
            }
            Round => {
                // round(x, d) = round(x·10^d) / 10^d, as PyTorch computes it.
                let decimals = node.kwarg("decimals").as_int().unwrap_or(0);
                if decimals == 0 {
                    s.unary(UnaryOp::Round, x, out)
                } else {
                    let (op_in, op_out) =
                        if decimals > 0 { (BinaryOp::Mul, BinaryOp::Div) } else { (BinaryOp::Div, BinaryOp::Mul) };
                    let k = s.constant(10f64.powi(decimals.unsigned_abs() as i32), out);
                    let scaled = s.binary(op_in, x, k, out);
                    let r = s.unary(UnaryOp::Round, scaled, out);
                    s.binary(op_out, r, k, out)
                }
            }
            Sinc => {
                // sin(pi x) / (pi x), 1 at 0.
                let pi = s.constant(std::f64::consts::PI, out);
                let px = s.binary(BinaryOp::Mul, x, pi, out);
                let sin = s.unary(UnaryOp::Sin, px, out);
                let q = s.binary(BinaryOp::Div, sin, px, out);
                let zero = s.constant(0.0, out);
                let one = s.constant(1.0, out);
                let is_zero = s.binary(BinaryOp::Eq, x, zero, DType::Bool);
                s.select(is_zero, one, q, out)
            }
            _ => return Err(crate::unsupported(&node.target, "no lowering for this op")),
        };
        self.native(sizes, value, out)
    }

    fn binary(&mut self, node: &Node) -> Res {
        use Op::*;
        let (sizes, out) = self.out_meta(node)?;
        let a_arg = node.arg(0, "self").clone();
        let b_arg = node.arg(1, "other").clone();
        let is_cmp = matches!(node.op, Eq | Ne | Lt | Le | Gt | Ge);
        let is_logical = matches!(node.op, LogicalAnd | LogicalOr | LogicalXor);
        let compute = if is_cmp {
            self.promote_args(&[&a_arg, &b_arg])
        } else if is_logical {
            DType::Bool
        } else {
            out
        };
        // A Python scalar meets an integer tensor converted to the compute
        // dtype, wrapping as ATen converts it: `x % -3` of a uint8 `x` is
        // `x % 253`, `x < 300` of an int8 `x` is `x < 44`. (clamp's bounds
        // are not converted: its lowering is not this one.)
        // A Python number meets a float16/bfloat16 tensor converted to its
        // dtype (the cast rounds it), except where ATen reads it in
        // float32: mul and div on the CPU, every op on CUDA
        // (`LowerOptions::opmath_scalars`).
        let opmath = matches!(compute, DType::F16 | DType::BF16)
            && (self.options.opmath_scalars || matches!(node.op, Mul | Div | TrueDivide | FloorDivide));
        let number = if opmath { DType::F32 } else { compute };
        let wrapped = |arg: Arg| match arg {
            Arg::Int(e) if compute.is_int() => Arg::Int(e.as_const().map_or(e, |n| Expr::c(compute.wrap_int(n)))),
            other => other,
        };
        let (a_arg, b_arg) = (wrapped(a_arg), wrapped(b_arg));
        // A 0-dim tensor is a scalar to ATen too (a float Dynamo passes in
        // as an input arrives as one).
        let graph = self.graph;
        let dtype_of = |arg: &Arg| match arg {
            Arg::Tensor(v) if !graph.meta(*v).sizes.is_empty() => compute,
            _ => number,
        };
        let (a_dtype, b_dtype) = (dtype_of(&a_arg), dtype_of(&b_arg));
        let mut a = self.operand(&a_arg, &sizes, a_dtype, &node.target)?;
        let mut b = self.operand(&b_arg, &sizes, b_dtype, &node.target)?;
        let s = &mut self.prog.scalars;
        // add/sub take an `alpha` multiplier for the second operand.
        if let Some(alpha) = node.kwarg("alpha").as_float().or_else(|| node.args.get(2).and_then(|a| a.as_float())) {
            if matches!(node.op, Add | Sub | Rsub) && alpha != 1.0 {
                let k = s.constant(number.round_float(alpha), number);
                b = s.binary(BinaryOp::Mul, b, k, compute);
            }
        }
        if node.op == Rsub {
            std::mem::swap(&mut a, &mut b);
        }
        // ATen's pow by a scalar exponent (CPU and CUDA) computes `x ** 2`
        // and `x ** 3` by multiplication, `x ** 0.5` as `sqrt`, `x ** -0.5`
        // as `rsqrt`, `x ** -1` and `x ** -2` as reciprocals (as exact, and
        // far cheaper than powf: weight norm's `norm ** 0.5`), and `x ** 1`
        // is `x` (the derivative of a square is `2 * x ** 1`); so does rdyn,
        // for float32 and float64.
        if node.op == Pow && matches!(out, DType::F32 | DType::F64) {
            let exponent = b_arg.as_float();
            let reciprocal = |s: &mut rdyn_ir::loops::Scalars, x| {
                let one = s.constant(1.0, out);
                s.binary(BinaryOp::Div, one, x, out)
            };
            let v = match exponent {
                Some(1.0) => Some(a),
                Some(2.0) => Some(s.binary(BinaryOp::Mul, a, a, out)),
                Some(3.0) => {
                    let square = s.binary(BinaryOp::Mul, a, a, out);
                    Some(s.binary(BinaryOp::Mul, square, a, out))
                }
                Some(0.5) => Some(s.unary(UnaryOp::Sqrt, a, out)),
                Some(-0.5) => Some(s.unary(UnaryOp::Rsqrt, a, out)),
                Some(-1.0) => Some(reciprocal(s, a)),
                Some(-2.0) => {
                    let square = s.binary(BinaryOp::Mul, a, a, out);
                    Some(reciprocal(s, square))
                }
                _ => None,
            };
            if let Some(v) = v {
                return self.native(sizes, v, out);
            }
        }
        // ATen divides a float16/bfloat16 tensor by a Python float as a
        // multiplication by its float32 reciprocal (CPU and CUDA alike).
        let true_div = matches!(node.op, Div | TrueDivide) && matches!(node.kwarg("rounding_mode"), Arg::None);
        if true_div && opmath && b_dtype == number {
            let inverse = match b_arg.as_float() {
                Some(d) => s.constant((1.0 / d as f32) as f64, DType::F32),
                None => {
                    let one = s.constant(1.0, DType::F32);
                    s.binary(BinaryOp::Div, one, b, DType::F32)
                }
            };
            let v = s.binary(BinaryOp::Mul, a, inverse, out);
            return self.native(sizes, v, out);
        }
        let op = match node.op {
            Add => BinaryOp::Add,
            Sub | Rsub => BinaryOp::Sub,
            Mul => BinaryOp::Mul,
            Div | TrueDivide => match node.kwarg("rounding_mode") {
                Arg::Str(mode) if mode == "trunc" => BinaryOp::TruncDiv,
                Arg::Str(mode) if mode == "floor" => BinaryOp::FloorDiv,
                _ => BinaryOp::Div,
            },
            FloorDivide => BinaryOp::FloorDiv,
            Remainder => BinaryOp::Rem,
            Fmod => BinaryOp::Fmod,
            Pow => BinaryOp::Pow,
            Maximum => BinaryOp::Max,
            Minimum => BinaryOp::Min,
            Fmax => BinaryOp::Fmax,
            Fmin => BinaryOp::Fmin,
            Atan2 => BinaryOp::Atan2,
            Hypot => BinaryOp::Hypot,
            Copysign => BinaryOp::Copysign,
            Nextafter => BinaryOp::Nextafter,
            Eq => BinaryOp::Eq,
            Ne => BinaryOp::Ne,
            Lt => BinaryOp::Lt,
            Le => BinaryOp::Le,
            Gt => BinaryOp::Gt,
            Ge => BinaryOp::Ge,
            LogicalAnd => BinaryOp::And,
            LogicalOr => BinaryOp::Or,
            LogicalXor => BinaryOp::Xor,
            SpecialZeta => BinaryOp::Zeta,
            Igamma => BinaryOp::Igamma,
            Igammac => BinaryOp::Igammac,
            ChebyshevT => BinaryOp::ChebyshevT,
            ChebyshevU => BinaryOp::ChebyshevU,
            ChebyshevV => BinaryOp::ChebyshevV,
            ChebyshevW => BinaryOp::ChebyshevW,
            ShiftedChebyshevT => BinaryOp::ShiftedChebyshevT,
            ShiftedChebyshevU => BinaryOp::ShiftedChebyshevU,
            ShiftedChebyshevV => BinaryOp::ShiftedChebyshevV,
            ShiftedChebyshevW => BinaryOp::ShiftedChebyshevW,
            HermiteH => BinaryOp::HermiteH,
            HermiteHe => BinaryOp::HermiteHe,
            LaguerreL => BinaryOp::LaguerreL,
            LegendreP => BinaryOp::LegendreP,
            BitwiseAnd => bool_or(out, BinaryOp::And, BinaryOp::BitAnd),
            BitwiseOr => bool_or(out, BinaryOp::Or, BinaryOp::BitOr),
            BitwiseXor => bool_or(out, BinaryOp::Xor, BinaryOp::BitXor),
            BitwiseLeftShift => BinaryOp::Shl,
            BitwiseRightShift => BinaryOp::Shr,
            HashMix => BinaryOp::HashMix,
            Xlogy => {
                // x * log(y), 0 where x == 0, nan where y is nan.
                let log = s.unary(UnaryOp::Log, b, out);
                let prod = s.binary(BinaryOp::Mul, a, log, out);
                let zero = s.constant(0.0, out);
                let x_zero = s.binary(BinaryOp::Eq, a, zero, DType::Bool);
                let y_nan = s.unary(UnaryOp::IsNan, b, DType::Bool);
                let nan = s.constant(f64::NAN, out);
                let z = s.select(x_zero, zero, prod, out);
                let v = s.select(y_nan, nan, z, out);
                return self.native(sizes, v, out);
            }
            Heaviside => {
                let zero = s.constant(0.0, out);
                let one = s.constant(1.0, out);
                let is_zero = s.binary(BinaryOp::Eq, a, zero, DType::Bool);
                let pos = s.binary(BinaryOp::Gt, a, zero, DType::Bool);
                let step = s.select(pos, one, zero, out);
                let v = s.select(is_zero, b, step, out);
                return self.native(sizes, v, out);
            }
            LogAddExp => {
                // max + log1p(exp(-|a - b|)), exact for equal infinities.
                let mx = s.binary(BinaryOp::Max, a, b, out);
                let mn = s.binary(BinaryOp::Min, a, b, out);
                let d = s.binary(BinaryOp::Sub, mn, mx, out);
                let e = s.unary(UnaryOp::Exp, d, out);
                let l = s.unary(UnaryOp::Log1p, e, out);
                let sum = s.binary(BinaryOp::Add, mx, l, out);
                let same = s.binary(BinaryOp::Eq, a, b, DType::Bool);
                let inf = s.unary(UnaryOp::IsInf, a, DType::Bool);
                let both = s.binary(BinaryOp::And, same, inf, DType::Bool);
                let v = s.select(both, a, sum, out);
                return self.native(sizes, v, out);
            }
            _ => return Err(crate::unsupported(&node.target, "no lowering for this op")),
        };
        if !compute.is_float()
            && (op.is_special()
                || matches!(op, BinaryOp::Atan2 | BinaryOp::Hypot | BinaryOp::Copysign | BinaryOp::Nextafter))
        {
            return Err(crate::unsupported(&node.target, format!("{op} on {compute}")));
        }
        let result_dtype = if is_cmp || is_logical { DType::Bool } else { out };
        let v = s.binary(op, a, b, result_dtype);
        let v = s.cast(v, out);
        self.native(sizes, v, out)
    }

    fn where_(&mut self, node: &Node) -> Res {
        let (sizes, out) = self.out_meta(node)?;
        let c = self.operand(node.arg(0, "condition"), &sizes, DType::Bool, &node.target)?;
        let a = self.operand(node.arg(1, "self"), &sizes, out, &node.target)?;
        let b = self.operand(node.arg(2, "other"), &sizes, out, &node.target)?;
        let v = self.prog.scalars.select(c, a, b, out);
        self.native(sizes, v, out)
    }

    fn clamp(&mut self, node: &Node) -> Res {
        let (sizes, out) = self.out_meta(node)?;
        let mut x = self.operand(node.arg(0, "self"), &sizes, out, &node.target)?;
        let (lo, hi) = match node.op {
            Op::ClampMin => (node.arg(1, "min").clone(), Arg::None),
            Op::ClampMax => (Arg::None, node.arg(1, "max").clone()),
            Op::HardTanh => {
                let bound = |pos, name, default| match node.arg(pos, name) {
                    Arg::None => Arg::Float(default),
                    a => a.clone(),
                };
                (bound(1, "min_val", -1.0), bound(2, "max_val", 1.0))
            }
            _ => (node.arg(1, "min").clone(), node.arg(2, "max").clone()),
        };
        // The bound first: `max(lo, x)` is `lo` only when `lo` is NaN or
        // strictly above `x`, so x's NaN and its zero's sign survive as in
        // ATen (`clamp(-0.0, min=0.0)` is -0.0) and a NaN bound gives NaN.
        if !lo.is_none() {
            let lo = self.operand(&lo, &sizes, out, &node.target)?;
            x = self.prog.scalars.binary(BinaryOp::Max, lo, x, out);
        }
        if !hi.is_none() {
            let hi = self.operand(&hi, &sizes, out, &node.target)?;
            x = self.prog.scalars.binary(BinaryOp::Min, hi, x, out);
        }
        self.native(sizes, x, out)
    }

    fn lerp(&mut self, node: &Node) -> Res {
        let (sizes, out) = self.out_meta(node)?;
        let a = self.operand(node.arg(0, "self"), &sizes, out, &node.target)?;
        let b = self.operand(node.arg(1, "end"), &sizes, out, &node.target)?;
        let w = self.operand(node.arg(2, "weight"), &sizes, out, &node.target)?;
        let s = &mut self.prog.scalars;
        let d = s.binary(BinaryOp::Sub, b, a, out);
        let wd = s.binary(BinaryOp::Mul, w, d, out);
        let v = s.binary(BinaryOp::Add, a, wd, out);
        self.native(sizes, v, out)
    }

    /// Exact GELU's backward, `grad · (Φ(x) + x·φ(x))` with the factor one
    /// op ([`UnaryOp::GeluGrad`]); the tanh form is decomposed before it
    /// gets here (`python/rdyn/backend.py`).
    fn gelu_backward(&mut self, node: &Node) -> Res {
        if gelu_is_tanh(node, 2)? {
            return Err(crate::unsupported(&node.target, "approximate='tanh' (decomposed before lowering)"));
        }
        let (sizes, out) = self.out_meta(node)?;
        let grad = self.operand(node.arg(0, "grad_output"), &sizes, out, &node.target)?;
        let x = self.operand(node.arg(1, "self"), &sizes, out, &node.target)?;
        let s = &mut self.prog.scalars;
        let factor = s.unary(UnaryOp::GeluGrad, x, out);
        let v = s.binary(BinaryOp::Mul, grad, factor, out);
        self.native(sizes, v, out)
    }

    fn addc(&mut self, node: &Node) -> Res {
        let (sizes, out) = self.out_meta(node)?;
        let x = self.operand(node.arg(0, "self"), &sizes, out, &node.target)?;
        let t1 = self.operand(node.arg(1, "tensor1"), &sizes, out, &node.target)?;
        let t2 = self.operand(node.arg(2, "tensor2"), &sizes, out, &node.target)?;
        let value = node.arg(3, "value").as_float().unwrap_or(1.0);
        let s = &mut self.prog.scalars;
        let op = if node.op == Op::Addcmul { BinaryOp::Mul } else { BinaryOp::Div };
        let p = s.binary(op, t1, t2, out);
        let k = s.constant(value, out);
        let p = s.binary(BinaryOp::Mul, p, k, out);
        let v = s.binary(BinaryOp::Add, x, p, out);
        self.native(sizes, v, out)
    }

    /// clone, _to_copy and prims.convert_element_type (dtype casts on the
    /// same device), alias, detach.
    fn copy_like(&mut self, node: &Node) -> Res {
        let (sizes, out) = self.out_meta(node)?;
        let src = if node.op == Op::Copy { node.arg(1, "src") } else { node.arg(0, "self") };
        let in_meta = src.as_tensor().map(|v| self.graph.meta(v).device);
        let out_device = node.outputs.first().map(|v| self.graph.meta(*v).device);
        if in_meta != out_device {
            return Err(crate::unsupported(&node.target, "copy across devices"));
        }
        let x = self.operand(src, &sizes, out, &node.target)?;
        self.native(sizes, x, out)
    }
}

impl Lowerer<'_> {
    /// split_with_sizes: each output is a slice view.
    fn split(&mut self, node: &Node) -> Res {
        let x = self.tensor_arg(node, 0, "self")?;
        let n = x.ndim();
        if n == 0 {
            return Err(crate::unsupported(&node.target, "0-dim input"));
        }
        let d = node.arg(2, "dim").as_int().unwrap_or(0);
        let d = if d < 0 { d + n as i64 } else { d } as usize;
        let mut start = Expr::zero();
        let mut outs = Vec::new();
        for v in &node.outputs {
            let sizes = self.meta_sizes(*v);
            let mut map: Vec<Expr> = (0..n as u32).map(Expr::v).collect();
            map[d] = Expr::v(d as u32).add(&start);
            start = start.add(&sizes[d]);
            outs.push(self.view(&x, sizes, &map));
        }
        Ok(Handled::Native(outs))
    }

    /// angle of a real tensor: 0 for x >= 0, pi for x < 0, NaN stays NaN.
    fn angle(&mut self, node: &Node) -> Res {
        let (sizes, out) = self.out_meta(node)?;
        let x = self.operand(node.arg(0, "self"), &sizes, out, &node.target)?;
        let s = &mut self.prog.scalars;
        let zero = s.constant(0.0, out);
        let pi = s.constant(std::f64::consts::PI, out);
        let neg = s.binary(BinaryOp::Lt, x, zero, DType::Bool);
        let a = s.select(neg, pi, zero, out);
        let nan = s.unary(UnaryOp::IsNan, x, DType::Bool);
        let v = s.select(nan, x, a, out);
        self.native(sizes, v, out)
    }

    /// polygamma(n, x) = (-1)^(n+1) n! zeta(n+1, x); digamma for n = 0.
    fn polygamma(&mut self, node: &Node) -> Res {
        let (sizes, out) = self.out_meta(node)?;
        if !out.is_float() {
            return Err(crate::unsupported(&node.target, "integer output"));
        }
        let n = node.arg(0, "n").as_int().ok_or_else(|| crate::unsupported(&node.target, "n"))?;
        let x = self.operand(node.arg(1, "self"), &sizes, out, &node.target)?;
        let s = &mut self.prog.scalars;
        let v = if n == 0 {
            s.unary(UnaryOp::Digamma, x, out)
        } else {
            let nn = s.constant(n as f64, out);
            s.binary(BinaryOp::Polygamma, nn, x, out)
        };
        self.native(sizes, v, out)
    }
}

fn bool_or(dtype: DType, logical: BinaryOp, bitwise: BinaryOp) -> BinaryOp {
    if dtype == DType::Bool {
        logical
    } else {
        bitwise
    }
}

/// Whether a GELU node (or its backward) asks for the tanh approximation
/// (else the exact one), `approximate` being argument `pos`.
fn gelu_is_tanh(node: &Node, pos: usize) -> Result<bool, LowerError> {
    match node.arg(pos, "approximate") {
        Arg::None => Ok(false),
        Arg::Str(mode) if mode == "none" => Ok(false),
        Arg::Str(mode) if mode == "tanh" => Ok(true),
        other => Err(crate::unsupported(&node.target, format!("approximate={other:?}"))),
    }
}

fn needs_float(op: UnaryOp) -> bool {
    !matches!(
        op,
        UnaryOp::Neg
            | UnaryOp::Abs
            | UnaryOp::Sign
            | UnaryOp::Not
            | UnaryOp::BitNot
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Trunc
            | UnaryOp::Round
            | UnaryOp::IsNan
            | UnaryOp::IsInf
            | UnaryOp::Signbit
    )
}
