//! A cursor over one line of the text form: the tokens every line shares
//! (words, numbers, numbered names like `buf3` and `t7`, bracketed lists)
//! and index expressions, each failing with a [`ParseError`] that names the
//! line and what it expected there.

use super::ParseError;
use crate::expr::{Atom, Expr, Sym, Var};

/// Where a line is being read. Whitespace between tokens is skipped.
pub(super) struct Cursor<'a> {
    text: &'a str,
    pos: usize,
    pub line: usize,
}

/// At most this much of the rest of a line is quoted in an error.
const QUOTED: usize = 48;

impl<'a> Cursor<'a> {
    pub fn new(text: &'a str, line: usize) -> Cursor<'a> {
        Cursor { text, pos: 0, line }
    }

    fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    /// Where the cursor is, to [`Cursor::reset`] to (an error then quotes
    /// the line from there).
    pub fn mark(&self) -> usize {
        self.pos
    }

    pub fn reset(&mut self, mark: usize) {
        self.pos = mark;
    }

    /// An error at the cursor: `expected` there, quoting what is there.
    pub fn error(&self, expected: impl Into<String>) -> ParseError {
        let rest = self.rest().trim();
        let found = match rest.char_indices().nth(QUOTED) {
            None if rest.is_empty() => "end of line".to_string(),
            None => format!("`{rest}`"),
            Some((cut, _)) => format!("`{}...`", &rest[..cut]),
        };
        ParseError { line: self.line, expected: expected.into(), found }
    }

    /// Whether the next token starts with `s`.
    pub fn peek(&mut self, s: &str) -> bool {
        self.skip_ws();
        self.rest().starts_with(s)
    }

    /// Consume `s` if it comes next.
    pub fn eat(&mut self, s: &str) -> bool {
        let found = self.peek(s);
        if found {
            self.pos += s.len();
        }
        found
    }

    pub fn expect(&mut self, s: &str) -> Result<(), ParseError> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(self.error(format!("`{s}`")))
        }
    }

    /// Nothing but whitespace is left.
    pub fn end(&mut self) -> Result<(), ParseError> {
        self.skip_ws();
        if self.at_end() {
            Ok(())
        } else {
            Err(self.error("end of line"))
        }
    }

    pub fn at_end(&mut self) -> bool {
        self.skip_ws();
        self.rest().is_empty()
    }

    /// A word that `lookup` knows (an op name, a dtype), or an error that
    /// expects `what` at the word.
    pub fn named<T>(&mut self, what: &str, lookup: impl Fn(&str) -> Option<T>) -> Result<T, ParseError> {
        let mark = self.mark();
        let word = self.word();
        lookup(word).ok_or_else(|| {
            self.reset(mark);
            self.error(what)
        })
    }

    /// The next run of identifier characters (letters, digits, `_`), which
    /// may be empty.
    pub fn word(&mut self) -> &'a str {
        self.skip_ws();
        let rest = self.rest();
        let len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }

    /// Consume the word `w` if it comes next (not a prefix of a longer word).
    pub fn eat_word(&mut self, w: &str) -> bool {
        let save = self.pos;
        if self.word() == w {
            return true;
        }
        self.pos = save;
        false
    }

    pub fn expect_word(&mut self, w: &str) -> Result<(), ParseError> {
        if self.eat_word(w) {
            Ok(())
        } else {
            Err(self.error(format!("`{w}`")))
        }
    }

    /// The next run of characters up to whitespace (an ATen target, a float).
    pub fn token(&mut self) -> &'a str {
        self.skip_ws();
        let rest = self.rest();
        let len = rest.find(char::is_whitespace).unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }

    /// Whether a name `prefix<digits>` (`t7`, `buf3`) comes next.
    pub fn at_numbered(&mut self, prefix: &str) -> bool {
        self.peek(prefix) && self.rest()[prefix.len()..].starts_with(|c: char| c.is_ascii_digit())
    }

    /// A name `prefix<digits>`, as its number.
    pub fn numbered(&mut self, prefix: &str, what: &str) -> Result<u32, ParseError> {
        if !self.at_numbered(prefix) {
            return Err(self.error(what));
        }
        let save = self.pos;
        self.pos += prefix.len();
        let digits = self.word();
        digits.parse().map_err(|_| {
            self.pos = save;
            self.error(what)
        })
    }

    /// A non-negative integer.
    pub fn uint(&mut self, what: &str) -> Result<u64, ParseError> {
        self.skip_ws();
        let rest = self.rest();
        let len = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let value = rest[..len].parse().map_err(|_| self.error(what))?;
        self.pos += len;
        Ok(value)
    }

    /// An integer, `-` for a negative one.
    pub fn int(&mut self, what: &str) -> Result<i64, ParseError> {
        let save = self.pos;
        let negative = self.eat("-");
        let magnitude = i128::from(self.uint(what)?);
        let value = if negative { -magnitude } else { magnitude };
        i64::try_from(value).map_err(|_| {
            self.pos = save;
            self.error(format!("{what} that fits in 64 bits"))
        })
    }

    /// `open item, item, ... close`, possibly empty.
    pub fn list<T>(
        &mut self,
        open: &str,
        close: &str,
        mut item: impl FnMut(&mut Self) -> Result<T, ParseError>,
    ) -> Result<Vec<T>, ParseError> {
        self.expect(open)?;
        let mut items = Vec::new();
        if self.eat(close) {
            return Ok(items);
        }
        loop {
            items.push(item(self)?);
            if self.eat(close) {
                return Ok(items);
            }
            if !self.eat(",") {
                return Err(self.error(format!("`,` or `{close}`")));
            }
        }
    }

    /// `[expr, ...]`.
    pub fn exprs(&mut self) -> Result<Vec<Expr>, ParseError> {
        self.list("[", "]", Self::expr)
    }

    /// An index expression as `Expr`'s `Display` writes it: `±` separated
    /// terms, each a product of integers, variables `i0`, symbols `s0` and
    /// parenthesised `(e // d)`, `(e % d)` or `(e)`. A sum is rebuilt through
    /// `Expr`'s arithmetic, so it comes back in canonical form; floor
    /// divisions and remainders are kept as written (re-simplifying them
    /// could change an expression the printer wrote). Stops before
    /// `+ t3` (the data-dependent part of a load's index).
    pub fn expr(&mut self) -> Result<Expr, ParseError> {
        let mut acc = if self.eat("-") { self.product()?.neg() } else { self.product()? };
        loop {
            let save = self.pos;
            let negate = if self.eat("+") {
                false
            } else if self.peek("->") {
                break;
            } else if self.eat("-") {
                true
            } else {
                break;
            };
            if self.at_numbered("t") {
                self.pos = save;
                break;
            }
            let term = self.product()?;
            acc = if negate { acc.sub(&term) } else { acc.add(&term) };
        }
        Ok(acc)
    }

    fn product(&mut self) -> Result<Expr, ParseError> {
        let mut acc = self.factor()?;
        while self.eat("*") {
            acc = acc.mul(&self.factor()?);
        }
        Ok(acc)
    }

    fn factor(&mut self) -> Result<Expr, ParseError> {
        const WHAT: &str = "an index expression";
        if self.peek("(") {
            self.pos += 1;
            let inner = self.expr()?;
            let atom = if self.eat("//") {
                Atom::FloorDiv(Box::new(inner), Box::new(self.divisor()?))
            } else if self.eat("%") {
                Atom::Mod(Box::new(inner), Box::new(self.divisor()?))
            } else {
                self.expect(")")?;
                return Ok(inner);
            };
            self.expect(")")?;
            return Ok(Expr::atom_expr(atom));
        }
        if self.at_numbered("i") {
            return Ok(Expr::var(Var(self.numbered("i", WHAT)?)));
        }
        if self.at_numbered("s") {
            return Ok(Expr::sym(Sym(self.numbered("s", WHAT)?)));
        }
        if self.rest().starts_with(|c: char| c.is_ascii_digit()) {
            return Ok(Expr::c(self.int(WHAT)?));
        }
        Err(self.error(WHAT))
    }

    /// The right side of `//` or `%`: a factor, negated by a leading `-`.
    fn divisor(&mut self) -> Result<Expr, ParseError> {
        if self.eat("-") {
            Ok(self.factor()?.neg())
        } else {
            self.factor()
        }
    }
}
