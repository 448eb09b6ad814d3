//! HCCL calls whose results differ between the runs, from the capture's collective records, and where
//! they come among each step's first differences.

use super::report::FirstDifference;
use super::values::TensorDiff;
use crate::filter::Filter;
use crate::index::Index;
use std::collections::{BTreeMap, BTreeSet};

/// An HCCL call whose receive buffer differs between the runs, as the capture's collective records show it.
pub(super) struct CallDifference {
    step: u64,
    rank: u32,
    /// Host µs the call began in run 1.
    start_us: u64,
    first: FirstDifference,
}

/// The ranks whose calls stopped pairing in the parts (windows of steps) read so far: the whole run pairs
/// a rank's calls in order until two differ, and every call after that is out of place. A part whose run 1
/// made more or fewer calls on a rank than run 2's parts the rank too: the whole run pairs the extra call
/// with one of the next part's, which differs.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CallPairing {
    parted: BTreeSet<u32>,
}

impl CallPairing {
    /// The pairing with `parted`'s ranks parted already.
    pub(super) fn parted(parted: BTreeSet<u32>) -> CallPairing {
        CallPairing { parted }
    }
}

/// The HCCL calls of each rank, paired by their place in the rank's call order (same function and
/// sequence number), whose receive buffers' content hashes differ. A call is nondeterministic itself (a
/// reduction in a varying order) when every member's send buffer agrees between the runs; when some
/// member's differs (on this rank or another), the call only propagates that difference. `pairing`: where
/// the parts before this one left the pairing.
pub(super) fn collective_differences(
    i1: &Index,
    i2: &Index,
    filter: &Filter,
    pairing: &mut CallPairing,
) -> Vec<CallDifference> {
    type Info = accutrace_formats::capture::CollectiveInfo;
    let steps1 = i1.collective_steps();
    let mut pairs: Vec<(u32, &Info, &Info, Option<u64>)> = Vec::new();
    for rank in i1.collectives.iter().map(|c| c.rank).collect::<BTreeSet<u32>>() {
        if pairing.parted.contains(&rank) {
            continue;
        }
        let calls2: Vec<&Info> = i2.collectives.iter().filter(|c| c.rank == rank).map(|c| &c.info).collect();
        let calls1: Vec<_> = i1.collectives.iter().zip(&steps1).filter(|(c, _)| c.rank == rank).collect();
        let mut parted = calls1.len() != calls2.len();
        for ((a, step), b) in calls1.into_iter().zip(calls2) {
            let a = &a.info;
            if (a.op, a.seq) != (b.op, b.seq) {
                parted = true;
                break;
            }
            pairs.push((rank, a, b, *step));
        }
        if parted {
            pairing.parted.insert(rank);
        }
    }
    // Per call of run 1's communicators: the members whose send buffer differs, and whether any is unknown.
    let mut members: BTreeMap<(&str, u64), (Vec<u32>, bool)> = BTreeMap::new();
    let mut seen: BTreeMap<(&str, u64), u32> = BTreeMap::new();
    for &(rank, a, b, _) in &pairs {
        *seen.entry((a.comm.as_str(), a.seq)).or_default() += 1;
        let entry = members.entry((a.comm.as_str(), a.seq)).or_default();
        match (&a.input, &b.input) {
            (Some(x), Some(y)) if x.content_hash != y.content_hash => entry.0.push(rank),
            (Some(_), Some(_)) => {}
            _ => entry.1 |= !a.op.is_point_to_point() || a.input.is_some() != b.input.is_some(),
        }
    }
    // A collective some member of which is not in the data (one node's capture) cannot be cleared.
    for &(_, a, _, _) in &pairs {
        let key = (a.comm.as_str(), a.seq);
        if !a.op.is_point_to_point() && seen[&key] < a.comm_size {
            members.entry(key).or_default().1 = true;
        }
    }
    let mut found = Vec::new();
    for &(rank, a, b, step) in &pairs {
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
        let (differ, unknown) = &members[&(a.comm.as_str(), a.seq)];
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
                verdict: if !differ.is_empty() {
                    "propagating"
                } else if *unknown {
                    "unknown"
                } else {
                    "nondeterministic"
                },
                differing_inputs: differ.iter().map(|r| format!("{call}.input.0 (rank {r})")).collect(),
                output: TensorDiff {
                    elements: sa.count,
                    stats_delta: Some(stats_delta),
                    ..Default::default()
                },
            },
        });
    }
    found
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
