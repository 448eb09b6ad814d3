//! What `diff` gives: its report ([`DiffReport`]) and refusal ([`Refusal`]), and what it takes
//! ([`DiffOptions`]).

use super::values::TensorDiff;
use crate::filter::Filter;
use crate::index::{Index, TensorId};
use crate::outcome::Outcome;
use crate::problems::{InputProblem, InputProblems};
use crate::sources::Source;
use serde::Serialize;
use std::path::Path;

/// The first differing op of one step on one rank.
#[derive(Clone, Debug, Serialize)]
pub struct FirstDifference {
    pub step: u64,
    pub rank: u32,
    pub op: String,
    pub op_type: String,
    /// `nondeterministic` when every input was identical, `propagating` when some input already differed,
    /// `unknown` when inputs were not dumped.
    pub verdict: &'static str,
    pub differing_inputs: Vec<String>,
    pub output: TensorDiff,
    /// A receive `nondeterministic` because what was sent agreed and what arrived did not: it changed in
    /// transit (JSON: `in_transit: true`, absent otherwise).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub in_transit: bool,
}

/// Every op that differed somewhere, per rank: how often and how much.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CensusRow {
    /// The rank the op ran on (a job's ranks each have their row: which ranks differed is the question).
    pub rank: u32,
    pub op: String,
    pub op_type: String,
    pub times: u64,
    pub max_abs_diff: f64,
    pub max_ulp: u64,
    pub max_share_differing: f64,
    /// Largest change of a statistic (min, max, mean, L2 norm) when only statistics were known.
    pub max_stats_delta: f64,
    /// Whether element-wise figures were measured for this op (false for statistics-only captures).
    pub measured: bool,
    /// Found different by the device's statistics alone (JSON: `by_device_statistics: true`, absent
    /// otherwise).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub by_device_statistics: bool,
}

/// Everything `diff` found; the reports print it, JSON serialises it as is.
#[derive(Serialize)]
pub struct DiffReport {
    /// `identical` (every matched tensor identical, none unmatched), `different` (some tensor differs),
    /// `unmatched` (none differs, but some tensor is in one run only), `incomplete` (none of what was
    /// read differs, but input problems lead the report), or `refused` (not one configuration, or no
    /// tensor in common: nothing was compared; the reason is a REFUSED input problem).
    pub verdict: &'static str,
    pub run1: String,
    pub run2: String,
    pub compared_tensors: usize,
    pub differing_tensors: usize,
    pub decoded_tensors: usize,
    /// Pairs known by the device's statistics alone (`--mode device-stats`: no content hash, no values)
    /// whose statistics differ: counted among `compared_tensors` and `differing_tensors`.
    pub differing_by_statistics: usize,
    /// Pairs known by the device's statistics alone whose statistics agree, which does not show them
    /// identical: neither compared nor differing (one input problem says so when nothing differs).
    pub agreeing_by_statistics: usize,
    pub first_differences: Vec<FirstDifference>,
    pub census: Vec<CensusRow>,
    pub unmatched_run1: Vec<String>,
    pub unmatched_run2: Vec<String>,
    /// The same tensors with where they are (run, step, rank): `unmatched_run1` then `unmatched_run2`.
    pub unmatched: Vec<UnmatchedTensor>,
    /// What the runs miss and which tensors could not be read (neither identical nor different): they
    /// lead the report.
    pub input_problems: InputProblems,
    /// What each run said about itself (`run1: ...`: steps it inferred, files it skipped); no verdict.
    pub warnings: Vec<String>,
}

/// A tensor only one run holds, with its step and rank, or an HCCL call without its counterpart.
#[derive(Clone, Debug, Serialize)]
pub struct UnmatchedTensor {
    /// `run1` or `run2`.
    pub run: &'static str,
    pub tensor: String,
    pub step: u64,
    pub rank: u32,
    /// An HCCL call, not a tensor (JSON: `hccl_call: true`, absent on tensors).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub hccl_call: bool,
}

impl UnmatchedTensor {
    pub(super) fn of(run: &'static str, index: &Index, t: TensorId) -> UnmatchedTensor {
        let op = &index.ops[index.tensors[t].op()];
        UnmatchedTensor { run, tensor: index.tensor_label(t), step: op.step, rank: op.rank, hccl_call: false }
    }
}

impl DiffReport {
    /// The report of runs `diff` refused ([`Refusal`]): nothing compared, the reason leading as a REFUSED
    /// input problem after what the runs miss (often why).
    pub fn refused(run1: &dyn Source, run2: &dyn Source, refusal: Refusal) -> DiffReport {
        let warnings = run1.index().warnings_of("run1").chain(run2.index().warnings_of("run2")).collect();
        let problems = InputProblems::of_sources(&[run1, run2]);
        DiffReport::refused_at([run1.root(), run2.root()], problems, warnings, refusal)
    }

    /// [`DiffReport::refused`] of the runs at `runs`, with what they miss (`problems`) and say of themselves.
    pub fn refused_at(
        runs: [&Path; 2],
        mut input_problems: InputProblems,
        warnings: Vec<String>,
        refusal: Refusal,
    ) -> DiffReport {
        input_problems.push(InputProblem::refused(refusal.0));
        DiffReport {
            verdict: "refused",
            run1: runs[0].display().to_string(),
            run2: runs[1].display().to_string(),
            compared_tensors: 0,
            differing_tensors: 0,
            decoded_tensors: 0,
            differing_by_statistics: 0,
            agreeing_by_statistics: 0,
            first_differences: Vec::new(),
            census: Vec::new(),
            unmatched_run1: Vec::new(),
            unmatched_run2: Vec::new(),
            unmatched: Vec::new(),
            input_problems,
            warnings,
        }
    }

    /// Findings when a tensor differs or is only in one run.
    pub fn outcome(&self) -> Outcome {
        if self.differing_tensors == 0 && self.unmatched_run1.is_empty() && self.unmatched_run2.is_empty() {
            Outcome::Pass
        } else {
            Outcome::Findings
        }
    }
}

/// Why `diff` will not answer (the runs are not one configuration, or share no tensor): the error
/// [`diff`](super::diff) returns then. The command writes it as [`DiffReport::refused`]; the report page says why diff
/// did not run.
#[derive(Debug)]
pub struct Refusal(pub String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

/// Which ops `diff` looks at, and whether it shows progress.
#[derive(Clone, Debug, Default)]
pub struct DiffOptions {
    pub filter: Filter,
    /// Show a progress bar on stderr (when stderr is a terminal).
    pub progress: bool,
}
