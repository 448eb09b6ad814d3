//! The `.npy` header: a Python dict literal such as
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }`, parsed by a small recursive-descent reader
//! that accepts exactly that grammar (strings, True/False, tuples of integers) and nothing that would need
//! evaluating Python.

use crate::{FormatError, Result};

/// One value of the header dict.
#[derive(Debug, PartialEq)]
pub(crate) enum Value {
    Str(String),
    Bool(bool),
    Tuple(Vec<u64>),
    /// A list (NumPy writes structured dtypes' descr as one): recognised only to refuse it clearly.
    List,
}

pub(crate) struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
    /// File offset of `text[0]`, for error messages.
    base: u64,
}

impl<'a> Parser<'a> {
    pub fn new(text: &'a [u8], base: u64) -> Self {
        Parser { text, pos: 0, base }
    }

    fn err(&self, problem: impl Into<String>) -> FormatError {
        FormatError::at(self.base + self.pos as u64, problem)
    }

    fn skip_ws(&mut self) {
        while self.text.get(self.pos).is_some_and(|b| b.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.text.get(self.pos).copied()
    }

    fn expect(&mut self, byte: u8) -> Result<()> {
        match self.peek() {
            Some(b) if b == byte => {
                self.pos += 1;
                Ok(())
            }
            Some(b) => Err(self.err(format!(
                "npy header: expected '{}', found '{}'",
                byte as char,
                b.escape_ascii()
            ))),
            None => {
                Err(self.err(format!("npy header: expected '{}', found the end of the header", byte as char)))
            }
        }
    }

    fn string(&mut self) -> Result<String> {
        let quote = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err(self.err("npy header: expected a quoted string")),
        };
        let start = self.pos + 1;
        let len = self.text[start..]
            .iter()
            .position(|&b| b == quote)
            .ok_or_else(|| self.err("npy header: unterminated string"))?;
        self.pos = start + len + 1;
        String::from_utf8(self.text[start..start + len].to_vec())
            .map_err(|_| self.err("npy header: string is not UTF-8"))
    }

    fn integer(&mut self) -> Result<u64> {
        self.skip_ws();
        let start = self.pos;
        let mut value = 0u64;
        while let Some(d) = self.text.get(self.pos).filter(|b| b.is_ascii_digit()) {
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(d - b'0')))
                .ok_or_else(|| self.err("npy header: dimension does not fit 64 bits"))?;
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.err("npy header: expected a non-negative integer dimension"));
        }
        // Python 2 wrote long integers as `3L`.
        if self.text.get(self.pos) == Some(&b'L') {
            self.pos += 1;
        }
        Ok(value)
    }

    fn tuple(&mut self) -> Result<Vec<u64>> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            if self.peek() == Some(b')') {
                self.pos += 1;
                return Ok(dims);
            }
            // Each dim takes at least two header bytes, so this cannot grow beyond the header's size.
            dims.push(self.integer()?);
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b')') => {}
                _ => return Err(self.err("npy header: expected ',' or ')' in the shape")),
            }
        }
    }

    fn word(&mut self, word: &str) -> bool {
        self.skip_ws();
        let found = self.text[self.pos..].starts_with(word.as_bytes());
        if found {
            self.pos += word.len();
        }
        found
    }

    fn value(&mut self) -> Result<Value> {
        match self.peek() {
            Some(b'\'' | b'"') => Ok(Value::Str(self.string()?)),
            Some(b'(') => Ok(Value::Tuple(self.tuple()?)),
            Some(b'[') => Ok(Value::List),
            _ if self.word("True") => Ok(Value::Bool(true)),
            _ if self.word("False") => Ok(Value::Bool(false)),
            _ => Err(self.err("npy header: expected a string, True/False or a shape tuple")),
        }
    }

    /// The dict as (key, value, offset of the value) entries; stops at the first list value.
    pub fn dict(&mut self) -> Result<Vec<(String, Value, u64)>> {
        self.expect(b'{')?;
        let mut entries = Vec::new();
        loop {
            if self.peek() == Some(b'}') {
                return Ok(entries);
            }
            let key = self.string()?;
            self.expect(b':')?;
            self.skip_ws();
            let at = self.base + self.pos as u64;
            let value = self.value()?;
            let stop = value == Value::List;
            entries.push((key, value, at));
            if stop {
                return Ok(entries);
            }
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {}
                _ => return Err(self.err("npy header: expected ',' or '}' after a value")),
            }
        }
    }
}
