//! Which of a rank's communicators is which across two runs (#18). A call's record carries its
//! communicator's size, the rank's place in it and the run's own name for it; the name is the same on
//! every member within a run, so the ranks whose calls use a name are the communicator's members, which
//! both runs can compare. Two communicators of one size where the rank has the same place (Megatron's
//! tensor- and data-parallel groups of 2 on rank 0: {0, 1} and {0, 2}) are told apart by them.
//!
//! Per rank, size and place: a communicator pairs with the other run's of the same members. What is left
//! when both runs have some left (a member whose calls are not in the data: one node's capture, lost
//! records) pairs as one communicator where each run has one left; otherwise those left cannot be told
//! apart: their calls pair as one sequence in call order (the rule before members were known), the
//! report says so (an incomplete input: never an all-clear that rests on it), and a difference among
//! them is `unknown`. Members come from what the whole read sees, or from the census's walk of every
//! stream, so every way of reading the runs tells the same communicators apart.

use crate::problems::InputProblem;
use crate::sources::capture::step_calls::{CallKey, CommPlace, CommUse};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

/// The third word of a [`CommPlace`] of communicators that pair where each run has one left.
const LEFT: u64 = u64::MAX - 1;
/// The third word of a [`CommPlace`] of communicators that could not be told apart.
const UNTOLD: u64 = u64::MAX;

/// Each run's communicators, per rank, as both runs tell them apart: the third word of a call's
/// [`CommPlace`] turned from its run's name into the communicator's members (or [`LEFT`], [`UNTOLD`]).
#[derive(Debug, Default)]
pub(super) struct CommTags {
    /// Per run: (rank, the name's hash) to the word that pairs.
    tags: [BTreeMap<(u32, u64), u64>; 2],
    /// (rank, size, place) of communicators that could not be told apart.
    untold: BTreeSet<(u32, u32, u32)>,
}

/// A rank's communicators of one size and place in one run: per set of members, the names' hashes.
type ByMembers = BTreeMap<Vec<u32>, Vec<u64>>;

impl CommTags {
    /// The communicators of two runs, each run's given by its ranks' uses of them.
    pub fn of(uses: [&[CommUse]; 2]) -> CommTags {
        let members = uses.map(|run| {
            let mut members: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
            run.iter().for_each(|u| members.entry(u.comm.2).or_default().push(u.rank));
            members.values_mut().for_each(|m| {
                m.sort_unstable();
                m.dedup();
            });
            members
        });
        let mut groups: BTreeMap<(u32, u32, u32), [ByMembers; 2]> = BTreeMap::new();
        for (k, run) in uses.iter().enumerate() {
            for u in run.iter() {
                let group = groups.entry((u.rank, u.comm.0, u.comm.1)).or_default();
                group[k].entry(members[k][&u.comm.2].clone()).or_default().push(u.comm.2);
            }
        }
        let mut tags = CommTags::default();
        for ((rank, size, place), runs) in groups {
            // Names with the same members are one communicator; without every member in the data, the same
            // members seen may be two (a rank's two groups, seen from that rank alone).
            let alone = |k: usize, m: &Vec<u32>| m.len() < size as usize && runs[k][m].len() > 1;
            let told = |m: &Vec<u32>| (0..2).all(|k| runs[k].contains_key(m) && !alone(k, m));
            let left = [0, 1].map(|k| runs[k].keys().filter(|m| !told(m)).collect::<Vec<_>>());
            let untold = !left[0].is_empty() && !left[1].is_empty();
            let one_each = untold && (0..2).all(|k| left[k].len() == 1 && !alone(k, left[k][0]));
            for (k, run) in runs.iter().enumerate() {
                for (m, names) in run {
                    let tag = match (told(m), one_each, untold) {
                        (true, _, _) | (false, _, false) => hash_of(m),
                        (false, true, _) => LEFT,
                        (false, false, true) => UNTOLD,
                    };
                    tags.tags[k].extend(names.iter().map(|&name| ((rank, name), tag)));
                }
            }
            if untold && !one_each {
                tags.untold.insert((rank, size, place));
            }
        }
        tags
    }

    /// `key` of a call of run `run` (0 or 1) on `rank`, its communicator as both runs tell it.
    pub fn key(&self, run: usize, rank: u32, key: CallKey) -> CallKey {
        let (size, place, name) = key.comm;
        let tag = self.tags[run].get(&(rank, name)).copied().unwrap_or(name);
        CallKey { comm: (size, place, tag), ..key }
    }

    /// Whether the communicator (as [`CommTags::key`] gives it) is one of some that could not be told apart.
    pub fn is_untold(comm: CommPlace) -> bool {
        comm.2 == UNTOLD
    }

    /// What could not be told apart, an incomplete input each (rank, size, place).
    pub fn problems(&self) -> Vec<InputProblem> {
        let said = self.untold.iter().map(|&(rank, size, place)| {
            InputProblem::incomplete(format!(
                "rank {rank}: its HCCL communicators of {size} ranks in which it is rank {place} could not be told \
                 apart (some of their members' calls are not in the data): their calls were paired as one \
                 sequence, in call order, and a difference among them is unknown"
            ))
        });
        said.collect()
    }
}

fn hash_of(members: &[u32]) -> u64 {
    let mut hasher = DefaultHasher::new();
    members.hash(&mut hasher);
    // Clear of the words that are no members.
    hasher.finish().min(LEFT - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Uses of communicators: (rank, size, place, name).
    fn uses(list: &[(u32, u32, u32, u64)]) -> Vec<CommUse> {
        list.iter().map(|&(rank, size, place, name)| CommUse { rank, comm: (size, place, name) }).collect()
    }

    /// Tensor parallel 2 x data parallel 2 with the job's communicator (name 9): groups {0, 1} (name 1),
    /// {2, 3} (2), and {0, 2} (3), {1, 3} (4); `names` renames them (another run).
    fn tp_dp(ranks: &[u32], names: u64) -> Vec<CommUse> {
        let all = [
            (0, 4, 0, 9),
            (1, 4, 1, 9),
            (2, 4, 2, 9),
            (3, 4, 3, 9),
            (0, 2, 0, 1),
            (1, 2, 1, 1),
            (2, 2, 0, 2),
            (3, 2, 1, 2),
            (0, 2, 0, 3),
            (2, 2, 1, 3),
            (1, 2, 0, 4),
            (3, 2, 1, 4),
        ];
        let kept = all.iter().filter(|u| ranks.contains(&u.0)).map(|&(r, s, p, n)| (r, s, p, n + names));
        uses(&kept.collect::<Vec<_>>())
    }

    /// The word each of rank `rank`'s communicators (by name) pairs by, in each run.
    fn words(tags: &CommTags, rank: u32, names: [&[u64]; 2]) -> [Vec<u64>; 2] {
        [0, 1].map(|k| names[k].iter().map(|&n| tags.tags[k][&(rank, n)]).collect())
    }

    /// A rank's two groups of one size and place are told apart by their members, whatever each run
    /// names them; the job's communicator too, and nothing is said.
    #[test]
    fn groups_are_told_apart_by_their_members() {
        let tags = CommTags::of([&tp_dp(&[0, 1, 2, 3], 0), &tp_dp(&[0, 1, 2, 3], 100)]);
        let [a, b] = words(&tags, 0, [&[1, 3, 9], &[101, 103, 109]]);
        assert_eq!(a, b);
        assert!(a[0] != a[1] && !a.contains(&LEFT) && !a.contains(&UNTOLD));
        assert!(tags.problems().is_empty());
    }

    /// One node's capture (ranks 0 and 1): each of rank 0's groups has other members in the data than the
    /// other ({0, 1}, and {0} of {0, 2}); against the whole run, the group left on each side pairs with
    /// the other's. Rank 0 alone: its groups are both {0} and cannot be told apart, and that is said.
    #[test]
    fn members_not_in_the_data_leave_groups_untold_only_where_they_look_alike() {
        let (node, whole) = (tp_dp(&[0, 1], 0), tp_dp(&[0, 1, 2, 3], 100));
        let tags = CommTags::of([&node, &node]);
        let [a, b] = words(&tags, 0, [&[1, 3], &[1, 3]]);
        assert!(a == b && a[0] != a[1] && !a.contains(&UNTOLD), "{a:?}");
        let tags = CommTags::of([&node, &whole]);
        let [a, b] = words(&tags, 0, [&[1, 3], &[101, 103]]);
        assert_eq!((a.clone(), a[1]), (b, LEFT));
        assert!(tags.problems().is_empty());
        let alone = tp_dp(&[0], 0);
        for tags in [CommTags::of([&alone, &alone]), CommTags::of([&alone, &whole])] {
            let [a, _] = words(&tags, 0, [&[1, 3], &[]]);
            assert_eq!(a, [UNTOLD, UNTOLD]);
            let told = tags.problems();
            assert!(
                told.len() == 1 && told[0].message.starts_with("rank 0: its HCCL communicators of 2 ranks")
            );
            let key = tags.key(
                0,
                0,
                CallKey { comm: (2, 0, 3), op: accutrace_formats::capture::CollectiveOp::AllReduce, seq: 0 },
            );
            assert!(CommTags::is_untold(key.comm));
        }
    }

    /// A group one run lacks on a rank (its calls there all lost) is no other group: its calls have no
    /// counterpart.
    #[test]
    fn a_group_one_run_lacks_is_no_other() {
        let whole = tp_dp(&[0, 1, 2, 3], 0);
        let lacking: Vec<CommUse> =
            whole.iter().copied().filter(|u| !(u.rank == 0 && u.comm.2 == 3)).collect();
        let tags = CommTags::of([&whole, &lacking]);
        let [a, b] = words(&tags, 0, [&[1, 3], &[1]]);
        assert_eq!(a[0], b[0]);
        assert!(a[1] != b[0] && a[1] != LEFT && a[1] != UNTOLD);
        assert!(tags.problems().is_empty());
    }
}
