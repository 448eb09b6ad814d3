//! Keeping the collector's signals to itself. The job must behave as it would without the collector, so:
//!
//! - Threads the collector starts block every asynchronous signal ([`spawn_quiet`]): a signal sent to the
//!   process (SIGINT, SIGUSR1, SIGCHLD, a profiler's SIGPROF, ...) is delivered to one of the job's threads,
//!   as it would be without us, never to a writer that the job knows nothing about.
//! - Where collector code does I/O on a thread of the job (activation in `aclInit`, sealing in
//!   `aclFinalize` or at exit, a log line from the dump callback), a [`Shield`] blocks the two signals the
//!   kernel sends for a failed write: SIGXFSZ (a file would exceed `RLIMIT_FSIZE`, `ulimit -f`; default
//!   action: kill the process) and SIGPIPE (stderr is a pipe nobody reads). The write then fails with
//!   EFBIG or EPIPE, which the collector handles like any write error (counted, logged, disabled); a signal
//!   our write made pending is discarded before the job's signal mask comes back.
//!
//! Synchronous fault signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS) are never blocked: they
//! are the kernel's answer to a fault of the thread itself and must reach the process's handlers.

use std::io;
use std::thread::{Builder, JoinHandle};

/// Signals that a fault in the thread itself raises: left unblocked everywhere.
const SYNCHRONOUS: [libc::c_int; 6] =
    [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP, libc::SIGSYS];

/// Signals the kernel sends to a thread whose write failed: SIGXFSZ (file size limit), SIGPIPE.
pub const WRITE_FAILURE_SIGNALS: [libc::c_int; 2] = [libc::SIGXFSZ, libc::SIGPIPE];

fn set_of(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it and sigaddset only sets bits in it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Every signal but the synchronous ones.
fn asynchronous_signals() -> libc::sigset_t {
    // SAFETY: as in `set_of`: sigfillset initialises the set, sigdelset clears bits.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for s in SYNCHRONOUS {
            libc::sigdelset(&mut set, s);
        }
        set
    }
}

/// Replaces this thread's mask by blocking `set` in addition; returns the previous mask.
fn block(set: &libc::sigset_t) -> libc::sigset_t {
    // SAFETY: pthread_sigmask reads `set` and writes the old mask into a local; it changes only the calling
    // thread's mask, and glibc keeps its own internal signals unblockable.
    unsafe {
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, set, &mut old);
        old
    }
}

fn restore(old: &libc::sigset_t) {
    // SAFETY: as in `block`, setting a mask read from this thread earlier.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut());
    }
}

/// Pending signals of this thread and of the process.
fn pending() -> libc::sigset_t {
    // SAFETY: sigpending writes the pending set into a local.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut set);
        set
    }
}

fn contains(set: &libc::sigset_t, signal: libc::c_int) -> bool {
    // SAFETY: sigismember only reads the set.
    unsafe { libc::sigismember(set, signal) == 1 }
}

/// Starts a thread with every asynchronous signal blocked (the mask is inherited from this thread, which
/// blocks them just around the spawn, so there is no moment in which the new thread can take one).
pub fn spawn_quiet<T, F>(name: &str, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let old = block(&asynchronous_signals());
    let spawned = Builder::new().name(name.to_string()).spawn(f);
    restore(&old);
    spawned
}

/// While alive, SIGXFSZ and SIGPIPE are blocked on this thread; on drop, one of them that became pending
/// meanwhile (our own failed write) is discarded, then the previous mask is restored. Costs two system
/// calls and a check of the pending set; for the rare I/O collector code does on the job's threads.
pub struct Shield {
    old: libc::sigset_t,
    /// Those of [`WRITE_FAILURE_SIGNALS`] that were pending already: not ours to discard.
    pending_before: [bool; 2],
}

impl Shield {
    pub fn new() -> Shield {
        let old = block(&set_of(&WRITE_FAILURE_SIGNALS));
        let before = pending();
        Shield { old, pending_before: WRITE_FAILURE_SIGNALS.map(|s| contains(&before, s)) }
    }
}

impl Default for Shield {
    fn default() -> Self {
        Shield::new()
    }
}

impl Drop for Shield {
    fn drop(&mut self) {
        let now = pending();
        for (i, &signal) in WRITE_FAILURE_SIGNALS.iter().enumerate() {
            if contains(&now, signal) && !self.pending_before[i] {
                let one = set_of(&[signal]);
                let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                // SAFETY: takes the pending signal (it is blocked, so it cannot have been delivered) without
                // waiting; `one` and `zero` are locals.
                unsafe {
                    libc::sigtimedwait(&one, std::ptr::null_mut(), &zero);
                }
            }
        }
        restore(&self.old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked_here(signal: libc::c_int) -> bool {
        // SAFETY: reading this thread's mask into a local (a null new set changes nothing).
        let mask = unsafe {
            let mut m: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut m);
            m
        };
        contains(&mask, signal)
    }

    #[test]
    fn quiet_threads_block_asynchronous_signals_only_and_the_spawner_keeps_its_mask() {
        let before = blocked_here(libc::SIGUSR2);
        let t = spawn_quiet("quiet-test", || {
            [libc::SIGINT, libc::SIGTERM, libc::SIGXFSZ, libc::SIGPIPE, libc::SIGUSR1, libc::SIGCHLD]
                .iter()
                .all(|&s| blocked_here(s))
                && SYNCHRONOUS.iter().all(|&s| !blocked_here(s))
        })
        .unwrap();
        assert!(t.join().unwrap());
        assert_eq!(blocked_here(libc::SIGUSR2), before);
    }

    #[test]
    fn a_file_size_signal_raised_under_the_shield_is_discarded() {
        // On a thread of its own: the test harness's threads keep their masks.
        std::thread::spawn(|| {
            let shield = Shield::new();
            assert!(blocked_here(libc::SIGXFSZ) && blocked_here(libc::SIGPIPE));
            // SAFETY: raising a blocked signal at this thread only makes it pending.
            unsafe {
                libc::pthread_kill(libc::pthread_self(), libc::SIGXFSZ);
            }
            assert!(contains(&pending(), libc::SIGXFSZ));
            drop(shield);
            assert!(!contains(&pending(), libc::SIGXFSZ), "discarded before the mask came back");
            assert!(!blocked_here(libc::SIGXFSZ));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_write_to_a_pipe_nobody_reads_fails_with_epipe_under_the_shield() {
        std::thread::spawn(|| {
            let mut fds = [0; 2];
            // SAFETY: pipe writes two descriptors into the array; both are closed below.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            // SAFETY: closing the read end this test owns.
            unsafe { libc::close(fds[0]) };
            let shield = Shield::new();
            // SAFETY: writing one byte from a local to the write end this test owns.
            let n = unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) };
            let err = std::io::Error::last_os_error();
            drop(shield);
            // SAFETY: closing the write end this test owns.
            unsafe { libc::close(fds[1]) };
            assert_eq!((n, err.raw_os_error()), (-1, Some(libc::EPIPE)));
            assert!(!contains(&pending(), libc::SIGPIPE));
        })
        .join()
        .unwrap();
    }
}
