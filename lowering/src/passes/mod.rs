//! The passes over a loop-IR [`Program`], one file each, each `pub fn
//! run(...)`; [`Pass`] names them. `pipeline.rs` lists those `lower_with`
//! runs, in order; a filetest's `; run:` line names those it runs
//! (`tests/filetests.rs`, through [`run_pass`]).
//!
//! Run by name, every transforming pass is followed by [`verify`], whatever
//! the build (`lower_with` verifies in debug builds only): a file that pins a
//! pass's decision also pins that its result is well formed.

use rdyn_ir::loops::Program;
use rdyn_ir::parse::{self, ParseError};
use rdyn_ir::verify::{verify, VerifyError};

mod cse;
mod dce;
mod forward;
mod host_partials;
mod permuted;
mod piecewise;
mod relayout;
mod reuse;
mod schedule;
mod split_reduce;

pub use piecewise::PIECEWISE_MIN_ELEMENTS;

/// A pass over a [`Program`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Pass {
    /// Print, parse back and print again: fails unless the text is the same.
    Print,
    /// [`verify`] alone.
    Verify,
    /// `Program::simplify`: every node rebuilt through the folding
    /// constructors (`loops/simplify.rs`).
    Simplify,
    /// `cse.rs`: repeated stores kept once.
    Cse,
    /// `permuted.rs`: permuted repeats of copies as views.
    Permuted,
    /// `dce.rs`: dead stages dropped.
    Dce,
    /// `piecewise.rs` with this fewest number of elements per piece
    /// (`piecewise=N`; `piecewise` alone: [`PIECEWISE_MIN_ELEMENTS`]).
    Piecewise(i64),
    /// `schedule.rs`: fusion.
    Schedule,
    /// `forward.rs`: a stored value folded into its only reader.
    Forward,
    /// `reuse.rs`: a stored value read back by its kernel.
    Reuse,
    /// `split_reduce.rs`: column reductions as block partials and a combine;
    /// `host`: partials hosted by the row kernel before them where one fits
    /// (`host_partials.rs`; the name `split_reduce`, `split_reduce=blocks`
    /// without).
    SplitReduce { host: bool },
    /// `relayout.rs`: a computed stage whose loads cross its store's
    /// layout computed in theirs, then copied.
    Relayout,
}

/// Why a pass failed.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PassError {
    #[error("unknown pass `{0}` (known: print, verify, simplify, cse, permuted, dce, piecewise[=N], schedule, forward, reuse, split_reduce[=blocks], relayout)")]
    Unknown(String),
    /// `verify` rejects the program as it was given: every other pass
    /// verifies its own result.
    #[error("malformed program: {0}")]
    Malformed(VerifyError),
    #[error("loop IR verification failed after {pass}: {error}")]
    Verify { pass: &'static str, error: VerifyError },
    #[error("the printed program does not parse back: {0}")]
    Parse(#[from] ParseError),
    #[error("the printed program prints differently once parsed back:\n{printed}\nparsed back:\n{reprinted}")]
    RoundTrip { printed: String, reprinted: String },
}

impl Pass {
    /// The pass a `; run:` line names.
    pub fn from_name(name: &str) -> Result<Pass, PassError> {
        Ok(match name {
            "print" => Pass::Print,
            "verify" => Pass::Verify,
            "simplify" => Pass::Simplify,
            "cse" => Pass::Cse,
            "permuted" => Pass::Permuted,
            "dce" => Pass::Dce,
            "piecewise" => Pass::Piecewise(PIECEWISE_MIN_ELEMENTS),
            "schedule" => Pass::Schedule,
            "forward" => Pass::Forward,
            "reuse" => Pass::Reuse,
            "split_reduce" => Pass::SplitReduce { host: true },
            "split_reduce=blocks" => Pass::SplitReduce { host: false },
            "relayout" => Pass::Relayout,
            other => match other.strip_prefix("piecewise=").and_then(|n| n.parse().ok()) {
                Some(min) => Pass::Piecewise(min),
                None => return Err(PassError::Unknown(other.to_string())),
            },
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Pass::Print => "print",
            Pass::Verify => "verify",
            Pass::Simplify => "simplify",
            Pass::Cse => "cse",
            Pass::Permuted => "permuted",
            Pass::Dce => "dce",
            Pass::Piecewise(_) => "piecewise",
            Pass::Schedule => "schedule",
            Pass::Forward => "forward",
            Pass::Reuse => "reuse",
            Pass::SplitReduce { .. } => "split_reduce",
            Pass::Relayout => "relayout",
        }
    }

    /// Run the pass on `program` (then [`verify`], for a transforming one).
    pub fn run(self, program: &mut Program) -> Result<(), PassError> {
        match self {
            Pass::Print => round_trip(program),
            Pass::Verify => verify(program).map_err(PassError::Malformed),
            _ => {
                self.transform(program);
                verify(program).map_err(|error| PassError::Verify { pass: self.name(), error })
            }
        }
    }

    /// What the pass does to `program`, unverified: nothing for the checks
    /// (`print`, `verify`).
    pub(crate) fn transform(self, program: &mut Program) {
        match self {
            Pass::Print | Pass::Verify => {}
            Pass::Simplify => program.simplify(),
            Pass::Cse => cse::run(program),
            Pass::Permuted => permuted::run(program),
            Pass::Dce => dce::run(program),
            Pass::Piecewise(min) => piecewise::run(program, min),
            Pass::Schedule => schedule::run(program),
            Pass::Forward => forward::run(program),
            Pass::Reuse => reuse::run(program),
            Pass::SplitReduce { host } => split_reduce::run(program, host),
            Pass::Relayout => relayout::run(program),
        }
    }
}

/// Run the pass `name` ([`Pass::from_name`]) on `program`.
pub fn run_pass(name: &str, program: &mut Program) -> Result<(), PassError> {
    Pass::from_name(name)?.run(program)
}

fn round_trip(program: &Program) -> Result<(), PassError> {
    let printed = program.to_string();
    let reprinted = parse::program(&printed)?.to_string();
    if reprinted == printed {
        Ok(())
    } else {
        Err(PassError::RoundTrip { printed, reprinted })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back() {
        let all = [
            Pass::Print,
            Pass::Verify,
            Pass::Simplify,
            Pass::Cse,
            Pass::Permuted,
            Pass::Dce,
            Pass::Piecewise(PIECEWISE_MIN_ELEMENTS),
            Pass::Schedule,
            Pass::Forward,
            Pass::Reuse,
            Pass::SplitReduce { host: true },
            Pass::Relayout,
        ];
        for pass in all {
            assert_eq!(Pass::from_name(pass.name()), Ok(pass));
        }
        assert_eq!(Pass::from_name("piecewise=16"), Ok(Pass::Piecewise(16)));
        assert_eq!(Pass::from_name("split_reduce=blocks"), Ok(Pass::SplitReduce { host: false }));
        assert_eq!(Pass::from_name("fuse"), Err(PassError::Unknown("fuse".into())));
        assert_eq!(Pass::from_name("piecewise=x"), Err(PassError::Unknown("piecewise=x".into())));
    }
}
