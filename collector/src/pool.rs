//! The pre-allocated chunk slots: one buffer cut into fixed-size slots, and a lock-free stack of the free
//! slot indices (last freed, first reused: that slot's lines are most likely still in cache). The dump callback takes a slot, copies a chunk into it and sends the slot to a writer
//! thread, which gives it back once it has copied the bytes out. No allocation after construction.
//!
//! Ownership is carried by a [`Slot`] token: [`SlotPool::take`] is the only way to make one and
//! [`SlotPool::give_back`] consumes it, so at any time each slot index has at most one token, and only the
//! token's holder touches that slot's bytes. That is the invariant behind the `unsafe` below.

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
    /// become resident when first used).
    pub fn new(slots: usize, slot_size: usize) -> SlotPool {
        assert!(slots > 0 && slots <= u32::MAX as usize && slot_size > 0);
        let len = slots.checked_mul(slot_size).expect("pool size fits usize");
        let buf: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        let base = Box::into_raw(buf).cast::<u8>();
        let free = FreeStack::new(slots);
        for i in (0..slots as u32).rev() {
            free.push(i);
        }
        SlotPool { base, len, slot_size, free, id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed) }
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
    /// fit (callers size parts by [`slot_size`](Self::slot_size)).
    pub fn fill(&self, slot: &mut Slot, parts: &[&[u8]]) -> usize {
        let dst = self.slot_mut(slot);
        let mut at = 0;
        for p in parts {
            dst[at..at + p.len()].copy_from_slice(p);
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
        // SAFETY: `base`/`len` came from Box::into_raw of a boxed slice of exactly `len` bytes, freed once.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.base, self.len)) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_fill_read_give_back() {
        let pool = SlotPool::new(3, 16);
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
    #[should_panic]
    fn overfilling_a_slot_panics_instead_of_overrunning() {
        let pool = SlotPool::new(2, 8);
        let mut s = pool.take().unwrap();
        pool.fill(&mut s, &[&[0u8; 9]]);
    }

    #[test]
    #[should_panic(expected = "not taken from")]
    fn a_token_of_another_pool_is_refused() {
        let p1 = SlotPool::new(1, 8);
        let p2 = SlotPool::new(1, 8);
        let s = p1.take().unwrap();
        let _ = p2.bytes(&s, 1);
    }

    #[test]
    fn concurrent_producers_and_consumer_see_their_own_bytes() {
        use std::sync::Arc;
        let pool = Arc::new(SlotPool::new(8, 64));
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
