//! `diff --step` of two long captures (#18): only the selected steps' windows are read, where the census
//! tells how the HCCL calls of the steps before them pair. The rest of diff's answer is the selection's
//! own (first differences, census rows, counts, unmatched tensors and the configuration check keep to the
//! filter; the shortfalls, the ring's deletions and a mix of runs are the census's). The calls are not: a
//! rank's calls pair in order over every window read before (`calls`), so a step's calls pair as the
//! steps before it leave them.

use super::calls::CallPairing;
use crate::sources::capture::step_calls::StepCalls;
use crate::sources::capture::windows::StepWindows;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;

/// Each rank's calls, step by step ([`StepWindows::calls_by_step`]).
type RankCalls<'a> = BTreeMap<u32, &'a BTreeMap<u64, StepCalls>>;

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
    let (&first, &last) = (steps.iter().min()?, steps.iter().max()?);
    let calls = [a.calls_by_step()?, b.calls_by_step()?];
    // A call's members are counted over the window it is read in: each must be read with the call.
    if !each_call_at_one_step(&calls[0]) {
        return None;
    }
    parted_before(a.windows(), [&calls[0], &calls[1]], first, last).map(CallPairing::parted)
}

/// The ranks whose calls stopped pairing in the `windows` before the one holding `first` (as
/// `collective_differences` parts them: window by window, a rank that run 1 made calls on in a window
/// parts when the two runs' calls there are not the same sequence). `None` unless, on every rank left,
/// the steps of the first selected window before `first` hold the same calls in both runs, and so does
/// each step from `first` to `last`: then the selected steps' calls pair alike however their windows are
/// made.
fn parted_before(
    windows: &[RangeInclusive<u64>],
    calls: [&RankCalls; 2],
    first: u64,
    last: u64,
) -> Option<BTreeSet<u32>> {
    let none = BTreeMap::new();
    let ranks: BTreeSet<u32> = calls.iter().flat_map(|c| c.keys().copied()).collect();
    let mut parted = BTreeSet::new();
    for rank in ranks {
        let [c1, c2] = calls.map(|c| c.get(&rank).copied().unwrap_or(&none));
        let of = |steps: RangeInclusive<u64>| [c1, c2].map(|c| in_order(c.range(steps.clone())));
        for window in windows.iter().take_while(|w| *w.start() < first) {
            if *window.end() < first {
                let [w1, w2] = of(window.clone());
                if w1.count > 0 && !w1.same_calls(&w2) {
                    parted.insert(rank);
                    break;
                }
            } else {
                let [p1, p2] = of(*window.start()..=first - 1);
                if !p1.same_calls(&p2) {
                    return None;
                }
            }
        }
        if parted.contains(&rank) {
            continue;
        }
        let empty = StepCalls::default();
        let mut selected = c1.range(first..=last).chain(c2.range(first..=last)).map(|(&s, _)| s);
        if selected.any(|s| !c1.get(&s).unwrap_or(&empty).same_calls(c2.get(&s).unwrap_or(&empty))) {
            return None;
        }
    }
    Some(parted)
}

/// The calls of consecutive steps, one after another.
fn in_order<'a>(steps: impl Iterator<Item = (&'a u64, &'a StepCalls)>) -> StepCalls {
    let mut all = StepCalls::default();
    steps.for_each(|(_, calls)| all.then(calls));
    all
}

/// Whether no communicator's sequence numbers of one step (over every rank) reach into another step's:
/// then each call's members (the same sequence number on other ranks) are at the call's own step.
fn each_call_at_one_step(calls: &RankCalls) -> bool {
    let mut spans: BTreeMap<u64, BTreeMap<u64, (u64, u64)>> = BTreeMap::new();
    for (&step, at) in calls.values().flat_map(|steps| steps.iter()) {
        for &(comm, lo, hi) in &at.seqs {
            let span = spans.entry(comm).or_default().entry(step).or_insert((lo, hi));
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
    use accutrace_formats::capture::CollectiveOp::{self, AllGather, AllReduce, Broadcast};

    /// A rank's calls: per step, (function, sequence number) on the one communicator.
    fn rank(steps: &[(u64, &[(CollectiveOp, u64)])]) -> BTreeMap<u64, StepCalls> {
        let mut by_step = BTreeMap::new();
        for &(step, calls) in steps {
            let at: &mut StepCalls = by_step.entry(step).or_default();
            calls.iter().for_each(|&(op, seq)| at.push(op, seq, "world"));
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

    fn parted(
        windows: &[RangeInclusive<u64>],
        runs: [&[(u32, &BTreeMap<u64, StepCalls>)]; 2],
        steps: RangeInclusive<u64>,
    ) -> Option<Vec<u32>> {
        let [a, b]: [RankCalls; 2] = runs.map(|r| r.iter().copied().collect());
        let found = parted_before(windows, [&a, &b], *steps.start(), *steps.end())?;
        Some(found.into_iter().collect())
    }

    /// Runs whose calls are the same before and at the selection start it with nothing parted, whatever
    /// the windows.
    #[test]
    fn the_same_calls_leave_nothing_parted() {
        let h = healthy();
        let both = [(0, &h), (1, &h)];
        assert_eq!(parted(&[0..=1, 2..=3, 4..=5], [&both, &both], 4..=4), Some(vec![]));
        assert_eq!(parted(&[0..=5], [&both, &both], 3..=5), Some(vec![]));
    }

    /// An earlier window whose calls differ in number or order parts the rank, as reading it would; a
    /// window in which run 1 made no call on the rank does not.
    #[test]
    fn an_earlier_window_of_other_calls_parts_its_rank() {
        let h = healthy();
        let mut extra = healthy();
        extra.get_mut(&1).unwrap().push(Broadcast, 99, "world");
        let swapped = rank(&[(0, &[(AllReduce, 2), (AllReduce, 1), (AllGather, 3)])]);
        let mut reordered = healthy();
        reordered.insert(0, swapped.into_values().next().unwrap());
        let windows = [0..=1, 2..=3, 4..=5];
        let run1 = [(0, &h), (1, &h), (2, &h)];
        let run2 = [(0, &extra), (1, &h), (2, &reordered)];
        assert_eq!(parted(&windows, [&run1, &run2], 4..=5), Some(vec![0, 2]));
        // Run 1 without calls on rank 3 in the first window: the rank is not looked at there.
        let late = rank(&[(2, &[(AllReduce, 7)]), (4, &[(AllReduce, 13)])]);
        let early = rank(&[(0, &[(AllReduce, 1)]), (2, &[(AllReduce, 7)]), (4, &[(AllReduce, 13)])]);
        assert_eq!(parted(&windows, [&[(3, &late)], &[(3, &early)]], 4..=4), Some(vec![]));
        // The other way round, run 1's call in a window run 2 lacks parts it.
        assert_eq!(parted(&windows, [&[(3, &early)], &[(3, &late)]], 4..=4), Some(vec![3]));
    }

    /// Calls that differ in the selected window's steps before the selection, or at a selected step, on a
    /// rank still paired leave the pairing unknown: it would depend on how the windows are made.
    #[test]
    fn other_calls_inside_the_selected_window_leave_it_unknown() {
        let h = healthy();
        let mut extra = healthy();
        extra.get_mut(&3).unwrap().push(Broadcast, 99, "world");
        let run1 = [(0, &h)];
        let run2 = [(0, &extra)];
        assert_eq!(parted(&[0..=1, 2..=5], [&run1, &run2], 4..=4), None);
        assert_eq!(parted(&[0..=1, 2..=5], [&run1, &run2], 2..=3), None);
        // A step past the selection is not looked at; nor is one in an earlier window (it parts the rank).
        assert_eq!(parted(&[0..=1, 2..=5], [&run1, &run2], 2..=2), Some(vec![]));
        assert_eq!(parted(&[0..=3, 4..=5], [&run1, &run2], 4..=5), Some(vec![0]));
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
