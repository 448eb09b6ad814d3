//! [`CaptureSource`] as a [`Source`]: values (block by block where it can), host bytes and host blocks,
//! stored data compared and released, the buffers and scratch a read holds, what the manifest says.

use super::{unpack, CaptureSource};
use crate::index::{Index, TensorId};
use crate::sources::buffers::{give_buffer, take_buffer, with_values_scratch};
use crate::sources::source::{HostBlocks, SliceBlocks, Source};
use crate::threads::tensor_bytes;
use accutrace_formats::capture::reader::TensorBlocks;
use accutrace_formats::layout::{device_runs, Format};
use accutrace_formats::tensor::element_count;
use accutrace_formats::tensor::host::host_values;
use accutrace_formats::tensor::host_bytes::{self, HostBytes};
use anyhow::{Context, Result};
use std::path::Path;

/// A capture's [`TensorBlocks`] as the [`HostBlocks`] a [`Source`] hands out.
struct CaptureBlocks<'r, 'a>(&'r mut TensorBlocks<'a>);

impl HostBlocks for CaptureBlocks<'_, '_> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn next_block<'s>(&'s mut self, buf: &'s mut [u8]) -> &'s [u8] {
        self.0.next_block(buf)
    }

    fn with_next_wave(&mut self, buf: &mut [u8], f: &mut (dyn FnMut(&[u8]) + Send)) {
        self.0.with_next_wave(buf, f)
    }
}

impl Source for CaptureSource {
    fn kind(&self) -> &'static str {
        "capture"
    }

    fn root(&self) -> &Path {
        &self.root
    }

    fn index(&self) -> &Index {
        &self.index
    }

    fn read_values(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<()> {
        if let Some(why) = self.index.tensors[tensor].dtype.undecodable_reason() {
            // Refused by name before its bytes are read, in a dump tree's words (no "<input>: at byte 0").
            anyhow::bail!("{why}");
        }
        if self.read_values_in_blocks(tensor, out)? {
            return Ok(());
        }
        self.with_device_tensor(tensor, |device| {
            with_values_scratch(|scratch| host_values(device, scratch, out))?;
            Ok(())
        })
    }

    fn content_hash(&self, tensor: TensorId) -> Result<u64> {
        self.index.tensors[tensor].hash().context("device statistics carry no content hash")
    }

    fn read_values_and_hash(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<u64> {
        // The hash is stored in the record head: nothing to compute.
        let hash = self.content_hash(tensor)?;
        self.read_values(tensor, out)?;
        Ok(hash)
    }

    fn about(&self) -> Vec<String> {
        let Some(m) = &self.run.manifest else {
            return vec!["no manifest.json: stream and collector counters unknown".into()];
        };
        let mut lines = vec![format!(
            "collector: {} chunks, {} files, {} tensors; {} chunks or files dropped or lost",
            m.counts.chunks, m.counts.files, m.counts.tensors, m.counts.drops
        )];
        let pipelines = m.pipeline_counters();
        for s in &m.streams {
            let rank = s.info.rank.map_or_else(|| "x".into(), |r| r.to_string());
            let mut line = format!(
                "stream {} (rank {rank}, pid {}): {}, {} tensors in {} segments ({} deleted by the ring)",
                s.dir,
                s.info.pid,
                if s.sealed { "sealed" } else { "NOT SEALED" },
                s.counts.tensors,
                s.counts.segments_created,
                s.counts.segments_deleted
            );
            if let Some((_, p)) = pipelines.iter().find(|(dir, _)| *dir == s.dir) {
                let losses: Vec<String> =
                    p.nonzero_losses().iter().map(|(n, v)| format!("{n} {v}")).collect();
                line.push_str(&format!(
                    "; drops: {}",
                    if losses.is_empty() { "none".to_string() } else { losses.join(", ") }
                ));
            }
            lines.push(line);
        }
        lines
    }

    fn read_host_bytes(&self, tensor: TensorId) -> Result<Option<HostBytes>> {
        self.with_device_tensor(tensor, |device| Ok(host_bytes::host_bytes(device)?))
    }

    fn with_host_blocks(&self, tensor: TensorId, f: &mut dyn FnMut(&mut dyn HostBlocks)) -> Result<bool> {
        let meta =
            self.layout(tensor).context("the capture holds statistics only for this tensor, not its data")?;
        let original = meta.original_shape.unwrap_or_default();
        let width = match meta.dtype.bits() {
            Some(bits) if bits >= 8 && bits % 8 == 0 => u64::from(bits / 8),
            _ => 0,
        };
        // Host order is the device's (nearly every tensor): the planes are read block by block, each
        // unshuffled into `f`'s buffer. Else (a layout to undo, a sub-byte dtype) the whole bytes.
        if width == 0 || !host_bytes::device_order_is_host_order(meta.format, original) {
            return self.with_host_bytes(tensor, &mut |bytes| f(&mut SliceBlocks::new(bytes)));
        }
        let bytes = element_count(meta.device_shape).and_then(|n| n.checked_mul(width));
        let (s, segment, offset) = unpack(self.index.tensors[tensor].locator);
        let mut scratch = take_buffer();
        let read = self.run.streams[s].with_tensor_blocks_at(segment, offset, &mut scratch, |blocks| {
            // A byte count that is not the device shape's: the whole-bytes path reports it as an error.
            let whole_elements = bytes == Some(blocks.len() as u64);
            if whole_elements {
                f(&mut CaptureBlocks(blocks));
            }
            whole_elements
        });
        give_buffer(scratch);
        match read? {
            true => Ok(true),
            false => self.with_host_bytes(tensor, &mut |bytes| f(&mut SliceBlocks::new(bytes))),
        }
    }

    fn same_stored_data(&self, a: TensorId, b: TensorId) -> Result<bool> {
        let (Some(ma), Some(mb)) = (self.layout(a), self.layout(b)) else {
            return Ok(false);
        };
        // What the host conversions read besides the bytes (io, index and provenance do not change them).
        if ma != mb {
            return Ok(false);
        }
        let ((sa, segment_a, offset_a), (sb, segment_b, offset_b)) =
            (unpack(self.index.tensors[a].locator), unpack(self.index.tensors[b].locator));
        Ok(self.run.streams[sa].same_stored_data(
            segment_a,
            offset_a,
            &self.run.streams[sb],
            segment_b,
            offset_b,
        )?)
    }

    fn release_stored_data(&self, a: TensorId) -> Result<()> {
        let (s, segment, offset) = unpack(self.index.tensors[a].locator);
        Ok(self.run.streams[s].release_tensor_data_at(segment, offset)?)
    }

    fn decodes_on_read(&self) -> bool {
        true
    }

    /// A read holds the f32 values and zstd's scratch (the planes zstd decodes, at most the tensor's bytes,
    /// or a window's frames: [`decode_scratch_max`](Source::decode_scratch_max); the blocks are decoded from
    /// there straight into the values, or put from each block where it goes for a tensor in a device
    /// layout), and a tensor in a layout that does not split by device axis (grouped FRACTAL_Z, C1HWNCoC0)
    /// also its device-order values: 2, and 3 where such a tensor is at least half the largest (its extra
    /// buffer then matters). Measured with 1, 2 and 4 threads each measuring a pair (RAYON_NUM_THREADS did
    /// that until 2026-11-27; scripts/bench-memory, compare of two captures): each thread added 1.1-1.35x the
    /// largest tensor as f32 per side, beside the 2 MiB of the pool's footprint (medium:4,
    /// 2 MiB: 22, 30, 44 MiB; its outputs only: 14, 20, 33; seq 256, 8 MiB: 25, 47, 92), against
    /// 1.65-2.2x before the blocks were decoded straight into the values (94da7a1: 25, 29, 57; 13, 25, 40;
    /// 38, 75, 124).
    fn buffers_per_tensor(&self) -> u64 {
        let (mut largest, mut largest_in_layout) = (0u64, 0u64);
        for meta in self.layouts.tensors().filter_map(|t| self.layout(t)) {
            let width = meta.dtype.bits().map_or(4, |b| u64::from(b).div_ceil(8).max(4));
            let bytes = element_count(meta.device_shape).unwrap_or(u64::MAX).saturating_mul(width);
            largest = largest.max(bytes);
            let original = meta.original_shape.unwrap_or_default();
            let format = Format::from_code(meta.format);
            let by_runs = || device_runs(format, meta.device_shape, original, meta.dtype, meta.sub_format);
            if !host_bytes::device_order_is_host_order(meta.format, original)
                && !matches!(by_runs(), Ok(Some(_)))
            {
                largest_in_layout = largest_in_layout.max(bytes);
            }
        }
        if largest_in_layout.saturating_mul(2) >= largest && largest_in_layout > 0 {
            3
        } else {
            2
        }
    }

    /// Captures whose writer cut the data into frames of at most ~1 MiB are read a window at a time where
    /// a tensor is longer than a window: the scratch then holds a window's frames, not the whole planes
    /// that compress ([`StreamReader::blocks_scratch_bytes`]). Where the largest tensor's read holds at
    /// most that bound (the widest element's), every read does; captures written before frames were cut
    /// hold their large tensors' planes whole, and so give `None`.
    ///
    /// [`StreamReader::blocks_scratch_bytes`]: accutrace_formats::capture::StreamReader::blocks_scratch_bytes
    fn decode_scratch_max(&self) -> Option<u64> {
        let tensors = &self.index.tensors;
        let with_data = |t: &usize| tensors[*t].has_data && self.layouts.get(*t).is_some();
        let widest = (0..tensors.len()).filter(with_data).filter_map(|t| tensors[t].dtype.bits()).max()?;
        let bound = accutrace_formats::capture::blocks_scratch_max(widest.div_ceil(8) as usize);
        let largest = (0..tensors.len()).filter(with_data).max_by_key(|&t| tensor_bytes(&tensors[t]))?;
        let (s, segment, offset) = unpack(tensors[largest].locator);
        let bytes = self.run.streams[s].blocks_scratch_bytes(segment, offset).ok()?;
        (bytes <= bound).then_some(bound)
    }

    /// What `with_host_blocks` holds reading the planes of a tensor in host order: its decoded frames
    /// ([`blocks_scratch_bound`] of its data). A tensor in a device layout to undo, or of sub-byte
    /// elements, is read whole and converted.
    ///
    /// [`blocks_scratch_bound`]: accutrace_formats::capture::blocks_scratch_bound
    fn host_blocks_bytes(&self, tensor: TensorId) -> Option<u64> {
        let meta = self.layout(tensor).filter(|_| self.index.tensors[tensor].has_data)?;
        let original = meta.original_shape.unwrap_or_default();
        let width = meta.dtype.bits().filter(|b| *b >= 8 && b % 8 == 0)? as usize / 8;
        if !host_bytes::device_order_is_host_order(meta.format, original) {
            return None;
        }
        let data = element_count(meta.device_shape)?.checked_mul(width as u64)?;
        Some(accutrace_formats::capture::blocks_scratch_bound(data, width))
    }

    fn release_all(&self) {
        for stream in &self.run.streams {
            stream.release_all();
        }
    }

    fn with_host_bytes(&self, tensor: TensorId, f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        // The decoded bytes themselves where the device layout is the host's: no copy.
        self.with_device_tensor(tensor, |device| match host_bytes::host_bytes_borrowed(device)? {
            Some((bytes, _)) => {
                f(&bytes);
                Ok(true)
            }
            None => Ok(false),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_data::{noise, read_as_whole, write};
    use super::*;
    use accutrace_formats::DType;

    /// A capture whose largest tensor (or one at least half its size) is in a layout that does not split
    /// by device axis (C1HWNCoC0's diagonal) holds one more buffer per read: its device-order values. One in
    /// FRACTAL_NZ does not: its blocks go where they belong as they are read.
    #[test]
    fn a_large_tensor_in_a_layout_read_whole_counts_one_buffer_more() {
        let in_layout = |format: Format, host: Vec<u64>| {
            let device_shape =
                accutrace_formats::layout::device_shape(format, &host, DType::FLOAT16, 0).unwrap();
            let n = device_shape.iter().product::<u64>() as usize;
            (DType::FLOAT16, format, device_shape, Some(host), noise(2 * n, n as u64))
        };
        let nz = |rows: u64| in_layout(Format::FRACTAL_NZ, vec![rows, 32]);
        let diagonal = |n: u64| in_layout(Format::C1HWNCOC0, vec![1, 1, 16, n]);
        let nd = |n: u64| (DType::FLOAT, Format::ND, vec![n], None, noise(4 * n as usize, n));
        for (tensors, buffers) in [
            (vec![nd(4096), nd(100)], 2),
            (vec![nd(4096), nz(64)], 2),
            (vec![nz(256), nd(100)], 2),
            (vec![nd(4096), diagonal(1)], 2),
            (vec![nd(4096), diagonal(8)], 3),
            (vec![diagonal(32), nd(100)], 3),
        ] {
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), &tensors);
            assert_eq!(CaptureSource::open(dir.path()).unwrap().buffers_per_tensor(), buffers);
        }
    }

    /// A read of host blocks holds at most the tensor's data (fp16: half the tensor as f32) where it is
    /// read in host order; one in a device layout to undo is read whole.
    #[test]
    fn a_read_of_host_blocks_holds_at_most_the_data() {
        let fp16 = (DType::FLOAT16, Format::ND, vec![4096], None, noise(8192, 1));
        let fp32 = (DType::FLOAT, Format::ND, vec![100], None, noise(400, 2));
        let nz_shape =
            accutrace_formats::layout::device_shape(Format::FRACTAL_NZ, &[64, 32], DType::FLOAT16, 0);
        let nz_shape = nz_shape.unwrap();
        let n = nz_shape.iter().product::<u64>() as usize;
        let nz = (DType::FLOAT16, Format::FRACTAL_NZ, nz_shape, Some(vec![64, 32]), noise(2 * n, 3));
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &[fp16, fp32, nz]);
        let source = CaptureSource::open(dir.path()).unwrap();
        let bytes: Vec<Option<u64>> = (0..3).map(|t| source.host_blocks_bytes(t)).collect();
        assert_eq!(bytes, [Some(8192), Some(400), None]);
    }

    /// A tensor longer than a window (17 MiB of fp16 data, in the writer's frames of at most 1 MiB): its
    /// values, read a window at a time, are the whole decode's, and the capture counts its scratch as a
    /// window's frames at most.
    #[test]
    fn a_tensor_longer_than_a_window_is_read_whole_through_a_bounded_scratch() {
        let n = (17 << 20) / 2 + 3;
        let bytes: Vec<u8> = noise(2 * n, 5).chunks(2).flat_map(|e| [e[0], 0x3C | (e[1] & 1)]).collect();
        let big = (DType::FLOAT16, Format::ND, vec![n as u64], None, bytes);
        let small = (DType::FLOAT, Format::ND, vec![100], None, noise(400, 3));
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &[big, small]);
        let source = CaptureSource::open(dir.path()).unwrap();
        let bound = accutrace_formats::capture::blocks_scratch_max(4);
        assert_eq!(source.decode_scratch_max(), Some(bound));
        let (s, segment, offset) = unpack(source.index.tensors[0].locator);
        let scratch = source.run.streams[s].blocks_scratch_bytes(segment, offset).unwrap();
        // Its compressed plane (the high bytes; the noisy low ones are stored), within the fp16 bound.
        assert_eq!(scratch, n as u64);
        assert!(scratch <= accutrace_formats::capture::blocks_scratch_max(2));
        assert!(scratch <= accutrace_formats::capture::blocks_scratch_bound(2 * n as u64, 2));
        // Longer than a window: a window's frames may be more than the data.
        assert_eq!(source.host_blocks_bytes(0), Some(accutrace_formats::capture::blocks_scratch_max(2)));
        let mut out = Vec::new();
        for t in 0..2 {
            read_as_whole(&source, t, &mut out).unwrap();
        }
    }
}
