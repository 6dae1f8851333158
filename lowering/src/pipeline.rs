//! The passes `lower_with` runs on a lowered program, as one list
//! ([`passes`]), each followed by `verify` in debug builds. The file tests
//! (`tests/filetests/`) run the same passes by name ([`Pass::from_name`]).

use rdyn_ir::loops::Program;
use rdyn_ir::verify::verify;

use crate::error::LowerError;
use crate::lowerer::LowerOptions;
use crate::passes::Pass;

/// The passes run on a program lowered with `options`, in order.
pub(crate) fn passes(options: &LowerOptions) -> impl Iterator<Item = Pass> {
    // GPU kernels pick a source per lane at no cost; on the CPU a stage that
    // picks by index ranges (a `cat`) runs faster split into its pieces.
    let piecewise = options.cpu_kernels && options.piecewise_min > 0;
    [
        // Repeated stores kept once; then permuted repeats of copies as views.
        Some(Pass::Cse),
        Some(Pass::Permuted),
        // Stages nothing reads, including those the two above left.
        Some(Pass::Dce),
        piecewise.then_some(Pass::Piecewise(options.piecewise_min)),
        // Fusion into kernels; what follows works within each kernel.
        Some(Pass::Schedule),
        Some(Pass::Forward),
        Some(Pass::Reuse),
        // On the CPU, narrow column reductions stream whole rows by blocks.
        (options.cpu_kernels && options.split_reduce).then_some(Pass::SplitReduce { host: options.host_partials }),
        // On the CPU, a computed stage whose loads cross its store's layout
        // computes in theirs, then a blocked transpose stores the result.
        (options.cpu_kernels && options.relayout).then_some(Pass::Relayout),
    ]
    .into_iter()
    .flatten()
}

/// Verify the lowered `program`, then run [`passes`] on it, verifying
/// after each.
pub(crate) fn run(program: &mut Program, options: &LowerOptions) -> Result<(), LowerError> {
    check(program, "lowering")?;
    for pass in passes(options) {
        pass.transform(program);
        check(program, pass.name())?;
    }
    Ok(())
}

/// `verify` in debug builds: a pass that breaks the IR fails the graph
/// where it happened rather than in a backend.
fn check(program: &Program, pass: &'static str) -> Result<(), LowerError> {
    if cfg!(debug_assertions) {
        verify(program).map_err(|error| LowerError::Verify { pass, error })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn piecewise_and_split_reduce_run_on_the_cpu_only() {
        let names = |options: LowerOptions| passes(&options).map(Pass::name).collect::<Vec<_>>().join(", ");
        assert_eq!(names(LowerOptions::default()), "cse, permuted, dce, schedule, forward, reuse");
        let cpu = LowerOptions {
            cpu_kernels: true,
            piecewise_min: 64,
            split_reduce: true,
            relayout: true,
            ..LowerOptions::default()
        };
        assert_eq!(names(cpu), "cse, permuted, dce, piecewise, schedule, forward, reuse, split_reduce, relayout");
        assert_eq!(passes(&cpu).nth(3), Some(Pass::Piecewise(64)));
        let no_pieces = "cse, permuted, dce, schedule, forward, reuse, split_reduce, relayout";
        assert_eq!(names(LowerOptions { piecewise_min: 0, ..cpu }), no_pieces);
        assert_eq!(
            names(LowerOptions { split_reduce: false, ..cpu }),
            "cse, permuted, dce, piecewise, schedule, forward, reuse, relayout"
        );
    }
}
