//! to_host(to_device(x)) == x for every format on random shapes, with garbage padding; and bad input gives
//! errors, never panics.

use accutrace_formats::layout::{self, Format};
use accutrace_formats::DType;
use proptest::prelude::*;

const PAD: u32 = u32::MAX;

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(vec![DType::FLOAT16, DType::BF16, DType::FLOAT, DType::INT8, DType::INT4])
}

/// (format, host shape, groups) for every handled format.
fn case() -> impl Strategy<Value = (Format, Vec<u64>, i32)> {
    let nchw = (1u64..4, 1u64..40, 1u64..5, 1u64..5).prop_map(|(n, c, h, w)| vec![n, c, h, w]);
    let ncdhw =
        (1u64..3, 1u64..40, 1u64..3, 1u64..4, 1u64..4).prop_map(|(n, c, d, h, w)| vec![n, c, d, h, w]);
    let nd = prop::collection::vec(1u64..40, 1..5);
    let grouped = (1i32..9, 1u64..20, 1u64..20, 1u64..3)
        .prop_map(|(g, cout, cin, k)| (Format::FRACTAL_Z, vec![g as u64 * cout, cin, k, k], g));
    prop_oneof![
        (
            prop::sample::select(vec![
                Format::NC1HWC0,
                Format::NC1HWC0_C04,
                Format::FRACTAL_Z,
                Format::HWCN,
                Format::NHWC,
                Format::C1HWNCOC0,
                Format::NCHW
            ]),
            nchw
        )
            .prop_map(|(f, s)| (f, s, 1)),
        (
            prop::sample::select(vec![
                Format::NDC1HWC0,
                Format::FRACTAL_Z_3D,
                Format::NDHWC,
                Format::DHWCN,
                Format::NCDHW
            ]),
            ncdhw
        )
            .prop_map(|(f, s)| (f, s, 1)),
        (prop::sample::select(vec![Format::FRACTAL_NZ, Format::ND]), nd).prop_map(|(f, s)| (f, s, 1)),
        grouped,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn device_round_trip_restores_the_host_tensor((format, host_shape, groups) in case(), dtype in dtype()) {
        let count: u64 = host_shape.iter().product();
        let host: Vec<u32> = (0..count as u32).collect();
        let (device, device_shape) = layout::to_device(format, &host, &host_shape, dtype, groups, PAD).unwrap();
        prop_assert_eq!(device.len() as u64, device_shape.iter().product::<u64>());
        // Every host value lands exactly once; everything else is padding.
        prop_assert_eq!(device.iter().filter(|&&v| v != PAD).count() as u64, count);
        prop_assert_eq!(&device_shape, &layout::device_shape(format, &host_shape, dtype, groups).unwrap());
        let back = layout::to_host(format, &device, &device_shape, &host_shape, dtype, groups).unwrap();
        prop_assert_eq!(back, host);
    }

    #[test]
    fn random_shapes_never_panic(
        format in (0i32..50).prop_map(Format::from_code),
        host_shape in prop::collection::vec(prop_oneof![0u64..5, Just(u64::MAX), Just(1 << 40)], 0..6),
        device_shape in prop::collection::vec(prop_oneof![0u64..5, Just(u64::MAX), Just(1 << 40)], 0..6),
        groups in -2i32..5,
    ) {
        let len: u64 = device_shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).unwrap_or(0).min(4096);
        let device = vec![0u8; len as usize];
        let _ = layout::to_host(format, &device, &device_shape, &host_shape, DType::FLOAT16, groups);
        let host_len: u64 = host_shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).unwrap_or(0).min(4096);
        let host = vec![0u8; host_len as usize];
        let _ = layout::to_device(format, &host, &host_shape, DType::FLOAT16, groups, 0);
    }
}

#[test]
fn padding_garbage_is_cropped() {
    let host: Vec<f32> = (0..2 * 3 * 2 * 2).map(|i| i as f32).collect();
    let (device, shape) =
        layout::to_device(Format::NC1HWC0, &host, &[2, 3, 2, 2], DType::FLOAT16, 1, f32::NAN).unwrap();
    assert_eq!(shape, vec![2, 1, 2, 2, 16]);
    assert_eq!(device.iter().filter(|v| v.is_nan()).count(), 2 * 13 * 4);
    let back = layout::to_host(Format::NC1HWC0, &device, &shape, &[2, 3, 2, 2], DType::FLOAT16, 1).unwrap();
    assert_eq!(back, host);
}

#[test]
fn nz_known_small_case() {
    // host (2, 3) fp16 -> device (1, 1, 16, 16): row n, column c at n*16 + c.
    let host = [1, 2, 3, 4, 5, 6];
    let (device, shape) =
        layout::to_device(Format::FRACTAL_NZ, &host, &[2, 3], DType::FLOAT16, 1, 0).unwrap();
    assert_eq!(shape, vec![1, 1, 16, 16]);
    assert_eq!(&device[..3], &[1, 2, 3]);
    assert_eq!(&device[16..19], &[4, 5, 6]);
    // 1-D host (c) is (1, c); a dump may report the device shape with an extra leading 1.
    let back =
        layout::to_host(Format::FRACTAL_NZ, &device, &[1, 1, 1, 16, 16], &[2, 3], DType::FLOAT16, 1).unwrap();
    assert_eq!(back, host);
}

#[test]
fn missing_or_dynamic_host_shape_falls_back_to_the_device_shape() {
    let device: Vec<u16> = (0..32).collect();
    for host in [vec![], vec![u64::MAX, 3, 1, 1], vec![u64::MAX - 1]] {
        let (values, shape) =
            layout::to_host_with_shape(Format::NC1HWC0, &device, &[1, 1, 1, 2, 16], &host, DType::FLOAT16, 1)
                .unwrap();
        assert_eq!(values, device);
        assert_eq!(shape, vec![1, 1, 1, 2, 16]);
    }
}

#[test]
fn bad_input_is_an_error_naming_the_numbers() {
    let device = vec![0f32; 32];
    // Data shorter than the device shape.
    let err = layout::to_host(Format::NC1HWC0, &device, &[1, 1, 1, 3, 16], &[1, 3, 1, 3], DType::FLOAT16, 1)
        .unwrap_err();
    assert!(err.problem.contains("48") && err.problem.contains("32"), "{err}");
    // Host shape that does not fit the device shape.
    let err = layout::to_host(Format::NC1HWC0, &device, &[1, 1, 1, 2, 16], &[1, 3, 2, 2], DType::FLOAT16, 1)
        .unwrap_err();
    assert!(err.problem.contains("does not fit"), "{err}");
    // Wrong C0 for the dtype (int8 has C0 = 32).
    let err = layout::to_host(Format::NC1HWC0, &device, &[1, 1, 1, 2, 16], &[1, 3, 1, 2], DType::INT8, 1)
        .unwrap_err();
    assert!(err.problem.contains("expected [1, 1, 1, 2, 32]"), "{err}");
    // Wrong rank.
    let err = layout::to_host(Format::FRACTAL_Z, &device, &[2, 16], &[2, 16], DType::FLOAT16, 1).unwrap_err();
    assert!(err.problem.contains("4-D host shape"), "{err}");
    // A format we do not convert is named.
    let err = layout::to_host(Format::from_code(28), &device, &[32], &[32], DType::FLOAT16, 1).unwrap_err();
    assert!(err.problem.contains("FRACTAL_ZZ"), "{err}");
    // Overflowing shapes are errors, not wraps.
    let err = layout::to_device(Format::NC1HWC0, &device, &[1 << 40, 1 << 40, 1, 1], DType::FLOAT16, 1, 0.0)
        .unwrap_err();
    assert!(err.problem.contains("2^64"), "{err}");
    // Groups that do not divide N.
    let err =
        layout::to_device(Format::FRACTAL_Z, &[0f32; 10], &[5, 2, 1, 1], DType::FLOAT16, 2, 0.0).unwrap_err();
    assert!(err.problem.contains("divisible"), "{err}");
}

#[test]
fn hwcn_host_shape_in_the_wrong_order_is_caught() {
    // A 3x3 kernel, C=16, N=32 in HWCN; passing the HWCN shape as if it were NCHW must not decode silently.
    let device = vec![0f32; 3 * 3 * 16 * 32];
    let err = layout::to_host(Format::HWCN, &device, &[3, 3, 16, 32], &[3, 3, 16, 32], DType::FLOAT, 1)
        .unwrap_err();
    assert!(err.problem.contains("does not fit"), "{err}");
    assert!(layout::to_host(Format::HWCN, &device, &[3, 3, 16, 32], &[32, 16, 3, 3], DType::FLOAT, 1).is_ok());
}
