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
/// shape. Both buffers' memory is reused: a tensor in a device format is decoded into `scratch` and laid
/// out from there into `out`, so that a caller that keeps both between tensors allocates and zeroes
/// nothing per tensor once they are as large as the largest.
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
    layout::to_host_into(
        format,
        scratch,
        lanes_per_element(tensor.dtype),
        tensor.device_shape,
        tensor.original_shape,
        tensor.dtype,
        tensor.sub_format,
        out,
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::to_device;
    use crate::tensor::encode_f32;

    /// One scratch and one output buffer through tensors of every device layout, of sizes that grow and
    /// shrink, with complex, ND and dynamic-shape tensors between them: each comes back as the host values
    /// `to_device` placed (padding, a marker, cropped), and once the buffers have held the largest tensor
    /// neither is allocated again.
    #[test]
    fn reused_buffers_give_each_tensor_its_own_host_values() {
        let cases: [(Format, DType, &[u64]); 11] = [
            (Format::NC1HWC0, DType::FLOAT16, &[4, 70, 3, 5]),
            (Format::FRACTAL_NZ, DType::FLOAT, &[33, 20]),
            (Format::ND, DType::FLOAT16, &[7, 9]),
            (Format::NC1HWC0, DType::COMPLEX64, &[2, 20, 3, 1]),
            (Format::NC1HWC0, DType::FLOAT, &[64, 40, 1, 1]),
            (Format::NC1HWC0_C04, DType::FLOAT16, &[3, 3, 2, 2]),
            (Format::NDC1HWC0, DType::BF16, &[2, 17, 2, 3, 1]),
            (Format::FRACTAL_NZ, DType::FLOAT16, &[2, 5, 70]),
            (Format::FRACTAL_Z, DType::FLOAT, &[18, 20, 1, 3]),
            (Format::NC1HWC0, DType::FLOAT, &[1, 1, 1, 1]),
            (Format::FRACTAL_NZ, DType::INT8, &[40, 3]),
        ];
        let (mut scratch, mut out) = (Vec::new(), Vec::new());
        let mut buffers = None;
        for round in 0..2 {
            for (k, &(format, dtype, shape)) in cases.iter().enumerate() {
                let lanes = lanes_per_element(dtype);
                let n = shape.iter().product::<u64>() as usize * lanes;
                // Small integers: exact in every dtype listed, and distinct per tensor and round.
                let host: Vec<f32> = (0..n).map(|i| ((i * 7 + k * 3 + round) % 100) as f32 - 50.0).collect();
                // Laid out by element index; padding (-1) becomes the marker 99.
                let indices: Vec<i64> = (0..(n / lanes) as i64).collect();
                let (placed, device_shape) = to_device(format, &indices, shape, dtype, 0, -1).unwrap();
                let device: Vec<Vec<f32>> = placed
                    .iter()
                    .map(|&i| match usize::try_from(i) {
                        Ok(i) => host[i * lanes..][..lanes].to_vec(),
                        Err(_) => vec![99.0; lanes],
                    })
                    .collect();
                let bytes = encode_f32(dtype, &device.concat()).unwrap();
                let t = DeviceTensor {
                    dtype,
                    format: format.code(),
                    device_shape: &device_shape,
                    original_shape: shape,
                    sub_format: 0,
                    bytes: &bytes,
                };
                let got_shape = host_values(&t, &mut scratch, &mut out).unwrap();
                assert_eq!(got_shape, shape, "{format} {dtype}");
                assert_eq!(out, host, "{format} {dtype} {shape:?} round {round}");
                // The same tensor without a usable host shape: the device values as they are.
                let dynamic = [u64::MAX; 2];
                let t = DeviceTensor { original_shape: &dynamic, ..t };
                assert_eq!(host_values(&t, &mut scratch, &mut out).unwrap(), device_shape);
                assert_eq!(out, device.concat(), "{format} {dtype} dynamic");
            }
            let now = (scratch.as_ptr(), scratch.capacity(), out.as_ptr(), out.capacity());
            // The first round grew both buffers to the largest tensor; the second allocates nothing.
            if let Some(before) = buffers.replace(now) {
                assert_eq!(before, now, "a buffer was allocated again");
            }
        }
    }
}
