//! `analyzer ranks` of a long capture read a window of steps at a time (#18): the report
//! [`analyze`](super::analyze) makes of
//! the whole run, holding one window's index and events at a time.
//!
//! What a window holds whole is decided there: each op's overflow, and the replica check, which compares one
//! step's tensors across ranks (a window holds every rank of its steps; what two ranks held alike at the
//! step before is carried to the next window). Counts (events, steps, findings by kind, rank and step,
//! tensors held alike) are added up. What spans steps is decided once every window is in, on a thinned run:
//! every HCCL call (collectives are matched across ranks by communicator and sequence number, and their
//! disagreements, the replay's happens-before and the calls missing members need all of them; each is kept
//! with its buffers' hashes in place of their statistics, its overflow found in its window: `buffers`) and,
//! on each rank, its first anomalous op. Later anomalous ops of a rank cannot be origins (the rank carries an anomaly
//! by then) nor where one reached it: each is a tick of its rank's clock in the replay, and a count in the
//! anomalous events of the spread. What is held grows with the calls (about 1 in 130 events in a
//! transformer's data-parallel step), not with tensors.
//!
//! Read whole instead ([`ranks_by_windows`] says `None`): a rank with ops that carry no dump timestamp, whose
//! calls go after all its ops, which a window cannot tell. Captures that the census keeps whole (steps not
//! carried by every op, point-to-point calls, overflow records) never come here. `--baseline` adds the
//! baseline's window of the same steps beside the run's (`ranks::baseline`: its tensors compared there, its
//! calls kept for the end).

use super::baseline::BaselineFold;
use super::buffers::thin_buffers;
use super::detect::{self, AlikeBefore, Detected, Finding};
use super::events::{RankEvents, RunEvents};
use super::packed::Kept;
use super::program::{self, ProgramEvent};
use super::window::WindowFacts;
use super::{conclude, examined, refuse_baseline, RanksReport, Tally, Thinning};
use crate::filter::Filter;
use crate::problems::InputProblem;
use crate::sources::capture::windows::{self, StepWindows, WholeRun};
use crate::sources::Source;
use std::collections::BTreeMap;

/// Tensors a window of `ranks` holds at most (unless one step alone holds more): half what other commands'
/// windows hold, since beside its index (~84 bytes a tensor) a window's events hold ~140 bytes a tensor more,
/// most of `ranks`' memory until a run's calls outgrow them (#18).
pub const WINDOW_TENSORS: u64 = windows::WINDOW_TENSORS / 2;

/// One rank's kept events (see the module's text) and where they stand among its whole program order.
#[derive(Default)]
struct KeptRank {
    events: Vec<Kept>,
    positions: Vec<usize>,
    anomalous_left_before: Vec<u64>,
    /// The findings of its kept ops, by position in `events` (a call's are found once all are in).
    op_findings: BTreeMap<usize, Vec<Finding>>,
    /// Its calls' overflows, found in their windows, by position in `events`.
    call_overflows: BTreeMap<usize, Vec<Finding>>,
    /// Its events in the windows added so far.
    seen: usize,
    anomalous_left: u64,
    anomalous_op_kept: bool,
}

impl KeptRank {
    /// Room for `n` more kept events, grown by an eighth at least: doubling, a vector of a long run's calls
    /// held up to as much room again spare, a quarter of what the fold held on average (#18).
    fn reserve(&mut self, n: usize) {
        fn grow<T>(v: &mut Vec<T>, n: usize) {
            if v.capacity() - v.len() < n {
                v.reserve_exact(n.max(v.len() / 8));
            }
        }
        grow(&mut self.events, n);
        grow(&mut self.positions, n);
        grow(&mut self.anomalous_left_before, n);
    }
}

/// The cross-rank analysis of a run made from its windows of steps, added in step order.
#[derive(Default)]
pub struct RanksFold {
    ranks: BTreeMap<u32, KeptRank>,
    tally: Tally,
    alike_before: AlikeBefore,
    facts: WindowFacts,
}

impl RanksFold {
    /// Adds the window `source` (its steps come after those added before) of the ops `filter` keeps; `false`
    /// when the run must be read whole instead (the module's text).
    pub fn add(&mut self, source: &dyn Source, filter: &Filter) -> bool {
        self.add_against(source, filter, None)
    }

    /// [`RanksFold::add`], and the baseline's window of the same steps to its fold when there is one.
    pub(crate) fn add_against(
        &mut self,
        source: &dyn Source,
        filter: &Filter,
        baseline: Option<(&dyn Source, &mut BaselineFold)>,
    ) -> bool {
        let Some(run) = self.facts.events(source, filter) else { return false };
        let mut found = Detected::default();
        detect::overflows(&run, &mut found);
        detect::replicas_after(&run, &mut self.alike_before, &mut found);
        if let Some((good, baseline)) = baseline {
            if !baseline.add(&run, good, filter, &mut found) {
                return false;
            }
        }
        // A call's findings wait for every member (the module's text), but for its overflow, which its own
        // buffers tell here, where their statistics are whole (the call keeps their hashes); only the
        // examined ranks' count.
        let examined_rank = |r: usize| filter.ranks.is_empty() || filter.ranks.contains(&run.ranks[r].rank);
        let mut call_overflows = BTreeMap::new();
        found.findings.retain(|&(r, i), f| {
            if run.ranks[r].events[i].collective().is_some() {
                call_overflows.insert((r, i), std::mem::take(f));
                return false;
            }
            examined_rank(r)
        });
        self.tally.add_events(&run);
        self.tally.add_findings(&run, &found.findings, &|_| true);
        for (step, n) in found.replicated_per_step {
            *self.tally.replicated_per_step.entry(step).or_default() += n;
        }
        let RunEvents { ranks, problems, .. } = run;
        self.facts.keep_problems(problems);
        for (r, rank) in ranks.into_iter().enumerate() {
            let kept = self.ranks.entry(rank.rank).or_default();
            let seen = rank.events.len();
            // Room for its calls and a first anomalous op.
            kept.reserve(rank.events.iter().filter(|e| e.collective().is_some()).count() + 1);
            for (i, mut e) in rank.events.into_iter().enumerate() {
                let findings = found.findings.remove(&(r, i));
                let first_anomalous_op = findings.is_some() && !kept.anomalous_op_kept;
                if e.collective().is_none() && !first_anomalous_op {
                    kept.anomalous_left += u64::from(findings.is_some());
                    continue;
                }
                if let Some(findings) = findings {
                    kept.op_findings.insert(kept.events.len(), findings);
                    kept.anomalous_op_kept = true;
                }
                if let Some(overflow) = call_overflows.remove(&(r, i)) {
                    kept.call_overflows.insert(kept.events.len(), overflow);
                }
                // What fits the thin form lets its tensor summaries go; the rest stays whole.
                let thin = thin_buffers(&e);
                if thin.is_some() {
                    e.tensors = Vec::new();
                }
                kept.positions.push(kept.seen + i);
                kept.anomalous_left_before.push(kept.anomalous_left);
                kept.events.push(Kept::of(e, thin.unwrap_or_default()));
            }
            kept.seen += seen;
        }
        true
    }

    /// The report on the run `name` whose every window was added; `leading` and `shortfalls`: what the whole
    /// capture says about itself, which no window's index holds (before and after the windows' problems).
    pub fn finish(
        self,
        name: &str,
        filter: &Filter,
        leading: Vec<InputProblem>,
        shortfalls: Vec<InputProblem>,
    ) -> RanksReport {
        self.finish_against(name, filter, leading, shortfalls, None)
    }

    /// [`RanksFold::finish`], against the baseline (its name, fold and what its capture says about itself)
    /// when there is one, refused as the whole run's analysis refuses it.
    pub(crate) fn finish_against(
        self,
        name: &str,
        filter: &Filter,
        leading: Vec<InputProblem>,
        shortfalls: Vec<InputProblem>,
        baseline: Option<(&str, BaselineFold, &WholeRun)>,
    ) -> RanksReport {
        let mut thinning = Thinning::default();
        let mut op_findings = Vec::new();
        let mut found = Detected::default();
        let mut ranks = Vec::new();
        for (r, (rank, kept)) in self.ranks.into_iter().enumerate() {
            // Read packed where they are: unpacked, the calls took a full event each more (`program`).
            ranks.push(RankEvents { rank, events: kept.events });
            thinning.positions.push(kept.positions);
            thinning.anomalous_left_before.push(kept.anomalous_left_before);
            thinning.anomalous_left.push(kept.anomalous_left);
            op_findings.push(kept.op_findings);
            found.findings.extend(kept.call_overflows.into_iter().map(|(i, f)| ((r, i), f)));
        }
        let run = self.facts.finish(ranks, filter, [leading, shortfalls], &program::called);
        // The calls' findings, as the whole run's detection finds them (overflow, found in their windows, then
        // disagreement); the kept ops' as their windows found them.
        detect::collectives(&run, &mut found);
        let baseline =
            baseline.map(|(name, mut fold, whole)| (name, fold.finish(&run, whole, &mut found), fold));
        found.findings.retain(|&(r, i), _| run.ranks[r].events[i].call().is_some());
        for (r, ops) in op_findings.into_iter().enumerate() {
            found.findings.extend(ops.into_iter().map(|(i, f)| ((r, i), f)));
        }
        found.findings.retain(|&(r, _), _| examined(&run, r));
        let mut tally = self.tally;
        tally.add_findings(&run, &found.findings, &|e| e.call().is_some());
        let good = baseline.as_ref().map(|(name, good, _)| (*name, good));
        let mut report = conclude(name, &run, good, &found, tally, Some(&thinning));
        if let Some((name, _, fold)) = &baseline {
            if let Some(reason) = fold.refusal(name, &report.examined_ranks) {
                refuse_baseline(&mut report, reason);
            }
        }
        report
    }
}

/// [`RanksFold`] over every window of `windows` (the run `name`) for the ops `filter` keeps; `None` when the run must be read
/// whole (the module's text).
pub fn ranks_by_windows(
    name: &str,
    windows: &StepWindows,
    filter: &Filter,
) -> anyhow::Result<Option<RanksReport>> {
    let mut fold = RanksFold::default();
    for w in 0..windows.windows().len() {
        if !fold.add(&windows.open(w)?, filter) {
            return Ok(None);
        }
    }
    let leading = windows.mixed_runs().into_iter().cloned().collect();
    Ok(Some(fold.finish(name, filter, leading, windows.shortfalls().to_vec())))
}

#[cfg(test)]
mod tests {
    use super::super::events::{Event, EventKind};
    use super::super::thin::ThinBuffers;
    use super::*;

    /// Window after window, what a rank keeps holds at most an eighth of spare room beyond the last window's
    /// (doubling held up to as much again).
    #[test]
    fn kept_events_grow_by_an_eighth_not_by_doubling() {
        let op = Event {
            step: 0,
            time_us: None,
            kind: EventKind::Op { name: "a".into(), op_type: "X".into() },
            tensors: Vec::new(),
        };
        let mut kept = KeptRank::default();
        let window = 84;
        for _ in 0..1000 {
            kept.reserve(window);
            for i in 0..window {
                kept.events.push(Kept::of(op.clone(), ThinBuffers::default()));
                kept.positions.push(i);
                kept.anomalous_left_before.push(0);
            }
            let len = kept.events.len();
            let room =
                [kept.events.capacity(), kept.positions.capacity(), kept.anomalous_left_before.capacity()];
            assert!(room.iter().all(|&c| c >= len && c <= len + len / 8 + window), "{room:?} for {len}");
        }
    }
}
