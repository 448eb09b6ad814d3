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

/// Whether the caller is the dump thread (a dump callback calling back into the runtime).
pub fn on_dump_thread() -> bool {
    lock().as_ref().is_some_and(|d| d.thread == std::thread::current().id())
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
    let mut files = files.into_iter();
    let call = |buf: &ChunkBuf| {
        // SAFETY: `cb` was registered through acldumpRegCallback with the acldumpCallback signature;
        // the chunk pointer is valid, aligned and initialised for `callback_len` bytes for the whole
        // call, and the callback contract (docs/CANN.md §3) is that it copies what it needs and returns.
        let _ = unsafe { cb(buf.as_ptr(), buf.callback_len()) };
    };
    loop {
        // Keep the window full so that up to INTERLEAVE_WINDOW files are in flight at once.
        while il.len() < INTERLEAVE_WINDOW {
            match files.next() {
                Some(f) if is_stats_csv(&f) => {
                    use std::os::unix::ffi::OsStrExt;
                    let name = f.path.as_os_str().as_bytes();
                    for part in stats_csv_parts(&f.bytes) {
                        call(&ChunkBuf::of(name, &part, true));
                    }
                }
                Some(f) => il.push(f),
                None => break,
            }
        }
        let more = il.next_chunk(|name, data, last| {
            buf.fill(name, data, last);
            call(buf);
        });
        if !more {
            break;
        }
    }
}

fn is_stats_csv(file: &OutFile) -> bool {
    let base = file.path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    parse_file_name(base).is_ok_and(|n| n.kind == FileKind::StatsCsv)
}

/// Tensors' rows per statistics CSV part: the device's statistics record holds at most 10 tensors
/// (hicann/runtime `adx_dump_record.h` `MAX_STATS_RESULT_NUM`).
pub const STATS_ROWS_PER_PART: usize = 10;

/// A statistics CSV as the real runtime hands it to a callback (hicann/runtime
/// `src/dfx/adump/adump/adx_dump_record.cpp`, `GenerateFileData`, `DumpDataToCallback`): parts of at most
/// [`STATS_ROWS_PER_PART`] rows, the header in the first only, each a C string (`bufLen` counts the NUL)
/// sent as one chunk marked last. On disk the file is whole and has no NUL.
pub fn stats_csv_parts(csv: &[u8]) -> Vec<Vec<u8>> {
    let mut lines = csv.split_inclusive(|&b| b == b'\n');
    let header = lines.next().unwrap_or_default();
    let rows: Vec<&[u8]> = lines.filter(|l| !l.iter().all(u8::is_ascii_whitespace)).collect();
    let mut parts: Vec<Vec<u8>> = rows.chunks(STATS_ROWS_PER_PART).map(|rows| rows.concat()).collect();
    if parts.is_empty() {
        parts.push(Vec::new());
    }
    parts[0].splice(0..0, header.iter().copied());
    for part in &mut parts {
        part.push(0);
    }
    parts
}

fn write_file(file: &OutFile) -> std::io::Result<()> {
    if let Some(dir) = file.path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&file.path, &file.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stats_csv_of_more_than_10_rows_goes_in_parts_the_header_in_the_first() {
        let rows: String = (0..13).map(|i| format!("Input,{i},4\n")).collect();
        let csv = format!("Input/Output,Index,Data Size\n{rows}");
        let parts = stats_csv_parts(csv.as_bytes());
        assert_eq!(parts.len(), 2);
        let text = |p: &[u8]| String::from_utf8(p.to_vec()).unwrap();
        assert!(text(&parts[0]).starts_with("Input/Output,Index,Data Size\nInput,0,4\n"));
        assert!(text(&parts[0]).ends_with("Input,9,4\n\0"));
        assert_eq!(text(&parts[1]), "Input,10,4\nInput,11,4\nInput,12,4\n\0");
        // Ten rows or fewer: one part, whole, as before.
        assert_eq!(stats_csv_parts(b"H\nInput,0,4\n"), [b"H\nInput,0,4\n\0".to_vec()]);
    }
}
