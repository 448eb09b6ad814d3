//! How many tensor pairs compare and diff measure at once, so that their anonymous memory stays within the
//! design's budget (64 MiB + 2x the largest tensor as f32) on a machine of any size, while every core still
//! works on the pairs in flight.
//!
//! A pair being measured holds buffers as large as the largest pair its thread met: compare of two captures
//! both sides decoded to f32 beside their raw bytes and zstd's scratch, diff its block buffers and zstd's
//! scratch; and these buffers are kept per thread between pairs. So anonymous memory grows with the number
//! of threads that measure pairs, not with the input: on the medium:4 pair compare took 32 MiB with 2 such
//! threads and 151 MiB with 16. [`InFlight::within_budget`] is how many the budget allows: pairs of the
//! largest tensor's size as many as fit ([`pairs_for`]), and with what they leave, small pairs (both tensors
//! at most [`SMALL_PAIR_BYTES`] as f32) on further threads. [`in_flight`] measures them, each on one of the
//! first threads of the pool, always the same ones, each thread taking only pairs of its size class: the
//! other threads hold no pair's buffers and take the work within a pair (the parallel decode to f32, the
//! metrics' chunks), which needs none. So a pair of large tensors is measured alone but on every core, where
//! a pool the size of the budget ran it on one thread, and small pairs, whose work is not split, keep the
//! other cores busy beside it. `RAYON_NUM_THREADS=N` sizes the pool (the cores the command uses), not the
//! memory: the pairs in flight are counted against the budget on any number of threads. (Before, N also
//! made every thread measure a pair: compare of 18 MiB tensors with N = 16 held 890 MiB anonymous for a
//! budget of 100, with no word of it.) One pair is measured however large a tensor is: a capture whose frames
//! are at most 1 MiB (the collector's since frames were cut) reads a tensor longer than 16 MiB a window at
//! a time, so its zstd scratch stays ~20-24 MiB and one pair of any size fits the budget (a bounded
//! scratch counts as its bound, [`Footprint::scratch_max`]); captures written before hold their large
//! tensors' compressed planes whole, and above ~25 MiB as f32 one compare pair of them needs more.

use crate::index::{Index, TensorId, TensorInfo};
use crate::sources::Source;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The anonymous memory a command may use, beside twice its largest tensor as f32 ([`pairs_for`]).
const BUDGET: u64 = 64 << 20;

/// What a command's pairs in flight hold, measured on sim-train captures (small:4 and medium:4, 1 to 32
/// threads each measuring a pair, on a 2-core VM and a 16-core machine) and rounded up: memory before any
/// pair is measured, and per pair in flight a fixed part plus a multiple of the largest tensor as f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    pub base: u64,
    pub per_pair: u64,
    pub per_pair_tensors: u64,
    /// Of the `per_pair_tensors` buffers, how many are decoding scratch that holds at most `scratch_max`
    /// bytes however large the tensor (`Source::decode_scratch_max`).
    pub scratch_buffers: u64,
    pub scratch_max: u64,
}

impl Footprint {
    /// compare of `sources`: ~10 MiB before its pairs; per pair 2 MiB of the allocator's slack and each
    /// side's [`Source::buffers_per_tensor`] times the largest tensor as f32. Measured on medium:4 captures:
    /// 11-12 MiB per pair for a largest tensor of 2 MiB (2 to 5 threads each measuring one: 32, 43, 57, 65-68
    /// MiB; 76 with 6 on a 16-core machine, 179 with 16); an npy pair of 8 MiB f32 tensors: 20 MiB with 2.
    /// A source whose decoding scratch is bounded ([`Source::decode_scratch_max`]) counts one of its buffers
    /// as at most that bound.
    pub fn compare(sources: [&dyn Source; 2]) -> Footprint {
        let per_pair_tensors = sources.iter().map(|s| s.buffers_per_tensor()).sum();
        let bounded: Vec<u64> = sources.iter().filter_map(|s| s.decode_scratch_max()).collect();
        Footprint {
            base: 12 << 20,
            per_pair: 2 << 20,
            per_pair_tensors,
            scratch_buffers: bounded.len() as u64,
            scratch_max: bounded.into_iter().max().unwrap_or(0),
        }
    }
    /// compare where what each pair holds is known pair by pair (`compare::in_waves`): at most `most` bytes
    /// a pair beside 2 MiB of the allocator's slack, whatever the largest tensor.
    pub fn compare_per_pair(most: u64) -> Footprint {
        Footprint {
            base: 12 << 20,
            per_pair: (2 << 20) + most,
            per_pair_tensors: 0,
            scratch_buffers: 0,
            scratch_max: 0,
        }
    }

    /// diff reads block by block: 4 MiB with one pair; per pair ~0.3 MiB + 1.6x the largest tensor.
    pub const DIFF: Footprint = Footprint {
        base: 4 << 20,
        per_pair: 1 << 19,
        per_pair_tensors: 2,
        scratch_buffers: 0,
        scratch_max: 0,
    };

    /// diff where each side of a pair holds at most `side` bytes (where that is less than the tensor as f32:
    /// a capture of fp16 tensors read block by block holds at most their data, half of it) and `extra`
    /// bytes more a pair (the wave buffers of a large pair). Measured on big-seq384-2 (9 MiB of fp16 data
    /// a tensor, 1 and 2 threads each measuring a pair): 21 MiB a pair, 18 of them the two sides' data.
    pub fn diff_bounded(side: u64, extra: u64) -> Footprint {
        Footprint { per_pair: (4 << 20) + extra, scratch_buffers: 2, scratch_max: side, ..Footprint::DIFF }
    }
}

/// A tensor's size as f32 (or as f64 where it is wider), in bytes: the size compare decodes it to. The device
/// shape counts where larger (padding is decoded, then cropped).
pub fn tensor_bytes(t: &TensorInfo) -> u64 {
    let elements = |shape: &[u64]| shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).unwrap_or(u64::MAX);
    let n = elements(&t.shape).max(t.device_shape().map_or(0, elements));
    let width = t.dtype.bits().map_or(4, |b| u64::from(b).div_ceil(8).max(4));
    n.saturating_mul(width)
}

/// The largest tensor of `indexes` ([`tensor_bytes`]).
pub fn largest_tensor_bytes<'a>(indexes: impl IntoIterator<Item = &'a Index>) -> u64 {
    indexes.into_iter().flat_map(|index| &index.tensors).map(tensor_bytes).max().unwrap_or(0)
}

/// How many pairs in flight keep `footprint` within the budget when the largest tensor is `largest` bytes as
/// f32: at least one (a single tensor larger than the budget allows is still measured), at most `threads`.
pub fn pairs_for(footprint: Footprint, largest: u64, threads: usize) -> usize {
    let fits = usize::try_from(allowed(footprint, largest) / footprint.per_pair_of(largest).max(1));
    fits.unwrap_or(usize::MAX).clamp(1, threads.max(1))
}

/// What the pairs in flight may hold when the largest tensor is `largest` bytes as f32.
fn allowed(footprint: Footprint, largest: u64) -> u64 {
    BUDGET.saturating_add(largest.saturating_mul(2)).saturating_sub(footprint.base)
}

impl Footprint {
    /// What one pair in flight holds when its thread's largest tensor is `bytes` as f32.
    fn per_pair_of(self, bytes: u64) -> u64 {
        let whole = self.per_pair_tensors.saturating_sub(self.scratch_buffers);
        let scratch = bytes.min(self.scratch_max).saturating_mul(self.scratch_buffers);
        self.per_pair.saturating_add(bytes.saturating_mul(whole)).saturating_add(scratch)
    }
}

/// A small pair: both tensors at most this large as f32 (the values below which the metrics' kernels split
/// no work, `PARALLEL_MIN`). The work within such a pair runs on one thread, so only more pairs at once keep
/// more cores busy.
pub const SMALL_PAIR_BYTES: u64 = 4 * crate::metrics::kernel::PARALLEL_MIN as u64;

/// How many pairs are measured at once ([`in_flight`]): `large` of any size, and beside them `small` more of
/// at most `small_bytes` each (both tensors as f32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlight {
    pub large: usize,
    pub small: usize,
    pub small_bytes: u64,
}

impl InFlight {
    /// `n` pairs of any size.
    pub fn any(n: usize) -> InFlight {
        InFlight { large: n, small: 0, small_bytes: 0 }
    }

    /// Within the budget for `footprint` on `threads` threads: as many pairs of the largest tensor's size as
    /// fit ([`pairs_for`]), and with what they leave, small pairs ([`SMALL_PAIR_BYTES`]) on the other threads,
    /// where the largest tensor is larger than those.
    pub fn within_budget(footprint: Footprint, largest: u64, threads: usize) -> InFlight {
        let large = pairs_for(footprint, largest, threads);
        if largest <= SMALL_PAIR_BYTES {
            return InFlight::any(large);
        }
        let left = allowed(footprint, largest).saturating_sub(footprint.per_pair_of(largest) * large as u64);
        let fits =
            usize::try_from(left / footprint.per_pair_of(SMALL_PAIR_BYTES).max(1)).unwrap_or(usize::MAX);
        match fits.min(threads.saturating_sub(large)) {
            0 => InFlight::any(large),
            small => InFlight { large, small, small_bytes: SMALL_PAIR_BYTES },
        }
    }
}

/// The pairs of `sources` to measure at once in the current pool: [`InFlight::within_budget`] on its threads,
/// however many there are (`RAYON_NUM_THREADS` included).
pub fn pairs_in_flight(footprint: Footprint, sources: [&dyn Source; 2]) -> InFlight {
    let threads = rayon::current_num_threads();
    InFlight::within_budget(footprint, largest_tensor_bytes(sources.map(Source::index)), threads)
}

/// `work(state, i)` for every `i` in `0..len`, the results in that order, with at most `limits.large`
/// running at once where `size(i)` exceeds `limits.small_bytes` and `limits.small` more of the others
/// (fewer where the pool has fewer threads). Each runs on one of the first threads of the current pool
/// (`rayon::broadcast`; the same threads on every call): the first `large` take the large indices, then the
/// small ones, the next `small` threads the small ones only, each the next index as it finishes one, with
/// one `init()` state per thread and call. So a thread that keeps buffers for the next pair keeps them as
/// large as the pairs it may take, and it keeps them whatever their size
/// (`sources::keeping_buffers_of_any_size`): the budget counts them. The pool's other threads are free for
/// the parallel work inside `work`.
/// Nothing waits but on rayon's own latches, so nested joins cannot deadlock: a thread waiting in a join runs
/// only work stolen from joins, never a second `work`, because a broadcast's job runs only on its own thread.
pub fn in_flight<S, R: Send>(
    limits: InFlight,
    len: usize,
    size: impl Fn(usize) -> u64,
    init: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, usize) -> R + Sync,
) -> Vec<R> {
    let threads = rayon::current_num_threads();
    let large = limits.large.clamp(1, threads);
    let small = limits.small.min(threads - large);
    if len == 0 {
        return Vec::new();
    }
    let (large_ones, small_ones): (Vec<usize>, Vec<usize>) =
        (0..len).partition(|&i| small == 0 || size(i) > limits.small_bytes);
    let (next_large, next_small) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let take = |list: &[usize], next: &AtomicUsize| list.get(next.fetch_add(1, Ordering::Relaxed)).copied();
    let done: Vec<Vec<(usize, R)>> = rayon::broadcast(|context| {
        let mut done = Vec::new();
        let k = context.index();
        if k < large + small {
            crate::sources::keeping_buffers_of_any_size(|| {
                let mut state = init();
                while let Some(i) = (k < large).then(|| take(&large_ones, &next_large)).flatten() {
                    done.push((i, work(&mut state, i)));
                }
                while let Some(i) = take(&small_ones, &next_small) {
                    done.push((i, work(&mut state, i)));
                }
            });
        }
        done
    });
    let mut slots: Vec<Option<R>> = std::iter::repeat_with(|| None).take(len).collect();
    for (i, r) in done.into_iter().flatten() {
        slots[i] = Some(r);
    }
    // Every index below `len` is in one of the two lists, which the counters hand out once each.
    slots.into_iter().map(|r| r.expect("every index is measured once")).collect()
}

/// Frees, on every thread of the current pool, what the threads that measured pairs kept for their next
/// one beyond the idle bound (the sources' decode buffers, `sources::keeping_buffers_of_any_size`). The
/// engines call it when their pairs or tensors are done, so that the next engine in the same process
/// (`analyzer report` runs them all, each on threads of its own choosing) starts within the budget instead
/// of on top of what the last one's threads kept: report of two dump trees of 144 MiB tensors held 594 MiB.
pub fn release_kept_buffers() {
    rayon::broadcast(|_| crate::sources::release_large_buffers());
}

/// `work(values, k)` for every position `k` of `tensors`, the results in that order, for the commands that
/// decode tensors of one source to learn what it did not record (inspect's and overflow's statistics,
/// watch's histograms and exact checks): as many of those `decodes(t)` names at once as compare would
/// measure pairs of `source` against itself within the budget (a read holds a tensor's values and the
/// source's buffers, no more than a pair's two sides), the others beside them. `values` is the thread's
/// buffer, kept for its next tensor. Each thread read one at once before: one large tensor per core.
pub fn tensors_in_flight<R: Send>(
    source: &dyn Source,
    tensors: &[TensorId],
    decodes: impl Fn(TensorId) -> bool + Sync,
    work: impl Fn(&mut Vec<f32>, usize) -> R + Sync,
) -> Vec<R> {
    let index = source.index();
    let limits = pairs_in_flight(Footprint::compare([source, source]), [source, source]);
    let size = |k: usize| if decodes(tensors[k]) { tensor_bytes(&index.tensors[tensors[k]]) } else { 0 };
    let done = in_flight(limits, tensors.len(), size, Vec::new, work);
    release_kept_buffers();
    done
}

/// A source whose reads count how many of its large tensors are read at once, for the tests of the commands
/// that read tensors through [`tensors_in_flight`].
#[cfg(test)]
pub(crate) mod counting {
    use crate::index::{Index, Io, TensorId, TensorInfo};
    use crate::sources::Source;
    use accutrace_formats::DType;
    use anyhow::Result;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Ops with one output each, of the given element counts, whose values are read (no statistics were
    /// recorded): the value `k` for op `k`, two of them, whatever the shape says. It counts the reads in
    /// progress of tensors above [`crate::threads::SMALL_PAIR_BYTES`] as f32.
    pub(crate) struct Tensors {
        index: Index,
        large_now: AtomicUsize,
        pub(crate) large_most: AtomicUsize,
        pub(crate) reads: AtomicUsize,
    }

    impl Tensors {
        pub(crate) fn new(elements: &[u64]) -> Tensors {
            let mut index = Index::default();
            for (k, &n) in elements.iter().enumerate() {
                let op = index.push_op(format!("layer_{k}/mm"), "MatMul".into(), 0, 0);
                index.push_tensor(TensorInfo::for_test(op, Io::Output, 0, DType::FLOAT, vec![n]));
            }
            Tensors { index, large_now: 0.into(), large_most: 0.into(), reads: 0.into() }
        }
    }

    impl Source for Tensors {
        fn kind(&self) -> &'static str {
            "npy"
        }
        fn root(&self) -> &std::path::Path {
            std::path::Path::new("tensors")
        }
        fn index(&self) -> &Index {
            &self.index
        }
        fn read_values(&self, t: TensorId, out: &mut Vec<f32>) -> Result<()> {
            let large = super::tensor_bytes(&self.index.tensors[t]) > super::SMALL_PAIR_BYTES;
            if large {
                let now = self.large_now.fetch_add(1, Ordering::SeqCst) + 1;
                self.large_most.fetch_max(now, Ordering::SeqCst);
            }
            std::thread::sleep(std::time::Duration::from_millis(15));
            if large {
                self.large_now.fetch_sub(1, Ordering::SeqCst);
            }
            self.reads.fetch_add(1, Ordering::SeqCst);
            out.clear();
            out.extend([t as f32; 2]);
            Ok(())
        }
        fn content_hash(&self, t: TensorId) -> Result<u64> {
            Ok(t as u64)
        }
    }
}

/// For tests that count how much ran at once: waits, at most two seconds, until `reached()`. A loaded
/// machine may let one piece of work finish before the others start, and the most seen at once then falls
/// short of what the limits allow (a test failed so at a load of 10).
#[cfg(test)]
pub(crate) fn hold_until(reached: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while !reached() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    /// compare of two captures (3 buffers a side) and of two npy directories (1).
    const CAPTURES: Footprint = Footprint {
        base: 12 << 20,
        per_pair: 2 << 20,
        per_pair_tensors: 6,
        scratch_buffers: 0,
        scratch_max: 0,
    };
    const NPY: Footprint = Footprint {
        base: 12 << 20,
        per_pair: 2 << 20,
        per_pair_tensors: 2,
        scratch_buffers: 0,
        scratch_max: 0,
    };
    /// compare of two captures whose reads hold at most 24 MiB of zstd's frames (values, scratch a side).
    const WINDOWED: Footprint = Footprint {
        base: 12 << 20,
        per_pair: 2 << 20,
        per_pair_tensors: 4,
        scratch_buffers: 2,
        scratch_max: 24 * MIB,
    };

    /// diff of two captures of 9 MiB fp16 tensors (big-seq384-2), pairs read in waves.
    const DIFF_BOUNDED: Footprint = Footprint {
        per_pair: 6 * MIB,
        per_pair_tensors: 2,
        scratch_buffers: 2,
        scratch_max: 9 * MIB,
        base: 4 * MIB,
    };

    #[test]
    fn the_pairs_in_flight_keep_the_measured_footprint_within_the_budget() {
        for footprint in [CAPTURES, NPY, WINDOWED, Footprint::DIFF, DIFF_BOUNDED] {
            for largest in [0, 4 << 10, 200 << 10, 2 * MIB, 8 * MIB, 30 * MIB, 144 * MIB] {
                let n = pairs_for(footprint, largest, 1024) as u64;
                let used = footprint.base + n * footprint.per_pair_of(largest);
                let budget = BUDGET + 2 * largest;
                assert!(used <= budget || n == 1, "{footprint:?} {largest}: {n} pairs use {used}");
                // One more pair would not fit: as many pairs as the budget allows.
                let more = used + footprint.per_pair_of(largest);
                assert!(more > budget, "{footprint:?} {largest}: {n} pairs leave room for another");
            }
        }
    }

    /// A scratch that stays bounded counts as its bound once the tensors are larger: one pair of two
    /// captures' 144 MiB tensors then fits the budget (values and 24 MiB of frames a side), where whole
    /// planes beside the values did not; below the bound it counts as a whole buffer, as before.
    #[test]
    fn a_bounded_scratch_counts_as_its_bound() {
        let budget = |largest: u64| BUDGET + 2 * largest;
        assert!(WINDOWED.base + WINDOWED.per_pair_of(144 * MIB) <= budget(144 * MIB));
        assert!(
            CAPTURES.base + Footprint { per_pair_tensors: 4, ..CAPTURES }.per_pair_of(144 * MIB)
                > budget(144 * MIB)
        );
        for largest in [0, 2 * MIB, 24 * MIB] {
            assert_eq!(WINDOWED.per_pair_of(largest), WINDOWED.per_pair + 4 * largest, "{largest}");
        }
        assert_eq!(WINDOWED.per_pair_of(100 * MIB), WINDOWED.per_pair + 2 * 100 * MIB + 2 * 24 * MIB);
    }

    #[test]
    fn at_least_one_pair_and_never_more_than_the_threads() {
        assert_eq!(pairs_for(CAPTURES, 1 << 40, 16), 1);
        assert_eq!(pairs_for(CAPTURES, 0, 2), 2);
        assert_eq!(pairs_for(Footprint::DIFF, 0, 0), 1);
        // medium:4's largest tensor (2 MiB as f32) on a 16-core machine: 4 pairs for compare, 14 for diff.
        assert_eq!(pairs_for(CAPTURES, 2 * MIB, 16), 4);
        // An npy pair of 8 MiB f32 tensors: 3 pairs (2 on the 2-core VM).
        assert_eq!(pairs_for(NPY, 8 * MIB, 16), 3);
        assert_eq!(pairs_for(Footprint::DIFF, 2 * MIB, 16), 14);
        // big-seq384-2 (18 MiB as f32, 9 MiB of fp16 data): 2 pairs counted as f32, 4 within the data's
        // bound.
        assert_eq!(pairs_for(Footprint { per_pair: 6 * MIB, ..Footprint::DIFF }, 18 * MIB, 16), 2);
        assert_eq!(pairs_for(DIFF_BOUNDED, 18 * MIB, 16), 4);
    }

    /// Runs `f` in a pool of `threads` threads.
    fn in_pool<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
        rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool").install(f)
    }

    /// At most `n` calls of `work` run at once, always on the same `n` threads (those that keep per-thread
    /// buffers), while the work inside each call (a parallel loop of short sleeps) spreads over the other
    /// threads of the pool too; the results come back in index order, each index measured once.
    #[test]
    fn at_most_n_run_at_once_on_n_threads_while_their_parallel_work_takes_every_thread() {
        for n in [1, 2, 3] {
            let (now, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
            let outer = std::sync::Mutex::new(std::collections::BTreeSet::new());
            let inner = std::sync::Mutex::new(std::collections::BTreeSet::new());
            let inits = AtomicUsize::new(0);
            let results: Vec<Vec<usize>> = in_pool(6, || {
                // Two calls, as measure_pairs makes two a window: the same threads both times.
                (0..2)
                    .flat_map(|round| {
                        in_flight(
                            InFlight::any(n),
                            40,
                            |i| i as u64 * MIB,
                            || inits.fetch_add(1, Ordering::Relaxed),
                            |_, i| {
                                let running = now.fetch_add(1, Ordering::SeqCst) + 1;
                                most.fetch_max(running, Ordering::SeqCst);
                                outer.lock().unwrap().insert(rayon::current_thread_index());
                                super::hold_until(|| most.load(Ordering::SeqCst) >= n);
                                use rayon::prelude::*;
                                let got: Vec<usize> = (0..24)
                                    .into_par_iter()
                                    .map(|k| {
                                        inner.lock().unwrap().insert(rayon::current_thread_index());
                                        super::hold_until(|| inner.lock().unwrap().len() > n);
                                        std::thread::sleep(std::time::Duration::from_micros(300));
                                        k
                                    })
                                    .collect();
                                now.fetch_sub(1, Ordering::SeqCst);
                                got.into_iter().map(|k| round * 10_000 + i * 100 + k).collect::<Vec<usize>>()
                            },
                        )
                    })
                    .collect()
            });
            let expected: Vec<Vec<usize>> = (0..2)
                .flat_map(|round| {
                    (0..40).map(move |i| (0..24).map(|k| round * 10_000 + i * 100 + k).collect())
                })
                .collect();
            assert_eq!(results, expected, "n = {n}");
            assert_eq!(most.load(Ordering::SeqCst), n, "n = {n}: calls at once");
            let outer = outer.into_inner().unwrap();
            assert_eq!(outer.len(), n, "n = {n}: threads that ran a call: {outer:?}");
            assert!(outer.iter().all(|t| t.is_some_and(|t| t < n)), "n = {n}: {outer:?}");
            assert_eq!(inits.load(Ordering::Relaxed), 2 * n, "n = {n}: one state per thread and call");
            let inner = inner.into_inner().unwrap();
            assert!(inner.len() > n, "n = {n}: the parallel work ran on {inner:?} only");
        }
    }

    /// Large and small indices: at most `large` large ones at once, on the first `large` threads only; the
    /// small ones on those and `small` threads more; never more than the pool's threads; every index once,
    /// in order.
    #[test]
    fn large_pairs_stay_on_their_threads_and_small_ones_take_the_others() {
        // Every third index is large (2 MiB), the others small (64 KiB); small pairs are those up to 1 MiB.
        let size = |i: usize| if i.is_multiple_of(3) { 2 * MIB } else { 64 << 10 };
        for (threads, limits, most_large, most_all) in [
            (6, InFlight { large: 1, small: 3, small_bytes: MIB }, 1, 4),
            (6, InFlight { large: 2, small: 1, small_bytes: MIB }, 2, 3),
            (3, InFlight { large: 1, small: 8, small_bytes: MIB }, 1, 3),
            (4, InFlight { large: 2, small: 0, small_bytes: MIB }, 2, 2),
        ] {
            let (now, now_large) = (AtomicUsize::new(0), AtomicUsize::new(0));
            let (most, most_l) = (AtomicUsize::new(0), AtomicUsize::new(0));
            let started = AtomicUsize::new(0);
            let ran = std::sync::Mutex::new(Vec::new());
            let results = in_pool(threads, || {
                in_flight(
                    limits,
                    90,
                    size,
                    || (),
                    |_, i| {
                        let large = size(i) > limits.small_bytes && limits.small > 0;
                        started.fetch_add(1, Ordering::SeqCst);
                        most.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                        if large {
                            most_l.fetch_max(now_large.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                        }
                        ran.lock().unwrap().push((rayon::current_thread_index().unwrap(), large));
                        // Held until as many have run at once as may (every thread starts on one at first),
                        // then all run freely.
                        super::hold_until(|| {
                            most.load(Ordering::SeqCst) >= most_all || started.load(Ordering::SeqCst) == 90
                        });
                        std::thread::sleep(std::time::Duration::from_micros(if large { 2000 } else { 300 }));
                        if large {
                            now_large.fetch_sub(1, Ordering::SeqCst);
                        }
                        now.fetch_sub(1, Ordering::SeqCst);
                        i
                    },
                )
            });
            let case = format!("{threads} threads, {limits:?}");
            assert_eq!(results, (0..90).collect::<Vec<_>>(), "{case}");
            assert_eq!(most.load(Ordering::SeqCst), most_all, "{case}: at once");
            let ran = ran.into_inner().unwrap();
            assert!(ran.iter().all(|&(t, _)| t < most_all), "{case}: threads {ran:?}");
            if limits.small > 0 {
                assert_eq!(most_l.load(Ordering::SeqCst), most_large, "{case}: large ones at once");
                assert!(ran.iter().all(|&(t, large)| !large || t < limits.large), "{case}: {ran:?}");
            }
        }
    }

    /// Pairs of large tensors beside small ones: the large take what [`pairs_for`] gives, and the small pairs
    /// what is left of the budget, on the threads left; the budget holds for both together.
    #[test]
    fn small_pairs_fill_what_the_large_ones_leave_of_the_budget() {
        // big-seq256's attention tensors (8 MiB as f32) on 2 and 16 cores: one large pair, small ones beside.
        assert_eq!(
            InFlight::within_budget(CAPTURES, 8 * MIB, 2),
            InFlight { large: 1, small: 1, small_bytes: SMALL_PAIR_BYTES }
        );
        assert_eq!(
            InFlight::within_budget(CAPTURES, 8 * MIB, 16),
            InFlight { large: 1, small: 2, small_bytes: SMALL_PAIR_BYTES }
        );
        // medium:4 (2 MiB): the large pairs take the whole budget, as before.
        assert_eq!(InFlight::within_budget(CAPTURES, 2 * MIB, 16), InFlight::any(4));
        assert_eq!(InFlight::within_budget(CAPTURES, 2 * MIB, 2), InFlight::any(2));
        // Nothing larger than a small pair: every pair is one of the budget's.
        assert_eq!(InFlight::within_budget(CAPTURES, MIB, 16), InFlight::any(pairs_for(CAPTURES, MIB, 16)));
        for footprint in [CAPTURES, NPY, Footprint::DIFF] {
            for largest in [2 * MIB, 3 * MIB, 8 * MIB, 17 * MIB, 30 * MIB, 200 * MIB] {
                for threads in [1, 2, 4, 16, 64] {
                    let f = InFlight::within_budget(footprint, largest, threads);
                    assert!(f.large + f.small <= threads.max(1), "{footprint:?} {largest} {threads}: {f:?}");
                    let used = footprint.base
                        + f.large as u64 * footprint.per_pair_of(largest)
                        + f.small as u64 * footprint.per_pair_of(f.small_bytes);
                    let one_alone = f.large == 1 && f.small == 0;
                    assert!(used <= BUDGET + 2 * largest || one_alone, "{footprint:?} {largest}: {f:?}");
                }
            }
        }
    }

    /// More pairs asked for than the pool has threads: as many as it has; none to measure: nothing runs.
    #[test]
    fn never_more_pairs_than_threads_and_nothing_for_no_pairs() {
        let most = AtomicUsize::new(0);
        let now = AtomicUsize::new(0);
        let results = in_pool(2, || {
            in_flight(
                InFlight::any(8),
                50,
                |_| 0,
                || (),
                |_, i| {
                    most.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    now.fetch_sub(1, Ordering::SeqCst);
                    i
                },
            )
        });
        assert_eq!(results, (0..50).collect::<Vec<_>>());
        assert!(most.load(Ordering::SeqCst) <= 2);
        let none: Vec<usize> =
            in_pool(2, || in_flight(InFlight::any(2), 0, |_| 0, || (), |_, _| unreachable!("no index")));
        assert!(none.is_empty());
    }
}
