//! A tensor record's data as stored ([`StoredData`]): the payload decoded whole, in pieces (zstd's stored
//! blocks lent from the payload), or a window of frames at a time, and checked against its content hash.

use super::TensorBlocks;
use crate::capture::planes::{decodes_in_windows, Pieces, PlaneBytes, Windows};
use crate::capture::record::DataEncoding;
use crate::capture::shuffle;
use crate::capture::zstd_frames::{self, decompress, failing_frame, scan_frames, zstd_pieces};
use crate::stats::content_hash;
use crate::{FormatError, Result};
use std::path::Path;

/// A tensor record's data as stored: enough to decode and verify it without the rest of the record.
pub(super) struct StoredData<'a> {
    pub(super) encoding: DataEncoding,
    pub(super) payload: &'a [u8],
    pub(super) payload_offset: u64,
    pub(super) data_size: u64,
    pub(super) content_hash: u64,
}

/// What a reader of tensor data that fails zstd or its content hash is told, as the segments' own damage is.
const DAMAGED_DATA: &str =
    "the bytes changed after the collector wrote them (a damaged disk or copy); copy the capture again";

impl StoredData<'_> {
    /// An error at the payload, in `path`.
    fn error(&self, path: &Path, problem: String) -> FormatError {
        FormatError::at(self.payload_offset, problem).in_file(path)
    }

    /// [`error`](Self::error) for data that fails zstd or its content hash, with what to do: the collector
    /// hashed the bytes it compressed, so they changed after it wrote them.
    fn damaged(&self, path: &Path, problem: String) -> FormatError {
        self.error(path, format!("{problem}: {DAMAGED_DATA}"))
    }

    /// [`damaged`](Self::damaged) for data zstd fails on, at the first of its frames that fails alone (a
    /// user of a large capture learns where the damage lies, not only where the tensor's data starts).
    fn zstd_failed(&self, path: &Path, problem: String) -> FormatError {
        let (start, len) = (self.payload_offset, self.payload.len());
        let data = format!("the tensor's data: {len} bytes from byte {start}");
        let (at, problem) = match failing_frame(self.payload) {
            Some(frame) => {
                (start + frame as u64, format!("{problem}, in the zstd frame that starts there ({data})"))
            }
            None => (start, format!("{problem} ({data})")),
        };
        FormatError::at(at, format!("{problem}: {DAMAGED_DATA}")).in_file(path)
    }

    /// The data as byte planes of `width`-byte elements (width 1: in order): the payload itself when stored
    /// raw, else decompressed into `scratch`.
    fn planes<'s>(&'s self, path: &Path, scratch: &'s mut Vec<u8>) -> Result<(&'s [u8], usize)> {
        match self.encoding {
            DataEncoding::None => Err(self.error(path, "the tensor was recorded without data".into())),
            DataEncoding::Raw => {
                if self.payload.len() as u64 != self.data_size {
                    return Err(self.error(
                        path,
                        format!("{} data bytes stored, {} recorded", self.payload.len(), self.data_size),
                    ));
                }
                Ok((self.payload, 1))
            }
            DataEncoding::Zstd { shuffle_width } => {
                decompress(self.payload, self.data_size, scratch).map_err(|e| self.zstd_failed(path, e))?;
                Ok((scratch.as_slice(), shuffle_width as usize))
            }
        }
    }

    /// [`planes`](Self::planes) for reading block by block: where zstd stored some frames' blocks as they
    /// are (the flat planes, whose literals the writer does not compress), those blocks are lent from the
    /// payload instead of copied out of it ([`zstd_pieces`]); the other frames are decoded into `scratch`.
    /// Data longer than a window, written in frames a window takes, is decoded a window at a time as it is
    /// read ([`Windows`]): `scratch` then holds a window's frames, not the whole planes. Anything else, or
    /// anything [`zstd_pieces`] does not take, is [`planes`](Self::planes)' whole decode, with its errors.
    /// `window`: the data bytes a window makes readable ([`WINDOW_BYTES`] but in tests).
    ///
    /// [`WINDOW_BYTES`]: crate::capture::planes::WINDOW_BYTES
    pub(super) fn plane_bytes<'s>(
        &'s self,
        path: &Path,
        scratch: &'s mut Vec<u8>,
        window: usize,
    ) -> Result<(PlaneBytes<'s>, usize)> {
        if let DataEncoding::Zstd { shuffle_width } = self.encoding {
            let (width, len) = (shuffle_width as usize, self.data_size as usize);
            if let Some(frames) = self.windowed_frames(window) {
                let windows = Windows::new(self.payload, frames, scratch, len, window);
                return Ok((PlaneBytes::Windows(windows), width));
            }
            if let Some(pieces) = zstd_pieces(self.payload, self.data_size, scratch) {
                return Ok((PlaneBytes::Pieces(Pieces::new(pieces, self.payload, scratch, len)), width));
            }
        }
        let (planes, width) = self.planes(path, scratch)?;
        Ok((PlaneBytes::Whole(planes), width))
    }

    /// The payload's frames, where the data is read `window` bytes at a time ([`decodes_in_windows`]).
    pub(super) fn windowed_frames(&self, window: usize) -> Option<Vec<zstd_frames::Frame>> {
        let len = usize::try_from(self.data_size).ok()?;
        if !matches!(self.encoding, DataEncoding::Zstd { .. }) || len <= window {
            return None;
        }
        scan_frames(self.payload, self.data_size).filter(|frames| decodes_in_windows(frames, len, window))
    }

    /// `f` over the data read block by block ([`TensorBlocks`]; zstd's frames in `scratch`, a `window` at a
    /// time where they are read so), then what `f` left is read: `f`'s result once the whole data matched
    /// its content hash, else the error `read_tensor_data_at` gives.
    pub(super) fn read_blocks_with<R>(
        &self,
        path: &Path,
        scratch: &mut Vec<u8>,
        window: usize,
        f: impl FnOnce(&mut TensorBlocks<'_>) -> R,
    ) -> Result<R> {
        let (planes, width) = self.plane_bytes(path, scratch, window)?;
        let mut blocks = TensorBlocks::new(planes, width);
        let result = f(&mut blocks);
        match blocks.finish() {
            Some(hash) => self.check_hash(path, hash).map(|()| result),
            None => Err(self.whole_decode_error(path, scratch)),
        }
    }

    /// Decodes into `out` (its old contents are overwritten, never zeroed first: a reused buffer costs no
    /// fill), with `scratch` for the shuffled bytes.
    pub(super) fn decode(&self, path: &Path, out: &mut Vec<u8>, scratch: &mut Vec<u8>) -> Result<()> {
        let (planes, width) = match self.planes(path, scratch) {
            Ok(planes) => planes,
            Err(e) => {
                out.clear();
                return Err(e);
            }
        };
        if width <= 1 {
            out.clear();
            out.extend_from_slice(planes);
        } else {
            // Shrinking writes nothing, growing zeroes only the new part; unshuffle writes every byte.
            out.resize(planes.len(), 0);
            shuffle::unshuffle(planes, width, out);
        }
        self.check_hash(path, content_hash(out))
    }

    /// The whole decode's error, for data whose frames zstd failed on while they were read a window at a
    /// time ([`Windows`]): the error `read_tensor_data_at` gives.
    fn whole_decode_error(&self, path: &Path, scratch: &mut Vec<u8>) -> FormatError {
        match self.planes(path, scratch) {
            Err(e) => e,
            Ok(_) => self.zstd_failed(path, "a zstd frame of the data failed to decode".into()),
        }
    }

    pub(super) fn check_hash(&self, path: &Path, hash: u64) -> Result<()> {
        if hash != self.content_hash {
            let len = self.payload.len();
            let problem = format!("tensor data ({len} bytes from here) does not match its content hash");
            return Err(self.damaged(path, problem));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::encode::encode_data;
    use crate::capture::planes::WINDOW_BYTES;
    use crate::capture::reader::blocks::{DECODE_BLOCK, PARALLEL_CHUNK};
    use crate::capture::reader::test_data::*;
    use crate::capture::zstd_frames::PieceIn;
    use crate::{simd, DType};

    /// The hash of the data when half of it was read block by block and `finish` read the rest.
    fn hash_of_half_read(stored: &StoredData<'_>, block: usize) -> u64 {
        let mut scratch = Vec::new();
        let (planes, width) = stored.plane_bytes(Path::new("t"), &mut scratch, WINDOW_BYTES).unwrap();
        let mut blocks = TensorBlocks::new(planes, width);
        let mut buf = vec![0u8; block];
        while blocks.pos < blocks.len() / 2 {
            blocks.next_block(&mut buf);
        }
        blocks.finish().unwrap()
    }

    /// Tensors of 1, 2, 4 and 8-byte elements (and a ragged tail), with one stored block and several per
    /// plane, read in blocks of every size (element-aligned or not, across the stored blocks' edges) at
    /// every SIMD level: the bytes zstd's whole decode gives, with stored blocks lent from the payload.
    #[test]
    fn stored_blocks_are_lent_and_read_as_zstd_decodes_them() {
        let mut lent = 0;
        for (dtype, width) in [(DType::INT8, 1), (DType::FLOAT16, 2), (DType::FLOAT, 4), (DType::DOUBLE, 8)] {
            for bytes in [0, 3, 70_000, 300_000 + width, 300_000 + width + 1] {
                let raw = tensor(width, bytes, bytes as u64 + width as u64);
                let encoded = encode_data(&raw, dtype, 1).unwrap();
                let s = stored(encoded.payload(), encoded.encoding(), &raw);
                assert_eq!(read_whole(&s).unwrap(), raw);
                let pieces = zstd_pieces(s.payload, s.data_size, &mut Vec::new());
                let stored_blocks = pieces.iter().flatten().filter(|p| p.0 == PieceIn::Payload).count();
                lent += usize::from(stored_blocks > 0);
                for level in simd::available() {
                    // Byte by byte and 3 at a time only on the smallest (slow in a debug build).
                    let small: &[usize] = if bytes == 70_000 { &[1, 3] } else { &[] };
                    for &block in small.iter().chain(&[2 * width, 4096 + width, 16 << 10, 200_001]) {
                        let got = simd::with_ceiling(level, || read_blocks(&s, block)).unwrap();
                        assert!(got == raw, "{dtype} {bytes} bytes, blocks of {block}, {level:?}");
                        let half = simd::with_ceiling(level, || hash_of_half_read(&s, block));
                        assert_eq!(
                            half, s.content_hash,
                            "{dtype} {bytes} bytes, blocks of {block}, {level:?}"
                        );
                    }
                }
            }
        }
        // Noise in a whole 1-byte tensor is stored as it is too; the 2- to 8-byte tensors' low planes are.
        assert!(lent >= 9, "only {lent} tensors had stored blocks");
    }

    /// One scratch buffer for tensors of every size in turn, larger and smaller than the last, starting
    /// with bytes of its own: the frames zstd decodes land after one another in it and it holds nothing
    /// else (no byte of an earlier tensor, nor of its own start, is read), whatever it held before.
    #[test]
    fn a_reused_scratch_holds_only_the_decoded_frames() {
        let mut scratch = vec![0xA5; 1 << 20];
        for (dtype, width) in
            [(DType::FLOAT16, 2), (DType::FLOAT, 4), (DType::DOUBLE, 8), (DType::FLOAT16, 2)]
        {
            for bytes in [300_000 + width, 70_000, 3, 600_000 + width + 1, 1000] {
                let raw = tensor(width, bytes, bytes as u64 * 31 + width as u64);
                let encoded = encode_data(&raw, dtype, 1).unwrap();
                let s = stored(encoded.payload(), encoded.encoding(), &raw);
                let path = Path::new("t");
                let (planes, width) = s.plane_bytes(path, &mut scratch, WINDOW_BYTES).unwrap();
                let mut blocks = TensorBlocks::new(planes, width);
                let (mut got, mut buf) = (Vec::new(), vec![0u8; 4096 + 3]);
                while got.len() < blocks.len() {
                    got.extend_from_slice(blocks.next_block(&mut buf));
                }
                assert_eq!(blocks.finish(), Some(s.content_hash), "{dtype} {bytes} bytes");
                assert!(got == raw, "{dtype} {bytes} bytes");
                // What zstd decoded, and only that, is in the scratch buffer.
                let frames = zstd_pieces(s.payload, s.data_size, &mut Vec::new());
                let in_scratch: usize =
                    frames.iter().flatten().filter(|p| p.0 == PieceIn::Scratch).map(|p| p.1.len()).sum();
                if frames.is_some() {
                    assert_eq!(scratch.len(), in_scratch, "{dtype} {bytes} bytes");
                }
            }
        }
    }

    /// Every byte of the frame and block headers, and bytes spread over the blocks, flipped in turn: the
    /// block-by-block read gives what the whole decode gives, the same bytes or the same error. A stored
    /// block is lent only where zstd would have copied it out.
    #[test]
    fn a_flipped_byte_reads_as_the_whole_decode_reads_it() {
        for (dtype, width) in [(DType::FLOAT16, 2), (DType::FLOAT, 4)] {
            let raw = tensor(width, 70_000, 7);
            let encoded = encode_data(&raw, dtype, 1).unwrap();
            let payload = encoded.payload().to_vec();
            assert!(zstd_pieces(&payload, raw.len() as u64, &mut Vec::new()).is_some());
            let mut same_error = 0;
            let positions = (0..payload.len()).filter(|&i| i < 32 || i % 251 == 0 || payload.len() - i < 8);
            // The stored block headers: 3 bytes before each stored block.
            let headers = zstd_pieces(&payload, raw.len() as u64, &mut Vec::new()).unwrap();
            let headers: Vec<usize> = headers
                .iter()
                .filter(|p| p.0 == PieceIn::Payload)
                .flat_map(|p| p.1.start - 3..p.1.start)
                .collect();
            assert!(!headers.is_empty());
            for i in positions.chain(headers) {
                for flip in [0x01u8, 0x10, 0x80, 0xFF] {
                    let mut damaged = payload.clone();
                    damaged[i] ^= flip;
                    let s = stored(&damaged, encoded.encoding(), &raw);
                    let (whole, blocks) = (read_whole(&s), read_blocks(&s, 4096));
                    match (&whole, &blocks) {
                        (Ok(w), Ok(b)) if w == b => {}
                        (Err(w), Err(b)) if w.to_string() == b.to_string() => {
                            // What to do, not only what is wrong.
                            assert!(w.to_string().ends_with("copy the capture again"), "{w}");
                            same_error += 1
                        }
                        _ => panic!("{dtype} byte {i} ^ {flip:#x}: whole {whole:?}, blocks {blocks:?}"),
                    }
                }
            }
            assert!(same_error > 100, "{dtype}: only {same_error} damaged reads failed");
        }
    }

    /// Tensors longer than their window, written as the writer writes them (frames of at most 1 MiB, the
    /// noisy low plane's stored, the others compressed, some across planes), read a window at a time with
    /// windows smaller than a wave, between frames' sizes, and odd: block by block in blocks of several sizes,
    /// and as values, serially on 1 thread and in parallel on 3, they read as zstd's whole decode (the same
    /// bytes, the same values bit for bit) while the scratch holds at most a window's frames, less than the
    /// whole planes on the longest; a flipped byte in a compressed frame or a stored block gives the whole
    /// decode's bytes or its error.
    #[test]
    fn data_read_a_window_at_a_time_is_the_whole_decode() {
        let pools: Vec<rayon::ThreadPool> =
            [1, 3].map(|n| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap()).into();
        let cases = [
            (DType::FLOAT16, 2, (9 << 19) + 18),
            (DType::BF16, 2, (3 << 20) + 2),
            (DType::FLOAT, 4, (3 << 20) + 44),
            (DType::DOUBLE, 8, (5 << 19) + 8 * 13),
        ];
        let (mut bounded, mut failed) = (false, 0);
        for (dtype, width, bytes) in cases {
            let raw = tensor(width, bytes, bytes as u64);
            let encoded = encode_data(&raw, dtype, 1).unwrap();
            let s = stored(encoded.payload(), encoded.encoding(), &raw);
            let frames = scan_frames(s.payload, s.data_size).unwrap();
            let frame_max =
                frames.iter().filter(|f| f.stored.is_none()).map(|f| f.planes.len()).max().unwrap();
            let decoded: usize = frames.iter().filter(|f| f.stored.is_none()).map(|f| f.planes.len()).sum();
            assert!(frames.len() > 3 && frames.iter().any(|f| f.stored.is_some()), "{dtype}");
            let whole = read_whole(&s).unwrap();
            let values = decode_checked(&s, dtype, usize::MAX).unwrap();
            for window in [64 << 10, 700_001, (1 << 20) + (1 << 19) + 5] {
                let mut scratch = Vec::new();
                let (planes, _) = s.plane_bytes(Path::new("t"), &mut scratch, window).unwrap();
                assert!(matches!(planes, PlaneBytes::Windows(_)), "{dtype} window {window}");
                for block in [777, DECODE_BLOCK + 6] {
                    let read = read_blocks_in(&s, block, window, &mut scratch).unwrap();
                    assert!(read == whole, "{dtype} window {window}, blocks of {block}");
                }
                for (pool, parallel_min) in pools.iter().zip([usize::MAX, 0]) {
                    let got =
                        pool.install(|| decode_checked_in(&s, dtype, parallel_min, window, &mut scratch));
                    let threads = pool.current_num_threads();
                    assert!(got.unwrap() == values, "{dtype} window {window}, {threads} threads");
                }
                // A window's planes (the largest wave's when that is longer), and a frame reaching out of
                // each end of each plane's part.
                let reach = window.max(3 * PARALLEL_CHUNK) + 2 * width;
                assert!(
                    scratch.len() <= reach + 2 * width * frame_max,
                    "{dtype} window {window}: {}",
                    scratch.len()
                );
                bounded |= scratch.len() < decoded;
            }
            // Damage in a compressed frame, in a stored block, and in a frame header past the first window.
            let middle = &frames[frames.len() / 2];
            let stored_block = frames.iter().rev().find_map(|f| f.stored.as_ref()).unwrap()[0].start + 5;
            for at in [
                middle.bytes.start + middle.bytes.len() / 2,
                stored_block,
                frames[frames.len() - 1].bytes.start + 4,
            ] {
                let mut payload = s.payload.to_vec();
                payload[at] ^= 0x24;
                let d = StoredData { payload: &payload, ..stored(s.payload, s.encoding, &raw) };
                let whole = read_whole(&d).map_err(|e| e.to_string());
                let blocks = read_blocks_in(&d, 4096, 64 << 10, &mut Vec::new()).map_err(|e| e.to_string());
                assert_eq!(blocks.as_ref().err(), whole.as_ref().err(), "{dtype}, byte {at} flipped");
                let serial = decode_checked_in(&d, dtype, usize::MAX, 64 << 10, &mut Vec::new());
                let parallel =
                    pools[1].install(|| decode_checked_in(&d, dtype, 0, 64 << 10, &mut Vec::new()));
                for got in [serial, parallel] {
                    assert_eq!(
                        got.map_err(|e| e.to_string()).err(),
                        whole.as_ref().err().cloned(),
                        "{dtype} {at}"
                    );
                }
                failed += usize::from(whole.is_err());
            }
        }
        assert!(bounded, "no tensor long enough to show the scratch bounded");
        assert!(failed >= 8, "only {failed} damaged reads failed");
    }

    /// A byte flipped in a frame that zstd fails on names that frame's first byte in the file, whole or
    /// read a window at a time (a user of a large capture learns where the damage lies, not only where the
    /// tensor's data starts); data that decodes but fails its hash names the data's start and length.
    #[test]
    fn a_failed_read_names_the_damaged_frame() {
        let raw = tensor(2, (9 << 19) + 18, 11);
        let encoded = encode_data(&raw, DType::FLOAT16, 1).unwrap();
        let frames = scan_frames(encoded.payload(), raw.len() as u64).unwrap();
        assert!(frames.len() > 3, "{} frames", frames.len());
        let (mut named, mut hashed) = (0, 0);
        for frame in &frames[1..] {
            // The frame's magic, the middle of its first block, and (compressed) its middle.
            for at in [frame.bytes.start, frame.bytes.start + 6, frame.bytes.start + frame.bytes.len() / 2] {
                let mut payload = encoded.payload().to_vec();
                payload[at] ^= 0x24;
                let d = StoredData {
                    payload: &payload,
                    payload_offset: 1000,
                    ..stored(&payload, encoded.encoding(), &raw)
                };
                let whole = read_whole(&d).unwrap_err().to_string();
                let windows = read_blocks_in(&d, 4096, 64 << 10, &mut Vec::new()).unwrap_err().to_string();
                assert_eq!(windows, whole, "byte {at}");
                assert!(whole.ends_with("copy the capture again"), "{whole}");
                let data = format!("{} bytes from byte 1000", payload.len());
                if whole.contains("content hash") {
                    let len = payload.len();
                    assert!(
                        whole.starts_with(&format!("t: at byte 1000: tensor data ({len} bytes from here)")),
                        "{whole}"
                    );
                    hashed += 1;
                } else {
                    let frame_at = 1000 + frame.bytes.start;
                    assert!(
                        whole.starts_with(&format!("t: at byte {frame_at}: ")),
                        "byte {at} flipped: {whole}"
                    );
                    assert!(
                        whole.contains(&format!(
                            "in the zstd frame that starts there (the tensor's data: {data})"
                        )),
                        "{whole}"
                    );
                    named += 1;
                }
            }
        }
        assert!(named >= frames.len() && hashed > 0, "{named} frames named, {hashed} hashes failed");
    }

    /// Data that compresses beyond what a whole decode trusts a payload to expand to (zeros: an optimizer's
    /// first moments) is read a window at a time too, through a scratch a window's size, not the data's.
    #[test]
    fn zeros_are_read_a_window_at_a_time() {
        let raw = vec![0u8; (12 << 20) + 12];
        let encoded = encode_data(&raw, DType::FLOAT, 1).unwrap();
        let s = stored(encoded.payload(), encoded.encoding(), &raw);
        assert!(s.payload.len() as u64 * 64 < s.data_size, "{} bytes stored", s.payload.len());
        let mut scratch = Vec::new();
        let (planes, _) = s.plane_bytes(Path::new("t"), &mut scratch, 64 << 10).unwrap();
        assert!(matches!(planes, PlaneBytes::Windows(_)));
        assert!(read_blocks_in(&s, 777, 64 << 10, &mut scratch).unwrap() == raw);
        // A window's planes and a frame reaching out of each end of each plane's part: less than the data.
        let bound = (3 * PARALLEL_CHUNK).max(64 << 10) + 8 + 8 * (1 << 20);
        assert!(scratch.len() <= bound && scratch.len() < raw.len(), "{}", scratch.len());
        assert!(read_whole(&s).unwrap() == raw);
    }
}
