//! What compare holds of its measured pairs is one row a pair (#18: memory must not grow by copies per
//! tensor): the bytes held are counted by this test binary's own allocator, as `stats_gathered_once.rs`
//! counts them.

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use analyzer::compare::{compare, CompareOptions, CompareRow};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use support::RunWriter;

/// The system allocator, counting what the process holds and the most it held since the last reset:
/// process-wide, as the pairs are measured on other threads (this binary has one test).
struct Counting;

static HELD: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn count(bytes: isize) {
    let held = HELD.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(held, Ordering::Relaxed);
}

// SAFETY: every call goes to the system allocator with the caller's arguments unchanged; the counting
// beside it neither allocates nor touches the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A run of `ops` ops of two inputs and an output, one f32 each, every record's value its own (no pair
/// repeats another), plus `offset` (the benchmark's differ: every pair is read and measured).
fn write_run(path: &std::path::Path, ops: u64, offset: f32) -> std::path::PathBuf {
    let mut run = RunWriter::create(path, 1 << 24);
    for k in 0..ops {
        run.op(k, "Add");
        for (n, (io, index)) in [(Io::Input, 0), (Io::Input, 1), (Io::Output, 0)].into_iter().enumerate() {
            let value = (3 * k + n as u64) as f32 + offset;
            run.tensor(io, index, DType::FLOAT, &value.to_le_bytes());
        }
    }
    run.finish()
}

#[test]
fn each_measured_pair_is_held_once_as_its_row() {
    const OPS: u64 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let target = analyzer::sources::open(&write_run(&dir.path().join("target"), OPS, 0.0)).unwrap();
    let bench = analyzer::sources::open(&write_run(&dir.path().join("bench"), OPS, 0.5)).unwrap();
    let before = HELD.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let comparison = compare(&*target, &*bench, &CompareOptions::default());
    let peak = (PEAK.load(Ordering::Relaxed) - before) as usize;
    let pairs = comparison.rows.len();
    assert_eq!(pairs, 3 * OPS as usize);
    assert!(comparison.problems.is_empty(), "{:?}", comparison.problems);
    assert!(comparison.rows.iter().all(|r| r.judged()), "every pair is read and measured");
    // The rows (a `CompareRow` a pair) and compare's own tables of the pairs (matching, hashes, msprobe's
    // table, now the peak): 2,647 bytes a pair. With every result carried through a table of results (up
    // to three at once while one window of every pair was measured) and then copied into the rows, 4,562.
    let row = std::mem::size_of::<CompareRow>();
    assert!(peak / pairs <= 3_000, "{peak} bytes held for {pairs} pairs (a row is {row} bytes)");
}
