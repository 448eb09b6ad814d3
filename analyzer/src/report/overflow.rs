//! The reports of `analyzer overflow`: a terminal summary that leads with the first overflow, CSV of the
//! origins (one per step and rank), and JSON of everything.

use super::{fmt_num, paint, write_json, Destination, Format, Output};
use crate::filter::rank_ranges;
use crate::overflow::{Arrival, Origin, OverflowReport};
use anyhow::Result;
use std::io::Write;

/// Writes the report in `format` to its destination, led by the input problems.
pub fn write(report: &OverflowReport, format: Format, to: &Destination<'_>) -> Result<()> {
    let mut out = Output::open(to.output)?;
    super::lead(&report.input_problems, format == Format::Table, to.output.is_some(), &mut out)?;
    super::lead_warnings(&report.warnings, format == Format::Table, to, &mut out)?;
    match format {
        Format::Json => write_json(&mut out, "overflow", report)?,
        Format::Csv => {
            let mut w = csv::Writer::from_writer(&mut out);
            w.write_record([
                "step",
                "rank",
                "op",
                "op_type",
                "output",
                "nan",
                "inf",
                "saturated",
                "spread_to",
                "status",
                "independently_on",
            ])?;
            for o in &report.origins {
                let status: Vec<String> =
                    o.device_status.iter().flat_map(|d| d.status_names.clone()).collect();
                w.write_record([
                    o.step.to_string(),
                    o.rank.to_string(),
                    o.op.clone(),
                    o.op_type.clone(),
                    o.output.clone(),
                    o.anomaly.nan.to_string(),
                    o.anomaly.inf.to_string(),
                    o.anomaly.saturated.to_string(),
                    o.spread_to.map(|n| n.to_string()).unwrap_or_default(),
                    status.join("; "),
                    // The ranks this op overflowed on first at this step, each on its own; empty alone.
                    match o.independently_on.len() {
                        0 => String::new(),
                        _ => crate::filter::ranges(
                            &o.independently_on.iter().map(|&r| u64::from(r)).collect::<Vec<_>>(),
                        ),
                    },
                ])?;
            }
            // An overflow seen on a rank that no op of it produced: a row too (a reader that only counts
            // rows must not take it for none), its status saying what it is.
            for a in &report.arrivals {
                w.write_record([
                    a.step.map_or(String::new(), |s| s.to_string()),
                    a.rank.to_string(),
                    a.call.clone(),
                    a.call.split(' ').next().unwrap_or_default().to_string(),
                    format!("{}.output.0", a.call),
                    a.anomaly.nan.to_string(),
                    a.anomaly.inf.to_string(),
                    a.anomaly.saturated.to_string(),
                    String::new(),
                    if a.began_here_on.is_empty() {
                        format!("arrived through the collective ({}); origin on another rank", a.inputs)
                    } else {
                        format!("began in the collective: {}", a.why_it_began_here())
                    },
                    String::new(),
                ])?;
            }
            for o in &report.without_origin {
                let cells = [o.step.to_string(), o.rank.to_string()];
                let empty = std::iter::repeat_n(String::new(), 7);
                let status = format!("{}; origin not in this data", o.evidence);
                w.write_record(cells.into_iter().chain(empty).chain([status, String::new()]))?;
            }
            w.flush()?;
        }
        Format::Table => print_table(&mut out, report, to.paints())?,
    }
    out.flush()?;
    Ok(())
}

/// `loss scale by step (input of model/loss/scale/Mul): 0:1024 1:512`, a line per rank when there are
/// several (each labelled), and the op and tensor it was read from.
fn loss_scale_history(out: &mut impl Write, r: &OverflowReport) -> Result<()> {
    let mut ranks: Vec<u32> = r.loss_scale.iter().map(|l| l.rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    for &rank in &ranks {
        let of_rank: Vec<&crate::overflow::LossScale> =
            r.loss_scale.iter().filter(|l| l.rank == rank).collect();
        let mut sources: Vec<String> = of_rank.iter().map(|l| format!("{} of {}", l.tensor, l.op)).collect();
        sources.dedup();
        let history: Vec<String> =
            of_rank.iter().map(|l| format!("{}:{}", l.step, fmt_num(l.value))).collect();
        let who = if ranks.len() > 1 { format!(", rank {rank}") } else { String::new() };
        writeln!(out, "loss scale by step{who} ({}): {}", sources.join("; "), history.join(" "))?;
    }
    Ok(())
}

/// `step 1`, or `step unknown` for a call the capture cannot place.
fn step_words(step: Option<u64>) -> String {
    step.map_or("step unknown".into(), |s| format!("step {s}"))
}

/// Where the origin is when the data examined holds none.
const WHERE_ELSE: &str = "on another rank, in ops not dumped, or left out by --op";
/// What to run then.
const LOOK_THERE: &str = "run `analyzer ranks` over every rank's capture";

fn print_table(out: &mut impl Write, r: &OverflowReport, colour: bool) -> Result<()> {
    writeln!(out, "overflow analysis of {}", r.run)?;
    for line in &r.scope {
        writeln!(out, "scope: {line}")?;
    }
    let scope = if r.scope.is_empty() { "" } else { " in the steps the ring policy kept (scope above)" };
    let leader = r.leading_arrival();
    if let Some(a) = leader.filter(|a| !a.began_here_on.is_empty()) {
        let head = paint("OVERFLOW BEGAN IN A COLLECTIVE", "1;31", colour);
        let ranks = rank_ranges(&a.began_here_on);
        writeln!(out, "\n{head}: {} {ranks}: {} on {}", step_words(a.step), a.call, a.comm)?;
        writeln!(out, "  {}.output.0: {} of {}", a.call, a.anomaly.describe(), a.elements)?;
        writeln!(out, "  no op produced it: {}", a.why_it_began_here())?;
    } else if let Some(a) = leader {
        let head = paint("OVERFLOW ARRIVED THROUGH A COLLECTIVE", "1;31", colour);
        writeln!(out, "\n{head}: {} rank {}: {} on {}", step_words(a.step), a.rank, a.call, a.comm)?;
        writeln!(out, "  {}.output.0: {} of {} ({})", a.call, a.anomaly.describe(), a.elements, a.inputs)?;
        writeln!(
            out,
            "  no op of this data produced inf/NaN from finite inputs{scope}: the origin is not in this data \
             ({WHERE_ELSE}): {LOOK_THERE}"
        )?;
    } else if let Some(w) = r.leading_without_origin() {
        let head = paint("OVERFLOW WITH NO ORIGIN IN THIS DATA", "1;31", colour);
        writeln!(out, "\n{head}: rank {}: {}", w.rank, w.evidence)?;
        writeln!(
            out,
            "  no op or collective of this data produced inf/NaN from finite inputs{scope}: the origin is not \
             in this data ({WHERE_ELSE}): {LOOK_THERE}"
        )?;
    } else if r.origins.is_empty() && !r.input_problems.is_empty() {
        writeln!(
            out,
            "\nNo op produced inf/NaN or saturated values from finite inputs among the tensors that could be read{scope}; \
             the input problems above leave the answer open."
        )?;
    } else if r.origins.is_empty() {
        let none = paint("No op produced inf/NaN or saturated values", "1;32", colour);
        writeln!(out, "\n{none} from finite inputs{scope}.")?;
    }
    for (i, o) in r.origins.iter().enumerate() {
        if i == 0 {
            let first = paint("FIRST OVERFLOW", "1;31", colour);
            writeln!(out, "\n{first}: step {} rank {}: {} [{}]", o.step, o.rank, o.op, o.op_type)?;
        } else {
            writeln!(out, "\nstep {} rank {}: {} [{}]", o.step, o.rank, o.op, o.op_type)?;
        }
        writeln!(out, "  {}: {} ({})", o.output, o.anomaly.describe(), o.inputs)?;
        if let Some(independently) = o.overflowed_independently() {
            writeln!(out, "  {independently}")?;
        }
        if i == 0 {
            write_other_ranks_origins(out, r, o)?;
        }
        for d in &o.device_status {
            writeln!(
                out,
                "  device: {} status {}: {}",
                d.engine,
                d.status.join(" "),
                d.status_names.join(", ")
            )?;
        }
        match o.spread_to {
            Some(n) => writeln!(out, "  spread to {n} later op(s) of the same step")?,
            None => writeln!(
                out,
                "  spread: not visible (overflow detection dumps only the ops the device flagged)"
            )?,
        }
    }
    // The first arrival is the headline when it leads; with it, when it began there, its other members'.
    let headline = |a: &Arrival| {
        leader.is_some_and(|l| {
            std::ptr::eq(l, a) || (!l.began_here_on.is_empty() && l.call == a.call && l.comm == a.comm)
        })
    };
    let listed: Vec<&Arrival> = r.arrivals.iter().filter(|a| !headline(a)).collect();
    if !listed.is_empty() {
        writeln!(out, "\narrived through a collective (finite on the rank before the call):")?;
        for a in listed {
            writeln!(
                out,
                "  {} rank {}: {} on {}: {} of {} ({})",
                step_words(a.step),
                a.rank,
                a.call,
                a.comm,
                a.anomaly.describe(),
                a.elements,
                a.inputs
            )?;
            if !a.began_here_on.is_empty() {
                writeln!(out, "    it began there: {}", a.why_it_began_here())?;
            }
        }
    }
    let led = r.leading_without_origin();
    let rest: Vec<&crate::overflow::WithoutOrigin> =
        r.without_origin.iter().filter(|&w| !led.is_some_and(|l| std::ptr::eq(l, w))).collect();
    if !rest.is_empty() {
        // The headline's sentence holds its own parentheses: here one pair says where to look.
        writeln!(
            out,
            "\noverflow the run shows with no origin among the ops examined ({WHERE_ELSE}; {LOOK_THERE}):"
        )?;
        for w in rest {
            writeln!(out, "  rank {}: {}", w.rank, w.evidence)?;
        }
    }
    if !r.steps_with_overflow.is_empty() {
        let steps: Vec<String> = r.steps_with_overflow.iter().map(|s| s.to_string()).collect();
        writeln!(out, "\nsteps with an overflow: {}", steps.join(", "))?;
        for (a, b) in &r.consecutive_runs {
            // A collapsing scale only where the run shows one (bf16 and fp32 train unscaled).
            if r.loss_scale.is_empty() {
                writeln!(
                    out,
                    "  steps {a}-{b} overflowed in a row: no loss scale is dumped, so no lower scale can absorb \
                     it; what overflows (a weight, the data) does so at every step"
                )?;
            } else {
                writeln!(out, "  steps {a}-{b} overflowed in a row: the loss scale is collapsing")?;
            }
        }
    }
    loss_scale_history(out, r)?;
    if r.unattributed_device_records > 0 {
        writeln!(
            out,
            "{} device overflow record(s) could not be tied to a dumped op",
            r.unattributed_device_records
        )?;
    }
    if r.tensors_without_statistics > 0 {
        writeln!(
            out,
            "warning: {} tensor(s) had neither statistics nor readable data",
            r.tensors_without_statistics
        )?;
    }
    Ok(())
}

/// Under the first overflow: the ranks that began an overflow of their own at the same step (other ops, in
/// their own compute). This report orders origins by step, then rank number, which says nothing of which
/// came first across the job; `ranks` orders them by what each rank saw of the others.
fn write_other_ranks_origins(out: &mut impl Write, r: &OverflowReport, first: &Origin) -> Result<()> {
    let others: Vec<u32> = r.origins[1..]
        .iter()
        .filter(|x| x.step == first.step && x.rank != first.rank && !first.independently_on.contains(&x.rank))
        .map(|x| x.rank)
        .collect();
    if others.is_empty() {
        return Ok(());
    }
    let ranks = rank_ranges(&others);
    let own = if ranks.starts_with("ranks ") { "their" } else { "its" };
    writeln!(
        out,
        "  {ranks} began an overflow of {own} own at step {} too (below): which came first across the job is \
         what `analyzer ranks {}` orders, by what each rank saw of the others",
        first.step, r.run
    )?;
    Ok(())
}
