//! `analyzer check RUN [RUN2]`: the pre-tuning checklist.

use crate::cli::CheckArgs;
use accutrace_formats::capture::Manifest;
use analyzer::check::{self, CheckRun};
use analyzer::outcome::Outcome;
use analyzer::progress::Stages;
use analyzer::report::{self, Colour, Destination};
use analyzer::sources::{self, Detected};
use anyhow::{Context, Result};
use std::path::Path;

pub fn run(args: CheckArgs, colour: Colour) -> Result<Outcome> {
    let mut paths = vec![args.run.as_path()];
    paths.extend(args.run2.as_deref());
    let mut stages = Stages::new("check", 2, args.no_progress);
    stages.start(if paths.len() > 1 { "reading the runs" } else { "reading the run" });
    let sources: Vec<super::runs::OpenRun> =
        paths.iter().map(|p| super::runs::open_run(p)).collect::<Result<_>>()?;
    let filter = args.filter.to_filter();
    for (s, p) in sources.iter().zip(&paths) {
        filter.check(s.index(), p)?;
    }
    let manifests: Vec<Option<Manifest>> = paths.iter().map(|p| manifest(p)).collect::<Result<_>>()?;
    let runs: Vec<CheckRun<'_>> = sources
        .iter()
        .zip(manifests)
        .map(|(s, manifest)| CheckRun { source: s.as_ref(), manifest })
        .collect();
    stages.start("running the checklist");
    let found = check::check(&runs, &filter);
    let to = Destination { output: args.report.output.as_deref(), colour };
    report::reader_may_leave(report::check::write(&found, args.report.format.into(), &to))?;
    Ok(found.outcome().or_input_errors(&found.input_problems, args.input.allow_incomplete))
}

/// A capture's manifest (other sources have none); a capture whose manifest cannot be read is an error.
pub(crate) fn manifest(path: &Path) -> Result<Option<Manifest>> {
    match sources::detect(path)? {
        Detected::Capture(root) if root.join("manifest.json").is_file() => Manifest::read(&root)
            .map(Some)
            .with_context(|| format!("cannot read the manifest of {}", root.display())),
        _ => Ok(None),
    }
}
