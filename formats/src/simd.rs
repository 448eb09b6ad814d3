//! CPU-feature dispatch: the one place that decides which instruction-set build of a kernel runs.
//!
//! Kernels come in two kinds, and both go through [`level`]:
//! - **Portable lane kernels** (statistics blocks, comparison metrics): plain Rust over independent lanes,
//!   which LLVM vectorizes for the target's baseline (SSE2 on x86_64, NEON on aarch64). On x86_64,
//!   [`multiversion!`](crate::multiversion) also compiles them for AVX2 and AVX-512 and picks the build at
//!   run time. aarch64 has no wider vector unit to switch to (NEON is its baseline; Ascend hosts' Kunpeng
//!   cores have no SVE), so there the baseline build is the NEON build.
//! - **Hand-written intrinsics** where the compiler cannot vectorize the portable code (byte deinterleaves,
//!   fp16 conversion): SSE2 / NEON at [`Level::Baseline`], F16C at [`Level::Avx2`], each beside a portable
//!   version of the same function.
//!
//! One kernel dispatches on its own: XXH3, the content hash ([`crate::hash`]), whose `twox-hash` builds
//! (AVX2/SSE2, NEON) are chosen by that crate's CPU detection; [`with_ceiling`] does not lower it.
//!
//! Every build performs the same IEEE operations in the same order (Rust never contracts `a * b + c` into
//! an FMA), so all builds give bit-identical results; tests run each build the CPU has ([`available`]) and
//! compare. [`with_ceiling`] lowers the level process-wide for those tests and for benchmarks.

use std::sync::atomic::{AtomicU8, Ordering};

/// An instruction-set level, ordered: each level's CPUs can run every lower level's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Plain Rust only, compiled for the target's baseline (the compiler may still use SSE2/NEON).
    Portable = 1,
    /// Also the hand-written kernels of the target's baseline: SSE2 on x86_64, NEON on aarch64.
    Baseline = 2,
    /// x86_64 with AVX2 and F16C: the lane kernels in 256-bit registers, fp16 conversion in hardware.
    Avx2 = 3,
    /// x86_64 with AVX-512 F/VL/DQ/BW: the lane kernels in 512-bit registers (32 of them).
    Avx512 = 4,
}

impl Level {
    const ALL: [Level; 4] = [Level::Portable, Level::Baseline, Level::Avx2, Level::Avx512];

    fn from_u8(v: u8) -> Option<Level> {
        Level::ALL.into_iter().find(|l| *l as u8 == v)
    }

    /// The level's name as benchmarks print it, e.g. `avx2`.
    pub fn name(self) -> &'static str {
        match self {
            Level::Portable => "portable",
            Level::Baseline if cfg!(target_arch = "aarch64") => "neon",
            Level::Baseline if cfg!(target_arch = "x86_64") => "sse2",
            Level::Baseline => "baseline",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
        }
    }
}

/// 0: not yet detected.
static DETECTED: AtomicU8 = AtomicU8::new(0);
/// The ceiling set by [`with_ceiling`]; the highest level when none is set.
static CEILING: AtomicU8 = AtomicU8::new(Level::Avx512 as u8);

/// The highest level this CPU runs (detected once, then cached).
pub fn detected() -> Level {
    if let Some(level) = Level::from_u8(DETECTED.load(Ordering::Relaxed)) {
        return level;
    }
    let level = detect();
    DETECTED.store(level as u8, Ordering::Relaxed);
    level
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Level {
    use std::arch::is_x86_feature_detected as has;
    let avx2 = has!("avx2") && has!("f16c");
    if avx2 && has!("avx512f") && has!("avx512vl") && has!("avx512dq") && has!("avx512bw") {
        Level::Avx512
    } else if avx2 {
        Level::Avx2
    } else {
        Level::Baseline
    }
}

/// aarch64: NEON (Advanced SIMD) is part of the baseline, so the baseline kernels always run.
#[cfg(target_arch = "aarch64")]
fn detect() -> Level {
    Level::Baseline
}

/// Other targets have no hand-written kernels: the portable code only.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn detect() -> Level {
    Level::Portable
}

/// The level kernels run at now: the detected one, lowered to the ceiling if one is set.
#[inline]
pub fn level() -> Level {
    let ceiling = Level::from_u8(CEILING.load(Ordering::Relaxed)).unwrap_or(Level::Avx512);
    detected().min(ceiling)
}

/// Serializes [`with_ceiling`] calls, so that a test comparing builds really runs the build it asks for.
static CEILING_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `f` with every kernel in the process at most at `ceiling` (and at exactly `ceiling` when the CPU has
/// it), then restores what the CPU has. For tests that compare builds and for benchmarks; results are the
/// same at every level. Calls are serialized (kernels running elsewhere meanwhile may run lower builds).
pub fn with_ceiling<R>(ceiling: Level, f: impl FnOnce() -> R) -> R {
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            CEILING.store(Level::Avx512 as u8, Ordering::Relaxed);
        }
    }
    // A panic in another caller's `f` (a failed test) poisons the lock; the ceiling was restored anyway.
    let _lock = CEILING_LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    CEILING.store(ceiling as u8, Ordering::Relaxed);
    let _restore = Restore;
    f()
}

/// Every level this CPU runs, lowest first: what a test compares and a benchmark times.
pub fn available() -> Vec<Level> {
    let top = detected();
    Level::ALL.into_iter().filter(|l| *l <= top).collect()
}

/// Defines `fn $name(args) -> ret` that runs `$kernel` (an `#[inline(always)]` function of the same
/// signature) through the build for the current [`level`]: on x86_64 an AVX-512-compiled copy, else an
/// AVX2-compiled copy, else the baseline build; elsewhere the baseline build (NEON on aarch64). The copies
/// are the same Rust code, vectorized by LLVM with 512-, 256- or 128-bit registers.
///
/// Attributes before `fn` go on the dispatching function (e.g. `#[inline(never)]`). Const generic
/// parameters are passed through. `up_to Avx2` leaves out the AVX-512 build, for kernels that run slower
/// with it.
///
/// ```
/// #[inline(always)]
/// fn sum_kernel(values: &[f64]) -> f64 {
///     values.iter().sum()
/// }
/// accutrace_formats::multiversion!(fn sum(values: &[f64]) -> f64 = sum_kernel);
/// assert_eq!(sum(&[1.0, 2.0]), 3.0);
/// ```
#[macro_export]
macro_rules! multiversion {
    ($(#[$attr:meta])* $vis:vis fn $name:ident $(<$(const $c:ident: $ct:ty),*>)?
        ($($arg:ident: $ty:ty),*) -> $ret:ty = $kernel:ident $(, up_to $max:ident)?) => {
        $(#[$attr])*
        $vis fn $name $(<$(const $c: $ct),*>)? ($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                fn avx2 $(<$(const $c: $ct),*>)? ($($arg: $ty),*) -> $ret {
                    $kernel $(::<$($c),*>)? ($($arg),*)
                }
                $crate::multiversion!(@avx512 $(up_to $max)? {
                    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512dq,avx512bw")]
                    fn avx512 $(<$(const $c: $ct),*>)? ($($arg: $ty),*) -> $ret {
                        $kernel $(::<$($c),*>)? ($($arg),*)
                    }
                    if $crate::simd::level() >= $crate::simd::Level::Avx512 {
                        // SAFETY: level() reports AVX-512 F/VL/DQ/BW (and AVX2) only when this CPU has them.
                        return unsafe { avx512 $(::<$($c),*>)? ($($arg),*) };
                    }
                });
                if $crate::simd::level() >= $crate::simd::Level::Avx2 {
                    // SAFETY: level() reports AVX2 only when this CPU has it.
                    return unsafe { avx2 $(::<$($c),*>)? ($($arg),*) };
                }
            }
            $kernel $(::<$($c),*>)? ($($arg),*)
        }
    };
    (@avx512 up_to Avx2 { $($body:tt)* }) => {};
    (@avx512 { $($body:tt)* }) => { $($body)* };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_ordered_and_the_ceiling_lowers_the_level() {
        let all = available();
        assert_eq!(all.first(), Some(&Level::Portable));
        assert_eq!(all.last(), Some(&detected()));
        assert!(all.windows(2).all(|w| w[0] < w[1]));
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        assert!(detected() >= Level::Baseline, "SSE2 and NEON are part of these targets' baselines");
        for l in &all {
            assert_eq!(with_ceiling(*l, level), *l);
        }
        assert_eq!(with_ceiling(Level::Avx512, level), detected());
    }

    #[inline(always)]
    fn kernel<const SQUARE: bool>(values: &[f64], scale: f64) -> f64 {
        values.iter().map(|v| if SQUARE { v * v * scale } else { v * scale }).sum()
    }
    crate::multiversion!(#[inline(never)] fn every_build<const SQUARE: bool>(values: &[f64], scale: f64) -> f64 = kernel);
    #[inline(always)]
    fn plain_kernel(values: &[f64], scale: f64) -> f64 {
        kernel::<false>(values, scale)
    }
    crate::multiversion!(fn up_to_avx2(values: &[f64], scale: f64) -> f64 = plain_kernel, up_to Avx2);

    #[test]
    fn multiversioned_functions_agree_at_every_level() {
        let values: Vec<f64> = (0..1001).map(|i| (i as f64 * 0.37).sin() * 1e3).collect();
        let want = (kernel::<true>(&values, 0.5), kernel::<false>(&values, 0.5));
        for level in available() {
            let (square, plain, capped) = with_ceiling(level, || {
                (
                    every_build::<true>(&values, 0.5),
                    every_build::<false>(&values, 0.5),
                    up_to_avx2(&values, 0.5),
                )
            });
            assert_eq!(square.to_bits(), want.0.to_bits(), "{level:?}");
            assert_eq!(plain.to_bits(), want.1.to_bits(), "{level:?}");
            assert_eq!(capped.to_bits(), want.1.to_bits(), "{level:?}");
        }
    }
}
