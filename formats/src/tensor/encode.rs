//! f32 values to device bytes, for the simulated runtime (and for tests of the decoder).

use super::half_bits::{f32_to_bf16, f32_to_f16, Fp8};
use super::{check_decodable, lanes_per_element};
use crate::{DType, FormatError, Result};

/// Rounds to nearest (ties to even) and saturates into `[lo, hi]`; NaN becomes 0, like a saturating cast.
fn round_int(v: f32, lo: f64, hi: f64) -> f64 {
    if v.is_nan() {
        0.0
    } else {
        f64::from(v).round_ties_even().clamp(lo, hi)
    }
}

/// Encodes `values` (one lane per element, interleaved (re, im) for complex) as little-endian `dtype` bytes.
///
/// Floats round to nearest even (fp16/bf16/fp8; overflow to inf, or NaN for E4M3FN which has no inf);
/// integers round to nearest even and saturate to the type's range (NaN -> 0); bool is `v != 0`;
/// int4 packs two per byte, low nibble first; uint1 packs eight per byte, LSB first.
pub fn encode_f32(dtype: DType, values: &[f32]) -> Result<Vec<u8>> {
    check_decodable(dtype)?;
    let lanes = lanes_per_element(dtype);
    if !values.len().is_multiple_of(lanes) {
        return Err(FormatError::at(
            0,
            format!("{} values are not whole {} elements ({lanes} lanes each)", values.len(), dtype.name()),
        ));
    }
    let elements = (values.len() / lanes) as u64;
    let size = dtype.byte_size(elements).ok_or_else(|| {
        FormatError::at(0, format!("{elements} elements of {} overflow the address space", dtype.name()))
    })?;
    let mut out = Vec::with_capacity(size as usize);
    let ints = |out: &mut Vec<u8>, lo: f64, hi: f64, width: usize| {
        for &v in values {
            // Every integer in range of a <= 64-bit type survives the f64 -> i128 cast exactly.
            let x = round_int(v, lo, hi) as i128;
            out.extend_from_slice(&x.to_le_bytes()[..width]);
        }
    };
    match dtype {
        DType::FLOAT16 | DType::COMPLEX32 => {
            values.iter().for_each(|&v| out.extend_from_slice(&f32_to_f16(v).to_le_bytes()))
        }
        DType::BF16 => values.iter().for_each(|&v| out.extend_from_slice(&f32_to_bf16(v).to_le_bytes())),
        DType::FLOAT | DType::COMPLEX64 => {
            values.iter().for_each(|&v| out.extend_from_slice(&v.to_le_bytes()))
        }
        DType::DOUBLE | DType::COMPLEX128 => {
            values.iter().for_each(|&v| out.extend_from_slice(&f64::from(v).to_le_bytes()))
        }
        DType::FLOAT8_E4M3FN => out.extend(values.iter().map(|&v| Fp8::E4M3FN.from_f32(v))),
        DType::FLOAT8_E5M2 => out.extend(values.iter().map(|&v| Fp8::E5M2.from_f32(v))),
        DType::BOOL => out.extend(values.iter().map(|&v| u8::from(v != 0.0))),
        DType::INT8 | DType::QINT8 => ints(&mut out, i8::MIN.into(), i8::MAX.into(), 1),
        DType::UINT8 | DType::QUINT8 => ints(&mut out, 0.0, u8::MAX.into(), 1),
        DType::INT16 | DType::QINT16 => ints(&mut out, i16::MIN.into(), i16::MAX.into(), 2),
        DType::UINT16 | DType::QUINT16 => ints(&mut out, 0.0, u16::MAX.into(), 2),
        DType::INT32 | DType::QINT32 => ints(&mut out, i32::MIN.into(), i32::MAX.into(), 4),
        DType::UINT32 => ints(&mut out, 0.0, u32::MAX.into(), 4),
        // i64::MAX / u64::MAX are not f64 values; the clamp to 2^63 / 2^64 is then narrowed by the cast.
        DType::INT64 => {
            for &v in values {
                out.extend_from_slice(&(round_int(v, i64::MIN as f64, i64::MAX as f64) as i64).to_le_bytes());
            }
        }
        DType::UINT64 => {
            for &v in values {
                out.extend_from_slice(&(round_int(v, 0.0, u64::MAX as f64) as u64).to_le_bytes());
            }
        }
        DType::INT4 => {
            for pair in values.chunks(2) {
                let lo = round_int(pair[0], -8.0, 7.0) as i8 as u8 & 0x0f;
                let hi = pair.get(1).map_or(0, |&v| round_int(v, -8.0, 7.0) as i8 as u8 & 0x0f);
                out.push(lo | (hi << 4));
            }
        }
        DType::UINT1 => {
            for bits in values.chunks(8) {
                let byte = bits
                    .iter()
                    .enumerate()
                    .fold(0u8, |acc, (i, &v)| acc | (u8::from(round_int(v, 0.0, 1.0) != 0.0) << i));
                out.push(byte);
            }
        }
        _ => return Err(FormatError::at(0, format!("dtype {} has no encoder", dtype.name()))),
    }
    debug_assert_eq!(out.len() as u64, size);
    Ok(out)
}
