#![allow(clippy::panic, clippy::unwrap_used)] // a test reports failure by panicking
//! Graphs whose metadata contradicts their arguments (issue 38) lower to a
//! `LowerError` naming the op, never a panic: a sweep of mutations of one
//! valid single-node graph per rule, and the four ops the issue names.
//!
//! `RDYN_SWEEP_DUMP=path` writes every mutation's outcome (a hash of the
//! program for one that lowers) to `path`, to compare two builds.

mod sweep;

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use rdyn_ir::DType;
use sweep::{cases, mutations, outcome, quiet_panics, Case, Outcome, Tensor, A, CONFIGS};
use A::{I, L, T};

fn f(sizes: &[i64]) -> Tensor {
    Tensor { sizes: sizes.to_vec(), dtype: DType::F32, transposed: false }
}

fn ints(values: &[i64]) -> A {
    L(values.iter().map(|v| I(*v)).collect())
}

/// Lowering `case` fails, naming its op, with `expected` in the message.
#[track_caller]
fn fails(case: Case, expected: &str) {
    match outcome(&case, &CONFIGS[0]) {
        Outcome::Err(e) => {
            let names = format!("invalid graph at {}: ", case.target);
            assert!(e.starts_with(&names) && e.contains(expected), "{e:?} is not {names:?} ... {expected:?}");
        }
        other => panic!("{}: {other:?}, expected an error with {expected:?}", case.target),
    }
}

fn repeat(input: &[i64], repeats: &[i64], out: Tensor) -> Case {
    Case {
        target: "aten.repeat.default",
        inputs: vec![f(input)],
        args: vec![T(0), ints(repeats)],
        kwargs: vec![],
        outputs: vec![out],
    }
}

#[test]
fn repeat_counts_and_output_must_fit_the_input() {
    fails(repeat(&[2, 3, 4], &[2, 2], f(&[4, 6, 4])), "2 repeat counts for a rank-3 input; expected at least 3");
    fails(repeat(&[2, 3], &[2, -1], f(&[4, 3])), "repeat count -1; expected counts of 0 or more");
    fails(repeat(&[2, 3], &[1, 2, 2], f(&[4, 6])), "output has rank 2; 3 repeat counts give rank 3");
    let wrong = "output has sizes [4, 7]; repeat counts [2, 2] of an input of sizes [2, 3] give [4, 6]";
    fails(repeat(&[2, 3], &[2, 2], f(&[4, 7])), wrong);
    let half = Tensor { dtype: DType::F16, ..f(&[4, 6]) };
    fails(repeat(&[2, 3], &[2, 2], half), "the output is float16; expected the input's float32");
    fails(repeat(&[2, 3], &[i64::MAX, 2], f(&[4, 6])), "give [-1, 6]");
}

fn split(input: &[i64], sizes: &[i64], dim: i64, outs: Vec<Tensor>) -> Case {
    let args = vec![T(0), ints(sizes), I(dim)];
    Case { target: "aten.split_with_sizes.default", inputs: vec![f(input)], args, kwargs: vec![], outputs: outs }
}

#[test]
fn split_sizes_must_add_up_to_the_dim() {
    let halves = || vec![f(&[2, 4]), f(&[2, 4])];
    fails(split(&[5, 4], &[2, 2], 0, halves()), "split sizes [2, 2] do not add up to 5, the size of dim 0");
    fails(split(&[4, 4], &[2, 2], 2, halves()), "dim 2 is out of range for a rank-2 input; expected -2 to 1");
    fails(split(&[4, 4], &[1, 1, 2], 0, halves()), "3 split sizes for 2 outputs; expected one per output");
    fails(split(&[4, 4], &[6, -2], 0, halves()), "split size -2; expected sizes of 0 or more");
    let wrong = "output 1 has sizes [2, 5]; split size 2 along dim 0 of an input of sizes [4, 4] gives [2, 4]";
    fails(split(&[4, 4], &[2, 2], 0, vec![f(&[2, 4]), f(&[2, 5])]), wrong);
    fails(split(&[4, 4], &[2, 2], 0, vec![f(&[2, 4]), f(&[2])]), "output 1 has sizes [2]");
}

fn diagonal(input: &[i64], offset: i64, dims: (i64, i64), out: &[i64]) -> Case {
    let args = vec![T(0), I(offset), I(dims.0), I(dims.1)];
    Case { target: "aten.diagonal.default", inputs: vec![f(input)], args, kwargs: vec![], outputs: vec![f(out)] }
}

#[test]
fn diagonal_offsets_and_dims_must_fit_the_input() {
    let beyond = "output has sizes [2]; offset 5 of dims 0 and 1 of an input of sizes [3, 4] give [0]";
    fails(diagonal(&[3, 4], 5, (0, 1), &[2]), beyond);
    fails(diagonal(&[3, 4], i64::MIN, (0, 1), &[3]), "give [0]");
    fails(diagonal(&[3, 4], 0, (0, 0), &[3]), "dim1 and dim2 are both dim 0; expected two different dims");
    fails(diagonal(&[3, 4], 0, (0, 2), &[3]), "dim2 2 is out of range for a rank-2 input; expected -2 to 1");
    fails(diagonal(&[3, 4, 5], 1, (0, 2), &[3]), "output has rank 1; the diagonal of a rank-3 input has 2");
    // An offset past the dims is an empty diagonal.
    assert!(matches!(outcome(&diagonal(&[3, 4], i64::MAX, (0, 1), &[0]), &CONFIGS[0]), Outcome::Ok(_)));
}

fn embedding(weight: Tensor, indices: Tensor, out: &[i64]) -> Case {
    let args = vec![T(0), T(1)];
    Case {
        target: "aten.embedding.default",
        inputs: vec![weight, indices],
        args,
        kwargs: vec![],
        outputs: vec![f(out)],
    }
}

#[test]
fn embedding_takes_integer_indices_into_a_matrix() {
    let ids = |sizes: &[i64]| Tensor { dtype: DType::I64, ..f(sizes) };
    fails(embedding(f(&[10, 4]), f(&[2, 3]), &[2, 3, 4]), "the index tensor is float32; expected an integer dtype");
    fails(embedding(f(&[10]), ids(&[2, 3]), &[2, 3]), "the weight has rank 1; expected 2");
    fails(embedding(f(&[10, 4, 2]), ids(&[2, 3]), &[2, 3, 4, 2]), "the weight has rank 3; expected 2");
    let wrong = "output has sizes [2, 4]; indices of sizes [2, 3] into a weight of sizes [10, 4] give [2, 3, 4]";
    fails(embedding(f(&[10, 4]), ids(&[2, 3]), &[2, 4]), wrong);
}

#[test]
fn valid_cases_lower() {
    for case in cases::all() {
        for config in &CONFIGS {
            let result = outcome(&case, config);
            assert!(matches!(result, Outcome::Ok(_)), "{} ({}): {result:?}", case.target, config.name);
        }
    }
}

#[test]
fn mutated_graphs_never_panic() {
    quiet_panics();
    let mut dump = String::new();
    let mut runs = 0;
    let mut panics: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (c, case) in cases::all().iter().enumerate() {
        let mut all = vec![("valid".to_string(), case.clone())];
        all.extend(mutations(case));
        for (what, mutated) in &all {
            for config in &CONFIGS {
                runs += 1;
                let line = match outcome(mutated, config) {
                    Outcome::Ok(text) => {
                        let mut h = DefaultHasher::new();
                        text.hash(&mut h);
                        format!("ok {:016x}", h.finish())
                    }
                    Outcome::Err(e) => format!("err {e}"),
                    Outcome::Panic(p) => {
                        let at = p.split(": ").next().unwrap_or_default().to_string();
                        panics.entry(at).or_default().push(format!("{} {what} ({}): {p}", case.target, config.name));
                        format!("PANIC {p}")
                    }
                };
                dump += &format!("{c} {} | {what} | {}: {line}\n", case.target, config.name);
            }
        }
    }
    if let Ok(path) = std::env::var("RDYN_SWEEP_DUMP") {
        std::fs::write(path, &dump).unwrap();
    }
    let count: usize = panics.values().map(Vec::len).sum();
    let mut report = format!("{runs} lowerings, {count} panics at {} places\n", panics.len());
    for (at, graphs) in &panics {
        report += &format!("{} x {at}\n    e.g. {}\n", graphs.len(), graphs[..graphs.len().min(3)].join("\n    e.g. "));
    }
    eprintln!("{report}");
    assert_eq!(count, 0, "{report}");
}
