//! The JSON files of a run directory: `manifest.json` (the run, written by the collector) and
//! `stream.json` in every stream directory (written by [`StreamWriter::create`](super::StreamWriter::create),
//! so a stream is self-describing even when the process died before the manifest was final).

use super::environment::RunEnvironment;
use super::policy::Policy;
use crate::{FormatError, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// File name of the run manifest.
pub const MANIFEST_FILE: &str = "manifest.json";
/// File name of a stream's description inside its directory.
pub const STREAM_FILE: &str = "stream.json";

/// Who writes one stream: one process (rank) on one device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInfo {
    /// Capture stream id, unique in the run (also in every segment header).
    pub stream_id: u32,
    /// Distributed rank (`RANK_ID`), when known.
    pub rank: Option<u32>,
    /// Device id.
    pub device: i32,
    /// Writing process.
    pub pid: u32,
    /// Host name.
    #[serde(default)]
    pub host: String,
}

impl StreamInfo {
    /// The stream's directory name in the run directory: `stream-003-rank1-dev1-pid4242`.
    pub fn dir_name(&self) -> String {
        let rank = self.rank.map_or_else(|| "x".to_string(), |r| r.to_string());
        format!("stream-{:03}-rank{}-dev{}-pid{}", self.stream_id, rank, self.device, self.pid)
    }
}

/// What a stream writer did, for the manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamCounts {
    /// Op records written.
    pub ops: u64,
    /// Tensor records written.
    pub tensors: u64,
    /// Tensor records that carry data.
    pub tensors_with_data: u64,
    /// Overflow records written.
    pub overflow_records: u64,
    /// Stats-CSV records written.
    pub stats_csv_records: u64,
    /// Collective records written (format version 3).
    #[serde(default)]
    pub collectives: u64,
    /// Raw tensor bytes offered for storage (data that was stored, before compression).
    pub bytes_in: u64,
    /// Frame bytes written (framing, metadata and stored data).
    pub bytes_out: u64,
    /// Segments created.
    pub segments_created: u64,
    /// Segments deleted by the ring.
    pub segments_deleted: u64,
    /// Appends refused because the trigger policy stopped recording.
    pub refused_after_stop: u64,
    /// Step-boundary records written (format version 2; absent from older manifests).
    #[serde(default)]
    pub step_marks: u64,
}

/// The manifest's entry for one stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSummary {
    /// Who wrote it.
    pub info: StreamInfo,
    /// Directory name relative to the run directory.
    pub dir: String,
    /// The policy it ran under.
    pub policy: Policy,
    /// Counters.
    pub counts: StreamCounts,
    /// Step whose tensor fired the trigger policy.
    pub triggered_at_step: Option<u64>,
    /// Whether the writer sealed the stream (a clean end).
    pub sealed: bool,
}

/// Run-wide counters (the collector's pipeline, summed over streams).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCounts {
    /// Dump chunks received by the callback.
    pub chunks: u64,
    /// Dump files reassembled.
    pub files: u64,
    /// Tensors recorded.
    pub tensors: u64,
    /// Bytes received from the runtime.
    pub bytes_in: u64,
    /// Bytes written to segments.
    pub bytes_out: u64,
    /// Chunks dropped (full queue under the drop policy, a disabled collector) plus files lost (a capture
    /// write that failed): never silent. Above 0, the capture is missing data.
    pub drops: u64,
}

/// `manifest.json`: what was captured, how, and how much.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Capture format version ([`FORMAT_VERSION`](super::FORMAT_VERSION)).
    pub format_version: u32,
    /// Version of the collector that wrote the run.
    pub collector_version: String,
    /// The command line of the captured process.
    pub command: Vec<String>,
    /// Selected environment variables (`RANK_ID`, `ASCEND_*`, `HCCL_DETERMINISTIC`, ...).
    pub env: BTreeMap<String, String>,
    /// Device float overflow mode: `saturation`, `inf_nan`, `undef`, or absent when unknown.
    pub overflow_mode: Option<String>,
    /// Software versions, files of the command line, runtime settings the job made (absent before the
    /// collector recorded them: everything in it is then unknown).
    #[serde(default)]
    pub environment: RunEnvironment,
    /// The collector's configuration, as it was applied.
    pub config: serde_json::Value,
    /// Run-wide counters.
    pub counts: RunCounts,
    /// One entry per stream.
    pub streams: Vec<StreamSummary>,
    /// Start of the capture, µs since the epoch.
    pub started_unix_us: u64,
    /// End of the capture (absent while running or after a crash).
    pub finished_unix_us: Option<u64>,
}

impl Manifest {
    /// A manifest for a run starting now, with empty counters.
    pub fn new(collector_version: &str, command: Vec<String>) -> Manifest {
        Manifest {
            format_version: super::FORMAT_VERSION,
            collector_version: collector_version.to_string(),
            command,
            env: BTreeMap::new(),
            overflow_mode: None,
            environment: RunEnvironment::default(),
            config: serde_json::Value::Null,
            counts: RunCounts::default(),
            streams: Vec::new(),
            started_unix_us: super::now_us(),
            finished_unix_us: None,
        }
    }

    /// Writes `run_dir/manifest.json` atomically (temporary file, then rename): a reader never sees half.
    pub fn write(&self, run_dir: &Path) -> Result<()> {
        write_json_atomic(&run_dir.join(MANIFEST_FILE), self)
    }

    /// Reads `run_dir/manifest.json`; a newer format version is refused.
    pub fn read(run_dir: &Path) -> Result<Manifest> {
        let path = run_dir.join(MANIFEST_FILE);
        let m: Manifest = read_json(&path)?;
        if m.format_version > super::FORMAT_VERSION {
            return Err(FormatError::whole(format!(
                "capture format version {} is newer than this build",
                m.format_version
            ))
            .in_file(&path));
        }
        Ok(m)
    }
}

/// Serializes `value` to `path` through a temporary file and a rename.
pub(crate) fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let tmp = path.with_extension("json.tmp");
    let text =
        serde_json::to_vec_pretty(value).map_err(|e| FormatError::whole(e.to_string()).in_file(path))?;
    std::fs::write(&tmp, text).map_err(|e| FormatError::io(&tmp, &e))?;
    std::fs::rename(&tmp, path).map_err(|e| FormatError::io(path, &e))
}

/// Reads and parses a JSON file, with the path and the parser's position in the error.
pub(crate) fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text = std::fs::read(path).map_err(|e| FormatError::io(path, &e))?;
    serde_json::from_slice(&text).map_err(|e| {
        // serde_json reports line/column; the byte offset is not exposed, so the line goes in the text.
        FormatError::whole(format!("invalid JSON: {e}")).in_file(path)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = Manifest::new("0.1.0", vec!["python".into(), "train.py".into()]);
        m.env.insert("RANK_ID".into(), "3".into());
        m.overflow_mode = Some("saturation".into());
        m.counts.drops = 2;
        let info = StreamInfo { stream_id: 1, rank: Some(3), device: 3, pid: 42, host: "h".into() };
        m.streams.push(StreamSummary {
            dir: info.dir_name(),
            info,
            policy: Policy::Trigger { ring_bytes: 1 << 30, keep_steps_after: 2 },
            counts: StreamCounts { tensors: 7, ..Default::default() },
            triggered_at_step: Some(5),
            sealed: true,
        });
        m.write(dir.path()).unwrap();
        assert_eq!(Manifest::read(dir.path()).unwrap(), m);
        assert_eq!(m.streams[0].dir, "stream-001-rank3-dev3-pid42");

        std::fs::write(dir.path().join(MANIFEST_FILE), b"{\"format_version\": 1").unwrap();
        let err = Manifest::read(dir.path()).unwrap_err();
        assert!(err.path.is_some() && err.problem.contains("JSON"));
    }
}
