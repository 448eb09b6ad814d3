//! msprobe's own comparison table (its `compare_result` CSV), row for row: every argument the target
//! recorded, tensor or not, in dump order, with its bench counterpart, msprobe's metrics and its `Result`
//! verdict. The verdict is msprobe's per-call rule (`metrics::verdict`), so it is decided here, over all
//! these rows, and handed to the compared tensors' rows too.
//!
//! An msprobe dump lists its arguments itself ([`Index::recorded_args`]: dtype names such as
//! `torch.float32`, statistics as `dump.json` spells them, data file names). Other sources list their
//! tensors, described the way msprobe would: torch dtype names, integer statistics as integers with no
//! mean or norm (what msprobe records for integer tensors), no data file (`-1`).
//!
//! The table is never held: it is made again, a call at a time, where it is needed: once when compare
//! hands its verdicts to the rows (`verdicts`), once more when msprobe's CSV writes it
//! ([`super::Comparison::msprobe_table`]). A row holds positions into the two sides' arguments, not their
//! text; `ArgTexts` gives a row's cells (#18: the text of every argument, then a row of positions per
//! target argument held to the end, grew with the tensor count).

use super::row::{CompareRow, SharedMessages};
use crate::filter::Filter;
use crate::index::{Index, RecordedArg, TensorId};
use crate::metrics::verdict::{call_of, verdicts as decide_call, Level, Verdict, VerdictRow};
use crate::metrics::{Cell, MsprobeMetrics};
use accutrace_formats::msprobe::py_float_repr;
use accutrace_formats::stats::TensorStats;
use std::borrow::Cow;
use std::collections::HashMap;

/// One row of msprobe's table: positions and its verdict.
#[derive(Clone, Debug)]
pub struct MsprobeRow {
    /// The target's argument: its position in the target's arguments (see [`ArgTexts`]).
    target: usize,
    /// Its bench counterpart's position in the bench's arguments, where one matched.
    bench: Option<usize>,
    /// The row of [`super::Comparison::rows`] this argument was compared in, where one was.
    compared: Option<usize>,
    /// msprobe's `Result` and `Err_message`.
    verdict: Verdict,
}

impl MsprobeRow {
    fn new(target: usize, bench: Option<usize>, compared: Option<usize>) -> MsprobeRow {
        MsprobeRow { target, bench, compared, verdict: Verdict { level: Level::Pass, messages: Vec::new() } }
    }

    /// The target's argument: its position in the target's arguments.
    pub fn target(&self) -> usize {
        self.target
    }

    /// Its bench counterpart's position in the bench's arguments, when one matched.
    pub fn bench(&self) -> Option<usize> {
        self.bench
    }

    /// The row of [`super::Comparison::rows`] this argument was compared in.
    pub fn compared(&self) -> Option<usize> {
        self.compared
    }

    /// msprobe's `Result`.
    pub fn level(&self) -> Level {
        self.verdict.level
    }

    /// msprobe's `Err_message`: why the row is not a pass.
    pub fn messages(&self) -> &[String] {
        &self.verdict.messages
    }
}

/// One row of msprobe's table as it is handed out: its positions and verdict, both sides' arguments and
/// msprobe's six metrics (Cosine, EucDist, MaxAbsErr, MaxRelativeErr and the two ratios).
pub struct TableRow<'r> {
    pub row: MsprobeRow,
    pub target: &'r RecordedArg,
    pub bench: Option<&'r RecordedArg>,
    pub metrics: [Cell; 6],
}

/// Which statistics' text an argument is given: all four for the table, the extremes alone for msprobe's
/// checks (each number's text is Python's `repr`: 15% of compare's CPU on 201,809 tiny tensor pairs when
/// the checks had the mean and norm made too).
#[derive(Clone, Copy, PartialEq, Eq)]
enum StatTexts {
    All,
    Extremes,
}

/// One side's arguments in msprobe's order: the ones it recorded (msprobe), else one per tensor (an
/// argument's position is then its tensor id).
#[derive(Clone, Copy)]
struct Arguments<'a> {
    index: &'a Index,
}

impl<'a> Arguments<'a> {
    fn recorded(&self) -> Option<&'a [RecordedArg]> {
        Some(&self.index.recorded_args).filter(|args| !args.is_empty()).map(Vec::as_slice)
    }

    fn len(&self) -> usize {
        self.recorded().map_or(self.index.tensors.len(), <[_]>::len)
    }

    fn tensor(&self, pos: usize) -> Option<TensorId> {
        self.recorded().map_or(Some(pos), |args| args[pos].tensor)
    }

    fn name(&self, pos: usize) -> Cow<'a, str> {
        match self.recorded() {
            Some(args) => Cow::Borrowed(args[pos].name.as_str()),
            None => Cow::Owned(self.index.tensor_label(pos)),
        }
    }

    /// Whether `filter` keeps the argument's op, step and rank.
    fn kept(&self, pos: usize, filter: &Filter) -> bool {
        match self.recorded() {
            Some(args) => filter.keeps_at(&args[pos].op_name, args[pos].step, args[pos].rank),
            None => {
                let op = &self.index.ops[self.index.tensors[pos].op()];
                filter.keeps_at(&op.name, op.step, op.rank)
            }
        }
    }

    /// The argument at `pos`, a tensor's described with the statistics `stats` gives (`wanted`: the mean's
    /// and norm's text left empty for [`StatTexts::Extremes`]).
    fn arg(
        &self,
        pos: usize,
        stats: impl FnOnce(TensorId) -> Option<TensorStats>,
        wanted: StatTexts,
    ) -> Cow<'a, RecordedArg> {
        if let Some(args) = self.recorded() {
            return Cow::Borrowed(&args[pos]);
        }
        let (index, t) = (self.index, pos);
        let info = &index.tensors[t];
        let op = &index.ops[info.op()];
        Cow::Owned(RecordedArg {
            name: index.tensor_label(t),
            op_name: op.name.to_string(),
            step: op.step,
            rank: op.rank,
            tensor: Some(t),
            dtype: Some(info.dtype.torch_name().map_or_else(|| info.dtype.to_string(), str::to_string)),
            shape: Some(info.shape.to_vec()),
            requires_grad: info.requires_grad(),
            stats: stat_texts(stats(t).or_else(|| index.stats(t)).as_ref(), info.dtype, wanted),
            data_name: None,
        })
    }
}

/// The text of the table's rows, given again from the sides' indexes and the compared rows (the rows hold
/// positions only).
struct ArgTexts<'a> {
    target: Arguments<'a>,
    bench: Arguments<'a>,
    rows: &'a [CompareRow],
    /// The last compared row that measured each bench tensor's statistics (a bench tensor can pair more
    /// than one target tensor): the bench's statistics as the comparison measured them.
    bench_measured: HashMap<TensorId, usize>,
}

impl<'a> ArgTexts<'a> {
    /// The texts of the table of target `ti` against bench `bi`, compared in `rows`.
    fn new(ti: &'a Index, bi: &'a Index, rows: &'a [CompareRow]) -> Self {
        let bench = Arguments { index: bi };
        // Recorded arguments carry their own statistics text.
        let bench_measured = match bench.recorded() {
            Some(_) => HashMap::new(),
            None => rows
                .iter()
                .enumerate()
                .filter(|(_, r)| r.bench_measured_stats.is_some())
                .filter_map(|(i, r)| Some((r.bench()?, i)))
                .collect(),
        };
        ArgTexts { target: Arguments { index: ti }, bench, rows, bench_measured }
    }

    /// The target's argument of `row`.
    fn target(&self, row: &MsprobeRow, wanted: StatTexts) -> Cow<'a, RecordedArg> {
        let measured =
            |_| row.compared().and_then(|i| self.rows[i].target_measured_stats.as_deref().copied());
        self.target.arg(row.target(), measured, wanted)
    }

    /// Its bench counterpart, when one matched.
    fn bench(&self, row: &MsprobeRow, wanted: StatTexts) -> Option<Cow<'a, RecordedArg>> {
        let measured = |b: TensorId| {
            let i = *self.bench_measured.get(&b)?;
            self.rows[i].bench_measured_stats.as_deref().copied()
        };
        row.bench().map(|pos| self.bench.arg(pos, measured, wanted))
    }

    /// Cosine, EucDist, MaxAbsErr, MaxRelativeErr and the two ratios: measured for a compared tensor pair,
    /// "unsupported" for a matched pair that is not one, "N/A" without a counterpart.
    fn metrics(&self, row: &MsprobeRow) -> [Cell; 6] {
        match (row.compared(), row.bench()) {
            (Some(i), _) => self.rows[i].msprobe().cells(),
            (None, Some(_)) => MsprobeMetrics::unsupported().cells(),
            (None, None) => [Cell::NotApplicable; 6],
        }
    }
}

/// msprobe's verdicts for the compared rows, by row ([`verdicts`] gives them): the rows take them once the
/// table no longer borrows them.
pub(super) struct RowVerdicts {
    /// Each row's verdict, numbered in `known` (0, a pass without messages, for a row no argument of the
    /// table compared, as a row starts).
    of_row: Vec<u32>,
    /// Each verdict found (its level as a number, its messages), numbered, with its level: msprobe's
    /// messages are a few fixed sentences, so the rows share a few verdicts, each held once (#18: a row's
    /// messages held for each row were 49 MiB of 198,840 pairs of two statistics captures).
    known: HashMap<(u8, Vec<String>), (u32, Level)>,
}

impl RowVerdicts {
    fn new(rows: usize) -> RowVerdicts {
        let known = HashMap::from([((Level::Pass as u8, Vec::new()), (0, Level::Pass))]);
        RowVerdicts { of_row: vec![0; rows], known }
    }

    /// Each row's `Result` and its messages, one copy of each verdict's messages for all the rows.
    pub(super) fn apply(self, rows: &mut [CompareRow]) {
        let mut verdicts = vec![(Level::Pass, SharedMessages::new(Vec::new())); self.known.len()];
        for ((_, messages), (n, level)) in self.known {
            verdicts[n as usize] = (level, SharedMessages::new(messages));
        }
        for (row, n) in rows.iter_mut().zip(self.of_row) {
            let (level, messages) = &verdicts[n as usize];
            row.result = *level;
            row.share_messages(messages);
        }
    }

    /// Row `i` takes `verdict` (a later argument compared in the same row replaces an earlier one's).
    fn set(&mut self, i: usize, verdict: Verdict) {
        let next = self.known.len() as u32;
        let key = (verdict.level as u8, verdict.messages);
        self.of_row[i] = self.known.entry(key).or_insert((next, verdict.level)).0;
    }
}

/// msprobe's verdicts for `rows` (the compared pairs) of target `ti` against bench `bi`, limited to
/// `filter`: msprobe decides them per API call over every argument it lists, not only the compared tensors.
pub(super) fn verdicts(ti: &Index, bi: &Index, rows: &[CompareRow], filter: &Filter) -> RowVerdicts {
    let mut found = RowVerdicts::new(rows.len());
    // The checks read the extremes alone: the mean's and norm's text is not made.
    let each = |entry: TableRow<'_>| {
        if let Some(i) = entry.row.compared() {
            found.set(i, entry.row.verdict);
        }
        Ok::<(), std::convert::Infallible>(())
    };
    let Ok(()) = for_each_row(&ArgTexts::new(ti, bi, rows), filter, StatTexts::Extremes, each);
    found
}

/// msprobe's table of target `ti` against bench `bi`, compared in `rows` and limited to `filter`: every
/// argument the target recorded, in its order, handed to `each` with its verdict; an error of `each` ends
/// it.
pub(super) fn table<E>(
    ti: &Index,
    bi: &Index,
    rows: &[CompareRow],
    filter: &Filter,
    each: impl FnMut(TableRow<'_>) -> Result<(), E>,
) -> Result<(), E> {
    for_each_row(&ArgTexts::new(ti, bi, rows), filter, StatTexts::All, each)
}

/// A row of the table while its call's verdicts are decided.
struct Pending<'a> {
    row: MsprobeRow,
    target: Cow<'a, RecordedArg>,
    bench: Option<Cow<'a, RecordedArg>>,
    metrics: [Cell; 6],
}

/// Every target argument `filter` keeps, in order, handed to `each` with its verdict once its call's are
/// decided: one call's rows are held at a time (#18: every row's checks held at once were a second table
/// the size of the comparison, and the whole table held for msprobe's CSV 40 bytes a target argument).
fn for_each_row<'a, E>(
    texts: &ArgTexts<'a>,
    filter: &Filter,
    wanted: StatTexts,
    mut each: impl FnMut(TableRow<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let (target, bench, rows) = (texts.target, texts.bench, texts.rows);
    // Each target tensor's row (`u32::MAX`: none compared it), in 32 bits as a matched pair's ids are: it
    // is held while the table is made, 4 bytes a target tensor.
    let mut compared = vec![u32::MAX; target.index.tensors.len()];
    for (i, r) in rows.iter().enumerate() {
        compared[r.target()] = i as u32;
    }
    let bench_by_tensor: Option<HashMap<TensorId, usize>> = bench
        .recorded()
        .map(|args| args.iter().enumerate().filter_map(|(i, a)| Some((a.tensor?, i))).collect());
    let bench_position = |b: TensorId| match &bench_by_tensor {
        Some(by_tensor) => by_tensor.get(&b).copied(),
        None => Some(b),
    };
    // Only arguments that are no tensor (msprobe's) are matched by name.
    let by_name_needed = (0..target.len()).any(|pos| target.tensor(pos).is_none());
    let bench_by_name: HashMap<Cow<str>, usize> = match by_name_needed {
        true => (0..bench.len()).map(|j| (bench.name(j), j)).collect(),
        false => HashMap::new(),
    };

    let mut call: Vec<Pending<'a>> = Vec::new();
    for pos in (0..target.len()).filter(|&pos| target.kept(pos, filter)) {
        let tensor = target.tensor(pos);
        let row = tensor.map(|t| compared[t]).filter(|&i| i != u32::MAX).map(|i| i as usize);
        let bench_pos = match row {
            Some(i) => rows[i].bench().and_then(bench_position),
            // A tensor the comparison did not pair, or an argument that is no tensor: matched by name, as
            // msprobe matches, without metrics.
            None if tensor.is_none() => bench_by_name.get(&target.name(pos)).copied(),
            None => None,
        };
        let row = MsprobeRow::new(pos, bench_pos, row);
        let arg = texts.target(&row, wanted);
        if call.first().is_some_and(|first| call_of(&first.target.name) != call_of(&arg.name)) {
            decide(&mut call, rows, &mut each)?;
        }
        let (bench, metrics) = (texts.bench(&row, wanted), texts.metrics(&row));
        call.push(Pending { row, target: arg, bench, metrics });
    }
    decide(&mut call, rows, &mut each)
}

/// The verdicts of one call's rows, each then handed to `each`; `call` is left empty.
fn decide<E>(
    call: &mut Vec<Pending<'_>>,
    rows: &[CompareRow],
    each: &mut impl FnMut(TableRow<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let checks: Vec<VerdictRow> = call.iter().map(verdict_row).collect();
    let found = decide_call(&checks);
    drop(checks);
    for (entry, mut verdict) in call.drain(..).zip(found) {
        // msprobe's Result never says pass about values nobody compared.
        if entry.row.compared().is_some_and(|i| rows[i].unmeasured()) {
            verdict.set(Level::Warning, "Not measured: a side holds no tensor data (statistics only).");
        }
        let row = MsprobeRow { verdict, ..entry.row };
        each(TableRow { row, target: &entry.target, bench: entry.bench.as_deref(), metrics: entry.metrics })?;
    }
    Ok(())
}

/// What msprobe's per-call checks read of a row.
fn verdict_row<'r>(entry: &'r Pending<'_>) -> VerdictRow<'r> {
    let t = SideCells::of(&entry.target);
    let b = entry.bench.as_deref().map(SideCells::of);
    let matched = b.is_some();
    let b = b.unwrap_or(SideCells {
        name: "N/A",
        dtype: "N/A",
        shape: None,
        requires_grad: "N/A",
        max: "N/A",
        min: "N/A",
    });
    VerdictRow {
        name: Cow::Borrowed(t.name),
        matched,
        npu_dtype: Cow::Borrowed(t.dtype),
        bench_dtype: Cow::Borrowed(b.dtype),
        npu_shape: t.shape.map(Cow::Borrowed),
        bench_shape: b.shape.map(Cow::Borrowed),
        npu_requires_grad: t.requires_grad,
        bench_requires_grad: b.requires_grad,
        npu_max: Cow::Borrowed(t.max),
        npu_min: Cow::Borrowed(t.min),
        bench_max: Cow::Borrowed(b.max),
        bench_min: Cow::Borrowed(b.min),
        cosine: entry.metrics[0],
        one_thousandth: entry.metrics[4],
    }
}

/// One side's cells that msprobe's checks read, borrowed from its argument.
struct SideCells<'r> {
    name: &'r str,
    dtype: &'r str,
    shape: Option<&'r [u64]>,
    requires_grad: &'static str,
    max: &'r str,
    min: &'r str,
}

impl<'r> SideCells<'r> {
    fn of(a: &'r RecordedArg) -> SideCells<'r> {
        SideCells {
            name: &a.name,
            dtype: a.dtype.as_deref().unwrap_or("N/A"),
            shape: a.shape.as_deref(),
            requires_grad: bool_word(a.requires_grad),
            max: &a.stats[0],
            min: &a.stats[1],
        }
    }
}

/// `True`, `False` or `N/A`, as msprobe prints requires_grad.
pub fn bool_text(value: Option<bool>) -> String {
    bool_word(value).to_string()
}

fn bool_word(value: Option<bool>) -> &'static str {
    match value {
        Some(true) => "True",
        Some(false) => "False",
        None => "N/A",
    }
}

/// Max, min, mean and L2 norm as msprobe records them: Python floats; for integer and bool tensors the
/// extremes as integers (`988`, `True`) and no mean or norm (`None`). With [`StatTexts::Extremes`] a float
/// tensor's mean and norm are left empty.
fn stat_texts(
    stats: Option<&TensorStats>,
    dtype: accutrace_formats::DType,
    wanted: StatTexts,
) -> [String; 4] {
    let none = || "None".to_string();
    let Some(s) = stats else { return std::array::from_fn(|_| none()) };
    if dtype == accutrace_formats::DType::BOOL {
        let b = |v: f64| if v != 0.0 { "True" } else { "False" }.to_string();
        return [b(s.max), b(s.min), none(), none()];
    }
    if !dtype.is_float() && dtype.kind() != accutrace_formats::dtype::Kind::Complex {
        let int = |v: f64| if v.is_finite() { format!("{v:.0}") } else { py_float_repr(v) };
        return [int(s.max), int(s.min), none(), none()];
    }
    let spread = |v: f64| if wanted == StatTexts::All { py_float_repr(v) } else { String::new() };
    [py_float_repr(s.max), py_float_repr(s.min), spread(s.mean), spread(s.l2_norm)]
}
