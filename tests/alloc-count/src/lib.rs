//! The system allocator, counting the bytes held, for tests that bound what code holds (#18: memory must
//! not grow with what is read). A test binary installs one of the two as its global allocator:
//!
//! ```text
//! #[global_allocator]
//! static ALLOCATOR: alloc_count::PerThread = alloc_count::PerThread;
//! let (result, peak) = alloc_count::PerThread::peak_while(|| work());
//! ```
//!
//! [`PerThread`] counts what each thread holds: tests of one binary run side by side on threads of their
//! own. [`Process`] counts the whole process, for work spread over other threads (a pool): its binary must
//! then hold a single test, or the others' allocations count too.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

/// Counts what the current thread holds, and the most it held.
pub struct PerThread;

/// Counts what the whole process holds, and the most it held.
pub struct Process;

thread_local! {
    static THREAD_HELD: Cell<isize> = const { Cell::new(0) };
    static THREAD_PEAK: Cell<isize> = const { Cell::new(0) };
}

static PROCESS_HELD: AtomicIsize = AtomicIsize::new(0);
static PROCESS_PEAK: AtomicIsize = AtomicIsize::new(0);

impl PerThread {
    fn count(bytes: isize) {
        // `try_with`: nothing is counted while the thread's locals are torn down. Const thread-locals
        // without destructors never allocate, so this cannot recurse into the allocator.
        let _ = THREAD_HELD.try_with(|held| {
            held.set(held.get() + bytes);
            let _ = THREAD_PEAK.try_with(|peak| peak.set(peak.get().max(held.get())));
        });
    }

    /// What `f` returned, and the most this thread held beyond what it held before, while `f` ran.
    pub fn peak_while<R>(f: impl FnOnce() -> R) -> (R, usize) {
        let before = THREAD_HELD.with(Cell::get);
        THREAD_PEAK.with(|peak| peak.set(before));
        let r = f();
        (r, (THREAD_PEAK.with(Cell::get) - before).max(0) as usize)
    }
}

impl Process {
    fn count(bytes: isize) {
        let held = PROCESS_HELD.fetch_add(bytes, Ordering::Relaxed) + bytes;
        PROCESS_PEAK.fetch_max(held, Ordering::Relaxed);
    }

    /// What `f` returned, and the most the process held beyond what it held before, while `f` ran.
    pub fn peak_while<R>(f: impl FnOnce() -> R) -> (R, usize) {
        let before = PROCESS_HELD.load(Ordering::Relaxed);
        PROCESS_PEAK.store(before, Ordering::Relaxed);
        let r = f();
        (r, (PROCESS_PEAK.load(Ordering::Relaxed) - before).max(0) as usize)
    }
}

/// The allocator of each scope: every call goes to the system allocator, and the scope counts beside it.
macro_rules! counting {
    ($scope:ty) => {
        // SAFETY: every call goes to the system allocator with the caller's arguments unchanged; the
        // counting beside it neither allocates nor touches the memory.
        unsafe impl GlobalAlloc for $scope {
            unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
                <$scope>::count(layout.size() as isize);
                // SAFETY: the caller's contract for `alloc`, passed on.
                unsafe { System.alloc(layout) }
            }

            unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
                <$scope>::count(layout.size() as isize);
                // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
                unsafe { System.alloc_zeroed(layout) }
            }

            unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
                <$scope>::count(-(layout.size() as isize));
                // SAFETY: the caller's contract for `dealloc`, passed on.
                unsafe { System.dealloc(ptr, layout) }
            }

            unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
                <$scope>::count(new_size as isize - layout.size() as isize);
                // SAFETY: the caller's contract for `realloc`, passed on.
                unsafe { System.realloc(ptr, layout, new_size) }
            }
        }
    };
}

counting!(PerThread);
counting!(Process);
