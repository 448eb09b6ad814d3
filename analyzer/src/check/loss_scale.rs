//! Loss scale: steps skipped for overflow, the scale's drops, and a scale stuck at its floor.
//!
//! The scale by step is what the run dumps of it (`analyzer overflow`'s rule, shared with the report page:
//! an op named like `loss_scale` with a one-element power-of-two tensor, else a loss scaler's `Mul` of the
//! loss by a power of two, as eager kernels are named by type). A step skipped for overflow is a captured step with
//! no optimizer op while other steps have them (the update did not run). A few skipped steps are how dynamic
//! loss scaling works; three in a row is a collapse; skipped steps at a scale that no longer drops are a scale
//! stuck at its floor (every step overflows, nothing trains).

use super::item::{worst, Facts, Item, Scales, Seen, Status};
use crate::overflow::loss_scale_candidates;
use crate::roles::is_optimizer;
use accutrace_formats::stats::TensorStats;
use accutrace_formats::DType;
use std::collections::BTreeMap;

const LOOK: &str = "`analyzer overflow RUN` (the first op that overflowed in each skipped step)";

/// Consecutive skipped steps that make a collapse.
const COLLAPSE: usize = 3;

/// Adds what `r`'s ops show of the loss scale to `into` (each step's own: steps of a part are its own).
pub(super) fn add(r: &Seen<'_>, into: &mut Scales) {
    let index = r.index();
    // The statistics of one-element tensors (where a scale can be): stored, else from the values.
    let mut stats: BTreeMap<usize, TensorStats> = BTreeMap::new();
    for &o in &r.ops {
        for t in index.ops[o].tensors() {
            let info = &index.tensors[t];
            if info.shape.iter().product::<u64>() != 1 {
                continue;
            }
            let found = index.stats(t).or_else(|| {
                let v = if info.has_data { r.values(t) } else { None };
                v.map(|v| TensorStats::of_f32(&v, info.dtype))
            });
            stats.extend(found.map(|s| (t, s)));
        }
    }
    for &o in &r.ops {
        let op = &index.ops[o];
        *into.updates.entry(op.rank).or_default().entry(op.step).or_default() |= is_optimizer(&op.op_type);
    }
    let (named, multiplied) = loss_scale_candidates(index, &r.ops, &|t| stats.get(&t).copied());
    into.named.extend(named);
    into.multiplied.extend(multiplied);
    into.fp16 |=
        r.ops.iter().any(|&o| index.ops[o].outputs().any(|t| index.tensors[t].dtype == DType::FLOAT16));
}

/// Per rank, per captured step: the loss scale (if dumped) and whether an optimizer op ran.
fn history(f: &Scales) -> BTreeMap<u32, BTreeMap<u64, (Option<f64>, bool)>> {
    let mut out: BTreeMap<u32, BTreeMap<u64, (Option<f64>, bool)>> = f
        .updates
        .iter()
        .map(|(&rank, steps)| (rank, steps.iter().map(|(&s, &u)| (s, (None, u))).collect()))
        .collect();
    let scales = if f.named.is_empty() { &f.multiplied } else { &f.named };
    for l in scales {
        out.entry(l.rank).or_default().entry(l.step).or_insert((None, false)).0 = Some(l.value);
    }
    out
}

fn judge(r: &Facts<'_>) -> (Status, String, Vec<String>) {
    let hist = history(&r.scales);
    let mut statuses = Vec::new();
    let mut reasons = Vec::new();
    let mut details = Vec::new();
    let fp16 = r.scales.fp16;
    for (rank, steps) in &hist {
        let updates_seen = steps.values().any(|s| s.1);
        let scales: Vec<(u64, f64)> = steps.iter().filter_map(|(s, v)| v.0.map(|x| (*s, x))).collect();
        if scales.is_empty() {
            if fp16 {
                statuses.push(Status::CantTell);
                reasons.push(format!(
                    "{} rank {rank} computes in fp16 but dumps no loss scale (an op named like loss_scale, or a \
                     loss scaler's Mul of the loss by a power of two)",
                    r.label
                ));
            } else {
                statuses.push(Status::Pass);
                reasons.push(format!("{} rank {rank}: no fp16 compute, no loss scaling needed", r.label));
            }
            continue;
        }
        let line: Vec<String> = scales.iter().take(16).map(|(s, v)| format!("{s}:{v}")).collect();
        details.push(format!("{} rank {rank}: loss scale by step {}", r.label, line.join(" ")));
        let drops: Vec<u64> = scales.windows(2).filter(|w| w[1].1 < w[0].1).map(|w| w[1].0).collect();
        // Dynamic loss scaling only drops the scale on an overflow: drops at consecutive steps are
        // consecutive overflows, whether or not the dump shows the skipped updates.
        let dropping =
            longest_run(scales.windows(2).map(|w| (w[1].0, w[1].1 < w[0].1 && w[1].0 == w[0].0 + 1)));
        if let Some((a, b)) = dropping.filter(|(a, b)| b - a + 1 >= COLLAPSE as u64) {
            statuses.push(Status::Fail);
            reasons.push(format!(
                "{} rank {rank}: the loss scale dropped at every step from {a} to {b}: every step overflowed, the \
                 scale collapsed",
                r.label
            ));
            continue;
        }
        if !updates_seen {
            statuses.push(Status::CantTell);
            reasons.push(format!(
                "{} rank {rank}: no optimizer op in any step: skipped steps cannot be told from a dump without updates",
                r.label
            ));
            continue;
        }
        let skipped: Vec<u64> = steps.iter().filter(|(_, v)| !v.1).map(|(s, _)| *s).collect();
        details.push(format!(
            "{} rank {rank}: {} of {} steps skipped for overflow {:?}; the scale dropped at steps {:?}",
            r.label,
            skipped.len(),
            steps.len(),
            skipped,
            drops
        ));
        let min = scales.iter().map(|s| s.1).fold(f64::INFINITY, f64::min);
        let tail: Vec<(&u64, &(Option<f64>, bool))> = steps.iter().rev().take(COLLAPSE).collect();
        // Stuck: the last steps all skipped, and those that dump the scale show it at its minimum.
        let tail_scales: Vec<f64> = tail.iter().filter_map(|(_, v)| v.0).collect();
        let stuck = tail.len() == COLLAPSE
            && tail.iter().all(|(_, v)| !v.1)
            && !tail_scales.is_empty()
            && tail_scales.iter().all(|&v| v == min);
        let run = longest_run(steps.iter().map(|(s, v)| (*s, !v.1)));
        if stuck {
            statuses.push(Status::Fail);
            reasons.push(format!(
                "{} rank {rank}: the loss scale is stuck at its floor {min}: the last {COLLAPSE} steps overflowed and \
                 were skipped without it dropping further",
                r.label
            ));
        } else if let Some((a, b)) = run.filter(|(a, b)| b - a + 1 >= COLLAPSE as u64) {
            statuses.push(Status::Fail);
            reasons.push(format!(
                "{} rank {rank}: steps {a}-{b} were all skipped for overflow: the loss scale collapsed",
                r.label
            ));
        } else {
            statuses.push(Status::Pass);
            reasons.push(format!("{} rank {rank}: {} skipped steps, no collapse", r.label, skipped.len()));
        }
    }
    if hist.is_empty() {
        return (Status::CantTell, format!("{} has no ops", r.label), details);
    }
    let status = worst(statuses.iter().copied());
    let reasons: Vec<String> =
        reasons.into_iter().zip(&statuses).filter(|(_, s)| **s == status).map(|(r, _)| r).collect();
    (status, reasons.join("; "), details)
}

/// The longest run of consecutive captured steps that are skipped: (first, last).
fn longest_run(steps: impl Iterator<Item = (u64, bool)>) -> Option<(u64, u64)> {
    let mut best: Option<(u64, u64)> = None;
    let mut current: Option<(u64, u64)> = None;
    for (s, skipped) in steps {
        current = match (skipped, current) {
            (true, Some((a, b))) if b + 1 == s => Some((a, s)),
            (true, _) => Some((s, s)),
            (false, _) => None,
        };
        if let Some((a, b)) = current {
            if best.is_none_or(|(x, y)| b - a > y - x) {
                best = Some((a, b));
            }
        }
    }
    best
}

pub(super) fn item(runs: &[Facts<'_>]) -> Item {
    let judged: Vec<(Status, String, Vec<String>)> = runs.iter().map(judge).collect();
    let status = worst(judged.iter().map(|j| j.0));
    let reason = judged.iter().filter(|j| j.0 == status).map(|j| j.1.clone()).collect::<Vec<_>>().join("; ");
    let details = judged.into_iter().flat_map(|j| j.2).collect();
    Item::new("loss_scale", status, reason, LOOK).with(details)
}

#[cfg(test)]
mod tests {
    #[test]
    fn runs_of_skipped_steps() {
        let steps = [(0, false), (1, true), (2, true), (4, true), (5, true), (6, true), (7, false)];
        assert_eq!(super::longest_run(steps.into_iter()), Some((4, 6)));
        assert_eq!(super::longest_run([(0, false)].into_iter()), None);
    }
}
