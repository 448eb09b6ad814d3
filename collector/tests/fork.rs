//! A forked child starts with no collector: it inherits neither the parent's pipeline nor its threads.
//! (Its own `aclInit` would start a fresh stream; the e2e tests cover activation.)

use collector::activate::standalone;
use collector::config::Config;
use collector::finish::{finish, End};
use collector::pipeline::current;

#[test]
fn a_forked_child_starts_inactive_and_the_parent_keeps_its_capture() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config { dir: dir.path().join("run"), segment_size: 64 << 10, ..Config::default() };
    let p = standalone(cfg).unwrap();
    assert!(current().is_some());
    // SAFETY: the child only reads an atomic and calls _exit (async-signal-safe), as required after fork
    // in a multi-threaded process.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = if current().is_none() { 0 } else { 1 };
        // SAFETY: ends the child without running the parent's exit handlers or destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child saw the parent's collector"
    );
    assert!(current().is_some(), "the parent is unaffected");
    finish(p, End::Finalize);
    assert!(current().is_none());
    let m = accutrace_formats::capture::Manifest::read(&dir.path().join("run")).unwrap();
    assert!(m.streams[0].sealed);
}
