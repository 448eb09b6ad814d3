use super::*;
use accutrace_formats::simd::{self, Level};

/// The hardware's rounding (the value in every lane) against `round_to_f16` (itself tested
/// against the `half` crate), on the bit patterns `round_to_f16_equals_half` takes: every exponent,
/// every mantissa bit f16 keeps, the ties and their neighbours, and a prime stride.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_hardware_rounds_as_round_to_f16() {
    if simd::detected() < Level::Avx2 {
        return;
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
