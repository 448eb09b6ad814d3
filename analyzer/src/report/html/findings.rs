//! What `analyzer report`'s page shows: the engines' results, as they found them.

use crate::check::CheckReport;
use crate::compare::Comparison;
use crate::diff::DiffReport;
use crate::overflow::OverflowReport;
use crate::problems::InputProblems;
use crate::ranks::RanksReport;
use crate::series::RunSeries;
use crate::sources::Source;
use crate::watch::WatchReport;

/// Everything the page shows, as the engines found it.
pub struct Findings<'a> {
    pub target: &'a dyn Source,
    pub bench: Option<&'a dyn Source>,
    /// compare's result, when there is a benchmark.
    pub comparison: Option<&'a Comparison<'a>>,
    /// diff's result when the two runs are one configuration; `Err`: why it did not run.
    pub diff: Option<std::result::Result<DiffReport, String>>,
    /// overflow's result on the target.
    pub overflow: &'a OverflowReport,
    /// The cross-rank analysis (`analyzer ranks`), when the target has several ranks.
    pub ranks: Option<&'a RanksReport>,
    /// check's checklist (on the target, and the benchmark as its second run).
    pub check: Option<&'a CheckReport>,
    /// watch's training-health conditions over the target's steps.
    pub watch: Option<&'a WatchReport>,
    pub series: &'a RunSeries,
    pub bench_series: Option<&'a RunSeries>,
    /// What the inputs lack, what could not be read, and why an answer cannot be given: leads the page.
    pub problems: &'a InputProblems,
    /// `analyzer --version`'s line, and the command line that made the page.
    pub version: String,
    pub command_line: String,
}

impl Findings<'_> {
    /// Whether input problems keep every clean answer of overflow, ranks, check and watch open: any problem
    /// but compare's pairs without tensor data, which concern compare alone (the others answer from
    /// statistics, which such a capture has).
    pub fn open_beyond_compare(&self) -> bool {
        let unmeasured = self.comparison.and_then(|c| c.unmeasured_problem());
        self.problems.items().iter().any(|p| Some(p) != unmeasured.as_ref())
    }
}
