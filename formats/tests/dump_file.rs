//! Dump file reading and writing: both layouts, every malformed-input error, and round trips.

use accutrace_formats::dump::{
    encode_dump, encode_legacy_dump, format_name, parse_dump, parse_dump_file, write_dump, DumpLayout, Io,
    MappedFile,
};
use accutrace_formats::tensor::{decode_f32, encode_f32};
use accutrace_formats::DType;
use accutrace_proto::dumpdata::{DumpData, OpBuffer, OpInput, OpOutput, OriginalOp, Shape, Workspace};
use proptest::prelude::*;
use prost::Message;

fn shape(dims: &[u64]) -> Option<Shape> {
    Some(Shape { dim: dims.to_vec() })
}

fn sample_header() -> DumpData {
    DumpData {
        version: "2.0".into(),
        dump_time: 1_700_000_000_123_456,
        op_name: "layer0/conv.1".into(),
        input: vec![
            OpInput { data_type: 2, format: 2, shape: shape(&[2, 2]), ..Default::default() },
            OpInput {
                data_type: 1,
                format: 3,
                shape: shape(&[1, 1, 1, 1, 16]),
                original_shape: shape(&[1, 3, 1, 1]),
                ..Default::default()
            },
        ],
        output: vec![OpOutput {
            data_type: 27,
            format: 29,
            shape: shape(&[1, 1, 16, 16]),
            original_shape: shape(&[3, 5]),
            original_op: Some(OriginalOp {
                name: "mlp.fc1".into(),
                output_index: 0,
                data_type: 27,
                format: 2,
            }),
            ..Default::default()
        }],
        buffer: vec![OpBuffer::default()],
        space: vec![Workspace::default()],
        ..Default::default()
    }
}

const IN0: &[u8] = &[1, 2, 3, 4, 5, 6, 7, 8];
const IN1: &[u8] = &[9; 64];
const OUT0: &[u8] = &[0xAB; 512];
const BUF0: &[u8] = &[7, 7, 7];
const WS0: &[u8] = &[0x55; 5];

fn sample_file() -> Vec<u8> {
    encode_dump(&sample_header(), &[IN0, IN1], &[OUT0], &[BUF0], &[WS0]).unwrap()
}

fn header_len(file: &[u8]) -> u64 {
    u64::from_le_bytes(file[..8].try_into().unwrap())
}

/// A binary file with a hand-made header (sizes as given, no consistency enforced) and `tail` after it.
fn raw_binary(header: &DumpData, tail: &[u8]) -> Vec<u8> {
    let encoded = header.encode_to_vec();
    let mut out = (encoded.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&encoded);
    out.extend_from_slice(tail);
    out
}

#[test]
fn binary_layout_round_trips_zero_copy_with_offsets() {
    let bytes = sample_file();
    let h = header_len(&bytes);
    let file = parse_dump(&bytes).unwrap();
    assert_eq!(file.layout, DumpLayout::Binary);
    assert_eq!(file.op_name(), "layer0/conv.1");
    assert_eq!(file.header.dump_time, 1_700_000_000_123_456);
    assert_eq!(file.inputs.len(), 2);
    assert_eq!(file.inputs[0].bytes, IN0);
    assert_eq!(file.inputs[0].offset, 8 + h);
    assert_eq!(file.inputs[1].offset, 8 + h + 8);
    assert_eq!(file.inputs[1].original_shape, vec![1, 3, 1, 1]);
    assert_eq!(file.inputs[1].io, Io::Input);
    let out = file.tensor(Io::Output, 0).unwrap();
    assert_eq!((out.dtype, out.format, out.index), (DType::BF16, 29, 0));
    assert_eq!(out.offset, 8 + h + 72);
    assert_eq!(out.original_op.as_ref().unwrap().name, "mlp.fc1");
    assert_eq!(format_name(out.format), "FRACTAL_NZ");
    assert_eq!(file.buffers, vec![BUF0]);
    assert_eq!(file.workspaces, vec![WS0]);
    // Zero copy: the slices point into the input buffer.
    assert!(std::ptr::eq(file.outputs[0].bytes.as_ptr(), bytes[(8 + h + 72) as usize..].as_ptr()));
    // The writer filled in every size and left data empty.
    assert_eq!(file.header.input[1].size, 64);
    assert_eq!(file.header.output[0].size, 512);
    assert_eq!(file.header.space[0].size, 5);
    assert!(file.header.output[0].data.is_empty());
    assert_eq!(bytes.len() as u64, 8 + h + 8 + 64 + 512 + 3 + 5);
}

#[test]
fn write_dump_streams_the_same_bytes_and_checks_counts() {
    let mut streamed = Vec::new();
    write_dump(&mut streamed, &sample_header(), &[IN0, IN1], &[OUT0], &[BUF0], &[WS0]).unwrap();
    assert_eq!(streamed, sample_file());
    let err = encode_dump(&sample_header(), &[IN0], &[OUT0], &[BUF0], &[WS0]).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(err.to_string(), "header lists 2 inputs but 1 input slices were given");
}

#[test]
fn legacy_layout_is_detected_and_read_zero_copy() {
    let mut header = sample_header();
    header.version = "1.0".into();
    let bytes = encode_legacy_dump(&header, &[IN0, IN1], &[OUT0], &[BUF0], &[WS0]).unwrap();
    let file = parse_dump(&bytes).unwrap();
    assert_eq!(file.layout, DumpLayout::Legacy);
    assert_eq!(file.inputs[1].bytes, IN1);
    assert_eq!(file.outputs[0].bytes, OUT0);
    assert_eq!(file.buffers, vec![BUF0]);
    assert_eq!(file.workspaces, vec![WS0]);
    for t in file.inputs.iter().chain(&file.outputs) {
        let at = t.offset as usize;
        assert_eq!(&bytes[at..at + t.bytes.len()], t.bytes);
    }
    assert!(file.header.input.iter().all(|t| t.data.is_empty()));
    assert_eq!(file.outputs[0].original_op.as_ref().unwrap().name, "mlp.fc1");
    // Version "2.0" means binary: such a file is not taken as old layout.
    header.version = "2.0".into();
    assert!(encode_legacy_dump(&header, &[IN0, IN1], &[OUT0], &[BUF0], &[WS0]).is_err());
}

#[test]
fn empty_and_tiny_files_are_refused_at_offset_zero() {
    for len in [0usize, 1, 8] {
        let err = parse_dump(&vec![0u8; len]).unwrap_err();
        assert_eq!(err.offset, Some(0));
        assert!(err.problem.starts_with(&format!("file is {len} bytes;")), "{err}");
    }
}

#[test]
fn header_len_beyond_the_file_is_refused() {
    let mut bytes = 1000u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(&[0; 4]);
    let err = parse_dump(&bytes).unwrap_err();
    assert_eq!(err.offset, Some(0));
    assert!(
        err.problem.starts_with("header length 1000 exceeds the 4 bytes that follow the length field"),
        "{err}"
    );
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.push(1);
    let err = parse_dump(&huge).unwrap_err();
    assert!(err.problem.contains(&format!("header length {} exceeds the 1 bytes", u64::MAX)), "{err}");
}

#[test]
fn truncated_and_overlong_files_name_the_size_mismatch() {
    let bytes = sample_file();
    let h = header_len(&bytes);
    let err = parse_dump(&bytes[..bytes.len() - 1]).unwrap_err();
    assert_eq!(err.offset, Some(8 + h));
    assert_eq!(err.problem, "header declares 5 tensors totalling 592 bytes but 591 bytes follow the header");
    let mut longer = bytes.clone();
    longer.push(0);
    let err = parse_dump(&longer).unwrap_err();
    assert_eq!(err.problem, "header declares 5 tensors totalling 592 bytes but 593 bytes follow the header");
    // Cut inside the header: the header length no longer fits.
    let err = parse_dump(&bytes[..20]).unwrap_err();
    assert_eq!(err.offset, Some(0));
    assert!(err.problem.contains(&format!("header length {h} exceeds the 12 bytes")), "{err}");
}

#[test]
fn sizes_whose_sum_overflows_are_refused() {
    let mut header = sample_header();
    header.input[0].size = u64::MAX - 1;
    header.input[1].size = 2;
    let err = parse_dump(&raw_binary(&header, &[0; 16])).unwrap_err();
    assert_eq!(err.offset, Some(8));
    assert_eq!(err.problem, "tensor sizes overflow a 64-bit sum at input[1] (size 2)");
    // One huge size without overflow is a plain mismatch.
    header.input[1].size = 0;
    let err = parse_dump(&raw_binary(&header, &[0; 16])).unwrap_err();
    assert!(err.problem.contains(&format!("totalling {} bytes but 16 bytes follow", u64::MAX - 1)), "{err}");
}

#[test]
fn malformed_protobuf_header_is_refused_at_offset_8() {
    // Field 1 (string) claims 5 bytes but only 1 follows inside the 3-byte header.
    let mut bytes = 3u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(&[0x0a, 0x05, b'a']);
    let err = parse_dump(&bytes).unwrap_err();
    assert_eq!(err.offset, Some(8));
    assert!(err.problem.starts_with("malformed DumpData header (3 bytes):"), "{err}");
}

#[test]
fn inline_data_in_the_binary_layout_is_refused() {
    let mut header = sample_header();
    header.input.truncate(1);
    header.output.clear();
    header.buffer.clear();
    header.space.clear();
    header.input[0].data = vec![1, 2];
    header.input[0].size = 2;
    let err = parse_dump(&raw_binary(&header, &[1, 2])).unwrap_err();
    assert_eq!(
        err.problem,
        "input[0] carries 2 inline bytes, but the binary layout keeps every data field empty"
    );
}

#[test]
fn unknown_enum_values_decode_and_are_named_later() {
    let mut header = sample_header();
    header.input[0].data_type = 999;
    header.input[0].format = 777;
    header.output[0].original_op.as_mut().unwrap().data_type = 555;
    let bytes = encode_dump(&header, &[IN0, IN1], &[OUT0], &[BUF0], &[WS0]).unwrap();
    let file = parse_dump(&bytes).unwrap();
    assert_eq!(file.inputs[0].dtype.code(), 999);
    assert_eq!(file.inputs[0].dtype.name(), "UNKNOWN(999)");
    assert_eq!(format_name(file.inputs[0].format), "UNKNOWN(777)");
    assert_eq!(file.outputs[0].original_op.as_ref().unwrap().data_type, 555);
}

#[test]
fn mapped_files_parse_and_errors_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("Conv2D.conv.1.2.3");
    std::fs::write(&good, sample_file()).unwrap();
    let map = MappedFile::open(&good).unwrap();
    let file = parse_dump_file(&map).unwrap();
    assert_eq!(file.outputs[0].bytes, OUT0);

    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let map = MappedFile::open(&empty).unwrap();
    assert!(map.bytes().is_empty());
    let err = parse_dump_file(&map).unwrap_err();
    assert_eq!(err.path.as_deref(), Some(empty.as_path()));
    assert!(err.to_string().contains("empty: at byte 0: file is 0 bytes"), "{err}");

    let err = MappedFile::open(dir.path().join("missing")).unwrap_err();
    assert!(err.path.unwrap().ends_with("missing"));
}

fn tensor_bytes() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..48), 0..4)
}

prop_compose! {
    fn arbitrary_dump()(
        version in "[0-9.]{0,4}",
        op_name in "\\PC{0,24}",
        dump_time in any::<u64>(),
        inputs in tensor_bytes(),
        outputs in tensor_bytes(),
        buffers in tensor_bytes(),
        spaces in tensor_bytes(),
        dtype in any::<i32>(),
        format in any::<i32>(),
        dims in prop::collection::vec(any::<u64>(), 0..5),
        origin in prop::option::of("[a-z_.]{1,12}"),
    ) -> (DumpData, [Vec<Vec<u8>>; 4]) {
        let header = DumpData {
            version,
            op_name,
            dump_time,
            input: inputs.iter().map(|_| OpInput { data_type: dtype, format, shape: shape(&dims), sub_format: format, ..Default::default() }).collect(),
            output: outputs.iter().map(|_| OpOutput {
                data_type: dtype,
                format,
                original_shape: shape(&dims),
                original_op: origin.clone().map(|name| OriginalOp { name, output_index: 1, data_type: dtype, format }),
                ..Default::default()
            }).collect(),
            buffer: buffers.iter().map(|_| OpBuffer::default()).collect(),
            space: spaces.iter().map(|_| Workspace::default()).collect(),
            ..Default::default()
        };
        (header, [inputs, outputs, buffers, spaces])
    }
}

fn slices(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(|b| b.as_slice()).collect()
}

proptest! {
    #[test]
    fn write_then_parse_round_trips((header, [ins, outs, bufs, spaces]) in arbitrary_dump(), legacy in any::<bool>()) {
        let (i, o, b, s) = (slices(&ins), slices(&outs), slices(&bufs), slices(&spaces));
        let legacy = legacy && header.version != "2.0";
        let bytes = if legacy {
            encode_legacy_dump(&header, &i, &o, &b, &s).unwrap()
        } else {
            encode_dump(&header, &i, &o, &b, &s).unwrap()
        };
        // Legacy files with nothing in them can be too short to be taken for a dump at all.
        if bytes.len() <= 8 {
            prop_assert!(parse_dump(&bytes).is_err());
            return Ok(());
        }
        let file = parse_dump(&bytes).unwrap();
        prop_assert_eq!(file.layout, if legacy { DumpLayout::Legacy } else { DumpLayout::Binary });
        prop_assert_eq!(file.inputs.iter().map(|t| t.bytes).collect::<Vec<_>>(), i);
        prop_assert_eq!(file.outputs.iter().map(|t| t.bytes).collect::<Vec<_>>(), o);
        prop_assert_eq!(&file.buffers, &b);
        prop_assert_eq!(&file.workspaces, &s);
        let mut expected = header.clone();
        expected.input.iter_mut().zip(&ins).for_each(|(t, d)| t.size = d.len() as u64);
        expected.output.iter_mut().zip(&outs).for_each(|(t, d)| t.size = d.len() as u64);
        expected.buffer.iter_mut().zip(&bufs).for_each(|(t, d)| t.size = d.len() as u64);
        expected.space.iter_mut().zip(&spaces).for_each(|(t, d)| t.size = d.len() as u64);
        prop_assert_eq!(&file.header, &expected);
        for t in &file.inputs {
            prop_assert_eq!(t.dtype.code(), header.input[t.index].data_type);
            prop_assert_eq!(&t.device_shape, &header.input[t.index].shape.as_ref().unwrap().dim);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse_dump(&bytes);
    }

    #[test]
    fn every_truncation_of_a_valid_file_is_an_error(cut in 0usize..800) {
        let bytes = sample_file();
        if cut < bytes.len() {
            prop_assert!(parse_dump(&bytes[..cut]).is_err());
        }
    }
}

/// `DumpTensor`s without their bytes, as `BinaryHeader` lists them.
fn without_bytes<'a>(
    tensors: &[accutrace_formats::dump::DumpTensor<'a>],
) -> Vec<accutrace_formats::dump::DumpTensor<'a>> {
    tensors.iter().map(|t| accutrace_formats::dump::DumpTensor { bytes: &[], ..t.clone() }).collect()
}

#[test]
fn a_binary_header_from_the_first_bytes_is_what_parse_dump_reads() {
    use accutrace_formats::dump::BinaryHeader;
    let bytes = sample_file();
    let header_end = 8 + header_len(&bytes) as usize;
    let file = parse_dump(&bytes).unwrap();
    for n in 0..=bytes.len() {
        let got = BinaryHeader::parse(&bytes[..n]).unwrap();
        if n < header_end {
            assert_eq!(got, None, "{n} bytes hold no whole header");
            continue;
        }
        let h = got.unwrap_or_else(|| panic!("{n} bytes hold the header"));
        assert_eq!(h.header, file.header);
        assert_eq!(h.file_len, bytes.len() as u64);
        assert_eq!(h.inputs, without_bytes(&file.inputs));
        assert_eq!(h.outputs, without_bytes(&file.outputs));
        for t in file.inputs.iter().chain(&file.outputs) {
            assert_eq!(h.size(t), t.bytes.len() as u64);
            assert_eq!(&bytes[t.offset as usize..][..t.bytes.len()], t.bytes);
        }
    }
    // An old-layout file is never taken for a binary header (its first 8 bytes announce more than the file
    // holds, or what they announce does not decode): the caller keeps or reassembles it whole.
    let old_header = DumpData { version: String::new(), ..sample_header() };
    let legacy = encode_legacy_dump(&old_header, &[IN0, IN1], &[OUT0], &[BUF0], &[WS0]).unwrap();
    assert!(!matches!(BinaryHeader::parse(&legacy), Ok(Some(_))));
    assert_eq!(parse_dump(&legacy).unwrap().layout, DumpLayout::Legacy);
    // A header that does not decode, and one with inline data, are refused like parse_dump refuses them.
    let mut bad = bytes[..header_end].to_vec();
    bad[8] = 0xFF;
    bad[9] = 0xFF;
    assert!(BinaryHeader::parse(&bad).is_err());
    let mut inline = sample_header();
    inline.input[0].data = vec![1, 2];
    assert!(BinaryHeader::parse(&raw_binary(&inline, &[])).is_err());
    // Sizes that overflow 64 bits are refused, not wrapped.
    let mut huge = sample_header();
    huge.input[0].size = u64::MAX;
    huge.output[0].size = 2;
    assert!(BinaryHeader::parse(&raw_binary(&huge, &[])).is_err());
}

/// A HIFLOAT4 output (the runtime's newer dtype 41) between two float16 outputs: the header's sizes place
/// every tensor, the float16 ones decode to their values, and the HIFLOAT4 one is named and refused by
/// name, never read as numbers. Its `arg_index` (field 12) reads back; the others have none.
#[test]
fn a_hifloat4_output_between_float16_outputs_is_named_and_the_float16_ones_read() {
    let fp16 = |values: &[f32]| encode_f32(DType::FLOAT16, values).unwrap();
    let (first, last) = (fp16(&[1.0, -2.0, 0.5]), fp16(&[3.0, 4.0]));
    let hifloat4 = [0x21, 0x43, 0x05]; // five 4-bit elements, two to a byte
    let output = |dtype: DType, dims: &[u64]| OpOutput {
        data_type: dtype.code(),
        format: 2,
        shape: shape(dims),
        ..Default::default()
    };
    let header = DumpData {
        version: "2.0".into(),
        op_name: "layer0/quant".into(),
        output: vec![
            output(DType::FLOAT16, &[3]),
            OpOutput { data_type: 41, arg_index: 4, ..output(DType::FLOAT16, &[5]) },
            output(DType::FLOAT16, &[2]),
        ],
        ..Default::default()
    };
    for legacy in [false, true] {
        let bytes = if legacy {
            encode_legacy_dump(
                &DumpData { version: "1.0".into(), ..header.clone() },
                &[],
                &[&first, &hifloat4, &last],
                &[],
                &[],
            )
        } else {
            encode_dump(&header, &[], &[&first, &hifloat4, &last], &[], &[])
        }
        .unwrap();
        let file = parse_dump(&bytes).unwrap();
        let [a, hif4, b] = &file.outputs[..] else { panic!("three outputs: {:?}", file.outputs) };
        let mut values = Vec::new();
        decode_f32(a.dtype, a.bytes, 3, &mut values).unwrap();
        assert_eq!(values, [1.0, -2.0, 0.5], "legacy {legacy}");
        decode_f32(b.dtype, b.bytes, 2, &mut values).unwrap();
        assert_eq!(values, [3.0, 4.0], "legacy {legacy}");
        assert_eq!((hif4.dtype, hif4.dtype.name()), (DType::HIFLOAT4, "HIFLOAT4".into()));
        assert_eq!(hif4.bytes, hifloat4);
        assert_eq!(hif4.dtype.byte_size(5), Some(hif4.bytes.len() as u64), "sized as the vendor sizes it");
        assert_eq!(
            hif4.dtype.undecodable_reason().unwrap(),
            "HIFLOAT4: accutrace cannot decode its values yet"
        );
        let refused = decode_f32(hif4.dtype, hif4.bytes, 5, &mut values).unwrap_err();
        assert!(refused.problem.contains("HIFLOAT4"), "{refused}");
        assert_eq!((a.arg_index, hif4.arg_index, b.arg_index), (0, 4, 0));
    }
}

/// The runtime's `OutputFormat` (hicann/runtime 681ef761 `src/dfx/adump/proto/dump_task.proto`), written out
/// by hand: a code or name of ours that differs fails here. Three are spelled differently there (DHWCH,
/// NYUV, NYUV_A); ours are the older proto's and GE's (`FORMAT_DHWCN` in metadef's graph/types.h) and
/// the statistics CSV reader maps the newer spellings to them.
#[test]
fn every_format_code_and_name_is_the_vendor_s() {
    let vendor = [
        "NCHW",
        "NHWC",
        "ND",
        "NC1HWC0",
        "FRACTAL_Z",
        "NC1C0HWPAD",
        "NHWC1C0",
        "FSR_NCHW",
        "FRACTAL_DECONV",
        "C1HWNC0",
        "FRACTAL_DECONV_TRANSPOSE",
        "FRACTAL_DECONV_SP_STRIDE_TRANS",
        "NC1HWC0_C04",
        "FRACTAL_Z_C04",
        "CHWN",
        "FRACTAL_DECONV_SP_STRIDE8_TRANS",
        "HWCN",
        "NC1KHKWHWC0",
        "BN_WEIGHT",
        "FILTER_HWCK",
        "HASHTABLE_LOOKUP_LOOKUPS",
        "HASHTABLE_LOOKUP_KEYS",
        "HASHTABLE_LOOKUP_VALUE",
        "HASHTABLE_LOOKUP_OUTPUT",
        "HASHTABLE_LOOKUP_HITS",
        "C1HWNCoC0",
        "MD",
        "NDHWC",
        "FRACTAL_ZZ",
        "FRACTAL_NZ",
        "NCDHW",
        "DHWCH",
        "NDC1HWC0",
        "FRACTAL_Z_3D",
        "CN",
        "NC",
        "DHWNC",
        "FRACTAL_Z_3D_TRANSPOSE",
        "FRACTAL_ZN_LSTM",
        "FRACTAL_Z_G",
        "RESERVED",
        "ALL",
        "NULL",
        "ND_RNN_BIAS",
        "FRACTAL_ZN_RNN",
        "NYUV",
        "NYUV_A",
        "NCL",
        "FRACTAL_Z_WINO",
        "C1HWC0",
    ];
    let ours_for = |name: &'static str| match name {
        "DHWCH" => "DHWCN",
        "NYUV" => "YUV",
        "NYUV_A" => "YUV_A",
        name => name,
    };
    for (code, name) in vendor.into_iter().enumerate() {
        assert_eq!(format_name(code as i32), ours_for(name), "format {code}");
    }
    assert_eq!(format_name(255), "MAX");
    for code in (vendor.len() as i32..255).chain([256, -1]) {
        assert_eq!(format_name(code), format!("UNKNOWN({code})"), "the vendor has no format {code}");
    }
}
