//! A rank's events as the summary's columns, and back: one row per tensor of each event (an event with no
//! tensor, e.g. a barrier, is one row whose tensor columns are null), in program order. The table below
//! is the schema: each column's name, type, whether it may be null, and how a row gets its value.
//! `collectives_before` and `anomalous` are derived (for SQL: docs/RANK_SUMMARIES.md); reading ignores them.

use super::super::events::{CollectiveMeta, Event, EventKind, Names, RankEvents, TensorSummary};
use crate::index::Io;
use accutrace_formats::capture::CollectiveOp;
use anyhow::{bail, Context, Result};
use parquet::basic::{LogicalType, Repetition, Type as Physical};
use parquet::column::reader::get_typed_column_reader;
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DataType, DoubleType, Int64Type};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type as Schema;
use std::sync::Arc;

/// What a column holds.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// INT64 (unsigned values below 2^63; a hash as its two's-complement bit pattern).
    Int,
    /// DOUBLE (inf and NaN as themselves).
    Float,
    /// BOOLEAN.
    Bool,
    /// BYTE_ARRAY, annotated STRING (UTF-8).
    Text,
}

/// One row being written: an event and one of its tensors.
struct Row<'a> {
    rank: u32,
    event: usize,
    collectives_before: u64,
    e: &'a Event,
    t: Option<&'a TensorSummary>,
}

/// A value of a row.
enum Cell<'a> {
    Int(Option<i64>),
    Float(Option<f64>),
    Bool(Option<bool>),
    Text(Option<&'a str>),
}

struct Column {
    name: &'static str,
    kind: Kind,
    required: bool,
    get: for<'a> fn(&Row<'a>) -> Result<Cell<'a>>,
}

const fn col(
    name: &'static str,
    kind: Kind,
    required: bool,
    get: for<'a> fn(&Row<'a>) -> Result<Cell<'a>>,
) -> Column {
    Column { name, kind, required, get }
}

fn int(x: u64) -> Result<Option<i64>> {
    Ok(Some(i64::try_from(x).context("a count of 2^63 or more")?))
}

fn tensor_int<'a>(r: &Row<'a>, f: fn(&TensorSummary) -> u64) -> Result<Cell<'a>> {
    Ok(Cell::Int(match r.t {
        Some(t) => int(f(t))?,
        None => None,
    }))
}

fn tensor_float<'a>(r: &Row<'a>, f: fn(&TensorSummary) -> f64) -> Cell<'a> {
    Cell::Float(r.t.map(f))
}

fn meta<'a, T>(r: &Row<'a>, f: fn(&'a CollectiveMeta) -> T) -> Option<T> {
    r.e.collective().map(f)
}

/// The schema, in file order (docs/RANK_SUMMARIES.md describes each column).
const COLUMNS: &[Column] = &[
    col("rank", Kind::Int, true, |r| Ok(Cell::Int(Some(i64::from(r.rank))))),
    col("event", Kind::Int, true, |r| Ok(Cell::Int(int(r.event as u64)?))),
    col("step", Kind::Int, true, |r| Ok(Cell::Int(int(r.e.step)?))),
    col("collectives_before", Kind::Int, true, |r| Ok(Cell::Int(int(r.collectives_before)?))),
    col("time_us", Kind::Int, false, |r| Ok(Cell::Int(r.e.time_us.map(int).transpose()?.flatten()))),
    col("kind", Kind::Text, true, |r| {
        Ok(Cell::Text(Some(if r.e.collective().is_some() { "collective" } else { "op" })))
    }),
    col("name", Kind::Text, true, |r| Ok(Cell::Text(Some(r.e.name())))),
    col("op_type", Kind::Text, true, |r| Ok(Cell::Text(Some(r.e.op_type())))),
    col("comm", Kind::Text, false, |r| Ok(Cell::Text(meta(r, |c| &*c.comm)))),
    col("seq", Kind::Int, false, |r| Ok(Cell::Int(meta(r, |c| int(c.seq)).transpose()?.flatten()))),
    col("peer", Kind::Int, false, |r| Ok(Cell::Int(meta(r, |c| c.peer.map(i64::from)).flatten()))),
    col("comm_rank", Kind::Int, false, |r| Ok(Cell::Int(meta(r, |c| i64::from(c.comm_rank))))),
    col("comm_size", Kind::Int, false, |r| Ok(Cell::Int(meta(r, |c| i64::from(c.comm_size))))),
    col("io", Kind::Text, false, |r| Ok(Cell::Text(r.t.map(|t| t.io.as_str())))),
    col("tensor_index", Kind::Int, false, |r| Ok(Cell::Int(r.t.map(|t| i64::from(t.index))))),
    col("dtype", Kind::Text, false, |r| Ok(Cell::Text(r.t.map(|t| &*t.dtype)))),
    col("is_float", Kind::Bool, false, |r| Ok(Cell::Bool(r.t.map(|t| t.float)))),
    col("elements", Kind::Int, false, |r| tensor_int(r, |t| t.elements)),
    col("nan", Kind::Int, false, |r| tensor_int(r, |t| t.nan)),
    col("pos_inf", Kind::Int, false, |r| tensor_int(r, |t| t.pos_inf)),
    col("neg_inf", Kind::Int, false, |r| tensor_int(r, |t| t.neg_inf)),
    col("at_saturation", Kind::Int, false, |r| tensor_int(r, |t| t.at_saturation)),
    col("min_value", Kind::Float, false, |r| Ok(tensor_float(r, |t| t.min))),
    col("max_value", Kind::Float, false, |r| Ok(tensor_float(r, |t| t.max))),
    col("mean", Kind::Float, false, |r| Ok(tensor_float(r, |t| t.mean))),
    col("l2_norm", Kind::Float, false, |r| Ok(tensor_float(r, |t| t.l2_norm))),
    // The hash's bits, reinterpreted: Spark has no unsigned 64-bit type, and equality is what matters.
    col("hash", Kind::Int, false, |r| Ok(Cell::Int(r.t.and_then(|t| t.hash).map(|h| h as i64)))),
    col("anomalous", Kind::Bool, false, |r| Ok(Cell::Bool(r.t.map(TensorSummary::anomalous)))),
];

/// The Parquet schema of a summary.
pub fn schema() -> Schema {
    let fields = COLUMNS
        .iter()
        .map(|c| {
            let (physical, logical) = match c.kind {
                Kind::Int => (Physical::INT64, None),
                Kind::Float => (Physical::DOUBLE, None),
                Kind::Bool => (Physical::BOOLEAN, None),
                Kind::Text => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
            };
            let repetition = if c.required { Repetition::REQUIRED } else { Repetition::OPTIONAL };
            Arc::new(
                Schema::primitive_type_builder(c.name, physical)
                    .with_repetition(repetition)
                    .with_logical_type(logical)
                    .build()
                    .expect("the summary schema is valid"),
            )
        })
        .collect();
    Schema::group_type_builder("rank_summary")
        .with_fields(fields)
        .build()
        .expect("the summary schema is valid")
}

/// A column's values, nulls included.
enum Values {
    Int(Vec<Option<i64>>),
    Float(Vec<Option<f64>>),
    Bool(Vec<Option<bool>>),
    Text(Vec<Option<ByteArray>>),
}

/// A rank's summary as columns, in schema order.
pub struct Columns {
    values: Vec<Values>,
    rows: usize,
}

impl Columns {
    /// The columns of a rank's events.
    pub fn of<'a>(rank: &'a RankEvents) -> Result<Columns> {
        let mut rows = Vec::new();
        let mut collectives_before = 0;
        for (event, e) in rank.events.iter().enumerate() {
            // A collective's output comes out of the call: it is after it, its input before.
            let row = |t: Option<&'a TensorSummary>| {
                let after_call = e.collective().is_some() && t.is_some_and(|t| t.io == Io::Output);
                Row {
                    rank: rank.rank,
                    event,
                    collectives_before: collectives_before + u64::from(after_call),
                    e,
                    t,
                }
            };
            if e.tensors.is_empty() {
                rows.push(row(None));
            }
            rows.extend(e.tensors.iter().map(|t| row(Some(t))));
            if e.collective().is_some() {
                collectives_before += 1;
            }
        }
        let mut values = Vec::with_capacity(COLUMNS.len());
        for c in COLUMNS {
            let cells = rows.iter().map(|r| (c.get)(r));
            let wrong = || anyhow::anyhow!("column {}: a value of another type", c.name);
            let column = match c.kind {
                Kind::Int => Values::Int(
                    cells
                        .map(|x| match x? {
                            Cell::Int(v) => Ok(v),
                            _ => Err(wrong()),
                        })
                        .collect::<Result<_>>()?,
                ),
                Kind::Float => Values::Float(
                    cells
                        .map(|x| match x? {
                            Cell::Float(v) => Ok(v),
                            _ => Err(wrong()),
                        })
                        .collect::<Result<_>>()?,
                ),
                Kind::Bool => Values::Bool(
                    cells
                        .map(|x| match x? {
                            Cell::Bool(v) => Ok(v),
                            _ => Err(wrong()),
                        })
                        .collect::<Result<_>>()?,
                ),
                Kind::Text => Values::Text(
                    cells
                        .map(|x| match x? {
                            Cell::Text(v) => Ok(v.map(ByteArray::from)),
                            _ => Err(wrong()),
                        })
                        .collect::<Result<_>>()?,
                ),
            };
            values.push(column);
        }
        Ok(Columns { values, rows: rows.len() })
    }

    /// Writes the columns as one row group.
    pub fn write(&self, writer: &mut SerializedFileWriter<std::fs::File>) -> Result<()> {
        let mut group = writer.next_row_group()?;
        for (c, values) in COLUMNS.iter().zip(&self.values) {
            let mut column = group.next_column()?.context("fewer columns in the schema than written")?;
            match values {
                Values::Int(v) => write_column::<Int64Type>(&mut column, v, c.required)?,
                Values::Float(v) => write_column::<DoubleType>(&mut column, v, c.required)?,
                Values::Bool(v) => write_column::<BoolType>(&mut column, v, c.required)?,
                Values::Text(v) => write_column::<ByteArrayType>(&mut column, v, c.required)?,
            }
            column.close()?;
        }
        group.close()?;
        Ok(())
    }

    /// The columns of a summary file (every row group), checked against the schema by name and type.
    pub fn read(reader: &SerializedFileReader<std::fs::File>) -> Result<Columns> {
        let schema = reader.metadata().file_metadata().schema_descr_ptr();
        let mut values: Vec<Values> = COLUMNS
            .iter()
            .map(|c| match c.kind {
                Kind::Int => Values::Int(Vec::new()),
                Kind::Float => Values::Float(Vec::new()),
                Kind::Bool => Values::Bool(Vec::new()),
                Kind::Text => Values::Text(Vec::new()),
            })
            .collect();
        let mut at = Vec::with_capacity(COLUMNS.len());
        for c in COLUMNS {
            let i = (0..schema.num_columns())
                .find(|&i| schema.column(i).name() == c.name)
                .with_context(|| format!("no column `{}`: not a rank summary of this version", c.name))?;
            let d = schema.column(i);
            let physical = match c.kind {
                Kind::Int => Physical::INT64,
                Kind::Float => Physical::DOUBLE,
                Kind::Bool => Physical::BOOLEAN,
                Kind::Text => Physical::BYTE_ARRAY,
            };
            if d.physical_type() != physical || d.max_rep_level() != 0 {
                bail!("column `{}` is {:?}, not the summary's {physical:?}", c.name, d.physical_type());
            }
            at.push((i, d.max_def_level()));
        }
        let mut rows = 0usize;
        for g in 0..reader.num_row_groups() {
            let group = reader.get_row_group(g)?;
            let n = usize::try_from(group.metadata().num_rows()).context("a negative row count")?;
            rows = rows.checked_add(n).context("a row count that overflows")?;
            for ((c, values), &(i, max_def)) in COLUMNS.iter().zip(&mut values).zip(&at) {
                let reader = group.get_column_reader(i)?;
                let before = values_len(values);
                match values {
                    Values::Int(v) => read_column::<Int64Type>(reader, max_def, v)?,
                    Values::Float(v) => read_column::<DoubleType>(reader, max_def, v)?,
                    Values::Bool(v) => read_column::<BoolType>(reader, max_def, v)?,
                    Values::Text(v) => read_column::<ByteArrayType>(reader, max_def, v)?,
                }
                if values_len(values) - before != n {
                    bail!(
                        "row group {g}: column `{}` holds {} values for {n} rows",
                        c.name,
                        values_len(values) - before
                    );
                }
            }
        }
        Ok(Columns { values, rows })
    }

    /// The rank's events back from the rows (`events`: how many the file's metadata says it holds); their
    /// names are taken from `names`, shared with the other ranks read.
    pub fn events(&self, rank: u32, events: usize, names: &mut Names) -> Result<RankEvents> {
        let ints = |name| match self.column(name) {
            Values::Int(v) => v.as_slice(),
            _ => unreachable!("{name} is an integer column"),
        };
        let floats = |name| match self.column(name) {
            Values::Float(v) => v.as_slice(),
            _ => unreachable!("{name} is a float column"),
        };
        let texts = |name| match self.column(name) {
            Values::Text(v) => v.as_slice(),
            _ => unreachable!("{name} is a text column"),
        };
        let bools = |name| match self.column(name) {
            Values::Bool(v) => v.as_slice(),
            _ => unreachable!("{name} is a boolean column"),
        };
        let (rank_col, event_col, step, time_us) =
            (ints("rank"), ints("event"), ints("step"), ints("time_us"));
        let (kind, name, op_type, comm) = (texts("kind"), texts("name"), texts("op_type"), texts("comm"));
        let (seq, peer, comm_rank, comm_size) =
            (ints("seq"), ints("peer"), ints("comm_rank"), ints("comm_size"));
        let (io, tensor_index, dtype, is_float) =
            (texts("io"), ints("tensor_index"), texts("dtype"), bools("is_float"));
        let (elements, nan, pos_inf, neg_inf) =
            (ints("elements"), ints("nan"), ints("pos_inf"), ints("neg_inf"));
        let at_saturation = ints("at_saturation");
        let (min, max, mean, l2_norm) =
            (floats("min_value"), floats("max_value"), floats("mean"), floats("l2_norm"));
        let hash = ints("hash");

        let mut out = RankEvents { rank, events: Vec::with_capacity(events.min(self.rows)) };
        for row in 0..self.rows {
            let at = |what: &str| format!("row {row}: {what}");
            let need = |v: Option<i64>, what: &str| v.with_context(|| at(&format!("no {what}")));
            let count = |v: Option<i64>, what: &str| -> Result<u64> {
                u64::try_from(need(v, what)?).with_context(|| at(&format!("a negative {what}")))
            };
            let text = |v, what| text_at(v, row, what);
            if count(rank_col[row], "rank")? != u64::from(rank) {
                bail!("{}, but the file is rank {rank}'s", at(&format!("rank {:?}", rank_col[row])));
            }
            let event = count(event_col[row], "event")?;
            let new_event = event == out.events.len() as u64;
            if !new_event && event + 1 != out.events.len() as u64 {
                bail!("{}", at(&format!("event {event} out of program order")));
            }
            if new_event {
                let event_name = text(&name[row], "name")?;
                let kind = match text(&kind[row], "kind")? {
                    "op" => EventKind::Op {
                        name: names.get(event_name),
                        op_type: names.get(text(&op_type[row], "op_type")?),
                    },
                    "collective" => EventKind::Collective(CollectiveMeta {
                        comm: names.get(text(&comm[row], "comm")?),
                        seq: count(seq[row], "seq")?,
                        op: CollectiveOp::from_api_name(event_name)
                            .with_context(|| at(&format!("`{event_name}` is not an HCCL call")))?,
                        peer: peer[row].map(|p| u32::try_from(p).with_context(|| at("peer"))).transpose()?,
                        comm_rank: u32::try_from(count(comm_rank[row], "comm_rank")?)
                            .with_context(|| at("comm_rank"))?,
                        comm_size: u32::try_from(count(comm_size[row], "comm_size")?)
                            .with_context(|| at("comm_size"))?,
                    }),
                    other => bail!("{}", at(&format!("kind `{other}` is neither op nor collective"))),
                };
                let time_us = time_us[row].map(|t| count(Some(t), "time_us")).transpose()?;
                out.events.push(Event {
                    step: count(step[row], "step")?,
                    time_us,
                    kind,
                    tensors: Vec::new(),
                });
            }
            let Some(io) = &io[row] else {
                continue;
            };
            let io = match io.as_utf8() {
                Ok("input") => Io::Input,
                Ok("output") => Io::Output,
                _ => bail!("{}", at("io is neither input nor output")),
            };
            let float = |v: Option<f64>, what: &str| v.with_context(|| at(&format!("no {what}")));
            let tensor = TensorSummary {
                io,
                index: u32::try_from(count(tensor_index[row], "tensor_index")?)
                    .with_context(|| at("tensor_index"))?,
                dtype: names.get(text(&dtype[row], "dtype")?),
                float: is_float[row].with_context(|| at("no is_float"))?,
                elements: count(elements[row], "elements")?,
                nan: count(nan[row], "nan")?,
                pos_inf: count(pos_inf[row], "pos_inf")?,
                neg_inf: count(neg_inf[row], "neg_inf")?,
                at_saturation: count(at_saturation[row], "at_saturation")?,
                min: float(min[row], "min_value")?,
                max: float(max[row], "max_value")?,
                mean: float(mean[row], "mean")?,
                l2_norm: float(l2_norm[row], "l2_norm")?,
                hash: hash[row].map(|h| h as u64),
            };
            let last = out.events.last_mut().expect("a row's event was pushed above");
            last.tensors.push(tensor);
        }
        if out.events.len() != events {
            bail!("{} events in the rows, {events} in the file's metadata", out.events.len());
        }
        // A merge holds every event of every rank: no spare capacity.
        for e in &mut out.events {
            e.tensors.shrink_to_fit();
        }
        Ok(out)
    }

    fn column(&self, name: &str) -> &Values {
        let i = COLUMNS.iter().position(|c| c.name == name).expect("a column of the schema");
        &self.values[i]
    }
}

/// The text of a row's cell (`what`, for the error).
fn text_at<'v>(v: &'v Option<ByteArray>, row: usize, what: &str) -> Result<&'v str> {
    let bytes = v.as_ref().with_context(|| format!("row {row}: no {what}"))?;
    bytes.as_utf8().with_context(|| format!("row {row}: {what} is not UTF-8"))
}

fn values_len(v: &Values) -> usize {
    match v {
        Values::Int(v) => v.len(),
        Values::Float(v) => v.len(),
        Values::Bool(v) => v.len(),
        Values::Text(v) => v.len(),
    }
}

/// Writes one column chunk: `cells` (nulls as `None`; none when `required`).
pub(super) fn write_column<T: DataType>(
    column: &mut parquet::file::writer::SerializedColumnWriter<'_>,
    cells: &[Option<T::T>],
    required: bool,
) -> Result<()>
where
    T::T: Clone,
{
    let present: Vec<T::T> = cells.iter().flatten().cloned().collect();
    if required {
        if present.len() != cells.len() {
            bail!("a required column holds a null");
        }
        column.typed::<T>().write_batch(&present, None, None)?;
    } else {
        let defs: Vec<i16> = cells.iter().map(|c| i16::from(c.is_some())).collect();
        column.typed::<T>().write_batch(&present, Some(&defs), None)?;
    }
    Ok(())
}

/// Appends a column chunk's values to `out`, nulls where a value's definition level is below `max_def`.
pub(super) fn read_column<T: DataType>(
    reader: parquet::column::reader::ColumnReader,
    max_def: i16,
    out: &mut Vec<Option<T::T>>,
) -> Result<()> {
    const BATCH: usize = 8192;
    let mut reader = get_typed_column_reader::<T>(reader);
    loop {
        let (mut defs, mut values) = (Vec::new(), Vec::new());
        let (records, _, _) = reader.read_records(BATCH, Some(&mut defs), None, &mut values)?;
        if records == 0 {
            return Ok(());
        }
        if max_def == 0 {
            out.extend(values.into_iter().map(Some));
            continue;
        }
        let mut values = values.into_iter();
        for d in defs {
            out.push(if d == max_def {
                Some(values.next().context("fewer values than definition levels say")?)
            } else {
                None
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{read_one, write_one, RankSummary};
    use super::*;
    use crate::problems::InputProblem;

    fn tensor(io: Io, index: u32, min: f64, hash: Option<u64>) -> TensorSummary {
        TensorSummary {
            io,
            index,
            dtype: "FLOAT16".into(),
            float: true,
            elements: 6,
            nan: 1,
            pos_inf: 2,
            neg_inf: 0,
            at_saturation: 1,
            min,
            max: f64::INFINITY,
            mean: f64::NAN,
            l2_norm: 3.5,
            hash,
        }
    }

    fn collective(op: CollectiveOp, seq: u64, peer: Option<u32>, tensors: Vec<TensorSummary>) -> Event {
        let meta = CollectiveMeta { comm: "root-7".into(), seq, op, peer, comm_rank: 1, comm_size: 4 };
        Event { step: 3, time_us: Some(1_700_000_000_000_000), kind: EventKind::Collective(meta), tensors }
    }

    #[test]
    fn a_rank_reads_back_as_written_nulls_non_finite_values_and_hash_bits_included() {
        let op = |name: &str, time_us, tensors| Event {
            step: 3,
            time_us,
            kind: EventKind::Op { name: name.into(), op_type: "MatMulV2".into() },
            tensors,
        };
        let events = RankEvents {
            rank: 1,
            events: vec![
                op(
                    "a/MatMul",
                    None,
                    vec![tensor(Io::Input, 0, -1.5, Some(u64::MAX)), tensor(Io::Output, 2, 0.0, None)],
                ),
                collective(CollectiveOp::Barrier, 0, None, vec![]),
                collective(
                    CollectiveOp::Broadcast,
                    1,
                    Some(0),
                    vec![tensor(Io::Output, 0, f64::NEG_INFINITY, Some(7))],
                ),
                op("b/Add", Some(12), vec![]),
            ],
        };
        let summary = RankSummary {
            run: "runs/npu".into(),
            events: events.clone(),
            warnings: vec!["w".into()],
            problems: vec![InputProblem::incomplete("lost a segment".to_string())],
            selection: crate::filter::Filter { ranks: vec![1], ..Default::default() },
            job_ranks: Some(4),
            communicators_made: None,
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rank000001.parquet");
        write_one(&summary, &file).unwrap();
        let back = read_one(&file).unwrap();
        // NaN != NaN: compare through the Debug form, which prints NaN as NaN.
        assert_eq!(format!("{:?}", back.events), format!("{events:?}"));
        assert_eq!((back.run, back.warnings), ("runs/npu".to_string(), vec!["w".to_string()]));
        assert_eq!(back.problems[0].message, "lost a segment");
        assert_eq!((back.selection.ranks, back.job_ranks), (vec![1], Some(4)), "the selection travels");
        assert!(!dir.path().join("rank000001.parquet.partial").exists());
    }

    #[test]
    fn ranks_read_together_share_their_names_and_hold_no_spare_tensors() {
        let dir = tempfile::tempdir().unwrap();
        for rank in 0..2 {
            let events = vec![Event {
                step: 0,
                time_us: Some(1),
                kind: EventKind::Op { name: "a/MatMul".into(), op_type: "MatMulV2".into() },
                tensors: vec![tensor(Io::Input, 0, 1.0, Some(1)); 3],
            }];
            let summary = RankSummary {
                run: "r".into(),
                events: RankEvents { rank, events },
                warnings: vec![],
                problems: vec![],
                selection: Default::default(),
                job_ranks: Some(2),
                communicators_made: None,
            };
            write_one(&summary, &dir.path().join(super::super::file_name(rank))).unwrap();
        }
        let run = super::super::read(&[dir.path().to_path_buf()]).unwrap();
        let (a, b) = (&run.ranks[0].events[0], &run.ranks[1].events[0]);
        let (EventKind::Op { name: na, op_type: ta }, EventKind::Op { name: nb, op_type: tb }) =
            (&a.kind, &b.kind)
        else {
            unreachable!()
        };
        assert!(std::sync::Arc::ptr_eq(na, nb) && std::sync::Arc::ptr_eq(ta, tb));
        assert!(std::sync::Arc::ptr_eq(&a.tensors[0].dtype, &b.tensors[2].dtype));
        assert_eq!((a.tensors.len(), a.tensors.capacity()), (3, 3));
    }

    #[test]
    fn summaries_of_jobs_of_different_sizes_are_an_input_problem() {
        // Ranks 0 and 1 of a 2-rank job beside rank 2 of a 4-rank job (a scan into a directory that held
        // another job's summaries): no answer covers either job.
        let dir = tempfile::tempdir().unwrap();
        for (rank, job_ranks) in [(0, 2), (1, 2), (2, 4)] {
            let summary = RankSummary {
                run: "r".into(),
                events: RankEvents { rank, events: vec![] },
                warnings: vec![],
                problems: vec![],
                selection: Default::default(),
                job_ranks: Some(job_ranks),
                communicators_made: None,
            };
            write_one(&summary, &dir.path().join(super::super::file_name(rank))).unwrap();
        }
        let run = super::super::read(&[dir.path().to_path_buf()]).unwrap();
        let said: Vec<String> = run.problems.iter().map(|p| p.message.clone()).collect();
        assert!(
            said.iter().any(|p| p.contains("different jobs")
                && p.contains("ranks 0, 1 of a job of 2 ranks")
                && p.contains("rank 2 of a job of 4 ranks")),
            "{said:?}"
        );
    }

    /// Writes one summary per `(rank, communicators made)` of a job of 2 ranks into a new directory, and
    /// merges them: the problems merge leads with.
    fn problems_of_ranks_made(ranks: &[(u32, Option<&[&str]>)]) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        for &(rank, made) in ranks {
            let summary = RankSummary {
                run: format!("node{rank}/run"),
                events: RankEvents { rank, events: vec![] },
                warnings: vec![],
                problems: vec![],
                selection: Default::default(),
                job_ranks: Some(2),
                communicators_made: made.map(|comms| {
                    comms
                        .iter()
                        .map(|c| crate::index::MadeCommunicator {
                            comm: c.to_string(),
                            comm_rank: rank,
                            comm_size: if c.starts_with("root-sub") { 1 } else { 2 },
                        })
                        .collect()
                }),
            };
            write_one(&summary, &dir.path().join(super::super::file_name(rank))).unwrap();
        }
        let run = super::super::read(&[dir.path().to_path_buf()]).unwrap();
        run.problems.iter().map(|p| p.message.clone()).collect()
    }

    #[test]
    fn summaries_of_two_runs_of_one_job_size_are_an_input_problem_naming_their_communicators() {
        // Rank 0 of one 2-rank run beside rank 1 of another: each made the communicator spanning its job,
        // and no rank of one job can miss it.
        let said = problems_of_ranks_made(&[(0, Some(&["root-aaaa"])), (1, Some(&["root-bbbb"]))]);
        assert!(
            said.iter().any(|p| p.contains("different runs")
                && p.contains("rank 0 made HCCL communicator root-aaaa")
                && p.contains("rank 1 made HCCL communicator root-bbbb")
                && p.contains("scan each run into its own directory")),
            "{said:?}"
        );
        // One run: the spanning communicator in common, whatever else each rank made.
        let one = [(0, Some(&["root-aaaa", "root-sub0"][..])), (1, Some(&["root-sub1", "root-aaaa"][..]))];
        assert!(problems_of_ranks_made(&one).is_empty());
        // Unknown for a rank (an older capture), or only communicators smaller than the job: no claim.
        assert!(problems_of_ranks_made(&[(0, Some(&["root-aaaa"])), (1, None)]).is_empty());
        assert!(problems_of_ranks_made(&[(0, Some(&["root-aaaa"])), (1, Some(&["root-sub1"]))]).is_empty());
    }

    /// Writes one summary per `(rank, communicators made, communicator of its one HCCL call)` of a job of 2
    /// ranks into a new directory, and merges them: the problems merge leads with.
    fn problems_of_ranks_calling(ranks: &[(u32, Option<&str>, &str)]) -> Vec<String> {
        let size = |comm: &str| if comm.starts_with("root-sub") { 1 } else { 2 };
        let dir = tempfile::tempdir().unwrap();
        for &(rank, made, called) in ranks {
            let meta = CollectiveMeta {
                comm: called.into(),
                seq: 0,
                op: CollectiveOp::AllReduce,
                peer: None,
                comm_rank: rank,
                comm_size: size(called),
            };
            let call =
                Event { step: 0, time_us: Some(1), kind: EventKind::Collective(meta), tensors: vec![] };
            let summary = RankSummary {
                run: format!("node{rank}/run"),
                events: RankEvents { rank, events: vec![call] },
                warnings: vec![],
                problems: vec![],
                selection: Default::default(),
                job_ranks: Some(2),
                communicators_made: made.map(|comm| {
                    vec![crate::index::MadeCommunicator {
                        comm: comm.into(),
                        comm_rank: rank,
                        comm_size: size(comm),
                    }]
                }),
            };
            write_one(&summary, &dir.path().join(super::super::file_name(rank))).unwrap();
        }
        let run = super::super::read(&[dir.path().to_path_buf()]).unwrap();
        run.problems.iter().map(|p| p.message.clone()).collect()
    }

    #[test]
    fn summaries_of_unknown_job_identity_whose_calls_span_the_job_apart_say_so() {
        // Rank 1's summary is older than `accutrace.communicators` (or its capture's collector): what it
        // made is unknown, but its calls are on a communicator spanning the job that rank 0 never used.
        let said = problems_of_ranks_calling(&[(0, Some("root-aaaa"), "root-aaaa"), (1, None, "root-bbbb")]);
        assert!(
            said.iter().any(|p| p.starts_with("job identity unknown for rank 1 ")
                && p.contains("rank 0 with HCCL communicator root-aaaa")
                && p.contains("rank 1 with HCCL communicator root-bbbb")
                && p.contains("scan each run into its own directory")),
            "{said:?}"
        );
        assert!(!said.iter().any(|p| p.contains("the ranks are of different runs")), "no claim: {said:?}");
        // Neither rank's identity recorded: their calls tell the same.
        let said = problems_of_ranks_calling(&[(0, None, "root-aaaa"), (1, None, "root-bbbb")]);
        assert!(said.iter().any(|p| p.starts_with("job identity unknown for ranks 0, 1 ")), "{said:?}");
        // Calls on the communicator in common, or on one smaller than the job: nothing to say.
        assert!(problems_of_ranks_calling(&[(0, Some("root-aaaa"), "root-aaaa"), (1, None, "root-aaaa")])
            .is_empty());
        assert!(problems_of_ranks_calling(&[(0, None, "root-aaaa"), (1, None, "root-sub1")]).is_empty());
        // Every identity recorded: the claim of different runs alone.
        let said = problems_of_ranks_calling(&[
            (0, Some("root-aaaa"), "root-aaaa"),
            (1, Some("root-bbbb"), "root-bbbb"),
        ]);
        assert!(!said.iter().any(|p| p.contains("job identity unknown")), "{said:?}");
    }

    #[test]
    fn a_scans_problems_lead_merge_when_its_lowest_ranks_file_is_lost() {
        // A scan of ranks 0-3 whose rank 3 stream has a torn tail; rank 0's file does not reach merge.
        let torn = InputProblem::incomplete("run/stream-001-rank3: not sealed: records end at byte 132032");
        let run = crate::ranks::events::RunEvents {
            ranks: (0..4).map(|rank| RankEvents { rank, events: vec![] }).collect(),
            problems: vec![torn.clone()],
            warnings: vec!["rank 3: 2 HCCL calls placed by the host clock".into()],
            job_ranks: Some(4),
            ..crate::ranks::events::RunEvents::default()
        };
        let dir = tempfile::tempdir().unwrap();
        super::super::write(&run, &Default::default(), "run", dir.path()).unwrap();
        std::fs::remove_file(dir.path().join(super::super::file_name(0))).unwrap();
        let merged = super::super::read(&[dir.path().to_path_buf()]).unwrap();
        assert_eq!(merged.problems, [torn], "the torn tail is said once");
        assert_eq!(merged.warnings, run.warnings, "and the warning once");
    }

    #[test]
    fn rows_out_of_program_order_or_of_another_rank_are_refused() {
        let events =
            RankEvents { rank: 0, events: vec![collective(CollectiveOp::AllReduce, 0, None, vec![])] };
        let mut columns = Columns::of(&events).unwrap();
        let Values::Int(event) = &mut columns.values[1] else { unreachable!() };
        event[0] = Some(5);
        let err = columns.events(0, 1, &mut Names::default()).unwrap_err().to_string();
        assert!(err.contains("row 0: event 5 out of program order"), "{err}");
        let columns = Columns::of(&events).unwrap();
        let err = columns.events(3, 1, &mut Names::default()).unwrap_err().to_string();
        assert!(err.contains("the file is rank 3's"), "{err}");
        let err = columns.events(0, 2, &mut Names::default()).unwrap_err().to_string();
        assert!(err.contains("1 events in the rows, 2 in the file's metadata"), "{err}");
    }
}
