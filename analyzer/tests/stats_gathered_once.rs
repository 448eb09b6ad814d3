//! What `overflow`, `watch` and `ranks` gather of a capture's stored statistics holds each tensor's
//! statistics once (#18: memory must not grow by copies per tensor): the bytes held are counted by this
//! test binary's own allocator, as `formats/tests/msprobe_hash_memory.rs` counts them.

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use analyzer::overflow::gather_stats;
use analyzer::problems::InputProblems;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use support::RunWriter;

/// The system allocator, counting what the process holds and the most it held since the last reset:
/// process-wide, as the reads may run on other threads (this binary has one test).
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

#[test]
fn stored_statistics_are_gathered_without_a_second_copy() {
    const OPS: u64 = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let mut run = RunWriter::create(&dir.path().join("run"), 1 << 24);
    for k in 0..OPS {
        run.op(k, "Add");
        for (io, index) in [(Io::Input, 0), (Io::Input, 1), (Io::Output, 0)] {
            run.tensor(io, index, DType::FLOAT, &(k as f32).to_le_bytes());
        }
    }
    let source = analyzer::sources::open(&run.finish()).unwrap();
    let ops: Vec<usize> = (0..source.index().ops.len()).collect();
    let tensors = source.index().tensors.len();
    let mut problems = InputProblems::default();
    let before = HELD.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let stats = gather_stats(&*source, &ops, &mut problems, false);
    let peak = (PEAK.load(Ordering::Relaxed) - before) as usize;
    assert_eq!(stats.len(), tensors);
    assert!(problems.is_empty());
    // The map: a 96-byte `TensorStats` and its key per tensor, in B-tree nodes filled in order (205 bytes
    // a tensor, the tensor list included). With every tensor's statistics carried through the reads'
    // results as well, 301.
    assert!(peak / tensors <= 240, "{peak} bytes held for {tensors} tensors' statistics");
}
