//! One compared tensor pair: what the engine measured and judged, what the reports print.

use crate::index::TensorId;
use crate::matching::MatchKind;
use crate::metrics::msprobe::Accuracy;
use crate::metrics::verdict::Level;
use crate::metrics::{MsaccucmpMetrics, MsprobeMetrics};
use accutrace_formats::stats::TensorStats;

/// One compared tensor pair (or an unmatched target tensor).
#[derive(Clone, Debug)]
pub struct CompareRow {
    pub target: TensorId,
    pub bench: Option<TensorId>,
    pub how: Option<MatchKind>,
    pub msprobe: MsprobeMetrics,
    pub msaccucmp: Option<MsaccucmpMetrics>,
    pub target_stats: Option<TensorStats>,
    pub bench_stats: Option<TensorStats>,
    pub accuracy: Accuracy,
    /// msprobe's Result column and its messages.
    pub result: Level,
    pub messages: Vec<String>,
    /// accutrace's verdict: this tensor fails on precision.
    pub failed: bool,
    /// Why it failed, in words.
    pub reason: Option<String>,
    /// Why a side could not be read: the pair is not judged (neither pass nor fail) and is an input
    /// problem of the comparison.
    pub error: Option<String>,
}

impl CompareRow {
    /// Judged and not failed.
    pub fn passed(&self) -> bool {
        !self.failed && self.error.is_none()
    }
}
