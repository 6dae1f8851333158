//! Splitting a compiled stage at its transcendentals.
//!
//! A transcendental (exp, erf, tanh, ...) is not inline: at four lanes its
//! polynomial loses to the interpreter's AVX-512/AVX2 tile loops. A stage that
//! has one still compiles: its instructions are cut into phases at each such
//! call. Every phase is one loop over the tile; between two phases the
//! call runs over the whole tile with the interpreter's own routine (so the
//! bits are the interpreter's). A value that a later phase reads, and every
//! call's operand, is spilled to a 1024-lane tile on the stack; call results are
//! read back from theirs. Except where memory already holds them: a float32 load
//! whose lanes are consecutive elements is read in place by the call and later
//! phases, and when the stage's value is its last call's result (contiguous
//! store), that call writes the output, and the phases with nothing to spill or
//! store have no loop (a lone `exp` is one routine call per tile;
//! `rdyn_unary_tile` reads an operand that overlaps its output from a copy).

use std::collections::BTreeSet;

use super::analysis::{Analysis, Def};
use crate::plan::StagePlan;

pub(super) struct Phases {
    /// The call instructions, in order: call `p` ends phase `p`.
    pub calls: Vec<usize>,
    /// Per phase: the varying, inline instructions it computes.
    pub insts: Vec<Vec<usize>>,
    /// Inline instructions whose values are stored to a tile.
    pub spilled: Vec<usize>,
    /// Per phase: values (spilled ones and call results) it loads from tiles.
    pub reads: Vec<Vec<usize>>,
    /// Per phase: spilled values it stores after computing them.
    pub writes: Vec<Vec<usize>>,
}

impl Phases {
    pub fn new(stage: &StagePlan, a: &Analysis) -> Phases {
        let n = stage.insts.len();
        // Calls of invariants run once before the loops; they end no phase.
        let calls: Vec<usize> = (0..n).filter(|&i| a.call[i].is_some() && !a.invariant[i]).collect();
        let phases = calls.len() + 1;
        let call_index = |i: usize| calls.iter().position(|&c| c == i);
        // The phase that computes an instruction, or (calls) whose loops
        // first see its result.
        let def_phase = |i: usize| match call_index(i) {
            Some(p) => p + 1,
            None => calls.iter().filter(|&&c| c < i).count(),
        };
        let varying = |d: &Def| match d {
            Def::Inst(i) if !a.invariant[*i] => Some(*i),
            _ => None,
        };
        let mut insts = vec![Vec::new(); phases];
        let mut spilled = BTreeSet::new();
        let mut reads = vec![BTreeSet::new(); phases];
        for u in (0..n).filter(|&u| !a.invariant[u]) {
            match call_index(u) {
                Some(_) => {
                    // The routine reads its operand from a tile.
                    for d in a.operands[u].iter().filter_map(varying) {
                        if a.call[d].is_none() {
                            spilled.insert(d);
                        }
                    }
                }
                None => {
                    let phase = def_phase(u);
                    insts[phase].push(u);
                    // Call results are only in their tiles; other values
                    // are in registers within the phase that computes them.
                    for d in a.operands[u].iter().filter_map(varying) {
                        if a.call[d].is_some() || def_phase(d) < phase {
                            reads[phase].insert(d);
                            if a.call[d].is_none() {
                                spilled.insert(d);
                            }
                        }
                    }
                }
            }
        }
        let last = phases - 1;
        if let Some(d) = varying(&a.value).filter(|&d| a.call[d].is_some() || def_phase(d) < last) {
            reads[last].insert(d);
            if a.call[d].is_none() {
                spilled.insert(d);
            }
        }
        let mut writes = vec![Vec::new(); phases];
        for &d in &spilled {
            writes[def_phase(d)].push(d);
        }
        Phases {
            calls,
            insts,
            spilled: spilled.into_iter().collect(),
            reads: reads.into_iter().map(|r| r.into_iter().collect()).collect(),
            writes,
        }
    }
}
