//! The downsampled statistic series of a rank's summary (`series/rank{R:06}.parquet` beside the rank's
//! events): what the rank's run says over its steps, as [`crate::series`] reads it for the report page
//! (the loss, the loss scale, the gradient norms, each layer's largest magnitude and inf/NaN count, the
//! tensors with anomalies), in at most [`POINTS`] buckets per series. A bucket is a run of consecutive
//! steps kept as its first and last step, the smallest, largest and mean finite value, the last value, and
//! how many values were not finite, so that a spike of a long run survives the downsampling: the largest
//! value of a bucket is a value of one of its steps, never an average. docs/RANK_SUMMARIES.md is the
//! schema.

use super::columns::{read_column, write_column};
use crate::series::{Grid, Line, RunSeries};
use anyhow::{bail, Context, Result};
use parquet::basic::{LogicalType, Repetition, Type as Physical};
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type as Schema;
use serde::Serialize;
use std::sync::Arc;

/// At most this many buckets per series: a run of up to this many steps keeps every step.
pub const POINTS: usize = 512;

/// One bucket of one series.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SeriesRow {
    /// `loss`, `loss_scale`, `grad_norm`, `max_abs`, `nonfinite` or `anomalous_tensors`.
    pub series: String,
    /// What part of the model: a layer's row (`layer_1`, `layer_1 (backward)`) for the per-layer series;
    /// `None` for those of the whole rank.
    pub part: Option<String>,
    /// The op the values were read from (the loss and the loss scale).
    pub op: Option<String>,
    /// Position of the bucket in the series (0, 1, ...).
    pub bucket: u64,
    pub first_step: u64,
    pub last_step: u64,
    /// Steps of the bucket that have a value.
    pub values: u64,
    /// Of those, values that were NaN or infinite.
    pub nonfinite: u64,
    /// Smallest, largest and mean finite value (NaN when there is none).
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    /// The value at `last_step`, as it was (NaN or inf included).
    pub last: f64,
}

/// The series of one rank (`s` built from that rank's ops only), each in at most `points` buckets.
pub fn of_rank(s: &RunSeries, points: usize) -> Vec<SeriesRow> {
    let mut rows = Vec::new();
    let mut add = |series: &str, part: Option<&str>, op: Option<&str>, values: &[(u64, f64)]| {
        rows.extend(downsample(values, points).into_iter().enumerate().map(|(bucket, mut r)| {
            r.series = series.to_string();
            r.part = part.map(str::to_string);
            r.op = op.map(str::to_string);
            r.bucket = bucket as u64;
            r
        }));
    };
    if let Some((op, line)) = &s.loss {
        add("loss", None, Some(op), &line.points);
    }
    if let Some((op, line)) = &s.scaler_scale {
        add("loss_scale", None, Some(op), &line.points);
    }
    for Line { name, points } in &s.grad_norms {
        let part = (name != "global").then_some(name.as_str());
        add("grad_norm", part, None, points);
    }
    for (name, grid) in [("max_abs", &s.max_abs), ("nonfinite", &s.nonfinite)] {
        for (r, part) in grid.rows.iter().enumerate() {
            add(name, Some(part), None, &grid_points(grid, r));
        }
    }
    for r in 0..s.rank_anomalies.rows.len() {
        add("anomalous_tensors", None, None, &grid_points(&s.rank_anomalies, r));
    }
    rows
}

/// Row `r` of a grid as `(step, value)` where it has a value.
fn grid_points(grid: &Grid, r: usize) -> Vec<(u64, f64)> {
    (0..grid.steps.len()).filter_map(|s| grid.get(r, s).map(|v| (grid.steps[s], v))).collect()
}

/// `values` (ascending by step) in at most `points` buckets of consecutive values, the same number in
/// each but the last; every value its own bucket when there are no more than `points`. The rows' names
/// and bucket numbers are left for the caller.
pub fn downsample(values: &[(u64, f64)], points: usize) -> Vec<SeriesRow> {
    if values.is_empty() {
        return Vec::new();
    }
    let per_bucket = values.len().div_ceil(points.max(1));
    values
        .chunks(per_bucket)
        .map(|chunk| {
            let finite: Vec<f64> = chunk.iter().map(|&(_, v)| v).filter(|v| v.is_finite()).collect();
            let (min, max, mean) = if finite.is_empty() {
                (f64::NAN, f64::NAN, f64::NAN)
            } else {
                (
                    finite.iter().copied().fold(f64::INFINITY, f64::min),
                    finite.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                    finite.iter().sum::<f64>() / finite.len() as f64,
                )
            };
            SeriesRow {
                series: String::new(),
                part: None,
                op: None,
                bucket: 0,
                first_step: chunk[0].0,
                last_step: chunk[chunk.len() - 1].0,
                values: chunk.len() as u64,
                nonfinite: (chunk.len() - finite.len()) as u64,
                min,
                max,
                mean,
                last: chunk[chunk.len() - 1].1,
            }
        })
        .collect()
}

/// The columns, in file order: name, INT64 / DOUBLE / STRING, required.
const COLUMNS: [(&str, Physical, bool); 13] = [
    ("rank", Physical::INT64, true),
    ("series", Physical::BYTE_ARRAY, true),
    ("part", Physical::BYTE_ARRAY, false),
    ("op", Physical::BYTE_ARRAY, false),
    ("bucket", Physical::INT64, true),
    ("first_step", Physical::INT64, true),
    ("last_step", Physical::INT64, true),
    ("value_count", Physical::INT64, true),
    ("nonfinite_count", Physical::INT64, true),
    ("min_value", Physical::DOUBLE, true),
    ("max_value", Physical::DOUBLE, true),
    ("mean", Physical::DOUBLE, true),
    ("last_value", Physical::DOUBLE, true),
];

/// The Parquet schema of a series file.
pub fn schema() -> Schema {
    let fields = COLUMNS
        .iter()
        .map(|&(name, physical, required)| {
            let logical = (physical == Physical::BYTE_ARRAY).then_some(LogicalType::String);
            let repetition = if required { Repetition::REQUIRED } else { Repetition::OPTIONAL };
            Arc::new(
                Schema::primitive_type_builder(name, physical)
                    .with_repetition(repetition)
                    .with_logical_type(logical)
                    .build()
                    .expect("the series schema is valid"),
            )
        })
        .collect();
    Schema::group_type_builder("rank_series").with_fields(fields).build().expect("the series schema is valid")
}

fn int(x: u64) -> Result<Option<i64>> {
    Ok(Some(i64::try_from(x).context("a count of 2^63 or more")?))
}

/// Writes rank `rank`'s rows as one row group.
pub fn write(rank: u32, rows: &[SeriesRow], writer: &mut SerializedFileWriter<std::fs::File>) -> Result<()> {
    let mut group = writer.next_row_group()?;
    for &(name, _, required) in &COLUMNS {
        let mut column = group.next_column()?.context("fewer columns in the schema than written")?;
        let text = |f: fn(&SeriesRow) -> Option<&str>| -> Vec<Option<ByteArray>> {
            rows.iter().map(|r| f(r).map(ByteArray::from)).collect()
        };
        let ints = |f: fn(&SeriesRow) -> u64| -> Result<Vec<Option<i64>>> {
            rows.iter().map(|r| int(f(r))).collect()
        };
        let floats =
            |f: fn(&SeriesRow) -> f64| -> Vec<Option<f64>> { rows.iter().map(|r| Some(f(r))).collect() };
        match name {
            "rank" => {
                write_column::<Int64Type>(&mut column, &vec![Some(i64::from(rank)); rows.len()], required)?
            }
            "series" => write_column::<ByteArrayType>(&mut column, &text(|r| Some(&r.series)), required)?,
            "part" => write_column::<ByteArrayType>(&mut column, &text(|r| r.part.as_deref()), required)?,
            "op" => write_column::<ByteArrayType>(&mut column, &text(|r| r.op.as_deref()), required)?,
            "bucket" => write_column::<Int64Type>(&mut column, &ints(|r| r.bucket)?, required)?,
            "first_step" => write_column::<Int64Type>(&mut column, &ints(|r| r.first_step)?, required)?,
            "last_step" => write_column::<Int64Type>(&mut column, &ints(|r| r.last_step)?, required)?,
            "value_count" => write_column::<Int64Type>(&mut column, &ints(|r| r.values)?, required)?,
            "nonfinite_count" => write_column::<Int64Type>(&mut column, &ints(|r| r.nonfinite)?, required)?,
            "min_value" => write_column::<DoubleType>(&mut column, &floats(|r| r.min), required)?,
            "max_value" => write_column::<DoubleType>(&mut column, &floats(|r| r.max), required)?,
            "mean" => write_column::<DoubleType>(&mut column, &floats(|r| r.mean), required)?,
            "last_value" => write_column::<DoubleType>(&mut column, &floats(|r| r.last), required)?,
            other => unreachable!("column {other} is written above"),
        }
        column.close()?;
    }
    group.close()?;
    Ok(())
}

/// The rows of a series file of rank `rank` (every row group), its columns checked by name and type.
pub fn read(reader: &SerializedFileReader<std::fs::File>, rank: u32) -> Result<Vec<SeriesRow>> {
    let schema = reader.metadata().file_metadata().schema_descr_ptr();
    let mut at = Vec::with_capacity(COLUMNS.len());
    for &(name, physical, _) in &COLUMNS {
        let i = (0..schema.num_columns())
            .find(|&i| schema.column(i).name() == name)
            .with_context(|| format!("no column `{name}`: not a rank series file of this version"))?;
        let d = schema.column(i);
        if d.physical_type() != physical || d.max_rep_level() != 0 {
            bail!("column `{name}` is {:?}, not the series file's {physical:?}", d.physical_type());
        }
        at.push((i, d.max_def_level()));
    }
    let mut rows = Vec::new();
    for g in 0..reader.num_row_groups() {
        let group = reader.get_row_group(g)?;
        let n = usize::try_from(group.metadata().num_rows()).context("a negative row count")?;
        let (mut ints, mut floats, mut texts) = (Vec::new(), Vec::new(), Vec::new());
        for (&(name, physical, _), &(i, max_def)) in COLUMNS.iter().zip(&at) {
            let column = group.get_column_reader(i)?;
            let got = match physical {
                Physical::INT64 => {
                    let mut v = Vec::new();
                    read_column::<Int64Type>(column, max_def, &mut v)?;
                    ints.push(v);
                    ints.last().map_or(0, Vec::len)
                }
                Physical::DOUBLE => {
                    let mut v = Vec::new();
                    read_column::<DoubleType>(column, max_def, &mut v)?;
                    floats.push(v);
                    floats.last().map_or(0, Vec::len)
                }
                _ => {
                    let mut v = Vec::new();
                    read_column::<ByteArrayType>(column, max_def, &mut v)?;
                    texts.push(v);
                    texts.last().map_or(0, Vec::len)
                }
            };
            if got != n {
                bail!("row group {g}: column `{name}` holds {got} values for {n} rows");
            }
        }
        // Columns of each type in file order: ints rank, bucket, first_step, last_step, values
        // (value_count), nonfinite_count; floats min, max, mean, last; texts series, part, op.
        for row in 0..n {
            let at = |what: &str| format!("row {row}: {what}");
            let count = |c: usize, what: &str| -> Result<u64> {
                let v = ints[c][row].with_context(|| at(&format!("no {what}")))?;
                u64::try_from(v).with_context(|| at(&format!("a negative {what}")))
            };
            let text = |c: usize, what: &str| -> Result<Option<String>> {
                texts[c][row]
                    .as_ref()
                    .map(|b| {
                        Ok(b.as_utf8().with_context(|| at(&format!("{what} is not UTF-8")))?.to_string())
                    })
                    .transpose()
            };
            let float = |c: usize| floats[c][row].with_context(|| at("a null value"));
            if count(0, "rank")? != u64::from(rank) {
                bail!("{}, but the file is rank {rank}'s", at(&format!("rank {:?}", ints[0][row])));
            }
            rows.push(SeriesRow {
                series: text(0, "series")?.with_context(|| at("no series"))?,
                part: text(1, "part")?,
                op: text(2, "op")?,
                bucket: count(1, "bucket")?,
                first_step: count(2, "first_step")?,
                last_step: count(3, "last_step")?,
                values: count(4, "value_count")?,
                nonfinite: count(5, "nonfinite_count")?,
                min: float(0)?,
                max: float(1)?,
                mean: float(2)?,
                last: float(3)?,
            });
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_series_keeps_every_step() {
        let rows = downsample(&[(0, 1.0), (1, f64::NAN), (2, 3.0)], 512);
        assert_eq!(rows.len(), 3);
        assert_eq!((rows[1].first_step, rows[1].last_step, rows[1].values, rows[1].nonfinite), (1, 1, 1, 1));
        assert!(rows[1].min.is_nan() && rows[1].max.is_nan() && rows[1].last.is_nan());
        assert_eq!((rows[2].min, rows[2].max, rows[2].mean, rows[2].last), (3.0, 3.0, 3.0, 3.0));
    }

    #[test]
    fn a_long_series_is_bucketed_and_a_spike_survives() {
        // 10,000 steps of 1.0, one step of 1e4 and one infinite value: 512 buckets of 20 steps (the last
        // shorter); the spike's bucket has it as its max, the inf is counted, not averaged in.
        let mut values: Vec<(u64, f64)> = (0..10_000).map(|s| (s, 1.0)).collect();
        values[4321].1 = 1e4;
        values[7000].1 = f64::INFINITY;
        let rows = downsample(&values, 512);
        assert_eq!(rows.len(), 500);
        assert!(rows.iter().all(|r| r.values == 20 && r.last_step - r.first_step == 19));
        let spike = rows.iter().find(|r| (r.first_step..=r.last_step).contains(&4321)).unwrap();
        assert_eq!((spike.max, spike.min), (1e4, 1.0));
        assert!((spike.mean - (19.0 + 1e4) / 20.0).abs() < 1e-9);
        let inf = rows.iter().find(|r| (r.first_step..=r.last_step).contains(&7000)).unwrap();
        assert_eq!((inf.nonfinite, inf.max, inf.values), (1, 1.0, 20));
        assert_eq!(rows.iter().map(|r| r.nonfinite).sum::<u64>(), 1);
        let odd = downsample(&values[..1025], 512);
        assert_eq!((odd.len(), odd[0].values, odd.last().unwrap().values), (342, 3, 2));
    }

    #[test]
    fn series_read_back_as_written() {
        let mut rows = downsample(&[(0, 2.5), (3, f64::NEG_INFINITY)], 512);
        rows[0].series = "loss".into();
        rows[0].op = Some("model/loss/SoftmaxCrossEntropy".into());
        rows[1].series = "max_abs".into();
        rows[1].part = Some("layer_1 (backward)".into());
        rows[1].bucket = 1;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rank000003.parquet");
        let out = std::fs::File::create(&file).unwrap();
        let mut writer = SerializedFileWriter::new(out, Arc::new(schema()), Default::default()).unwrap();
        write(3, &rows, &mut writer).unwrap();
        writer.close().unwrap();
        let reader = SerializedFileReader::new(std::fs::File::open(&file).unwrap()).unwrap();
        let back = read(&reader, 3).unwrap();
        assert_eq!(format!("{back:?}"), format!("{rows:?}"));
        let err = read(&reader, 4).unwrap_err().to_string();
        assert!(err.contains("the file is rank 4's"), "{err}");
    }
}
