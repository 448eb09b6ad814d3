//! Payloads whose byte formats the shared codec owns (`accutrace_formats::dump`): op-debug records and
//! statistics CSVs. This module only decides what goes into them.

use crate::config::DumpMode;
use crate::overflow::OpDebugLayout;
use accutrace_formats::dump::opdebug::{self, Engine, EngineRecord, OpDebugRecord};
use accutrace_formats::dump::stats_csv::{write_stats_csv, StatsRow};
use accutrace_formats::dump::Io;
use accutrace_formats::stats::TensorStats;
use sim_model::{OpEvent, TensorView};

/// Version of the tagged (0x5A5A5A5A) layout written: version 1, whose AIC/AIV status is 4 x u64.
pub const TAGGED_VERSION: u32 = 1;

/// Simulated kernel addresses: only their presence matters to readers, so they are derived from the task.
fn pc_start(task_id: u32) -> u64 {
    0x1240_0000_0000 + u64::from(task_id) * 0x1000
}

/// The op-debug record naming the overflowing op (model, stream, task) and its AI Core status bits.
pub fn opdebug_record(
    layout: OpDebugLayout,
    model_id: u32,
    stream_id: u32,
    task_id: u32,
    status: u64,
) -> Vec<u8> {
    let (layout, status_words) = match layout {
        OpDebugLayout::Legacy => (opdebug::OpDebugLayout::Legacy, vec![status]),
        OpDebugLayout::V2 => {
            (opdebug::OpDebugLayout::Tagged { version: TAGGED_VERSION }, vec![status, 0, 0, 0])
        }
    };
    let tagged = matches!(layout, opdebug::OpDebugLayout::Tagged { .. });
    let aic = EngineRecord {
        engine: Engine::Aic,
        valid: true,
        model_id: u64::from(model_id),
        stream_id: u64::from(stream_id),
        task_id: u64::from(task_id),
        task_type: 0,
        // Tagged AIC records carry context/thread/core ids; the legacy slot has no room for them.
        context_id: tagged.then_some(0),
        thread_id: tagged.then_some(0),
        pc_start: Some(pc_start(task_id)),
        para_base: Some(pc_start(task_id) + 0x800),
        core_id: tagged.then_some(0),
        block_id: Some(0),
        kernel_code: (!tagged).then_some(pc_start(task_id)),
        status: status_words,
        ..EngineRecord::default()
    };
    let record = OpDebugRecord { layout, engines: vec![aic] };
    opdebug::encode_opdebug(&record).expect("one AIC record fits both layouts")
}

/// The `dump_data: stats` CSV of one op: one row per dumped tensor, with the columns `dump_stats` asks for
/// (empty: the standard set without L2norm). Statistics cover the device buffer as held, padding included.
pub fn stats_csv(event: &OpEvent<'_>, mode: DumpMode, items: &[String]) -> Vec<u8> {
    let wants = |item: &str| {
        if items.is_empty() {
            return item != "L2norm";
        }
        items.iter().any(|i| i.trim().eq_ignore_ascii_case(item))
    };
    let mut rows = Vec::new();
    let mut add = |io: Io, tensors: &[TensorView<'_>]| {
        for (index, t) in tensors.iter().enumerate() {
            // A dtype the statistics decoder refuses leaves the value cells empty, as an unsupported
            // dtype does on hardware.
            let s = TensorStats::of_bytes(t.dtype, t.bytes).ok();
            let pick = |item: &str, v: Option<f64>| if wants(item) { v } else { None };
            let pick_n = |item: &str, v: Option<u64>| if wants(item) { v } else { None };
            rows.push(StatsRow {
                io,
                index,
                data_size: Some(t.bytes.len() as u64),
                dtype: Some(t.dtype),
                format: Some(t.format),
                shape: Some(t.device_shape.clone()),
                max: pick("Max", s.map(|s| s.max)),
                min: pick("Min", s.map(|s| s.min)),
                avg: pick("Avg", s.map(|s| s.mean)),
                count: s.map(|s| s.count),
                nan_count: pick_n("Nan", s.map(|s| s.nan)),
                neg_inf_count: pick_n("Negative Inf", s.map(|s| s.neg_inf)),
                pos_inf_count: pick_n("Positive Inf", s.map(|s| s.pos_inf)),
                l2norm: pick("L2norm", s.map(|s| s.l2_norm)),
            });
        }
    };
    if mode.inputs() {
        add(Io::Input, &event.inputs);
    }
    if mode.outputs() {
        add(Io::Output, &event.outputs);
    }
    write_stats_csv(&rows).into_bytes()
}
