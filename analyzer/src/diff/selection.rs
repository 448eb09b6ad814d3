//! `diff --step` of two long captures (#18): only the selected steps' windows are read, where the census
//! tells how the HCCL calls of the steps before them pair. The rest of diff's answer is the selection's
//! own (first differences, census rows, counts, unmatched tensors and the configuration check keep to the
//! filter; the shortfalls, the ring's deletions and a mix of runs are the census's). The calls are not: a
//! communicator's calls on a rank part at the first call without its counterpart (`calls`), so a step's
//! calls pair as the steps before it leave them.

use super::calls::{ring_firsts, ring_may_have_cut, CallPairing, PartedAt, RingFirsts};
use super::comms::CommTags;
use super::step_pairing::pair_step;
use crate::sources::capture::step_calls::{SeqCounter, StepCalls};
use crate::sources::capture::windows::StepWindows;
use std::collections::{BTreeMap, BTreeSet};

/// Each rank's calls, step by step ([`StepWindows::calls_by_step`]).
type RankCalls<'a> = BTreeMap<u32, &'a BTreeMap<u64, StepCalls>>;

/// What the census says of one run's calls: each rank's calls by step, the (rank, step) places of its
/// ops, and the first steps its ring left.
struct Census<'a> {
    calls: RankCalls<'a>,
    held: BTreeSet<(u32, u64)>,
    ring: RingFirsts,
}

impl Census<'_> {
    fn of(w: &StepWindows) -> Option<Census<'_>> {
        let calls = w.calls_by_step()?;
        Some(Census { calls, held: w.places(), ring: ring_firsts(w.ring_deleted()) })
    }
}

/// Keeps the windows of both runs (one list for both, [`StepWindows::align`]) to `steps`, where the census
/// tells how the calls of the steps before them pair, and returns the pairing the first selected window
/// starts from. Otherwise every window stays and the pairing is the runs' start (nothing parted).
pub fn select_steps(runs: [&mut StepWindows; 2], steps: &[u64], window_tensors: u64) -> CallPairing {
    let [a, b] = runs;
    let Some(pairing) = pairing_at(a, b, steps) else { return CallPairing::default() };
    if a.select_steps(steps) && b.select_steps(steps) {
        StepWindows::align(a, b, window_tensors);
        return pairing;
    }
    // One run could not keep to the selection: both back to every window (`align` without a selection).
    StepWindows::align(a, b, window_tensors);
    CallPairing::default()
}

/// The pairing at the first of `steps` that reading every window of `a` and `b` would leave, from the
/// census alone; `None` where it cannot tell.
fn pairing_at(a: &StepWindows, b: &StepWindows, steps: &[u64]) -> Option<CallPairing> {
    let selected: BTreeSet<u64> = steps.iter().copied().collect();
    let runs = [Census::of(a)?, Census::of(b)?];
    // A call's members are counted over the window it is read in: each must be read with the call.
    if !each_call_at_one_step(&runs[0].calls) {
        return None;
    }
    let comms = CommTags::of([&a.communicators()?, &b.communicators()?]);
    let (parted, called) = parted_before(&runs, &selected, &comms)?;
    Some(CallPairing::parted(parted, called))
}

/// The calls that part a rank's communicators at a step both runs hold before the first of `selected` (as
/// `collective_differences` parts them, step by step: the first call of either run without its
/// counterpart). `None` unless each step both runs hold from the first selected step to the last that
/// the selection leaves out pairs whole on the communicators left: its windows are not read, so nothing
/// could part a communicator there. `comms`: which communicator is which. With them, per run, the ranks
/// with a call at those steps.
fn parted_before(
    runs: &[Census; 2],
    selected: &BTreeSet<u64>,
    comms: &CommTags,
) -> Option<(Vec<PartedAt>, [BTreeSet<u32>; 2])> {
    let (&first, &last) = (selected.first()?, selected.last()?);
    let (none, empty) = (BTreeMap::new(), StepCalls::default());
    let ranks: BTreeSet<u32> = runs.iter().flat_map(|r| r.calls.keys().copied()).collect();
    let mut parted = Vec::new();
    let mut called: [BTreeSet<u32>; 2] = Default::default();
    for rank in ranks {
        let [c1, c2] = [0, 1].map(|k| runs[k].calls.get(&rank).copied().unwrap_or(&none));
        let steps: BTreeSet<u64> = c1.keys().chain(c2.keys()).copied().filter(|&s| s <= last).collect();
        let held = |s: u64| runs.iter().all(|r| r.held.contains(&(rank, s)));
        // The rank's communicators parted so far, at the steps before the selection or by a selected
        // step's read.
        let mut gone = BTreeSet::new();
        // Whether each run made a call of the rank at an earlier step.
        let mut rank_called = [false; 2];
        for step in steps.into_iter().filter(|&s| held(s)) {
            let [x, y] = [0, 1].map(|k| {
                let calls = &[c1, c2][k].get(&step).unwrap_or(&empty).calls;
                calls.iter().map(|&key| comms.key(k, rank, key)).collect::<Vec<_>>()
            });
            let cut =
                [0, 1].map(|k| ring_may_have_cut(runs[k].ring.get(&rank).copied(), step, rank_called[k]));
            let p = pair_step([&x, &y], cut, |comm| gone.contains(&comm));
            for k in (0..2).filter(|&k| ![&x, &y][k].is_empty()) {
                rank_called[k] = true;
                if step < first {
                    called[k].insert(rank);
                }
            }
            if !p.parted.is_empty() && step >= first && !selected.contains(&step) {
                return None;
            }
            for (comm, firsts) in p.parted {
                gone.insert(comm);
                if step >= first {
                    continue;
                }
                for (run, at) in firsts.into_iter().enumerate() {
                    let Some(key) = at.map(|n| [&x, &y][run][n]) else { continue };
                    parted.push(PartedAt { run, rank, step, comm, op: key.op, seq: key.seq });
                }
            }
        }
    }
    Some((parted, called))
}

/// Whether no counter's sequence numbers of one step (over every rank) reach into another step's:
/// then each call's members (the same sequence number on other ranks) are at the call's own step.
fn each_call_at_one_step(calls: &RankCalls) -> bool {
    let mut spans: BTreeMap<SeqCounter, BTreeMap<u64, (u64, u64)>> = BTreeMap::new();
    for (&step, at) in calls.values().flat_map(|steps| steps.iter()) {
        for &(counter, lo, hi) in &at.seqs {
            let span = spans.entry(counter).or_default().entry(step).or_insert((lo, hi));
            *span = (span.0.min(lo), span.1.max(hi));
        }
    }
    spans.values().all(|by_step| {
        let mut sorted: Vec<(u64, u64)> = by_step.values().copied().collect();
        sorted.sort_unstable();
        sorted.windows(2).all(|w| w[0].1 < w[1].0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::CallKey;
    use accutrace_formats::capture::CollectiveOp::{self, AllGather, AllReduce, Broadcast};
    use std::ops::RangeInclusive;

    /// The key of a call on the one communicator.
    fn key(op: CollectiveOp, seq: u64) -> CallKey {
        CallKey { comm: (4, 0, 0), op, seq }
    }

    /// A rank's calls: per step, (function, sequence number) on the one communicator.
    fn rank(steps: &[(u64, &[(CollectiveOp, u64)])]) -> BTreeMap<u64, StepCalls> {
        let mut by_step = BTreeMap::new();
        for &(step, calls) in steps {
            let at: &mut StepCalls = by_step.entry(step).or_default();
            calls.iter().for_each(|&(op, seq)| at.push_key(key(op, seq)));
        }
        by_step
    }

    /// Steps 0-5 of a healthy run: three calls a step.
    fn healthy() -> BTreeMap<u64, StepCalls> {
        let steps: Vec<(u64, Vec<(CollectiveOp, u64)>)> = (0..6)
            .map(|s| (s, vec![(AllReduce, 3 * s + 1), (AllReduce, 3 * s + 2), (AllGather, 3 * s + 3)]))
            .collect();
        let borrowed: Vec<(u64, &[(CollectiveOp, u64)])> = steps.iter().map(|(s, c)| (*s, &c[..])).collect();
        rank(&borrowed)
    }

    /// The ranks parted before `selected` of runs whose ranks `runs` each hold `held` steps, the ring of
    /// each leaving it `ring` (rank, first step).
    fn parted(
        runs: [&[(u32, &BTreeMap<u64, StepCalls>)]; 2],
        held: [RangeInclusive<u64>; 2],
        ring: [&[(u32, u64)]; 2],
        selected: &[u64],
    ) -> Option<Vec<u32>> {
        let census = |k: usize| {
            let calls: RankCalls = runs[k].iter().copied().collect();
            let held = runs[k].iter().flat_map(|&(r, _)| held[k].clone().map(move |s| (r, s))).collect();
            Census { calls, held, ring: ring[k].iter().copied().collect() }
        };
        let selected = selected.iter().copied().collect();
        let (found, _) = parted_before(&[census(0), census(1)], &selected, &CommTags::default())?;
        let ranks: BTreeSet<u32> = found.iter().map(|p| p.rank).collect();
        Some(ranks.into_iter().collect())
    }

    /// Runs whose calls are the same before and at the selection start it with nothing parted.
    #[test]
    fn the_same_calls_leave_nothing_parted() {
        let h = healthy();
        let both = [(0, &h), (1, &h)];
        assert_eq!(parted([&both, &both], [0..=5, 0..=5], [&[], &[]], &[4]), Some(vec![]));
        assert_eq!(parted([&both, &both], [0..=5, 0..=5], [&[], &[]], &[3, 4, 5]), Some(vec![]));
    }

    /// An earlier step whose calls differ in number or order parts the rank, whichever run made the call
    /// the other lacks.
    #[test]
    fn an_earlier_call_without_its_counterpart_parts_its_rank() {
        let h = healthy();
        let mut extra = healthy();
        extra.get_mut(&1).unwrap().push_key(key(Broadcast, 99));
        let mut reordered = healthy();
        reordered
            .insert(0, rank(&[(0, &[(AllReduce, 2), (AllReduce, 1), (AllGather, 3)])]).remove(&0).unwrap());
        let mut fewer = healthy();
        fewer.get_mut(&2).unwrap().calls.pop();
        let run1 = [(0, &h), (1, &h), (2, &h), (3, &fewer)];
        let run2 = [(0, &extra), (1, &h), (2, &reordered), (3, &h)];
        let all = [0..=5, 0..=5];
        assert_eq!(parted([&run1, &run2], all.clone(), [&[], &[]], &[4, 5]), Some(vec![0, 2, 3]));
        assert_eq!(parted([&run2, &run1], all, [&[], &[]], &[4, 5]), Some(vec![0, 2, 3]));
    }

    /// Steps only one run holds are a gap, whatever calls they hold; at the first step a ring left, the
    /// other run's calls before the ring's first one are the gap too (a call after it without its
    /// counterpart still parts the rank).
    #[test]
    fn steps_a_ring_deleted_are_a_gap() {
        let full = healthy();
        // The ring kept steps 2-5, the first without its first call.
        let mut ring = healthy();
        (0..2).for_each(|s| _ = ring.remove(&s));
        ring.get_mut(&2).unwrap().calls.remove(0);
        let [r, f] = [[(0, &ring)], [(0, &full)]];
        let cut: &[(u32, u64)] = &[(0, 2)];
        assert_eq!(parted([&r, &f], [2..=5, 0..=5], [cut, &[]], &[4]), Some(vec![]));
        assert_eq!(parted([&f, &r], [0..=5, 2..=5], [&[], cut], &[4]), Some(vec![]));
        // Not a ring's: the call it lacks parts the rank.
        assert_eq!(parted([&r, &f], [2..=5, 0..=5], [&[], &[]], &[4]), Some(vec![0]));
        let mut lost_later = ring.clone();
        lost_later.get_mut(&2).unwrap().calls.pop();
        assert_eq!(parted([&[(0, &lost_later)], &f], [2..=5, 0..=5], [cut, &[]], &[4]), Some(vec![0]));
    }

    /// A step the selection leaves out between its first and last steps whose calls do not pair leaves the
    /// pairing unknown (its window is not read); one the selection holds parts the rank when read, and a
    /// step past the selection is not looked at.
    #[test]
    fn other_calls_between_the_selected_steps_leave_it_unknown() {
        let h = healthy();
        let mut extra = healthy();
        extra.get_mut(&3).unwrap().push_key(key(Broadcast, 99));
        let (run1, run2) = ([(0, &h)], [(0, &extra)]);
        let all = || [0..=5, 0..=5];
        assert_eq!(parted([&run1, &run2], all(), [&[], &[]], &[2, 4]), None);
        assert_eq!(parted([&run1, &run2], all(), [&[], &[]], &[2, 3, 5]), Some(vec![]));
        assert_eq!(parted([&run1, &run2], all(), [&[], &[]], &[2]), Some(vec![]));
        assert_eq!(parted([&run1, &run2], all(), [&[], &[]], &[4, 5]), Some(vec![0]));
    }

    /// A communicator's sequence numbers of one step reaching into another step's (a call placed in one
    /// step on a rank and in another on the next) make the census's facts unusable.
    #[test]
    fn a_call_at_two_steps_is_refused() {
        let h = healthy();
        let calls: RankCalls = [(0, &h), (1, &h)].into_iter().collect();
        assert!(each_call_at_one_step(&calls));
        let shifted = rank(&[(0, &[(AllReduce, 1), (AllReduce, 2)]), (1, &[(AllGather, 3), (AllReduce, 4)])]);
        let calls: RankCalls = [(0, &h), (1, &shifted)].into_iter().collect();
        assert!(!each_call_at_one_step(&calls));
    }
}
