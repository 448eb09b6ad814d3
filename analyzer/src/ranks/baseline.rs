//! Whether a `--baseline` is a run of the same job: the configuration check `diff` applies before it
//! compares two runs (crate::comparable), on the events both hold, so that summaries (`merge --baseline`)
//! are checked as runs are. A baseline of another job (another model, precision, batch, or fewer ranks)
//! would make every difference look like an anomaly, and the first one a culprit. `BaselineFold`: the
//! baseline's side of two long captures read a window of the same steps of each at a time.

use super::detect::{self, CallResult, Detected};
use super::events::{self, Called, Event, RankEvents, RunEvents};
use super::packed::Kept;
use super::window::WindowFacts;
use crate::filter::{rank_ranges, Filter};
use crate::problems::{InputProblem, ProblemKind};
use crate::sources::capture::windows::WholeRun;
use crate::sources::Source;
use std::collections::{BTreeMap, BTreeSet};

/// Why `good` cannot be the baseline of `run` for the ranks `examined`, or `None` when it can: ranks the
/// baseline lacks, then the first step and rank where the op sequences part (one holding only the start or
/// the end of the other's is not a difference), then the first tensor of one op whose dtype or element
/// count differs.
pub(crate) fn refusal(name: &str, run: &RunEvents, good: &RunEvents, examined: &[u32]) -> Option<String> {
    let mut parts = Parts::default();
    parts.add(run, good);
    parts.refusal(name, examined)
}

/// What [`refusal`] says, gathered from the same steps of both runs at a time: the ranks that hold ops in
/// each, and per rank its first step whose op sequences part and whose tensors differ.
#[derive(Default)]
struct Parts {
    with_ops: [BTreeSet<u32>; 2],
    sequence: BTreeMap<u32, String>,
    tensors: BTreeMap<u32, String>,
}

impl Parts {
    /// Adds the same steps of both runs, after those added before.
    fn add(&mut self, run: &RunEvents, good: &RunEvents) {
        let has_ops = |r: &&RankEvents| r.events.iter().any(|e| e.collective().is_none());
        for (with_ops, events) in self.with_ops.iter_mut().zip([run, good]) {
            with_ops.extend(events.ranks.iter().filter(has_ops).map(|r| r.rank));
        }
        for a in &run.ranks {
            let Some(b) = good.ranks.iter().find(|r| r.rank == a.rank) else { continue };
            let (sequence, tensors) = rank_differences(a, b);
            // The first step's, of the steps added in order.
            if let Some(s) = sequence {
                self.sequence.entry(a.rank).or_insert(s);
            }
            if let Some(t) = tensors {
                self.tensors.entry(a.rank).or_insert(t);
            }
        }
    }

    fn refusal(&self, name: &str, examined: &[u32]) -> Option<String> {
        let [ours, theirs] = &self.with_ops;
        let lacking: Vec<u32> =
            examined.iter().filter(|&r| ours.contains(r) && !theirs.contains(r)).copied().collect();
        let mut reasons = Vec::new();
        if !lacking.is_empty() {
            reasons.push(format!("ranks: the baseline has no op of {}", rank_ranges(&lacking)));
        }
        // At the lowest examined rank that has one.
        let first = |of: &BTreeMap<u32, String>| examined.iter().find_map(|r| of.get(r).cloned());
        reasons.extend(first(&self.sequence));
        reasons.extend(first(&self.tensors));
        if reasons.is_empty() {
            return None;
        }
        Some(format!(
            "the baseline {name} is not a run of the same job, so every difference from it would read as an \
             anomaly:\n  {}\ngive a good run of this job (same model, settings and ranks) as the baseline",
            reasons.join("\n  ")
        ))
    }
}

/// One rank's first step where the op sequences of `a` (the run) and `b` (the baseline) part, and its first
/// step where a tensor of one op differs in dtype or element count.
fn rank_differences(a: &RankEvents, b: &RankEvents) -> (Option<String>, Option<String>) {
    let (mut sequence, mut tensors) = (None, None);
    let rank = a.rank;
    let (steps_a, steps_b) = (by_step(&a.events), by_step(&b.events));
    for (step, ops_a) in &steps_a {
        let Some(ops_b) = steps_b.get(step) else { continue };
        let (short, long) = if ops_a.len() <= ops_b.len() { (ops_a, ops_b) } else { (ops_b, ops_a) };
        let cut_short = starts_or_ends_alike(short, long);
        let place = format!("step {step} rank {rank}");
        if sequence.is_none() && !cut_short {
            if let Some(i) = (0..ops_a.len().max(ops_b.len()))
                .find(|&i| ops_a.get(i).map(|e| key(e)) != ops_b.get(i).map(|e| key(e)))
            {
                let show = |e: Option<&&Event>| {
                    e.map_or("nothing (the step ends)".into(), |e| format!("{} [{}]", e.name(), e.op_type()))
                };
                sequence = Some(format!(
                    "op sequence: {place}: op {} is {} in the run and {} in the baseline",
                    i + 1,
                    show(ops_a.get(i)),
                    show(ops_b.get(i))
                ));
            }
        }
        if tensors.is_none() {
            tensors = ops_a.iter().zip(ops_b.iter()).filter(|(x, y)| key(x) == key(y)).find_map(|(x, y)| {
                x.tensors.iter().zip(&y.tensors).find_map(|(s, t)| {
                    (s.dtype != t.dtype || s.elements != t.elements).then(|| {
                        format!(
                            "tensors: {place}: {} is {} of {} elements in the run and {} of {} in the baseline",
                            x.label(s),
                            s.dtype,
                            s.elements,
                            t.dtype,
                            t.elements
                        )
                    })
                })
            });
        }
    }
    (sequence, tensors)
}

/// The baseline's side of `ranks RUN --baseline GOOD` of two long captures read a window of the same steps
/// of each at a time (#18): a window's tensors are compared with the baseline's as it is added (they never
/// span steps), and so are its op sequences; what its calls are compared on is kept, since the k-th call of
/// a rank meets the baseline's k-th whatever the step (a call in 130 events or so). What the baseline misses
/// is gathered as the run's is, to be named as the baseline's.
#[derive(Default)]
pub(crate) struct BaselineFold {
    parts: Parts,
    /// Every rank seen, with its calls.
    calls: BTreeMap<u32, RankCalls>,
    unmatched: u64,
    lost_records: bool,
    facts: WindowFacts,
}

impl BaselineFold {
    /// Adds the baseline's window `good` of the same steps as the run's window `run`, its tensors' findings
    /// to `found`; `false` when the baseline must be read whole (a window cannot place its calls).
    pub(crate) fn add(
        &mut self,
        run: &RunEvents,
        good: &dyn Source,
        filter: &Filter,
        found: &mut Detected,
    ) -> bool {
        let Some(events) = self.facts.events(good, filter) else { return false };
        self.unmatched += detect::baseline_tensors(run, &events, found);
        self.parts.add(run, &events);
        let incomplete = |p: &InputProblem| p.kind == ProblemKind::Incomplete;
        self.lost_records |= run.problems.iter().chain(&events.problems).any(incomplete);
        let RunEvents { ranks, problems, .. } = events;
        self.facts.keep_problems(problems);
        for rank in ranks {
            let kept = self.calls.entry(rank.rank).or_default();
            kept.results.extend(rank.events.iter().filter_map(CallResult::of));
            kept.called.extend(events::called(&rank));
        }
        true
    }

    /// Whether a window of either run lost records (as the configuration check must know).
    pub(crate) fn lost_records(&self) -> bool {
        self.lost_records
    }

    /// The baseline's ranks once every window is in, without their events, and the problems its whole read
    /// would have (`whole`: what the capture says about itself). The calls' findings against `run`'s (every
    /// call of every rank) go to `found`, with the warning of what has no counterpart.
    pub(crate) fn finish(
        &mut self,
        run: &RunEvents<Kept>,
        whole: &WholeRun,
        found: &mut Detected,
    ) -> RunEvents<Kept> {
        let (results, called): (BTreeMap<_, _>, BTreeMap<_, _>) = std::mem::take(&mut self.calls)
            .into_iter()
            .map(|(rank, c)| ((rank, c.results), (rank, c.called)))
            .unzip();
        self.unmatched += detect::baseline_calls(run, &results, found);
        found.warnings.extend(detect::no_counterpart(self.unmatched));
        let ranks = called.keys().map(|&rank| RankEvents { rank, events: Vec::new() }).collect();
        let whole = [whole.leading.clone(), whole.shortfalls.clone()];
        std::mem::take(&mut self.facts).finish(ranks, &run.selection, whole, &|r| called[&r.rank].clone())
    }

    /// [`refusal`] of the baseline `name` for the ranks `examined`, from every window added.
    pub(crate) fn refusal(&self, name: &str, examined: &[u32]) -> Option<String> {
        self.parts.refusal(name, examined)
    }
}

/// What a rank of the baseline's calls are compared on, kept to the end.
#[derive(Default)]
struct RankCalls {
    /// Every call, in program order.
    results: Vec<CallResult>,
    called: Called,
}

/// A rank's ops (not its calls) by step, in program order.
fn by_step(events: &[Event]) -> BTreeMap<u64, Vec<&Event>> {
    let mut steps: BTreeMap<u64, Vec<&Event>> = BTreeMap::new();
    for e in events.iter().filter(|e| e.collective().is_none()) {
        steps.entry(e.step).or_default().push(e);
    }
    steps
}

fn key(e: &Event) -> (&str, &str) {
    (e.name(), e.op_type())
}

fn starts_or_ends_alike(short: &[&Event], long: &[&Event]) -> bool {
    let same = |x: &[&Event], y: &[&Event]| x.iter().zip(y).all(|(a, b)| key(a) == key(b));
    same(short, &long[..short.len()]) || same(short, &long[long.len() - short.len()..])
}

#[cfg(test)]
mod tests {
    use super::super::events::{EventKind, TensorSummary};
    use super::*;
    use crate::index::Io;

    fn op(step: u64, name: &str, elements: u64) -> Event {
        let t = TensorSummary::zeros(Io::Output, elements, Some(1));
        Event {
            step,
            time_us: None,
            kind: EventKind::Op { name: name.into(), op_type: "X".into() },
            tensors: vec![t],
        }
    }

    fn run(ranks: &[u32], ops: &[(&str, u64)]) -> RunEvents {
        RunEvents {
            ranks: ranks
                .iter()
                .map(|&rank| RankEvents { rank, events: ops.iter().map(|&(n, e)| op(0, n, e)).collect() })
                .collect(),
            ..RunEvents::default()
        }
    }

    #[test]
    fn a_baseline_of_the_same_job_passes_and_one_of_another_job_is_refused_saying_why() {
        let job = run(&[0, 1, 2, 3], &[("a", 8), ("b", 8)]);
        assert_eq!(refusal("good", &job, &job, &[0, 1, 2, 3]), None);
        // Cut short (a ring that dropped the start) is still the same job.
        assert_eq!(refusal("good", &job, &run(&[0, 1, 2, 3], &[("b", 8)]), &[0, 1, 2, 3]), None);
        let two = run(&[0, 1], &[("a", 8), ("c", 8)]);
        let why = refusal("other", &job, &two, &[0, 1, 2, 3]).expect("refused");
        assert!(why.contains("the baseline has no op of ranks 2, 3"), "{why}");
        assert!(why.contains("op 2 is b [X] in the run and c [X] in the baseline"), "{why}");
        let bigger = run(&[0, 1, 2, 3], &[("a", 16), ("b", 8)]);
        let why = refusal("bigger", &job, &bigger, &[0, 1, 2, 3]).expect("refused");
        assert!(why.contains("a.output.0 is FLOAT16 of 8 elements in the run and FLOAT16 of 16"), "{why}");
        // Only the ranks examined count.
        assert_eq!(refusal("two", &run(&[0, 1, 2, 3], &[("a", 8), ("c", 8)]), &two, &[0, 1]), None);
    }

    /// Steps 0 and 1 of ranks 0 and 1, from `ops(rank, step)`, kept to `steps`.
    fn two_steps(ops: impl Fn(u32, u64) -> Vec<(&'static str, u64)>, steps: &[u64]) -> RunEvents {
        let mut ranks = Vec::new();
        for rank in 0..2 {
            let mut events = Vec::new();
            for &s in steps {
                events.extend(ops(rank, s).into_iter().map(|(n, e)| op(s, n, e)));
            }
            ranks.push(RankEvents { rank, events });
        }
        RunEvents { ranks, ..RunEvents::default() }
    }

    /// Added a step of both runs at a time, the refusal names what the whole runs' names: the first step
    /// of the lowest rank, for the op sequence and the tensors each, whichever step comes first overall.
    #[test]
    fn a_refusal_gathered_step_by_step_is_the_whole_runs() {
        let good = |_: u32, _: u64| vec![("a", 8), ("b", 8)];
        // Rank 1's sequence parts at step 0, rank 0's at step 1; rank 1's tensor differs at step 1.
        let ours = |rank: u32, step: u64| match (rank, step) {
            (1, 0) | (0, 1) => vec![("a", 8), ("c", 8)],
            (1, 1) => vec![("a", 4), ("b", 8)],
            _ => good(rank, step),
        };
        let whole = refusal("good", &two_steps(ours, &[0, 1]), &two_steps(good, &[0, 1]), &[0, 1]);
        let mut parts = Parts::default();
        for step in [0, 1] {
            parts.add(&two_steps(ours, &[step]), &two_steps(good, &[step]));
        }
        let gathered = parts.refusal("good", &[0, 1]);
        assert_eq!(gathered, whole);
        let why = gathered.expect("refused");
        assert!(why.contains("op sequence: step 1 rank 0: op 2 is c [X]"), "{why}");
        assert!(why.contains("tensors: step 1 rank 1: a.output.0 is FLOAT16 of 4 elements"), "{why}");
        // Rank 1 alone: its first step's.
        let rank_one = parts.refusal("good", &[1]).expect("refused");
        assert!(rank_one.contains("op sequence: step 0 rank 1"), "{rank_one}");
    }
}
