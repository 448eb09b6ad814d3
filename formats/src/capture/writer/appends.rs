//! The records a stream writer appends: an op, its tensors (compressed here, or encoded already), overflow
//! records, statistics CSVs, step marks and collectives, each as the retention policy admits it. A tensor's
//! data is compressed straight into its frame when the record fits the segment's rest.

use super::{Appended, Msg, StreamWriter};
use crate::capture::collective::CollectiveInfo;
use crate::capture::encode::{pays, shuffle_width, EncodedData};
use crate::capture::record::{DataEncoding, OpInfo, OverflowInfo, StatsCsv, StepMark, TensorMeta};
use crate::capture::segment::{self, align8, FRAME_HEADER};
use crate::capture::MAX_HEAD;
use crate::histogram::Histogram;
use crate::stats::TensorStats;
use crate::{FormatError, Result};

impl StreamWriter {
    /// Appends an op record; the tensors appended after it belong to it.
    pub fn append_op(&mut self, op: &OpInfo) -> Result<Appended> {
        if !self.policy.admit_op(op.step) {
            self.op = None;
            self.counts.refused_after_stop += 1;
            return Ok(Appended::Stopped);
        }
        self.op = Some(op.clone());
        let r = self.append(Msg::Op(op, false), &[])?;
        self.op_in_segment = true;
        self.counts.ops += 1;
        Ok(r)
    }

    /// Appends a tensor of the current op: metadata, statistics, content hash, and optionally its raw bytes,
    /// byte-shuffled and compressed with zstd at `zstd_level` (stored raw when that saves under 1/32).
    ///
    /// Compresses here, inside the caller's hold on the writer. Writers shared between threads can encode
    /// first with [`DataEncoder::encode`] and append with [`append_tensor_encoded`](Self::append_tensor_encoded):
    /// the record is byte-identical.
    ///
    /// [`DataEncoder::encode`]: crate::capture::encode::DataEncoder::encode
    pub fn append_tensor(
        &mut self,
        meta: &TensorMeta,
        stats: &TensorStats,
        hash: u64,
        data: Option<&[u8]>,
        zstd_level: i32,
    ) -> Result<Appended> {
        self.append_tensor_with_histogram(meta, stats, None, hash, data, zstd_level)
    }

    /// [`append_tensor`](Self::append_tensor) with the tensor's histogram ([`crate::histogram`]), when one
    /// was computed.
    pub fn append_tensor_with_histogram(
        &mut self,
        meta: &TensorMeta,
        stats: &TensorStats,
        histogram: Option<&Histogram>,
        hash: u64,
        data: Option<&[u8]>,
        zstd_level: i32,
    ) -> Result<Appended> {
        let Some(raw) = data else {
            return self.append_tensor_encoded_with_histogram(meta, stats, histogram, hash, None);
        };
        if let Some(refused) = self.refuse_tensor()? {
            return Ok(refused);
        }
        let width = shuffle_width(meta.dtype);
        self.encoder.prepare(raw, width, zstd_level)?;
        // Common case: compress straight into the segment (no copy of the compressed bytes).
        if let Some(r) = self.append_zstd_in_place(meta, stats, histogram, hash, raw, width)? {
            return Ok(self.tensor_appended(r, meta, stats, raw.len() as u64));
        }
        let encoded = self.encoder.finish(raw, width, std::mem::take(&mut self.compressed))?;
        let r = self.append_tensor_encoded_with_histogram(meta, stats, histogram, hash, Some(&encoded));
        self.compressed = encoded.into_buffer();
        r
    }

    /// Appends a tensor of the current op whose data (if any) was encoded already, by [`DataEncoder::encode`]
    /// or [`encode_data`](crate::capture::encode_data): only frames and copies. Gives the same record as
    /// [`append_tensor`](Self::append_tensor) with the same raw bytes and zstd level.
    ///
    /// [`DataEncoder::encode`]: crate::capture::encode::DataEncoder::encode
    pub fn append_tensor_encoded(
        &mut self,
        meta: &TensorMeta,
        stats: &TensorStats,
        hash: u64,
        data: Option<&EncodedData<'_>>,
    ) -> Result<Appended> {
        self.append_tensor_encoded_with_histogram(meta, stats, None, hash, data)
    }

    /// [`append_tensor_encoded`](Self::append_tensor_encoded) with the tensor's histogram, when one was
    /// computed.
    pub fn append_tensor_encoded_with_histogram(
        &mut self,
        meta: &TensorMeta,
        stats: &TensorStats,
        histogram: Option<&Histogram>,
        hash: u64,
        data: Option<&EncodedData<'_>>,
    ) -> Result<Appended> {
        if let Some(refused) = self.refuse_tensor()? {
            return Ok(refused);
        }
        let (enc, size, payload): (DataEncoding, u64, &[u8]) = match data {
            None => (DataEncoding::None, 0, &[]),
            Some(d) => (d.encoding(), d.raw_len(), d.payload()),
        };
        let r = self.append(Msg::Tensor { meta, stats, histogram, hash, size, enc }, payload)?;
        if data.is_none() {
            self.counts.tensors += 1;
            self.policy.observe_tensor(stats.shows_overflow(meta.dtype));
            return Ok(r);
        }
        Ok(self.tensor_appended(r, meta, stats, size))
    }

    /// Some(Stopped) when the policy refuses tensors now (counted); an error without a preceding op.
    fn refuse_tensor(&mut self) -> Result<Option<Appended>> {
        if self.policy.stopped() {
            self.counts.refused_after_stop += 1;
            return Ok(Some(Appended::Stopped));
        }
        if self.op.is_none() {
            return Err(FormatError::whole("tensor record without a preceding op record"));
        }
        Ok(None)
    }

    /// Counts a tensor appended with data of `size` raw bytes; feeds the policy.
    fn tensor_appended(
        &mut self,
        r: Appended,
        meta: &TensorMeta,
        stats: &TensorStats,
        size: u64,
    ) -> Appended {
        self.counts.tensors += 1;
        self.counts.tensors_with_data += 1;
        self.counts.bytes_in += size;
        self.policy.observe_tensor(stats.shows_overflow(meta.dtype));
        r
    }

    /// The zstd path without the intermediate buffer: when the current segment holds the op, and the record
    /// with its worst-case compressed size fits the rest of the segment, the string definitions are written,
    /// zstd compresses the encoder's prepared planes directly into the frame's payload, then the head, CRC and commit word
    /// follow as in [`segment::write_frame`]. If compression does not pay, the record is stored raw in the same
    /// place (the compressed bytes are cleared first: space past the last frame stays zero).
    /// Ok(None): nothing was written or interned; the caller takes the buffered path.
    fn append_zstd_in_place(
        &mut self,
        meta: &TensorMeta,
        stats: &TensorStats,
        histogram: Option<&Histogram>,
        hash: u64,
        raw: &[u8],
        width: u32,
    ) -> Result<Option<Appended>> {
        if !self.op_in_segment || self.seg.is_none() || !self.encoder.is_prepared() {
            return Ok(None);
        }
        let size = raw.len() as u64;
        let bound = self.encoder.prepared_bound();
        let enc = DataEncoding::Zstd { shuffle_width: width };
        self.encode(&Msg::Tensor { meta, stats, histogram, hash, size, enc });
        let (pos, room) = match &self.seg {
            Some(s) => (s.pos, s.map.len() as u64 - s.pos),
            None => (0, 0),
        };
        let body = self.head.len() as u64 + bound as u64;
        if self.head.len() as u64 > MAX_HEAD || body > u64::from(u32::MAX) || self.needed(bound) > room {
            // Undo this attempt's interning: its definitions were not written.
            for (_, value) in &self.defs {
                self.strings.remove(value);
            }
            return Ok(None);
        }
        let frame = self.write_defs(pos);
        let Some(seg) = self.seg.as_mut() else {
            // Unreachable: checked at the top and nothing in between takes it.
            return Err(FormatError::whole("writer state lost its segment"));
        };
        let data_at = (frame + FRAME_HEADER) as usize + self.head.len();
        let out = &mut seg.map[data_at..data_at + bound];
        let compressed = match self.encoder.compress_prepared(&mut *out) {
            Ok(n) => n,
            Err(e) => {
                out.fill(0);
                seg.pos = frame;
                self.counts.bytes_out += frame - pos;
                return Err(e);
            }
        };
        if pays(compressed, raw.len()) {
            // zstd may leave bytes past its output (a block tried compressed, then stored raw): clear them, so
            // the frame's padding and the space past the last frame stay zero, as with a copied payload.
            seg.map[data_at + compressed..data_at + bound].fill(0);
            segment::write_frame_in_place(&mut seg.map, frame, &self.head, compressed);
            let needed = frame - pos + align8(FRAME_HEADER + self.head.len() as u64 + compressed as u64);
            seg.pos = pos + needed;
            let index = seg.index;
            self.counts.bytes_out += needed;
            self.maybe_prepare();
            return Ok(Some(Appended::Written { segment: index, offset: frame, bytes: needed }));
        }
        seg.map[data_at..data_at + bound].fill(0);
        // Stored raw: same strings (already defined just before `frame`), so no new definitions.
        seg.pos = frame;
        self.counts.bytes_out += frame - pos;
        let enc = DataEncoding::Raw;
        let r = self.append(Msg::Tensor { meta, stats, histogram, hash, size, enc }, raw)?;
        Ok(Some(match r {
            Appended::Written { segment, offset, bytes } => {
                Appended::Written { segment, offset, bytes: bytes + (frame - pos) }
            }
            stopped => stopped,
        }))
    }

    /// Appends an op-debug (overflow) record.
    pub fn append_overflow(&mut self, rec: &OverflowInfo) -> Result<Appended> {
        if self.policy.stopped() {
            self.counts.refused_after_stop += 1;
            return Ok(Appended::Stopped);
        }
        let r = self.append(Msg::Overflow(rec), &[])?;
        self.counts.overflow_records += 1;
        Ok(r)
    }

    /// Appends a statistics-mode CSV record.
    pub fn append_stats_csv(&mut self, rec: &StatsCsv) -> Result<Appended> {
        if self.policy.stopped() {
            self.counts.refused_after_stop += 1;
            return Ok(Appended::Stopped);
        }
        let r = self.append(Msg::Csv(rec), &[])?;
        self.counts.stats_csv_records += 1;
        Ok(r)
    }

    /// Appends a step boundary. Written even after a trigger stopped recording: it costs a few bytes and
    /// tells the reader how many steps the job ran.
    pub fn append_step_mark(&mut self, mark: &StepMark) -> Result<Appended> {
        let r = self.append(Msg::Mark(mark), &[])?;
        self.counts.step_marks += 1;
        Ok(r)
    }

    /// Appends an HCCL call. Written even after a trigger stopped recording (a few dozen bytes that keep
    /// the ranks' collective sequences whole).
    pub fn append_collective(&mut self, c: &CollectiveInfo) -> Result<Appended> {
        let r = self.append(Msg::Collective(c), &[])?;
        self.counts.collectives += 1;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::manifest::StreamInfo;
    use crate::capture::policy::Policy;
    use crate::capture::reader::{CaptureRun, Record};
    use crate::capture::record::{Io, OriginalOp};
    use crate::capture::test_noise;
    use std::path::Path;

    #[test]
    fn shuffle_buffer_and_zstd_context_reuse_across_sizes_and_levels_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let info = StreamInfo { stream_id: 1, rank: None, device: 0, pid: 1, host: String::new() };
        let mut w = StreamWriter::create(dir.path(), info, 1 << 20, Policy::KeepAll).unwrap();
        w.append_op(&OpInfo { name: "op".into(), ..Default::default() }).unwrap();
        // Large, small, large again, odd: a stale buffer tail or a wrong length would corrupt the data.
        let datas: Vec<Vec<u8>> = [40_000usize, 1_000, 40_002, 7]
            .iter()
            .map(|&n| (0..n).map(|i| ((i / 2) % 13) as u8 * ((i % 2) as u8)).collect())
            .collect();
        for (i, d) in datas.iter().enumerate() {
            let meta = TensorMeta {
                io: Io::Output,
                index: i as u32,
                dtype: crate::DType::FLOAT16,
                format: 2,
                sub_format: 0,
                device_shape: vec![d.len() as u64 / 2],
                original_shape: None,
                original_op: None,
            };
            let stats = TensorStats::default();
            // The level (and with it the zstd parameters) changes between tensors too.
            let level = [1, 3, 1, -1][i];
            w.append_tensor(&meta, &stats, crate::stats::content_hash(d), Some(d), level).unwrap();
        }
        w.seal().unwrap();
        let got: Vec<Vec<u8>> = tensors_read_back(dir.path()).into_iter().map(|t| t.2).collect();
        assert_eq!(got, datas);
    }

    /// Every tensor of the run in `dir`, read back: original op name, encoding, data.
    fn tensors_read_back(dir: &Path) -> Vec<(Option<String>, DataEncoding, Vec<u8>)> {
        let run = CaptureRun::open(dir).unwrap();
        let mut got = Vec::new();
        for rec in run.streams[0].records() {
            if let Record::Tensor(t) = rec.unwrap().record {
                let mut buf = Vec::new();
                t.read_data(&mut buf).unwrap();
                got.push((t.meta.original_op.map(|o| o.name.to_string()), t.encoding, buf));
            }
        }
        got
    }

    fn fp16_meta(index: u32, len: usize, original: Option<&str>) -> TensorMeta {
        TensorMeta {
            io: Io::Output,
            index,
            dtype: crate::DType::FLOAT16,
            format: 2,
            sub_format: 0,
            device_shape: vec![len as u64 / 2],
            original_shape: None,
            original_op: original.map(|n| OriginalOp { name: n.into(), output_index: 0 }),
        }
    }

    #[test]
    fn in_place_and_buffered_paths_keep_strings_data_and_zero_tail() {
        let dir = tempfile::tempdir().unwrap();
        let info = StreamInfo { stream_id: 1, rank: None, device: 0, pid: 1, host: String::new() };
        let seg = 64 << 10;
        let mut w = StreamWriter::create(dir.path(), info, seg, Policy::KeepAll).unwrap();
        w.append_op(&OpInfo { name: "op".into(), ..Default::default() }).unwrap();
        // 1: incompressible, in place -> stored raw where zstd wrote (its bytes cleared past the frame).
        // 2: compressible, its worst case does not fit the rest of the segment but its real size does: the
        //    buffered path, in the same segment, with a NEW string (interned once, defined once).
        // 3: compressible, in place, another new string.
        let names = [None, Some("fused_a"), Some("fused_b")];
        let mut datas = vec![test_noise(20_000, 7)];
        let mut where_ = Vec::new();
        for i in 0..3 {
            if i == 1 {
                // Just too large for the worst case (compress_bound > len) in the room left.
                let Some(&Appended::Written { offset, bytes, .. }) = where_.last() else { panic!() };
                let room = (seg - (offset + bytes)) as usize;
                datas.push(vec![0u8; (room - 100) & !1]);
                assert!(zstd::zstd_safe::compress_bound(room - 100) > room);
            }
            if i == 2 {
                datas.push(vec![1u8; 8_000]);
            }
            let d = &datas[i];
            let meta = fp16_meta(i as u32, d.len(), names[i]);
            let hash = crate::stats::content_hash(d);
            where_.push(w.append_tensor(&meta, &TensorStats::default(), hash, Some(d), 1).unwrap());
        }
        let segs: Vec<u64> = where_
            .iter()
            .map(|a| match a {
                Appended::Written { segment, .. } => *segment,
                Appended::Stopped => panic!("stopped"),
            })
            .collect();
        assert_eq!(segs, [0, 0, 0], "all in the first segment");
        let summary = w.seal().unwrap();
        assert_eq!(summary.counts.tensors_with_data, 3);
        let got = tensors_read_back(dir.path());
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].1, DataEncoding::Raw);
        assert_eq!(got[1].1, DataEncoding::Zstd { shuffle_width: 2 });
        assert_eq!(got[2].1, DataEncoding::Zstd { shuffle_width: 2 });
        for ((name, _, data), (want_name, want)) in got.iter().zip(names.iter().zip(&datas)) {
            assert_eq!(name.as_deref(), *want_name);
            assert_eq!(data, want);
        }
        // Everything past the sealed end is zero.
        let run = CaptureRun::open(dir.path()).unwrap();
        let file =
            std::fs::read(dir.path().join(run.streams[0].info().dir_name()).join("seg-000000.acc")).unwrap();
        let end = segment::sealed_end(&file) as usize;
        assert!(end > 64 && file[end..].iter().all(|&b| b == 0));
    }
}
