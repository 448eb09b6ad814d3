//! The culprit search: the ops whose outputs fail, in execution order, and the first of them the
//! comparison clears of inherited blame, each input tied to the op that produced it by content hash
//! ([`hash_needed`] says which target tensors need one).

use super::comparison::FailingOp;
use super::row::CompareRow;
use crate::index::{Index, TensorId};
use crate::matching::input_producers;
use std::collections::{HashMap, HashSet};

/// What the comparison says about one input of a failing op.
enum InputEvidence {
    /// Compared and passes, or produced by an op whose compared outputs pass.
    Passes,
    /// Compared and fails, or produced by an op that fails.
    Fails,
    /// Produced by an op none of whose outputs was compared (no counterpart in the benchmark).
    FromUncompared(usize),
    /// Produced by no dumped op: data fed to the model, weights, or a tensor from before the dump.
    GraphInput,
}

/// The target tensors whose content hash [`find_culprit`] can look at: every op's outputs (candidate
/// producers) and the inputs of ops with a failing output (the only ops whose producers it asks for).
pub(super) fn hash_needed(index: &Index, rows: &[CompareRow]) -> Vec<bool> {
    let mut failed = vec![false; index.tensors.len()];
    for row in rows.iter().filter(|r| r.failed) {
        failed[row.target()] = true;
    }
    let mut needed = vec![false; index.tensors.len()];
    for op in &index.ops {
        let fails = op.outputs().any(|t| failed[t]);
        for t in op.outputs().chain(op.inputs().filter(|_| fails)) {
            needed[t] = true;
        }
    }
    needed
}

/// Ops whose outputs fail, in execution order, and the culprit: the first of them that the comparison
/// clears of inherited blame. An input passes when its own comparison passes, or, when it was not compared,
/// when the op that produced it (found by content hash) was compared and does not fail. An input from an op
/// that was not compared is no evidence. An op whose inputs come from no dumped op at all (data fed to the
/// model, weights, optimizer state) is cleared only when ops before it in its step were compared and pass:
/// they read the same data, so what is left is the op itself (or its weights). `hash` gives a target
/// tensor's content hash, where it has one.
#[cfg(test)]
pub(super) fn find_culprit(
    index: &Index,
    rows: &[CompareRow],
    hash: impl Fn(TensorId) -> Option<u64>,
) -> (Vec<FailingOp>, Option<usize>) {
    let (failing, culprit, _) = find_culprit_within(index, rows, hash);
    (failing, culprit)
}

/// [`find_culprit`], and whether an answer rested on a producer that may lie beyond `index` when it holds
/// a window of steps of a run: an input of a failing op, not compared itself, whose producer it found on
/// another rank or not at all (the whole run's index may hold a later one, in another window). A producer
/// on the input's own rank is the whole run's too: every op between them is of that rank and those steps.
pub(super) fn find_culprit_within(
    index: &Index,
    rows: &[CompareRow],
    hash: impl Fn(TensorId) -> Option<u64>,
) -> (Vec<FailingOp>, Option<usize>, bool) {
    // Without a failing row there is no failing op: no map of the rows and no producers to find (#18: 7.8
    // MB at 198,840 pairs of two identical runs).
    if !rows.iter().any(|r| r.failed) {
        return (Vec::new(), None, false);
    }
    let row_of: HashMap<TensorId, usize> = rows.iter().enumerate().map(|(i, r)| (r.target(), i)).collect();
    // A pair that could not be read, or of which nothing was measured, was not compared: it neither fails
    // nor clears anything (its producer decides for an input).
    let read_row = |t: &TensorId| row_of.get(t).copied().filter(|&r| rows[r].judged());
    let output_rows = |o: usize| index.ops[o].outputs().filter_map(|t| read_row(&t));
    let op_fails: Vec<bool> = (0..index.ops.len()).map(|o| output_rows(o).any(|r| rows[r].failed)).collect();
    let op_compared: Vec<bool> = (0..index.ops.len()).map(|o| output_rows(o).next().is_some()).collect();
    let producer = input_producers(index, hash);
    let evidence = |t: TensorId| match (read_row(&t), producer.get(&t)) {
        (Some(r), _) if rows[r].failed => InputEvidence::Fails,
        (Some(_), _) => InputEvidence::Passes,
        (None, Some(&p)) if !op_compared[p] => InputEvidence::FromUncompared(p),
        (None, Some(&p)) if op_fails[p] => InputEvidence::Fails,
        (None, Some(_)) => InputEvidence::Passes,
        (None, None) => InputEvidence::GraphInput,
    };
    let mut failing = Vec::new();
    let mut culprit = None;
    let mut crosses = false;
    // Steps (per rank) in which an op was compared and passes, and in which one fails, so far.
    let mut passing_seen: HashSet<(u32, u64)> = HashSet::new();
    let mut failing_seen: HashSet<(u32, u64)> = HashSet::new();
    // Op ids follow execution order (`Index::order_by_execution`).
    for (o, (op, &compared)) in index.ops.iter().zip(&op_compared).enumerate() {
        let failing_rows: Vec<usize> = output_rows(o).filter(|&r| rows[r].failed).collect();
        if failing_rows.is_empty() {
            if compared {
                passing_seen.insert((op.rank, op.step));
            }
            continue;
        }
        let inputs: Vec<(TensorId, InputEvidence)> = op.inputs().map(|t| (t, evidence(t))).collect();
        crosses |= op.inputs().any(|t| {
            read_row(&t).is_none() && producer.get(&t).is_none_or(|&p| index.ops[p].rank != op.rank)
        });
        let any = |f: fn(&InputEvidence) -> bool| inputs.iter().any(|(_, e)| f(e));
        let uncompared = inputs.iter().find_map(|(t, e)| match e {
            InputEvidence::FromUncompared(p) => Some((*t, *p)),
            _ => None,
        });
        let key = (op.rank, op.step);
        let first_failure_of_step = failing_seen.insert(key);
        let after_passing_ops = first_failure_of_step && passing_seen.contains(&key);
        let (inputs_pass, inputs_unverified) = if any(|e| matches!(e, InputEvidence::Fails)) {
            (false, None)
        } else if let Some((t, p)) = uncompared {
            let why = format!(
                "its input {} comes from {} [{}], which has no counterpart in the benchmark (pass --mapping, or \
                 look at that op)",
                index.tensor_label(t),
                index.ops[p].name,
                index.ops[p].op_type
            );
            (false, Some(why))
        } else if any(|e| matches!(e, InputEvidence::Passes)) {
            (true, None)
        } else if after_passing_ops {
            let why =
                "its inputs come from no dumped op (weights, optimizer state) and the benchmark did not \
                       dump them, but the ops before it in its step pass";
            (false, Some(why.to_string()))
        } else {
            let why = "it reads only inputs no dumped op produced (data fed to the model, weights) and the \
                       benchmark did not dump them: either they differ (data order, preprocessing, initial \
                       weights) or the op itself is wrong";
            (false, Some(why.to_string()))
        };
        let cleared =
            inputs_pass || (after_passing_ops && uncompared.is_none() && inputs_unverified.is_some());
        if cleared && culprit.is_none() {
            culprit = Some(failing.len());
        }
        failing.push(FailingOp { op: o, failing_rows, inputs_pass, inputs_unverified });
    }
    (failing, culprit, crosses)
}

#[cfg(test)]
mod tests {
    use super::super::row::Measured;
    use super::super::test_data::step;
    use super::*;

    /// Rows for the outputs of the ops named in `compared`, failing where `fails` names them.
    fn rows(index: &Index, compared: &[&str], fails: &[&str]) -> Vec<CompareRow> {
        index
            .ops
            .iter()
            .filter(|op| compared.contains(&op.name.as_str()))
            .map(|op| {
                let mut row = CompareRow::new(op.outputs().start, None, None);
                row.failed = fails.contains(&op.name.as_str());
                row
            })
            .collect()
    }

    fn verdict(index: &Index, rows: &[CompareRow], hashes: &[Option<u64>]) -> (Option<String>, Vec<bool>) {
        let (failing, culprit) = find_culprit(index, rows, |t| hashes[t]);
        let culprit = culprit.map(|c| index.ops[failing[c].op].name.to_string());
        (culprit, failing.iter().map(|f| f.inputs_unverified.is_some()).collect())
    }

    #[test]
    fn inputs_clear_an_op_only_on_evidence() {
        // data -> embed -> mm (weights) -> act: embed reads only graph inputs (data 1, table 2).
        let (index, hashes) = step(&[("embed", &[1, 2], 10), ("mm", &[10, 3], 11), ("act", &[11], 12)]);
        // mm fails and its input from embed passes: mm is the culprit.
        let (culprit, unverified) =
            verdict(&index, &rows(&index, &["embed", "mm", "act"], &["mm", "act"]), &hashes);
        assert_eq!((culprit.as_deref(), unverified), (Some("mm"), vec![false, false]));
        // The first op fails reading graph inputs only: not the culprit, and nothing after it either.
        let (culprit, unverified) =
            verdict(&index, &rows(&index, &["embed", "mm", "act"], &["embed", "mm", "act"]), &hashes);
        assert_eq!((culprit, unverified), (None, vec![true, false, false]));
        // embed was not compared (no benchmark counterpart): mm's input clears nothing.
        let (culprit, unverified) = verdict(&index, &rows(&index, &["mm", "act"], &["mm", "act"]), &hashes);
        assert_eq!((culprit, unverified), (None, vec![true, false]));
        // An op reading graph inputs only, after ops of its step that pass: the culprit, said so.
        let (index, hashes) = step(&[("embed", &[1], 10), ("update", &[2, 3], 11)]);
        let (failing, culprit) =
            find_culprit(&index, &rows(&index, &["embed", "update"], &["update"]), |t| hashes[t]);
        let f = &failing[culprit.expect("a culprit")];
        assert_eq!(index.ops[f.op].name, "update");
        assert!(f
            .inputs_unverified
            .as_deref()
            .unwrap_or_default()
            .contains("the ops before it in its step pass"));
    }

    /// A first failing op that cannot be cleared does not hide a later one that can (another branch: its
    /// inputs pass); the later one is the culprit, and the note the reports put under it names the first.
    #[test]
    fn a_culprit_after_an_uncleared_failure_comes_with_it() {
        // embed reads graph inputs only (fails, unverified); norm -> proj, another branch, proj fails alone.
        let (index, hashes) = step(&[("embed", &[1, 2], 10), ("norm", &[3], 11), ("proj", &[11], 12)]);
        let rows = rows(&index, &["embed", "norm", "proj"], &["embed", "proj"]);
        let (failing, culprit) = find_culprit(&index, &rows, |t| hashes[t]);
        assert_eq!(culprit, Some(1));
        assert_eq!(index.ops[failing[1].op].name, "proj");
        assert!(failing[0].inputs_unverified.is_some() && failing[1].inputs_pass);
        let note = failing[0].before_culprit_note(&index);
        assert!(
            note.starts_with("an earlier failing op, embed [T] (step 0 rank 0), cannot be blamed"),
            "{note}"
        );
        assert!(note.contains("may have begun there"), "{note}");
    }

    #[test]
    fn a_pair_nothing_was_measured_for_clears_nothing() {
        let (index, hashes) = step(&[("embed", &[1, 2], 10), ("mm", &[10, 3], 11), ("act", &[11], 12)]);
        let mut rows = rows(&index, &["embed", "mm", "act"], &["mm", "act"]);
        // embed's output passes only when measured: without data it is no evidence for mm's input.
        rows[0].measured = Measured::Nothing;
        assert!(!rows[0].passed() && rows[0].unmeasured());
        let (culprit, unverified) = verdict(&index, &rows, &hashes);
        assert_eq!((culprit, unverified), (None, vec![true, false]));
        rows[0].measured = Measured::EqualHashes;
        let (culprit, _) = verdict(&index, &rows, &hashes);
        assert_eq!(culprit.as_deref(), Some("mm"));
    }
}
