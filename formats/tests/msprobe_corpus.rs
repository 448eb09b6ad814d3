//! Replays the fuzz seed corpora of the msprobe readers (fuzz/corpus/pt_reader, fuzz/corpus/dump_json)
//! and mutates the valid seeds deterministically: every input must give Ok or Err, never a panic.

use accutrace_formats::msprobe::{dump_json, pt};
use std::path::PathBuf;

fn corpus(name: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(name);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {} missing: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus {}", dir.display());
    files
        .into_iter()
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect()
}

#[test]
fn pt_corpus_and_mutations() {
    for (name, bytes) in corpus("pt_reader") {
        let result = pt::read_pt_bytes(&bytes);
        assert_eq!(result.is_ok(), name.starts_with("valid"), "{name}: {:?}", result.err());
        if name == "bad_evil_global.pt" {
            let err = result.unwrap_err();
            assert!(err.problem.contains("os.system") && err.offset.is_some(), "{err}");
        }
        if !name.starts_with("valid") {
            continue;
        }
        for cut in (0..bytes.len()).step_by(7) {
            let _ = pt::read_pt_bytes(&bytes[..cut]);
        }
        let mut m = bytes.clone();
        for i in (0..bytes.len()).step_by(3) {
            for v in [0x00, 0xff, 0x7f, 0x80] {
                m[i] = v;
                let _ = pt::read_pt_bytes(&m);
            }
            m[i] = bytes[i];
        }
    }
}

#[test]
fn dump_json_corpus_and_mutations() {
    for (name, bytes) in corpus("dump_json") {
        let result = dump_json::parse(&bytes);
        assert_eq!(result.is_ok(), name.starts_with("valid"), "{name}: {:?}", result.err());
        if !name.starts_with("valid") {
            continue;
        }
        for cut in 0..bytes.len() {
            let _ = dump_json::parse(&bytes[..cut]);
        }
        let mut m = bytes.clone();
        for i in 0..bytes.len() {
            for v in [b'[', b'{', b'"', b'N', b'-', b'9'] {
                m[i] = v;
                let _ = dump_json::parse(&m);
            }
            m[i] = bytes[i];
        }
    }
}

#[test]
fn fixture_pt_files_decode() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/msprobe-tiny/target/step0/rank0");
    let dump = accutrace_formats::msprobe::MsprobeDump::open(&dir).unwrap();
    let mut tensors = 0;
    for e in &dump.entries {
        let Some(t) = e.tensor() else { continue };
        let (dtype, shape, values) = dump.load_values(e).unwrap();
        assert_eq!(Some(dtype), t.dtype, "{}", e.name);
        assert_eq!(shape, t.shape, "{}", e.name);
        assert_eq!(values.len() as u64, shape.iter().product::<u64>(), "{}", e.name);
        // Max and Min recorded by msprobe are attained by the decoded values.
        if let (Some(max), Some(min)) = (t.max.as_f64(), t.min.as_f64()) {
            let got_max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let got_min = values.iter().copied().fold(f32::INFINITY, f32::min) as f64;
            assert_eq!((got_max, got_min), (max, min), "{}", e.name);
        }
        tensors += 1;
    }
    assert_eq!(tensors, 149);
}
