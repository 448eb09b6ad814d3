//! Capture format: tensors encoded outside the writer (`DataEncoder` + `append_tensor_encoded`) give
//! byte-identical segments to `append_tensor`, across dtypes, sizes, raw fallback, segment rolls, levels,
//! data-less tensors and a ring policy.

use accutrace_formats::capture::*;
use accutrace_formats::stats::{content_hash, TensorStats};
use accutrace_formats::DType;
use std::path::Path;
use std::sync::Arc;

fn info() -> StreamInfo {
    StreamInfo { stream_id: 3, rank: Some(1), device: 1, pid: 42, host: "test".into() }
}

fn op(step: u64, k: usize) -> OpInfo {
    OpInfo {
        name: format!("layer_{}/MatMul", k % 5),
        op_type: "MatMulV2".into(),
        step,
        task_id: k as u32,
        stream_id: 2,
        timestamp_us: 1_700_000_000_000_000 + k as u64,
        dump_file: format!("MatMulV2.layer_{}.{k}.2.1", k % 5),
        original_names: vec![format!("orig_{}", k % 3)],
        ..OpInfo::default()
    }
}

fn noise(n: usize, mut x: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Smooth fp16-like data (compresses well after shuffling).
fn smooth(n: usize, k: usize) -> Vec<u8> {
    (0..n).map(|i| if i % 2 == 1 { 0x3c } else { ((i / 64 + k) % 7) as u8 }).collect()
}

struct Tensor {
    meta: TensorMeta,
    stats: TensorStats,
    hash: u64,
    data: Option<Vec<u8>>,
    level: i32,
}

/// A mix of ops and tensors: compressible and not, empty, odd sizes, several dtypes, data-less, large
/// ones that force segment rolls (and a record larger than a segment).
fn workload() -> Vec<(OpInfo, Vec<Tensor>)> {
    let dtypes = [DType::FLOAT16, DType::BF16, DType::FLOAT, DType::INT8, DType::DOUBLE, DType::COMPLEX64];
    let mut out = Vec::new();
    for k in 0..40usize {
        let mut tensors = Vec::new();
        for j in 0..3usize {
            let n = [0usize, 7, 1000, 20_000, 70_000, 300_000][(k + j) % 6] + (j % 2) * 2;
            let data = match (k + 2 * j) % 4 {
                0 => Some(noise(n, (k * 3 + j) as u64 + 1)),
                1 | 2 => Some(smooth(n, k)),
                _ => None,
            };
            let dtype = dtypes[(k + j) % dtypes.len()];
            let bytes = data.as_deref().unwrap_or(&[]);
            let meta = TensorMeta {
                io: if j == 0 { Io::Input } else { Io::Output },
                index: j as u32,
                dtype,
                format: 2,
                sub_format: 0,
                device_shape: vec![n as u64],
                original_shape: (k % 2 == 0).then(|| vec![1, n as u64]),
                original_op: (j == 1)
                    .then(|| OriginalOp { name: Arc::from(format!("fused_{k}")), output_index: 1 }),
            };
            let stats = TensorStats::of_bytes(DType::UINT8, bytes).unwrap_or_default();
            let level = [1, 1, 3, -1][k % 4];
            tensors.push(Tensor { meta, stats, hash: content_hash(bytes), data, level });
        }
        out.push((op(k as u64 / 4, k), tensors));
    }
    out
}

fn segments(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let stream = dir.join(info().dir_name());
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&stream)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".acc"))
        .map(|e| {
            let mut bytes = std::fs::read(e.path()).unwrap();
            // The creation time (header bytes 40..48) and the header CRC over it (48..52) differ by run.
            bytes[40..52].fill(0);
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    files.sort();
    files
}

fn write(dir: &Path, policy: Policy, segment: u64, encoded: bool) -> (Vec<Appended>, StreamSummary) {
    let mut w = StreamWriter::create(dir, info(), segment, policy).unwrap();
    let mut enc = DataEncoder::new();
    let mut buf = Vec::new();
    let mut results = Vec::new();
    for (op, tensors) in workload() {
        results.push(w.append_op(&op).unwrap());
        for t in &tensors {
            let r = if encoded {
                match &t.data {
                    Some(d) => {
                        let e = enc.encode(d, t.meta.dtype, t.level, std::mem::take(&mut buf)).unwrap();
                        assert_eq!(e.raw_len(), d.len() as u64);
                        let r = w.append_tensor_encoded(&t.meta, &t.stats, t.hash, Some(&e)).unwrap();
                        buf = e.into_buffer();
                        r
                    }
                    None => w.append_tensor_encoded(&t.meta, &t.stats, t.hash, None).unwrap(),
                }
            } else {
                w.append_tensor(&t.meta, &t.stats, t.hash, t.data.as_deref(), t.level).unwrap()
            };
            results.push(r);
        }
    }
    (results, w.seal().unwrap())
}

#[test]
fn encoded_and_direct_appends_write_identical_segments() {
    for (policy, segment) in [
        (Policy::KeepAll, 1u64 << 20),
        (Policy::KeepAll, 64 << 10),
        (Policy::Ring { max_bytes: 512 << 10 }, 128 << 10),
    ] {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (ra, sa) = write(a.path(), policy, segment, false);
        let (rb, sb) = write(b.path(), policy, segment, true);
        assert_eq!(ra, rb, "{policy:?} {segment}: append results");
        assert_eq!(sa.counts, sb.counts, "{policy:?} {segment}: counts");
        let (fa, fb) = (segments(a.path()), segments(b.path()));
        assert!(fa.len() > 1 || segment >= 1 << 20, "the small segments roll");
        assert_eq!(fa.len(), fb.len());
        for ((na, ba), (nb, bb)) in fa.iter().zip(&fb) {
            assert_eq!(na, nb);
            let first = ba.iter().zip(bb.iter()).position(|(x, y)| x != y);
            assert!(ba == bb, "{policy:?} {segment}: {na} differs at {first:?}");
        }
        // And the data reads back.
        let run = CaptureRun::open(b.path()).unwrap();
        let want: Vec<Vec<u8>> =
            workload().into_iter().flat_map(|(_, ts)| ts).filter_map(|t| t.data).collect();
        let mut got = Vec::new();
        for rec in run.streams[0].records() {
            if let Record::Tensor(t) = rec.unwrap().record {
                if t.encoding != DataEncoding::None {
                    let mut buf = Vec::new();
                    t.read_data(&mut buf).unwrap();
                    got.push(buf);
                }
            }
        }
        if policy == Policy::KeepAll {
            assert_eq!(got, want);
        }
    }
}

#[test]
fn encode_data_picks_zstd_or_raw_like_the_writer() {
    let smooth = smooth(40_000, 1);
    let e = encode_data(&smooth, DType::FLOAT16, 1).unwrap();
    assert_eq!(e.encoding(), DataEncoding::Zstd { shuffle_width: 2 });
    assert!(e.payload().len() < smooth.len() / 2);
    let random = noise(40_000, 9);
    let e = encode_data(&random, DType::FLOAT, 1).unwrap();
    assert_eq!(e.encoding(), DataEncoding::Raw);
    assert_eq!(e.payload(), &random[..]);
    let e = encode_data(&[], DType::FLOAT16, 1).unwrap();
    assert_eq!((e.encoding(), e.raw_len(), e.payload().len()), (DataEncoding::Raw, 0, 0));
}

#[test]
fn encoded_append_needs_an_op_and_respects_a_stopped_policy() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(), 1 << 20, Policy::KeepAll).unwrap();
    let m = TensorMeta {
        io: Io::Output,
        index: 0,
        dtype: DType::FLOAT16,
        format: 2,
        sub_format: 0,
        device_shape: vec![2],
        original_shape: None,
        original_op: None,
    };
    let e = encode_data(&[1, 2, 3, 4], DType::FLOAT16, 1).unwrap();
    assert!(w.append_tensor_encoded(&m, &TensorStats::default(), 0, Some(&e)).is_err());
}

/// fp16-like bytes whose low (mantissa) byte is noise and high (sign/exponent) byte takes a few values: the
/// low plane looks flat, the high one does not.
fn half_noise(n_elems: usize) -> Vec<u8> {
    let low = noise(n_elems, 77);
    (0..n_elems).flat_map(|i| [low[i], [0x3c, 0x3d, 0xbc, 0x40][(i / 3 + i / 17) % 4]]).collect()
}

#[test]
fn a_flat_plane_gets_a_frame_of_its_own_and_the_tensor_reads_back_whole() {
    let raw = half_noise(100_000);
    let e = encode_data(&raw, DType::FLOAT16, 1).unwrap();
    assert_eq!(e.encoding(), DataEncoding::Zstd { shuffle_width: 2 });
    // Two frames back to back: the low plane (literal compression off), then the high plane.
    let first = zstd::zstd_safe::find_frame_compressed_size(e.payload()).unwrap();
    assert!(first < e.payload().len(), "one frame holds everything");
    assert!(first > 100_000, "the noise plane is passed through: {first} bytes");
    let mut shuffled = Vec::new();
    accutrace_formats::capture::shuffle::shuffle(&raw, 2, &mut shuffled);
    assert_eq!(zstd::bulk::decompress(e.payload(), raw.len()).unwrap(), shuffled);
    // Small tensors and data without a flat plane stay one frame.
    let small = half_noise(10_000);
    let e = encode_data(&small, DType::FLOAT16, 1).unwrap();
    assert_eq!(zstd::zstd_safe::find_frame_compressed_size(e.payload()).unwrap(), e.payload().len());
    let smooth = smooth(200_000, 3);
    let e = encode_data(&smooth, DType::FLOAT16, 1).unwrap();
    assert_eq!(zstd::zstd_safe::find_frame_compressed_size(e.payload()).unwrap(), e.payload().len());

    // Through the writer, both paths (in place and encoded outside), and back through the reader.
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(), 4 << 20, Policy::KeepAll).unwrap();
    w.append_op(&op(0, 0)).unwrap();
    let meta = TensorMeta {
        io: Io::Output,
        index: 0,
        dtype: DType::FLOAT16,
        format: 2,
        sub_format: 0,
        device_shape: vec![100_000],
        original_shape: None,
        original_op: None,
    };
    let stats = TensorStats::of_bytes(DType::FLOAT16, &raw).unwrap();
    w.append_tensor(&meta, &stats, content_hash(&raw), Some(&raw), 1).unwrap();
    let e = encode_data(&raw, DType::FLOAT16, 1).unwrap();
    w.append_tensor_encoded(&meta, &stats, content_hash(&raw), Some(&e)).unwrap();
    w.seal().unwrap();
    let mut run = CaptureRun::open(dir.path()).unwrap();
    let stream = run.streams.remove(0);
    let mut tensors = 0;
    for r in stream.records() {
        if let Record::Tensor(t) = r.unwrap().record {
            let mut buf = Vec::new();
            t.read_data(&mut buf).unwrap();
            assert!(buf == raw, "tensor {tensors} reads back changed");
            tensors += 1;
        }
    }
    assert_eq!(tensors, 2);
}
