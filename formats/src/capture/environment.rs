//! What the collector found out about the job's environment (`manifest.json` `environment`), for the
//! pre-tuning checklist (`analyzer check`): software versions readable without the script, the files the
//! command line names, and the runtime settings the job made. Every field may be missing: older captures
//! have none of it, and the collector records only what it could read.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The job's environment, as far as the collector could see it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunEnvironment {
    /// Working directory of the captured process (relative paths of the command line start there).
    pub cwd: Option<String>,
    /// Software found without the script: `cann`, `python`, and Python packages (`torch`, `torch_npu`,
    /// `numpy`, `transformers`, ...) by name.
    pub versions: BTreeMap<String, FoundVersion>,
    /// Files the command line names (the training script, configuration files), by the argument that
    /// named them.
    pub files: BTreeMap<String, FileDigest>,
    /// Runtime settings the job made through the calls the collector interposes.
    pub settings: JobSettings,
}

/// A version and where it was read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoundVersion {
    /// The version string as found.
    pub version: String,
    /// The file it was read from (or the loaded library it was inferred from).
    pub source: String,
}

/// A file named on the command line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileDigest {
    /// Bytes.
    pub size: u64,
    /// XXH3-64 of the content, hex.
    pub xxh3: String,
    /// A JSON file's content (up to [`MAX_JSON_KEPT`] bytes), so that two runs' settings compare key by
    /// key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<serde_json::Value>,
}

/// JSON files up to this size are kept in the manifest.
pub const MAX_JSON_KEPT: u64 = 64 << 10;

/// Settings the job made through the runtime, seen by the collector's interposed calls (absent: no such
/// call was seen; a framework that resolves the function through its own library handle hides it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobSettings {
    /// The last value set for `ACL_OPT_DETERMINISTIC` (`aclrtCtxSetSysParamOpt`): 1 = deterministic.
    pub deterministic: Option<i64>,
    /// The last overflow mode set with `aclrtSetDeviceSatMode`: `saturation` or `inf_nan`.
    pub overflow_mode: Option<String>,
}
