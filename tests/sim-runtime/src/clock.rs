//! The simulated device clock: dump timestamps and the dump tree's date directory come from it, so two runs
//! with the same configuration produce bit-identical dumps.
//!
//! It starts at a fixed epoch on every `aclInit` (override with `SIM_ACL_EPOCH_US`, microseconds since the
//! Unix epoch) and advances by one microsecond per timestamp handed out, so timestamps are unique and
//! increase in emission order, as a real device's do.

use std::sync::atomic::{AtomicU64, Ordering};

/// 2024-01-01T00:00:00Z: a plausible recent date, and round so the tree's date directory reads easily.
pub const DEFAULT_EPOCH_US: u64 = 1_704_067_200_000_000;

static NOW_US: AtomicU64 = AtomicU64::new(DEFAULT_EPOCH_US);

/// The configured start of the simulated clock.
pub fn epoch_us() -> u64 {
    std::env::var("SIM_ACL_EPOCH_US").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(DEFAULT_EPOCH_US)
}

/// Restarts the clock at the configured epoch (aclInit).
pub fn reset() {
    NOW_US.store(epoch_us(), Ordering::SeqCst);
}

/// The current time without advancing it.
pub fn now_us() -> u64 {
    NOW_US.load(Ordering::SeqCst)
}

/// A fresh timestamp, later than every earlier one.
pub fn tick() -> u64 {
    NOW_US.fetch_add(1, Ordering::SeqCst)
}

/// `YYYYMMDDhhmmss` (UTC) of a microsecond timestamp: the dump tree's session directory name.
pub fn date_dir_name(us: u64) -> String {
    let secs = us / 1_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}{m:02}{d:02}{:02}{:02}{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Gregorian (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's days-to-civil algorithm,
/// which works in 400-year eras so leap years need no tables).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(date_dir_name(0), "19700101000000");
        assert_eq!(date_dir_name(DEFAULT_EPOCH_US), "20240101000000");
        // 2024-02-29T23:59:59Z, a leap day.
        assert_eq!(date_dir_name(1_709_251_199_000_000), "20240229235959");
        assert_eq!(date_dir_name(951_782_400_000_000), "20000229000000");
    }
}
