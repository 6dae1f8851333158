#![allow(clippy::panic, clippy::unwrap_used)] // a test reports failure by panicking
//! File tests: each `tests/filetests/*.loop` is loop IR in the text form
//! (`rdyn_ir::parse`), with directives in `;` lines:
//!
//! - `; run: pass, pass, ...`: the passes to run on the parsed program, in
//!   order ([`rdyn_lowering::Pass::from_name`]).
//! - `; check: text`: `text` appears in the printed result, after what the
//!   previous check matched.
//! - `; not: text`: `text` does not appear between the previous check's match
//!   and the next one's (the end of the output after the last check).
//! - `; error: text`: parsing or a pass fails, with `text` in its message
//!   (several are matched in order, like checks); checks are then not read.
//!
//! Any other `;` line is a comment; the first says what the file pins. A
//! file without checks fails with its result: what the checks are written from.
//! `RDYN_FILETESTS=word` runs only the files whose name contains `word`.

use std::fs;
use std::path::Path;

use rdyn_lowering::run_pass;

/// A `check:` or `not:` line.
#[derive(Debug, PartialEq)]
enum Check {
    Present(String),
    Absent(String),
}

/// What a file asks for.
#[derive(Debug, Default, PartialEq)]
struct Directives {
    passes: Vec<String>,
    checks: Vec<Check>,
    errors: Vec<Check>,
}

fn directives(text: &str) -> Directives {
    let mut d = Directives::default();
    for line in text.lines() {
        let Some(comment) = line.trim_start().strip_prefix(';') else { continue };
        let comment = comment.trim();
        let field = |name: &str| comment.strip_prefix(name).map(|rest| rest.trim().to_string());
        if let Some(passes) = field("run:") {
            d.passes.extend(passes.split(',').map(|p| p.trim().to_string()).filter(|p| !p.is_empty()));
        } else if let Some(text) = field("check:") {
            d.checks.push(Check::Present(text));
        } else if let Some(text) = field("not:") {
            d.checks.push(Check::Absent(text));
        } else if let Some(text) = field("error:") {
            d.errors.push(Check::Present(text));
        }
    }
    d
}

/// Parse `text` and run `passes` on it: the printed program, or the error.
fn run(text: &str, passes: &[String]) -> Result<String, String> {
    let mut program = rdyn_ir::parse::program(text).map_err(|e| format!("parse error: {e}"))?;
    for pass in passes {
        run_pass(pass, &mut program).map_err(|e| format!("{pass}: {e}"))?;
    }
    Ok(program.to_string())
}

/// Match `checks` against `output` in order; why not, if they do not.
fn matches(output: &str, checks: &[Check]) -> Result<(), String> {
    let mut from = 0;
    let mut absent: Vec<&str> = Vec::new();
    let found_between = |absent: &[&str], region: &str, next: &str| {
        absent.iter().find(|a| region.contains(**a)).map(|a| format!("`; not: {a}` found before {next}"))
    };
    for check in checks {
        match check {
            Check::Absent(text) => absent.push(text),
            Check::Present(text) => {
                let Some(at) = output[from..].find(text.as_str()) else {
                    return Err(format!("`; check: {text}` not found (after what the previous checks matched)"));
                };
                if let Some(why) = found_between(&absent, &output[from..from + at], &format!("`; check: {text}`")) {
                    return Err(why);
                }
                absent.clear();
                from += at + text.len();
            }
        }
    }
    found_between(&absent, &output[from..], "the end").map_or(Ok(()), Err)
}

/// Run one file; a failure names the file, what failed and the output.
fn check_file(path: &Path) -> Result<(), String> {
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let text = fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
    let d = directives(&text);
    if d.passes.is_empty() {
        return Err(format!("{name}: no `; run:` line"));
    }
    let result = run(&text, &d.passes);
    if d.checks.is_empty() && d.errors.is_empty() {
        // What a new file's checks have to match.
        let (Ok(out) | Err(out)) = result;
        return Err(format!("{name}: no `; check:`, `; not:` or `; error:` line\n--- result ---\n{out}"));
    }
    match (result, d.errors.is_empty()) {
        (Ok(out), true) => matches(&out, &d.checks).map_err(|why| format!("{name}: {why}\n--- output ---\n{out}")),
        (Ok(out), false) => Err(format!("{name}: expected an error, but every pass ran\n--- output ---\n{out}")),
        (Err(e), false) => matches(&e, &d.errors).map_err(|why| format!("{name}: {why}\n--- error ---\n{e}")),
        (Err(e), true) => Err(format!("{name}: {e}")),
    }
}

#[test]
fn filetests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let filter = std::env::var("RDYN_FILETESTS").unwrap_or_default();
    let mut files: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "loop"))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().contains(&filter)))
        .collect();
    files.sort();
    assert!(filter.is_empty() || !files.is_empty(), "no filetest matches {filter:?}");
    assert!(!filter.is_empty() || files.len() >= 8, "only {} filetests in {}", files.len(), dir.display());
    let failures: Vec<String> = files.iter().filter_map(|f| check_file(f).err()).collect();
    if !failures.is_empty() {
        panic!("{} of {} filetests failed:\n\n{}", failures.len(), files.len(), failures.join("\n\n"));
    }
}

#[test]
fn directives_are_read_from_comment_lines() {
    let d = directives("; run: cse, dce\n; pins nothing\nbuf0: ...\n  ; check: a\n; not: b\n; error: c\n");
    assert_eq!(d.passes, ["cse", "dce"]);
    assert_eq!(d.checks, [Check::Present("a".into()), Check::Absent("b".into())]);
    assert_eq!(d.errors, [Check::Present("c".into())]);
}

#[test]
fn checks_match_in_order_and_nots_between_them() {
    let out = "kernel k0\n  load buf1\n  exp\nkernel k1\n  neg\n";
    let present = |s: &str| Check::Present(s.into());
    let absent = |s: &str| Check::Absent(s.into());
    assert_eq!(matches(out, &[present("k0"), absent("k1"), present("exp"), present("neg")]), Ok(()));
    assert!(matches(out, &[present("exp"), present("load")]).is_err_and(|e| e.contains("`; check: load` not found")));
    assert!(matches(out, &[present("k0"), absent("exp"), present("k1")]).is_err_and(|e| e.contains("`; not: exp`")));
    assert!(matches(out, &[present("k1"), absent("neg")]).is_err_and(|e| e.contains("before the end")));
    assert_eq!(matches(out, &[absent("sum")]), Ok(()));
}
