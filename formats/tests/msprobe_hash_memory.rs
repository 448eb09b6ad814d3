//! The content hash of an msprobe `.pt` tensor holds no buffer the size of the tensor
//! (`pt::stream_pt_file_hash`, what `diff` reads every msprobe tensor with): the bytes this thread allocates
//! are counted by this test binary's own allocator (`alloc_count`).

use accutrace_formats::hash::Xxh3;
use accutrace_formats::msprobe::pt;
use accutrace_formats::DType;
use alloc_count::PerThread;
use std::io::Write;

/// Per thread: the tests of this binary run side by side.
#[global_allocator]
static ALLOCATOR: PerThread = PerThread;

/// A `torch.save` archive of one 1-d tensor of `numel` elements of `class` (stored members, as torch writes).
fn archive(class: &str, numel: u32, storage: &[u8]) -> Vec<u8> {
    let int = |v: u32| [&[b'J'][..], &v.to_le_bytes()].concat();
    let mut p = vec![0x80, 2];
    p.extend(b"ctorch._utils\n_rebuild_tensor_v2\nq\x00((X\x07\x00\x00\x00storage");
    p.extend(format!("ctorch\n{class}\n").as_bytes());
    p.extend(b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpu");
    p.extend(int(numel));
    p.extend(b"tQ");
    p.extend(int(0));
    p.push(b'(');
    p.extend(int(numel));
    p.extend(b"t(");
    p.extend(int(1));
    p.extend(b"t\x89ccollections\nOrderedDict\n)Rtq\x01R.");
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in [("t/data.pkl", &p[..]), ("t/byteorder", b"little"), ("t/data/0", storage)] {
        zip.start_file(name, stored).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

#[test]
fn hashing_a_large_tensor_holds_no_copy_of_it() {
    const NUMEL: u32 = 1 << 22;
    let values: Vec<f32> = (0..NUMEL).map(|i| (i as f32 * 0.37).sin()).collect();
    let f32_bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let bf16_bytes: Vec<u8> =
        values.iter().flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes()).collect();
    for (class, storage, dtype) in
        [("FloatStorage", f32_bytes, DType::FLOAT), ("BFloat16Storage", bf16_bytes, DType::BF16)]
    {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&archive(class, NUMEL, &storage)).unwrap();
        drop(storage);

        // The values read: a buffer of the whole tensor as f32 (16 MiB), which shows the counting works.
        let mut hasher = Xxh3::new();
        let mut out = Vec::new();
        let (read, held) =
            PerThread::peak_while(|| pt::stream_pt_file(file.path(), &mut out, Some(&mut hasher)));
        assert_eq!(read.unwrap(), dtype);
        let want = hasher.digest();
        assert!(held >= NUMEL as usize * 4, "{class}: {held} bytes held reading the values");
        drop(out);

        // The hash alone: the same, through a buffer of one step's values, whatever the tensor's size.
        let mut hasher = Xxh3::new();
        let (hashed, held) = PerThread::peak_while(|| pt::stream_pt_file_hash(file.path(), &mut hasher));
        assert_eq!(hashed.unwrap(), dtype);
        assert_eq!(hasher.digest(), want, "{class}");
        assert!(held < 1 << 20, "{class}: {held} bytes held hashing");
    }
}
