//! The page's tables: failing ops, unmatched tensors, overflow origins, the cross-rank origins and spread,
//! check's and watch's (from health.rs), diff's first differences, and the runs' configuration. Each is sortable (click a heading) and filterable (the box above it); a long one
//! shows its first rows and says where the rest is.

use super::findings::Findings;
use super::table::{Cell, Table, MAX_ROWS};
use crate::compare::Comparison;
use crate::filter::rank_ranges;
use crate::index::Index;
use crate::ranks::RanksReport;
use crate::sources::Source;

pub fn all(page: &mut String, f: &Findings<'_>) {
    page.push_str("<section id=\"tables\"><h2>Tables</h2>");
    if let Some(c) = f.comparison {
        failing_ops(page, c);
        unmatched(page, c);
    }
    overflow(page, f);
    if let Some(r) = f.ranks {
        rank_origins(page, r);
    }
    super::health::tables(page, f);
    if let Some(Ok(d)) = &f.diff {
        diff(page, d);
    }
    configuration(page, f);
    page.push_str("</section>\n");
}

fn failing_ops(page: &mut String, c: &Comparison<'_>) {
    let index = c.target.index();
    let rows = c
        .failing_ops
        .iter()
        .enumerate()
        .take(MAX_ROWS)
        .map(|(i, f)| {
            let op = &index.ops[f.op];
            let verdict = c.failing_tag(i);
            let worst = |get: &dyn Fn(usize) -> Option<f64>| {
                f.failing_rows.iter().filter_map(|&r| get(r)).fold(f64::NAN, f64::max)
            };
            let cos = worst(&|r| c.rows[r].msprobe().cosine.value().map(|v| 1.0 - v));
            let rel = worst(&|r| c.rows[r].msprobe().max_relative_err.value());
            let reasons: Vec<String> = f
                .failing_rows
                .iter()
                .map(|&r| {
                    let row = &c.rows[r];
                    format!("{}: {}", index.tensor_label(row.target()), row.reason().unwrap_or(""))
                })
                .collect();
            let originals = op.original_names(index);
            let fused = if !originals.is_empty() && originals.iter().any(|n| *n != op.name) {
                originals.join(" + ")
            } else {
                String::new()
            };
            let cells = vec![
                Cell::Count(op.order),
                Cell::Count(op.step),
                Cell::Count(op.rank as u64),
                Cell::Code(op.name.to_string()),
                Cell::Text(op.op_type.to_string()),
                Cell::Text(verdict.into()),
                Cell::Num(cos),
                Cell::Num(rel),
                Cell::Text(fused),
                Cell::Text(reasons.join("; ")),
            ];
            (Some(format!("failing-{i}")), cells)
        })
        .collect();
    Table {
        id: "t-failing",
        title: "Failing ops, in execution order",
        headings: &[
            "order",
            "step",
            "rank",
            "op",
            "type",
            "verdict",
            "worst 1 - cosine",
            "worst max rel err",
            "fused from",
            "failing outputs",
        ],
        rows,
        total: c.failing_ops.len(),
        rest: "`analyzer compare TARGET BENCH --format csv` lists every pair",
    }
    .write(page);
}

fn tensor_row(side: &str, index: &Index, t: usize) -> (Option<String>, Vec<Cell>) {
    let tensor = &index.tensors[t];
    let op = &index.ops[tensor.op()];
    let shape: Vec<String> = tensor.shape.iter().map(u64::to_string).collect();
    (
        None,
        vec![
            Cell::Text(side.into()),
            Cell::Code(index.tensor_label(t)),
            Cell::Count(op.step),
            Cell::Count(op.rank as u64),
            Cell::Text(op.op_type.to_string()),
            Cell::Text(format!("{:?}", tensor.dtype)),
            Cell::Text(format!("[{}]", shape.join(", "))),
        ],
    )
}

fn unmatched(page: &mut String, c: &Comparison<'_>) {
    let (ti, bi) = (c.target.index(), c.bench.index());
    let rows = c
        .unmatched_target
        .iter()
        .map(|&t| tensor_row("target", ti, t))
        .chain(c.unmatched_bench.iter().map(|&t| tensor_row("benchmark", bi, t)))
        .take(MAX_ROWS)
        .collect();
    Table {
        id: "t-unmatched",
        title: "Unmatched tensors (no counterpart on the other side)",
        headings: &["side", "tensor", "step", "rank", "op type", "dtype", "shape"],
        rows,
        total: c.unmatched_target.len() + c.unmatched_bench.len(),
        rest: "`analyzer compare TARGET BENCH --format json` lists them all",
    }
    .write(page);
}

fn overflow(page: &mut String, f: &Findings<'_>) {
    let o = f.overflow;
    let rows = o
        .origins
        .iter()
        .take(MAX_ROWS)
        .map(|origin| {
            let status: Vec<String> =
                origin.device_status.iter().flat_map(|d| d.status_names.iter().cloned()).collect();
            let cells = vec![
                Cell::Count(origin.step),
                Cell::Count(origin.rank as u64),
                Cell::Code(origin.op.clone()),
                Cell::Text(origin.op_type.clone()),
                Cell::Code(origin.output.clone()),
                Cell::Text(origin.anomaly.describe()),
                Cell::Text(origin.inputs.into()),
                match origin.spread_to {
                    Some(n) => Cell::Count(n as u64),
                    None => Cell::Text("not visible (only flagged ops dumped)".into()),
                },
                Cell::Text(status.join("; ")),
            ];
            (None, cells)
        })
        .collect();
    Table {
        id: "t-overflow",
        title: "Overflow origins: the first op per step and rank with inf/NaN from finite inputs",
        headings: &[
            "step",
            "rank",
            "op",
            "type",
            "output",
            "found",
            "inputs",
            "spread to ops",
            "device status",
        ],
        rows,
        total: o.origins.len(),
        rest: "`analyzer overflow RUN --format csv` lists them all",
    }
    .write(page);
}

fn diff(page: &mut String, d: &crate::diff::DiffReport) {
    let rows = d
        .first_differences
        .iter()
        .take(MAX_ROWS)
        .map(|first| {
            let cells = vec![
                Cell::Count(first.step),
                Cell::Count(first.rank as u64),
                Cell::Code(first.op.clone()),
                Cell::Text(first.op_type.clone()),
                Cell::Text(first.verdict.into()),
                Cell::Text(first.differing_inputs.join(", ")),
                Cell::Num(first.output.max_abs_diff),
                Cell::Count(first.output.max_ulp),
                Cell::Num(first.output.share_differing()),
            ];
            (None, cells)
        })
        .collect();
    Table {
        id: "t-diff",
        title: "First difference per step and rank (diff)",
        headings: &[
            "step",
            "rank",
            "op",
            "type",
            "verdict",
            "differing inputs",
            "max |difference|",
            "max ULP",
            "share differing",
        ],
        rows,
        total: d.first_differences.len(),
        rest: "`analyzer diff RUN1 RUN2 --format csv` lists them all",
    }
    .write(page);
}

fn facts(side: &str, source: &dyn Source, out: &mut Vec<(Option<String>, Vec<Cell>)>) {
    let index = source.index();
    let mut add = |what: &str, value: String| {
        out.push((None, vec![Cell::Text(side.into()), Cell::Text(what.into()), Cell::Text(value)]));
    };
    add("path", source.root().display().to_string());
    add("kind", source.kind().into());
    add("ops", index.ops.len().to_string());
    add("tensors", index.tensors.len().to_string());
    add("steps", crate::filter::ranges(&index.steps()));
    let ranks: Vec<u64> = index.ranks().iter().map(|&r| r as u64).collect();
    add("ranks", crate::filter::ranges(&ranks));
    add("tensors with data", index.tensors.iter().filter(|t| t.has_data).count().to_string());
    add("tensors with statistics", index.tensors.iter().filter(|t| t.has_stats()).count().to_string());
    add("device overflow records", index.overflow_records.len().to_string());
    if index.only_overflowing_ops {
        add("dump", "only the ops the device flagged (overflow detection)".into());
    }
    for (key, value) in index.settings.iter().flatten() {
        add(key, value.clone());
    }
    for warning in &index.warnings {
        add("warning", warning.clone());
    }
}

fn configuration(page: &mut String, f: &Findings<'_>) {
    let mut rows = Vec::new();
    facts("target", f.target, &mut rows);
    if let Some(bench) = f.bench {
        facts("benchmark", bench, &mut rows);
    }
    let total = rows.len();
    Table {
        id: "t-config",
        title: "The runs: configuration and what the manifests record",
        headings: &["run", "what", "value"],
        rows,
        total,
        rest: "",
    }
    .write(page);
}

/// A step of the cross-rank analysis: `unknown` for a call nothing places at a step.
fn step_cell(step: u64) -> Cell {
    if step == crate::ranks::events::UNKNOWN_STEP {
        Cell::Text("unknown".into())
    } else {
        Cell::Count(step)
    }
}

/// The cross-rank origins (the first is the answer) and where the first one spread.
fn rank_origins(page: &mut String, r: &RanksReport) {
    if r.origins.is_empty() {
        return;
    }
    let rows = r
        .origins
        .iter()
        .enumerate()
        .take(MAX_ROWS)
        .map(|(n, o)| {
            let findings: Vec<String> = o
                .findings
                .iter()
                .map(|f| match &f.tensor {
                    Some(t) => format!("{}: {t}: {}", f.kind.describe(), f.detail),
                    None => format!("{}: {}", f.kind.describe(), f.detail),
                })
                .collect();
            let mut collective =
                o.collective.as_ref().map_or(String::new(), |(comm, seq)| format!("#{seq} on {comm}"));
            // One row for a collective it began on several members of: they are named here.
            if o.began_on.len() > 1 {
                collective.push_str(&format!(", where it began on {} together", rank_ranges(&o.began_on)));
            }
            // An op that began it on several ranks, each in its own compute: each row says which.
            if o.independently_on.len() > 1 {
                collective =
                    format!("none: the same op on {}, independently", rank_ranges(&o.independently_on));
            }
            let cells = vec![
                Cell::Count(n as u64),
                Cell::Count(o.rank.into()),
                step_cell(o.step),
                Cell::Code(o.op.clone()),
                Cell::Text(o.op_type.clone()),
                Cell::Text(collective),
                Cell::Text(findings.join("; ")),
            ];
            (None, cells)
        })
        .collect();
    Table {
        id: "t-rank-origins",
        title: "Anomalies across ranks that nothing anomalous happened before (the first is the answer)",
        headings: &["order", "rank", "step", "op or HCCL call", "type", "collective", "findings"],
        rows,
        total: r.origins.len(),
        rest: "`analyzer ranks RUN --format csv` lists every one",
    }
    .write(page);
    let rows = r
        .spread
        .iter()
        .take(MAX_ROWS)
        .map(|s| {
            let cells = vec![
                Cell::Count(s.rank.into()),
                step_cell(s.step),
                Cell::Code(s.at.clone()),
                Cell::Text(s.via.clone().unwrap_or_else(|| "where it began".into())),
                Cell::Count(s.anomalous_events),
            ];
            (None, cells)
        })
        .collect();
    Table {
        id: "t-rank-spread",
        title: "Where the first anomaly across ranks went",
        headings: &["rank", "from step", "first event reached", "through", "anomalous events from there"],
        rows,
        total: r.spread.len(),
        rest: "`analyzer ranks RUN --format json` lists every rank",
    }
    .write(page);
}
