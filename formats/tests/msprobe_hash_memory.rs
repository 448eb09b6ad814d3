//! The content hash of an msprobe `.pt` tensor holds no buffer the size of the tensor
//! (`pt::stream_pt_file_hash`, what `diff` reads every msprobe tensor with): the bytes this thread allocates
//! are counted by this test binary's own allocator.

use accutrace_formats::hash::Xxh3;
use accutrace_formats::msprobe::pt;
use accutrace_formats::DType;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write;

/// The system allocator, counting what the current thread holds and the most it held.
struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(bytes: isize) {
    // `try_with`: nothing is counted while the thread's locals are torn down. Const thread-locals without
    // destructors never allocate, so this cannot recurse into the allocator.
    let _ = HELD.try_with(|held| {
        held.set(held.get() + bytes);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(held.get())));
    });
}

// SAFETY: every call goes to the system allocator with the caller's arguments unchanged; the counting
// beside it neither allocates nor touches the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most this thread held beyond what it held before, while `f` ran.
fn peak_while<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let before = HELD.with(Cell::get);
    PEAK.with(|p| p.set(before));
    let r = f();
    (r, (PEAK.with(Cell::get) - before) as usize)
}

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
        let (read, held) = peak_while(|| pt::stream_pt_file(file.path(), &mut out, Some(&mut hasher)));
        assert_eq!(read.unwrap(), dtype);
        let want = hasher.digest();
        assert!(held >= NUMEL as usize * 4, "{class}: {held} bytes held reading the values");
        drop(out);

        // The hash alone: the same, through a buffer of one step's values, whatever the tensor's size.
        let mut hasher = Xxh3::new();
        let (hashed, held) = peak_while(|| pt::stream_pt_file_hash(file.path(), &mut hasher));
        assert_eq!(hashed.unwrap(), dtype);
        assert_eq!(hasher.digest(), want, "{class}");
        assert!(held < 1 << 20, "{class}: {held} bytes held hashing");
    }
}
