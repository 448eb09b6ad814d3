//! HCCL calls whose results differ between the runs, from the capture's collective records, and where
//! they come among each step's first differences.
//!
//! How two runs' calls pair (one rule for the whole runs, any windows of their steps and a selection of
//! steps): each rank's calls are compared only at the steps both runs hold on that rank (steps a ring
//! deleted, or a shorter run never made, are a gap the unmatched tensors of those steps report, not a
//! difference). A rank's calls are paired communicator by communicator. Each run names its own
//! communicators, so a communicator is known across runs by what every call's record carries, its size
//! and the rank's place in it (a pipeline's job-wide communicator of 4 and its stage's group of 2), and
//! where the rank has several of one size and place, by its members (`comms`). Sequence numbers count per
//! communicator, so two communicators' calls may share a function and number; their order against each
//! other may change from run to run. Step by step, in call order, a communicator's call pairs with the
//! other run's call in the same place among that communicator's calls when both are the same function
//! and sequence number (a receive whose send is not in the data has no step: it pairs among the calls of
//! the step of the calls after it). The first call either run made without that counterpart parts the
//! communicator on that rank: it is reported as a tensor only that run holds, and the communicator's later
//! calls on the rank are not paired (the rank's other communicators' still are). A ring that deleted a
//! rank's oldest records may have cut into its calls: at each step from the first its ops are kept at up to
//! that of the rank's first kept call (a call's record is written when the call is made, an op's when its
//! dump arrives, so a step's late ops may outlive the next step's first calls), the other run's calls
//! before the one equal to the ring's first call (the same communicator, function and sequence number)
//! are the gap too.

use super::comms::CommTags;
use super::report::{FirstDifference, UnmatchedTensor};
use super::step_pairing::pair_step;
use super::values::TensorDiff;
use crate::filter::Filter;
use crate::index::{Index, RingDeleted};
use crate::sources::capture::step_calls::{CallKey, CommPlace};
use accutrace_formats::capture::{CollectiveInfo, CollectiveOp};
use std::collections::{BTreeMap, BTreeSet};

/// An HCCL call whose receive buffer differs between the runs, as the capture's collective records show it.
pub(super) struct CallDifference {
    step: u64,
    rank: u32,
    /// Host µs the call began in run 1.
    start_us: u64,
    first: FirstDifference,
}

/// The communicators of each rank ([`CommPlace`]) whose calls stopped pairing in the parts (windows of
/// steps) read so far: a communicator's calls on a rank part at the first call of either run without its
/// counterpart, and every later call is out of place. Each step's calls pair within the step, so the
/// parts' bounds change nothing.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CallPairing {
    parted: BTreeSet<(u32, CommPlace)>,
    /// Per run, the ranks with a call in the parts read so far: past its first call, a rank's ring cut
    /// nothing ([`ring_may_have_cut`]).
    called: [BTreeSet<u32>; 2],
    /// The calls that parted ranks in steps not read (before a selection), yet to be listed.
    unread: Vec<PartedAt>,
}

impl CallPairing {
    /// The pairing with ranks parted already by the calls `unread` (at steps whose windows are not read).
    /// `called`: per run, the ranks with a call at those steps.
    pub(super) fn parted(unread: Vec<PartedAt>, called: [BTreeSet<u32>; 2]) -> CallPairing {
        CallPairing { parted: unread.iter().map(|p| (p.rank, p.comm)).collect(), called, unread }
    }

    /// The calls that parted ranks at steps not read, once.
    pub(super) fn take_unread(&mut self) -> Vec<PartedAt> {
        std::mem::take(&mut self.unread)
    }
}

/// A call of run `run` (0 or 1) without its counterpart, where its communicator parted on its rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PartedAt {
    pub run: usize,
    pub rank: u32,
    pub step: u64,
    pub comm: CommPlace,
    pub op: CollectiveOp,
    pub seq: u64,
}

impl PartedAt {
    /// The call as a tensor only its run holds, where `filter` keeps its rank and function and a step
    /// from its own on (the calls of those steps on its communicator go unpaired: said even under a later
    /// `--step`, never a false all-clear).
    pub fn listed(&self, filter: &Filter) -> Option<UnpairedCall> {
        let name = self.op.api_name();
        let later = filter.steps.iter().copied().filter(|&s| s >= self.step).min();
        let kept_step = if filter.steps.is_empty() { Some(self.step) } else { later };
        if !kept_step.is_some_and(|step| filter.keeps_at(name, step, self.rank)) {
            return None;
        }
        let tensor = format!(
            "{name} #{} (an HCCL call without its counterpart in run{}: the rank's later calls on its communicator are not paired)",
            self.seq,
            2 - self.run
        );
        let run = ["run1", "run2"][self.run];
        let (step, rank) = (self.step, self.rank);
        Some(UnpairedCall {
            run: self.run,
            tensor: UnmatchedTensor { run, tensor, step, rank, hccl_call: true },
        })
    }
}

/// Per rank, the first step a run's ring left it, which may have lost its first calls ([`RingDeleted`]).
pub(super) type RingFirsts = BTreeMap<u32, u64>;

/// Whether a run's ring may have deleted some of a rank's calls at `step`: the step is at or after the
/// first the ring left the rank (`ring_first`, its first kept op's) and the run kept no call of the rank
/// before it (`called_before`). A rank without a ring's deletion lost nothing.
pub(super) fn ring_may_have_cut(ring_first: Option<u64>, step: u64, called_before: bool) -> bool {
    ring_first.is_some_and(|first| step >= first) && !called_before
}

/// [`RingFirsts`] of what a run's ring deleted.
pub(super) fn ring_firsts(deleted: &[RingDeleted]) -> RingFirsts {
    let mut firsts = RingFirsts::new();
    for (rank, step) in deleted.iter().filter_map(|d| Some((d.rank, d.first_step?))) {
        let first = firsts.entry(rank).or_insert(step);
        *first = (*first).min(step);
    }
    firsts
}

/// A call of one run without its counterpart in the other, where its rank parted: `run` is 0 or 1.
pub(super) struct UnpairedCall {
    pub run: usize,
    pub tensor: UnmatchedTensor,
}

/// A call of one run and its step.
type Call<'a> = (&'a CollectiveInfo, Option<u64>);

/// A rank's calls of one run that the pairing looks at, in call order.
type RankCalls<'a> = Vec<Call<'a>>;

/// A communicator parted on a rank, and the first call of each run there without its counterpart.
type Parting<'a> = (CommPlace, [Option<Call<'a>>; 2]);

/// The HCCL calls of each rank, paired step by step (see the module's text), whose receive buffers'
/// content hashes differ, and the calls each run made without a counterpart where a communicator parted. A
/// call is nondeterministic itself (a reduction in a varying order) when every member's send buffer agrees
/// between the runs (`members_of`); when some member's differs (on this rank or another), the call only
/// propagates that difference, and when a member is not in the data, it is unknown. `pairing`: where the
/// parts before this one left the pairing; `rings`: each run's [`RingFirsts`]; `comms`: which
/// communicator is which (a call on communicators that could not be told apart is `unknown`, and says
/// nothing of its members).
pub(super) fn collective_differences(
    i1: &Index,
    i2: &Index,
    filter: &Filter,
    pairing: &mut CallPairing,
    rings: [&RingFirsts; 2],
    comms: &CommTags,
) -> (Vec<CallDifference>, Vec<UnpairedCall>) {
    type Info = CollectiveInfo;
    // Where only flagged ops were dumped, their steps say little of the calls': those pair in order.
    let sparse = i1.only_overflowing_ops || i2.only_overflowing_ops;
    let [steps1, steps2] = [i1.collective_steps(), i2.collective_steps()];
    let held = [held_steps(i1), held_steps(i2)];
    let ranks: BTreeSet<u32> = i1.collectives.iter().chain(&i2.collectives).map(|c| c.rank).collect();
    let mut pairs: Vec<(u32, &Info, &Info, Option<u64>, bool)> = Vec::new();
    let mut unpaired = Vec::new();
    for rank in ranks {
        let none = BTreeSet::new();
        let [h1, h2] = held.each_ref().map(|h| h.get(&rank).unwrap_or(&none));
        // A call no op places (a rank without ops) is at no step either run lacks.
        let both = |step: &Option<u64>| sparse || step.is_none_or(|s| h1.contains(&s) && h2.contains(&s));
        let calls = [rank_calls(i1, &steps1, rank, both), rank_calls(i2, &steps2, rank, both)];
        let cut = [0, 1].map(|k| rings[k].get(&rank).copied());
        let (paired, parted) = pair_rank(&calls, sparse, cut, (rank, comms), pairing);
        pairs.extend(paired.into_iter().map(|([a, b], untold)| (rank, a.0, b.0, a.1, untold)));
        for (comm, first) in parted {
            for (run, (call, step)) in first.iter().enumerate().filter_map(|(k, c)| Some((k, (*c)?))) {
                // A call no op places cannot be named by its step: its communicator's parting goes unsaid.
                let Some(step) = step else { continue };
                let at = PartedAt { run, rank, step, comm, op: call.op, seq: call.seq };
                unpaired.extend(at.listed(filter));
            }
        }
    }
    // Per call of run 1's communicators: the members whose send buffer differs, and whether any is unknown.
    let mut members: BTreeMap<Members, (Vec<u32>, bool)> = BTreeMap::new();
    let mut seen: BTreeMap<Members, u32> = BTreeMap::new();
    for &(rank, a, b, _, untold) in &pairs {
        *seen.entry(members_of(a)).or_default() += 1;
        let entry = members.entry(members_of(a)).or_default();
        if untold {
            // Perhaps not its counterpart: what its buffers say of the call's members is unknown.
            entry.1 = true;
            continue;
        }
        match (&a.input, &b.input) {
            (Some(x), Some(y)) if x.content_hash != y.content_hash => entry.0.push(rank),
            (Some(_), Some(_)) => {}
            _ => entry.1 |= !a.op.is_point_to_point() || a.input.is_some() != b.input.is_some(),
        }
    }
    // A call some member of which is not in the data (one node's capture) cannot be cleared.
    for &(_, a, _, _, _) in &pairs {
        let key = members_of(a);
        let all = if a.op.is_point_to_point() { 2 } else { a.comm_size };
        if seen[&key] < all {
            members.entry(key).or_default().1 = true;
        }
    }
    let mut found = Vec::new();
    for &(rank, a, b, step, untold) in &pairs {
        let (Some(out_a), Some(out_b)) = (&a.output, &b.output) else { continue };
        if out_a.content_hash == out_b.content_hash {
            continue;
        }
        // A first difference needs a step: a call no op places (an overflow-detection capture) is left out.
        let Some(step) = step else { continue };
        let name = a.op.api_name();
        if !filter.keeps_at(name, step, rank) {
            continue;
        }
        let call = format!("{name} #{}", a.seq);
        let (differ, unknown) = &members[&members_of(a)];
        let differ: &[u32] = if untold { &[] } else { differ };
        let verdict = if untold {
            "unknown"
        } else if !differ.is_empty() {
            "propagating"
        } else if *unknown {
            "unknown"
        } else {
            "nondeterministic"
        };
        let (sa, sb) = (&out_a.stats, &out_b.stats);
        let stats_delta = [(sa.min, sb.min), (sa.max, sb.max), (sa.mean, sb.mean), (sa.l2_norm, sb.l2_norm)]
            .iter()
            .map(|(p, q)| (p - q).abs())
            .filter(|d| !d.is_nan())
            .fold(0.0, f64::max);
        found.push(CallDifference {
            step,
            rank,
            start_us: a.start_us,
            first: FirstDifference {
                step,
                rank,
                op: call.clone(),
                op_type: name.to_string(),
                verdict,
                differing_inputs: differ.iter().map(|r| format!("{call}.input.0 (rank {r})")).collect(),
                output: TensorDiff {
                    elements: sa.count,
                    stats_delta: Some(stats_delta),
                    ..Default::default()
                },
                // What was sent agreed, what arrived did not.
                in_transit: verdict == "nondeterministic" && a.op == CollectiveOp::Recv,
            },
        });
    }
    (found, unpaired)
}

/// The pairs of one rank's calls of each run, step by step (one sequence where `sparse`), each with
/// whether its communicator is one of some that could not be told apart, and where its communicators
/// parted: the first call of each run without its counterpart there, if it made one. `cut[k]`: the first
/// step run `k`'s ring left, which may have lost its first calls; `comms`: the rank and which of its
/// communicators is which; `pairing`: the (rank, communicator)s parted before, which this rank's partings
/// join, and the ranks each run made calls of before.
fn pair_rank<'a>(
    calls: &[RankCalls<'a>; 2],
    sparse: bool,
    cut: [Option<u64>; 2],
    (rank, comms): (u32, &CommTags),
    pairing: &mut CallPairing,
) -> (Vec<([Call<'a>; 2], bool)>, Vec<Parting<'a>>) {
    let CallPairing { parted, called, .. } = pairing;
    let groups = calls.each_ref().map(|run| if sparse { vec![None; run.len()] } else { placed_steps(run) });
    let (mut at, mut pairs, mut partings) = ([0usize; 2], Vec::new(), Vec::new());
    loop {
        let next = [0, 1].map(|k| groups[k].get(at[k]).copied());
        let Some(step) = next.into_iter().flatten().min() else { return (pairs, partings) };
        let part = [0, 1].map(|k| {
            let rest = &calls[k][at[k]..];
            &rest[..groups[k][at[k]..].iter().take_while(|&&g| g == step).count()]
        });
        let key = |k: usize, c: &CollectiveInfo| comms.key(k, rank, CallKey::of(c));
        let keys = [0, 1].map(|k| part[k].iter().map(|(c, _)| key(k, c)).collect::<Vec<_>>());
        let cut =
            [0, 1].map(|k| step.is_some_and(|s| ring_may_have_cut(cut[k], s, called[k].contains(&rank))));
        let p = pair_step([&keys[0], &keys[1]], cut, |comm| parted.contains(&(rank, comm)));
        for k in (0..2).filter(|&k| !part[k].is_empty()) {
            called[k].insert(rank);
        }
        // Each call at the step it pairs at.
        let placed = |k: usize, n: usize| (part[k][n].0, step.or(part[k][n].1));
        let untold = |a: usize| CommTags::is_untold(keys[0][a].comm);
        pairs.extend(p.pairs.iter().map(|&[a, b]| ([placed(0, a), placed(1, b)], untold(a))));
        for (comm, first) in p.parted {
            parted.insert((rank, comm));
            partings.push((comm, [0, 1].map(|k| first[k].map(|n| placed(k, n)))));
        }
        at = [0, 1].map(|k| at[k] + part[k].len());
    }
}

/// The step each of a rank's calls pairs at: its own, and for a call no step holds (a receive whose send
/// is not in the data, made between the ops of two steps) that of the next call with one, the step it
/// was received for (a pipeline's later stage receives a step's input before that step's ops), else that
/// of the call before it.
fn placed_steps(calls: &[Call]) -> Vec<Option<u64>> {
    let mut next = None;
    let mut steps: Vec<Option<u64>> =
        calls.iter().rev().map(|c| c.1.or(next).inspect(|&s| next = Some(s))).collect();
    steps.reverse();
    let mut last = None;
    steps.iter_mut().for_each(|s| *s = s.or(last).inspect(|&s| last = Some(s)));
    steps
}

/// `rank`'s calls in `index` (`steps`: each call's) at the steps `keep` keeps.
fn rank_calls<'a>(
    index: &'a Index,
    steps: &[Option<u64>],
    rank: u32,
    keep: impl Fn(&Option<u64>) -> bool,
) -> RankCalls<'a> {
    let calls = index.collectives.iter().zip(steps).filter(|(c, s)| c.rank == rank && keep(s));
    calls.map(|(c, s)| (&c.info, *s)).collect()
}

/// The steps each rank's ops are at.
fn held_steps(index: &Index) -> BTreeMap<u32, BTreeSet<u64>> {
    let mut held: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
    for op in &index.ops {
        held.entry(op.rank).or_default().insert(op.step);
    }
    held
}

/// Which call of its run a call is a member of: a collective is one of its communicator's, numbered by its
/// sequence; a send and the receive it meets are one of their own (point-to-point calls count per peer
/// and direction: `HcclSend #4` from rank 0 to 2 is not the communicator's `HcclAllReduce #4`).
type Members<'a> = (&'a str, Option<(u32, u32)>, u64);

fn members_of(call: &CollectiveInfo) -> Members<'_> {
    let peer = call.peer.unwrap_or(u32::MAX);
    let link = match call.op {
        CollectiveOp::Send => Some((call.comm_rank, peer)),
        CollectiveOp::Recv => Some((peer, call.comm_rank)),
        _ => None,
    };
    (call.comm.as_str(), link, call.seq)
}

/// The first difference of each step and rank with the HCCL calls taken into account: a differing call
/// made before the first differing op was launched (or in a step and rank where no op differs) is the
/// first difference there.
pub(super) fn with_collectives(
    ops: Vec<(FirstDifference, Option<u64>)>,
    calls: &[CallDifference],
) -> Vec<FirstDifference> {
    let mut by_place: BTreeMap<(u64, u32), (FirstDifference, Option<u64>)> =
        ops.into_iter().map(|(f, t)| ((f.step, f.rank), (f, t))).collect();
    for c in calls {
        // An op without a launch time cannot be ordered against the call: the op stays.
        let later_op =
            |(_, launched): &(FirstDifference, Option<u64>)| launched.is_some_and(|t| c.start_us < t);
        if by_place.get(&(c.step, c.rank)).is_none_or(later_op) {
            by_place.insert((c.step, c.rank), (c.first.clone(), Some(c.start_us)));
        }
    }
    let mut found: Vec<FirstDifference> = by_place.into_values().map(|(f, _)| f).collect();
    found.sort_by_key(|f| (f.step, f.rank));
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::capture::step_calls::comm_uses;
    use CollectiveOp::{AllReduce, Recv, Send};

    /// A call of rank 1 on the world's communicator of 4 (`peer`: of a send or receive).
    fn call(op: CollectiveOp, seq: u64, peer: Option<u32>) -> CollectiveInfo {
        CollectiveInfo {
            comm: "world".to_string(),
            comm_rank: 1,
            comm_size: 4,
            seq,
            op,
            count: 1,
            dtype: 0,
            reduce_op: None,
            peer,
            input: None,
            output: None,
            start_us: 0,
            end_us: 0,
            result: 0,
        }
    }

    /// A pipeline stage's calls of one step: its send forward, the receive of the gradients, the
    /// all-reduce.
    fn step_calls(step: u64) -> Vec<(CollectiveInfo, Option<u64>)> {
        let seq = step;
        vec![
            (call(Send, seq, Some(3)), Some(step)),
            (call(Recv, seq, Some(3)), Some(step)),
            (call(AllReduce, 10 + seq, None), Some(step)),
        ]
    }

    /// The pairs and partings of rank 1's calls, run 1's ring having left the rank at step 3 (its first
    /// kept op).
    fn paired(
        run1: &[(CollectiveInfo, Option<u64>)],
        run2: &[(CollectiveInfo, Option<u64>)],
    ) -> (usize, usize) {
        let calls = [run1, run2].map(|run| run.iter().map(|(c, s)| (c, *s)).collect::<RankCalls>());
        let uses = [run1, run2].map(|run| comm_uses(run.iter().map(|(c, _)| (1, c))));
        let comms = CommTags::of([&uses[0], &uses[1]]);
        let (pairs, partings) =
            pair_rank(&calls, false, [Some(3), None], (1, &comms), &mut CallPairing::default());
        (pairs.len(), partings.len())
    }

    /// A ring that kept a step's late ops but none of its calls and lost the next step's first call (a
    /// call's record is written when it is made, an op's when its dump arrives) cut into both steps' calls:
    /// the other run's calls before the ring's first kept one are the gap, not a parting. Past the ring's
    /// first kept call, a call missing is a parting again.
    #[test]
    fn a_ring_cuts_into_the_calls_up_to_its_first_kept_call() {
        let full: Vec<_> = (3..6).flat_map(step_calls).collect();
        // The ring kept step 3's last ops, and of step 4's calls the receive on.
        let ring: Vec<_> = full[4..].to_vec();
        assert_eq!(paired(&ring, &full), (5, 0));
        // The ring also lost step 5's send, after its first kept call: that parts the communicator.
        let mut lost_later = ring.clone();
        lost_later.remove(2);
        assert_eq!(paired(&lost_later, &full).1, 1);
    }

    /// The call that parted a rank is listed where the filter keeps its rank and function and a step from
    /// its own on, with its own step.
    #[test]
    fn a_parting_call_is_listed_where_it_leaves_kept_calls_unpaired() {
        let at = PartedAt { run: 1, rank: 2, step: 1, comm: (4, 2, 0), op: CollectiveOp::Broadcast, seq: 12 };
        let filter = |steps: &[u64], ranks: &[u32], ops: &[&str]| Filter {
            steps: steps.to_vec(),
            ranks: ranks.to_vec(),
            ops: ops.iter().map(|o| o.to_string()).collect(),
        };
        let listed = at.listed(&Filter::default()).expect("listed");
        assert_eq!(
            (listed.run, listed.tensor.run, listed.tensor.step, listed.tensor.rank),
            (1, "run2", 1, 2)
        );
        assert!(
            listed.tensor.tensor.starts_with("HcclBroadcast #12 (")
                && listed.tensor.tensor.contains("in run1")
        );
        for (steps, ranks, ops, kept) in [
            (&[4, 5][..], &[][..], &[][..], true),
            (&[1], &[2], &["HcclBroadcast"], true),
            (&[0], &[], &[], false),
            (&[4], &[3], &[], false),
            (&[], &[], &["HcclAllReduce"], false),
        ] {
            assert_eq!(at.listed(&filter(steps, ranks, ops)).is_some(), kept, "{steps:?} {ranks:?} {ops:?}");
        }
    }
}
