//! `analyzer report`: one self-contained HTML page (no network, nothing beside it: inline SVG, CSS and a
//! few lines of script) that leads with the commands' verdicts, then shows the plots and the tables
//! behind them. It prints what the engines found ([`Findings`]): compare, diff, overflow, ranks, check and
//! watch results and the run's series over steps; it measures nothing itself.

mod findings;
mod health;
mod plots;
pub mod svg;
mod table;
mod tables;
mod text;

use crate::compare::Comparison;
use crate::diff::DiffReport;
use crate::overflow::OverflowReport;
use crate::problems::ProblemKind;
use crate::ranks::RanksReport;
use crate::sources::Source;
use anyhow::Result;
pub use findings::Findings;
use std::io::Write;
pub use text::{capped, escape};

/// Writes the page. `stage` is told each part as it is built (progress). Returns the page's answers as
/// lines of text (input problems, then the verdicts), for the terminal.
pub fn write(f: &Findings<'_>, out: &mut impl Write, stage: &mut dyn FnMut(&str)) -> Result<Vec<String>> {
    stage("verdicts");
    let mut page = String::with_capacity(1 << 20);
    page.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    page.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    page.push_str(&format!(
        "<title>accutrace report: {}</title>",
        escape(&f.target.root().display().to_string())
    ));
    page.push_str("<style>");
    page.push_str(include_str!("page.css"));
    page.push_str("</style></head><body>\n");
    header(&mut page, f);
    problems(&mut page, f);
    verdicts(&mut page, f);
    let answers = text::headlines(&page);
    stage("plots");
    plots::all(&mut page, f);
    stage("tables");
    tables::all(&mut page, f);
    page.push_str("<div id=\"tip\" hidden></div>\n<script>");
    page.push_str(include_str!("page.js"));
    page.push_str("</script></body></html>\n");
    out.write_all(page.as_bytes())?;
    Ok(answers)
}

fn header(page: &mut String, f: &Findings<'_>) {
    page.push_str("<header><h1>accutrace report</h1><p>");
    let run =
        |s: &dyn Source| format!("<code>{}</code> ({})", escape(&s.root().display().to_string()), s.kind());
    page.push_str(&format!("target {}", run(f.target)));
    if let Some(bench) = f.bench {
        page.push_str(&format!(" vs benchmark {}", run(bench)));
    }
    page.push_str(&format!(
        "</p><p class=\"small\">made by <code>{}</code> (analyzer {})</p></header>\n",
        escape(&f.command_line),
        escape(&f.version)
    ));
}

fn problems(page: &mut String, f: &Findings<'_>) {
    if f.problems.is_empty() {
        return;
    }
    page.push_str(
        "<section id=\"problems\" class=\"problems\"><h2>Read this first: the answer below does not cover \
         everything</h2><ul>",
    );
    // What the sources miss first (often the cause of a refusal), then refusals, then unreadable tensors
    // (the first few named): the commands' order (`InputProblems::lead`).
    for (kind, title, listed) in [
        (ProblemKind::Incomplete, "INCOMPLETE INPUT", 50),
        (ProblemKind::Refused, "REFUSED", usize::MAX),
        (ProblemKind::Unreadable, "UNREADABLE INPUT", 10),
    ] {
        let items: Vec<_> = f.problems.items().iter().filter(|p| p.kind == kind).collect();
        for p in items.iter().take(listed) {
            page.push_str(&format!("<li><b>{title}</b>: {}</li>", escape(&p.message)));
        }
        if items.len() > listed {
            page.push_str(&format!(
                "<li><b>{title}</b>: ... and {} more (the commands' JSON lists every one)</li>",
                items.len() - listed
            ));
        }
    }
    page.push_str(
        "</ul><p>No verdict below is an all-clear for what is listed here; unreadable tensors are left out of \
         every verdict and plot.</p></section>\n",
    );
}

/// The same answers the commands lead with, each linking to its evidence.
fn verdicts(page: &mut String, f: &Findings<'_>) {
    page.push_str("<section id=\"verdicts\"><h2>Verdicts</h2>");
    // Never an all-clear about what was not seen: with input problems a clean answer stays open.
    let open = !f.problems.is_empty();
    let open_beyond_compare = f.open_beyond_compare();
    if let Some(c) = f.comparison {
        compare_verdict(page, c, open, matches!(f.diff, Some(Ok(_))));
    }
    match &f.diff {
        Some(Ok(d)) => diff_verdict(page, d, open),
        Some(Err(why)) => {
            page.push_str(&format!("<p class=\"verdict info\"><b>diff</b> not run: {}</p>", escape(why)))
        }
        None => {}
    }
    overflow_verdict(page, f.overflow, open_beyond_compare);
    if let Some(r) = f.ranks {
        ranks_verdict(page, r, open_beyond_compare);
    }
    health::verdicts(page, f, open_beyond_compare);
    page.push_str("</section>\n");
}

/// Where the page shows failing op `i`: its row of the failing-ops table, or the table when the row is
/// past the table's cut.
fn failing_anchor(i: usize) -> String {
    if i < table::MAX_ROWS {
        format!("failing-{i}")
    } else {
        "t-failing".into()
    }
}

/// `open`: the page lists input problems (`#problems`). `diffed`: diff ran on the same pair, and its
/// verdict answers what compare could not measure (by content hash).
fn compare_verdict(page: &mut String, c: &Comparison<'_>, open: bool, diffed: bool) {
    for w in &c.warnings {
        page.push_str(&format!("<p class=\"verdict warn\"><b>WARNING</b>: {}</p>", escape(w)));
    }
    if let Some(why) = &c.refused {
        page.push_str(&format!(
            "<p class=\"verdict refused\"><b>NOT COMPARED</b>: {} (<a href=\"#t-unmatched\">unmatched tensors</a>)</p>",
            escape(why)
        ));
        return;
    }
    if c.rows.is_empty() {
        page.push_str(
            "<p class=\"verdict refused\"><b>NOT COMPARED</b>: no tensor of the target matched one of the \
             benchmark (<a href=\"#problems\">why</a>, <a href=\"#t-unmatched\">unmatched tensors</a>)</p>",
        );
        return;
    }
    let index = c.target.index();
    let failed = c.rows.iter().filter(|r| r.failed).count();
    let unmeasured = c.unmeasured_pairs();
    if unmeasured > 0 {
        page.push_str(&format!(
            "<p class=\"verdict warn\"><b>NOT MEASURED</b>: {unmeasured} of {} matched pairs hold no tensor data on one \
             side (a statistics-mode capture): their values were not compared; record with <code>--mode tensor</code> \
             to compare them</p>",
            c.rows.len()
        ));
    }
    page.push_str(&format!(
        "<p class=\"verdict info\">compare: {} tensor pairs, {} pass, {} fail, {} not judged; {} target and {} \
         benchmark tensors unmatched (<a href=\"#t-unmatched\">list</a>)</p>",
        c.rows.len(),
        c.rows.iter().filter(|r| r.passed()).count(),
        failed,
        c.rows.iter().filter(|r| !r.judged()).count(),
        c.unmatched_target.len(),
        c.unmatched_bench.len()
    ));
    match c.culprit.map(|i| (i, &c.failing_ops[i])) {
        Some((i, culprit)) => {
            let op = &index.ops[culprit.op];
            let inputs = match &culprit.inputs_unverified {
                Some(why) => format!("fails; {why}"),
                None => "fails while its inputs pass".into(),
            };
            page.push_str(&format!(
                "<p class=\"verdict bad\"><b>CULPRIT</b> step {} rank {}: <a href=\"#{}\"><code>{}</code></a> [{}] {} \
                 (<a href=\"#fig-error\">error along execution order</a>)</p>",
                op.step,
                op.rank,
                failing_anchor(i),
                escape(&op.name),
                escape(&op.op_type),
                escape(&inputs)
            ));
            let originals = op.original_names(index);
            if !originals.is_empty() && originals.iter().any(|n| *n != op.name) {
                page.push_str(&format!(
                    "<p class=\"verdict detail\">fused kernel of original op(s): {}</p>",
                    escape(&originals.join(", "))
                ));
            }
            for &r in &culprit.failing_rows {
                let row = &c.rows[r];
                page.push_str(&format!(
                    "<p class=\"verdict detail\"><code>{}</code>: {}</p>",
                    escape(&index.tensor_label(row.target())),
                    escape(row.reason().unwrap_or(""))
                ));
            }
            if let Some(first) = c.failing_before_culprit() {
                page.push_str(&format!(
                    "<p class=\"verdict detail\"><b>NOTE</b>: {} (<a href=\"#failing-0\">failing ops</a>)</p>",
                    escape(&first.before_culprit_note(index))
                ));
            }
        }
        None if !c.failing_ops.is_empty() => {
            let first = &c.failing_ops[0];
            let op = &index.ops[first.op];
            let why = first.why_not_culprit();
            page.push_str(&format!(
                "<p class=\"verdict warn\"><b>NO CLEAN CULPRIT</b>: the first failing op, <a href=\"#failing-0\"><code>{}</code></a> [{}] \
                 (step {}), {}</p>",
                escape(&op.name),
                escape(&op.op_type),
                op.step,
                escape(&why)
            ));
        }
        None if !c.rows.iter().any(|r| r.judged()) => {}
        None if open => page.push_str(
            "<p class=\"verdict warn\"><b>NO VERDICT</b>: every tensor that could be compared passes, but the \
             <a href=\"#problems\">input problems</a> leave the answer open</p>",
        ),
        // The page lists no input problem: the pairs compare could not measure are diff's to answer (the
        // page then drops compare's problem), or nobody's; either way this verdict says which, and links
        // only to what the page holds.
        None if unmeasured > 0 && diffed => page.push_str(&format!(
            "<p class=\"verdict warn\"><b>NO VERDICT</b>: every tensor that could be compared passes; the {unmeasured} \
             pairs not measured are left to diff's verdict, which compares them by content hash</p>"
        )),
        None if unmeasured > 0 => page.push_str(&format!(
            "<p class=\"verdict warn\"><b>NO VERDICT</b>: every tensor that could be compared passes, but the \
             {unmeasured} pairs not measured leave the answer open</p>"
        )),
        None if c.without_counterpart > 0 => page.push_str(&format!(
            "<p class=\"verdict warn\"><b>NOT ALL COMPARED</b>: every compared tensor passes, but {} target \
             tensors have no counterpart in the benchmark and were not compared</p>",
            c.without_counterpart
        )),
        None => page.push_str("<p class=\"verdict good\"><b>PASS</b>: every compared tensor passes</p>"),
    }
    api_verdict(page, c);
}

/// Kernels against API calls (a kernel capture against msprobe's API-level benchmark): the first API call
/// whose output diverges and the kernels that implement it, as `analyzer compare` says it, with the
/// failing output as evidence.
fn api_verdict(page: &mut String, c: &Comparison<'_>) {
    let Some(d) = c.first_diverging_api() else { return };
    let (ti, bi) = (c.target.index(), c.bench.index());
    // A call's kernels, the first few (kernels spanning a whole step say the alignment failed).
    const LISTED: usize = 8;
    let mut kernels: Vec<String> = d
        .kernels
        .iter()
        .take(LISTED)
        .map(|&k| format!("<code>{}</code> [{}]", escape(&ti.ops[k].name), escape(&ti.ops[k].op_type)))
        .collect();
    if d.kernels.len() > LISTED {
        kernels.push(format!("and {} more (compare's JSON lists all)", d.kernels.len() - LISTED));
    }
    if kernels.is_empty() {
        kernels.push("no kernel".into());
    }
    let row = &c.rows[d.row];
    let evidence = c
        .failing_ops
        .iter()
        .position(|f| f.failing_rows.contains(&d.row))
        .map_or("t-failing".to_string(), failing_anchor);
    let call = &bi.ops[d.bench_op];
    page.push_str(&format!(
        "<p class=\"verdict bad\"><b>FIRST DIVERGING API</b> step {} rank {}: <code>{}</code>, implemented by {} \
         (<a href=\"#{evidence}\">its failing output</a>)</p>",
        call.step,
        call.rank,
        escape(&call.name),
        kernels.join(", ")
    ));
    if !d.sharing.is_empty() {
        let names: Vec<String> =
            d.sharing.iter().map(|&b| format!("<code>{}</code>", escape(&bi.ops[b].name))).collect();
        page.push_str(&format!(
            "<p class=\"verdict detail\">the same kernel(s) also compute {}</p>",
            names.join(", ")
        ));
    }
    page.push_str(&format!(
        "<p class=\"verdict detail\"><code>{}</code> against <code>{}</code>: {}</p>",
        escape(&ti.tensor_label(row.target())),
        escape(&row.bench().map_or_else(String::new, |b| bi.tensor_label(b))),
        escape(row.reason().unwrap_or(""))
    ));
    let empty_calls = c.api_calls.iter().filter(|a| a.kernels.is_empty()).count();
    page.push_str(&format!(
        "<p class=\"verdict detail\">kernels against {} API calls: {} kernel outputs belong to no call (e.g. an \
         optimizer's kernels), {} API outputs found no kernel, {} calls no kernel</p>",
        c.api_calls.len(),
        c.unmatched_target.len(),
        c.unmatched_bench.len(),
        empty_calls
    ));
}

fn diff_verdict(page: &mut String, d: &DiffReport, open: bool) {
    match d.verdict {
        "identical" if open => page.push_str(
            "<p class=\"verdict warn\"><b>NO VERDICT</b>: no difference among the tensors that could be read; the \
             <a href=\"#problems\">input problems</a> leave the answer open</p>",
        ),
        "identical" => page.push_str(&format!(
            "<p class=\"verdict good\"><b>IDENTICAL</b>: {} tensors compared bit for bit, none differs</p>",
            d.compared_tensors
        )),
        "unmatched" => page.push_str(&format!(
            "<p class=\"verdict warn\"><b>UNMATCHED</b>: no compared tensor differs, but {} only in run1 and {} only \
             in run2 (<a href=\"#t-diff\">details</a>)</p>",
            super::diff::what_is_listed(d.unmatched.iter().filter(|u| u.run == "run1")),
            super::diff::what_is_listed(d.unmatched.iter().filter(|u| u.run == "run2"))
        )),
        _ => {
            for first in d.first_differences.iter().take(8) {
                page.push_str(&format!(
                    "<p class=\"verdict bad\"><b>FIRST DIFFERENCE</b> step {} rank {}: <a href=\"#t-diff\"><code>{}</code></a> [{}] is {}</p>",
                    first.step,
                    first.rank,
                    escape(&first.op),
                    escape(&first.op_type),
                    match first.verdict {
                        "nondeterministic" if first.in_transit => "CHANGED IN TRANSIT: what was sent was identical",
                        "nondeterministic" => "NONDETERMINISTIC: its inputs were identical",
                        "propagating" => "different because its inputs were already different",
                        _ => "different; its inputs were not dumped",
                    }
                ));
            }
            if d.first_differences.len() > 8 {
                page.push_str(&format!(
                    "<p class=\"verdict detail\">... and {} more steps/ranks (<a href=\"#t-diff\">table</a>)</p>",
                    d.first_differences.len() - 8
                ));
            }
        }
    }
}

fn overflow_verdict(page: &mut String, o: &OverflowReport, open: bool) {
    const ELSEWHERE: &str =
        "the origin is not in this data (on another rank, in ops not dumped, or left out by --op): run \
                             <code>analyzer ranks</code> over every rank's capture";
    for line in &o.scope {
        page.push_str(&format!("<p class=\"verdict warn\"><b>SCOPE</b>: {}</p>", escape(line)));
    }
    let Some(first) = o.origins.first() else {
        // An overflow seen here that no op of the data produced is never an all-clear.
        if let Some(a) = o.leading_arrival().filter(|a| !a.began_here_on.is_empty()) {
            let step = a.step.map_or("step unknown".to_string(), |s| format!("step {s}"));
            page.push_str(&format!(
                "<p class=\"verdict bad\"><b>OVERFLOW BEGAN IN A COLLECTIVE</b> {step} {}: <code>{}</code> on {}: {} of {}; \
                 {}</p>",
                crate::filter::rank_ranges(&a.began_here_on),
                escape(&a.call),
                escape(&a.comm),
                escape(&a.anomaly.describe()),
                a.elements,
                escape(&a.why_it_began_here())
            ));
            return;
        }
        if let Some(a) = o.leading_arrival() {
            let step = a.step.map_or("step unknown".to_string(), |s| format!("step {s}"));
            page.push_str(&format!(
                "<p class=\"verdict bad\"><b>OVERFLOW ARRIVED THROUGH A COLLECTIVE</b> {step} rank {}: <code>{}</code> \
                 on {}: {} of {} ({}); {ELSEWHERE}</p>",
                a.rank,
                escape(&a.call),
                escape(&a.comm),
                escape(&a.anomaly.describe()),
                a.elements,
                a.inputs
            ));
            return;
        }
        if let Some(w) = o.leading_without_origin() {
            page.push_str(&format!(
                "<p class=\"verdict bad\"><b>OVERFLOW WITH NO ORIGIN IN THIS DATA</b> rank {}: {}; {ELSEWHERE}</p>",
                w.rank,
                escape(&w.evidence)
            ));
            return;
        }
        if open {
            page.push_str(
                "<p class=\"verdict warn\"><b>NO VERDICT</b>: no op produced inf/NaN from finite inputs among the \
                 tensors that could be read; the <a href=\"#problems\">input problems</a> leave the answer open</p>",
            );
            return;
        }
        let mut qualifier = if o.tensors_without_statistics > 0 {
            format!(
                " among the tensors with statistics ({} had none and were not looked at)",
                o.tensors_without_statistics
            )
        } else {
            String::new()
        };
        if !o.scope.is_empty() {
            qualifier.push_str(" in the steps the ring policy kept (scope above)");
        }
        page.push_str(&format!(
            "<p class=\"verdict good\"><b>NO OVERFLOW</b>: no op produced inf/NaN from finite inputs{}</p>",
            escape(&qualifier)
        ));
        return;
    };
    page.push_str(&format!(
        "<p class=\"verdict bad\"><b>FIRST OVERFLOW</b> step {} rank {}: <a href=\"#t-overflow\"><code>{}</code></a> [{}]: <code>{}</code> {} ({})</p>",
        first.step,
        first.rank,
        escape(&first.op),
        escape(&first.op_type),
        escape(&first.output),
        escape(&first.anomaly.describe()),
        first.inputs
    ));
    if let Some(independently) = first.overflowed_independently() {
        page.push_str(&format!("<p class=\"verdict detail\">{}</p>", escape(&independently)));
    }
    for status in &first.device_status {
        page.push_str(&format!(
            "<p class=\"verdict detail\">device: {} status {}: {}</p>",
            escape(&status.engine),
            escape(&status.status.join(" ")),
            escape(&status.status_names.join(", "))
        ));
    }
    if o.steps_with_overflow.len() > 1 {
        page.push_str(&format!(
            "<p class=\"verdict detail\">overflows in {} steps: {} (<a href=\"#fig-loss\">loss and loss scale</a>)</p>",
            o.steps_with_overflow.len(),
            escape(&crate::filter::ranges(&o.steps_with_overflow))
        ));
    }
}

/// `analyzer ranks`' answer: the first anomaly across ranks and how far it spread.
fn ranks_verdict(page: &mut String, r: &RanksReport, open: bool) {
    let Some(first) = r.origins.first() else {
        if open {
            page.push_str(
                "<p class=\"verdict warn\"><b>NO VERDICT</b> across ranks: no anomaly in what was read; the \
                 <a href=\"#problems\">input problems</a> leave the answer open</p>",
            );
        } else {
            let compared: u64 = r.replicated_per_step.values().sum();
            let replicas = if compared > 0 {
                format!(
                    "replicas agree ({compared} replicated tensors compared bit for bit over {} steps)",
                    r.steps.len()
                )
            } else {
                "no tensor is held alike by several ranks, so no replica was compared".to_string()
            };
            let ranks = match &r.selection {
                Some(s) => format!(
                    "{} of {} ranks, in the selection <code>{}</code>; nothing is said of what it leaves out",
                    r.examined_ranks.len(),
                    r.ranks.len(),
                    escape(&s.options())
                ),
                None => format!("{} ranks", r.ranks.len()),
            };
            page.push_str(&format!(
                "<p class=\"verdict good\"><b>NO ANOMALY ACROSS RANKS</b> ({ranks}): no overflow, every collective's \
                 members agree ({} HCCL calls); {replicas}</p>",
                r.calls
            ));
        }
        return;
    };
    let reached = r.spread.iter().filter(|s| s.anomalous_events > 0).count();
    // Out of the ranks examined: a selection says nothing of the others.
    let of = match &r.selection {
        Some(s) if r.examined_ranks.len() < r.ranks.len() => format!(
            "the {} ranks examined (of {}, in the selection <code>{}</code>)",
            r.examined_ranks.len(),
            r.ranks.len(),
            escape(&s.options())
        ),
        _ => format!("{} ranks", r.ranks.len()),
    };
    // An op that began it on several ranks independently: the spread is traced from the first of them.
    let reach = match first.independently_on.len() {
        0 | 1 => format!("it reached {reached} of {of}"),
        n => format!("it began on {n} of {of} independently, and rank {}'s reached {reached}", first.rank),
    };
    page.push_str(&format!(
        "<p class=\"verdict bad\"><b>FIRST ANOMALY ACROSS RANKS</b> {} {}: <a href=\"#t-rank-origins\"><code>{}</code></a> \
         [{}]{}; {reach} (<a href=\"#t-rank-spread\">spread</a>, <a href=\"#fig-ranks\">rank x step</a>)</p>",
        crate::filter::rank_ranges(first.ranks_it_began_on()),
        crate::ranks::events::step_words(first.step),
        escape(&first.op),
        escape(&first.op_type),
        match &first.collective {
            // A send or receive is numbered among the messages between its two ranks.
            Some((comm, seq)) if matches!(first.op_type.as_str(), "HcclSend" | "HcclRecv") => {
                format!(", message #{seq} on {}", escape(comm))
            }
            Some((comm, seq)) => format!(", collective #{seq} on {}", escape(comm)),
            None => String::new(),
        },
    ));
    if let Some(together) = first.began_together() {
        page.push_str(&format!("<p class=\"verdict detail\">{}</p>", escape(&together)));
    }
    if let Some(independently) = first.began_independently() {
        page.push_str(&format!("<p class=\"verdict detail\">{}</p>", escape(&independently)));
    }
    // The same op on the other ranks it began on independently: their findings under the first's.
    let (alike, rest) = r.first_alike_and_rest();
    for o in std::iter::once(first).chain(alike.iter().copied()) {
        let on = if alike.is_empty() { String::new() } else { format!("rank {}: ", o.rank) };
        for f in &o.findings {
            let tensor =
                f.tensor.as_deref().map(|t| format!("<code>{}</code>: ", escape(t))).unwrap_or_default();
            page.push_str(&format!(
                "<p class=\"verdict detail\">{on}{}: {tensor}{}</p>",
                escape(f.kind.describe()),
                escape(&f.detail)
            ));
        }
    }
    if !rest.is_empty() {
        page.push_str(&format!(
            "<p class=\"verdict detail\">{} more anomalies that nothing anomalous happened before (<a \
             href=\"#t-rank-origins\">table</a>)</p>",
            rest.len()
        ));
    }
    // What qualifies the answer (a selection, a first anomaly at a collective missing members), as the
    // terminal's warnings lead it.
    for w in &r.warnings {
        page.push_str(&format!("<p class=\"verdict detail\">warning: {}</p>", escape(w)));
    }
}
