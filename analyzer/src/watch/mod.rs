//! The watch engine (`analyzer watch RUN`): MindInsight's watch conditions over every step of a run, from
//! the per-tensor statistics the capture keeps, with the tensors' values (tensor mode) or histograms
//! (`record --histogram`) where statistics cannot decide ([`measure`]). Tensors are labelled weight,
//! gradient, activation, optimizer state or leaf by [`crate::roles`].
//!
//! Each condition ([`conditions`]) gives, per tensor it looks at: a hit (named by step, rank, op, tensor
//! and the value that hit), no hit, or "can't tell" with what would decide it. Like MindInsight, a tensor
//! holding NaN or inf is only looked at by the overflow conditions.
//!
//! A long capture is read a window of steps at a time ([`watch_by_windows`]), what looks back over steps
//! carried from window to window ([`WatchFold`]): the same report as the whole capture's.

mod checks;
pub mod conditions;
mod context;
mod findings;
mod fold;
pub mod measure;
mod run;
mod tally;
mod updates;

pub use conditions::{configure, defaults, Condition};
pub use findings::{
    CantTell, ConditionSummary, Finding, LabelCounts, LossPoint, NormPoint, Place, WatchOptions, WatchReport,
};
pub use fold::{ReadWhole, WatchFold};
pub use measure::{Evidence, Measure};
pub use run::{watch, watch_by_windows};
