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
//! A row holds positions into the two sides' arguments, not their text: the text of every argument held at
//! once grew with the tensor count (#18). [`ArgTexts`] gives a row's cells again when they are written.

use super::row::CompareRow;
use crate::filter::Filter;
use crate::index::{Index, RecordedArg, TensorId};
use crate::metrics::verdict::{call_of, verdicts, Level, Verdict, VerdictRow};
use crate::metrics::{Cell, MsprobeMetrics};
use accutrace_formats::msprobe::py_float_repr;
use accutrace_formats::stats::TensorStats;
use std::borrow::Cow;
use std::collections::HashMap;

/// One row of msprobe's table: positions and its verdict, 40 bytes (#18: with `Option`s and its verdict
/// inline, 72).
#[derive(Clone, Debug)]
pub struct MsprobeRow {
    /// The target's argument: its position in the target's arguments (see [`ArgTexts`]).
    target: usize,
    /// Its bench counterpart's position in the bench's arguments, [`NONE`] where none matched.
    bench: usize,
    /// The row of [`super::Comparison::rows`] this argument was compared in, [`NONE`] where none was.
    compared: usize,
    /// msprobe's `Result`.
    level: Level,
    /// msprobe's `Err_message`, boxed: most rows have none.
    #[allow(clippy::box_collection)] // a thin pointer, 8 bytes: a `Box<[String]>` is 16, a `Vec` 24
    messages: Option<Box<Vec<String>>>,
}

/// No position: a `Vec`'s positions stay below `isize::MAX`.
const NONE: usize = usize::MAX;

impl MsprobeRow {
    fn new(target: usize, bench: Option<usize>, compared: Option<usize>) -> MsprobeRow {
        let (bench, compared) = (bench.unwrap_or(NONE), compared.unwrap_or(NONE));
        MsprobeRow { target, bench, compared, level: Level::Pass, messages: None }
    }

    fn with_verdict(self, verdict: Verdict) -> MsprobeRow {
        let messages = (!verdict.messages.is_empty()).then(|| Box::new(verdict.messages));
        MsprobeRow { level: verdict.level, messages, ..self }
    }

    /// The target's argument: its position in the target's arguments.
    pub fn target(&self) -> usize {
        self.target
    }

    /// Its bench counterpart's position in the bench's arguments, when one matched.
    pub fn bench(&self) -> Option<usize> {
        (self.bench != NONE).then_some(self.bench)
    }

    /// The row of [`super::Comparison::rows`] this argument was compared in.
    pub fn compared(&self) -> Option<usize> {
        (self.compared != NONE).then_some(self.compared)
    }

    /// msprobe's `Result`.
    pub fn level(&self) -> Level {
        self.level
    }

    /// msprobe's `Err_message`: why the row is not a pass.
    pub fn messages(&self) -> &[String] {
        self.messages.as_deref().map_or(&[], Vec::as_slice)
    }
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

/// The text of the table's rows, given again from the sides' indexes and the compared rows when the table
/// is written (the rows hold positions only).
pub struct ArgTexts<'a> {
    target: Arguments<'a>,
    bench: Arguments<'a>,
    rows: &'a [CompareRow],
    /// The last compared row that measured each bench tensor's statistics (a bench tensor can pair more
    /// than one target tensor): the bench's statistics as the comparison measured them.
    bench_measured: HashMap<TensorId, usize>,
}

impl<'a> ArgTexts<'a> {
    /// The texts of the table of target `ti` against bench `bi`, compared in `rows`.
    pub fn new(ti: &'a Index, bi: &'a Index, rows: &'a [CompareRow]) -> Self {
        let bench = Arguments { index: bi };
        // Recorded arguments carry their own statistics text.
        let bench_measured = match bench.recorded() {
            Some(_) => HashMap::new(),
            None => rows
                .iter()
                .enumerate()
                .filter(|(_, r)| r.bench_measured_stats.is_some())
                .filter_map(|(i, r)| Some((r.bench?, i)))
                .collect(),
        };
        ArgTexts { target: Arguments { index: ti }, bench, rows, bench_measured }
    }

    /// The target's argument of `row`.
    pub fn target(&self, row: &MsprobeRow) -> Cow<'a, RecordedArg> {
        self.target_with(row, StatTexts::All)
    }

    /// Its bench counterpart, when one matched.
    pub fn bench(&self, row: &MsprobeRow) -> Option<Cow<'a, RecordedArg>> {
        self.bench_with(row, StatTexts::All)
    }

    fn target_with(&self, row: &MsprobeRow, wanted: StatTexts) -> Cow<'a, RecordedArg> {
        let measured =
            |_| row.compared().and_then(|i| self.rows[i].target_measured_stats.as_deref().copied());
        self.target.arg(row.target(), measured, wanted)
    }

    fn bench_with(&self, row: &MsprobeRow, wanted: StatTexts) -> Option<Cow<'a, RecordedArg>> {
        let measured = |b: TensorId| {
            let i = *self.bench_measured.get(&b)?;
            self.rows[i].bench_measured_stats.as_deref().copied()
        };
        row.bench().map(|pos| self.bench.arg(pos, measured, wanted))
    }

    /// Cosine, EucDist, MaxAbsErr, MaxRelativeErr and the two ratios: measured for a compared tensor pair,
    /// "unsupported" for a matched pair that is not one, "N/A" without a counterpart.
    pub fn metrics(&self, row: &MsprobeRow) -> [Cell; 6] {
        match (row.compared(), row.bench()) {
            (Some(i), _) => self.rows[i].msprobe().cells(),
            (None, Some(_)) => MsprobeMetrics::unsupported().cells(),
            (None, None) => [Cell::NotApplicable; 6],
        }
    }
}

/// msprobe's verdicts for the compared rows, by row ([`build`] gives them): the rows take them once the
/// table no longer borrows them.
pub(super) struct RowVerdicts {
    /// Each row's level (`Pass` for a row no argument of the table compared, as a row starts).
    levels: Vec<Level>,
    /// The messages of the rows that have any.
    messages: HashMap<usize, Vec<String>>,
}

impl RowVerdicts {
    /// Each row's `Result` and its messages.
    pub(super) fn apply(self, rows: &mut [CompareRow]) {
        for (row, level) in rows.iter_mut().zip(self.levels) {
            row.result = level;
        }
        for (i, messages) in self.messages {
            rows[i].set_messages(messages);
        }
    }

    /// Row `i` takes `verdict` (a later argument compared in the same row replaces an earlier one's).
    fn set(&mut self, i: usize, verdict: Verdict) {
        self.levels[i] = verdict.level;
        match verdict.messages.is_empty() {
            true => self.messages.remove(&i),
            false => self.messages.insert(i, verdict.messages),
        };
    }
}

/// msprobe's verdicts for `rows` (the compared pairs) of target `ti` against bench `bi`, limited to `filter`,
/// and its table where `keep` asks for it (empty otherwise). Each call's rows are held only while its
/// verdicts are decided: the whole table, a row per target argument, was the largest of compare's own
/// tables where nothing writes it (#18: 72 bytes a target tensor).
pub(super) fn build(
    ti: &Index,
    bi: &Index,
    rows: &[CompareRow],
    filter: &Filter,
    keep: bool,
) -> (Vec<MsprobeRow>, RowVerdicts) {
    let texts = ArgTexts::new(ti, bi, rows);
    let (target, bench) = (texts.target, texts.bench);
    // Each target tensor's row (`usize::MAX`: none compared it).
    let mut compared = vec![usize::MAX; ti.tensors.len()];
    for (i, r) in rows.iter().enumerate() {
        compared[r.target] = i;
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

    let mut table: Vec<MsprobeRow> = Vec::new();
    let mut found = RowVerdicts { levels: vec![Level::Pass; rows.len()], messages: HashMap::new() };
    // One call's rows at a time, as `verdicts` groups them: the checks' text of every row held at once was
    // a second table the size of the comparison (#18: memory must not grow by copies per tensor).
    let mut call: Vec<MsprobeRow> = Vec::new();
    let mut checks: Vec<VerdictRow> = Vec::new();
    let mut decide = |call: &mut Vec<MsprobeRow>, checks: &mut Vec<VerdictRow>| {
        for (entry, mut verdict) in call.drain(..).zip(verdicts(checks)) {
            let row = entry.compared();
            // msprobe's Result never says pass about values nobody compared.
            if row.is_some_and(|i| rows[i].unmeasured()) {
                verdict.set(Level::Warning, "Not measured: a side holds no tensor data (statistics only).");
            }
            if keep {
                table.push(entry.with_verdict(verdict.clone()));
            }
            if let Some(i) = row {
                found.set(i, verdict);
            }
        }
        checks.clear();
    };
    for pos in (0..target.len()).filter(|&pos| target.kept(pos, filter)) {
        let tensor = target.tensor(pos);
        let row = tensor.map(|t| compared[t]).filter(|&i| i != usize::MAX);
        let bench_pos = match row {
            Some(i) => rows[i].bench.and_then(bench_position),
            // A tensor the comparison did not pair, or an argument that is no tensor: matched by name, as
            // msprobe matches, without metrics.
            None if tensor.is_none() => bench_by_name.get(&target.name(pos)).copied(),
            None => None,
        };
        let entry = MsprobeRow::new(pos, bench_pos, row);
        let check = verdict_row(&texts, &entry);
        if checks.first().is_some_and(|first| call_of(&first.name) != call_of(&check.name)) {
            decide(&mut call, &mut checks);
        }
        checks.push(check);
        call.push(entry);
    }
    decide(&mut call, &mut checks);
    (table, found)
}

/// What msprobe's per-call checks read of a row.
fn verdict_row<'a>(texts: &ArgTexts<'a>, row: &MsprobeRow) -> VerdictRow<'a> {
    let t = SideCells::of(texts.target_with(row, StatTexts::Extremes));
    let b = texts.bench_with(row, StatTexts::Extremes).map(SideCells::of);
    let matched = b.is_some();
    let na = || Cow::Borrowed("N/A");
    let b = b.unwrap_or_else(|| SideCells {
        name: na(),
        dtype: na(),
        shape: None,
        requires_grad: "N/A",
        max: na(),
        min: na(),
    });
    let metrics = texts.metrics(row);
    VerdictRow {
        name: t.name,
        matched,
        npu_dtype: t.dtype,
        bench_dtype: b.dtype,
        npu_shape: t.shape,
        bench_shape: b.shape,
        npu_requires_grad: t.requires_grad,
        bench_requires_grad: b.requires_grad,
        npu_max: t.max,
        npu_min: t.min,
        bench_max: b.max,
        bench_min: b.min,
        cosine: metrics[0],
        one_thousandth: metrics[4],
    }
}

/// One side's cells that msprobe's checks read: borrowed from an argument the dump recorded, moved out
/// of one described for the row.
struct SideCells<'a> {
    name: Cow<'a, str>,
    dtype: Cow<'a, str>,
    shape: Option<Cow<'a, [u64]>>,
    requires_grad: &'static str,
    max: Cow<'a, str>,
    min: Cow<'a, str>,
}

impl<'a> SideCells<'a> {
    fn of(arg: Cow<'a, RecordedArg>) -> SideCells<'a> {
        match arg {
            Cow::Borrowed(a) => SideCells {
                name: Cow::Borrowed(&a.name),
                dtype: Cow::Borrowed(a.dtype.as_deref().unwrap_or("N/A")),
                shape: a.shape.as_deref().map(Cow::Borrowed),
                requires_grad: bool_word(a.requires_grad),
                max: Cow::Borrowed(&a.stats[0]),
                min: Cow::Borrowed(&a.stats[1]),
            },
            Cow::Owned(a) => {
                let [max, min, ..] = a.stats;
                SideCells {
                    name: Cow::Owned(a.name),
                    dtype: a.dtype.map_or(Cow::Borrowed("N/A"), Cow::Owned),
                    shape: a.shape.map(Cow::Owned),
                    requires_grad: bool_word(a.requires_grad),
                    max: Cow::Owned(max),
                    min: Cow::Owned(min),
                }
            }
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
