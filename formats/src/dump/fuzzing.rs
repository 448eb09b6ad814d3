//! The bodies of the fuzz targets in `fuzz/`, here so that the seed corpora also run as normal tests
//! (`formats/tests/dump_fuzz_corpus.rs`). Each returns whether the input parsed; a panic is a bug.

use super::{decode_opdebug, format_file_name, parse_dump, parse_file_name, parse_stats_csv, NameMapping};
use crate::tensor::host::{host_values, DeviceTensor};
use crate::tensor::host_bytes::host_bytes;

/// `parse_dump` (both layouts) and the op-debug decoder, checking that every slice lies where it says; then
/// every tensor through the host conversions (values and raw host bytes), as a reader does: forged shapes
/// and dtypes must be refused, never overflow or allocate by what the header claims.
pub fn dump_parser(data: &[u8]) -> bool {
    let _ = decode_opdebug(data);
    let Ok(file) = parse_dump(data) else {
        return false;
    };
    let base = data.as_ptr() as usize;
    for t in file.inputs.iter().chain(&file.outputs) {
        assert_eq!(
            t.bytes.as_ptr() as usize - base,
            t.offset as usize,
            "slice offset of {:?}[{}]",
            t.io,
            t.index
        );
        let _ = decode_opdebug(t.bytes);
        let _ = t.dtype.name();
        let device = DeviceTensor {
            dtype: t.dtype,
            format: t.format,
            device_shape: &t.device_shape,
            original_shape: &t.original_shape,
            sub_format: t.sub_format,
            bytes: t.bytes,
        };
        let _ = host_values(&device, &mut Vec::new(), &mut Vec::new());
        let _ = host_bytes(&device);
    }
    for b in file.buffers.iter().chain(&file.workspaces) {
        let start = b.as_ptr() as usize - base;
        assert!(start + b.len() <= data.len());
    }
    true
}

/// File names (parse, format, parse again must agree), stats CSV and `mapping.csv`.
pub fn name_parser(data: &[u8]) -> bool {
    let stats = parse_stats_csv(data).is_ok();
    let mapping = NameMapping::parse(data).is_ok();
    let Ok(text) = std::str::from_utf8(data) else {
        return stats || mapping;
    };
    let name = match parse_file_name(text) {
        Ok(name) => name,
        Err(_) => return stats || mapping,
    };
    let again = parse_file_name(&format_file_name(&name));
    assert_eq!(again.as_ref(), Ok(&name), "format_file_name does not invert parse_file_name for {text:?}");
    true
}
