//! The pre-allocated chunk slots: one buffer cut into fixed-size slots, and a lock-free stack of the free
//! slot indices (last freed, first reused: its pages and TLB entries are warm, and a small pool stays in
//! cache). The dump callback takes a slot, copies a chunk into it and sends the slot to a writer thread, which
//! gives it back once it has copied the bytes out. No allocation after construction. Large pieces are
//! copied with streaming stores ([`STREAM_MIN`]): the freed slot's lines sit in the writer's cache, on
//! another core.
//!
//! Ownership is carried by a [`Slot`] token: [`SlotPool::take`] is the only way to make one and
//! [`SlotPool::give_back`] consumes it, so at any time each slot index has at most one token, and only the
//! token's holder touches that slot's bytes. That is the invariant behind the `unsafe` below.

use std::alloc::Layout;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Exclusive right to one slot of one pool. Not `Clone`: moving it moves the right.
#[derive(Debug)]
pub struct Slot {
    index: u32,
    pool: u32,
}

/// The slots and the free list.
pub struct SlotPool {
    /// Start of `slots * slot_size` bytes, owned by this pool (freed in Drop).
    base: *mut u8,
    len: usize,
    slot_size: usize,
    free: FreeStack,
    /// Distinguishes pools so a token cannot be used on a pool it did not come from.
    id: u32,
}

// SAFETY: the buffer is only reached through `fill`/`bytes`, which require the slot's token; a token is
// held by one thread at a time and handed over through the queue or a channel, both of which order
// memory (release on push/send, acquire on pop/receive). So no two threads ever access one slot at once.
unsafe impl Send for SlotPool {}
// SAFETY: as above; shared access to the pool only touches the free queue (itself Sync) or token-owned slots.
unsafe impl Sync for SlotPool {}

static NEXT_POOL_ID: AtomicU32 = AtomicU32::new(1);

impl SlotPool {
    /// `slots` slots of `slot_size` bytes. The memory comes zeroed from the allocator (calloc, so pages
    /// become resident when first used). Memory the process cannot have (`ulimit -v`, `RLIMIT_DATA`) is an
    /// error, not the allocator's abort: the job must go on without the collector.
    pub fn new(slots: usize, slot_size: usize) -> Result<SlotPool, String> {
        assert!(slots > 0 && slots <= u32::MAX as usize && slot_size > 0);
        let too_much = || format!("cannot reserve {slots} slots of {slot_size} bytes");
        let len = slots.checked_mul(slot_size).ok_or_else(too_much)?;
        let layout = Layout::array::<u8>(len).map_err(|_| too_much())?;
        // SAFETY: `layout` has a non-zero size (both factors are > 0); a null result is handled below.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        if base.is_null() {
            return Err(too_much());
        }
        let free = FreeStack::new(slots);
        for i in (0..slots as u32).rev() {
            free.push(i);
        }
        Ok(SlotPool { base, len, slot_size, free, id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed) })
    }

    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Slots currently free.
    pub fn free(&self) -> usize {
        self.free.len()
    }

    /// Total slots.
    pub fn capacity(&self) -> usize {
        self.free.next.len()
    }

    /// A free slot, if any. Lock-free, no allocation.
    pub fn take(&self) -> Option<Slot> {
        self.free.pop().map(|index| Slot { index, pool: self.id })
    }

    /// Returns a slot to the free list.
    pub fn give_back(&self, slot: Slot) {
        assert_eq!(slot.pool, self.id, "slot returned to a pool it was not taken from");
        self.free.push(slot.index);
    }

    /// Copies `parts` one after another into the slot; returns the bytes written. Panics if they do not
    /// fit (callers size parts by [`slot_size`](Self::slot_size)). Parts of at least [`STREAM_MIN`] bytes
    /// are written with streaming stores (see there); all stores are complete when this returns.
    pub fn fill(&self, slot: &mut Slot, parts: &[&[u8]]) -> usize {
        let dst = self.slot_mut(slot);
        let mut at = 0;
        for p in parts {
            let d = &mut dst[at..at + p.len()];
            if p.len() >= STREAM_MIN {
                copy_streaming(d, p);
            } else {
                d.copy_from_slice(p);
            }
            at += p.len();
        }
        at
    }

    /// The first `len` bytes of the slot.
    pub fn bytes<'a>(&'a self, slot: &'a Slot, len: usize) -> &'a [u8] {
        assert_eq!(slot.pool, self.id, "slot used with a pool it was not taken from");
        let start = slot.index as usize * self.slot_size;
        assert!(len <= self.slot_size && start + len <= self.len);
        // SAFETY: the range lies inside the buffer (asserted) and belongs to this token's slot; the token
        // is borrowed for the returned lifetime, so no `fill` (which needs it mutably) can overlap.
        unsafe { std::slice::from_raw_parts(self.base.add(start), len) }
    }

    fn slot_mut<'a>(&'a self, slot: &'a mut Slot) -> &'a mut [u8] {
        assert_eq!(slot.pool, self.id, "slot used with a pool it was not taken from");
        let start = slot.index as usize * self.slot_size;
        assert!(start + self.slot_size <= self.len);
        // SAFETY: inside the buffer (asserted); exclusive because the token is unique and mutably borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(start), self.slot_size) }
    }
}

/// Parts at least this long are copied into a slot with non-temporal (streaming) stores on x86_64.
///
/// Why: a slot is reused soon after a writer thread on another core has read it (the free list is LIFO), so
/// its lines sit in that core's cache, and every ordinary store to them first has to invalidate that copy.
/// Measured on the development machine (docs/BENCHMARKS.md), that made a 64 KiB copy into a just-read slot
/// 5x a copy into a hot buffer; streaming stores write whole lines around the caches (invalidating other
/// copies without waiting for each) and cost 2x. Below about 16 KiB they were slower than ordinary stores,
/// and the writer pays for them: it then reads the slot from memory, not from the other core's cache.
pub const STREAM_MIN: usize = 16 << 10;

/// `dst.copy_from_slice(src)`, the 64-byte-aligned lines of `dst` with streaming stores, then a store fence:
/// when it returns, the streamed bytes are ordered like ordinary stores (so the release of the queue push
/// that hands the slot to a writer covers them, and the slot's next reader sees them).
#[cfg(target_arch = "x86_64")]
fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128};
    assert_eq!(dst.len(), src.len());
    // Ordinary stores up to the first 64-byte boundary of `dst` and after its last one.
    let head = ((64 - dst.as_ptr().addr() % 64) % 64).min(dst.len());
    let lines = (dst.len() - head) / 64;
    let (dst_head, rest) = dst.split_at_mut(head);
    let (dst_body, dst_tail) = rest.split_at_mut(lines * 64);
    let (src_head, rest) = src.split_at(head);
    let (src_body, src_tail) = rest.split_at(lines * 64);
    dst_head.copy_from_slice(src_head);
    for (d, s) in dst_body.chunks_exact_mut(64).zip(src_body.chunks_exact(64)) {
        let (d, s) = (d.as_mut_ptr().cast::<__m128i>(), s.as_ptr().cast::<__m128i>());
        // SAFETY: `s` is 64 readable bytes (loaded unaligned); `d` is 64 writable bytes of this slot,
        // exclusively ours (the slot's token is borrowed mutably), starting at a 64-byte boundary (the head
        // was copied separately), so each `d.add(k)` is 16-byte aligned as `stream16` requires. SSE2 is part
        // of the x86_64 baseline.
        unsafe {
            let (a, b, c, e) = (
                _mm_loadu_si128(s),
                _mm_loadu_si128(s.add(1)),
                _mm_loadu_si128(s.add(2)),
                _mm_loadu_si128(s.add(3)),
            );
            stream16(d, a);
            stream16(d.add(1), b);
            stream16(d.add(2), c);
            stream16(d.add(3), e);
        }
    }
    dst_tail.copy_from_slice(src_tail);
    // What the streaming stores require before any other access to the bytes they wrote.
    store_fence();
}

/// A 16-byte streaming store (MOVNTDQ). Under Miri, which cannot run it, an ordinary aligned store: Miri then
/// checks the bounds, alignment and exclusivity this function's callers promise.
///
/// # Safety
/// `d` is valid for a 16-byte write, 16-byte aligned, and not accessed by another thread meanwhile; the
/// caller calls [`store_fence`] before anything else accesses those bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn stream16(d: *mut std::arch::x86_64::__m128i, v: std::arch::x86_64::__m128i) {
    #[cfg(not(miri))]
    // SAFETY: as this function's contract; SSE2 is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_stream_si128(d, v)
    };
    #[cfg(miri)]
    // SAFETY: as this function's contract.
    unsafe {
        d.write(v)
    };
}

/// SFENCE: orders this thread's earlier streaming stores before its later memory accesses.
#[cfg(target_arch = "x86_64")]
fn store_fence() {
    #[cfg(not(miri))]
    // SAFETY: SFENCE has no preconditions; SSE is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(miri)]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// Elsewhere (aarch64 has no streaming-store intrinsic in `std::arch`): an ordinary copy.
#[cfg(not(target_arch = "x86_64"))]
fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    dst.copy_from_slice(src);
}

/// A lock-free stack of slot indices (Treiber stack). `head` packs a tag (high 32 bits, bumped by every
/// change, so a pop that raced with pop+push of the same index fails its compare-exchange: no ABA) and the
/// top index + 1 (0 = empty); `next[i]` is the index + 1 below slot `i`.
struct FreeStack {
    head: AtomicU64,
    next: Box<[AtomicU32]>,
    len: AtomicU32,
}

impl FreeStack {
    fn new(capacity: usize) -> FreeStack {
        FreeStack {
            head: AtomicU64::new(0),
            next: (0..capacity).map(|_| AtomicU32::new(0)).collect(),
            len: 0.into(),
        }
    }

    fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed) as usize
    }

    fn push(&self, index: u32) {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            self.next[index as usize].store(head as u32, Ordering::Relaxed);
            let new = ((head >> 32).wrapping_add(1) << 32) | u64::from(index + 1);
            // Release: the slot's bytes (written by its holder) are visible to whoever pops it.
            match self.head.compare_exchange_weak(head, new, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => break,
                Err(h) => head = h,
            }
        }
        self.len.fetch_add(1, Ordering::Relaxed);
    }

    fn pop(&self) -> Option<u32> {
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let top = head as u32;
            if top == 0 {
                return None;
            }
            // May read a stale link if `top` was popped meanwhile; the tag then makes the exchange fail.
            let below = self.next[top as usize - 1].load(Ordering::Relaxed);
            let new = ((head >> 32).wrapping_add(1) << 32) | u64::from(below);
            match self.head.compare_exchange_weak(head, new, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => {
                    self.len.fetch_sub(1, Ordering::Relaxed);
                    return Some(top - 1);
                }
                Err(h) => head = h,
            }
        }
    }
}

impl Drop for SlotPool {
    fn drop(&mut self) {
        // SAFETY: `base` came from `alloc_zeroed` with this layout (`Layout::array::<u8>(len)` succeeded in
        // `new`, so it does again) and is freed once, here.
        unsafe { std::alloc::dealloc(self.base, Layout::from_size_align_unchecked(self.len, 1)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_fill_read_give_back() {
        let pool = SlotPool::new(3, 16).unwrap();
        let mut a = pool.take().unwrap();
        let mut b = pool.take().unwrap();
        let c = pool.take().unwrap();
        assert!(pool.take().is_none(), "three slots only");
        assert_eq!((a.index, b.index, c.index), (0, 1, 2));
        assert_eq!(pool.fill(&mut a, &[b"name", b"1234"]), 8);
        assert_eq!(pool.fill(&mut b, &[b"other"]), 5);
        assert_eq!(pool.bytes(&a, 8), b"name1234");
        assert_eq!(pool.bytes(&b, 5), b"other");
        pool.give_back(a);
        assert_eq!(pool.free(), 1);
        let again = pool.take().unwrap();
        assert_eq!(again.index, 0, "the slot freed last is reused first");
        assert!(pool.take().is_none());
        for s in [again, b, c] {
            pool.give_back(s);
        }
        assert_eq!(pool.free(), pool.capacity());
    }

    #[test]
    fn streamed_parts_arrive_intact_at_every_alignment() {
        // Parts of STREAM_MIN bytes and more take the streaming copy: check every head/tail split (the
        // name before the payload shifts the destination's alignment) and the bytes around the copy.
        let len = STREAM_MIN + 100;
        let slot_size = len + 200;
        let pool = SlotPool::new(2, slot_size).unwrap();
        let src: Vec<u8> = (0..len + 64).map(|i| (i * 7 % 251) as u8 + 1).collect();
        let zeros = vec![0u8; slot_size];
        let mut s = pool.take().unwrap();
        let name_lens: &[usize] =
            if cfg!(miri) { &[0, 45, 64] } else { &[0, 1, 15, 16, 45, 63, 64, 65, 130] };
        for &name_len in name_lens {
            for src_shift in [0usize, 3, 20] {
                pool.fill(&mut s, &[&zeros]);
                let name = &[b'n'; 200][..name_len];
                let piece = &src[src_shift..src_shift + len - (name_len % 7)];
                let n = pool.fill(&mut s, &[name, piece]);
                assert_eq!(n, name_len + piece.len());
                let got = pool.bytes(&s, slot_size);
                assert_eq!(&got[..name_len], name);
                assert_eq!(&got[name_len..n], piece, "name_len {name_len}, src_shift {src_shift}");
                assert!(got[n..].iter().all(|&b| b == 0), "bytes past the copy");
            }
        }
        pool.give_back(s);
    }

    #[test]
    fn a_streamed_slot_handed_to_another_thread_is_read_whole() {
        use std::sync::Arc;
        let pool = Arc::new(SlotPool::new(4, STREAM_MIN + 64).unwrap());
        let (tx, rx) = crossbeam_channel::bounded::<(Slot, u8)>(4);
        let reader = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                for (s, v) in rx {
                    assert!(pool.bytes(&s, STREAM_MIN + 1).iter().skip(1).all(|&b| b == v));
                    pool.give_back(s);
                }
            })
        };
        for round in 0..if cfg!(miri) { 6u8 } else { 40 } {
            let mut s = loop {
                if let Some(s) = pool.take() {
                    break s;
                }
                std::thread::yield_now();
            };
            pool.fill(&mut s, &[b"x", &[round; STREAM_MIN]]);
            tx.send((s, round)).unwrap();
        }
        drop(tx);
        reader.join().unwrap();
        assert_eq!(pool.free(), 4);
    }

    #[test]
    #[should_panic]
    fn overfilling_a_slot_panics_instead_of_overrunning() {
        let pool = SlotPool::new(2, 8).unwrap();
        let mut s = pool.take().unwrap();
        pool.fill(&mut s, &[&[0u8; 9]]);
    }

    #[test]
    #[should_panic(expected = "not taken from")]
    fn a_token_of_another_pool_is_refused() {
        let p1 = SlotPool::new(1, 8).unwrap();
        let p2 = SlotPool::new(1, 8).unwrap();
        let s = p1.take().unwrap();
        let _ = p2.bytes(&s, 1);
    }

    #[test]
    fn concurrent_producers_and_consumer_see_their_own_bytes() {
        use std::sync::Arc;
        let pool = Arc::new(SlotPool::new(8, 64).unwrap());
        let (tx, rx) = crossbeam_channel::bounded::<(Slot, u8)>(8);
        let producers: Vec<_> = (0..4u8)
            .map(|p| {
                let (pool, tx) = (pool.clone(), tx.clone());
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let mut s = loop {
                            if let Some(s) = pool.take() {
                                break s;
                            }
                            std::thread::yield_now();
                        };
                        pool.fill(&mut s, &[&[p; 64]]);
                        tx.send((s, p)).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let mut seen = 0;
        for (s, p) in rx {
            assert!(pool.bytes(&s, 64).iter().all(|&b| b == p));
            pool.give_back(s);
            seen += 1;
        }
        for t in producers {
            t.join().unwrap();
        }
        assert_eq!(seen, 8000);
        assert_eq!(pool.free(), 8);
    }
}
