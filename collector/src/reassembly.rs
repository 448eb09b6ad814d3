//! Putting dump files back together from their chunks. Chunks of one file arrive in order; chunks of
//! different files interleave, so partial files are keyed by the chunk's `fileName`. `isLastChunk` ends a
//! file. Offsets: -1 appends (what the producer sends); a non-negative offset writes at that position.
//!
//! Dropped chunks (queue full under the `drop` policy) reach us as notes carrying the name's hash: their
//! file is marked incomplete and reported, not parsed, when it ends. Pure logic, no threads or I/O.

use std::collections::{HashMap, HashSet};

/// Largest forward jump of an explicit offset that is filled with zeros; beyond it the file is given up
/// as incomplete instead of allocating whatever an offset says.
pub const MAX_GAP: u64 = 64 << 20;

struct Partial {
    hash: u64,
    bytes: Vec<u8>,
    incomplete: bool,
}

/// A finished file.
#[derive(Debug, PartialEq, Eq)]
pub enum Done {
    /// Every chunk arrived: the file's bytes.
    Complete { name: Vec<u8>, bytes: Vec<u8> },
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
}

impl Reassembler {
    pub fn new() -> Self {
        Self::default()
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
        if !self.files.contains_key(name) {
            let incomplete = self.doomed.remove(&hash);
            let mut bytes = self.spare.pop().unwrap_or_default();
            bytes.clear();
            self.files.insert(name.to_vec(), Partial { hash, bytes, incomplete });
        }
        let p = self.files.get_mut(name)?;
        if !p.incomplete {
            let len = p.bytes.len() as u64;
            // Memory the process cannot have (`ulimit -v`) loses this file (counted), not the job.
            let stored = match u64::try_from(offset) {
                Err(_) if offset == ascend_sys::ACLDUMP_OFFSET_APPEND => {
                    let room = p.bytes.try_reserve(data.len()).is_ok();
                    if room {
                        p.bytes.extend_from_slice(data);
                    }
                    room
                }
                Ok(at) if at <= len.saturating_add(MAX_GAP) => {
                    let (at, end) = (at as usize, at as usize + data.len());
                    let room = grow_to(&mut p.bytes, end);
                    if room {
                        p.bytes[at..end].copy_from_slice(data);
                    }
                    room
                }
                _ => false,
            };
            p.incomplete = !stored;
        }
        if !last {
            return None;
        }
        let (name, p) = self.files.remove_entry(name)?;
        Some(if p.incomplete {
            self.spare.push(p.bytes);
            Done::Incomplete { name }
        } else {
            Done::Complete { name, bytes: p.bytes }
        })
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
                self.spare.push(p.bytes);
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
