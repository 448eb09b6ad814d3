//! CANN's statistics dumps (`dump_data: stats`): one CSV per op, computed by the device. They index as
//! ops whose tensors carry statistics and no data, which is all `overflow` needs.
//!
//! The runtime writes at most 10 tensors' rows per part and the header only in a file name's first part, and
//! hands a dump callback each part as a file of its own: an op with more than 10 tensors reaches a capture
//! as several same-named records, only the first with a header. [`StatsCsvParts`] joins them into one op.

use crate::index::{Index, Launch, OpId, TensorInfo};
use accutrace_formats::dump::stats_csv::stats_csv_header_line;
use accutrace_formats::dump::{parse_file_name, parse_stats_csv};
use accutrace_formats::stats::TensorStats;
use accutrace_formats::tensor::element_count;
use accutrace_formats::{DType, FormatError};
use std::collections::HashMap;

/// The statistics CSVs read so far, by rank, step and file name: the op each went to and its header, so
/// that a later part of the same file adds its rows to that op, read with that header.
#[derive(Default)]
pub struct StatsCsvParts {
    seen: HashMap<(u32, u64, String), (OpId, Vec<u8>)>,
}

/// Adds the op of one statistics CSV (`file_name` is the dump file's name, which carries the op) to
/// `index`, or, for a later part of a CSV in `parts`, its rows to that op. The op name is the sanitized one
/// of the file name: the CSV does not repeat the real name. A part without a header whose first part is not
/// in `parts` is an error naming the op: its rows cannot be read without the header.
pub fn add_stats_csv(
    index: &mut Index,
    parts: &mut StatsCsvParts,
    file_name: &str,
    csv: &[u8],
    step: u64,
    rank: u32,
) -> Result<(), FormatError> {
    let base = file_name.rsplit('/').next().unwrap_or(file_name);
    let name = parse_file_name(base)?;
    let key = (rank, step, base.to_string());
    let (op, rows) = match (parts.seen.get(&key), stats_csv_header_line(csv)) {
        (Some((op, _)), Some(_)) => (*op, parse_stats_csv(csv)?),
        (Some((op, header)), None) => {
            let mut joined = Vec::with_capacity(header.len() + 1 + csv.len());
            joined.extend_from_slice(header);
            joined.push(b'\n');
            joined.extend_from_slice(csv);
            (*op, parse_stats_csv(&joined)?)
        }
        (None, None) => {
            return Err(FormatError::whole(format!(
                "{base}: a part of op {}'s statistics CSV without its header line, and no earlier part of it \
                 in step {step}: its rows are left out (the part with the header was lost; the runtime \
                 writes the header only in the first part of an op with more than 10 tensors)",
                name.op_name
            )));
        }
        (None, Some(header)) => {
            let rows = parse_stats_csv(csv)?;
            let launch = Launch::of_name(&name);
            let op = index.push_op_at(name.op_name.clone(), name.op_type.clone(), step, rank, Some(launch));
            parts.seen.insert(key, (op, header.to_vec()));
            (op, rows)
        }
    };
    for row in rows {
        let dtype = row.dtype.unwrap_or(DType::UNDEFINED);
        let shape = row.shape.clone().unwrap_or_default();
        let count = match row.count {
            Some(count) => count,
            None => element_count(&shape).ok_or_else(|| {
                FormatError::whole(format!("{base}: shape {shape:?} has more elements than 64 bits count"))
            })?,
        };
        let stats = TensorStats {
            count,
            nan: row.nan_count.unwrap_or(0),
            pos_inf: row.pos_inf_count.unwrap_or(0),
            neg_inf: row.neg_inf_count.unwrap_or(0),
            zero: 0,
            min: row.min.unwrap_or(f64::NAN),
            max: row.max.unwrap_or(f64::NAN),
            mean: row.avg.unwrap_or(f64::NAN),
            l2_norm: row.l2norm.unwrap_or(f64::NAN),
            abs_sum: None,
            // Saturation mode leaves an overflow at the dtype's limit: the device's max/min show it.
            at_saturation: u64::from(dtype.saturation_limit().is_some_and(|limit| {
                dtype.is_float()
                    && (row.max.is_some_and(|m| m.abs() >= limit)
                        || row.min.is_some_and(|m| m.abs() >= limit))
            })),
        };
        let t = index.push_tensor(TensorInfo {
            has_data: false,
            ..TensorInfo::new(op, row.io, row.index as u32, dtype, shape)
        });
        index.set_stats(t, Some(stats));
    }
    Ok(())
}
