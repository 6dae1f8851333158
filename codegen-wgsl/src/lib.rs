//! The WGSL backend: loop IR → WGSL compute shaders, each validated by
//! naga (parser and validator) before it reaches a driver.
//!
//! Leaf crate: depends on `ir` only. The wgpu device (`runtime/src/devices/wgpu.rs`) runs
//! the modules; kernels this crate cannot express (float64, symbolic sizes,
//! functions WGSL lacks) return [`WgslError::Unsupported`] and run on the CPU path
//! instead. `kernel.rs` holds the templates (pointwise, workgroup-per-row, and a
//! tiled GEMM); `expr.rs` scalar and index expressions; `special.rs` translates the
//! special functions' one definition (`rdyn_ir::special`) to WGSL. On the device every
//! element is 32-bit (`f32`, or `i32` for integers and bool).

mod expr;
mod kernel;
mod lit;
mod special;

pub use kernel::{gemm_wgsl, kernel_wgsl, Binding, WgslKernel, WORKGROUP};

/// Why a kernel has no WGSL form.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WgslError {
    /// Not expressible in WGSL (float64, symbolic sizes, some functions):
    /// the kernel runs on the CPU.
    #[error("not expressible in WGSL: {0}")]
    Unsupported(String),
    /// naga rejected the generated module: a compiler bug.
    #[error("generated WGSL for {kernel} is invalid: {error}\n{wgsl}")]
    Invalid { kernel: String, error: String, wgsl: String },
    #[error("internal WGSL codegen error: {0}")]
    Internal(&'static str),
}

/// Parse and validate a module with naga; the module on success.
pub fn validate(kernel: &WgslKernel) -> Result<naga::Module, WgslError> {
    let invalid =
        |error: String| WgslError::Invalid { kernel: kernel.name.clone(), error, wgsl: kernel.source.clone() };
    let module = naga::front::wgsl::parse_str(&kernel.source).map_err(|e| invalid(e.emit_to_string(&kernel.source)))?;
    let mut validator =
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::empty());
    validator.validate(&module).map_err(|e| invalid(format!("{e:?}")))?;
    Ok(module)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use rdyn_ir::loops::UnaryOp;
    use rdyn_ir::special::Special;

    use crate::special::{in_f32, name, source};

    /// Every function the device evaluates translates to a module naga
    /// accepts (with the prelude it relies on).
    #[test]
    fn translated_bodies_validate() {
        for op in [UnaryOp::Digamma, UnaryOp::Erfinv, UnaryOp::Lgamma] {
            let sp = in_f32(op).unwrap();
            let src = format!("{}{}", crate::expr::PRELUDE, source(sp).unwrap());
            let module =
                naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{}\n{src}", e.emit_to_string(&src)));
            let mut v =
                naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::empty());
            v.validate(&module).unwrap_or_else(|e| panic!("{e:?}\n{src}"));
            assert!(src.contains(&format!("fn {}(a0: f32) -> f32 {{", name(sp))), "{src}");
        }
        assert!(source(Special::Lgamma).unwrap().contains("fn lgammaf_pos("));
        assert!(!source(Special::Digamma).unwrap().contains("fn lgammaf_pos("));
    }
}
