//! The simulated device clock: dump timestamps and the dump tree's date directory come from it, so two runs
//! with the same configuration produce bit-identical dumps.
//!
//! It starts at a fixed epoch on every `aclInit` (override with `SIM_ACL_EPOCH_US`, microseconds since the
//! Unix epoch) and advances by one microsecond per timestamp handed out, so timestamps are unique and
//! increase in emission order, as a real device's do.
//!
//! With `SIM_ACL_CLOCK=host` it follows the host's clock instead (still unique and increasing: a timestamp
//! is the later of the host time and the previous one plus 1 µs). Runs are then no longer byte-identical,
//! but timestamps order against what other processes stamp with the host clock, as a real device's dump
//! timestamps do: a collector's record of a collective call, for one (`sim-train --ranks` sets it).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// 2024-01-01T00:00:00Z: a plausible recent date, and round so the tree's date directory reads easily.
pub const DEFAULT_EPOCH_US: u64 = 1_704_067_200_000_000;

static NOW_US: AtomicU64 = AtomicU64::new(DEFAULT_EPOCH_US);
static FOLLOW_HOST: AtomicBool = AtomicBool::new(false);

fn host_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// The configured start of the simulated clock.
pub fn epoch_us() -> u64 {
    std::env::var("SIM_ACL_EPOCH_US").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(DEFAULT_EPOCH_US)
}

/// Restarts the clock (aclInit): at the configured epoch, or at the host's time with `SIM_ACL_CLOCK=host`.
pub fn reset() {
    let host = std::env::var("SIM_ACL_CLOCK").is_ok_and(|v| v.trim() == "host");
    FOLLOW_HOST.store(host, Ordering::SeqCst);
    NOW_US.store(if host { host_us() } else { epoch_us() }, Ordering::SeqCst);
}

/// The current time without advancing it.
pub fn now_us() -> u64 {
    let now = NOW_US.load(Ordering::SeqCst);
    if FOLLOW_HOST.load(Ordering::SeqCst) {
        now.max(host_us())
    } else {
        now
    }
}

/// A fresh timestamp, later than every earlier one.
pub fn tick() -> u64 {
    if !FOLLOW_HOST.load(Ordering::SeqCst) {
        return NOW_US.fetch_add(1, Ordering::SeqCst);
    }
    let host = host_us();
    // The next free microsecond at or after the host's time: unique even when the host clock stands still.
    let prev = NOW_US.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |next| Some(next.max(host) + 1));
    let prev = prev.expect("the update always succeeds");
    prev.max(host)
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
