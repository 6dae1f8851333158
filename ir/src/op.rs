//! The closed set of ATen operator packets rdyn knows by name.
//!
//! An FX target such as `aten.add.Tensor` is parsed once, at import, into
//! [`Op::Add`] (the overload stays on the node). Ops outside this list become
//! [`Op::Other`] and run eagerly, counted as fallbacks. What rdyn knows about
//! each op (its scalar form, whether it is a view) is `ops.rs`'s table.

macro_rules! ops {
    ($($variant:ident => $name:literal,)*) => {
        /// An ATen operator packet (overload-agnostic).
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Op {
            $($variant,)*
            /// Not known to rdyn: always an eager fallback.
            Other,
        }

        impl Op {
            /// Parse a packet name such as `add` (from `aten.add.Tensor`).
            pub fn from_packet(name: &str) -> Op {
                match name {
                    $($name => Op::$variant,)*
                    _ => Op::Other,
                }
            }

            pub fn name(self) -> &'static str {
                match self {
                    $(Op::$variant => $name,)*
                    Op::Other => "other",
                }
            }
        }
    };
}

ops! {
    // unary math
    Abs => "abs", Neg => "neg", Exp => "exp", Exp2 => "exp2", Expm1 => "expm1",
    Log => "log", Log2 => "log2", Log10 => "log10", Log1p => "log1p",
    Sqrt => "sqrt", Rsqrt => "rsqrt", Sin => "sin", Cos => "cos", Tan => "tan",
    Asin => "asin", Acos => "acos", Atan => "atan", Sinh => "sinh", Cosh => "cosh",
    Tanh => "tanh", Asinh => "asinh", Acosh => "acosh", Atanh => "atanh",
    Sigmoid => "sigmoid", Relu => "relu", Erf => "erf", Erfc => "erfc", Erfinv => "erfinv",
    Floor => "floor", Ceil => "ceil", Round => "round", Trunc => "trunc", Frac => "frac",
    Sign => "sign", Sgn => "sgn", Signbit => "signbit", Reciprocal => "reciprocal",
    LogicalNot => "logical_not", BitwiseNot => "bitwise_not",
    IsNan => "isnan", IsInf => "isinf", IsPosInf => "isposinf", IsNegInf => "isneginf",
    IsFinite => "isfinite",
    Gelu => "gelu", GeluBackward => "gelu_backward", Silu => "silu", HardTanh => "hardtanh",
    LeakyRelu => "leaky_relu",
    Elu => "elu", NanToNum => "nan_to_num", Lgamma => "lgamma", Digamma => "digamma",
    Square => "square", Hardsigmoid => "hardsigmoid", Hardswish => "hardswish",
    Mish => "mish", Softplus => "softplus", Logit => "logit", Sinc => "sinc",
    Deg2Rad => "deg2rad", Rad2Deg => "rad2deg", Positive => "positive",
    // binary math
    Add => "add", Sub => "sub", Rsub => "rsub", Mul => "mul", Div => "div",
    Remainder => "remainder", Fmod => "fmod", Pow => "pow",
    Maximum => "maximum", Minimum => "minimum", Fmax => "fmax", Fmin => "fmin",
    Atan2 => "atan2", Hypot => "hypot", Copysign => "copysign",
    FloorDivide => "floor_divide", TrueDivide => "true_divide",
    Eq => "eq", Ne => "ne", Lt => "lt", Le => "le", Gt => "gt", Ge => "ge",
    LogicalAnd => "logical_and", LogicalOr => "logical_or", LogicalXor => "logical_xor",
    BitwiseAnd => "bitwise_and", BitwiseOr => "bitwise_or", BitwiseXor => "bitwise_xor",
    BitwiseLeftShift => "bitwise_left_shift", BitwiseRightShift => "bitwise_right_shift",
    Xlogy => "xlogy", LogAddExp => "logaddexp", Heaviside => "heaviside", Nextafter => "nextafter",
    // `rdyn::hash_mix`, rdyn's counter-based random bits (parsed from
    // `rdyn.hash_mix.*`, never from an `aten.` target).
    HashMix => "rdyn::hash_mix",
    // ternary and friends
    Where => "where", Clamp => "clamp", ClampMin => "clamp_min", ClampMax => "clamp_max",
    Lerp => "lerp", Addcmul => "addcmul", Addcdiv => "addcdiv",
    // copies and casts
    Clone => "clone", ToCopy => "_to_copy", Copy => "copy", Alias => "alias",
    // prims.convert_element_type: the one prim that decompositions leave
    // in graphs (upsampling's, under dynamic sizes).
    ConvertElementType => "convert_element_type",
    LiftFreshCopy => "lift_fresh_copy", Contiguous => "contiguous",
    // reductions
    Sum => "sum", Mean => "mean", Prod => "prod", Amax => "amax", Amin => "amin",
    Argmax => "argmax", Argmin => "argmin", Any => "any", All => "all",
    Var => "var", Std => "std", VarMean => "var_mean", Max => "max", Min => "min",
    Logsumexp => "logsumexp", Cumsum => "cumsum", Cumprod => "cumprod",
    Cummax => "cummax", Cummin => "cummin", Logcumsumexp => "logcumsumexp",
    AvgPool2d => "avg_pool2d", AvgPool3d => "avg_pool3d",
    AvgPool2dBackward => "avg_pool2d_backward", AvgPool3dBackward => "avg_pool3d_backward",
    DiagonalScatter => "diagonal_scatter",
    // sorting
    Sort => "sort", Topk => "topk", Kthvalue => "kthvalue", Median => "median", Nanmedian => "nanmedian",
    Searchsorted => "searchsorted", Bucketize => "bucketize",
    // views
    View => "view", UnsafeView => "_unsafe_view", Reshape => "reshape", Permute => "permute",
    Expand => "expand", Squeeze => "squeeze", Unsqueeze => "unsqueeze", Slice => "slice",
    Select => "select", AsStrided => "as_strided", Unfold => "unfold", T => "t",
    Transpose => "transpose", Diagonal => "diagonal", Detach => "detach",
    // data movement and creation
    Cat => "cat", ConstantPadNd => "constant_pad_nd", Gather => "gather", Index => "index",
    IndexSelect => "index_select", Embedding => "embedding", Scatter => "scatter",
    IndexPut => "index_put", Iota => "iota", Arange => "arange", Full => "full",
    FullLike => "full_like", Zeros => "zeros", ZerosLike => "zeros_like", Ones => "ones",
    OnesLike => "ones_like", ScalarTensor => "scalar_tensor", Fill => "fill",
    Empty => "empty", EmptyLike => "empty_like", EmptyStrided => "empty_strided",
    Repeat => "repeat", Flip => "flip", Roll => "roll", Tril => "tril", Triu => "triu",
    // library calls
    SplitWithSizes => "split_with_sizes", SliceScatter => "slice_scatter", SelectScatter => "select_scatter",
    EmptyPermuted => "empty_permuted", Angle => "angle", Polygamma => "polygamma",
    ScatterAdd => "scatter_add", ScatterReduce => "scatter_reduce", IndexReduce => "index_reduce",
    BatchNormInference => "_native_batch_norm_legit_no_training",
    NativeBatchNorm => "native_batch_norm",
    LayerNorm => "native_layer_norm",
    Mm => "mm", Bmm => "bmm", Addmm => "addmm", Convolution => "convolution",
    ConvolutionBackward => "convolution_backward",
    FlashAttentionCpu => "_scaled_dot_product_flash_attention_for_cpu",
    FlashAttentionCpuBackward => "_scaled_dot_product_flash_attention_for_cpu_backward",
    // special functions
    I0 => "i0", SpecialI0 => "special_modified_bessel_i0", SpecialI0e => "special_i0e",
    SpecialI1 => "special_i1", SpecialModI1 => "special_modified_bessel_i1", SpecialI1e => "special_i1e",
    SpecialK0 => "special_modified_bessel_k0", SpecialK1 => "special_modified_bessel_k1",
    SpecialK0e => "special_scaled_modified_bessel_k0", SpecialK1e => "special_scaled_modified_bessel_k1",
    SpecialJ0 => "special_bessel_j0", SpecialJ1 => "special_bessel_j1",
    SpecialY0 => "special_bessel_y0", SpecialY1 => "special_bessel_y1",
    SpecialSphericalJ0 => "special_spherical_bessel_j0", SpecialErfcx => "special_erfcx",
    SpecialAiryAi => "special_airy_ai",
    SpecialNdtri => "special_ndtri", SpecialZeta => "special_zeta", Igamma => "igamma", Igammac => "igammac",
    ChebyshevT => "special_chebyshev_polynomial_t", ChebyshevU => "special_chebyshev_polynomial_u",
    ChebyshevV => "special_chebyshev_polynomial_v", ChebyshevW => "special_chebyshev_polynomial_w",
    ShiftedChebyshevT => "special_shifted_chebyshev_polynomial_t",
    ShiftedChebyshevU => "special_shifted_chebyshev_polynomial_u",
    ShiftedChebyshevV => "special_shifted_chebyshev_polynomial_v",
    ShiftedChebyshevW => "special_shifted_chebyshev_polynomial_w",
    HermiteH => "special_hermite_polynomial_h", HermiteHe => "special_hermite_polynomial_he",
    LaguerreL => "special_laguerre_polynomial_l", LegendreP => "special_legendre_polynomial_p",
}

/// Split an FX target name (`aten.add.Tensor`, `aten::add.Tensor`,
/// `prims.convert_element_type.default`) into its
/// packet and overload.
pub fn parse_target(target: &str) -> (Op, &str) {
    if let Some(overload) = target.strip_prefix("prims.convert_element_type.") {
        return (Op::ConvertElementType, overload);
    }
    // rdyn's own ops (`python/rdyn/_random.py`).
    if let Some(overload) = target.strip_prefix("rdyn.hash_mix.") {
        return (Op::HashMix, overload);
    }
    let rest = target.strip_prefix("aten.").or_else(|| target.strip_prefix("aten::")).unwrap_or("");
    if rest.is_empty() {
        return (Op::Other, "");
    }
    let (packet, overload) = match rest.split_once('.') {
        Some((p, o)) => (p, o),
        None => (rest, "default"),
    };
    (Op::from_packet(packet), overload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_targets() {
        assert_eq!(parse_target("aten.add.Tensor"), (Op::Add, "Tensor"));
        assert_eq!(parse_target("aten.relu.default"), (Op::Relu, "default"));
        assert_eq!(parse_target("aten.frobnicate.default"), (Op::Other, "default"));
        assert_eq!(parse_target("prims.convert_element_type.default"), (Op::ConvertElementType, "default"));
        assert_eq!(parse_target("prims.mul.default").0, Op::Other);
    }
}
