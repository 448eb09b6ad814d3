//! Split-and-merge accumulation equals one pass (within float rounding), and the vectorised, parallel
//! kernels agree with naive scalar references.

use analyzer::metrics::kernel::RePrecision;
use analyzer::metrics::msaccucmp::msaccucmp_metrics;
use analyzer::metrics::msprobe::msprobe_sums;
use proptest::prelude::*;

fn close(a: f64, b: f64, rel: f64) -> bool {
    a == b || (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-300)
}

fn pair() -> impl Strategy<Value = (Vec<f32>, Vec<f32>, usize)> {
    (1usize..3000).prop_flat_map(|n| {
        (
            prop::collection::vec(-1e3f32..1e3, n),
            prop::collection::vec(prop_oneof![Just(0.0f32), -1e3f32..1e3], n),
            0..=n,
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn split_merge_equals_one_pass((n, b, cut) in pair()) {
        for p in [RePrecision::F64, RePrecision::F32] {
            let whole = msprobe_sums(&n, &b, p).unwrap();
            let left = msprobe_sums(&n[..cut], &b[..cut], p).unwrap();
            let right = msprobe_sums(&n[cut..], &b[cut..], p).unwrap();
            let merged = left.merge(right);
            prop_assert_eq!(merged.len, whole.len);
            prop_assert_eq!(merged.lt_one, whole.lt_one);
            prop_assert_eq!(merged.lt_five, whole.lt_five);
            prop_assert_eq!(merged.max_abs, whole.max_abs);
            prop_assert_eq!(merged.max_re, whole.max_re);
            for (m, w) in [(merged.dot, whole.dot), (merged.nn, whole.nn), (merged.bb, whole.bb), (merged.dd, whole.dd)] {
                // Sums of products can cancel; compare against the magnitude of what was summed.
                let scale = whole.nn.max(whole.bb).max(whole.dd).max(1e-300);
                prop_assert!((m - w).abs() <= 1e-12 * scale, "{} vs {}", m, w);
            }
        }
    }

    #[test]
    fn msprobe_kernel_matches_scalar_reference((n, b, _cut) in pair()) {
        let s = msprobe_sums(&n, &b, RePrecision::F64).unwrap();
        let (mut dot, mut dd, mut lt1, mut max_re) = (0.0f64, 0.0f64, 0u64, 0.0f64);
        for (&x, &y) in n.iter().zip(&b) {
            let (x, y) = (x as f64, y as f64);
            dot += x * y;
            dd += (x - y) * (x - y);
            let re = RePrecision::F64.rel_err(x, y);
            lt1 += u64::from(re < 0.001);
            max_re = max_re.max(re);
        }
        let scale = s.nn.max(s.bb).max(1e-300);
        prop_assert!((s.dot - dot).abs() <= 1e-12 * scale);
        prop_assert!(close(s.dd, dd, 1e-12));
        prop_assert_eq!(s.lt_one, lt1);
        prop_assert_eq!(s.max_re, max_re);
    }

    #[test]
    fn msaccucmp_matches_scalar_reference((x, y, _cut) in pair()) {
        let m = msaccucmp_metrics(&x[..], &y[..], false);
        let n = x.len() as f64;
        let (mut sa, mut sq, mut rel) = (0.0f64, 0.0f64, 0.0f64);
        for (&a, &b) in x.iter().zip(&y) {
            let (a, b) = (a as f64, b as f64);
            sa += (a - b).abs();
            sq += (a - b) * (a - b);
            if b.abs() > f64::EPSILON {
                rel += (a / b - 1.0).abs();
            }
        }
        prop_assert!(close(m.mean_absolute_error, sa / n, 1e-12));
        prop_assert!(close(m.root_mean_square_error, (sq / n).sqrt(), 1e-12));
        prop_assert!(close(m.accumulated_relative_error, rel, 1e-12));
        prop_assert!(m.kullback_leibler_divergence >= -1e-12);
    }
}

#[test]
fn parallel_split_does_not_change_results() {
    // Large enough for the rayon path (several chunks); the result must equal a serial merge of the
    // same chunks exactly, whatever the thread count.
    let len: usize = (1 << 19) + 1234;
    let n: Vec<f32> = (0..len).map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5).collect();
    let b: Vec<f32> = n.iter().enumerate().map(|(i, v)| v + (i % 13) as f32 * 1e-5).collect();
    let par = msprobe_sums(&n, &b, RePrecision::F32).unwrap();
    let serial = n
        .chunks(analyzer::metrics::kernel::CHUNK)
        .zip(b.chunks(analyzer::metrics::kernel::CHUNK))
        .map(|(x, y)| msprobe_sums(x, y, RePrecision::F32).unwrap())
        .reduce(|a, c| a.merge(c))
        .unwrap();
    assert_eq!(par, serial);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    assert_eq!(pool.install(|| msprobe_sums(&n, &b, RePrecision::F32).unwrap()), par);
}

fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The f32 fast path (fused pass, f32 relative error) gives exactly what the generic f64 kernels give on
    /// the widened values, in every instruction-set build this CPU runs against the portable build; KL may
    /// differ by the fast logarithm's last bit per element.
    #[test]
    fn fused_f32_path_equals_generic_path((n, b, cut) in pair()) {
        use accutrace_formats::simd::{self, Level};
        use accutrace_formats::stats::TensorStats;
        use accutrace_formats::DType;
        use analyzer::metrics::{measure, msaccucmp_metrics, msprobe_metrics, Families, MetricsRequest};
        use analyzer::metrics::MsprobeOptions;
        let mut n = n;
        if cut < n.len() && cut % 3 == 0 {
            n[cut] = [f32::INFINITY, f32::NAN, 65504.0][cut % 9 / 3]; // inf/NaN positions that do not match
        }
        let opts = MsprobeOptions { zero_dim: false, re_precision: RePrecision::F32 };
        let (wn, wb) = (widen(&n), widen(&b));
        let dtypes = (DType::FLOAT16, DType::FLOAT);
        let (reference_probe, reference_acc, reference_sums, reference_stats) =
            simd::with_ceiling(Level::Portable, || {
                let sums = msprobe_sums(&wn, &wb, RePrecision::F32);
                let stats = (TensorStats::of_f32(&n, dtypes.0), TensorStats::of_f32(&b, dtypes.1));
                (msprobe_metrics(&wn, &wb, &opts), msaccucmp_metrics(&wn[..], &wb[..], true), sums, stats)
            });
        for level in simd::available() {
            let at_level: Result<(), TestCaseError> = simd::with_ceiling(level, || {
                let mut request = MetricsRequest { families: Families::All, msprobe: opts, dtypes, stats: true };
                let fused = measure(&n, &b, &request);
                prop_assert_eq!(&fused.msprobe, &reference_probe, "{:?}", level);
                // NaN-aware equality of the statistics.
                prop_assert_eq!(format!("{:?}", fused.stats), format!("{:?}", Some(reference_stats)));
                request.families = Families::Msprobe;
                request.stats = false;
                let alone = measure(&n, &b, &request);
                prop_assert_eq!(&alone.msprobe, &reference_probe);
                prop_assert!(alone.msaccucmp.is_none() && alone.stats.is_none());
                prop_assert_eq!(msprobe_metrics(&n, &b, &opts), reference_probe.clone());
                let generic_f32 = msaccucmp_metrics(&n[..], &b[..], true);
                let acc = fused.msaccucmp.expect("Families::All computes msaccucmp's metrics");
                for m in [acc, generic_f32] {
                    let kl = (m.kullback_leibler_divergence, reference_acc.kullback_leibler_divergence);
                    prop_assert!(kl.0 == kl.1 || (kl.0 - kl.1).abs() <= 1e-12 * kl.1.abs().max(1e-12), "{:?}", kl);
                    let strip = |mut m: analyzer::metrics::MsaccucmpMetrics| {
                        m.kullback_leibler_divergence = 0.0;
                        format!("{m:?}") // NaN-aware equality
                    };
                    prop_assert_eq!(strip(m), strip(reference_acc));
                }
                prop_assert_eq!(msprobe_sums(&n, &b, RePrecision::F32), reference_sums);
                Ok(())
            });
            at_level?;
        }
    }
}

#[test]
fn fused_path_matches_generic_on_large_parallel_input() {
    use accutrace_formats::DType;
    use analyzer::metrics::{measure, msaccucmp_metrics, msprobe_metrics, Families, MetricsRequest};
    let len: usize = (1 << 19) + 77;
    let n: Vec<f32> = (0..len).map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5).collect();
    let b: Vec<f32> = n
        .iter()
        .enumerate()
        .map(|(i, v)| if i % 101 == 0 { 0.0 } else { v + (i % 13) as f32 * 1e-5 })
        .collect();
    let request = MetricsRequest::for_pair(Families::All, (DType::FLOAT, DType::FLOAT), &[len as u64], false);
    assert_eq!(request.msprobe.re_precision, RePrecision::F32, "an fp32 pair takes the fused pass");
    let m = measure(&n, &b, &request);
    let acc = m.msaccucmp.expect("Families::All computes msaccucmp's metrics");
    assert_eq!(m.msprobe, msprobe_metrics(&widen(&n), &widen(&b), &request.msprobe));
    let reference = msaccucmp_metrics(&widen(&n)[..], &widen(&b)[..], false);
    assert_eq!(acc.cosine_similarity, reference.cosine_similarity);
    assert_eq!(acc.standard_deviation, reference.standard_deviation);
    assert_eq!(acc.max_relative_error, reference.max_relative_error);
    assert_eq!(acc.accumulated_relative_error, reference.accumulated_relative_error);
    let kl = (acc.kullback_leibler_divergence, reference.kullback_leibler_divergence);
    assert!((kl.0 - kl.1).abs() <= 1e-12 * kl.1.abs(), "{kl:?}");
}

/// fp16 pairs as the decoder gives them: values of both signs below 2 with bench a few fp16 ulps from the
/// target (the f16 relative error's roundings and the thresholds' ties), both zeros, subnormals, the
/// largest finite values, zero benches; with `cut % 4 == 1` infinities and NaNs at the same places on both
/// sides, with `cut % 4 == 3` at different places.
fn f16_pair() -> impl Strategy<Value = (Vec<f32>, Vec<f32>, usize)> {
    use accutrace_formats::tensor::half_bits::f16_to_f32;
    (1usize..3000)
        .prop_flat_map(|n| (prop::collection::vec((any::<u16>(), 0u8..16, -3i32..=3), n), 0..=n))
        .prop_map(|(draws, cut)| {
            let (mut x, mut y) = (Vec::new(), Vec::new());
            for (h, kind, d) in draws {
                let sign = h & 0x8000;
                let (hx, hy) = match kind {
                    0 => (0, h & 0x8000),
                    1 => (h & 0x83FF, (h & 0x83FF) ^ (d as u16 & 0x8003)), // subnormals
                    2 => (0x7BFF | sign, 0x7BFF | (h & 0x4000) << 1),      // +-65504
                    3 => (h & 0xBFFF, 0),                                  // zero bench
                    _ => {
                        let m = (h & 0x3FFF) as i32;
                        (h & 0xBFFF, sign | (m + d).clamp(0, 0x3FFF) as u16)
                    }
                };
                x.push(f16_to_f32(hx));
                y.push(f16_to_f32(hy));
            }
            let specials = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN];
            let len = x.len();
            if cut % 4 == 1 {
                for (k, at) in [cut / 2, cut / 3, len - 1].into_iter().enumerate() {
                    x[at.min(len - 1)] = specials[(cut + k) % 4];
                    y[at.min(len - 1)] = specials[(cut + k) % 4].copysign(if k == 1 { -1.0 } else { 1.0 });
                }
            } else if cut % 4 == 3 {
                x[cut.min(len - 1)] = specials[cut / 4 % 4];
            }
            (x, y, cut)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The fused pass with msprobe's relative error in f16 (fp16 pairs) gives exactly what the generic f64
    /// kernels give on the widened values, at every instruction-set level this CPU runs; msaccucmp's KL
    /// exactly what the generic f32 kernel gives (the f64 one may differ by the fast logarithm's last bit).
    #[test]
    fn fused_f16_path_equals_generic_path((n, b, _cut) in f16_pair()) {
        use accutrace_formats::simd::{self, Level};
        use accutrace_formats::stats::TensorStats;
        use accutrace_formats::DType;
        use analyzer::metrics::{measure, msprobe_metrics, Families, MetricsRequest, MsprobeOptions};
        let dtypes = (DType::FLOAT16, DType::FLOAT16);
        let request = MetricsRequest::for_pair(Families::All, dtypes, &[n.len() as u64], true);
        prop_assert_eq!(request.msprobe.re_precision, RePrecision::F16);
        let opts = MsprobeOptions { zero_dim: false, re_precision: RePrecision::F16 };
        let (wn, wb) = (widen(&n), widen(&b));
        let (reference_probe, reference_acc, reference_sums, reference_stats) =
            simd::with_ceiling(Level::Portable, || {
                let stats = (TensorStats::of_f32(&n, dtypes.0), TensorStats::of_f32(&b, dtypes.1));
                let probe = msprobe_metrics(&wn, &wb, &opts);
                (probe, msaccucmp_metrics(&n[..], &b[..], true), msprobe_sums(&wn, &wb, RePrecision::F16), stats)
            });
        for level in simd::available() {
            let at_level: Result<(), TestCaseError> = simd::with_ceiling(level, || {
                let mut request = request;
                let fused = measure(&n, &b, &request);
                prop_assert_eq!(&fused.msprobe, &reference_probe, "{:?}", level);
                // NaN-aware equality.
                prop_assert_eq!(format!("{:?}", fused.msaccucmp), format!("{:?}", Some(reference_acc)));
                prop_assert_eq!(format!("{:?}", fused.stats), format!("{:?}", Some(reference_stats)));
                request.families = Families::Msprobe;
                request.stats = false;
                let alone = measure(&n, &b, &request);
                prop_assert_eq!(&alone.msprobe, &reference_probe);
                prop_assert!(alone.msaccucmp.is_none() && alone.stats.is_none());
                prop_assert_eq!(msprobe_sums(&n, &b, RePrecision::F16), reference_sums);
                Ok(())
            });
            at_level?;
        }
    }
}

/// Values outside fp16's range in an f16 relative error: both round to infinities, whose difference
/// divided gives NaN; the fused pass counts it as the generic kernel does (MaxRelativeErr "Nan").
#[test]
fn fused_f16_path_keeps_a_nan_relative_error() {
    use accutrace_formats::simd;
    use analyzer::metrics::{measure, msprobe_metrics, Cell, Families, MetricsRequest, MsprobeOptions};
    let (n, b) = ([70000.0f32, 1.0, 2.0], [-70000.0f32, 1.0, 2.5]);
    let opts = MsprobeOptions { zero_dim: false, re_precision: RePrecision::F16 };
    let reference = msprobe_metrics(&widen(&n), &widen(&b), &opts);
    assert_eq!(reference.max_relative_err, Cell::Nan);
    for level in simd::available() {
        let request = MetricsRequest {
            families: Families::All,
            msprobe: opts,
            dtypes: (accutrace_formats::DType::FLOAT16, accutrace_formats::DType::FLOAT16),
            stats: false,
        };
        let m = simd::with_ceiling(level, || measure(&n, &b, &request));
        assert_eq!(m.msprobe, reference, "{level:?}");
    }
}

/// A large fp16 pair (parallel chunks) through the fused f16 pass gives the generic kernels' figures, KL
/// bit for bit with the generic f32 kernel's; so does a pair with one value that is not an fp16 value.
#[test]
fn fused_f16_path_matches_generic_on_large_parallel_input() {
    use accutrace_formats::tensor::half_bits::f16_to_f32;
    use accutrace_formats::DType;
    use analyzer::metrics::{measure, msprobe_metrics, Families, MetricsRequest};
    let len: usize = (1 << 19) + 77;
    let n: Vec<f32> =
        (0..len).map(|i| f16_to_f32(((i * 7919) % 0x7C00) as u16 | ((i as u16 & 4) << 13))).collect();
    let mut b: Vec<f32> = n
        .iter()
        .enumerate()
        .map(|(i, &v)| if i % 101 == 0 { 0.0 } else { f16_to_f32(half::f16::from_f32(v * 1.001).to_bits()) })
        .collect();
    let request =
        MetricsRequest::for_pair(Families::All, (DType::FLOAT16, DType::FLOAT16), &[len as u64], false);
    for inexact in [false, true] {
        if inexact {
            b[len / 3] = 1.0 + f32::EPSILON; // not an fp16 value
        }
        let m = measure(&n, &b, &request);
        assert_eq!(m.msprobe, msprobe_metrics(&widen(&n), &widen(&b), &request.msprobe));
        let reference = msaccucmp_metrics(&n[..], &b[..], true);
        let acc = m.msaccucmp.expect("Families::All computes msaccucmp's metrics");
        assert_eq!(format!("{acc:?}"), format!("{reference:?}"));
        assert_eq!(
            acc.kullback_leibler_divergence.to_bits(),
            reference.kullback_leibler_divergence.to_bits()
        );
    }
}
