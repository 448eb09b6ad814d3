//! The check engine (`analyzer check RUN [RUN2]`): the pre-tuning checklist. Each item comes out pass,
//! fail or can't tell, with the reason and where to look; with a second run, every item compares the two.
//!
//! | item | one run | two runs |
//! |---|---|---|
//! | determinism | the job's deterministic setting, HCCL_DETERMINISTIC with collectives, overflow mode | settings alike, and the first ops of a common step identical unless their inputs differ |
//! | data | ranks read different batches (sharding) | the same batches at the same steps: else a shuffle (same batches, other order) or other data |
//! | initial weights | alike on every rank | alike in both runs (each weight before its first update) |
//! | mixed precision | the dtype census by op type | op types whose dtype differs |
//! | loss scale | overflow-skipped steps, drops, a scale stuck at its floor | the same, for each run |
//! | configuration | the command line, hyperparameters, versions found | their differences, files named by content |
//!
//! What a capture's manifest records (command line, environment, versions, the job's runtime settings) is
//! read from it; other sources have none, and the items that need it say so.

mod config;
mod data;
mod determinism;
mod fold;
mod item;
mod loss_scale;
mod precision;
mod weights;

pub use item::{Item, Status};

use crate::filter::Filter;
use crate::outcome::Outcome;
use crate::problems::{InputProblem, InputProblems, ProblemKind};
use crate::progress::Progress;
use crate::sources::capture::windows::{StepWindows, WholeRun};
use crate::sources::Source;
use accutrace_formats::capture::Manifest;
use fold::Unread;
use item::{Facts, Seen};
use serde::Serialize;

/// A run to check: its source and, for a capture, its manifest.
pub struct CheckRun<'a> {
    pub source: &'a dyn Source,
    pub manifest: Option<Manifest>,
}

/// Everything `check` found.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    pub runs: Vec<String>,
    /// What the sources say is missing (the report leads with it; exit status 2). While there are any, no
    /// item says pass: what passed on the data read is `can't tell`.
    pub input_problems: InputProblems,
    /// What each source said about itself (inferred steps, skipped files), prefixed `run 1: ` / `run 2: `
    /// with two runs; printed after the input problems, the exit status unchanged.
    pub warnings: Vec<String>,
    pub items: Vec<Item>,
}

impl CheckReport {
    /// Findings when an item failed.
    pub fn outcome(&self) -> Outcome {
        if self.items.iter().any(|i| i.status == Status::Fail) {
            Outcome::Findings
        } else {
            Outcome::Pass
        }
    }
}

/// Runs the checklist on one run, or compares two.
pub fn check(runs: &[CheckRun<'_>], filter: &Filter) -> CheckReport {
    let seen: Vec<Seen<'_>> = runs
        .iter()
        .zip(labels(runs.len()))
        .map(|(r, label)| Seen::of(r.source, r.manifest.as_ref(), filter, label))
        .collect();
    // The same run given twice: said first, and no determinism evidence from comparing it with itself.
    let same = match runs {
        [a, b] => crate::sources::same_run(a.source, b.source),
        _ => None,
    };
    let facts: Vec<Facts<'_>> = seen.iter().map(Facts::of).collect();
    let divergence = match &seen[..] {
        [a, b] if same.is_none() => {
            let lost = determinism::lost(a.index()) || determinism::lost(b.index());
            determinism::first_divergence(a.index(), &a.ops, b.index(), &b.ops, lost)
        }
        _ => None,
    };
    let sources: Vec<&dyn Source> = runs.iter().map(|r| r.source).collect();
    let mut warnings: Vec<String> = same.iter().cloned().collect();
    match &seen[..] {
        [one] => warnings.extend(one.index().warnings.iter().cloned()),
        all => warnings.extend(all.iter().flat_map(|r| r.index().warnings_of(&r.label))),
    }
    let unread: Vec<Vec<Unread>> = seen.iter().map(fold::unread).collect();
    let problems = InputProblems::of_sources(&sources).items().to_vec();
    CheckReport {
        runs: runs.iter().map(|r| r.source.root().display().to_string()).collect(),
        ..judged(&facts, same.is_some(), divergence, problems, unread, warnings)
    }
}

/// Runs the checklist on long captures read a window of steps at a time: one, or two whose windows hold the
/// same steps ([`StepWindows::align`]), each with its manifest (#18: what it holds is a window's index per
/// run and what the items need of each step, which grows with steps, not tensors); the same report as
/// [`check`]'s on the captures read whole.
pub fn check_by_windows(
    runs: &[&StepWindows],
    manifests: &[Option<&Manifest>],
    filter: &Filter,
    progress: bool,
) -> anyhow::Result<CheckReport> {
    let labels = labels(runs.len());
    let mut facts: Vec<Facts<'_>> =
        labels.iter().zip(manifests).map(|(label, m)| Facts::new(label.clone(), *m)).collect();
    let wholes: Vec<WholeRun> = runs.iter().map(|r| r.whole_run()).collect();
    let mut problems: Vec<Vec<InputProblem>> = wholes.iter().map(|w| w.leading.clone()).collect();
    let mut warnings: Vec<Vec<String>> = runs.iter().map(|_| Vec::new()).collect();
    let mut unread: Vec<Vec<Unread>> = runs.iter().map(|_| Vec::new()).collect();
    let mut same = None;
    // Where the runs first differ, as the walk finds it with and without lost records: whether any were lost
    // is known once every window is read.
    let mut divergence: Option<[Option<determinism::Divergence>; 2]> = None;
    let count = runs[0].windows().len();
    let bar = Progress::counting("check", "windows", count as u64, !progress);
    for w in 0..count {
        // Indexing one run does not depend on the other: both at once.
        let sources = match runs {
            [a, b] => {
                let (a, b) = rayon::join(|| a.open(w), || b.open(w));
                vec![a?, b?]
            }
            _ => runs.iter().map(|r| r.open(w)).collect::<anyhow::Result<_>>()?,
        };
        if let ([a, b], 0) = (&sources[..], w) {
            same = crate::sources::same_run(a, b);
        }
        let seen: Vec<Seen<'_>> = sources
            .iter()
            .zip(&labels)
            .zip(manifests)
            .map(|((s, label), m)| Seen::of(s, *m, filter, label.clone()))
            .collect();
        for (i, r) in seen.iter().enumerate() {
            facts[i].add(r);
            problems[i].extend(r.index().problems.iter().cloned());
            warnings[i].extend(r.index().warnings.iter().cloned());
            unread[i].extend(fold::unread(r));
        }
        if let ([a, b], None, None) = (&seen[..], &same, &divergence) {
            let walk = |lost| determinism::first_divergence(a.index(), &a.ops, b.index(), &b.ops, lost);
            if let Some(found) = walk(false) {
                divergence = Some([Some(found), walk(true)]);
            }
        }
        bar.inc(1);
    }
    bar.finish();
    for (p, whole) in problems.iter_mut().zip(wholes) {
        p.extend(whole.shortfalls);
    }
    // The whole index orders tensors by rank, then step: windows come step by step, every rank in each.
    for u in &mut unread {
        u.sort_by_key(|u| u.0);
    }
    let lost = problems.iter().flatten().any(|p| p.kind == ProblemKind::Incomplete);
    let divergence = divergence.and_then(|[kept, lost_kept]| if lost { lost_kept } else { kept });
    let mut all_warnings: Vec<String> = same.iter().cloned().collect();
    match &warnings[..] {
        [one] => all_warnings.extend(one.iter().cloned()),
        all => all_warnings.extend(
            all.iter().zip(&labels).flat_map(|(w, label)| w.iter().map(move |w| format!("{label}: {w}"))),
        ),
    }
    Ok(CheckReport {
        runs: runs.iter().map(|r| r.root().display().to_string()).collect(),
        ..judged(&facts, same.is_some(), divergence, problems.concat(), unread, all_warnings)
    })
}

/// The runs' labels: `the run`, or `run 1` and `run 2`.
fn labels(runs: usize) -> Vec<String> {
    (0..runs).map(|i| if runs == 1 { "the run".to_string() } else { format!("run {}", i + 1) }).collect()
}

/// The report on runs whose facts are gathered: `problems`, what their sources found missing; `unread`, per
/// run, the tensors the items could not read.
fn judged(
    facts: &[Facts<'_>],
    same_run: bool,
    divergence: Option<determinism::Divergence>,
    problems: Vec<InputProblem>,
    unread: Vec<Vec<Unread>>,
    warnings: Vec<String>,
) -> CheckReport {
    let mut items = vec![
        determinism::item(facts, same_run, divergence),
        data::item(facts),
        weights::item(facts),
        precision::item(facts),
        loss_scale::item(facts),
        config::item(facts),
    ];
    let mut input_problems = InputProblems::default();
    for p in problems {
        input_problems.push(p);
    }
    for (r, unread) in facts.iter().zip(unread) {
        for (_, label, e) in unread {
            input_problems.push_unreadable(&format!("{}: {label}", r.label), &e);
        }
    }
    if !input_problems.is_empty() {
        for item in items.iter_mut().filter(|i| i.status == Status::Pass) {
            item.status = Status::CantTell;
            item.passed_on_what_was_read = true;
            item.reason = format!("{} (on what was read: the input is incomplete, see above)", item.reason);
        }
    }
    CheckReport { runs: Vec::new(), input_problems, warnings, items }
}
