//! The default stream in asynchronous mode: `SIM_ACL_ASYNC_DEPTH=N` (N >= 1) makes `aclopExecuteV2` return
//! before its op has run, as torch_npu's launches do on a real NPU (docs/CANN.md §5). Unset or 0: every
//! launch runs and dumps before the call returns (the default).
//!
//! A launch is queued on the stream; a device thread runs it once N later launches are queued behind it (a
//! device busy with earlier kernels, the host running N launches ahead: deterministic, unlike a timed
//! device) or when the host synchronizes. Running a launch hands its dump files to the runtime's dump
//! thread ([`crate::dumper`]), which delivers them to the callback later still.
//!
//! - `aclrtSynchronizeStream`, `aclrtSynchronizeDevice`, `aclrtResetDevice` and `aclFinalize` wait until
//!   every launch queued so far has run ([`synchronize`]), then until its dump is delivered.
//! - `aclmdlFinalizeDump` and `acldumpUnregCallback` drop the dumps of the launches still queued
//!   ([`drop_pending_dumps`]) and deliver only what was handed over already, as adump's
//!   AdxDataDumpServerUnInit stops the receiving server and drains only what the host holds (hicann/runtime
//!   `src/dfx/adump/adump/host/adx_datadump_server.cpp`). The ops' outputs are not lost: the simulated
//!   device writes them at launch (see `single_op`); only their dumps are.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::ThreadId;

/// The environment variable that turns asynchronous launches on: how many launches the host runs ahead.
pub const ASYNC_DEPTH_VAR: &str = "SIM_ACL_ASYNC_DEPTH";

/// What running a launch does on the device thread: hand its dump to the dump thread (`None`: nothing to
/// dump, the launch only occupies its place in the stream).
pub type Work = Box<dyn FnOnce() + Send>;

/// Launches queued beyond the depth before a launch waits for the device, as a full task queue makes a real
/// host wait (a dump thread held up by a slow callback must not let the queue grow without bound).
const QUEUE_ROOM: usize = 1024;

#[derive(Default)]
struct Queue {
    launches: VecDeque<Option<Work>>,
    /// Launches queued since the process started: the next launch's sequence number.
    launched: u64,
    /// Launches with a sequence number below this run regardless of the depth (a synchronization).
    run_before: u64,
    /// The device thread is running a launch it took off the queue.
    running: bool,
    device_thread: Option<ThreadId>,
}

impl Queue {
    fn first_queued(&self) -> u64 {
        self.launched - self.launches.len() as u64
    }

    /// Whether the device runs the first queued launch now.
    fn runnable(&self, depth: usize) -> bool {
        !self.launches.is_empty() && (self.launches.len() > depth || self.first_queued() < self.run_before)
    }
}

static QUEUE: Mutex<Option<Queue>> = Mutex::new(None);
/// Signalled when a launch is queued or a synchronization begins (the device thread waits on it).
static QUEUED: Condvar = Condvar::new();
/// Signalled when the device thread finishes a launch (synchronizations and full queues wait on it).
static RAN: Condvar = Condvar::new();

fn lock() -> MutexGuard<'static, Option<Queue>> {
    // A panic elsewhere must not make the stream unusable: each field stays meaningful on its own.
    QUEUE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The configured depth: `Some(N)` in asynchronous mode.
pub fn async_depth() -> Option<usize> {
    static DEPTH: OnceLock<Option<usize>> = OnceLock::new();
    *DEPTH.get_or_init(|| {
        let v = std::env::var(ASYNC_DEPTH_VAR).ok()?;
        match v.trim().parse::<usize>() {
            Ok(0) => None,
            Ok(n) => Some(n),
            Err(_) => {
                eprintln!("sim-ascendcl: {ASYNC_DEPTH_VAR}={v:?} is not a number of launches; launches stay synchronous");
                None
            }
        }
    })
}

/// The environment variable that makes `aclrtSynchronizeDevice` fail (`fail`), as a faulty device's does:
/// it answers ACL_ERROR_FAILURE at once, waiting for nothing.
pub const SYNC_DEVICE_VAR: &str = "SIM_ACL_SYNC_DEVICE";

/// Whether `aclrtSynchronizeDevice` fails (`SIM_ACL_SYNC_DEVICE=fail`).
pub fn device_sync_fails() -> bool {
    std::env::var(SYNC_DEVICE_VAR).is_ok_and(|v| v.trim() == "fail")
}

/// Runs `work` as the device would: at once when launches are synchronous, else queued behind the launches
/// before it.
pub fn launch(work: Option<Work>) {
    let Some(depth) = async_depth() else {
        if let Some(w) = work {
            w();
        }
        return;
    };
    let mut guard = lock();
    let q = guard.get_or_insert_with(Queue::default);
    if q.device_thread.is_none() {
        match std::thread::Builder::new().name("sim-acl-device".into()).spawn(move || device(depth)) {
            Ok(h) => q.device_thread = Some(h.thread().id()),
            Err(e) => {
                eprintln!("sim-ascendcl: cannot start the device thread ({e}); this launch runs at once");
                drop(guard);
                if let Some(w) = work {
                    w();
                }
                return;
            }
        }
    }
    q.launches.push_back(work);
    q.launched += 1;
    QUEUED.notify_all();
    // A full queue holds the host back (never the device or dump thread, which would wait for themselves).
    while may_wait(guard.as_ref()) && guard.as_ref().is_some_and(|q| q.launches.len() > depth + QUEUE_ROOM) {
        guard = RAN.wait(guard).unwrap_or_else(|e| e.into_inner());
    }
}

fn device(depth: usize) {
    let mut guard = lock();
    loop {
        let work = match guard.as_mut() {
            Some(q) if q.runnable(depth) => {
                q.running = true;
                q.launches.pop_front().flatten()
            }
            _ => {
                guard = QUEUED.wait(guard).unwrap_or_else(|e| e.into_inner());
                continue;
            }
        };
        drop(guard);
        if let Some(w) = work {
            // The work is the runtime's own dump code, which catches nothing: keep the device alive.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(w)).is_err() {
                eprintln!("sim-ascendcl: a launch's dump panicked on the device thread; its dump is lost");
            }
        }
        guard = lock();
        if let Some(q) = guard.as_mut() {
            q.running = false;
        }
        RAN.notify_all();
    }
}

/// Whether this thread may wait for the device: not the device thread itself, nor the dump thread (a dump
/// callback calling back into the runtime), which the device may be waiting for.
fn may_wait(q: Option<&Queue>) -> bool {
    let me = std::thread::current().id();
    q.and_then(|q| q.device_thread) != Some(me) && !crate::dumper::on_dump_thread()
}

/// Waits until every launch queued so far has run (their dumps handed to the dump thread, not yet
/// delivered: [`crate::dumper::drain`] waits for that). A no-op in synchronous mode.
pub fn synchronize() {
    let mut guard = lock();
    if !may_wait(guard.as_ref()) {
        return;
    }
    let Some(q) = guard.as_mut() else { return };
    q.run_before = q.launched;
    let until = q.launched;
    QUEUED.notify_all();
    while guard.as_ref().is_some_and(|q| q.running || (!q.launches.is_empty() && q.first_queued() < until)) {
        guard = RAN.wait(guard).unwrap_or_else(|e| e.into_inner());
    }
}

/// Drops the dumps of every launch still queued (the device has not produced them: adump's server stops
/// before they arrive) and waits for the launch the device is running to hand its dump over. Returns how
/// many launches lost their dump.
pub fn drop_pending_dumps() -> usize {
    let mut guard = lock();
    let Some(q) = guard.as_mut() else { return 0 };
    let dropped = q.launches.iter().filter(|w| w.is_some()).count();
    // Their places in the stream go too: the queue is as the device leaves it, every launch run.
    q.launches.clear();
    RAN.notify_all();
    if may_wait(guard.as_ref()) {
        while guard.as_ref().is_some_and(|q| q.running) {
            guard = RAN.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
    }
    dropped
}
