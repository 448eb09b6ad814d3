//! Tensor decoding: known values for every decodable dtype, encode/decode round trips, packed types,
//! complex lanes, the fp16 fast path on all 65536 patterns, and the errors.

use accutrace_formats::simd;
use accutrace_formats::tensor::half_bits::f16_to_f32;
use accutrace_formats::tensor::{
    decode_f32, decode_f32_into, decode_f64, decode_f64_into, encode_f32, fp16_to_f32, lanes_per_element,
};
use accutrace_formats::DType;
use proptest::prelude::*;

fn f32s(dtype: DType, bytes: &[u8], elements: usize) -> Vec<f32> {
    let mut out = Vec::new();
    decode_f32(dtype, bytes, elements, &mut out).unwrap();
    out
}

fn le<const N: usize, T>(values: &[T], to: impl Fn(&T) -> [u8; N]) -> Vec<u8> {
    values.iter().flat_map(to).collect()
}

#[test]
fn known_values_of_every_decodable_dtype() {
    let f = [1.5f32, -2.0, 0.0, f32::INFINITY];
    assert_eq!(f32s(DType::FLOAT, &le(&f, |v| v.to_le_bytes()), 4), f);
    assert_eq!(f32s(DType::DOUBLE, &le(&[1.5f64, -1e300], |v| v.to_le_bytes()), 2), [1.5, f32::NEG_INFINITY]);
    // fp16: 1.0 = 0x3c00, -2 = 0xc000, 65504 = 0x7bff, smallest subnormal 0x0001 = 2^-24.
    let h = le(&[0x3c00u16, 0xc000, 0x7bff, 0x0001], |v| v.to_le_bytes());
    assert_eq!(f32s(DType::FLOAT16, &h, 4), [1.0, -2.0, 65504.0, 2f32.powi(-24)]);
    // bf16: 1.0 = 0x3f80, -3.0 = 0xc040, inf = 0x7f80.
    let b = le(&[0x3f80u16, 0xc040, 0x7f80], |v| v.to_le_bytes());
    assert_eq!(f32s(DType::BF16, &b, 3), [1.0, -3.0, f32::INFINITY]);
    assert_eq!(f32s(DType::FLOAT8_E4M3FN, &[0x38, 0x7e, 0xfe], 3), [1.0, 448.0, -448.0]);
    assert!(f32s(DType::FLOAT8_E4M3FN, &[0x7f], 1)[0].is_nan());
    assert_eq!(f32s(DType::FLOAT8_E5M2, &[0x3c, 0x7b, 0x7c], 3), [1.0, 57344.0, f32::INFINITY]);
    for dtype in [DType::INT8, DType::QINT8] {
        assert_eq!(f32s(dtype, &[0x80, 0xff, 0x7f], 3), [-128.0, -1.0, 127.0]);
    }
    for dtype in [DType::UINT8, DType::QUINT8] {
        assert_eq!(f32s(dtype, &[0x80, 0xff], 2), [128.0, 255.0]);
    }
    assert_eq!(f32s(DType::BOOL, &[0, 1, 7], 3), [0.0, 1.0, 1.0]);
    for dtype in [DType::INT16, DType::QINT16] {
        assert_eq!(f32s(dtype, &le(&[-300i16, 300], |v| v.to_le_bytes()), 2), [-300.0, 300.0]);
    }
    for dtype in [DType::UINT16, DType::QUINT16] {
        assert_eq!(f32s(dtype, &le(&[65535u16], |v| v.to_le_bytes()), 1), [65535.0]);
    }
    for dtype in [DType::INT32, DType::QINT32] {
        assert_eq!(f32s(dtype, &le(&[-70000i32], |v| v.to_le_bytes()), 1), [-70000.0]);
    }
    assert_eq!(f32s(DType::UINT32, &le(&[4_000_000_000u32], |v| v.to_le_bytes()), 1), [4e9]);
    let mut big = Vec::new();
    decode_f64(DType::INT64, &le(&[-(1i64 << 52) - 1], |v| v.to_le_bytes()), 1, &mut big).unwrap();
    assert_eq!(big, [-(2f64.powi(52)) - 1.0]);
    decode_f64(DType::UINT64, &le(&[u64::MAX], |v| v.to_le_bytes()), 1, &mut big).unwrap();
    assert_eq!(big, [u64::MAX as f64]);
}

#[test]
fn int4_is_low_nibble_first_and_sign_extended() {
    // 0x8F: low nibble 0xF = -1, high nibble 0x8 = -8; 0x07: 7 then 0; odd count ignores the last high nibble.
    assert_eq!(f32s(DType::INT4, &[0x8f, 0x07], 4), [-1.0, -8.0, 7.0, 0.0]);
    assert_eq!(f32s(DType::INT4, &[0x8f, 0x07], 3), [-1.0, -8.0, 7.0]);
    assert_eq!(encode_f32(DType::INT4, &[-1.0, -8.0, 7.0]).unwrap(), [0x8f, 0x07]);
}

#[test]
fn uint1_is_lsb_first() {
    assert_eq!(f32s(DType::UINT1, &[0b0000_0101, 0b1], 9), [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
    assert_eq!(encode_f32(DType::UINT1, &[1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]).unwrap(), [0b101, 1]);
}

#[test]
fn complex_is_interleaved_lanes() {
    assert_eq!(lanes_per_element(DType::COMPLEX64), 2);
    assert_eq!(lanes_per_element(DType::FLOAT), 1);
    let c64 = le(&[1.0f32, -1.0, 2.5, 0.5], |v| v.to_le_bytes());
    assert_eq!(f32s(DType::COMPLEX64, &c64, 2), [1.0, -1.0, 2.5, 0.5]);
    let c128 = le(&[3.0f64, 4.0], |v| v.to_le_bytes());
    assert_eq!(f32s(DType::COMPLEX128, &c128, 1), [3.0, 4.0]);
    let c32 = le(&[0x3c00u16, 0xbc00], |v| v.to_le_bytes());
    assert_eq!(f32s(DType::COMPLEX32, &c32, 1), [1.0, -1.0]);
    // An odd lane count is not a whole number of complex elements.
    assert!(decode_f32_into(DType::COMPLEX64, &c64, &mut [0f32; 3]).is_err());
}

#[test]
fn fp16_decodes_every_pattern_exactly_at_every_level() {
    let bytes: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
    let mut shifted = vec![0u8];
    shifted.extend_from_slice(&bytes);
    for level in simd::available() {
        // Through the public decoders (f32 and f64 lanes) and the slice converter from an odd (unaligned)
        // offset, at each instruction-set level this CPU runs.
        let (mut via_decoder, mut via_f64, mut via_slice) = (Vec::new(), Vec::new(), vec![0f32; 65536]);
        simd::with_ceiling(level, || {
            decode_f32(DType::FLOAT16, &bytes, 65536, &mut via_decoder).unwrap();
            decode_f64(DType::FLOAT16, &bytes, 65536, &mut via_f64).unwrap();
            fp16_to_f32(&shifted[1..], &mut via_slice);
        });
        for h in 0..=u16::MAX {
            // The `half` crate as an independent reference, and the scalar decoder.
            let expected = half::f16::from_bits(h).to_f32();
            let i = h as usize;
            for got in [via_decoder[i], via_slice[i], via_f64[i] as f32, f16_to_f32(h)] {
                if expected.is_nan() {
                    let same_sign = got.is_sign_negative() == expected.is_sign_negative();
                    assert!(got.is_nan() && same_sign, "{h:#06x} {level:?}");
                } else {
                    assert_eq!(got.to_bits(), expected.to_bits(), "{h:#06x} {level:?}");
                }
            }
        }
    }
}

#[test]
fn bf16_decodes_all_patterns_exactly() {
    let bytes: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
    let out = f32s(DType::BF16, &bytes, 65536);
    for (h, v) in (0..=u16::MAX).zip(out) {
        assert_eq!(v.to_bits(), u32::from(h) << 16);
    }
}

#[test]
fn encode_rounds_to_nearest_even_and_saturates_integers() {
    // fp16: 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
    assert_eq!(encode_f32(DType::FLOAT16, &[1.0 + 2f32.powi(-11)]).unwrap(), 0x3c00u16.to_le_bytes());
    assert_eq!(encode_f32(DType::FLOAT16, &[1e6]).unwrap(), 0x7c00u16.to_le_bytes());
    // bf16: 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even.
    assert_eq!(encode_f32(DType::BF16, &[1.0 + 2f32.powi(-8)]).unwrap(), 0x3f80u16.to_le_bytes());
    assert_eq!(encode_f32(DType::BF16, &[1.0 + 3.0 * 2f32.powi(-8)]).unwrap(), 0x3f82u16.to_le_bytes());
    assert_eq!(encode_f32(DType::INT8, &[300.0, -300.0, 2.5, 3.5, f32::NAN]).unwrap(), [127, 128, 2, 4, 0]);
    assert_eq!(encode_f32(DType::UINT8, &[-5.0, 255.4]).unwrap(), [0, 255]);
    assert_eq!(encode_f32(DType::INT4, &[100.0, -100.0]).unwrap(), [0x87]);
    assert_eq!(encode_f32(DType::INT64, &[1e30]).unwrap(), i64::MAX.to_le_bytes());
    assert_eq!(encode_f32(DType::UINT64, &[-1.0]).unwrap(), 0u64.to_le_bytes());
    assert_eq!(encode_f32(DType::BOOL, &[0.0, -0.5]).unwrap(), [0, 1]);
    assert_eq!(encode_f32(DType::FLOAT8_E4M3FN, &[1.0, 1000.0]).unwrap(), [0x38, 0x7f]);
}

#[test]
fn undecodable_dtypes_are_refused_by_name() {
    for dtype in [DType::STRING, DType::HIFLOAT4, DType::FLOAT4_E2M1, DType::from_code(999), DType::UNDEFINED]
    {
        let err = decode_f32(dtype, &[0; 4], 4, &mut Vec::new()).unwrap_err();
        assert!(err.problem.contains(&*dtype.name()), "{err}");
        assert!(encode_f32(dtype, &[0.0]).is_err());
    }
    // The words the dump reader uses (DType::undecodable_reason), so a capture's tensor says the same.
    let err = decode_f32(DType::HIFLOAT4, &[0; 2], 4, &mut Vec::new()).unwrap_err();
    assert_eq!(err.problem, "HIFLOAT4: accutrace cannot decode its values yet");
}

/// HiFloat8 by the vendor runtime's rule (hicann/runtime `HiFloat8::GetValue`, printf/hifloat.cpp), written
/// the way that decoder reads a byte: as a string of bits, the dot code found by prefix, the exponent and
/// mantissa fields parsed as binary numbers, the value computed in f64. Independent of the table.
fn hifloat8_by_the_vendor_rule(byte: u8) -> f64 {
    match byte {
        0x00 => return 0.0,
        0x80 => return f64::NAN,
        0x6f => return f64::INFINITY,
        0xef => return f64::NEG_INFINITY,
        _ => {}
    }
    let bits = format!("{byte:08b}");
    let sign = if &bits[..1] == "0" { 1.0 } else { -1.0 };
    let after_sign = &bits[1..];
    let dots = [("11", 4), ("10", 3), ("01", 2), ("001", 1), ("0001", 0), ("0000", 0)];
    let (dot, exp_width) = dots.iter().find(|(dot, _)| after_sign.starts_with(dot)).unwrap();
    let fields = &after_sign[dot.len()..];
    let binary = |s: &str| i32::from_str_radix(s, 2).unwrap();
    if *dot == "0000" {
        return sign * 2f64.powi(binary(fields) - 23);
    }
    let (exp_field, man_field) = fields.split_at(*exp_width);
    let exponent = match exp_field.split_at_checked(1) {
        None => 0, // dot 0001: no exponent bits
        // Sign-magnitude with an implicit leading 1 in place of the sign bit.
        Some((exp_sign, rest)) => {
            let magnitude = binary(&format!("1{rest}"));
            if exp_sign == "0" {
                magnitude
            } else {
                -magnitude
            }
        }
    };
    let mantissa = f64::from(binary(man_field)) / 2f64.powi(man_field.len() as i32);
    sign * 2f64.powi(exponent) * (1.0 + mantissa)
}

#[test]
fn hifloat8_decodes_every_code_by_the_vendor_rule() {
    let codes: Vec<u8> = (0..=255).collect();
    let narrow = f32s(DType::HIFLOAT8, &codes, 256);
    let mut wide = Vec::new();
    decode_f64(DType::HIFLOAT8, &codes, 256, &mut wide).unwrap();
    for (code, (&got, &wide)) in codes.iter().zip(narrow.iter().zip(&wide)) {
        let want = hifloat8_by_the_vendor_rule(*code);
        if want.is_nan() {
            assert!(got.is_nan() && wide.is_nan(), "{code:#04x}: {got}");
        } else {
            // Every HiFloat8 value is an f32: the decode must be exact, with the sign of zero kept.
            assert_eq!(f64::from(got).to_bits(), want.to_bits(), "{code:#04x}: {got} != {want}");
            assert_eq!(wide.to_bits(), want.to_bits(), "{code:#04x} in f64");
        }
    }
    // Only 0x80 is NaN; only 0x6F / 0xEF are infinite; 0x00 is the only zero (the denormals have none).
    let nan: Vec<u8> = codes.iter().copied().filter(|&c| narrow[usize::from(c)].is_nan()).collect();
    assert_eq!(nan, [0x80]);
    let inf: Vec<u8> = codes.iter().copied().filter(|&c| narrow[usize::from(c)].is_infinite()).collect();
    assert_eq!(inf, [0x6f, 0xef]);
    assert_eq!(narrow.iter().filter(|v| **v == 0.0).count(), 1);
    // No two codes share a value: a prefix-free dot code and a sign-magnitude exponent waste none.
    let mut finite: Vec<u32> = narrow.iter().filter(|v| v.is_finite()).map(|v| v.to_bits()).collect();
    finite.sort_unstable();
    finite.dedup();
    assert_eq!(finite.len(), 253);
}

/// Values worked by hand, and the vendor's own unit test (runtime tests/ut/adump/adump_base/testcase/printf/
/// dump_printf_utest.cpp `HIFLOAT8_AdxDumptensor`: 111 is inf, 128 NaN, 239 -inf, 83 is 0.109375).
#[test]
fn hifloat8_known_values() {
    // 83 = 0 10 100 11: dot 10 (3 exponent bits), exponent -(100b with its sign bit read as 1) = -4,
    // mantissa 11b/4 = 0.75: 2^-4 * 1.75.
    assert_eq!(f32s(DType::HIFLOAT8, &[83], 1), [0.109375]);
    let specials = f32s(DType::HIFLOAT8, &[111, 239, 0], 3);
    assert_eq!(specials, [f32::INFINITY, f32::NEG_INFINITY, 0.0]);
    assert!(f32s(DType::HIFLOAT8, &[128], 1)[0].is_nan());
    // 0x08 = 0 0001 000: no exponent bits, 1.0. 0x10 = 0 001 0 000: exponent +1. 0x18: exponent -1.
    assert_eq!(f32s(DType::HIFLOAT8, &[0x08, 0x09, 0x10, 0x18, 0x88], 5), [1.0, 1.125, 2.0, 0.5, -1.0]);
    // 0x6E = 0 11 0111 0: the largest finite, 2^15; 0x7E = 0 11 1111 0: the smallest normal, 2^-15.
    assert_eq!(f32s(DType::HIFLOAT8, &[0x6e, 0xee, 0x7e], 3), [32768.0, -32768.0, 2f32.powi(-15)]);
    // Denormals 0 0000 MMM: 2^(M-23), from 2^-22 (0x01) to 2^-16 (0x07).
    assert_eq!(
        f32s(DType::HIFLOAT8, &[0x01, 0x07, 0x81], 3),
        [2f32.powi(-22), 2f32.powi(-16), -(2f32.powi(-22))]
    );
    // Decoded, not encoded: how a cast to HiFloat8 rounds is in no vendor source read.
    assert!(encode_f32(DType::HIFLOAT8, &[1.0]).unwrap_err().problem.contains("HIFLOAT8"));
}

#[test]
fn byte_length_mismatch_names_the_numbers() {
    let err = decode_f32(DType::FLOAT, &[0; 10], 3, &mut Vec::new()).unwrap_err();
    assert_eq!(err.offset, Some(0));
    assert!(
        err.problem.contains("3 elements") && err.problem.contains("12") && err.problem.contains("10"),
        "{err}"
    );
    // An absurd element count from a corrupt header is rejected before anything is allocated.
    let err = decode_f32(DType::FLOAT, &[0; 8], usize::MAX, &mut Vec::new()).unwrap_err();
    assert!(err.problem.contains("bytes"), "{err}");
    assert!(decode_f64_into(DType::INT4, &[0; 2], &mut [0f64; 5]).is_err());
    assert!(decode_f64_into(DType::INT4, &[0; 2], &mut [0f64; 3]).is_ok());
}

#[test]
fn decode_reuses_capacity_and_clears() {
    let mut out = Vec::with_capacity(100);
    let ptr = out.as_ptr();
    decode_f32(DType::UINT8, &[1, 2, 3], 3, &mut out).unwrap();
    decode_f32(DType::UINT8, &[9], 1, &mut out).unwrap();
    assert_eq!(out, [9.0]);
    assert_eq!(out.as_ptr(), ptr);
    // On error the output is left empty, never holding stale values.
    assert!(decode_f32(DType::FLOAT, &[0; 3], 1, &mut out).is_err());
    assert!(out.is_empty());
}

fn decodable() -> impl Strategy<Value = DType> {
    prop::sample::select(vec![
        DType::FLOAT,
        DType::FLOAT16,
        DType::BF16,
        DType::DOUBLE,
        DType::INT8,
        DType::UINT8,
        DType::INT16,
        DType::UINT16,
        DType::INT32,
        DType::INT64,
        DType::UINT32,
        DType::UINT64,
        DType::BOOL,
        DType::COMPLEX32,
        DType::COMPLEX64,
        DType::COMPLEX128,
        DType::QINT8,
        DType::QINT16,
        DType::QINT32,
        DType::QUINT8,
        DType::QUINT16,
        DType::INT4,
        DType::UINT1,
        DType::FLOAT8_E5M2,
        DType::FLOAT8_E4M3FN,
    ])
}

proptest! {
    /// Decoding any bytes and re-encoding the values gives the bytes back (NaN payloads aside), and the f32
    /// and f64 decoders agree.
    #[test]
    fn decode_then_encode_is_identity(dtype in decodable(), seed in prop::collection::vec(any::<u8>(), 0..64)) {
        let elements = match dtype.bits().unwrap() {
            bits if bits >= 8 => seed.len() / (bits as usize / 8),
            bits => seed.len() * 8 / bits as usize,
        };
        let bytes = &seed[..dtype.byte_size(elements as u64).unwrap() as usize];
        let values = f32s(dtype, bytes, elements);
        let mut wide = Vec::new();
        decode_f64(dtype, bytes, elements, &mut wide).unwrap();
        prop_assert_eq!(values.len(), elements * lanes_per_element(dtype));
        let has_nan = values.iter().any(|v| v.is_nan());
        let lossy = matches!(dtype, DType::DOUBLE | DType::COMPLEX128 | DType::INT64 | DType::UINT64
            | DType::INT32 | DType::UINT32 | DType::QINT32 | DType::BOOL);
        // Padding bits of packed types (odd int4 count, uint1 tail) are not values: compare whole elements.
        let partial = matches!(dtype, DType::INT4 | DType::UINT1);
        if !has_nan && !lossy && !partial {
            prop_assert_eq!(encode_f32(dtype, &values).unwrap(), bytes.to_vec());
        }
        for (a, b) in values.iter().zip(&wide) {
            prop_assert!(a.to_bits() == (*b as f32).to_bits() || (a.is_nan() && b.is_nan()));
        }
    }

    /// Encoding f32 values and decoding them gives the values back where the dtype can hold them.
    #[test]
    fn encode_then_decode_is_identity_for_representable_values(ints in prop::collection::vec(-8i8..8, 0..40)) {
        let values: Vec<f32> = ints.iter().map(|&v| f32::from(v)).collect();
        for dtype in [DType::INT4, DType::INT8, DType::INT16, DType::INT32, DType::INT64, DType::FLOAT16,
                      DType::BF16, DType::FLOAT, DType::DOUBLE, DType::FLOAT8_E4M3FN, DType::FLOAT8_E5M2] {
            let bytes = encode_f32(dtype, &values).unwrap();
            prop_assert_eq!(f32s(dtype, &bytes, values.len()), values.clone(), "{}", dtype);
        }
    }
}
