//! `analyzer ranks`: the first anomaly across the ranks of a job, and how it spread.
//!
//! - [`events`]: each rank's ops and HCCL calls in program order (from a source, or from summaries).
//! - [`detect`]: what is anomalous about each event (overflow, collective disagreement, replica
//!   divergence, difference from a baseline run).
//! - [`order`]: happens-before (program order, collectives matched by (communicator, sequence number), send
//!   before receive), replayed once across ranks: the origins are the anomalous events nothing anomalous
//!   happened before.
//! - [`program`]: an event as the replay and the report read it, whole or as a fold kept it.
//! - [`summary`]: a rank's events as a Parquet file (`analyzer scan` writes one per rank, `analyzer merge`
//!   reads them back on one host).
//!
//! [`analyze`] puts them together: the origins ordered by (step, Lamport time, rank), the ranks the first one
//! reached and through which collective, and what the redundancy check compared. [`fold::RanksFold`] makes the
//! same report of a long capture read a window of steps at a time (#18), and
//! [`baseline_windows::ranks_by_windows_against`] of a long capture against a long baseline.

mod baseline;
pub mod baseline_windows;
pub mod buffers;
pub mod detect;
pub mod events;
pub mod fold;
pub mod order;
mod packed;
pub mod program;
pub mod summary;
pub mod thin;
mod window;

use crate::filter::{rank_ranges, Filter};
use crate::outcome::Outcome;
use crate::problems::{InputProblem, InputProblems, ProblemKind, OF_THE_BASELINE};
use accutrace_formats::capture::CollectiveOp;
use detect::{EventRef, Finding};
use events::{step_words, RunEvents, UNKNOWN_STEP};
use program::ProgramEvent;
use serde::Serialize;
use std::collections::BTreeMap;

/// A step in JSON: null when unknown.
fn step_or_null<S: serde::Serializer>(step: &u64, s: S) -> Result<S::Ok, S::Error> {
    if *step == UNKNOWN_STEP {
        s.serialize_none()
    } else {
        s.serialize_u64(*step)
    }
}

/// Where the first origin is a collective some of whose members were not recorded (a rank's stream or
/// summary lost): the anomaly its recorded members show may have begun on a member that is not there, so the
/// answer says so beside it instead of naming the lowest recorded rank as where it began, unqualified.
fn first_origin_lacks_members(
    origins: &[Origin],
    incomplete: &[(String, u64, CollectiveOp, Vec<u32>, u32)],
) -> Option<String> {
    let first = origins.first()?;
    let (comm, seq) = first.collective.as_ref()?;
    let (_, _, op, arrived, expected) = incomplete.iter().find(|(c, q, ..)| c == comm && q == seq)?;
    Some(format!(
        "the first anomaly is {} #{seq} on {comm}, which {} of its {expected} members recorded ({}): a member \
         that was not recorded may be where the anomaly began, before any rank named here",
        op.api_name(),
        arrived.len(),
        rank_ranges(arrived)
    ))
}

/// An anomaly that nothing anomalous happened before.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Origin {
    pub rank: u32,
    /// [`UNKNOWN_STEP`] for a call nothing places at a step (JSON: null).
    #[serde(serialize_with = "step_or_null")]
    pub step: u64,
    /// The op, or the HCCL function.
    pub op: String,
    pub op_type: String,
    /// For a collective: its communicator and sequence number.
    pub collective: Option<(String, u64)>,
    /// Position in the rank's program order.
    pub event: usize,
    pub lamport: u64,
    pub findings: Vec<Finding>,
    /// The ranks it began on: its own, or at a collective anomalous on several members with nothing
    /// anomalous carried in (an all-reduce whose sum overflows), each of them: its result is theirs together.
    pub began_on: Vec<u32>,
    /// For an op of a rank's own compute, the ranks on which the same op at the same step is an origin too
    /// (its own rank included; empty when it is the only one): each began there independently, before any
    /// collective joined them, so none reached another.
    pub independently_on: Vec<u32>,
}

impl Origin {
    /// For an origin at a collective that began on several members together, the sentence that says so.
    pub fn began_together(&self) -> Option<String> {
        (self.began_on.len() > 1).then(|| {
            format!(
                "it began there on {} together: the call is anomalous on each of them, and none of them \
                 brought an anomaly into it (a collective's result is its members' alike)",
                rank_ranges(&self.began_on)
            )
        })
    }

    /// The ranks the answer names: those its collective began on together, or those its op began on
    /// independently, else its own.
    pub fn ranks_it_began_on(&self) -> &[u32] {
        if self.independently_on.len() > 1 {
            &self.independently_on
        } else {
            &self.began_on
        }
    }

    /// For an op that began an anomaly on several ranks independently, the sentence that says so.
    pub fn began_independently(&self) -> Option<String> {
        use detect::FindingKind;
        (self.independently_on.len() > 1).then(|| {
            let what = if self.findings.iter().all(|f| f.kind == FindingKind::Overflow) {
                "overflowed"
            } else {
                "was anomalous"
            };
            format!(
                "the same op {what} on {} at {}, independently: each in its own compute, before any \
                 collective joined them (no rank brought it to another)",
                rank_ranges(&self.independently_on),
                step_words(self.step)
            )
        })
    }
}

/// A rank the first origin's anomaly reached.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Reach {
    pub rank: u32,
    /// [`UNKNOWN_STEP`] for a call nothing places at a step (JSON: null).
    #[serde(serialize_with = "step_or_null")]
    pub step: u64,
    /// The first event of the rank the anomaly had reached.
    pub at: String,
    /// The collective that carried it there (`HcclAllReduce #4 on root-...`); `None` on the origin's rank.
    pub via: Option<String>,
    /// Anomalous events of the rank from there on.
    pub anomalous_events: u64,
}

/// What `analyzer ranks` found.
#[derive(Clone, Debug, Serialize)]
pub struct RanksReport {
    pub run: String,
    pub baseline: Option<String>,
    pub ranks: Vec<u32>,
    pub steps: Vec<u64>,
    pub events: u64,
    /// HCCL calls recorded, over all ranks.
    pub calls: u64,
    pub communicators: Vec<String>,
    /// Ordered by (step, Lamport time, rank): the first is the answer.
    pub origins: Vec<Origin>,
    /// Where the first origin's anomaly went, by rank.
    pub spread: Vec<Reach>,
    /// Anomalous events by finding kind.
    pub findings: BTreeMap<String, u64>,
    /// Anomalous events by rank, then step (the rank x step view; steps without any are absent).
    pub anomalous_per_step: BTreeMap<u32, BTreeMap<u64, u64>>,
    /// Per step: tensors every rank holding them held bit for bit (what the redundancy check compared).
    pub replicated_per_step: BTreeMap<u64, u64>,
    /// What the sources miss, and collectives that not every member recorded or receives without a send
    /// (happens-before is partial through them): they lead the report and make the exit status 2.
    pub input_problems: InputProblems,
    pub warnings: Vec<String>,
    /// How many ranks the job had, as the run recorded it, when known.
    pub job_ranks: Option<u32>,
    /// The `--step/--rank/--op` selection the answer is for (`None`: the whole run). Ranks outside it
    /// were not examined: nothing is said about them.
    pub selection: Option<Selection>,
    /// The ranks whose ops were examined (the selection's, else every rank present).
    pub examined_ranks: Vec<u32>,
}

/// A `--step/--rank/--op` selection, as reports show it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Selection {
    pub steps: Vec<u64>,
    pub ranks: Vec<u32>,
    pub ops: Vec<String>,
}

impl Selection {
    /// `None` for a filter that selects everything.
    pub fn of(filter: &Filter) -> Option<Selection> {
        (!filter.is_everything()).then(|| Selection {
            steps: filter.steps.clone(),
            ranks: filter.ranks.clone(),
            ops: filter.ops.clone(),
        })
    }

    /// `--step 1 --rank 0 --op 'x*'`, as it would be typed.
    pub fn options(&self) -> String {
        Filter { steps: self.steps.clone(), ranks: self.ranks.clone(), ops: self.ops.clone() }.options()
    }
}

impl RanksReport {
    /// The origins after the first that are its op at its step on other ranks (begun there independently,
    /// said with the first), and the rest.
    pub fn first_alike_and_rest(&self) -> (Vec<&Origin>, Vec<&Origin>) {
        let Some((first, after)) = self.origins.split_first() else { return (Vec::new(), Vec::new()) };
        after.iter().partition(|o| {
            first.independently_on.len() > 1
                && o.collective.is_none()
                && o.step == first.step
                && o.op == first.op
                && first.independently_on.contains(&o.rank)
        })
    }

    /// Findings when an origin was found; otherwise a pass (the caller turns it into an input error when
    /// `input_problems` is not empty: no all-clear on partial data).
    pub fn outcome(&self) -> Outcome {
        if self.origins.is_empty() {
            Outcome::Pass
        } else {
            Outcome::Findings
        }
    }
}

/// The cross-rank analysis of `run` (against `baseline`, a run of the same job that is known to be good,
/// when given).
pub fn analyze(run_name: &str, run: &RunEvents, baseline: Option<(&str, &RunEvents)>) -> RanksReport {
    let mut detected = detect::detect(run, baseline.map(|b| b.1));
    // Only the examined ranks' anomalies can be first, or be said to have been reached: of a rank outside the
    // selection only the HCCL calls are kept, to order the ranks, and what came before them was not read.
    detected.findings.retain(|&(r, _), _| examined(run, r));
    let mut tally =
        Tally { replicated_per_step: std::mem::take(&mut detected.replicated_per_step), ..Tally::default() };
    tally.add_events(run);
    tally.add_findings(run, &detected.findings, &|_| true);
    let mut report = conclude(run_name, run, baseline, &detected, tally, None);
    if let Some((name, good)) = baseline {
        if let Some(reason) = baseline::refusal(name, run, good, &report.examined_ranks) {
            refuse_baseline(&mut report, reason);
        }
    }
    report
}

/// Whether the rank at position `r` of `run` is examined (the selection's, or every rank).
fn examined<E>(run: &RunEvents<E>, r: usize) -> bool {
    run.selection.ranks.is_empty() || run.selection.ranks.contains(&run.ranks[r].rank)
}

/// What a report counts over every event of the run, which a fold over windows of steps adds up window by
/// window (the events it replays are a thinned selection: [`Thinning`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Tally {
    /// Every step an event is at (UNKNOWN_STEP left out at the end).
    pub steps: std::collections::BTreeSet<u64>,
    pub events: u64,
    pub findings: BTreeMap<String, u64>,
    pub anomalous_per_step: BTreeMap<u32, BTreeMap<u64, u64>>,
    pub replicated_per_step: BTreeMap<u64, u64>,
}

impl Tally {
    pub(crate) fn add_events<E: ProgramEvent>(&mut self, run: &RunEvents<E>) {
        self.steps.extend(run.ranks.iter().flat_map(|r| r.events.iter().map(E::step)));
        self.events += run.ranks.iter().map(|r| r.events.len() as u64).sum::<u64>();
    }

    /// Counts the findings of the events `counted` accepts.
    pub(crate) fn add_findings<E: ProgramEvent>(
        &mut self,
        run: &RunEvents<E>,
        findings: &BTreeMap<EventRef, Vec<Finding>>,
        counted: &dyn Fn(&E) -> bool,
    ) {
        for (&(r, i), list) in findings {
            let e = &run.ranks[r].events[i];
            if !counted(e) {
                continue;
            }
            for f in list {
                *self.findings.entry(f.kind.describe().to_string()).or_default() += 1;
            }
            *self.anomalous_per_step.entry(run.ranks[r].rank).or_default().entry(e.step()).or_default() += 1;
        }
    }
}

/// How the events a fold replays stand among the whole run's: per rank (by position in `RunEvents::ranks`),
/// each kept event's position in the rank's program order, and the anomalous ops left out before it and in
/// all.
#[derive(Clone, Debug, Default)]
pub(crate) struct Thinning {
    pub positions: Vec<Vec<usize>>,
    pub anomalous_left_before: Vec<Vec<u64>>,
    pub anomalous_left: Vec<u64>,
}

/// The report on `run` whose anomalies were `detected` (examined ranks only) and whose every event was
/// counted in `tally`; `thinning` when `run` holds only some of the run's events. Whether `baseline` is
/// refused is the caller's to say: a fold of windows tells it from what no thinned run holds.
fn conclude<E: ProgramEvent>(
    run_name: &str,
    run: &RunEvents<E>,
    baseline: Option<(&str, &RunEvents<E>)>,
    detected: &detect::Detected,
    tally: Tally,
    thinning: Option<&Thinning>,
) -> RanksReport {
    let position = |(r, i): EventRef| thinning.map_or(i, |t| t.positions[r][i]);
    let skipped = |(r, i): EventRef| match i {
        0 => position((r, 0)) as u64,
        _ => (position((r, i)) - position((r, i - 1)) - 1) as u64,
    };
    let anomalous = |at| detected.findings.contains_key(&at);
    let replay = order::replay_thinned(run, &anomalous, &skipped);
    let event = |(r, i): EventRef| &run.ranks[r].events[i];

    let mut origins: Vec<Origin> = replay
        .origins
        .iter()
        .map(|&(r, i)| {
            let e = event((r, i));
            let with = replay.began_with.get(&(r, i)).into_iter().flatten();
            let mut began_on: Vec<u32> = with.map(|&(m, _)| run.ranks[m].rank).collect();
            began_on.push(run.ranks[r].rank);
            began_on.sort_unstable();
            Origin {
                rank: run.ranks[r].rank,
                step: e.step(),
                op: e.name().to_string(),
                op_type: e.op_type().to_string(),
                collective: e.call().map(|c| (c.comm.to_string(), c.seq)),
                event: position((r, i)),
                lamport: replay.lamport[r][i],
                findings: detected.findings[&(r, i)].clone(),
                began_on,
                independently_on: Vec::new(),
            }
        })
        .collect();
    origins.sort_by_key(|o| (o.step, o.lamport, o.rank, o.event));
    // Origins of one op at one step on several ranks: each in its own compute, said together.
    let mut same_op: BTreeMap<(u64, String), Vec<u32>> = BTreeMap::new();
    for o in origins.iter().filter(|o| o.collective.is_none()) {
        same_op.entry((o.step, o.op.clone())).or_default().push(o.rank);
    }
    for o in origins.iter_mut().filter(|o| o.collective.is_none()) {
        let mut ranks = same_op[&(o.step, o.op.clone())].clone();
        ranks.sort_unstable();
        ranks.dedup();
        if ranks.len() > 1 {
            o.independently_on = ranks;
        }
    }

    let first = origins.first().map(|o| {
        let r = run.ranks.iter().position(|x| x.rank == o.rank).expect("an origin's rank is present");
        let kept = thinning.map(|t| t.positions[r].binary_search(&o.event).expect("an origin is kept"));
        (r, kept.unwrap_or(o.event))
    });
    let mut spread = Vec::new();
    if let Some(first) = first {
        for (r, reached) in replay.reached.iter().enumerate() {
            let Some((i, taint)) = reached else { continue };
            if taint.origin != first || !examined(run, r) {
                continue;
            }
            let via = taint.via.map(|at| {
                let e = event(at);
                let c = e.call().expect("a taint arrives through a collective");
                format!("{} #{} on {} at {}", c.op.api_name(), c.seq, c.comm, step_words(e.step()))
            });
            // Findings are ordered by (rank, event): this rank's from `i` on are one range; a thinned run
            // adds the anomalous ops it left out from there on.
            let kept = detected.findings.range((r, *i)..(r + 1, 0)).count() as u64;
            let left = thinning.map_or(0, |t| t.anomalous_left[r] - t.anomalous_left_before[r][*i]);
            let e = event((r, *i));
            spread.push(Reach {
                rank: run.ranks[r].rank,
                step: e.step(),
                at: e.name().to_string(),
                via,
                anomalous_events: kept + left,
            });
        }
    }

    let Tally { steps, events, findings, anomalous_per_step, replicated_per_step } = tally;
    let steps: Vec<u64> = steps.into_iter().filter(|&s| s != UNKNOWN_STEP).collect();
    // Each name once as it is met, not a string a call sorted (#18: 60 bytes a call at the end of a fold).
    let communicators: std::collections::BTreeSet<&str> =
        run.ranks.iter().flat_map(|r| r.events.iter().filter_map(|e| Some(&**e.call()?.comm))).collect();
    let communicators: Vec<String> = communicators.into_iter().map(str::to_string).collect();
    let ranks = run.rank_ids();
    let selection = Selection::of(&run.selection);
    let examined_ranks: Vec<u32> = match &selection {
        Some(s) if !s.ranks.is_empty() => ranks.iter().copied().filter(|r| s.ranks.contains(r)).collect(),
        _ => ranks.clone(),
    };
    let calls: u64 =
        run.ranks.iter().map(|r| r.events.iter().filter(|e| e.call().is_some()).count() as u64).sum();
    // What keeps the answer from covering the job leads: before the collectives that miss members.
    let mut problems = InputProblems::default();
    for p in scope_problems(run, &ranks, &examined_ranks, calls, selection.as_ref()) {
        problems.push(p);
    }
    if let Some(p) = calls_without_buffers(run, calls) {
        problems.push(p);
    }
    for p in &run.problems {
        problems.push(p.clone());
    }
    // The baseline's own problems are named as its: the user must know which of the two runs to copy again.
    if let Some((name, good)) = baseline {
        for p in &good.problems {
            problems.push(of_the_baseline(name, p));
        }
    }
    // A receive without its send names the rank, the message and its step (or the two it came between):
    // before the collectives missing members, which the same lost records usually leave by the dozen.
    for &at in &replay.unmatched_receives {
        problems.push(InputProblem::incomplete(order::unmatched_receive(run, at)));
    }
    let incomplete = replay.incomplete.iter().map(|(comm, seq, op, arrived, expected)| {
        format!(
            "{} #{seq} on {comm}: {} of {expected} members recorded it ({})",
            op.api_name(),
            arrived.len(),
            rank_ranges(arrived)
        )
    });
    for message in incomplete {
        problems.push(InputProblem::incomplete(message));
    }
    let mut warnings = run.warnings.clone();
    warnings.extend(detected.warnings.iter().cloned());
    if communicators.iter().any(|c| c.starts_with("unknown-")) {
        warnings.push("some communicators have no identity shared by their members: their calls cannot be matched across ranks".into());
    }
    if let Some(lacking) = first_origin_lacks_members(&origins, &replay.incomplete) {
        warnings.insert(0, lacking);
    }
    if let Some(s) = &selection {
        warnings.insert(
            0,
            format!(
                "the answer is for a selection, not the whole job ({}): ops outside it were not examined, \
                 so an anomaly there, an earlier origin included, would not show",
                s.options()
            ),
        );
    }
    RanksReport {
        run: run_name.to_string(),
        baseline: baseline.map(|b| b.0.to_string()),
        ranks,
        steps,
        events,
        calls,
        communicators,
        origins,
        spread,
        findings,
        anomalous_per_step,
        replicated_per_step,
        input_problems: problems,
        warnings,
        job_ranks: run.job_ranks,
        selection,
        examined_ranks,
    }
}

/// What the baseline's capture or summaries miss, worded as the baseline's (its kind unchanged: exit 2
/// either way).
pub fn of_the_baseline(name: &str, problem: &InputProblem) -> InputProblem {
    InputProblem { kind: problem.kind, message: format!("{OF_THE_BASELINE}{name}: {}", problem.message) }
}

/// Refuses the baseline: `reason` leads as REFUSED (exit 2, whatever `--allow-incomplete` says, as `diff`
/// does) and no answer is given, since every difference from another job's run would read as an anomaly.
pub fn refuse_baseline(report: &mut RanksReport, reason: String) {
    report.input_problems.push(InputProblem::refused(reason));
    report.origins.clear();
    report.spread.clear();
    report.findings.clear();
    report.anomalous_per_step.clear();
}

impl RanksReport {
    /// Whether a refusal (the baseline's, or one rank) leaves no answer across ranks.
    pub fn refused(&self) -> bool {
        self.input_problems.count(ProblemKind::Refused) > 0
    }
}

/// What keeps the answer from covering the job, beyond what the sources say they miss: fewer ranks
/// present than the job had, no HCCL call recorded (nothing ties the ranks together, and no collective's
/// members can be counted), or one rank examined (no answer across ranks exists).
fn scope_problems<E>(
    run: &RunEvents<E>,
    ranks: &[u32],
    examined: &[u32],
    calls: u64,
    selection: Option<&Selection>,
) -> Vec<InputProblem> {
    let mut found = Vec::new();
    let every_rank = selection.is_none_or(|s| s.ranks.is_empty());
    if let (Some(job), true) = (run.job_ranks, every_rank) {
        if (ranks.len() as u64) < u64::from(job) {
            let missing: Vec<u32> = (0..job).filter(|r| !ranks.contains(r)).collect();
            found.push(InputProblem::incomplete(format!(
                "the job had {job} ranks (RANK_SIZE/WORLD_SIZE recorded with the run) and {} {} here ({}); {} \
                 {} missing, so no answer covers the job (give every node's capture or summaries)",
                ranks.len(),
                if ranks.len() == 1 { "is" } else { "are" },
                rank_ranges(ranks),
                rank_ranges(&missing),
                if missing.len() == 1 { "is" } else { "are" }
            )));
        }
    }
    if examined.len() < 2 {
        let which = match (examined, every_rank) {
            ([r], true) => format!("the run holds one rank (rank {r})"),
            ([r], false) => format!("one rank is selected (rank {r}, --rank)"),
            _ => "no rank is examined".to_string(),
        };
        found.push(InputProblem::refused(format!(
            "{which}: no replica or collective member is compared with another, so no answer across ranks \
             exists (`analyzer overflow` answers for one rank)"
        )));
    } else if calls == 0 {
        found.push(InputProblem::incomplete(format!(
            "no HCCL call was recorded on any of the {} ranks: no collective's members are compared, the \
             ranks' events are not ordered against each other, and whether every rank of the job is here \
             cannot be told from collective membership (a CANN dump tree never holds HCCL calls; the \
             collector records them unless ACCUTRACE_COLLECTIVES=off)",
            examined.len()
        )));
    }
    found
}

/// HCCL calls recorded without their buffers' hashes (`ACCUTRACE_COLLECTIVES=meta`, or a buffer the
/// collector could not copy): their members' contents are not compared, so "every collective's members
/// agree" would say more than was read. A barrier has no buffer.
fn calls_without_buffers<E: ProgramEvent>(run: &RunEvents<E>, calls: u64) -> Option<InputProblem> {
    let events =
        run.ranks.iter().enumerate().flat_map(|(r, rank)| (0..rank.events.len()).map(move |i| (r, i)));
    let unread = events
        .filter(|&(r, i)| run.ranks[r].events[i].call().is_some_and(|c| c.op != CollectiveOp::Barrier))
        .filter(|&at| !run.buffer_hashed(at))
        .count();
    (unread > 0).then(|| {
        InputProblem::incomplete(format!(
            "{unread} of {calls} HCCL calls were recorded without their buffers (ACCUTRACE_COLLECTIVES=meta, or \
             buffers the collector could not copy): their members' contents are not compared, so a collective \
             that delivered different bytes to its members would go unseen (record with \
             ACCUTRACE_COLLECTIVES=stats, the default)"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The baseline's input problems are named as the baseline's, the run's are not; both lead (exit 2).
    #[test]
    fn the_baselines_input_problems_are_named_as_its_own() {
        let run = |problems: Vec<InputProblem>| RunEvents {
            ranks: (0..2).map(|rank| events::RankEvents { rank, events: vec![] }).collect(),
            problems,
            ..RunEvents::default()
        };
        let torn = InputProblem::incomplete("runs/x/stream-001-rank1: not sealed");
        let unreadable = InputProblem::unreadable("op.output.0: unknown dtype 999");
        let found =
            analyze("runs/x", &run(vec![]), Some(("runs/good", &run(vec![torn.clone(), unreadable]))));
        let said: Vec<&str> = found.input_problems.items().iter().map(|p| p.message.as_str()).collect();
        assert!(said.contains(&"in the baseline runs/good: runs/x/stream-001-rank1: not sealed"), "{said:?}");
        assert!(found.input_problems.fail_the_run(false));
        let mut lead = Vec::new();
        found.input_problems.lead(&mut lead).unwrap();
        let lead = String::from_utf8(lead).unwrap();
        assert!(
            lead.contains(
                "UNREADABLE INPUT: 1 tensor of the baseline could not be read and is not judged; \
                 first: in the baseline runs/good: op.output.0"
            ),
            "{lead}"
        );
        // The run under test's own problem is not the baseline's.
        let found = analyze("runs/x", &run(vec![torn.clone()]), Some(("runs/good", &run(vec![]))));
        let said: Vec<&str> = found.input_problems.items().iter().map(|p| p.message.as_str()).collect();
        assert!(
            said.contains(&torn.message.as_str()) && !said.iter().any(|m| m.contains("baseline")),
            "{said:?}"
        );
    }

    /// A partial job names the ranks it lacks, in the number they are.
    #[test]
    fn a_partial_job_names_its_missing_ranks() {
        let message = |job: u32, present: &[u32]| {
            let run: RunEvents = RunEvents { job_ranks: Some(job), ..RunEvents::default() };
            let found = scope_problems(&run, present, present, 1, None);
            found
                .into_iter()
                .map(|p| p.message)
                .find(|m| m.starts_with("the job had"))
                .expect("a partial job")
        };
        let one = message(2, &[1]);
        assert!(one.contains("1 is here (rank 1); rank 0 is missing, so no answer"), "{one}");
        let two = message(4, &[0, 1]);
        assert!(two.contains("2 are here (ranks 0, 1); ranks 2, 3 are missing, so no answer"), "{two}");
        // A job of 2,048 ranks, one node of 1,024 here but rank 512: one short line, ranks as ranges.
        let present: Vec<u32> = (0..1024).filter(|&r| r != 512).collect();
        let many = message(2048, &present);
        assert!(
            many.contains(
                "1023 are here (ranks 0-511, 513-1023); ranks 512, 1024-2047 are missing, so no answer"
            ),
            "{many}"
        );
        assert!(many.len() < 300, "{} characters: {many}", many.len());
    }
}
