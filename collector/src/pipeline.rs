//! The running collector of a process: slot pool, queues to the writer threads, the stream writer,
//! counters, and its phase. Created at activation, then leaked: the dump callback reaches it through a
//! plain pointer that stays valid for the life of the process, whatever thread is finishing it.

use crate::config::Config;
use crate::counters::Counters;
use crate::pool::{Slot, SlotPool};
use crate::routing::Router;
use accutrace_formats::capture::{Manifest, StreamWriter};
use ascend_sys::AclLibrary;
use crossbeam_channel::Sender;
use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// One message to a writer thread.
pub enum Msg {
    /// A chunk, or one part of a chunk larger than a slot: the slot holds `name_len` bytes of file name and
    /// then `len` bytes of payload.
    Part {
        slot: Slot,
        name_len: u16,
        len: u32,
        /// Hash of the file name (routing and drop notes).
        hash: u64,
        /// -1 (append) or the position of this part in the file.
        offset: i64,
        /// The file's last bytes (isLastChunk, on the chunk's last part).
        last: bool,
        /// The chunk's last part: the chunk counts as written when this one is consumed.
        chunk_end: bool,
    },
    /// A chunk of the file with this name hash was dropped.
    Dropped { hash: u64, last: bool },
    /// Drain: finish what is pending and exit.
    Stop,
}

/// Phases of a pipeline. Chunks are accepted only while `RUNNING`.
pub const STARTING: u8 = 0;
pub const RUNNING: u8 = 1;
pub const STOPPED: u8 = 2;

pub struct Pipeline {
    pub cfg: Config,
    /// The run directory (absolute).
    pub run_dir: PathBuf,
    pub pool: SlotPool,
    /// One queue per writer thread; a file always goes to the same one (`router`).
    pub senders: Vec<Sender<Msg>>,
    /// Which writer (index into `senders`) gets each file.
    pub router: Router,
    /// How each writer thread sleeps and is woken (same index as `senders`).
    pub wakers: Vec<Waker>,
    /// The callback wakes a sleeping writer once its queue holds this many messages (see [`Waker`]).
    pub wake_batch: usize,
    pub counters: Counters,
    /// `None` once sealed.
    pub stream: Mutex<Option<StreamWriter>>,
    /// The stream's directory name (manifest key).
    pub stream_dir: String,
    pub phase: AtomicU8,
    /// Set on any internal failure: the collector stops recording and only passes through.
    pub disabled: AtomicBool,
    /// Set by the first `finish`; later ones return at once.
    pub finishing: AtomicBool,
    pub threads: Mutex<Vec<JoinHandle<()>>>,
    /// The attached runtime (keeps its functions loaded); `None` for a standalone pipeline.
    pub acl: Option<AclLibrary>,
    /// The manifest fields fixed at start (command, environment, configuration).
    pub manifest_base: Manifest,
    /// Device float overflow mode, once read.
    pub overflow_mode: Mutex<Option<String>>,
    /// Steps in eager mode: the hook's step and the marker count.
    pub steps: crate::step_state::Steps,
}

impl Pipeline {
    /// Whether the callback should take chunks now.
    pub fn accepting(&self) -> bool {
        self.phase.load(Ordering::Acquire) == RUNNING && !self.disabled.load(Ordering::Relaxed)
    }

    pub fn is_disabled(&self) -> bool {
        self.disabled.load(Ordering::Relaxed)
    }

    /// Turns the collector into a pass-through, logging `why` once.
    pub fn disable(&self, why: &str) {
        if !self.disabled.swap(true, Ordering::AcqRel) {
            crate::log(&format!("{why}; the collector is disabled, the job continues without it"));
        }
    }

    pub fn stream(&self) -> MutexGuard<'_, Option<StreamWriter>> {
        // A panic while holding the lock leaves the writer usable or not; either way the collector is
        // disabled by then, and sealing what exists is still the best we can do.
        self.stream.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The callback wakes a sleeping writer once its queue holds this many messages, at most.
pub const MAX_WAKE_BATCH: usize = 8;
/// How long a writer keeps polling its empty queue before it sleeps (spinning, then yielding the CPU).
pub const SPIN: Duration = Duration::from_micros(50);
/// While chunks came recently, a sleeping writer also wakes on its own this often (so a queue below the
/// wake batch is drained without a wake-up from the callback).
pub const BUSY_NAP: Duration = Duration::from_millis(1);
/// "Recently": the last message is at most this old; after that a writer sleeps until woken or until its
/// manifest refresh is due.
pub const BUSY_WINDOW: Duration = Duration::from_millis(20);

/// Wake batch for a pool of `slots` slots: small enough that the slots cannot all sit in queues of sleeping
/// writers (the callback also wakes every writer before it waits for a slot), at most [`MAX_WAKE_BATCH`].
pub fn wake_batch(slots: usize, writers: usize) -> usize {
    (slots / (4 * writers.max(1))).clamp(1, MAX_WAKE_BATCH)
}

/// A writer's sleep, and the callback's way to end it without a system call per chunk.
///
/// Writer: finds its queue empty, polls it for [`SPIN`] (only right after work), then sets `sleeping`,
/// checks the queue once more and parks (with a timeout). Callback: after queueing, reads `sleeping` and
/// unparks the writer only if it sleeps and its queue has reached [`Pipeline::wake_batch`]. Both sides put a SeqCst fence between their
/// write (the flag; the message) and their read (the queue; the flag), so at least one of them sees the
/// other's: a writer never sleeps past a full batch. Below the batch, messages wait for the writer's
/// timeout ([`BUSY_NAP`] while busy): capture latency does not matter, only that chunks keep flowing
/// and slots come back, and a streaming writer then takes many chunks per wake-up.
#[derive(Default)]
pub struct Waker {
    sleeping: AtomicBool,
    /// The writer thread, set by itself when it starts.
    thread: OnceLock<Thread>,
}

impl Waker {
    /// Called by the writer thread at its start.
    pub fn register(&self) {
        let _ = self.thread.set(std::thread::current());
    }

    /// Callback side, after queueing: wakes the writer if it sleeps and `queued()` reaches `batch`. No
    /// system call unless it wakes a parked thread; no allocation.
    pub fn after_push(&self, batch: usize, queued: impl FnOnce() -> usize) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) && queued() >= batch {
            self.wake();
        }
    }

    /// Wakes the writer now if it sleeps (Stop, a callback about to wait for a slot).
    pub fn wake(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }

    /// Writer side: sleeps until woken or `until`, unless `has_work()` (checked after announcing the
    /// sleep). A spurious or early return is harmless: the caller polls again.
    pub fn sleep(&self, until: Instant, has_work: impl FnOnce() -> bool) {
        self.sleeping.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if !has_work() {
            let now = Instant::now();
            if until > now {
                std::thread::park_timeout(until - now);
            }
        }
        self.sleeping.store(false, Ordering::Relaxed);
    }
}

// ---- the process's pipeline ----

/// The running pipeline of this process (null when none). Pipelines are leaked, never freed, so a
/// pointer loaded here stays valid even while another thread finishes the capture.
static CURRENT: AtomicPtr<Pipeline> = AtomicPtr::new(std::ptr::null_mut());
/// An activation is in progress or done in this process (reset at fork and after a finished capture).
static ACTIVATING: AtomicBool = AtomicBool::new(false);

/// The running pipeline, if any.
pub fn current() -> Option<&'static Pipeline> {
    let p = CURRENT.load(Ordering::Acquire);
    // SAFETY: non-null values come from `make_current`, whose pipelines are leaked and never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Whether a pipeline is running: one atomic load, safe in a signal handler.
pub(crate) fn is_running() -> bool {
    !CURRENT.load(Ordering::Acquire).is_null()
}

/// Makes a started (leaked) pipeline the process's current one.
pub(crate) fn make_current(p: &'static Pipeline) {
    CURRENT.store(p as *const Pipeline as *mut Pipeline, Ordering::Release);
}

/// Claims this process's activation: false when one is already in progress or done.
pub(crate) fn claim_activation() -> bool {
    !ACTIVATING.swap(true, Ordering::AcqRel)
}

/// After `p` was sealed: it is no longer current, and a later `aclInit` may activate again.
pub(crate) fn retire(p: &'static Pipeline) {
    let _ = CURRENT.compare_exchange(
        p as *const Pipeline as *mut Pipeline,
        std::ptr::null_mut(),
        Ordering::AcqRel,
        Ordering::Relaxed,
    );
    ACTIVATING.store(false, Ordering::Release);
}

/// In a forked child: forget the parent's pipeline (its threads do not exist here). Atomics only.
pub(crate) fn forget_in_child() {
    CURRENT.store(std::ptr::null_mut(), Ordering::Release);
    ACTIVATING.store(false, Ordering::Release);
}
