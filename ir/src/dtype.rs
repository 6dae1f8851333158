//! Element types and devices, named as PyTorch names them.

use std::fmt;

/// Tensor element type. The names match `str(torch.dtype)` without the
/// `torch.` prefix, so the text format and Python agree.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    U8,
    I8,
    I16,
    I32,
    I64,
    F16,
    BF16,
    F32,
    F64,
}

/// The register class a value is computed in: narrow floats are widened to
/// `F32`, every integer and bool to `I64`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    F32,
    F64,
    I64,
}

impl DType {
    pub const ALL: [DType; 10] = [
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        let name = name.strip_prefix("torch.").unwrap_or(name);
        DType::ALL.into_iter().find(|d| d.name() == name).or(match name {
            "float" => Some(DType::F32),
            "double" => Some(DType::F64),
            "half" => Some(DType::F16),
            "long" => Some(DType::I64),
            "int" => Some(DType::I32),
            _ => None,
        })
    }

    pub fn itemsize(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::U8 | DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// `v` converted to this float dtype and back, as ATen converts a
    /// Python float (through float32, then to float16 or bfloat16 to
    /// nearest, ties to even); other dtypes keep it.
    pub fn round_float(self, v: f64) -> f64 {
        match self {
            DType::F32 => v as f32 as f64,
            DType::F16 => half::f16::from_f32(v as f32).to_f64(),
            DType::BF16 => half::bf16::from_f32(v as f32).to_f64(),
            _ => v,
        }
    }

    /// `v` converted to this integer dtype as C converts it (wrapping
    /// around; nonzero is true for bool); other dtypes keep it.
    pub fn wrap_int(self, v: i64) -> i64 {
        match self {
            DType::Bool => (v != 0) as i64,
            DType::U8 => v as u8 as i64,
            DType::I8 => v as i8 as i64,
            DType::I16 => v as i16 as i64,
            DType::I32 => v as i32 as i64,
            _ => v,
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            DType::F16 | DType::BF16 | DType::F32 => Kind::F32,
            DType::F64 => Kind::F64,
            _ => Kind::I64,
        }
    }

    /// PyTorch's promotion between two tensor dtypes of the same category.
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        match (a, b) {
            (Bool, x) | (x, Bool) => x,
            (F16, BF16) | (BF16, F16) => F32,
            (x, y) if x.is_float() && !y.is_float() => x,
            (x, y) if y.is_float() && !x.is_float() => y,
            (U8, I8) | (I8, U8) => I16,
            (x, y) => {
                if x.rank() >= y.rank() {
                    x
                } else {
                    y
                }
            }
        }
    }

    fn rank(self) -> u8 {
        match self {
            DType::Bool => 0,
            DType::U8 => 1,
            DType::I8 => 2,
            DType::I16 => 3,
            DType::I32 => 4,
            DType::I64 => 5,
            DType::F16 => 6,
            DType::BF16 => 7,
            DType::F32 => 8,
            DType::F64 => 9,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a tensor lives.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    Cuda(u16),
    Meta,
}

impl Device {
    pub fn parse(text: &str) -> Option<Device> {
        match text {
            "cpu" => Some(Device::Cpu),
            "meta" => Some(Device::Meta),
            "cuda" => Some(Device::Cuda(0)),
            other => other.strip_prefix("cuda:").and_then(|n| n.parse().ok()).map(Device::Cuda),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
            Device::Meta => f.write_str("meta"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_follows_torch() {
        assert_eq!(DType::promote(DType::I32, DType::F16), DType::F16);
        assert_eq!(DType::promote(DType::U8, DType::I8), DType::I16);
        assert_eq!(DType::promote(DType::F16, DType::BF16), DType::F32);
        assert_eq!(DType::promote(DType::Bool, DType::I64), DType::I64);
        assert_eq!(DType::from_name("torch.float32"), Some(DType::F32));
    }

    #[test]
    fn integers_wrap_as_c_converts_them() {
        assert_eq!(DType::U8.wrap_int(-3), 253);
        assert_eq!(DType::I8.wrap_int(300), 44);
        assert_eq!(DType::I16.wrap_int(40_000), -25_536);
        assert_eq!(DType::I32.wrap_int(1 << 32), 0);
        assert_eq!(DType::Bool.wrap_int(-7), 1);
        assert_eq!(DType::I64.wrap_int(-3), -3);
    }
}
