//! A tensor's byte planes as the reader reads them ([`super::reader::TensorBlocks`]): one slice (raw data, or
//! planes zstd decoded whole), pieces in order (zstd's stored blocks lent from the payload, decoded frames
//! in the caller's scratch), or, for large tensors written in frames of at most ~1 MiB, frames decoded a
//! window at a time as the reading reaches them, so that zstd's scratch stays bounded whatever the tensor's
//! size ([`Windows`]).

use super::shuffle;
use super::zstd_frames::{decode_frames, Frame, PieceIn};
use std::ops::Range;

/// The byte planes of a tensor's data.
pub(super) enum PlaneBytes<'a> {
    /// One slice.
    Whole(&'a [u8]),
    /// Pieces in order (`zstd_pieces`).
    Pieces(Pieces<'a>),
    /// Frames decoded as the reading reaches them.
    Windows(Windows<'a>),
}

impl<'a> PlaneBytes<'a> {
    /// The planes' length: the data's size in bytes.
    pub(super) fn len(&self) -> usize {
        match self {
            PlaneBytes::Whole(planes) => planes.len(),
            PlaneBytes::Pieces(pieces) => pieces.len,
            PlaneBytes::Windows(windows) => windows.len,
        }
    }

    /// The whole planes, where they are the data in order (1-byte planes in one slice): what a read lends.
    pub(super) fn in_order(&self, width: usize) -> Option<&'a [u8]> {
        match self {
            PlaneBytes::Whole(planes) if width <= 1 => Some(planes),
            _ => None,
        }
    }

    /// Makes bytes `start..end` of the data readable (`width`-byte elements): for [`Windows`], decodes the
    /// frames they lie in, if not yet. `false` where zstd fails on one of them.
    pub(super) fn prepare(&mut self, width: usize, start: usize, end: usize) -> bool {
        match self {
            PlaneBytes::Windows(windows) => windows.prepare(width, start, end),
            _ => true,
        }
    }

    fn view(&self) -> Option<View<'_>> {
        match self {
            PlaneBytes::Whole(_) => None,
            PlaneBytes::Pieces(p) => {
                Some(View { entries: &p.list, payload: p.payload, scratch: p.scratch, len: p.len })
            }
            PlaneBytes::Windows(w) => {
                Some(View { entries: &w.list, payload: w.payload, scratch: &w.scratch[..], len: w.len })
            }
        }
    }

    /// Bytes `start..start + buf.len()` of the data, from planes of `width`-byte elements: unshuffled into
    /// `buf`, or lent as stored. They must have been [prepared](Self::prepare).
    pub(super) fn read<'s>(
        &'s self,
        width: usize,
        start: usize,
        buf: &'s mut [u8],
        joined: &'s mut Joined,
    ) -> &'s [u8] {
        match (self, self.view()) {
            (PlaneBytes::Whole(planes), _) if width <= 1 => &planes[start..start + buf.len()],
            (PlaneBytes::Whole(planes), _) => {
                shuffle::unshuffle_range(planes, width, start, buf);
                buf
            }
            (_, Some(view)) => view.unshuffle_range(width, start, buf, joined),
            (_, None) => unreachable!("pieces and windows have a view"),
        }
    }

    /// [`read`](Self::read) into `buf`, lent or not.
    pub(super) fn read_into(&self, width: usize, start: usize, buf: &mut [u8], joined: &mut Joined) {
        match (self, self.view()) {
            (PlaneBytes::Whole(planes), _) if width <= 1 => {
                buf.copy_from_slice(&planes[start..start + buf.len()])
            }
            (PlaneBytes::Whole(planes), _) => shuffle::unshuffle_range(planes, width, start, buf),
            _ if buf.is_empty() => {}
            (_, Some(view)) if width <= 1 => {
                let first = view.piece_of(start);
                buf.copy_from_slice(view.range(first, start, buf.len(), &mut joined[0]));
            }
            // Elements of several bytes are always unshuffled into `buf`.
            (_, Some(view)) => _ = view.unshuffle_range(width, start, buf, joined),
            (_, None) => unreachable!("pieces and windows have a view"),
        }
    }
}

/// A piece of the planes: where it starts in them, and where its bytes lie.
type Entry = (usize, PieceIn, Range<usize>);

/// Byte planes in pieces: zstd's stored blocks lent from the payload, and the frames zstd decoded, lent
/// from the scratch buffer. A range that spans two pieces is copied together into a buffer of its plane
/// ([`Joined`]), the reader's own.
pub(super) struct Pieces<'a> {
    /// The pieces in order, none empty.
    list: Vec<Entry>,
    payload: &'a [u8],
    scratch: &'a [u8],
    len: usize,
}

impl<'a> Pieces<'a> {
    /// The planes of `len` bytes that `pieces` (as `zstd_pieces` gives them) of `payload` and `scratch` make.
    pub(super) fn new(
        pieces: Vec<(PieceIn, Range<usize>)>,
        payload: &'a [u8],
        scratch: &'a [u8],
        len: usize,
    ) -> Pieces<'a> {
        let list = pieces
            .into_iter()
            .filter(|p| !p.1.is_empty())
            .scan(0, |at, (from, range)| {
                let start = *at;
                *at += range.len();
                Some((start, from, range))
            })
            .collect();
        Pieces { list, payload, scratch, len }
    }
}

/// Per plane, where a range of pieces that spans pieces is put together: one per reader, so that threads
/// reading ranges of the same pieces at once each have their own.
pub(super) type Joined = [Vec<u8>; MAX_PIECE_WIDTH];

/// The widest elements whose planes [`View`] interleaves whole (wider ones: byte by byte).
const MAX_PIECE_WIDTH: usize = 16;

/// Pieces to read from: [`Pieces`]' or a [`Windows`]' current ones.
#[derive(Clone, Copy)]
struct View<'s> {
    entries: &'s [Entry],
    payload: &'s [u8],
    scratch: &'s [u8],
    len: usize,
}

impl<'s> View<'s> {
    /// The bytes of piece `i`.
    fn bytes(&self, i: usize) -> &'s [u8] {
        let (_, from, range) = &self.entries[i];
        match from {
            PieceIn::Payload => &self.payload[range.clone()],
            PieceIn::Scratch => &self.scratch[range.clone()],
        }
    }

    /// The index of the piece holding byte `at` (one the pieces hold).
    fn piece_of(&self, at: usize) -> usize {
        self.entries.partition_point(|&(start, _, _)| start <= at) - 1
    }

    /// Bytes `start..start + len` of the planes, which piece `first` and the ones after it hold: lent from
    /// their piece, or put together in `joined`.
    fn range<'j>(&self, first: usize, start: usize, len: usize, joined: &'j mut Vec<u8>) -> &'j [u8]
    where
        's: 'j,
    {
        let piece = self.bytes(first);
        let from = start - self.entries[first].0;
        if from + len <= piece.len() {
            return &piece[from..from + len];
        }
        joined.clear();
        let mut at = start;
        for i in first..self.entries.len() {
            if joined.len() == len {
                break;
            }
            // Pieces that hold one range are contiguous ([`Windows`] keeps every piece a range lies in).
            debug_assert!(i == first || self.entries[i].0 == at, "a gap in the pieces");
            let piece = self.bytes(i);
            let from = at - self.entries[i].0;
            let take = (piece.len() - from).min(len - joined.len());
            joined.extend_from_slice(&piece[from..from + take]);
            at += take;
        }
        joined
    }

    /// Byte `at` of the planes.
    fn byte(&self, at: usize) -> u8 {
        let i = self.piece_of(at);
        self.bytes(i)[at - self.entries[i].0]
    }

    /// [`shuffle::unshuffle_range`] of the planes of `width`-byte elements, as if they were one slice.
    fn unshuffle_range<'o>(
        &self,
        width: usize,
        start: usize,
        out: &'o mut [u8],
        joined: &'o mut Joined,
    ) -> &'o [u8]
    where
        's: 'o,
    {
        let end = start + out.len();
        let n = self.len / width.max(1);
        if out.is_empty() {
            // Nothing to look up (an empty tensor has no pieces).
            return out;
        }
        if width <= 1 {
            let first = self.piece_of(start);
            // In order already: lent from its piece (as raw data is lent), or put together.
            return self.range(first, start, out.len(), &mut joined[0]);
        }
        if start.is_multiple_of(width)
            && end.is_multiple_of(width)
            && end <= n * width
            && width <= MAX_PIECE_WIDTH
        {
            let (first, count) = (start / width, out.len() / width);
            let mut planes: [&[u8]; MAX_PIECE_WIDTH] = [&[]; MAX_PIECE_WIDTH];
            for ((b, plane), joined) in planes[..width].iter_mut().enumerate().zip(joined.iter_mut()) {
                let at = b * n + first;
                *plane = self.range(self.piece_of(at), at, count, joined);
            }
            shuffle::interleave_planes(&planes[..width], out);
            return out;
        }
        // A range that starts or ends inside an element, or the ragged tail: byte by byte, as
        // `unshuffle_range` takes them.
        let whole = n * width;
        for (k, o) in out.iter_mut().enumerate() {
            let pos = start + k;
            *o = self.byte(if pos < whole { (pos % width) * n + pos / width } else { pos });
        }
        out
    }
}

/// Data bytes a [`Windows`] makes readable at a time (at least): each of its planes' part of them, and so
/// zstd's decoded frames, stays about this size over `width` however large the tensor.
pub(super) const WINDOW_BYTES: usize = 16 << 20;

/// The largest frame content a [`Windows`] takes: the writer's, which cuts runs of planes into frames of at
/// most this size; captures written before that hold one frame per run, as long as a plane, and are read as
/// before (their frames decoded whole).
pub(super) const WINDOW_FRAME_MAX: usize = super::encode::FRAME_BYTES_MAX;

/// At most this many bytes of decoded frames a [`Windows`] holds for `width`-byte elements: a window's
/// planes, and on each side of each plane's part a frame that reaches beyond it.
pub(super) fn window_scratch_max(width: usize) -> usize {
    WINDOW_BYTES + 2 * width.max(1) * WINDOW_FRAME_MAX
}

/// Whether `frames` (of a tensor with `len` bytes of data) are read `window` bytes at a time: the data is
/// longer than a window, and every frame zstd must decode is one the window may hold.
pub(super) fn decodes_in_windows(frames: &[Frame], len: usize, window: usize) -> bool {
    len > window && frames.iter().all(|f| f.stored.is_some() || f.planes.len() <= WINDOW_FRAME_MAX)
}

/// Byte planes whose frames are decoded as the reading reaches them ([`prepare`](Windows::prepare)): at any
/// time `scratch` holds only the frames of the current window (at least [`WINDOW_BYTES`] of data), so a read
/// of a tensor of any size holds at most [`window_scratch_max`] bytes of decoded frames beside its output.
/// Stored blocks are lent from the payload as [`Pieces`] lends them.
pub(super) struct Windows<'a> {
    payload: &'a [u8],
    frames: Vec<Frame>,
    scratch: &'a mut Vec<u8>,
    /// The pieces of the frames the current window lies in, in order.
    list: Vec<Entry>,
    /// The frames now decoded in `scratch` (index into `frames`, bytes), in the order they lie there.
    decoded: Vec<(usize, Range<usize>)>,
    /// The data bytes the current window makes readable.
    ready: Range<usize>,
    len: usize,
    /// The data bytes a window makes readable at least ([`WINDOW_BYTES`] but in tests).
    window: usize,
}

impl<'a> Windows<'a> {
    /// Planes of `len` bytes from `frames` of `payload` ([`decodes_in_windows`]), decoded into `scratch`.
    pub(super) fn new(
        payload: &'a [u8],
        frames: Vec<Frame>,
        scratch: &'a mut Vec<u8>,
        len: usize,
        window: usize,
    ) -> Self {
        let (list, decoded) = (Vec::new(), Vec::new());
        Windows { payload, frames, scratch, list, decoded, ready: 0..0, len, window }
    }

    /// Makes data bytes `start..end` readable, with those up to `start + window` (at most the data's end),
    /// where the current window does not hold them: the frames they lie in are decoded (those of the
    /// current window that the new one keeps are moved, not decoded again), the others dropped.
    fn prepare(&mut self, width: usize, start: usize, end: usize) -> bool {
        if self.ready.start <= start && end <= self.ready.end || start >= end {
            return true;
        }
        let end = end.max(start.saturating_add(self.window)).min(self.len);
        // The frames the window's bytes lie in, in order.
        let mut wanted: Vec<usize> = Vec::new();
        for range in plane_ranges(width, self.len, start, end) {
            let first = self.frames.partition_point(|f| f.planes.end <= range.start);
            for (k, frame) in self.frames.iter().enumerate().skip(first) {
                if frame.planes.start >= range.end {
                    break;
                }
                if wanted.last().is_none_or(|&last| last < k) {
                    wanted.push(k);
                }
            }
        }
        // Frames already decoded and still wanted move to the front, in the order they lie in (each moves
        // down or stays, so none is overwritten before it moved); the others are decoded after them.
        let mut decoded = Vec::with_capacity(wanted.len());
        let mut at = 0;
        for (k, bytes) in std::mem::take(&mut self.decoded) {
            if wanted.binary_search(&k).is_ok() {
                self.scratch.copy_within(bytes.clone(), at);
                decoded.push((k, at..at + bytes.len()));
                at += bytes.len();
            }
        }
        let kept = decoded.len();
        let to_decode: Vec<usize> = wanted
            .iter()
            .copied()
            .filter(|&k| self.frames[k].stored.is_none() && !decoded[..kept].iter().any(|d| d.0 == k))
            .collect();
        let total = at + to_decode.iter().map(|&k| self.frames[k].planes.len()).sum::<usize>();
        if self.scratch.len() < total {
            // Only what it grows by is zero-filled: a reused scratch costs no fill.
            self.scratch.resize(total, 0);
        }
        let mut jobs = Vec::with_capacity(to_decode.len());
        let mut rest = &mut self.scratch[at..total];
        for k in to_decode {
            let size = self.frames[k].planes.len();
            let (slice, tail) = std::mem::take(&mut rest).split_at_mut(size);
            rest = tail;
            jobs.push((self.frames[k].bytes.clone(), slice));
            decoded.push((k, at..at + size));
            at += size;
        }
        if !decode_frames(self.payload, jobs) {
            self.decoded.clear();
            self.list.clear();
            self.ready = 0..0;
            return false;
        }
        self.list.clear();
        for &k in &wanted {
            let frame = &self.frames[k];
            match &frame.stored {
                Some(blocks) => {
                    let mut plane_at = frame.planes.start;
                    for block in blocks.iter().filter(|b| !b.is_empty()) {
                        self.list.push((plane_at, PieceIn::Payload, block.clone()));
                        plane_at += block.len();
                    }
                }
                None if frame.planes.is_empty() => {}
                None => {
                    let bytes = decoded.iter().find(|d| d.0 == k).map(|d| d.1.clone());
                    let bytes = bytes.expect("every wanted frame zstd decodes is decoded");
                    self.list.push((frame.planes.start, PieceIn::Scratch, bytes));
                }
            }
        }
        self.decoded = decoded;
        self.ready = start..end;
        true
    }
}

/// Where data bytes `start..end` of `len` bytes of `width`-byte elements lie in their byte planes (plane `b`
/// holds byte `b` of every whole element, then the ragged tail follows in order): one range per plane, and
/// one for the tail, in order, none empty.
fn plane_ranges(width: usize, len: usize, start: usize, end: usize) -> Vec<Range<usize>> {
    if width <= 1 {
        return std::iter::once(start..end).collect();
    }
    let n = len / width;
    let (first, last) = ((start / width).min(n), end.div_ceil(width).min(n));
    let mut ranges: Vec<Range<usize>> =
        (0..width).map(|b| b * n + first..b * n + last).filter(|r| !r.is_empty()).collect();
    let tail = start.max(n * width)..end;
    if !tail.is_empty() {
        ranges.push(tail);
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte of `start..end` maps into one of the ranges, which are in order and apart.
    #[test]
    fn plane_ranges_hold_every_byte_of_the_data_range() {
        for (width, len) in [(1, 10), (2, 20), (2, 21), (4, 37), (8, 64), (3, 3)] {
            let n = len / width;
            for start in 0..len {
                for end in start + 1..=len {
                    let ranges = plane_ranges(width, len, start, end);
                    assert!(
                        ranges.windows(2).all(|w| w[0].end <= w[1].start),
                        "{width} {len} {start}..{end}"
                    );
                    for pos in start..end {
                        let at =
                            if pos < n * width && width > 1 { (pos % width) * n + pos / width } else { pos };
                        assert!(
                            ranges.iter().any(|r| r.contains(&at)),
                            "{width} {len} {start}..{end}: {pos}"
                        );
                    }
                }
            }
        }
    }
}
