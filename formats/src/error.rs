//! The one error type of every byte-format reader: it names the file, the byte offset and the problem.
//!
//! Parsers work on byte slices and report offsets; whoever opened the file attaches its path with
//! [`FormatError::in_file`], so every message a user sees says where to look.

use std::fmt;
use std::path::{Path, PathBuf};

/// A malformed or unsupported input, located as precisely as the reader could.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError {
    /// The file being read, when known.
    pub path: Option<PathBuf>,
    /// Byte offset in that file (or in the buffer being parsed) where the problem was found.
    pub offset: Option<u64>,
    /// What is wrong, phrased for the user ("header length 9000 exceeds the file size 120").
    pub problem: String,
}

/// Shorthand for results of the format readers.
pub type Result<T, E = FormatError> = std::result::Result<T, E>;

impl FormatError {
    /// A problem found at `offset` of the input.
    pub fn at(offset: u64, problem: impl Into<String>) -> Self {
        FormatError { path: None, offset: Some(offset), problem: problem.into() }
    }

    /// A problem that concerns the input as a whole (no single offset).
    pub fn whole(problem: impl Into<String>) -> Self {
        FormatError { path: None, offset: None, problem: problem.into() }
    }

    /// Attaches the file the input came from (keeps an already attached path).
    pub fn in_file(mut self, path: &Path) -> Self {
        if self.path.is_none() {
            self.path = Some(path.to_path_buf());
        }
        self
    }

    /// Shifts the offset by `base`: for errors found in a sub-slice that starts at `base` in the file.
    pub fn shifted(mut self, base: u64) -> Self {
        self.offset = self.offset.map(|o| o.saturating_add(base));
        self
    }

    /// An I/O error while opening or reading `path`.
    pub fn io(path: &Path, err: &std::io::Error) -> Self {
        FormatError { path: Some(path.to_path_buf()), offset: None, problem: err.to_string() }
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(path) => write!(f, "{}", path.display())?,
            None => write!(f, "<input>")?,
        }
        if let Some(offset) = self.offset {
            write!(f, ": at byte {offset}")?;
        }
        write!(f, ": {}", self.problem)
    }
}

impl std::error::Error for FormatError {}

/// Attaches a path to the error of a result: `parse(bytes).in_file(path)?`.
pub trait ResultExt<T> {
    /// See [`FormatError::in_file`].
    fn in_file(self, path: &Path) -> Result<T>;
}

impl<T> ResultExt<T> for Result<T> {
    fn in_file(self, path: &Path) -> Result<T> {
        self.map_err(|e| e.in_file(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_file_offset_and_problem() {
        let err = FormatError::at(12, "bad magic").shifted(100).in_file(Path::new("runs/a/seg0"));
        assert_eq!(err.to_string(), "runs/a/seg0: at byte 112: bad magic");
        assert_eq!(FormatError::whole("empty").to_string(), "<input>: empty");
    }
}
