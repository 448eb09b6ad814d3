//! A tensor's own bytes in host layout, for exports that must not pass values through f32 (`convert` of
//! fp64, int64 and large int32 tensors). The device format is undone on whole elements, so every dtype of
//! a byte-multiple width comes out bit for bit.

use super::host::{host_shape, DeviceTensor};
use crate::layout::{self, Format};
use crate::{FormatError, Result};
use std::borrow::Cow;

/// Host-layout bytes (C order, the tensor's dtype, little-endian as on the device) and the host shape.
pub struct HostBytes {
    /// Host-layout bytes: C order, the tensor's dtype, little-endian.
    pub bytes: Vec<u8>,
    /// The host shape.
    pub shape: Vec<u64>,
}

/// The host bytes of `tensor`, or `None` for sub-byte dtypes (int4, uint1), which only the f32 path
/// unpacks.
pub fn host_bytes(tensor: &DeviceTensor<'_>) -> Result<Option<HostBytes>> {
    Ok(host_bytes_borrowed(tensor)?.map(|(bytes, shape)| HostBytes { bytes: bytes.into_owned(), shape }))
}

/// Host-layout bytes, borrowed from the device tensor where its layout is the host's, and the host shape.
pub type HostBytesRef<'a> = (Cow<'a, [u8]>, Vec<u64>);

/// [`host_bytes`], borrowing the tensor's own bytes where the device layout is the host's (no copy).
pub fn host_bytes_borrowed<'a>(tensor: &DeviceTensor<'a>) -> Result<Option<HostBytesRef<'a>>> {
    let width = match tensor.dtype.bits() {
        Some(bits) if bits >= 8 && bits % 8 == 0 => (bits / 8) as usize,
        _ => return Ok(None),
    };
    let whole_elements = crate::tensor::element_count(tensor.device_shape)
        .and_then(|n| n.checked_mul(width as u64))
        .is_some_and(|n| n == tensor.bytes.len() as u64);
    if !whole_elements {
        return Err(FormatError::at(
            0,
            format!(
                "device shape {:?} of {} needs other than the {} bytes the tensor has",
                tensor.device_shape,
                tensor.dtype,
                tensor.bytes.len()
            ),
        ));
    }
    let shape = host_shape(tensor.format, tensor.device_shape, tensor.original_shape);
    if device_order_is_host_order(tensor.format, tensor.original_shape) {
        return Ok(Some((Cow::Borrowed(tensor.bytes), shape)));
    }
    let bytes = match width {
        1 => permute::<1>(tensor)?,
        2 => permute::<2>(tensor)?,
        4 => permute::<4>(tensor)?,
        8 => permute::<8>(tensor)?,
        16 => permute::<16>(tensor)?,
        other => {
            return Err(FormatError::at(0, format!("{}: no layout for {other}-byte elements", tensor.dtype)))
        }
    };
    Ok(Some((Cow::Owned(bytes), shape)))
}

/// Whether a tensor of device format `format` (a CANN code) and host shape `original_shape` holds its
/// elements in host order, so that [`host_bytes_borrowed`] lends its bytes as they are (byte counts
/// permitting): an identity format, or no usable host shape to lay them out by.
pub fn device_order_is_host_order(format: i32, original_shape: &[u64]) -> bool {
    Format::from_code(format).is_identity() || !layout::host_shape_is_usable(original_shape)
}

/// Undoes the device format on `W`-byte elements, read in place from the tensor's bytes (whole elements:
/// the caller checked the byte count) and gathered into the host bytes, which are returned without a copy.
fn permute<const W: usize>(tensor: &DeviceTensor<'_>) -> Result<Vec<u8>> {
    let (device, _) = tensor.bytes.as_chunks::<W>();
    let (host, _) = layout::to_host_with_shape(
        Format::from_code(tensor.format),
        device,
        tensor.device_shape,
        tensor.original_shape,
        tensor.dtype,
        tensor.sub_format,
    )?;
    Ok(host.into_flattened())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::to_device;
    use crate::DType;

    #[test]
    fn fp64_in_a_device_format_comes_back_bit_for_bit() {
        // Values that f32 cannot hold; padding filled with a marker that must be cropped.
        let host: Vec<f64> = (0..24).map(|i| 1.0 + (i as f64) * 1e-12 + 2f64.powi(40)).collect();
        let shape = [1, 4, 2, 3];
        let (device, device_shape) =
            to_device(Format::NC1HWC0, &host, &shape, DType::DOUBLE, 0, -1.0).unwrap();
        let bytes: Vec<u8> = device.iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = DeviceTensor {
            dtype: DType::DOUBLE,
            format: Format::NC1HWC0.code(),
            device_shape: &device_shape,
            original_shape: &shape,
            sub_format: 0,
            bytes: &bytes,
        };
        let got = host_bytes(&t).unwrap().unwrap();
        assert_eq!(got.shape, shape);
        let expected: Vec<u8> = host.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(got.bytes, expected);
    }

    #[test]
    fn sub_byte_types_are_left_to_the_f32_path_and_bad_sizes_are_errors() {
        let t = DeviceTensor {
            dtype: DType::INT4,
            format: 2,
            device_shape: &[4],
            original_shape: &[4],
            sub_format: 0,
            bytes: &[0x12, 0x34],
        };
        assert!(host_bytes(&t).unwrap().is_none());
        let t = DeviceTensor { dtype: DType::INT64, bytes: &[0; 12], ..t };
        let e = host_bytes(&t).err().unwrap().to_string();
        assert!(e.contains("12 bytes"), "{e}");
    }

    /// Every element width and the layouts with trailing axes of 1 (an (N, C, 1, 1) activation in
    /// NC1HWC0), padded axes (C not a multiple of C0, NZ's K and N) and several axes: the host bytes are
    /// the elements `to_device` placed, bit for bit, and the padding (a marker) is cropped.
    #[test]
    fn every_width_and_layout_comes_back_in_host_order() {
        fn check<const W: usize>(dtype: DType) {
            let cases: [(Format, &[u64]); 7] = [
                (Format::NC1HWC0, &[64, 40, 1, 1]),
                (Format::NC1HWC0, &[2, 20, 3, 5]),
                (Format::NC1HWC0_C04, &[3, 3, 2, 2]),
                (Format::NDC1HWC0, &[2, 17, 2, 3, 1]),
                (Format::FRACTAL_NZ, &[33, 20]),
                (Format::FRACTAL_NZ, &[2, 5, 70]),
                (Format::FRACTAL_Z, &[18, 20, 1, 3]),
            ];
            for (format, shape) in cases {
                let n: u64 = shape.iter().product();
                // Distinct in their low bytes for as many elements as a width can tell apart.
                let host: Vec<[u8; W]> = (0..n)
                    .map(|i| std::array::from_fn(|b| ((i * 2_654_435_761) >> (8 * (b % 4))) as u8 ^ b as u8))
                    .collect();
                let (device, device_shape) = to_device(format, &host, shape, dtype, 0, [0xEE; W]).unwrap();
                assert!(device.len() as u64 > n, "{format} {shape:?}: the case has no padding");
                let bytes = device.concat();
                let t = DeviceTensor {
                    dtype,
                    format: format.code(),
                    device_shape: &device_shape,
                    original_shape: shape,
                    sub_format: 0,
                    bytes: &bytes,
                };
                let got = host_bytes(&t).unwrap().unwrap();
                assert_eq!(got.shape, shape, "{format} {dtype}");
                assert_eq!(got.bytes, host.concat(), "{format} {shape:?} {dtype}");
            }
        }
        check::<1>(DType::INT8);
        check::<2>(DType::FLOAT16);
        check::<4>(DType::FLOAT);
        check::<8>(DType::DOUBLE);
        check::<16>(DType::COMPLEX128);
    }
}
