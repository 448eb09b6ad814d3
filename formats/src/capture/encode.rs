//! Tensor data as a record stores it: byte-shuffled planes compressed with zstd, one frame per run of
//! planes alike (flat or not), or the raw bytes where that does not pay. [`DataEncoder`] does it with a
//! reused zstd context and buffers, for the stream writer (in place, under its lock) and for writer
//! threads that encode before they take the lock. The choices (zstd parameters for planes, flat planes,
//! frames) are documented where they are made; the format is docs/CAPTURE_FORMAT.md.

use super::record::DataEncoding;
use super::shuffle;
use crate::{FormatError, Result};

/// The stream's zstd context and the parameters it is set to.
struct Zstd {
    c: Compressor,
    level: i32,
    planes: PlanesParams,
    /// Literal compression is switched off (for a run of flat planes, see [`plane_frames`]).
    literals_off: bool,
}

/// Whether zstd output of `compressed` bytes is kept for `raw` bytes: it must save at least 1/32.
pub(super) fn pays(compressed: usize, raw: usize) -> bool {
    compressed < raw - raw / 32
}

/// zstd parameters for byte-shuffled planes at the fast levels; all zero (the level's defaults) elsewhere.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PlanesParams {
    /// Hash table size, log2 entries (0: the level's).
    hash_log: u32,
    /// Shortest match, bytes (0: the level's).
    min_match: u32,
    /// zstd's "fast" strategy skips ahead `target_length + 1` positions per probe (0: the level's).
    target_length: u32,
}

/// The zstd parameters for byte-shuffled planes of `width`-byte elements at `level`.
///
/// At the fast levels (<= 2: zstd's "fast" strategy, one hash table), and for planes of 2+ byte elements:
/// - a 256-entry hash table instead of the level's 2^13..2^16: it stays in L1, and the sign/exponent plane,
///   whose gain comes from the entropy coder rather than from matches, is no longer cut into many short
///   matches (e.g. bf16 gaussian: 1.46 -> 1.50 and about 2x the speed);
/// - matches of 7+ bytes only, and a probe every 65 positions (`target_length` 64) instead of every one:
///   the exponent plane of smooth activations otherwise yields a short match every few bytes, and finding
///   and coding those cost more than raw zstd-1 on the whole tensor (collector benchmark's smooth fp16
///   planes: 2.1x the speed of the 256-entry table alone, 1.5x raw zstd-1's, ratio 1.32 -> 1.25; gaussian
///   bf16 1.45x, ratio unchanged; relu 1.1x and a better ratio). Probing less often still, down to entropy
///   coding alone, gains little more speed but loses the long matches of repeated data (a 4096-value row
///   broadcast 256 times: 141x at 64, 1.2x without matches);
/// - literals Huffman-coded regardless ([`literals_forced`]): zstd turns literal compression off whenever
///   the fast strategy has a `target_length`, and the exponent plane gains mostly from them.
///
/// `BENCH_ZSTD_SWEEP` in `formats/benches/capture.rs`, docs/BENCHMARKS.md. Width-1 data (int8, fp8) keeps
/// the level's defaults.
fn planes_params(level: i32, width: u32) -> PlanesParams {
    if level <= 2 && width >= 2 {
        PlanesParams { hash_log: 8, min_match: 7, target_length: 64 }
    } else {
        PlanesParams::default()
    }
}

/// Whether literal compression is forced on (else zstd's default for the parameters: see
/// [`planes_params`]).
fn literals_forced(p: PlanesParams) -> bool {
    p.target_length > 0
}

/// Sets `p` on a zstd context (zero fields restore the level's defaults).
fn apply_planes_params(c: &mut Compressor, p: PlanesParams) -> std::io::Result<()> {
    use zstd::zstd_safe::{CParameter, ParamSwitch};
    c.set_parameter(CParameter::HashLog(p.hash_log))?;
    c.set_parameter(CParameter::MinMatch(p.min_match))?;
    c.set_parameter(CParameter::TargetLength(p.target_length))?;
    let literals = if literals_forced(p) { ParamSwitch::Enable } else { ParamSwitch::Auto };
    c.set_parameter(CParameter::LiteralCompressionMode(literals))
}

/// Smallest tensor whose planes may go into several zstd frames (below it, one frame: a frame's header and
/// the per-plane decision would cost more than they save).
const PLANE_FRAMES_MIN: usize = 64 << 10;
/// Most bytes of planes compressed as one zstd frame: a longer run is cut into equal pieces, each its own
/// frame, because zstd decodes a frame on one core and frames apart on as many as there are (a reader of a
/// large tensor decodes its frames in parallel). zstd's fast levels match within 512 KiB at most, so pieces
/// of about 1 MiB lose next to nothing of the ratio.
pub(super) const FRAME_BYTES_MAX: usize = 1 << 20;

/// The frames of `run`: itself, or equal pieces of at most [`FRAME_BYTES_MAX`] bytes when it is longer.
fn frame_pieces(run: std::ops::Range<usize>) -> impl Iterator<Item = std::ops::Range<usize>> {
    let len = run.end - run.start;
    let n = len.div_ceil(FRAME_BYTES_MAX).max(1);
    (0..n).map(move |i| run.start + len * i / n..run.start + len * (i + 1) / n)
}

/// A plane whose sampled byte entropy reaches this many bits per byte is "flat": Huffman coding would
/// save under ~2% of it (zstd's fast levels want 1.6% before they use it), so it is compressed with
/// literal compression off. Matches are still searched, so repeated data keeps its gain.
const FLAT_PLANE_BITS: f64 = 7.85;
/// The sample: this many windows of `SAMPLE_WINDOW` bytes, spread over the plane.
const SAMPLE_WINDOWS: usize = 16;
const SAMPLE_WINDOW: usize = 256;

/// How the shuffled planes of one tensor are cut into zstd frames: runs of adjacent planes with the same
/// verdict (flat or not), the last run also holding the unshuffled tail. At most 8 runs (the widest element
/// has 8 planes).
#[derive(Clone, Debug, Default)]
struct FramePlan {
    runs: [std::ops::Range<usize>; 8],
    flat: [bool; 8],
    len: usize,
}

impl FramePlan {
    /// One frame over `len` bytes, literals as the parameters say.
    fn whole(len: usize) -> FramePlan {
        let mut p = FramePlan::default();
        p.push(0..len, false);
        p
    }

    fn push(&mut self, run: std::ops::Range<usize>, flat: bool) {
        match self.len.checked_sub(1) {
            Some(last) if self.flat[last] == flat => self.runs[last].end = run.end,
            _ => {
                self.runs[self.len] = run;
                self.flat[self.len] = flat;
                self.len += 1;
            }
        }
    }

    fn runs(&self) -> &[std::ops::Range<usize>] {
        &self.runs[..self.len]
    }

    fn flat(&self) -> &[bool] {
        &self.flat[..self.len]
    }
}

/// The frames for `shuffled`, the planes of `width`-byte elements: one frame when the tensor is small or
/// wider than 8 bytes, else a frame per run of planes that [`looks_flat`] agrees on. A flat plane (the low
/// mantissa bytes of most activations) costs zstd's entropy coder as much time as a useful one and gains
/// nothing; without literal compression zstd passes it through about 10x faster.
fn plane_frames(shuffled: &[u8], width: usize) -> FramePlan {
    let len = shuffled.len();
    if len < PLANE_FRAMES_MIN || !(2..=8).contains(&width) {
        return FramePlan::whole(len);
    }
    let n = len / width;
    let mut plan = FramePlan::default();
    for p in 0..width {
        let end = if p + 1 == width { len } else { (p + 1) * n };
        plan.push(p * n..end, looks_flat(&shuffled[p * n..(p + 1) * n]));
    }
    plan
}

/// Whether `plane`'s bytes look uniformly spread: the byte entropy of `SAMPLE_WINDOWS` windows of
/// `SAMPLE_WINDOW` bytes spread evenly over it is at least [`FLAT_PLANE_BITS`]. (4 KiB of samples
/// underestimate a uniform plane's 8 bits by about 0.05.)
fn looks_flat(plane: &[u8]) -> bool {
    if plane.len() < SAMPLE_WINDOWS * SAMPLE_WINDOW {
        return false;
    }
    let step = (plane.len() - SAMPLE_WINDOW) / (SAMPLE_WINDOWS - 1);
    let mut counts = [0u32; 256];
    for w in 0..SAMPLE_WINDOWS {
        for &b in &plane[w * step..w * step + SAMPLE_WINDOW] {
            counts[b as usize] += 1;
        }
    }
    let total = (SAMPLE_WINDOWS * SAMPLE_WINDOW) as f64;
    let bits: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / total;
            -p * p.log2()
        })
        .sum();
    bits >= FLAT_PLANE_BITS
}

/// A zstd context as the writer keeps one.
type Compressor = zstd::bulk::Compressor<'static>;

/// Where [`DataEncoder::compress_prepared`] writes its frames: a slice (the segment's mapping) or a Vec's
/// spare capacity.
pub(super) trait FrameOut {
    /// Compresses `src` as one frame at byte `at` of the output; returns the frame's length.
    fn compress_at(&mut self, c: &mut Compressor, src: &[u8], at: usize) -> std::io::Result<usize>;
}

impl FrameOut for [u8] {
    fn compress_at(&mut self, c: &mut Compressor, src: &[u8], at: usize) -> std::io::Result<usize> {
        c.compress_to_buffer(src, &mut self[at..])
    }
}

impl FrameOut for Vec<u8> {
    fn compress_at(&mut self, c: &mut Compressor, src: &[u8], at: usize) -> std::io::Result<usize> {
        // Written from `at` (the Vec's length: the frames before) into the spare capacity.
        let mut cursor = std::io::Cursor::new(self);
        cursor.set_position(at as u64);
        c.compress_to_buffer(src, &mut cursor)
    }
}

/// A tensor's data as a record stores it: zstd-compressed byte planes, or its raw bytes where zstd saves
/// under 1/32. Made by [`DataEncoder::encode`] / [`encode_data`], appended by
/// [`StreamWriter::append_tensor_encoded`](super::StreamWriter::append_tensor_encoded).
#[derive(Debug)]
pub struct EncodedData<'a> {
    encoding: DataEncoding,
    raw: &'a [u8],
    /// zstd's output (the payload when `encoding` is zstd; else only kept for its capacity).
    compressed: Vec<u8>,
}

impl EncodedData<'_> {
    /// How the payload is encoded (`Zstd` or `Raw`).
    pub fn encoding(&self) -> DataEncoding {
        self.encoding
    }

    /// The raw data's length in bytes (the record's `data_size`).
    pub fn raw_len(&self) -> u64 {
        self.raw.len() as u64
    }

    /// The bytes the record carries.
    pub fn payload(&self) -> &[u8] {
        match self.encoding {
            DataEncoding::Zstd { .. } => &self.compressed,
            _ => self.raw,
        }
    }

    /// The compression buffer, to be passed to the next [`DataEncoder::encode`] (no allocation once grown).
    pub fn into_buffer(self) -> Vec<u8> {
        self.compressed
    }
}

/// Shuffles and compresses tensor data exactly as [`StreamWriter::append_tensor`](super::StreamWriter::append_tensor) does (it uses one
/// internally), keeping its zstd context and shuffle buffer between tensors. One per thread: encoding
/// needs no access to the stream, so threads sharing a writer encode in parallel and lock it only to
/// append.
#[derive(Default)]
pub struct DataEncoder {
    compressor: Option<Zstd>,
    /// The byte planes of the tensor last [`prepare`](Self::prepare)d, in a prefix (the buffer only grows).
    shuffled: Vec<u8>,
    /// How those planes are cut into zstd frames (the runs cover the prefix).
    frames: FramePlan,
}

/// [`DataEncoder::encode`] with a fresh encoder and buffer (simple, but sets up a zstd context per call:
/// keep a [`DataEncoder`] for more than a few tensors).
pub fn encode_data(raw: &[u8], dtype: crate::DType, zstd_level: i32) -> Result<EncodedData<'_>> {
    DataEncoder::new().encode(raw, dtype, zstd_level, Vec::new())
}

impl DataEncoder {
    /// An encoder with no zstd context yet (made at the first compressed plane).
    pub fn new() -> Self {
        DataEncoder::default()
    }

    /// Shuffles `raw` by its dtype's width and compresses it with zstd at `zstd_level`, into `buf` (cleared
    /// first; pass [`EncodedData::into_buffer`] of an earlier call to reuse its memory). Stored raw instead
    /// when zstd saves under 1/32.
    pub fn encode<'a>(
        &mut self,
        raw: &'a [u8],
        dtype: crate::DType,
        zstd_level: i32,
        buf: Vec<u8>,
    ) -> Result<EncodedData<'a>> {
        let width = shuffle_width(dtype);
        self.prepare(raw, width, zstd_level)?;
        self.finish(raw, width, buf)
    }

    /// Sets the zstd context up for `level` and `width`, and shuffles `raw` into `self.shuffled`.
    pub(super) fn prepare(&mut self, raw: &[u8], width: u32, level: i32) -> Result<()> {
        let err = |e: std::io::Error| FormatError::whole(format!("zstd: {e}"));
        let planes = planes_params(level, width);
        match &mut self.compressor {
            Some(z) if (z.level, z.planes) != (level, planes) => {
                z.c.set_compression_level(level).map_err(err)?;
                apply_planes_params(&mut z.c, planes).map_err(err)?;
                (z.level, z.planes, z.literals_off) = (level, planes, false);
            }
            Some(_) => {}
            None => {
                let mut c = zstd::bulk::Compressor::new(level).map_err(err)?;
                apply_planes_params(&mut c, planes).map_err(err)?;
                self.compressor = Some(Zstd { c, level, planes, literals_off: false });
            }
        }
        // The buffer only grows (zero-filling just the new part) and a prefix is used: every byte of it is
        // written by the shuffle, so tensors of alternating sizes cause no passes of zeros.
        if self.shuffled.len() < raw.len() {
            self.shuffled.resize(raw.len(), 0);
        }
        let shuffled = &mut self.shuffled[..raw.len()];
        shuffle::shuffle_into(raw, width as usize, shuffled);
        self.frames = if literals_forced(planes) {
            plane_frames(shuffled, width as usize)
        } else {
            FramePlan::whole(raw.len())
        };
        Ok(())
    }

    /// The most bytes [`compress_prepared`](Self::compress_prepared) can write for the prepared planes.
    pub(super) fn prepared_bound(&self) -> usize {
        let runs = self.frames.runs().iter().cloned();
        runs.flat_map(frame_pieces).map(|piece| zstd::zstd_safe::compress_bound(piece.len())).sum()
    }

    /// Whether a zstd context is set up (by [`prepare`](Self::prepare)).
    pub(super) fn is_prepared(&self) -> bool {
        self.compressor.is_some()
    }

    /// Compresses the prepared planes into `out` (a slice at least [`prepared_bound`](Self::prepared_bound)
    /// long, or a Vec with that much spare capacity): one zstd frame per run of [`plane_frames`] (per piece
    /// of it, [`frame_pieces`]), back to back. Returns the compressed length.
    pub(super) fn compress_prepared<O: FrameOut + ?Sized>(&mut self, out: &mut O) -> Result<usize> {
        use zstd::zstd_safe::{CParameter, ParamSwitch};
        let err = |e: std::io::Error| FormatError::whole(format!("zstd: {e}"));
        let Some(z) = &mut self.compressor else {
            return Err(FormatError::whole("zstd: no context (nothing prepared)"));
        };
        let mut written = 0;
        for (run, flat) in self.frames.runs().iter().zip(self.frames.flat()) {
            if *flat != z.literals_off {
                let mode = if *flat { ParamSwitch::Disable } else { ParamSwitch::Enable };
                z.c.set_parameter(CParameter::LiteralCompressionMode(mode)).map_err(err)?;
                z.literals_off = *flat;
            }
            for piece in frame_pieces(run.clone()) {
                written += out.compress_at(&mut z.c, &self.shuffled[piece], written).map_err(err)?;
            }
        }
        Ok(written)
    }

    /// Compresses the planes [`prepare`](Self::prepare)d from `raw` into `buf` and picks the encoding.
    pub(super) fn finish<'a>(
        &mut self,
        raw: &'a [u8],
        width: u32,
        mut buf: Vec<u8>,
    ) -> Result<EncodedData<'a>> {
        buf.clear();
        buf.reserve(self.prepared_bound());
        self.compress_prepared(&mut buf)?;
        let encoding = if pays(buf.len(), raw.len()) {
            DataEncoding::Zstd { shuffle_width: width }
        } else {
            DataEncoding::Raw
        };
        Ok(EncodedData { encoding, raw, compressed: buf })
    }
}

/// Shuffle width of a dtype: its element width in bytes (a complex number's part width), 1 for sub-byte
/// and unknown types.
pub(super) fn shuffle_width(dtype: crate::DType) -> u32 {
    match dtype.bits() {
        Some(bits) if bits >= 16 && bits % 8 == 0 => {
            if dtype.kind() == crate::dtype::Kind::Complex {
                bits / 16
            } else {
                bits / 8
            }
        }
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize) -> Vec<u8> {
        super::super::test_noise(n, 0x9E37_79B9_7F4A_7C15)
    }

    #[test]
    fn only_uniformly_spread_planes_of_some_size_look_flat() {
        assert!(looks_flat(&noise(100_000)));
        assert!(!looks_flat(&noise(1000)), "too small to sample");
        assert!(!looks_flat(&vec![7u8; 100_000]));
        // Seven bits of noise: entropy 7, not flat.
        let seven: Vec<u8> = noise(100_000).iter().map(|b| b & 0x7f).collect();
        assert!(!looks_flat(&seven));
    }

    #[test]
    fn frame_runs_merge_alike_planes_and_the_tail_joins_the_last() {
        // fp32-like: two noise planes, then two constant ones, plus a 3-byte tail.
        let n = 40_000;
        let mut planes = noise(2 * n);
        planes.extend(std::iter::repeat_n(0x3f, 2 * n + 3));
        let plan = plane_frames(&planes, 4);
        assert_eq!(plan.runs(), [0..2 * n, 2 * n..4 * n + 3]);
        assert_eq!(plan.flat(), [true, false]);
        let small = plane_frames(&planes[..1000], 4);
        assert_eq!((small.runs().len(), small.runs()[0].clone(), small.flat()), (1, 0..1000, &[false][..]));
        let wide = plane_frames(&planes, 16);
        assert_eq!(
            (wide.runs().len(), wide.runs()[0].clone()),
            (1, 0..planes.len()),
            "wider than 8 bytes: one frame"
        );
    }

    #[test]
    fn long_runs_are_cut_into_equal_frames_of_at_most_the_limit() {
        let cuts = |run: std::ops::Range<usize>| frame_pieces(run).collect::<Vec<_>>();
        assert_eq!(cuts(5..5), vec![5..5], "an empty run is one (empty) frame, as before");
        assert_eq!(cuts(3..3 + FRAME_BYTES_MAX), vec![3..3 + FRAME_BYTES_MAX]);
        let long = 7..7 + 2 * FRAME_BYTES_MAX + 1;
        let pieces = cuts(long.clone());
        assert_eq!(pieces.len(), 3);
        assert_eq!((pieces[0].start, pieces[2].end), (long.start, long.end));
        assert!(pieces.windows(2).all(|w| w[0].end == w[1].start), "back to back");
        assert!(pieces.iter().all(|p| p.len() <= FRAME_BYTES_MAX && p.len() >= FRAME_BYTES_MAX * 2 / 3));
    }

    /// A tensor whose runs exceed the limit is written as more frames, and still decodes (as one zstd
    /// stream, the way any reader takes the payload) to its bytes.
    #[test]
    fn a_large_tensor_is_written_as_frames_a_stream_decoder_reads_whole() {
        let raw: Vec<u8> = noise(3 * FRAME_BYTES_MAX + 10).iter().map(|b| b & 0x0f).collect();
        let encoded = encode_data(&raw, crate::DType::FLOAT16, 1).unwrap();
        assert!(matches!(encoded.encoding(), DataEncoding::Zstd { shuffle_width: 2 }));
        let payload = encoded.payload();
        let frames = payload.windows(4).filter(|w| *w == [0x28, 0xB5, 0x2F, 0xFD]).count();
        assert!(frames >= 4, "{frames} frames for two planes of 1.5 MiB");
        let planes = zstd::stream::decode_all(payload).unwrap();
        let mut back = vec![0u8; raw.len()];
        super::super::shuffle::unshuffle(&planes, 2, &mut back);
        assert!(back == raw);
    }
}
