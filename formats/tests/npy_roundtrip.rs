//! .npy: byte-exact agreement with NumPy's writer, round trips for every dtype in both orders, big-endian
//! and version 2.0/3.0 files, the widening writer, and errors with offsets (never panics) on bad input.

use accutrace_formats::npy::{self, descr_of, write_for_numpy, write_npy, write_npy_ordered, NpyView};
use accutrace_formats::tensor::lanes_per_element;
use accutrace_formats::DType;
use proptest::prelude::*;

const NUMPY_DTYPES: [DType; 14] = [
    DType::FLOAT16,
    DType::FLOAT,
    DType::DOUBLE,
    DType::INT8,
    DType::INT16,
    DType::INT32,
    DType::INT64,
    DType::UINT8,
    DType::UINT16,
    DType::UINT32,
    DType::UINT64,
    DType::BOOL,
    DType::COMPLEX64,
    DType::COMPLEX128,
];

fn file(dtype: DType, shape: &[u64], data: &[u8], fortran: bool) -> Vec<u8> {
    let mut out = Vec::new();
    write_npy_ordered(&mut out, dtype, shape, data, fortran).unwrap();
    out
}

/// A file with a hand-written header (for versions and descrs our writer does not produce).
fn raw(version: u8, header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = b"\x93NUMPY".to_vec();
    out.extend([version, 0]);
    if version == 1 {
        out.extend((header.len() as u16).to_le_bytes());
    } else {
        out.extend((header.len() as u32).to_le_bytes());
    }
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

#[test]
fn writer_matches_numpy_byte_for_byte() {
    // np.save(f, np.arange(3, dtype='<f4')): 10-byte prefix, header padded with spaces to 118 bytes + '\n'.
    let mut expected =
        b"\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }".to_vec();
    expected.resize(127, b' ');
    expected.push(b'\n');
    for v in [0f32, 1.0, 2.0] {
        expected.extend(v.to_le_bytes());
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.npy");
    npy::write_f32(&path, &[3], &[0.0, 1.0, 2.0]).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), expected);
    // 0-d and 2-d shapes are written as "()" and "(2, 3)".
    let scalar = file(DType::INT64, &[], &7i64.to_le_bytes(), false);
    assert!(String::from_utf8_lossy(&scalar[10..scalar.len() - 8]).contains("'shape': (), }"));
    let view = NpyView::parse(&scalar).unwrap();
    assert_eq!((view.shape.len(), view.elements(), view.to_f64_c_order().unwrap()), (0, 1, vec![7.0]));
}

#[test]
fn fortran_order_is_returned_in_c_order() {
    // A 2x3x2 array with value = its C-order index, stored column-major.
    let shape = [2u64, 3, 2];
    let c_values: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let mut f_data = Vec::new();
    for k in 0..2 {
        for j in 0..3 {
            for i in 0..2 {
                f_data.extend(c_values[i * 6 + j * 2 + k].to_le_bytes());
            }
        }
    }
    let bytes = file(DType::FLOAT, &shape, &f_data, true);
    let view = NpyView::parse(&bytes).unwrap();
    assert!(view.fortran_order);
    assert_eq!(view.to_f32_c_order().unwrap(), c_values);
    // Complex lanes move in pairs.
    let c: Vec<f32> = (0..12).map(|i| i as f32).collect(); // 2x3 complex64 in C order: (0,1), (2,3), ...
    let mut f = Vec::new();
    for j in 0..3 {
        for i in 0..2 {
            let e = i * 3 + j;
            f.extend(c[2 * e].to_le_bytes());
            f.extend(c[2 * e + 1].to_le_bytes());
        }
    }
    let bytes = file(DType::COMPLEX64, &[2, 3], &f, true);
    assert_eq!(NpyView::parse(&bytes).unwrap().to_f32_c_order().unwrap(), c);
}

#[test]
fn big_endian_files_are_converted() {
    let data: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_be_bytes()).collect();
    let bytes = raw(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n", &data);
    let view = NpyView::parse(&bytes).unwrap();
    assert!(view.big_endian);
    assert_eq!(view.to_f32_c_order().unwrap(), [1.5, -2.0]);
    let data: Vec<u8> = [-300i16].iter().flat_map(|v| v.to_be_bytes()).collect();
    let bytes = raw(1, "{'descr': '>i2', 'fortran_order': False, 'shape': (1,), }\n", &data);
    assert_eq!(NpyView::parse(&bytes).unwrap().to_f32_c_order().unwrap(), [-300.0]);
    // Complex: each part is swapped on its own.
    let data: Vec<u8> = [1.0f64, -4.0].iter().flat_map(|v| v.to_be_bytes()).collect();
    let bytes = raw(1, "{'descr': '>c16', 'fortran_order': False, 'shape': (1,), }\n", &data);
    assert_eq!(NpyView::parse(&bytes).unwrap().to_f64_c_order().unwrap(), [1.0, -4.0]);
}

#[test]
fn versions_2_and_3_and_header_variants_parse() {
    let data = 5u8.to_le_bytes();
    for version in [2, 3] {
        let header = "{\"shape\": (1L,), \"descr\": \"|u1\", \"fortran_order\": False}\n";
        let view_bytes = raw(version, header, &data);
        let view = NpyView::parse(&view_bytes).unwrap();
        assert_eq!((view.dtype, view.shape.clone()), (DType::UINT8, vec![1]));
        assert_eq!(view.data_offset, 12 + header.len() as u64);
        assert_eq!(view.data, &[5]);
    }
    // Version 3.0 allows UTF-8 in the header (e.g. in unused keys); 1.0 does not.
    let header = "{'descr': '|b1', 'fortran_order': False, 'shape': (1,), 'note': 'é'}\n";
    assert!(NpyView::parse(&raw(3, header, &[1])).is_ok());
    assert!(NpyView::parse(&raw(1, header, &[1])).is_err());
    assert_eq!(
        NpyView::parse(&raw(1, "{'descr':'?','fortran_order':True,'shape':(1,1)}", &[1])).unwrap().dtype,
        DType::BOOL
    );
}

#[test]
fn bad_files_give_errors_with_offsets() {
    let good = file(DType::FLOAT, &[2], &[0; 8], false);
    let cases: Vec<(Vec<u8>, u64, &str)> = vec![
        (b"NUMPY".to_vec(), 0, "magic"),
        ([&b"\x93NUMPY\x04\x00"[..], &[0, 0]].concat(), 6, "version 4.0"),
        (good[..50].to_vec(), 6, "runs past the end"),
        (good[..good.len() - 1].to_vec(), 128, "truncated"),
        ([&good[..], &[0]].concat(), 128, "trailing bytes"),
        (raw(1, "{'descr': '<U8', 'fortran_order': False, 'shape': (1,), }", &[0; 32]), 20, "'<U8'"),
        (raw(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", &[]), 20, "structured"),
        (raw(1, "{'descr': '<f4', 'shape': (1,), }", &[0; 4]), 10, "fortran_order"),
        (raw(1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (1,), }", &[0; 4]), 44, "expected a string"),
        (raw(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", &[]), 61, "non-negative"),
        (
            raw(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", &[]),
            80,
            "64 bits",
        ),
        (
            raw(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", &[]),
            10,
            "overflows",
        ),
        (
            raw(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), ", &[]),
            66,
            "expected a quoted string",
        ),
    ];
    for (bytes, offset, needle) in cases {
        let err = NpyView::parse(&bytes).unwrap_err();
        assert!(err.problem.contains(needle), "{needle}: {err}");
        assert_eq!(err.offset, Some(offset), "{needle}: {err}");
    }
}

#[test]
fn write_for_numpy_widens_and_says_so() {
    let mut out = Vec::new();
    let bf16: Vec<u8> = [0x3f80u16, 0xc040].iter().flat_map(|v| v.to_le_bytes()).collect();
    let note = write_for_numpy(&mut out, DType::BF16, &[2], &bf16).unwrap();
    assert_eq!(note.as_deref(), Some("BF16 written as float32; numpy has no bfloat16"));
    let view = NpyView::parse(&out).unwrap();
    assert_eq!((view.dtype, view.to_f32_c_order().unwrap()), (DType::FLOAT, vec![1.0, -3.0]));

    for (dtype, bytes, shape, expect_dtype, values) in [
        (DType::INT4, vec![0x8f, 0x07], vec![3u64], DType::INT8, vec![-1.0, -8.0, 7.0]),
        (DType::UINT1, vec![0b101], vec![3], DType::UINT8, vec![1.0, 0.0, 1.0]),
        (DType::FLOAT8_E4M3FN, vec![0x7e], vec![1], DType::FLOAT, vec![448.0]),
        (DType::HIFLOAT8, vec![0x53, 0x6e], vec![2], DType::FLOAT, vec![0.109375, 32768.0]),
        (DType::QINT8, vec![0xff], vec![1], DType::INT8, vec![-1.0]),
        (DType::COMPLEX32, vec![0x00, 0x3c, 0x00, 0xbc], vec![1], DType::COMPLEX64, vec![1.0, -1.0]),
    ] {
        let mut out = Vec::new();
        let note = write_for_numpy(&mut out, dtype, &shape, &bytes).unwrap().expect("a note");
        assert!(note.starts_with(&*dtype.name()), "{note}");
        let view = NpyView::parse(&out).unwrap();
        assert_eq!((view.dtype, view.to_f32_c_order().unwrap()), (expect_dtype, values), "{dtype}");
    }
    // Native dtypes are written unchanged, with no note.
    let mut out = Vec::new();
    assert_eq!(write_for_numpy(&mut out, DType::INT16, &[1], &[1, 0]).unwrap(), None);
    assert!(write_for_numpy(&mut Vec::new(), DType::STRING, &[1], &[0]).is_err());
    assert!(write_npy(&mut Vec::new(), DType::FLOAT, &[3], &[0; 8]).is_err());
}

proptest! {
    #[test]
    fn every_dtype_round_trips_in_both_orders(
        k in 0..NUMPY_DTYPES.len(),
        shape in prop::collection::vec(0u64..5, 0..4),
        fortran in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dtype = NUMPY_DTYPES[k];
        let n: u64 = shape.iter().product();
        let len = dtype.byte_size(n).unwrap() as usize;
        let mut state = seed | 1;
        let data: Vec<u8> = (0..len).map(|_| { state ^= state << 13; state ^= state >> 7; state ^= state << 17; state as u8 }).collect();
        let bytes = file(dtype, &shape, &data, fortran);
        prop_assert_eq!((bytes.len() - data.len()) % 64, 0);
        let view = NpyView::parse(&bytes).unwrap();
        prop_assert_eq!(view.dtype, dtype);
        prop_assert_eq!(&view.shape, &shape);
        prop_assert_eq!(view.fortran_order, fortran);
        prop_assert_eq!(view.data, &data[..]);
        prop_assert_eq!(view.data_offset as usize % 64, 0);
        prop_assert!(descr_of(dtype).is_some());
        let lanes = lanes_per_element(dtype) as u64;
        prop_assert_eq!(view.to_f64_c_order().unwrap().len() as u64, n * lanes);
    }

    #[test]
    fn corrupted_files_never_panic(pos in 0usize..200, byte in any::<u8>(), cut in 0usize..300) {
        let mut bytes = file(DType::FLOAT16, &[3, 5], &[0x3c; 30], true);
        if pos < bytes.len() {
            bytes[pos] = byte;
        }
        bytes.truncate(cut.max(1));
        if let Ok(view) = NpyView::parse(&bytes) {
            let _ = view.to_f32_c_order();
        }
    }
}
