//! PTX text → decoded instructions, for the subset rdyn's generator emits
//! (one `.entry` per module, virtual registers, one shared array).

use std::collections::HashMap;

use crate::error::SimError;

/// An operand or instruction type.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    Pred,
    U8,
    S8,
    U16,
    S16,
    F16,
    BF16,
    U32,
    S32,
    F32,
    U64,
    S64,
    F64,
}

impl Ty {
    fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "pred" => Ty::Pred,
            "u8" | "b8" => Ty::U8,
            "s8" => Ty::S8,
            "u16" | "b16" => Ty::U16,
            "s16" => Ty::S16,
            "f16" => Ty::F16,
            "bf16" => Ty::BF16,
            "u32" | "b32" => Ty::U32,
            "s32" => Ty::S32,
            "f32" => Ty::F32,
            "u64" | "b64" => Ty::U64,
            "s64" => Ty::S64,
            "f64" => Ty::F64,
            _ => return None,
        })
    }

    /// Bytes in memory.
    pub(crate) fn size(self) -> usize {
        match self {
            Ty::Pred | Ty::U8 | Ty::S8 => 1,
            Ty::U16 | Ty::S16 | Ty::F16 | Ty::BF16 => 2,
            Ty::U32 | Ty::S32 | Ty::F32 => 4,
            Ty::U64 | Ty::S64 | Ty::F64 => 8,
        }
    }

    pub(crate) fn is_float(self) -> bool {
        matches!(self, Ty::F16 | Ty::BF16 | Ty::F32 | Ty::F64)
    }

    pub(crate) fn is_signed(self) -> bool {
        matches!(self, Ty::S8 | Ty::S16 | Ty::S32 | Ty::S64)
    }
}

/// A `setp` comparison.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// Unordered forms: true when either operand is NaN.
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

/// The rounding of a `cvt`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Round {
    /// No modifier, or `.rn`/`.rz`/`.rm`/`.rp` between floats.
    Float,
    /// `.rni`, `.rzi`, `.rmi`, `.rpi`: to an integral value.
    Nearest,
    Zero,
    Down,
    Up,
}

/// A `shfl.sync` mode.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Shfl {
    Up,
    Down,
    Bfly,
    Idx,
}

/// A `testp` property.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Test {
    Finite,
    Infinite,
    Number,
    NotANumber,
    Normal,
    Subnormal,
}

/// Special registers.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Special {
    Tid,
    Ntid,
    Ctaid,
    Nctaid,
    LaneId,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Space {
    Global,
    Shared,
    Param,
}

#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) enum Op {
    Mov,
    Add,
    Sub,
    Mul,
    MulHi,
    Mad,
    Fma,
    Div,
    Rem,
    Neg,
    Abs,
    Min {
        nan: bool,
    },
    Max {
        nan: bool,
    },
    Copysign,
    And,
    Or,
    Xor,
    Not,
    Shl,
    Shr,
    Popc,
    Clz,
    Brev,
    Setp(Cmp),
    Selp,
    Testp(Test),
    /// `cvt` to `ty` from the second type.
    Cvt(Round, Ty),
    Cvta,
    Ld(Space),
    St(Space),
    Bra(usize),
    Bar,
    /// `bar.warp.sync`: the warp's lanes meet.
    WarpSync,
    Ret,
    /// `trap`: the kernel aborts (a device-side check failed).
    Trap,
    Shfl(Shfl),
    Ex2,
    Lg2,
    Sin,
    Cos,
    Tanh,
    Rcp,
    Sqrt,
    Rsqrt,
}

/// An operand.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Opd {
    Reg(u32),
    /// `!%pN`.
    NotReg(u32),
    Imm(u64),
    Special(Special),
    /// The shared array's address (its offset in the block's shared memory).
    Shared,
    /// `[%rdN+offset]`, or `[shared+offset]` as `Mem(None, …)`.
    Mem(Option<u32>, i64),
    /// `[name]` of a kernel parameter.
    Param(usize),
    /// `{%a, %b, …}`: a vector of registers.
    Vector(Vec<u32>),
    Label,
}

#[derive(Clone, Debug)]
pub(crate) struct Ins {
    pub guard: Option<(u32, bool)>,
    pub op: Op,
    pub ty: Ty,
    pub opds: Vec<Opd>,
    /// Source line (1-based), for errors.
    pub line: usize,
}

/// One kernel, decoded.
#[derive(Debug)]
pub struct Kernel {
    pub name: String,
    pub(crate) params: usize,
    pub(crate) shared_bytes: usize,
    pub(crate) registers: usize,
    pub(crate) code: Vec<Ins>,
    pub(crate) lines: Vec<String>,
}

fn bad(line: usize, text: &str, why: impl Into<String>) -> SimError {
    SimError::Parse { line, text: text.trim().to_string(), why: why.into() }
}

/// Split an operand list at top-level commas (not inside `{}` or `[]`).
fn split_operands(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !s[start..].trim().is_empty() {
        out.push(s[start..].trim());
    }
    out
}

fn immediate(s: &str) -> Option<u64> {
    if let Some(hex) = s.strip_prefix("0f").or_else(|| s.strip_prefix("0F")) {
        return u32::from_str_radix(hex, 16).ok().map(u64::from);
    }
    if let Some(hex) = s.strip_prefix("0d").or_else(|| s.strip_prefix("0D")) {
        return u64::from_str_radix(hex, 16).ok();
    }
    if let Some(hex) = s.strip_prefix("0x") {
        return u64::from_str_radix(hex.trim_end_matches('U'), 16).ok();
    }
    s.trim_end_matches('U').parse::<i64>().ok().map(|v| v as u64)
}

struct Decoder<'a> {
    regs: HashMap<String, u32>,
    params: &'a [String],
    shared: Option<&'a str>,
}

impl Decoder<'_> {
    fn reg(&mut self, name: &str) -> u32 {
        let n = self.regs.len() as u32;
        *self.regs.entry(name.to_string()).or_insert(n)
    }

    fn operand(&mut self, s: &str) -> Option<Opd> {
        let s = s.trim();
        if let Some(inner) = s.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
            return Some(Opd::Vector(inner.split(',').map(|r| self.reg(r.trim())).collect()));
        }
        if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            if let Some(i) = self.params.iter().position(|p| p == inner) {
                return Some(Opd::Param(i));
            }
            let (base, offset) = match inner.find(['+', '-']) {
                Some(at) if at > 0 => (inner[..at].trim(), inner[at..].replace('+', "").trim().parse::<i64>().ok()?),
                _ => (inner.trim(), 0),
            };
            if Some(base) == self.shared {
                return Some(Opd::Mem(None, offset));
            }
            return base.starts_with('%').then(|| Opd::Mem(Some(self.reg(base)), offset));
        }
        if let Some(r) = s.strip_prefix('!') {
            return Some(Opd::NotReg(self.reg(r)));
        }
        let special = match s {
            "%tid.x" => Some(Special::Tid),
            "%ntid.x" => Some(Special::Ntid),
            "%ctaid.x" => Some(Special::Ctaid),
            "%nctaid.x" => Some(Special::Nctaid),
            "%laneid" => Some(Special::LaneId),
            _ => None,
        };
        if let Some(sp) = special {
            return Some(Opd::Special(sp));
        }
        if s.starts_with('%') {
            return Some(Opd::Reg(self.reg(s)));
        }
        if Some(s) == self.shared {
            return Some(Opd::Shared);
        }
        immediate(s).map(Opd::Imm)
    }
}

/// The value of the first modifier of `table` among `parts`.
fn pick<T: Copy>(parts: &[&str], table: &[(&str, T)]) -> Option<T> {
    table.iter().find(|(m, _)| parts.contains(m)).map(|(_, v)| *v)
}

/// Decode an opcode's dotted parts into an op and its type.
fn opcode(parts: &[&str], labels: &HashMap<String, usize>, target: Option<&str>) -> Option<(Op, Ty)> {
    let last_ty = parts.iter().rev().find_map(|p| Ty::parse(p));
    let has = |m: &str| parts.contains(&m);
    let ty = last_ty.unwrap_or(Ty::U32);
    let op = match parts[0] {
        "mov" => Op::Mov,
        "add" => Op::Add,
        "sub" => Op::Sub,
        "mul" if has("hi") => Op::MulHi,
        "mul" => Op::Mul,
        "mad" => Op::Mad,
        "fma" => Op::Fma,
        "div" => Op::Div,
        "rem" => Op::Rem,
        "neg" => Op::Neg,
        "abs" => Op::Abs,
        "min" => Op::Min { nan: has("NaN") },
        "max" => Op::Max { nan: has("NaN") },
        "copysign" => Op::Copysign,
        "and" => Op::And,
        "or" => Op::Or,
        "xor" => Op::Xor,
        "not" => Op::Not,
        "shl" => Op::Shl,
        "shr" => Op::Shr,
        "popc" => Op::Popc,
        "clz" => Op::Clz,
        "brev" => Op::Brev,
        "selp" => Op::Selp,
        "cvta" => Op::Cvta,
        "bar" | "barrier" if has("warp") => Op::WarpSync,
        "bar" | "barrier" => Op::Bar,
        "ret" | "exit" => Op::Ret,
        "trap" => Op::Trap,
        "ex2" => Op::Ex2,
        "lg2" => Op::Lg2,
        "sin" => Op::Sin,
        "cos" => Op::Cos,
        "tanh" => Op::Tanh,
        "rcp" => Op::Rcp,
        "sqrt" => Op::Sqrt,
        "rsqrt" => Op::Rsqrt,
        "bra" => Op::Bra(*labels.get(target?)?),
        "setp" => Op::Setp(match *parts.get(1)? {
            "eq" => Cmp::Eq,
            "ne" => Cmp::Ne,
            "lt" | "lo" => Cmp::Lt,
            "le" | "ls" => Cmp::Le,
            "gt" | "hi" => Cmp::Gt,
            "ge" | "hs" => Cmp::Ge,
            "equ" => Cmp::Equ,
            "neu" => Cmp::Neu,
            "ltu" => Cmp::Ltu,
            "leu" => Cmp::Leu,
            "gtu" => Cmp::Gtu,
            "geu" => Cmp::Geu,
            "num" => Cmp::Num,
            "nan" => Cmp::Nan,
            _ => return None,
        }),
        "testp" => Op::Testp(match *parts.get(1)? {
            "finite" => Test::Finite,
            "infinite" => Test::Infinite,
            "number" => Test::Number,
            "notanumber" => Test::NotANumber,
            "normal" => Test::Normal,
            "subnormal" => Test::Subnormal,
            _ => return None,
        }),
        "cvt" => {
            let types: Vec<Ty> = parts.iter().filter_map(|p| Ty::parse(p)).collect();
            let modes = [("rni", Round::Nearest), ("rzi", Round::Zero), ("rmi", Round::Down), ("rpi", Round::Up)];
            let round = pick(parts, &modes).unwrap_or(Round::Float);
            let [to, from] = types[..] else { return None };
            return Some((Op::Cvt(round, from), to));
        }
        "ld" | "st" => {
            let space = pick(parts, &[("global", Space::Global), ("shared", Space::Shared), ("param", Space::Param)])?;
            if parts[0] == "ld" {
                Op::Ld(space)
            } else {
                Op::St(space)
            }
        }
        "shfl" => {
            Op::Shfl(pick(parts, &[("bfly", Shfl::Bfly), ("down", Shfl::Down), ("up", Shfl::Up), ("idx", Shfl::Idx)])?)
        }
        _ => return None,
    };
    Some((op, ty))
}

/// The parameter names of `.param .u64 NAME` declarations, in order.
fn param_names(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(".param"))
        .filter_map(|rest| rest.trim().trim_end_matches(',').split_whitespace().last().map(str::to_string))
        .collect()
}

/// Decode a module holding one `.entry`.
pub fn parse(text: &str) -> Result<Kernel, SimError> {
    let name = text
        .lines()
        .find_map(|l| l.trim().strip_prefix(".visible .entry "))
        .map(|r| r.trim_end_matches('(').trim().to_string())
        .ok_or_else(|| bad(0, "", "no .visible .entry"))?;
    let params = param_names(text);
    // `.shared .align A .b8 NAME[BYTES];`
    let shared = text.lines().find_map(|l| {
        let rest = l.trim().strip_prefix(".shared")?;
        let decl = rest.split_whitespace().last()?.trim_end_matches(';');
        let (sym, bytes) = decl.split_once('[')?;
        Some((sym.to_string(), bytes.trim_end_matches(']').parse::<usize>().ok()?))
    });
    let body_start = text.find('{').ok_or_else(|| bad(0, "", "no kernel body"))?;
    let body: Vec<(usize, &str)> = text[body_start..]
        .lines()
        .enumerate()
        .map(|(i, l)| (i + text[..body_start].lines().count(), l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('.') && !l.starts_with("//") && *l != "{" && *l != "}")
        .collect();
    // Labels first: each names the index of the next instruction.
    let mut labels = HashMap::new();
    let mut count = 0;
    for (_, l) in &body {
        match l.strip_suffix(':') {
            Some(label) => {
                labels.insert(label.to_string(), count);
            }
            None => count += 1,
        }
    }
    let mut dec = Decoder { regs: HashMap::new(), params: &params, shared: shared.as_ref().map(|s| s.0.as_str()) };
    let mut code = Vec::new();
    let mut lines = Vec::new();
    for (line, l) in body {
        if l.ends_with(':') {
            continue;
        }
        let stmt = l.trim_end_matches(';').trim();
        let (guard, stmt) = match stmt.strip_prefix('@') {
            Some(rest) => {
                let (g, rest) =
                    rest.split_once(char::is_whitespace).ok_or_else(|| bad(line, l, "guard without instruction"))?;
                let (neg, g) = g.strip_prefix('!').map_or((false, g), |g| (true, g));
                (Some((dec.reg(g), neg)), rest.trim())
            }
            None => (None, stmt),
        };
        let (opcode_text, rest) = stmt.split_once(char::is_whitespace).unwrap_or((stmt, ""));
        let parts: Vec<&str> = opcode_text.split('.').collect();
        let target = (parts[0] == "bra").then(|| rest.trim());
        let (op, ty) = opcode(&parts, &labels, target).ok_or_else(|| bad(line, l, "unknown instruction"))?;
        let opds = if matches!(op, Op::Bra(_)) {
            vec![Opd::Label]
        } else {
            split_operands(rest)
                .into_iter()
                .map(|o| dec.operand(o).ok_or_else(|| bad(line, l, format!("operand {o:?}"))))
                .collect::<Result<Vec<_>, _>>()?
        };
        if matches!(op, Op::Ld(_) | Op::St(_)) {
            // `.v2`/`.v4` must name as many registers as the vector holds.
            let lanes = parts.iter().find_map(|p| p.strip_prefix('v').and_then(|n| n.parse::<usize>().ok()));
            let regs = opds.iter().find_map(|o| if let Opd::Vector(r) = o { Some(r.len()) } else { None });
            if lanes != regs {
                return Err(bad(line, l, format!("vector width {lanes:?} with {regs:?} registers")));
            }
        }
        code.push(Ins { guard, op, ty, opds, line });
        lines.push(l.to_string());
    }
    Ok(Kernel {
        name,
        params: params.len(),
        shared_bytes: shared.as_ref().map_or(0, |s| s.1),
        registers: dec.regs.len(),
        code,
        lines,
    })
}
