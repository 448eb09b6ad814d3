//! The reports of `analyzer ranks` (and `analyzer merge`, which answers the same question from
//! summaries): a terminal summary that leads with what could not be matched, then the first anomaly and
//! its spread; CSV of the origins; JSON of everything.

use super::{paint, plural, write_json, Destination, Format, Output};
use crate::ranks::RanksReport;
use anyhow::Result;
use std::io::Write;

/// Writes the report in `format` to its destination; `command` names it in JSON.
pub fn write(report: &RanksReport, command: &str, format: Format, to: &Destination<'_>) -> Result<()> {
    let mut out = Output::open(to.output)?;
    let table = format == Format::Table;
    super::lead(&report.input_problems, table, to.output.is_some(), &mut out)?;
    super::lead_warnings(&report.warnings, table, to, &mut out)?;
    match format {
        Format::Json => write_json(&mut out, command, report)?,
        Format::Csv => {
            let mut w = csv::Writer::from_writer(&mut out);
            w.write_record([
                "order",
                "rank",
                "step",
                "op",
                "op_type",
                "communicator",
                "seq",
                "finding",
                "tensor",
                "detail",
            ])?;
            for (n, o) in report.origins.iter().enumerate() {
                for f in &o.findings {
                    let (comm, seq) = o
                        .collective
                        .clone()
                        .map_or((String::new(), String::new()), |(c, s)| (c, s.to_string()));
                    w.write_record([
                        n.to_string(),
                        o.rank.to_string(),
                        o.step.to_string(),
                        o.op.clone(),
                        o.op_type.clone(),
                        comm,
                        seq,
                        f.kind.describe().to_string(),
                        f.tensor.clone().unwrap_or_default(),
                        f.detail.clone(),
                    ])?;
                }
            }
            w.flush()?;
        }
        Format::Table => print_table(&mut out, report, to.paints())?,
    }
    out.flush()?;
    Ok(())
}

fn print_table(out: &mut impl Write, r: &RanksReport, colour: bool) -> Result<()> {
    let steps = match (r.steps.first(), r.steps.last()) {
        (Some(a), Some(b)) if a != b => format!("steps {a}-{b}"),
        (Some(a), _) => format!("step {a}"),
        _ => "no steps".into(),
    };
    writeln!(
        out,
        "cross-rank analysis of {}: {} rank{}, {steps}, {} events, {} HCCL call{} on {} communicator{}",
        r.run,
        r.ranks.len(),
        plural(r.ranks.len() as u64),
        r.events,
        r.calls,
        plural(r.calls),
        r.communicators.len(),
        plural(r.communicators.len() as u64)
    )?;
    if let Some(b) = &r.baseline {
        writeln!(out, "against the baseline {b}")?;
    }
    let Some(first) = r.origins.first() else {
        if r.input_problems.is_empty() {
            let none = paint("No anomaly across the ranks", "1;32", colour);
            writeln!(out, "\n{none}: no overflow, every collective's members agree, replicas agree.")?;
        } else {
            let none = paint("NO VERDICT", "1;33", colour);
            writeln!(
                out,
                "\n{none}: no anomaly in what was read, but the input problems above leave part unread."
            )?;
        }
        write_redundancy(out, r)?;
        return Ok(());
    };
    let head = paint("FIRST ANOMALY", "1;31", colour);
    writeln!(out, "\n{head}: rank {} step {}: {} [{}]", first.rank, first.step, first.op, first.op_type)?;
    if let Some((comm, seq)) = &first.collective {
        writeln!(out, "  collective #{seq} on communicator {comm}")?;
    }
    for f in &first.findings {
        let tensor = f.tensor.as_deref().map(|t| format!("{t}: ")).unwrap_or_default();
        writeln!(out, "  {}: {tensor}{}", f.kind.describe(), f.detail)?;
    }
    writeln!(out, "spread:")?;
    let (affected, quiet): (Vec<_>, Vec<_>) = r.spread.iter().partition(|s| s.anomalous_events > 0);
    for s in affected {
        let how = match &s.via {
            None => "where it began".to_string(),
            Some(via) => format!("through {via}"),
        };
        writeln!(
            out,
            "  rank {} {how}, from {} at step {} ({} anomalous event{} from there)",
            s.rank,
            s.at,
            s.step,
            s.anomalous_events,
            plural(s.anomalous_events)
        )?;
    }
    if !quiet.is_empty() {
        let ranks: Vec<String> = quiet.iter().map(|s| s.rank.to_string()).collect();
        writeln!(out, "  ranks {} met it in a collective later and show no anomaly", ranks.join(", "))?;
    }
    let untouched = r.ranks.len() - r.spread.len();
    if untouched > 0 {
        writeln!(out, "  {untouched} rank{} not reached", plural(untouched as u64))?;
    }
    if r.origins.len() > 1 {
        writeln!(out, "\nother anomalies nothing anomalous happened before ({}):", r.origins.len() - 1)?;
        for o in r.origins.iter().skip(1).take(10) {
            let kinds: Vec<&str> = o.findings.iter().map(|f| f.kind.describe()).collect();
            writeln!(
                out,
                "  rank {} step {}: {} [{}]: {}",
                o.rank,
                o.step,
                o.op,
                o.op_type,
                kinds.join(", ")
            )?;
        }
        if r.origins.len() > 11 {
            writeln!(out, "  ... {} more (--format csv lists them all)", r.origins.len() - 11)?;
        }
    }
    let counts: Vec<String> = r.findings.iter().map(|(k, n)| format!("{k} {n}")).collect();
    writeln!(out, "\nanomalous events: {}", counts.join(", "))?;
    write_redundancy(out, r)
}

fn write_redundancy(out: &mut impl Write, r: &RanksReport) -> Result<()> {
    if r.replicated_per_step.is_empty() {
        return Ok(());
    }
    let per_step: Vec<String> = r.replicated_per_step.iter().map(|(s, n)| format!("step {s}: {n}")).collect();
    writeln!(out, "redundancy: tensors every rank held bit for bit ({})", per_step.join(", "))?;
    Ok(())
}
