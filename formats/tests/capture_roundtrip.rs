//! Capture format: every record kind written and read back, arbitrary records (property test), the
//! statistics-mode size bound, retention policies through the writer, and corruption reporting.

use accutrace_formats::capture::*;
use accutrace_formats::histogram::{Histogram, HistogramAccumulator};
use accutrace_formats::stats::{content_hash, TensorStats};
use accutrace_formats::DType;
use half::f16;
use proptest::prelude::*;
use std::path::Path;
use std::sync::Arc;

fn info(id: u32) -> StreamInfo {
    StreamInfo { stream_id: id, rank: Some(id), device: id as i32, pid: 1000 + id, host: "test".into() }
}

fn op(step: u64, name: &str) -> OpInfo {
    OpInfo {
        name: name.into(),
        op_type: "MatMulV2".into(),
        step,
        task_id: 7 + step as u32,
        stream_id: 2,
        timestamp_us: 1_700_000_000_000_000 + step,
        dump_file: format!("MatMulV2.{name}.{}.2.{}", 7 + step, 1_700_000_000_000_000 + step),
        original_names: vec![format!("{name}_orig_a"), format!("{name}_orig_b")],
        dump_number: None,
        step_source: StepSource::Model,
    }
}

fn meta(io: Io, index: u32, dtype: DType, shape: &[u64], original: Option<(&str, u32)>) -> TensorMeta {
    TensorMeta {
        io,
        index,
        dtype,
        format: 2,
        sub_format: 0,
        device_shape: shape.to_vec(),
        original_shape: None,
        original_op: original.map(|(n, i)| OriginalOp { name: Arc::from(n), output_index: i }),
    }
}

/// Activation-like fp16 bytes: smooth values, a few exact zeros.
fn fp16_activations(n: usize, seed: u64) -> Vec<u8> {
    (0..n)
        .flat_map(|i| {
            let x = ((i as f32 * 0.013 + seed as f32).sin() * 3.0).max(0.0);
            f16::from_f32(x).to_bits().to_le_bytes()
        })
        .collect()
}

/// Incompressible bytes (xorshift).
fn noise(n: usize, mut s: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq)]
enum Expect {
    Op(OpInfo),
    Tensor(TensorMeta, TensorStats, u64, Option<Vec<u8>>),
    Overflow(OverflowInfo),
    Csv(StatsCsv),
    Mark(StepMark),
    Collective(CollectiveInfo),
}

fn write_all(w: &mut StreamWriter, records: &[Expect], level: i32) {
    for r in records {
        let a = match r {
            Expect::Op(o) => w.append_op(o),
            Expect::Tensor(m, s, h, d) => w.append_tensor(m, s, *h, d.as_deref(), level),
            Expect::Overflow(o) => w.append_overflow(o),
            Expect::Csv(c) => w.append_stats_csv(c),
            Expect::Mark(m) => w.append_step_mark(m),
            Expect::Collective(c) => w.append_collective(c),
        };
        assert!(matches!(a.unwrap(), Appended::Written { .. }));
    }
}

fn read_back(stream: &StreamReader) -> Vec<Expect> {
    let mut out = Vec::new();
    let mut last_op: Option<Arc<OpInfo>> = None;
    for r in stream.records() {
        let r = r.unwrap();
        out.push(match r.record {
            Record::Op(o) => {
                last_op = Some(o.clone());
                Expect::Op((*o).clone())
            }
            Record::Tensor(t) => {
                assert_eq!(Some(&t.op), last_op.as_ref(), "a tensor carries its op");
                let data = t.has_data().then(|| {
                    let mut buf = Vec::new();
                    t.read_data(&mut buf).unwrap();
                    buf
                });
                Expect::Tensor(t.meta.clone(), t.stats, t.content_hash, data)
            }
            Record::Overflow(o) => Expect::Overflow(o),
            Record::StatsCsv(c) => Expect::Csv(c),
            Record::StepMark(m) => Expect::Mark(m),
            Record::Collective(c) => Expect::Collective(c),
            Record::Unknown { kind } => panic!("unknown kind {kind}"),
        });
    }
    out
}

/// NaN-tolerant equality of statistics (NaN min/max/mean are the "no finite value" marker).
fn same(a: &[Expect], b: &[Expect]) -> bool {
    let norm = |v: &[Expect]| -> Vec<Expect> {
        v.iter()
            .cloned()
            .map(|e| match e {
                Expect::Tensor(mut m, mut s, h, d) => {
                    for x in [&mut s.min, &mut s.max, &mut s.mean, &mut s.l2_norm] {
                        if x.is_nan() {
                            *x = 1234.5;
                        }
                    }
                    if m.original_shape.as_ref() == Some(&m.device_shape) {
                        m.original_shape = None;
                    }
                    Expect::Tensor(m, s, h, d)
                }
                e => e,
            })
            .collect()
    };
    norm(a) == norm(b)
}

fn tensor(m: TensorMeta, data: &[u8], keep: bool) -> Expect {
    let stats = TensorStats::of_bytes(m.dtype, data).unwrap_or_default();
    Expect::Tensor(m, stats, content_hash(data), keep.then(|| data.to_vec()))
}

fn only_stream(dir: &Path) -> StreamReader {
    let mut run = CaptureRun::open(dir).unwrap();
    assert_eq!(run.streams.len(), 1);
    run.streams.remove(0)
}

/// Every tensor record of a stream, in stream order, with its segment index and frame offset.
fn tensors_where(stream: &StreamReader) -> Vec<(u64, u64, CapturedTensor<'_>)> {
    stream
        .records()
        .filter_map(|r| {
            let r = r.unwrap();
            match r.record {
                Record::Tensor(t) => Some((r.segment_index, r.offset, t)),
                _ => None,
            }
        })
        .collect()
}

/// An HCCL call of every kind in turn, some with buffers read and some without.
fn collective(step: u64) -> Expect {
    let op = CollectiveOp::ALL[step as usize % CollectiveOp::ALL.len()];
    let values: Vec<u8> = fp16_activations(64, step);
    let summary = BufferSummary {
        stats: TensorStats::of_bytes(DType::FLOAT16, &values).unwrap(),
        content_hash: content_hash(&values),
        size: values.len() as u64,
    };
    Expect::Collective(CollectiveInfo {
        comm: format!("root-{:016x}", step % 2),
        comm_rank: 3,
        comm_size: 8,
        seq: step / 2,
        op,
        count: 64,
        dtype: 3,
        reduce_op: step.is_multiple_of(3).then_some(2),
        peer: op.is_point_to_point().then_some(5),
        input: (step % 4 != 1).then_some(summary),
        output: (step % 4 != 2).then_some(summary),
        start_us: 1_700_000_000_000_000 + step,
        end_us: 1_700_000_000_000_100 + step,
        result: (step % 5) as i32,
    })
}

#[test]
fn every_record_kind_round_trips_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(0), 32 * 1024, Policy::KeepAll).unwrap();
    let mut expect = Vec::new();
    for step in 0..40u64 {
        expect.push(Expect::Op(op(step, &format!("layer{}/matmul", step % 3))));
        let mut m = meta(Io::Input, 0, DType::FLOAT16, &[4, 300], None);
        m.original_shape = Some(vec![1200]);
        expect.push(tensor(m, &fp16_activations(1200, step), true));
        expect.push(tensor(meta(Io::Input, 1, DType::FLOAT, &[64], None), &noise(256, step + 1), true));
        expect.push(tensor(
            meta(Io::Output, 0, DType::BF16, &[2, 3, 16], Some(("orig/matmul", 1))),
            &fp16_activations(96, step),
            false,
        ));
        if step % 7 == 0 {
            let payload = noise(2048, step);
            expect.push(Expect::Overflow(OverflowInfo {
                step,
                task_id: 3,
                stream_id: 2,
                timestamp_us: 5,
                dump_file: "Opdebug.Node_OpDebug.3.2.5".into(),
                payload,
            }));
            expect.push(Expect::Csv(StatsCsv {
                step,
                dump_file: "x.csv".into(),
                csv: b"Input/Output,Index\nInput,0\n".to_vec(),
            }));
        }
        expect.push(collective(step));
    }
    // A tensor larger than a segment gets a segment of its own.
    expect.push(Expect::Op(op(40, "big")));
    expect.push(tensor(meta(Io::Output, 0, DType::FLOAT, &[20000], None), &noise(80_000, 9), true));
    expect.push(tensor(meta(Io::Output, 1, DType::FLOAT, &[1], None), &noise(4, 9), true));
    write_all(&mut w, &expect, 1);
    let summary = w.seal().unwrap();
    assert!(summary.sealed);
    assert!(summary.counts.segments_created > 3, "the test must cross segments");
    assert_eq!(summary.counts.tensors, 122);

    let stream = only_stream(dir.path());
    assert_eq!(stream.torn_tail(), None);
    assert_eq!(stream.info(), &info(0));
    let got = read_back(&stream);
    assert_eq!(got.len(), expect.len());
    assert!(same(&got, &expect), "records differ");
    // The last segment is cut at its sealed end, below the size its header gives; the ones before it keep
    // their size.
    let paths: Vec<&Path> = stream.segment_paths().collect();
    let sizes: Vec<u64> = paths.iter().map(|p| std::fs::metadata(p).unwrap().len()).collect();
    let (last, full) = sizes.split_last().unwrap();
    let header = std::fs::read(paths[paths.len() - 1]).unwrap();
    let header_size = u64::from_le_bytes(header[16..24].try_into().unwrap());
    assert!(*last < header_size && *last % 8 == 0, "last segment {last} bytes of {header_size}");
    assert!(full.iter().all(|&s| s >= 32 * 1024), "{sizes:?}");
}

/// A tensor record's statistics read again by its place, after the walk released its pages, are the ones the
/// walk gave, bit for bit, for tensors with data and without (a statistics capture), across segments; a place
/// that holds no tensor record is refused, naming it.
#[test]
fn statistics_read_by_place_are_the_walks() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(0), 64 * 1024, Policy::KeepAll).unwrap();
    let mut expect = Vec::new();
    for step in 0..40u64 {
        expect.push(Expect::Op(op(step, "layer/matmul")));
        // Noise: little compresses, so the segments fill and roll.
        let data = noise(4_096 + 256 * step as usize, step);
        let n = data.len() as u64 / 2;
        expect.push(tensor(meta(Io::Input, 0, DType::FLOAT16, &[n], None), &data, step % 2 == 0));
        expect.push(tensor(meta(Io::Output, 0, DType::FLOAT16, &[n], None), &noise(64, step), false));
    }
    write_all(&mut w, &expect, 1);
    assert!(w.seal().unwrap().counts.segments_created > 2, "the test must cross segments");
    let stream = only_stream(dir.path());
    let tensors = tensors_where(&stream);
    assert_eq!(tensors.len(), 80);
    let bits = |s: &TensorStats| {
        let floats = [s.min, s.max, s.mean, s.l2_norm, s.abs_sum.unwrap_or(-1.0)].map(f64::to_bits);
        ([s.count, s.nan, s.pos_inf, s.neg_inf, s.zero, s.at_saturation], floats)
    };
    for (segment, offset, t) in tensors.iter().rev() {
        let again = stream.tensor_stats_at(*segment, *offset).unwrap();
        assert_eq!(bits(&again), bits(&t.stats), "segment {segment} offset {offset}");
        assert!(t.stats.count > 0, "the records hold statistics");
    }
    let first_op = stream.records().next().unwrap().unwrap();
    let err = stream.tensor_stats_at(first_op.segment_index, first_op.offset).unwrap_err().to_string();
    assert!(err.contains("is not a tensor") && err.contains("seg-000000.acc"), "{err}");
    let err = stream.tensor_stats_at(0, 12).unwrap_err().to_string();
    assert!(err.contains("no record starts here"), "{err}");
    let err = stream.tensor_stats_at(99, 64).unwrap_err().to_string();
    assert!(err.contains("no segment 99"), "{err}");
}

/// A walk from an op record's place (a segment's position and an offset in it) yields the same records as
/// the whole walk from there on, with the strings its segment defined before it; tensor records passed over
/// undecoded come in their places, counted as tensors.
#[test]
fn a_walk_from_an_op_record_and_a_walk_passing_tensors_keep_their_places() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(0), 32 * 1024, Policy::KeepAll).unwrap();
    let mut expect = Vec::new();
    for step in 0..30u64 {
        expect.push(Expect::Op(op(step, &format!("layer{}/matmul", step % 3))));
        expect.push(tensor(
            meta(Io::Input, 0, DType::FLOAT, &[1024], Some(("orig", 0))),
            &noise(4096, step),
            true,
        ));
        expect.push(tensor(meta(Io::Output, 0, DType::FLOAT16, &[8], None), &noise(16, step), false));
        expect.push(collective(step));
    }
    write_all(&mut w, &expect, 1);
    assert!(w.seal().unwrap().counts.segments_created > 3, "the test must cross segments");
    let stream = only_stream(dir.path());
    let indices: Vec<u64> = stream.segment_indices().collect();
    let place = |r: &RecordRef<'_>| (indices.binary_search(&r.segment_index).unwrap(), r.offset);
    let whole: Vec<((usize, u64), String)> =
        stream.records().map(|r| r.unwrap()).map(|r| (place(&r), format!("{:?}", r.record))).collect();
    // Every op record not first in its segment: the walk from it skips frames and keeps the strings.
    let mut started = 0;
    for (i, (at, record)) in whole.iter().enumerate() {
        if !record.starts_with("Op(") || at.1 == whole.iter().find(|(p, _)| p.0 == at.0).unwrap().0 .1 {
            continue;
        }
        let from: Vec<((usize, u64), String)> = stream
            .records_from(at.0, at.1)
            .map(|r| r.unwrap())
            .map(|r| (place(&r), format!("{:?}", r.record)))
            .collect();
        assert_eq!(from, whole[i..], "from {at:?}");
        started += 1;
    }
    assert!(started > 10, "{started} walks");
    // Passing tensors: the same places; each tensor's kind in its place, after its op.
    let passed: Vec<RecordRef<'_>> = stream.records().passing_tensors().map(|r| r.unwrap()).collect();
    assert_eq!(
        passed.iter().map(place).collect::<Vec<_>>(),
        whole.iter().map(|(p, _)| *p).collect::<Vec<_>>()
    );
    let tensors =
        passed.iter().filter(|r| matches!(r.record, Record::Unknown { kind: record::KIND_TENSOR })).count();
    assert_eq!(tensors, 60);
    let mut tally = completeness::RecordTally::default();
    passed.iter().for_each(|r| tally.count(&r.record));
    assert_eq!((tally.ops, tally.tensors, tally.collectives), (30, 60, 30));
}

/// The reader drops the pages of each segment it has walked, and of each payload it has decoded, from its
/// mapping (`MADV_DONTNEED`): tensors whose records were returned before are still read back bit for bit
/// afterwards, in any order, as often as asked, through both the record and random access.
#[test]
fn tensor_data_reads_back_after_its_pages_were_released() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(0), 64 * 1024, Policy::KeepAll).unwrap();
    let mut written = Vec::new();
    let mut expect = Vec::new();
    for step in 0..24u64 {
        expect.push(Expect::Op(op(step, "layer/matmul")));
        // 12 to 36 KiB per tensor: payloads that span whole pages, several tensors per segment.
        let data = if step % 3 == 0 {
            noise(12_288 + 1024 * step as usize, step)
        } else {
            fp16_activations(6_144 + 512 * step as usize, step)
        };
        let dtype = if step % 3 == 0 { DType::UINT8 } else { DType::FLOAT16 };
        let n = data.len() as u64 / if dtype == DType::FLOAT16 { 2 } else { 1 };
        expect.push(tensor(meta(Io::Output, 0, dtype, &[n], None), &data, true));
        written.push(data);
    }
    write_all(&mut w, &expect, 1);
    assert!(w.seal().unwrap().counts.segments_created > 3, "the test must cross segments");
    let stream = only_stream(dir.path());
    // The whole walk first (every segment released at its end), the data after it, last tensor first.
    let tensors = tensors_where(&stream);
    assert_eq!(tensors.len(), written.len());
    let mut buf = Vec::new();
    for round in 0..2 {
        for ((segment, offset, t), data) in tensors.iter().zip(&written).rev() {
            t.read_data(&mut buf).unwrap();
            assert_eq!(&buf, data, "round {round}");
            // Random access decodes into a reused buffer and releases the payload's pages each time.
            stream.read_tensor_data_at_with(*segment, *offset, &mut buf, &mut Vec::new()).unwrap();
            assert_eq!(&buf, data, "round {round}, random access");
            // Block by block (raw data lent, zstd planes unshuffled per block, sizes that split elements),
            // the hash checked at the end; and with most blocks left for the reader to hash itself.
            for piece in [1000, 4096, 1 << 20] {
                let got = stream
                    .with_tensor_blocks_at(*segment, *offset, &mut Vec::new(), |blocks| {
                        let (mut got, mut tmp) = (Vec::new(), vec![0u8; piece]);
                        assert_eq!(blocks.len(), data.len());
                        while got.len() < blocks.len() {
                            got.extend_from_slice(blocks.next_block(&mut tmp));
                        }
                        got
                    })
                    .unwrap();
                assert_eq!(&got, data, "round {round}, blocks of {piece}");
            }
            let first = stream
                .with_tensor_blocks_at(*segment, *offset, &mut Vec::new(), |b| {
                    b.next_block(&mut [0; 10]).to_vec()
                })
                .unwrap();
            assert_eq!(first, data[..10]);
        }
    }
}

#[test]
fn a_small_capture_takes_little_disk() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(
        dir.path(),
        info(0),
        accutrace_formats::capture::DEFAULT_SEGMENT_SIZE,
        Policy::KeepAll,
    )
    .unwrap();
    let expect = vec![
        Expect::Op(op(0, "layer0/matmul")),
        tensor(meta(Io::Output, 0, DType::FLOAT16, &[4, 300], None), &fp16_activations(1200, 1), true),
    ];
    write_all(&mut w, &expect, 1);
    w.seal().unwrap();
    let stream = only_stream(dir.path());
    let bytes: u64 = stream.segment_paths().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    assert!(bytes < 8 * 1024, "one op and one 2.4 KB tensor take {bytes} bytes of a 64 MiB segment");
    assert!(same(&read_back(&stream), &expect), "records differ");
}

#[test]
fn data_encodings_are_chosen_and_offsets_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(3), 1 << 20, Policy::KeepAll).unwrap();
    w.append_op(&op(0, "a")).unwrap();
    let act = fp16_activations(4096, 1);
    let rnd = noise(4096, 2);
    let s = TensorStats::of_bytes(DType::FLOAT16, &act).unwrap();
    let Appended::Written { segment, offset, .. } = w
        .append_tensor(
            &meta(Io::Output, 0, DType::FLOAT16, &[4096], None),
            &s,
            content_hash(&act),
            Some(&act),
            1,
        )
        .unwrap()
    else {
        panic!()
    };
    w.append_tensor(
        &meta(Io::Output, 1, DType::FLOAT16, &[2048], None),
        &s,
        content_hash(&rnd),
        Some(&rnd),
        1,
    )
    .unwrap();
    w.seal().unwrap();
    let stream = only_stream(dir.path());
    let tensors = tensors_where(&stream);
    assert_eq!((tensors[0].0, tensors[0].1), (segment, offset));
    assert_eq!(tensors[0].2.encoding, DataEncoding::Zstd { shuffle_width: 2 });
    assert!(tensors[0].2.stored_size() < act.len() as u64 / 2);
    assert_eq!(tensors[1].2.encoding, DataEncoding::Raw, "incompressible data is stored raw");
    assert_eq!(tensors[1].2.stored_size(), rnd.len() as u64);
}

/// Statistics-mode record sizes `(worst tensor frame, mean per tensor, mean per tensor with the ops)` for 50
/// ops of realistic metadata: a 5-D NC1HWC0 device shape with a 4-D original shape, fusion provenance,
/// large counts, statistics with full-precision doubles, and with `histogram` a histogram of a normal
/// fp16 activation scaled to the tensor's count (what `ACCUTRACE_HISTOGRAM=1` adds). Every record is read
/// back.
fn statistics_mode_sizes(histogram: Option<&Histogram>) -> (u64, u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(0), 1 << 20, Policy::KeepAll).unwrap();
    let mut worst = 0;
    let mut total = 0;
    let mut tensors = 0;
    let mut ops_bytes = 0;
    let s = TensorStats {
        count: 802_816_000,
        nan: 0,
        pos_inf: 0,
        neg_inf: 0,
        zero: 12_345_678,
        min: -13.718_261_718_75,
        max: 65504.0,
        mean: 0.017_245_113_290_846_348,
        l2_norm: 83_920.238_412_903_2,
        abs_sum: Some(640_923_117.381_962_5),
        at_saturation: 17,
    };
    for step in 0..50u64 {
        let name =
            format!("Default/network/backbone/layer{}/conv2d-Conv2D/BatchNorm-op{}", step % 10, step % 10);
        let o = OpInfo {
            op_type: "Conv2D".into(),
            original_names: vec![name.clone(), format!("{name}/bias_add")],
            ..op(step, &name)
        };
        let Appended::Written { bytes, .. } = w.append_op(&o).unwrap() else { panic!() };
        ops_bytes += bytes;
        for (i, io) in [(0, Io::Input), (1, Io::Input), (2, Io::Input), (0, Io::Output)] {
            let mut m = meta(io, i, DType::FLOAT16, &[256, 16, 112, 112, 16], Some((&name, i)));
            m.format = 3;
            m.original_shape = Some(vec![256, 250, 112, 112]);
            let hash = 0x1234_5678_9abc_def0 ^ step;
            let Appended::Written { bytes, .. } =
                w.append_tensor_with_histogram(&m, &s, histogram, hash, None, 1).unwrap()
            else {
                panic!()
            };
            // The first tensor of a segment may define its interned original-op name; later ones reuse it.
            if step > 10 {
                worst = worst.max(bytes);
            }
            total += bytes;
            tensors += 1;
        }
    }
    w.seal().unwrap();
    for r in only_stream(dir.path()).records() {
        if let Record::Tensor(t) = r.unwrap().record {
            assert_eq!((t.stats.abs_sum, t.histogram.as_deref()), (s.abs_sum, histogram));
        }
    }
    (worst, total / tensors, (total + ops_bytes) / tensors)
}

#[test]
fn statistics_mode_costs_under_128_bytes_per_tensor() {
    let (worst, mean, with_ops) = statistics_mode_sizes(None);
    println!(
        "statistics mode: worst tensor frame {worst} B, mean {mean} B/tensor, {with_ops} B/tensor incl. ops"
    );
    assert!(worst < 128, "a statistics-mode tensor record took {worst} bytes");
    assert!(mean < 128);

    // With a histogram of a normal activation (fp16, sd 3) scaled to the statistics' 790 M nonzero values:
    // about 50 occupied buckets of 3-4 byte counts.
    let mut acc = HistogramAccumulator::new();
    let values: Vec<f32> =
        (0..1 << 16).map(|i| f16::from_f32(3.0 * normal(i)).to_f32()).filter(|&v| v != 0.0).collect();
    acc.push_f32(&values);
    let mut h = acc.finish();
    let nonzero = 802_816_000 - 12_345_678;
    let per = nonzero / h.total();
    for c in h.negative.iter_mut().chain(h.positive.iter_mut()) {
        *c *= per;
    }
    let rest = nonzero - h.total();
    *h.positive.iter_mut().max().unwrap() += rest;
    let (worst_h, mean_h, with_ops_h) = statistics_mode_sizes(Some(&h));
    println!(
        "with a histogram ({} buckets): worst {worst_h} B, mean {mean_h} B/tensor, {with_ops_h} B/tensor incl. ops",
        h.negative.len() + h.positive.len()
    );
    assert!(mean_h > mean + 40 && mean_h < 320, "histogram cost {mean_h} B against {mean} B");
}

/// A deterministic standard normal sample for index `i` (Box-Muller on a hashed pair).
fn normal(i: u64) -> f32 {
    let u = |k: u64| ((content_hash(&(i * 2 + k).to_le_bytes()) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    ((-2.0 * u(0).ln()).sqrt() * (2.0 * std::f64::consts::PI * u(1)).cos()) as f32
}

#[test]
fn canonical_dump_file_names_are_elided_and_restored() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(4), 1 << 20, Policy::KeepAll).unwrap();
    let name = "Default/network/layer3/MatMul-op12";
    // A one-tensor op in statistics mode, as the collector sees most element-wise ops.
    let canonical = OpInfo {
        dump_file: format!("MatMulV2.Default_network_layer3_MatMul-op12.9.2.{}", 1_700_000_000_000_002u64),
        original_names: vec![],
        ..op(2, name)
    };
    assert_eq!(canonical.dump_file, canonical.canonical_dump_file());
    let ffts = OpInfo { dump_file: format!("{}.4.1.0.0", canonical.dump_file), ..canonical.clone() };
    let unnamed = OpInfo { dump_file: String::new(), ..canonical.clone() };
    let s = TensorStats {
        count: 4096,
        nan: 0,
        pos_inf: 0,
        neg_inf: 0,
        zero: 3,
        min: -3.25,
        max: 7.5,
        mean: 0.012_345_678_901_234_5,
        l2_norm: 93.718_281_828_459_05,
        abs_sum: Some(51.25),
        at_saturation: 0,
    };
    let m = meta(Io::Output, 0, DType::FLOAT16, &[64, 64], None);
    let mut sizes = Vec::new();
    for o in [&canonical, &ffts, &unnamed, &canonical] {
        let Appended::Written { bytes: op_bytes, .. } = w.append_op(o).unwrap() else { panic!() };
        let Appended::Written { bytes, .. } = w.append_tensor(&m, &s, 42, None, 1).unwrap() else { panic!() };
        sizes.push(op_bytes + bytes);
    }
    w.seal().unwrap();
    // The last op reuses the interned strings of the first: op and tensor together stay under 128 bytes.
    assert!(sizes[3] < 128, "a one-tensor op took {} bytes in statistics mode", sizes[3]);
    assert!(sizes[1] > sizes[3] + canonical.dump_file.len() as u64, "FFTS+ name stored: {sizes:?}");
    let ops: Vec<OpInfo> = read_back(&only_stream(dir.path()))
        .into_iter()
        .filter_map(|r| if let Expect::Op(o) = r { Some(o) } else { None })
        .collect();
    assert_eq!(ops, vec![canonical.clone(), ffts, unnamed, canonical]);
}

#[test]
fn six_field_names_are_elided_with_their_dump_number() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(5), 1 << 20, Policy::KeepAll).unwrap();
    let six = OpInfo {
        dump_file: format!("MatMulV2.MatMulV2.41.9.2.{}", 1_700_000_000_000_002u64),
        name: "MatMulV2".into(),
        original_names: vec![],
        dump_number: Some(41),
        step_source: StepSource::Hook,
        ..op(2, "x")
    };
    assert_eq!(six.dump_file, six.canonical_dump_file());
    let five = OpInfo { dump_number: None, ..six.clone() };
    let m = meta(Io::Output, 0, DType::FLOAT16, &[64, 64], None);
    let s = TensorStats::of_bytes(DType::FLOAT16, &[0u8; 8]).unwrap();
    let mut sizes = Vec::new();
    for o in [&six, &five, &six] {
        let Appended::Written { bytes, .. } = w.append_op(o).unwrap() else { panic!() };
        w.append_tensor(&m, &s, 1, None, 1).unwrap();
        sizes.push(bytes);
    }
    let mark = StepMark { source: StepSource::Hook, step: 3, wall_time_us: 9, ..StepMark::default() };
    w.append_step_mark(&mark).unwrap();
    let summary = w.seal().unwrap();
    assert_eq!(summary.counts.step_marks, 1);
    // The six-field name of the first op is elided: only the dump number's varint is stored.
    assert!(sizes[2] + 16 < sizes[1], "six-field name stored verbatim? {sizes:?}");
    let got = read_back(&only_stream(dir.path()));
    let ops: Vec<&OpInfo> =
        got.iter().filter_map(|r| if let Expect::Op(o) = r { Some(o) } else { None }).collect();
    assert_eq!(ops, [&six, &five, &six]);
    assert!(matches!(got.last(), Some(Expect::Mark(m)) if *m == mark));
}

#[test]
fn ring_keeps_only_the_newest_segments() {
    let dir = tempfile::tempdir().unwrap();
    let seg = 16 * 1024;
    let mut w = StreamWriter::create(dir.path(), info(0), seg, Policy::Ring { max_bytes: 4 * seg }).unwrap();
    for step in 0..200u64 {
        w.append_op(&op(step, "ring")).unwrap();
        let data = noise(1000, step);
        let m = meta(Io::Output, 0, DType::UINT8, &[1000], None);
        w.append_tensor(
            &m,
            &TensorStats::of_bytes(DType::UINT8, &data).unwrap(),
            content_hash(&data),
            Some(&data),
            1,
        )
        .unwrap();
    }
    let summary = w.seal().unwrap();
    assert!(summary.counts.segments_deleted > 5);
    let stream = only_stream(dir.path());
    let paths: Vec<_> = stream.segment_paths().collect();
    assert!(paths.len() <= 4);
    let on_disk: u64 = paths.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    assert!(on_disk <= 4 * seg);
    let got = read_back(&stream);
    let steps: Vec<u64> =
        got.iter().filter_map(|e| if let Expect::Op(o) = e { Some(o.step) } else { None }).collect();
    assert_eq!(*steps.last().unwrap(), 199, "the newest records are kept");
    assert!(steps[0] > 0, "the oldest were recycled");
    assert!(steps.windows(2).all(|w| w[1] == w[0] + 1), "no hole in the kept steps: {steps:?}");
    for e in &got {
        if let Expect::Tensor(_, _, h, Some(d)) = e {
            assert_eq!(content_hash(d), *h);
        }
    }
}

#[test]
fn trigger_freezes_evidence_and_stops_after_k_steps() {
    let dir = tempfile::tempdir().unwrap();
    let seg = 16 * 1024;
    let policy = Policy::Trigger { ring_bytes: 3 * seg, keep_steps_after: 2 };
    let mut w = StreamWriter::create(dir.path(), info(0), seg, policy).unwrap();
    let mut stopped_at = None;
    for step in 0..300u64 {
        if w.append_op(&op(step, "trig")).unwrap() == Appended::Stopped {
            stopped_at.get_or_insert(step);
            continue;
        }
        let mut values: Vec<f32> = (0..500).map(|i| ((i + step) as f32).sin()).collect();
        if step == 120 {
            values[17] = f32::INFINITY;
        }
        let data: Vec<u8> = values.iter().flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes()).collect();
        let s = TensorStats::of_bytes(DType::FLOAT16, &data).unwrap();
        let m = meta(Io::Output, 0, DType::FLOAT16, &[500], None);
        w.append_tensor(&m, &s, content_hash(&data), Some(&data), 1).unwrap();
    }
    assert_eq!(stopped_at, Some(123));
    assert_eq!(w.policy().triggered_at(), Some(120));
    let summary = w.seal().unwrap();
    assert_eq!(summary.triggered_at_step, Some(120));
    assert!(summary.counts.refused_after_stop >= 177);

    let stream = only_stream(dir.path());
    let got = read_back(&stream);
    let steps: Vec<u64> =
        got.iter().filter_map(|e| if let Expect::Op(o) = e { Some(o.step) } else { None }).collect();
    assert_eq!(*steps.last().unwrap(), 122, "K = 2 steps after the trigger, then nothing");
    assert!(
        steps[0] > 0 && steps[0] < 120,
        "rang before the trigger, kept the steps before it: {}",
        steps[0]
    );
    let evidence = got.iter().any(|e| matches!(e, Expect::Tensor(_, s, _, _) if s.pos_inf == 1));
    assert!(evidence, "the overflowing tensor is kept");
}

#[test]
fn corruption_in_a_sealed_segment_names_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(0), 64 * 1024, Policy::KeepAll).unwrap();
    let mut offsets = Vec::new();
    for step in 0..5 {
        if let Appended::Written { offset, .. } = w.append_op(&op(step, "c")).unwrap() {
            offsets.push(offset);
        }
    }
    w.seal().unwrap();
    let stream_dir = dir.path().join(info(0).dir_name());
    let seg = stream_dir.join("seg-000000.acc");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[offsets[2] as usize + 10] ^= 0x55;
    std::fs::write(&seg, &bytes).unwrap();
    let stream = StreamReader::open(&stream_dir).unwrap();
    let results: Vec<_> = stream.records().collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 2);
    let err = results.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.path.as_deref(), Some(seg.as_path()));
    assert_eq!(err.offset, Some(offsets[2]));
    assert!(err.problem.contains("checksum"), "{err}");
}

#[test]
fn bad_headers_and_tensor_data_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(0), 64 * 1024, Policy::KeepAll).unwrap();
    w.append_op(&op(0, "d")).unwrap();
    let data = fp16_activations(2000, 3);
    let Appended::Written { offset, bytes: frame_bytes, .. } = w
        .append_tensor(
            &meta(Io::Output, 0, DType::FLOAT16, &[2000], None),
            &TensorStats::default(),
            content_hash(&data),
            Some(&data),
            3,
        )
        .unwrap()
    else {
        panic!()
    };
    w.seal().unwrap();
    let stream_dir = dir.path().join(info(0).dir_name());
    let seg = stream_dir.join("seg-000000.acc");
    let pristine = std::fs::read(&seg).unwrap();

    // A flipped payload byte passes the frame (payload is outside its CRC) but not the content hash.
    let mut bytes = pristine.clone();
    bytes[(offset + frame_bytes - 12) as usize] ^= 1;
    std::fs::write(&seg, &bytes).unwrap();
    let stream = StreamReader::open(&stream_dir).unwrap();
    let t = stream
        .records()
        .find_map(|r| if let Record::Tensor(t) = r.unwrap().record { Some(t) } else { None })
        .unwrap();
    let err = t.read_data(&mut Vec::new()).unwrap_err();
    assert_eq!(err.path.as_deref(), Some(seg.as_path()));
    assert!(err.offset.unwrap() > offset);
    // Read block by block: the same error.
    let blocks_err = stream.with_tensor_blocks_at(0, offset, &mut Vec::new(), |_| ()).unwrap_err();
    assert_eq!((blocks_err.path, blocks_err.offset, blocks_err.problem), (err.path, err.offset, err.problem));

    // Bad magic.
    let mut bytes = pristine.clone();
    bytes[0] = b'X';
    std::fs::write(&seg, &bytes).unwrap();
    let err = StreamReader::open(&stream_dir).err().unwrap();
    assert!(err.problem.contains("magic") && err.path.as_deref() == Some(seg.as_path()));

    // An absurd sealed end.
    let mut bytes = pristine.clone();
    bytes[56..64].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&seg, &bytes).unwrap();
    assert_eq!(StreamReader::open(&stream_dir).err().unwrap().offset, Some(56));

    // Truncated file of a sealed segment.
    std::fs::write(&seg, &pristine[..100]).unwrap();
    assert!(StreamReader::open(&stream_dir).is_err());
}

/// A payload damaged where it still decodes (a raw-stored tensor; literals zstd stores as they are): read
/// block by block, whole, in part or not at all, it gives the error `read_data` gives,
/// after the reader saw every block: what the blocks said does not stand.
#[test]
fn damaged_data_read_in_blocks_is_refused_at_the_end() {
    for (data, dtype) in [(noise(6000, 9), DType::FLOAT16), (fp16_activations(60_000, 4), DType::FLOAT16)] {
        let dir = tempfile::tempdir().unwrap();
        let mut w = StreamWriter::create(dir.path(), info(0), 1 << 20, Policy::KeepAll).unwrap();
        w.append_op(&op(0, "d")).unwrap();
        let n = data.len() as u64 / 2;
        let hash = content_hash(&data);
        let Appended::Written { segment, offset, .. } = w
            .append_tensor(
                &meta(Io::Output, 0, dtype, &[n], None),
                &TensorStats::default(),
                hash,
                Some(&data),
                3,
            )
            .unwrap()
        else {
            panic!()
        };
        w.seal().unwrap();
        let stream_dir = dir.path().join(info(0).dir_name());
        let seg = stream_dir.join("seg-000000.acc");
        let mut bytes = std::fs::read(&seg).unwrap();
        let stored = {
            let stream = StreamReader::open(&stream_dir).unwrap();
            let t = stream
                .records()
                .find_map(|r| if let Record::Tensor(t) = r.unwrap().record { Some(t) } else { None })
                .unwrap();
            t.stored_bytes().to_vec()
        };
        let at = bytes.windows(stored.len()).position(|w| w == stored.as_slice()).unwrap();
        // The first byte flip (from the middle on) that zstd still decodes and only the hash refuses.
        let (stream, err) = (stored.len() / 2..stored.len())
            .find_map(|k| {
                bytes[at + k] ^= 0x10;
                std::fs::write(&seg, &bytes).unwrap();
                bytes[at + k] ^= 0x10;
                let stream = StreamReader::open(&stream_dir).unwrap();
                let err = stream.read_tensor_data_at(segment, offset, &mut Vec::new()).unwrap_err();
                err.problem.contains("content hash").then_some((stream, err))
            })
            .expect("a flip that decodes");
        for piece in [0usize, 100, 4096, 1 << 20] {
            let mut read = 0;
            let blocks_err = stream
                .with_tensor_blocks_at(segment, offset, &mut Vec::new(), |blocks| {
                    let mut tmp = vec![0u8; piece.max(1)];
                    while piece > 0 && read < blocks.len() {
                        read += blocks.next_block(&mut tmp).len();
                    }
                })
                .unwrap_err();
            assert_eq!((&blocks_err.path, blocks_err.offset), (&err.path, err.offset), "{piece}");
            assert_eq!(blocks_err.problem, err.problem);
            assert_eq!(read, if piece == 0 { 0 } else { data.len() });
        }
    }
}

// ---- property test: arbitrary records round-trip through small segments ----

fn arb_meta() -> impl Strategy<Value = TensorMeta> {
    (
        any::<bool>(),
        0u32..8,
        prop::sample::select(vec![
            DType::FLOAT16,
            DType::BF16,
            DType::FLOAT,
            DType::INT8,
            DType::from_code(999),
        ]),
        -1i32..50,
        prop::collection::vec(0u64..1 << 40, 0..6),
        prop::option::of(prop::collection::vec(0u64..100_000, 0..5)),
        prop::option::of(("[a-z/._]{1,40}", 0u32..4)),
    )
        .prop_map(|(out, index, dtype, format, device_shape, original_shape, orig)| TensorMeta {
            io: if out { Io::Output } else { Io::Input },
            index,
            dtype,
            format,
            sub_format: format / 3,
            device_shape,
            original_shape,
            original_op: orig.map(|(n, i)| OriginalOp { name: Arc::from(n.as_str()), output_index: i }),
        })
}

fn arb_record() -> impl Strategy<Value = Expect> {
    prop_oneof![
        ("[A-Za-z0-9_/]{0,60}", any::<u64>(), prop::collection::vec("[a-z]{0,12}", 0..4)).prop_map(
            |(name, step, orig)| Expect::Op(OpInfo {
                name: name.clone(),
                op_type: "T".into(),
                step,
                task_id: step as u32,
                stream_id: 1,
                timestamp_us: step / 3,
                dump_file: format!("T.{name}"),
                original_names: orig.into_iter().filter(|s| !s.is_empty()).collect(),
                dump_number: (step % 2 == 0).then_some(step / 2),
                step_source: [StepSource::Model, StepSource::None, StepSource::Hook, StepSource::Marker]
                    [(step % 4) as usize],
            })
        ),
        (arb_meta(), prop::collection::vec(any::<u8>(), 0..3000), any::<bool>(), any::<bool>()).prop_map(
            |(m, mut data, keep, smooth)| {
                if smooth {
                    data.iter_mut().enumerate().for_each(|(i, b)| *b = (i / 64) as u8);
                }
                let stats = TensorStats::of_bytes(m.dtype, &data).unwrap_or_default();
                Expect::Tensor(m, stats, content_hash(&data), keep.then_some(data))
            }
        ),
        (any::<u64>(), prop::collection::vec(any::<u8>(), 0..3000)).prop_map(|(step, payload)| {
            Expect::Overflow(OverflowInfo {
                step,
                payload,
                dump_file: "Opdebug.Node_OpDebug.1.2.3".into(),
                ..Default::default()
            })
        }),
        (any::<u64>(), "[ -~\n]{0,200}").prop_map(|(step, csv)| Expect::Csv(StatsCsv {
            step,
            dump_file: "a.csv".into(),
            csv: csv.into_bytes()
        })),
        (any::<u64>(), any::<bool>(), "[A-Za-z]{0,20}").prop_map(|(step, hook, op_type)| Expect::Mark(
            StepMark {
                source: if hook { StepSource::Hook } else { StepSource::Marker },
                step,
                wall_time_us: step ^ 0x55,
                op_timestamp_us: step / 7,
                op_dump_number: (!hook).then_some(step / 3),
                op_type,
            }
        )),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn arbitrary_records_round_trip(mut records in prop::collection::vec(arb_record(), 0..60), level in -3i32..6) {
        // Tensors need an op before them.
        records.insert(0, Expect::Op(OpInfo { name: "first".into(), ..Default::default() }));
        let dir = tempfile::tempdir().unwrap();
        let mut w = StreamWriter::create(dir.path(), info(9), 8192, Policy::KeepAll).unwrap();
        write_all(&mut w, &records, level);
        w.seal().unwrap();
        let stream = only_stream(dir.path());
        prop_assert!(stream.torn_tail().is_none());
        let got = read_back(&stream);
        prop_assert!(same(&got, &records), "records differ: {} read, {} written", got.len(), records.len());
    }
}

#[test]
fn version_1_streams_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(6), 1 << 16, Policy::KeepAll).unwrap();
    let o = op(3, "old");
    w.append_op(&o).unwrap();
    w.append_tensor(&meta(Io::Output, 0, DType::FLOAT16, &[4], None), &TensorStats::default(), 5, None, 1)
        .unwrap();
    w.seal().unwrap();
    // Rewrite the header as version 1 wrote it: the version field and the header checksum.
    let stream = only_stream(dir.path());
    let seg = stream.segment_paths().next().unwrap().to_path_buf();
    drop(stream);
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    let crc = crc32fast::hash(&bytes[0..48]);
    bytes[48..52].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&seg, &bytes).unwrap();
    let got = read_back(&only_stream(dir.path()));
    assert!(
        matches!(&got[0], Expect::Op(r) if *r == o),
        "a version-1 op reads with the defaults of the new fields"
    );
    // A version this build does not know is refused, naming the field.
    bytes[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    let crc = crc32fast::hash(&bytes[0..48]);
    bytes[48..52].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&seg, &bytes).unwrap();
    let err = StreamReader::open(seg.parent().unwrap()).err().expect("refused");
    assert!(err.to_string().contains("unsupported capture format version"), "{err}");
}

#[test]
fn version_1_captures_still_read_without_the_version_4_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(0), 1 << 16, Policy::KeepAll).unwrap();
    w.append_op(&op(0, "old")).unwrap();
    let data: Vec<u8> = [1.5f32, -2.0, 0.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    // What a version 1 writer stored: the same statistics without the sum of |x|, no histogram.
    let stats = TensorStats { abs_sum: None, ..TensorStats::of_bytes(DType::FLOAT, &data).unwrap() };
    w.append_tensor(
        &meta(Io::Output, 0, DType::FLOAT, &[3], None),
        &stats,
        content_hash(&data),
        Some(&data),
        1,
    )
    .unwrap();
    w.seal().unwrap();
    // Stamp the segment as version 1 (header bytes 8..12, CRC of bytes 0..48 at 48).
    let stream = only_stream(dir.path());
    let path = stream.segment_paths().next().unwrap().to_path_buf();
    let mut bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes[8..12], FORMAT_VERSION.to_le_bytes());
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..48]);
    bytes[48..52].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();

    let stream = only_stream(dir.path());
    let mut seen = 0;
    for r in stream.records() {
        if let Record::Tensor(t) = r.unwrap().record {
            assert_eq!((t.stats.abs_sum, t.histogram.as_deref(), t.stats.min), (None, None, -2.0));
            assert_eq!(t.stats.abs_mean(), None, "unknown, not zero");
            let mut out = Vec::new();
            t.read_data(&mut out).unwrap();
            assert_eq!(out, data);
            seen += 1;
        }
    }
    assert_eq!(seen, 1);
}

#[test]
fn a_histogram_that_disagrees_with_the_statistics_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(0), 1 << 16, Policy::KeepAll).unwrap();
    w.append_op(&op(0, "bad")).unwrap();
    let data: Vec<u8> = [1.5f32, -2.0, 0.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let (stats, good) = TensorStats::of_bytes_with_histogram(DType::FLOAT, &data).unwrap();
    assert_eq!(good.total(), 2, "the zero is the statistics' to count");
    let bad = Histogram { positive: vec![5], ..good.clone() };
    let m = meta(Io::Output, 0, DType::FLOAT, &[3], None);
    w.append_tensor_with_histogram(&m, &stats, Some(&good), 1, None, 1).unwrap();
    w.append_tensor_with_histogram(&m, &stats, Some(&bad), 2, None, 1).unwrap();
    w.seal().unwrap();
    let stream = only_stream(dir.path());
    let mut records = stream.records();
    let mut next_tensor = || loop {
        match records.next().unwrap().map(|r| r.record) {
            Ok(Record::Tensor(t)) => return Ok(t.histogram.map(|h| *h)),
            Ok(_) => continue,
            Err(e) => return Err(e),
        }
    };
    assert_eq!(next_tensor().unwrap(), Some(good));
    let err = next_tensor().unwrap_err();
    assert!(err.to_string().contains("histogram counts 6 values"), "{err}");
}

/// KiB of `segment`'s pages mapped into this process (`Rss` of its mappings in /proc/self/smaps).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn mapped_kib(segment: &Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let name = segment.to_str().unwrap();
    let mut ours = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            // A mapping's header: address range, permissions, offset, device, inode, path.
            Some(first) if first.contains('-') && !first.ends_with(':') => ours = line.ends_with(name),
            Some("Rss:") if ours => kib += words.next().unwrap().parse::<u64>().unwrap(),
            _ => {}
        }
    }
    kib
}

/// Statistics read again by place let the records' pages go as decodes do: in batches, the rest at
/// `release_pending`; a statistics capture read through leaves no more of itself mapped than one batch.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn statistics_read_by_place_let_their_pages_go() {
    use accutrace_formats::capture::reader::RELEASE_BATCH;
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(0), 64 << 20, Policy::KeepAll).unwrap();
    let mut records = Vec::new();
    for step in 0..20_000u64 {
        records.push(Expect::Op(op(step, "layer_0/attention/MatMul")));
        for io in [Io::Input, Io::Input, Io::Output] {
            records.push(tensor(meta(io, 0, DType::FLOAT16, &[64, 128], None), &noise(64, step), false));
        }
    }
    write_all(&mut w, &records, 1);
    w.seal().unwrap();
    let stream = only_stream(dir.path());
    let segment = stream.segment_paths().next().unwrap().to_path_buf();
    let places: Vec<(u64, u64)> = tensors_where(&stream).iter().map(|(s, o, _)| (*s, *o)).collect();
    let bytes = std::fs::metadata(&segment).unwrap().len();
    assert!(bytes > 6 << 20, "records of {bytes} bytes: more than a batch of releases");
    assert!(mapped_kib(&segment) <= 128, "{} KiB after the walk", mapped_kib(&segment));
    for &(s, o) in &places {
        assert_eq!(stream.tensor_stats_at(s, o).unwrap().count, 32, "64 bytes of fp16");
    }
    let left = mapped_kib(&segment);
    assert!(left <= (RELEASE_BATCH >> 10) + 128, "{left} KiB of {} mapped after the reads", bytes >> 10);
    stream.release_pending();
    assert!(mapped_kib(&segment) <= 128, "{} KiB after release_pending", mapped_kib(&segment));
}

/// Which pages a check for stored data leaves mapped: both records', the earlier one's for the decode that
/// follows; the decode and `release_tensor_data_at` leave them for a batch of releases, which
/// `release_pending` lets go of now, and `release_all` lets everything go. (x86_64 only: qemu-user, which
/// runs the aarch64 tests, does not apply `MADV_DONTNEED` to file mappings as Linux does.)
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn a_stored_data_check_keeps_the_first_records_pages_for_its_decode() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(0), 16 << 20, Policy::KeepAll).unwrap();
    // Noise does not compress: the payloads are ~1 MiB of stored zstd blocks, apart in the segment.
    let (x, filler) = (noise(1 << 20, 3), noise(1 << 20, 4));
    let m = |io| meta(io, 0, DType::UINT8, &[1 << 20], None);
    let records = [
        Expect::Op(op(0, "first")),
        tensor(m(Io::Output), &x, true),
        tensor(m(Io::Output), &filler, true),
        Expect::Op(op(1, "second")),
        tensor(m(Io::Input), &x, true),
        tensor(m(Io::Output), &filler, true),
    ];
    write_all(&mut w, &records, 1);
    w.seal().unwrap();
    let stream = only_stream(dir.path());
    let segment = stream.segment_paths().next().unwrap().to_path_buf();
    let t = tensors_where(&stream);
    let (first, again) = ((t[0].0, t[0].1), (t[2].0, t[2].1));
    // The walk released the segment at its end; a window of fault-around is 64 KiB.
    assert!(mapped_kib(&segment) <= 128, "{} KiB after the walk", mapped_kib(&segment));
    for round in 0..3 {
        assert!(stream.same_stored_data(first.0, first.1, &stream, again.0, again.1).unwrap());
        let kept = mapped_kib(&segment);
        assert!((2000..=2048 + 256).contains(&kept), "round {round}: {kept} KiB mapped after the check");
        match round {
            0 => {
                // The decode reads the first record's pages without faulting them in again; they wait for
                // a batch of releases with the repeat's, which the caller lets go of.
                let mut out = Vec::new();
                stream.read_tensor_data_at_with(first.0, first.1, &mut out, &mut Vec::new()).unwrap();
                assert_eq!(out, x);
                stream.release_tensor_data_at(again.0, again.1).unwrap();
                let left = mapped_kib(&segment);
                assert!((2000..=2048 + 256).contains(&left), "{left} KiB mapped before the batch's release");
                stream.release_pending();
            }
            1 => {
                stream.release_tensor_data_at(first.0, first.1).unwrap();
                stream.release_tensor_data_at(again.0, again.1).unwrap();
                stream.release_pending();
            }
            _ => stream.release_all(),
        }
        assert!(mapped_kib(&segment) <= 128, "round {round}: {} KiB left", mapped_kib(&segment));
    }
}

/// Decodes leave their payloads' pages mapped until the ranges waiting add up to `RELEASE_BATCH` bytes, then
/// let them go together with the pages between neighbouring payloads (record heads, the page two payloads
/// share, which releasing each payload alone leaves mapped): however much is read, what stays mapped is at
/// most a batch and a tensor, and nothing of what was read once the last batch is let go of. (x86_64 only,
/// as above.)
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn decodes_release_their_pages_in_batches_of_bounded_size() {
    use accutrace_formats::capture::reader::RELEASE_BATCH;
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(0), 32 << 20, Policy::KeepAll).unwrap();
    // Noise does not compress: 96 payloads of ~122 KiB of stored blocks (12 MiB, three batches), each
    // ending inside a page the next one starts in.
    let data: Vec<Vec<u8>> = (0..96).map(|i| noise(125_001, i + 7)).collect();
    let mut records = vec![Expect::Op(op(0, "first"))];
    records.extend(data.iter().map(|d| tensor(meta(Io::Output, 0, DType::UINT8, &[125_001], None), d, true)));
    write_all(&mut w, &records, 1);
    w.seal().unwrap();
    let stream = only_stream(dir.path());
    let segment = stream.segment_paths().next().unwrap().to_path_buf();
    let t = tensors_where(&stream);
    assert_eq!(t.len(), data.len());
    assert!(mapped_kib(&segment) <= 128, "{} KiB after the walk", mapped_kib(&segment));
    let (batch, tensor_kib) = (RELEASE_BATCH / 1024, 125_001 / 1024 + 1);
    let (mut out, mut scratch, mut peak, mut fell) = (Vec::new(), Vec::new(), 0, 0);
    for (i, ((segment_index, offset, _), d)) in t.iter().zip(&data).enumerate() {
        let before = mapped_kib(&segment);
        stream.read_tensor_data_at_with(*segment_index, *offset, &mut out, &mut scratch).unwrap();
        assert!(&out == d, "tensor {i}");
        let now = mapped_kib(&segment);
        if i == 0 {
            assert!(now >= tensor_kib - 8, "{now} KiB mapped: the first decode's pages wait for a batch");
        }
        fell += usize::from(now + tensor_kib < before);
        peak = peak.max(now);
    }
    assert!(peak <= batch + 2 * tensor_kib + 128, "{peak} KiB mapped at most, batches of {batch} KiB");
    assert!(peak >= batch - 2 * tensor_kib, "{peak} KiB mapped at most: the decodes did not wait");
    assert!(fell >= 2, "released in {fell} batches");
    stream.release_pending();
    let left = mapped_kib(&segment);
    assert!(left <= 96, "{left} KiB left mapped after the last batch");
}

/// The streams of a run share one batch of releases: each stream read leaves at most its share mapped, so
/// a run of many streams keeps no more than one of a single stream. (x86_64 only, as above.)
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn the_streams_of_a_run_share_one_batch_of_releases() {
    use accutrace_formats::capture::reader::RELEASE_BATCH;
    let dir = tempfile::tempdir().unwrap();
    // Two streams of 24 payloads of ~122 KiB each: 3 MiB a stream, more than half a batch.
    let data: Vec<Vec<u8>> = (0..24).map(|i| noise(125_001, i + 11)).collect();
    for id in 0..2 {
        let mut w = StreamWriter::create(dir.path(), info(id), 32 << 20, Policy::KeepAll).unwrap();
        let mut records = vec![Expect::Op(op(0, "first"))];
        let m = || meta(Io::Output, 0, DType::UINT8, &[125_001], None);
        records.extend(data.iter().map(|d| tensor(m(), d, true)));
        write_all(&mut w, &records, 1);
        w.seal().unwrap();
    }
    let run = CaptureRun::open(dir.path()).unwrap();
    assert_eq!(run.streams.len(), 2);
    let mut out = Vec::new();
    for stream in &run.streams {
        for ((segment_index, offset, _), d) in tensors_where(stream).iter().zip(&data) {
            stream.read_tensor_data_at_with(*segment_index, *offset, &mut out, &mut Vec::new()).unwrap();
            assert!(&out == d);
        }
    }
    let segments: Vec<_> =
        run.streams.iter().flat_map(|s| s.segment_paths().map(Path::to_path_buf)).collect();
    let kib: u64 = segments.iter().map(|s| mapped_kib(s)).sum();
    let (batch, tensor_kib) = (RELEASE_BATCH / 1024, 125_001 / 1024 + 1);
    assert!(kib <= batch + 2 * tensor_kib + 128, "{kib} KiB mapped by the run's two streams after the reads");
    for stream in &run.streams {
        stream.release_pending();
    }
    let kib: u64 = segments.iter().map(|s| mapped_kib(s)).sum();
    assert!(kib <= 2 * 96, "{kib} KiB left mapped after the last batches");
}

/// A tensor recorded twice (an op's output, then the next op's input, here also in a second stream) is
/// the same stored data by its bytes; other data, data recorded without bytes, or a copy with one byte
/// flipped in its payload is not, whatever the record's hash says.
#[test]
fn stored_data_is_the_same_only_where_the_payloads_are() {
    let dir = tempfile::tempdir().unwrap();
    let (x, y, raw) = (fp16_activations(60_000, 1), fp16_activations(60_000, 2), noise(6000, 5));
    let fp16 = |io, n: usize| meta(io, 0, DType::FLOAT16, &[n as u64 / 2], None);
    let mut streams = Vec::new();
    for id in 0..2 {
        let mut w = StreamWriter::create(dir.path(), info(id), 1 << 20, Policy::KeepAll).unwrap();
        let records = [
            Expect::Op(op(0, "first")),
            tensor(fp16(Io::Output, x.len()), &x, true),
            tensor(fp16(Io::Output, raw.len()), &raw, true),
            tensor(fp16(Io::Output, x.len()), &x, false),
            Expect::Op(op(1, "second")),
            tensor(fp16(Io::Input, x.len()), &x, true),
            tensor(fp16(Io::Input, raw.len()), &raw, true),
            tensor(fp16(Io::Input, x.len()), &x, false),
            tensor(fp16(Io::Output, y.len()), &y, true),
        ];
        write_all(&mut w, &records, 1);
        w.seal().unwrap();
        streams.push(dir.path().join(info(id).dir_name()));
    }
    let (s0, s1) = (StreamReader::open(&streams[0]).unwrap(), StreamReader::open(&streams[1]).unwrap());
    let (t0, t1) = (tensors_where(&s0), tensors_where(&s1));
    let at = |t: &[(u64, u64, CapturedTensor<'_>)], i: usize| (t[i].0, t[i].1);
    let same = |a: &StreamReader, (sa, oa), b: &StreamReader, (sb, ob)| {
        a.same_stored_data(sa, oa, b, sb, ob).unwrap()
    };
    assert!(matches!(t0[0].2.encoding, DataEncoding::Zstd { .. }) && t0[1].2.encoding == DataEncoding::Raw);
    for (first, again) in [(0, 3), (1, 4)] {
        assert!(same(&s0, at(&t0, first), &s0, at(&t0, again)), "{first} recorded again");
        assert!(same(&s0, at(&t0, again), &s0, at(&t0, first)));
        assert!(same(&s0, at(&t0, first), &s1, at(&t1, again)), "{first} in another stream");
    }
    assert!(!same(&s0, at(&t0, 3), &s0, at(&t0, 6)), "other data");
    assert!(!same(&s0, at(&t0, 0), &s0, at(&t0, 1)));
    assert!(!same(&s0, at(&t0, 2), &s0, at(&t0, 5)), "recorded without data: nothing to compare");
    // Flip one byte in each of stream 1's second copies: those copies are no longer the same data.
    let stored: Vec<Vec<u8>> = [3, 4].iter().map(|&i| t1[i].2.stored_bytes().to_vec()).collect();
    let seg = streams[1].join("seg-000000.acc");
    let mut bytes = std::fs::read(&seg).unwrap();
    for (i, payload) in [3, 4].iter().zip(&stored) {
        let start = (t1[*i].1 as usize..bytes.len()).find(|&k| bytes[k..].starts_with(payload)).unwrap();
        bytes[start + payload.len() / 2] ^= 0x04;
    }
    std::fs::write(&seg, &bytes).unwrap();
    let s1 = StreamReader::open(&streams[1]).unwrap();
    for (first, again) in [(0, 3), (1, 4)] {
        assert!(!same(&s0, at(&t0, first), &s1, at(&t1, again)), "{first}: a flipped byte");
        assert!(same(&s0, at(&t0, first), &s1, at(&t1, first)), "{first}: the intact copy");
        assert!(s1.read_tensor_data_at(t1[again].0, t1[again].1, &mut Vec::new()).is_err());
    }
    // A place that holds no tensor record is an error, not "different".
    assert!(s0.same_stored_data(0, 0, &s0, t0[0].0, t0[0].1).is_err());
}
