//! How one step's HCCL calls of a rank pair between two runs, communicator by communicator (the rule is
//! in `calls`' module text). Both the fold, which reads the calls, and the census of `--step`, which keeps
//! a few words of each, pair with it.

use crate::sources::capture::step_calls::{CallKey, CommPlace};

/// How one step's calls of a rank pair: the leading calls of each run a ring's lost records leave without
/// counterpart (`skipped`, the gap), the pairs (each run's call by its place in the step), and per
/// communicator that parted here, the first call of each run without its counterpart.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct StepPairing {
    pub skipped: [usize; 2],
    pub pairs: Vec<[usize; 2]>,
    pub parted: Vec<(CommPlace, [Option<usize>; 2])>,
}

/// Pairs one step's calls of a rank, communicator by communicator, leaving out those of the communicators
/// `parted` says parted before. `cut[k]`: run `k` may have lost the step's first calls (its ring's first
/// step): the other run's calls before the first that is run `k`'s first call are skipped, all of them
/// when run `k` kept none. A ring loses a rank's oldest records whatever their communicator, so the cut
/// is one place in the rank's call order.
pub(super) fn pair_step(
    calls: [&[CallKey]; 2],
    cut: [bool; 2],
    parted: impl Fn(CommPlace) -> bool,
) -> StepPairing {
    let mut skipped = [0; 2];
    for k in 0..2 {
        let (kept, other) = (&calls[k][skipped[k]..], calls[1 - k]);
        if cut[k] {
            let at = kept.first().map(|first| other.iter().position(|c| c == first));
            skipped[1 - k] = match at {
                None => other.len(),
                Some(found) => found.unwrap_or(0),
            };
        }
    }
    let mut found = StepPairing { skipped, ..StepPairing::default() };
    // Communicators in the order the step first used them, the first run's then the second's.
    let mut comms: Vec<CommPlace> = Vec::new();
    for c in (0..2).flat_map(|k| &calls[k][skipped[k]..]) {
        if !comms.contains(&c.comm) && !parted(c.comm) {
            comms.push(c.comm);
        }
    }
    for comm in comms {
        let [a, b] = [0, 1].map(|k| {
            calls[k].iter().enumerate().skip(skipped[k]).filter(|(_, c)| c.comm == comm).collect::<Vec<_>>()
        });
        let paired = a.iter().zip(&b).take_while(|(x, y)| x.1 == y.1).count();
        found.pairs.extend(a.iter().zip(&b).take(paired).map(|(x, y)| [x.0, y.0]));
        if paired < a.len() || paired < b.len() {
            found.parted.push((comm, [a.get(paired).map(|x| x.0), b.get(paired).map(|y| y.0)]));
        }
    }
    found.pairs.sort_unstable();
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use accutrace_formats::capture::CollectiveOp::{self, AllGather, AllReduce};

    const WORLD: CommPlace = (4, 1, 0);
    const GROUP: CommPlace = (2, 1, 0);

    fn key(comm: CommPlace, op: CollectiveOp, seq: u64) -> CallKey {
        CallKey { comm, op, seq }
    }

    /// Calls of one communicator, `AllReduce #seq` each.
    fn on(comm: CommPlace, seqs: &[u64]) -> Vec<CallKey> {
        seqs.iter().map(|&s| key(comm, AllReduce, s)).collect()
    }

    fn pair(a: &[CallKey], b: &[CallKey], cut: [bool; 2]) -> StepPairing {
        pair_step([a, b], cut, |_| false)
    }

    /// Calls pair in order while they are the same; where a run may have lost a step's first calls, the
    /// other's calls before its first one are skipped (all of them when it kept none), and a first call
    /// the other lacks skips nothing.
    #[test]
    fn a_step_pairs_in_order_past_what_a_ring_lost() {
        let full = on(WORLD, &[1, 2, 3]);
        let p = pair(&full, &full, [false; 2]);
        assert_eq!((p.skipped, p.pairs.len(), p.parted.len()), ([0, 0], 3, 0));
        let p = pair(&on(WORLD, &[1, 3]), &full, [false; 2]);
        assert_eq!((p.pairs.len(), &p.parted[..]), (1, &[(WORLD, [Some(1), Some(1)])][..]));
        let p = pair(&on(WORLD, &[2, 3]), &full, [true, false]);
        assert_eq!((p.skipped, p.pairs, p.parted), ([0, 1], vec![[0, 1], [1, 2]], vec![]));
        let p = pair(&full, &on(WORLD, &[3]), [false, true]);
        assert_eq!((p.skipped, p.pairs, p.parted), ([2, 0], vec![[2, 0]], vec![]));
        let p = pair(&[], &full, [true, false]);
        assert!(p.parted.is_empty() && p.pairs.is_empty(), "{p:?}");
        let p = pair(&on(WORLD, &[4, 3]), &full, [true, false]);
        assert_eq!((p.skipped, p.pairs.len(), p.parted.len()), ([0, 0], 0, 1));
        // Cut short after its first call: the call it lacks later is no gap.
        let p = pair(&on(WORLD, &[2]), &full, [true, false]);
        assert_eq!(p.parted, [(WORLD, [None, Some(2)])]);
    }

    /// Each communicator's calls pair among themselves: calls of one function and sequence number on two
    /// communicators do not pair crosswise, the order of two communicators' calls does not matter, and a
    /// call one communicator lacks parts that communicator only. A communicator parted before is left out.
    #[test]
    fn each_communicator_pairs_on_its_own() {
        let step = [on(WORLD, &[4]), on(GROUP, &[4]), on(WORLD, &[5])].concat();
        let swapped = [on(GROUP, &[4]), on(WORLD, &[4, 5])].concat();
        let p = pair(&step, &swapped, [false; 2]);
        assert_eq!((p.pairs, p.parted), (vec![[0, 1], [1, 0], [2, 2]], vec![]));
        let lacking = [on(WORLD, &[4]), on(WORLD, &[5])].concat();
        let p = pair(&step, &lacking, [false; 2]);
        assert_eq!((p.pairs, p.parted), (vec![[0, 0], [2, 1]], vec![(GROUP, [Some(1), None])]));
        let p = pair_step([&step, &lacking], [false; 2], |c| c == GROUP);
        assert_eq!((p.pairs.len(), p.parted.len()), (2, 0));
        // A ring whose first kept call is the group's #4 skips to that call, not to the world's #4.
        let gathered = [key(WORLD, AllGather, 4)];
        let full = [&gathered[..], &step].concat();
        let ring = [on(GROUP, &[4]), on(WORLD, &[5])].concat();
        let p = pair(&ring, &full, [true, false]);
        assert_eq!((p.skipped, p.pairs, p.parted), ([0, 2], vec![[0, 2], [1, 3]], vec![]));
    }
}
