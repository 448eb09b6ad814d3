use super::*;
use accutrace_formats::simd::{self, Level};

/// The hardware's rounding (the value in every lane) against `round_to_f16` (itself tested
/// against the `half` crate), on the bit patterns `round_to_f16_equals_half` takes: every exponent,
/// every mantissa bit f16 keeps, the ties and their neighbours, and a prime stride.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_hardware_rounds_as_round_to_f16() {
    if simd::detected() < Level::Avx2 {
        return eprintln!("not run: this CPU has no AVX2 and F16C (the f16c path is never taken here)");
    }
    let check = |bits: u32| {
        let x = f32::from_bits(bits);
        // SAFETY: the CPU has AVX2 and F16C (checked above).
        let (got, want) = (unsafe { f16c::round_one(x) }, super::super::kernel::round_to_f16(x));
        assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{bits:#010x}");
    };
    super::super::kernel::f16_rounding_probes().for_each(check);
}

/// Pairs that reach every branch of the relative error: f16 values and values between them, zero and
/// signed-zero benches, subnormals, values that overflow f16, infinities and NaN.
fn pair(len: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    use accutrace_formats::tensor::half_bits::f16_to_f32;
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 32) as u32
    };
    let value = |r: u32| match r % 13 {
        0 => 0.0,
        1 => -0.0,
        2 => f16_to_f32((r >> 8) as u16 & 0x83FF), // subnormal or zero
        3 => 65504.0 * (1.0 + (r >> 8) as f32 / 1e7),
        4 => f32::from_bits(r >> 4), // tiny to moderate, rarely f16
        5 => [f32::INFINITY, f32::NEG_INFINITY, f32::NAN][(r >> 8) as usize % 3],
        6 => (r >> 8) as f32 * 1e-9,
        _ => f16_to_f32((r >> 8) as u16 & 0x7BFF | ((r & 0x80) as u16) << 8),
    };
    (0..len).map(|_| (value(next()), value(next()))).unzip()
}

/// The hardware's msprobe sums against the fused pass's own lanes (its baseline build, which rounds
/// in software), bit for bit, on pairs with every branch of the relative error, inf and NaN (whose
/// sums are void but still the same bits, NaN for NaN), lengths with and without a ragged end; on
/// finite pairs whose sums show each value's lane; and on a chunk of plain f16 activations.
#[test]
fn the_hardware_probe_sums_are_the_fused_lanes() {
    let thresholds = {
        let (t1, t5) = super::super::RePrecision::F16.thresholds();
        (t1 as f32, t5 as f32)
    };
    // A NaN sum's sign and payload depend on which NaN an addition passes on; no figure reads them.
    let bits = |s: &MsprobeSums| {
        let f = |v: f64| if v.is_nan() { f64::NAN.to_bits() } else { v.to_bits() };
        let sums = [f(s.dot), f(s.nn), f(s.bb), f(s.dd), f(s.max_abs), f(s.max_re)];
        (s.len, sums, s.re_nan, s.lt_one, s.lt_five, s.nonfinite)
    };
    let activations = {
        use accutrace_formats::tensor::half_bits::f16_to_f32;
        let (n, b): (Vec<f32>, Vec<f32>) = (0..65_536u32)
            .map(|i| {
                let h = (i.wrapping_mul(2_654_435_761) >> 16) as u16 & 0xBBFF;
                (f16_to_f32(h), f16_to_f32(h ^ (i % 3) as u16))
            })
            .unzip();
        (n, b)
    };
    let mut cases: Vec<(Vec<f32>, Vec<f32>)> = vec![activations];
    // Finite f16 values of every exponent, with ragged ends: sums that show which lane each value went
    // to (a lane's sum rounds differently with another value in it).
    for len in 1001..=1016 {
        cases.extend((0..8u64).map(|seed| {
            let (n, b) = pair(len, seed * 13 + len as u64);
            let finite = |v: f32| if v.is_finite() && v.abs() <= 65504.0 { v } else { 1.5 };
            (n.into_iter().map(finite).collect(), b.into_iter().map(finite).collect())
        }));
    }
    for len in [0, 1, 7, 8, 9, 15, 16, 17, 24, 31, 100, 4099] {
        cases.extend((0..20u64).map(|seed| pair(len, seed * 11 + len as u64)));
    }
    for (n, b) in &cases {
        let want =
            simd::with_ceiling(Level::Baseline, || super::super::fused::msprobe_chunk::<false, true>(n, b));
        // Each hardware build this CPU has: AVX2 + F16C, and AVX-512 (sixteen pairs a step).
        for level in [Level::Avx2, Level::Avx512] {
            let got = simd::with_ceiling(level, || probe_of_f16_values(n, b, thresholds));
            assert_eq!(got.is_some(), cfg!(target_arch = "x86_64") && simd::detected() >= Level::Avx2);
            if let Some(got) = got {
                assert_eq!(bits(&got), bits(&want), "{} values, {level:?}", n.len());
            }
        }
    }
}

/// The pass over fp16 bytes against the pass over their values, bit for bit (NaN for NaN), on the
/// same pairs rounded to f16 (inf, NaN, zeros, subnormals among them), with and without a ragged end.
#[test]
fn fp16_bytes_give_the_sums_of_their_values() {
    use accutrace_formats::tensor::half_bits::f16_to_f32;
    let thresholds = {
        let (t1, t5) = super::super::RePrecision::F16.thresholds();
        (t1 as f32, t5 as f32)
    };
    let f = |v: f64| if v.is_nan() { f64::NAN.to_bits() } else { v.to_bits() };
    let bits = |s: &MsprobeSums| {
        let sums = [f(s.dot), f(s.nn), f(s.bb), f(s.dd), f(s.max_abs), f(s.max_re)];
        (s.len, sums, s.re_nan, s.lt_one, s.lt_five, s.nonfinite)
    };
    for len in [0, 1, 7, 8, 9, 15, 16, 17, 24, 100, 4099, 65_536] {
        for seed in 0..6u64 {
            let (n, b) = pair(len, seed * 17 + len as u64);
            let halves =
                |v: &[f32]| -> Vec<u16> { v.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect() };
            let (hn, hb) = (halves(&n), halves(&b));
            let bytes = |h: &[u16]| h.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
            let values = |h: &[u16]| h.iter().map(|&v| f16_to_f32(v)).collect::<Vec<f32>>();
            // Under a ceiling: another test's lowered one would otherwise take the hardware away from
            // one call and not the other (the ceiling is the process's).
            for level in [Level::Avx2, Level::Avx512] {
                let (want, got) = simd::with_ceiling(level, || {
                    let want = probe_of_f16_values(&values(&hn), &values(&hb), thresholds);
                    (want, probe_of_f16_bytes(&bytes(&hn), &bytes(&hb), thresholds))
                });
                assert_eq!(got.is_some(), want.is_some());
                if let (Some(got), Some(want)) = (got, want) {
                    assert_eq!(bits(&got), bits(&want), "{len} values, seed {seed}, {level:?}");
                }
            }
        }
    }
}

#[test]
fn every_level_gives_the_portable_figures() {
    let thresholds = {
        let (t1, t5) = super::super::RePrecision::F16.thresholds();
        (t1 as f32, t5 as f32)
    };
    for len in [0, 1, 7, 8, 9, 100, 4099] {
        for seed in 0..20u64 {
            let (n, b) = pair(len, seed * 7 + len as u64);
            let want = portable(&n, &b, thresholds);
            for level in simd::available() {
                let got = simd::with_ceiling(level, || by_hardware(&n, &b, thresholds));
                let hardware = cfg!(target_arch = "x86_64") && level >= Level::Avx2;
                assert_eq!(got.is_some(), hardware, "{level:?}");
                if let Some(got) = got {
                    assert_eq!(
                        got.max_re.to_bits(),
                        want.max_re.to_bits(),
                        "len {len} seed {seed} {level:?}"
                    );
                    assert_eq!(got, want, "len {len} seed {seed} {level:?}");
                }
            }
            // Every pair of this length in one vector each: each value's own figures.
            if len == 8 {
                for i in 0..8 {
                    let one = portable(&n[i..=i], &b[i..=i], thresholds);
                    let (mut n1, mut b1) = (vec![1.0f32; 8], vec![1.0f32; 8]);
                    (n1[i], b1[i]) = (n[i], b[i]);
                    for level in simd::available() {
                        if let Some(got) = simd::with_ceiling(level, || by_hardware(&n1, &b1, thresholds)) {
                            assert_eq!(got.max_re.to_bits(), one.max_re.to_bits(), "{i} {level:?}");
                            assert_eq!((got.re_nan, got.not_f16), (one.re_nan, one.not_f16), "{i} {level:?}");
                            assert_eq!((got.lt1, got.lt5), (one.lt1 + 7, one.lt5 + 7), "{i} {level:?}");
                        }
                    }
                }
            }
        }
    }
}

/// The CPU's f16 arithmetic (AVX512-FP16) against `rel_err_of_f16_values`, pair by pair, bit for bit (NaN
/// for NaN): every f16 value against benches that reach each branch (both zeros, subnormals, the
/// extremes, eps, infinities, NaN, values whose quotient overflows or rounds to a tie), and the other way
/// round. (All 2^32 pairs were checked once the same way, in a release build.)
#[cfg(target_arch = "x86_64")]
#[test]
fn the_cpus_f16_arithmetic_gives_the_relative_errors() {
    use accutrace_formats::tensor::half_bits::f16_to_f32;
    use std::arch::x86_64::*;
    if !(simd::detected() >= Level::Avx512 && fp16::available()) {
        return eprintln!("not run: this CPU has no AVX512-FP16 (the f16 pass is never taken here)");
    }
    let thresholds = super::super::fused::thresholds_f16();
    let some: [u16; 24] = [
        0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x0200, 0x3C00, 0xBC00, 0x3C01, 0x7BFF, 0xFBFF,
        0x7C00, 0xFC00, 0x7E00, 0xFE01, 0x1400, 0x1419, 0x1D1F, 0x3555, 0x4248, 0xC7FF, 0x0C00, 0x5BFF,
    ];
    let re = |x: u16, y: u16| super::super::kernel::rel_err_of_f16_values(f16_to_f32(x), f16_to_f32(y));
    // SAFETY: the CPU has AVX-512 F/DQ/BW/VL, AVX2, F16C and AVX512-FP16 (checked above).
    let k = unsafe { fp16::Consts::new(thresholds) };
    let mut checked = 0;
    for fixed in some {
        for first in (0..=u16::MAX).step_by(32) {
            let free: [u16; 32] = std::array::from_fn(|i| first + i as u16);
            for (xs, ys) in [(free, [fixed; 32]), ([fixed; 32], free)] {
                let mut max = [0u16; 32];
                // SAFETY: as above; the loads and stores take 64 bytes of 32-element u16 arrays.
                let (got, nan, lt1, lt5) = unsafe {
                    let mut m = _mm512_setzero_si512();
                    let load = |v: &[u16; 32]| _mm512_loadu_si512(v.as_ptr().cast());
                    let (re, nan, lt1, lt5) = fp16::step(load(&xs), load(&ys), &k, &mut m);
                    let mut got = [0u16; 32];
                    _mm512_storeu_si512(got.as_mut_ptr().cast(), re);
                    _mm512_storeu_si512(max.as_mut_ptr().cast(), m);
                    (got, nan, lt1, lt5)
                };
                for i in 0..32 {
                    let (want, have) = (re(xs[i], ys[i]), f16_to_f32(got[i]));
                    let at = format!("x {:#06x} y {:#06x}", xs[i], ys[i]);
                    assert!(have.to_bits() == want.to_bits() || (have.is_nan() && want.is_nan()), "{at}");
                    assert_eq!(nan >> i & 1 == 1, want.is_nan(), "{at}");
                    assert_eq!(lt1 >> i & 1 == 1, want < thresholds.0, "{at}");
                    assert_eq!(lt5 >> i & 1 == 1, want < thresholds.1, "{at}");
                    let top = if want > 0.0 { want } else { 0.0 };
                    assert_eq!(f16_to_f32(max[i]).to_bits(), top.to_bits(), "{at}");
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 24 * 2 * 65_536);
}

/// The f16 pass over fp16 bytes against the AVX-512 one (f32 operations rounded to f16), bit for bit (NaN
/// for NaN), on pairs with every branch of the relative error, inf and NaN, of every length up to 70 (each
/// ragged end past 32 pairs a step) and longer.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_f16_pass_gives_the_avx512_sums() {
    if !(simd::detected() >= Level::Avx512 && fp16::available()) {
        return eprintln!("not run: this CPU has no AVX512-FP16 (the f16 pass is never taken here)");
    }
    let thresholds = super::super::fused::thresholds_f16();
    let f = |v: f64| if v.is_nan() { f64::NAN.to_bits() } else { v.to_bits() };
    let bits = |s: &MsprobeSums| {
        let sums = [f(s.dot), f(s.nn), f(s.bb), f(s.dd), f(s.max_abs), f(s.max_re)];
        (s.len, sums, s.re_nan, s.lt_one, s.lt_five, s.nonfinite)
    };
    let bytes =
        |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect() };
    let mut compared = 0;
    for len in (0..=70).chain([1001, 4099, 65_536]) {
        for seed in 0..4u64 {
            let (n, b) = pair(len, seed * 19 + len as u64);
            let finite = |v: &[f32]| -> Vec<f32> {
                v.iter().map(|&x| if x.is_finite() && x.abs() <= 65504.0 { x } else { 0.75 }).collect()
            };
            for (n, b) in [(n.clone(), b.clone()), (finite(&n), finite(&b))] {
                let (n, b) = (bytes(&n), bytes(&b));
                // SAFETY: the CPU has AVX-512 F/DQ/BW/VL, AVX2, F16C and AVX512-FP16 (checked above).
                let (got, want) = unsafe {
                    (
                        fp16::probe_of_f16_bytes(&n, &b, thresholds),
                        avx512::probe_of_f16_bytes(&n, &b, thresholds),
                    )
                };
                assert_eq!(bits(&got), bits(&want), "{len} values, seed {seed}");
                compared += usize::from(!got.nonfinite);
            }
        }
    }
    assert!(compared > 200, "{compared} finite pairs compared");
}

/// The relative errors' figures in f16 (AVX512-FP16, 32 pairs a step) against the AVX2 build's, on pairs
/// of f32 values that are f16 values or not (between them, beyond 65504, subnormal, inf, NaN), of every
/// length up to 70 and longer: the same maximum (bits), NaN flag, counts and f16 flag.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_f16_figures_are_the_avx2_ones() {
    if !(simd::detected() >= Level::Avx512 && fp16::available()) {
        return eprintln!("not run: this CPU has no AVX512-FP16 (the f16 pass is never taken here)");
    }
    let thresholds = super::super::fused::thresholds_f16();
    let mut some_f16 = 0;
    for len in (0..=70).chain([1001, 4099]) {
        for seed in 0..6u64 {
            let (n, b) = pair(len, seed * 23 + len as u64);
            let halves =
                |v: &[f32]| -> Vec<f32> { v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect() };
            for (n, b) in [(n.clone(), b.clone()), (halves(&n), halves(&b))] {
                // SAFETY: the CPU has AVX-512 F/DQ/BW/VL, AVX2, F16C and AVX512-FP16 (checked above).
                let (got, want) =
                    unsafe { (fp16::re_f16(&n, &b, thresholds), f16c::re_f16(&n, &b, thresholds)) };
                assert_eq!(got.max_re.to_bits(), want.max_re.to_bits(), "{len} values, seed {seed}");
                assert_eq!(got, want, "{len} values, seed {seed}");
                some_f16 += usize::from(!got.not_f16 && len > 32);
            }
        }
    }
    assert!(some_f16 > 0, "pairs of f16 values only were compared too");
}
