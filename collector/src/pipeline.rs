//! The running collector of a process: slot pool, queues to the writer threads, the stream writer,
//! counters, and its phase. Created at activation, then leaked: the dump callback reaches it through a
//! plain pointer that stays valid for the life of the process, whatever thread is finishing it.

use crate::config::Config;
use crate::counters::Counters;
use crate::pool::{Slot, SlotPool};
use accutrace_formats::capture::{Manifest, StreamWriter};
use ascend_sys::AclLibrary;
use crossbeam_channel::Sender;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;

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
    /// One queue per writer thread; a file always goes to the same one (by name hash).
    pub senders: Vec<Sender<Msg>>,
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
