//! A tensor's data read from its place in the run: its stored bytes whole, as the device tensor the host
//! conversions take, or decoded to f32 block by block as they are read (in a device layout, each block put
//! where it goes).

use super::{unpack, CaptureSource, DeviceLayout};
use crate::index::TensorId;
use crate::sources::buffers::{give_buffer, take_buffer, with_values_scratch};
use accutrace_formats::layout::{device_runs, Format};
use accutrace_formats::tensor::host::DeviceTensor;
use accutrace_formats::tensor::host_bytes;
use accutrace_formats::tensor::{element_count, lanes_per_element};
use anyhow::{Context, Result};

impl CaptureSource {
    fn with_data<R>(
        &self,
        tensor: TensorId,
        f: impl FnOnce(&DeviceLayout<'_>, &[u8]) -> Result<R>,
    ) -> Result<R> {
        let meta =
            self.layout(tensor).context("the capture holds statistics only for this tensor, not its data")?;
        let (s, segment, offset) = unpack(self.index.tensors[tensor].locator);
        let (mut bytes, mut scratch) = (take_buffer(), take_buffer());
        let read = self.run.streams[s].read_tensor_data_at_with(segment, offset, &mut bytes, &mut scratch);
        let result = match read {
            Ok(()) => f(&meta, &bytes),
            Err(e) => Err(e.into()),
        };
        give_buffer(scratch);
        give_buffer(bytes);
        result
    }

    /// [`Source::read_values`] decoded block by block as the data is read
    /// ([`TensorBlocks::decode_f32_into`]): straight into `out` where the device order is the host's (nearly
    /// every tensor); in a device layout, each block put where it goes in `out` as it is read
    /// ([`TensorBlocks::decode_device_runs_into`]), or, for the layouts that do not split by device axis
    /// (grouped FRACTAL_Z, C1HWNCoC0), into this thread's values scratch and laid out from there into
    /// `out`, as [`host_values`] lays out the whole decode's values. The values are the whole decode's, without a
    /// buffer of its decoded bytes; the content hash is checked as the whole decode checks it, and every
    /// error is the whole decode's. `Ok(false)`, nothing read, for sub-byte and undecodable types and where
    /// the bytes are not the device shape's: the whole decode takes those, and reports what is wrong.
    ///
    /// [`Source::read_values`]: crate::sources::Source::read_values
    /// [`TensorBlocks::decode_f32_into`]: accutrace_formats::capture::reader::TensorBlocks::decode_f32_into
    /// [`TensorBlocks::decode_device_runs_into`]:
    /// accutrace_formats::capture::reader::TensorBlocks::decode_device_runs_into
    /// [`host_values`]: accutrace_formats::tensor::host::host_values
    pub(super) fn read_values_in_blocks(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<bool> {
        let Some(meta) = self.layout(tensor) else {
            return Ok(false);
        };
        let original = meta.original_shape.unwrap_or_default();
        let width = match meta.dtype.bits() {
            Some(bits) if bits >= 8 && bits % 8 == 0 => u64::from(bits / 8),
            _ => return Ok(false),
        };
        if !meta.dtype.is_decodable() {
            return Ok(false);
        }
        let host_order = host_bytes::device_order_is_host_order(meta.format, original);
        let bytes = element_count(meta.device_shape).and_then(|n| n.checked_mul(width));
        let (s, segment, offset) = unpack(self.index.tensors[tensor].locator);
        let mut scratch = take_buffer();
        let read = self.run.streams[s].with_tensor_blocks_at(segment, offset, &mut scratch, |blocks| {
            if bytes != Some(blocks.len() as u64) {
                return Ok(false);
            }
            if host_order {
                return blocks.decode_f32_into(meta.dtype, out);
            }
            let format = Format::from_code(meta.format);
            if let Some(runs) = device_runs(format, meta.device_shape, original, meta.dtype, meta.sub_format)?
            {
                // Each block put where it goes as it is read: no device-order copy of the tensor.
                return blocks.decode_device_runs_into(meta.dtype, &runs, out);
            }
            with_values_scratch(|device| {
                if !blocks.decode_f32_into(meta.dtype, device)? {
                    return Ok(false);
                }
                accutrace_formats::layout::to_host_into(
                    Format::from_code(meta.format),
                    device,
                    lanes_per_element(meta.dtype),
                    meta.device_shape,
                    original,
                    meta.dtype,
                    meta.sub_format,
                    out,
                )?;
                Ok(true)
            })
        });
        give_buffer(scratch);
        Ok(read??)
    }

    /// [`Self::with_data`], as the device tensor the host conversions take.
    pub(super) fn with_device_tensor<R>(
        &self,
        tensor: TensorId,
        f: impl FnOnce(&DeviceTensor<'_>) -> Result<R>,
    ) -> Result<R> {
        self.with_data(tensor, |m, bytes| {
            f(&DeviceTensor {
                dtype: m.dtype,
                format: m.format,
                device_shape: m.device_shape,
                original_shape: m.original_shape.unwrap_or_default(),
                sub_format: m.sub_format,
                bytes,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_data::{noise, read_as_whole, read_whole, write};
    use super::*;
    use crate::sources::Source;
    use accutrace_formats::layout::to_device;
    use accutrace_formats::DType;

    /// ND tensors of several widths (stored raw, or zstd with stored and compressed planes), device
    /// layouts (fp16 and complex NC1HWC0, an NZ tensor whose shapes do not fit) and bytes that are not
    /// the shape's: `read_values` takes the blocks wherever the bytes are the shape's and gives the whole
    /// decode's values bit for bit, or its error, reusing one buffer; once bytes of the stored data are
    /// flipped, it fails with the whole decode's error, never with values.
    #[test]
    fn values_read_in_blocks_are_the_whole_decodes_and_damage_is_the_same_error() {
        let host_shape = [2u64, 20, 3, 5];
        let nc1hwc0: Vec<u16> = (0..600).map(|i| 0x3C00 + i).collect();
        let (device, device_shape) =
            to_device(Format::NC1HWC0, &nc1hwc0, &host_shape, DType::FLOAT16, 0, 0x7E00).unwrap();
        let activations: Vec<u8> =
            (0..90_000u32).flat_map(|i| (0x3800 + (i % 1500) as u16).to_le_bytes()).collect();
        let mut fp16 = noise(160_000, 1);
        fp16.iter_mut().skip(1).step_by(2).for_each(|b| *b = 0x3C | (*b & 1));
        let tensors = vec![
            (DType::FLOAT16, Format::ND, vec![80_000], None, fp16),
            (DType::FLOAT, Format::ND, vec![100, 100], Some(vec![10_000]), noise(40_000, 2)),
            (
                DType::FLOAT16,
                Format::NC1HWC0,
                device_shape,
                Some(host_shape.to_vec()),
                device.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
            (DType::FLOAT16, Format::ND, vec![90_000], None, activations),
            (DType::INT8, Format::ND, vec![5_000], None, noise(5_000, 3)),
            (DType::DOUBLE, Format::ND, vec![4, 3], None, noise(96, 4)),
            (DType::FLOAT, Format::ND, vec![7], None, noise(32, 5)),
            // A device shape that does not fit the host shape: the layout's error.
            (DType::FLOAT16, Format::FRACTAL_NZ, vec![1, 1, 16, 16], Some(vec![40, 3]), noise(512, 6)),
            (DType::COMPLEX64, Format::NC1HWC0, vec![1, 1, 1, 1, 16], Some(vec![1, 3, 1, 1]), noise(128, 7)),
        ];
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &tensors);
        let source = CaptureSource::open(dir.path()).unwrap();
        assert_eq!(source.index.tensors.len(), tensors.len());
        let mut out = Vec::new();
        let mut in_blocks = 0;
        for t in 0..tensors.len() {
            in_blocks += usize::from(matches!(source.read_values_in_blocks(t, &mut out), Ok(true)));
            let _ = read_as_whole(&source, t, &mut out);
        }
        // Every ND tensor whose bytes are its shape's; the NC1HWC0 one and the short one are not.
        assert_eq!(in_blocks, 7);
        // The largest tensors are in host order; the NC1HWC0 one is small.
        assert_eq!(source.buffers_per_tensor(), 2);
        assert!(read_whole(&source, 6).is_err_and(|e| e.contains("need")));
        assert!(read_whole(&source, 7).is_err_and(|e| e.contains("does not fit")));
        drop(source);

        // Flip bytes where the payloads' stored bytes lie (found by their contents): each damaged tensor
        // reads as the whole decode reads it, an error.
        let segment = std::fs::read_dir(
            dir.path().join(std::fs::read_dir(dir.path()).unwrap().next().unwrap().unwrap().file_name()),
        )
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "acc"))
        .unwrap();
        let mut bytes = std::fs::read(&segment).unwrap();
        let low_plane: Vec<u8> = tensors[0].4.iter().step_by(2).copied().collect();
        // The f32 noise may be stored raw or as planes (its third here).
        let f32_plane: Vec<u8> = tensors[1].4.iter().skip(2).step_by(4).copied().collect();
        let find = |needle: &[u8]| bytes.windows(needle.len()).position(|w| w == needle);
        let places = [
            find(&low_plane[40_000..40_032]),
            find(&tensors[1].4[30_000..30_032]).or_else(|| find(&f32_plane[5_000..5_032])),
            find(&tensors[4].4[1_000..1_032]),
        ];
        for at in places {
            bytes[at.expect("stored bytes found") + 7] ^= 0x5A;
        }
        std::fs::write(&segment, &bytes).unwrap();
        let source = CaptureSource::open(dir.path()).unwrap();
        let mut failed = 0;
        for t in 0..tensors.len() {
            let whole = read_as_whole(&source, t, &mut out);
            failed += usize::from(whole.is_err_and(|e| e.contains("content hash")));
        }
        assert_eq!(failed, 3);
    }
}
