//! Buffers the sources keep per thread between tensors, so that reading tensor after tensor allocates, faults
//! in and zeroes nothing once they are as large as the largest (up to a bound, beyond which a buffer is freed
//! after its read): a capture's decode buffers, and the device-order values of tensors in a device layout
//! (captures and CANN dumps).

/// Decode buffers kept per thread between tensors, at most this many (a capture's whole decode takes
/// two, and diff holds one tensor of each run at once)...
const POOLED_BUFFERS: usize = 4;
/// ...and none larger than this: what a thread keeps idle stays a small constant, while tensors up to
/// this size (nearly all of a model's) cost no allocation, page faults or zeroing per read.
const POOLED_BUFFER_BYTES: usize = 8 << 20;

thread_local! {
    static BUFFERS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A decode buffer from this thread's pool (empty when the pool is).
pub(super) fn take_buffer() -> Vec<u8> {
    BUFFERS.with(|b| b.borrow_mut().pop()).unwrap_or_default()
}

/// Returns a buffer to this thread's pool, or frees it (pool full, or the buffer too large to keep).
pub(super) fn give_buffer(buffer: Vec<u8>) {
    if buffer.capacity() == 0 || buffer.capacity() > POOLED_BUFFER_BYTES {
        return;
    }
    BUFFERS.with(|b| {
        let mut pool = b.borrow_mut();
        if pool.len() < POOLED_BUFFERS {
            pool.push(buffer);
        }
    });
}

thread_local! {
    /// The device-order values of a tensor in a device format, laid out from there into the caller's
    /// buffer (`host_values`): kept per thread on the terms of [`BUFFERS`].
    static VALUES_SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `f` with this thread's values scratch (for [`host_values`](accutrace_formats::tensor::host::host_values)'s
/// device-order values), kept for the next call unless larger
/// than [`POOLED_BUFFER_BYTES`].
pub(super) fn with_values_scratch<R>(f: impl FnOnce(&mut Vec<f32>) -> R) -> R {
    let mut scratch = VALUES_SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    let result = f(&mut scratch);
    if scratch.capacity() * std::mem::size_of::<f32>() <= POOLED_BUFFER_BYTES {
        VALUES_SCRATCH.with(|s| *s.borrow_mut() = scratch);
    }
    result
}
