//! The machine Cranelift compiles for, and whether compiling is on: the
//! bottom floor of `jit/`, which the special functions' compiler
//! (`special/native.rs`) shares.

use std::sync::OnceLock;

use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};

/// Whether stages are compiled (`RDYN_JIT=0` turns it off).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("RDYN_JIT").map_or(true, |v| v != "0") && isa().is_some())
}

/// The host ISA with speed optimisation (None without SSE4.1 on x86-64).
pub(crate) fn isa() -> Option<&'static OwnedTargetIsa> {
    static ISA: OnceLock<Option<OwnedTargetIsa>> = OnceLock::new();
    ISA.get_or_init(|| {
        let mut flags = settings::builder();
        flags.set("opt_level", "speed").ok()?;
        let builder = cranelift_native::builder().ok()?;
        // The 4-lane loops need SSE4.1 (round, blend) on x86-64.
        #[cfg(target_arch = "x86_64")]
        if !std::arch::is_x86_feature_detected!("sse4.1") {
            return None;
        }
        builder.finish(settings::Flags::new(flags)).ok()
    })
    .as_ref()
}
