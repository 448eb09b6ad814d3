//! The damage matrix on the paths only large inputs take ([`damage_matrix.rs`](damage_matrix.rs) holds the
//! small sources, one step of the tiny model). No threshold of these paths can be lowered from outside, so
//! the inputs are just over them:
//! - a capture tensor longer than a read window (over 16 MiB of data: its zstd frames, of at most 1 MiB,
//!   decoded a window at a time, several at once), whose pairs compare's table measures in waves (two
//!   pairs at once where the memory budget lets it) and diff reads in waves (from 4 MiB of data);
//! - msprobe `.pt` storages of at least 8 MiB, read and CRC-checked in parts on the pool's threads.
//!
//! A frame in the middle of a large tensor is damaged (bytes flipped in a plane zstd stored and in one it
//! compressed, the sealed segment truncated there, a crashed run's tail zeroed from there, a record frame
//! and a zstd block whose lengths lie; a `.pt` storage flipped, zeroed, truncated, its zip directory
//! lying about the member's size). compare (either side damaged; the text table, which takes the waves),
//! diff, overflow and inspect must each exit 2 with the input problem on the first line (or only an
//! `error:`), or give exactly the intact input's answer where they never read the damaged bytes (overflow
//! and inspect answer from the statistics).
//!
//! The sources are written directly (the capture writer, a `torch.save`-like zip), not by the simulated
//! training, whose tensors would have to be this large. Both tests take about 40 s of CPU on the debug
//! build (2-3 minutes of wall time on a loaded 2-core machine).

mod common;
use accutrace_formats::capture::{
    CaptureRun, Io, Manifest, OpInfo, Policy, Record, StreamInfo, StreamWriter, TensorMeta,
};
use accutrace_formats::stats::{content_hash, TensorStats};
use accutrace_formats::DType;
use common::*;
use std::path::{Path, PathBuf};

/// Values of a large tensor: 17 MiB of fp16 data and an odd element, over the 16 MiB read window.
const LARGE: usize = (17 << 20) / 2 + 3;
/// Values of the small tensor.
const SMALL: usize = 1000;

/// Op `k`'s output of `len` values; the bench run's differs by an ulp at every seventh value but op 0's
/// (diff reads only op 1's large pair and op 2's). The low
/// byte plane is noise (zstd stores its blocks as they are), the high one takes 16 values (it compresses).
fn values(k: u64, len: usize, bench: bool) -> Vec<u8> {
    (0..len)
        .flat_map(|i| {
            let mut bits = 0x3000 + (noise(i as u64 + (k << 40)) % 4096) as u16;
            if bench && k != 0 && i % 7 == 0 {
                bits ^= 1;
            }
            bits.to_le_bytes()
        })
        .collect()
}

/// splitmix64 of `x`: bits without a pattern zstd could find.
fn noise(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A capture run in `run`: ops 0 and 1 with a large fp16 output each, op 2 with a small one; segments of
/// 20 MiB, so that each large record has a segment of its own.
fn write_run(run: &Path, bench: bool) {
    std::fs::create_dir_all(run).unwrap();
    let info = StreamInfo { stream_id: 0, rank: Some(0), device: 0, pid: 1, host: "test".into() };
    let mut writer = StreamWriter::create(run, info, 20 << 20, Policy::KeepAll).unwrap();
    for (k, len) in [(0u64, LARGE), (1, LARGE), (2, SMALL)] {
        let op = OpInfo {
            name: format!("model/op{k}"),
            op_type: "Gelu".into(),
            step: 0,
            task_id: k as u32,
            stream_id: 2,
            timestamp_us: 10 + k,
            dump_file: format!("Gelu.model_op{k}.{k}.2.{}", 10 + k),
            ..OpInfo::default()
        };
        writer.append_op(&op).unwrap();
        let data = values(k, len, bench);
        let meta = TensorMeta {
            io: Io::Output,
            index: 0,
            dtype: DType::FLOAT16,
            format: 2,
            sub_format: 0,
            device_shape: vec![len as u64],
            original_shape: None,
            original_op: None,
        };
        let stats = TensorStats::of_bytes(DType::FLOAT16, &data).unwrap();
        writer.append_tensor(&meta, &stats, content_hash(&data), Some(&data), 1).unwrap();
    }
    let mut manifest = Manifest::new("test", vec!["train".into()]);
    manifest.streams.push(writer.seal().unwrap());
    manifest.write(run).unwrap();
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Damage {
    /// A byte flipped a quarter into the payload: the low byte plane, in a block zstd stored.
    FlipStored,
    /// A byte flipped three quarters into the payload: the high byte plane, in a frame zstd decodes.
    FlipCompressed,
    /// The segment cut in the middle of the payload, after the collector sealed it.
    Truncate,
    /// The tail of a run the collector never sealed (it crashed): zeros from the middle of the payload to
    /// the segment's end, the segment's length kept.
    TornTail,
    /// The record frame's commit word says 8 bytes more than the body holds.
    RecordLengthLies,
    /// The first block of the middle zstd frame of the payload says 4 KiB more than it holds.
    ZstdBlockLengthLies,
}

const DAMAGES: [Damage; 6] = [
    Damage::FlipStored,
    Damage::FlipCompressed,
    Damage::Truncate,
    Damage::TornTail,
    Damage::RecordLengthLies,
    Damage::ZstdBlockLengthLies,
];

/// The segment holding op 1's large output in `run`, the offset of its record frame, and where its payload
/// lies in the segment.
fn victim(run: &Path) -> (PathBuf, usize, std::ops::Range<usize>) {
    let capture = CaptureRun::open(run).unwrap();
    let (segment, offset, payload) = capture.streams[0]
        .records()
        .filter_map(|r| {
            let r = r.unwrap();
            match r.record {
                Record::Tensor(t) => Some((r.segment.to_path_buf(), r.offset, t.stored_bytes().to_vec())),
                _ => None,
            }
        })
        .nth(1)
        .unwrap();
    drop(capture);
    assert!(payload.len() > 8 << 20, "op 1's payload is {} bytes: not the large tensor", payload.len());
    let bytes = std::fs::read(&segment).unwrap();
    let at = (offset as usize..bytes.len()).find(|&k| bytes[k..].starts_with(&payload)).unwrap();
    (segment, offset as usize, at..at + payload.len())
}

/// Where the zstd frames of `payload` start (their offsets in `payload`), at least 3 of them.
fn frame_starts(payload: &[u8]) -> Vec<usize> {
    const MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
    let frames: Vec<usize> = (0..payload.len() - 4).filter(|&k| payload[k..k + 4] == MAGIC).collect();
    assert!(frames.len() >= 3, "{} zstd frames in the payload", frames.len());
    frames
}

/// Where the first block header of the middle zstd frame of `payload` lies (its offset in `payload`).
fn middle_block_header(payload: &[u8]) -> usize {
    let frames = frame_starts(payload);
    let at = frames[frames.len() / 2];
    let descriptor = payload[at + 4];
    let single_segment = descriptor & 0x20 != 0;
    let dict_id = [0, 1, 2, 4][(descriptor & 3) as usize];
    let content_size = match descriptor >> 6 {
        0 => usize::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    at + 5 + usize::from(!single_segment) + dict_id + content_size
}

fn damage(run: &Path, how: Damage) {
    let (segment, frame, payload) = victim(run);
    let mut bytes = std::fs::read(&segment).unwrap();
    let middle = payload.start + payload.len() / 2;
    match how {
        Damage::FlipStored => bytes[payload.start + payload.len() / 4] ^= 0x5A,
        Damage::FlipCompressed => bytes[payload.start + payload.len() * 3 / 4] ^= 0x5A,
        Damage::Truncate => bytes.truncate(middle),
        Damage::TornTail => {
            bytes[middle..].fill(0);
            // The header's sealed end (its CRC does not cover it): 0 while the collector writes.
            bytes[56..64].fill(0);
        }
        Damage::RecordLengthLies => {
            let len = u32::from_le_bytes(bytes[frame..frame + 4].try_into().unwrap());
            bytes[frame..frame + 4].copy_from_slice(&(len + 8).to_le_bytes());
        }
        Damage::ZstdBlockLengthLies => {
            let at = payload.start + middle_block_header(&bytes[payload.clone()]);
            let header = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], 0]);
            let header = header + (4096 << 3);
            bytes[at..at + 3].copy_from_slice(&header.to_le_bytes()[..3]);
        }
    }
    std::fs::write(&segment, bytes).unwrap();
}

/// The commands that read tensors, `damaged` on either side of compare, as a user runs them (text).
fn commands(damaged: &str, intact: &str) -> Vec<Vec<String>> {
    [
        vec!["compare", damaged, intact],
        vec!["compare", intact, damaged],
        vec!["diff", damaged, intact],
        vec!["overflow", damaged],
        vec!["inspect", damaged],
    ]
    .iter()
    .map(|args| args.iter().map(|a| a.to_string()).collect())
    .collect()
}

/// Whether the answer leads with the input problem: its first line names it, or it printed nothing but
/// the error.
fn leads_with_input_problem(stdout: &str, stderr: &str) -> bool {
    let first = stdout.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
    first.starts_with("INCOMPLETE INPUT")
        || first.starts_with("UNREADABLE INPUT")
        || stdout.trim().is_empty() && stderr.lines().any(|l| l.starts_with("error:"))
}

/// Runs every command on a copy of `target` damaged by `damage` in each way of `damages` (and `bench` as
/// the other side):
/// each answer must exit 2 leading with the input problem, or be the intact copy's. Fails listing the
/// others, with the table of every cell.
fn no_silent_answer<D: Copy + std::fmt::Debug>(
    dir: &Path,
    (target, bench): (&Path, &Path),
    damages: &[D],
    damage: impl Fn(&Path, D),
) {
    let b = path_str(bench);
    let undamaged = dir.join("undamaged");
    copy_dir(target, &undamaged);
    let u = path_str(&undamaged);
    // The intact copy's answers, run only where a damaged copy's answer does not lead with its problem
    // (the large pairs take seconds each on the debug build).
    let mut clean: Vec<Option<(i32, String)>> = vec![None; commands(u, b).len()];
    let mut intact = |k: usize| -> (i32, String) {
        clean[k]
            .get_or_insert_with(|| {
                let args = &commands(u, b)[k];
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let (code, stdout, stderr) = analyzer(&args);
                assert!(code == 0 || code == 1, "intact {args:?}: exit {code}\n{stdout}\n{stderr}");
                (code, stdout.replace(u, "TARGET"))
            })
            .clone()
    };
    let mut wrong = Vec::new();
    let mut table = String::new();
    for &kind in damages {
        let how = format!("{kind:?}");
        let cell = dir.join(&how);
        copy_dir(target, &cell);
        damage(&cell, kind);
        let c = path_str(&cell);
        for (k, args) in commands(c, b).iter().enumerate() {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, stdout, stderr) = analyzer(&args);
            let led = code == 2 && leads_with_input_problem(&stdout, &stderr);
            let same = !led && (code, stdout.replace(c, "TARGET")) == intact(k);
            let verdict = match (led, same) {
                (true, _) => "input problem",
                (false, true) => "intact answer",
                (false, false) => "WRONG",
            };
            let side = if args[1] == c { "damaged first" } else { "damaged second" };
            table.push_str(&format!("{how}\t{} ({side})\t{code}\t{verdict}\n", args[0]));
            if verdict == "WRONG" {
                let head: String = stdout.lines().take(12).collect::<Vec<_>>().join("\n");
                wrong.push(format!("{how} {args:?}: exit {code}\n{head}\n{stderr}"));
            }
        }
        let _ = std::fs::remove_dir_all(&cell);
    }
    let _ = std::fs::remove_dir_all(&undamaged);
    if let Ok(to) = std::env::var("ACCUTRACE_DAMAGE_TABLE") {
        let name = target.file_name().unwrap().to_string_lossy();
        std::fs::write(format!("{to}.{name}"), &table).unwrap();
    }
    assert!(wrong.is_empty(), "damaged large tensors answered wrongly:\n{}\n\n{table}", wrong.join("\n\n"));
}

#[test]
fn no_damaged_large_capture_tensor_gets_a_silent_answer() {
    let dir = scratch();
    let (target, bench) = (dir.path().join("capture"), dir.path().join("capture-bench"));
    write_run(&target, false);
    write_run(&bench, true);
    no_silent_answer(dir.path(), (&target, &bench), &DAMAGES, damage);
}

/// A large tensor's read error names where the damage lies in the segment, on every read path (compare's
/// waves, its whole read for JSON, diff's waves): a zstd frame that fails by the byte it starts at, data
/// that fails its content hash by its first byte and length (which part changed, the hash cannot tell).
#[test]
fn a_damaged_large_tensor_is_named_by_its_bytes_in_the_segment() {
    let dir = scratch();
    let (target, bench) = (dir.path().join("capture"), dir.path().join("capture-bench"));
    write_run(&target, false);
    write_run(&bench, true);
    let (segment, _, payload) = victim(&target);
    let frames = frame_starts(&std::fs::read(&segment).unwrap()[payload.clone()]);
    let middle_frame = payload.start + frames[frames.len() / 2];
    let seg_name = segment.file_name().unwrap().to_string_lossy().to_string();
    let expected = [
        (
            Damage::ZstdBlockLengthLies,
            format!("{seg_name}: at byte {middle_frame}: zstd: "),
            "in the zstd frame that starts there",
        ),
        (
            Damage::FlipStored,
            format!("{seg_name}: at byte {}: tensor data ({} bytes from here)", payload.start, payload.len()),
            "content hash",
        ),
    ];
    let b = path_str(&bench);
    for (how, at, what) in expected {
        let cell = dir.path().join(format!("{how:?}"));
        copy_dir(&target, &cell);
        damage(&cell, how);
        let c = path_str(&cell);
        for args in [vec!["compare", c, b], vec!["compare", c, b, "--format", "json"], vec!["diff", c, b]] {
            let (code, stdout, stderr) = analyzer(&args);
            assert_eq!(code, 2, "{how:?} {args:?}\n{stdout}\n{stderr}");
            let said = stdout
                .lines()
                .find(|l| l.contains(&at))
                .unwrap_or_else(|| panic!("{how:?} {args:?}: no {at:?}\n{stdout}\n{stderr}"));
            assert!(
                said.contains(what) && said.contains("copy the capture again"),
                "{how:?} {args:?}: {said}"
            );
        }
    }
}

/// Values of a large msprobe tensor: 9 MiB of fp32, over the 8 MiB from which a `.pt` storage is read and
/// checked in parts on the pool's threads.
const LARGE_PT: usize = (9 << 20) / 4 + 5;

/// A `torch.save` archive of one 1-d fp32 tensor (stored members, as torch writes).
fn pt_archive(values: &[f32]) -> Vec<u8> {
    use std::io::Write;
    let numel = values.len() as u32;
    let int = |v: u32| [&[b'J'][..], &v.to_le_bytes()].concat();
    let mut p = vec![0x80, 2];
    p.extend(b"ctorch._utils\n_rebuild_tensor_v2\nq\x00((X\x07\x00\x00\x00storage");
    p.extend(b"ctorch\nFloatStorage\n");
    p.extend(b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpu");
    p.extend(int(numel));
    p.extend(b"tQ");
    p.extend(int(0));
    p.push(b'(');
    p.extend(int(numel));
    p.extend(b"t(");
    p.extend(int(1));
    p.extend(b"t\x89ccollections\nOrderedDict\n)Rtq\x01R.");
    let storage: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in [("t/data.pkl", &p[..]), ("t/byteorder", b"little"), ("t/data/0", &storage)] {
        zip.start_file(name, stored).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// An msprobe dump in `root` (`step0/rank0`): `Functional.gelu.0.forward` with a large input and output,
/// `Functional.relu.0.forward` with a small output; the bench dump's values differ at every seventh.
fn write_msprobe(root: &Path, bench: bool) {
    let dir = root.join("step0/rank0");
    let data = dir.join("dump_tensor_data");
    std::fs::create_dir_all(&data).unwrap();
    let mut ops = serde_json::Map::new();
    for (op, io, len, seed) in [
        ("Functional.gelu.0.forward", "input", LARGE_PT, 1u32),
        ("Functional.gelu.0.forward", "output", LARGE_PT, 2),
        ("Functional.relu.0.forward", "output", SMALL, 3),
    ] {
        let values: Vec<f32> = (0..len)
            .map(|i| {
                let v = ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 9) as f32 / 8e6 - 1.0;
                if bench && i % 7 == 0 {
                    v * 1.001
                } else {
                    v
                }
            })
            .collect();
        let name = format!("{op}.{io}.0.pt");
        std::fs::write(data.join(&name), pt_archive(&values)).unwrap();
        let sum: f64 = values.iter().map(|&v| f64::from(v)).sum();
        let norm = values.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>().sqrt();
        let max = values.iter().copied().fold(f32::MIN, f32::max);
        let min = values.iter().copied().fold(f32::MAX, f32::min);
        let tensor = serde_json::json!({
            "type": "torch.Tensor", "dtype": "torch.float32", "shape": [len],
            "Max": max, "Min": min, "Mean": sum / len as f64, "Norm": norm,
            "requires_grad": false, "data_name": name,
        });
        let entry = ops
            .entry(op)
            .or_insert_with(|| serde_json::json!({"input_args": [], "input_kwargs": {}, "output": []}));
        let key = if io == "input" { "input_args" } else { "output" };
        entry[key].as_array_mut().unwrap().push(tensor);
    }
    let dump = serde_json::json!({
        "task": "tensor", "level": "L1", "framework": "pytorch",
        "dump_data_dir": path_str(&data), "data": ops,
    });
    std::fs::write(dir.join("dump.json"), serde_json::to_string_pretty(&dump).unwrap()).unwrap();
}

/// Damage to the large output's `.pt` file of an msprobe dump.
#[derive(Clone, Copy, Debug, PartialEq)]
enum PtDamage {
    /// A byte flipped in the middle of the storage.
    Flip,
    /// 4 KiB zeroed in the middle of the storage.
    ZeroPage,
    /// The file cut in the middle of the storage (its zip directory lost).
    Truncate,
    /// Zeros from the middle of the storage to the file's end.
    TornTail,
    /// The zip directory says the storage member is 4 KiB shorter than it is.
    MemberSizeLies,
}

fn damage_pt(root: &Path, how: PtDamage) {
    let file = root.join("step0/rank0/dump_tensor_data/Functional.gelu.0.forward.output.0.pt");
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    match how {
        PtDamage::Flip => bytes[middle] ^= 0x5A,
        PtDamage::ZeroPage => bytes[middle..middle + 4096].fill(0),
        PtDamage::Truncate => bytes.truncate(middle),
        PtDamage::TornTail => bytes[middle..].fill(0),
        PtDamage::MemberSizeLies => {
            // The central directory entry of t/data/0: signature, then the sizes at 20 (compressed) and 24.
            let name = b"t/data/0";
            let at = (0..bytes.len() - 46)
                .rev()
                .find(|&k| bytes[k..k + 4] == [0x50, 0x4B, 0x01, 0x02] && bytes[k + 46..].starts_with(name))
                .unwrap();
            for field in [at + 20, at + 24] {
                let size = u32::from_le_bytes(bytes[field..field + 4].try_into().unwrap());
                bytes[field..field + 4].copy_from_slice(&(size - 4096).to_le_bytes());
            }
        }
    }
    std::fs::write(&file, bytes).unwrap();
}

#[test]
fn no_damaged_large_msprobe_tensor_gets_a_silent_answer() {
    let dir = scratch();
    let (target, bench) = (dir.path().join("msprobe"), dir.path().join("msprobe-bench"));
    write_msprobe(&target, false);
    write_msprobe(&bench, true);
    let damages = [
        PtDamage::Flip,
        PtDamage::ZeroPage,
        PtDamage::Truncate,
        PtDamage::TornTail,
        PtDamage::MemberSizeLies,
    ];
    no_silent_answer(dir.path(), (&target, &bench), &damages, damage_pt);
}
