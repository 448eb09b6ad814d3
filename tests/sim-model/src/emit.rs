//! Device formats of reported tensors.
//!
//! Which tensors are not ND (device precisions only; the benchmark is all ND):
//! - the weight input (index 1) of every forward `MatMulV2` and the weight-like input of the backward
//!   `MatMul` computing dx: FRACTAL_NZ (29), host shape (K, N) -> device (ceil(N/16), ceil(K/16), 16, 16);
//! - the output of `model/layer_{l}/attn/residual/Add`: NC1HWC0 (3). The (B, S, D) activation is read as
//!   NCHW with N = B*S, C = D, H = W = 1 (the same bytes as (B, S, D)), so the device shape is
//!   (B*S, ceil(D/16), 1, 1, 16) and `original_shape` is the host (B, S, D).
//!
//! Padding is filled with nonzero garbage, as a real device leaves it.

use accutrace_formats::DType;

/// A tensor's device format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fmt {
    Nd,
    FractalNz,
    Nc1hwc0,
}

/// `OutputFormat` codes (cann-facts §1).
pub const FORMAT_ND: i32 = 2;
pub const FORMAT_NC1HWC0: i32 = 3;
pub const FORMAT_FRACTAL_NZ: i32 = 29;

/// A tensor ready to be viewed: device bytes plus both shapes.
pub struct Encoded {
    pub dtype: DType,
    pub format: i32,
    pub device_shape: Vec<u64>,
    pub original_shape: Vec<u64>,
    pub bytes: Vec<u8>,
}

/// Lays out host-order `bytes` (`host_shape`, element type `dtype`) in `fmt`.
pub fn encode(dtype: DType, host_shape: &[usize], bytes: Vec<u8>, fmt: Fmt) -> Encoded {
    let original_shape: Vec<u64> = host_shape.iter().map(|&d| d as u64).collect();
    let nd = |bytes| Encoded {
        dtype,
        format: FORMAT_ND,
        device_shape: original_shape.clone(),
        original_shape: original_shape.clone(),
        bytes,
    };
    // Until accutrace_formats::layout::to_device lands, every tensor is reported as ND.
    let _ = fmt;
    nd(bytes)
}
