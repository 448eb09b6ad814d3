//! What is anomalous about an event, found from its own tensors and by comparing ranks (or a baseline):
//! - overflow: NaN, inf, or floats at the saturation limit in its tensors;
//! - collective disagreement: members of one collective got results that must be equal and are not
//!   (AllReduce, AllGather and Broadcast outputs are the same on every member; a receive gets what the
//!   peer sent). The minority is flagged, every member when there is no majority;
//! - replica divergence (redundancy): a tensor that a strict majority of ranks hold bit for bit at a step
//!   (data-parallel replicas' weights, optimizer state, reduced gradients) differs on the others. With two
//!   ranks there is no majority: a tensor both held alike at the step before and no longer does flags both;
//! - baseline difference: the tensor's hash differs from the same tensor of the same rank in a baseline run.

use super::events::{Event, EventKind, Name, RunEvents};
use super::program::ProgramEvent;
use crate::index::Io;
use accutrace_formats::capture::CollectiveOp;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Kinds of finding, in the order a report names them when one event has several.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    Overflow,
    CollectiveDisagreement,
    ReplicaDivergence,
    BaselineDifference,
}

impl FindingKind {
    pub fn describe(self) -> &'static str {
        match self {
            FindingKind::Overflow => "overflow",
            FindingKind::CollectiveDisagreement => "collective disagreement",
            FindingKind::ReplicaDivergence => "replica divergence",
            FindingKind::BaselineDifference => "differs from the baseline",
        }
    }
}

/// One anomaly of one event.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    pub kind: FindingKind,
    /// The tensor it concerns (`op.output.0`).
    pub tensor: Option<String>,
    pub detail: String,
}

/// Position of an event: (index into `RunEvents::ranks`, index into that rank's events).
pub type EventRef = (usize, usize);

/// The findings of every anomalous event, and what the redundancy check compared.
#[derive(Clone, Debug, Default)]
pub struct Detected {
    pub findings: BTreeMap<EventRef, Vec<Finding>>,
    /// Per step: tensors held alike by every rank that has them (2 or more ranks).
    pub replicated_per_step: BTreeMap<u64, u64>,
    pub warnings: Vec<String>,
}

impl Detected {
    fn add(&mut self, at: EventRef, kind: FindingKind, tensor: Option<String>, detail: String) {
        let list = self.findings.entry(at).or_default();
        if !list.iter().any(|f| f.kind == kind) {
            list.push(Finding { kind, tensor, detail });
        }
    }
}

pub fn detect(run: &RunEvents, baseline: Option<&RunEvents>) -> Detected {
    let mut d = Detected::default();
    overflows(run, &mut d);
    collectives(run, &mut d);
    replicas(run, &mut d);
    if let Some(b) = baseline {
        against_baseline(run, b, &mut d);
    }
    d
}

pub(crate) fn overflows(run: &RunEvents, d: &mut Detected) {
    for (r, rank) in run.ranks.iter().enumerate() {
        for (i, e) in rank.events.iter().enumerate() {
            let Some(t) = e.tensors.iter().find(|t| t.anomalous()) else { continue };
            let inputs_clean = e.tensors.iter().filter(|t| t.io == Io::Input).all(|t| !t.anomalous());
            let what = format!(
                "{} NaN, {} inf, {} saturated of {} values{}",
                t.nan,
                t.pos_inf + t.neg_inf,
                t.at_saturation,
                t.elements,
                match (t.io, inputs_clean) {
                    (Io::Output, true) => " from finite inputs",
                    (Io::Output, false) => " (its inputs were already anomalous)",
                    (Io::Input, _) => " in an input",
                }
            );
            d.add((r, i), FindingKind::Overflow, Some(e.label(t)), what);
        }
    }
}

fn hash_of(e: &Event, io: Io) -> Option<u64> {
    e.tensors.iter().find(|t| t.io == io).and_then(|t| t.hash)
}

/// Flags the members whose value is not the strict majority's; every member when there is none.
fn flag_disagreement(
    members: &[(EventRef, u64)],
    d: &mut Detected,
    kind: FindingKind,
    what: &dyn Fn(EventRef) -> (Option<String>, String),
) {
    let mut counts: HashMap<u64, usize> = HashMap::new();
    for (_, h) in members {
        *counts.entry(*h).or_default() += 1;
    }
    if counts.len() < 2 {
        return;
    }
    let majority = counts.iter().find(|(_, &n)| n * 2 > members.len() && n >= 2).map(|(h, _)| *h);
    for &(at, h) in members {
        if majority != Some(h) {
            let (tensor, detail) = what(at);
            let detail = match majority {
                Some(_) => detail,
                None => {
                    format!("{detail} (no majority among {} members: every one is flagged)", members.len())
                }
            };
            d.add(at, kind, tensor, detail);
        }
    }
}

/// A point-to-point message: (communicator, source, destination, count).
type MessageKey = (Name, u32, u32, u64);

pub(crate) fn collectives<E: ProgramEvent>(run: &RunEvents<E>, d: &mut Detected) {
    let mut instances: BTreeMap<(Name, u64), Vec<EventRef>> = BTreeMap::new();
    let mut sends: HashMap<MessageKey, u64> = HashMap::new();
    let mut recvs: Vec<(EventRef, MessageKey, u64)> = Vec::new();
    for (r, rank) in run.ranks.iter().enumerate() {
        for (i, e) in rank.events.iter().enumerate() {
            let Some(c) = e.call() else { continue };
            match (c.op, c.peer) {
                (CollectiveOp::Send, Some(dst)) => {
                    if let Some(h) = run.call_hash((r, i), Io::Input) {
                        sends.insert((c.comm.clone(), c.comm_rank, dst, c.seq), h);
                    }
                }
                (CollectiveOp::Recv, Some(src)) => {
                    if let Some(h) = run.call_hash((r, i), Io::Output) {
                        recvs.push(((r, i), (c.comm.clone(), src, c.comm_rank, c.seq), h));
                    }
                }
                _ => instances.entry((c.comm.clone(), c.seq)).or_default().push((r, i)),
            }
        }
    }
    let event = |(r, i): EventRef| &run.ranks[r].events[i];
    for ((comm, seq), members) in &instances {
        let op = event(members[0]).call().map(|c| c.op);
        if !matches!(op, Some(CollectiveOp::AllReduce | CollectiveOp::AllGather | CollectiveOp::Broadcast)) {
            continue;
        }
        let outputs: Vec<(EventRef, u64)> =
            members.iter().filter_map(|&m| run.call_hash(m, Io::Output).map(|h| (m, h))).collect();
        let api = op.map_or("", |o| o.api_name());
        let what = |at: EventRef| {
            let label = run.call_label(at, Io::Output);
            (label, format!("{api} #{seq} on {comm}: this member's result differs from the others'"))
        };
        // A broadcast's result is the root's buffer: compare with it when the root's input was read.
        let root_input = members
            .iter()
            .find(|&&m| event(m).call().is_some_and(|c| Some(c.comm_rank) == c.peer))
            .and_then(|&m| run.call_hash(m, Io::Input));
        match (op, root_input) {
            (Some(CollectiveOp::Broadcast), Some(root)) => {
                for &(at, h) in &outputs {
                    if h != root {
                        let (tensor, _) = what(at);
                        let detail =
                            format!("{api} #{seq} on {comm}: this member did not get the root's buffer");
                        d.add(at, FindingKind::CollectiveDisagreement, tensor, detail);
                    }
                }
            }
            _ => flag_disagreement(&outputs, d, FindingKind::CollectiveDisagreement, &what),
        }
    }
    for (at, key, h) in recvs {
        if sends.get(&key).is_some_and(|&sent| sent != h) {
            let label = run.call_label(at, Io::Output);
            let detail = format!(
                "HcclRecv #{} from rank {} on {}: received other bytes than were sent",
                key.3, key.1, key.0
            );
            d.add(at, FindingKind::CollectiveDisagreement, label, detail);
        }
    }
}

/// (step, op name, occurrence of that name in the step, io, index): the same tensor on every replica.
type TensorKey = (u64, Name, u32, Io, u32);

/// One step's tensors by [`TensorKey`], each with where it is and its content hash.
type StepTensors = BTreeMap<TensorKey, Vec<(EventRef, Option<u64>)>>;

/// `run`'s op events as (step, rank position, event position), steps ascending
/// ([`UNKNOWN_STEP`](super::events::UNKNOWN_STEP) last): each step's [`StepTensors`] are made from its
/// own ([`step_tensors`]). What the replica and baseline checks compare never spans two steps, so the keys
/// of the whole run are never held at once (#18: they were a tenth of `ranks`' memory, growing with the
/// steps).
fn op_events_by_step(run: &RunEvents) -> Vec<(u64, usize, usize)> {
    let mut ops: Vec<(u64, usize, usize)> = Vec::new();
    for (r, rank) in run.ranks.iter().enumerate() {
        let of_rank = rank.events.iter().enumerate().filter(|(_, e)| matches!(e.kind, EventKind::Op { .. }));
        ops.extend(of_rank.map(|(i, e)| (e.step, r, i)));
    }
    ops.sort_unstable();
    ops
}

/// The steps of [`op_events_by_step`]'s list, one slice each.
fn by_step(ops: &[(u64, usize, usize)]) -> impl Iterator<Item = &[(u64, usize, usize)]> {
    ops.chunk_by(|a, b| a.0 == b.0)
}

/// The tensors of one step's op events (a slice of [`by_step`]).
fn step_tensors(run: &RunEvents, step_ops: &[(u64, usize, usize)]) -> StepTensors {
    let mut keys = StepTensors::new();
    // The how-many-th op of its name on its rank at this step.
    let mut seen: HashMap<(usize, &Name), u32> = HashMap::new();
    for &(step, r, i) in step_ops {
        let e = &run.ranks[r].events[i];
        let EventKind::Op { name, .. } = &e.kind else { continue };
        let n = seen.entry((r, name)).or_default();
        for t in &e.tensors {
            keys.entry((step, name.clone(), *n, t.io, t.index)).or_default().push(((r, i), t.hash));
        }
        *n += 1;
    }
    keys
}

/// Two ranks: tensors held alike at their last step, by (name, occurrence, io, index). What the replica check
/// carries from one step to the next (from one window of steps to the next, in a fold).
pub(crate) type AlikeBefore = HashMap<(Name, u32, Io, u32), bool>;

fn replicas(run: &RunEvents, d: &mut Detected) {
    replicas_after(run, &mut AlikeBefore::new(), d);
}

/// [`replicas`] of steps that come after those `alike_before` was left by.
pub(crate) fn replicas_after(run: &RunEvents, alike_before: &mut AlikeBefore, d: &mut Detected) {
    for step_ops in by_step(&op_events_by_step(run)) {
        replicas_at_step(&step_tensors(run, step_ops), alike_before, d);
    }
}

/// [`replicas`] at one step.
fn replicas_at_step(keys: &StepTensors, alike_before: &mut AlikeBefore, d: &mut Detected) {
    for ((step, name, n, io, index), members) in keys {
        let hashed: Vec<(EventRef, u64)> = members.iter().filter_map(|(at, h)| h.map(|h| (*at, h))).collect();
        if hashed.len() < 2 {
            continue;
        }
        let all_alike = hashed.iter().all(|(_, h)| *h == hashed[0].1);
        if all_alike {
            *d.replicated_per_step.entry(*step).or_default() += 1;
        }
        let label = format!("{name}.{}.{index}", io.as_str());
        let stable = (name.clone(), *n, *io, *index);
        if hashed.len() == 2 {
            if !all_alike && alike_before.get(&stable) == Some(&true) {
                for (at, _) in &hashed {
                    let detail =
                        "the two replicas held this tensor alike at the step before and no longer do \
                                  (two ranks: which one is right cannot be told)"
                            .to_string();
                    d.add(*at, FindingKind::ReplicaDivergence, Some(label.clone()), detail);
                }
            }
            alike_before.insert(stable, all_alike);
            continue;
        }
        let mut counts: HashMap<u64, usize> = HashMap::new();
        for (_, h) in &hashed {
            *counts.entry(*h).or_default() += 1;
        }
        let Some((&majority, &held)) = counts.iter().find(|(_, &c)| c * 2 > hashed.len() && c >= 2) else {
            continue;
        };
        for (at, h) in &hashed {
            if *h != majority {
                let detail = format!(
                    "{held} of {} ranks hold this tensor bit for bit; this rank's differs",
                    hashed.len()
                );
                d.add(*at, FindingKind::ReplicaDivergence, Some(label.clone()), detail);
            }
        }
    }
}

fn against_baseline(run: &RunEvents, baseline: &RunEvents, d: &mut Detected) {
    let calls = baseline.ranks.iter().map(|b| (b.rank, b.events.iter().filter_map(CallResult::of).collect()));
    let unmatched = baseline_tensors(run, baseline, d) + baseline_calls(run, &calls.collect(), d);
    d.warnings.extend(no_counterpart(unmatched));
}

/// What a run's HCCL call is compared on with the baseline's call of the same rank and place in order: its
/// function and its result's hash. A long baseline's calls are kept to the end in this form, not as events
/// (#18: 24 bytes a call, not a few hundred).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct CallResult {
    op: CollectiveOp,
    output: Option<u64>,
}

impl CallResult {
    /// The call's, or `None` for an op.
    pub(crate) fn of(e: &Event) -> Option<CallResult> {
        e.collective().map(|c| CallResult { op: c.op, output: hash_of(e, Io::Output) })
    }
}

/// The warning that `unmatched` tensors or calls have no counterpart in the baseline, when any has none.
pub(crate) fn no_counterpart(unmatched: u64) -> Option<String> {
    (unmatched > 0).then(|| format!("{unmatched} tensor(s) or call(s) have no counterpart in the baseline"))
}

/// Each op's tensors against the baseline's of the same step, rank, op name, occurrence and slot; returns how
/// many have no counterpart. Steps are compared one at a time, so `run` and `baseline` may hold any steps, the
/// same of each (a window of both runs).
pub(crate) fn baseline_tensors(run: &RunEvents, baseline: &RunEvents, d: &mut Detected) -> u64 {
    let (ours_ops, theirs_ops) = (op_events_by_step(run), op_events_by_step(baseline));
    let mut theirs_steps = by_step(&theirs_ops).peekable();
    let mut unmatched = 0u64;
    for step_ops in by_step(&ours_ops) {
        let step = step_ops[0].0;
        // The baseline's steps that this run lacks have nothing to compare with.
        while theirs_steps.next_if(|t| t[0].0 < step).is_some() {}
        let theirs = match theirs_steps.next_if(|t| t[0].0 == step) {
            Some(t) => step_tensors(baseline, t),
            None => StepTensors::new(),
        };
        let mut base: HashMap<(u32, &TensorKey), u64> = HashMap::new();
        for (key, members) in &theirs {
            for (at, h) in members {
                if let Some(h) = h {
                    base.insert((baseline.ranks[at.0].rank, key), *h);
                }
            }
        }
        unmatched += baseline_differences(run, &step_tensors(run, step_ops), &base, d);
    }
    unmatched
}

/// Each rank's HCCL calls against the baseline's of the same rank, in order; returns how many have no
/// counterpart. `run` holds every call of its ranks, `baseline` every call of its own, by rank.
pub(crate) fn baseline_calls<E: ProgramEvent>(
    run: &RunEvents<E>,
    baseline: &BTreeMap<u32, Vec<CallResult>>,
    d: &mut Detected,
) -> u64 {
    let mut unmatched = 0u64;
    // Collectives: the k-th call of a rank against the baseline's k-th (communicator names differ
    // between runs: each run made its own root info).
    for (r, rank) in run.ranks.iter().enumerate() {
        let Some(theirs) = baseline.get(&rank.rank) else { continue };
        let ours = rank.events.iter().enumerate().filter_map(|(i, e)| Some((i, e.call()?.op)));
        for (k, (i, op)) in ours.enumerate() {
            let Some(other) = theirs.get(k) else {
                unmatched += 1;
                continue;
            };
            if other.op != op {
                continue;
            }
            if let (Some(a), Some(b)) = (run.call_hash((r, i), Io::Output), other.output) {
                if a != b {
                    let label = run.call_label((r, i), Io::Output);
                    let detail = format!("the result of this rank's call #{k} differs from the baseline's");
                    d.add((r, i), FindingKind::BaselineDifference, label, detail);
                }
            }
        }
    }
    unmatched
}

/// One step's tensors of `run` against the baseline's hashes of the same step (by rank and key): each
/// that differs is a finding; returns how many have no counterpart.
fn baseline_differences(
    run: &RunEvents,
    ours: &StepTensors,
    base: &HashMap<(u32, &TensorKey), u64>,
    d: &mut Detected,
) -> u64 {
    let mut unmatched = 0;
    for (key, members) in ours {
        for (at, h) in members {
            let Some(h) = h else { continue };
            match base.get(&(run.ranks[at.0].rank, key)) {
                Some(b) if b != h => {
                    let label = format!("{}.{}.{}", key.1, key.3.as_str(), key.4);
                    let detail =
                        "its content hash differs from the baseline's at the same step and rank".to_string();
                    d.add(*at, FindingKind::BaselineDifference, Some(label), detail);
                }
                Some(_) => {}
                None => unmatched += 1,
            }
        }
    }
    unmatched
}

#[cfg(test)]
mod tests {
    use super::super::events::{RankEvents, TensorSummary};
    use super::*;

    /// An op `name` at `step` with one output of content hash `hash`.
    fn op(step: u64, name: &str, hash: u64) -> Event {
        let t = TensorSummary::zeros(Io::Output, 4, Some(hash));
        Event {
            step,
            time_us: None,
            kind: EventKind::Op { name: name.into(), op_type: "X".into() },
            tensors: vec![t],
        }
    }

    /// Ranks 0 and 1, each running `a` twice at every step of `steps`; `hash` gives each output's hash
    /// from (rank, step, occurrence).
    fn run(steps: std::ops::Range<u64>, hash: impl Fn(u32, u64, u64) -> u64) -> RunEvents {
        let events = |rank| {
            let at = steps.clone().flat_map(|s| (0..2).map(move |n| (s, n)));
            at.map(|(s, n)| op(s, "a", hash(rank, s, n))).collect()
        };
        RunEvents {
            ranks: (0..2).map(|rank| RankEvents { rank, events: events(rank) }).collect(),
            ..RunEvents::default()
        }
    }

    /// Compared one step at a time, each tensor still meets the baseline's of its own step, rank and
    /// occurrence of its op's name: steps only one side has are no counterpart, never another step's.
    #[test]
    fn the_baseline_is_met_step_by_step_whichever_steps_each_side_lacks() {
        let same = |rank: u32, step: u64, n: u64| u64::from(rank) * 100 + step * 10 + n;
        let ours = run(0..3, |rank, step, n| same(rank, step, n) + u64::from((rank, step, n) == (1, 2, 1)));
        let baseline = run(1..4, same);
        let d = detect(&ours, Some(&baseline));
        let differing: Vec<(&EventRef, Vec<FindingKind>)> =
            d.findings.iter().map(|(at, f)| (at, f.iter().map(|f| f.kind).collect())).collect();
        // Rank 1's event 5: step 2, the second `a`.
        assert_eq!(differing, [(&(1, 5), vec![FindingKind::BaselineDifference])]);
        assert_eq!(d.warnings, ["4 tensor(s) or call(s) have no counterpart in the baseline"]);
    }
}
