//! The job's resource limits bind the collector too, since it runs in the job's process. Where a limit
//! would make the collector fail, it adapts up front, or fails alone (logged, counted, disabled): the job
//! must never be the one that hits the limit because of us.
//!
//! - `RLIMIT_FSIZE` (`ulimit -f`): segments are sized below it ([`segment_size_within_file_limit`]); a
//!   record that would still exceed it fails with EFBIG, handled like a full disk (`signals` keeps the
//!   kernel's SIGXFSZ from killing the job).
//! - Memory (`RLIMIT_AS`, `RLIMIT_DATA`): the slot pool is allocated fallibly; no allocation failure at
//!   start aborts the process.
//! - `RLIMIT_NPROC` / threads: a writer thread that cannot start makes the collector inactive; the helper
//!   that prepares segments ahead is optional.
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
}
