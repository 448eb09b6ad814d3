//! The report's counters, findings and "can't tell" groups, each answer placed by where the whole run's
//! analysis gives it: a run read a window of steps at a time gives its answers window by window, while the
//! whole index gives them phase by phase, rank by rank, step by step (`Index::order_by_execution`). Counts
//! add up in any order; findings are sorted by their place when the report is made, and a "can't tell"
//! group keeps the first few places, not the first few seen.

use super::conditions::Condition;
use super::context::Event;
use super::findings::{CantTell, ConditionSummary, Finding, Place};
use std::collections::BTreeMap;

/// How many places a "can't tell" group lists.
const EXAMPLES: usize = 3;

/// The checks in the order the report lists their answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Phase {
    Loss,
    TensorOverflow,
    OperatorOverflow,
    Tensors,
    Updates,
    Initialization,
    Arrivals,
}

/// Where an answer comes in the report: its phase, the rank and step it is about, and the order it was
/// given in (within one rank's step, all of one window's).
pub(super) type Key = (Phase, u32, u64, u64);

/// A "can't tell" group and its first places so far.
type Group = (CantTell, Vec<(Key, Place)>);

/// The report's counters, findings and "can't tell" groups.
pub(super) struct Tally {
    pub summaries: Vec<ConditionSummary>,
    findings: Vec<(Key, Finding)>,
    cant_tell: BTreeMap<(&'static str, String), Group>,
    /// Answers given so far: what orders the answers of one rank's step.
    given: u64,
}

impl Tally {
    pub fn new(conditions: &[Condition]) -> Tally {
        let summaries = conditions
            .iter()
            .map(|c| ConditionSummary {
                name: c.name,
                enabled: c.enabled,
                summary: c.summary,
                params: c.params.clone(),
                decided: 0,
                hits: 0,
                cant_tell: 0,
            })
            .collect();
        Tally { summaries, findings: Vec::new(), cant_tell: BTreeMap::new(), given: 0 }
    }

    /// The answers of `phase` about `rank`'s `step`, after every answer added before them there.
    pub fn add(
        &mut self,
        conditions: &[Condition],
        (phase, rank, step): (Phase, u32, u64),
        events: impl IntoIterator<Item = Event>,
    ) {
        for e in events {
            let name = e.condition();
            let Some(i) = conditions.iter().position(|c| c.name == name && c.enabled) else { continue };
            self.given += 1;
            let key = (phase, rank, step, self.given);
            let s = &mut self.summaries[i];
            match e {
                Event::Hit(f) => {
                    s.decided += 1;
                    s.hits += 1;
                    self.findings.push((key, f));
                }
                Event::Decided(_) => s.decided += 1,
                Event::CantTell { condition, reason, would_decide, place } => {
                    s.cant_tell += 1;
                    let (group, examples) =
                        self.cant_tell.entry((condition, reason.clone())).or_insert_with(|| {
                            let group =
                                CantTell { condition, reason, would_decide, count: 0, examples: Vec::new() };
                            (group, Vec::new())
                        });
                    group.count += 1;
                    // The first places of the whole run: a later window may hold an earlier rank's step.
                    let at = examples.partition_point(|(k, _)| *k < key);
                    if at < EXAMPLES {
                        examples.insert(at, (key, place));
                        examples.truncate(EXAMPLES);
                    }
                }
            }
        }
    }

    /// The findings so far, in no particular order.
    pub fn findings(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().map(|(_, f)| f)
    }

    /// The findings of `phase`, to be completed with what only the whole run tells.
    pub fn findings_of_mut(&mut self, phase: Phase) -> impl Iterator<Item = &mut Finding> {
        self.findings.iter_mut().filter(move |(k, _)| k.0 == phase).map(|(_, f)| f)
    }

    /// The counters, the findings in the report's order, and the "can't tell" groups by condition and reason.
    pub fn finish(self) -> (Vec<ConditionSummary>, Vec<Finding>, Vec<CantTell>) {
        let mut findings = self.findings;
        findings.sort_unstable_by_key(|(k, _)| *k);
        let cant_tell = self
            .cant_tell
            .into_values()
            .map(|(mut group, examples)| {
                group.examples = examples.into_iter().map(|(_, p)| p).collect();
                group
            })
            .collect();
        (self.summaries, findings.into_iter().map(|(_, f)| f).collect(), cant_tell)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers given window by window come out as the whole run gives them: rank 0's steps before rank 1's,
    /// a "can't tell" group's examples the first three places, counts summed.
    #[test]
    fn answers_are_placed_as_the_whole_run_gives_them() {
        let conditions = super::super::defaults();
        let place =
            |rank, step| Place { step: Some(step), rank: Some(rank), op: None, tensor: None, bounds: None };
        let cant_tell = |rank, step| Event::CantTell {
            condition: "tensor_all_zero",
            reason: "r".into(),
            would_decide: "w",
            place: place(rank, step),
        };
        let hit = |rank, step| {
            Event::Hit(Finding {
                condition: "tensor_all_zero",
                step: Some(step),
                rank: Some(rank),
                op: None,
                op_type: None,
                tensor: None,
                role: None,
                param: None,
                measure: "zero_percentage",
                value: super::super::Measure::exact(100.0),
                threshold: "zero_percentage_ge 100".into(),
                evidence: super::super::Evidence::Statistics,
                detail: None,
            })
        };
        let mut tally = Tally::new(&conditions);
        // Two windows of steps 0-1 and 2-3, two ranks each; a loss answer given last comes first.
        for window in [[0, 1], [2, 3]] {
            for rank in [0, 1] {
                for step in window {
                    tally.add(
                        &conditions,
                        (Phase::Tensors, rank, step),
                        [cant_tell(rank, step), hit(rank, step)],
                    );
                }
            }
        }
        tally.add(&conditions, (Phase::Loss, 1, 3), [hit(1, 3), Event::Decided("loss_zero")]);
        let (summaries, findings, groups) = tally.finish();
        let places: Vec<(Option<u32>, Option<u64>)> = findings.iter().map(|f| (f.rank, f.step)).collect();
        let order = [(1, 3), (0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)];
        assert_eq!(places, order.map(|(r, s)| (Some(r), Some(s))).to_vec());
        let examples: Vec<(Option<u32>, Option<u64>)> =
            groups[0].examples.iter().map(|p| (p.rank, p.step)).collect();
        assert_eq!(
            (groups[0].count, examples),
            (8, vec![(Some(0), Some(0)), (Some(0), Some(1)), (Some(0), Some(2))])
        );
        let count =
            |name: &str| summaries.iter().find(|c| c.name == name).map(|c| (c.decided, c.hits, c.cant_tell));
        assert_eq!((count("tensor_all_zero"), count("loss_zero")), (Some((9, 9, 8)), Some((1, 0, 0))));
    }
}
