//! Retention policies: which segments a stream keeps, and when it stops recording. Pure state, no I/O, so
//! the logic is tested without files or a collector; the writer asks it before each op and each new segment.
//!
//! Also the one parser of the policy and size syntax (`keep`, `ring:4G`, `trigger:512M:2`), shared by the
//! collector's `ACCUTRACE_POLICY` / `ACCUTRACE_*_SIZE` and `analyzer record --policy`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A byte count: digits with an optional binary unit `K`, `M`, `G` or `T` (powers of 1024, either case),
/// itself optionally followed by `B` or `iB`: `4096`, `64K`, `512MiB`, `4g`. Zero is a size; whoever takes
/// one decides its range.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let stem = lower.strip_suffix("ib").or_else(|| lower.strip_suffix('b')).unwrap_or(&lower);
    let (digits, shift) = match stem.as_bytes().last() {
        Some(b'k') => (&stem[..stem.len() - 1], 10),
        Some(b'm') => (&stem[..stem.len() - 1], 20),
        Some(b'g') => (&stem[..stem.len() - 1], 30),
        Some(b't') => (&stem[..stem.len() - 1], 40),
        _ => (stem, 0),
    };
    // "64iB" would strip to "64" with no unit: iB belongs after a unit only.
    let unit_missing = shift == 0 && lower.ends_with("ib");
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || unit_missing {
        return Err(format!("{t:?} is not a size (e.g. 4096, 64K, 512M, 4G)"));
    }
    let n: u64 = digits.parse().map_err(|_| format!("{t:?} is too large"))?;
    n.checked_mul(1u64 << shift).ok_or_else(|| format!("{t:?} is too large"))
}

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

impl Policy {
    /// `keep`, `ring:SIZE` or `trigger:SIZE:K` (SIZE as [`parse_size`] reads it, more than zero; K a step
    /// count). The inverse of the [`Display`](fmt::Display) form.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let usage = "expected keep, ring:SIZE (ring:4G) or trigger:SIZE:K (trigger:4G:2)";
        let size = |s: &str| -> Result<u64, String> {
            match parse_size(s)? {
                0 => Err(format!("{s:?}: a ring of 0 bytes keeps nothing")),
                n => Ok(n),
            }
        };
        let parts: Vec<&str> = text.trim().split(':').collect();
        match parts.as_slice() {
            ["keep"] => Ok(Policy::KeepAll),
            ["ring", s] => Ok(Policy::Ring { max_bytes: size(s)? }),
            ["trigger", s, k] => {
                let keep_steps_after =
                    k.trim().parse().map_err(|_| format!("K {:?} is not a step count", k.trim()))?;
                Ok(Policy::Trigger { ring_bytes: size(s)?, keep_steps_after })
            }
            _ => Err(usage.into()),
        }
    }
}

/// `keep`, `ring:BYTES`, `trigger:BYTES:K`: what [`Policy::parse`] reads back.
impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::KeepAll => f.write_str("keep"),
            Policy::Ring { max_bytes } => write!(f, "ring:{max_bytes}"),
            Policy::Trigger { ring_bytes, keep_steps_after } => {
                write!(f, "trigger:{ring_bytes}:{keep_steps_after}")
            }
        }
    }
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
    fn sizes_take_binary_units_in_either_case() {
        for (text, bytes) in [
            ("4096", 4096),
            ("0", 0),
            ("64K", 64 << 10),
            ("64k", 64 << 10),
            ("2mb", 2 << 20),
            ("512MiB", 512 << 20),
            ("4GiB", 4 << 30),
            ("1T", 1 << 40),
            (" 8 ", 8),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
        for bad in ["", "K", "12Q", "-1", "1.5G", "64iB", "99999999999T", "4 G"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn policies_parse_and_print_back() {
        for (text, policy) in [
            ("keep", Policy::KeepAll),
            ("ring:4G", Policy::Ring { max_bytes: 4 << 30 }),
            ("ring:512MiB", Policy::Ring { max_bytes: 512 << 20 }),
            ("trigger:1k:2", Policy::Trigger { ring_bytes: 1024, keep_steps_after: 2 }),
        ] {
            assert_eq!(Policy::parse(text), Ok(policy), "{text}");
            assert_eq!(Policy::parse(&policy.to_string()), Ok(policy));
        }
        assert_eq!(Policy::Ring { max_bytes: 1000 }.to_string(), "ring:1000");
        for bad in [
            "",
            "ring",
            "ring:",
            "ring:0",
            "ring:4X",
            "trigger:4G",
            "trigger:4G:-1",
            "keep:1",
            "ring:99999999999T",
        ] {
            assert!(Policy::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Policy::parse("ring:0").unwrap_err().contains("keeps nothing"));
    }

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
