//! Which writer thread gets a file. All chunks of a file must reach the same writer (each reassembles its
//! own files), and the writers should get even shares of the work: routing by a hash of the name alone
//! leaves one of two writers with well over half of it whenever a few large files dominate.
//!
//! A file's first chunk goes to the writer with the shortest queue, and that choice is kept in a small
//! lock-free table, keyed by the name's hash, until the file's last chunk: later chunks find it there. A
//! file in one chunk needs neither the table nor a look at every writer's queue (which would pull their
//! cache lines to the callback's core for each small file): such files take the writers in turn.
//!
//! A chunk whose file is not in the table starts a file, with one exception: when a new file finds no free
//! entry where it would go, it, and from then on every new file, is routed by hash (`hash % writers`),
//! which needs no memory. From that moment a chunk missing from the table is routed by hash whether it
//! starts a file or continues one, and every file keeps its writer either way. A file whose last chunk
//! never comes leaves its entry behind; enough of those only bring that moment sooner. Two files in
//! progress whose hashes agree in their top 56 bits would share an entry (probability about 2^-56 per pair).
//!
//! Only the dump callback routes. It may run on several threads at once, but the chunks of one file
//! arrive in order (docs/CANN.md §3), never two at once.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Table entries (a power of two): files in progress at once, with room to spare.
const ENTRIES: usize = 1024;
/// Entries a file may occupy, starting at the one its hash picks.
const PROBES: usize = 16;
/// The low bits of an entry hold the writer index + 1 (0: free), the rest the hash's top bits.
const WRITER_BITS: u32 = 8;
const WRITER_MASK: u64 = (1 << WRITER_BITS) - 1;

pub struct Router {
    writers: usize,
    entries: Box<[AtomicU64]>,
    /// Set for good once a new file found no free entry: new files are routed by hash from then on.
    by_hash: AtomicBool,
    /// One-chunk files seen: the next one goes to writer `turn % writers`.
    turn: AtomicUsize,
}

impl Router {
    /// A router over `writers` writer threads (1..=255).
    pub fn new(writers: usize) -> Router {
        assert!((1..=WRITER_MASK as usize - 1).contains(&writers), "writer count {writers} out of range");
        Router {
            writers,
            entries: (0..ENTRIES).map(|_| AtomicU64::new(0)).collect(),
            by_hash: AtomicBool::new(false),
            turn: AtomicUsize::new(0),
        }
    }

    /// The writer for a chunk of the file whose name hashes to `hash`; `last`: the file's last chunk.
    /// `queued(w)` is writer `w`'s queue length, read only when a file starts. No allocation, no lock.
    pub fn route(&self, hash: u64, last: bool, queued: impl Fn(usize) -> usize) -> usize {
        if self.writers == 1 {
            return 0;
        }
        let tag = hash & !WRITER_MASK;
        let first = (hash >> WRITER_BITS) as usize;
        for i in 0..PROBES {
            let entry = &self.entries[(first + i) % ENTRIES];
            let e = entry.load(Ordering::Acquire);
            if e != 0 && e & !WRITER_MASK == tag {
                if last {
                    entry.store(0, Ordering::Release);
                }
                return (e & WRITER_MASK) as usize - 1;
            }
        }
        if self.by_hash.load(Ordering::Acquire) {
            return self.by_name_hash(hash);
        }
        if last {
            // A file in one chunk (not the end of one in the table, nor of one routed by hash): in turn.
            return self.turn.fetch_add(1, Ordering::Relaxed) % self.writers;
        }
        // A new file: the shortest queue.
        let writer = (0..self.writers).min_by_key(|&w| queued(w)).unwrap_or(0);
        let value = tag | (writer as u64 + 1);
        for i in 0..PROBES {
            let entry = &self.entries[(first + i) % ENTRIES];
            if entry.compare_exchange(0, value, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                return writer;
            }
        }
        self.by_hash.store(true, Ordering::Release);
        self.by_name_hash(hash)
    }

    fn by_name_hash(&self, hash: u64) -> usize {
        (hash % self.writers as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A hash whose table position is `slot` (the top bits pick the entry) and whose tag is unique by `n`.
    fn hash_at(slot: usize, n: u64) -> u64 {
        ((n << 10 | slot as u64) << WRITER_BITS) | 0x5A
    }

    #[test]
    fn one_writer_takes_everything() {
        let r = Router::new(1);
        assert_eq!(r.route(12345, false, |_| unreachable!("no queue is read")), 0);
    }

    #[test]
    fn a_file_starts_on_the_shortest_queue_and_stays_there() {
        let r = Router::new(3);
        let queues = [5, 1, 9];
        let (a, b) = (hash_at(7, 1), hash_at(7, 2));
        assert_eq!(r.route(a, false, |w| queues[w]), 1);
        // While `a` is in progress, other queues become shorter: `a` keeps its writer, `b` starts elsewhere.
        let later = [0, 4, 9];
        assert_eq!(r.route(b, false, |w| later[w]), 0);
        assert_eq!(r.route(a, false, |w| later[w]), 1);
        assert_eq!(r.route(b, true, |w| later[w]), 0);
        assert_eq!(r.route(a, true, |w| later[w]), 1);
        // Both ended: their entries are free.
        assert!(r.entries.iter().all(|e| e.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn one_chunk_files_take_the_writers_in_turn_without_reading_queues_or_the_table() {
        let r = Router::new(3);
        let got: Vec<usize> =
            (0..6).map(|n| r.route(hash_at(9, n), true, |_| unreachable!("no queue is read"))).collect();
        assert_eq!(got, [0, 1, 2, 0, 1, 2]);
        assert!(r.entries.iter().all(|e| e.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn a_full_neighbourhood_switches_new_files_to_the_name_hash_and_keeps_every_file_whole() {
        let r = Router::new(4);
        let shortest = |w: usize| if w == 3 { 0 } else { 10 };
        // PROBES files in progress fill the entries around slot 100.
        let open: Vec<u64> = (0..PROBES as u64).map(|n| hash_at(100, n)).collect();
        for &h in &open {
            assert_eq!(r.route(h, false, shortest), 3);
        }
        // The next one finds no room: routed by its hash, now and for its later chunks.
        let late = hash_at(100, 99);
        let by_hash = (late % 4) as usize;
        assert_eq!(r.route(late, false, shortest), by_hash);
        assert!(r.by_hash.load(Ordering::Relaxed));
        assert_eq!(r.route(late, false, shortest), by_hash);
        // Files already in the table keep their writer until they end.
        for &h in &open {
            assert_eq!(r.route(h, true, shortest), 3);
        }
        assert_eq!(r.route(late, true, shortest), by_hash);
        // From now on new files go by hash, even with room in the table.
        let fresh = hash_at(500, 1);
        assert_eq!(r.route(fresh, false, shortest), (fresh % 4) as usize);
        assert_eq!(r.route(fresh, true, shortest), (fresh % 4) as usize);
    }

    #[test]
    fn concurrent_callers_keep_each_file_on_one_writer() {
        let r = Router::new(4);
        let threads: Vec<HashMap<u64, Vec<usize>>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4u64)
                .map(|t| {
                    let r = &r;
                    s.spawn(move || {
                        let mut seen: HashMap<u64, Vec<usize>> = HashMap::new();
                        // Each thread keeps 40 files in progress, their chunks interleaved, all hashing to
                        // two slots: more than their entries hold, so some go by hash.
                        for round in 0..20u64 {
                            let files: Vec<u64> = (0..40)
                                .map(|f| hash_at((f % 2) as usize, (t * 100 + round) * 40 + f))
                                .collect();
                            for c in 0..3 {
                                for (f, &h) in files.iter().enumerate() {
                                    let w = r.route(h, c == 2, |w| (w + f + round as usize) % 5);
                                    seen.entry(h).or_default().push(w);
                                }
                            }
                        }
                        seen
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert!(r.by_hash.load(Ordering::Relaxed), "the table overflowed");
        for seen in threads {
            for (h, ws) in seen {
                assert!(
                    ws.len() == 3 && ws.iter().all(|&w| w == ws[0] && w < 4),
                    "file {h:#x}: writers {ws:?}"
                );
            }
        }
    }
}
