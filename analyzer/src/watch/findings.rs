//! What `watch` reports: its options, the hits, the "can't tell" groups, and the per-step series.

use super::conditions::Condition;
use super::measure::{Evidence, Measure};
use crate::outcome::Outcome;
use crate::problems::InputProblems;
use serde::Serialize;

/// What `watch` is asked.
#[derive(Clone, Debug)]
pub struct WatchOptions {
    pub filter: crate::filter::Filter,
    /// The conditions ([`super::configure`]).
    pub conditions: Vec<Condition>,
    /// Read tensors (where the capture kept them) when statistics cannot decide.
    pub read_tensors: bool,
    /// Bars on stderr (when it is a terminal) while tensors are read and watched.
    pub progress: bool,
}

/// One hit.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub condition: &'static str,
    pub step: Option<u64>,
    pub rank: Option<u32>,
    pub op: Option<String>,
    pub op_type: Option<String>,
    /// `op.output.0`, or the tensor's own label.
    pub tensor: Option<String>,
    /// weight, gradient, activation, ...
    pub role: Option<&'static str>,
    /// The parameter, for weights and their gradients.
    pub param: Option<String>,
    /// What was measured: `abs_mean`, `range_percentage`, `update_ratio`, `nan`, ...
    pub measure: &'static str,
    pub value: Measure,
    /// The test that hit: `abs_mean_lt 1e-9`.
    pub threshold: String,
    pub evidence: Evidence,
    /// More to say: the gradient's norm by step, the device status bits, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Where a "can't tell" happened.
#[derive(Clone, Debug, Serialize)]
pub struct Place {
    pub step: Option<u64>,
    pub rank: Option<u32>,
    pub op: Option<String>,
    pub tensor: Option<String>,
    /// The bounds the statistics gave, when there were any.
    pub bounds: Option<Measure>,
}

/// The "can't tell" answers of one condition for one reason.
#[derive(Clone, Debug, Serialize)]
pub struct CantTell {
    pub condition: &'static str,
    pub reason: String,
    /// What would decide it.
    pub would_decide: &'static str,
    pub count: u64,
    /// The first few places.
    pub examples: Vec<Place>,
}

/// A condition as it ran.
#[derive(Clone, Debug, Serialize)]
pub struct ConditionSummary {
    pub name: &'static str,
    pub enabled: bool,
    pub summary: &'static str,
    pub params: std::collections::BTreeMap<&'static str, f64>,
    /// Tensors (or updates, steps, records) it decided for.
    pub decided: u64,
    pub hits: u64,
    pub cant_tell: u64,
}

/// How many tensors got each label.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LabelCounts {
    pub weights: u64,
    pub gradients: u64,
    pub activations: u64,
    pub optimizer_state: u64,
    pub leaves: u64,
    /// Optimizer ops (one parameter's update at one step).
    pub updates: u64,
    /// Tensors skipped by every non-overflow condition because they hold NaN or inf.
    pub nonfinite: u64,
    /// Tensors with neither statistics nor readable values.
    pub unknown: u64,
}

/// A step's loss.
#[derive(Clone, Debug, Serialize)]
pub struct LossPoint {
    pub step: u64,
    pub rank: u32,
    pub op: String,
    pub value: Option<f64>,
}

/// The parameters' gradient norm at one step of one rank: sqrt of the sum of every gradient's squared L2
/// norm; infinite (JSON null) when a gradient holds inf/NaN.
#[derive(Clone, Debug, Serialize)]
pub struct NormPoint {
    pub step: u64,
    pub rank: u32,
    pub gradients: usize,
    /// Gradients holding inf or NaN.
    pub nonfinite_gradients: usize,
    pub l2_norm: f64,
}

/// Everything `watch` found; the reports print it, JSON serialises it.
#[derive(Clone, Debug, Serialize)]
pub struct WatchReport {
    pub run: String,
    /// What the source says is missing and the tensors that could not be read (the report leads with it;
    /// exit status 2; an unreadable tensor is in no hit and no can't tell).
    pub input_problems: InputProblems,
    /// What the source said about itself (inferred steps, skipped files); the exit status unchanged.
    pub warnings: Vec<String>,
    pub steps: Vec<u64>,
    pub ranks: Vec<u32>,
    pub labels: LabelCounts,
    pub conditions: Vec<ConditionSummary>,
    pub findings: Vec<Finding>,
    /// Skipped steps and loss-scale drops that no overflow hit here explains: the origin is elsewhere.
    pub without_origin: Vec<crate::overflow::WithoutOrigin>,
    /// What the data covers when a ring policy deleted its oldest steps (empty otherwise).
    pub scope: Vec<String>,
    pub cant_tell: Vec<CantTell>,
    pub loss: Vec<LossPoint>,
    pub gradient_norm: Vec<NormPoint>,
}

impl WatchReport {
    /// Findings when a condition hit or the run shows an overflow whose origin is not in the data; input
    /// problems come on top (exit status 2).
    pub fn outcome(&self) -> Outcome {
        if self.findings.is_empty() && self.without_origin.is_empty() {
            Outcome::Pass
        } else {
            Outcome::Findings
        }
    }
}
