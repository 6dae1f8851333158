//! What rdyn knows about each op, in one place: the scalar op each
//! elementwise ATen op is ([`Op::unary_op`], [`Op::binary_op`]), the ATen
//! views ([`Op::is_view`]), and per scalar op ([`UnaryOp::info`],
//! [`BinaryOp::info`]) its cost to lowering, the operands it is defined on,
//! whether its result is a 0/1 test, and how codegen-cpu's compiled stages
//! run it.
//!
//! Every crate that asks one of these questions reads it here, so a new op
//! is described once: the tables are matches without a wildcard arm, and
//! the compiler names each row a new variant lacks.

use crate::loops::{BinaryOp, UnaryOp};
use crate::op::Op;

/// What an op costs when lowering decides whether a value with several
/// readers is recomputed by each or stored once (`lowering/src/lowerer.rs`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Cost {
    /// An instruction or two.
    Cheap,
    /// A transcendental, a special function or a libm call: as much as a
    /// whole recomputed body may cost.
    Costly,
}

/// The operands an op is defined on.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Operands {
    /// Integers and bools as well as floats.
    Any,
    /// Floats only: lowering leaves it to eager on integers.
    Float,
}

/// What an op's result is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ResultKind {
    /// A number of the result's dtype.
    Value,
    /// A comparison: 0 or 1, of operands read in their own kind.
    Comparison,
    /// `and`, `or`, `xor` (unary `not`): 0 or 1, of operands read as truth values
    /// in their own kind.
    Logical,
    /// A test of one value (`isnan`, `isinf`, `signbit`): 0 or 1, its
    /// operand read in its own kind.
    Test,
}

/// How codegen-cpu's compiled float32 stages run an op
/// (`codegen-cpu/src/jit/analysis.rs`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Jit {
    /// As a few inline instructions per lane.
    Inline,
    /// As a call of the interpreter's routine over a tile (`rdyn_unary_tile`):
    /// inline, a transcendental loses to the interpreter's 8-lane loops.
    Call,
    /// Not compiled: a stage using it stays interpreted.
    Interpreted,
}

/// One row of the scalar ops' table.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Info {
    pub cost: Cost,
    pub operands: Operands,
    pub result: ResultKind,
    pub jit: Jit,
}

const fn row(cost: Cost, operands: Operands, result: ResultKind, jit: Jit) -> Info {
    Info { cost, operands, result, jit }
}

impl UnaryOp {
    /// This op's row of the table.
    pub const fn info(self) -> Info {
        use Cost::*;
        use Jit::*;
        use Operands::*;
        use ResultKind::*;
        use UnaryOp as U;
        match self {
            U::Neg | U::Abs | U::Floor | U::Ceil | U::Round | U::Trunc => row(Cheap, Any, Value, Inline),
            U::Sign | U::BitNot => row(Cheap, Any, Value, Interpreted),
            U::Not => row(Cheap, Any, Logical, Inline),
            U::IsNan | U::IsInf => row(Cheap, Any, Test, Inline),
            U::Signbit => row(Cheap, Any, Test, Interpreted),
            U::Sqrt | U::Rsqrt | U::Reciprocal => row(Cheap, Float, Value, Inline),
            U::Exp | U::Exp2 | U::Expm1 | U::Log | U::Log2 | U::Log10 | U::Log1p => row(Costly, Float, Value, Call),
            U::Sin | U::Cos | U::Tan | U::Asin | U::Acos | U::Atan => row(Costly, Float, Value, Call),
            U::Sinh | U::Cosh | U::Tanh | U::Asinh | U::Acosh | U::Atanh => row(Costly, Float, Value, Call),
            U::Sigmoid | U::Gelu | U::GeluGrad => row(Costly, Float, Value, Call),
            U::Erf | U::Erfc | U::Erfinv | U::Lgamma | U::Digamma => row(Costly, Float, Value, Call),
            U::I0 | U::I0e | U::I1 | U::I1e | U::K0 | U::K1 | U::K0e | U::K1e => row(Costly, Float, Value, Interpreted),
            U::BesselJ0 | U::BesselJ1 | U::BesselY0 | U::BesselY1 | U::SphericalJ0 => {
                row(Costly, Float, Value, Interpreted)
            }
            U::AiryAi | U::Erfcx | U::Ndtri => row(Costly, Float, Value, Interpreted),
        }
    }
}

impl BinaryOp {
    /// This op's row of the table.
    pub const fn info(self) -> Info {
        use BinaryOp as B;
        use Cost::*;
        use Jit::*;
        use Operands::*;
        use ResultKind::*;
        match self {
            B::Add | B::Sub | B::Mul | B::Div | B::Max | B::Min => row(Cheap, Any, Value, Inline),
            // `x ** 2` is compiled inline too (codegen-cpu reads the constant).
            B::Pow => row(Costly, Any, Value, Interpreted),
            B::FloorDiv | B::TruncDiv | B::Rem | B::Fmod | B::Fmax | B::Fmin => row(Cheap, Any, Value, Interpreted),
            B::BitAnd | B::BitOr | B::BitXor | B::Shl | B::Shr | B::HashMix => row(Cheap, Any, Value, Interpreted),
            B::Eq | B::Ne | B::Lt | B::Le | B::Gt | B::Ge => row(Cheap, Any, Comparison, Inline),
            B::And | B::Or | B::Xor => row(Cheap, Any, Logical, Interpreted),
            B::Copysign => row(Cheap, Float, Value, Interpreted),
            B::Atan2 | B::Hypot | B::Nextafter => row(Costly, Float, Value, Interpreted),
            B::Zeta | B::Igamma | B::Igammac => row(Costly, Float, Value, Interpreted),
            // Polynomials: a short recurrence, and float only.
            B::ChebyshevT | B::ChebyshevU | B::ChebyshevV | B::ChebyshevW => row(Cheap, Float, Value, Interpreted),
            B::ShiftedChebyshevT | B::ShiftedChebyshevU | B::ShiftedChebyshevV | B::ShiftedChebyshevW => {
                row(Cheap, Float, Value, Interpreted)
            }
            B::HermiteH | B::HermiteHe | B::LaguerreL | B::LegendreP => row(Cheap, Float, Value, Interpreted),
        }
    }

    /// `eq`, `ne`, `lt`, `le`, `gt`, `ge`.
    pub const fn is_comparison(self) -> bool {
        matches!(self.info().result, ResultKind::Comparison)
    }

    /// `and`, `or`, `xor` of truth values.
    pub const fn is_logical(self) -> bool {
        matches!(self.info().result, ResultKind::Logical)
    }
}

impl UnaryOp {
    /// `isnan`, `isinf`, `signbit`: a test of a value.
    pub const fn is_test(self) -> bool {
        matches!(self.info().result, ResultKind::Test)
    }

    /// Whether the result is 0 or 1 computed from the operand read in its own
    /// kind (`not`, `isnan`, `isinf`, `signbit`): the operand's kind need not
    /// be the result's.
    pub const fn is_predicate(self) -> bool {
        matches!(self.info().result, ResultKind::Logical | ResultKind::Test)
    }
}

impl Op {
    /// Whether the op's output is a view of its first tensor argument in
    /// eager PyTorch (it shares that tensor's storage).
    pub fn is_view(self) -> bool {
        use Op::*;
        matches!(
            self,
            View | UnsafeView
                | Reshape
                | Permute
                | Expand
                | Squeeze
                | Unsqueeze
                | Slice
                | Select
                | AsStrided
                | Unfold
                | T
                | Transpose
                | Diagonal
                | Detach
                | Alias
                | SplitWithSizes
        )
    }

    /// The one-operand scalar op this ATen op is, applied to its first
    /// argument. Lowering refines a few by their arguments: `bitwise_not` of
    /// bools is `not`, `round` with `decimals` and tanh-approximated `gelu`
    /// are expressions.
    pub fn unary_op(self) -> Option<UnaryOp> {
        use UnaryOp as U;
        Some(match self {
            Op::Abs => U::Abs,
            Op::Neg => U::Neg,
            Op::Exp => U::Exp,
            Op::Exp2 => U::Exp2,
            Op::Expm1 => U::Expm1,
            Op::Log => U::Log,
            Op::Log2 => U::Log2,
            Op::Log10 => U::Log10,
            Op::Log1p => U::Log1p,
            Op::Sqrt => U::Sqrt,
            Op::Rsqrt => U::Rsqrt,
            Op::Sin => U::Sin,
            Op::Cos => U::Cos,
            Op::Tan => U::Tan,
            Op::Asin => U::Asin,
            Op::Acos => U::Acos,
            Op::Atan => U::Atan,
            Op::Sinh => U::Sinh,
            Op::Cosh => U::Cosh,
            Op::Tanh => U::Tanh,
            Op::Asinh => U::Asinh,
            Op::Acosh => U::Acosh,
            Op::Atanh => U::Atanh,
            Op::Sigmoid => U::Sigmoid,
            Op::Erf => U::Erf,
            Op::Erfc => U::Erfc,
            Op::Erfinv => U::Erfinv,
            Op::Gelu => U::Gelu,
            Op::Floor => U::Floor,
            Op::Ceil => U::Ceil,
            Op::Round => U::Round,
            Op::Trunc => U::Trunc,
            Op::Sign | Op::Sgn => U::Sign,
            Op::Reciprocal => U::Reciprocal,
            Op::LogicalNot => U::Not,
            Op::BitwiseNot => U::BitNot,
            Op::IsNan => U::IsNan,
            Op::IsInf => U::IsInf,
            Op::Signbit => U::Signbit,
            Op::Lgamma => U::Lgamma,
            Op::Digamma => U::Digamma,
            Op::I0 | Op::SpecialI0 => U::I0,
            Op::SpecialI0e => U::I0e,
            Op::SpecialI1 | Op::SpecialModI1 => U::I1,
            Op::SpecialI1e => U::I1e,
            Op::SpecialK0 => U::K0,
            Op::SpecialK1 => U::K1,
            Op::SpecialK0e => U::K0e,
            Op::SpecialK1e => U::K1e,
            Op::SpecialJ0 => U::BesselJ0,
            Op::SpecialJ1 => U::BesselJ1,
            Op::SpecialY0 => U::BesselY0,
            Op::SpecialY1 => U::BesselY1,
            Op::SpecialSphericalJ0 => U::SphericalJ0,
            Op::SpecialAiryAi => U::AiryAi,
            Op::SpecialErfcx => U::Erfcx,
            Op::SpecialNdtri => U::Ndtri,
            _ => return None,
        })
    }

    /// The two-operand scalar op this ATen op is, of its first two
    /// arguments (`rsub`'s swapped). Lowering refines a few by their
    /// arguments: a division's `rounding_mode`, bitwise ops of bools.
    pub fn binary_op(self) -> Option<BinaryOp> {
        use BinaryOp as B;
        Some(match self {
            Op::Add => B::Add,
            Op::Sub | Op::Rsub => B::Sub,
            Op::Mul => B::Mul,
            Op::Div | Op::TrueDivide => B::Div,
            Op::FloorDivide => B::FloorDiv,
            Op::Remainder => B::Rem,
            Op::Fmod => B::Fmod,
            Op::Pow => B::Pow,
            Op::Maximum => B::Max,
            Op::Minimum => B::Min,
            Op::Fmax => B::Fmax,
            Op::Fmin => B::Fmin,
            Op::Atan2 => B::Atan2,
            Op::Hypot => B::Hypot,
            Op::Copysign => B::Copysign,
            Op::Nextafter => B::Nextafter,
            Op::Eq => B::Eq,
            Op::Ne => B::Ne,
            Op::Lt => B::Lt,
            Op::Le => B::Le,
            Op::Gt => B::Gt,
            Op::Ge => B::Ge,
            Op::LogicalAnd => B::And,
            Op::LogicalOr => B::Or,
            Op::LogicalXor => B::Xor,
            Op::BitwiseAnd => B::BitAnd,
            Op::BitwiseOr => B::BitOr,
            Op::BitwiseXor => B::BitXor,
            Op::BitwiseLeftShift => B::Shl,
            Op::BitwiseRightShift => B::Shr,
            Op::SpecialZeta => B::Zeta,
            Op::Igamma => B::Igamma,
            Op::Igammac => B::Igammac,
            Op::ChebyshevT => B::ChebyshevT,
            Op::ChebyshevU => B::ChebyshevU,
            Op::ChebyshevV => B::ChebyshevV,
            Op::ChebyshevW => B::ChebyshevW,
            Op::ShiftedChebyshevT => B::ShiftedChebyshevT,
            Op::ShiftedChebyshevU => B::ShiftedChebyshevU,
            Op::ShiftedChebyshevV => B::ShiftedChebyshevV,
            Op::ShiftedChebyshevW => B::ShiftedChebyshevW,
            Op::HermiteH => B::HermiteH,
            Op::HermiteHe => B::HermiteHe,
            Op::LaguerreL => B::LaguerreL,
            Op::LegendreP => B::LegendreP,
            Op::HashMix => B::HashMix,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ATen op's scalar form is the scalar op of the same name unless
    /// its row renames it: a slip of a row shows here.
    #[test]
    fn scalar_forms_are_named_like_their_ops() {
        for name in ["abs", "exp", "log1p", "erfinv", "gelu", "signbit", "digamma", "add", "fmod", "nextafter", "ge"] {
            let op = Op::from_packet(name);
            let scalar = op.unary_op().map(|u| u.name()).or_else(|| op.binary_op().map(|b| b.name()));
            assert_eq!(scalar, Some(name), "{op:?}");
        }
        assert_eq!(Op::Sgn.unary_op(), Some(UnaryOp::Sign));
        assert_eq!(Op::Rsub.binary_op(), Some(BinaryOp::Sub));
        assert_eq!((Op::Where.unary_op(), Op::Where.binary_op()), (None, None));
    }

    #[test]
    fn predicates_and_comparisons() {
        let predicates: Vec<UnaryOp> = UnaryOp::ALL.iter().copied().filter(|u| u.is_predicate()).collect();
        assert_eq!(predicates, [UnaryOp::Not, UnaryOp::IsNan, UnaryOp::IsInf, UnaryOp::Signbit]);
        let tests: Vec<UnaryOp> = UnaryOp::ALL.iter().copied().filter(|u| u.is_test()).collect();
        assert_eq!(tests, [UnaryOp::IsNan, UnaryOp::IsInf, UnaryOp::Signbit]);
        let comparisons = BinaryOp::ALL.iter().filter(|b| b.is_comparison()).count();
        assert_eq!(comparisons, 6);
        let logical: Vec<BinaryOp> = BinaryOp::ALL.iter().copied().filter(|b| b.is_logical()).collect();
        assert_eq!(logical, [BinaryOp::And, BinaryOp::Or, BinaryOp::Xor]);
    }
}
