//! Structural checks of a [`Program`], run after every pass in debug builds.
//! A failure here is a compiler bug, never a user error.

use crate::loops::{BufRole, Program, ScalarOp, Step};

/// Why a program is malformed.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum VerifyError {
    #[error("{0} is out of range")]
    BadBuffer(String),
    #[error("kernel {kernel}: stage {stage} ranges do not start with the kernel's outer ranges")]
    OuterMismatch { kernel: usize, stage: usize },
    #[error("kernel {kernel}: stage {stage} uses variable i{var} but has only {vars} variables")]
    VarOutOfRange { kernel: usize, stage: usize, var: u32, vars: usize },
    #[error("{buf} is read before any step writes it")]
    ReadBeforeWrite { buf: String },
}

/// Check buffer ids, outer-prefix invariants, variable ranges and that every
/// buffer is written before it is read.
pub fn verify(program: &Program) -> Result<(), VerifyError> {
    let count = program.buffers.len();
    let mut written: Vec<bool> = program.buffers.iter().map(|b| matches!(b.role, BufRole::Input(_))).collect();
    let check = |id: crate::loops::BufId| {
        if (id.0 as usize) < count {
            Ok(())
        } else {
            Err(VerifyError::BadBuffer(id.to_string()))
        }
    };
    let is_written = |written: &[bool], id: crate::loops::BufId| written[program.storage_of(id).0 as usize];
    let mut kernel_index = 0;
    for step in &program.steps {
        match step {
            Step::Kernel(kernel) => {
                for (s, stage) in kernel.stages.iter().enumerate() {
                    check(stage.out)?;
                    if stage.ranges.len() < kernel.outer.len() || stage.ranges[..kernel.outer.len()] != kernel.outer[..]
                    {
                        return Err(VerifyError::OuterMismatch { kernel: kernel_index, stage: s });
                    }
                    let vars = stage.ranges.len() + stage.reduce.as_ref().map_or(0, |r| r.ranges.len());
                    for id in program.scalars.topo(&[stage.value]) {
                        let expr = match &program.scalars.get(id).op {
                            ScalarOp::Load { buf, index, .. } => {
                                check(*buf)?;
                                if !is_written(&written, *buf) {
                                    return Err(VerifyError::ReadBeforeWrite { buf: buf.to_string() });
                                }
                                Some(index)
                            }
                            ScalarOp::Index(e) => Some(e),
                            _ => None,
                        };
                        if let Some(var) = expr.and_then(|e| e.max_var()) {
                            if var as usize >= vars {
                                return Err(VerifyError::VarOutOfRange { kernel: kernel_index, stage: s, var, vars });
                            }
                        }
                    }
                    let root = program.storage_of(stage.out).0 as usize;
                    written[root] = true;
                }
                kernel_index += 1;
            }
            Step::Extern(ext) => {
                for b in &ext.inputs {
                    check(*b)?;
                    if !is_written(&written, *b) {
                        return Err(VerifyError::ReadBeforeWrite { buf: b.to_string() });
                    }
                }
                for b in &ext.outputs {
                    check(*b)?;
                    let root = program.storage_of(*b).0 as usize;
                    written[root] = true;
                }
            }
        }
    }
    Ok(())
}
