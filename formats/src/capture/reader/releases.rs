//! Letting go of the pages a read has mapped: payloads once decoded, segments once walked, in batches of
//! ranges so that the TLB shootdowns of `madvise` stay few ([`Releases`]).

use super::{Segment, StreamReader};
use crate::Result;
use std::sync::PoisonError;

/// Bytes of segment ranges that decodes and [`StreamReader::release_tensor_data_at`] leave mapped before
/// they are let go of together ([`StreamReader::release_pending`]): per stream opened alone, and per run
/// for the streams of a [`CaptureRun`], which share it equally.
///
/// [`CaptureRun`]: super::CaptureRun
pub const RELEASE_BATCH: u64 = 4 << 20;

/// Ranges that reads leave waiting before they are let go of together, whatever their bytes.
const RELEASE_RANGES: usize = 256;

/// Ranges of one segment at most this far apart are let go of as one, with what lies between them (the next
/// record's head, the page two payloads share): the kernel's fault-around window, which read faults may have
/// mapped there anyway.
const RELEASE_JOIN_GAP: u64 = FAULT_AROUND_BYTES as u64;

/// Ranges of a stream's segments whose bytes have been read (decoded payloads, compared repeats), waiting
/// to leave the mapping together. Every `madvise` that unmaps pages ends with a TLB shootdown: an interrupt
/// to each other CPU that runs one of this process's threads, which on a VM is a trap per CPU. With one call
/// per tensor, madvise was 10% of an outputs-only diff's CPU on 2 vCPUs, 7 points of it those interrupts
/// (main `94da7a1`, both vCPUs running the diff). The ranges are let go of once they add up to a batch
/// ([`RELEASE_BATCH`], or a run's streams' share of it) or `RELEASE_RANGES` ranges, sorted, with neighbours
/// in one segment joined into one call; so at most that much more stays mapped than with a release per
/// read.
#[derive(Default)]
pub(super) struct Releases {
    /// (position of the segment in `segments`, start, end), in the order they came.
    ranges: Vec<(usize, u64, u64)>,
    /// Their lengths added up.
    bytes: u64,
}

impl StreamReader {
    /// Releases the pages of the tensor record at `offset` of segment `segment_index` from the mapping, as
    /// a decode does afterwards (in the same batches), with the neighbours the kernel mapped around them:
    /// for records whose payloads [`same_stored_data`](Self::same_stored_data) read. Records around a
    /// repeat are mostly repeats too, read and released earlier or never read, so what faults map around
    /// them would stay.
    pub fn release_tensor_data_at(&self, segment_index: u64, offset: u64) -> Result<()> {
        let (seg, stored) = self.stored_at(segment_index, offset)?;
        let (start, end) = self.segments[seg]
            .around(stored.payload_offset, stored.payload_offset + stored.payload.len() as u64);
        self.release_later(seg, start, end);
        Ok(())
    }

    /// Releases the pages of the record head at `start..end` of the segment at `seg` in `segments` (with
    /// what the kernel mapped around them) in the batches of the decodes: a head read again by its place
    /// ([`tensor_stats_at`](Self::tensor_stats_at)) does not leave the capture's records counted as resident
    /// once read through.
    pub(super) fn release_head_later(&self, seg: usize, start: u64, end: u64) {
        let (start, end) = self.segments[seg].around(start, end);
        self.release_later(seg, start, end);
    }

    /// Releases now what reads and [`release_tensor_data_at`](Self::release_tensor_data_at) left waiting
    /// for a full batch ([`RELEASE_BATCH`]).
    pub fn release_pending(&self) {
        let ranges = std::mem::take(&mut *self.releases());
        self.release_ranges(ranges);
    }

    /// Releases every page of every segment from this process's mapping (as [`records`](Self::records)
    /// does at each segment's end), for a caller that has no read in flight: pages the kernel mapped around
    /// the ones read, of records read and released before or never read, and the ranges waiting for a
    /// batch, go too.
    pub fn release_all(&self) {
        *self.releases() = Releases::default();
        for seg in &self.segments {
            seg.release(0, seg.map.len() as u64);
        }
    }

    /// The ranges waiting to be released. They are only ever pushed or taken whole under the lock, so a
    /// panic elsewhere while it was held leaves them usable.
    fn releases(&self) -> std::sync::MutexGuard<'_, Releases> {
        self.releases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Releases `start..end` of the segment at `seg` in `segments` (its pages wholly inside) with the ranges
    /// waiting before it, once they make a batch ([`Releases`]); until then they stay mapped.
    pub(super) fn release_later(&self, seg: usize, start: u64, end: u64) {
        let batch = {
            let mut waiting = self.releases();
            if waiting.ranges.last() == Some(&(seg, start, end)) {
                // Reads in file order (statistics read again, record after record) name the same window
                // many times over: once is enough.
                return;
            }
            waiting.ranges.push((seg, start, end));
            waiting.bytes += end.saturating_sub(start);
            if waiting.bytes < self.release_batch && waiting.ranges.len() < RELEASE_RANGES {
                return;
            }
            std::mem::take(&mut *waiting)
        };
        self.release_ranges(batch);
    }

    /// Releases `ranges` with one call per run of ranges of a segment that lie at most `RELEASE_JOIN_GAP`
    /// apart: the pages between them go too (the records' heads, pages two payloads share, which a release
    /// of each payload alone would leave mapped).
    fn release_ranges(&self, mut waiting: Releases) {
        waiting.ranges.sort_unstable();
        let mut run: Option<(usize, u64, u64)> = None;
        for (seg, start, end) in waiting.ranges {
            match &mut run {
                Some((s, _, e)) if *s == seg && start <= e.saturating_add(RELEASE_JOIN_GAP) => {
                    *e = (*e).max(end)
                }
                _ => {
                    if let Some((s, a, b)) = run.replace((seg, start, end)) {
                        self.segments[s].release(a, b);
                    }
                }
            }
        }
        if let Some((s, a, b)) = run {
            self.segments[s].release(a, b);
        }
    }
}

impl Segment {
    /// Drops the mapped pages wholly inside `start..end` from this process's page tables, once the bytes
    /// there have been read (a tensor's payload decoded, a segment walked): a capture read from end to end
    /// would otherwise show every byte of it as the process's resident memory (file-backed, reclaimable, but what `top`, `time` and cluster
    /// schedulers report). The pages stay in the page cache; touching them again faults them back in
    /// with the same bytes. A failure only leaves the pages mapped.
    pub(super) fn release(&self, start: u64, end: u64) {
        let page = page_size();
        let first = (start as usize).div_ceil(page) * page;
        let last = (end as usize).min(self.map.len()) / page * page;
        if last > first {
            // SAFETY: MADV_DONTNEED's hazard is losing private modifications of a mapping. This mapping is a
            // read-only shared mapping of the file (`Mmap::map`), which holds no private pages: afterwards a
            // read of the range faults the file's own bytes back in from the page cache. The range is
            // page-aligned and inside the mapping, and no slice into it is lost (slices stay valid: the
            // mapping itself is not changed).
            let _ = unsafe {
                self.map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, last - first)
            };
        }
    }
}

impl Segment {
    /// `start..end` widened to every page the kernel may have mapped with it, for a
    /// [`release`](Self::release): a read fault maps the page cache's pages of the aligned window around
    /// the faulting page (Linux's fault-around, 64 KiB by default), so bytes read again after their
    /// neighbours were released bring those neighbours back into the mapping. Pages of other records
    /// released with them while another thread reads them fault back in with the same bytes.
    fn around(&self, start: u64, end: u64) -> (u64, u64) {
        // The windows are aligned in the address space, not in the file.
        let window = FAULT_AROUND_BYTES.max(page_size()) as u64;
        let base = self.map.as_ptr() as u64 % window;
        let first = ((base + start) / window * window).saturating_sub(base);
        (first, ((base + end).div_ceil(window) * window).saturating_sub(base))
    }
}

/// The window Linux's read faults map around the faulting page by default (`fault_around_bytes`).
const FAULT_AROUND_BYTES: usize = 64 << 10;

/// The size of a memory page (4 KiB on x86_64, often 64 KiB on aarch64 servers).
fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf with a valid name has no preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(size).ok().filter(|s| s.is_power_of_two()).unwrap_or(64 * 1024)
    })
}
