//! The census's walk of one stream: where each step's records lie and when its ops ran, read once with
//! tensor records passed over undecoded ([`census_of_stream`]), and what `compare` notes of their heads.

use crate::index::Io;
use crate::sources::capture::step_calls::{CallKey, CommPlace, StepCalls, StreamCalls};
use accutrace_formats::capture::completeness::RecordTally;
use accutrace_formats::capture::reader::{Record, StreamReader, TensorHead};
use accutrace_formats::capture::record::{StepMark, StepSource, KIND_TENSOR};
use accutrace_formats::capture::{CollectiveInfo, CollectiveOp};
use accutrace_formats::dump::parse_file_name;
use accutrace_formats::dump::stats_csv::stats_csv_header_line;
use anyhow::Result;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// A record's place in a stream: its segment's position among the stream's segments (not the file's index)
/// and its byte offset there.
pub(super) type Place = (usize, u64);

/// Where one step's records lie in a stream, and when its ops ran.
#[derive(Clone, Copy, Debug)]
pub(super) struct Span {
    /// Where a walk of the step starts (an op record's place: the tensor records after it name it) and its
    /// last record.
    pub(super) first: Place,
    pub(super) last: Place,
    pub(super) tensors: u64,
    pub(super) first_launch_us: u64,
    pub(super) last_launch_us: u64,
}

impl Span {
    pub(super) fn at(first: Place, launch_us: u64) -> Span {
        Span { first, last: first, tensors: 0, first_launch_us: launch_us, last_launch_us: launch_us }
    }

    /// Widened to start at `first` at the latest and to end at `last` at the earliest.
    pub(super) fn widen(&mut self, first: Place, last: Place) {
        self.first = self.first.min(first);
        self.last = self.last.max(last);
    }

    fn ran_at(&mut self, launch_us: u64) {
        self.first_launch_us = self.first_launch_us.min(launch_us);
        self.last_launch_us = self.last_launch_us.max(launch_us);
    }
}

/// Collective records of one segment read after the op records of one step: the earliest and latest call
/// start, where a walk that reads them starts (the op record before the first, else the segment's start)
/// and the last one's offset. Grouped so, a window walks from near its own calls, not from the segment's
/// first call; and the census holds a group a step, not a call.
#[derive(Clone, Copy, Debug)]
pub(super) struct Calls {
    pub(super) earliest_us: u64,
    pub(super) latest_us: u64,
    pub(super) from: u64,
    pub(super) to: u64,
}

/// What ties a send to the receive it meets: their communicator (its name's hash), the sender's and the
/// receiver's places in it, and the sequence number.
pub(super) type Link = (u64, u32, u32, u64);

/// A send or receive with a peer, as the census read it.
#[derive(Debug)]
pub(super) struct PointToPoint {
    /// Its place among the stream's calls.
    pub(super) call: usize,
    pub(super) start_us: u64,
    pub(super) receive: bool,
    pub(super) link: Link,
    /// Its record's place, and where a walk that reads it starts (as [`Calls`]).
    pub(super) at: Place,
    pub(super) from: u64,
}

impl PointToPoint {
    /// The `call`-th call of its stream, read at `at`, if a send or receive with a peer.
    pub(super) fn of(info: &CollectiveInfo, call: usize, at: Place, from: u64) -> Option<PointToPoint> {
        let peer = info.peer?;
        let (comm, me) = (CallKey::of(info).comm.2, info.comm_rank);
        let (receive, link) = match info.op {
            CollectiveOp::Send => (false, (comm, me, peer, info.seq)),
            CollectiveOp::Recv => (true, (comm, peer, me, info.seq)),
            _ => return None,
        };
        Some(PointToPoint { call, start_us: info.start_us, receive, link, at, from })
    }
}

/// One stream's steps, as the census found them.
#[derive(Debug, Default)]
pub(super) struct StreamSteps {
    pub(super) steps: BTreeMap<u64, Span>,
    /// Each step's first launch, ascending with the steps (the census checks that they do not overlap).
    pub(super) starts: Vec<(u64, u64)>,
    /// Where the collective records are: per segment position and the step of the op record before them
    /// (the step they are read in, not always the one they belong to).
    pub(super) calls: BTreeMap<(usize, Option<u64>), Calls>,
    /// The file index of each segment, by position.
    pub(super) segment_indices: Vec<u64>,
    /// Each step's calls, for a command that pairs two runs' calls in order
    /// ([`StepWindows::calls_by_step`](super::StepWindows::calls_by_step));
    /// `None` where the census could not place them.
    pub(super) step_calls: Option<BTreeMap<u64, StepCalls>>,
    /// The communicators the stream's calls used, where the census kept calls.
    pub(super) comms: Option<Vec<CommPlace>>,
    /// The calls the census kept, until every stream's sends are known and each receive can be placed
    /// ([`receives::place_calls`](super::receives::place_calls) makes them `step_calls`).
    pub(super) kept_calls: Option<StreamCalls>,
    /// The stream's sends and receives with a peer, until they are placed.
    pub(super) point_to_point: Vec<PointToPoint>,
    /// The receives a window reads at their send's step, not at the step of the op before them, by place.
    pub(super) moved: Vec<(Place, u64)>,
    /// Steps from one to another (inclusive) that one window must hold, so that the receives among them
    /// get the steps the whole read gives them ([`receives`](super::receives)).
    pub(super) ties: Vec<(u64, u64)>,
    /// The steps receives without their sends are read at (the step after them, where `diff` pairs them
    /// while the other run holds it too).
    pub(super) received_for: Vec<u64>,
    /// The stream's first mark of the framework's hook (`accutrace_step_end`), where its ops' steps came
    /// from the hook: a window's walk, which reads no mark, is given it so that it keeps the ops' recorded
    /// steps as the whole read does rather than infer them.
    pub(super) hook_mark: Option<StepMark>,
}

impl StreamSteps {
    /// The step a collective that started at `start_us` belongs to: the step of the op before it (the
    /// first step when none is), as [`Index::collective_steps`](crate::index::Index::collective_steps)
    /// places it when steps do not overlap in time; `None` when the stream has no op.
    pub(super) fn step_of_call(&self, start_us: u64) -> Option<u64> {
        let after = self.starts.partition_point(|&(launch, _)| launch <= start_us);
        self.starts.get(after.saturating_sub(1)).map(|&(_, step)| step)
    }

    /// The step whose window reads the call at `at` that started at `start_us`: a receive's send's step
    /// where the census moved it there, else [`StreamSteps::step_of_call`].
    pub(super) fn step_read_at(&self, at: Place, start_us: u64) -> Option<u64> {
        match self.moved.binary_search_by_key(&at, |&(place, _)| place) {
            Ok(i) => Some(self.moved[i].1),
            Err(_) => self.step_of_call(start_us),
        }
    }

    /// The steps of the ops before and after a call that started at `start_us`, where it was made between
    /// the ops of two steps (after the last op of one, before the first of the next), as the whole read's
    /// [`Index::collective_steps`](crate::index::Index::collective_steps) tells it.
    pub(super) fn steps_around(&self, start_us: u64) -> Option<(u64, u64)> {
        let after = self.starts.partition_point(|&(launch, _)| launch <= start_us);
        let (&(_, before), &(_, next)) = (self.starts.get(after.checked_sub(1)?)?, self.starts.get(after)?);
        (self.steps[&before].last_launch_us <= start_us).then_some((before, next))
    }
}

/// What `compare` asks of a benchmark's every tensor (#18: a selection of steps need not read the others), as
/// its census reads it from the heads of the tensor records it passes over
/// ([`StepWindows::census_of_bench`](super::StepWindows::census_of_bench)).
#[derive(Debug, Default)]
pub struct TensorHeads {
    /// Whether any tensor is an input.
    pub inputs: bool,
    /// The op names the outputs of other ops stand for: ops fused into those (what
    /// [`IndexedOp::original_names`](crate::index::IndexedOp::original_names) gives, but an op's own name).
    pub fused: HashSet<Arc<str>>,
}

impl TensorHeads {
    fn add(&mut self, head: &TensorHead) {
        self.inputs |= head.io == Io::Input;
        if let (Io::Output, Some(name)) = (head.io, &head.original_op) {
            if **name != *head.op.name && !self.fused.contains(&**name) {
                self.fused.insert(name.clone());
            }
        }
    }
}

/// One stream's steps and where their records lie (with its calls if `keep_calls`, to be placed in steps
/// by [`receives::place_calls`](super::receives::place_calls)), or `None` when a record ties steps
/// together (the windows module's text): point-to-point calls do unless `keep_calls`. Counts every record in `tally`, and
/// notes its tensors' heads in `heads` where it holds some (`None` once one cannot be read so).
pub(super) fn census_of_stream(
    stream: &StreamReader,
    tally: &mut RecordTally,
    keep_calls: bool,
    heads: &mut Option<TensorHeads>,
) -> Result<Option<StreamSteps>> {
    let segment_indices: Vec<u64> = stream.segment_indices().collect();
    let position = |index: u64| segment_indices.binary_search(&index).unwrap_or(0);
    let mut steps: BTreeMap<u64, Span> = BTreeMap::new();
    let mut calls: BTreeMap<(usize, Option<u64>), Calls> = BTreeMap::new();
    let mut last_call_start = 0;
    let mut stream_calls = StreamCalls::default();
    let (mut calls_kept, mut point_to_point) = (0, Vec::new());
    // The place of the op record the records after it belong to.
    let mut op_at: Place = (0, 0);
    // The step of the op the records after it belong to.
    let mut step = None;
    // Whether an op's step came from the framework's hook or from nothing (an eager capture), and the
    // hook's first mark: such steps are the recorded ones only where the hook was called
    // (`steps::resolve_capture_steps`); else the whole read infers them.
    let mut steps_from_hook = false;
    let mut hook_mark = None;
    let mut records = stream.records().passing_tensors();
    while let Some(item) = records.next() {
        let item = item?;
        tally.count(&item.record);
        let place = (position(item.segment_index), item.offset);
        match &item.record {
            Record::Op(op) => {
                match op.step_source {
                    StepSource::Model => {}
                    StepSource::Hook | StepSource::None => steps_from_hook = true,
                    // Counted from the marker op's runs, across the stream.
                    StepSource::Marker => return Ok(None),
                }
                op_at = place;
                step = Some(op.step);
                let span = steps.entry(op.step).or_insert_with(|| Span::at(op_at, op.timestamp_us));
                span.widen(op_at, place);
                span.ran_at(op.timestamp_us);
            }
            Record::Unknown { kind: KIND_TENSOR } => {
                // The walk fails on a tensor before any op record: there is one, and it was placed.
                let Some(span) = step.and_then(|step| steps.get_mut(&step)) else {
                    anyhow::bail!(
                        "{}: at byte {}: tensor record before any op record",
                        item.segment.display(),
                        item.offset
                    );
                };
                span.widen(op_at, place);
                span.tensors += 1;
                if let Some(noted) = heads.as_mut() {
                    match records.passed_head() {
                        Some(head) => noted.add(&head),
                        None => *heads = None,
                    }
                }
            }
            Record::Collective(call) => {
                if (call.op.is_point_to_point() && !keep_calls) || call.start_us < last_call_start {
                    return Ok(None);
                }
                last_call_start = call.start_us;
                let from = if op_at.0 == place.0 { op_at.1 } else { 0 };
                if keep_calls {
                    if let Some(p) = PointToPoint::of(call, calls_kept, place, from) {
                        point_to_point.push(p);
                    }
                    stream_calls.add(call);
                    calls_kept += 1;
                }
                let c = calls.entry((place.0, step)).or_insert(Calls {
                    earliest_us: call.start_us,
                    latest_us: call.start_us,
                    from,
                    to: place.1,
                });
                (c.latest_us, c.to) = (call.start_us, place.1);
            }
            Record::StatsCsv(csv) => {
                // The device's statistics of one op's tensors (or of ten of them: a part), its step and
                // launch in the record itself: an op record and its tensors in one. The whole read reports
                // a name it cannot parse.
                let base = csv.dump_file.rsplit('/').next().unwrap_or(&csv.dump_file);
                let Ok(name) = parse_file_name(base) else { return Ok(None) };
                op_at = place;
                step = Some(csv.step);
                let span = steps.entry(csv.step).or_insert_with(|| Span::at(place, name.timestamp_us));
                span.widen(place, place);
                span.ran_at(name.timestamp_us);
                span.tensors += stats_csv_rows(&csv.csv);
                // Its rows are not tensor records' heads: what compare asks of them is read from the index.
                *heads = None;
            }
            Record::Overflow(_) => return Ok(None),
            Record::StepMark(mark) => {
                if mark.source == StepSource::Hook && hook_mark.is_none() {
                    hook_mark = Some(mark.clone());
                }
            }
            Record::Tensor(_) | Record::Unknown { .. } => {}
        }
    }
    if steps_from_hook && hook_mark.is_none() {
        return Ok(None);
    }
    // The op before a call is found in its step's window only when the rank's steps follow one another in
    // time.
    let spans: Vec<&Span> = steps.values().collect();
    if spans.windows(2).any(|w| w[0].last_launch_us > w[1].first_launch_us) {
        return Ok(None);
    }
    let starts = steps.iter().map(|(&step, span)| (span.first_launch_us, step)).collect();
    let mut found = StreamSteps { steps, starts, segment_indices, hook_mark, ..StreamSteps::default() };
    // A call's record lies in a window's walk: the segments of the steps its calls belong to are widened to
    // hold it.
    for (&(segment, _), c) in &calls {
        let (Some(a), Some(b)) = (found.step_of_call(c.earliest_us), found.step_of_call(c.latest_us)) else {
            continue;
        };
        for span in found.steps.range_mut(a..=b).map(|(_, span)| span) {
            span.widen((segment, c.from), (segment, c.to));
        }
    }
    found.calls = calls;
    if keep_calls {
        found.comms = Some(stream_calls.comms().to_vec());
        found.kept_calls = Some(stream_calls);
        found.point_to_point = point_to_point;
    }
    Ok(Some(found))
}

/// The tensors a statistics CSV (or a part of one) has rows for: its lines, less the header's.
fn stats_csv_rows(csv: &[u8]) -> u64 {
    let lines = csv.split(|&b| b == b'\n').filter(|line| !line.trim_ascii().is_empty()).count() as u64;
    lines.saturating_sub(u64::from(stats_csv_header_line(csv).is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window is sized by the rows of its statistics CSVs: a later part of an op's CSV has no header.
    #[test]
    fn a_statistics_csv_counts_its_rows() {
        let header =
            "Input/Output,Index,Data Size,Data Type,Format,Shape,Max Value,Min Value,Avg Value,Count,\
                      Nan Count,Negative Inf Count,Positive Inf Count";
        let row = "Output,0,8,DT_FLOAT16,ND,[4],1,0,0.5,4,0,0,0";
        assert_eq!(stats_csv_rows(format!("{header}\n{row}\n{row}\n").as_bytes()), 2);
        assert_eq!(stats_csv_rows(format!("{row}\n{row}\n\n{row}").as_bytes()), 3);
        assert_eq!(stats_csv_rows(format!("{header}\n").as_bytes()), 0);
        assert_eq!(stats_csv_rows(b""), 0);
    }
}
