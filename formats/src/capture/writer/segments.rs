//! The stream's segments: the current one sealed (its end published, flushed), the next opened after the
//! policy's evictions, and prepared ahead on a helper thread once the current one is half full.

use super::segment_files::{create_segment, prepare_segment};
use super::{OpenSegment, Preparation, StreamWriter, PREPARED_SEGMENT_FILE};
use crate::capture::segment::{self, SegmentHeader, HEADER_LEN};
use crate::capture::{now_us, segment_file_name, FORMAT_VERSION};
use crate::{FormatError, Result};
use memmap2::MmapMut;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

impl StreamWriter {
    /// Seals the current segment and opens the next one of `size` bytes.
    pub(super) fn roll(&mut self, size: u64) -> Result<()> {
        self.seal_current(false)?;
        self.open_segment(size)
    }

    pub(super) fn seal_current(&mut self, sync: bool) -> Result<()> {
        if let Some(mut seg) = self.seg.take() {
            segment::store_sealed_end(&mut seg.map, seg.pos);
            // At a roll, start the write-back without waiting; at the end, wait for it.
            let flushed = if sync { seg.map.flush() } else { seg.map.flush_async() };
            flushed.map_err(|e| FormatError::io(&seg.path, &e))?;
        }
        Ok(())
    }

    pub(super) fn open_segment(&mut self, size: u64) -> Result<()> {
        let sizes: Vec<u64> = self.live.iter().map(|&(_, s)| s).collect();
        for _ in 0..self.policy.evictions(&sizes, size) {
            if let Some((index, _)) = self.live.pop_front() {
                let path = self.dir.join(segment_file_name(index));
                std::fs::remove_file(&path).map_err(|e| FormatError::io(&path, &e))?;
                self.counts.segments_deleted += 1;
            }
        }
        let index = self.next_index;
        let path = self.dir.join(segment_file_name(index));
        let header = SegmentHeader {
            version: FORMAT_VERSION,
            segment_size: size,
            segment_index: index,
            stream_id: self.info.stream_id,
            created_unix_us: now_us(),
        }
        .encode();
        let map = match self.take_prepared(size).and_then(|map| self.publish_prepared(map, &path, &header)) {
            Some(map) => map,
            None => create_segment(&path, size, self.opts.preallocate, &header)?,
        };
        self.seg = Some(OpenSegment { map, path, index, pos: HEADER_LEN });
        self.live.push_back((index, size));
        self.next_index += 1;
        self.counts.segments_created += 1;
        self.strings.clear();
        self.op_in_segment = false;
        Ok(())
    }

    /// Once the current segment is half full, starts preparing the next one (of the configured size) on a
    /// helper thread, unless one is prepared already or recording has stopped. Not earlier: a stream that
    /// ends in the first half of a segment prepares nothing it would throw away. If the thread cannot be
    /// started, the roll creates the segment itself.
    pub(super) fn maybe_prepare(&mut self) {
        let half_full = self.seg.as_ref().is_some_and(|s| s.pos >= s.map.len() as u64 / 2);
        if !half_full || self.next.is_some() || self.policy.stopped() {
            return;
        }
        let path = self.dir.join(PREPARED_SEGMENT_FILE);
        let (size, preallocate) = (self.opts.segment_size, self.opts.preallocate);
        let cancel = Arc::new(AtomicBool::new(false));
        let stop = cancel.clone();
        let spawned = std::thread::Builder::new()
            .name("accutrace-segprep".into())
            .spawn(move || prepare_segment(&path, size, preallocate, &stop));
        if let Ok(thread) = spawned {
            self.next = Some(Preparation { size, cancel, thread });
        }
    }

    /// The prepared segment's mapping if it has `size` bytes (waiting for the helper if it is not done).
    /// None: none was prepared, preparing failed (the helper removed its file), or it has another size (a
    /// record larger than a segment): then it stays for a later roll.
    fn take_prepared(&mut self, size: u64) -> Option<MmapMut> {
        if self.next.as_ref()?.size != size {
            return None;
        }
        match self.next.take()?.thread.join() {
            Ok(Ok(map)) => Some(map),
            _ => None,
        }
    }

    /// Writes `header` into the prepared segment and renames it to `path`, after the previous segment was
    /// sealed: readers see the new segment only then, with its header. None (file removed): the caller
    /// creates the segment itself.
    fn publish_prepared(&self, mut map: MmapMut, path: &Path, header: &[u8]) -> Option<MmapMut> {
        let tmp = self.dir.join(PREPARED_SEGMENT_FILE);
        map[..HEADER_LEN as usize].copy_from_slice(header);
        // Never replace an existing segment (rename would): the synchronous path then reports it.
        let published = std::fs::symlink_metadata(path).is_err() && std::fs::rename(&tmp, path).is_ok();
        if !published {
            drop(map);
            let _ = std::fs::remove_file(&tmp);
            return None;
        }
        Some(map)
    }

    /// Stops the helper and removes the segment it prepared (at the end of the stream).
    pub(super) fn discard_preparation(&mut self) {
        if let Some(p) = self.next.take() {
            p.cancel.store(true, Ordering::Relaxed);
            if let Ok(Ok(map)) = p.thread.join() {
                drop(map);
                let _ = std::fs::remove_file(self.dir.join(PREPARED_SEGMENT_FILE));
            }
        }
    }
}
