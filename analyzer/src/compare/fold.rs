//! compare of two long captures read a window of the same steps of each at a time (#18): what each
//! window's comparison says, folded into what the whole runs' comparison says. A window holds every op and
//! tensor of its steps, so what is per op or per step (a pair's verdict, whether an op is cleared) is
//! decided within it; what spans windows (the counts, the first failing op and the culprit, the warnings
//! and problems) is carried over. Whole-run order is (rank, step, op order), and windows are of steps:
//! what the whole run lists by tensor or op id is ordered by (rank, window, place in the window).
//!
//! A window the fold cannot answer for as the whole would (a refusal, kernels against API calls, the
//! matching's warnings, a culprit tied to a producer in another window) makes [`CompareFold::add`] say so:
//! the caller compares the whole runs instead.

use super::comparison::{Comparison, Unmeasured};
use super::run::PartFacts;
use crate::comparable::{on_one_side, swapped_sides, without_counterpart_text};
use crate::filter::Filter;
use crate::problems::{InputProblem, InputProblems};
use crate::sources::capture::windows::WholeRun;
use std::collections::BTreeSet;

/// An op's place in the whole run's execution order: rank, step, then its order within its window.
pub type Placed = (u32, u64, u64);

/// A place in the whole run's order of what a window lists in its own order: rank, window, position.
type Listed = (u32, usize, usize);

/// What [`CompareFold::add`] found new in a window: its culprit or its first failing op comes before
/// every one found so far (the caller keeps what it reports of them).
#[derive(Clone, Copy, Debug, Default)]
pub struct Added {
    pub culprit: Option<usize>,
    pub first_failing: bool,
}

/// The windows' comparisons folded, added in step order.
#[derive(Default)]
pub struct CompareFold {
    pub rows: usize,
    passed: usize,
    failed: usize,
    unread: usize,
    judged: bool,
    unmatched: [usize; 2],
    /// Target tensors without a counterpart: tensors, ops, and the first (`step S rank R: label`).
    without: [usize; 2],
    without_first: Option<(Listed, String)>,
    matched: usize,
    narrower: [usize; 2],
    swapped: Option<String>,
    /// The ranks and steps of the ops the selection keeps, each side's.
    ranks: [BTreeSet<u64>; 2],
    steps: [BTreeSet<u64>; 2],
    index_warnings: [Vec<String>; 2],
    index_problems: [Vec<InputProblem>; 2],
    unreadable: Vec<(Listed, InputProblem)>,
    unhashed: Vec<(Listed, InputProblem)>,
    unmeasured: Unmeasured,
    unmeasured_at: usize,
    pub failing_ops: usize,
    culprit: Option<Placed>,
    first_failing: Option<Placed>,
}

impl CompareFold {
    /// Adds window `w`'s comparison `c` (the same steps of both runs, after the windows added before) and
    /// what it said beyond it; `None` when the whole runs must be compared instead (module text).
    pub fn add(&mut self, w: usize, c: &Comparison<'_>, facts: PartFacts, filter: &Filter) -> Option<Added> {
        if c.refused.is_some()
            || facts.against_apis
            || !c.api_calls.is_empty()
            || !facts.matching_warnings.is_empty()
            || facts.culprit_crosses
        {
            return None;
        }
        let (ti, bi) = (c.target.index(), c.bench.index());
        for (side, index) in [ti, bi].into_iter().enumerate() {
            self.index_problems[side].extend(index.problems.iter().cloned());
            for op in index.ops.iter().filter(|o| filter.keeps(o)) {
                self.ranks[side].insert(u64::from(op.rank));
                self.steps[side].insert(op.step);
            }
        }
        let [w1, w2] = facts.index_warnings;
        self.index_warnings[0].extend(w1);
        self.index_warnings[1].extend(w2);
        self.rows += c.rows.len();
        self.passed += c.rows.iter().filter(|r| r.passed()).count();
        self.failed += c.rows.iter().filter(|r| r.failed).count();
        self.unread += c.rows.iter().filter(|r| r.error().is_some()).count();
        self.judged |= c.rows.iter().any(|r| r.judged());
        self.unmatched[0] += c.unmatched_target.len();
        self.unmatched[1] += c.unmatched_bench.len();
        self.matched += c.rows.len();
        for (n, more) in self.narrower.iter_mut().zip(facts.narrower) {
            *n += more;
        }
        // Each window's sources name the same runs: the last window's words are the whole's.
        self.swapped = swapped_sides(c.target, c.bench, self.narrower);
        let rank_of = |t: usize| ti.ops[ti.tensors[t].op()].rank;
        if let Some(&first) = facts.without_counterpart.first() {
            let ops: BTreeSet<usize> =
                facts.without_counterpart.iter().map(|&t| ti.tensors[t].op()).collect();
            self.without[0] += facts.without_counterpart.len();
            self.without[1] += ops.len();
            let op = &ti.ops[ti.tensors[first].op()];
            let at = (op.rank, w, 0);
            if self.without_first.as_ref().is_none_or(|(held, _)| at < *held) {
                let label = format!("step {} rank {}: {}", op.step, op.rank, ti.tensor_label(first));
                self.without_first = Some((at, label));
            }
        }
        for (list, found) in [(&mut self.unreadable, facts.unreadable), (&mut self.unhashed, facts.unhashed)]
        {
            list.extend(found.into_iter().enumerate().map(|(i, (t, p))| ((rank_of(t), w, i), p)));
        }
        let unmeasured = Unmeasured::of(&c.rows, ti, bi);
        if let Some((rank, _)) = &unmeasured.first {
            let held = self.unmeasured.first.as_ref().map(|(r, _)| (*r, self.unmeasured_at));
            if held.is_none_or(|held| (*rank, w) < held) {
                self.unmeasured.first = unmeasured.first.clone();
                self.unmeasured_at = w;
            }
            self.unmeasured.count += unmeasured.count;
            self.unmeasured.sides[0] += unmeasured.sides[0];
            self.unmeasured.sides[1] += unmeasured.sides[1];
        }
        self.failing_ops += c.failing_ops.len();
        let placed = |i: usize| {
            let op = &ti.ops[c.failing_ops[i].op];
            (op.rank, op.step, op.order)
        };
        let mut added = Added::default();
        if let Some(i) = c.culprit {
            if self.culprit.is_none_or(|held| placed(i) < held) {
                self.culprit = Some(placed(i));
                added.culprit = Some(i);
            }
        }
        if !c.failing_ops.is_empty() && self.first_failing.is_none_or(|held| placed(0) < held) {
            self.first_failing = Some(placed(0));
            added.first_failing = true;
        }
        Some(added)
    }

    /// The culprit's place, where there is one.
    pub fn culprit(&self) -> Option<Placed> {
        self.culprit
    }

    /// Whether the first failing op comes before the culprit (the reports' note on it).
    pub fn failing_before_culprit(&self) -> bool {
        matches!((self.first_failing, self.culprit), (Some(first), Some(culprit)) if first < culprit)
    }

    /// Matched float pairs narrower on the benchmark's side, and on the target's, so far: counted over every
    /// pair, the filter's or not, as the whole runs' warning counts them.
    pub fn narrower(&self) -> [usize; 2] {
        self.narrower
    }

    /// How many target tensors have no counterpart in steps and ranks the benchmark holds.
    pub fn without_counterpart(&self) -> usize {
        self.without[0]
    }

    /// The headline's counts: compared, passed, failed, unread, unmeasured, unmatched target and bench.
    pub fn counts(&self) -> [usize; 7] {
        let [t, b] = self.unmatched;
        [self.rows, self.passed, self.failed, self.unread, self.unmeasured.count, t, b]
    }

    /// Whether any pair was read and measured.
    pub fn judged(&self) -> bool {
        self.judged
    }

    /// The warnings, in the order the whole runs' comparison gives them.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings: Vec<String> = self.swapped.iter().cloned().collect();
        warnings.extend(on_one_side("rank", &self.ranks[0], &self.ranks[1]));
        warnings.extend(on_one_side("step", &self.steps[0], &self.steps[1]));
        if let Some((_, first)) = &self.without_first {
            warnings.push(without_counterpart_text([self.without[0], self.without[1], self.matched], first));
        }
        warnings.extend(self.index_warnings.iter().flatten().cloned());
        warnings
    }

    /// What the runs miss, each as a whole ([`WholeRun`]: the problems that lead, the windows', the whole's
    /// shortfalls), then the pairs not measured and the tensors that could not be read.
    pub fn problems(&mut self, whole: [WholeRun; 2]) -> InputProblems {
        let mut problems = InputProblems::default();
        for (run, parts) in whole.into_iter().zip(&mut self.index_problems) {
            let all = run.leading.into_iter().chain(parts.drain(..)).chain(run.shortfalls);
            all.for_each(|p| problems.push(p));
        }
        if let Some(p) = self.unmeasured.problem(self.rows) {
            problems.push(p);
        }
        for list in [&mut self.unreadable, &mut self.unhashed] {
            list.sort_by_key(|(at, _)| *at);
            list.drain(..).for_each(|(_, p)| problems.push(p));
        }
        problems
    }
}
