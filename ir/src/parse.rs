//! The text form of a [`Program`] read back: the inverse of `print.rs`, so
//! that IR can be written by hand (the lowering filetests) and a printed
//! program can be rebuilt. For any program `p`,
//! `program(&p.to_string())?.to_string() == p.to_string()`.
//!
//! The text is line based: buffer lines, then steps (a `kernel kN outer
//! [...]` line and its stages, or an `extern` line), then `return (...)`.
//! A stage is its header, an optional `scatter` line, its scalar nodes
//! (`t7: float32 = exp t3`) and `-> tN`. Blank lines and lines starting
//! with `;` are skipped.
//!
//! Scalar ids are kept: node `t7` is id 7 of the rebuilt arena, so the
//! program prints exactly as it was printed. The ids the text leaves out
//! (nodes no stage reaches any more) are filled with placeholder constants
//! nothing reads. A node may appear in several stages (each prints what it
//! reaches), but always with the same definition; its operands must have
//! smaller ids, as in any arena built operands first (which also rules out
//! cycles). The parser checks what it needs to build the program (numbering,
//! definitions, view bases); [`crate::verify`] checks the rest (buffer ids,
//! ranges, reads before writes), so the filetests can give it malformed
//! programs to reject.

mod cursor;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashSet};

use cursor::Cursor;

use crate::dtype::DType;
use crate::loops::{
    BinaryOp, BufId, BufRole, Buffer, Extern, ExternKind, Kernel, Negatives, Program, ProgramOutput, Reduce, ReduceOp,
    Scalar, ScalarId, ScalarOp, Scalars, ScanOp, SortSelect, SortSpec, Stage, Step, UnaryOp,
};

/// Why a text is not a program: the line (1-based), what the parser
/// expected there and what it found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: expected {expected}, found {found}")]
pub struct ParseError {
    pub line: usize,
    pub expected: String,
    pub found: String,
}

/// Scalar ids at or above this are refused: the ids a text skips are filled
/// with placeholders, and a typo such as `t40000000` would fill gigabytes.
const MAX_SCALAR_ID: u32 = 1 << 22;

/// Read a program from its text form.
pub fn program(text: &str) -> Result<Program, ParseError> {
    let mut parser = Parser::default();
    let mut lines = 0;
    for (k, raw) in text.lines().enumerate() {
        lines = k + 1;
        let trimmed = raw.trim_start();
        if trimmed.is_empty() || trimmed.starts_with(';') {
            continue;
        }
        parser.line(&mut Cursor::new(raw, k + 1))?;
    }
    parser.finish(lines)
}

/// What has been read so far.
#[derive(Default)]
struct Parser {
    program: Program,
    /// The line of each buffer, for errors about its role.
    buffer_lines: Vec<usize>,
    /// The kernel being read; pushed as a step at the next step or `return`.
    kernel: Option<Kernel>,
    kernels: usize,
    /// The stage being read, with its line, until its `-> tN`.
    stage: Option<(Stage, usize)>,
    /// Each scalar node's definition by id, with the line of its first.
    nodes: BTreeMap<u32, (Scalar, usize)>,
    /// Scalar ids used outside node lines (stage values, scatters).
    uses: Vec<(ScalarId, usize)>,
    returned: bool,
}

fn expected(line: usize, expected: impl Into<String>, found: impl Into<String>) -> ParseError {
    ParseError { line, expected: expected.into(), found: found.into() }
}

fn scalar(c: &mut Cursor) -> Result<ScalarId, ParseError> {
    Ok(ScalarId(c.numbered("t", "a scalar `tN`")?))
}

fn buf(c: &mut Cursor) -> Result<BufId, ParseError> {
    Ok(BufId(c.numbered("buf", "a buffer `bufN`")?))
}

fn dtype(c: &mut Cursor) -> Result<DType, ParseError> {
    c.named("a dtype", |w| DType::ALL.into_iter().find(|d| d.name() == w))
}

impl Parser {
    fn line(&mut self, c: &mut Cursor) -> Result<(), ParseError> {
        if self.returned {
            return Err(c.error("nothing after `return`"));
        }
        if c.at_numbered("t") {
            return self.node(c);
        }
        if c.eat("->") {
            return self.close_stage(c);
        }
        if c.eat_word("scatter") {
            return self.scatter(c);
        }
        if let Some((_, line)) = &self.stage {
            return Err(c.error(format!("a node, or `-> tN` ending the stage of line {line}")));
        }
        if c.at_numbered("buf") {
            let out = buf(c)?;
            return if c.eat(":") { self.buffer(c, out) } else { self.open_stage(c, out) };
        }
        if c.eat_word("kernel") {
            return self.open_kernel(c);
        }
        if c.eat_word("extern") {
            return self.extern_step(c);
        }
        if c.eat_word("return") {
            return self.outputs(c);
        }
        Err(c.error("a buffer, `kernel`, a stage, a node, `extern` or `return`"))
    }

    /// `bufK: DTYPE[SIZES] strides [STRIDES] offset EXPR (ROLE)`.
    fn buffer(&mut self, c: &mut Cursor, id: BufId) -> Result<(), ParseError> {
        let k = self.program.buffers.len();
        if id.0 as usize != k {
            c.reset(0);
            return Err(c.error(format!("buf{k} (buffers are numbered in order)")));
        }
        let dtype = dtype(c)?;
        let sizes = c.exprs()?;
        c.expect_word("strides")?;
        let mark = c.mark();
        let strides = c.exprs()?;
        if strides.len() != sizes.len() {
            c.reset(mark);
            return Err(c.error(format!("{} strides, one per size", sizes.len())));
        }
        c.expect_word("offset")?;
        let offset = c.expr()?;
        c.expect("(")?;
        let role = if c.eat_word("input") {
            BufRole::Input(c.uint("an input number")? as usize)
        } else if c.eat_word("temp") {
            BufRole::Temp
        } else if c.eat_word("extern") {
            BufRole::ExternOut
        } else if c.eat_word("view") {
            c.expect_word("of")?;
            BufRole::View(buf(c)?)
        } else {
            return Err(c.error("a role: `input N`, `temp`, `extern` or `view of bufN`"));
        };
        c.expect(")")?;
        c.end()?;
        self.program.buffers.push(Buffer { dtype, sizes, strides, offset, role });
        self.buffer_lines.push(c.line);
        Ok(())
    }

    /// Push the kernel being read, if any, as a step.
    fn close_kernel(&mut self) {
        if let Some(kernel) = self.kernel.take() {
            self.program.steps.push(Step::Kernel(kernel));
        }
    }

    /// `kernel kN outer [EXPRS]`.
    fn open_kernel(&mut self, c: &mut Cursor) -> Result<(), ParseError> {
        self.close_kernel();
        let mark = c.mark();
        let n = c.numbered("k", "a kernel number `kN`")?;
        if n as usize != self.kernels {
            c.reset(mark);
            return Err(c.error(format!("k{} (kernels are numbered in order)", self.kernels)));
        }
        c.expect_word("outer")?;
        let outer = c.exprs()?;
        c.end()?;
        self.kernel = Some(Kernel { outer, stages: Vec::new() });
        self.kernels += 1;
        Ok(())
    }

    /// `bufN[STORE] = stage inner [EXPRS] (OP over [EXPRS])?:`, or
    /// `stage ranges [EXPRS]` for ranges that do not start with the outer ones.
    fn open_stage(&mut self, c: &mut Cursor, out: BufId) -> Result<(), ParseError> {
        let Some(kernel) = &self.kernel else {
            c.reset(0);
            return Err(c.error("`kernel kN outer [...]` before its stages"));
        };
        c.expect("[")?;
        let store = c.expr()?;
        c.expect("]")?;
        c.expect("=")?;
        c.expect_word("stage")?;
        let ranges = if c.eat_word("inner") {
            kernel.outer.iter().cloned().chain(c.exprs()?).collect()
        } else if c.eat_word("ranges") {
            c.exprs()?
        } else {
            return Err(c.error("`inner [...]` or `ranges [...]`"));
        };
        let reduce = if c.peek(":") {
            None
        } else {
            let op = c.named("`:` or a reduction (`sum over [...]`)", ReduceOp::from_name)?;
            c.expect_word("over")?;
            Some(Reduce { op, ranges: c.exprs()? })
        };
        c.expect(":")?;
        c.end()?;
        let stage = Stage { out, ranges, reduce, value: ScalarId(0), store, store_indirect: Vec::new() };
        self.stage = Some((stage, c.line));
        Ok(())
    }

    /// `scatter + tS*(EXPR) + ...`: the data-dependent part of the store.
    fn scatter(&mut self, c: &mut Cursor) -> Result<(), ParseError> {
        let Some((stage, _)) = &mut self.stage else {
            return Err(c.error("a stage header before `scatter`"));
        };
        loop {
            c.expect("+")?;
            let s = scalar(c)?;
            c.expect("*")?;
            c.expect("(")?;
            let stride = c.expr()?;
            c.expect(")")?;
            stage.store_indirect.push((s, stride));
            self.uses.push((s, c.line));
            if c.at_end() {
                return Ok(());
            }
        }
    }

    /// `-> tN`: the stage's value; the stage joins its kernel.
    fn close_stage(&mut self, c: &mut Cursor) -> Result<(), ParseError> {
        let value = scalar(c)?;
        c.end()?;
        let (Some((mut stage, _)), Some(kernel)) = (self.stage.take(), &mut self.kernel) else {
            c.reset(0);
            return Err(c.error("a stage header before `->`"));
        };
        stage.value = value;
        self.uses.push((value, c.line));
        kernel.stages.push(stage);
        Ok(())
    }

    /// `tN: DTYPE = OP ...`.
    fn node(&mut self, c: &mut Cursor) -> Result<(), ParseError> {
        if self.stage.is_none() {
            return Err(c.error("a stage header before its nodes"));
        }
        let id = scalar(c)?;
        if id.0 >= MAX_SCALAR_ID {
            c.reset(0);
            return Err(c.error(format!("a scalar id below {MAX_SCALAR_ID}")));
        }
        c.expect(":")?;
        let dtype = dtype(c)?;
        c.expect("=")?;
        let op = scalar_op(c, dtype)?;
        c.end()?;
        if let Some(operand) = op.operands().into_iter().find(|x| x.0 >= id.0) {
            return Err(expected(c.line, format!("operands of {id} numbered below it"), operand.to_string()));
        }
        let node = Scalar { op, dtype };
        match self.nodes.get(&id.0) {
            Some((first, line)) if *first != node => {
                Err(expected(c.line, format!("{id} as line {line} defines it"), "another definition"))
            }
            Some(_) => Ok(()),
            None => {
                self.nodes.insert(id.0, (node, c.line));
                Ok(())
            }
        }
    }

    /// `extern KIND (BUFS) -> (BUFS)`, then ` node N` for an ATen call.
    fn extern_step(&mut self, c: &mut Cursor) -> Result<(), ParseError> {
        self.close_kernel();
        let mut kind = extern_kind(c)?;
        let inputs = c.list("(", ")", buf)?;
        c.expect("->")?;
        let outputs = c.list("(", ")", buf)?;
        if let ExternKind::Library { node, .. } | ExternKind::Fallback { node, .. } = &mut kind {
            c.expect_word("node")?;
            *node = u32::try_from(c.uint("a graph node number")?).map_err(|_| c.error("a graph node number"))?;
        }
        c.end()?;
        self.program.steps.push(Step::Extern(Extern { kind, inputs, outputs }));
        Ok(())
    }

    /// `return (OUT, ...)`: buffers, integer expressions and `None`s.
    fn outputs(&mut self, c: &mut Cursor) -> Result<(), ParseError> {
        self.close_kernel();
        self.program.outputs = c.list("(", ")", |c| {
            Ok(if c.eat_word("None") {
                ProgramOutput::None
            } else if c.at_numbered("buf") {
                ProgramOutput::Buffer(buf(c)?)
            } else {
                ProgramOutput::Int(c.expr()?)
            })
        })?;
        c.end()?;
        self.returned = true;
        Ok(())
    }

    fn finish(mut self, lines: usize) -> Result<Program, ParseError> {
        if let Some((_, line)) = &self.stage {
            return Err(expected(lines, format!("`-> tN` ending the stage of line {line}"), "end of text"));
        }
        if !self.returned {
            return Err(expected(lines, "`return (...)` ending the program", "end of text"));
        }
        self.check_views()?;
        let operand_uses =
            self.nodes.values().flat_map(|(node, line)| node.op.operands().into_iter().map(|x| (x, *line)));
        if let Some((id, line)) =
            self.uses.iter().copied().chain(operand_uses).find(|(x, _)| !self.nodes.contains_key(&x.0))
        {
            return Err(expected(line, format!("a node line defining {id}"), "none in the text"));
        }
        self.program.scalars = arena(&self.nodes)?;
        Ok(self.program)
    }

    /// Every view's base is a buffer, and following bases ends at a buffer
    /// that owns its storage (`Program::storage_of` would loop or index out
    /// of range otherwise).
    fn check_views(&self) -> Result<(), ParseError> {
        let buffers = &self.program.buffers;
        for (k, line) in self.buffer_lines.iter().enumerate() {
            let mut id = k;
            for _ in 0..=buffers.len() {
                match buffers.get(id).map(|b| &b.role) {
                    Some(BufRole::View(base)) => id = base.0 as usize,
                    Some(_) => break,
                    None => return Err(expected(*line, "a view of a buffer the text defines", format!("buf{id}"))),
                }
            }
            if let Some(BufRole::View(_)) = buffers.get(id).map(|b| &b.role) {
                return Err(expected(*line, "views that end at a buffer's own storage", "a cycle of views"));
            }
        }
        Ok(())
    }
}

/// The scalar arena with each node at its id; the ids in between hold
/// boolean constants of other values than any node's, which nothing reads.
fn arena(nodes: &BTreeMap<u32, (Scalar, usize)>) -> Result<Scalars, ParseError> {
    let mut scalars = Scalars::default();
    let Some(&last) = nodes.keys().next_back() else { return Ok(scalars) };
    let defined: HashSet<&Scalar> = nodes.values().map(|(node, _)| node).collect();
    let mut filler = 0u64;
    for id in 0..=last {
        let (node, line) = match nodes.get(&id) {
            Some((node, line)) => (node.clone(), *line),
            None => loop {
                let node = Scalar { op: ScalarOp::Const { bits: filler }, dtype: DType::Bool };
                filler += 1;
                if !defined.contains(&node) {
                    break (node, 0);
                }
            },
        };
        let got = scalars.add(node.op, node.dtype);
        if got.0 != id {
            // Hash-consing: one node, one id.
            return Err(expected(line, format!("t{id} to differ from {got}"), "the same node"));
        }
    }
    Ok(scalars)
}

/// The operation of a node line (after `=`), for a node of `dtype`.
fn scalar_op(c: &mut Cursor, dtype: DType) -> Result<ScalarOp, ParseError> {
    let mark = c.mark();
    let op = match c.word() {
        "load" => load(c)?,
        "const" => ScalarOp::Const { bits: constant(c, dtype)? },
        "index" => ScalarOp::Index(c.expr()?),
        "cast" => ScalarOp::Cast(scalar(c)?),
        "where" => {
            let cond = scalar(c)?;
            c.expect(",")?;
            let a = scalar(c)?;
            c.expect(",")?;
            ScalarOp::Where(cond, a, scalar(c)?)
        }
        "bounded" => {
            let x = scalar(c)?;
            c.expect(",")?;
            let size = c.expr()?;
            let negatives = if c.eat(",") {
                c.expect_word("nonnegative")?;
                Negatives::Reject
            } else {
                Negatives::Wrap
            };
            ScalarOp::Bounded(x, size, negatives)
        }
        word => {
            if let Some(op) = UnaryOp::from_name(word) {
                ScalarOp::Unary(op, scalar(c)?)
            } else if let Some(op) = BinaryOp::from_name(word) {
                let a = scalar(c)?;
                c.expect(",")?;
                ScalarOp::Binary(op, a, scalar(c)?)
            } else {
                c.reset(mark);
                return Err(c.error("an operation: `load`, `const`, `index`, `cast`, `where`, `bounded` or an op name"));
            }
        }
    };
    Ok(op)
}

/// `bufB[EXPR + tS*(EXPR) ...]`, then ` if tM` for a masked load.
fn load(c: &mut Cursor) -> Result<ScalarOp, ParseError> {
    let buf = buf(c)?;
    c.expect("[")?;
    let index = c.expr()?;
    let mut indirect = Vec::new();
    while c.eat("+") {
        let s = scalar(c)?;
        c.expect("*")?;
        c.expect("(")?;
        indirect.push((s, c.expr()?));
        c.expect(")")?;
    }
    c.expect("]")?;
    let mask = if c.eat_word("if") { Some(scalar(c)?) } else { None };
    Ok(ScalarOp::Load { buf, index, indirect, mask })
}

/// A constant's bits: the integer for integer dtypes; for floats the `f64`
/// as `{:?}` writes it, or `NaN(0x...)` with the bits of an unusual NaN.
fn constant(c: &mut Cursor, dtype: DType) -> Result<u64, ParseError> {
    if !dtype.is_float() {
        return Ok(c.int("an integer constant")? as u64);
    }
    if c.eat("NaN(") {
        c.expect("0x")?;
        let mark = c.mark();
        let bits = u64::from_str_radix(c.word(), 16).map_err(|_| {
            c.reset(mark);
            c.error("hexadecimal bits")
        })?;
        c.expect(")")?;
        return Ok(bits);
    }
    let mark = c.mark();
    let value: f64 = c.token().parse().map_err(|_| {
        c.reset(mark);
        c.error("a float constant")
    })?;
    Ok(value.to_bits())
}

/// What an `extern` line calls, up to its buffer lists. An ATen call's
/// node number, written after them, is filled in by the caller.
fn extern_kind(c: &mut Cursor) -> Result<ExternKind, ParseError> {
    let mark = c.mark();
    let kind = match c.word() {
        "gemm" => {
            let scale = if c.eat_word("scale") {
                let mark = c.mark();
                c.token().parse::<f64>().map_err(|_| {
                    c.reset(mark);
                    c.error("a scale")
                })?
            } else {
                1.0
            };
            ExternKind::Gemm { scale_bits: scale.to_bits() }
        }
        word @ ("depthwise_conv2d" | "depthwise_weight_grad") => {
            let forward = word == "depthwise_conv2d";
            let mut pair = |name: &str| -> Result<[i64; 2], ParseError> {
                c.expect_word(name)?;
                let mark = c.mark();
                let items = c.list("[", "]", |c| c.int("an integer"))?;
                items.try_into().map_err(|_| {
                    c.reset(mark);
                    c.error(format!("two integers for {name}"))
                })
            };
            let (stride, padding, dilation) = (pair("stride")?, pair("padding")?, pair("dilation")?);
            match forward {
                true => ExternKind::DepthwiseConv2d { stride, padding, dilation },
                false => ExternKind::DepthwiseWeightGrad { stride, padding, dilation },
            }
        }
        "sort" => ExternKind::Sort(sort_spec(c)?),
        "searchsorted" => ExternKind::Search {
            right: c.named("`left` or `right`", |w| match w {
                "left" => Some(false),
                "right" => Some(true),
                _ => None,
            })?,
        },
        word @ ("library" | "fallback") => {
            let mark = c.mark();
            let target = c.token();
            if target.is_empty() || target.starts_with('(') {
                c.reset(mark);
                return Err(c.error("an ATen target"));
            }
            let (node, target) = (0, target.to_string());
            if word == "library" {
                ExternKind::Library { node, target }
            } else {
                ExternKind::Fallback { node, target }
            }
        }
        word => {
            let Some(op) = ScanOp::from_name(word) else {
                c.reset(mark);
                return Err(c.error(
                    "an extern: `gemm`, `depthwise_conv2d`, a scan, `sort`, `searchsorted`, `library` or `fallback`",
                ));
            };
            c.expect_word("dim")?;
            ExternKind::Scan { op, dim: c.uint("a dim")? as usize }
        }
    };
    Ok(kind)
}

/// `dim D ascending|descending` and what the sort keeps, as
/// `SortSpec`'s `Display` writes them.
fn sort_spec(c: &mut Cursor) -> Result<SortSpec, ParseError> {
    c.expect_word("dim")?;
    let dim = c.uint("a dim")? as usize;
    let descending = c.named("`ascending` or `descending`", |w| match w {
        "ascending" => Some(false),
        "descending" => Some(true),
        _ => None,
    })?;
    let select = if c.eat_word("first") {
        SortSelect::Leading(c.int("a count")?)
    } else if c.eat_word("element") {
        SortSelect::Kth(c.int("a position")?)
    } else if c.eat_word("median") {
        SortSelect::Median
    } else if c.eat_word("nanmedian") {
        SortSelect::NanMedian
    } else {
        SortSelect::All
    };
    Ok(SortSpec { dim, descending, select })
}
