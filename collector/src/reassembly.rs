//! Putting dump files back together from their chunks. Chunks of one file arrive in order; chunks of
//! different files interleave, so partial files are keyed by the chunk's `fileName`. `isLastChunk` ends a
//! file. Offsets: -1 appends (what the producer sends); a non-negative offset writes at that position.
//!
//! Dropped chunks (queue full under the `drop` policy) reach us as notes carrying the name's hash: their
//! file is marked incomplete and reported, not parsed, when it ends. Pure logic, no threads or I/O.
//!
//! A file the caller asks to stream (statistics mode, a tensor dump) is not put back together: its chunks
//! go to a [`FileStream`] as they arrive, in order, and it ends as [`Done::Streamed`] (see
//! [`crate::streamed`]). A chunk out of order (an explicit offset other than the next byte's) falls back to
//! reassembly while only the file's first bytes were kept; after that, the file is incomplete.

use crate::streamed::{End, Fed, FileStream, Streamed};
use accutrace_formats::FormatError;
use std::collections::{HashMap, HashSet};

/// Largest forward jump of an explicit offset that is filled with zeros; beyond it the file is given up
/// as incomplete instead of allocating whatever an offset says.
pub const MAX_GAP: u64 = 64 << 20;

struct Partial {
    hash: u64,
    body: Body,
    incomplete: bool,
}

/// What is kept of a file in progress.
enum Body {
    /// Its bytes so far.
    Bytes(Vec<u8>),
    /// Its statistics so far.
    Stream(Box<FileStream>),
}

/// A finished file.
#[derive(Debug, PartialEq)]
pub enum Done {
    /// Every chunk arrived: the file's bytes.
    Complete { name: Vec<u8>, bytes: Vec<u8> },
    /// Every chunk of a streamed file arrived: its header and summaries.
    Streamed { name: Vec<u8>, file: Box<Streamed> },
    /// A streamed file whose length is not the one its header declares (it is not parsed).
    Unparsed { name: Vec<u8>, error: FormatError },
    /// Chunks were lost; `name` is empty when none of its chunks ever arrived (only its hash is known).
    Incomplete { name: Vec<u8> },
}

#[derive(Default)]
pub struct Reassembler {
    files: HashMap<Vec<u8>, Partial>,
    /// Hashes of names that lost chunks before any of their chunks arrived.
    doomed: HashSet<u64>,
    /// Buffers of processed files, reused for new ones.
    spare: Vec<Vec<u8>>,
    /// File streams of processed files, reused for new ones (boxed: a stream, over a KiB with its hasher's
    /// state, moves between this list and a file's body without being copied).
    #[allow(clippy::vec_box)]
    spare_streams: Vec<Box<FileStream>>,
    /// Whether streamed files' summaries carry a histogram.
    histogram: bool,
}

impl Reassembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// A reassembler whose streamed files' summaries carry a histogram when `histogram`.
    pub fn with_histogram(histogram: bool) -> Self {
        Reassembler { histogram, ..Self::default() }
    }

    /// Files in progress.
    pub fn pending(&self) -> usize {
        self.files.len() + self.doomed.len()
    }

    /// Whether a part is a whole file by itself: the file's first and last bytes (`last`, at offset 0 or
    /// appended) with nothing of it pending or lost. Such a part needs no reassembly: the caller uses its
    /// bytes where they are instead of calling [`push`](Self::push).
    pub fn is_whole_file(&self, name: &[u8], hash: u64, offset: i64, last: bool) -> bool {
        last && (offset == 0 || offset == ascend_sys::ACLDUMP_OFFSET_APPEND)
            && !self.files.contains_key(name)
            && !self.doomed.contains(&hash)
    }

    /// Adds a chunk (or part of one) of file `name`, whose hash is `hash`.
    pub fn push(&mut self, name: &[u8], hash: u64, offset: i64, data: &[u8], last: bool) -> Option<Done> {
        self.push_file(name, hash, offset, data, last, |_| false)
    }

    /// [`push`](Self::push), streaming the file instead of reassembling it when `stream(name)` says so at
    /// the file's first chunk (asked then only) and that chunk is the file's start.
    pub fn push_file(
        &mut self,
        name: &[u8],
        hash: u64,
        offset: i64,
        data: &[u8],
        last: bool,
        stream: impl FnOnce(&[u8]) -> bool,
    ) -> Option<Done> {
        if !self.files.contains_key(name) {
            let incomplete = self.doomed.remove(&hash);
            let at_start = offset == 0 || offset == ascend_sys::ACLDUMP_OFFSET_APPEND;
            let body = if !incomplete && at_start && stream(name) {
                let mut s = self.spare_streams.pop().unwrap_or_else(|| Box::new(FileStream::new(false)));
                s.reset_for(self.histogram);
                Body::Stream(s)
            } else {
                let mut bytes = self.spare.pop().unwrap_or_default();
                bytes.clear();
                Body::Bytes(bytes)
            };
            self.files.insert(name.to_vec(), Partial { hash, body, incomplete });
        }
        let p = self.files.get_mut(name)?;
        if !p.incomplete {
            p.incomplete = !add(&mut p.body, offset, data);
        }
        if !last {
            return None;
        }
        let (name, p) = self.files.remove_entry(name)?;
        Some(match (p.incomplete, p.body) {
            (true, body) => {
                self.keep(body);
                Done::Incomplete { name }
            }
            (false, Body::Bytes(bytes)) => Done::Complete { name, bytes },
            (false, Body::Stream(mut s)) => {
                let end = s.end();
                self.keep(Body::Stream(s));
                match end {
                    End::Streamed(file) => Done::Streamed { name, file },
                    End::Whole(bytes) => Done::Complete { name, bytes },
                    End::Mismatch(error) => Done::Unparsed { name, error },
                }
            }
        })
    }

    /// Keeps a dropped file's buffer or stream for reuse.
    fn keep(&mut self, body: Body) {
        match body {
            Body::Bytes(bytes) => self.recycle(bytes),
            Body::Stream(s) if self.spare_streams.len() < 8 => self.spare_streams.push(s),
            Body::Stream(_) => {}
        }
    }

    /// A chunk of the file whose name hashes to `hash` was dropped; `last` if it was the file's last.
    pub fn dropped(&mut self, hash: u64, last: bool) -> Option<Done> {
        let found = self.files.iter_mut().find(|(_, p)| p.hash == hash).map(|(name, p)| {
            p.incomplete = true;
            name.clone()
        });
        match (found, last) {
            (Some(name), true) => {
                let p = self.files.remove(&name)?;
                self.keep(p.body);
                Some(Done::Incomplete { name })
            }
            (Some(_), false) => None,
            (None, true) => {
                self.doomed.remove(&hash);
                Some(Done::Incomplete { name: Vec::new() })
            }
            (None, false) => {
                self.doomed.insert(hash);
                None
            }
        }
    }

    /// Gives a processed file's buffer back for reuse (a few are kept).
    pub fn recycle(&mut self, bytes: Vec<u8>) {
        if self.spare.len() < 8 {
            self.spare.push(bytes);
        }
    }

    /// The end of the stream: every file still in progress is incomplete.
    pub fn finish(&mut self) -> Vec<Done> {
        let mut out: Vec<Done> = self.files.drain().map(|(name, _)| Done::Incomplete { name }).collect();
        out.extend(self.doomed.drain().map(|_| Done::Incomplete { name: Vec::new() }));
        out
    }
}

/// Adds `data` at `offset` to a file's body; false when it cannot be had (no memory, an offset too far, or
/// one out of order in a stream past its first bytes): the file is then incomplete.
fn add(body: &mut Body, offset: i64, data: &[u8]) -> bool {
    if let Body::Stream(s) = body {
        let in_order =
            offset == ascend_sys::ACLDUMP_OFFSET_APPEND || u64::try_from(offset) == Ok(s.position());
        if in_order {
            return match s.feed(data) {
                Fed::Taken => true,
                Fed::Whole(bytes) => {
                    *body = Body::Bytes(bytes);
                    true
                }
                Fed::NoMemory => false,
            };
        }
        if s.has_header() {
            return false;
        }
        // Only the first bytes were kept (all of them): reassemble from here on.
        *body = Body::Bytes(s.take_prefix());
    }
    let Body::Bytes(bytes) = body else { return false };
    let len = bytes.len() as u64;
    // Memory the process cannot have (`ulimit -v`) loses this file (counted), not the job.
    match u64::try_from(offset) {
        Err(_) if offset == ascend_sys::ACLDUMP_OFFSET_APPEND => {
            let room = bytes.try_reserve(data.len()).is_ok();
            if room {
                bytes.extend_from_slice(data);
            }
            room
        }
        Ok(at) if at <= len.saturating_add(MAX_GAP) => {
            let (at, end) = (at as usize, at as usize + data.len());
            let room = grow_to(bytes, end);
            if room {
                bytes[at..end].copy_from_slice(data);
            }
            room
        }
        _ => false,
    }
}

/// Extends `bytes` with zeros to at least `end` bytes; false when the memory cannot be had.
fn grow_to(bytes: &mut Vec<u8>, end: usize) -> bool {
    if end <= bytes.len() {
        return true;
    }
    if bytes.try_reserve(end - bytes.len()).is_err() {
        return false;
    }
    bytes.resize(end, 0);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(name: &[u8]) -> u64 {
        accutrace_formats::stats::content_hash(name)
    }

    fn complete(d: Option<Done>) -> (Vec<u8>, Vec<u8>) {
        match d {
            Some(Done::Complete { name, bytes }) => (name, bytes),
            other => panic!("expected a complete file, got {other:?}"),
        }
    }

    #[test]
    fn interleaved_files_come_back_whole() {
        // Three files sliced in 3-byte chunks and delivered round robin, as the runtime's dump thread does.
        let files: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (b"/d/0/a".to_vec(), (0u8..10).collect()),
            (b"/d/0/b".to_vec(), (100u8..104).collect()),
            (b"/d/0/c".to_vec(), Vec::new()),
        ];
        let mut cursors = vec![0usize; files.len()];
        let mut r = Reassembler::new();
        let mut done = Vec::new();
        while done.len() < files.len() {
            for (i, (name, bytes)) in files.iter().enumerate() {
                if cursors[i] > bytes.len() || (cursors[i] == bytes.len() && !bytes.is_empty()) {
                    continue;
                }
                let end = (cursors[i] + 3).min(bytes.len());
                let last = end == bytes.len();
                if let Some(d) = r.push(name, h(name), -1, &bytes[cursors[i]..end], last) {
                    done.push(complete(Some(d)));
                }
                cursors[i] = if bytes.is_empty() { 1 } else { end };
            }
        }
        done.sort();
        let mut want = files.clone();
        want.sort();
        assert_eq!(done, want);
        assert_eq!(r.pending(), 0);
    }

    #[test]
    fn explicit_offsets_and_absurd_ones() {
        let mut r = Reassembler::new();
        let n = b"f".as_slice();
        assert!(r.push(n, h(n), 0, b"abcd", false).is_none());
        assert!(r.push(n, h(n), 2, b"XY", false).is_none());
        let (_, bytes) = complete(r.push(n, h(n), 6, b"z", true));
        assert_eq!(bytes, b"abXY\0\0z");
        assert!(r.push(n, h(n), MAX_GAP as i64 + 10, b"a", false).is_none());
        assert_eq!(r.push(n, h(n), -1, b"a", true), Some(Done::Incomplete { name: n.to_vec() }));
        assert_eq!(r.push(n, h(n), -7, b"a", true), Some(Done::Incomplete { name: n.to_vec() }));
    }

    #[test]
    fn dropped_chunks_mark_their_file_and_only_it() {
        let mut r = Reassembler::new();
        let (a, b) = (b"a".as_slice(), b"b".as_slice());
        r.push(a, h(a), -1, b"1", false);
        r.push(b, h(b), -1, b"2", false);
        assert_eq!(r.dropped(h(a), false), None);
        r.push(a, h(a), -1, b"3", false);
        assert_eq!(r.push(a, h(a), -1, b"4", true), Some(Done::Incomplete { name: a.to_vec() }));
        assert_eq!(complete(r.push(b, h(b), -1, b"5", true)).1, b"25");
        // A file whose first chunk was dropped, then its last chunk arrives.
        let c = b"c".as_slice();
        assert_eq!(r.dropped(h(c), false), None);
        assert_eq!(r.push(c, h(c), -1, b"x", true), Some(Done::Incomplete { name: c.to_vec() }));
        // A file whose last chunk was dropped.
        r.push(a, h(a), -1, b"1", false);
        assert_eq!(r.dropped(h(a), true), Some(Done::Incomplete { name: a.to_vec() }));
        // A one-chunk file dropped entirely.
        assert_eq!(r.dropped(h(b"d"), true), Some(Done::Incomplete { name: Vec::new() }));
        assert_eq!(r.pending(), 0);
    }

    #[test]
    fn a_file_in_one_part_is_whole_unless_something_of_it_came_before() {
        let mut r = Reassembler::new();
        let (a, b) = (b"a".as_slice(), b"b".as_slice());
        assert!(r.is_whole_file(a, h(a), -1, true));
        assert!(r.is_whole_file(a, h(a), 0, true));
        assert!(!r.is_whole_file(a, h(a), -1, false), "more parts follow");
        assert!(!r.is_whole_file(a, h(a), 5, true), "a part further into the file");
        r.push(a, h(a), -1, b"1", false);
        assert!(!r.is_whole_file(a, h(a), -1, true), "the end of a file in progress");
        assert!(r.is_whole_file(b, h(b), -1, true));
        r.dropped(h(b), false);
        assert!(!r.is_whole_file(b, h(b), -1, true), "its first chunk was lost");
    }

    /// A binary dump file of one fp16 input (`n` values) and one fp32 output, and where its header ends.
    fn dump_file(n: usize) -> (Vec<u8>, usize) {
        use accutrace_proto::dumpdata::{DumpData, OpInput, OpOutput};
        let header = DumpData {
            op_name: "add".into(),
            input: vec![OpInput { data_type: 1, ..Default::default() }],
            output: vec![OpOutput { data_type: 0, ..Default::default() }],
            ..Default::default()
        };
        let a: Vec<u8> = (0..n * 2).map(|i| (i * 7 % 61) as u8).collect();
        let b: Vec<u8> = (0..12).map(|i| i as u8).collect();
        let file = accutrace_formats::dump::encode_dump(&header, &[&a], &[&b], &[], &[]).unwrap();
        let header_end = 8 + u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
        (file, header_end)
    }

    /// Pushes `file` in pieces cut at `cuts`, each at `offset(start)`, streamed; returns what the last gave.
    fn stream_in(
        r: &mut Reassembler,
        file: &[u8],
        cuts: &[usize],
        offset: impl Fn(usize) -> i64,
    ) -> Option<Done> {
        let n = b"/d/0/Add.add.3.2.100".as_slice();
        let mut at = 0;
        let mut done = None;
        for (i, &c) in cuts.iter().chain([&file.len()]).enumerate() {
            assert!(done.is_none(), "a file ended early");
            done = r.push_file(n, h(n), offset(at), &file[at..c], i == cuts.len(), |_| true);
            at = c;
        }
        done
    }

    #[test]
    fn a_streamed_file_ends_with_its_summaries() {
        let (file, header_end) = dump_file(3000);
        let whole = accutrace_formats::dump::parse_dump(&file).unwrap();
        let mut r = Reassembler::new();
        for offsets in [false, true] {
            let at = |start: usize| if offsets { start as i64 } else { -1 };
            match stream_in(&mut r, &file, &[5, header_end + 3, header_end + 4001], at) {
                Some(Done::Streamed { name, file: s }) => {
                    assert_eq!(name, b"/d/0/Add.add.3.2.100");
                    assert_eq!(s.header.header, whole.header);
                    let hashes: Vec<u64> = s.summaries.iter().map(|x| x.hash).collect();
                    assert_eq!(
                        hashes,
                        [content_hash(whole.inputs[0].bytes), content_hash(whole.outputs[0].bytes)]
                    );
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(r.pending(), 0);
    }

    fn content_hash(bytes: &[u8]) -> u64 {
        accutrace_formats::stats::content_hash(bytes)
    }

    #[test]
    fn a_stream_falls_back_to_reassembly_or_gives_up_never_guesses() {
        let (file, header_end) = dump_file(3000);
        let mut r = Reassembler::new();
        // Not a header: the file comes back whole, as the bytes were.
        let mut bad = file.clone();
        bad[8..12].copy_from_slice(&[0xFF; 4]);
        assert_eq!(complete(stream_in(&mut r, &bad, &[10, 600], |_| -1)).1, bad);
        // An offset out of order while only the first bytes were kept: reassembled from there on.
        let pieces = [(0usize, 4usize), (10, 20), (4, 10), (20, file.len())];
        let n = b"f.1.2.3".as_slice();
        let mut done = None;
        for (i, &(a, b)) in pieces.iter().enumerate() {
            done = r.push_file(n, h(n), a as i64, &file[a..b], i == 3, |_| true);
        }
        assert_eq!(complete(done).1, file);
        // The same once the header was read: the statistics cannot be redone, the file is incomplete.
        let cut = header_end + 100;
        assert!(r.push_file(n, h(n), 0, &file[..cut], false, |_| true).is_none());
        assert!(r.push_file(n, h(n), cut as i64 + 2, &file[cut + 2..cut + 10], false, |_| true).is_none());
        assert_eq!(
            r.push_file(n, h(n), -1, &file[cut + 10..], true, |_| true),
            Some(Done::Incomplete { name: n.to_vec() })
        );
        // A dropped chunk of a streamed file.
        assert!(r.push_file(n, h(n), -1, &file[..cut], false, |_| true).is_none());
        assert_eq!(r.dropped(h(n), false), None);
        assert_eq!(
            r.push_file(n, h(n), -1, &file[cut..], true, |_| true),
            Some(Done::Incomplete { name: n.to_vec() })
        );
        // A file shorter than its header declares.
        match stream_in(&mut r, &file[..file.len() - 1], &[header_end + 1], |_| -1) {
            Some(Done::Unparsed { error, .. }) => {
                assert!(error.to_string().contains("follow the header"), "{error}")
            }
            other => panic!("{other:?}"),
        }
        // A file that starts at a later offset is never streamed.
        let n2 = b"g.1.2.3".as_slice();
        assert!(r
            .push_file(n2, h(n2), 4, &file[4..], false, |_| panic!("not asked: not the start"))
            .is_none());
        let d = r.push_file(n2, h(n2), 0, &file[..4], true, |_| unreachable!());
        assert_eq!(complete(d).1, file);
        assert_eq!(r.pending(), 0);
    }

    #[test]
    fn finish_reports_every_partial_file() {
        let mut r = Reassembler::new();
        r.push(b"a", h(b"a"), -1, b"1", false);
        r.dropped(h(b"z"), false);
        let mut left = r.finish();
        left.sort_by(|x, y| format!("{x:?}").cmp(&format!("{y:?}")));
        assert_eq!(left, [Done::Incomplete { name: b"a".to_vec() }, Done::Incomplete { name: Vec::new() }]);
    }
}
