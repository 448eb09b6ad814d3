//! Whether a `--baseline` is a run of the same job: the configuration check `diff` applies before it
//! compares two runs (crate::comparable), on the events both hold, so that summaries (`merge --baseline`)
//! are checked as runs are. A baseline of another job (another model, precision, batch, or fewer ranks)
//! would make every difference look like an anomaly, and the first one a culprit.

use super::events::{Event, RunEvents};
use crate::filter::rank_ranges;
use std::collections::BTreeMap;

/// Why `good` cannot be the baseline of `run` for the ranks `examined`, or `None` when it can: ranks the
/// baseline lacks, then the first step and rank where the op sequences part (one holding only the start or
/// the end of the other's is not a difference), then the first tensor of one op whose dtype or element
/// count differs.
pub fn refusal(name: &str, run: &RunEvents, good: &RunEvents, examined: &[u32]) -> Option<String> {
    let mut reasons = Vec::new();
    let has_ops = |r: &super::events::RankEvents| r.events.iter().any(|e| e.collective().is_none());
    let lacking: Vec<u32> = examined
        .iter()
        .filter(|&&rank| {
            let ours = run.ranks.iter().find(|r| r.rank == rank).is_some_and(has_ops);
            ours && !good.ranks.iter().any(|r| r.rank == rank && has_ops(r))
        })
        .copied()
        .collect();
    if !lacking.is_empty() {
        reasons.push(format!("ranks: the baseline has no op of {}", rank_ranges(&lacking)));
    }
    let (mut sequence, mut tensors) = (None, None);
    for &rank in examined {
        let (Some(a), Some(b)) =
            (run.ranks.iter().find(|r| r.rank == rank), good.ranks.iter().find(|r| r.rank == rank))
        else {
            continue;
        };
        let (steps_a, steps_b) = (by_step(&a.events), by_step(&b.events));
        for (step, ops_a) in &steps_a {
            let Some(ops_b) = steps_b.get(step) else { continue };
            let (short, long) = if ops_a.len() <= ops_b.len() { (ops_a, ops_b) } else { (ops_b, ops_a) };
            let cut_short = starts_or_ends_alike(short, long);
            let place = format!("step {step} rank {rank}");
            if sequence.is_none() && !cut_short {
                if let Some(i) = (0..ops_a.len().max(ops_b.len()))
                    .find(|&i| ops_a.get(i).map(|e| key(e)) != ops_b.get(i).map(|e| key(e)))
                {
                    let show = |e: Option<&&Event>| {
                        e.map_or("nothing (the step ends)".into(), |e| {
                            format!("{} [{}]", e.name(), e.op_type())
                        })
                    };
                    sequence = Some(format!(
                        "op sequence: {place}: op {} is {} in the run and {} in the baseline",
                        i + 1,
                        show(ops_a.get(i)),
                        show(ops_b.get(i))
                    ));
                }
            }
            if tensors.is_none() {
                tensors = ops_a.iter().zip(ops_b.iter()).filter(|(x, y)| key(x) == key(y)).find_map(|(x, y)| {
                    x.tensors.iter().zip(&y.tensors).find_map(|(s, t)| {
                        (s.dtype != t.dtype || s.elements != t.elements).then(|| {
                            format!(
                                "tensors: {place}: {} is {} of {} elements in the run and {} of {} in the baseline",
                                x.label(s),
                                s.dtype,
                                s.elements,
                                t.dtype,
                                t.elements
                            )
                        })
                    })
                });
            }
        }
    }
    reasons.extend(sequence);
    reasons.extend(tensors);
    if reasons.is_empty() {
        return None;
    }
    Some(format!(
        "the baseline {name} is not a run of the same job, so every difference from it would read as an \
         anomaly:\n  {}\ngive a good run of this job (same model, settings and ranks) as the baseline",
        reasons.join("\n  ")
    ))
}

/// A rank's ops (not its calls) by step, in program order.
fn by_step(events: &[Event]) -> BTreeMap<u64, Vec<&Event>> {
    let mut steps: BTreeMap<u64, Vec<&Event>> = BTreeMap::new();
    for e in events.iter().filter(|e| e.collective().is_none()) {
        steps.entry(e.step).or_default().push(e);
    }
    steps
}

fn key(e: &Event) -> (&str, &str) {
    (e.name(), e.op_type())
}

fn starts_or_ends_alike(short: &[&Event], long: &[&Event]) -> bool {
    let same = |x: &[&Event], y: &[&Event]| x.iter().zip(y).all(|(a, b)| key(a) == key(b));
    same(short, &long[..short.len()]) || same(short, &long[long.len() - short.len()..])
}

#[cfg(test)]
mod tests {
    use super::super::events::{EventKind, RankEvents, TensorSummary};
    use super::*;
    use crate::index::Io;

    fn op(step: u64, name: &str, elements: u64) -> Event {
        let t = TensorSummary::zeros(Io::Output, elements, Some(1));
        Event {
            step,
            time_us: None,
            kind: EventKind::Op { name: name.into(), op_type: "X".into() },
            tensors: vec![t],
        }
    }

    fn run(ranks: &[u32], ops: &[(&str, u64)]) -> RunEvents {
        RunEvents {
            ranks: ranks
                .iter()
                .map(|&rank| RankEvents { rank, events: ops.iter().map(|&(n, e)| op(0, n, e)).collect() })
                .collect(),
            ..RunEvents::default()
        }
    }

    #[test]
    fn a_baseline_of_the_same_job_passes_and_one_of_another_job_is_refused_saying_why() {
        let job = run(&[0, 1, 2, 3], &[("a", 8), ("b", 8)]);
        assert_eq!(refusal("good", &job, &job, &[0, 1, 2, 3]), None);
        // Cut short (a ring that dropped the start) is still the same job.
        assert_eq!(refusal("good", &job, &run(&[0, 1, 2, 3], &[("b", 8)]), &[0, 1, 2, 3]), None);
        let two = run(&[0, 1], &[("a", 8), ("c", 8)]);
        let why = refusal("other", &job, &two, &[0, 1, 2, 3]).expect("refused");
        assert!(why.contains("the baseline has no op of ranks 2, 3"), "{why}");
        assert!(why.contains("op 2 is b [X] in the run and c [X] in the baseline"), "{why}");
        let bigger = run(&[0, 1, 2, 3], &[("a", 16), ("b", 8)]);
        let why = refusal("bigger", &job, &bigger, &[0, 1, 2, 3]).expect("refused");
        assert!(why.contains("a.output.0 is FLOAT16 of 8 elements in the run and FLOAT16 of 16"), "{why}");
        // Only the ranks examined count.
        assert_eq!(refusal("two", &run(&[0, 1, 2, 3], &[("a", 8), ("c", 8)]), &two, &[0, 1]), None);
    }
}
