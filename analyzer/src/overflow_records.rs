//! Turning decoded op-debug payloads into [`OverflowRecord`]s: engine names and named status bits.

use crate::index::OverflowRecord;
use accutrace_formats::dump::{
    aicore_status_names, dha_atomic_status, l2_atomic_status, Engine, EngineRecord,
};

/// The engine's name as reports show it.
pub fn engine_name(engine: Engine) -> String {
    match engine {
        Engine::Aic => "AIC".into(),
        Engine::Aiv => "AIV".into(),
        Engine::AiCpu => "AICPU".into(),
        Engine::Sdma => "SDMA".into(),
        Engine::DhaAtomic => "DHA atomic".into(),
        Engine::L2Atomic => "L2 atomic".into(),
        Engine::Other(code) => format!("engine {code}"),
    }
}

/// Names of the status bits an engine record carries (AI Core bits, or the atomic units' codes).
pub fn status_names(record: &EngineRecord) -> Vec<String> {
    let mut names = Vec::new();
    for &status in &record.status {
        match record.engine {
            Engine::DhaAtomic => {
                names.extend(dha_atomic_status(status).map(|s| format!("DHA atomic {}", s.name())))
            }
            Engine::L2Atomic => {
                names.extend(l2_atomic_status(status).map(|s| format!("L2 atomic {}", s.name())))
            }
            _ => names.extend(aicore_status_names(status).into_iter().map(String::from)),
        }
    }
    names.dedup();
    names
}

/// An [`OverflowRecord`] for one engine record that reported something (valid and a non-zero status).
pub fn from_engine(record: &EngineRecord, step: u64, rank: u32, file: String) -> Option<OverflowRecord> {
    if !record.valid || record.status.iter().all(|&s| s == 0) {
        return None;
    }
    Some(OverflowRecord {
        step,
        rank,
        op: None,
        engine: engine_name(record.engine),
        task_id: record.task_id,
        stream_id: record.stream_id,
        status: record.status.clone(),
        status_names: status_names(record),
        file,
    })
}
