//! msprobe's relative error in f16 ([`RePrecision::F16`](super::RePrecision::F16): fp16 pairs) over a chunk,
//! with each rounding to f16 done by the CPU's own conversion where it has one: F16C's `vcvtps2ph` (round
//! to nearest even) and `vcvtph2ps` back, two instructions per 8 values, instead of
//! [`round_to_f16`](super::kernel::round_to_f16)'s fifteen integer and float operations. The fused pass
//! (`fused.rs`) runs it beside its f64 sums when it also forms msaccucmp's sums, on x86_64 at
//! [`Level::Avx2`](accutrace_formats::simd::Level::Avx2) and above; with msprobe's metrics alone it runs
//! [`probe_of_f16_values`] instead, its whole loop written with the hardware's rounding (`f16c.rs`, eight
//! pairs a step; `avx512.rs`, sixteen, on CPUs with AVX-512); everywhere else (the portable and SSE2
//! builds, aarch64, pairs with inf/NaN) it computes the same in its own lanes.
//!
//! What the fused pass takes from the relative errors does not depend on their order: their maximum (NaN
//! left out, as numpy's `max` never sees one here: the NaN flag says so), whether one is NaN, the counts
//! below msprobe's two thresholds, and whether every value of both sides is an f16 value (KL's reciprocal
//! path, `msaccucmp::Fp16Values`). So a separate pass over the chunk gives the fused pass's bits exactly,
//! provided each relative error is the same: each operation is [`rel_err_f16`]'s,
//! in the same order, and the rounding is the same function (IEEE round to nearest even into binary16,
//! overflow to infinity, subnormals kept, a NaN stays a NaN); the tests below check it against
//! `round_to_f16` on every f32 exponent and a stride of all bit patterns, and the whole pass against the
//! portable one.

use super::kernel::rel_err_f16;
use super::sums::MsprobeSums;

/// The fused pass's relative-error figures of a chunk (see the module's doc).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ReF16 {
    /// The largest relative error that is not NaN; 0 when there is none.
    pub max_re: f32,
    /// Some relative error is NaN.
    pub re_nan: bool,
    /// How many are below msprobe's thresholds (`t1`, `t5`).
    pub lt1: u64,
    pub lt5: u64,
    /// Some value of either side is not an f16 value (its rounding to f16 is another number, or NaN).
    pub not_f16: bool,
}

// Only the x86_64 build runs the hardware pass, which uses these (aarch64 has no stable f16 conversion
// intrinsics in Rust yet: its fused lanes round in software).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl ReF16 {
    const EMPTY: ReF16 = ReF16 { max_re: 0.0, re_nan: false, lt1: 0, lt5: 0, not_f16: false };

    fn merge(self, o: ReF16) -> ReF16 {
        ReF16 {
            max_re: if o.max_re > self.max_re { o.max_re } else { self.max_re },
            re_nan: self.re_nan || o.re_nan,
            lt1: self.lt1 + o.lt1,
            lt5: self.lt5 + o.lt5,
            not_f16: self.not_f16 || o.not_f16,
        }
    }
}

/// [`ReF16`] of a pair one element at a time with [`rel_err_f16`]: the reference, and the tail past the last
/// whole vector.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn portable(n: &[f32], b: &[f32], (t1, t5): (f32, f32)) -> ReF16 {
    use super::kernel::round_to_f16 as r;
    let mut out = ReF16::EMPTY;
    for (&x, &y) in n.iter().zip(b) {
        let re = rel_err_f16(x, y);
        out.max_re = if re > out.max_re { re } else { out.max_re };
        out.re_nan |= re.is_nan();
        out.lt1 += u64::from(re < t1);
        out.lt5 += u64::from(re < t5);
        out.not_f16 |= r(x) != x || r(y) != y;
    }
    out
}

/// msprobe's sums of a pair of f16 values (equal lengths, fewer than 2^32 elements: one chunk of the fused
/// pass), relative error in f16, through the CPU's f16 conversion when it has one and the current
/// [`simd::level`](accutrace_formats::simd::level) allows it; `None` otherwise. The same bits as the fused
/// pass's own lanes (`fused::chunk` without msaccucmp's sums: the same f64 lanes, operations and order, and
/// [`rel_err_of_f16_values`](super::kernel::rel_err_of_f16_values) with the hardware's rounding), for any
/// input; only the work differs: the roundings were two thirds of that pass's instructions.
pub(crate) fn probe_of_f16_values(n: &[f32], b: &[f32], thresholds: (f32, f32)) -> Option<MsprobeSums> {
    debug_assert_eq!(n.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    {
        use accutrace_formats::simd::{level, Level};
        if level() >= Level::Avx512 {
            // SAFETY: level() reports Avx512 only when this CPU has AVX-512 F/DQ/BW/VL, AVX2 and F16C.
            return Some(unsafe { avx512::probe_of_f16_values(n, b, thresholds) });
        }
        if level() >= Level::Avx2 {
            // SAFETY: level() reports Avx2 only when this CPU has AVX2 and F16C (simd::detect).
            return Some(unsafe { f16c::probe_of_f16_values(n, b, thresholds) });
        }
    }
    let _ = (n, b, thresholds);
    None
}

/// [`probe_of_f16_values`] of a pair given as fp16 bytes (little-endian, equal lengths, even): each value
/// widened in the loop as it is read, where the pair as f32 would first be written out and read back.
pub(crate) fn probe_of_f16_bytes(n: &[u8], b: &[u8], thresholds: (f32, f32)) -> Option<MsprobeSums> {
    debug_assert!(n.len() == b.len() && n.len().is_multiple_of(2));
    #[cfg(target_arch = "x86_64")]
    {
        use accutrace_formats::simd::{level, Level};
        if level() >= Level::Avx512 {
            // SAFETY: level() reports Avx512 only when this CPU has AVX-512 F/DQ/BW/VL, AVX2 and F16C.
            return Some(unsafe { avx512::probe_of_f16_bytes(n, b, thresholds) });
        }
        if level() >= Level::Avx2 {
            // SAFETY: level() reports Avx2 only when this CPU has AVX2 and F16C (simd::detect).
            return Some(unsafe { f16c::probe_of_f16_bytes(n, b, thresholds) });
        }
    }
    let _ = (n, b, thresholds);
    None
}

/// [`ReF16`] of a pair (equal lengths) through the CPU's f16 conversion, when it has one and the current
/// [`simd::level`](accutrace_formats::simd::level) allows it; `None` otherwise.
pub(crate) fn by_hardware(n: &[f32], b: &[f32], thresholds: (f32, f32)) -> Option<ReF16> {
    debug_assert_eq!(n.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if accutrace_formats::simd::level() >= accutrace_formats::simd::Level::Avx2 {
        // SAFETY: level() reports Avx2 only when this CPU has AVX2 and F16C (simd::detect).
        return Some(unsafe { f16c::re_f16(n, b, thresholds) });
    }
    let _ = (n, b, thresholds);
    None
}

/// msprobe's f64 sums in the fused pass's eight lanes (pair `i` of a chunk in lane `i % 8`) and the relative
/// errors' figures, as a hardware pass leaves them where its vectors end.
#[cfg(target_arch = "x86_64")]
struct ProbeLanes {
    dot: [f64; 8],
    nn: [f64; 8],
    bb: [f64; 8],
    dd: [f64; 8],
    max_abs: [f64; 8],
    max_re: [f32; 8],
    re_nan: bool,
    lt_one: u64,
    lt_five: u64,
}

#[cfg(target_arch = "x86_64")]
impl ProbeLanes {
    /// Pairs `from..len` one by one (`from` a multiple of 8, where the vectors stopped; pair `i` to lane
    /// `i % 8`, as the fused pass's ragged end), then the lanes summed as there.
    fn finish(
        mut self,
        from: usize,
        len: usize,
        one: impl Fn(usize) -> (f32, f32),
        t: (f32, f32),
    ) -> MsprobeSums {
        use super::kernel::{hmax, hsum, rel_err_of_f16_values};
        debug_assert!(from.is_multiple_of(8) && from <= len);
        for i in from..len {
            let (l, (x, y)) = (i % 8, one(i));
            let (xd, yd) = (f64::from(x), f64::from(y));
            self.dot[l] += xd * yd;
            self.nn[l] += xd * xd;
            self.bb[l] += yd * yd;
            let d = xd - yd;
            self.dd[l] += d * d;
            self.max_abs[l] = if d.abs() > self.max_abs[l] { d.abs() } else { self.max_abs[l] };
            let re = rel_err_of_f16_values(x, y);
            self.max_re[l] = if re > self.max_re[l] { re } else { self.max_re[l] };
            self.re_nan |= re.is_nan();
            self.lt_one += u64::from(re < t.0);
            self.lt_five += u64::from(re < t.1);
        }
        let (nn, bb) = (hsum(&self.nn), hsum(&self.bb));
        MsprobeSums {
            len: len as u64,
            dot: hsum(&self.dot),
            nn,
            bb,
            dd: hsum(&self.dd),
            max_abs: hmax(&self.max_abs),
            max_re: hmax(&self.max_re.map(f64::from)),
            re_nan: self.re_nan,
            lt_one: self.lt_one,
            lt_five: self.lt_five,
            nonfinite: !(nn.is_finite() && bb.is_finite()),
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod f16c;

#[cfg(test)]
mod tests;
