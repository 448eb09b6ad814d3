//! The one cut a published segment file ever sees: when a stream is sealed, the writer cuts its last
//! segment (made at full size) at the sealed end, so that a small capture takes little disk. A reader that
//! mapped that file at full length while the stream was live would then fault (SIGBUS) on the pages cut off,
//! and its process would die. So readers hold a shared `flock` on every segment file for as long as they
//! map it, and the writer cuts only when it gets the exclusive lock at once; otherwise it leaves the
//! segment at full length (readers stop at the sealed end either way: only disk space is kept).

use std::fs::File;
use std::os::fd::AsRawFd;

/// Takes a shared lock on a segment file for as long as `file` stays open. It waits only while a writer
/// is cutting the file (a single `ftruncate`). False where the filesystem has no `flock`: the reader then
/// reads without the guard.
pub(crate) fn hold_for_reading(file: &File) -> bool {
    loop {
        // SAFETY: flock on a descriptor `file` owns and keeps open; the lock belongs to its open file
        // description and is released when that closes.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH) } == 0 {
            return true;
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return false;
        }
    }
}

/// Whether the writer may cut `file` now: the exclusive lock, taken without waiting, so no reader maps the
/// file. The lock lasts until `file` is closed. Never blocks the job whose writer asks.
pub(crate) fn may_cut(file: &File) -> bool {
    // SAFETY: flock on a descriptor `file` owns and keeps open; LOCK_NB makes it return at once.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}
