//! The reports of `analyzer ranks` (and `analyzer merge`, which answers the same question from
//! summaries): a terminal summary that leads with what could not be matched, then the first anomaly and
//! its spread; CSV of the origins; JSON of everything.

use super::{paint, plural, write_json, Destination, Format, Output};
use crate::filter::rank_ranges;
use crate::ranks::events::step_words;
use crate::ranks::{Origin, RanksReport, Selection};
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
                "began_on",
                "independently_on",
            ])?;
            for (n, o) in report.origins.iter().enumerate() {
                // The ranks it began on (`0-3` for a collective anomalous on every member), else its own.
                let began_on: Vec<u64> = o.began_on.iter().map(|&r| u64::from(r)).collect();
                let began_on = crate::filter::ranges(&began_on);
                // The ranks the same op began on at that step, each in its own compute; empty when alone.
                let independently: Vec<u64> = o.independently_on.iter().map(|&r| u64::from(r)).collect();
                let independently_on = match independently.len() {
                    0 => String::new(),
                    _ => crate::filter::ranges(&independently),
                };
                for f in &o.findings {
                    let (comm, seq) = o
                        .collective
                        .clone()
                        .map_or((String::new(), String::new()), |(c, s)| (c, s.to_string()));
                    w.write_record([
                        n.to_string(),
                        o.rank.to_string(),
                        if o.step == crate::ranks::events::UNKNOWN_STEP {
                            "unknown".to_string()
                        } else {
                            o.step.to_string()
                        },
                        o.op.clone(),
                        o.op_type.clone(),
                        comm,
                        seq,
                        f.kind.describe().to_string(),
                        f.tensor.clone().unwrap_or_default(),
                        f.detail.clone(),
                        began_on.clone(),
                        independently_on.clone(),
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

/// What the answer covers, after its headline: ` in the selection (--rank 0; rank 1 not examined)`, or
/// nothing for the whole run.
fn scope(selection: Option<&Selection>, unexamined: &[u32]) -> String {
    match selection {
        Some(s) if unexamined.is_empty() => format!(" in the selection ({})", s.options()),
        Some(s) => format!(" in the selection ({}; {} not examined)", s.options(), rank_ranges(unexamined)),
        None => String::new(),
    }
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
    let unexamined: Vec<u32> = r.ranks.iter().copied().filter(|x| !r.examined_ranks.contains(x)).collect();
    let scope = scope(r.selection.as_ref(), &unexamined);
    if r.refused() {
        let none = paint("NO ANSWER ACROSS RANKS", "1;33", colour);
        writeln!(out, "\n{none}: refused (above).")?;
        let (examined, not_examined) = by_examination(r, &r.origins);
        if !examined.is_empty() {
            writeln!(out, "anomalies on the rank examined, nothing anomalous before them there:")?;
            for o in examined.iter().take(10) {
                write_origin_line(out, o)?;
            }
        }
        write_not_examined(out, &not_examined)?;
        return Ok(());
    }
    let Some(first) = r.origins.first() else {
        if r.input_problems.is_empty() {
            let none = paint("No anomaly across the ranks", "1;32", colour);
            let replicas = if r.replicated_per_step.is_empty() {
                "no tensor is held alike by several ranks, so no replica was compared"
            } else {
                "replicas agree"
            };
            writeln!(
                out,
                "\n{none}{scope}: no overflow, every collective's members agree ({} HCCL call{}), {replicas}.",
                r.calls,
                plural(r.calls)
            )?;
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
    writeln!(
        out,
        "\n{head}{scope}: {} {}: {} [{}]",
        rank_ranges(first.ranks_it_began_on()),
        step_words(first.step),
        first.op,
        first.op_type
    )?;
    if let Some((comm, seq)) = &first.collective {
        // A send or receive is numbered among the messages between its two ranks, not the collectives.
        let what =
            if matches!(first.op_type.as_str(), "HcclSend" | "HcclRecv") { "message" } else { "collective" };
        writeln!(out, "  {what} #{seq} on communicator {comm}")?;
    }
    if let Some(together) = first.began_together() {
        writeln!(out, "  {together}")?;
    }
    if let Some(independently) = first.began_independently() {
        writeln!(out, "  {independently}")?;
    }
    // The same op on the other ranks it began on independently: their findings under the first's.
    let (alike, rest) = r.first_alike_and_rest();
    for o in std::iter::once(first).chain(alike.iter().copied()) {
        let on = if alike.is_empty() { String::new() } else { format!("rank {}: ", o.rank) };
        for f in &o.findings {
            let tensor = f.tensor.as_deref().map(|t| format!("{t}: ")).unwrap_or_default();
            writeln!(out, "  {on}{}: {tensor}{}", f.kind.describe(), f.detail)?;
        }
    }
    writeln!(out, "spread:")?;
    let (affected, quiet): (Vec<_>, Vec<_>) = r.spread.iter().partition(|s| s.anomalous_events > 0);
    // The members it began on together: one line, their ranks as ranges.
    let (began, affected): (Vec<_>, Vec<_>) =
        affected.into_iter().partition(|s| s.via.is_none() && first.began_on.len() > 1);
    if let Some(at) = began.first() {
        let ranks: Vec<u32> = began.iter().map(|s| s.rank).collect();
        let events: u64 = began.iter().map(|s| s.anomalous_events).sum();
        writeln!(
            out,
            "  {} where it began, together, from {} at {} ({events} anomalous event{} from there)",
            rank_ranges(&ranks),
            at.at,
            step_words(at.step),
            plural(events)
        )?;
    }
    for s in affected {
        let how = match &s.via {
            None => "where it began".to_string(),
            Some(via) => format!("through {via}"),
        };
        writeln!(
            out,
            "  rank {} {how}, from {} at {} ({} anomalous event{} from there)",
            s.rank,
            s.at,
            step_words(s.step),
            s.anomalous_events,
            plural(s.anomalous_events)
        )?;
    }
    // Only the ranks examined: nothing is said of the others' ops.
    let quiet: Vec<u32> = quiet.iter().map(|s| s.rank).filter(|x| r.examined_ranks.contains(x)).collect();
    if !quiet.is_empty() {
        let show = if quiet.len() == 1 { "shows" } else { "show" };
        writeln!(out, "  {} met it in a collective later and {show} no anomaly", rank_ranges(&quiet))?;
    }
    if !alike.is_empty() {
        let ranks: Vec<u32> = alike.iter().map(|o| o.rank).collect();
        writeln!(
            out,
            "  {} where the same op began it too, independently, at {} (what followed there is not traced here)",
            rank_ranges(&ranks),
            step_words(first.step)
        )?;
    }
    let untouched: Vec<u32> = r
        .examined_ranks
        .iter()
        .copied()
        .filter(|x| !r.spread.iter().any(|s| s.rank == *x) && !alike.iter().any(|o| o.rank == *x))
        .collect();
    if !untouched.is_empty() {
        writeln!(out, "  {} not reached", rank_ranges(&untouched))?;
    }
    if !unexamined.is_empty() {
        writeln!(out, "  {} not examined (the selection)", rank_ranges(&unexamined))?;
    }
    let (others, not_examined) = by_examination(r, rest);
    if !others.is_empty() {
        writeln!(out, "\nother anomalies nothing anomalous happened before ({}):", others.len())?;
        for o in others.iter().take(10) {
            write_origin_line(out, o)?;
        }
        if others.len() > 10 {
            writeln!(out, "  ... {} more (--format csv lists them all)", others.len() - 10)?;
        }
    }
    if !not_examined.is_empty() {
        writeln!(out)?;
    }
    write_not_examined(out, &not_examined)?;
    let counts: Vec<String> = r.findings.iter().map(|(k, n)| format!("{k} {n}")).collect();
    writeln!(out, "\nanomalous events: {}", counts.join(", "))?;
    write_redundancy(out, r)
}

/// `origins` on the ranks examined, then those on ranks outside the selection: of these only the HCCL
/// calls were kept (to order the ranks), so they are no origin there, only anomalous calls.
fn by_examination<'a>(
    r: &RanksReport,
    origins: impl IntoIterator<Item = &'a Origin>,
) -> (Vec<&'a Origin>, Vec<&'a Origin>) {
    origins.into_iter().partition(|o| r.examined_ranks.contains(&o.rank))
}

/// The anomalous HCCL calls of ranks not examined, under a heading that claims nothing of their ops.
fn write_not_examined(out: &mut impl Write, calls: &[&Origin]) -> Result<()> {
    if calls.is_empty() {
        return Ok(());
    }
    let mut ranks: Vec<u32> = calls.iter().map(|o| o.rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    writeln!(
        out,
        "anomalous HCCL calls of {}, not examined (only {} calls are kept, to order the ranks: what came before \
         them there was not read):",
        rank_ranges(&ranks),
        if ranks.len() == 1 { "its" } else { "their" },
    )?;
    for o in calls.iter().take(10) {
        write_origin_line(out, o)?;
    }
    if calls.len() > 10 {
        writeln!(out, "  ... {} more (--format csv lists them all)", calls.len() - 10)?;
    }
    Ok(())
}

/// One origin on its own line: rank, step, op and what was anomalous about it.
fn write_origin_line(out: &mut impl Write, o: &Origin) -> Result<()> {
    let kinds: Vec<&str> = o.findings.iter().map(|f| f.kind.describe()).collect();
    let alike = match o.independently_on.len() {
        0 | 1 => String::new(),
        _ => format!("   (the same op on {}, independently)", rank_ranges(&o.independently_on)),
    };
    writeln!(
        out,
        "  rank {} {}: {} [{}]: {}{alike}",
        o.rank,
        step_words(o.step),
        o.op,
        o.op_type,
        kinds.join(", ")
    )?;
    Ok(())
}

fn write_redundancy(out: &mut impl Write, r: &RanksReport) -> Result<()> {
    if r.replicated_per_step.is_empty() {
        return Ok(());
    }
    let per_step: Vec<String> = r.replicated_per_step.iter().map(|(s, n)| format!("step {s}: {n}")).collect();
    writeln!(out, "redundancy: tensors every rank held bit for bit ({})", per_step.join(", "))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problems::{InputProblem, InputProblems};
    use crate::ranks::detect::{Finding, FindingKind};
    use std::collections::BTreeMap;

    /// Rank `rank`'s HcclAllReduce #7 at step 2, overflowing.
    fn allreduce_overflow(rank: u32) -> Origin {
        Origin {
            rank,
            step: 2,
            op: "HcclAllReduce".into(),
            op_type: "HcclAllReduce".into(),
            collective: Some(("root-1".into(), 7)),
            event: 3,
            lamport: 4,
            findings: vec![Finding {
                kind: FindingKind::Overflow,
                tensor: Some("HcclAllReduce.output.0".into()),
                detail: "1 NaN".into(),
            }],
            began_on: vec![rank],
            independently_on: Vec::new(),
        }
    }

    /// `ranks --rank 0` of a 2-rank run: rank 1's HCCL calls are kept (they order the ranks), its ops are not.
    fn rank_0_of_two(refusal: bool) -> RanksReport {
        let mut input_problems = InputProblems::default();
        if refusal {
            input_problems.push(InputProblem::refused("one rank is selected"));
        }
        RanksReport {
            run: "run".into(),
            baseline: None,
            ranks: vec![0, 1],
            steps: vec![2],
            events: 8,
            calls: 2,
            communicators: vec!["root-1".into()],
            origins: vec![allreduce_overflow(0), allreduce_overflow(1)],
            spread: vec![],
            findings: BTreeMap::new(),
            anomalous_per_step: BTreeMap::new(),
            replicated_per_step: BTreeMap::new(),
            input_problems,
            warnings: vec![],
            job_ranks: None,
            selection: Some(Selection { steps: vec![], ranks: vec![0], ops: vec![] }),
            examined_ranks: vec![0],
        }
    }

    #[test]
    fn an_anomalous_call_of_a_rank_not_examined_is_not_listed_as_the_examined_ranks() {
        for refusal in [true, false] {
            let mut out = Vec::new();
            print_table(&mut out, &rank_0_of_two(refusal), false).unwrap();
            let out = String::from_utf8(out).unwrap();
            let lines: Vec<&str> = out.lines().collect();
            let at = lines.iter().position(|l| l.contains("rank 1 step 2: HcclAllReduce")).expect(&out);
            // The heading a line is listed under: the nearest line above it that is not indented.
            let heading = lines[..at].iter().rev().find(|l| !l.starts_with(' ')).unwrap();
            assert!(heading.contains("rank 1, not examined"), "{out}");
            assert!(!heading.contains("nothing anomalous"), "rank 1's ops were not read:\n{out}");
            assert!(out.contains("rank 0 step 2: HcclAllReduce"), "{out}");
        }
    }

    #[test]
    fn the_scope_names_the_ranks_not_examined_in_the_singular_for_one() {
        let selection = Selection { steps: vec![], ranks: vec![0, 1, 2], ops: vec![] };
        assert_eq!(scope(Some(&selection), &[3]), " in the selection (--rank 0-2; rank 3 not examined)");
        assert_eq!(
            scope(Some(&selection), &[3, 4]),
            " in the selection (--rank 0-2; ranks 3, 4 not examined)"
        );
        assert_eq!(scope(Some(&selection), &[]), " in the selection (--rank 0-2)");
        assert_eq!(scope(None, &[3]), "");
    }
}
