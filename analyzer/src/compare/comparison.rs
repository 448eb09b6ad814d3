//! What the compare engine takes ([`CompareOptions`]) and gives ([`Comparison`], with its [`FailingOp`]s),
//! and what a comparison says of itself: what the reports call a failing op, the pairs nothing was measured
//! for and the input problem they make, the outcome.

use super::msprobe_table::{self, TableRow};
use super::row::CompareRow;
use crate::api_matching::ApiCall;
use crate::filter::Filter;
use crate::index::{Index, TensorId};
use crate::matching::MatchOptions;
use crate::metrics::Families;
use crate::outcome::Outcome;
use crate::problems::{InputProblem, InputProblems};
use crate::sources::Source;

/// An op that fails, with the reason its inputs are or are not clean.
#[derive(Clone, Debug)]
pub struct FailingOp {
    pub op: usize,
    /// Rows of the op's outputs that fail.
    pub failing_rows: Vec<usize>,
    /// Whether the comparison shows its inputs pass: none fails, none comes from an op the benchmark has no
    /// counterpart of, and at least one was judged (the op is a culprit, not a propagator).
    pub inputs_pass: bool,
    /// When no input fails but the comparison cannot vouch for the inputs either: why, in words. The op may
    /// still be the culprit (inputs from no dumped op, after ops of its step that pass).
    pub inputs_unverified: Option<String>,
}

impl FailingOp {
    /// Why this op, the first that fails, cannot be named the culprit (the reports' NO CLEAN CULPRIT).
    pub fn why_not_culprit(&self) -> String {
        match &self.inputs_unverified {
            Some(reason) => format!("cannot be blamed: {reason}"),
            None => {
                "already has failing inputs: the difference began before it, in data fed to the model, in \
                     an op that was not dumped, or in one the benchmark has no counterpart of (the unmatched \
                     tensors name those)"
                    .to_string()
            }
        }
    }
    /// What the reports say under a culprit of this op, the first failing op, when a later one is the
    /// culprit: it could not be cleared, and the difference may have begun there (in a later step, the
    /// culprit may read weights its update changed).
    pub fn before_culprit_note(&self, index: &Index) -> String {
        let op = &index.ops[self.op];
        format!(
            "an earlier failing op, {} [{}] (step {} rank {}), {}; the difference may have begun there (the \
             culprit is the first failing op that could be cleared)",
            op.name,
            op.op_type,
            op.step,
            op.rank,
            self.why_not_culprit()
        )
    }
}

/// What to compare and how to judge it: built from the command line, or by any other caller.
#[derive(Clone, Debug, Default)]
pub struct CompareOptions {
    /// Which ops (steps, ranks, names) take part.
    pub filter: Filter,
    /// How target tensors find their bench counterparts.
    pub matching: MatchOptions,
    /// Metric families; `None`: msprobe's alone when a side is an msprobe dump, both otherwise.
    pub families: Option<Families>,
    /// Fail a tensor whose cosine similarity is below this (besides the vendor rules).
    pub cosine_min: Option<f64>,
    /// Fail a tensor whose max absolute error exceeds this (besides the vendor rules).
    pub max_abs_err: Option<f64>,
    /// Show a progress bar on stderr (when stderr is a terminal).
    pub progress: bool,
}

/// Everything the reports need.
pub struct Comparison<'a> {
    pub target: &'a dyn Source,
    pub bench: &'a dyn Source,
    pub rows: Vec<CompareRow>,
    pub failing_ops: Vec<FailingOp>,
    /// Index into `failing_ops` of the first op that fails while its inputs pass.
    pub culprit: Option<usize>,
    pub unmatched_target: Vec<TensorId>,
    /// How many of `unmatched_target` lie in steps and ranks the benchmark holds, no fusion explaining
    /// them ([`crate::comparable::without_counterpart`]): never compared, so no PASS while there are any.
    pub without_counterpart: usize,
    pub unmatched_bench: Vec<TensorId>,
    /// Which ops took part ([`CompareOptions::filter`]): msprobe's table lists their arguments.
    pub filter: Filter,
    /// Why the runs cannot be compared (not one model): nothing was measured; `problems` holds it as a
    /// [`ProblemKind::Refused`](crate::problems::ProblemKind::Refused) entry (as it does when no tensor
    /// matched), so the report leads with it and the exit status is 2.
    pub refused: Option<String>,
    /// What the user should know before reading the answer (target and benchmark look swapped, steps a
    /// source inferred, files it skipped).
    pub warnings: Vec<String>,
    /// What the sources miss and which tensors could not be read: they lead the report.
    pub problems: InputProblems,
    /// Kernels against API calls (a kernel-level target against an API-level benchmark): every call of the
    /// benchmark with the target kernels that implement it; empty otherwise.
    pub api_calls: Vec<ApiCall>,
}

impl Comparison<'_> {
    /// msprobe's own table (`--format msprobe-csv`): every argument the target recorded, in its order, with
    /// its bench counterpart, msprobe's metrics and its `Result`, handed to `each` a call at a time (none
    /// where the runs were refused); an error of `each` ends it. Made again here, never held (#18: held
    /// to the end, 40 bytes a target argument).
    pub fn msprobe_table<E>(&self, each: impl FnMut(TableRow<'_>) -> Result<(), E>) -> Result<(), E> {
        if self.refused.is_some() {
            return Ok(());
        }
        msprobe_table::table(self.target.index(), self.bench.index(), &self.rows, &self.filter, each)
    }

    /// The first failing op, where the culprit is a later one (every failing op before the culprit is one
    /// the comparison could not clear).
    pub fn failing_before_culprit(&self) -> Option<&FailingOp> {
        self.culprit.filter(|&i| i > 0).map(|_| &self.failing_ops[0])
    }

    /// What the reports call failing op `i` (an index into `failing_ops`): the culprit, an op that fails
    /// while its inputs pass or are unverified, or one that only propagates a failure.
    pub fn failing_tag(&self, i: usize) -> &'static str {
        let f = &self.failing_ops[i];
        if Some(i) == self.culprit {
            "culprit"
        } else if f.inputs_pass {
            "fails, inputs pass"
        } else if f.inputs_unverified.is_some() {
            "fails, inputs unverified"
        } else {
            "propagates"
        }
    }

    /// Matched pairs of which nothing was measured: a side holds no tensor data and the content hashes do
    /// not show them identical ([`Measured::Nothing`]). Never passes; the comparison's input problems say
    /// how many and what to do.
    ///
    /// [`Measured::Nothing`]: super::row::Measured::Nothing
    pub fn unmeasured_pairs(&self) -> usize {
        self.rows.iter().filter(|r| r.unmeasured()).count()
    }

    /// The input problem [`Comparison::unmeasured_pairs`] make (also in `problems`), with what to do.
    pub fn unmeasured_problem(&self) -> Option<InputProblem> {
        unmeasured_problem(&self.rows, self.target.index(), self.bench.index())
    }

    /// Findings when some op fails, or when target tensors of steps and ranks both sides hold have no
    /// counterpart (as `diff` finds tensors in one run only): no pass over part of the target.
    pub fn outcome(&self) -> Outcome {
        if self.failing_ops.is_empty() && self.without_counterpart == 0 {
            Outcome::Pass
        } else {
            Outcome::Findings
        }
    }
}

/// The input problem of pairs nothing was measured for (a side holds no tensor data), with what to do.
pub(super) fn unmeasured_problem(rows: &[CompareRow], ti: &Index, bi: &Index) -> Option<InputProblem> {
    Unmeasured::of(rows, ti, bi).problem(rows.len())
}

/// The pairs nothing was measured for, counted (#18: every pair of two statistics captures may be one),
/// so that the windows of two runs add theirs up.
#[derive(Clone, Debug, Default)]
pub(crate) struct Unmeasured {
    pub count: usize,
    /// Of them, those without tensor data in the target, and in the benchmark.
    pub sides: [usize; 2],
    /// The first one's rank and its labels (`target vs bench`).
    pub first: Option<(u32, String)>,
}

impl Unmeasured {
    pub fn of(rows: &[CompareRow], ti: &Index, bi: &Index) -> Unmeasured {
        let unmeasured = || rows.iter().filter(|r| r.unmeasured());
        let Some(first) = unmeasured().next() else { return Unmeasured::default() };
        let target_side = unmeasured().filter(|r| !ti.tensors[r.target()].has_data).count();
        let bench_side = unmeasured().filter(|r| r.bench().is_some_and(|b| !bi.tensors[b].has_data)).count();
        let bench_label = first.bench().map(|b| format!(" vs {}", bi.tensor_label(b))).unwrap_or_default();
        let rank = ti.ops[ti.tensors[first.target()].op()].rank;
        Unmeasured {
            count: unmeasured().count(),
            sides: [target_side, bench_side],
            first: Some((rank, format!("{}{bench_label}", ti.tensor_label(first.target())))),
        }
    }

    /// The input problem they make among `rows` compared pairs, with what to do.
    pub fn problem(&self, rows: usize) -> Option<InputProblem> {
        let (_, first) = self.first.as_ref()?;
        let without =
            |side: &str, count: usize| (count > 0).then(|| format!("in the {side} for {count} of them"));
        let [target_side, bench_side] = self.sides;
        let sides: Vec<String> = [without("target", target_side), without("benchmark", bench_side)]
            .into_iter()
            .flatten()
            .collect();
        Some(InputProblem::incomplete(format!(
            "{} of {rows} matched tensor pairs were not measured: no tensor data {} (a statistics-mode capture \
             keeps statistics and content hashes only; pairs whose hashes are equal count as identical); \
             first: {first}. Record with --mode tensor (`analyzer record --mode tensor`, or \
             ACCUTRACE_MODE=tensor for the collector) to compare values; two runs of one configuration \
             compare by content hash with `analyzer diff`",
            self.count,
            sides.join(", "),
        )))
    }
}
