//! Opening a run and its streams: each segment file mapped under its shared lock and its header checked,
//! and where the records of the last, unsealed one end (the stream's [`TornTail`]).

use super::releases::RELEASE_BATCH;
use super::{CaptureRun, Segment, StreamReader, TornTail};
use crate::capture::manifest::{read_json, Manifest, StreamInfo, MANIFEST_FILE, STREAM_FILE};
use crate::capture::segment::{self, Frame, SegmentHeader, HEADER_LEN};
use crate::capture::{parse_segment_file_name, trim_lock};
use crate::{FormatError, Result};
use memmap2::Mmap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

impl CaptureRun {
    /// Opens every stream directory (a directory holding `stream.json`) of `dir`.
    pub fn open(dir: &Path) -> Result<CaptureRun> {
        let manifest = if dir.join(MANIFEST_FILE).exists() { Some(Manifest::read(dir)?) } else { None };
        let mut streams = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| FormatError::io(dir, &e))? {
            let path = entry.map_err(|e| FormatError::io(dir, &e))?.path();
            if path.join(STREAM_FILE).is_file() {
                streams.push(StreamReader::open(&path)?);
            }
        }
        streams.sort_by_key(|s| s.info.stream_id);
        // One batch of releases for the run, shared among its streams: a stream read early in a diff
        // would otherwise keep up to a batch mapped until the end, as would every other (a capture of 64
        // ranks is 64 streams). Where the share falls below a payload, each read is released at once, as
        // before batches.
        let share = RELEASE_BATCH / streams.len().max(1) as u64;
        for stream in &mut streams {
            stream.release_batch = share;
        }
        Ok(CaptureRun { dir: dir.to_path_buf(), manifest, streams })
    }
}

impl StreamReader {
    /// Maps the segments of a stream directory and checks their headers; finds the torn tail.
    pub fn open(dir: &Path) -> Result<StreamReader> {
        let info: StreamInfo = read_json(&dir.join(STREAM_FILE))?;
        let mut files: Vec<(u64, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| FormatError::io(dir, &e))? {
            let path = entry.map_err(|e| FormatError::io(dir, &e))?.path();
            if let Some(index) = path.file_name().and_then(|n| n.to_str()).and_then(parse_segment_file_name) {
                files.push((index, path));
            }
        }
        // A gap in the indices (a lost segment) is not an error here: segments are self-contained, so the
        // others are read, and `capture::completeness` reports what is missing.
        files.sort();
        let mut segments = Vec::new();
        let mut torn_tail = None;
        let last = files.len().saturating_sub(1);
        for (i, (index, path)) in files.into_iter().enumerate() {
            let file = std::fs::File::open(&path).map_err(|e| FormatError::io(&path, &e))?;
            // Before the length is taken: a writer sealing the stream cuts the last segment only while no
            // reader holds this lock (trim_lock), and the lock lasts as long as the segment is mapped.
            trim_lock::hold_for_reading(&file);
            // SAFETY: the mapping is read-only. Segments are append-only files that no one truncates while
            // they are read (the one cut, at the seal, waits for the lock taken above); a live writer (possibly
            // in another process) only writes past the committed frames, and the words it races on (commit
            // word, sealed end) are read atomically (segment.rs).
            let map = unsafe { Mmap::map(&file) }.map_err(|e| FormatError::io(&path, &e))?;
            match open_segment(&map, index, i == last) {
                Ok((end, sealed, tail)) => {
                    if let Some((offset, reason)) = tail {
                        torn_tail = Some(TornTail { segment: path.clone(), offset, reason });
                    }
                    segments.push(Segment { path, index, map, end, sealed, _lock: file });
                }
                Err(e) => return Err(e.in_file(&path)),
            }
        }
        if segments.is_empty() {
            torn_tail = Some(TornTail { segment: dir.to_path_buf(), offset: 0, reason: "no segment".into() });
        }
        Ok(StreamReader {
            dir: dir.to_path_buf(),
            info,
            segments,
            torn_tail,
            releases: Mutex::default(),
            release_batch: RELEASE_BATCH,
        })
    }

    /// Who wrote the stream.
    pub fn info(&self) -> &StreamInfo {
        &self.info
    }

    /// The stream directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The segment files, in order.
    pub fn segment_paths(&self) -> impl Iterator<Item = &Path> {
        self.segments.iter().map(|s| s.path.as_path())
    }

    /// The indices of the segments found, ascending (contiguous unless segments were lost).
    pub fn segment_indices(&self) -> impl Iterator<Item = u64> + '_ {
        self.segments.iter().map(|s| s.index)
    }

    /// Segment files longer than the size their header gives, with the bytes past it: nothing the writer
    /// made (it sizes each file exactly), so something was appended to the file after the capture.
    pub fn bytes_past_segment_size(&self) -> Vec<(&Path, u64)> {
        self.segments
            .iter()
            .filter_map(|s| {
                let size = SegmentHeader::decode(&s.map).ok().flatten()?.segment_size;
                let len = s.map.len() as u64;
                (len > size).then(|| (s.path.as_path(), len - size))
            })
            .collect()
    }

    /// Reads every byte of every mapped segment, up to the length the file had when it was mapped, and
    /// returns their sum: for tests that a segment stays readable while mapped (a file cut under a mapping
    /// faults with SIGBUS).
    #[doc(hidden)]
    pub fn sum_of_mapped_bytes(&self) -> u64 {
        self.segments.iter().flat_map(|s| s.map.iter()).map(|&b| u64::from(b)).sum()
    }

    /// Where the records end when the stream was not sealed (the writer died): the last segment and offset.
    pub fn torn_tail(&self) -> Option<&TornTail> {
        self.torn_tail.as_ref()
    }
}

/// Checks a segment's header and finds where its records end: (end, sealed, torn tail).
/// A segment's extent: (end of its records, sealed, torn tail (offset, why)).
type Extent = (u64, bool, Option<(u64, String)>);

fn open_segment(map: &[u8], index: u64, last: bool) -> Result<Extent> {
    let header = match SegmentHeader::decode(map) {
        Ok(Some(h)) => h,
        // A header that was never completely written: only the creation of the last segment was torn.
        Ok(None) | Err(_) if last && map.iter().skip(HEADER_LEN as usize).all(|&b| b == 0) => {
            return Ok((HEADER_LEN, false, Some((0, "segment header never completed".into()))));
        }
        // Not the last segment: the collector wrote this one whole before it began the next.
        Ok(None) if map.iter().all(|&b| b == 0) => {
            let what = if map.is_empty() {
                "is empty".to_string()
            } else {
                format!("holds only zeros ({} bytes)", map.len())
            };
            return Err(FormatError::at(
                0,
                format!(
                    "the file {what}, but the collector wrote it whole before it began the next segment: it \
                     was cut or zeroed after the collector closed it (a copy that did not finish, a full disk); \
                     copy the capture again"
                ),
            ));
        }
        Ok(None) => return Err(FormatError::at(0, "segment header is zero but records follow")),
        Err(e) => return Err(e),
    };
    if header.segment_index != index {
        return Err(FormatError::at(
            24,
            format!("header says segment {} but the file name {index}", header.segment_index),
        ));
    }
    let file_len = map.len() as u64;
    let sealed_end = segment::sealed_end(map);
    if sealed_end != 0 {
        if sealed_end < HEADER_LEN || sealed_end > header.segment_size {
            return Err(FormatError::at(
                56,
                format!(
                    "sealed end {sealed_end} outside the segment ({} bytes): the header is damaged",
                    header.segment_size
                ),
            ));
        }
        if sealed_end > file_len {
            // The writer sealed more than the file now holds: the file was cut after it was closed.
            return Err(FormatError::at(
                56,
                format!(
                    "the file holds {file_len} bytes but was sealed at {sealed_end}: it was cut short after \
                     the collector closed it (a copy that did not finish, a full disk); copy the capture again"
                ),
            ));
        }
        return Ok((sealed_end, true, None));
    }
    if !last {
        return Err(FormatError::at(56, "segment is not sealed but later segments exist"));
    }
    // The open segment of a killed writer: walk the frames to the first position that is not one.
    let limit = header.segment_size.min(file_len);
    let mut pos = HEADER_LEN;
    loop {
        match segment::frame_at(map, pos, limit) {
            Frame::Valid { next, .. } => pos = next,
            Frame::Empty => return tail(map, pos, limit, "no record committed here".into()),
            Frame::Bad(why) => return tail(map, pos, limit, why),
        }
    }
}

/// The records of an open segment end at `pos`. That is a torn tail unless a valid frame follows, which
/// means data was lost in the middle: corruption.
fn tail(map: &[u8], pos: u64, limit: u64, why: String) -> Result<Extent> {
    let mut probe = pos + 8;
    while probe + segment::FRAME_HEADER <= limit {
        let word = &map[probe as usize..probe as usize + 4];
        if word != [0, 0, 0, 0] && matches!(segment::frame_at(map, probe, limit), Frame::Valid { .. }) {
            return Err(FormatError::at(
                pos,
                format!("corrupt record ({why}) before the committed record at {probe}"),
            ));
        }
        probe += 8;
    }
    Ok((pos, false, Some((pos, why))))
}
