//! `analyzer ranks RUN --baseline GOOD` of two long captures read a window of the same steps of each at a
//! time (#18): the run's windows folded as without a baseline ([`RanksFold`]), the baseline's beside them
//! (what it is compared on: `baseline`'s module text).

use super::baseline::BaselineFold;
use super::fold::RanksFold;
use super::RanksReport;
use crate::comparable::{ConfigurationDifference, ConfigurationFold};
use crate::filter::Filter;
use crate::problems::ProblemKind;
use crate::sources::capture::windows::StepWindows;
use crate::sources::Source;

/// What [`ranks_by_windows_against`] found.
pub enum Against {
    /// The report on the run against its baseline.
    Report(Box<RanksReport>),
    /// How the runs are not one configuration: the baseline is refused, and the run's report (`ranks` of the
    /// run alone) says why.
    NotOneConfiguration(Vec<ConfigurationDifference>),
}

/// `analyze` of the run and its baseline, two long captures read a window of the same steps of each at a
/// time (`runs`: windows made one list by `StepWindows::align`), the run named `names[0]` and the baseline
/// `names[1]`: the same report, or the differences the baseline is refused for. `None` when they must be
/// read whole: a window cannot place its calls.
pub fn ranks_by_windows_against(
    names: [&str; 2],
    runs: [&StepWindows; 2],
    filter: &Filter,
) -> anyhow::Result<Option<Against>> {
    let mut configuration = ConfigurationFold::default();
    let (mut fold, mut baseline) = (RanksFold::default(), BaselineFold::default());
    for w in 0..runs[0].windows().len() {
        // Indexing one run does not depend on the other: both at once.
        let (a, b) = rayon::join(|| runs[0].open(w), || runs[1].open(w));
        let (a, b) = (a?, b?);
        configuration.add(a.index(), b.index(), filter);
        if !fold.add_against(&a, filter, Some((&b, &mut baseline))) {
            return Ok(None);
        }
    }
    let [run, good] = runs.map(|r| r.whole_run());
    let lost = baseline.lost_records()
        || [&run, &good]
            .iter()
            .flat_map(|w| w.leading.iter().chain(&w.shortfalls))
            .any(|p| p.kind == ProblemKind::Incomplete);
    let differences = configuration.finish(lost);
    if !differences.is_empty() {
        return Ok(Some(Against::NotOneConfiguration(differences)));
    }
    let found =
        fold.finish_against(names[0], filter, run.leading, run.shortfalls, Some((names[1], baseline, &good)));
    Ok(Some(Against::Report(Box::new(found))))
}
