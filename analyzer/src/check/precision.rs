//! Mixed precision: which op types compute in which float dtype (the dtype of their float outputs), and,
//! against a second run, the op types whose dtypes differ.

use super::item::{listed, Census, Facts, Item, Seen, Status};
use accutrace_formats::DType;
use std::collections::{BTreeMap, BTreeSet};

const LOOK: &str = "the op types listed (`analyzer inspect RUN --op NAME` shows each tensor's dtype)";

/// Adds the dtype census of `r`'s ops to `out` (counts add up over a run's windows of steps).
pub(super) fn census(r: &Seen<'_>, out: &mut Census) {
    let index = r.index();
    for &o in &r.ops {
        let op = &index.ops[o];
        let dtypes: BTreeSet<DType> =
            op.outputs().map(|t| index.tensors[t].dtype).filter(|d| d.is_float()).collect();
        for d in dtypes {
            *out.entry(op.op_type.to_string()).or_default().entry(d.name().to_string()).or_default() += 1;
        }
    }
}

/// `fp16: 420 ops (MatMulV2 96, Add 48, ...)` per dtype.
fn summary(c: &Census) -> Vec<String> {
    let mut by_dtype: BTreeMap<&str, Vec<(&str, u64)>> = BTreeMap::new();
    for (op_type, dtypes) in c {
        for (d, n) in dtypes {
            by_dtype.entry(d).or_default().push((op_type, *n));
        }
    }
    by_dtype
        .into_iter()
        .map(|(d, mut types)| {
            types.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(y.0)));
            let total: u64 = types.iter().map(|t| t.1).sum();
            let shown: Vec<String> = types.iter().take(8).map(|(t, n)| format!("{t} {n}")).collect();
            let more = if types.len() > 8 { format!(", +{} types", types.len() - 8) } else { String::new() };
            format!("{d}: {total} ops ({}{more})", shown.join(", "))
        })
        .collect()
}

pub(super) fn item(runs: &[Facts<'_>]) -> Item {
    let censuses: Vec<&Census> = runs.iter().map(|r| &r.census).collect();
    let mut details = Vec::new();
    for (r, c) in runs.iter().zip(&censuses) {
        details.extend(summary(c).into_iter().map(|line| format!("{}: {line}", r.label)));
    }
    if censuses.iter().any(|c| c.is_empty()) {
        return Item::new("mixed_precision", Status::CantTell, "no float op outputs were dumped", LOOK)
            .with(details);
    }
    let [a, b] = &censuses[..] else {
        return Item::new(
            "mixed_precision",
            Status::Pass,
            "the dtype census of the run (compare it with what the benchmark runs in)",
            LOOK,
        )
        .with(details);
    };
    let set = |m: &BTreeMap<String, u64>| m.keys().cloned().collect::<Vec<_>>().join("+");
    let differ: Vec<String> = a
        .iter()
        .filter_map(|(t, da)| {
            let db = b.get(t)?;
            (set(da) != set(db)).then(|| format!("{t}: {} in run 1, {} in run 2", set(da), set(db)))
        })
        .collect();
    let only: Vec<&String> =
        a.keys().filter(|t| !b.contains_key(*t)).chain(b.keys().filter(|t| !a.contains_key(*t))).collect();
    if !only.is_empty() {
        let names: Vec<&str> = only.iter().take(8).map(|s| s.as_str()).collect();
        details.push(format!("op types in one run only (fusion, another graph): {}", names.join(", ")));
    }
    if differ.is_empty() {
        return Item::new(
            "mixed_precision",
            Status::Pass,
            "every op type common to both runs computes in the same dtype",
            LOOK,
        )
        .with(details);
    }
    let mut lines = listed(&differ, 10);
    lines.extend(details);
    Item::new(
        "mixed_precision",
        Status::Fail,
        format!("{} op types compute in different dtypes in the two runs", differ.len()),
        LOOK,
    )
    .with(lines)
}
