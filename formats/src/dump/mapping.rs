//! `mapping.csv`: file names longer than 255 bytes are replaced by a number, listed as `{number},{original}`
//! in a `mapping.csv` beside the files.
//!
//! CANN picks a random number; we derive it from a hash of the name so that runs are reproducible.

use crate::error::{FormatError, Result};
use crate::hash::xxh64;
use std::collections::HashMap;
use std::path::Path;

/// The longest file name a file system takes.
pub const MAX_FILE_NAME_LEN: usize = 255;

/// The name of the mapping file in a dump directory.
pub const MAPPING_FILE: &str = "mapping.csv";

/// Short file name to original file name, for one directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NameMapping {
    rows: Vec<(String, String)>,
    by_short: HashMap<String, usize>,
}

impl NameMapping {
    /// Parses `mapping.csv` content. Errors carry the byte offset and line number of the bad row.
    pub fn parse(bytes: &[u8]) -> Result<NameMapping> {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| FormatError::at(e.valid_up_to() as u64, "mapping.csv is not UTF-8"))?;
        let mut mapping = NameMapping::default();
        let mut offset = 0u64;
        for (line_no, line) in text.split_inclusive('\n').enumerate() {
            let start = offset;
            offset += line.len() as u64;
            let row = line.trim_end_matches(['\n', '\r']);
            if row.trim().is_empty() {
                continue;
            }
            let Some((short, original)) = row.split_once(',') else {
                return Err(FormatError::at(
                    start,
                    format!("line {}: expected {{number}},{{original name}}, found {row:?}", line_no + 1),
                ));
            };
            mapping.insert(short.trim().to_string(), unquote(original));
        }
        Ok(mapping)
    }

    /// Reads `dir/mapping.csv`; a directory without one has an empty mapping.
    pub fn read_dir(dir: &Path) -> Result<NameMapping> {
        let path = dir.join(MAPPING_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => NameMapping::parse(&bytes).map_err(|e| e.in_file(&path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(NameMapping::default()),
            Err(e) => Err(FormatError::io(&path, &e)),
        }
    }

    /// The original name of a shortened file name.
    pub fn original(&self, file_name: &str) -> Option<&str> {
        self.by_short.get(file_name).map(|&i| self.rows[i].1.as_str())
    }

    /// The original name if `file_name` is listed, else `file_name` itself.
    pub fn resolve<'s>(&'s self, file_name: &'s str) -> &'s str {
        self.original(file_name).unwrap_or(file_name)
    }

    /// The name to write a file under: `full_name` itself when short enough, else a number that is recorded.
    pub fn file_name_for(&mut self, full_name: &str) -> String {
        if full_name.len() <= MAX_FILE_NAME_LEN {
            return full_name.to_string();
        }
        let mut seed = 0;
        loop {
            let short = xxh64(full_name.as_bytes(), seed).to_string();
            match self.original(&short) {
                Some(existing) if existing == full_name => return short,
                Some(_) => seed += 1,
                None => {
                    self.insert(short.clone(), full_name.to_string());
                    return short;
                }
            }
        }
    }

    /// `(short, original)` rows in order.
    pub fn rows(&self) -> &[(String, String)] {
        &self.rows
    }

    /// Whether the mapping has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The `mapping.csv` content.
    pub fn to_csv(&self) -> String {
        let mut out = String::new();
        for (short, original) in &self.rows {
            if original.contains([',', '"', '\n', '\r']) {
                out.push_str(&format!("{short},\"{}\"\n", original.replace('"', "\"\"")));
            } else {
                out.push_str(&format!("{short},{original}\n"));
            }
        }
        out
    }

    fn insert(&mut self, short: String, original: String) {
        match self.by_short.get(&short) {
            // A repeated key: the later row wins, as a reader building a dict would have it.
            Some(&i) => self.rows[i].1 = original,
            None => {
                self.by_short.insert(short.clone(), self.rows.len());
                self.rows.push((short, original));
            }
        }
    }
}

fn unquote(field: &str) -> String {
    let field = field.trim();
    match field.strip_prefix('"').and_then(|f| f.strip_suffix('"')) {
        Some(inner) => inner.replace("\"\"", "\""),
        None => field.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_get_a_stable_number_and_round_trip() {
        let long = format!("MatMul.{}.1.2.3", "x".repeat(300));
        let mut mapping = NameMapping::default();
        assert_eq!(mapping.file_name_for("Add.a.1.2.3"), "Add.a.1.2.3");
        let short = mapping.file_name_for(&long);
        assert!(short.len() <= MAX_FILE_NAME_LEN && short.bytes().all(|b| b.is_ascii_digit()));
        assert_eq!(mapping.file_name_for(&long), short);
        assert_eq!(mapping.rows().len(), 1);
        let back = NameMapping::parse(mapping.to_csv().as_bytes()).unwrap();
        assert_eq!(back.original(&short), Some(long.as_str()));
        assert_eq!(back.resolve("other"), "other");
    }

    #[test]
    fn bad_row_names_line_and_offset() {
        let err = NameMapping::parse(b"1,a\r\nno comma here\n").unwrap_err();
        assert_eq!(err.offset, Some(5));
        assert!(err.problem.starts_with("line 2:"), "{err}");
        let quoted = NameMapping::parse(b"7,\"a,\"\"b\"\n").unwrap();
        assert_eq!(quoted.original("7"), Some("a,\"b"));
    }
}
