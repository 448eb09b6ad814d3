//! The diff engine (`analyzer diff RUN1 RUN2`): is the run reproducible? Hashes first; only tensors whose
//! hashes differ are decoded, and a tensor that both runs recorded twice with the same stored bytes (an op's
//! output, then the next op's input) only once. Per step and rank, the first op whose output differs is
//! named, and classified: its inputs were identical (the op itself is nondeterministic) or already
//! different (it only propagates).
//!
//! The modules, one job each: `report` (what diff gives and takes), `measure` (one pair: hashes, then
//! values), `fold` (the pairs' figures folded as they come, and parts of the runs folded into the report),
//! `calls` (HCCL calls whose results differ), `values` and `waves` (the element-wise kernels).
//!
//! Two long captures are read a window of the same steps of each at a time ([`diff_by_windows`], #18):
//! what diff holds then is a window's two indexes and what differs, whatever the runs' length. Under
//! `--step`, only the selected steps' windows where the census tells how the calls before them pair
//! ([`select_steps`]).

use crate::comparable::{
    configuration_differences, not_one_configuration, not_one_configuration_at, ConfigurationFold,
};
use crate::problems::ProblemKind;
use crate::progress::Progress;
use crate::sources::capture::windows::{StepWindows, WholeRun};
use crate::sources::Source;
use anyhow::Result;
use fold::DiffFold;

mod calls;
mod comms;
mod fold;
mod measure;
mod report;
mod selection;
mod step_pairing;
mod values;
mod waves;
pub use crate::sources::capture::step_calls::{CallKey, CommPlace};
pub use calls::CallPairing;
pub use report::{CensusRow, DiffOptions, DiffReport, FirstDifference, Refusal, UnmatchedTensor};
pub use selection::select_steps;
pub use values::{compare_host_blocks, compare_host_bytes, compare_values, ulp_distance, TensorDiff};
pub use waves::compare_host_waves;

/// Refuses runs that are not one configuration ([`configuration_differences`]) with a [`Refusal`]; then
/// matches the two runs by name, compares every pair (hashes, then values where they differ), and names
/// the first differing op of each step and rank.
pub fn diff(run1: &dyn Source, run2: &dyn Source, options: &DiffOptions) -> Result<DiffReport> {
    let (i1, i2) = (run1.index(), run2.index());
    // Not one configuration: every difference would be the change, not nondeterminism. Refuse first.
    let differences = configuration_differences(i1, i2, &options.filter);
    if !differences.is_empty() {
        return Err(Refusal(not_one_configuration(run1, run2, &differences)).into());
    }
    let mut fold = DiffFold::default();
    fold.add(run1, run2, options, true);
    if fold.pairs == 0 {
        return Err(Refusal(no_tensor_matched([run1.root(), run2.root()])).into());
    }
    Ok(fold.finish([run1.root(), run2.root()], [WholeRun::default(), WholeRun::default()]))
}

/// [`diff`] of two captures read a window of the same steps of each at a time (windows made one list by
/// [`StepWindows::align`]): the same report, a refusal included (as its report, led by the REFUSED
/// problem). Once the runs are certainly not one configuration, the windows left are only indexed: what
/// differs is counted for the refusal, nothing is measured.
pub fn diff_by_windows(runs: [&StepWindows; 2], options: &DiffOptions) -> Result<DiffReport> {
    diff_by_windows_from(runs, options, CallPairing::default())
}

/// [`diff_by_windows`] of windows kept to a selection of steps ([`select_steps`]), the HCCL calls' pairing
/// starting from `calls`: where reading the windows before the selection would have left it.
pub fn diff_by_windows_from(
    runs: [&StepWindows; 2],
    options: &DiffOptions,
    calls: CallPairing,
) -> Result<DiffReport> {
    let count = runs[0].windows().len();
    let progress = Progress::counting("diff", "windows", count as u64, !options.progress);
    // A window's pairs are many and quick: the bar counts windows.
    let quiet = DiffOptions { progress: false, ..options.clone() };
    let mut configuration = ConfigurationFold::default();
    let rings = [runs[0].ring_deleted(), runs[1].ring_deleted()];
    let comms = runs[0].communicators().zip(runs[1].communicators()).map(|(a, b)| [a, b]);
    let mut fold = DiffFold::starting_with(calls, rings, comms);
    for w in 0..count {
        // Indexing one run does not depend on the other: both at once.
        let (a, b) = rayon::join(|| runs[0].open(w), || runs[1].open(w));
        let (a, b) = (a?, b?);
        configuration.add(a.index(), b.index(), &options.filter);
        fold.add(&a, &b, &quiet, !configuration.certain());
        progress.inc(1);
    }
    progress.finish();
    let roots = [runs[0].root(), runs[1].root()];
    let whole = [runs[0].whole_run(), runs[1].whole_run()];
    let lost = whole
        .iter()
        .flat_map(|w| w.leading.iter().chain(&w.shortfalls))
        .chain(fold.index_problems())
        .any(|p| p.kind == ProblemKind::Incomplete);
    let differences = configuration.finish(lost);
    if !differences.is_empty() {
        let refusal = Refusal(not_one_configuration_at(roots[0], roots[1], &differences));
        return Ok(fold.refused(roots, whole, refusal));
    }
    if fold.pairs == 0 {
        return Ok(fold.refused(roots, whole, Refusal(no_tensor_matched(roots))));
    }
    Ok(fold.finish(roots, whole))
}

/// The refusal of runs that share no tensor.
fn no_tensor_matched(runs: [&std::path::Path; 2]) -> String {
    format!(
        "no tensor of {} matched one of {}: the runs share no op names (check --step/--rank/--op)",
        runs[0].display(),
        runs[1].display()
    )
}
