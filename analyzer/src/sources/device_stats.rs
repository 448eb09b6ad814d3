//! CANN's statistics dumps (`dump_data: stats`): one CSV per op, computed by the device. They index as
//! ops whose tensors carry statistics and no data, which is all `overflow` needs.

use crate::index::{Index, Launch, TensorInfo};
use accutrace_formats::dump::{parse_file_name, parse_stats_csv};
use accutrace_formats::stats::TensorStats;
use accutrace_formats::tensor::element_count;
use accutrace_formats::{DType, FormatError};

/// Adds the op of one statistics CSV (`file_name` is the dump file's name, which carries the op) to
/// `index`. The op name is the sanitized one of the file name: the CSV does not repeat the real name.
pub fn add_stats_csv(
    index: &mut Index,
    file_name: &str,
    csv: &[u8],
    step: u64,
    rank: u32,
) -> Result<(), FormatError> {
    let base = file_name.rsplit('/').next().unwrap_or(file_name);
    let name = parse_file_name(base)?;
    let rows = parse_stats_csv(csv)?;
    let launch = Launch::of_name(&name);
    let op = index.push_op_at(name.op_name.clone(), name.op_type.clone(), step, rank, Some(launch));
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
        index.push_tensor(TensorInfo {
            op,
            io: row.io,
            index: row.index as u32,
            dtype,
            shape,
            device_format: None,
            device_shape: None,
            original_op: None,
            stats: Some(stats),
            histogram: None,
            hash: None,
            label: None,
            requires_grad: None,
            has_data: false,
            locator: 0,
        });
    }
    Ok(())
}
