//! How many threads compare and diff measure tensor pairs with, so that their anonymous memory stays within
//! the design's budget (64 MiB + 2x the largest tensor as f32) on a machine of any size.
//!
//! Every thread that measures a pair holds buffers as large as the largest pair it met: compare of two
//! captures both sides decoded to f32 beside their raw bytes and zstd's scratch, diff its block buffers and
//! zstd's scratch. So anonymous memory grows with the number of threads, not with the input: on the medium:4
//! pair compare took 32 MiB with 2 threads and 151 MiB with 16 (16 cores would then be over budget, 192 far
//! over). The default pool is as large as the budget allows for the largest tensor of the two runs and each
//! source's buffers per tensor, and never larger than the machine. `RAYON_NUM_THREADS`, when set, is the
//! user's choice and taken as it is: more threads for more memory. One thread measures however large a
//! tensor is, so above ~17 MiB as f32 one compare pair of captures alone needs more than the budget.

use crate::index::Index;
use crate::sources::Source;

/// The anonymous memory a command may use, beside twice its largest tensor as f32 ([`threads_for`]).
const BUDGET: u64 = 64 << 20;

/// What a command's threads hold, measured on sim-train captures (small:4 and medium:4, 1 to 32 threads, on
/// a 2-core VM and a 16-core machine) and rounded up: memory before any thread measures, and per thread a
/// fixed part plus a multiple of the largest tensor as f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    pub base: u64,
    pub per_thread: u64,
    pub per_thread_tensors: u64,
}

impl Footprint {
    /// compare of `sources`: ~10 MiB before its threads; per thread 2 MiB of the allocator's slack and each
    /// side's [`Source::buffers_per_tensor`] times the largest tensor as f32. Measured on medium:4 captures:
    /// 11-12 MiB per thread for a largest tensor of 2 MiB (2 to 5 threads: 32, 43, 57, 65-68 MiB; 76 with 6
    /// on a 16-core machine, 179 with 16); an npy pair of 8 MiB f32 tensors: 20 MiB with 2 threads.
    pub fn compare(sources: [&dyn Source; 2]) -> Footprint {
        let per_thread_tensors = sources.iter().map(|s| s.buffers_per_tensor()).sum();
        Footprint { base: 12 << 20, per_thread: 2 << 20, per_thread_tensors }
    }
    /// diff reads block by block: 4 MiB with one thread; per thread ~0.3 MiB + 1.6x the largest tensor.
    pub const DIFF: Footprint = Footprint { base: 4 << 20, per_thread: 1 << 19, per_thread_tensors: 2 };
}

/// The largest tensor of `indexes` as f32 (or as f64 where it is wider), in bytes: the size compare decodes
/// it to. Device shapes count where larger (padding is decoded, then cropped).
pub fn largest_tensor_bytes<'a>(indexes: impl IntoIterator<Item = &'a Index>) -> u64 {
    let elements = |shape: &[u64]| shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).unwrap_or(u64::MAX);
    indexes
        .into_iter()
        .flat_map(|index| &index.tensors)
        .map(|t| {
            let n = elements(&t.shape).max(t.device_shape.as_deref().map_or(0, elements));
            let width = t.dtype.bits().map_or(4, |b| u64::from(b).div_ceil(8).max(4));
            n.saturating_mul(width)
        })
        .max()
        .unwrap_or(0)
}

/// How many threads keep `footprint` within the budget when the largest tensor is `largest` bytes as f32:
/// at least one (a single tensor larger than the budget allows is still measured), at most `cores`.
pub fn threads_for(footprint: Footprint, largest: u64, cores: usize) -> usize {
    let allowed = BUDGET.saturating_add(largest.saturating_mul(2)).saturating_sub(footprint.base);
    let per_thread =
        footprint.per_thread.saturating_add(largest.saturating_mul(footprint.per_thread_tensors));
    let fits = usize::try_from(allowed / per_thread.max(1)).unwrap_or(usize::MAX);
    fits.clamp(1, cores.max(1))
}

/// A pool for measuring the pairs of `sources` ([`threads_for`] on this machine's cores), or `None` where the
/// user set `RAYON_NUM_THREADS` (the global pool honours it) or the pool cannot be built (then the global
/// one is used).
pub fn measuring_pool(footprint: Footprint, sources: [&dyn Source; 2]) -> Option<rayon::ThreadPool> {
    if std::env::var_os("RAYON_NUM_THREADS").is_some() {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = threads_for(footprint, largest_tensor_bytes(sources.map(Source::index)), cores);
    rayon::ThreadPoolBuilder::new().num_threads(threads).build().ok()
}

/// `f` run in `pool` where there is one, else in the global pool.
pub fn install<T: Send>(pool: Option<&rayon::ThreadPool>, f: impl FnOnce() -> T + Send) -> T {
    match pool {
        Some(pool) => pool.install(f),
        None => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    /// compare of two captures (3 buffers a side) and of two npy directories (1).
    const CAPTURES: Footprint = Footprint { base: 12 << 20, per_thread: 2 << 20, per_thread_tensors: 6 };
    const NPY: Footprint = Footprint { base: 12 << 20, per_thread: 2 << 20, per_thread_tensors: 2 };

    #[test]
    fn the_pool_keeps_the_measured_footprint_within_the_budget() {
        for footprint in [CAPTURES, NPY, Footprint::DIFF] {
            for largest in [0, 4 << 10, 200 << 10, 2 * MIB, 8 * MIB, 30 * MIB] {
                let n = threads_for(footprint, largest, 1024) as u64;
                let used =
                    footprint.base + n * (footprint.per_thread + footprint.per_thread_tensors * largest);
                let budget = BUDGET + 2 * largest;
                assert!(used <= budget || n == 1, "{footprint:?} {largest}: {n} threads use {used}");
                // One more thread would not fit: the pool is as large as the budget allows.
                let more = used + footprint.per_thread + footprint.per_thread_tensors * largest;
                assert!(more > budget, "{footprint:?} {largest}: {n} threads leave room for another");
            }
        }
    }

    #[test]
    fn at_least_one_thread_and_never_more_than_the_cores() {
        assert_eq!(threads_for(CAPTURES, 1 << 40, 16), 1);
        assert_eq!(threads_for(CAPTURES, 0, 2), 2);
        assert_eq!(threads_for(Footprint::DIFF, 0, 0), 1);
        // medium:4's largest tensor (2 MiB as f32) on a 16-core machine: 4 threads for compare, 14 for diff.
        assert_eq!(threads_for(CAPTURES, 2 * MIB, 16), 4);
        // An npy pair of 8 MiB f32 tensors: 3 threads (2 on the 2-core VM, as before the pool).
        assert_eq!(threads_for(NPY, 8 * MIB, 16), 3);
        assert_eq!(threads_for(Footprint::DIFF, 2 * MIB, 16), 14);
    }
}
