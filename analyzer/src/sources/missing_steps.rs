//! Steps one rank's directories lack that another rank's hold, in sources whose directory layout gives each
//! dump its step and rank (a CANN dump tree, msprobe's `step{N}/rank{M}`).
//!
//! Every rank of a job dumps the same steps (the dump configuration is the job's), so a step that some rank
//! holds and another does not was lost from that rank: a rank that stopped early, a copy cut short, a
//! directory deleted. Read silently, every per-step answer about those steps would speak for the other
//! ranks only, and a watch or overflow run would end in an all-clear about data it never saw.

use crate::filter::ranges;
use crate::problems::InputProblem;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Ranks that list in the problem before "and N more ranks".
const LISTED: usize = 4;

/// The steps each rank's dumps came from, as the directories say (dumps whose step the layout does not
/// give are left out: an inferred step is no evidence of a missing directory).
#[derive(Debug, Default)]
pub(crate) struct StepsHeld {
    by_rank: BTreeMap<u32, BTreeSet<u64>>,
}

impl StepsHeld {
    pub(crate) fn add(&mut self, rank: u32, step: u64) {
        self.by_rank.entry(rank).or_default().insert(step);
    }

    /// The input problem when some rank lacks steps another rank holds, naming the ranks, the steps and
    /// what to do; `None` when every rank holds the same steps (or there is one rank).
    pub(crate) fn problem(&self, root: &Path) -> Option<InputProblem> {
        let all: BTreeSet<u64> = self.by_rank.values().flatten().copied().collect();
        let lacking: Vec<(u32, Vec<u64>)> = self
            .by_rank
            .iter()
            .map(|(&rank, held)| (rank, all.difference(held).copied().collect::<Vec<u64>>()))
            .filter(|(_, missing)| !missing.is_empty())
            .collect();
        let (first_rank, first_missing) = lacking.first()?;
        let word = |steps: &[u64]| if steps.len() == 1 { "step" } else { "steps" };
        let mut which: Vec<String> = lacking
            .iter()
            .take(LISTED)
            .map(|(rank, missing)| format!("rank {rank} lacks {} {}", word(missing), ranges(missing)))
            .collect();
        if lacking.len() > LISTED {
            which.push(format!("and {} more ranks", lacking.len() - LISTED));
        }
        let holder = self
            .by_rank
            .iter()
            .find(|(_, held)| held.contains(&first_missing[0]))
            .map_or(0, |(&rank, _)| rank);
        Some(InputProblem::incomplete(format!(
            "{}: {} that other ranks hold (rank {holder} holds step {} of rank {first_rank}'s missing ones): \
             every rank of a job dumps the same steps, so those directories were lost (a rank that stopped \
             early, a copy cut short); answers about those steps cover the ranks that hold them only. Copy \
             the dump again (--allow-incomplete accepts it as it is)",
            root.display(),
            which.join(", "),
            first_missing[0],
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(ranks: &[(u32, &[u64])]) -> StepsHeld {
        let mut held = StepsHeld::default();
        for &(rank, steps) in ranks {
            for &step in steps {
                held.add(rank, step);
            }
        }
        held
    }

    #[test]
    fn ranks_holding_the_same_steps_or_one_rank_are_no_problem() {
        assert_eq!(held(&[(0, &[0, 1, 2]), (1, &[0, 1, 2])]).problem(Path::new("d")), None);
        assert_eq!(held(&[(3, &[5, 9])]).problem(Path::new("d")), None);
        assert_eq!(held(&[]).problem(Path::new("d")), None);
    }

    #[test]
    fn a_rank_lacking_steps_is_named_with_them_and_a_holder() {
        let p = held(&[(0, &[0, 1, 2, 3]), (1, &[0, 1])]).problem(Path::new("dump")).unwrap();
        assert_eq!(p.kind, crate::problems::ProblemKind::Incomplete);
        assert!(p
            .message
            .starts_with("dump: rank 1 lacks steps 2-3 that other ranks hold (rank 0 holds step 2"));
        assert!(p.message.contains("--allow-incomplete"), "{}", p.message);
    }

    #[test]
    fn many_ranks_lacking_steps_list_the_first_and_count_the_rest() {
        let mut ranks: Vec<(u32, &[u64])> = vec![(0, &[0, 1])];
        ranks.extend((1..8).map(|r| (r, &[0u64][..])));
        let p = held(&ranks).problem(Path::new("d")).unwrap();
        assert!(p.message.contains("rank 1 lacks step 1, rank 2 lacks step 1, rank 3 lacks step 1, rank 4 lacks step 1, and 3 more ranks"), "{}", p.message);
    }
}
