//! The health engines on the page: `check`'s checklist and `watch`'s conditions, as verdicts, a timeline of
//! the conditions' hits by step, and their tables. "Can't tell" is shown as such, never as a pass.

use super::findings::Findings;
use super::svg::{Colouring, Heatmap};
use super::table::{Cell, Table, MAX_ROWS};
use super::text::escape;
use crate::check::{CheckReport, Item, Status};
use crate::index::Index;
use crate::report::watch::{fmt_measure, place};
use crate::watch::{Finding, WatchReport};
use std::collections::{BTreeMap, HashMap};

/// check's and watch's verdicts; `open`: input problems keep every clean answer open.
pub fn verdicts(page: &mut String, f: &Findings<'_>, open: bool) {
    if let Some(c) = f.check {
        check_verdict(page, c, open);
    }
    if let Some(w) = f.watch {
        watch_verdict(page, w, f.target.index(), open);
    }
}

fn check_verdict(page: &mut String, c: &CheckReport, open: bool) {
    let count = |s: Status| c.items.iter().filter(|i| i.status == s).count();
    let (pass, fail, cant) = (count(Status::Pass), count(Status::Fail), count(Status::CantTell));
    for item in c.items.iter().filter(|i| i.status == Status::Fail) {
        page.push_str(&format!(
            "<p class=\"verdict bad\"><b>CHECK FAILS</b> {}: {}; look at: {} (<a href=\"#t-check\">checklist</a>)</p>",
            escape(item.name),
            escape(&item.reason),
            escape(&item.look_at)
        ));
    }
    if cant > 0 {
        let names: Vec<&str> =
            c.items.iter().filter(|i| i.status == Status::CantTell).map(|i| i.name).collect();
        page.push_str(&format!(
            "<p class=\"verdict warn\"><b>CAN'T TELL</b> {}: what the runs hold cannot decide {} (<a href=\"#t-check\">why, and what would</a>)</p>",
            escape(&names.join(", ")),
            if cant == 1 { "it" } else { "them" }
        ));
        for item in c.items.iter().filter(|i| i.status == Status::CantTell) {
            page.push_str(&format!(
                "<p class=\"verdict detail\">{}: {}</p>",
                escape(item.name),
                escape(&item.reason)
            ));
        }
    }
    match (fail, cant, open) {
        (0, 0, false) => page.push_str(&format!(
            "<p class=\"verdict good\"><b>CHECKLIST PASSES</b>: all {pass} items (<a href=\"#t-check\">checklist</a>)</p>"
        )),
        (0, 0, true) => page.push_str(
            "<p class=\"verdict warn\"><b>NO VERDICT</b> on the checklist: its items pass on what was read; the \
             <a href=\"#problems\">input problems</a> leave it open</p>",
        ),
        _ => page.push_str(&format!(
            "<p class=\"verdict info\">check: {} items, {pass} {}, {fail} fail, {cant} can't tell</p>",
            c.items.len(),
            if open { PASS_ON_WHAT_WAS_READ } else { "pass" }
        )),
    }
}

/// A pass while input problems lead the page: the item's test passed on the data that was read, which is
/// not all of it, so it is no all-clear.
const PASS_ON_WHAT_WAS_READ: &str = "pass on what was read";

/// An item's answer as the page words it; `open`: input problems lead the page.
fn answer(item: &Item, open: bool) -> &'static str {
    match item.status {
        Status::Pass if open => PASS_ON_WHAT_WAS_READ,
        status => status.as_str(),
    }
}

/// The hit that happened first: the earliest step; within it, the op that ran first in its rank's step
/// (data-parallel ranks run one op sequence, so positions order them across ranks), then the lower rank.
/// A hit on what the index holds no op of (an HCCL call an overflow arrived through from another rank) comes
/// after the step's ops, one of which is its origin; hits on the run as a whole come last.
fn first_hit<'w>(w: &'w WatchReport, index: &Index) -> Option<&'w Finding> {
    let mut step_start: HashMap<(u32, u64), usize> = HashMap::new();
    for (id, op) in index.ops.iter().enumerate() {
        step_start.entry((op.rank, op.step)).and_modify(|s| *s = (*s).min(id)).or_insert(id);
    }
    let mut position: HashMap<(u32, u64, &str), usize> = HashMap::new();
    for (id, op) in index.ops.iter().enumerate() {
        let at = id - step_start[&(op.rank, op.step)];
        position.entry((op.rank, op.step, op.name.as_str())).and_modify(|p| *p = (*p).min(at)).or_insert(at);
    }
    w.findings.iter().min_by_key(|h| {
        let at = match (h.rank, h.step, &h.op) {
            (Some(rank), Some(step), Some(op)) => position.get(&(rank, step, op.as_str())).copied(),
            _ => None,
        };
        (h.step.unwrap_or(u64::MAX), at.unwrap_or(usize::MAX), h.rank.unwrap_or(u32::MAX))
    })
}

fn watch_verdict(page: &mut String, w: &WatchReport, index: &Index, open: bool) {
    let cant: u64 = w.cant_tell.iter().map(|c| c.count).sum();
    let undecided = if cant > 0 {
        format!(
            "; {cant} tensor{} could not be told (<a href=\"#t-watch-cant\">which, and what would decide</a>)",
            if cant == 1 { "" } else { "s" }
        )
    } else {
        String::new()
    };
    let Some(first) = first_hit(w, index) else {
        if open {
            page.push_str(&format!(
                "<p class=\"verdict warn\"><b>NO VERDICT</b> from watch: no condition hit on what was read; the \
                 <a href=\"#problems\">input problems</a> leave it open{undecided}</p>"
            ));
        } else if cant > 0 {
            page.push_str(&format!(
                "<p class=\"verdict warn\"><b>NO CONDITION HIT</b> on what could be decided{undecided}</p>"
            ));
        } else {
            let on = w.conditions.iter().filter(|c| c.enabled).count();
            page.push_str(&format!(
                "<p class=\"verdict good\"><b>NO CONDITION HIT</b>: {on} training-health conditions over {} steps</p>",
                w.steps.len()
            ));
        }
        return;
    };
    let hit: Vec<String> =
        w.conditions.iter().filter(|c| c.hits > 0).map(|c| format!("{} ({})", c.name, c.hits)).collect();
    page.push_str(&format!(
        "<p class=\"verdict bad\"><b>WATCH</b>: {} (<a href=\"#fig-watch\">timeline</a>, <a href=\"#t-watch\">hits</a>); \
         first: {} {}: {} = {} ({})</p>",
        escape(&hit.join(", ")),
        escape(first.condition),
        escape(&place(first)),
        escape(first.measure),
        escape(&fmt_measure(&first.value)),
        escape(&first.threshold)
    ));
    if !undecided.is_empty() {
        page.push_str(&format!("<p class=\"verdict detail\">watch: {}</p>", &undecided[2..]));
    }
}

/// The timeline: one row per enabled condition, one column per step, the hits in each cell; a condition
/// that could not decide anywhere is a grey row, named as such.
pub fn timeline(page: &mut String, f: &Findings<'_>) {
    let Some(w) = f.watch else { return };
    let conditions: Vec<_> = w.conditions.iter().filter(|c| c.enabled).collect();
    if conditions.is_empty() || w.steps.is_empty() {
        return;
    }
    let step_pos: HashMap<u64, usize> = w.steps.iter().enumerate().map(|(i, &s)| (s, i)).collect();
    let row_of: HashMap<&str, usize> = conditions.iter().enumerate().map(|(i, c)| (c.name, i)).collect();
    let ns = w.steps.len();
    let mut cells = vec![None; conditions.len() * ns];
    for (r, c) in conditions.iter().enumerate() {
        if c.decided > 0 {
            cells[r * ns..(r + 1) * ns].fill(Some(0.0));
        }
    }
    // What each cell adds when the run has several ranks: each rank's hits (`None`: a hit naming no rank).
    let several_ranks = w.ranks.len() > 1;
    let mut by_rank = vec![BTreeMap::<Option<u32>, u64>::new(); if several_ranks { cells.len() } else { 0 }];
    let mut run_wide = 0;
    for hit in &w.findings {
        let (Some(&r), Some(&s)) = (row_of.get(hit.condition), hit.step.and_then(|s| step_pos.get(&s)))
        else {
            run_wide += 1;
            continue;
        };
        let cell = &mut cells[r * ns + s];
        *cell = Some(cell.unwrap_or(0.0) + 1.0);
        if let Some(ranks) = by_rank.get_mut(r * ns + s) {
            *ranks.entry(hit.rank).or_default() += 1;
        }
    }
    let details = by_rank
        .iter()
        .map(|ranks| {
            let named = ranks.iter().map(|(rank, hits)| match rank {
                Some(rank) => format!("rank {rank}: {hits}"),
                None => format!("no rank named: {hits}"),
            });
            named.collect::<Vec<_>>().join(", ")
        })
        .collect();
    let rows = conditions
        .iter()
        .map(|c| if c.decided == 0 { format!("{} (can't tell)", c.name) } else { c.name.to_string() })
        .collect();
    // The verdict's first hit, outlined.
    let first = first_hit(w, f.target.index()).and_then(|h| Some((h.step?, row_of.get(h.condition)?)));
    let map = Heatmap {
        id: "heat-watch".into(),
        rows,
        columns: w.steps.clone(),
        cells,
        colouring: Colouring::Count,
        x_label: "training step".into(),
        value_label: "hits".into(),
        outline: first.map(|(step, &row)| (row, step)),
        empty: "not decided",
        details,
    };
    let run_wide = if run_wide > 0 {
        format!(" {run_wide} hits concern the run as a whole, not a step: they are in the table below.")
    } else {
        String::new()
    };
    // A cell adds every rank's hits: said, or they would read as one rank's.
    let adds_ranks = if several_ranks {
        format!(
            " A cell adds the hits of ranks {} ({} ranks): hover a cell for each rank's hits.",
            crate::filter::ranges(&w.ranks.iter().map(|&r| u64::from(r)).collect::<Vec<_>>()),
            w.ranks.len()
        )
    } else {
        String::new()
    };
    page.push_str(&format!(
        "<figure id=\"fig-watch\"><h3>Training-health conditions over steps (watch)</h3><div class=\"frame\">{}</div>\
         <figcaption>{}</figcaption></figure>\n",
        map.svg(),
        escape(&format!(
            "Each row is one of watch's conditions, each column a step; a cell counts the tensors (or updates) that hit \
             the condition there, green where it was decided and none hit. The first hit is outlined. Grey: not decided \
             there; a row named \"can't tell\" could not be decided anywhere with what the run recorded, so it is no \
             pass (the table of what watch could not tell says what would decide it).{run_wide} Hover a cell for its value.{adds_ranks}"
        ))
    ));
}

/// The checklist, watch's hits, and what watch could not tell.
pub fn tables(page: &mut String, f: &Findings<'_>) {
    if let Some(c) = f.check {
        let open = f.open_beyond_compare();
        let rows = c
            .items
            .iter()
            .map(|i| {
                let cells = vec![
                    Cell::Text(i.name.to_string()),
                    Cell::Text(answer(i, open).to_string()),
                    Cell::Text(i.reason.clone()),
                    Cell::Text(i.look_at.clone()),
                    Cell::Text(i.details.join("; ")),
                ];
                (None, cells)
            })
            .collect();
        Table {
            id: "t-check",
            title: "Checklist (check)",
            headings: &["item", "answer", "why", "look at", "found"],
            rows,
            total: c.items.len(),
            rest: "",
        }
        .write(page);
    }
    let Some(w) = f.watch else { return };
    let rows = w
        .findings
        .iter()
        .take(MAX_ROWS)
        .map(|h| {
            let cells = vec![
                h.step.map_or(Cell::Text(String::new()), Cell::Count),
                h.rank.map_or(Cell::Text(String::new()), |r| Cell::Count(r.into())),
                Cell::Text(h.condition.to_string()),
                Cell::Code(place(h)),
                Cell::Text(h.measure.to_string()),
                Cell::Num(h.value.at_most),
                Cell::Text(h.threshold.clone()),
                Cell::Text(h.evidence.as_str().to_string()),
                Cell::Text(h.detail.clone().unwrap_or_default()),
            ];
            (None, cells)
        })
        .collect();
    Table {
        id: "t-watch",
        title: "Training-health hits (watch)",
        headings: &[
            "step",
            "rank",
            "condition",
            "where",
            "measure",
            "value (at most)",
            "test",
            "evidence",
            "detail",
        ],
        rows,
        total: w.findings.len(),
        rest: "`analyzer watch RUN --format csv` lists every one",
    }
    .write(page);
    let rows = w
        .cant_tell
        .iter()
        .take(MAX_ROWS)
        .map(|c| {
            let cells = vec![
                Cell::Text(c.condition.to_string()),
                Cell::Text(c.reason.clone()),
                Cell::Text(c.would_decide.to_string()),
                Cell::Count(c.count),
            ];
            (None, cells)
        })
        .collect();
    Table {
        id: "t-watch-cant",
        title: "What watch could not tell (no pass: undecided)",
        headings: &["condition", "why", "what would decide it", "tensors"],
        rows,
        total: w.cant_tell.len(),
        rest: "`analyzer watch RUN --format json` lists every one",
    }
    .write(page);
}
