//! Initial weights: does each run start from the same weights, on every rank?
//!
//! A weight's initial value is its optimizer op's input at the parameter's first update, when the capture
//! starts at step 0 (a step skipped for overflow changes no weight, so the first update still sees the
//! initial value). Compared by content hash. A weight whose input 0 at that update was not read (a torn
//! file) is can't tell, named, and left out: never a difference between ranks or runs.

use super::item::{listed, worst, Facts, First, Firsts, Item, Seen, Status};
use crate::filter::rank_ranges;
use crate::roles::Update;
use std::collections::BTreeMap;

const LOOK: &str =
    "the optimizer ops' input 0 at the first update (`analyzer inspect RUN --op 'optimizer*'`)";

/// A run's initial weights: content hashes by (rank, parameter), and the weights whose initial value was
/// not read (each a line naming the rank, parameter and tensor). An unread weight is left out of every
/// comparison: a later update's input, or the op's next input, would compare other values.
struct Initial {
    hashes: BTreeMap<(u32, String), u64>,
    unread: Vec<String>,
}

/// Adds `r`'s first updates to `into`: `r` holds steps after those added before, so a parameter already
/// there keeps its update. Nothing is read once the run is known to start after step 0 (its first weights
/// need not be the initial ones, and the item says only that).
pub(super) fn add(r: &Seen<'_>, into: &mut Firsts) {
    let index = r.index();
    let start = r.ops.iter().map(|&o| index.ops[o].step).min();
    into.start = match (into.start, start) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let mut first: BTreeMap<(u32, String), &Update> = BTreeMap::new();
    for u in r.roles.updates.iter().filter(|u| r.ops.binary_search(&u.op).is_ok()) {
        let e = first.entry((u.rank, u.param.clone())).or_insert(u);
        if u.step < e.step {
            *e = u;
        }
    }
    let read_any = into.start == Some(0);
    for (key, u) in first {
        if into.first.contains_key(&key) {
            continue;
        }
        let read = if !read_any {
            Err(String::new())
        } else if !u.weight_read(index) {
            Err("the source holds no input 0 of the op (see the input problems: its file is torn or missing)"
                .to_string())
        } else {
            r.hash_or_why(u.before)
        };
        into.first.insert(key, First { step: u.step, op: index.ops[u.op].name.to_string(), read });
    }
}

/// The initial weights of a run, or why they are not known.
fn initial(label: &str, f: &Firsts) -> Result<Initial, String> {
    let Some(start) = f.start else { return Err(format!("{label} has no ops")) };
    if f.first.is_empty() {
        return Err(format!("{label} has no optimizer op: its weights are unknown"));
    }
    if start > 0 {
        return Err(format!(
            "{label}'s capture starts at step {start}: its first weights need not be the initial ones"
        ));
    }
    let mut found = Initial { hashes: BTreeMap::new(), unread: Vec::new() };
    for ((rank, param), First { step, op, read }) in &f.first {
        match read {
            Ok(h) => {
                found.hashes.insert((*rank, param.clone()), *h);
            }
            Err(why) => found.unread.push(format!(
                "rank {rank}: {param}: not read at its first update (step {step}, {op} input 0): {why}"
            )),
        }
    }
    Ok(found)
}

pub(super) fn item(runs: &[Facts<'_>]) -> Item {
    let found: Vec<Result<Initial, String>> = runs.iter().map(|r| initial(&r.label, &r.weights)).collect();
    let errors: Vec<String> = found.iter().filter_map(|f| f.as_ref().err().cloned()).collect();
    if !errors.is_empty() {
        return Item::new("initial_weights", Status::CantTell, errors.join("; "), LOOK);
    }
    let found: Vec<&Initial> = found.iter().filter_map(|f| f.as_ref().ok()).collect();
    let mut statuses = Vec::new();
    let mut reasons = Vec::new();
    let mut details = Vec::new();
    for (r, w) in runs.iter().zip(&found) {
        if w.hashes.is_empty() {
            reasons.push(format!("{}: no weight's initial value could be read", r.label));
            details.extend(listed(&w.unread, 5));
            return Item::new("initial_weights", Status::CantTell, reasons.join("; "), LOOK).with(details);
        }
    }
    let unread: Vec<(&Facts<'_>, &Vec<String>)> =
        runs.iter().zip(&found).map(|(r, w)| (r, &w.unread)).filter(|(_, u)| !u.is_empty()).collect();
    let found: Vec<&BTreeMap<(u32, String), u64>> = found.iter().map(|w| &w.hashes).collect();
    for (r, w) in runs.iter().zip(&found) {
        // The same parameter on other ranks.
        let mut by_param: BTreeMap<&str, Vec<(u32, u64)>> = BTreeMap::new();
        for ((rank, p), h) in w.iter() {
            by_param.entry(p.as_str()).or_default().push((*rank, *h));
        }
        let split: Vec<String> = by_param
            .iter()
            .filter(|(_, v)| v.iter().any(|(_, h)| *h != v[0].1))
            .map(|(p, v)| {
                format!("{p}: {} distinct initial values over {}", distinct(v), rank_ranges(&ranks(v)))
            })
            .collect();
        if !split.is_empty() {
            statuses.push(Status::CantTell);
            reasons.push(format!(
                "{}: {} weights start differently on different ranks: a bug under data parallelism, expected where \
                 ranks hold different shards (tensor or pipeline parallelism)",
                r.label,
                split.len()
            ));
            details.extend(listed(&split, 5));
        }
    }
    if let [a, b] = &found[..] {
        let differ: Vec<String> = a
            .iter()
            .filter_map(|(k, h)| b.get(k).filter(|hb| *hb != h).map(|_| format!("rank {}: {}", k.0, k.1)))
            .collect();
        let compared = a.keys().filter(|k| b.contains_key(*k)).count();
        if compared == 0 {
            statuses.push(Status::CantTell);
            reasons.push("the runs share no parameter name to compare".into());
        } else if differ.is_empty() {
            statuses.push(Status::Pass);
            reasons
                .push(format!("the runs start from the same weights ({compared} compared by content hash)"));
        } else {
            statuses.push(Status::Fail);
            reasons.push(format!("{} of {compared} weights start differently in the two runs", differ.len()));
            details.extend(listed(&differ, 8));
        }
    } else if statuses.is_empty() {
        let n = found[0].len();
        let one_rank = runs[0].ranks.len() == 1;
        if one_rank {
            statuses.push(Status::CantTell);
            reasons.push(format!("{n} initial weights found; give a second run to compare them with"));
        } else {
            statuses.push(Status::Pass);
            reasons.push(format!("every rank starts from the same weights ({n} compared)"));
        }
    }
    // Said first: the weights compared above are the others.
    for (r, lines) in unread.into_iter().rev() {
        statuses.push(Status::CantTell);
        reasons.insert(
            0,
            format!(
                "{}: {} initial weight{} not read (a torn or missing file), left out of the comparison",
                r.label,
                lines.len(),
                if lines.len() == 1 { "" } else { "s" }
            ),
        );
        details.splice(0..0, listed(lines, 5));
    }
    Item::new("initial_weights", worst(statuses), reasons.join("; "), LOOK).with(details)
}

fn distinct(v: &[(u32, u64)]) -> usize {
    let mut h: Vec<u64> = v.iter().map(|p| p.1).collect();
    h.sort_unstable();
    h.dedup();
    h.len()
}

fn ranks(v: &[(u32, u64)]) -> Vec<u32> {
    v.iter().map(|p| p.0).collect()
}
