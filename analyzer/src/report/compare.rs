//! The reports of `analyzer compare`: a terminal summary that leads with the culprit, CSV whose columns
//! keep msprobe's names (then msaccucmp's, then accutrace's), JSON, and msprobe's own CSV.

use super::{fmt_num, paint, write_json, Destination, Output};
use crate::compare::msprobe_table::bool_text;
use crate::compare::{fused_kernels, rows_of_op, CompareRow, Comparison, FailingOp, Measured, TableRow};
use crate::index::{Index, Io};
use crate::metrics::verdict::messages_cell;
use crate::metrics::{Cell, Families, MsaccucmpMetrics};
use accutrace_formats::msprobe::py_float_repr;
use accutrace_formats::stats::TensorStats;
use anyhow::Result;
use serde_json::json;
use std::io::Write;

mod json_rows;
pub mod windows;
use json_rows::{status_word, JsonRows};

/// The forms of compare's report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CompareFormat {
    /// The summary that leads with the culprit.
    #[default]
    Table,
    /// Every compared pair: msprobe's columns, then msaccucmp's, then accutrace's.
    Csv,
    /// Everything, for machines.
    Json,
    /// msprobe's own `compare_result` CSV.
    MsprobeCsv,
}

impl CompareFormat {
    /// The metric families this form shows, where it shows fewer than a comparison can compute: the table
    /// and msprobe's CSV have msprobe's columns alone, so msaccucmp's (whose KL divergence costs about as
    /// much as all of msprobe's metrics) would be computed for nothing. `None`: every family computed
    /// reaches the report (CSV, JSON).
    pub fn families_shown(self) -> Option<Families> {
        match self {
            CompareFormat::Table | CompareFormat::MsprobeCsv => Some(Families::Msprobe),
            CompareFormat::Csv | CompareFormat::Json => None,
        }
    }
}

/// Writes the report in `format` to its destination; `all` lists every compared tensor in the table, not
/// only the failures. When the report goes to a file, the headline still goes to the terminal (stderr).
pub fn write(c: &Comparison<'_>, format: CompareFormat, to: &Destination<'_>, all: bool) -> Result<()> {
    let mut out = Output::open(to.output)?;
    super::lead(&c.problems, format == CompareFormat::Table, to.output.is_some(), &mut out)?;
    match format {
        CompareFormat::Table => summary(&mut out, c, all, to.paints())?,
        CompareFormat::Csv => write_csv(&mut out, c)?,
        CompareFormat::Json => write_report_json(&mut out, c)?,
        CompareFormat::MsprobeCsv => write_msprobe_csv(&mut out, c)?,
    }
    out.flush()?;
    if to.output.is_some() {
        headline(&mut std::io::stderr().lock(), c, to.colour.for_stderr())?;
    } else if format != CompareFormat::Table {
        // The report is on standard output (JSON has them as "warnings"): the person still sees them.
        warnings(&mut std::io::stderr().lock(), c, to.colour.for_stderr())?;
    }
    Ok(())
}

/// What the reader must know before the answer, one `WARNING:` line each.
fn warnings(out: &mut impl Write, c: &Comparison<'_>, colour: bool) -> Result<()> {
    for w in &c.warnings {
        writeln!(out, "{}: {w}", paint("WARNING", "1;33", colour))?;
    }
    Ok(())
}

fn headline(out: &mut impl Write, c: &Comparison<'_>, colour: bool) -> Result<()> {
    let h = Headline::of(c);
    h.write(out, colour)?;
    if h.counts.is_some() {
        api_summary(out, c, colour)?;
    }
    Ok(())
}

/// What the headline says, made from a whole comparison ([`Headline::of`]) or from the windows of two long
/// captures folded: the same lines either way.
pub(crate) struct Headline<'a> {
    pub warnings: &'a [String],
    /// `None`: nothing was compared (refused, or no pair matched: `refused` says which).
    pub counts: Option<Counts>,
    pub refused: bool,
    pub culprit: Option<CulpritLines>,
    /// Where no op is the culprit: the first failing op and why it is not (the words after its name).
    pub first_failing: Option<String>,
    pub judged: bool,
    pub problems: bool,
    pub without_counterpart: usize,
}

/// The headline's counts of pairs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counts {
    pub compared: usize,
    pub passed: usize,
    pub failed: usize,
    pub unread: usize,
    pub unmeasured: usize,
    pub unmatched: [usize; 2],
}

/// The culprit's lines: its place, name and why (`step S rank R: name [type] fails ...`), the fused
/// kernel's original ops, its failing tensors (`label: reason`), and the note on an earlier failing op.
#[derive(Clone, Debug)]
pub(crate) struct CulpritLines {
    pub place: String,
    pub originals: Option<String>,
    pub failing: Vec<String>,
    pub note: Option<String>,
}

impl CulpritLines {
    /// Failing op `f` of comparison `c` (the culprit): its lines but the note.
    pub(crate) fn of(c: &Comparison<'_>, f: &FailingOp) -> CulpritLines {
        let index = c.target.index();
        let op = &index.ops[f.op];
        let inputs = match &f.inputs_unverified {
            Some(why) => format!("fails; {why}"),
            None => "fails while its inputs pass".to_string(),
        };
        let originals = op.original_names(index);
        CulpritLines {
            place: format!("step {} rank {}: {} [{}] {inputs}", op.step, op.rank, op.name, op.op_type),
            originals: (!originals.is_empty() && originals.iter().any(|n| *n != op.name))
                .then(|| originals.join(", ")),
            failing: f
                .failing_rows
                .iter()
                .map(|&r| {
                    let row = &c.rows[r];
                    format!("{}: {}", index.tensor_label(row.target()), row.reason().unwrap_or(""))
                })
                .collect(),
            note: None,
        }
    }
}

/// What the headline says of failing op `f` of `c` when no op is the culprit (the words after the tag).
pub(crate) fn first_failing_text(c: &Comparison<'_>, f: &FailingOp) -> String {
    let index = c.target.index();
    let op = &index.ops[f.op];
    let why = f.why_not_culprit();
    format!("the first failing op, {} [{}] (step {} rank {}), {why}", op.name, op.op_type, op.step, op.rank)
}

impl<'a> Headline<'a> {
    pub(crate) fn of(c: &'a Comparison<'_>) -> Headline<'a> {
        let counts = (c.refused.is_none() && !c.rows.is_empty()).then(|| Counts {
            compared: c.rows.len(),
            passed: c.rows.iter().filter(|r| r.passed()).count(),
            failed: c.rows.iter().filter(|r| r.failed).count(),
            unread: c.rows.iter().filter(|r| r.error().is_some()).count(),
            unmeasured: c.unmeasured_pairs(),
            unmatched: [c.unmatched_target.len(), c.unmatched_bench.len()],
        });
        let culprit = c.culprit.map(|i| {
            let mut lines = CulpritLines::of(c, &c.failing_ops[i]);
            lines.note = c.failing_before_culprit().map(|first| first.before_culprit_note(c.target.index()));
            lines
        });
        Headline {
            warnings: &c.warnings,
            counts,
            refused: c.refused.is_some(),
            culprit,
            first_failing: c.failing_ops.first().map(|f| first_failing_text(c, f)),
            judged: c.rows.iter().any(|r| r.judged()),
            problems: !c.problems.is_empty(),
            without_counterpart: c.without_counterpart,
        }
    }

    pub(crate) fn write(&self, out: &mut impl Write, colour: bool) -> Result<()> {
        for w in self.warnings {
            writeln!(out, "{}: {w}", paint("WARNING", "1;33", colour))?;
        }
        let Some(counts) = self.counts else {
            let what = if self.refused { "the inputs cannot be compared" } else { "no tensor pair matched" };
            writeln!(out, "{}: {what} (REFUSED above)", paint("NOT COMPARED", "1;31", colour))?;
            return Ok(());
        };
        let Counts { compared, passed, failed, unread, unmeasured, unmatched } = counts;
        let unread_text = if unread > 0 { format!(", {unread} could not be read") } else { String::new() };
        let unmeasured_text = match unmeasured {
            0 => String::new(),
            n => format!(", {n} not measured (no tensor data on a side)"),
        };
        writeln!(
            out,
            "compared {compared} tensor pairs: {passed} pass, {failed} fail{unread_text}{unmeasured_text}; {} target and {} bench \
             tensors unmatched",
            unmatched[0], unmatched[1]
        )?;
        match (&self.culprit, &self.first_failing) {
            (Some(lines), _) => {
                writeln!(out, "{} {}", paint("CULPRIT", "1;31", colour), lines.place)?;
                if let Some(originals) = &lines.originals {
                    writeln!(out, "  fused kernel of original op(s): {originals}")?;
                }
                for line in &lines.failing {
                    writeln!(out, "  {line}")?;
                }
                if let Some(note) = &lines.note {
                    writeln!(out, "  {}: {note}", paint("NOTE", "1;33", colour))?;
                }
            }
            (None, Some(first)) => {
                writeln!(out, "{}: {first}", paint("NO CLEAN CULPRIT", "1;33", colour))?;
            }
            // Never a pass about what was not seen: the input problems above say what is missing.
            (None, None) if !self.judged => writeln!(
                out,
                "{}: no matched pair was read and measured; the input problems above say why and what to do",
                paint("NOT MEASURED", "1;33", colour)
            )?,
            (None, None) if self.problems => writeln!(
                out,
                "{}: every tensor that could be compared passes, but the input problems above leave the answer open",
                paint("NO VERDICT", "1;33", colour)
            )?,
            // Never a pass over part of the target: what has no counterpart was not compared (the WARNING above).
            (None, None) if self.without_counterpart > 0 => writeln!(
                out,
                "{}: every compared tensor passes, but {} target tensors have no counterpart in the benchmark and \
                 were not compared (listed below)",
                paint("NOT ALL COMPARED", "1;33", colour),
                self.without_counterpart
            )?,
            (None, None) => writeln!(out, "{}: every compared tensor passes", paint("PASS", "1;32", colour))?,
        }
        Ok(())
    }
}

/// Kernels against API calls: the first call whose output diverges, with its kernels, and what could not
/// be placed.
fn api_summary(out: &mut impl Write, c: &Comparison<'_>, colour: bool) -> Result<()> {
    if c.api_calls.is_empty() {
        return Ok(());
    }
    let (ti, bi) = (c.target.index(), c.bench.index());
    // A call's kernels, the first few (a call whose kernels span a whole step says the alignment failed).
    const LISTED: usize = 8;
    let kernels = |ops: &[usize]| -> String {
        let mut names: Vec<String> =
            ops.iter().take(LISTED).map(|&k| format!("{} [{}]", ti.ops[k].name, ti.ops[k].op_type)).collect();
        if ops.len() > LISTED {
            names.push(format!("and {} more (--format json lists all)", ops.len() - LISTED));
        }
        if names.is_empty() {
            "no kernel".into()
        } else {
            names.join(", ")
        }
    };
    if let Some(d) = c.first_diverging_api() {
        let op = &bi.ops[d.bench_op];
        writeln!(
            out,
            "{} step {} rank {}: {}, implemented by {}",
            paint("FIRST DIVERGING API", "1;31", colour),
            op.step,
            op.rank,
            op.name,
            kernels(d.kernels)
        )?;
        if !d.sharing.is_empty() {
            let names: Vec<&str> = d.sharing.iter().map(|&b| bi.ops[b].name.as_str()).collect();
            writeln!(out, "  the same kernel(s) also compute {}", names.join(", "))?;
        }
        let row = &c.rows[d.row];
        writeln!(
            out,
            "  {} against {}: {}",
            ti.tensor_label(row.target()),
            row.bench().map_or_else(String::new, |b| bi.tensor_label(b)),
            row.reason().unwrap_or("")
        )?;
    }
    let empty_calls = c.api_calls.iter().filter(|a| a.kernels.is_empty()).count();
    writeln!(
        out,
        "kernels against {} API calls: {} kernel outputs belong to no call (e.g. an optimizer's kernels), {} API \
         outputs found no kernel, {} calls no kernel",
        c.api_calls.len(),
        c.unmatched_target.len(),
        c.unmatched_bench.len(),
        empty_calls
    )?;
    Ok(())
}

fn fusion_summary(out: &mut impl Write, c: &Comparison<'_>) -> Result<()> {
    let kernels = fused_kernels(c);
    let index = c.target.index();
    let failing: Vec<&(usize, bool)> = kernels.iter().filter(|(_, f)| *f).collect();
    let first = failing.first().map(|(op, _)| fused_text(index, *op));
    fusion_line(out, kernels.len(), failing.len(), first.as_deref())
}

/// A fused kernel as the fusion line names it: `name = original + original`.
pub(crate) fn fused_text(index: &Index, op: usize) -> String {
    format!("{} = {}", index.ops[op].name, index.ops[op].original_names(index).join(" + "))
}

/// The fusion line: `kernels` fused kernels matched through their original ops, `failing` of them failing,
/// the first named by `first` ([`fused_text`]); nothing without fused kernels.
fn fusion_line(out: &mut impl Write, kernels: usize, failing: usize, first: Option<&str>) -> Result<()> {
    if kernels == 0 {
        return Ok(());
    }
    write!(out, "fused kernels matched through their original ops: {kernels}")?;
    match first {
        None => writeln!(out, ", all pass: the fused kernels agree with the unfused ops")?,
        Some(first) => writeln!(out, ", {failing} fail (first: {first}): fusion changes the result")?,
    }
    Ok(())
}

/// The culprit's tensors and the outputs of the ops around it, in `c`: the table below the headline.
pub(crate) fn culprit_tables(
    out: &mut impl Write,
    c: &Comparison<'_>,
    f: &FailingOp,
    colour: bool,
) -> Result<()> {
    let index = c.target.index();
    writeln!(out, "\nThe culprit's tensors:")?;
    table_header(out)?;
    for r in rows_of_op(c, f.op, Some(Io::Input)).into_iter().chain(rows_of_op(c, f.op, Some(Io::Output))) {
        table_row(out, c, &c.rows[r], colour)?;
    }
    let position = index.ops[f.op].order;
    let around: Vec<usize> = (0..index.ops.len())
        .filter(|&o| {
            let op = &index.ops[o];
            o != f.op
                && op.step == index.ops[f.op].step
                && op.rank == index.ops[f.op].rank
                && op.order + 2 >= position
                && op.order <= position + 2
        })
        .collect();
    if !around.is_empty() {
        writeln!(out, "\nOps around it (outputs):")?;
        table_header(out)?;
        for o in around {
            for r in rows_of_op(c, o, Some(Io::Output)) {
                table_row(out, c, &c.rows[r], colour)?;
            }
        }
    }
    Ok(())
}

/// A line of the failing ops' list.
pub(crate) fn failing_line(index: &Index, f: &FailingOp, tag: &str) -> String {
    let op = &index.ops[f.op];
    format!("  step {:<4} rank {:<4} {:<56} {:<18} {}", op.step, op.rank, op.name, op.op_type, tag)
}

/// The failing ops' list: `count` of them, `lines` the first (all of them where `all`).
fn failing_list(out: &mut impl Write, count: usize, lines: &[String], all: bool) -> Result<()> {
    if count == 0 {
        return Ok(());
    }
    writeln!(out, "\nFailing ops in execution order ({count}):")?;
    for line in lines.iter().take(if all { usize::MAX } else { LISTED_FAILING }) {
        writeln!(out, "{line}")?;
    }
    if !all && count > LISTED_FAILING {
        writeln!(out, "  ... {} more (--all, or --format csv)", count - LISTED_FAILING)?;
    }
    Ok(())
}

/// Failing ops the table lists without `--all`, and unmatched tensors of each side.
pub(crate) const LISTED_FAILING: usize = 30;
pub(crate) const LISTED_UNMATCHED: usize = 10;

/// A line of an unmatched side's list: tensor `t` of `index`.
pub(crate) fn unmatched_line(index: &Index, t: usize) -> String {
    let op = &index.ops[index.tensors[t].op()];
    format!("  step {} rank {}: {}", op.step, op.rank, index.tensor_label(t))
}

/// The tensors of `side` without a counterpart: `count` of them, `lines` the first.
fn unmatched_list(out: &mut impl Write, side: &str, count: usize, lines: &[String]) -> Result<()> {
    if count > 0 {
        writeln!(out, "\n{count} {side} tensors have no counterpart:")?;
        for line in lines.iter().take(LISTED_UNMATCHED) {
            writeln!(out, "{line}")?;
        }
        if count > LISTED_UNMATCHED {
            writeln!(out, "  ... {} more (--format json lists all)", count - LISTED_UNMATCHED)?;
        }
    }
    Ok(())
}

fn summary(out: &mut impl Write, c: &Comparison<'_>, all: bool, colour: bool) -> Result<()> {
    title(out, [(c.target.root(), c.target.kind()), (c.bench.root(), c.bench.kind())])?;
    headline(out, c, colour)?;
    fusion_summary(out, c)?;
    if let Some(f) = c.culprit.map(|i| &c.failing_ops[i]) {
        culprit_tables(out, c, f, colour)?;
    }
    let index = c.target.index();
    let shown = if all { c.failing_ops.len() } else { LISTED_FAILING };
    let lines: Vec<String> = (0..c.failing_ops.len().min(shown))
        .map(|i| failing_line(index, &c.failing_ops[i], c.failing_tag(i)))
        .collect();
    failing_list(out, c.failing_ops.len(), &lines, all)?;
    if all {
        writeln!(out, "\nEvery compared tensor:")?;
        table_header(out)?;
        for row in &c.rows {
            table_row(out, c, row, colour)?;
        }
    }
    for (side, list, index) in
        [("target", &c.unmatched_target, c.target.index()), ("bench", &c.unmatched_bench, c.bench.index())]
    {
        let lines: Vec<String> =
            list.iter().take(LISTED_UNMATCHED).map(|&t| unmatched_line(index, t)).collect();
        unmatched_list(out, side, list.len(), &lines)?;
    }
    Ok(())
}

/// The table's first line: the two sources' roots, each with its kind.
fn title(out: &mut impl Write, sources: [(&std::path::Path, &str); 2]) -> Result<()> {
    let [(target, target_kind), (bench, bench_kind)] = sources;
    writeln!(out, "target {} ({target_kind}) vs bench {} ({bench_kind})", target.display(), bench.display())?;
    Ok(())
}

fn table_header(out: &mut impl Write) -> Result<()> {
    writeln!(
        out,
        "  {:>4} {:<60} {:>10} {:>11} {:>11} {:>9} {:>6}",
        "rank", "tensor", "cosine", "max abs", "max rel", "1/1000", "status"
    )?;
    Ok(())
}

fn table_row(out: &mut impl Write, c: &Comparison<'_>, row: &CompareRow, colour: bool) -> Result<()> {
    let m = row.msprobe();
    let index = c.target.index();
    let status = match status_word(row) {
        "unreadable" => paint("UNREAD", "33", colour),
        "unmeasured" => paint("NO DATA", "33", colour),
        "fail" => paint("FAIL", "31", colour),
        _ => paint("ok", "32", colour),
    };
    writeln!(
        out,
        "  {:>4} {:<60} {:>10} {:>11} {:>11} {:>9} {:>6}",
        index.ops[index.tensors[row.target()].op()].rank,
        index.tensor_label(row.target()),
        cell(m.cosine),
        cell(m.max_abs_err),
        cell(m.max_relative_err),
        cell(m.one_thousandth_err_ratio),
        status
    )?;
    Ok(())
}

fn cell(c: Cell) -> String {
    match c {
        Cell::Value(v) => fmt_num(v),
        other => other.to_string(),
    }
}

fn stat_cells(stats: Option<&TensorStats>) -> [String; 4] {
    match stats {
        Some(s) => {
            [py_float_repr(s.max), py_float_repr(s.min), py_float_repr(s.mean), py_float_repr(s.l2_norm)]
        }
        None => ["None".into(), "None".into(), "None".into(), "None".into()],
    }
}

/// msprobe's names for the pair's names, dtypes and shapes.
const NAME_COLUMNS: [&str; 6] =
    ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape"];
/// msprobe's metric columns, in its order.
const METRIC_COLUMNS: [&str; 6] = [
    "Cosine",
    "EucDist",
    "MaxAbsErr",
    "MaxRelativeErr",
    "One Thousandth Err Ratio",
    "Five Thousandths Err Ratio",
];
/// msprobe's statistics columns.
const STAT_COLUMNS: [&str; 8] =
    ["NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm"];

/// `--format csv`: msprobe's columns, then msaccucmp's, then accutrace's.
fn csv_header() -> Vec<&'static str> {
    let msprobe_verdicts = ["Accuracy Reached or Not", "Result", "Err_message"];
    let msaccucmp = [
        "MeanAbsoluteError",
        "RootMeanSquareError",
        "RelativeEuclideanDistance",
        "MeanRelativeError",
        "AccumulatedRelativeError",
        "KullbackLeiblerDivergence",
        "OverFlow",
    ];
    let ours = ["Step", "Rank", "Op Type", "Match", "Status", "Reason"];
    [&NAME_COLUMNS[..], &METRIC_COLUMNS, &STAT_COLUMNS, &msprobe_verdicts, &msaccucmp, &ours].concat()
}

fn shape_text(shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", dims.join(", "))
}

fn write_csv(out: &mut impl Write, c: &Comparison<'_>) -> Result<()> {
    let (ti, bi) = (c.target.index(), c.bench.index());
    let mut w = csv::Writer::from_writer(out);
    w.write_record(csv_header())?;
    for row in &c.rows {
        w.write_record(csv_record(ti, bi, row))?;
    }
    w.flush()?;
    Ok(())
}

/// One row of `--format csv`: `row` of a comparison whose target index is `ti` and bench index `bi`.
fn csv_record(ti: &Index, bi: &Index, row: &CompareRow) -> Vec<String> {
    let t = &ti.tensors[row.target()];
    let b = row.bench().map(|b| &bi.tensors[b]);
    let op = &ti.ops[t.op()];
    let m = row.msprobe();
    let ts = stat_cells(row.target_stats(ti).as_ref());
    let bs = stat_cells(row.bench_stats(bi).as_ref());
    let acc = row.msaccucmp.as_deref();
    let num = |f: fn(&MsaccucmpMetrics) -> f64| acc.map(|a| py_float_repr(f(a))).unwrap_or_default();
    let mut record: Vec<String> = vec![
        ti.tensor_label(row.target()),
        row.bench().map(|b| bi.tensor_label(b)).unwrap_or_else(|| "N/A".into()),
        t.dtype.to_string(),
        b.map(|b| b.dtype.to_string()).unwrap_or_else(|| "N/A".into()),
        shape_text(&t.shape),
        b.map(|b| shape_text(&b.shape)).unwrap_or_else(|| "N/A".into()),
    ];
    record.extend(m.cells().iter().map(|c| c.to_string()));
    record.extend(ts);
    record.extend(bs);
    record.push(row.accuracy.to_string());
    record.push(row.result.to_string());
    record.push(messages_cell(row.messages()));
    record.push(num(|a| a.mean_absolute_error));
    record.push(num(|a| a.root_mean_square_error));
    record.push(num(|a| a.relative_euclidean_distance));
    record.push(num(|a| a.mean_relative_error));
    record.push(num(|a| a.accumulated_relative_error));
    record.push(num(|a| a.kullback_leibler_divergence));
    record.push(acc.map(|a| if a.overflow { "YES" } else { "NO" }.to_string()).unwrap_or_default());
    record.push(op.step.to_string());
    record.push(op.rank.to_string());
    record.push(op.op_type.to_string());
    record.push(row.how.map(|h| format!("{h:?}").to_lowercase()).unwrap_or_default());
    record.push(status_word(row).into());
    record.push(reason_text(row));
    record
}

/// The CSV's Reason: why it fails, why it could not be read, or what a verdict without metrics rests on.
fn reason_text(row: &CompareRow) -> String {
    let without_values = (row.measured != Measured::Values).then(|| row.measured.text().to_string());
    row.reason().or(row.error()).map(str::to_string).or(without_values).unwrap_or_default()
}

/// Op `o` of `index` as the JSON report names it.
fn op_json(index: &Index, o: usize) -> serde_json::Value {
    let op = &index.ops[o];
    json!({"name": op.name, "op_type": op.op_type, "step": op.step, "rank": op.rank,
           "original_ops": op.original_names(index)})
}

/// Failing op `f` of a comparison whose target index is `index`, as the JSON report lists it.
fn failing_json(index: &Index, f: &FailingOp) -> serde_json::Value {
    let mut v = op_json(index, f.op);
    v["inputs_pass"] = json!(f.inputs_pass);
    v["inputs_unverified"] = json!(f.inputs_unverified);
    v
}

/// Fused kernel `o` of a comparison whose target index is `index`, and whether it fails.
fn fused_json(index: &Index, (o, failed): (usize, bool)) -> serde_json::Value {
    let mut v = op_json(index, o);
    v["fails"] = json!(failed);
    v
}

/// An unmatched tensor `t` of `side`, with its step and rank.
fn unmatched_json(side: &str, index: &Index, t: usize) -> serde_json::Value {
    let op = &index.ops[index.tensors[t].op()];
    json!({"side": side, "tensor": index.tensor_label(t), "step": op.step, "rank": op.rank})
}

/// The report's object, its keys in the sorted order in which a `serde_json::Map` (a `BTreeMap`) wrote
/// them when the whole report was one `Value`; each value but `rows` is still the `Value` it was.
#[derive(serde::Serialize)]
struct Report<R> {
    api_calls: Vec<serde_json::Value>,
    bench: serde_json::Value,
    culprit: serde_json::Value,
    failing_ops: Vec<serde_json::Value>,
    first_diverging_api: serde_json::Value,
    fused_kernels: Vec<serde_json::Value>,
    input_problems: serde_json::Value,
    refused: serde_json::Value,
    rows: R,
    target: serde_json::Value,
    unmatched: Vec<serde_json::Value>,
    unmatched_bench: Vec<String>,
    unmatched_target: Vec<String>,
    warnings: serde_json::Value,
}

fn write_report_json(out: &mut impl Write, c: &Comparison<'_>) -> Result<()> {
    let (ti, bi) = (c.target.index(), c.bench.index());
    // The rows straight from the comparison (`json_rows`), each made as it is written; the rest, small, as
    // `Value`s.
    let rows = JsonRows { rows: &c.rows, ti, bi };
    let fused: Vec<serde_json::Value> = fused_kernels(c).into_iter().map(|k| fused_json(ti, k)).collect();
    // The unmatched tensors again, each with its side, step and rank.
    let unmatched: Vec<serde_json::Value> =
        [("target", &c.unmatched_target, ti), ("bench", &c.unmatched_bench, bi)]
            .into_iter()
            .flat_map(|(side, list, index)| list.iter().map(move |&t| unmatched_json(side, index, t)))
            .collect();
    let report = Report {
        api_calls: c
            .api_calls
            .iter()
            .map(|a| {
                json!({
                    "api": bi.ops[a.bench_op].name,
                    "step": bi.ops[a.bench_op].step,
                    "rank": bi.ops[a.bench_op].rank,
                    "kernels": a.kernels.iter().map(|&k| ti.ops[k].name.as_str()).collect::<Vec<_>>(),
                })
            })
            .collect(),
        bench: json!({"path": c.bench.root(), "kind": c.bench.kind()}),
        culprit: json!(c.culprit.map(|i| op_json(ti, c.failing_ops[i].op))),
        failing_ops: c.failing_ops.iter().map(|f| failing_json(ti, f)).collect(),
        first_diverging_api: json!(c.first_diverging_api().map(|d| json!({
            "api": bi.ops[d.bench_op].name,
            "step": bi.ops[d.bench_op].step,
            "rank": bi.ops[d.bench_op].rank,
            "kernels": d.kernels.iter().map(|&k| ti.ops[k].name.as_str()).collect::<Vec<_>>(),
            "also_computes": d.sharing.iter().map(|&b| bi.ops[b].name.as_str()).collect::<Vec<_>>(),
        }))),
        fused_kernels: fused,
        input_problems: json!(c.problems),
        refused: json!(c.refused),
        rows,
        target: json!({"path": c.target.root(), "kind": c.target.kind()}),
        unmatched,
        unmatched_bench: c.unmatched_bench.iter().map(|&t| bi.tensor_label(t)).collect(),
        unmatched_target: c.unmatched_target.iter().map(|&t| ti.tensor_label(t)).collect(),
        warnings: json!(c.warnings),
    };
    write_json(out, "compare", &report)
}

/// msprobe's `compare_result` columns (real-data mode), in its order.
fn msprobe_header() -> Vec<&'static str> {
    let grads = ["NPU Requires_grad", "Bench Requires_grad"];
    let tail = ["Requires_grad Consistent", "Result", "Err_message", "Data_name"];
    [&NAME_COLUMNS[..], &grads, &METRIC_COLUMNS, &STAT_COLUMNS, &tail].concat()
}

/// msprobe's own CSV, row for row ([`Comparison::msprobe_table`]): what msprobe's downstream tools read.
/// Each call's rows are written as their verdicts are decided: the table is never held (#18).
fn write_msprobe_csv(out: &mut impl Write, c: &Comparison<'_>) -> Result<()> {
    let mut w = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(out);
    w.write_record(msprobe_header())?;
    let na = || "N/A".to_string();
    let shape = |s: &Option<Vec<u64>>| s.as_deref().map_or_else(na, shape_text);
    c.msprobe_table(|entry| {
        let TableRow { row, target: t, bench: b, metrics } = entry;
        let (t_grad, b_grad) =
            (bool_text(t.requires_grad), b.map_or_else(na, |b| bool_text(b.requires_grad)));
        let data_name = |d: Option<&String>| d.cloned().unwrap_or_else(|| "-1".into());
        let mut record = vec![
            t.name.clone(),
            b.map_or_else(na, |b| b.name.clone()),
            t.dtype_text(),
            b.map_or_else(na, |b| b.dtype_text()),
            shape(&t.shape),
            b.map_or_else(na, |b| shape(&b.shape)),
            t_grad.clone(),
            b_grad.clone(),
        ];
        record.extend(metrics.iter().map(Cell::to_string));
        record.extend(t.stats.iter().cloned());
        record.extend(b.map_or_else(|| std::array::from_fn(|_| na()), |b| b.stats.clone()));
        record.push(if t_grad == b_grad { "True" } else { "False" }.into());
        record.push(row.level().to_string());
        record.push(messages_cell(row.messages()));
        record.push(format!(
            "['{}', '{}']",
            data_name(t.data_name.as_ref()),
            data_name(b.and_then(|b| b.data_name.as_ref()))
        ));
        w.write_record(&record)
    })?;
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CSV and JSON, whose rows have msaccucmp's columns, leave the families to the comparison; the table
    /// and msprobe's CSV, which have none of them, ask for msprobe's alone. A form that starts showing
    /// msaccucmp's figures must change `families_shown`, or its cells would be empty.
    #[test]
    fn each_form_asks_for_the_families_it_shows() {
        assert!(csv_header().contains(&"KullbackLeiblerDivergence"));
        assert_eq!(CompareFormat::Csv.families_shown(), None);
        assert_eq!(CompareFormat::Json.families_shown(), None);
        assert_eq!(CompareFormat::Table.families_shown(), Some(Families::Msprobe));
        assert_eq!(CompareFormat::MsprobeCsv.families_shown(), Some(Families::Msprobe));
    }
}
