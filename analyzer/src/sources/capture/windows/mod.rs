//! A long capture read a window of steps at a time (#18): each window is an index of its own, so that what a
//! command holds does not grow with the run's length. A census walks the records once, tensor records
//! undecoded, and keeps per stream and step only where the step's records lie and when its ops ran; each
//! window then decodes its own steps' records, from the first op record of them to their last record.
//!
//! Only a capture whose every op carries its own step is read this way: a graph dump's iteration
//! (`StepSource::Model`), or an eager capture's per-step dump path once the framework's hook was called
//! (`StepSource::Hook`; the ops before its first call are step 0). Steps that are counted from a marker op's
//! runs or inferred from the op sequence need the whole stream.
//! The device's statistics CSVs (`--mode device-stats`) carry their step and launch, as op records do.
//! Overflow records tie records of different steps together and keep the capture whole, as do two streams
//! of one rank, and point-to-point calls (a pipeline's sends and receives) but in the census that keeps
//! calls ([`StepWindows::census_with_calls`], `diff`'s): it places each receive at the step the whole read
//! gives it and holds together in one window the steps a receive ties (`receives`). A collective belongs to
//! the step of the op before it on its rank
//! ([`Index::collective_steps`](crate::index::Index::collective_steps)); the census checks that a rank's
//! steps do not overlap in time, so that the op before it is found within its step's window.
//!
//! A command whose answer depends on the selected steps alone (`--step`) reads only their windows
//! ([`StepWindows::select_steps`]); the census still walks every step, for the selection's check and the
//! capture's shortfalls.

mod census;
mod receives;

pub use census::TensorHeads;

use super::open::{communicators_by_stream, finish_index, segments_deleted};
use super::step_calls::{CommUse, StepCalls};
use super::walk::{Building, StreamWalk};
use super::{runs, CaptureSource};
use crate::index::RingDeleted;
use crate::problems::InputProblem;
use accutrace_formats::capture::completeness::{self, RecordTally};
use accutrace_formats::capture::reader::{CaptureRun, Record};
use anyhow::{Context, Result};
use census::{census_of_stream, StreamSteps};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Tensors a window holds at most, unless one step alone holds more: about 14 MiB of index.
pub const WINDOW_TENSORS: u64 = 1 << 17;

/// What a run read in parts (windows of steps) says about itself as a whole, which no part's index holds.
#[derive(Default)]
pub struct WholeRun {
    /// Problems that lead every other (a mix of runs).
    pub leading: Vec<InputProblem>,
    /// Problems of the whole run, after those its parts found (what it misses against its own counts).
    pub shortfalls: Vec<InputProblem>,
    /// What the data covers when a ring policy deleted its oldest steps ([`Index::ring_scope`]).
    ///
    /// [`Index::ring_scope`]: crate::index::Index::ring_scope
    pub scope: Vec<String>,
}

/// A capture told apart into windows of steps.
pub struct StepWindows {
    root: PathBuf,
    run: Arc<CaptureRun>,
    streams: Vec<StreamSteps>,
    windows: Vec<RangeInclusive<u64>>,
    /// The windows' most tensors, as the census or [`StepWindows::align`] was given it.
    window_tensors: u64,
    /// The steps the windows are made of, when a selection keeps to some ([`StepWindows::select_steps`]).
    selected: Option<BTreeSet<u64>>,
    mixed_runs: Option<InputProblem>,
    shortfalls: Vec<InputProblem>,
    ring_deleted: Vec<RingDeleted>,
    heads: Option<TensorHeads>,
}

impl StepWindows {
    /// The census of the capture at `root`: its windows of at most `window_tensors` tensors (a step more
    /// when one step alone holds more), or `None` when it must be read whole (see the module's text).
    /// It keeps no step's calls ([`StepWindows::calls_by_step`] answers `None`).
    pub fn census(root: &Path, window_tensors: u64) -> Result<Option<StepWindows>> {
        Self::census_of(root, window_tensors, false, false)
    }

    /// [`StepWindows::census`] of a benchmark `compare` reads, noting what it asks of every tensor
    /// ([`StepWindows::tensor_heads`]).
    pub fn census_of_bench(root: &Path, window_tensors: u64) -> Result<Option<StepWindows>> {
        Self::census_of(root, window_tensors, false, true)
    }

    /// [`StepWindows::census`], keeping each step's HCCL calls for a command that pairs two runs' calls
    /// in order (`diff`): a few words a call, held to the end, so only the command that reads them pays.
    pub fn census_with_calls(root: &Path, window_tensors: u64) -> Result<Option<StepWindows>> {
        Self::census_of(root, window_tensors, true, false)
    }

    fn census_of(
        root: &Path,
        window_tensors: u64,
        keep_calls: bool,
        heads: bool,
    ) -> Result<Option<StepWindows>> {
        let run =
            CaptureRun::open(root).with_context(|| format!("cannot open capture {}", root.display()))?;
        if let Some(manifest) = &run.manifest {
            // A capture that fits one window, as its collector counted it, is read whole without a census. A
            // statistics CSV record holds at most ten tensors' rows (the runtime's parts).
            let tensors: u64 =
                manifest.streams.iter().map(|s| s.counts.tensors + 10 * s.counts.stats_csv_records).sum();
            if tensors <= window_tensors || super::open::captured_overflow_records_only(&manifest.config) {
                return Ok(None);
            }
        }
        let mut tallies = vec![RecordTally::default(); run.streams.len()];
        let mut streams = Vec::with_capacity(run.streams.len());
        let mut ranks = BTreeSet::new();
        let mut heads = heads.then(TensorHeads::default);
        for (s, stream) in run.streams.iter().enumerate() {
            if !ranks.insert(stream.info().rank.unwrap_or(0)) {
                return Ok(None);
            }
            let Some(steps) = census_of_stream(stream, &mut tallies[s], keep_calls, &mut heads)? else {
                return Ok(None);
            };
            streams.push(steps);
        }
        if streams.iter().all(|s| s.steps.is_empty()) || !receives::place_calls(&mut streams) {
            return Ok(None);
        }
        let ring_deleted = run
            .streams
            .iter()
            .zip(&streams)
            .filter_map(|(stream, steps)| {
                let segments_deleted = segments_deleted(&run, stream).filter(|&n| n > 0)?;
                Some(RingDeleted {
                    rank: stream.info().rank.unwrap_or(0),
                    first_step: steps.steps.keys().next().copied(),
                    last_step: steps.steps.keys().next_back().copied(),
                    segments_deleted,
                })
            })
            .collect();
        let communicators =
            run.manifest.as_ref().map(|m| communicators_by_stream(&run, &m.config)).unwrap_or_default();
        let shortfalls = completeness::check(&run, &tallies)
            .iter()
            .map(|short| InputProblem::incomplete(short.to_string()))
            .collect();
        let windows = windows_of(&streams, window_tensors, None);
        if windows.len() < 2 {
            return Ok(None);
        }
        Ok(Some(StepWindows {
            root: root.to_path_buf(),
            run: Arc::new(run),
            streams,
            windows,
            window_tensors,
            selected: None,
            mixed_runs: runs::different_runs_problem(root, &communicators),
            shortfalls,
            ring_deleted,
            heads,
        }))
    }

    /// What the census of a benchmark noted of every tensor ([`StepWindows::census_of_bench`]); `None`
    /// where it was not asked to, or a record's head could not be read so.
    pub fn tensor_heads(&self) -> Option<&TensorHeads> {
        self.heads.as_ref()
    }

    /// The windows' steps, in order (those of a selection only, once [`StepWindows::select_steps`] kept to
    /// one).
    pub fn windows(&self) -> &[RangeInclusive<u64>] {
        &self.windows
    }

    /// Keeps the windows to the steps in `steps` (all of them when empty), for a command whose answer
    /// depends on the selected steps alone: windows made of those steps only, none holding a step it left
    /// out, so that `--step 250` of a long capture reads one small window. What the census found of the
    /// whole capture ([`StepWindows::places`], the shortfalls, the ring's deletions) stays whole. `false`,
    /// changing nothing, where a rank's HCCL calls belong to no step (a stream without ops): the first
    /// window takes them, and every window is read; and where it would part steps that one window must
    /// hold (a pipeline's receives among them, `receives`).
    pub fn select_steps(&mut self, steps: &[u64]) -> bool {
        if steps.is_empty() || self.streams.iter().any(|s| s.steps.is_empty() && !s.calls.is_empty()) {
            return false;
        }
        let selected: BTreeSet<u64> = steps.iter().copied().collect();
        if self.streams.iter().any(|s| splits_a_tie(s, &selected)) {
            return false;
        }
        self.windows = windows_of(&self.streams, self.window_tensors, Some(&selected));
        self.selected = Some(selected);
        true
    }

    /// Whether the windows keep to a selection of steps ([`StepWindows::select_steps`]).
    pub fn is_selection(&self) -> bool {
        self.selected.is_some()
    }

    /// Undoes [`StepWindows::select_steps`]: the windows of every step again, as the census made them (two
    /// runs are then aligned again), for a command that found it needs what the other steps say.
    pub fn every_step(&mut self) {
        self.windows = windows_of(&self.streams, self.window_tensors, None);
        self.selected = None;
    }

    /// The windows' most tensors, as the census or [`StepWindows::align`] was given it.
    pub fn window_tensors(&self) -> u64 {
        self.window_tensors
    }

    /// Whether every rank whose ops the capture holds has some at one of `steps`: then the windows of those
    /// steps hold every rank, as a command that counts the run's ranks (`ranks`, `check`) needs.
    pub fn every_rank_at(&self, steps: &[u64]) -> bool {
        self.streams
            .iter()
            .filter(|s| !s.steps.is_empty())
            .all(|s| steps.iter().any(|step| s.steps.contains_key(step)))
    }

    /// Each rank's HCCL calls, step by step, as the census found them: what `diff`, which pairs two runs'
    /// calls in their order, needs of the steps a selection leaves unread. `None` where the census could
    /// not place some rank's calls in steps, or kept none ([`StepWindows::census`]).
    pub fn calls_by_step(&self) -> Option<BTreeMap<u32, &BTreeMap<u64, StepCalls>>> {
        let ranks = self.run.streams.iter().map(|stream| stream.info().rank.unwrap_or(0));
        // The census reads a capture by windows only where each rank has one stream.
        ranks.zip(&self.streams).map(|(rank, s)| Some((rank, s.step_calls.as_ref()?))).collect()
    }

    /// Each rank's communicators ([`CommUse`]) over the whole capture, which tell which ranks each one has
    /// (a window may hold some members' calls only); `None` where the census kept no calls
    /// ([`StepWindows::census`]).
    pub fn communicators(&self) -> Option<Vec<CommUse>> {
        let ranks = self.run.streams.iter().map(|stream| stream.info().rank.unwrap_or(0));
        let mut uses = Vec::new();
        for (rank, s) in ranks.zip(&self.streams) {
            uses.extend(s.comms.as_ref()?.iter().map(|&comm| CommUse { rank, comm }));
        }
        uses.sort_unstable();
        uses.dedup();
        Some(uses)
    }

    /// Each rank's first step: what the windows of a selection's later steps cannot tell.
    pub fn first_steps(&self) -> BTreeMap<u32, u64> {
        let ranks = self.run.streams.iter().map(|stream| stream.info().rank.unwrap_or(0));
        let firsts = ranks.zip(&self.streams).filter_map(|(rank, s)| Some((rank, *s.steps.keys().next()?)));
        let mut first_steps = BTreeMap::new();
        for (rank, step) in firsts {
            let first = first_steps.entry(rank).or_insert(step);
            *first = (*first).min(step);
        }
        first_steps
    }

    /// The capture's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A problem of the whole capture that leads every other: its streams are of different runs.
    pub fn mixed_runs(&self) -> Option<&InputProblem> {
        self.mixed_runs.as_ref()
    }

    /// What the capture misses against the collector's own counts (the whole capture's, said once).
    pub fn shortfalls(&self) -> &[InputProblem] {
        &self.shortfalls
    }

    /// The (rank, step) places the capture's ops are at: what a selection of steps and ranks is checked
    /// against ([`Filter::check_places`](crate::filter::Filter::check_places)).
    pub fn places(&self) -> BTreeSet<(u32, u64)> {
        let ranks = self.run.streams.iter().map(|stream| stream.info().rank.unwrap_or(0));
        ranks
            .zip(&self.streams)
            .flat_map(|(rank, steps)| steps.steps.keys().map(move |&step| (rank, step)))
            .collect()
    }

    /// What the ring policy deleted, per stream, over the whole capture.
    pub fn ring_deleted(&self) -> &[RingDeleted] {
        &self.ring_deleted
    }

    /// What the capture says about itself as a whole: a mix of runs, its shortfalls, the ring's scope.
    pub fn whole_run(&self) -> WholeRun {
        WholeRun {
            leading: self.mixed_runs.iter().cloned().collect(),
            shortfalls: self.shortfalls.clone(),
            scope: crate::index::ring_scope_of(&self.ring_deleted),
        }
    }

    /// The windows of two captures of the same steps (the runs `diff` reads together) made one list for
    /// both, so that their `w`-th windows hold the same steps: consecutive steps grouped while the tensors
    /// of both runs stay within `window_tensors`, of the steps either selected where both kept to a
    /// selection ([`StepWindows::select_steps`]). `false`, changing nothing, when that is fewer than two
    /// windows and no selection, or where one run's receive without its send is read at a step the other
    /// run lacks on its rank (`diff` pairs it at a later step then): read both whole.
    pub fn align(a: &mut StepWindows, b: &mut StepWindows, window_tensors: u64) -> bool {
        if !a.receives_held_by(b) || !b.receives_held_by(a) {
            return false;
        }
        let selected = match (&a.selected, &b.selected) {
            (Some(x), Some(y)) => Some(x | y),
            _ => None,
        };
        let windows = windows_of(a.streams.iter().chain(&b.streams), window_tensors, selected.as_ref());
        if windows.len() < 2 && selected.is_none() {
            return false;
        }
        for run in [a, b] {
            run.windows = windows.clone();
            run.window_tensors = window_tensors;
            run.selected = selected.clone();
        }
        true
    }

    /// Whether `other` holds, on each rank, the steps this run reads its receives without their sends at
    /// ([`StreamSteps::received_for`](census::StreamSteps::received_for)).
    fn receives_held_by(&self, other: &StepWindows) -> bool {
        let ranks = self.run.streams.iter().map(|stream| stream.info().rank.unwrap_or(0));
        let read_at: Vec<(u32, u64)> = ranks
            .zip(&self.streams)
            .flat_map(|(rank, s)| s.received_for.iter().map(move |&step| (rank, step)))
            .collect();
        if read_at.is_empty() {
            return true;
        }
        let held = other.places();
        read_at.iter().all(|place| held.contains(place))
    }

    /// The index of the `w`-th window's steps: its ops, tensors and collectives, and nothing about the
    /// capture as a whole (its shortfalls, the ring's deletions, a mix of runs: the census says those).
    pub fn open(&self, w: usize) -> Result<CaptureSource> {
        self.open_steps(&self.windows[w], w == 0)
    }

    /// The windows of the steps a selection left out ([`StepWindows::select_steps`]; none without one), for
    /// what only those steps' indexes tell (compare: the names the benchmark fuses in any step).
    pub fn unselected_windows(&self) -> Vec<RangeInclusive<u64>> {
        let Some(selected) = &self.selected else { return Vec::new() };
        let steps = self.streams.iter().flat_map(|s| s.steps.keys().copied());
        let rest: BTreeSet<u64> = steps.filter(|step| !selected.contains(step)).collect();
        windows_of(&self.streams, self.window_tensors, Some(&rest))
    }

    /// The index of the run's records of `window`'s steps, as [`StepWindows::open`] makes a window's (of
    /// [`StepWindows::unselected_windows`] too). The calls of a rank without ops belong to no step: the
    /// window opened with `loose_calls` (the first) takes them.
    pub fn open_steps(&self, window: &RangeInclusive<u64>, loose_calls: bool) -> Result<CaptureSource> {
        let mut building = Building::default();
        for (s, (stream, steps)) in self.run.streams.iter().zip(&self.streams).enumerate() {
            let spans = steps.steps.range(window.clone()).map(|(_, span)| span);
            let first = spans.clone().map(|span| span.first).min();
            let last = spans.map(|span| span.last).max();
            // Calls of a rank without ops belong to no step: the first window takes them.
            let calls = || steps.calls.iter().map(|(&(segment, _), c)| ((segment, c.from), (segment, c.to)));
            let (first, last) = match (first, last) {
                (Some(a), Some(b)) => (a, b),
                _ if loose_calls && steps.steps.is_empty() && !steps.calls.is_empty() => (
                    calls().map(|c| c.0).min().unwrap_or_default(),
                    calls().map(|c| c.1).max().unwrap_or_default(),
                ),
                _ => continue,
            };
            let position = |index: u64| steps.segment_indices.binary_search(&index).unwrap_or(0);
            let mut walk = StreamWalk::new(s, stream);
            for item in stream.records_from(first.0, first.1) {
                let item = item?;
                let place = (position(item.segment_index), item.offset);
                if place > last {
                    break;
                }
                let step = match &item.record {
                    Record::Op(op) => Some(op.step),
                    Record::Tensor(t) => Some(t.op.step),
                    Record::StatsCsv(csv) => Some(csv.step),
                    Record::Collective(call) => match steps.step_read_at(place, call.start_us) {
                        Some(step) => Some(step),
                        None if loose_calls => Some(*window.start()),
                        None => None,
                    },
                    _ => None,
                };
                if step.is_some_and(|step| window.contains(&step)) {
                    walk.add(&mut building, item, &self.root)?;
                }
            }
            if let Some(mark) = &steps.hook_mark {
                walk.note_mark(mark.clone());
            }
            walk.finish(&mut building, stream, None);
        }
        let Building { index, layouts } = building;
        Ok(finish_index(&self.root, self.run.clone(), index, layouts))
    }
}

/// Consecutive steps grouped while their tensors, over every stream, stay within `window_tensors` (or
/// while the steps a stream ties together last: [`StreamSteps::ties`]); with a selection, the steps it
/// holds, a window ending where a step it leaves out comes between (a window's walk reads every record
/// from its first step's to its last step's).
fn windows_of<'a>(
    streams: impl IntoIterator<Item = &'a StreamSteps>,
    window_tensors: u64,
    selected: Option<&BTreeSet<u64>>,
) -> Vec<RangeInclusive<u64>> {
    let mut tensors_of: BTreeMap<u64, u64> = BTreeMap::new();
    let mut ties = Vec::new();
    for stream in streams {
        for (&step, span) in &stream.steps {
            *tensors_of.entry(step).or_default() += span.tensors;
        }
        ties.extend(stream.ties.iter().copied());
    }
    // The steps that join the window before them, whatever it holds.
    let joined: BTreeSet<u64> = ties
        .iter()
        .filter(|&&(from, to)| from < to)
        .flat_map(|&(from, to)| tensors_of.range(from + 1..=to))
        .map(|(&step, _)| step)
        .collect();
    let mut windows: Vec<RangeInclusive<u64>> = Vec::new();
    let mut held = 0;
    // Whether the last window may take the next step: not across a step the selection leaves out.
    let mut open = false;
    for (&step, &tensors) in &tensors_of {
        if selected.is_some_and(|s| !s.contains(&step)) {
            open = false;
            continue;
        }
        match windows.last_mut() {
            Some(window) if open && (held + tensors <= window_tensors || joined.contains(&step)) => {
                *window = *window.start()..=step;
                held += tensors;
            }
            _ => {
                windows.push(step..=step);
                held = tensors;
            }
        }
        open = true;
    }
    windows
}

/// Whether `selected` holds some of the steps `stream` ties together, but not all that it captured.
fn splits_a_tie(stream: &StreamSteps, selected: &BTreeSet<u64>) -> bool {
    stream.ties.iter().any(|&(from, to)| {
        let mut captured = stream.steps.range(from..=to).map(|(step, _)| selected.contains(step));
        let first = captured.next();
        captured.any(|kept| Some(kept) != first)
    })
}

#[cfg(test)]
mod tests {
    use super::census::Span;
    use super::*;
    use crate::index::Io;
    use crate::sources::Source;
    use accutrace_formats::capture::record::StepSource;
    use accutrace_formats::capture::{OpInfo, OriginalOp, Policy, StreamInfo, StreamWriter, TensorMeta};
    use accutrace_formats::stats::TensorStats;
    use accutrace_formats::DType;

    /// A tensor: input or output, and the op it stands for.
    type Tensor<'a> = (Io, Option<&'a str>);

    /// An op: its step, its name and its tensors.
    type Op<'a> = (u64, &'a str, &'a [Tensor<'a>]);

    /// A capture of rank 0 holding `ops`.
    fn capture(dir: &Path, ops: &[Op<'_>]) {
        let info = StreamInfo { stream_id: 0, rank: Some(0), device: 0, pid: 1000, host: "test".into() };
        let mut w = StreamWriter::create(dir, info, 1 << 20, Policy::KeepAll).unwrap();
        for (k, &(step, name, tensors)) in ops.iter().enumerate() {
            let op = OpInfo {
                name: name.into(),
                op_type: "T".into(),
                step,
                timestamp_us: 1_000 + k as u64,
                step_source: StepSource::Model,
                ..OpInfo::default()
            };
            w.append_op(&op).unwrap();
            for (i, &(io, stands_for)) in tensors.iter().enumerate() {
                let meta = TensorMeta {
                    io,
                    index: i as u32,
                    dtype: DType::FLOAT,
                    format: 2,
                    sub_format: 0,
                    device_shape: vec![1],
                    original_shape: None,
                    original_op: stands_for.map(|n| OriginalOp { name: n.into(), output_index: 0 }),
                };
                let stats = TensorStats::of_bytes(DType::FLOAT, &[0; 4]).unwrap();
                w.append_tensor(&meta, &stats, 1, None, 1).unwrap();
            }
        }
        w.seal().unwrap();
    }

    /// A benchmark's census notes what its whole index says of every tensor: whether one is an input, and
    /// the names ops' outputs stand for but their own (not an input's: the index takes outputs').
    #[test]
    fn a_benchmarks_census_notes_what_its_whole_index_says() {
        let out = |stands_for| (Io::Output, stands_for);
        for inputs in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let last: &[Tensor<'_>] = match inputs {
                true => &[(Io::Input, Some("c")), (Io::Output, None)],
                false => &[(Io::Output, Some("d"))],
            };
            let ops: [Op<'_>; 4] = [
                (0, "a", &[out(Some("a"))]),
                (1, "ab", &[out(Some("b")), out(Some("ab"))]),
                (2, "a", &[out(None)]),
                (2, "d", last),
            ];
            capture(dir.path(), &ops);
            let census = StepWindows::census_of_bench(dir.path(), 1).unwrap().expect("read by windows");
            let heads = census.tensor_heads().expect("noted");
            let index = crate::sources::capture::CaptureSource::open(dir.path()).unwrap();
            let index = index.index();
            let fused: BTreeSet<&str> = index
                .ops
                .iter()
                .flat_map(|op| op.original_names(index).into_iter().filter(|&n| n != op.name.as_str()))
                .collect();
            let noted: BTreeSet<&str> = heads.fused.iter().map(|n| &**n).collect();
            assert_eq!(fused, ["b"].into());
            assert_eq!(noted, fused);
            assert_eq!(index.tensors.iter().any(|t| t.io == Io::Input), inputs);
            assert_eq!(heads.inputs, inputs);
            // Not asked, the census notes nothing.
            assert!(StepWindows::census(dir.path(), 1).unwrap().unwrap().tensor_heads().is_none());
        }
    }

    /// A stream holding `tensors` tensors at each of `steps`.
    fn stream(steps: impl IntoIterator<Item = u64>, tensors: u64) -> StreamSteps {
        let steps =
            steps.into_iter().map(|step| (step, Span { tensors, ..Span::at((0, step), step) })).collect();
        StreamSteps { steps, ..StreamSteps::default() }
    }

    /// A selection's windows hold its steps and no other captured step, however many tensors would fit; the
    /// windows of every step are packed as before.
    #[test]
    fn a_selections_windows_hold_only_its_steps() {
        let streams = [stream(0..10, 5), stream(0..10, 5)];
        let selected: BTreeSet<u64> = [2, 3, 5, 9, 12].into();
        assert_eq!(windows_of(&streams, 100, Some(&selected)), [2..=3, 5..=5, 9..=9]);
        assert_eq!(windows_of(&streams, 10, Some(&selected)), [2..=2, 3..=3, 5..=5, 9..=9]);
        assert_eq!(windows_of(&streams, 100, None), [0..=9]);
        assert_eq!(windows_of(&streams, 40, None), [0..=3, 4..=7, 8..=9]);
        // Steps the capture lacks between two selected ones end no window: it reads nothing more.
        let gappy = [stream([0, 1, 4, 6], 5)];
        assert_eq!(windows_of(&gappy, 100, Some(&[1, 4].into())), [1..=4]);
        assert!(windows_of(&gappy, 100, Some(&[2].into())).is_empty());
    }

    /// Steps a stream ties (a pipeline's receives among them) share one window however many tensors they
    /// hold; a selection that holds some of them but not all would part them.
    #[test]
    fn tied_steps_share_a_window() {
        let mut tied = stream(0..6, 5);
        tied.ties = vec![(1, 3)];
        let streams = std::slice::from_ref(&tied);
        assert_eq!(windows_of(streams, 5, None), [0..=0, 1..=3, 4..=4, 5..=5]);
        assert_eq!(windows_of(streams, 10, None), [0..=3, 4..=5]);
        assert!(splits_a_tie(&tied, &[2].into()));
        assert!(splits_a_tie(&tied, &[0, 1].into()));
        assert!(!splits_a_tie(&tied, &[1, 2, 3].into()));
        assert!(!splits_a_tie(&tied, &[0, 4, 5].into()));
    }
}
