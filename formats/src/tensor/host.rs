//! From device bytes to host values: decode the dtype, undo the device format, crop the padding.
//! Every source that holds device-format tensors (CANN dumps, captures) goes through here.

use crate::layout::{self, Format};
use crate::tensor::{decode_f32, decode_f32_into, element_count, element_count_usize, lanes_per_element};
use crate::{DType, Result};

/// Where a tensor's bytes came from and how they are laid out on the device.
pub struct DeviceTensor<'a> {
    /// The element type.
    pub dtype: DType,
    /// CANN `OutputFormat` code of the device layout.
    pub format: i32,
    /// Shape as laid out on the device.
    pub device_shape: &'a [u64],
    /// Host shape before device padding (empty when unknown).
    pub original_shape: &'a [u64],
    /// Groups of a grouped FRACTAL_Z, else 0.
    pub sub_format: i32,
    /// The bytes as the device wrote them.
    pub bytes: &'a [u8],
}

/// Decodes `tensor` into `out` (host layout, C order; complex as interleaved re, im) and returns the host
/// shape. `scratch` is reused between calls to avoid an allocation per tensor.
pub fn host_values(
    tensor: &DeviceTensor<'_>,
    scratch: &mut Vec<f32>,
    out: &mut Vec<f32>,
) -> Result<Vec<u64>> {
    let format = Format::from_code(tensor.format);
    let elements = element_count_usize(tensor.device_shape)?;
    if format.is_identity() || !layout::host_shape_is_usable(tensor.original_shape) {
        decode_reusing(tensor.dtype, tensor.bytes, elements, out)?;
        let shape = if layout::host_shape_is_usable(tensor.original_shape)
            && element_count(tensor.original_shape) == Some(elements as u64)
        {
            tensor.original_shape.to_vec()
        } else {
            tensor.device_shape.to_vec()
        };
        return Ok(shape);
    }
    decode_reusing(tensor.dtype, tensor.bytes, elements, scratch)?;
    let (host, shape) = if lanes_per_element(tensor.dtype) == 2 {
        let pairs: Vec<[f32; 2]> = scratch.chunks_exact(2).map(|p| [p[0], p[1]]).collect();
        let (host, shape) = layout::to_host_with_shape(
            format,
            &pairs,
            tensor.device_shape,
            tensor.original_shape,
            tensor.dtype,
            tensor.sub_format,
        )?;
        (host.into_iter().flatten().collect(), shape)
    } else {
        layout::to_host_with_shape(
            format,
            scratch,
            tensor.device_shape,
            tensor.original_shape,
            tensor.dtype,
            tensor.sub_format,
        )?
    };
    *out = host;
    Ok(shape)
}

/// Elements per parallel decode work item (1 MiB of f32 out).
const DECODE_CHUNK: usize = 1 << 18;

/// Decodes `elements` elements of `dtype` into `out` (resized to fit), reusing its memory: unlike
/// [`decode_f32`], no zero-fill of the part that already exists, and large tensors are decoded by several
/// threads. Errors are [`decode_f32`]'s.
pub fn decode_reusing(dtype: DType, bytes: &[u8], elements: usize, out: &mut Vec<f32>) -> Result<()> {
    let lanes = lanes_per_element(dtype);
    let total = elements.checked_mul(lanes);
    // Checked against the real byte length before anything is sized by the (untrusted) element count.
    let sized = dtype.is_decodable() && dtype.byte_size(elements as u64) == Some(bytes.len() as u64);
    let Some(total) = total.filter(|_| sized) else {
        return decode_f32(dtype, bytes, elements, out); // reports the problem
    };
    if out.len() < total {
        out.resize(total, 0.0);
    } else {
        out.truncate(total);
    }
    let bytes_per_lane = bytes.len().checked_div(total).unwrap_or(0);
    let whole_bytes = total > 0 && bytes_per_lane * total == bytes.len() && total % lanes == 0;
    if total >= 2 * DECODE_CHUNK && whole_bytes && lanes == 1 {
        use rayon::prelude::*;
        return out
            .par_chunks_mut(DECODE_CHUNK)
            .zip(bytes.par_chunks(DECODE_CHUNK * bytes_per_lane))
            .try_for_each(|(o, b)| decode_f32_into(dtype, b, o));
    }
    decode_f32_into(dtype, bytes, out)
}

/// The host shape a tensor will have, without decoding it.
pub fn host_shape(format: i32, device_shape: &[u64], original_shape: &[u64]) -> Vec<u64> {
    let format = Format::from_code(format);
    if layout::host_shape_is_usable(original_shape)
        && (!format.is_identity() || element_count(original_shape) == element_count(device_shape))
    {
        original_shape.to_vec()
    } else {
        device_shape.to_vec()
    }
}
