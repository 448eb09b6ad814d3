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
use crate::index::Index;
use crate::problems::{InputProblem, InputProblems};
use crate::sources::capture::windows::WholeRun;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// A target op name's tensors without a counterpart in their windows: how many, of how many ops, and the
/// first (its place, `step S rank R: label`).
struct Without {
    tensors: usize,
    ops: usize,
    first: (Listed, String),
}

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
    /// Target tensors without a counterpart in their window, by op name: an op the benchmark fuses in any
    /// step has one, as the whole runs' comparison finds (`comparable::without_counterpart`), and a later
    /// window may be the one that fuses it.
    without: BTreeMap<String, Without>,
    /// The op names the benchmark's fused kernels name as their origins, in the windows so far.
    fused_in_bench: HashSet<String>,
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
        self.add_bench_fusions(bi);
        let mut ops_seen: HashSet<usize> = HashSet::new();
        for (i, &t) in facts.without_counterpart.iter().enumerate() {
            let o = ti.tensors[t].op();
            let op = &ti.ops[o];
            let at = (op.rank, w, i);
            let name = op.name.as_str();
            let entry = match self.without.get_mut(name) {
                Some(entry) => entry,
                None => {
                    let label = format!("step {} rank {}: {}", op.step, op.rank, ti.tensor_label(t));
                    let first = (at, label);
                    self.without.entry(name.to_string()).or_insert(Without { tensors: 0, ops: 0, first })
                }
            };
            entry.tensors += 1;
            entry.ops += usize::from(ops_seen.insert(o));
            if at < entry.first.0 {
                entry.first = (at, format!("step {} rank {}: {}", op.step, op.rank, ti.tensor_label(t)));
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

    /// Takes the op names the fused kernels of `bench` (a window of the benchmark) name as their origins:
    /// they clear target ops of having no counterpart. [`CompareFold::add`] takes each compared window's;
    /// a selection of steps takes the other windows' too, as the whole runs' comparison sees them.
    pub fn add_bench_fusions(&mut self, bench: &Index) {
        for op in &bench.ops {
            let origins = op.original_names(bench).into_iter().filter(|&n| n != op.name.as_str());
            self.add_fused_names(origins);
        }
    }

    /// Takes op names the benchmark fuses into kernels of other names (as [`CompareFold::add_bench_fusions`]
    /// finds them, or its census does for every step).
    pub fn add_fused_names<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        for name in names {
            if !self.fused_in_bench.contains(name) {
                self.fused_in_bench.insert(name.to_string());
            }
        }
    }

    /// How many target tensors have no counterpart in steps and ranks the benchmark holds (of the windows so
    /// far: a later one may fuse an op, and clear its tensors).
    pub fn without_counterpart(&self) -> usize {
        self.without_counted().map(|w| w.tensors).sum()
    }

    /// The names' tensors without a counterpart that no fused kernel of the benchmark clears.
    fn without_counted(&self) -> impl Iterator<Item = &Without> {
        self.without.iter().filter(|(name, _)| !self.fused_in_bench.contains(*name)).map(|(_, w)| w)
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
        let (tensors, ops) = self.without_counted().fold((0, 0), |(t, o), w| (t + w.tensors, o + w.ops));
        if let Some(w) = self.without_counted().min_by_key(|w| w.first.0) {
            warnings.push(without_counterpart_text([tensors, ops, self.matched], &w.first.1));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::{compare, compare_part, CompareOptions};
    use crate::index::{Index, Io, TensorId, TensorInfo};
    use crate::sources::Source;
    use accutrace_formats::DType;
    use anyhow::Result;
    use std::path::Path;

    /// A run held in memory: every tensor reads as the same values.
    struct Held(Index);

    impl Source for Held {
        fn kind(&self) -> &'static str {
            "capture"
        }
        fn root(&self) -> &Path {
            Path::new("held")
        }
        fn index(&self) -> &Index {
            &self.0
        }
        fn read_values(&self, _: TensorId, out: &mut Vec<f32>) -> Result<()> {
            out.clear();
            out.extend([1.0; 4]);
            Ok(())
        }
        fn content_hash(&self, _: TensorId) -> Result<u64> {
            Ok(1)
        }
    }

    /// Rank 0's ops, each `(step, name, the op its output comes from where it is fused)`, an output each.
    fn run(ops: &[Op]) -> Held {
        let mut index = Index::default();
        for &(step, name, fused_from) in ops {
            let op = index.push_op(name.into(), "T".into(), step, 0);
            let original = fused_from.map(|from| (index.share_name(from), 0));
            index.push_tensor(
                TensorInfo::new(op, Io::Output, 0, DType::FLOAT, vec![4]).with_original_op(original),
            );
        }
        Held(index)
    }

    /// The ops of `ops` at `steps`.
    fn at(ops: &[Op], steps: std::ops::RangeInclusive<u64>) -> Held {
        run(&ops.iter().copied().filter(|o| steps.contains(&o.0)).collect::<Vec<Op>>())
    }

    type Op = (u64, &'static str, Option<&'static str>);

    /// The benchmark fuses `b` into a kernel in step 0 and lacks it in step 1: the whole runs' comparison
    /// finds a counterpart for step 1's `b` (a fused kernel names it), and so do the windows folded, though
    /// step 1's window holds no fused kernel.
    #[test]
    fn an_op_the_benchmark_fuses_in_another_window_has_a_counterpart() {
        let target: [Op; 6] =
            [(0, "a", None), (0, "b", None), (1, "a", None), (1, "b", None), (2, "a", None), (2, "c", None)];
        let bench: [Op; 4] = [(0, "a", None), (0, "ab", Some("b")), (1, "a", None), (2, "a", None)];
        let options = CompareOptions { progress: false, ..CompareOptions::default() };
        let (target_whole, bench_whole) = (at(&target, 0..=2), at(&bench, 0..=2));
        let whole = compare(&target_whole, &bench_whole, &options);
        let mut fold = CompareFold::default();
        for step in 0..3 {
            let (t, b) = (at(&target, step..=step), at(&bench, step..=step));
            let (c, facts) = compare_part(&t, &b, &options, Some(false));
            fold.add(step as usize, &c, facts, &options.filter).expect("folded");
        }
        // Only step 2's `c` has none, in both.
        let warning = |w: &[String]| w.iter().find(|w| w.contains("no counterpart in it")).cloned();
        let expected = warning(&whole.warnings).expect("a warning");
        assert!(
            expected.starts_with("1 target tensors (1 ops)") && expected.contains("step 2 rank 0: c"),
            "{expected}"
        );
        assert_eq!((fold.without_counterpart(), warning(&fold.warnings())), (1, Some(expected)));
    }

    /// A selection of steps 1 and 2 (`compare --step 1-2`): step 0 is not compared, but its benchmark index's
    /// fused kernel still clears step 1's `b`, as in the whole runs' comparison under that selection.
    #[test]
    fn a_selection_takes_the_fusions_of_the_steps_it_leaves_out() {
        let target: [Op; 6] =
            [(0, "a", None), (0, "b", None), (1, "a", None), (1, "b", None), (2, "a", None), (2, "c", None)];
        let bench: [Op; 4] = [(0, "a", None), (0, "ab", Some("b")), (1, "a", None), (2, "a", None)];
        let filter = Filter { steps: vec![1, 2], ..Filter::default() };
        let options = CompareOptions { filter, progress: false, ..CompareOptions::default() };
        let (target_whole, bench_whole) = (at(&target, 0..=2), at(&bench, 0..=2));
        let whole = compare(&target_whole, &bench_whole, &options);
        let warning = |w: &[String]| w.iter().find(|w| w.contains("no counterpart in it")).cloned();
        let expected = warning(&whole.warnings).expect("a warning");
        let mut fold = CompareFold::default();
        for step in 1..3 {
            let (t, b) = (at(&target, step..=step), at(&bench, step..=step));
            let (c, facts) = compare_part(&t, &b, &options, Some(false));
            fold.add(step as usize, &c, facts, &options.filter).expect("folded");
        }
        assert_eq!(fold.without_counterpart(), 2, "step 1's b and step 2's c, before step 0 is seen");
        fold.add_bench_fusions(&at(&bench, 0..=0).0);
        assert_eq!((fold.without_counterpart(), warning(&fold.warnings())), (1, Some(expected)));
    }
}
