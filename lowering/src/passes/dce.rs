//! Dead stage elimination: drop stages (and GEMMs) whose buffers nothing
//! reads. Lowering produces them freely — e.g. `max.dim` computes indices
//! that only the backward pass wants — and this pass removes the waste.
//! Eager calls are kept: they may have side effects.

use std::collections::HashSet;

use rdyn_ir::loops::{BufId, Program, Step};

/// Run the pass over `program`.
pub fn run(program: &mut Program) {
    let mut live: HashSet<BufId> = program.output_storages();
    let steps = std::mem::take(&mut program.steps);
    let mut kept = Vec::with_capacity(steps.len());
    for mut step in steps.into_iter().rev() {
        let keep = match &mut step {
            Step::Kernel(kernel) => {
                kernel.stages.retain(|s| live.contains(&program.storage_of(s.out)));
                for stage in &kernel.stages {
                    let mut roots = vec![stage.value];
                    roots.extend(stage.store_indirect.iter().map(|(s, _)| *s));
                    for b in program.scalars.loaded_buffers(&roots) {
                        live.insert(program.storage_of(b));
                    }
                }
                !kernel.stages.is_empty()
            }
            Step::Extern(ext) => {
                let needed =
                    !ext.kind.is_own_kernel() || ext.outputs.iter().any(|b| live.contains(&program.storage_of(*b)));
                if needed {
                    for b in &ext.inputs {
                        live.insert(program.storage_of(*b));
                    }
                }
                needed
            }
        };
        if keep {
            kept.push(step);
        }
    }
    kept.reverse();
    program.steps = kept;
}
