//! Buffers the sources keep per thread between tensors, so that reading tensor after tensor allocates, faults
//! in and zeroes nothing once they are as large as the largest (up to a bound, beyond which a buffer is freed
//! after its read): a capture's decode buffers, and the device-order values of tensors in a device layout
//! (captures and CANN dumps).

/// Decode buffers kept per thread between tensors, at most this many (a capture's whole decode takes
/// two, and diff holds one tensor of each run at once)...
const POOLED_BUFFERS: usize = 4;
/// ...and none larger than this: what a thread keeps idle stays a small constant, while tensors up to
/// this size (nearly all of a model's) cost no allocation, page faults or zeroing per read. Threads that
/// measure pairs within the memory budget keep buffers of any size ([`keeping_buffers_of_any_size`]).
const POOLED_BUFFER_BYTES: usize = 8 << 20;

thread_local! {
    /// Whether this thread keeps buffers larger than [`POOLED_BUFFER_BYTES`] too.
    static ANY_SIZE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `f` with this thread keeping its buffers whatever their size, for the threads that measure pairs
/// (`threads::in_flight`): the memory budget already counts, per pair in flight, buffers as large as the
/// largest tensor, and only those threads read whole tensors. Freeing each buffer above 8 MiB after its
/// read, the diff of a capture pair with 18 MiB tensors (big-seq384-2) spent 17% more CPU, nearly all of it
/// faulting in the next allocation's fresh pages (90 K page faults against 23 K).
pub(crate) fn keeping_buffers_of_any_size<R>(f: impl FnOnce() -> R) -> R {
    /// Puts the flag back however `f` ends.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            ANY_SIZE.set(self.0);
        }
    }
    let _restore = Restore(ANY_SIZE.replace(true));
    f()
}

/// Whether this thread keeps a buffer of `bytes` for its next read.
fn keeps(bytes: usize) -> bool {
    bytes <= POOLED_BUFFER_BYTES || ANY_SIZE.get()
}

thread_local! {
    static BUFFERS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A decode buffer from this thread's pool (empty when the pool is).
pub(super) fn take_buffer() -> Vec<u8> {
    BUFFERS.with(|b| b.borrow_mut().pop()).unwrap_or_default()
}

/// Returns a buffer to this thread's pool, or frees it (pool full, or the buffer too large to keep: see
/// [`POOLED_BUFFER_BYTES`]).
pub(super) fn give_buffer(buffer: Vec<u8>) {
    if buffer.capacity() == 0 || !keeps(buffer.capacity()) {
        return;
    }
    BUFFERS.with(|b| {
        let mut pool = b.borrow_mut();
        if pool.len() < POOLED_BUFFERS {
            pool.push(buffer);
        }
    });
}

/// Frees this thread's buffers above [`POOLED_BUFFER_BYTES`], which it kept while measuring pairs
/// ([`keeping_buffers_of_any_size`]): what a thread keeps idle returns to the small constant.
pub(crate) fn release_large_buffers() {
    BUFFERS.with(|b| b.borrow_mut().retain(|buffer| buffer.capacity() <= POOLED_BUFFER_BYTES));
    VALUES_SCRATCH.with(|s| {
        let mut scratch = s.borrow_mut();
        if scratch.capacity() * std::mem::size_of::<f32>() > POOLED_BUFFER_BYTES {
            *scratch = Vec::new();
        }
    });
}

thread_local! {
    /// The device-order values of a tensor in a device format, laid out from there into the caller's
    /// buffer (`host_values`): kept per thread on the terms of [`BUFFERS`].
    static VALUES_SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `f` with this thread's values scratch (for [`host_values`](accutrace_formats::tensor::host::host_values)'s
/// device-order values), kept for the next call on the terms of [`give_buffer`].
pub(super) fn with_values_scratch<R>(f: impl FnOnce(&mut Vec<f32>) -> R) -> R {
    let mut scratch = VALUES_SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    let result = f(&mut scratch);
    if keeps(scratch.capacity() * std::mem::size_of::<f32>()) {
        VALUES_SCRATCH.with(|s| *s.borrow_mut() = scratch);
    }
    result
}

use accutrace_formats::capture::reader::{swap_wave_buffers, WaveBuffers};

/// A set of decode buffers (pool, values scratch and the reader's wave buffers, and whether they are kept
/// whatever their size) that a thread lends to a read another thread of the pool may run for it
/// ([`with_lent_buffers`]).
#[derive(Default)]
pub(crate) struct LentBuffers {
    pool: Vec<Vec<u8>>,
    values: Vec<f32>,
    waves: WaveBuffers,
    any_size: bool,
}

impl LentBuffers {
    /// Bytes the buffers hold.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        let pool: usize = self.pool.iter().map(Vec::capacity).sum();
        pool + self.values.capacity() * std::mem::size_of::<f32>() + self.waves.capacity()
    }

    /// Buffers kept on the calling thread's terms from now on ([`keeping_buffers_of_any_size`]).
    pub(crate) fn on_this_threads_terms(&mut self) {
        self.any_size = ANY_SIZE.get();
    }
}

/// `f` with `lent` as the decode buffers of whatever thread runs it: what `f` takes and gives back goes to
/// and from `lent`, and that thread's own buffers and terms are back in place after, however `f` ends. So a
/// read that a thread which measures pairs hands to the pool (compare reads both sides of a large pair at
/// once) runs on buffers that thread keeps, within the memory budget, and the thread that ran it keeps
/// none of them. (The nesting of rayon's stolen jobs keeps the swaps in stack order.)
pub(crate) fn with_lent_buffers<R>(lent: &mut LentBuffers, f: impl FnOnce() -> R) -> R {
    fn swap(lent: &mut LentBuffers) {
        BUFFERS.with(|b| std::mem::swap(&mut *b.borrow_mut(), &mut lent.pool));
        VALUES_SCRATCH.with(|s| std::mem::swap(&mut *s.borrow_mut(), &mut lent.values));
        swap_wave_buffers(&mut lent.waves);
        lent.any_size = ANY_SIZE.replace(lent.any_size);
    }
    /// Swaps them back however `f` ends.
    struct Back<'a>(&'a mut LentBuffers);
    impl Drop for Back<'_> {
        fn drop(&mut self) {
            swap(self.0);
        }
    }
    swap(lent);
    let _back = Back(lent);
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read on another thread with a thread's lent buffers takes them, leaves its own in that set, on the
    /// lender's terms, and the thread that ran it has its own buffers and terms back, none of the lent ones.
    #[test]
    fn lent_buffers_come_back_to_the_lender_and_stay_off_the_thread_that_used_them() {
        let large = POOLED_BUFFER_BYTES + 4096;
        let mut lent = LentBuffers::default();
        keeping_buffers_of_any_size(|| lent.on_this_threads_terms());
        lent.pool.push(Vec::with_capacity(large));
        let lent = std::thread::spawn(move || {
            give_buffer(Vec::with_capacity(4096));
            let mut lent = lent;
            with_lent_buffers(&mut lent, || {
                let buffer = take_buffer();
                assert!(buffer.capacity() >= large, "the lent buffer was not the one taken");
                assert_eq!(take_buffer().capacity(), 0, "the thread's own pool showed through");
                // Kept on the lender's terms (any size), into the lent set.
                give_buffer(buffer);
                give_buffer(Vec::with_capacity(2 * large));
                with_values_scratch(|s| s.reserve(large / 4 + 1));
            });
            assert!(take_buffer().capacity() == 4096, "the thread's own buffer is gone");
            assert_eq!(take_buffer().capacity(), 0, "a lent buffer stayed on the thread");
            with_values_scratch(|s| {
                assert_eq!(s.capacity(), 0, "the lent values scratch stayed on the thread")
            });
            assert!(!ANY_SIZE.get(), "the lender's terms stayed on the thread");
            lent
        })
        .join()
        .unwrap();
        let mut sizes: Vec<usize> = lent.pool.iter().map(Vec::capacity).collect();
        sizes.sort_unstable();
        assert!(sizes.len() == 2 && sizes[0] >= large && sizes[1] >= 2 * large, "{sizes:?}");
        assert!(lent.values.capacity() > large / 4 && lent.any_size);
    }

    /// A buffer above 8 MiB is freed after its read, except on a thread that keeps buffers of any size, and
    /// only while it does; smaller ones are kept either way.
    #[test]
    fn large_buffers_are_kept_only_by_threads_that_keep_any_size() {
        std::thread::spawn(|| {
            let large = POOLED_BUFFER_BYTES + 4096;
            give_buffer(Vec::with_capacity(large));
            assert_eq!(take_buffer().capacity(), 0, "a large buffer was kept");
            keeping_buffers_of_any_size(|| {
                give_buffer(Vec::with_capacity(large));
                assert!(
                    take_buffer().capacity() >= large,
                    "a thread that keeps any size freed a large buffer"
                );
                with_values_scratch(|s| s.reserve(large / 4 + 1));
                with_values_scratch(|s| assert!(s.capacity() > large / 4, "the values scratch was freed"));
            });
            give_buffer(Vec::with_capacity(large));
            assert_eq!(take_buffer().capacity(), 0, "the flag outlived its call");
            with_values_scratch(|s| s.reserve(large / 4 + 1));
            with_values_scratch(|s| assert_eq!(s.capacity(), 0, "a large values scratch was kept"));
            give_buffer(Vec::with_capacity(4096));
            assert!(take_buffer().capacity() >= 4096, "a small buffer was freed");
        })
        .join()
        .unwrap();
    }

    /// What a thread kept while it kept buffers of any size goes when it is released; small buffers stay.
    #[test]
    fn released_threads_keep_only_small_buffers() {
        std::thread::spawn(|| {
            let large = POOLED_BUFFER_BYTES + 4096;
            keeping_buffers_of_any_size(|| {
                give_buffer(Vec::with_capacity(4096));
                give_buffer(Vec::with_capacity(large));
                with_values_scratch(|s| s.reserve(large / 4 + 1));
            });
            assert!(VALUES_SCRATCH.with(|s| s.borrow().capacity()) > large / 4, "nothing to release");
            release_large_buffers();
            assert_eq!(VALUES_SCRATCH.with(|s| s.borrow().capacity()), 0, "the large values scratch stayed");
            let kept = take_buffer().capacity();
            assert!((4096..large).contains(&kept), "{kept}: the small buffer went, or the large one stayed");
            assert_eq!(take_buffer().capacity(), 0, "the large buffer stayed");
        })
        .join()
        .unwrap();
    }
}
