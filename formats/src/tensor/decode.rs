//! The decoders, generic over the output lane type (f32 or f64).

use super::fp16::fp16_to_f32;
use super::half_bits::{bf16_to_f32, f16_to_f32, Fp8};
use super::hifloat8::hifloat8_to_f32;
use super::{check_byte_len, check_decodable, lanes_per_element};
use crate::{DType, FormatError, Result};

/// An output lane: f32 or f64. Integer conversions round to nearest (i64 -> f32 is inexact above 2^24).
trait Lane: Copy + Default {
    fn from_f32(v: f32) -> Self;
    fn from_f64(v: f64) -> Self;
    fn from_i64(v: i64) -> Self;
    fn from_u64(v: u64) -> Self;
    /// fp16 lanes from little-endian bytes; `out.len() * 2 == bytes.len()`.
    fn from_fp16(bytes: &[u8], out: &mut [Self]) {
        map::<2, Self>(bytes, out, |b| Self::from_f32(f16_to_f32(u16::from_le_bytes(b))));
    }
}

impl Lane for f32 {
    fn from_f32(v: f32) -> Self {
        v
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn from_i64(v: i64) -> Self {
        v as f32
    }
    fn from_u64(v: u64) -> Self {
        v as f32
    }
    fn from_fp16(bytes: &[u8], out: &mut [Self]) {
        fp16_to_f32(bytes, out);
    }
}

impl Lane for f64 {
    fn from_f32(v: f32) -> Self {
        f64::from(v)
    }
    fn from_f64(v: f64) -> Self {
        v
    }
    fn from_i64(v: i64) -> Self {
        v as f64
    }
    fn from_u64(v: u64) -> Self {
        v as f64
    }
}

/// One lane per `N`-byte chunk. The zip of two exact-length iterators compiles to a bounds-check-free loop
/// that LLVM vectorises when `f` is branch-free.
#[inline(always)]
fn map<const N: usize, L>(bytes: &[u8], out: &mut [L], f: impl Fn([u8; N]) -> L) {
    for (o, chunk) in out.iter_mut().zip(bytes.chunks_exact(N)) {
        let mut b = [0u8; N];
        b.copy_from_slice(chunk);
        *o = f(b);
    }
}

fn decode_into<L: Lane>(dtype: DType, bytes: &[u8], out: &mut [L]) -> Result<()> {
    check_decodable(dtype)?;
    let lanes = lanes_per_element(dtype);
    if !out.len().is_multiple_of(lanes) {
        return Err(FormatError::at(
            0,
            format!(
                "{} output lanes are not whole {} elements ({lanes} lanes each)",
                out.len(),
                dtype.name()
            ),
        ));
    }
    check_byte_len(dtype, bytes.len(), out.len() / lanes)?;
    match dtype {
        // Complex types are their float parts, interleaved: decode 2 * elements parts.
        DType::FLOAT16 | DType::COMPLEX32 => L::from_fp16(bytes, out),
        DType::BF16 => map::<2, L>(bytes, out, |b| L::from_f32(bf16_to_f32(u16::from_le_bytes(b)))),
        DType::FLOAT | DType::COMPLEX64 => map::<4, L>(bytes, out, |b| L::from_f32(f32::from_le_bytes(b))),
        DType::DOUBLE | DType::COMPLEX128 => map::<8, L>(bytes, out, |b| L::from_f64(f64::from_le_bytes(b))),
        DType::FLOAT8_E4M3FN => map::<1, L>(bytes, out, |b| L::from_f32(Fp8::E4M3FN.to_f32(b[0]))),
        DType::FLOAT8_E5M2 => map::<1, L>(bytes, out, |b| L::from_f32(Fp8::E5M2.to_f32(b[0]))),
        DType::HIFLOAT8 => map::<1, L>(bytes, out, |b| L::from_f32(hifloat8_to_f32(b[0]))),
        DType::INT8 | DType::QINT8 => map::<1, L>(bytes, out, |b| L::from_i64(i64::from(b[0] as i8))),
        DType::UINT8 | DType::QUINT8 => map::<1, L>(bytes, out, |b| L::from_u64(u64::from(b[0]))),
        DType::BOOL => map::<1, L>(bytes, out, |b| L::from_u64(u64::from(b[0] != 0))),
        DType::INT16 | DType::QINT16 => {
            map::<2, L>(bytes, out, |b| L::from_i64(i64::from(i16::from_le_bytes(b))))
        }
        DType::UINT16 | DType::QUINT16 => {
            map::<2, L>(bytes, out, |b| L::from_u64(u64::from(u16::from_le_bytes(b))))
        }
        DType::INT32 | DType::QINT32 => {
            map::<4, L>(bytes, out, |b| L::from_i64(i64::from(i32::from_le_bytes(b))))
        }
        DType::UINT32 => map::<4, L>(bytes, out, |b| L::from_u64(u64::from(u32::from_le_bytes(b)))),
        DType::INT64 => map::<8, L>(bytes, out, |b| L::from_i64(i64::from_le_bytes(b))),
        DType::UINT64 => map::<8, L>(bytes, out, |b| L::from_u64(u64::from_le_bytes(b))),
        DType::INT4 => {
            for (i, o) in out.iter_mut().enumerate() {
                let byte = bytes[i / 2];
                // Low nibble first; shifting the nibble into the top of an i8 and back sign-extends it.
                let nibble = if i % 2 == 0 { byte << 4 } else { byte & 0xf0 };
                *o = L::from_i64(i64::from((nibble as i8) >> 4));
            }
        }
        DType::UINT1 => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = L::from_u64(u64::from((bytes[i / 8] >> (i % 8)) & 1));
            }
        }
        // check_decodable let through a kind this match does not list: a bug here, reported, not guessed.
        _ => {
            return Err(FormatError::at(0, format!("dtype {} has no decoder", dtype.name())));
        }
    }
    Ok(())
}

/// Decodes `bytes` into `out` (one lane per element, two for complex): `out.len()` fixes the element count.
pub fn decode_f32_into(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    decode_into(dtype, bytes, out)
}

/// Like [`decode_f32_into`] with f64 lanes (exact for every dtype but int64/uint64 beyond 2^53).
pub fn decode_f64_into(dtype: DType, bytes: &[u8], out: &mut [f64]) -> Result<()> {
    decode_into(dtype, bytes, out)
}

/// Decodes `elements` elements of `dtype` into `out`, which is cleared first (its capacity is reused).
pub fn decode_f32(dtype: DType, bytes: &[u8], elements: usize, out: &mut Vec<f32>) -> Result<()> {
    decode_vec(dtype, bytes, elements, out)
}

/// Like [`decode_f32`] with f64 lanes.
pub fn decode_f64(dtype: DType, bytes: &[u8], elements: usize, out: &mut Vec<f64>) -> Result<()> {
    decode_vec(dtype, bytes, elements, out)
}

fn decode_vec<L: Lane>(dtype: DType, bytes: &[u8], elements: usize, out: &mut Vec<L>) -> Result<()> {
    out.clear();
    check_decodable(dtype)?;
    // Checked before allocating: `elements` may come from an untrusted header, `bytes` is real memory.
    check_byte_len(dtype, bytes.len(), elements)?;
    let lanes = lanes_per_element(dtype);
    let total = elements.checked_mul(lanes).ok_or_else(|| {
        FormatError::at(0, format!("{elements} elements of {} overflow the address space", dtype.name()))
    })?;
    // Zero-fill then decode in place: measured faster here than staging chunks through a stack buffer
    // (docs/BENCHMARKS.md); avoiding the fill would need `unsafe` set_len.
    out.resize(total, L::default());
    decode_into(dtype, bytes, out)
}
