//! Device-layout data put in the host layout as it is read: each block's values go where
//! [`DeviceRuns`](crate::layout::DeviceRuns) say, so that the device-order values are never held whole.

use super::blocks::DECODE_BLOCK;
use super::TensorBlocks;
use crate::{FormatError, Result};

impl TensorBlocks<'_> {
    /// Decodes the data, device values of `dtype` in device order, into `out` in the host layout that `runs`
    /// describes (resized to its host elements, one lane each, two for complex; memory reused): each block
    /// as it is read is put where its runs go, so the device-order values are never held whole. The values
    /// [`decode_f32_into`](Self::decode_f32_into) and `layout::to_host_into` give together, bit for bit.
    /// `Ok(false)`, with nothing read, where [`decode_f32_into`](Self::decode_f32_into) would give it, or the
    /// data is not `runs`' device elements.
    pub fn decode_device_runs_into(
        &mut self,
        dtype: crate::DType,
        runs: &crate::layout::DeviceRuns,
        out: &mut Vec<f32>,
    ) -> Result<bool> {
        let width = match dtype.bits() {
            Some(bits) if bits >= 8 && bits % 8 == 0 => bits as usize / 8,
            _ => return Ok(false),
        };
        let lanes = crate::tensor::lanes_per_element(dtype);
        let whole = self.pos == 0 && self.len().is_multiple_of(width) && dtype.is_decodable();
        let host = usize::try_from(runs.host_len()).ok().and_then(|n| n.checked_mul(lanes));
        let (true, Some(host)) = (whole && (self.len() / width) as u64 == runs.device_len(), host) else {
            return Ok(false);
        };
        if out.len() < host {
            out.resize(host, 0.0);
        } else {
            out.truncate(host);
        }
        // The device elements `first..end` decoded into `values`, a block at a time as the runs reach them:
        // the serial loop's blocks, so the same values.
        let (mut bytes, mut values) = (vec![0u8; DECODE_BLOCK], vec![0f32; DECODE_BLOCK / width * lanes]);
        let (mut first, mut end, mut failed) = (0u64, 0u64, None);
        runs.for_each(|device, host, step, len| {
            let mut done = 0;
            while done < len {
                let at = device + done;
                while at >= end {
                    let block = self.next_block(&mut bytes);
                    let n = block.len() / width;
                    if n == 0 {
                        // Not reached: the data holds the runs' device elements (checked above).
                        failed = Some(FormatError::at(0, "the data ended before its device elements"));
                        return false;
                    }
                    if let Err(e) = crate::tensor::decode_f32_into(dtype, block, &mut values[..n * lanes]) {
                        failed = Some(e);
                        return false;
                    }
                    (first, end) = (end, end + n as u64);
                }
                let take = (len - done).min(end - at);
                let from = &values[(at - first) as usize * lanes..][..take as usize * lanes];
                let to = (host + done * step) as usize * lanes;
                let stride = step as usize * lanes;
                if step == 1 {
                    out[to..to + from.len()].copy_from_slice(from);
                } else if lanes == 1 {
                    // One value an element (every real dtype): a plain strided store.
                    let to = &mut out[to..=to + (from.len() - 1) * stride];
                    for (o, &v) in to.iter_mut().step_by(stride).zip(from) {
                        *o = v;
                    }
                } else {
                    for (k, v) in from.chunks_exact(lanes).enumerate() {
                        out[to + k * stride..][..lanes].copy_from_slice(v);
                    }
                }
                done += take;
            }
            true
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(true),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::capture::encode::encode_data;
    use crate::capture::planes::WINDOW_BYTES;
    use crate::capture::reader::test_data::*;
    use crate::DType;
    use std::path::Path;

    /// Device-layout tensors (FRACTAL_NZ and NC1HWC0 with padding; fp16, fp32 and complex64) read through
    /// their runs, block by block, a window at a time or not: the values `decode_f32_into` and
    /// `to_host_into` give together, bit for bit; data that is not the runs' device elements is not taken.
    #[test]
    fn device_values_put_by_runs_are_the_host_layout() {
        use crate::layout::{device_runs, device_shape, to_host_into, Format};
        let cases: [(Format, &[u64], DType, usize); 4] = [
            (Format::FRACTAL_NZ, &[300, 70], DType::FLOAT16, 2),
            (Format::FRACTAL_NZ, &[2, 40, 330], DType::FLOAT, 4),
            (Format::NC1HWC0, &[3, 21, 29, 31], DType::FLOAT16, 2),
            (Format::NC1HWC0, &[2, 5, 40, 30], DType::COMPLEX64, 4),
        ];
        for (format, host, dtype, width) in cases {
            let shape = device_shape(format, host, dtype, 0).unwrap();
            let lanes = crate::tensor::lanes_per_element(dtype);
            let elements = shape.iter().product::<u64>() as usize * lanes;
            let raw = tensor(width, elements * width, elements as u64);
            let encoded = encode_data(&raw, dtype, 1).unwrap();
            let s = stored(encoded.payload(), encoded.encoding(), &raw);
            let device: Vec<f32> =
                decode_checked(&s, dtype, usize::MAX).unwrap().into_iter().map(f32::from_bits).collect();
            let mut expected = Vec::new();
            to_host_into(format, &device, lanes, &shape, host, dtype, 0, &mut expected).unwrap();
            let runs = device_runs(format, &shape, host, dtype, 0).unwrap().unwrap();
            for window in [WINDOW_BYTES, 64 << 10] {
                let mut out = vec![-3.0f32; 7];
                let taken = s
                    .read_blocks_with(Path::new("t"), &mut Vec::new(), window, |b| {
                        b.decode_device_runs_into(dtype, &runs, &mut out)
                    })
                    .unwrap()
                    .unwrap();
                assert!(taken, "{format} {host:?}");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
                assert!(bits(&out) == bits(&expected), "{format} {host:?} {dtype}, window {window}");
            }
            // Runs of another shape: not this data's.
            let other: Vec<u64> = host.iter().map(|&d| d + 16).collect();
            let other_shape = device_shape(format, &other, dtype, 0).unwrap();
            let other = device_runs(format, &other_shape, &other, dtype, 0).unwrap().unwrap();
            let taken = s.read_blocks_with(Path::new("t"), &mut Vec::new(), WINDOW_BYTES, |b| {
                b.decode_device_runs_into(dtype, &other, &mut Vec::new())
            });
            assert!(!taken.unwrap().unwrap(), "{format} {host:?}");
        }
    }
}
