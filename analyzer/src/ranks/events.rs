//! The events of a job, rank by rank in program order: what `analyzer ranks` reasons about, and exactly
//! what a per-rank summary (`scan`) stores, so that analysing summaries gives the same answer as analysing
//! the runs themselves.
//!
//! A rank's program order is its ops in execution order with its HCCL calls placed among them by the host
//! clock: a call comes before the first op dumped after its stream was synchronized (the collector stamps
//! `start_us` after synchronizing, so every op queued before the call has its dump timestamp by then). A
//! call's step is the step of the op before it (the first op's, for calls before any op), except a receive
//! of a message sent at a later step: it takes the send's (a pipeline's later stage receives the next
//! step's input before any op of that step runs); a receive between the ops of two steps whose send is
//! not there has [`UNKNOWN_STEP`] (either step is a guess). Where only some
//! ops were dumped (an overflow-detection capture), a call takes a step only when the ops around it tell it
//! (both of one step, or the first op at step 0), or a member of the same collective on another rank does;
//! otherwise its step is [`UNKNOWN_STEP`], never a guess.

use crate::filter::{rank_ranges, Filter};
use crate::gathered_stats::GatheredStats;
use crate::index::{Index, Io, MadeCommunicator, TensorId};
use crate::overflow::gather_stats;
use crate::problems::{InputProblem, InputProblems};
use crate::sources::capture::runs::{join_run, streams_of_different_runs};
use crate::sources::Source;
use accutrace_formats::capture::CollectiveOp;
use accutrace_formats::dtype::hccl as hccl_dtype;
use accutrace_formats::stats::TensorStats;
use accutrace_formats::DType;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

/// A name many events share (an op's name and type, a dtype, a communicator): the ranks of a job run the
/// same ops, so a merge of thousands of ranks holds each name once ([`Names`]), not once per event.
pub type Name = Arc<str>;

/// Hands out one [`Name`] per distinct text.
#[derive(Debug, Default)]
pub struct Names(HashSet<Name>);

impl Names {
    /// The shared name for `text`.
    pub fn get(&mut self, text: &str) -> Name {
        if let Some(name) = self.0.get(text) {
            return name.clone();
        }
        let name: Name = text.into();
        self.0.insert(name.clone());
        name
    }
}

/// The step of a call whose step nothing tells (no op dumped around it on its rank nor on its
/// collective's other members). Above every real step, so ordering by step puts it last; 2^63 - 1 so that
/// it is a valid BIGINT in a summary's `step` column (docs/RANK_SUMMARIES.md).
pub const UNKNOWN_STEP: u64 = i64::MAX as u64;

/// `step 3`, or `step unknown`.
pub fn step_words(step: u64) -> String {
    if step == UNKNOWN_STEP {
        "step unknown".into()
    } else {
        format!("step {step}")
    }
}

/// What the analysis needs of one tensor (or collective buffer).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSummary {
    pub io: Io,
    pub index: u32,
    /// The dtype's name (`FLOAT16`).
    pub dtype: Name,
    /// Whether values are floating point (saturation counts as an anomaly for those only).
    pub float: bool,
    pub elements: u64,
    pub nan: u64,
    pub pos_inf: u64,
    pub neg_inf: u64,
    pub at_saturation: u64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    pub l2_norm: f64,
    /// XXH3-64 of the raw bytes, when known.
    pub hash: Option<u64>,
}

#[cfg(test)]
impl TensorSummary {
    /// A FLOAT16 tensor of `elements` values, all zero, with the content hash `hash`: tests' events.
    pub(crate) fn zeros(io: Io, elements: u64, hash: Option<u64>) -> TensorSummary {
        TensorSummary {
            io,
            index: 0,
            dtype: "FLOAT16".into(),
            float: true,
            elements,
            nan: 0,
            pos_inf: 0,
            neg_inf: 0,
            at_saturation: 0,
            min: 0.0,
            max: 0.0,
            mean: 0.0,
            l2_norm: 0.0,
            hash,
        }
    }
}

impl TensorSummary {
    fn of(
        io: Io,
        index: u32,
        dtype: Option<DType>,
        dtype_name: Name,
        stats: Option<&TensorStats>,
        hash: Option<u64>,
    ) -> Self {
        let s = stats.cloned().unwrap_or_default();
        TensorSummary {
            io,
            index,
            dtype: dtype_name,
            float: dtype.is_some_and(|d| d.is_float()),
            elements: s.count,
            nan: s.nan,
            pos_inf: s.pos_inf,
            neg_inf: s.neg_inf,
            at_saturation: s.at_saturation,
            min: s.min,
            max: s.max,
            mean: s.mean,
            l2_norm: s.l2_norm,
            hash,
        }
    }

    /// NaN or inf, or (floats) values at the dtype's saturation limit: what an overflow leaves.
    pub fn anomalous(&self) -> bool {
        self.nan + self.pos_inf + self.neg_inf > 0 || (self.float && self.at_saturation > 0)
    }
}

/// A collective call's place among its communicator's calls.
#[derive(Clone, Debug, PartialEq)]
pub struct CollectiveMeta {
    pub comm: Name,
    pub seq: u64,
    pub op: CollectiveOp,
    /// Broadcast's root, Send's destination, Recv's source (communicator ranks).
    pub peer: Option<u32>,
    pub comm_rank: u32,
    pub comm_size: u32,
}

/// An op or an HCCL call.
#[derive(Clone, Debug, PartialEq)]
pub enum EventKind {
    Op { name: Name, op_type: Name },
    Collective(CollectiveMeta),
}

/// One event of a rank.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub step: u64,
    /// Host-clock µs (dump timestamp, or the call's start), when known.
    pub time_us: Option<u64>,
    pub kind: EventKind,
    /// Inputs then outputs (a collective: its send buffer as input 0, its receive buffer as output 0).
    pub tensors: Vec<TensorSummary>,
}

impl Event {
    /// The op's name, or the HCCL function's.
    pub fn name(&self) -> &str {
        match &self.kind {
            EventKind::Op { name, .. } => name,
            EventKind::Collective(c) => c.op.api_name(),
        }
    }

    /// The op's type, or the HCCL function's name.
    pub fn op_type(&self) -> &str {
        match &self.kind {
            EventKind::Op { op_type, .. } => op_type,
            EventKind::Collective(c) => c.op.api_name(),
        }
    }

    pub fn collective(&self) -> Option<&CollectiveMeta> {
        match &self.kind {
            EventKind::Collective(c) => Some(c),
            EventKind::Op { .. } => None,
        }
    }

    /// `name.input.0` of one of its tensors.
    pub fn label(&self, t: &TensorSummary) -> String {
        format!("{}.{}.{}", self.name(), t.io.as_str(), t.index)
    }
}

/// One rank's events in program order (a fold's kept events: `packed`).
#[derive(Clone, Debug, PartialEq)]
pub struct RankEvents<E = Event> {
    pub rank: u32,
    pub events: Vec<E>,
}

/// Every rank of a run (a fold's kept events are read as [`ProgramEvent`](super::program::ProgramEvent)s:
/// `packed`).
#[derive(Clone, Debug, PartialEq)]
pub struct RunEvents<E = Event> {
    /// Ascending by rank.
    pub ranks: Vec<RankEvents<E>>,
    /// What could not be placed.
    pub warnings: Vec<String>,
    /// What the source misses, and tensors whose statistics are unknown (never judged healthy).
    pub problems: Vec<InputProblem>,
    /// How many ranks the job had, as the run recorded it (`RANK_SIZE` or `WORLD_SIZE` in a capture's
    /// manifest), when known: fewer present is a partial job.
    pub job_ranks: Option<u32>,
    /// The `--step/--rank/--op` selection the events were read with (a scan's travels in its summaries):
    /// everything when empty. An answer for a selection is not one for the whole job.
    pub selection: Filter,
    /// The HCCL communicators each rank's process made from a root info, by rank; a rank absent is
    /// unknown. What tells runs apart: see [`different_runs`].
    pub communicators_made: BTreeMap<u32, Vec<MadeCommunicator>>,
}

impl<E> Default for RunEvents<E> {
    fn default() -> Self {
        RunEvents {
            ranks: Vec::new(),
            warnings: Vec::new(),
            problems: Vec::new(),
            job_ranks: None,
            selection: Filter::default(),
            communicators_made: BTreeMap::new(),
        }
    }
}

impl RunEvents {
    /// The events of every rank of a source (ops from its index, HCCL calls from its collective records).
    /// `filter` selects the ops examined; every HCCL call is kept, since the calls carry happens-before.
    /// Statistics a source does not store (a dump tree) are decoded from its tensors; a tensor that cannot
    /// be read is an input problem.
    pub fn from_source(source: &dyn Source, filter: &Filter) -> RunEvents {
        let mut unreadable = InputProblems::default();
        let stats = gather_stats(source, &filter.op_ids(source.index()), &mut unreadable, false);
        RunEvents::from_statistics(source.index(), filter, &stats, &unreadable)
    }

    /// [`RunEvents::from_source`] from statistics already gathered, and what could not be read of them.
    pub fn from_statistics(
        index: &Index,
        filter: &Filter,
        stats: &GatheredStats,
        unreadable: &InputProblems,
    ) -> RunEvents {
        let (mut run, unknown) = from_index(index, filter, stats);
        run.problems.extend(unknown_problem(unknown));
        run.problems.extend(unreadable.items().iter().cloned());
        run.job_ranks = index.job_ranks;
        run.selection = filter.clone();
        run.communicators_made = index.communicators_made.clone();
        let said = streams_of_different_runs(&index.communicators_by_stream).is_some();
        run.problems.extend(mixed_ranks(&run, said));
        run
    }
}

impl<E> RunEvents<E> {
    /// The ranks, ascending.
    pub fn rank_ids(&self) -> Vec<u32> {
        self.ranks.iter().map(|r| r.rank).collect()
    }
}

/// The problem of ranks of different runs that the ranks' own evidence shows ([`different_runs`],
/// [`identity_unknown`]), unless the capture directory already leads with its runs (`said`: an input
/// problem of the capture source, in `run.problems`): the ranks' evidence would only say it again.
pub(crate) fn mixed_ranks(run: &RunEvents, said: bool) -> Option<InputProblem> {
    mixed_ranks_called(run, said, &|events| called(events))
}

/// [`mixed_ranks`] of a run whose ranks' calls are known only as `called` gives them (a long baseline's
/// ranks keep the communicators they called, not their calls).
pub(crate) fn mixed_ranks_called<E>(
    run: &RunEvents<E>,
    said: bool,
    called: Calls<E>,
) -> Option<InputProblem> {
    if said {
        return None;
    }
    let mixed = different_runs(run).or_else(|| identity_unknown_called(run, called))?;
    Some(InputProblem::incomplete(format!("{mixed}; record each run into its own directory")))
}

/// The communicators a rank's HCCL calls were on, each once, with its size: what [`identity_unknown`] reads
/// of the calls.
pub(crate) type Called = BTreeSet<(Name, u32)>;

/// A rank's [`Called`], from its rank and events.
pub(crate) type Calls<'a, E = Event> = &'a dyn Fn(&RankEvents<E>) -> Called;

/// The [`Called`] of `events` (of kept events: `program::called`).
pub(crate) fn called(events: &RankEvents) -> Called {
    events.events.iter().filter_map(Event::collective).map(|c| (c.comm.clone(), c.comm_size)).collect()
}

/// Whether the ranks are of different runs, said with the evidence: every rank of a job makes each
/// communicator that spans the job (as many members as the job has ranks), from the same root info, so
/// two ranks that made spanning communicators and none in common are not of one job (two runs of the same
/// job size, each contributing ranks). Without the job's size or the communicators a rank made (an older
/// capture, communicators not made from a root info) that rank proves nothing and is left out: never
/// "mixed" on a guess.
pub fn different_runs<E>(run: &RunEvents<E>) -> Option<String> {
    let job = run.job_ranks?;
    // Ranks whose spanning communicators meet, with the communicators: one group per run.
    let mut runs: Vec<(Vec<&str>, Vec<u32>)> = Vec::new();
    for rank in &run.ranks {
        let spanning = spanning_made(run, rank.rank, job);
        if !spanning.is_empty() {
            join_run(&mut runs, spanning, rank.rank);
        }
    }
    if runs.len() < 2 {
        return None;
    }
    let each: Vec<String> = runs
        .iter()
        .map(|(comms, ranks)| {
            format!("{} made HCCL communicator {}", rank_ranges(ranks), comms.join(" and "))
        })
        .collect();
    Some(format!(
        "the ranks are of different runs: {}, each spanning a job of {job} ranks, and every rank of one job \
         makes each communicator that spans it",
        each.join(", ")
    ))
}

/// What [`different_runs`] cannot claim but the HCCL calls show: some ranks recorded no communicator they
/// made (a summary or capture older than that record), yet their calls are on communicators spanning the
/// job, and the ranks fall apart into groups with none in common. Said as evidence, not as a claim (a rank
/// whose early calls were lost could show only a later communicator): "job identity unknown", with each
/// group's communicators. `None` when every rank's identity is recorded or the calls show one group.
pub fn identity_unknown(run: &RunEvents) -> Option<String> {
    identity_unknown_called(run, &|events| called(events))
}

/// [`identity_unknown`] with each rank's calls as `called` gives them.
fn identity_unknown_called<E>(run: &RunEvents<E>, called: Calls<E>) -> Option<String> {
    let job = run.job_ranks?;
    let made = |rank: &RankEvents<E>| spanning_made(run, rank.rank, job);
    // The calls of the ranks that recorded no communicator they made.
    let calls: Vec<Called> =
        run.ranks.iter().map(|r| if made(r).is_empty() { called(r) } else { Called::new() }).collect();
    let mut unknown = Vec::new();
    let mut runs: Vec<(Vec<&str>, Vec<u32>)> = Vec::new();
    for (rank, calls) in run.ranks.iter().zip(&calls) {
        let mut spanning = made(rank);
        if spanning.is_empty() {
            // A set's order: sorted, each once.
            let of_job = calls.iter().filter(|(comm, size)| *size == job && comm.starts_with("root-"));
            spanning = of_job.map(|(comm, _)| &**comm).collect();
            if spanning.is_empty() {
                continue;
            }
            unknown.push(rank.rank);
        }
        join_run(&mut runs, spanning, rank.rank);
    }
    if unknown.is_empty() || runs.len() < 2 {
        return None;
    }
    let each: Vec<String> = runs
        .iter()
        .map(|(comms, ranks)| {
            format!("{} with HCCL communicator {}", rank_ranges(ranks), comms.join(" and "))
        })
        .collect();
    Some(format!(
        "job identity unknown for {} (the HCCL communicators they made are not recorded: a \
         capture of an older collector, or a summary of an older scan), and the ranks' HCCL calls fall apart \
         as different runs' would: {}, each spanning a job of {job} ranks and none called by both",
        rank_ranges(&unknown),
        each.join(", ")
    ))
}

/// The communicators spanning a job of `job` ranks that `rank` recorded making from a root info.
fn spanning_made<E>(run: &RunEvents<E>, rank: u32, job: u32) -> Vec<&str> {
    let made = run.communicators_made.get(&rank).map(Vec::as_slice).unwrap_or_default();
    made.iter()
        .filter(|c| c.comm_size == job && c.comm.starts_with("root-"))
        .map(|c| c.comm.as_str())
        .collect()
}

/// The events of `index` (a whole run, or a window of its steps), its problems, and how many of the selected
/// ops' tensors carry neither statistics nor a hash ([`unknown_problem`]).
pub(crate) fn from_index(index: &Index, filter: &Filter, stats: &GatheredStats) -> (RunEvents, usize) {
    let mut run = RunEvents { problems: index.problems.clone(), ..RunEvents::default() };
    // The selected ops' tensors with neither statistics nor a hash, counted as their summaries are made: a
    // capture's statistics are decoded from its record on each read (#18: ranks' CPU).
    let mut unknown = 0usize;
    let mut ranks: Vec<u32> = index.ranks();
    ranks.extend(index.collectives.iter().map(|c| c.rank));
    ranks.sort_unstable();
    ranks.dedup();
    let mut names = Names::default();
    for rank in ranks {
        let ops: Vec<Event> = index
            .ops
            .iter()
            .filter(|o| o.rank == rank)
            .map(|o| {
                let kept = filter.keeps(o);
                let kind = EventKind::Op { name: names.get(&o.name), op_type: names.get(&o.op_type) };
                let mut summary = |id: TensorId| {
                    let t = &index.tensors[id];
                    let known = stats.get(&id);
                    unknown += usize::from(kept && known.is_none() && t.hash().is_none());
                    let st = known.or_else(|| index.stats(id));
                    TensorSummary::of(
                        t.io,
                        t.index,
                        Some(t.dtype),
                        names.get(&t.dtype.name()),
                        st.as_ref(),
                        t.hash(),
                    )
                };
                Event {
                    step: o.step,
                    time_us: o.launch().map(|l| l.timestamp_us),
                    kind,
                    tensors: o.tensors().map(&mut summary).collect(),
                }
            })
            .collect();
        let calls: Vec<Event> = index
            .collectives
            .iter()
            .filter(|c| c.rank == rank)
            .map(|c| collective_event(&c.info, &mut names))
            .collect();
        let untimed_ops = ops.iter().any(|e| e.time_us.is_none());
        if !calls.is_empty() && untimed_ops {
            run.warnings.push(format!(
                "rank {rank}: some ops carry no dump timestamp, so its HCCL calls are placed after all its ops"
            ));
        }
        let events = interleave(ops, calls, index.only_overflowing_ops);
        run.ranks.push(RankEvents { rank, events });
    }
    fill_unknown_steps(&mut run);
    unsent_receives_between_steps(&mut run);
    for r in &mut run.ranks {
        let rank = r.rank;
        // Calls are kept at the selected steps whatever the rank or op selection: the same calls on every
        // member, so happens-before stays whole (a call whose step is unknown may be at any of them).
        r.events.retain(|e| match &e.kind {
            EventKind::Op { name, .. } => filter.keeps_at(name, e.step, rank),
            EventKind::Collective(_) => {
                filter.steps.is_empty() || e.step == UNKNOWN_STEP || filter.steps.contains(&e.step)
            }
        });
    }
    (run, unknown)
}

/// The problem of `unknown` tensors that carry neither statistics nor a content hash, if any.
pub(crate) fn unknown_problem(unknown: usize) -> Option<InputProblem> {
    (unknown > 0).then(|| {
        InputProblem::incomplete(format!(
            "{unknown} tensor(s) carry neither statistics nor a content hash: they are not checked (record \
             the run with the collector's statistics, its default mode)"
        ))
    })
}

fn collective_event(c: &accutrace_formats::capture::CollectiveInfo, names: &mut Names) -> Event {
    let dtype = hccl_dtype::dtype(c.dtype);
    let name = names.get(&hccl_dtype::name(c.dtype));
    let buffer = |io, b: &accutrace_formats::capture::BufferSummary| {
        TensorSummary::of(io, 0, dtype, name.clone(), Some(&b.stats), Some(b.content_hash))
    };
    // Sized to fit: a vector grown by pushes holds four summaries (#18: 448 bytes a call).
    let mut tensors = Vec::with_capacity(usize::from(c.input.is_some()) + usize::from(c.output.is_some()));
    tensors.extend(c.input.as_ref().map(|b| buffer(Io::Input, b)));
    tensors.extend(c.output.as_ref().map(|b| buffer(Io::Output, b)));
    Event {
        step: 0,
        time_us: Some(c.start_us),
        kind: EventKind::Collective(CollectiveMeta {
            comm: names.get(&c.comm),
            seq: c.seq,
            op: c.op,
            peer: c.peer,
            comm_rank: c.comm_rank,
            comm_size: c.comm_size,
        }),
        tensors,
    }
}

/// Calls whose step is unknown take the step another member of the same collective knows (members of a
/// collective make it at one step), and a receive takes the step of its send when that is later than its
/// own or its own is unknown (see `receive_steps_from_sends`). Run once the events of every rank at hand
/// are placed, and again when summaries of several nodes are merged.
pub fn fill_unknown_steps(run: &mut RunEvents) {
    receive_steps_from_sends(run);
    let key = |c: &CollectiveMeta| match c.op {
        CollectiveOp::Send | CollectiveOp::Recv => None,
        _ => Some((c.comm.clone(), c.seq)),
    };
    let mut known: BTreeMap<(Name, u64), u64> = BTreeMap::new();
    for e in run.ranks.iter().flat_map(|r| &r.events) {
        if let (Some(k), true) = (e.collective().and_then(key), e.step != UNKNOWN_STEP) {
            known.entry(k).or_insert(e.step);
        }
    }
    for e in run.ranks.iter_mut().flat_map(|r| &mut r.events) {
        if e.step == UNKNOWN_STEP {
            if let Some(&step) = e.collective().and_then(key).and_then(|k| known.get(&k)) {
                e.step = step;
            }
        }
    }
}

/// A receive waiting for the next step's input (a pipeline's later stage) comes after the last op of the
/// step before and before any op of its own step, so the op before it gives it the step before: the step
/// of its send, matched by (communicator, source, destination, message number), is the one it belongs to.
/// A receive is never earlier than its send; one that is later (a message kept for a later step) keeps its
/// own.
fn receive_steps_from_sends(run: &mut RunEvents) {
    let mut sent: BTreeMap<(Name, u32, u32, u64), u64> = BTreeMap::new();
    for e in run.ranks.iter().flat_map(|r| &r.events) {
        if let Some(c) = e.collective().filter(|c| c.op == CollectiveOp::Send) {
            if let (Some(dst), true) = (c.peer, e.step != UNKNOWN_STEP) {
                sent.insert((c.comm.clone(), c.comm_rank, dst, c.seq), e.step);
            }
        }
    }
    for e in run.ranks.iter_mut().flat_map(|r| &mut r.events) {
        let Some(c) = e.collective().filter(|c| c.op == CollectiveOp::Recv) else { continue };
        let Some(src) = c.peer else { continue };
        if let Some(&step) = sent.get(&(c.comm.clone(), src, c.comm_rank, c.seq)) {
            if e.step == UNKNOWN_STEP || e.step < step {
                e.step = step;
            }
        }
    }
}

/// A receive whose send is not in the run, placed after an op of one step and before an op of another,
/// has [`UNKNOWN_STEP`]: the op before it gave it the earlier step, but a pipeline's later stage receives a
/// step's input before that step's first op, so only the send tells which of the two it belongs to
/// (`order::unmatched_receive` names both). Run once, on a rank's events as placed: a merge of summaries
/// only fills such a step from a send it brings (`receive_steps_from_sends`).
fn unsent_receives_between_steps(run: &mut RunEvents) {
    let sent: HashSet<(Name, u32, u32, u64)> = run
        .ranks
        .iter()
        .flat_map(|r| &r.events)
        .filter_map(Event::collective)
        .filter(|c| c.op == CollectiveOp::Send)
        .filter_map(|c| Some((c.comm.clone(), c.comm_rank, c.peer?, c.seq)))
        .collect();
    for rank in &mut run.ranks {
        let mut op_after: Option<u64> = None;
        let mut steps_after = vec![None; rank.events.len()];
        for (i, e) in rank.events.iter().enumerate().rev() {
            steps_after[i] = op_after;
            if e.collective().is_none() {
                op_after = Some(e.step);
            }
        }
        let mut op_before: Option<u64> = None;
        for (e, after) in rank.events.iter_mut().zip(steps_after) {
            let Some(c) = e.collective() else {
                op_before = Some(e.step);
                continue;
            };
            let unsent = c.op == CollectiveOp::Recv
                && c.peer.is_some_and(|src| !sent.contains(&(c.comm.clone(), src, c.comm_rank, c.seq)));
            if unsent && matches!((op_before, after), (Some(a), Some(b)) if a != b) {
                e.step = UNKNOWN_STEP;
            }
        }
    }
}

/// Ops (in execution order) and calls (in call order) merged by time; each call takes the step of the
/// event before it. `sparse`: only some ops were dumped (overflow detection), so a call takes a step only
/// when the ops around it agree on it (or the op after it is at step 0); otherwise [`UNKNOWN_STEP`].
fn interleave(ops: Vec<Event>, calls: Vec<Event>, sparse: bool) -> Vec<Event> {
    let mut out = Vec::with_capacity(ops.len() + calls.len());
    let mut calls = calls.into_iter().peekable();
    let first_step = ops.first().map_or(0, |o| o.step);
    for op in ops {
        while let Some(call) = calls.next_if(|c| op.time_us.is_some_and(|t| c.time_us.is_some_and(|s| s < t)))
        {
            out.push(call);
        }
        out.push(op);
    }
    out.extend(calls);
    if sparse {
        // The step of the first op at or after each position.
        let mut after: Vec<Option<u64>> = vec![None; out.len() + 1];
        for i in (0..out.len()).rev() {
            after[i] = if out[i].collective().is_none() { Some(out[i].step) } else { after[i + 1] };
        }
        let mut before: Option<u64> = None;
        for (i, e) in out.iter_mut().enumerate() {
            match e.kind {
                EventKind::Op { .. } => before = Some(e.step),
                EventKind::Collective(_) => {
                    e.step = match (before, after[i]) {
                        (Some(a), Some(b)) if a == b => a,
                        (None, Some(0)) => 0,
                        _ => UNKNOWN_STEP,
                    };
                }
            }
        }
        return out;
    }
    let mut step = first_step;
    for e in &mut out {
        match e.kind {
            EventKind::Op { .. } => step = e.step,
            EventKind::Collective(_) => e.step = step,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(step: u64, t: u64) -> Event {
        Event {
            step,
            time_us: Some(t),
            kind: EventKind::Op { name: format!("op{t}").into(), op_type: "X".into() },
            tensors: vec![],
        }
    }

    fn call(t: u64, seq: u64) -> Event {
        let meta = CollectiveMeta {
            comm: "c".into(),
            seq,
            op: CollectiveOp::AllReduce,
            peer: None,
            comm_rank: 0,
            comm_size: 2,
        };
        Event { step: 99, time_us: Some(t), kind: EventKind::Collective(meta), tensors: vec![] }
    }

    fn p2p(op: CollectiveOp, t: u64, rank: u32, peer: u32) -> Event {
        let meta =
            CollectiveMeta { comm: "c".into(), seq: 0, op, peer: Some(peer), comm_rank: rank, comm_size: 2 };
        Event { step: 99, time_us: Some(t), kind: EventKind::Collective(meta), tensors: vec![] }
    }

    /// A rank's calls on `comms`, each `(communicator, members)`.
    fn calling(rank: u32, comms: &[(&str, u32)]) -> RankEvents {
        let on = |(i, &(comm, comm_size)): (usize, &(&str, u32))| {
            let meta =
                CollectiveMeta { comm: comm.into(), comm_size, ..call(0, 0).collective().unwrap().clone() };
            Event { kind: EventKind::Collective(meta), ..call(i as u64, i as u64) }
        };
        RankEvents { rank, events: comms.iter().enumerate().map(on).collect() }
    }

    /// Ranks known only by the communicators they called (a long baseline's, kept without their calls) are
    /// told apart as runs as they are from their calls: each spanning communicator once, in order.
    #[test]
    fn ranks_known_by_the_communicators_they_called_are_told_apart_as_by_their_calls() {
        let ranks = vec![
            calling(0, &[("root-cccc", 2), ("root-cccc", 2)]),
            calling(1, &[("root-bbbb", 2), ("root-aaaa", 2), ("root-sub1", 1), ("root-aaaa", 2)]),
        ];
        let run = RunEvents { ranks, job_ranks: Some(2), ..RunEvents::default() };
        let from_calls = mixed_ranks(&run, false).expect("two runs").message;
        assert!(from_calls.starts_with("job identity unknown for ranks 0, 1 "), "{from_calls}");
        assert!(
            from_calls.contains("rank 1 with HCCL communicator root-aaaa and root-bbbb,"),
            "{from_calls}"
        );
        let called: BTreeMap<u32, Called> = run.ranks.iter().map(|r| (r.rank, called(r))).collect();
        let bare = RunEvents {
            ranks: run.ranks.iter().map(|r| RankEvents { rank: r.rank, events: vec![] }).collect(),
            ..run.clone()
        };
        let from_called = mixed_ranks_called(&bare, false, &|r| called[&r.rank].clone()).expect("two runs");
        assert_eq!(from_called.message, from_calls);
        // Without what they called, nothing is said.
        assert_eq!(mixed_ranks(&bare, false), None);
    }

    #[test]
    fn a_receive_before_the_ops_of_its_step_takes_the_step_of_its_send() {
        // A pipeline: rank 0 computes step 1, then sends; rank 1, done with step 0, receives step 1's input
        // before its first op of step 1.
        let sender = interleave(vec![op(0, 10), op(1, 30)], vec![p2p(CollectiveOp::Send, 40, 0, 1)], false);
        let receiver = interleave(vec![op(0, 10), op(1, 50)], vec![p2p(CollectiveOp::Recv, 20, 1, 0)], false);
        let mut run = RunEvents {
            ranks: vec![RankEvents { rank: 0, events: sender }, RankEvents { rank: 1, events: receiver }],
            ..RunEvents::default()
        };
        let step_of = |run: &RunEvents, rank: usize, op| {
            run.ranks[rank].events.iter().find(|e| e.collective().is_some_and(|c| c.op == op)).unwrap().step
        };
        assert_eq!(step_of(&run, 1, CollectiveOp::Recv), 0, "placed after step 0's last op");
        fill_unknown_steps(&mut run);
        assert_eq!(step_of(&run, 1, CollectiveOp::Recv), 1, "the step its message was sent at");
        assert_eq!(step_of(&run, 0, CollectiveOp::Send), 1, "a send keeps its own");
    }

    #[test]
    fn a_receive_between_two_steps_whose_send_is_missing_has_no_step_but_one_inside_a_step_keeps_it() {
        // Rank 1 receives message #0 between step 0's ops and step 1's (a pipeline's next input) and
        // message #1 among step 1's ops; rank 0's sends were not recorded. The op before the first says step
        // 0, which is a guess: only its send would tell 0 or 1.
        let mut inside = p2p(CollectiveOp::Recv, 40, 1, 0);
        if let EventKind::Collective(c) = &mut inside.kind {
            c.seq = 1;
        }
        let receiver = interleave(
            vec![op(0, 10), op(1, 30), op(1, 50)],
            vec![p2p(CollectiveOp::Recv, 20, 1, 0), inside],
            false,
        );
        let mut run =
            RunEvents { ranks: vec![RankEvents { rank: 1, events: receiver }], ..RunEvents::default() };
        fill_unknown_steps(&mut run);
        unsent_receives_between_steps(&mut run);
        let steps: Vec<u64> =
            run.ranks[0].events.iter().filter(|e| e.collective().is_some()).map(|e| e.step).collect();
        assert_eq!(steps, [UNKNOWN_STEP, 1]);
        // With its send there, the same receive takes the send's step, as before.
        let sender = interleave(vec![op(1, 10)], vec![p2p(CollectiveOp::Send, 15, 0, 1)], false);
        let receiver = interleave(vec![op(0, 10), op(1, 30)], vec![p2p(CollectiveOp::Recv, 20, 1, 0)], false);
        let mut run = RunEvents {
            ranks: vec![RankEvents { rank: 0, events: sender }, RankEvents { rank: 1, events: receiver }],
            ..RunEvents::default()
        };
        fill_unknown_steps(&mut run);
        unsent_receives_between_steps(&mut run);
        assert_eq!(run.ranks[1].events[1].step, 1);
    }

    #[test]
    fn calls_go_before_the_first_op_dumped_after_them_and_take_the_step_before() {
        let merged = interleave(
            vec![op(0, 10), op(0, 20), op(1, 30)],
            vec![call(5, 0), call(20, 1), call(40, 2)],
            false,
        );
        let names: Vec<(&str, u64)> = merged.iter().map(|e| (e.name(), e.step)).collect();
        assert_eq!(
            names,
            [
                ("HcclAllReduce", 0),
                ("op10", 0),
                ("op20", 0),
                ("HcclAllReduce", 0),
                ("op30", 1),
                ("HcclAllReduce", 1)
            ]
        );
    }

    #[test]
    fn with_only_some_ops_dumped_a_call_takes_a_step_only_where_the_ops_around_it_tell_it() {
        // Rank a dumped one op at step 0 and one at step 1 around its calls; rank b dumped nothing
        // but an op at step 2, after every call.
        let a = interleave(
            vec![op(0, 10), op(0, 20), op(2, 60)],
            vec![call(5, 0), call(15, 1), call(30, 2), call(70, 3)],
            true,
        );
        let steps: Vec<u64> = a.iter().filter(|e| e.collective().is_some()).map(|e| e.step).collect();
        assert_eq!(steps, [0, 0, UNKNOWN_STEP, UNKNOWN_STEP]);
        let b = interleave(vec![op(2, 80)], vec![call(5, 0), call(15, 1), call(30, 2), call(70, 3)], true);
        let steps: Vec<u64> = b.iter().filter(|e| e.collective().is_some()).map(|e| e.step).collect();
        assert_eq!(steps, [UNKNOWN_STEP; 4], "not step 0, nor the step of the op after them");
        // A member that knows the step gives it to the others; what nobody knows stays unknown.
        let mut run = RunEvents {
            ranks: vec![RankEvents { rank: 0, events: a }, RankEvents { rank: 1, events: b }],
            ..RunEvents::default()
        };
        fill_unknown_steps(&mut run);
        let steps: Vec<u64> =
            run.ranks[1].events.iter().filter(|e| e.collective().is_some()).map(|e| e.step).collect();
        assert_eq!(steps, [0, 0, UNKNOWN_STEP, UNKNOWN_STEP]);
    }
}
