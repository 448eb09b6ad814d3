//! The job's resource limits bind the collector too, since it runs in the job's process. Where a limit
//! would make the collector fail, it adapts up front, or fails alone (logged, counted, disabled): the job
//! must never be the one that hits the limit because of us.
//!
//! - `RLIMIT_FSIZE` (`ulimit -f`): segments are sized below it ([`segment_size_within_file_limit`]); a
//!   record that would still exceed it fails with EFBIG, handled like a full disk (`signals` keeps the
//!   kernel's SIGXFSZ from killing the job).
//! - Memory (`RLIMIT_AS`, `RLIMIT_DATA`): the slot pool is allocated fallibly; no allocation failure at
//!   start aborts the process.
//! - `RLIMIT_NPROC` / threads (`ulimit -u`, counted over every process of the user): the collector stays
//!   inactive when its threads would eat into what the job may still want (one thread per CPU, what a
//!   thread pool takes) [`threads_within_process_limit`]; a writer thread that cannot start anyway makes it
//!   inactive; the helper that prepares segments ahead is optional.
//! - `RLIMIT_NOFILE`: segments are mapped and their descriptors closed at once; the collector keeps 4
//!   descriptors open for its life (the SIGTERM pipes), all close-on-exec.

use accutrace_formats::capture::writer::MIN_SEGMENT_SIZE;

/// The soft `RLIMIT_FSIZE` in bytes, `None` when unlimited (or unknown).
pub fn file_size_limit() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the limit into a local.
    if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(limit.rlim_cur)
}

/// The segment size to use under a file size limit: `configured`, or the largest valid size (a multiple of
/// 8) within `limit`. A limit below the smallest segment is left for segment creation to report.
pub fn fit_segment_size(configured: u64, limit: Option<u64>) -> u64 {
    match limit {
        Some(limit) if configured > limit && limit >= MIN_SEGMENT_SIZE => limit & !7,
        _ => configured,
    }
}

/// [`fit_segment_size`] under this process's limit, with a log line when it shrinks the segments.
pub fn segment_size_within_file_limit(configured: u64) -> u64 {
    let limit = file_size_limit();
    let fitted = fit_segment_size(configured, limit);
    if fitted != configured {
        crate::log(&format!(
            "segments of {configured} bytes would exceed the file size limit (ulimit -f) of {} bytes; \
             using {fitted}-byte segments",
            limit.unwrap_or_default()
        ));
    }
    fitted
}

/// Threads the collector starts: each writer, its segment-preparing helper, and the SIGTERM watcher.
pub fn collector_threads(writers: usize) -> u64 {
    2 * writers as u64 + 1
}

/// Whether `needed` more threads leave the job its room under `limit` (RLIMIT_NPROC) when the user runs
/// `running` threads now: the job keeps `reserve` (its thread pool, still to come) on top.
pub fn thread_room(limit: Option<u64>, running: u64, needed: u64, reserve: u64) -> Result<(), String> {
    match limit {
        Some(limit) if running.saturating_add(needed).saturating_add(reserve) > limit => Err(format!(
            "cannot start its {needed} threads within the limit of {limit} processes and threads (ulimit -u): \
             the user runs {running}, and the job may want {reserve} more (one per CPU)"
        )),
        _ => Ok(()),
    }
}

/// The soft `RLIMIT_NPROC` when Linux holds this process to it: `None` when unlimited, unknown, or for
/// root (exempt).
fn thread_limit() -> Option<u64> {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        return None;
    }
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the limit into a local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(limit.rlim_cur)
}

/// Threads of this process's real user, over every process of the machine (`/proc/*/status`), which is
/// what RLIMIT_NPROC counts.
fn user_threads() -> u64 {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() }.to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    let mut total = 0;
    for entry in dir.flatten() {
        if !entry.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
        let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
        if field("Uid:").and_then(|v| v.split_whitespace().next()) == Some(uid.as_str()) {
            total += field("Threads:").and_then(|v| v.parse::<u64>().ok()).unwrap_or(1);
        }
    }
    total
}

/// [`thread_room`] for `writers` writer threads in this process, under its limit (the machine's processes
/// are counted only when a limit applies).
pub fn threads_within_process_limit(writers: usize) -> Result<(), String> {
    let Some(limit) = thread_limit() else { return Ok(()) };
    let reserve = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let needed = collector_threads(writers);
    // The usual case, a limit far above what runs: every thread of the machine (`/proc/loadavg` counts
    // them) fits with room to spare, so the user's own need not be counted process by process.
    if machine_threads().is_some_and(|all| thread_room(Some(limit), all, needed, reserve).is_ok()) {
        return Ok(());
    }
    thread_room(Some(limit), user_threads(), needed, reserve)
}

/// Every thread of the machine: the total in `/proc/loadavg`'s `running/total` field.
fn machine_threads() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().nth(3)?.split_once('/')?.1.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_shrink_to_a_multiple_of_8_within_the_limit() {
        assert_eq!(fit_segment_size(64 << 20, None), 64 << 20);
        assert_eq!(fit_segment_size(64 << 20, Some(32 << 20)), 32 << 20);
        assert_eq!(fit_segment_size(64 << 20, Some((32 << 20) + 5)), 32 << 20);
        assert_eq!(fit_segment_size(1 << 20, Some(32 << 20)), 1 << 20, "already within");
        assert_eq!(fit_segment_size(1 << 20, Some(100)), 1 << 20, "below any segment: creation reports it");
    }

    #[test]
    fn threads_start_only_with_room_left_for_the_job() {
        assert!(thread_room(None, 10_000, 3, 2).is_ok(), "no limit");
        assert!(thread_room(Some(100), 10, 3, 2).is_ok());
        let refused = thread_room(Some(6), 2, 3, 2).unwrap_err();
        assert!(refused.contains("3 threads") && refused.contains("limit of 6"), "{refused}");
        assert!(thread_room(Some(u64::MAX - 1), u64::MAX, 3, 2).is_err(), "saturating, never wrapping");
    }
}
