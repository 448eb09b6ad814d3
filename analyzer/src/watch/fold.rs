//! watch over a run's parts, each an index of its own (#18: a long capture read a window of steps at a time,
//! [`StepWindows`](crate::sources::capture::windows::StepWindows)), finished into the report the whole
//! run's index gives. A tensor, a step's loss and an update are judged within their window: roles are told
//! within one rank's step. What looks back over steps is carried from window to window, a few values a rank
//! or a parameter, never a tensor's worth: each rank's first loss (loss_too_large's base), its first step
//! and the parameters already updated (weight_initialization), the steps that updated (skipped steps), the
//! loss scales. What only the whole run decides is decided in [`WatchFold::finish`]: a gradient finding's
//! trend line over every step (the first and last three points are kept), operator_overflow's answer for a
//! run without device records, the collective arrivals' order, the overflows without origin, and the
//! report's order of answers ([`super::tally`]).
//!
//! What a window cannot decide: an update whose optimizer op does not output the weight is judged by the
//! weight before the parameter's next update; when that update is in a later window, the run is read whole
//! ([`ReadWhole`]). Captures that tie steps together (device overflow records) are never told apart into
//! windows.

use super::checks;
use super::conditions::Condition;
use super::findings::{LabelCounts, LossPoint, NormPoint, WatchOptions, WatchReport};
use super::tally::{Phase, Tally};
use super::updates::{with_trend, Trend};
use crate::overflow::{without_origin_of, Arrival, LossScale, Updates, WholeRun};
use crate::problems::{InputProblem, InputProblems, ProblemKind};
use crate::roles::Update;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// A part of a run read by windows needs what a later window holds: read the run whole.
#[derive(Debug)]
pub struct ReadWhole;

/// What watch found so far in a run's parts, and what it carries from one to the next.
pub struct WatchFold<'o> {
    pub(super) options: &'o WatchOptions,
    pub(super) tally: Tally,
    pub(super) labels: LabelCounts,
    pub(super) steps: BTreeSet<u64>,
    pub(super) ranks: BTreeSet<u32>,
    pub(super) loss: Vec<LossPoint>,
    /// Each rank's first finite loss.
    pub(super) first_loss: HashMap<u32, f64>,
    pub(super) norms: Vec<NormPoint>,
    /// Per (rank, parameter), its gradient's norms.
    pub(super) trends: BTreeMap<(u32, String), Trend>,
    /// Each rank's first step.
    pub(super) first_step: HashMap<u32, u64>,
    /// The (rank, parameter)s whose first update was judged.
    pub(super) initialized: HashSet<(u32, String)>,
    /// The (rank, parameter)s whose last update so far was judged without a weight after it.
    pub(super) awaiting_after: HashSet<(u32, String)>,
    pub(super) operator_records_seen: bool,
    pub(super) only_overflowing_ops: bool,
    pub(super) arrivals: Vec<Arrival>,
    /// The loss scales by name and by a scaler's multiply.
    pub(super) scales: (Vec<LossScale>, Vec<LossScale>),
    /// Per rank and step, whether an optimizer op ran.
    pub(super) updated: Updates,
    pub(super) index_problems: Vec<InputProblem>,
    /// Tensors that could not be read, by when the whole run reports them: those whose statistics were to
    /// be computed first, then those a check read, each in the order of the whole index.
    unreadable: Vec<((bool, u32, u64, usize), InputProblem)>,
    pub(super) warnings: Vec<String>,
}

impl<'o> WatchFold<'o> {
    pub fn new(options: &'o WatchOptions) -> WatchFold<'o> {
        WatchFold {
            options,
            tally: Tally::new(&options.conditions),
            labels: LabelCounts::default(),
            steps: BTreeSet::new(),
            ranks: BTreeSet::new(),
            loss: Vec::new(),
            first_loss: HashMap::new(),
            norms: Vec::new(),
            trends: BTreeMap::new(),
            first_step: HashMap::new(),
            initialized: HashSet::new(),
            awaiting_after: HashSet::new(),
            operator_records_seen: false,
            only_overflowing_ops: false,
            arrivals: Vec::new(),
            scales: (Vec::new(), Vec::new()),
            updated: Updates::new(),
            index_problems: Vec::new(),
            unreadable: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Whether an earlier part judged `u`'s parameter's last update without the weight `u` reads before it.
    pub(super) fn awaits_after(&self, u: &Update) -> bool {
        !self.awaiting_after.is_empty() && self.awaiting_after.contains(&(u.rank, u.param.clone()))
    }

    /// Tensor `t` (`label`, at `place`: rank and step) could not be read: by a check (`checked`) or for its
    /// statistics.
    pub(super) fn unreadable(
        &mut self,
        checked: bool,
        (rank, step): (u32, u64),
        t: usize,
        label: String,
        e: &anyhow::Error,
    ) {
        self.unreadable.push(((checked, rank, step, t), InputProblem::unreadable(format!("{label}: {e:#}"))));
    }

    /// The report on the run `run` whose every part was added.
    pub fn finish(self, run: String, whole: WholeRun) -> WatchReport {
        let conditions: &[Condition] = &self.options.conditions;
        let mut tally = self.tally;
        if !self.operator_records_seen {
            let answer = checks::no_operator_overflow_records(self.only_overflowing_ops);
            tally.add(conditions, (Phase::OperatorOverflow, 0, 0), [answer]);
        }
        for f in tally.findings_of_mut(Phase::Updates) {
            let trend = f.rank.zip(f.param.clone()).and_then(|key| self.trends.get(&key)).map(Trend::line);
            with_trend(f, trend);
        }
        let mut arrivals = self.arrivals;
        arrivals.sort_by_key(|a| (a.step.is_none(), a.step, a.rank));
        tally.add(conditions, (Phase::Arrivals, 0, 0), arrivals.iter().map(checks::arrival_hit));
        let mut index_problems = whole.leading;
        index_problems.extend(self.index_problems);
        index_problems.extend(whole.shortfalls);
        // Any overflow hit explains its step on every rank: the overflow flag spans the job.
        let explained: BTreeSet<u64> =
            tally.findings().filter(|f| f.condition.ends_with("_overflow")).filter_map(|f| f.step).collect();
        let (named, multiplied) = self.scales;
        let mut scales = if named.is_empty() { multiplied } else { named };
        scales.sort_by_key(|l| (l.rank, l.step));
        let lost_records = index_problems.iter().any(|p| p.kind == ProblemKind::Incomplete);
        let without_origin =
            without_origin_of(&self.updated, self.only_overflowing_ops, lost_records, &scales, &|_, step| {
                explained.contains(&step)
            });
        let mut input_problems = InputProblems::default();
        index_problems.into_iter().for_each(|p| input_problems.push(p));
        let mut unreadable = self.unreadable;
        unreadable.sort_by_key(|(key, _)| *key);
        unreadable.into_iter().for_each(|(_, p)| input_problems.push(p));
        let mut loss = self.loss;
        loss.sort_by_key(|p| (p.rank, p.step));
        let mut gradient_norm = self.norms;
        gradient_norm.sort_by_key(|p| (p.rank, p.step));
        let (conditions, findings, cant_tell) = tally.finish();
        WatchReport {
            run,
            input_problems,
            warnings: self.warnings,
            steps: self.steps.into_iter().collect(),
            ranks: self.ranks.into_iter().collect(),
            labels: self.labels,
            conditions,
            findings,
            without_origin,
            scope: whole.scope,
            cant_tell,
            loss,
            gradient_norm,
        }
    }
}
