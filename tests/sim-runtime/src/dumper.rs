//! The runtime's own dump thread: it writes dump files to disk, or slices them into chunks for the
//! registered callback, never on the caller's (compute) thread (docs/CANN.md §3).
//!
//! The compute thread hands over batches of finished files through a bounded channel, so a slow callback
//! backs the device up instead of growing memory without bound, as on real hardware. [`drain`] waits until
//! everything sent so far has been delivered: aclmdlFinalizeDump, aclrtSynchronizeDevice, aclFinalize and
//! acldumpUnregCallback use it so that a caller can rely on every file having arrived.

use crate::chunker::{chunk_size_from_env, ChunkBuf, Interleaver, OutFile, INTERLEAVE_WINDOW};
use accutrace_formats::dump::{parse_file_name, FileKind};
use ascend_sys::AcldumpCallbackFn;
use crossbeam_channel::{bounded, Receiver, Sender};
use std::sync::{Mutex, MutexGuard};
use std::thread::{JoinHandle, ThreadId};

/// Where a batch goes.
#[derive(Clone, Copy, Debug)]
pub enum Delivery {
    /// Chunks to this callback (registered when the files were produced).
    Callback(AcldumpCallbackFn),
    /// Files on disk at their paths.
    Disk,
}

enum Job {
    Files(Vec<OutFile>, Delivery),
    /// Acknowledged once every earlier job is delivered.
    Flush(Sender<()>),
    Stop,
}

struct Dumper {
    tx: Sender<Job>,
    thread: ThreadId,
    handle: JoinHandle<()>,
}

static DUMPER: Mutex<Option<Dumper>> = Mutex::new(None);

fn lock() -> MutexGuard<'static, Option<Dumper>> {
    // A panic elsewhere must not make the dumper unusable: the state is a handle, always consistent.
    DUMPER.lock().unwrap_or_else(|e| e.into_inner())
}

/// Queues a batch of files, starting the dump thread on first use. Blocks while the queue is full.
pub fn send(files: Vec<OutFile>, delivery: Delivery) {
    if files.is_empty() {
        return;
    }
    let tx = {
        let mut guard = lock();
        let dumper = guard.get_or_insert_with(start);
        dumper.tx.clone()
    };
    // The lock is released before a possibly blocking send: the dump thread never needs it, but a callback
    // calling back into the runtime might.
    if tx.send(Job::Files(files, delivery)).is_err() {
        eprintln!("sim-ascendcl: dump thread is gone; dropping a batch of dump files");
    }
}

/// Waits until everything queued so far has been delivered. A no-op on the dump thread itself (a callback
/// that calls aclrtSynchronizeDevice must not wait for itself).
pub fn drain() {
    let (tx, on_dump_thread) = match lock().as_ref() {
        Some(d) => (d.tx.clone(), d.thread == std::thread::current().id()),
        None => return,
    };
    if on_dump_thread {
        return;
    }
    let (ack_tx, ack_rx) = bounded(1);
    if tx.send(Job::Flush(ack_tx)).is_ok() {
        let _ = ack_rx.recv();
    }
}

/// Drains and stops the dump thread (aclFinalize); the next [`send`] starts a new one.
pub fn shutdown() {
    drain();
    let Some(dumper) = lock().take() else { return };
    if dumper.thread == std::thread::current().id() {
        return;
    }
    let _ = dumper.tx.send(Job::Stop);
    let _ = dumper.handle.join();
}

fn start() -> Dumper {
    let (tx, rx) = bounded::<Job>(8);
    let chunk_size = chunk_size_from_env();
    let handle = std::thread::Builder::new()
        .name("sim-acl-dump".into())
        .spawn(move || run(rx, chunk_size))
        .expect("spawn the dump thread");
    Dumper { tx, thread: handle.thread().id(), handle }
}

fn run(rx: Receiver<Job>, chunk_size: usize) {
    let mut buf = ChunkBuf::new(chunk_size);
    let mut warned = false;
    while let Ok(job) = rx.recv() {
        match job {
            Job::Files(files, Delivery::Disk) => {
                for file in files {
                    if let Err(e) = write_file(&file) {
                        if !std::mem::replace(&mut warned, true) {
                            eprintln!("sim-ascendcl: cannot write dump file {}: {e}", file.path.display());
                        }
                    }
                }
            }
            Job::Files(files, Delivery::Callback(cb)) => deliver(files, cb, chunk_size, &mut buf),
            Job::Flush(ack) => {
                let _ = ack.send(());
            }
            Job::Stop => break,
        }
    }
}

fn deliver(files: Vec<OutFile>, cb: AcldumpCallbackFn, chunk_size: usize, buf: &mut ChunkBuf) {
    let mut il = Interleaver::new(chunk_size);
    let mut files = files.into_iter().map(with_callback_terminator);
    loop {
        // Keep the window full so that up to INTERLEAVE_WINDOW files are in flight at once.
        while il.len() < INTERLEAVE_WINDOW {
            match files.next() {
                Some(f) => il.push(f),
                None => break,
            }
        }
        let more = il.next_chunk(|name, data, last| {
            buf.fill(name, data, last);
            // SAFETY: `cb` was registered through acldumpRegCallback with the acldumpCallback signature;
            // the chunk pointer is valid, aligned and initialised for `callback_len` bytes for the whole
            // call, and the callback contract (docs/CANN.md §3) is that it copies what it needs and returns.
            let _ = unsafe { cb(buf.as_ptr(), buf.callback_len()) };
        });
        if !more {
            break;
        }
    }
}

/// The real runtime turns the device's statistics into CSV text on its dump thread and hands that text to a
/// callback as a C string: `bufLen` counts the terminating NUL (hicann/runtime
/// `src/dfx/adump/adump/adx_dump_record.cpp`, `DumpDataToCallback`). On disk the file has no NUL.
fn with_callback_terminator(mut file: OutFile) -> OutFile {
    let base = file.path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if parse_file_name(base).is_ok_and(|n| n.kind == FileKind::StatsCsv) {
        file.bytes.push(0);
    }
    file
}

fn write_file(file: &OutFile) -> std::io::Result<()> {
    if let Some(dir) = file.path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&file.path, &file.bytes)
}
