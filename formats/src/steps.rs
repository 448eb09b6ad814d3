//! Step selections in CANN's `dump_step` syntax, `0|5|10-20`: one parser for every place that takes one
//! (the collector's `ACCUTRACE_STEPS`, `analyzer record --steps`, the simulated runtime's `dump_step`).
//!
//! CANN's own check (the dump config converter) splits on `|`, then each part on `-` into one or two
//! fields of ASCII digits with the first not above the last, and allows at most 100 parts. Anything it
//! refuses makes `aclmdlSetDump` fail, so [`StepSet::parse_cann`] accepts exactly that and nothing more;
//! [`StepSet::parse`] first drops the spaces a person may type.

use std::fmt;

/// The most `|`-separated parts CANN accepts in `dump_step`.
pub const MAX_PARTS: usize = 100;

/// The step CANN never reaches: msprobe's `dump_step` for "dump no step of this configuration".
pub const NO_STEP: u64 = 2_147_483_647;

/// A validated set of steps: inclusive ranges in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepSet {
    ranges: Vec<(u64, u64)>,
}

impl StepSet {
    /// Exactly CANN's `dump_step` syntax (no spaces, digits only, at most [`MAX_PARTS`] parts).
    pub fn parse_cann(text: &str) -> Result<StepSet, String> {
        if text.is_empty() {
            return Err("no step given (expected e.g. 0|5|10-20)".into());
        }
        let parts: Vec<&str> = text.split('|').collect();
        if parts.len() > MAX_PARTS {
            return Err(format!("{} parts; CANN accepts at most {MAX_PARTS}", parts.len()));
        }
        let mut ranges = Vec::with_capacity(parts.len());
        for part in parts {
            let fields: Vec<&str> = part.split('-').collect();
            let step = |s: &str| -> Result<u64, String> {
                if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(format!("{part:?} is not a step (5) or a range (10-20)"));
                }
                s.parse().map_err(|_| format!("{s:?} is too large for a step"))
            };
            let (lo, hi) = match fields.as_slice() {
                [one] => (step(one)?, step(one)?),
                [lo, hi] => (step(lo)?, step(hi)?),
                _ => return Err(format!("{part:?} is not a step (5) or a range (10-20)")),
            };
            if lo > hi {
                return Err(format!("range {part:?} runs backwards"));
            }
            ranges.push((lo, hi));
        }
        Ok(StepSet { ranges })
    }

    /// A selection as a person types it: spaces anywhere are ignored, then [`StepSet::parse_cann`].
    pub fn parse(text: &str) -> Result<StepSet, String> {
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        StepSet::parse_cann(&compact)
    }

    /// One step.
    pub fn single(step: u64) -> StepSet {
        StepSet { ranges: vec![(step, step)] }
    }

    /// Whether `step` is selected.
    pub fn contains(&self, step: u64) -> bool {
        self.ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&step))
    }

    /// The inclusive ranges, in the order given.
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges
    }
}

/// The CANN form (`0|5|10-20`), which [`StepSet::parse_cann`] reads back.
impl fmt::Display for StepSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(lo, hi)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str("|")?;
            }
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cann_syntax_round_trips() {
        let s = StepSet::parse_cann("0|5|10-20").unwrap();
        assert_eq!(s.ranges(), [(0, 0), (5, 5), (10, 20)]);
        assert!(s.contains(0) && s.contains(5) && s.contains(10) && s.contains(20));
        assert!(!s.contains(1) && !s.contains(21));
        assert_eq!(s.to_string(), "0|5|10-20");
        assert_eq!(StepSet::parse_cann(&NO_STEP.to_string()).unwrap(), StepSet::single(NO_STEP));
    }

    #[test]
    fn spaces_are_for_people_only() {
        assert_eq!(StepSet::parse(" 3 | 7 - 9 ").unwrap().to_string(), "3|7-9");
        assert!(StepSet::parse_cann("3| 7").is_err(), "CANN's IsDigit refuses a space");
    }

    #[test]
    fn refuses_what_cann_refuses() {
        for bad in ["", "a", "5-", "-1", "9-3", "1||2", "1-2-3", "+1", "99999999999999999999999"] {
            assert!(StepSet::parse_cann(bad).is_err(), "{bad:?}");
            assert!(StepSet::parse(bad).is_err(), "{bad:?}");
        }
        let many = vec!["1"; MAX_PARTS + 1].join("|");
        assert!(StepSet::parse_cann(&many).unwrap_err().contains("at most 100"));
        assert!(StepSet::parse_cann(&vec!["1"; MAX_PARTS].join("|")).is_ok());
        assert!(StepSet::parse("9-3").unwrap_err().contains("backwards"));
    }
}
