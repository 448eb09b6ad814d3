//! A tensor record's statistics by its place (segment, offset), read again from the segment file: an index
//! of a long statistics capture need not hold a copy of every tensor's statistics (#18: 64 of the 136 bytes
//! a tensor of every command's index), since the record keeps them next to where the index points.

use super::StreamReader;
use crate::capture::record::{decode_message, KIND_TENSOR};
use crate::capture::segment::frame_head_in;
use crate::stats::TensorStats;
use crate::Result;
use accutrace_proto::capture as pb;

/// The statistics field of `TensorRecord` alone: prost skips the record's other fields instead of
/// decoding them (the shapes' vectors, the histogram), which is most of a full decode's time.
#[derive(Clone, PartialEq, prost::Message)]
struct TensorRecordStats {
    /// `TensorRecord.stats`: the tag must stay the record's (a test holds them equal).
    #[prost(message, optional, tag = "10")]
    stats: Option<pb::Stats>,
}

impl StreamReader {
    /// The statistics of the tensor record at `offset` of segment `segment_index` (a place a
    /// [`RecordRef`](super::RecordRef) reported), as [`records`](Self::records) gives them: a record
    /// without statistics gives the default (no values). The frame's checksum is checked again. The head
    /// is read from the file (the record's first 4 KiB) where it fits, else from the mapping, whose pages
    /// then leave it with the next batch of releases, as a decode's payload does.
    pub fn tensor_stats_at(&self, segment_index: u64, offset: u64) -> Result<TensorStats> {
        if let Some(stats) = self.tensor_stats_read(segment_index, offset) {
            return Ok(stats);
        }
        let head = self.tensor_head_at(segment_index, offset)?;
        let r: TensorRecordStats = decode_message(head.message, "tensor")
            .map_err(|e| e.shifted(offset).in_file(&self.segments[head.seg].path))?;
        self.release_head_later(head.seg, offset, head.payload.0);
        Ok(r.stats.as_ref().map(TensorStats::from).unwrap_or_default())
    }
}

/// The bytes read from a record's place for its statistics: the frame's header and a head with a few shapes
/// and the statistics fit; a longer one is read through the mapping.
const HEAD_READ: usize = 4096;

impl StreamReader {
    /// [`tensor_stats_at`](Self::tensor_stats_at) from the record's first bytes read from the file, not the
    /// mapping: no page of it faults in with its neighbours, and none has to leave the mapping again (read
    /// for msprobe's table at the end of compare, on one thread while the others had nothing to do, the
    /// faults and `madvise` calls were about 18 ms of a 0.3 s run). `None` where the read fails or the
    /// bytes hold no valid tensor head ([`frame_head_in`]): the mapping's read then gives its error.
    fn tensor_stats_read(&self, segment_index: u64, offset: u64) -> Option<TensorStats> {
        use std::os::unix::fs::FileExt;
        let seg = self.segments.iter().find(|s| s.index == segment_index)?;
        let mut buf = [0u8; HEAD_READ];
        let n = seg.file.read_at(&mut buf, offset).ok()?;
        let (kind, message) = frame_head_in(&buf[..n], offset, seg.end)?;
        let r: TensorRecordStats =
            decode_message(&buf[message], "tensor").ok().filter(|_| kind == KIND_TENSOR)?;
        Some(r.stats.as_ref().map(TensorStats::from).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// Every tensor record's statistics read from the file are the mapping's, bit for bit; a head longer
    /// than [`HEAD_READ`] (a statistics-only tensor of 5,000 dimensions) is left to the mapping, which
    /// still gives its statistics.
    #[test]
    fn statistics_read_from_the_file_are_the_mappings() {
        use crate::capture::reader::Record;
        use crate::capture::record::{Io, OpInfo, TensorMeta};
        use crate::capture::writer::StreamWriter;
        use crate::capture::{Policy, StreamInfo};
        let dir = tempfile::tempdir().unwrap();
        let info = StreamInfo { stream_id: 1, rank: None, device: 0, pid: 1, host: String::new() };
        let mut w = StreamWriter::create(dir.path(), info, 64 << 10, Policy::KeepAll).unwrap();
        for k in 0..40u32 {
            w.append_op(&OpInfo { name: format!("op{k}"), ..Default::default() }).unwrap();
            let long = k == 17;
            let data: Vec<u8> = (0..2_000 + 100 * k).map(|i| (i * 31 + k) as u8).collect();
            let meta = TensorMeta {
                io: Io::Output,
                index: 0,
                dtype: crate::DType::FLOAT16,
                format: 2,
                sub_format: 0,
                device_shape: if long { vec![1; 5_000] } else { vec![data.len() as u64 / 2] },
                original_shape: None,
                original_op: None,
            };
            let stats =
                TensorStats { count: u64::from(k) + 1, min: -f64::from(k), max: 0.5, ..Default::default() };
            let stored = (!long).then_some(&data[..]);
            w.append_tensor(&meta, &stats, crate::stats::content_hash(&data), stored, 1).unwrap();
        }
        w.seal().unwrap();
        let dir = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).find(|p| p.is_dir());
        let stream = StreamReader::open(&dir.unwrap()).unwrap();
        let places: Vec<(u64, u64)> = stream
            .records()
            .map(|r| r.unwrap())
            .filter(|r| matches!(r.record, Record::Tensor(_)))
            .map(|r| (r.segment_index, r.offset))
            .collect();
        assert_eq!(places.len(), 40);
        assert!(places.iter().any(|p| p.0 > 0), "the test must cross segments");
        for (k, &(segment, offset)) in places.iter().enumerate() {
            let mapped = stream.tensor_head_at(segment, offset).unwrap();
            let whole: TensorRecordStats = decode_message(mapped.message, "tensor").unwrap();
            let whole = whole.stats.as_ref().map(TensorStats::from).unwrap();
            assert_eq!(whole.count, k as u64 + 1);
            let read = stream.tensor_stats_read(segment, offset);
            match k {
                17 => assert!(read.is_none(), "a head longer than a read is the mapping's"),
                _ => assert_eq!(format!("{read:?}"), format!("{:?}", Some(whole)), "{k}"),
            }
            assert_eq!(
                format!("{:?}", stream.tensor_stats_at(segment, offset).unwrap()),
                format!("{whole:?}")
            );
        }
    }

    #[test]
    fn the_view_reads_the_records_statistics_field() {
        let stats = pb::Stats { count: 7, nan: 1, zero: 2, min: -1.5, max: 3.0, ..pb::Stats::default() };
        let record = pb::TensorRecord {
            device_shape: vec![7],
            stats: Some(stats),
            content_hash: 9,
            ..pb::TensorRecord::default()
        };
        let view = TensorRecordStats::decode(&record.encode_to_vec()[..]).unwrap();
        assert_eq!(view.stats, Some(stats));
        let none = TensorRecordStats::decode(&pb::TensorRecord::default().encode_to_vec()[..]).unwrap();
        assert_eq!(none.stats, None);
    }
}
