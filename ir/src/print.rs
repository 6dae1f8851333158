//! Text forms: of index expressions ([`Expr`], [`Atom`]) and of a
//! [`Program`]: what `RDYN_LOG=ir` prints, what the IR tests compare against
//! and what `parse.rs` reads back. `parse.rs` reads it back, so everything needed to
//! rebuild the program is written (an ATen call's graph node included).

use std::fmt::{self, Write};

use crate::expr::{Atom, Expr};
use crate::loops::{BufRole, ExternKind, Kernel, Program, ProgramOutput, Step};

fn join<T: fmt::Display>(items: &[T]) -> String {
    items.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")
}

impl Program {
    /// Print one kernel: its outer space, then each stage's scalar DAG.
    pub fn fmt_kernel(&self, index: usize, kernel: &Kernel) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "kernel k{index} outer [{}]", join(&kernel.outer));
        for stage in &kernel.stages {
            let red = match &stage.reduce {
                Some(r) => format!(" {} over [{}]", r.op, join(&r.ranges)),
                None => String::new(),
            };
            // A stage's ranges start with its kernel's outer ranges (`verify`
            // holds it), so only the rest is written; a stage that breaks the
            // rule is written whole, for the text to say what is wrong.
            let space = match stage.ranges.strip_prefix(&kernel.outer[..]) {
                Some(inner) => format!("inner [{}]", join(inner)),
                None => format!("ranges [{}]", join(&stage.ranges)),
            };
            let _ = writeln!(out, "  {}[{}] = stage {space}{red}:", stage.out, stage.store);
            let mut roots = vec![stage.value];
            roots.extend(stage.store_indirect.iter().map(|(s, _)| *s));
            if !stage.store_indirect.is_empty() {
                let parts: Vec<String> = stage.store_indirect.iter().map(|(s, st)| format!("{s}*({st})")).collect();
                let _ = writeln!(out, "    scatter + {}", parts.join(" + "));
            }
            for id in self.scalars.topo(&roots) {
                let _ = writeln!(out, "    {}", self.scalars.fmt_node(id));
            }
            let _ = writeln!(out, "    -> {}", stage.value);
        }
        out
    }
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, buf) in self.buffers.iter().enumerate() {
            let role = match &buf.role {
                BufRole::Input(n) => format!("input {n}"),
                BufRole::Temp => "temp".to_string(),
                BufRole::ExternOut => "extern".to_string(),
                BufRole::View(base) => format!("view of {base}"),
            };
            writeln!(
                f,
                "buf{k}: {}[{}] strides [{}] offset {} ({role})",
                buf.dtype,
                join(&buf.sizes),
                join(&buf.strides),
                buf.offset
            )?;
        }
        let mut kernel_index = 0;
        for step in &self.steps {
            match step {
                Step::Kernel(kernel) => {
                    f.write_str(&self.fmt_kernel(kernel_index, kernel))?;
                    kernel_index += 1;
                }
                Step::Extern(ext) => {
                    let what = match &ext.kind {
                        ExternKind::Gemm { scale_bits } => {
                            let scale = f64::from_bits(*scale_bits);
                            let scale = if scale == 1.0 { String::new() } else { format!(" scale {scale}") };
                            format!("gemm{scale}")
                        }
                        ExternKind::DepthwiseConv2d { stride, padding, dilation } => {
                            format!("depthwise_conv2d stride {stride:?} padding {padding:?} dilation {dilation:?}")
                        }
                        ExternKind::DepthwiseWeightGrad { stride, padding, dilation } => {
                            format!("depthwise_weight_grad stride {stride:?} padding {padding:?} dilation {dilation:?}")
                        }
                        ExternKind::Scan { op, dim } => format!("{op} dim {dim}"),
                        ExternKind::Sort(spec) => spec.to_string(),
                        ExternKind::Search { right } => {
                            format!("searchsorted {}", if *right { "right" } else { "left" })
                        }
                        ExternKind::Library { target, .. } => format!("library {target}"),
                        ExternKind::Fallback { target, .. } => format!("fallback {target}"),
                    };
                    // The graph node an ATen call runs, last so that the line
                    // still reads as the call.
                    let node = match &ext.kind {
                        ExternKind::Library { node, .. } | ExternKind::Fallback { node, .. } => format!(" node {node}"),
                        _ => String::new(),
                    };
                    writeln!(f, "extern {what} ({}) -> ({}){node}", join(&ext.inputs), join(&ext.outputs))?;
                }
            }
        }
        let outs: Vec<String> = self
            .outputs
            .iter()
            .map(|o| match o {
                ProgramOutput::Buffer(b) => b.to_string(),
                ProgramOutput::Int(e) => e.to_string(),
                ProgramOutput::None => "None".to_string(),
            })
            .collect();
        writeln!(f, "return ({})", outs.join(", "))
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::Var(v) => write!(f, "{v}"),
            Atom::Sym(s) => write!(f, "{s}"),
            Atom::Prod(fs) => {
                for (k, factor) in fs.iter().enumerate() {
                    if k > 0 {
                        write!(f, "*")?;
                    }
                    write!(f, "{factor}")?;
                }
                Ok(())
            }
            Atom::FloorDiv(e, d) => write!(f, "({e} // {})", Paren(d)),
            Atom::Mod(e, d) => write!(f, "({e} % {})", Paren(d)),
        }
    }
}

struct Paren<'a>(&'a Expr);

impl fmt::Display for Paren<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.terms().is_empty()
            || (self.0.terms().len() == 1 && self.0.constant() == 0 && self.0.terms()[0].1 == 1)
        {
            write!(f, "{}", self.0)
        } else {
            write!(f, "({})", self.0)
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms().is_empty() {
            return write!(f, "{}", self.constant());
        }
        for (k, (atom, coef)) in self.terms().iter().enumerate() {
            let sign = if *coef < 0 { "-" } else { "+" };
            if k == 0 {
                if *coef < 0 {
                    write!(f, "-")?;
                }
            } else {
                write!(f, " {sign} ")?;
            }
            let mag = coef.unsigned_abs();
            if mag == 1 {
                write!(f, "{atom}")?;
            } else {
                write!(f, "{mag}*{atom}")?;
            }
        }
        if self.constant() > 0 {
            write!(f, " + {}", self.constant())?;
        } else if self.constant() < 0 {
            write!(f, " - {}", self.constant().unsigned_abs())?;
        }
        Ok(())
    }
}
