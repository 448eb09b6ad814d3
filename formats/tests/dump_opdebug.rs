//! Op-debug payloads: both layouts decode, encode back byte for byte, and name their status bits.

use accutrace_formats::dump::opdebug::{LEGACY_PAYLOAD_LEN, OPDEBUG_MAGIC};
use accutrace_formats::dump::{
    aicore_status_names, decode_opdebug, decode_opdebug_file, dha_atomic_status, encode_dump, encode_opdebug,
    find_overflowing_op, l2_atomic_status, parse_dump, parse_file_name, AtomicStatus, DumpEntry, Engine,
    EngineRecord, OpDebugLayout, OpDebugRecord,
};
use accutrace_proto::dumpdata::{DumpData, OpOutput};
use proptest::prelude::*;
use std::path::PathBuf;

fn aic(task_id: u64, status: Vec<u64>) -> EngineRecord {
    EngineRecord {
        engine: Engine::Aic,
        valid: true,
        model_id: 1,
        stream_id: 3,
        task_id,
        task_type: 0,
        context_id: Some(0),
        thread_id: Some(0),
        pc_start: Some(0x1000),
        para_base: Some(0x2000),
        core_id: Some(4),
        block_id: Some(5),
        status,
        ..Default::default()
    }
}

fn tagged_sample() -> OpDebugRecord {
    let sdma = EngineRecord {
        engine: Engine::Sdma,
        valid: true,
        task_id: 9,
        context_id: Some(1),
        thread_id: Some(2),
        src_addr: Some(0xAA),
        dst_addr: Some(0xBB),
        channel_id: Some(7),
        status: vec![1],
        ..Default::default()
    };
    let aicpu = EngineRecord {
        engine: Engine::AiCpu,
        valid: false,
        context_id: Some(1),
        cpu_id: Some(3),
        thread_id: Some(8),
        status: vec![0],
        ..Default::default()
    };
    OpDebugRecord {
        layout: OpDebugLayout::Tagged { version: 1 },
        engines: vec![aic(77, vec![0x20, 0, 0, 0]), sdma, aicpu],
    }
}

#[test]
fn tagged_layout_round_trips_and_has_the_documented_bytes() {
    let record = tagged_sample();
    let bytes = encode_opdebug(&record).unwrap();
    assert_eq!(&bytes[..4], &OPDEBUG_MAGIC.to_le_bytes());
    assert_eq!(&bytes[4..8], &1u32.to_le_bytes());
    // First engine: valid 1, acc_type 0 (AIC), rsv 0, data_len = (10 fields + 4 status) * 8.
    assert_eq!(&bytes[8..24], &[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 112, 0, 0, 0]);
    assert_eq!(&bytes[24 + 2 * 8..24 + 3 * 8], &77u64.to_le_bytes()); // task_id is the third field
    assert_eq!(bytes.len(), 8 + (16 + 112) + (16 + 80) + (16 + 64));
    let back = decode_opdebug(&bytes).unwrap();
    assert_eq!(back, record);
    assert!(back.engines[0].overflowed() && back.engines[1].overflowed() && !back.engines[2].overflowed());
    // Zero padding after the records is accepted.
    let mut padded = bytes.clone();
    padded.extend_from_slice(&[0; 40]);
    assert_eq!(decode_opdebug(&padded).unwrap(), record);
}

#[test]
fn legacy_layout_round_trips_at_the_documented_offsets() {
    let mut dha = aic(1, vec![0x0900]);
    dha.engine = Engine::DhaAtomic;
    (dha.context_id, dha.thread_id, dha.core_id, dha.block_id) = (None, None, None, None);
    let mut l2 = dha.clone();
    l2.engine = Engine::L2Atomic;
    l2.status = vec![0x3_0000];
    let mut core = dha.clone();
    core.engine = Engine::Aic;
    core.task_id = 42;
    core.kernel_code = Some(0xC0DE);
    core.block_id = Some(6);
    core.status = vec![0x120];
    let record = OpDebugRecord { layout: OpDebugLayout::Legacy, engines: vec![dha, l2, core] };
    let bytes = encode_opdebug(&record).unwrap();
    assert_eq!(bytes.len(), LEGACY_PAYLOAD_LEN);
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    assert_eq!((word(256 + 16), word(512), word(768)), (42, 0x0900, 0x3_0000));
    assert_eq!((word(1024), word(1032), word(1040)), (0xC0DE, 6, 0x120));
    assert_eq!(decode_opdebug(&bytes).unwrap(), record);

    let sdma =
        OpDebugRecord { layout: OpDebugLayout::Legacy, engines: vec![tagged_sample().engines[1].clone()] };
    assert!(encode_opdebug(&sdma).is_err());
}

#[test]
fn status_bits_are_named() {
    assert_eq!(
        aicore_status_names(0x120),
        vec!["float compute overflow", "fp32/int32 to fp16 conversion overflow"]
    );
    assert_eq!(aicore_status_names(0x8 | 0x10 | 0x80 | 0x400).len(), 4);
    assert!(aicore_status_names(0x1 | 0x40).is_empty());
    assert_eq!(dha_atomic_status(0x0900), Some(AtomicStatus::Overflow));
    assert_eq!(dha_atomic_status(0x0D00), Some(AtomicStatus::BothNan));
    assert_eq!(dha_atomic_status(0x0E00), None);
    assert_eq!(dha_atomic_status(0x9), None);
    assert_eq!(l2_atomic_status(0x2_0000), Some(AtomicStatus::Underflow));
    assert_eq!(l2_atomic_status(0x5_0000).map(AtomicStatus::name), Some("source and destination NaN"));
    assert_eq!(l2_atomic_status(0x6_0000), None);
}

#[test]
fn malformed_payloads_name_offset_and_problem() {
    let err = decode_opdebug(&[0; 100]).unwrap_err();
    assert_eq!(err.offset, Some(0));
    assert!(err.problem.contains("100 bytes is neither the 2048-byte legacy layout"), "{err}");

    let good = encode_opdebug(&tagged_sample()).unwrap();
    let err = decode_opdebug(&good[..good.len() - 8]).unwrap_err();
    assert_eq!(err.offset, Some((8 + 128 + 96 + 12) as u64));
    assert_eq!(err.problem, "engine record declares 64 data bytes but 56 remain");

    let err = decode_opdebug(&good[..8 + 128 + 10]).unwrap_err();
    assert_eq!(err.offset, Some(8 + 128));
    assert_eq!(err.problem, "engine record header needs 16 bytes, 10 remain");

    let mut short = good[..8 + 16].to_vec();
    short[20..24].copy_from_slice(&8u32.to_le_bytes());
    short.extend_from_slice(&[1; 8]);
    let err = decode_opdebug(&short).unwrap_err();
    assert!(err.problem.contains("needs 10 u64 fields and a status, data_len gives 1"), "{err}");

    let mut odd = short.clone();
    odd[20..24].copy_from_slice(&7u32.to_le_bytes());
    assert!(decode_opdebug(&odd).unwrap_err().problem.contains("not a multiple of 8"));
}

#[test]
fn opdebug_dump_files_decode_with_file_offsets() {
    let payload = encode_opdebug(&tagged_sample()).unwrap();
    let header = DumpData {
        version: "2.0".into(),
        op_name: "Node_OpDebug".into(),
        output: vec![OpOutput { data_type: 4, format: 2, ..Default::default() }],
        ..Default::default()
    };
    let bytes = encode_dump(&header, &[], &[&payload], &[], &[]).unwrap();
    let file = parse_dump(&bytes).unwrap();
    assert_eq!(decode_opdebug_file(&file).unwrap(), vec![tagged_sample()]);
    let bad = encode_dump(&header, &[], &[&[1u8; 10]], &[], &[]).unwrap();
    let file = parse_dump(&bad).unwrap();
    let err = decode_opdebug_file(&file).unwrap_err();
    assert_eq!(err.offset, Some(file.outputs[0].offset));
}

fn entry(name: &str, device: u32) -> DumpEntry {
    let parsed = parse_file_name(name).unwrap();
    DumpEntry {
        path: PathBuf::from(name),
        op_name: parsed.op_name.clone(),
        name: parsed,
        device_id: Some(device),
        rank: None,
        model_name: None,
        model_id: None,
        step: Some(0),
        time_dir: None,
    }
}

#[test]
fn overflowing_op_is_the_next_dump_with_the_records_task_and_stream() {
    let entries = vec![
        entry("Mul.before.77.3.90", 0), // right ids, before the record
        entry("Opdebug.Node_OpDebug.40.3.100", 0),
        entry("Mul.wrong_stream.77.4.110", 0),
        entry("Mul.other_device.77.3.105", 1),
        entry("Mul.later.77.3.130", 0),
        entry("Mul.culprit.77.3.120", 0),
    ];
    let record = &tagged_sample().engines[0];
    let found = find_overflowing_op(&entries[1], record, &entries).unwrap();
    assert_eq!(found.op_name, "culprit");
    let mut other = record.clone();
    other.task_id = 5;
    assert!(find_overflowing_op(&entries[1], &other, &entries).is_none());
}

proptest! {
    #[test]
    fn arbitrary_payloads_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2100), magic in any::<bool>()) {
        let mut bytes = bytes;
        if magic && bytes.len() >= 8 {
            bytes[..4].copy_from_slice(&OPDEBUG_MAGIC.to_le_bytes());
        }
        let _ = decode_opdebug(&bytes);
    }

    #[test]
    fn tagged_records_round_trip(words in prop::collection::vec(any::<u64>(), 11..16), acc in 0u32..6, version in any::<u32>()) {
        let engine = match acc { 0 => Engine::Aic, 1 => Engine::Aiv, 2 => Engine::AiCpu, 3 => Engine::Sdma, n => Engine::Other(n) };
        let head = OpDebugRecord { layout: OpDebugLayout::Tagged { version }, engines: vec![EngineRecord { engine, valid: true, status: words.clone(), ..Default::default() }] };
        let raw = encode_opdebug(&head).unwrap();
        let decoded = decode_opdebug(&raw).unwrap();
        prop_assert_eq!(decoded.layout, OpDebugLayout::Tagged { version });
        prop_assert_eq!(&decoded.engines[0].status, &words);
        prop_assert_eq!(encode_opdebug(&decoded).unwrap(), raw);
    }
}
