//! Overflows the run shows without an origin in the data examined: a captured step without its update, a
//! loss scale that dropped.

use super::loss_scale::LossScale;
use crate::filter::Filter;
use crate::index::Index;
use crate::problems::ProblemKind;
use serde::Serialize;
use std::collections::BTreeMap;

/// A step where the run shows that an overflow happened (its update was skipped, or the loss scale dropped
/// after it) while neither an origin nor an arrival of the data examined explains it: the origin is
/// elsewhere (another rank's capture, ops not dumped). Never an all-clear.
#[derive(Clone, Debug, Serialize)]
pub struct WithoutOrigin {
    pub step: u64,
    pub rank: u32,
    /// `step 1 was skipped (no optimizer op ran)`, `the loss scale dropped from 1024 to 512 at step 2`.
    pub evidence: String,
}

/// Per rank and step, whether an optimizer op ran.
pub(crate) type Updates = BTreeMap<u32, BTreeMap<u64, bool>>;

/// Steps of the ranks `filter` keeps where the run shows an overflow that `explained(rank, step)` does not
/// account for: a captured step without the optimizer ops the other steps ran (a loss scaler skipped the update),
/// or a loss-scale drop with no explained step since the previous scale. Not judged on dumps of the
/// flagged ops only, which hold no optimizer op. A step without optimizer ops is not judged either when
/// the source lost records (a missing segment, a dump file it could not read): the optimizer ops may be
/// what was lost, and a skipped step nobody saw is no finding (the lost records lead the report).
pub fn without_origin(
    index: &Index,
    filter: &Filter,
    scales: &[LossScale],
    explained: &dyn Fn(u32, u64) -> bool,
) -> Vec<WithoutOrigin> {
    let lost_records = index.problems.iter().any(|p| p.kind == ProblemKind::Incomplete);
    without_origin_of(&updates_of(index, filter), index.only_overflowing_ops, lost_records, scales, explained)
}

/// Per rank and step of the steps and ranks `filter` keeps: whether an optimizer op ran. Every op counts,
/// whatever the op selection: the update is whole-step.
pub(crate) fn updates_of(index: &Index, filter: &Filter) -> Updates {
    let mut updates = Updates::new();
    for op in &index.ops {
        if !(filter.steps.is_empty() || filter.steps.contains(&op.step))
            || !(filter.ranks.is_empty() || filter.ranks.contains(&op.rank))
        {
            continue;
        }
        *updates.entry(op.rank).or_default().entry(op.step).or_default() |=
            crate::roles::is_optimizer(&op.op_type);
    }
    updates
}

/// [`without_origin`] from what it needs of the run: whether each step updated, whether the run holds the
/// flagged ops only, whether it lost records.
pub(crate) fn without_origin_of(
    updates: &Updates,
    only_overflowing_ops: bool,
    lost_records: bool,
    scales: &[LossScale],
    explained: &dyn Fn(u32, u64) -> bool,
) -> Vec<WithoutOrigin> {
    let mut found = Vec::new();
    if only_overflowing_ops {
        return found;
    }
    for (&rank, steps) in updates {
        if lost_records || !steps.values().any(|&u| u) {
            continue;
        }
        for (&step, _) in steps.iter().filter(|(&s, &u)| !u && !explained(rank, s)) {
            found.push(WithoutOrigin {
                step,
                rank,
                evidence: format!("step {step} was skipped (no optimizer op ran)"),
            });
        }
    }
    let mut ranks: Vec<u32> = scales.iter().map(|l| l.rank).collect();
    ranks.dedup();
    for rank in ranks {
        let of_rank: Vec<&LossScale> = scales.iter().filter(|l| l.rank == rank).collect();
        for w in of_rank.windows(2) {
            let (before, after) = (w[0], w[1]);
            if after.value < before.value && !(before.step..after.step).any(|s| explained(rank, s)) {
                found.push(WithoutOrigin {
                    step: after.step,
                    rank,
                    evidence: format!(
                        "the loss scale dropped from {} to {} at step {}",
                        crate::report::fmt_num(before.value),
                        crate::report::fmt_num(after.value),
                        after.step
                    ),
                });
            }
        }
    }
    found.sort_by_key(|w| (w.rank, w.step));
    found
}
