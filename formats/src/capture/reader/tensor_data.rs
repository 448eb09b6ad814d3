//! A tensor record's data by its place (segment index and offset, as a [`RecordRef`](super::RecordRef)
//! reported it), without walking the stream: decoded whole, read block by block, sized, or compared with
//! another record's.

use super::stored_data::StoredData;
use super::{StreamReader, TensorBlocks};
use crate::capture::planes::{window_scratch_max, WINDOW_BYTES};
use crate::capture::record::{decode_message, DataEncoding, KIND_TENSOR};
use crate::capture::segment::{self, Frame};
use crate::capture::zstd_frames::scan_frames;
use crate::{FormatError, Result};
use accutrace_proto::capture as pb;

/// At most how many bytes of decoded zstd frames [`StreamReader::with_tensor_blocks_at`] holds for
/// `width`-byte elements where it reads the data a window at a time
/// ([`StreamReader::blocks_scratch_bytes`] says where).
pub fn blocks_scratch_max(width: usize) -> u64 {
    window_scratch_max(width) as u64
}

/// At most how many bytes of decoded zstd frames [`StreamReader::with_tensor_blocks_at`] holds for data of
/// `data_size` bytes of `width`-byte elements, whatever its frames: the frames decoded are at most the
/// data, and where the data is longer than a window and read a window at a time, a window's frames
/// ([`blocks_scratch_max`]), which may be more than the data.
pub fn blocks_scratch_bound(data_size: u64, width: usize) -> u64 {
    match data_size > WINDOW_BYTES as u64 {
        true => data_size.max(blocks_scratch_max(width)),
        false => data_size,
    }
}

impl StreamReader {
    /// Decodes the data of the tensor record at `offset` of segment `segment_index` (a place a
    /// [`RecordRef`] reported), without walking the stream: random access for analyses that pair tensors.
    ///
    /// [`RecordRef`]: super::RecordRef
    pub fn read_tensor_data_at(&self, segment_index: u64, offset: u64, out: &mut Vec<u8>) -> Result<()> {
        self.read_tensor_data_at_with(segment_index, offset, out, &mut Vec::new())
    }

    /// [`read_tensor_data_at`](Self::read_tensor_data_at) with a caller-owned scratch buffer for the
    /// shuffled bytes: callers that decode many tensors reuse both buffers instead of allocating (and the
    /// kernel zeroing) two per tensor. The payload's pages are dropped from this process's mapping once
    /// decoded (`MADV_DONTNEED`: they stay in the page cache), with other reads' in batches of
    /// [`RELEASE_BATCH`] bytes, so reading a whole capture does not leave it all counted as the process's
    /// resident memory.
    ///
    /// [`RELEASE_BATCH`]: super::RELEASE_BATCH
    pub fn read_tensor_data_at_with(
        &self,
        segment_index: u64,
        offset: u64,
        out: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        let (seg, stored) = self.stored_at(segment_index, offset)?;
        let decoded = stored.decode(&self.segments[seg].path, out, scratch);
        self.release_later(seg, stored.payload_offset, stored.payload_offset + stored.payload.len() as u64);
        decoded
    }

    /// [`read_tensor_data_at_with`](Self::read_tensor_data_at_with) for readers that take the data in
    /// order, block by block: the byte planes are decompressed into `scratch` (zstd's stored blocks are
    /// read where they lie in the segment instead), then `f` reads them through [`TensorBlocks`] (each
    /// block unshuffled into `f`'s own buffer); what `f` leaves unread is read after
    /// it returns, and `f`'s result is returned only when the whole data matches its content hash (else
    /// the same error as `read_tensor_data_at`). `f` is not called when the data cannot be decompressed,
    /// except where it is decoded a window at a time as `f` reads it (data longer than a window, see
    /// [`blocks_scratch_bytes`](Self::blocks_scratch_bytes)): a frame zstd fails on then gives zeros for the
    /// rest of the data to `f` and that same error once `f` returns.
    pub fn with_tensor_blocks_at<R>(
        &self,
        segment_index: u64,
        offset: u64,
        scratch: &mut Vec<u8>,
        f: impl FnOnce(&mut TensorBlocks<'_>) -> R,
    ) -> Result<R> {
        let (seg, stored) = self.stored_at(segment_index, offset)?;
        let path = &self.segments[seg].path;
        let read = stored.read_blocks_with(path, scratch, WINDOW_BYTES, f);
        self.release_later(seg, stored.payload_offset, stored.payload_offset + stored.payload.len() as u64);
        read
    }

    /// At most how many bytes of decoded zstd frames [`with_tensor_blocks_at`](Self::with_tensor_blocks_at)
    /// holds in its scratch while reading the tensor record at `offset` of segment `segment_index`: for data
    /// longer than a window written in frames of at most ~1 MiB (the writer's since frames were cut, see
    /// docs/CAPTURE_FORMAT.md), a window's frames, whatever the data's size; else the frames zstd decodes
    /// (the planes that compress), or the whole data where the payload's frames are not the writer's. Reads
    /// only the headers of the frames and of their blocks.
    pub fn blocks_scratch_bytes(&self, segment_index: u64, offset: u64) -> Result<u64> {
        let (_, stored) = self.stored_at(segment_index, offset)?;
        let DataEncoding::Zstd { shuffle_width } = stored.encoding else {
            return Ok(0);
        };
        let Some(frames) = scan_frames(stored.payload, stored.data_size) else {
            return Ok(stored.data_size);
        };
        let decoded: u64 = frames.iter().filter(|f| f.stored.is_none()).map(|f| f.planes.len() as u64).sum();
        if stored.windowed_frames(WINDOW_BYTES).is_some() {
            return Ok(decoded.min(window_scratch_max(shuffle_width as usize) as u64));
        }
        Ok(decoded)
    }

    /// Whether the tensor record at `offset` of segment `segment_index` and the one at `other_offset` of
    /// segment `other_segment` of `other` (this stream or another) store the same data the same way: the
    /// same encoding, data size and content hash, and payloads equal byte for byte. Decoding is
    /// deterministic, so both then decode to the same bytes, and one decode that matched its content hash
    /// vouches for the other: a tensor recorded twice (an op's output, then the next op's input) need
    /// not be decompressed twice. Nothing here trusts a hash alone: the stored bytes are compared.
    ///
    /// Both records' pages stay mapped: the check is meant to come just before the earlier record is
    /// decoded, which then reads them without faulting them in again. Both are the caller's to release
    /// after that decode ([`release_tensor_data_at`](Self::release_tensor_data_at), which also lets go of
    /// the pages the kernel mapped around them, or [`release_all`](Self::release_all)).
    pub fn same_stored_data(
        &self,
        segment_index: u64,
        offset: u64,
        other: &StreamReader,
        other_segment: u64,
        other_offset: u64,
    ) -> Result<bool> {
        let (_, stored) = self.stored_at(segment_index, offset)?;
        let (_, other_stored) = other.stored_at(other_segment, other_offset)?;
        let same = stored.encoding == other_stored.encoding
            && stored.encoding != DataEncoding::None
            && stored.data_size == other_stored.data_size
            && stored.content_hash == other_stored.content_hash
            && stored.payload == other_stored.payload;
        Ok(same)
    }

    /// The position in `segments` of segment `segment_index` and the stored data of the tensor record at
    /// `offset` in it.
    pub(super) fn stored_at(&self, segment_index: u64, offset: u64) -> Result<(usize, StoredData<'_>)> {
        let head = self.tensor_head_at(segment_index, offset)?;
        let seg = &self.segments[head.seg];
        let r: pb::TensorRecord =
            decode_message(head.message, "tensor").map_err(|e| e.shifted(offset).in_file(&seg.path))?;
        let stored = StoredData {
            encoding: DataEncoding::from_record(&r).map_err(|e| e.shifted(offset).in_file(&seg.path))?,
            payload: &seg.map[head.payload.0 as usize..head.payload.1 as usize],
            payload_offset: head.payload.0,
            data_size: r.data_size,
            content_hash: r.content_hash,
        };
        Ok((head.seg, stored))
    }

    /// The head of the tensor record at `offset` of segment `segment_index`: a valid frame (its checksum
    /// holds) of the tensor kind, or an error naming the file and offset.
    pub(super) fn tensor_head_at(&self, segment_index: u64, offset: u64) -> Result<TensorHead<'_>> {
        let at = self.segments.iter().position(|s| s.index == segment_index).ok_or_else(|| {
            FormatError::whole(format!("stream has no segment {segment_index}")).in_file(&self.dir)
        })?;
        let seg = &self.segments[at];
        let (meta, head_end, body_end, kind) = match segment::frame_at(&seg.map, offset, seg.end) {
            Frame::Valid { body, len, meta, head_len, kind, .. } => (meta, body + head_len, body + len, kind),
            _ => return Err(FormatError::at(offset, "no record starts here").in_file(&seg.path)),
        };
        if kind != KIND_TENSOR {
            return Err(
                FormatError::at(offset, format!("record kind {kind} is not a tensor")).in_file(&seg.path)
            );
        }
        Ok(TensorHead {
            seg: at,
            message: &seg.map[meta as usize..head_end as usize],
            payload: (head_end, body_end),
        })
    }
}

/// A tensor record's head found by its place ([`StreamReader::tensor_head_at`]).
pub(super) struct TensorHead<'a> {
    /// The segment's position in `segments`.
    pub(super) seg: usize,
    /// The `TensorRecord` message.
    pub(super) message: &'a [u8],
    /// Where the payload lies in the segment: `start..end`.
    pub(super) payload: (u64, u64),
}
