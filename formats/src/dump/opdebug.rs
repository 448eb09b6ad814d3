//! Op-debug (overflow) records, docs/CANN.md §4: the payload of each output of an `Opdebug.Node_OpDebug.*`
//! dump file. Two layouts:
//! - legacy: 2048 bytes of u64 LE with fixed slots for DHA atomic-add, L2 atomic-add and AI Core;
//! - tagged: u32 magic 0x5A5A5A5A, u32 version, then per engine {u32 valid, u32 acc_type, u32 rsv,
//!   u32 data_len} and `data_len` bytes of u64 fields (`data_len` taken as bytes: UNVERIFIED).
//!
//! The tagged layout's status is 4 words when version == 1; rather than trusting the version we keep every
//! word after the named fields as `status`, so either answer decodes.

use super::file::DumpFile;
use super::names::FileKind;
use super::tree::DumpEntry;
use crate::error::{FormatError, Result};

/// Magic word at the start of a tagged op-debug payload.
pub const OPDEBUG_MAGIC: u32 = 0x5A5A_5A5A;
/// Size of a legacy (untagged) op-debug payload.
pub const LEGACY_PAYLOAD_LEN: usize = 2048;

/// Which payload layout a record came from (and is encoded back to).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpDebugLayout {
    /// The fixed 2048-byte layout: one slot per engine at a fixed offset.
    Legacy,
    /// The magic-tagged layout with a record per engine.
    Tagged {
        /// The layout's version field.
        version: u32,
    },
}

/// The unit that reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Engine {
    /// AI Core cube (acc_type 0; the legacy AI Core slot too).
    #[default]
    Aic,
    /// AI Core vector (acc_type 1).
    Aiv,
    /// acc_type 2.
    AiCpu,
    /// acc_type 3.
    Sdma,
    /// Legacy slot at byte 0.
    DhaAtomic,
    /// Legacy slot at byte 128.
    L2Atomic,
    /// An acc_type this build does not know: all its words are kept in `status`.
    Other(u32),
}

/// One engine's record. Fields an engine does not report are `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineRecord {
    /// The unit that reported.
    pub engine: Engine,
    /// The record's valid flag: an invalid one reports nothing.
    pub valid: bool,
    /// Model of the task.
    pub model_id: u64,
    /// Device stream of the task.
    pub stream_id: u64,
    /// Device task id.
    pub task_id: u64,
    /// Task type code.
    pub task_type: u64,
    /// FFTS+ context.
    pub context_id: Option<u64>,
    /// FFTS+ thread.
    pub thread_id: Option<u64>,
    /// Start address of the kernel.
    pub pc_start: Option<u64>,
    /// Base address of the kernel's parameters.
    pub para_base: Option<u64>,
    /// Core that ran the task.
    pub core_id: Option<u64>,
    /// Block index within the kernel.
    pub block_id: Option<u64>,
    /// Kernel code address.
    pub kernel_code: Option<u64>,
    /// AI CPU that ran the task.
    pub cpu_id: Option<u64>,
    /// Source address of the transfer (SDMA).
    pub src_addr: Option<u64>,
    /// Destination address of the transfer (SDMA).
    pub dst_addr: Option<u64>,
    /// DMA channel.
    pub channel_id: Option<u64>,
    /// Status words (one in the legacy layout; 4 for AIC/AIV in tagged version 1).
    pub status: Vec<u64>,
}

impl EngineRecord {
    /// Whether the record is valid and any status bit is set.
    pub fn overflowed(&self) -> bool {
        self.valid && self.status.iter().any(|&s| s != 0)
    }
}

/// A decoded payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpDebugRecord {
    /// The payload layout it came from.
    pub layout: OpDebugLayout,
    /// One record per engine that reported.
    pub engines: Vec<EngineRecord>,
}

#[derive(Clone, Copy)]
enum F {
    ModelId,
    StreamId,
    TaskId,
    TaskType,
    ContextId,
    ThreadId,
    PcStart,
    ParaBase,
    CoreId,
    BlockId,
    CpuId,
    SrcAddr,
    DstAddr,
    ChannelId,
}

const INFO: [F; 6] = [F::ModelId, F::StreamId, F::TaskId, F::TaskType, F::PcStart, F::ParaBase];
const AICORE: [F; 10] = [
    F::ModelId,
    F::StreamId,
    F::TaskId,
    F::TaskType,
    F::ContextId,
    F::ThreadId,
    F::PcStart,
    F::ParaBase,
    F::CoreId,
    F::BlockId,
];
const SDMA: [F; 9] = [
    F::ModelId,
    F::StreamId,
    F::TaskId,
    F::TaskType,
    F::ContextId,
    F::ThreadId,
    F::SrcAddr,
    F::DstAddr,
    F::ChannelId,
];
const AICPU: [F; 7] = [F::ModelId, F::StreamId, F::TaskId, F::TaskType, F::ContextId, F::CpuId, F::ThreadId];

fn tagged_fields(engine: Engine) -> &'static [F] {
    match engine {
        Engine::Aic | Engine::Aiv => &AICORE,
        Engine::Sdma => &SDMA,
        Engine::AiCpu => &AICPU,
        Engine::DhaAtomic | Engine::L2Atomic | Engine::Other(_) => &[],
    }
}

impl EngineRecord {
    fn set(&mut self, field: F, v: u64) {
        match field {
            F::ModelId => self.model_id = v,
            F::StreamId => self.stream_id = v,
            F::TaskId => self.task_id = v,
            F::TaskType => self.task_type = v,
            F::ContextId => self.context_id = Some(v),
            F::ThreadId => self.thread_id = Some(v),
            F::PcStart => self.pc_start = Some(v),
            F::ParaBase => self.para_base = Some(v),
            F::CoreId => self.core_id = Some(v),
            F::BlockId => self.block_id = Some(v),
            F::CpuId => self.cpu_id = Some(v),
            F::SrcAddr => self.src_addr = Some(v),
            F::DstAddr => self.dst_addr = Some(v),
            F::ChannelId => self.channel_id = Some(v),
        }
    }

    fn get(&self, field: F) -> u64 {
        let opt = match field {
            F::ModelId => return self.model_id,
            F::StreamId => return self.stream_id,
            F::TaskId => return self.task_id,
            F::TaskType => return self.task_type,
            F::ContextId => self.context_id,
            F::ThreadId => self.thread_id,
            F::PcStart => self.pc_start,
            F::ParaBase => self.para_base,
            F::CoreId => self.core_id,
            F::BlockId => self.block_id,
            F::CpuId => self.cpu_id,
            F::SrcAddr => self.src_addr,
            F::DstAddr => self.dst_addr,
            F::ChannelId => self.channel_id,
        };
        opt.unwrap_or(0)
    }
}

/// Decodes one payload; offsets in errors are relative to `payload`.
pub fn decode_opdebug(payload: &[u8]) -> Result<OpDebugRecord> {
    if payload.len() >= 8 && u32_at(payload, 0) == Some(OPDEBUG_MAGIC) {
        return decode_tagged(payload);
    }
    if payload.len() >= LEGACY_PAYLOAD_LEN {
        return Ok(decode_legacy(payload));
    }
    Err(FormatError::at(
        0,
        format!(
            "op-debug payload of {} bytes is neither the {LEGACY_PAYLOAD_LEN}-byte legacy layout nor starts with magic 0x5A5A5A5A",
            payload.len()
        ),
    ))
}

/// Decodes every output of an op-debug dump file; errors carry file offsets.
pub fn decode_opdebug_file(file: &DumpFile<'_>) -> Result<Vec<OpDebugRecord>> {
    file.outputs.iter().map(|t| decode_opdebug(t.bytes).map_err(|e| e.shifted(t.offset))).collect()
}

fn decode_legacy(payload: &[u8]) -> OpDebugRecord {
    let word = |i: usize| u64_at(payload, i * 8).unwrap_or(0);
    let slot = |engine, base: usize, status_word: usize| {
        let mut rec = EngineRecord { engine, valid: true, ..Default::default() };
        for (i, &f) in INFO.iter().enumerate() {
            rec.set(f, word(base + i));
        }
        rec.status = vec![word(status_word)];
        rec
    };
    let dha = slot(Engine::DhaAtomic, 0, 64);
    let l2 = slot(Engine::L2Atomic, 16, 96);
    let mut aicore = slot(Engine::Aic, 32, 130);
    aicore.kernel_code = Some(word(128));
    aicore.block_id = Some(word(129));
    OpDebugRecord { layout: OpDebugLayout::Legacy, engines: vec![dha, l2, aicore] }
}

fn decode_tagged(payload: &[u8]) -> Result<OpDebugRecord> {
    let version = u32_at(payload, 4).unwrap_or(0);
    let mut engines = Vec::new();
    let mut pos = 8usize;
    // Trailing zero bytes are padding, not records.
    while pos < payload.len() && payload[pos..].iter().any(|&b| b != 0) {
        let head = |k: usize| u32_at(payload, pos + 4 * k);
        let (Some(valid), Some(acc), Some(_rsv), Some(data_len)) = (head(0), head(1), head(2), head(3))
        else {
            return Err(FormatError::at(
                pos as u64,
                format!("engine record header needs 16 bytes, {} remain", payload.len() - pos),
            ));
        };
        let data_start = pos + 16;
        let data_len = data_len as usize;
        if data_len > payload.len() - data_start {
            return Err(FormatError::at(
                (pos + 12) as u64,
                format!(
                    "engine record declares {data_len} data bytes but {} remain",
                    payload.len() - data_start
                ),
            ));
        }
        if data_len & 7 != 0 {
            return Err(FormatError::at(
                (pos + 12) as u64,
                format!("engine record data_len {data_len} is not a multiple of 8"),
            ));
        }
        let engine = match acc {
            0 => Engine::Aic,
            1 => Engine::Aiv,
            2 => Engine::AiCpu,
            3 => Engine::Sdma,
            n => Engine::Other(n),
        };
        let fields = tagged_fields(engine);
        let words: Vec<u64> =
            (0..data_len / 8).map(|i| u64_at(payload, data_start + 8 * i).unwrap_or(0)).collect();
        if words.len() < fields.len() + usize::from(!fields.is_empty()) {
            return Err(FormatError::at(
                (pos + 12) as u64,
                format!(
                    "{engine:?} record needs {} u64 fields and a status, data_len gives {}",
                    fields.len(),
                    words.len()
                ),
            ));
        }
        let mut rec = EngineRecord { engine, valid: valid != 0, ..Default::default() };
        for (&f, &w) in fields.iter().zip(&words) {
            rec.set(f, w);
        }
        rec.status = words[fields.len()..].to_vec();
        engines.push(rec);
        pos = data_start + data_len;
    }
    Ok(OpDebugRecord { layout: OpDebugLayout::Tagged { version }, engines })
}

/// Encodes a record in its layout. The legacy layout holds exactly one DHA, L2 and AI Core (`Aic`) slot
/// with one status word each; the tagged layout holds AIC, AIV, AICPU, SDMA and unknown acc_types.
pub fn encode_opdebug(record: &OpDebugRecord) -> Result<Vec<u8>> {
    match record.layout {
        OpDebugLayout::Legacy => encode_legacy(record),
        OpDebugLayout::Tagged { version } => encode_tagged(version, record),
    }
}

fn encode_legacy(record: &OpDebugRecord) -> Result<Vec<u8>> {
    let mut out = vec![0u8; LEGACY_PAYLOAD_LEN];
    let mut put = |word: usize, v: u64| out[word * 8..word * 8 + 8].copy_from_slice(&v.to_le_bytes());
    let mut seen = Vec::new();
    for rec in &record.engines {
        let (base, status_word) = match rec.engine {
            Engine::DhaAtomic => (0, 64),
            Engine::L2Atomic => (16, 96),
            Engine::Aic => (32, 130),
            other => {
                return Err(FormatError::whole(format!(
                    "the legacy op-debug layout has no slot for {other:?}"
                )))
            }
        };
        if seen.contains(&base) || rec.status.len() != 1 {
            return Err(FormatError::whole(
                "the legacy layout holds one record per slot with one status word",
            ));
        }
        seen.push(base);
        for (i, &f) in INFO.iter().enumerate() {
            put(base + i, rec.get(f));
        }
        put(status_word, rec.status[0]);
        if base == 32 {
            put(128, rec.kernel_code.unwrap_or(0));
            put(129, rec.block_id.unwrap_or(0));
        }
    }
    Ok(out)
}

fn encode_tagged(version: u32, record: &OpDebugRecord) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    out.extend_from_slice(&OPDEBUG_MAGIC.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    for rec in &record.engines {
        let acc = match rec.engine {
            Engine::Aic => 0,
            Engine::Aiv => 1,
            Engine::AiCpu => 2,
            Engine::Sdma => 3,
            Engine::Other(n) => n,
            other => {
                return Err(FormatError::whole(format!(
                    "the tagged op-debug layout has no acc_type for {other:?}"
                )))
            }
        };
        let fields = tagged_fields(rec.engine);
        let words: Vec<u64> = fields.iter().map(|&f| rec.get(f)).chain(rec.status.iter().copied()).collect();
        let data_len = u32::try_from(words.len() * 8)
            .map_err(|_| FormatError::whole("engine record too large for a u32 data_len"))?;
        for v in [u32::from(rec.valid), acc, 0, data_len] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        words.iter().for_each(|w| out.extend_from_slice(&w.to_le_bytes()));
    }
    Ok(out)
}

/// AI Core status bits (older training chips; UNVERIFIED on newer ones). Unknown bits are not named.
const AICORE_BITS: [(u64, &str); 6] = [
    (0x8, "min-negative-int sign inversion"),
    (0x10, "integer add/sub/mul overflow"),
    (0x20, "float compute overflow"),
    (0x80, "float-to-unsigned conversion of a negative"),
    (0x100, "fp32/int32 to fp16 conversion overflow"),
    (0x400, "cube accumulation overflow"),
];

/// Names of the AI Core status bits set in `status`, lowest bit first.
pub fn aicore_status_names(status: u64) -> Vec<&'static str> {
    AICORE_BITS.iter().filter(|(bit, _)| status & bit != 0).map(|(_, name)| *name).collect()
}

/// What an atomic-add unit reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicStatus {
    /// The sum overflowed.
    Overflow,
    /// The sum underflowed.
    Underflow,
    /// The value added was NaN.
    SrcNan,
    /// The value added to was NaN.
    DstNan,
    /// Both were NaN.
    BothNan,
}

impl AtomicStatus {
    /// The status in words, for reports.
    pub fn name(self) -> &'static str {
        match self {
            AtomicStatus::Overflow => "overflow",
            AtomicStatus::Underflow => "underflow",
            AtomicStatus::SrcNan => "source NaN",
            AtomicStatus::DstNan => "destination NaN",
            AtomicStatus::BothNan => "source and destination NaN",
        }
    }

    fn from_index(i: u64) -> Option<AtomicStatus> {
        [Self::Overflow, Self::Underflow, Self::SrcNan, Self::DstNan, Self::BothNan].get(i as usize).copied()
    }
}

/// DHA atomic-add status: bits 8-15 hold 0x9..=0xD.
pub fn dha_atomic_status(status: u64) -> Option<AtomicStatus> {
    let v = (status >> 8) & 0xff;
    if (0x9..=0xD).contains(&v) {
        AtomicStatus::from_index(v - 0x9)
    } else {
        None
    }
}

/// L2 atomic-add status: bits 16-18 hold 1..=5.
pub fn l2_atomic_status(status: u64) -> Option<AtomicStatus> {
    let v = (status >> 16) & 0x7;
    if (1..=5).contains(&v) {
        AtomicStatus::from_index(v - 1)
    } else {
        None
    }
}

/// The dump of the op an engine record blames: same task and stream id, same rank directory (and device,
/// when both are known), the smallest timestamp not before the op-debug file's. The op-debug file's own
/// task id is not the op's.
pub fn find_overflowing_op<'e>(
    opdebug: &DumpEntry,
    record: &EngineRecord,
    entries: &'e [DumpEntry],
) -> Option<&'e DumpEntry> {
    entries
        .iter()
        .filter(|e| e.name.kind != FileKind::OpDebug)
        .filter(|e| e.name.task_id == record.task_id && e.name.stream_id == Some(record.stream_id))
        .filter(|e| e.name.timestamp_us >= opdebug.name.timestamp_us)
        .filter(|e| e.rank == opdebug.rank)
        .filter(|e| match (e.device_id, opdebug.device_id) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        })
        .min_by(|a, b| (a.name.timestamp_us, &a.path).cmp(&(b.name.timestamp_us, &b.path)))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}
