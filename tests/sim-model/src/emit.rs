//! Device formats of reported tensors.
//!
//! Which tensors are not ND (device precisions only; the benchmark is all ND):
//! - the weight input (index 1) of every forward `MatMulV2` and the weight-like input of the backward
//!   `MatMul` computing dx: FRACTAL_NZ (29), host shape (K, N) -> device (ceil(N/16), ceil(K/16), 16, 16);
//! - the output of `model/layer_{l}/attn/residual/Add`: NC1HWC0 (3). The (B, S, D) activation is read as
//!   NCHW with N = B*S, C = D, H = W = 1 (the same bytes, in the same order, as (B, S, D)), so the device
//!   shape is (B*S, ceil(D/16), 1, 1, 16) and `original_shape` is that NCHW shape (B*S, D, 1, 1), which is
//!   what the shared `layout::to_host` needs; the benchmark reports the same tensor as (B, S, D).
//!
//! Padding is filled with nonzero garbage, as a real device leaves it.

use accutrace_formats::layout::{self, Format};
use accutrace_formats::DType;

/// A tensor's device format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fmt {
    Nd,
    FractalNz,
    Nc1hwc0,
}

/// `OutputFormat` codes (docs/CANN.md §1).
pub const FORMAT_ND: i32 = Format::ND.code();
pub const FORMAT_NC1HWC0: i32 = Format::NC1HWC0.code();
pub const FORMAT_FRACTAL_NZ: i32 = Format::FRACTAL_NZ.code();

/// A tensor ready to be viewed: device bytes plus both shapes.
pub struct Encoded {
    pub dtype: DType,
    pub format: i32,
    pub device_shape: Vec<u64>,
    pub original_shape: Vec<u64>,
    pub bytes: Vec<u8>,
}

/// Garbage written into padding: a byte pattern that decodes to a finite nonzero value in every dtype
/// used (fp16 203.25, bf16 3.8e15, fp32 1.5e16), so a reader that forgets to crop gets visibly wrong stats.
const PAD_BYTE: u8 = 0x5A;

/// Lays out host-order `bytes` (`host_shape`, element type `dtype`) in `fmt`.
pub fn encode(dtype: DType, host_shape: &[usize], bytes: Vec<u8>, fmt: Fmt) -> Encoded {
    let mut original_shape: Vec<u64> = host_shape.iter().map(|&d| d as u64).collect();
    let format = match fmt {
        Fmt::Nd => Format::ND,
        Fmt::FractalNz => Format::FRACTAL_NZ,
        Fmt::Nc1hwc0 => {
            // (..., C) read as NCHW (rows, C, 1, 1): same bytes, so the host tensor is unchanged.
            let c = original_shape.last().copied().unwrap_or(1);
            let rows: u64 = original_shape.iter().product::<u64>() / c.max(1);
            original_shape = vec![rows, c, 1, 1];
            Format::NC1HWC0
        }
    };
    let laid_out = match dtype.bits() {
        Some(16) => relayout::<2>(format, &bytes, &original_shape, dtype),
        Some(32) => relayout::<4>(format, &bytes, &original_shape, dtype),
        _ => None,
    };
    match laid_out {
        Some((bytes, device_shape)) => {
            Encoded { dtype, format: format.code(), device_shape, original_shape, bytes }
        }
        // Shapes a format cannot hold (or other widths) stay ND with the host shape.
        None => {
            let original_shape: Vec<u64> = host_shape.iter().map(|&d| d as u64).collect();
            Encoded { dtype, format: FORMAT_ND, device_shape: original_shape.clone(), original_shape, bytes }
        }
    }
}

/// Moves whole `W`-byte elements into `format` with the shared layout code; `None` for ND or on error.
fn relayout<const W: usize>(
    format: Format,
    bytes: &[u8],
    host: &[u64],
    dtype: DType,
) -> Option<(Vec<u8>, Vec<u64>)> {
    if format == Format::ND {
        return None;
    }
    let elems: Vec<[u8; W]> = bytes.chunks_exact(W).map(|c| c.try_into().expect("chunk width")).collect();
    let (device, shape) = layout::to_device(format, &elems, host, dtype, 0, [PAD_BYTE; W]).ok()?;
    Some((device.concat(), shape))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_roundtrip_through_the_shared_layout_code_with_garbage_padding() {
        let host: Vec<u16> = (1..=20 * 3).map(|i| i as u16).collect();
        let bytes: Vec<u8> = host.iter().flat_map(|v| v.to_le_bytes()).collect();
        for (fmt, code) in [(Fmt::FractalNz, FORMAT_FRACTAL_NZ), (Fmt::Nc1hwc0, FORMAT_NC1HWC0)] {
            let e = encode(DType::FLOAT16, &[4, 5, 3], bytes.clone(), fmt);
            assert_eq!(e.format, code);
            assert!(e.bytes.len() > bytes.len(), "padded");
            assert!(e.bytes.windows(2).any(|w| w == [PAD_BYTE, PAD_BYTE]));
            let dev: Vec<u16> = e.bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
            let back = layout::to_host(
                Format::from_code(code),
                &dev,
                &e.device_shape,
                &e.original_shape,
                e.dtype,
                0,
            )
            .unwrap();
            assert_eq!(back, host);
        }
        let nc = encode(DType::FLOAT16, &[4, 5, 3], bytes.clone(), Fmt::Nc1hwc0);
        assert_eq!(nc.original_shape, [20, 3, 1, 1]);
        assert_eq!(nc.device_shape, [20, 1, 1, 1, 16]);
        let nd = encode(DType::FLOAT16, &[4, 5, 3], bytes, Fmt::Nd);
        assert_eq!((nd.format, nd.device_shape), (FORMAT_ND, vec![4, 5, 3]));
    }
}
