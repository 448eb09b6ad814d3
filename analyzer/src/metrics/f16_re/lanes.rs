//! What the passes over fp16 pairs fill ([`super`]): the relative errors' figures ([`ReF16`]) and their
//! one-at-a-time reference ([`portable`]), and msprobe's sums in the fused pass's eight lanes with the
//! ragged end the hardware passes share ([`ProbeLanes`]).

use super::super::kernel::rel_err_f16;
#[cfg(target_arch = "x86_64")]
use super::super::sums::MsprobeSums;

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
    pub(super) const EMPTY: ReF16 = ReF16 { max_re: 0.0, re_nan: false, lt1: 0, lt5: 0, not_f16: false };

    pub(super) fn merge(self, o: ReF16) -> ReF16 {
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
    use super::super::kernel::round_to_f16 as r;
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

/// msprobe's f64 sums in the fused pass's eight lanes (pair `i` of a chunk in lane `i % 8`) and the relative
/// errors' figures, as a hardware pass leaves them where its vectors end.
#[cfg(target_arch = "x86_64")]
pub(super) struct ProbeLanes {
    pub(super) dot: [f64; 8],
    pub(super) nn: [f64; 8],
    pub(super) bb: [f64; 8],
    pub(super) dd: [f64; 8],
    pub(super) max_abs: [f64; 8],
    pub(super) max_re: [f32; 8],
    pub(super) re_nan: bool,
    pub(super) lt_one: u64,
    pub(super) lt_five: u64,
}

#[cfg(target_arch = "x86_64")]
impl ProbeLanes {
    /// Pairs `from..len` one by one (`from` a multiple of 8, where the vectors stopped; pair `i` to lane
    /// `i % 8`, as the fused pass's ragged end), then the lanes summed as there.
    pub(super) fn finish(
        mut self,
        from: usize,
        len: usize,
        one: impl Fn(usize) -> (f32, f32),
        t: (f32, f32),
    ) -> MsprobeSums {
        use super::super::kernel::{hmax, hsum, rel_err_of_f16_values};
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
