//! Input problems: what keeps an answer from covering everything it was asked about. A command never says
//! "pass", "identical" or "no overflow" about data it did not see, so these lead every report (before the
//! headline) and make the exit status 2 (docs/CLI.md), whatever else was found.
//!
//! Sources report what they know is missing when they open ([`Index::problems`](crate::index::Index));
//! engines add what they could not read while they run; reports print [`InputProblems::lead`] first (the
//! table itself, or standard error beside CSV and JSON) and JSON reports carry the list as
//! `input_problems`.

use crate::sources::Source;
use serde::{Deserialize, Serialize};
use std::io::Write;

/// What kind of problem, which decides whether `--allow-incomplete` accepts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProblemKind {
    /// The source holds less than it says it should (lost segments or streams, dropped chunks, an unsealed
    /// stream, a dump file that could not be parsed): the answer covers what is there. `--allow-incomplete`
    /// accepts it (the warning still leads).
    Incomplete,
    /// A tensor that could not be read (corrupt data, unknown dtype, a missing file): left out of every
    /// verdict and counted apart.
    Unreadable,
    /// The inputs cannot answer the question (not the same configuration, not the same model).
    Refused,
}

/// One problem, in words that name the file (and offset) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputProblem {
    pub kind: ProblemKind,
    pub message: String,
}

impl InputProblem {
    pub fn incomplete(message: impl Into<String>) -> Self {
        InputProblem { kind: ProblemKind::Incomplete, message: message.into() }
    }

    pub fn unreadable(message: impl Into<String>) -> Self {
        InputProblem { kind: ProblemKind::Unreadable, message: message.into() }
    }

    pub fn refused(message: impl Into<String>) -> Self {
        InputProblem { kind: ProblemKind::Refused, message: message.into() }
    }
}

/// Every input problem of one command run, in the order found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct InputProblems {
    items: Vec<InputProblem>,
}

/// How a problem of a baseline run starts (`in the baseline runs/good: ...`; `ranks --baseline`, `merge
/// --baseline`): the run's own problems do not, so the user knows which of the two to read again.
pub const OF_THE_BASELINE: &str = "in the baseline ";

/// Incomplete-source lines listed before "and N more" in a lead; the JSON report has them all.
pub const LISTED: usize = 10;

impl InputProblems {
    /// The problems the sources found while opening.
    pub fn of_sources(sources: &[&dyn Source]) -> Self {
        let items = sources.iter().flat_map(|s| s.index().problems.iter().cloned()).collect();
        InputProblems { items }
    }

    pub fn push(&mut self, problem: InputProblem) {
        self.items.push(problem);
    }

    /// A tensor (named by `label`) that could not be read, and why.
    pub fn push_unreadable(&mut self, label: &str, error: &anyhow::Error) {
        self.items.push(InputProblem::unreadable(format!("{label}: {error:#}")));
    }

    pub fn items(&self) -> &[InputProblem] {
        &self.items
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// How many problems of `kind`.
    pub fn count(&self, kind: ProblemKind) -> usize {
        self.items.iter().filter(|p| p.kind == kind).count()
    }

    /// Whether they make the exit status 2: any at all, except that `allow_incomplete` accepts
    /// [`ProblemKind::Incomplete`] ones.
    pub fn fail_the_run(&self, allow_incomplete: bool) -> bool {
        self.items.iter().any(|p| p.kind != ProblemKind::Incomplete || !allow_incomplete)
    }

    /// The block every report starts with (nothing when there are no problems): what the sources miss, then
    /// refusals, then the unreadable tensors as a count with the first one named. What is missing comes
    /// first because a refusal is often its consequence (a run that lost a rank's stream "holds one rank"):
    /// the cause leads, and the user copies the run again rather than asking another question.
    pub fn lead(&self, out: &mut dyn Write) -> std::io::Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        for kind in [ProblemKind::Incomplete, ProblemKind::Refused] {
            let of_kind: Vec<&InputProblem> = self.items.iter().filter(|p| p.kind == kind).collect();
            let title = match kind {
                ProblemKind::Refused => "REFUSED",
                _ => "INCOMPLETE INPUT",
            };
            for p in of_kind.iter().take(LISTED) {
                writeln!(out, "{title}: {}", p.message)?;
            }
            if of_kind.len() > LISTED {
                writeln!(
                    out,
                    "{title}: ... and {} more (--format json lists every one)",
                    of_kind.len() - LISTED
                )?;
            }
        }
        // The run's unreadable tensors and a baseline's are counted apart: each names what to read again.
        for of_baseline in [false, true] {
            let unreadable: Vec<&InputProblem> = self
                .items
                .iter()
                .filter(|p| p.kind == ProblemKind::Unreadable)
                .filter(|p| p.message.starts_with(OF_THE_BASELINE) == of_baseline)
                .collect();
            if let Some(first) = unreadable.first() {
                let n = unreadable.len();
                writeln!(
                    out,
                    "UNREADABLE INPUT: {n} tensor{}{} could not be read and {} judged; first: {}",
                    if n == 1 { "" } else { "s" },
                    if of_baseline { " of the baseline" } else { "" },
                    if n == 1 { "is not" } else { "are not" },
                    first.message
                )?;
            }
        }
        writeln!(out, "(exit status 2: the answer below does not cover what is listed above)\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lead_names_each_kind_and_counts_unreadable_tensors() {
        let mut p = InputProblems::default();
        assert!(!p.fail_the_run(false));
        let mut out = Vec::new();
        p.lead(&mut out).unwrap();
        assert!(out.is_empty(), "no problems, no lead");
        p.push(InputProblem::incomplete("runs/a/stream-000: segment 0 is missing"));
        assert!(p.fail_the_run(false) && !p.fail_the_run(true));
        p.push_unreadable("op.output.0", &anyhow::anyhow!("tensor data does not match its content hash"));
        p.push_unreadable("op.output.1", &anyhow::anyhow!("unknown dtype 999"));
        assert!(p.fail_the_run(true), "--allow-incomplete does not excuse unreadable tensors");
        p.lead(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("INCOMPLETE INPUT: runs/a/stream-000: segment 0 is missing\n"), "{text}");
        assert!(text.contains("UNREADABLE INPUT: 2 tensors could not be read and are not judged; first: op.output.0: tensor data"));
        assert_eq!(serde_json::to_value(&p).unwrap()[2]["kind"], "unreadable");
    }

    /// A refusal found after what the sources miss still follows it: the loss is often its cause.
    #[test]
    fn what_is_missing_leads_a_refusal() {
        let mut p = InputProblems::default();
        p.push(InputProblem::refused("the run holds one rank (rank 0)"));
        p.push(InputProblem::incomplete("runs/a: rank 1's stream directory is missing"));
        let mut out = Vec::new();
        p.lead(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "INCOMPLETE INPUT: runs/a: rank 1's stream directory is missing", "{text}");
        assert_eq!(lines[1], "REFUSED: the run holds one rank (rank 0)", "{text}");
        assert!(p.fail_the_run(true), "--allow-incomplete does not excuse a refusal");
    }
}
