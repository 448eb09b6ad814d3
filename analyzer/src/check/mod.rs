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
mod item;
mod loss_scale;
mod precision;
mod weights;

pub use item::{Item, Status};

use crate::filter::Filter;
use crate::outcome::Outcome;
use crate::problems::InputProblems;
use crate::roles::Roles;
use crate::sources::Source;
use accutrace_formats::capture::Manifest;
use item::Seen;
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
        .enumerate()
        .map(|(i, r)| Seen {
            source: r.source,
            manifest: r.manifest.as_ref(),
            ops: filter.op_ids(r.source.index()),
            roles: Roles::of(r.source.index()),
            label: if runs.len() == 1 { "the run".to_string() } else { format!("run {}", i + 1) },
            unreadable: Default::default(),
        })
        .collect();
    // The same run given twice: said first, and no determinism evidence from comparing it with itself.
    let same = match runs {
        [a, b] => crate::sources::same_run(a.source, b.source),
        _ => None,
    };
    let mut items = vec![
        determinism::item(&seen, same.is_some()),
        data::item(&seen),
        weights::item(&seen),
        precision::item(&seen),
        loss_scale::item(&seen),
        config::item(&seen),
    ];
    let sources: Vec<&dyn Source> = runs.iter().map(|r| r.source).collect();
    let mut input_problems = InputProblems::of_sources(&sources);
    for r in &seen {
        let mut unreadable = r.unreadable.take();
        unreadable.sort_by_key(|(t, _)| *t);
        unreadable.dedup_by_key(|(t, _)| *t);
        for (t, e) in unreadable {
            input_problems.push_unreadable(&format!("{}: {}", r.label, r.index().tensor_label(t)), &e);
        }
    }
    if !input_problems.is_empty() {
        for item in items.iter_mut().filter(|i| i.status == Status::Pass) {
            item.status = Status::CantTell;
            item.passed_on_what_was_read = true;
            item.reason = format!("{} (on what was read: the input is incomplete, see above)", item.reason);
        }
    }
    let mut warnings: Vec<String> = same.into_iter().collect();
    match &seen[..] {
        [one] => warnings.extend(one.index().warnings.iter().cloned()),
        all => warnings.extend(all.iter().flat_map(|r| r.index().warnings_of(&r.label))),
    }
    CheckReport {
        runs: runs.iter().map(|r| r.source.root().display().to_string()).collect(),
        input_problems,
        warnings,
        items,
    }
}
