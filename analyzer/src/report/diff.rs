//! The reports of `analyzer diff`: a terminal summary (the first differing op per step and rank, then the
//! census of every op that differed, per rank), CSV of both (the first differences with their verdicts, then the
//! census), and JSON of everything.

use super::{fmt_num, paint, write_json, Destination, Format, Output};
use crate::diff::{DiffReport, TensorDiff, UnmatchedTensor};
use anyhow::Result;
use std::io::Write;

/// Writes the report in `format` to its destination, led by the input problems.
pub fn write(r: &DiffReport, format: Format, to: &Destination<'_>) -> Result<()> {
    let mut out = Output::open(to.output)?;
    super::lead(&r.input_problems, format == Format::Table, to.output.is_some(), &mut out)?;
    super::lead_warnings(&r.warnings, format == Format::Table, to, &mut out)?;
    match format {
        Format::Json => write_json(&mut out, "diff", r)?,
        Format::Csv => write_csv(&mut out, r)?,
        Format::Table => print_table(&mut out, r, to.paints())?,
    }
    out.flush()?;
    Ok(())
}

fn print_table(out: &mut impl Write, r: &DiffReport, colour: bool) -> Result<()> {
    writeln!(out, "diff {} vs {}", r.run1, r.run2)?;
    if r.verdict == "refused" {
        writeln!(
            out,
            "{}: the runs cannot be diffed (REFUSED above)",
            paint("NOT COMPARED", "1;31", colour)
        )?;
        return Ok(());
    }
    let by_statistics = r.differing_by_statistics + r.agreeing_by_statistics;
    let by_hash = r.compared_tensors > r.differing_by_statistics || by_statistics == 0;
    if by_hash {
        writeln!(
            out,
            "{} tensors compared by hash, {} differ ({} decoded to measure the difference)",
            r.compared_tensors - r.differing_by_statistics,
            r.differing_tensors - r.differing_by_statistics,
            r.decoded_tensors
        )?;
    }
    if by_statistics > 0 {
        writeln!(
            out,
            "{by_statistics} tensors compared by the device's statistics alone (no content hash, no values): \
             {} differ, and {} agree, which does not show them identical{}",
            r.differing_by_statistics,
            r.agreeing_by_statistics,
            // Without tensors compared by hash, the rest of what differs is HCCL calls' buffers.
            match r.differing_tensors - r.differing_by_statistics {
                calls if calls > 0 && !by_hash => format!("; {calls} HCCL calls differ by content hash"),
                _ => String::new(),
            }
        )?;
    }
    if r.first_differences.is_empty() && !r.input_problems.is_empty() {
        writeln!(
            out,
            "\nNo difference among the tensors that could be read; the input problems above leave the answer open."
        )?;
    } else if r.first_differences.is_empty() {
        writeln!(out, "\nThe runs are {} on every matched tensor.", paint("bit-identical", "1;32", colour))?;
    } else {
        writeln!(out, "\nFirst differing op per step and rank:")?;
        for f in &r.first_differences {
            writeln!(
                out,
                "  step {} rank {}: {} [{}] is {} ({})",
                f.step,
                f.rank,
                f.op,
                f.op_type,
                match f.verdict {
                    "nondeterministic" if f.in_transit =>
                        paint("CHANGED IN TRANSIT: what was sent was identical", "1;31", colour),
                    "nondeterministic" =>
                        paint("NONDETERMINISTIC: its inputs were identical", "1;31", colour),
                    "propagating" => "propagating a difference from its inputs".to_string(),
                    _ if f.output.by_device_statistics => "different (whether its inputs were identical is not \
                                                           known: the device's statistics alone do not show it)"
                        .to_string(),
                    _ => "different (its inputs were not dumped)".to_string(),
                },
                size_of_difference(&f.output)
            )?;
            for input in &f.differing_inputs {
                writeln!(out, "      differing input: {input}")?;
            }
        }
        writeln!(out, "\nEvery op whose output differed ({}):", r.census.len())?;
        writeln!(
            out,
            "  {:>5} {:<56} {:>6} {:>12} {:>10} {:>9}",
            "rank", "op", "times", "max |diff|", "max ulp", "share"
        )?;
        const SHOWN: usize = 25;
        for c in r.census.iter().take(SHOWN) {
            if c.measured {
                writeln!(
                    out,
                    "  {:>5} {:<56} {:>6} {:>12} {:>10} {:>8.2}%",
                    c.rank,
                    c.op,
                    c.times,
                    fmt_num(c.max_abs_diff),
                    c.max_ulp,
                    100.0 * c.max_share_differing
                )?;
            } else if c.by_device_statistics {
                writeln!(
                    out,
                    "  {:>5} {:<56} {:>6}   the device's statistics differ, by up to {}",
                    c.rank,
                    c.op,
                    c.times,
                    fmt_num(c.max_stats_delta)
                )?;
            } else {
                writeln!(
                    out,
                    "  {:>5} {:<56} {:>6}   hash differs, statistics moved by up to {}",
                    c.rank,
                    c.op,
                    c.times,
                    fmt_num(c.max_stats_delta)
                )?;
            }
        }
        if r.census.len() > SHOWN {
            writeln!(
                out,
                "  ... {} more ops (--format csv or json lists every one)",
                r.census.len() - SHOWN
            )?;
        }
        if r.census.iter().any(|c| !c.measured) {
            writeln!(out, "  (statistics-only capture: record with --mode tensor for element-wise figures)")?;
        }
    }
    for side in ["run1", "run2"] {
        let list: Vec<_> = r.unmatched.iter().filter(|u| u.run == side).collect();
        if !list.is_empty() {
            writeln!(out, "\n{} only in {side}:", what_is_listed(list.iter().copied()))?;
            for u in list.iter().take(20) {
                writeln!(out, "  step {} rank {}: {}", u.step, u.rank, u.tensor)?;
            }
            if list.len() > 20 {
                writeln!(out, "  ... and {} more (use --format json for all)", list.len() - 20)?;
            }
        }
    }
    Ok(())
}

/// What an unmatched list holds: "12 tensors", or "12 tensors and 1 HCCL call" when calls without their
/// counterpart are among them (the text and the HTML report say it alike).
pub(crate) fn what_is_listed<'a>(list: impl IntoIterator<Item = &'a UnmatchedTensor>) -> String {
    let (mut all, mut calls) = (0, 0);
    for u in list {
        all += 1;
        calls += usize::from(u.hccl_call);
    }
    let tensors = format!("{} tensors", all - calls);
    let calls_named = if calls == 1 { "1 HCCL call".to_string() } else { format!("{calls} HCCL calls") };
    match (all - calls, calls) {
        (_, 0) => tensors,
        (0, _) => calls_named,
        _ => format!("{tensors} and {calls_named}"),
    }
}

/// "max |diff| 0.5, 3 ulp, 1.2% of elements", or what the statistics say when there was no data.
fn size_of_difference(d: &TensorDiff) -> String {
    if d.by_device_statistics {
        let by =
            d.stats_delta.filter(|&delta| delta > 0.0).map(|delta| format!(", by up to {}", fmt_num(delta)));
        format!("found from the device's statistics, not values: they differ{}", by.unwrap_or_default())
    } else if d.measured {
        format!(
            "max |diff| {}, {} ulp, {:.2}% of elements",
            fmt_num(d.max_abs_diff),
            d.max_ulp,
            100.0 * d.share_differing()
        )
    } else {
        match d.stats_delta {
            Some(delta) => format!("hash differs; statistics moved by up to {}", fmt_num(delta)),
            None => "hash differs".to_string(),
        }
    }
}

/// One table: a row per first difference (`kind` `first_difference`: step, rank, the op, its verdict and
/// differing inputs, how its output differs), then a row per op and rank of the census (`kind` `census`:
/// how often and how much it differed on that rank; `step` empty).
fn write_csv(out: &mut impl Write, r: &DiffReport) -> Result<()> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "kind",
        "step",
        "rank",
        "op",
        "op_type",
        "verdict",
        "differing_inputs",
        "times",
        "max_abs_diff",
        "max_ulp",
        "share_differing",
        "stats_delta",
        "measured",
    ])?;
    for f in &r.first_differences {
        let d = &f.output;
        w.write_record([
            "first_difference".to_string(),
            f.step.to_string(),
            f.rank.to_string(),
            f.op.clone(),
            f.op_type.clone(),
            f.verdict.to_string(),
            f.differing_inputs.join(";"),
            "1".to_string(),
            d.max_abs_diff.to_string(),
            d.max_ulp.to_string(),
            d.share_differing().to_string(),
            d.stats_delta.map(|v| v.to_string()).unwrap_or_default(),
            d.measured.to_string(),
        ])?;
    }
    for c in &r.census {
        w.write_record([
            "census".to_string(),
            String::new(),
            c.rank.to_string(),
            c.op.clone(),
            c.op_type.clone(),
            String::new(),
            String::new(),
            c.times.to_string(),
            c.max_abs_diff.to_string(),
            c.max_ulp.to_string(),
            c.max_share_differing.to_string(),
            c.max_stats_delta.to_string(),
            c.measured.to_string(),
        ])?;
    }
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(tensors: usize, calls: usize) -> Vec<UnmatchedTensor> {
        let entry =
            |hccl_call| UnmatchedTensor { run: "run2", tensor: "t".into(), step: 0, rank: 0, hccl_call };
        (0..tensors).map(|_| entry(false)).chain((0..calls).map(|_| entry(true))).collect()
    }

    /// The header of an unmatched list (text and HTML) names HCCL calls apart from tensors, and only when
    /// there are some.
    #[test]
    fn a_list_says_how_many_tensors_and_calls_it_holds() {
        for ((tensors, calls), said) in [
            ((0, 0), "0 tensors"),
            ((12, 0), "12 tensors"),
            ((0, 1), "1 HCCL call"),
            ((0, 2), "2 HCCL calls"),
            ((3, 1), "3 tensors and 1 HCCL call"),
        ] {
            assert_eq!(what_is_listed(&listed(tensors, calls)), said);
        }
    }
}
