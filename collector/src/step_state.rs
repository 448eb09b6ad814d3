//! A pipeline's step counters (see [`crate::steps`]): the framework hook's step and the marker count.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Step state of a pipeline.
pub struct Steps {
    /// The step the hook last began (0 before any call).
    hook_step: AtomicU64,
    /// `ACCUTRACE_STEP_MARKER`, compiled.
    marker: Option<regex::Regex>,
    /// The writers' marker count: (step, whether the last file recorded was a marker op).
    marker_count: Mutex<(u64, bool)>,
}

impl Steps {
    /// `marker` was validated with the configuration.
    pub fn new(marker: Option<&str>) -> Steps {
        Steps {
            hook_step: AtomicU64::new(0),
            marker: marker.and_then(|m| regex::Regex::new(m).ok()),
            marker_count: Mutex::new((0, false)),
        }
    }

    /// The hook ended a step: the step that begins now.
    pub fn begin_next_step(&self) -> u64 {
        self.hook_step.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Whether the framework called `accutrace_step_end()` yet (before, the step-0 dump path says nothing).
    pub fn hook_called(&self) -> bool {
        self.hook_step.load(Ordering::Acquire) > 0
    }

    /// The step of an op of type `op_type` with nothing else telling its step, counting marker runs:
    /// `(step, is a marker op)`, or `None` without a marker.
    pub fn count_marker(&self, op_type: &str) -> Option<(u64, bool)> {
        let marker = self.marker.as_ref()?;
        let is_marker = marker.is_match(op_type);
        let mut c = self.marker_count.lock().unwrap_or_else(|e| e.into_inner());
        if !is_marker && c.1 {
            c.0 += 1;
        }
        c.1 = is_marker;
        Some((c.0, is_marker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_runs_count_steps() {
        let s = Steps::new(Some("^ApplyAdamD$|^AmpUpdateScale$"));
        let seq =
            ["MatMulV2", "ApplyAdamD", "ApplyAdamD", "AmpUpdateScale", "GatherV2", "AmpUpdateScale", "Add"];
        let got: Vec<(u64, bool)> = seq.iter().map(|t| s.count_marker(t).unwrap()).collect();
        assert_eq!(got, [(0, false), (0, true), (0, true), (0, true), (1, false), (1, true), (2, false)]);
        assert!(Steps::new(None).count_marker("ApplyAdamD").is_none());
    }
}
