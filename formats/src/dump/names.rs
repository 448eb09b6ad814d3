//! Dump file names. Three shapes, all `.`-separated, with the timestamp (µs) last:
//! - six fields (the current adump): `{op_type}.{op_name}.{dump_number}.{task_id}.{stream_id}.{timestamp}`,
//!   where `dump_number` is a process-wide counter of dumped files;
//! - five fields (older producers): `{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}`;
//! - four fields (some files): `{op_type}.{op_name}.{task_id}.{timestamp}`, read with no stream id
//!   (UNVERIFIED which field is missing).
//!
//! FFTS+ sub-tasks append `.{context_id}.{thread_id}.{device_id}` after a marker: the literal `FFTSPLUS`
//! (current adump, written when both context and thread id are non-zero) or `4` (older producers). Stats
//! dumps end in `.csv`. Names longer than 255 bytes are replaced by a number listed in `mapping.csv`
//! ([`super::mapping`]).
//!
//! Op types never contain dots, so the type is the first field; the numbers are taken from the end, and the
//! count of trailing numeric fields tells the shapes apart (4 or more: six fields, 3: five, 2: four). The
//! producer replaces dots in op names with `_`, so whatever lies between type and numbers is the op name,
//! even an unsanitized one that kept its dots (then it must not end in a numeric field). The real op name
//! is `DumpData.op_name`.

use crate::error::{FormatError, Result};

/// What a dump file holds, as told by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A protobuf dump of an op's tensors.
    Tensor,
    /// An overflow record, `Opdebug.Node_OpDebug.*` (docs/CANN.md §4).
    OpDebug,
    /// A `dump_data: stats` CSV.
    StatsCsv,
}

/// How a name marks its FFTS+ suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FftsForm {
    /// `.FFTSPLUS.{context}.{thread}.{device}` (current adump).
    FftsPlus,
    /// `.4.{context}.{thread}.{device}` (older producers).
    Legacy,
}

impl FftsForm {
    fn marker(self) -> &'static str {
        match self {
            FftsForm::FftsPlus => "FFTSPLUS",
            FftsForm::Legacy => "4",
        }
    }
}

/// The FFTS+ sub-task suffix: which context and thread of the task this file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FftsSuffix {
    /// FFTS+ context id.
    pub context_id: u64,
    /// Thread id within the context.
    pub thread_id: u64,
    /// Device id.
    pub device_id: u64,
    /// How the name spelled the suffix.
    pub form: FftsForm,
}

/// The fields of a dump file name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DumpFileName {
    /// Op type (first field).
    pub op_type: String,
    /// Sanitized op name; the real one is `DumpData.op_name`.
    pub op_name: String,
    /// The producer's process-wide count of dumped files (six-field names only).
    pub dump_number: Option<u64>,
    /// Device task id.
    pub task_id: u64,
    /// Missing in four-field names.
    pub stream_id: Option<u64>,
    /// Dump time, µs since the epoch.
    pub timestamp_us: u64,
    /// FFTS+ sub-task, when the name has the suffix.
    pub ffts: Option<FftsSuffix>,
    /// What the file holds.
    pub kind: FileKind,
}

/// Replaces the characters CANN does not keep in file names (space, `.`, `/`, `\`) with `_`.
pub fn sanitize_op_name(name: &str) -> String {
    name.chars().map(|c| if matches!(c, ' ' | '.' | '/' | '\\') { '_' } else { c }).collect()
}

/// Parses a file name (no directory part).
pub fn parse_file_name(name: &str) -> Result<DumpFileName> {
    let fail = |why: &str| FormatError::whole(format!("file name {name:?}: {why}"));
    let (stem, csv) = match name.strip_suffix(".csv") {
        Some(stem) => (stem, true),
        None => (name, false),
    };
    let fields: Vec<&str> = stem.split('.').collect();
    let n = fields.len();
    if n < 4 {
        return Err(fail(&format!(
            "{n} dot-separated fields; a dump file name has at least 4 ({{op_type}}.{{op_name}}.{{task_id}}.{{timestamp}})"
        )));
    }
    let ffts = ffts_suffix_of(&fields);
    let core = &fields[..if ffts.is_some() { n - 4 } else { n }];
    let m = core.len();
    // Trailing numeric fields, not counting the op type and at least one name field.
    let numeric = core[2..].iter().rev().take_while(|f| number(f).is_some()).count();
    let tail = |k: usize| number(core[m - k]);
    let (name_end, dump_number, task_id, stream_id, timestamp_us) = match numeric {
        k if k >= 4 => (m - 4, tail(4), tail(3), tail(2), tail(1)),
        3 => (m - 3, None, tail(3), tail(2), tail(1)),
        2 => (m - 2, None, tail(2), None, tail(1)),
        _ => return Err(fail("does not end in numeric {task_id}.{stream_id}.{timestamp} fields")),
    };
    let op_type = core[0];
    let op_name = core[1..name_end].join(".");
    if op_type.is_empty() || op_name.is_empty() {
        return Err(fail("empty op type or op name"));
    }
    let kind = if csv {
        FileKind::StatsCsv
    } else if op_type.eq_ignore_ascii_case("Opdebug") {
        FileKind::OpDebug
    } else {
        FileKind::Tensor
    };
    Ok(DumpFileName {
        op_type: op_type.to_string(),
        op_name,
        dump_number,
        task_id: task_id.unwrap_or(0),
        stream_id,
        timestamp_us: timestamp_us.unwrap_or(0),
        ffts,
        kind,
    })
}

/// The FFTS+ sub-task suffix of a file name, if it has one: what [`parse_file_name`] gives as `ffts`,
/// without reading the rest of the name (an op's launch asks this of every op a capture holds).
pub fn ffts_suffix(name: &str) -> Option<FftsSuffix> {
    let stem = name.strip_suffix(".csv").unwrap_or(name);
    ffts_suffix_of(&stem.split('.').collect::<Vec<_>>())
}

/// The suffix that ends `fields` (a file name's stem split at its dots), in either form.
fn ffts_suffix_of(fields: &[&str]) -> Option<FftsSuffix> {
    let n = fields.len();
    // A suffix needs a complete name in front of it: type, name, and at least task, stream and timestamp.
    if n < 9 {
        return None;
    }
    let all_numbers = |range: &[&str]| range.iter().all(|f| number(f).is_some());
    let form = if all_numbers(&fields[n - 3..]) && fields[n - 4] == "FFTSPLUS" {
        FftsForm::FftsPlus
    } else if fields[n - 4] == "4" && all_numbers(&fields[n - 7..n - 4]) && all_numbers(&fields[n - 3..]) {
        FftsForm::Legacy
    } else {
        return None;
    };
    Some(FftsSuffix {
        context_id: number(fields[n - 3]).unwrap_or(0),
        thread_id: number(fields[n - 2]).unwrap_or(0),
        device_id: number(fields[n - 1]).unwrap_or(0),
        form,
    })
}

/// The inverse of [`parse_file_name`] (names are written as given: sanitize them first).
pub fn format_file_name(name: &DumpFileName) -> String {
    use std::fmt::Write;
    // One buffer, written in place: a capture's reader names every op it holds with this.
    let mut out = String::with_capacity(name.op_type.len() + name.op_name.len() + 64);
    // Writing to a String cannot fail.
    let _ = write!(out, "{}.{}", name.op_type, name.op_name);
    if let Some(n) = name.dump_number {
        let _ = write!(out, ".{n}");
    }
    let _ = write!(out, ".{}", name.task_id);
    if let Some(stream) = name.stream_id {
        let _ = write!(out, ".{stream}");
    }
    let _ = write!(out, ".{}", name.timestamp_us);
    if let Some(f) = name.ffts {
        let _ = write!(out, ".{}.{}.{}.{}", f.form.marker(), f.context_id, f.thread_id, f.device_id);
    }
    if name.kind == FileKind::StatsCsv {
        out.push_str(".csv");
    }
    out
}

/// Digits only (no sign, no spaces), within u64.
fn number(field: &str) -> Option<u64> {
    if field.is_empty() || !field.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    field.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_six_five_four_field_opdebug_and_csv_names() {
        let n = parse_file_name("MatMulV2.aclnnMm_MatMulV2.42.12.3.1700000000123456").unwrap();
        assert_eq!((n.op_type.as_str(), n.op_name.as_str()), ("MatMulV2", "aclnnMm_MatMulV2"));
        assert_eq!((n.dump_number, n.task_id, n.stream_id), (Some(42), 12, Some(3)));
        assert_eq!((n.timestamp_us, n.ffts, n.kind), (1700000000123456, None, FileKind::Tensor));

        let n = parse_file_name("Conv2D.conv1.12.3.1700000000123456").unwrap();
        assert_eq!((n.op_type.as_str(), n.op_name.as_str()), ("Conv2D", "conv1"));
        assert_eq!(
            (n.dump_number, n.task_id, n.stream_id, n.timestamp_us),
            (None, 12, Some(3), 1700000000123456)
        );

        let n = parse_file_name("Add.add_1.5.1234").unwrap();
        assert_eq!((n.dump_number, n.task_id, n.stream_id, n.timestamp_us), (None, 5, None, 1234));

        let n = parse_file_name("Opdebug.Node_OpDebug.40.2.555").unwrap();
        assert_eq!(n.kind, FileKind::OpDebug);
        let n = parse_file_name("Opdebug.Node_OpDebug.9.40.2.555").unwrap();
        assert_eq!((n.kind, n.dump_number, n.task_id), (FileKind::OpDebug, Some(9), 40));

        let n = parse_file_name("Relu.relu.1.2.3.csv").unwrap();
        assert_eq!((n.kind, n.timestamp_us), (FileKind::StatsCsv, 3));
        let n = parse_file_name("Relu.relu.8.1.2.3.csv").unwrap();
        assert_eq!((n.kind, n.dump_number, n.timestamp_us), (FileKind::StatsCsv, Some(8), 3));

        // Unsanitized dots in the name: numbers come from the end, the type from the front.
        let n = parse_file_name("Mul.layer.0.mlp.mul.9.8.7").unwrap();
        assert_eq!((n.op_name.as_str(), n.task_id, n.stream_id), ("layer.0.mlp.mul", 9, Some(8)));
        // A numeric-looking name field stays the name: the count starts after it.
        let n = parse_file_name("Add.7.1.2.3").unwrap();
        assert_eq!((n.op_name.as_str(), n.dump_number, n.task_id), ("7", None, 1));
    }

    #[test]
    fn parses_both_ffts_suffix_forms() {
        let n =
            parse_file_name("FusedMatMulBiasGelu.fused_0.17.33.2.1700000000000009.FFTSPLUS.1.2.0").unwrap();
        let f = n.ffts.unwrap();
        assert_eq!((f.context_id, f.thread_id, f.device_id, f.form), (1, 2, 0, FftsForm::FftsPlus));
        assert_eq!(
            (n.op_name.as_str(), n.dump_number, n.task_id, n.stream_id),
            ("fused_0", Some(17), 33, Some(2))
        );
        assert_eq!(n.timestamp_us, 1700000000000009);

        let n = parse_file_name("MatMul.mm.7.1.99.4.2.5.0").unwrap();
        let f = n.ffts.unwrap();
        assert_eq!((f.context_id, f.thread_id, f.device_id, f.form), (2, 5, 0, FftsForm::Legacy));
        assert_eq!((n.dump_number, n.task_id, n.stream_id, n.timestamp_us), (None, 7, Some(1), 99));

        // The marker without three numbers after it is part of no suffix (here: a lenient four-field name).
        assert_eq!(parse_file_name("A.b.1.2.3.FFTSPLUS.x.2.0").unwrap().ffts, None);

        // The suffix alone, as an op's launch reads it, is the full parse's.
        for name in [
            "FusedMatMulBiasGelu.fused_0.17.33.2.1700000000000009.FFTSPLUS.1.2.0",
            "MatMul.mm.7.1.99.4.2.5.0",
            "A.b.1.2.3.FFTSPLUS.x.2.0",
            "MatMul.mm.7.1.99.4.2.5.0.csv",
            "Mul.layer.0.mlp.mul.9.8.7",
            "Gelu.g.5.7.1.99.FFTSPLUS.1.1.3",
        ] {
            assert_eq!(ffts_suffix(name), parse_file_name(name).unwrap().ffts, "{name}");
        }
    }

    #[test]
    fn format_inverts_parse() {
        for name in [
            "Conv2D.conv1.12.3.17",
            "MatMulV2.mm.42.12.3.17",
            "MatMul.mm.7.1.99.4.2.5.0",
            "Gelu.g.5.7.1.99.FFTSPLUS.1.1.3",
            "Add.add_1.5.1234",
            "Relu.r.1.2.3.csv",
            "Relu.r.9.1.2.3.csv",
        ] {
            assert_eq!(format_file_name(&parse_file_name(name).unwrap()), name);
        }
    }

    #[test]
    fn rejects_malformed_names_with_the_reason() {
        let err = parse_file_name("a.b.c").unwrap_err();
        assert!(err.problem.contains("3 dot-separated fields"), "{err}");
        let err = parse_file_name("Add.add.x.y.z").unwrap_err();
        assert!(err.problem.contains("does not end in numeric"), "{err}");
        assert!(parse_file_name(".x.1.2.3").is_err());
        assert!(parse_file_name("Add.add.1.99999999999999999999999").is_err());
    }

    #[test]
    fn sanitizes_separators() {
        assert_eq!(sanitize_op_name("a b.c/d\\e"), "a_b_c_d_e");
    }
}
