use super::super::pickle::{PickledTensor, StorageRef};
use super::archive::*;
use super::stream::*;
use super::view::*;
use super::*;
use crate::{DType, FormatError, Result};
use std::io::Cursor;

fn view(size: &[u64], stride: &[u64], offset: u64) -> PickledTensor {
    PickledTensor {
        storage: StorageRef { dtype: DType::INT8, class: "CharStorage".into(), key: "0".into(), numel: 12 },
        storage_offset: offset,
        size: size.to_vec(),
        stride: stride.to_vec(),
    }
}

#[test]
fn gathers_strided_views_in_c_order() {
    let storage: Vec<u8> = (0..12).collect();
    // A transposed 3x4 (stored 4x3): element [i][j] lives at j*3 + i.
    let got = gather(&view(&[3, 4], &[1, 3], 0), &storage, 1).unwrap();
    assert_eq!(got, vec![0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11]);
    let got = gather(&view(&[2, 2], &[4, 1], 5), &storage, 1).unwrap();
    assert_eq!(got, vec![5, 6, 9, 10]);
    let got = gather(&view(&[3], &[0], 2), &storage, 1).unwrap();
    assert_eq!(got, vec![2, 2, 2]);
    assert_eq!(gather(&view(&[0, 5], &[5, 1], 0), &storage, 1).unwrap(), Vec::<u8>::new());
}

/// A `torch.save`-like archive: `data.pkl` describing a 1-d view (offset, length) of a storage of
/// `numel` elements of `class`, `byteorder`, and the storage, all stored (uncompressed).
fn archive(class: &str, numel: u32, offset: u32, len: u32, storage: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let int = |v: u32| [&[b'J'][..], &v.to_le_bytes()].concat();
    let mut p = vec![0x80, 2];
    p.extend(b"ctorch._utils\n_rebuild_tensor_v2\nq\x00((X\x07\x00\x00\x00storage");
    p.extend(format!("ctorch\n{class}\n").as_bytes());
    p.extend(b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpu");
    p.extend(int(numel));
    p.extend(b"tQ");
    p.extend(int(offset));
    p.push(b'(');
    p.extend(int(len));
    p.extend(b"t(");
    p.extend(int(1));
    p.extend(b"t\x89ccollections\nOrderedDict\n)Rtq\x01R.");
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in [("t/data.pkl", &p[..]), ("t/byteorder", b"little"), ("t/data/0", storage)] {
        zip.start_file(name, stored).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// `stream_pt_file` on `bytes` written to a file: the values and their hash, or the error. Read twice,
/// into a buffer shorter and into one longer than any tensor here (stale values of an earlier, larger
/// tensor: `out` is reused and only resized where it grows), which must give the same; and
/// `stream_pt_file_hash` must give the same dtype and hash, or the same error, word for word.
fn stream(bytes: &[u8]) -> Result<(DType, Vec<f32>, u64)> {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, bytes).unwrap();
    let read = |mut values: Vec<f32>| {
        let mut hasher = crate::hash::Xxh3::new();
        match stream_pt_file(file.path(), &mut values, Some(&mut hasher)) {
            Ok(dtype) => Ok((dtype, values, hasher.digest())),
            Err(e) => Err((e, values)),
        }
    };
    let short = read(vec![1.0; 3]);
    let long = read(vec![f32::NAN; 1 << 18]);
    type Read = std::result::Result<(DType, Vec<f32>, u64), (FormatError, Vec<f32>)>;
    let drop_buffer = |r: &Read| match r {
        Ok(v) => Ok(v.clone()),
        Err((e, values)) => {
            // Nothing is handed out with an error.
            assert!(values.is_empty(), "{e}");
            Err(e.clone())
        }
    };
    let (short, long) = (drop_buffer(&short), drop_buffer(&long));
    assert_same(&long, &short, "into a longer buffer holding stale values");
    let mut hasher = crate::hash::Xxh3::new();
    match (stream_pt_file_hash(file.path(), &mut hasher), &short) {
        (Ok(dtype), Ok((d, _, hash))) => assert_eq!((dtype, hasher.digest()), (*d, *hash)),
        (Err(e), Err(want)) => assert_eq!(&e, want),
        (got, want) => panic!("hash only: {got:?}, with the values: {:?}", want.as_ref().err()),
    }
    short
}

/// The in-memory reader and the shared decoder: what `stream_pt_file` must agree with.
fn in_memory(bytes: &[u8]) -> Result<(DType, Vec<f32>, u64)> {
    let t = read_pt_bytes(bytes)?;
    let mut values = Vec::new();
    crate::tensor::decode_f32(t.dtype, &t.bytes, t.elements()?, &mut values)?;
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Ok((t.dtype, values, crate::stats::content_hash(&bytes)))
}

fn assert_same(got: &Result<(DType, Vec<f32>, u64)>, want: &Result<(DType, Vec<f32>, u64)>, what: &str) {
    match (got, want) {
        (Ok((gd, gv, gh)), Ok((wd, wv, wh))) => {
            assert_eq!(gd, wd, "{what}");
            assert!(gv.iter().map(|v| v.to_bits()).eq(wv.iter().map(|v| v.to_bits())), "{what}");
            assert_eq!(gh, wh, "{what}");
        }
        (Err(_), Err(_)) => {}
        _ => panic!("{what}: streamed {:?}, in memory {:?}", got.as_ref().err(), want.as_ref().err()),
    }
}

fn in_pool<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(f)
}

/// Large views are read in parts on several threads (`Streamed::parts`), with their CRCs combined and the
/// hash fed in order: the same values, hash and errors as one pass on one thread, and as the in-memory
/// reader, for fp32 (read straight into the values) and bf16, a view that starts and ends inside a part,
/// and a damaged byte in the first, a middle and the last part.
#[test]
fn large_views_read_in_parallel_parts_as_in_one_pass() {
    let numel = (PARALLEL_STREAM_BYTES / 4 + READ_CHUNK / 8 + 1000) as u32;
    let values: Vec<f32> = (0..numel).map(|i| (i as f32 * 0.37).sin() * 1e3).collect();
    let f32_bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let bf16_bytes: Vec<u8> =
        [&f32_bytes[..], &f32_bytes[..]].concat().chunks_exact(4).flat_map(|v| [v[2], v[3]]).collect();
    for (class, storage, numel) in
        [("FloatStorage", &f32_bytes, numel), ("BFloat16Storage", &bf16_bytes, 2 * numel)]
    {
        let pt = archive(class, numel, 5, numel - 15, storage);
        assert!(storage.len() - 20 * 4 > PARALLEL_STREAM_BYTES, "{class}: one part only");
        let want = in_memory(&pt);
        assert_eq!(want.as_ref().unwrap().1.len(), numel as usize - 15);
        for threads in [1, 2, 3] {
            assert_same(&in_pool(threads, || stream(&pt)), &want, &format!("{class}, {threads} threads"));
        }
        // The storage's first byte: the view's, 5 elements before.
        let at = read_pt_bytes(&pt).map(|_| parse_pt(&pt).unwrap().bytes.as_ptr() as usize).unwrap()
            - pt.as_ptr() as usize
            - 5 * storage.len() / numel as usize;
        for damaged in [at + 7, at + storage.len() / 2 + 1, at + storage.len() - 3] {
            let mut bad = pt.clone();
            bad[damaged] ^= 0x10;
            let err = in_pool(3, || stream(&bad)).unwrap_err();
            assert!(err.problem.contains("checksum mismatch"), "{class} {damaged}: {err}");
            assert!(err.problem.ends_with("; copy the dump again"), "what to do: {err}");
        }
    }
}

#[test]
fn crc_in_parallel_parts_is_the_crc_of_the_whole() {
    let bytes: Vec<u8> =
        (0..PARALLEL_CRC_BYTES + 3 * CRC_PART + 17).map(|i| (i * 7 + i / 251) as u8).collect();
    for len in
        [0, 1, PARALLEL_CRC_BYTES - 1, PARALLEL_CRC_BYTES, PARALLEL_CRC_BYTES + CRC_PART + 1, bytes.len()]
    {
        let want = crc32fast::hash(&bytes[..len]);
        for threads in [1, 2, 3] {
            assert_eq!(in_pool(threads, || crc32(&bytes[..len])), want, "{len} bytes, {threads} threads");
        }
    }
}

/// `PtBlocks` over `bytes` written to a file, read in blocks of several sizes: where it opens, the blocks
/// make the in-memory reader's bytes and `finish` succeeds exactly where that reader does (the CRC);
/// where it fails to open, so does that reader. Returns whether it opened.
fn assert_blocks(bytes: &[u8], what: &str) -> bool {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, bytes).unwrap();
    let want = parse_pt(bytes).map(|t| (t.dtype, t.bytes.into_owned()));
    // What the header alone says is what opening says.
    let streamed = streamed_dtype(file.path());
    match open_pt_blocks(file.path()) {
        Ok(blocks) => assert_eq!(streamed.unwrap(), blocks.map(|b| b.dtype()), "{what}"),
        Err(e) => assert_eq!(streamed.unwrap_err(), e, "{what}"),
    }
    for size in [1, 4, 4096, READ_CHUNK - 1, 3 * READ_CHUNK] {
        let mut blocks = match open_pt_blocks(file.path()) {
            Ok(Some(blocks)) => blocks,
            Ok(None) => return false,
            Err(e) => {
                assert!(want.is_err(), "{what}: blocks {e}, in memory fine");
                return false;
            }
        };
        let mut got = Vec::new();
        let mut buf = vec![0u8; size];
        let len = blocks.len();
        loop {
            let block = blocks.next_block(&mut buf);
            assert!(block.len() == size || block.len() == len - got.len(), "{what}: {size}");
            if block.is_empty() {
                break;
            }
            got.extend_from_slice(block);
        }
        let dtype = blocks.dtype();
        match (blocks.finish(), &want) {
            (Ok(()), Ok((d, w))) => assert!(dtype == *d && got == *w, "{what}: blocks of {size}"),
            (Err(e), Err(_)) => assert!(e.path.is_some(), "{what}: {e}"),
            (got, want) => panic!("{what}: blocks {got:?}, in memory {:?}", want.as_ref().err()),
        }
        // Stopping half way still checks the whole member.
        let mut half = open_pt_blocks(file.path()).unwrap().unwrap();
        half.next_block(&mut vec![0u8; len / 2]);
        assert_eq!(half.finish().is_ok(), want.is_ok(), "{what}: half read");
    }
    true
}

#[test]
fn streams_storage_across_read_chunks() {
    // 3.5 read chunks of f32 and of bf16, viewed from element 5 to 10 before the end.
    let numel = (READ_CHUNK * 7 / 8) as u32;
    let values: Vec<f32> = (0..numel).map(|i| (i as f32 * 0.37).sin() * 1e3).collect();
    let f32_bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let bf16_bytes: Vec<u8> =
        values.iter().flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes()).collect();
    for (class, storage, dtype) in
        [("FloatStorage", &f32_bytes, DType::FLOAT), ("BFloat16Storage", &bf16_bytes, DType::BF16)]
    {
        let pt = archive(class, numel, 5, numel - 15, storage);
        assert!(assert_blocks(&pt, class));
        let got = stream(&pt);
        assert_same(&got, &in_memory(&pt), class);
        let (d, v, _) = got.unwrap();
        assert_eq!((d, v.len()), (dtype, numel as usize - 15), "{class}");
        let want = |i: usize| {
            if dtype == DType::BF16 {
                f32::from_bits(values[i].to_bits() & 0xffff_0000)
            } else {
                values[i]
            }
        };
        assert!(v.iter().enumerate().all(|(i, x)| x.to_bits() == want(i + 5).to_bits()), "{class}");

        // A flipped bit outside the view still fails the member's CRC.
        let last = pt.windows(storage.len()).position(|w| w == &storage[..]).unwrap() + storage.len() - 1;
        let mut bad = pt.clone();
        bad[last] ^= 1;
        assert!(assert_blocks(&bad, "flipped after the view"));
        let err = stream(&bad).unwrap_err();
        assert!(err.problem.contains("checksum mismatch"), "{err}");
        let whole = in_memory(&bad).unwrap_err();
        assert!(
            whole.problem.ends_with("; copy the dump again"),
            "the in-memory reader says the same: {whole}"
        );
    }
    // A view past the storage's end is refused before anything is read.
    let err = stream(&archive("FloatStorage", numel, 20, numel - 15, &f32_bytes)).unwrap_err();
    assert!(err.problem.contains("reaches element"), "{err}");
    // A storage shorter than the pickle's element count.
    assert!(stream(&archive("FloatStorage", numel, 0, 4, &f32_bytes[..64])).is_err());
}

#[test]
fn streaming_agrees_with_the_in_memory_reader_on_the_corpus_and_mutations() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/pt_reader");
    let mut seeds: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    seeds.sort();
    assert!(!seeds.is_empty());
    let mut opened = 0;
    for path in seeds {
        let bytes = std::fs::read(&path).unwrap();
        let name = path.display().to_string();
        assert_same(&stream(&bytes), &in_memory(&bytes), &name);
        opened += usize::from(assert_blocks(&bytes, &name));
        if !name.contains("valid") {
            continue;
        }
        for cut in (0..bytes.len()).step_by(13) {
            assert_same(&stream(&bytes[..cut]), &in_memory(&bytes[..cut]), &format!("{name} cut {cut}"));
            assert_blocks(&bytes[..cut], &format!("{name} cut {cut}"));
        }
        let mut m = bytes.clone();
        for i in (0..bytes.len()).step_by(5) {
            for v in [0x00, 0xff] {
                m[i] = v;
                assert_same(&stream(&m), &in_memory(&m), &format!("{name} byte {i} = {v}"));
            }
            m[i] = bytes[i];
        }
    }
    assert!(opened > 0, "no seed streams");
}

#[test]
fn refuses_views_outside_the_storage() {
    let storage: Vec<u8> = (0..12).collect();
    assert!(gather(&view(&[4, 4], &[4, 1], 0), &storage, 1).is_err());
    assert!(gather(&view(&[2], &[u64::MAX], 0), &storage, 1).is_err());
    assert!(gather(&view(&[u64::MAX, u64::MAX], &[0, 0], 0), &storage, 1).is_err());
    // Stride 0 may repeat, but not beyond MAX_EXPANSION times the storage.
    assert!(gather(&view(&[1 << 20], &[0], 0), &storage, 1).is_err());
}

/// A `.pt` file cut short (a copy interrupted, a full disk) has lost its zip directory: both readers say so
/// and what to do, as they do for a member that fails its checksum.
#[test]
fn a_pt_file_cut_short_says_to_copy_the_dump_again() {
    let storage: Vec<u8> = (0..64u32).flat_map(|v| (v as f32).to_le_bytes()).collect();
    let pt = archive("FloatStorage", 64, 0, 64, &storage);
    assert!(in_memory(&pt).is_ok() && stream(&pt).is_ok());
    let cut = &pt[..pt.len() / 2];
    for err in [in_memory(cut).unwrap_err(), stream(cut).unwrap_err()] {
        assert!(err.problem.starts_with("not a readable torch.save zip archive"), "{err}");
        assert!(err.problem.ends_with("copy the dump again)"), "what to do: {err}");
    }
}
