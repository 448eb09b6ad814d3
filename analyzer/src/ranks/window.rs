//! What a fold of a capture's windows of steps (the run's, `fold`, or the baseline's, `baseline`) keeps of
//! each window's index beside its events, so that the events it ends with carry what the whole read's would:
//! the job's size, the communicators made, and the problems in the whole read's order.

use super::events::{self, Calls, RankEvents, RunEvents};
use crate::filter::Filter;
use crate::index::MadeCommunicator;
use crate::overflow::gather_stats;
use crate::problems::{InputProblem, InputProblems};
use crate::sources::capture::runs::streams_of_different_runs;
use crate::sources::Source;
use std::collections::BTreeMap;

/// The facts of the windows read so far (each window's index says them of the whole run but its problems).
#[derive(Default)]
pub(crate) struct WindowFacts {
    index_problems: Vec<InputProblem>,
    unreadable: InputProblems,
    unknown: usize,
    job_ranks: Option<u32>,
    communicators_made: BTreeMap<u32, Vec<MadeCommunicator>>,
    streams_of_different_runs: bool,
}

impl WindowFacts {
    /// The events of the window `source` (its ops that `filter` keeps, and every call), its index's facts
    /// kept; `None` when the run must be read whole (a window cannot place its calls). Its problems stay in
    /// the events, for [`WindowFacts::keep_problems`] once they were looked at.
    pub(crate) fn events(&mut self, source: &dyn Source, filter: &Filter) -> Option<RunEvents> {
        let index = source.index();
        let stats = gather_stats(source, &filter.op_ids(index), &mut self.unreadable, false);
        let (events, unknown) = events::from_index(index, filter, &stats);
        if !events.warnings.is_empty() {
            return None;
        }
        self.unknown += unknown;
        self.job_ranks = index.job_ranks;
        self.communicators_made = index.communicators_made.clone();
        self.streams_of_different_runs = streams_of_different_runs(&index.communicators_by_stream).is_some();
        Some(events)
    }

    /// Keeps a window's problems, after those of the windows before.
    pub(crate) fn keep_problems(&mut self, problems: Vec<InputProblem>) {
        self.index_problems.extend(problems);
    }

    /// The run of `ranks` (the events kept of every window) read with `filter`, with the problems its whole
    /// read would have: what the capture says about itself (`leading` and `shortfalls`, which no window's
    /// index holds) before and after the windows', then what the windows could not read, then ranks of
    /// different runs (`called`: what each rank's calls were on).
    pub(crate) fn finish<E>(
        self,
        ranks: Vec<RankEvents<E>>,
        filter: &Filter,
        [leading, shortfalls]: [Vec<InputProblem>; 2],
        called: Calls<E>,
    ) -> RunEvents<E> {
        let mut run = RunEvents {
            ranks,
            job_ranks: self.job_ranks,
            selection: filter.clone(),
            communicators_made: self.communicators_made,
            ..RunEvents::default()
        };
        run.problems = leading;
        run.problems.extend(self.index_problems);
        run.problems.extend(shortfalls);
        run.problems.extend(events::unknown_problem(self.unknown));
        run.problems.extend(self.unreadable.items().iter().cloned());
        run.problems.extend(events::mixed_ranks_called(&run, self.streams_of_different_runs, called));
        run
    }
}
