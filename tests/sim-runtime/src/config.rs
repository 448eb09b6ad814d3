//! The dump configuration JSON (`{"dump": {...}}`, docs/CANN.md §3), as `aclInit` and `aclmdlSetDump` read it.
//!
//! Parsing is strict about values (an unknown `dump_mode` is a configuration error, as on a real device)
//! and lenient about keys this simulator does not act on (`dump_level`, `dump_op_switch`), which it keeps
//! only so a config that works on hardware also loads here.

use serde::Deserialize;
use std::path::PathBuf;

/// Longest `dump_path` the runtime accepts.
pub const MAX_DUMP_PATH_LEN: usize = 512;

/// Which tensors of an op are dumped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpMode {
    Input,
    Output,
    All,
}

impl DumpMode {
    pub fn inputs(self) -> bool {
        matches!(self, DumpMode::Input | DumpMode::All)
    }
    pub fn outputs(self) -> bool {
        matches!(self, DumpMode::Output | DumpMode::All)
    }
}

/// Full tensors (protobuf dump files) or one statistics CSV per op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpDataKind {
    Tensor,
    Stats,
}

/// One `dump_list` entry: a model, and optionally only some of its ops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpListEntry {
    /// `None` matches every model.
    pub model_name: Option<String>,
    /// Op names to dump; empty means every op of the model.
    pub layers: Vec<String>,
}

/// `dump_step`: `"0|5|10-20"`, inclusive ranges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepSet(Vec<(u64, u64)>);

impl StepSet {
    pub fn parse(text: &str) -> Result<StepSet, String> {
        let mut ranges = Vec::new();
        for part in text.split('|').map(str::trim).filter(|p| !p.is_empty()) {
            let parse = |s: &str| s.trim().parse::<u64>().map_err(|_| format!("dump_step: bad step {s:?}"));
            let (lo, hi) = match part.split_once('-') {
                Some((lo, hi)) => (parse(lo)?, parse(hi)?),
                None => (parse(part)?, parse(part)?),
            };
            if lo > hi {
                return Err(format!("dump_step: range {part:?} runs backwards"));
            }
            ranges.push((lo, hi));
        }
        Ok(StepSet(ranges))
    }

    pub fn contains(&self, step: u64) -> bool {
        self.0.iter().any(|&(lo, hi)| (lo..=hi).contains(&step))
    }
}

/// A validated dump configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct DumpConfig {
    pub dump_path: PathBuf,
    pub mode: DumpMode,
    /// Empty: every model, every op.
    pub list: Vec<DumpListEntry>,
    /// `None`: every step.
    pub steps: Option<StepSet>,
    pub data: DumpDataKind,
    /// `dump_stats` items (`Max`, `Min`, ...); empty means the default set.
    pub stats: Vec<String>,
    /// `dump_debug: on`: overflow detection (op-debug records plus the overflowing op's own dump) instead of
    /// the data dump.
    pub debug: bool,
}

impl DumpConfig {
    /// Whether op `op_name` of model `model_name` is selected by `dump_list`.
    pub fn selects(&self, model_name: &str, op_name: &str) -> bool {
        if self.list.is_empty() {
            return true;
        }
        self.list.iter().any(|e| {
            e.model_name.as_deref().is_none_or(|m| m == model_name)
                && (e.layers.is_empty() || e.layers.iter().any(|l| l == op_name))
        })
    }

    /// Whether `model_name` has anything selected at all.
    pub fn selects_model(&self, model_name: &str) -> bool {
        self.list.is_empty()
            || self.list.iter().any(|e| e.model_name.as_deref().is_none_or(|m| m == model_name))
    }

    pub fn selects_step(&self, step: u64) -> bool {
        self.steps.as_ref().is_none_or(|s| s.contains(step))
    }
}

#[derive(Deserialize)]
struct RawFile {
    dump: Option<RawDump>,
}

#[derive(Deserialize)]
struct RawDump {
    dump_path: Option<String>,
    dump_mode: Option<String>,
    #[serde(default)]
    dump_list: Vec<RawListEntry>,
    dump_step: Option<String>,
    dump_data: Option<String>,
    #[serde(default)]
    dump_stats: Vec<String>,
    dump_debug: Option<String>,
    // Accepted for compatibility with hardware configs; the simulator has no single-op mode or kernel level.
    #[allow(dead_code)]
    dump_op_switch: Option<String>,
    #[allow(dead_code)]
    dump_level: Option<String>,
}

#[derive(Deserialize)]
struct RawListEntry {
    model_name: Option<String>,
    #[serde(default)]
    layer: Vec<String>,
}

/// Parses a config file's text. `Ok(None)`: valid JSON without a `dump` object (aclInit's config may hold
/// other sections only).
pub fn parse_dump_json(text: &str) -> Result<Option<DumpConfig>, ConfigError> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let raw: RawFile = serde_json::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
    raw.dump.map(validate).transpose().map_err(ConfigError::Invalid)
}

/// Why a config file was refused: unparsable JSON, or a dump section with bad values.
#[derive(Debug, PartialEq, Eq)]
pub enum ConfigError {
    Parse(String),
    Invalid(String),
}

fn on_off(key: &str, value: Option<String>) -> Result<bool, String> {
    match value.as_deref() {
        None | Some("off") => Ok(false),
        Some("on") => Ok(true),
        Some(other) => Err(format!("{key}: expected \"on\" or \"off\", got {other:?}")),
    }
}

fn validate(raw: RawDump) -> Result<DumpConfig, String> {
    let dump_path = raw.dump_path.filter(|p| !p.is_empty()).ok_or("dump_path is required")?;
    if dump_path.len() > MAX_DUMP_PATH_LEN {
        return Err(format!("dump_path is {} characters; at most {MAX_DUMP_PATH_LEN}", dump_path.len()));
    }
    let mode = match raw.dump_mode.as_deref() {
        None | Some("output") => DumpMode::Output,
        Some("input") => DumpMode::Input,
        Some("all") => DumpMode::All,
        Some(other) => return Err(format!("dump_mode: expected input, output or all, got {other:?}")),
    };
    let data = match raw.dump_data.as_deref() {
        None | Some("tensor") => DumpDataKind::Tensor,
        Some("stats") => DumpDataKind::Stats,
        Some(other) => return Err(format!("dump_data: expected tensor or stats, got {other:?}")),
    };
    let steps = match raw.dump_step.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => Some(StepSet::parse(text)?),
    };
    let list = raw
        .dump_list
        .into_iter()
        .map(|e| DumpListEntry { model_name: e.model_name.filter(|m| !m.is_empty()), layers: e.layer })
        .collect();
    Ok(DumpConfig {
        dump_path: PathBuf::from(dump_path),
        mode,
        list,
        steps,
        data,
        stats: raw.dump_stats,
        debug: on_off("dump_debug", raw.dump_debug)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_config_parses() {
        let cfg = parse_dump_json(
            r#"{"dump": {"dump_path": "/tmp/d", "dump_mode": "all", "dump_step": "0|5|10-20",
                "dump_list": [{"model_name": "m", "layer": ["a/b"]}], "dump_data": "stats",
                "dump_debug": "off", "dump_op_switch": "on", "dump_level": "op"}}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(cfg.mode, DumpMode::All);
        assert_eq!(cfg.data, DumpDataKind::Stats);
        assert!(cfg.selects("m", "a/b"));
        assert!(!cfg.selects("m", "a/c"));
        assert!(!cfg.selects("other", "a/b"));
        assert!(cfg.selects_step(0) && cfg.selects_step(5) && cfg.selects_step(15) && cfg.selects_step(20));
        assert!(!cfg.selects_step(1) && !cfg.selects_step(21));
    }

    #[test]
    fn defaults_and_refusals() {
        let cfg = parse_dump_json(r#"{"dump": {"dump_path": "d"}}"#).unwrap().unwrap();
        assert_eq!(cfg.mode, DumpMode::Output);
        assert!(cfg.selects("any", "op") && cfg.selects_step(123) && !cfg.debug);
        assert_eq!(parse_dump_json("{}").unwrap(), None);
        assert_eq!(parse_dump_json("").unwrap(), None);
        assert!(matches!(parse_dump_json("{"), Err(ConfigError::Parse(_))));
        assert!(matches!(parse_dump_json(r#"{"dump": {}}"#), Err(ConfigError::Invalid(_))));
        assert!(matches!(
            parse_dump_json(r#"{"dump": {"dump_path": "d", "dump_mode": "both"}}"#),
            Err(ConfigError::Invalid(_))
        ));
        assert!(matches!(
            parse_dump_json(r#"{"dump": {"dump_path": "d", "dump_step": "5-1"}}"#),
            Err(ConfigError::Invalid(_))
        ));
        let long = "x".repeat(513);
        assert!(parse_dump_json(&format!(r#"{{"dump": {{"dump_path": "{long}"}}}}"#)).is_err());
    }
}
