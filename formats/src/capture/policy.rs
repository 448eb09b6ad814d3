//! Retention policies: which segments a stream keeps, and when it stops recording. Pure state, no I/O, so
//! the logic is tested without files or a collector; the writer asks it before each op and each new segment.

use serde::{Deserialize, Serialize};

/// How much of a stream is kept on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Policy {
    /// Keep every segment.
    KeepAll,
    /// Keep at most `max_bytes` of segments (at least the one being written): the oldest are deleted.
    Ring {
        /// Upper bound of the stream's segment bytes on disk.
        max_bytes: u64,
    },
    /// Ring of `ring_bytes` until the first tensor that shows an overflow (NaN, inf, or a float at its
    /// saturation limit); then stop deleting (freeze the evidence), record `keep_steps_after` more steps,
    /// and stop recording at the first op of a later step.
    Trigger {
        /// Ring size before the trigger.
        ring_bytes: u64,
        /// Steps recorded after the triggering step.
        keep_steps_after: u64,
    },
}

/// The running state of a [`Policy`] for one stream.
#[derive(Clone, Debug)]
pub struct PolicyState {
    policy: Policy,
    step: u64,
    triggered_at: Option<u64>,
    stopped: bool,
}

impl PolicyState {
    /// The state before anything was recorded.
    pub fn new(policy: Policy) -> Self {
        PolicyState { policy, step: 0, triggered_at: None, stopped: false }
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// An op of `step` arrives: whether to record it (and its tensors). Once false, always false.
    pub fn admit_op(&mut self, step: u64) -> bool {
        self.step = step;
        if let (Policy::Trigger { keep_steps_after, .. }, Some(at)) = (self.policy, self.triggered_at) {
            if step > at.saturating_add(keep_steps_after) {
                self.stopped = true;
            }
        }
        !self.stopped
    }

    /// Whether recording has stopped for good (trigger policy, after the kept steps).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// A tensor of the current op was recorded; `shows_overflow` from its statistics. Fires the trigger.
    pub fn observe_tensor(&mut self, shows_overflow: bool) {
        if shows_overflow && self.triggered_at.is_none() && matches!(self.policy, Policy::Trigger { .. }) {
            self.triggered_at = Some(self.step);
        }
    }

    /// The step of the op whose tensor fired the trigger.
    pub fn triggered_at(&self) -> Option<u64> {
        self.triggered_at
    }

    /// How many of the oldest live segments (sizes in `live`, oldest first, not counting the one about to be
    /// created) to delete before a new segment of `new_bytes` is created.
    pub fn evictions(&self, live: &[u64], new_bytes: u64) -> usize {
        let max = match self.policy {
            Policy::KeepAll => return 0,
            Policy::Ring { max_bytes } => max_bytes,
            Policy::Trigger { .. } if self.triggered_at.is_some() => return 0,
            Policy::Trigger { ring_bytes, .. } => ring_bytes,
        };
        let mut total: u64 = live.iter().sum::<u64>().saturating_add(new_bytes);
        let mut n = 0;
        while total > max && n < live.len() {
            total -= live[n];
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_all_never_evicts_or_stops() {
        let mut p = PolicyState::new(Policy::KeepAll);
        assert_eq!(p.evictions(&[100; 50], 100), 0);
        p.observe_tensor(true);
        assert!(p.admit_op(1_000_000));
        assert_eq!(p.triggered_at(), None);
    }

    #[test]
    fn ring_keeps_at_most_max_bytes() {
        let p = PolicyState::new(Policy::Ring { max_bytes: 300 });
        assert_eq!(p.evictions(&[], 100), 0);
        assert_eq!(p.evictions(&[100, 100], 100), 0);
        assert_eq!(p.evictions(&[100, 100, 100], 100), 1);
        assert_eq!(p.evictions(&[100, 100, 100, 100], 100), 2);
        // A ring smaller than one segment keeps just the new one.
        let tiny = PolicyState::new(Policy::Ring { max_bytes: 10 });
        assert_eq!(tiny.evictions(&[100, 100], 100), 2);
    }

    #[test]
    fn trigger_freezes_then_stops_after_k_steps() {
        let mut p = PolicyState::new(Policy::Trigger { ring_bytes: 200, keep_steps_after: 2 });
        assert!(p.admit_op(0));
        p.observe_tensor(false);
        assert_eq!(p.evictions(&[100, 100], 100), 1, "rings before the trigger");
        assert!(p.admit_op(5));
        p.observe_tensor(true);
        assert_eq!(p.triggered_at(), Some(5));
        assert_eq!(p.evictions(&[100, 100], 100), 0, "frozen after the trigger");
        p.observe_tensor(true);
        assert!(p.admit_op(6));
        assert_eq!(p.triggered_at(), Some(5), "the first anomaly is kept");
        assert!(p.admit_op(7));
        assert!(!p.admit_op(8));
        assert!(p.stopped());
        assert!(!p.admit_op(7), "stopped is final");
    }
}
