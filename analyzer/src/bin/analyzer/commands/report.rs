//! `analyzer report TARGET [BENCH] -o report.html`: runs the engines the inputs can answer (compare and,
//! for one configuration, diff against the benchmark; overflow and the series over steps of each run; the
//! cross-rank analysis when the target has several ranks; check's checklist and watch's conditions) and
//! writes their results as one self-contained HTML page.

use crate::cli::ReportArgs;
use analyzer::check::{check, CheckRun};
use analyzer::comparable::configuration_differences;
use analyzer::compare::{compare, CompareOptions};
use analyzer::diff::{diff, DiffOptions};
use analyzer::matching::{read_mapping_file, MatchOptions};
use analyzer::metrics::Families;
use analyzer::outcome::Outcome;
use analyzer::overflow::overflow;
use analyzer::problems::{InputProblem, InputProblems, ProblemKind, LISTED, OF_THE_BASELINE};
use analyzer::progress::Stages;
use analyzer::ranks::{analyze, events::RunEvents};
use analyzer::report::html::{self, Findings};
use analyzer::report::human_bytes;
use analyzer::series::series;
use analyzer::sources;
use analyzer::watch::{self, WatchOptions};
use anyhow::{Context, Result};
use std::io::Write;

pub fn run(args: ReportArgs) -> Result<Outcome> {
    // Reading, overflow, check, watch, series and the page's three parts; with a benchmark, compare and
    // diff too.
    let total = if args.bench.is_some() { 10 } else { 8 };
    let mut stages = Stages::new("report", total, args.no_progress);
    stages.start("reading the runs");
    let target = super::runs::open_run(&args.target)?;
    let bench = args.bench.as_deref().map(super::runs::open_run).transpose()?;
    let filter = args.filter.to_filter();
    filter.check(target.index(), &args.target)?;
    if let (Some(bench), Some(path)) = (&bench, &args.bench) {
        filter.check(bench.index(), path)?;
    }
    let bench = bench.as_deref().map(|b| b.as_ref());
    // The cross-rank analysis needs several ranks among the selected ops (`--rank 3` selects one).
    let mut selected_ranks = target.index().ops.iter().filter(|o| filter.keeps(o)).map(|o| o.rank);
    let first_rank = selected_ranks.next();
    let several_ranks = selected_ranks.any(|r| Some(r) != first_rank);
    if several_ranks {
        stages.add(1);
    }

    let mut comparison = match bench {
        Some(bench) => {
            stages.start("comparing with the benchmark");
            let mut matching = MatchOptions { fuzzy: args.fuzzy, ..Default::default() };
            if let Some(path) = &args.mapping {
                matching.mapping = read_mapping_file(path)?;
            }
            let options = CompareOptions {
                filter: filter.clone(),
                matching,
                // The page judges and shows pairs by msprobe's metrics alone: msaccucmp's would be computed
                // for nothing.
                families: Some(Families::Msprobe),
                progress: !args.no_progress,
                ..Default::default()
            };
            Some(compare(target.as_ref(), bench, &options))
        }
        None => None,
    };
    // The same run given twice proves nothing: said first on the page (compare's warnings lead it).
    if let (Some(c), Some(b)) = (&mut comparison, bench) {
        if let Some(same) = sources::same_run(target.as_ref(), b) {
            c.warnings.insert(0, same);
        }
    }
    let diffed = bench.map(|bench| {
        stages.start("diffing, when the runs are one configuration");
        let differences = configuration_differences(target.index(), bench.index(), &filter);
        if let Some(first) = differences.first() {
            let aspects: Vec<&str> = differences.iter().map(|d| d.aspect).collect();
            return Err(format!(
                "the runs are not one configuration ({}; first: {}), so a bit-for-bit diff would only show the change",
                aspects.join(", "),
                first.first
            ));
        }
        let options = DiffOptions { filter: filter.clone(), progress: !args.no_progress };
        diff(target.as_ref(), bench, &options).map_err(|e| format!("{e:#}"))
    });
    stages.start("looking for overflows");
    let overflowed = overflow(target.as_ref(), &filter, !args.no_progress);
    // Several ranks: the first anomaly across them. A benchmark of the same configuration (diff ran) is
    // the known-good baseline of the same job.
    let across_ranks = several_ranks.then(|| {
        stages.start("analysing across ranks");
        let events = RunEvents::from_source(target.as_ref(), &filter);
        let baseline = match (bench, &diffed) {
            (Some(b), Some(Ok(_))) => {
                Some((b.root().display().to_string(), RunEvents::from_source(b, &filter)))
            }
            _ => None,
        };
        analyze(
            &target.root().display().to_string(),
            &events,
            baseline.as_ref().map(|(name, events)| (name.as_str(), events)),
        )
    });
    stages.start("running the checklist");
    // The benchmark is check's second run when it is a run of the same configuration (diff ran): two
    // runs of one job should agree on every item; against an fp32 benchmark its precision would fail.
    let mut check_paths = vec![args.target.as_path()];
    let mut check_sources = vec![target.as_ref()];
    if let (Some(b), Some(Ok(_)), Some(path)) = (bench, &diffed, &args.bench) {
        check_paths.push(path.as_path());
        check_sources.push(b);
    }
    let mut runs = Vec::new();
    for (source, path) in check_sources.into_iter().zip(check_paths) {
        runs.push(CheckRun { source, manifest: super::check::manifest(path)? });
    }
    let checked = check(&runs, &filter);
    stages.start("watching the training-health conditions");
    let conditions = watch::configure(None, &[], &[], &[])?;
    let watched = watch::watch(
        target.as_ref(),
        &WatchOptions { filter: filter.clone(), conditions, read_tensors: true, progress: !args.no_progress },
    );
    stages.start("reading the series over steps");
    // One run after the other: each reads as many tensors at once as the memory budget allows.
    let target_series = series(target.as_ref(), &filter, !args.no_progress);
    let bench_series = bench.map(|b| series(b, &filter, !args.no_progress));

    // What every engine found missing or unreadable, once each: the sources' own problems, then compare's
    // refusal, then the tensors compare, overflow and the series could not read.
    let mut problems = InputProblems::default();
    let mut add = |p: &InputProblem| {
        if !problems.items().contains(p) {
            problems.push(p.clone());
        }
    };
    // compare's refusal (another model, nothing matched) is among its problems, collected below.
    // Pairs without data on a side were not measured (compare's input problem), unless diff (one
    // configuration) answered them by content hash: a hash that differs is diff's finding.
    let answered_by_diff =
        comparison.as_ref().filter(|_| matches!(diffed, Some(Ok(_)))).and_then(|c| c.unmeasured_problem());
    let diffed_problems = diffed.as_ref().and_then(|d| d.as_ref().ok()).map(|d| &d.input_problems);
    let found = comparison
        .iter()
        .map(|c| &c.problems)
        .chain(diffed_problems)
        .chain([&overflowed.input_problems, &target_series.problems])
        .chain(across_ranks.iter().map(|r| &r.input_problems))
        .chain([&checked.input_problems, &watched.input_problems]);
    for p in found.chain(bench_series.iter().map(|s| &s.problems)).flat_map(|p| p.items()) {
        // The cross-rank analysis words the benchmark's problems as its baseline's: the benchmark's own
        // are already here.
        if answered_by_diff.as_ref() != Some(p) && !p.message.starts_with(OF_THE_BASELINE) {
            add(p);
        }
    }

    let findings = Findings {
        target: target.as_ref(),
        bench,
        comparison: comparison.as_ref(),
        diff: diffed,
        overflow: &overflowed,
        ranks: across_ranks.as_ref(),
        check: Some(&checked),
        watch: Some(&watched),
        series: &target_series,
        bench_series: bench_series.as_ref(),
        problems: &problems,
        version: crate::cli::version_line().to_string(),
        command_line: command_line(),
    };
    let mut page = Vec::new();
    let answers =
        html::write(&findings, &mut page, &mut |part| stages.start(&format!("writing the page: {part}")))?;
    std::fs::File::create(&args.output)
        .and_then(|mut f| f.write_all(&page))
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    // The answers as the page words them, for a terminal without a browser (a cluster's login node). A
    // reader that leaves early (`| head -1`) changes nothing: the page is written, the status says.
    let mut said =
        format!("report written to {} ({})\n", args.output.display(), human_bytes(page.len() as u64));
    // At most LISTED of what is missing, as every command's lead: the page lists more.
    let incomplete = problems.items().iter().filter(|p| p.kind == ProblemKind::Incomplete).count();
    for line in html::capped(answers, "INCOMPLETE INPUT", incomplete, LISTED) {
        said.push_str(&format!("  {line}\n"));
    }
    analyzer::report::reader_may_leave(
        std::io::stdout().lock().write_all(said.as_bytes()).map_err(Into::into),
    )?;

    let diff_findings = matches!(&findings.diff, Some(Ok(d)) if d.outcome() == Outcome::Findings);
    let compare_findings = comparison.as_ref().is_some_and(|c| c.outcome() == Outcome::Findings);
    let ranks_findings = across_ranks.as_ref().is_some_and(|r| r.outcome() == Outcome::Findings);
    let health_findings = checked.outcome() == Outcome::Findings || watched.outcome() == Outcome::Findings;
    let outcome = if compare_findings
        || diff_findings
        || ranks_findings
        || health_findings
        || overflowed.outcome() == Outcome::Findings
    {
        Outcome::Findings
    } else {
        Outcome::Pass
    };
    Ok(outcome.or_input_errors(&problems, args.input.allow_incomplete))
}

/// The command line as typed, for the page's header.
fn command_line() -> String {
    let args: Vec<String> = std::env::args().collect();
    let name = args.first().and_then(|a| a.rsplit('/').next()).unwrap_or("analyzer").to_string();
    std::iter::once(name).chain(args.into_iter().skip(1)).collect::<Vec<_>>().join(" ")
}
