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
