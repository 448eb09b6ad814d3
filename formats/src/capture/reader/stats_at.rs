//! A tensor record's statistics by its place (segment, offset), read again from the mapping: an index of a
//! long statistics capture need not hold a copy of every tensor's statistics (#18: 64 of the 136 bytes a
//! tensor of every command's index), since the record keeps them, mapped, next to where the index points.

use super::StreamReader;
use crate::capture::record::decode_message;
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
    /// without statistics gives the default (no values). The frame's checksum is checked again; the head's
    /// pages leave the mapping with the next batch of releases, as a decode's payload does.
    pub fn tensor_stats_at(&self, segment_index: u64, offset: u64) -> Result<TensorStats> {
        let head = self.tensor_head_at(segment_index, offset)?;
        let r: TensorRecordStats = decode_message(head.message, "tensor")
            .map_err(|e| e.shifted(offset).in_file(&self.segments[head.seg].path))?;
        self.release_head_later(head.seg, offset, head.payload.0);
        Ok(r.stats.as_ref().map(TensorStats::from).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

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
