//! The reference evaluator: a [`SpecialFn`] over float64, each statement
//! as Rust computes it (the CPU backend's special functions).

use super::{Binary, Cmp, Logic, SpecialFn, Stmt, Unary};

/// Register files up to this size live on the stack.
const STACK_REGS: usize = 96;
const STACK_FLAGS: usize = 48;

enum Flow {
    Next,
    Break,
    Return(f64),
}

struct Machine<'a> {
    r: &'a mut [f64],
    p: &'a mut [bool],
}

/// `f` at `args` (missing arguments read as NaN). A body that ends
/// without `return` (which the builder never produces) gives NaN.
pub fn eval(f: &SpecialFn, args: &[f64]) -> f64 {
    let (nr, np) = (f.regs as usize, f.flags as usize);
    let (mut rs, mut ps) = ([0.0; STACK_REGS], [false; STACK_FLAGS]);
    let (mut rh, mut ph) = (Vec::new(), Vec::new());
    let r: &mut [f64] = if nr <= STACK_REGS {
        &mut rs[..nr]
    } else {
        rh.resize(nr, 0.0);
        &mut rh
    };
    let p: &mut [bool] = if np <= STACK_FLAGS {
        &mut ps[..np]
    } else {
        ph.resize(np, false);
        &mut ph
    };
    for &(reg, v) in &f.consts {
        r[reg.0 as usize] = v;
    }
    for (i, reg) in f.params.iter().enumerate() {
        r[reg.0 as usize] = args.get(i).copied().unwrap_or(f64::NAN);
    }
    match (Machine { r, p }).block(&f.body) {
        Flow::Return(v) => v,
        Flow::Next | Flow::Break => f64::NAN,
    }
}

fn unary(op: Unary, a: f64) -> f64 {
    match op {
        Unary::Neg => -a,
        Unary::Abs => a.abs(),
        Unary::Sqrt => a.sqrt(),
        Unary::Floor => a.floor(),
        Unary::Exp => a.exp(),
        Unary::Log => a.ln(),
        Unary::Sin => a.sin(),
        Unary::Cos => a.cos(),
        Unary::Sinh => a.sinh(),
        Unary::Cosh => a.cosh(),
        Unary::Erfc => libm::erfc(a),
        Unary::Log1p => a.ln_1p(),
        Unary::Expm1 => a.exp_m1(),
        Unary::Lgamma => libm::lgamma(a),
        Unary::Tgamma => libm::tgamma(a),
        Unary::Acos => a.acos(),
    }
}

fn binary(op: Binary, a: f64, b: f64) -> f64 {
    match op {
        Binary::Add => a + b,
        Binary::Sub => a - b,
        Binary::Mul => a * b,
        Binary::Div => a / b,
        // As `f64::min`/`max`, with the sign of equal zeros pinned down.
        Binary::Min => {
            if b < a || a.is_nan() {
                b
            } else {
                a
            }
        }
        Binary::Max => {
            if b > a || a.is_nan() {
                b
            } else {
                a
            }
        }
        Binary::Pow => a.powf(b),
    }
}

fn cmp(op: Cmp, a: f64, b: f64) -> bool {
    match op {
        Cmp::Lt => a < b,
        Cmp::Le => a <= b,
        Cmp::Gt => a > b,
        Cmp::Ge => a >= b,
        Cmp::Eq => a == b,
        Cmp::Ne => a != b,
    }
}

impl Machine<'_> {
    fn block(&mut self, stmts: &[Stmt]) -> Flow {
        for s in stmts {
            let (r, p) = (&mut *self.r, &mut *self.p);
            match s {
                Stmt::Copy { dst, src } => r[dst.0 as usize] = r[src.0 as usize],
                Stmt::Unary { dst, op, a } => r[dst.0 as usize] = unary(*op, r[a.0 as usize]),
                Stmt::Fma { dst, a, b, c } => {
                    r[dst.0 as usize] = r[a.0 as usize].mul_add(r[b.0 as usize], r[c.0 as usize]);
                }
                Stmt::Binary { dst, op, a, b } => r[dst.0 as usize] = binary(*op, r[a.0 as usize], r[b.0 as usize]),
                Stmt::Poly { dst, coeffs, z } => {
                    let z = r[z.0 as usize];
                    r[dst.0 as usize] = coeffs.iter().fold(0.0, |acc, &c| acc * z + c);
                }
                Stmt::Cmp { dst, op, a, b } => p[dst.0 as usize] = cmp(*op, r[a.0 as usize], r[b.0 as usize]),
                Stmt::Logic { dst, op, a, b } => {
                    let (a, b) = (p[a.0 as usize], p[b.0 as usize]);
                    p[dst.0 as usize] = match op {
                        Logic::And => a && b,
                        Logic::Or => a || b,
                    };
                }
                Stmt::Not { dst, a } => p[dst.0 as usize] = !p[a.0 as usize],
                Stmt::Select { dst, cond, a, b } => {
                    r[dst.0 as usize] = if p[cond.0 as usize] { r[a.0 as usize] } else { r[b.0 as usize] };
                }
                Stmt::If { cond, then, els } => {
                    let taken = if p[cond.0 as usize] { then } else { els };
                    let flow = self.block(taken);
                    if !matches!(flow, Flow::Next) {
                        return flow;
                    }
                }
                Stmt::Loop { counter, first, max_iters, body } => {
                    let mut k = *first;
                    for _ in 0..*max_iters {
                        self.r[counter.0 as usize] = k;
                        match self.block(body) {
                            Flow::Next => k += 1.0,
                            Flow::Break => break,
                            ret @ Flow::Return(_) => return ret,
                        }
                    }
                }
                Stmt::Break { cond } => {
                    if p[cond.0 as usize] {
                        return Flow::Break;
                    }
                }
                Stmt::Return { value } => return Flow::Return(r[value.0 as usize]),
            }
        }
        Flow::Next
    }
}
