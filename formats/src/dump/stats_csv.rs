//! The statistics dump (`dump_data: "stats"`): one CSV per op instead of tensor bytes, with header
//! `Input/Output,Index,Data Size,Data Type,Format,Shape,Max Value,Min Value,Avg Value,Count,Nan Count,
//! Negative Inf Count,Positive Inf Count` (docs/CANN.md §1).
//!
//! Columns are found by header name (case, spaces and `/` ignored), so a subset or superset of columns
//! reads; only `Input/Output` and `Index` are required. Errors give the line number and its byte offset.

use super::file::{format_name, Io};
use crate::dtype::DType;
use crate::error::{FormatError, Result};
use accutrace_proto::dumpdata::OutputFormat;

/// One row: the statistics of one input or output tensor. Absent or empty cells are `None`.
#[derive(Clone, Debug, PartialEq)]
pub struct StatsRow {
    /// Input or output.
    pub io: Io,
    /// Position among the op's inputs (or outputs).
    pub index: usize,
    /// Size of the tensor's data in bytes.
    pub data_size: Option<u64>,
    /// The element type.
    pub dtype: Option<DType>,
    /// `OutputFormat` code.
    pub format: Option<i32>,
    /// The tensor's shape.
    pub shape: Option<Vec<u64>>,
    /// Largest value.
    pub max: Option<f64>,
    /// Smallest value.
    pub min: Option<f64>,
    /// Mean.
    pub avg: Option<f64>,
    /// Number of elements.
    pub count: Option<u64>,
    /// NaN elements.
    pub nan_count: Option<u64>,
    /// -inf elements.
    pub neg_inf_count: Option<u64>,
    /// +inf elements.
    pub pos_inf_count: Option<u64>,
    /// From an `L2Norm Value` column, when `dump_stats` asked for it.
    pub l2norm: Option<f64>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Col {
    Io,
    Index,
    DataSize,
    DType,
    Format,
    Shape,
    Max,
    Min,
    Avg,
    Count,
    NanCount,
    NegInf,
    PosInf,
    L2Norm,
}

const HEADER: [(&str, Col); 13] = [
    ("Input/Output", Col::Io),
    ("Index", Col::Index),
    ("Data Size", Col::DataSize),
    ("Data Type", Col::DType),
    ("Format", Col::Format),
    ("Shape", Col::Shape),
    ("Max Value", Col::Max),
    ("Min Value", Col::Min),
    ("Avg Value", Col::Avg),
    ("Count", Col::Count),
    ("Nan Count", Col::NanCount),
    ("Negative Inf Count", Col::NegInf),
    ("Positive Inf Count", Col::PosInf),
];

fn column(name: &str) -> Option<Col> {
    let key: String =
        name.chars().filter(|c| !matches!(c, ' ' | '/' | '_' | '-')).collect::<String>().to_ascii_lowercase();
    let key = key.trim_start_matches('\u{feff}');
    Some(match key {
        "inputoutput" => Col::Io,
        "index" => Col::Index,
        "datasize" => Col::DataSize,
        "datatype" | "dtype" => Col::DType,
        "format" => Col::Format,
        "shape" => Col::Shape,
        "maxvalue" | "max" => Col::Max,
        "minvalue" | "min" => Col::Min,
        "avgvalue" | "avg" | "mean" => Col::Avg,
        "count" => Col::Count,
        "nancount" => Col::NanCount,
        "negativeinfcount" => Col::NegInf,
        "positiveinfcount" => Col::PosInf,
        "l2normvalue" | "l2norm" => Col::L2Norm,
        _ => return None,
    })
}

/// The header line of a statistics CSV (its first line, without the line end), or `None` when the CSV
/// starts with a tensor's row: a later part of the CSV of an op with more than 10 tensors. The runtime puts
/// at most 10 tensors' rows in a part and the header only in the first part of a file name
/// (adx_dump_record.cpp GenerateFileData), and hands a dump callback each part as a file of its own.
pub fn stats_csv_header_line(bytes: &[u8]) -> Option<&[u8]> {
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let first_cell = line.split(|&b| b == b',').next().unwrap_or_default();
    let first_cell = String::from_utf8_lossy(first_cell);
    let first_cell = first_cell.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    let is_row = first_cell.eq_ignore_ascii_case("input") || first_cell.eq_ignore_ascii_case("output");
    (!is_row).then_some(line)
}

/// Parses a stats CSV.
pub fn parse_stats_csv(bytes: &[u8]) -> Result<Vec<StatsRow>> {
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(bytes);
    let mut columns: Option<Vec<Option<Col>>> = None;
    let mut header: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    let mut record = csv::ByteRecord::new();
    loop {
        let more = reader.read_byte_record(&mut record).map_err(|e| {
            let (offset, line) = e.position().map_or((0, 0), |p| (p.byte(), p.line()));
            FormatError::at(offset, format!("line {line}: malformed CSV: {e}"))
        })?;
        if !more {
            break;
        }
        let (offset, line) = record.position().map_or((0, 0), |p| (p.byte(), p.line()));
        let fail = |what: String| FormatError::at(offset, format!("line {line}: {what}"));
        // NUL is trimmed with the spaces: a CSV handed to a dump callback is a C string whose bufLen counts
        // its terminator (the runtime's adx_dump_record.cpp), so a capture's copy ends in one.
        let cells: Vec<&str> = record
            .iter()
            .map(|c| {
                std::str::from_utf8(c).map(|c| c.trim_matches(|ch: char| ch.is_whitespace() || ch == '\0'))
            })
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| fail("not UTF-8".into()))?;
        let Some(cols) = &columns else {
            let cols: Vec<Option<Col>> = cells.iter().map(|c| column(c)).collect();
            for required in [Col::Io, Col::Index] {
                if !cols.contains(&Some(required)) {
                    let name = HEADER.iter().find(|(_, c)| *c == required).map_or("", |(n, _)| n);
                    return Err(fail(format!("stats CSV header lacks the {name:?} column")));
                }
            }
            columns = Some(cols);
            header = cells.iter().map(|c| c.to_string()).collect();
            continue;
        };
        // A header again: the runtime heads a later part of an op of more than 10 tensors when the file's name
        // is not among the last 10 it remembers (adx_dump_record.cpp CheckFileNameExist), and appends it.
        if cells.iter().all(|c| c.is_empty()) || cells == header {
            continue;
        }
        rows.push(parse_row(cols, &cells).map_err(fail)?);
    }
    if columns.is_none() {
        return Err(FormatError::at(0, "stats CSV is empty: no header line"));
    }
    Ok(rows)
}

fn parse_row(cols: &[Option<Col>], cells: &[&str]) -> std::result::Result<StatsRow, String> {
    let cell = |want: Col| cols.iter().position(|c| *c == Some(want)).and_then(|i| cells.get(i)).copied();
    let present = |want: Col| cell(want).filter(|v| !is_missing(v));
    let io_cell = cell(Col::Io).unwrap_or("");
    let io = match io_cell.to_ascii_lowercase().as_str() {
        "input" => Io::Input,
        "output" => Io::Output,
        _ => return Err(format!("Input/Output is {io_cell:?}, not Input or Output")),
    };
    let int = |col: Col, name: &str| -> std::result::Result<Option<u64>, String> {
        present(col).map(|v| v.parse::<u64>().map_err(|_| format!("{name} {v:?} is not a count"))).transpose()
    };
    let float = |col: Col, name: &str| -> std::result::Result<Option<f64>, String> {
        present(col)
            .map(|v| v.parse::<f64>().map_err(|_| format!("{name} {v:?} is not a number")))
            .transpose()
    };
    let index = int(Col::Index, "Index")?.ok_or("Index is empty")?;
    let dtype = present(Col::DType)
        .map(|v| match v.parse::<i32>() {
            Ok(code) => Ok(DType::from_code(code)),
            Err(_) => DType::from_name(v).ok_or_else(|| format!("Data Type {v:?} is not a known dtype")),
        })
        .transpose()?;
    let format = present(Col::Format).map(parse_format).transpose()?;
    let shape = present(Col::Shape).map(parse_shape).transpose()?;
    Ok(StatsRow {
        io,
        index: usize::try_from(index).map_err(|_| "Index too large".to_string())?,
        data_size: int(Col::DataSize, "Data Size")?,
        dtype,
        format,
        shape,
        max: float(Col::Max, "Max Value")?,
        min: float(Col::Min, "Min Value")?,
        avg: float(Col::Avg, "Avg Value")?,
        count: int(Col::Count, "Count")?,
        nan_count: int(Col::NanCount, "Nan Count")?,
        neg_inf_count: int(Col::NegInf, "Negative Inf Count")?,
        pos_inf_count: int(Col::PosInf, "Positive Inf Count")?,
        l2norm: float(Col::L2Norm, "L2Norm Value")?,
    })
}

/// Empty, `NA`/`N/A`, `-` (the runtime's shape of a tensor without one) or `UNKNOW` (what the runtime writes
/// for a dtype or format its name table lacks, e.g. DT_HIFLOAT4).
fn is_missing(v: &str) -> bool {
    v.is_empty()
        || v.eq_ignore_ascii_case("n/a")
        || v.eq_ignore_ascii_case("na")
        || v == "-"
        || v.eq_ignore_ascii_case("unknow")
        || v.eq_ignore_ascii_case("unknown")
}

/// `FORMAT_ND`, `ND` or a code.
fn parse_format(v: &str) -> std::result::Result<i32, String> {
    if let Ok(code) = v.parse::<i32>() {
        return Ok(code);
    }
    let upper = v.to_ascii_uppercase();
    let bare = upper.strip_prefix("FORMAT_").unwrap_or(&upper);
    // The runtime's stats writer spells three formats its own way (adx_dump_record.cpp's name table).
    let bare = match bare {
        "DHWCH" => "DHWCN",
        "NYUV" => "YUV",
        "NYUV_A" => "YUV_A",
        other => other,
    };
    let full = format!("FORMAT_{bare}");
    OutputFormat::from_str_name(&full)
        .map(|f| f as i32)
        .ok_or_else(|| format!("Format {v:?} is not a known format"))
}

/// `2x3x4`, `[2,3,4]`, `(2, 3, 4)`; `[]` is a scalar.
fn parse_shape(v: &str) -> std::result::Result<Vec<u64>, String> {
    let inner = v.trim_start_matches(['[', '(']).trim_end_matches([']', ')']).trim();
    if inner.is_empty() {
        return Ok(Vec::new());
    }
    inner
        .split(['x', 'X', ',', ';'])
        .map(|d| {
            d.trim().parse::<u64>().map_err(|_| format!("Shape {v:?} has a non-numeric dimension {d:?}"))
        })
        .collect()
}

/// Writes rows under the standard header (plus `L2Norm Value` when any row has one).
pub fn write_stats_csv(rows: &[StatsRow]) -> String {
    let with_l2 = rows.iter().any(|r| r.l2norm.is_some());
    let mut header: Vec<&str> = HEADER.iter().map(|(n, _)| *n).collect();
    if with_l2 {
        header.push("L2Norm Value");
    }
    let mut out = csv::Writer::from_writer(Vec::new());
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in rows {
        let opt = |v: Option<String>| v.unwrap_or_default();
        let io = if r.io == Io::Input { "Input" } else { "Output" };
        let format = r.format.map(|f| match OutputFormat::try_from(f) {
            Ok(_) => format!("FORMAT_{}", format_name(f)),
            Err(_) => f.to_string(),
        });
        let dtype =
            r.dtype.map(|d| if d.is_known() { format!("DT_{}", d.name()) } else { d.code().to_string() });
        let shape = r.shape.as_ref().map(|s| match s.is_empty() {
            true => "[]".to_string(),
            false => s.iter().map(u64::to_string).collect::<Vec<_>>().join("x"),
        });
        let mut line = vec![
            io.to_string(),
            r.index.to_string(),
            opt(r.data_size.map(|v| v.to_string())),
            opt(dtype),
            opt(format),
            opt(shape),
            opt(r.max.map(|v| v.to_string())),
            opt(r.min.map(|v| v.to_string())),
            opt(r.avg.map(|v| v.to_string())),
            opt(r.count.map(|v| v.to_string())),
            opt(r.nan_count.map(|v| v.to_string())),
            opt(r.neg_inf_count.map(|v| v.to_string())),
            opt(r.pos_inf_count.map(|v| v.to_string())),
        ];
        if with_l2 {
            line.push(opt(r.l2norm.map(|v| v.to_string())));
        }
        lines.push(line);
    }
    for line in lines {
        // Writing to a Vec cannot fail.
        let _ = out.write_record(&line);
    }
    String::from_utf8(out.into_inner().unwrap_or_default()).unwrap_or_default()
}
