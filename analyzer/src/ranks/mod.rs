//! `analyzer ranks`: the first anomaly across the ranks of a job, and how it spread.
//!
//! - [`events`]: each rank's ops and HCCL calls in program order (from a source, or from summaries).
//! - [`detect`]: what is anomalous about each event (overflow, collective disagreement, replica
//!   divergence, difference from a baseline run).
//! - [`order`]: happens-before (program order, collectives matched by (communicator, sequence number), send
//!   before receive), replayed once across ranks: the origins are the anomalous events nothing anomalous
//!   happened before.
//! - [`summary`]: a rank's events as a Parquet file (`analyzer scan` writes one per rank, `analyzer merge`
//!   reads them back on one host).
//!
//! [`analyze`] puts them together: the origins ordered by (step, Lamport time, rank), the ranks the first one
//! reached and through which collective, and what the redundancy check compared.

pub mod detect;
pub mod events;
pub mod order;
pub mod summary;

use crate::outcome::Outcome;
use crate::problems::{InputProblem, InputProblems};
use detect::{EventRef, Finding};
use events::RunEvents;
use serde::Serialize;
use std::collections::BTreeMap;

/// An anomaly that nothing anomalous happened before.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Origin {
    pub rank: u32,
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
}

/// A rank the first origin's anomaly reached.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Reach {
    pub rank: u32,
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
}

impl RanksReport {
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
    let detected = detect::detect(run, baseline.map(|b| b.1));
    let replay = order::replay(run, &|at| detected.findings.contains_key(&at));
    let event = |(r, i): EventRef| &run.ranks[r].events[i];

    let mut origins: Vec<Origin> = replay
        .origins
        .iter()
        .map(|&(r, i)| {
            let e = event((r, i));
            Origin {
                rank: run.ranks[r].rank,
                step: e.step,
                op: e.name().to_string(),
                op_type: e.op_type().to_string(),
                collective: e.collective().map(|c| (c.comm.clone(), c.seq)),
                event: i,
                lamport: replay.lamport[r][i],
                findings: detected.findings[&(r, i)].clone(),
            }
        })
        .collect();
    origins.sort_by_key(|o| (o.step, o.lamport, o.rank, o.event));

    let first = origins.first().map(|o| {
        let r = run.ranks.iter().position(|x| x.rank == o.rank).expect("an origin's rank is present");
        (r, o.event)
    });
    let mut spread = Vec::new();
    if let Some(first) = first {
        for (r, reached) in replay.reached.iter().enumerate() {
            let Some((i, taint)) = reached else { continue };
            if taint.origin != first {
                continue;
            }
            let via = taint.via.map(|at| {
                let e = event(at);
                let c = e.collective().expect("a taint arrives through a collective");
                format!("{} #{} on {} at step {}", c.op.api_name(), c.seq, c.comm, e.step)
            });
            // Findings are ordered by (rank, event): this rank's from `i` on are one range.
            let anomalous_events = detected.findings.range((r, *i)..(r + 1, 0)).count() as u64;
            let e = event((r, *i));
            spread.push(Reach {
                rank: run.ranks[r].rank,
                step: e.step,
                at: e.name().to_string(),
                via,
                anomalous_events,
            });
        }
    }

    let mut findings: BTreeMap<String, u64> = BTreeMap::new();
    let mut anomalous_per_step: BTreeMap<u32, BTreeMap<u64, u64>> = BTreeMap::new();
    for (&at, list) in &detected.findings {
        for f in list {
            *findings.entry(f.kind.describe().to_string()).or_default() += 1;
        }
        *anomalous_per_step.entry(run.ranks[at.0].rank).or_default().entry(event(at).step).or_default() += 1;
    }
    let mut steps: Vec<u64> = run.ranks.iter().flat_map(|r| r.events.iter().map(|e| e.step)).collect();
    steps.sort_unstable();
    steps.dedup();
    let mut communicators: Vec<String> = run
        .ranks
        .iter()
        .flat_map(|r| r.events.iter().filter_map(|e| e.collective().map(|c| c.comm.clone())))
        .collect();
    communicators.sort();
    communicators.dedup();
    let mut problems = InputProblems::default();
    for p in run.problems.iter().chain(baseline.iter().flat_map(|b| b.1.problems.iter())) {
        problems.push(p.clone());
    }
    let incomplete = replay.incomplete.iter().map(|(comm, seq, op, arrived, expected)| {
        format!(
            "{} #{seq} on {comm}: {} of {expected} members recorded it (ranks {:?})",
            op.api_name(),
            arrived.len(),
            arrived
        )
    });
    for message in incomplete {
        problems.push(InputProblem::incomplete(message));
    }
    for &(r, i) in &replay.unmatched_receives {
        problems.push(InputProblem::incomplete(format!(
            "rank {}: {} #{i} has no matching send",
            run.ranks[r].rank,
            event((r, i)).name()
        )));
    }
    let mut warnings = run.warnings.clone();
    warnings.extend(detected.warnings.iter().cloned());
    if communicators.iter().any(|c| c.starts_with("unknown-")) {
        warnings.push("some communicators have no identity shared by their members: their calls cannot be matched across ranks".into());
    }
    RanksReport {
        run: run_name.to_string(),
        baseline: baseline.map(|b| b.0.to_string()),
        ranks: run.rank_ids(),
        steps,
        events: run.ranks.iter().map(|r| r.events.len() as u64).sum(),
        calls: run
            .ranks
            .iter()
            .map(|r| r.events.iter().filter(|e| e.collective().is_some()).count() as u64)
            .sum(),
        communicators,
        origins,
        spread,
        findings,
        anomalous_per_step,
        replicated_per_step: detected.replicated_per_step,
        input_problems: problems,
        warnings,
    }
}
