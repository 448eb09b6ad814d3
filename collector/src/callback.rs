//! The dump callback: the hot path. It runs on the runtime's dump thread; everything it does is a few
//! checks, one copy of the chunk into pre-allocated slots and a queue push. No parsing, no allocation, no
//! lock held across I/O, and normally no system call: a sleeping writer is woken only once a batch of
//! chunks waits for it (`pipeline::Waker`). Whatever happens, it returns 0 (the runtime must never see us
//! fail).

use crate::config::{PanicPoint, QueueFull};
use crate::counters::add;
use crate::entry_guard::guarded;
use crate::pipeline::{Msg, Pipeline};
use crate::pool::Slot;
use ascend_sys::{
    acldumpChunk, ACLDUMP_CHUNK_DATA_OFFSET, ACLDUMP_CHUNK_HEADER_LEN, ACL_DUMP_MAX_FILE_PATH_LENGTH,
};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// Queue room kept for drop notes beyond the slots (which bound the parts in flight).
pub const NOTE_ROOM: usize = 1024;

/// The function registered with `acldumpRegCallback`.
///
/// # Safety
/// Called by the runtime with `chunk` pointing at an `acldumpChunk` whose `dataBuf` holds `bufLen` bytes,
/// readable for the duration of the call (docs/CANN.md §3). Both are re-checked against `len`.
pub unsafe extern "C" fn dump_callback(chunk: *const acldumpChunk, len: i32) -> i32 {
    guarded("the dump callback", 0, |_| {
        let Some(p) = crate::pipeline::current() else { return 0 };
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: forwarded from this function's contract.
            unsafe { on_chunk(p, chunk, len) }
        }));
        if outcome.is_err() {
            add(&p.counters.dropped_panic, 1);
            p.disable("the dump callback panicked");
        }
        0
    })
}

/// Why a chunk was not queued.
enum Refused {
    Full,
    Inactive,
}

/// Handles one chunk for pipeline `p`. Public so benchmarks and tests can drive the hot path directly.
///
/// # Safety
/// As [`dump_callback`]: `chunk` is null or points at `len` readable bytes laid out as `acldumpChunk`.
pub unsafe fn on_chunk(p: &Pipeline, chunk: *const acldumpChunk, len: i32) {
    let c = &p.counters;
    add(&c.chunks, 1);
    if !p.accepting() {
        add(&c.dropped_inactive, 1);
        return;
    }
    if p.cfg.test_panic == Some(PanicPoint::Callback) {
        panic!("ACCUTRACE_TEST_PANIC=callback");
    }
    if chunk.is_null() || len < ACLDUMP_CHUNK_HEADER_LEN as i32 {
        add(&c.dropped_bad_length, 1);
        return;
    }
    // SAFETY: non-null and, per the contract, at least `len >= sizeof(acldumpChunk)` readable bytes.
    let header = unsafe { &*chunk };
    let buf_len = header.bufLen as usize;
    if len as usize != ACLDUMP_CHUNK_HEADER_LEN + buf_len {
        add(&c.dropped_bad_length, 1);
        return;
    }
    // SAFETY: fileName is a 4096-byte array inside the header we may read; c_char and u8 have one layout.
    let name_field: &[u8] = unsafe {
        std::slice::from_raw_parts(
            header.fileName.as_ptr().cast::<u8>(),
            ACL_DUMP_MAX_FILE_PATH_LENGTH as usize,
        )
    };
    let name_len = name_field.iter().position(|&b| b == 0).unwrap_or(0);
    if name_len == 0 {
        // No NUL (or an empty name): not a chunk we can attribute to a file.
        add(&c.dropped_bad_length, 1);
        return;
    }
    let name = &name_field[..name_len];
    // SAFETY: `len == sizeof + bufLen` was checked, so dataBuf (at DATA_OFFSET < sizeof) has bufLen readable
    // bytes: DATA_OFFSET + bufLen < len.
    let data =
        unsafe { std::slice::from_raw_parts(chunk.cast::<u8>().add(ACLDUMP_CHUNK_DATA_OFFSET), buf_len) };
    let last = header.isLastChunk != 0;
    let hash = accutrace_formats::stats::content_hash(name);
    let writer = p.router.route(hash, last, |w| p.senders[w].len());
    let (tx, waker) = (&p.senders[writer], &p.wakers[writer]);

    let room = p.pool.slot_size() - name_len;
    let parts = buf_len.div_ceil(room).max(1);
    if parts > 1 {
        add(&c.chunks_split, 1);
    }
    let mut offset = header.offset;
    for i in 0..parts {
        let piece = &data[(i * room).min(buf_len)..((i + 1) * room).min(buf_len)];
        let slot = match acquire(p) {
            Ok(s) => s,
            Err(why) => return refuse(p, writer, why, hash, last),
        };
        let mut slot = slot;
        p.pool.fill(&mut slot, &[name, piece]);
        let chunk_end = i + 1 == parts;
        let msg = Msg::Part {
            slot,
            name_len: name_len as u16,
            len: piece.len() as u32,
            hash,
            offset,
            last: last && chunk_end,
            chunk_end,
        };
        if let Err(e) = tx.try_send(msg) {
            // Full only if drop notes took the room the slots reserve, or the writer is gone.
            if let Msg::Part { slot, .. } = e.into_inner() {
                p.pool.give_back(slot);
            }
            return refuse(p, writer, Refused::Full, hash, last);
        }
        // No wake-up (a system call) per chunk: only when the writer sleeps on a batch (pipeline::Waker).
        waker.after_push(p.wake_batch, || tx.len());
        add(&c.bytes_in, piece.len() as u64);
        if offset >= 0 {
            offset += piece.len() as i64;
        }
    }
}

/// Counts a refused chunk and tells the file's writer, so the file is reported incomplete, not parsed.
fn refuse(p: &Pipeline, writer: usize, why: Refused, hash: u64, last: bool) {
    let c = &p.counters;
    let tx = &p.senders[writer];
    match why {
        Refused::Full => add(&c.dropped_queue_full, 1),
        Refused::Inactive => add(&c.dropped_inactive, 1),
    }
    // Keep the slots' share of the queue for parts: a note only goes in while there is room beyond it.
    if tx.len() + p.pool.capacity() >= tx.capacity().unwrap_or(usize::MAX)
        || tx.try_send(Msg::Dropped { hash, last }).is_err()
    {
        add(&c.drop_notes_lost, 1);
    } else {
        p.wakers[writer].after_push(p.wake_batch, || tx.len());
    }
}

/// A free slot under the queue-full policy.
fn acquire(p: &Pipeline) -> Result<Slot, Refused> {
    if let Some(s) = p.pool.take() {
        return Ok(s);
    }
    if p.cfg.queue_full == QueueFull::Drop {
        return Err(Refused::Full);
    }
    // Block: spin briefly, then sleep in short steps, until a writer frees a slot. Give up only if the
    // collector stops (disabled or finishing), so a dead writer can never hang the runtime.
    let started = Instant::now();
    add(&p.counters.block_waits, 1);
    // Slots come back only from writers: make sure none sleeps on a queue below its wake batch.
    for w in &p.wakers {
        w.wake();
    }
    let backoff = crossbeam_utils_backoff::Backoff::new();
    let result = loop {
        if let Some(s) = p.pool.take() {
            break Ok(s);
        }
        if !p.accepting() {
            break Err(Refused::Inactive);
        }
        if backoff.is_completed() {
            std::thread::sleep(Duration::from_micros(50));
        } else {
            backoff.snooze();
        }
    };
    add(&p.counters.block_wait_ns, started.elapsed().as_nanos() as u64);
    result
}

/// The few lines of crossbeam's exponential backoff we need, without another dependency.
mod crossbeam_utils_backoff {
    use std::cell::Cell;

    const SPIN_LIMIT: u32 = 6;
    const YIELD_LIMIT: u32 = 10;

    pub struct Backoff {
        step: Cell<u32>,
    }

    impl Backoff {
        pub fn new() -> Self {
            Backoff { step: Cell::new(0) }
        }

        /// Spins 2^step times while step is small, then yields the thread.
        pub fn snooze(&self) {
            let step = self.step.get();
            if step <= SPIN_LIMIT {
                for _ in 0..1u32 << step {
                    std::hint::spin_loop();
                }
            } else {
                std::thread::yield_now();
            }
            if step <= YIELD_LIMIT {
                self.step.set(step + 1);
            }
        }

        pub fn is_completed(&self) -> bool {
            self.step.get() > YIELD_LIMIT
        }
    }
}
