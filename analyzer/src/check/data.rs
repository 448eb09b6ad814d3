//! Data: do the runs see the same batches, in the same order, and does every rank see its own?
//!
//! A step's data is identified by the content hashes of its data inputs: the leaf inputs (no earlier op of
//! the step produced them) of integer dtype (token ids, labels, indices, masks), and the first op's input
//! 0 when it is a float leaf and the op is not a table lookup (an image batch entering the first layer).
//! Equal hashes mean the same bytes: the same batch, preprocessed the same way.
//! - Two runs: the same batches at the same steps pass. The same batches in another order is a shuffle
//!   difference; batches of one run that the other never saw are other data (dataset or preprocessing), or
//!   a shuffle over more steps than were captured.
//! - Ranks of one run: two ranks with the same batch at the same step read the same shard (a sharding bug).

use super::item::{listed, worst, Facts, Item, Seen, Signatures, Status};
use crate::filter::rank_ranges;
use crate::index::{Index, OpId, TensorId};
use crate::roles::Role;
use std::collections::{BTreeMap, HashMap};

const LOOK: &str =
    "the data inputs of the step named below (`analyzer inspect RUN --step S`: the leaf inputs)";

/// Op types whose input 0 is a table (an embedding), not data.
const LOOKUPS: &[&str] = &["GatherV2", "Gather", "GatherV2D", "EmbeddingLookup", "Embedding", "EmbeddingBag"];

/// Data signatures by (rank, step): the hashes of the step's data inputs, in execution order. Each step's
/// own (its leaves are its own), so the signatures of a run's windows of steps add up to the run's.
pub(super) fn signatures(r: &Seen<'_>) -> Signatures {
    let index = r.index();
    let mut steps: BTreeMap<(u32, u64), Vec<OpId>> = BTreeMap::new();
    for &o in &r.ops {
        steps.entry((index.ops[o].rank, index.ops[o].step)).or_default().push(o);
    }
    let mut out = BTreeMap::new();
    for (key, ops) in steps {
        let tensors = data_inputs(index, &r.roles, &ops);
        let hashes: Vec<u64> = tensors.iter().filter_map(|&t| r.hash(t)).collect();
        if !hashes.is_empty() && hashes.len() == tensors.len() {
            out.insert(key, hashes);
        }
    }
    out
}

fn data_inputs(index: &Index, roles: &crate::roles::Roles, ops: &[OpId]) -> Vec<TensorId> {
    let mut found = Vec::new();
    for (i, &o) in ops.iter().enumerate() {
        let op = &index.ops[o];
        for (k, t) in op.inputs().enumerate() {
            if roles.role(t) != Some(Role::Leaf) {
                continue;
            }
            let info = &index.tensors[t];
            let first_layer_input =
                i == 0 && k == 0 && info.dtype.is_float() && !LOOKUPS.contains(&op.op_type.as_str());
            if !info.dtype.is_float() || first_layer_input {
                found.push(t);
            }
        }
    }
    found
}

pub(super) fn item(runs: &[Facts<'_>]) -> Item {
    let sigs: Vec<&Signatures> = runs.iter().map(|r| &r.signatures).collect();
    if sigs.iter().any(|s| s.is_empty()) {
        let which: Vec<&str> =
            runs.iter().zip(&sigs).filter(|(_, s)| s.is_empty()).map(|(r, _)| r.label.as_str()).collect();
        return Item::new(
            "data",
            Status::CantTell,
            format!(
                "no data input found in {} (integer leaf inputs, or the first op's input 0) with a content hash",
                which.join(" and ")
            ),
            LOOK,
        );
    }
    let mut statuses = Vec::new();
    let mut reasons = Vec::new();
    let mut details = Vec::new();
    for (r, s) in runs.iter().zip(&sigs) {
        let (status, reason) = sharding(r, s);
        statuses.push(status);
        if let Some(reason) = reason {
            reasons.push(reason);
        }
    }
    if let [a, b] = &sigs[..] {
        let (status, reason, d) = compare(a, b);
        statuses.push(status);
        reasons.push(reason);
        details.extend(d);
    } else if runs[0].ranks.len() == 1 {
        statuses.push(Status::CantTell);
        reasons.push("one rank of one run: nothing to compare its data with (give a second run)".into());
        details.push(format!("{} steps with data inputs", sigs[0].len()));
    }
    let status = worst(statuses.iter().copied());
    let reason =
        if reasons.is_empty() { "every rank reads its own batches".into() } else { reasons.join("; ") };
    Item::new("data", status, reason, LOOK).with(details)
}

/// Ranks of one run that read the same batch at the same step.
fn sharding(r: &Facts<'_>, sigs: &Signatures) -> (Status, Option<String>) {
    let mut by_step: BTreeMap<u64, HashMap<&Vec<u64>, Vec<u32>>> = BTreeMap::new();
    for ((rank, step), sig) in sigs {
        by_step.entry(*step).or_default().entry(sig).or_default().push(*rank);
    }
    let ranks = r.ranks.len();
    for (step, groups) in &by_step {
        if let Some(same) = groups.values().find(|ranks| ranks.len() > 1) {
            return (
                Status::Fail,
                Some(format!(
                    "{}: {} read the same batch at step {step}: each rank must read its own shard",
                    r.label,
                    rank_ranges(same)
                )),
            );
        }
    }
    if ranks > 1 {
        (Status::Pass, Some(format!("{}: its {ranks} ranks read different batches", r.label)))
    } else {
        (Status::Pass, None)
    }
}

/// Two runs' batches, step by step on each rank.
fn compare(a: &Signatures, b: &Signatures) -> (Status, String, Vec<String>) {
    let common: Vec<&(u32, u64)> = a.keys().filter(|k| b.contains_key(k)).collect();
    if common.is_empty() {
        return (Status::CantTell, "the runs share no step and rank with data inputs".into(), Vec::new());
    }
    let differing: Vec<&(u32, u64)> = common.iter().copied().filter(|k| a[k] != b[k]).collect();
    if differing.is_empty() {
        let reason = format!("the same batches at the same steps ({} steps compared)", common.len());
        return (Status::Pass, reason, Vec::new());
    }
    let batches_a: std::collections::HashSet<&Vec<u64>> = a.values().collect();
    let unseen: Vec<&(u32, u64)> = differing.iter().copied().filter(|k| !batches_a.contains(&b[k])).collect();
    let lines: Vec<String> = differing
        .iter()
        .map(|(rank, step)| {
            let other = a.iter().find(|(_, v)| **v == b[&(*rank, *step)]).map(|((_, s), _)| *s);
            match other {
                Some(s) => format!("step {step} rank {rank}: run 2's batch is run 1's batch of step {s}"),
                None => format!("step {step} rank {rank}: run 2's batch never appears in run 1"),
            }
        })
        .collect();
    let (first_rank, first_step) = differing[0];
    let reason = if unseen.is_empty() {
        format!(
            "a shuffle difference: the same batches in another order ({} of {} steps, first at step {first_step} rank \
             {first_rank})",
            differing.len(),
            common.len()
        )
    } else {
        format!(
            "different data: {} of {} steps (first at step {first_step} rank {first_rank}) hold batches run 1 never \
             saw: another dataset, preprocessing or sharding (or a shuffle over more steps than were captured)",
            differing.len(),
            common.len()
        )
    };
    (Status::Fail, reason, listed(&lines, 8))
}
