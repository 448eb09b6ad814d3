//! The reports of `analyzer watch`: a terminal summary (input problems, then the hits by condition, then
//! what could not be told and what would tell it, then the loss and gradient norm by step), CSV of the
//! hits, and JSON of everything.

use super::{fmt_num, paint, plural, write_json, Destination, Format, Output};
use crate::filter::{ranges, rank_ranges};
use crate::watch::{Finding, Measure, WatchReport};
use anyhow::Result;
use std::io::Write;

/// Hits listed per condition in the table (JSON and CSV have them all).
const SHOWN: usize = 5;

/// Writes the report in `format` to its destination.
pub fn write(report: &WatchReport, format: Format, to: &Destination<'_>) -> Result<()> {
    let mut out = Output::open(to.output)?;
    super::lead(&report.input_problems, format == Format::Table, to.output.is_some(), &mut out)?;
    super::lead_warnings(&report.warnings, format == Format::Table, to, &mut out)?;
    match format {
        Format::Json => write_json(&mut out, "watch", report)?,
        Format::Csv => write_csv(&mut out, report)?,
        Format::Table => print_table(&mut out, report, to.paints())?,
    }
    out.flush()?;
    Ok(())
}

/// `0.25`, or `[0.1, 2.3]` when only bounded.
pub fn fmt_measure(m: &Measure) -> String {
    match m.value() {
        Some(v) => fmt_num(v),
        None => format!("[{}, {}]", fmt_num(m.at_least), fmt_num(m.at_most)),
    }
}

fn write_csv(out: &mut impl Write, r: &WatchReport) -> Result<()> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "condition",
        "step",
        "rank",
        "op",
        "op_type",
        "tensor",
        "role",
        "param",
        "measure",
        "value_at_least",
        "value_at_most",
        "threshold",
        "evidence",
        "detail",
    ])?;
    let opt = |v: Option<String>| v.unwrap_or_default();
    for f in &r.findings {
        w.write_record([
            f.condition.to_string(),
            opt(f.step.map(|s| s.to_string())),
            opt(f.rank.map(|s| s.to_string())),
            opt(f.op.clone()),
            opt(f.op_type.clone()),
            opt(f.tensor.clone()),
            f.role.unwrap_or("").to_string(),
            opt(f.param.clone()),
            f.measure.to_string(),
            f.value.at_least.to_string(),
            f.value.at_most.to_string(),
            f.threshold.clone(),
            f.evidence.as_str().to_string(),
            opt(f.detail.clone()),
        ])?;
    }
    // An overflow the run shows (skipped step, scale drop) with no origin here: a row, never nothing.
    for o in &r.without_origin {
        let mut row = vec![String::new(); 14];
        row[0] = "overflow_without_origin".into();
        row[1] = o.step.to_string();
        row[2] = o.rank.to_string();
        row[13] = format!("{}; origin not in this data", o.evidence);
        w.write_record(&row)?;
    }
    w.flush()?;
    Ok(())
}

/// `step 3 rank 0: model/fc1/weight (optimizer/model/fc1/weight/ApplyAdam.output.0)`.
pub fn place(f: &Finding) -> String {
    let mut s = String::new();
    if let (Some(step), Some(rank)) = (f.step, f.rank) {
        s.push_str(&format!("step {step} rank {rank}: "));
    }
    match (&f.param, &f.tensor, &f.op) {
        (Some(p), Some(t), _) => s.push_str(&format!("{p} ({t})")),
        (None, Some(t), _) => s.push_str(t),
        (_, None, Some(op)) => s.push_str(op),
        _ => s.push_str("the run"),
    }
    s
}

fn print_table(out: &mut impl Write, r: &WatchReport, colour: bool) -> Result<()> {
    let l = &r.labels;
    let steps = match (r.steps.first(), r.steps.last()) {
        (Some(a), Some(b)) if a != b => format!("steps {a}-{b}"),
        (Some(a), _) => format!("step {a}"),
        _ => "no steps".to_string(),
    };
    writeln!(out, "watch {}: {steps}, {}", r.run, rank_ranges(&r.ranks))?;
    writeln!(
        out,
        "  labelled: {} weights, {} gradients, {} activations, {} optimizer state, {} leaf inputs; {} optimizer \
         updates{}",
        l.weights,
        l.gradients,
        l.activations,
        l.optimizer_state,
        l.leaves,
        l.updates,
        if l.updates == 0 { " (no optimizer op: no weight conditions)" } else { "" }
    )?;
    if l.nonfinite > 0 {
        writeln!(
            out,
            "  {} tensors hold NaN or inf: only the overflow conditions looked at them",
            l.nonfinite
        )?;
    }
    for line in &r.scope {
        writeln!(out, "  scope: {line}")?;
    }
    let scope = if r.scope.is_empty() { "" } else { " in the steps the ring policy kept (scope above)" };
    let hit: Vec<_> = r.conditions.iter().filter(|c| c.hits > 0).collect();
    if let Some(w) = r.without_origin.first() {
        let head = paint("OVERFLOW WITH NO ORIGIN IN THIS DATA", "1;31", colour);
        writeln!(out, "\n{head}: rank {}: {}", w.rank, w.evidence)?;
        for w in &r.without_origin[1..] {
            writeln!(out, "  rank {}: {}", w.rank, w.evidence)?;
        }
        writeln!(
            out,
            "  no overflow condition hit at that step{scope}: the origin is not in this data (on another rank, or \
             in ops not dumped): run `analyzer ranks` over every rank's capture"
        )?;
    }
    if hit.is_empty() && !r.without_origin.is_empty() {
        // Said above: an overflow happened; nothing here is an all-clear.
    } else if hit.is_empty() && !r.input_problems.is_empty() {
        let none = paint("NO VERDICT", "1;33", colour);
        writeln!(
            out,
            "\n{none}: no condition hit on what was read, but the input is incomplete (see above)."
        )?;
    } else if hit.is_empty() {
        let none = paint("No condition hit", "1;32", colour);
        writeln!(out, "\n{none} on what could be decided{scope}.")?;
    }
    for c in &hit {
        writeln!(
            out,
            "\n{} ({} hit{}): {}",
            paint(c.name, "1;31", colour),
            c.hits,
            plural(c.hits),
            c.summary
        )?;
        let all: Vec<&Finding> = r.findings.iter().filter(|f| f.condition == c.name).collect();
        for f in all.iter().take(SHOWN) {
            write!(
                out,
                "  {}: {} = {} ({}; {})",
                place(f),
                f.measure,
                fmt_measure(&f.value),
                f.threshold,
                f.evidence.as_str()
            )?;
            match &f.detail {
                Some(d) => writeln!(out, "\n      {d}")?,
                None => writeln!(out)?,
            }
        }
        if all.len() > SHOWN {
            writeln!(out, "  ... and {} more (--format json or csv lists every one)", all.len() - SHOWN)?;
        }
    }
    if !r.cant_tell.is_empty() {
        writeln!(out, "\nCAN'T TELL (never guessed; what would decide it):")?;
        for g in &r.cant_tell {
            writeln!(out, "  {}: {} time{}: {}", g.condition, g.count, plural(g.count), g.reason)?;
            writeln!(out, "      decided by {}", g.would_decide)?;
            if let Some(e) = g.examples.first() {
                let at = match (e.step, e.rank) {
                    (Some(s), Some(k)) => format!("step {s} rank {k} "),
                    _ => String::new(),
                };
                let what = e.tensor.clone().or(e.op.clone()).unwrap_or_else(|| "the run".into());
                let bounds =
                    e.bounds.map(|b| format!(": between {} and {}", fmt_num(b.at_least), fmt_num(b.at_most)));
                writeln!(out, "      e.g. {at}{what}{}", bounds.unwrap_or_default())?;
            }
        }
    }
    // One line per rank when there are several (each labelled): ranks' series never run together.
    let mut ranks: Vec<u32> =
        r.loss.iter().map(|p| p.rank).chain(r.gradient_norm.iter().map(|p| p.rank)).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let who = |rank: u32| if ranks.len() > 1 { format!(", rank {rank}") } else { String::new() };
    let mut first = true;
    for &rank in &ranks {
        let points: Vec<String> = r
            .loss
            .iter()
            .filter(|p| p.rank == rank)
            .map(|p| format!("{}:{}", p.step, p.value.map_or("NaN/inf".into(), fmt_num)))
            .collect();
        if points.is_empty() {
            continue;
        }
        let newline = if first { "\n" } else { "" };
        writeln!(out, "{newline}loss by step{}: {}", who(rank), first_points(&points))?;
        first = false;
    }
    for &rank in &ranks {
        let points: Vec<String> = r
            .gradient_norm
            .iter()
            .filter(|p| p.rank == rank)
            .map(|p| match p.nonfinite_gradients {
                0 => format!("{}:{}", p.step, fmt_num(p.l2_norm)),
                n => format!("{}:NaN/inf ({n} of {} gradients)", p.step, p.gradients),
            })
            .collect();
        if points.is_empty() {
            continue;
        }
        // The steps that hold none: a line that just ended early read as the run having ended there.
        let with_gradient: std::collections::BTreeSet<u64> =
            r.gradient_norm.iter().filter(|p| p.rank == rank).map(|p| p.step).collect();
        let without: Vec<u64> = r.steps.iter().copied().filter(|s| !with_gradient.contains(s)).collect();
        // The run's steps are not each rank's: where a rank that shows a loss elsewhere shows none either,
        // its data of the step is missing (a step skipped on overflow still computes its loss).
        let with_loss: std::collections::BTreeSet<u64> =
            r.loss.iter().filter(|p| p.rank == rank).map(|p| p.step).collect();
        let (missing, without): (Vec<u64>, Vec<u64>) =
            without.into_iter().partition(|s| !with_loss.is_empty() && !with_loss.contains(s));
        let steps = |some: &[u64]| {
            let listed = ranges(some);
            match (some.len(), listed.matches(", ").count()) {
                (1, _) => format!("step {listed}"),
                (_, gaps) if gaps < 6 => format!("steps {listed}"),
                // Every few steps apart (gradient accumulation): thousands of ranges otherwise.
                (n, _) => format!("{n} of {} steps, the first {}", r.steps.len(), some[0]),
            }
        };
        let mut notes = String::new();
        if !without.is_empty() {
            notes += &format!(
                " (no gradient in {}: no optimizer op read one there: a step skipped on overflow, or one that only accumulates, runs none)",
                steps(&without)
            );
        }
        if !missing.is_empty() {
            notes += &format!(
                " (no gradient in {}, and no loss either: this rank's data of those steps is missing, not a skipped step)",
                steps(&missing)
            );
        }
        let without = notes;
        writeln!(
            out,
            "gradient norm by step{} (all parameters): {}{without}",
            who(rank),
            first_points(&points)
        )?;
    }
    let off: Vec<&str> = r.conditions.iter().filter(|c| !c.enabled).map(|c| c.name).collect();
    if !off.is_empty() {
        writeln!(out, "conditions off (--enable, --set or --config): {}", off.join(", "))?;
    }
    Ok(())
}

/// The first 12 `step:value` points of a series, then, when there are more, the first NaN/inf point after
/// them and the last, ` ...` where points are left out: a loss that turned NaN at step 13 of 30 showed steps
/// 0-11 alone and read healthy.
fn first_points(points: &[String]) -> String {
    let mut shown = points[..points.len().min(12)].join(" ");
    let later_nonfinite = points.iter().skip(12).position(|p| p.contains("NaN/inf")).map(|k| k + 12);
    let mut next = 12;
    for k in later_nonfinite.into_iter().chain(points.len().checked_sub(1)) {
        if k >= next {
            shown += if k > next { " ... " } else { " " };
            shown += &points[k];
            next = k + 1;
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::{first_points, print_table};
    use crate::watch::{LossPoint, NormPoint, WatchReport};

    #[test]
    fn a_long_series_shows_its_first_nan_and_its_last_step() {
        let series = |n: usize, nan_from: usize| -> Vec<String> {
            (0..n).map(|s| if s >= nan_from { format!("{s}:NaN/inf") } else { format!("{s}:1.5") }).collect()
        };
        let first12 = series(12, 99).join(" ");
        assert_eq!(first_points(&series(12, 99)), first12);
        assert_eq!(first_points(&series(30, 99)), format!("{first12} ... 29:1.5"));
        assert_eq!(first_points(&series(30, 13)), format!("{first12} ... 13:NaN/inf ... 29:NaN/inf"));
        assert_eq!(first_points(&series(14, 12)), format!("{first12} 12:NaN/inf 13:NaN/inf"));
    }

    /// A gradient-norm line that ends before the run does says which steps held no gradient and why (a
    /// run skipped from step 13 on showed steps 0-12 and read as if it ended there).
    /// A watch report of steps 0-29 of one rank, with nothing but its loss and gradient norm series.
    fn steps_0_to_29_of_rank(rank: u32, loss: Vec<LossPoint>, gradient_norm: Vec<NormPoint>) -> WatchReport {
        WatchReport {
            run: "runs/job".into(),
            input_problems: Default::default(),
            warnings: vec![],
            steps: (0..30).collect(),
            ranks: vec![rank],
            labels: Default::default(),
            conditions: vec![],
            findings: vec![],
            without_origin: vec![],
            scope: vec![],
            cant_tell: vec![],
            loss,
            gradient_norm,
        }
    }

    /// The table's "gradient norm by step" line, where it has one.
    fn gradient_line(report: &WatchReport) -> Option<String> {
        let mut out = Vec::new();
        print_table(&mut out, report, false).unwrap();
        let out = String::from_utf8(out).unwrap();
        out.lines().find(|l| l.starts_with("gradient norm by step")).map(str::to_string)
    }

    #[test]
    fn a_gradient_line_names_the_steps_without_a_gradient() {
        let norm =
            |step: u64| NormPoint { step, rank: 2, gradients: 4, nonfinite_gradients: 0, l2_norm: 1.5 };
        let report = |norms: Vec<NormPoint>| steps_0_to_29_of_rank(2, vec![], norms);
        let line = |r: &WatchReport| gradient_line(r).unwrap_or_default();
        let skipped = line(&report((0..13).map(norm).collect()));
        assert!(
            skipped.ends_with(
                "12:1.5 (no gradient in steps 13-29: no optimizer op read one there: a step skipped on overflow, or one that only accumulates, runs none)"
            ),
            "{skipped}"
        );
        let one = line(&report((1..30).map(norm).collect()));
        assert!(one.ends_with("29:1.5 (no gradient in step 0: no optimizer op read one there: a step skipped on overflow, or one that only accumulates, runs none)"), "{one}");
        let accumulated = line(&report((0..30).filter(|s| s % 4 == 3).map(norm).collect()));
        assert!(accumulated.ends_with("(no gradient in 23 of 30 steps, the first 0: no optimizer op read one there: a step skipped on overflow, or one that only accumulates, runs none)"), "{accumulated}");
        let every = line(&report((0..30).map(norm).collect()));
        assert!(every.ends_with(" ... 29:1.5"), "{every}");
    }

    /// The run's steps are not each rank's: a rank whose data of steps 13-29 is missing (no loss there
    /// either) was told 'a step skipped on overflow, or one that only accumulates'; a step it computed a loss
    /// in and updated nothing is still one that ran none.
    #[test]
    fn a_gradient_line_tells_a_rank_s_missing_steps_from_its_skipped_ones() {
        let norm =
            |step: u64| NormPoint { step, rank: 1, gradients: 4, nonfinite_gradients: 0, l2_norm: 1.5 };
        let loss = |step: u64| LossPoint { step, rank: 1, op: "loss".into(), value: Some(2.0) };
        // A loss in steps 0-12 and 20 only; a gradient in steps 0-11.
        let report =
            steps_0_to_29_of_rank(1, (0..13).chain([20]).map(loss).collect(), (0..12).map(norm).collect());
        let line = gradient_line(&report).unwrap();
        assert!(
            line.ends_with(
                "11:1.5 (no gradient in steps 12, 20: no optimizer op read one there: a step skipped on overflow, \
                 or one that only accumulates, runs none) (no gradient in steps 13-19, 21-29, and no loss either: \
                 this rank's data of those steps is missing, not a skipped step)"
            ),
            "{line}"
        );
    }
}
