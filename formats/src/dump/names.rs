//! Dump file names: `{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp_us}`, optionally followed by the
//! FFTS+ suffix `.4.{context_id}.{thread_id}.{device_id}`; stats dumps add `.csv`.
//!
//! Op types never contain dots, so the type is the first field and the numbers are taken from the end;
//! whatever lies between is the op name, even if an unsanitized name kept its dots. Some files have only
//! four fields; we read those as `{op_type}.{op_name}.{task_id}.{timestamp_us}` with no stream id
//! (UNVERIFIED which field is missing; the timestamp is always last).

use crate::error::{FormatError, Result};

/// What a dump file holds, as told by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A protobuf dump of an op's tensors.
    Tensor,
    /// An overflow record, `Opdebug.Node_OpDebug.*` (cann-facts §4).
    OpDebug,
    /// A `dump_data: stats` CSV.
    StatsCsv,
}

/// The FFTS+ sub-task suffix `.4.{context_id}.{thread_id}.{device_id}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FftsSuffix {
    pub context_id: u64,
    pub thread_id: u64,
    pub device_id: u64,
}

/// The fields of a dump file name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DumpFileName {
    pub op_type: String,
    /// Sanitized op name; the real one is `DumpData.op_name`.
    pub op_name: String,
    pub task_id: u64,
    /// Missing in four-field names.
    pub stream_id: Option<u64>,
    pub timestamp_us: u64,
    pub ffts: Option<FftsSuffix>,
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
    let all_numbers = |range: &[&str]| range.iter().all(|f| number(f).is_some());
    // The FFTS+ suffix needs a full five-field name in front of it.
    let (core, ffts) = if n >= 9
        && fields[n - 4] == "4"
        && all_numbers(&fields[n - 7..n - 4])
        && all_numbers(&fields[n - 3..])
    {
        let suffix = FftsSuffix {
            context_id: number(fields[n - 3]).unwrap_or(0),
            thread_id: number(fields[n - 2]).unwrap_or(0),
            device_id: number(fields[n - 1]).unwrap_or(0),
        };
        (&fields[..n - 4], Some(suffix))
    } else {
        (&fields[..], None)
    };
    let m = core.len();
    let (name_end, task_id, stream_id, timestamp_us) = if m >= 5 && all_numbers(&core[m - 3..]) {
        (m - 3, number(core[m - 3]), number(core[m - 2]), number(core[m - 1]))
    } else if all_numbers(&core[m - 2..]) {
        (m - 2, number(core[m - 2]), None, number(core[m - 1]))
    } else {
        return Err(fail("does not end in numeric {task_id}.{stream_id}.{timestamp} fields"));
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
        task_id: task_id.unwrap_or(0),
        stream_id,
        timestamp_us: timestamp_us.unwrap_or(0),
        ffts,
        kind,
    })
}

/// The inverse of [`parse_file_name`] (names are written as given: sanitize them first).
pub fn format_file_name(name: &DumpFileName) -> String {
    let mut out = format!("{}.{}.{}", name.op_type, name.op_name, name.task_id);
    if let Some(stream) = name.stream_id {
        out.push_str(&format!(".{stream}"));
    }
    out.push_str(&format!(".{}", name.timestamp_us));
    if let Some(f) = name.ffts {
        out.push_str(&format!(".4.{}.{}.{}", f.context_id, f.thread_id, f.device_id));
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
    fn parses_standard_ffts_short_opdebug_and_csv_names() {
        let n = parse_file_name("Conv2D.conv1.12.3.1700000000123456").unwrap();
        assert_eq!((n.op_type.as_str(), n.op_name.as_str()), ("Conv2D", "conv1"));
        assert_eq!((n.task_id, n.stream_id, n.timestamp_us), (12, Some(3), 1700000000123456));
        assert_eq!((n.ffts, n.kind), (None, FileKind::Tensor));

        let n = parse_file_name("MatMul.mm.7.1.99.4.2.5.0").unwrap();
        assert_eq!(n.ffts, Some(FftsSuffix { context_id: 2, thread_id: 5, device_id: 0 }));
        assert_eq!((n.task_id, n.stream_id, n.timestamp_us), (7, Some(1), 99));

        let n = parse_file_name("Add.add_1.5.1234").unwrap();
        assert_eq!((n.task_id, n.stream_id, n.timestamp_us), (5, None, 1234));

        let n = parse_file_name("Opdebug.Node_OpDebug.40.2.555").unwrap();
        assert_eq!(n.kind, FileKind::OpDebug);

        let n = parse_file_name("Relu.relu.1.2.3.csv").unwrap();
        assert_eq!((n.kind, n.timestamp_us), (FileKind::StatsCsv, 3));

        // Unsanitized dots in the name: numbers come from the end, the type from the front.
        let n = parse_file_name("Mul.layer.0.mlp.mul.9.8.7").unwrap();
        assert_eq!((n.op_name.as_str(), n.task_id, n.stream_id), ("layer.0.mlp.mul", 9, Some(8)));
    }

    #[test]
    fn format_inverts_parse() {
        for name in
            ["Conv2D.conv1.12.3.17", "MatMul.mm.7.1.99.4.2.5.0", "Add.add_1.5.1234", "Relu.r.1.2.3.csv"]
        {
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
