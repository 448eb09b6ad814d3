//! Slicing dump files into `acldumpChunk`s, interleaving the chunks of several files as the real dump
//! thread may (docs/CANN.md §3: chunks of one file arrive in order, files interleave).
//!
//! Kept free of threads and globals so the slicing and the interleaving order are unit-testable.

pub use ascend_sys::chunk::ChunkBuf;
use ascend_sys::ACLDUMP_CHUNK_HEADER_LEN;
use std::collections::VecDeque;

/// Default payload bytes per chunk.
pub const DEFAULT_CHUNK_SIZE: usize = 64 * 1024;

/// Files whose chunks are interleaved with each other at any time.
pub const INTERLEAVE_WINDOW: usize = 4;

/// `SIM_ACL_CHUNK_SIZE` (bytes, at least 1), else [`DEFAULT_CHUNK_SIZE`].
pub fn chunk_size_from_env() -> usize {
    std::env::var("SIM_ACL_CHUNK_SIZE")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0 && n <= i32::MAX as usize - ACLDUMP_CHUNK_HEADER_LEN)
        .unwrap_or(DEFAULT_CHUNK_SIZE)
}

/// A dump file waiting to be delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutFile {
    /// The path it has (or would have) on disk; what the chunks' `fileName` carries.
    pub path: std::path::PathBuf,
    pub bytes: Vec<u8>,
}

struct Pending {
    name: Vec<u8>,
    bytes: Vec<u8>,
    pos: usize,
}

/// Round-robin over the pending files: one chunk of each in turn, so files of different ops interleave
/// whenever more than one is pending and a file needs more than one chunk.
pub struct Interleaver {
    pending: VecDeque<Pending>,
    chunk_size: usize,
}

impl Interleaver {
    pub fn new(chunk_size: usize) -> Interleaver {
        Interleaver { pending: VecDeque::new(), chunk_size: chunk_size.max(1) }
    }

    pub fn push(&mut self, file: OutFile) {
        use std::os::unix::ffi::OsStrExt;
        let name = file.path.as_os_str().as_bytes().to_vec();
        self.pending.push_back(Pending { name, bytes: file.bytes, pos: 0 });
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Hands the next chunk (file name, payload, is-last) to `deliver`; false when nothing is pending.
    /// An empty file still yields one (empty, last) chunk, so its receiver learns that it exists.
    pub fn next_chunk(&mut self, deliver: impl FnOnce(&[u8], &[u8], bool)) -> bool {
        let Some(mut file) = self.pending.pop_front() else { return false };
        let end = (file.pos + self.chunk_size).min(file.bytes.len());
        let last = end == file.bytes.len();
        deliver(&file.name, &file.bytes[file.pos..end], last);
        file.pos = end;
        if !last {
            self.pending.push_back(file);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn round_robin_interleaves_and_reassembles() {
        let mut il = Interleaver::new(2);
        il.push(OutFile { path: PathBuf::from("a"), bytes: vec![1, 2, 3, 4, 5] });
        il.push(OutFile { path: PathBuf::from("b"), bytes: vec![6, 7, 8] });
        il.push(OutFile { path: PathBuf::from("c"), bytes: vec![] });
        let mut order = Vec::new();
        let mut files: std::collections::HashMap<Vec<u8>, Vec<u8>> = Default::default();
        while il.next_chunk(|name, data, last| {
            order.push((name.to_vec(), last));
            files.entry(name.to_vec()).or_default().extend_from_slice(data);
        }) {}
        let names: Vec<&[u8]> = order.iter().map(|(n, _)| n.as_slice()).collect();
        assert_eq!(names, [b"a", b"b", b"c", b"a", b"b", b"a"].map(|n| n.as_slice()));
        assert_eq!(order.iter().filter(|(_, last)| *last).count(), 3);
        assert_eq!(files[b"a".as_slice()], [1, 2, 3, 4, 5]);
        assert_eq!(files[b"b".as_slice()], [6, 7, 8]);
        assert!(files[b"c".as_slice()].is_empty());
    }
}
