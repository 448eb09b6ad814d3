//! The dump configuration JSON (`{"dump": {...}}`, docs/CANN.md §3 and §5), as `aclInit` and `aclmdlSetDump`
//! read it: validated the way CANN's dump config converter does, and then asked whether it sets a dump at
//! all (its `NeedDump`).
//!
//! The order of CANN's checks is kept, since it decides which error a bad file gets:
//! 1. types: the string keys are strings, `dump_stats` an array of strings, `dump_list` an array of objects
//!    whose `model_name` is a string and `layer` / `watcher_nodes` arrays of strings;
//! 2. values: `dump_mode`, `dump_data`, `dump_op_switch`, `dump_level`, `dump_debug`, `dump_scene`, each
//!    `dump_stats` item and each comma-separated `dump_kernel_data` item come from fixed sets (an empty
//!    string is refused);
//! 3. constraints: an exception `dump_scene` takes no other dump key; a watcher scene excludes the data
//!    dump keys; `dump_path` is required, at most 512 characters, an existing readable and writable
//!    directory (or `ip:path`); `dump_debug: on` excludes `dump_op_switch: on` and any `dump_list` key,
//!    and skips the rest; `dump_step` follows CANN's step syntax; with `dump_op_switch` off a `dump_list`
//!    item may not give an empty `model_name` or `layer`; `dump_stats` is non-empty and needs
//!    `dump_data: stats`.
//! 4. `NeedDump`: a dump is set only when `dump_list` is a non-empty array, or `dump_op_switch` is `on`, or
//!    `dump_debug` is `on`, or a `dump_scene` is given. Otherwise the call succeeds and sets nothing ("No
//!    dump config need to be set"): `{"dump_list": [], "dump_mode": "all"}` alone dumps nothing.

use accutrace_formats::steps::StepSet;
use serde_json::{Map, Value};
use std::path::PathBuf;

/// Longest `dump_path` the runtime accepts.
pub const MAX_DUMP_PATH_LEN: usize = 512;
/// Most entries of a `optype_blacklist` / `opname_blacklist`.
pub const MAX_BLACKLIST: usize = 100;

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

/// `dump_level`: op-level files, kernel-level files (an FFTS+ task's sub-tasks), or both (the default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpLevel {
    Op,
    Kernel,
    All,
}

impl DumpLevel {
    pub fn ops(self) -> bool {
        matches!(self, DumpLevel::Op | DumpLevel::All)
    }
    pub fn kernels(self) -> bool {
        matches!(self, DumpLevel::Kernel | DumpLevel::All)
    }
}

/// One `dump_list` entry: a model, and optionally only some of its ops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpListEntry {
    /// `None` matches every model.
    pub model_name: Option<String>,
    /// Op names to dump; empty means every op of the model.
    pub layers: Vec<String>,
}

/// A validated dump configuration that sets a dump.
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
    /// `dump_op_switch: on`: single-operator launches (`aclopExecuteV2`, `aclopCompileAndExecute(V2)`,
    /// `aclopExecute`, `aclopExecWithHandle`) are dumped too.
    pub op_switch: bool,
    pub level: DumpLevel,
    /// An exception or watcher `dump_scene`: nothing the simulator runs produces those dumps.
    pub scene: Option<String>,
}

/// The single-operator "iteration" a `dump_step` is compared with: single ops belong to no model
/// iteration, so a `dump_step` that leaves out 0 (msprobe's 2147483647 for a step it skips) dumps none of
/// them (UNVERIFIED beyond msprobe relying on it).
pub const SINGLE_OP_STEP: u64 = 0;

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
        self.scene.is_none()
            && (self.list.is_empty()
                || self.list.iter().any(|e| e.model_name.as_deref().is_none_or(|m| m == model_name)))
    }

    pub fn selects_step(&self, step: u64) -> bool {
        self.steps.as_ref().is_none_or(|s| s.contains(step))
    }

    /// Whether single-operator calls are dumped.
    pub fn dumps_single_ops(&self) -> bool {
        self.scene.is_none() && (self.op_switch || self.debug) && self.selects_step(SINGLE_OP_STEP)
    }
}

/// Why a config file was refused: unparsable JSON, or a dump section CANN refuses.
#[derive(Debug, PartialEq, Eq)]
pub enum ConfigError {
    Parse(String),
    Invalid(String),
}

/// Parses and checks a config file's text. `Ok(None)`: valid, and no dump is set (no `dump` section, an
/// empty one, or one `NeedDump` turns down).
pub fn parse_dump_json(text: &str) -> Result<Option<DumpConfig>, ConfigError> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let root: Value = serde_json::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
    let Some(dump) = root.get("dump") else { return Ok(None) };
    let dump = dump.as_object().ok_or_else(|| ConfigError::Invalid("dump: must be an object".into()))?;
    if dump.is_empty() {
        return Ok(None);
    }
    let check = Check { js: dump };
    check.types().map_err(ConfigError::Invalid)?;
    check.values().map_err(ConfigError::Invalid)?;
    check.constraints().map_err(ConfigError::Invalid)?;
    if !check.need_dump() {
        return Ok(None);
    }
    Ok(Some(check.convert()))
}

/// The string keys of a dump section (checked for type).
const STRING_KEYS: [&str; 9] = [
    "dump_path",
    "dump_mode",
    "dump_op_switch",
    "dump_level",
    "dump_scene",
    "dump_data",
    "dump_debug",
    "dump_kernel_data",
    "dump_step",
];

/// Allowed values of the single-valued keys.
fn allowed(key: &str) -> &'static [&'static str] {
    match key {
        "dump_mode" => &["input", "output", "all"],
        "dump_data" => &["tensor", "stats"],
        "dump_op_switch" | "dump_debug" => &["on", "off"],
        "dump_level" => &["op", "kernel", "all"],
        "dump_scene" => {
            &["lite_exception", "aic_err_brief_dump", "aic_err_norm_dump", "aic_err_detail_dump", "watcher"]
        }
        "dump_kernel_data" => &["all", "printf", "tensor", "assert", "timestamp"],
        "dump_stats" => &["Max", "Min", "Avg", "Nan", "Negative Inf", "Positive Inf", "L2norm"],
        _ => &[],
    }
}

struct Check<'a> {
    js: &'a Map<String, Value>,
}

impl Check<'_> {
    fn str(&self, key: &str) -> Option<&str> {
        self.js.get(key).and_then(Value::as_str)
    }

    fn str_or<'s>(&'s self, key: &str, default: &'s str) -> &'s str {
        self.str(key).unwrap_or(default)
    }

    fn is(&self, key: &str, value: &str) -> bool {
        self.str(key) == Some(value)
    }

    fn types(&self) -> Result<(), String> {
        for key in STRING_KEYS {
            if self.js.get(key).is_some_and(|v| !v.is_string()) {
                return Err(format!("{key}: must be a string"));
            }
        }
        if let Some(v) = self.js.get("dump_stats") {
            strings(v, "dump_stats")?;
        }
        if let Some(list) = self.js.get("dump_list") {
            let items = list.as_array().ok_or("dump_list: must be an array")?;
            for (i, item) in items.iter().enumerate() {
                let at = format!("dump_list[{i}]");
                let item = item.as_object().ok_or_else(|| format!("{at}: must be an object"))?;
                if item.get("model_name").is_some_and(|v| !v.is_string()) {
                    return Err(format!("{at}.model_name: must be a string"));
                }
                for key in ["layer", "watcher_nodes"] {
                    if let Some(v) = item.get(key) {
                        strings(v, &format!("{at}.{key}"))?;
                    }
                }
                for key in ["optype_blacklist", "opname_blacklist", "opname_range"] {
                    if let Some(v) = item.get(key) {
                        let entries = v.as_array().ok_or_else(|| format!("{at}.{key}: must be an array"))?;
                        for (j, e) in entries.iter().enumerate() {
                            let e =
                                e.as_object().ok_or_else(|| format!("{at}.{key}[{j}]: must be an object"))?;
                            if e.iter().any(|(k, v)| k != "pos" && !v.is_string()) {
                                return Err(format!("{at}.{key}[{j}]: its fields must be strings"));
                            }
                            if let Some(pos) = e.get("pos") {
                                strings(pos, &format!("{at}.{key}[{j}].pos"))?;
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn values(&self) -> Result<(), String> {
        let valid = |key: &str, value: &str, at: &str| -> Result<(), String> {
            if value.is_empty() {
                return Err(format!("{at}: must not be empty"));
            }
            if allowed(key).contains(&value) {
                Ok(())
            } else {
                Err(format!("{at}: {value:?} is not one of {}", allowed(key).join("/")))
            }
        };
        for key in ["dump_mode", "dump_data", "dump_op_switch", "dump_level", "dump_debug", "dump_scene"] {
            if let Some(v) = self.str(key) {
                valid(key, v, key)?;
            }
        }
        if let Some(v) = self.str("dump_kernel_data") {
            for item in v.split(',') {
                valid("dump_kernel_data", item, "dump_kernel_data")?;
            }
        }
        if let Some(items) = self.js.get("dump_stats").and_then(Value::as_array) {
            for (i, item) in items.iter().enumerate() {
                valid("dump_stats", item.as_str().unwrap_or_default(), &format!("dump_stats[{i}]"))?;
            }
        }
        Ok(())
    }

    fn constraints(&self) -> Result<(), String> {
        if let Some(scene) = self.str("dump_scene") {
            if scene == "watcher" {
                self.watcher_scene()?;
            } else {
                const FORBIDDEN: [&str; 9] = [
                    "dump_mode",
                    "dump_level",
                    "dump_data",
                    "dump_debug",
                    "dump_op_switch",
                    "dump_kernel_data",
                    "dump_step",
                    "dump_stats",
                    "dump_list",
                ];
                if let Some(k) = FORBIDDEN.iter().find(|k| self.js.contains_key(**k)) {
                    return Err(format!("{k}: cannot be set when dump_scene is {scene:?}"));
                }
                return Ok(());
            }
        }
        self.dump_path()?;
        if self.is("dump_debug", "on") {
            if self.is("dump_op_switch", "on") {
                return Err("dump_op_switch: cannot be \"on\" when dump_debug is \"on\"".into());
            }
            if self.js.contains_key("dump_list") {
                return Err("dump_list: cannot be set when dump_debug is \"on\"".into());
            }
            return Ok(());
        }
        if let Some(steps) = self.str("dump_step").filter(|s| !s.is_empty()) {
            StepSet::parse_cann(steps).map_err(|e| format!("dump_step: {e}"))?;
        }
        self.dump_list()?;
        if let Some(stats) = self.js.get("dump_stats").and_then(Value::as_array) {
            if stats.is_empty() {
                return Err("dump_stats: must not be empty".into());
            }
            if self.str_or("dump_data", "tensor") == "tensor" {
                return Err("dump_stats: cannot be set when dump_data is \"tensor\"".into());
            }
        }
        Ok(())
    }

    fn watcher_scene(&self) -> Result<(), String> {
        if self.is("dump_debug", "on") || self.is("dump_op_switch", "on") {
            return Err(
                "dump_debug and dump_op_switch cannot be \"on\" when dump_scene is \"watcher\"".into()
            );
        }
        if self.str_or("dump_mode", "output") != "output" {
            return Err("dump_mode: must be \"output\" when dump_scene is \"watcher\"".into());
        }
        for k in ["dump_level", "dump_data", "dump_kernel_data", "dump_step", "dump_stats"] {
            if self.js.contains_key(k) {
                return Err(format!("{k}: cannot be set when dump_scene is \"watcher\""));
            }
        }
        Ok(())
    }

    fn dump_path(&self) -> Result<(), String> {
        let path = self.str("dump_path").ok_or("dump_path: is required")?;
        if path.is_empty() {
            return Err("dump_path: must not be empty".into());
        }
        if path.len() > MAX_DUMP_PATH_LEN {
            return Err(format!("dump_path: {} characters; at most {MAX_DUMP_PATH_LEN}", path.len()));
        }
        if remote_path(path).is_some() {
            return Ok(());
        }
        let p = std::path::Path::new(path);
        let meta = std::fs::metadata(p).map_err(|e| format!("dump_path {path:?}: {e}"))?;
        if !meta.is_dir() {
            return Err(format!("dump_path {path:?}: not a directory"));
        }
        let c = std::ffi::CString::new(path).map_err(|_| format!("dump_path {path:?}: contains NUL"))?;
        // SAFETY: a NUL-terminated path; access only reads it.
        if unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::W_OK) } != 0 {
            return Err(format!("dump_path {path:?}: not readable and writable"));
        }
        Ok(())
    }

    fn dump_list(&self) -> Result<(), String> {
        let Some(items) = self.js.get("dump_list").and_then(Value::as_array) else { return Ok(()) };
        let level = self.str_or("dump_level", "all");
        let switch_off = self.str_or("dump_op_switch", "off") == "off";
        let watcher = self.is("dump_scene", "watcher");
        for (i, item) in items.iter().enumerate() {
            let at = format!("dump_list[{i}]");
            let get_str = |k: &str| item.get(k).and_then(Value::as_str);
            let array_len = |k: &str| item.get(k).and_then(Value::as_array).map(Vec::len);
            if switch_off {
                if get_str("model_name") == Some("") {
                    return Err(format!("{at}.model_name: must not be empty"));
                }
                if array_len("layer") == Some(0) {
                    return Err(format!("{at}.layer: must not be empty"));
                }
            }
            let watcher_nodes = array_len("watcher_nodes").unwrap_or(0);
            if watcher {
                if watcher_nodes == 0 {
                    return Err(format!(
                        "{at}.watcher_nodes: must not be empty when dump_scene is \"watcher\""
                    ));
                }
                if get_str("model_name").is_some_and(|m| !m.is_empty()) {
                    return Err(format!("{at}.model_name: cannot be set when dump_scene is \"watcher\""));
                }
            } else if watcher_nodes > 0 {
                return Err(format!("{at}.watcher_nodes: needs dump_scene \"watcher\""));
            }
            for key in ["optype_blacklist", "opname_blacklist"] {
                let n = array_len(key).unwrap_or(0);
                if n > MAX_BLACKLIST {
                    return Err(format!("{at}.{key}: {n} entries; at most {MAX_BLACKLIST}"));
                }
                if n > 0 && level != "op" {
                    return Err(format!("{at}.{key}: needs dump_level \"op\""));
                }
            }
            if let Some(ranges) = item.get("opname_range").and_then(Value::as_array).filter(|r| !r.is_empty())
            {
                if level != "op" {
                    return Err(format!("{at}.opname_range: needs dump_level \"op\""));
                }
                if get_str("model_name").is_none_or(str::is_empty) {
                    return Err(format!("{at}.model_name: required by opname_range"));
                }
                for (j, r) in ranges.iter().enumerate() {
                    let end = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
                    if end("begin").is_empty() || end("end").is_empty() {
                        return Err(format!("{at}.opname_range[{j}]: needs both begin and end"));
                    }
                }
            }
        }
        Ok(())
    }

    /// CANN's `NeedDump`.
    fn need_dump(&self) -> bool {
        self.js.get("dump_list").and_then(Value::as_array).is_some_and(|l| !l.is_empty())
            || self.is("dump_op_switch", "on")
            || self.is("dump_debug", "on")
            || self.str("dump_scene").is_some_and(|s| !s.is_empty())
    }

    fn convert(&self) -> DumpConfig {
        let path = self.str_or("dump_path", "");
        let dump_path = PathBuf::from(remote_path(path).unwrap_or(path));
        let mode = match self.str_or("dump_mode", "output") {
            "input" => DumpMode::Input,
            "all" => DumpMode::All,
            _ => DumpMode::Output,
        };
        let data = if self.is("dump_data", "stats") { DumpDataKind::Stats } else { DumpDataKind::Tensor };
        let level = match self.str_or("dump_level", "all") {
            "op" => DumpLevel::Op,
            "kernel" => DumpLevel::Kernel,
            _ => DumpLevel::All,
        };
        let list = self
            .js
            .get("dump_list")
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .map(|e| DumpListEntry {
                        model_name: e
                            .get("model_name")
                            .and_then(Value::as_str)
                            .filter(|m| !m.is_empty())
                            .map(String::from),
                        layers: e
                            .get("layer")
                            .and_then(Value::as_array)
                            .map(|l| l.iter().filter_map(Value::as_str).map(String::from).collect())
                            .unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        DumpConfig {
            dump_path,
            mode,
            list,
            steps: self.str("dump_step").filter(|s| !s.is_empty()).and_then(|s| StepSet::parse_cann(s).ok()),
            data,
            stats: self
                .js
                .get("dump_stats")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
                .unwrap_or_default(),
            debug: self.is("dump_debug", "on"),
            op_switch: self.is("dump_op_switch", "on"),
            level,
            scene: self.str("dump_scene").filter(|s| !s.is_empty()).map(String::from),
        }
    }
}

fn strings(v: &Value, at: &str) -> Result<(), String> {
    let items = v.as_array().ok_or_else(|| format!("{at}: must be an array"))?;
    match items.iter().position(|i| !i.is_string()) {
        Some(i) => Err(format!("{at}[{i}]: must be a string")),
        None => Ok(()),
    }
}

/// `a.b.c.d:path` (a dump sent to another host): the path part, else `None`.
fn remote_path(path: &str) -> Option<&str> {
    let (ip, rest) = path.split_once(':')?;
    let octets: Vec<&str> = ip.split('.').collect();
    let is_ip = octets.len() == 4 && octets.iter().all(|o| o.parse::<u8>().is_ok());
    (is_ip && !rest.is_empty()).then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn cfg(d: &tempfile::TempDir, body: &str) -> Result<Option<DumpConfig>, ConfigError> {
        let comma = if body.is_empty() { "" } else { ", " };
        parse_dump_json(&format!(r#"{{"dump": {{"dump_path": "{}"{comma}{body}}}}}"#, d.path().display()))
    }

    fn invalid(d: &tempfile::TempDir, body: &str, needle: &str) {
        match cfg(d, body) {
            Err(ConfigError::Invalid(why)) => assert!(why.contains(needle), "{body}: {why}"),
            other => panic!("{body}: expected refusal, got {other:?}"),
        }
    }

    #[test]
    fn full_config_parses() {
        let d = dir();
        let c = cfg(
            &d,
            r#""dump_mode": "all", "dump_step": "0|5|10-20", "dump_list": [{"model_name": "m", "layer": ["a/b"]}],
               "dump_data": "stats", "dump_stats": ["Max", "L2norm"], "dump_debug": "off", "dump_op_switch": "on",
               "dump_level": "op""#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (c.mode, c.data, c.level, c.op_switch),
            (DumpMode::All, DumpDataKind::Stats, DumpLevel::Op, true)
        );
        assert!(c.selects("m", "a/b") && !c.selects("m", "a/c") && !c.selects("other", "a/b"));
        assert!(c.selects_step(0) && c.selects_step(5) && c.selects_step(15) && c.selects_step(20));
        assert!(!c.selects_step(1) && !c.selects_step(21));
        assert!(c.dumps_single_ops());
    }

    #[test]
    fn need_dump_decides_whether_anything_is_set() {
        let d = dir();
        // The collector's old config: valid, and sets nothing.
        assert_eq!(
            cfg(&d, r#""dump_mode": "all", "dump_list": [], "dump_data": "tensor", "dump_debug": "off""#),
            Ok(None)
        );
        assert_eq!(cfg(&d, ""), Ok(None));
        assert_eq!(parse_dump_json("{}"), Ok(None));
        assert_eq!(parse_dump_json(r#"{"dump": {}}"#), Ok(None));
        assert_eq!(parse_dump_json(""), Ok(None));
        // msprobe's: set, single ops included.
        let c = cfg(&d, r#""dump_list": [], "dump_mode": "all", "dump_op_switch": "on""#).unwrap().unwrap();
        assert!(c.dumps_single_ops() && c.selects_model("any") && c.level == DumpLevel::All);
        // A non-empty list sets a graph dump only.
        let c = cfg(&d, r#""dump_list": [{"model_name": "m"}]"#).unwrap().unwrap();
        assert!(!c.dumps_single_ops() && c.selects_model("m") && !c.selects_model("n"));
        let c = cfg(&d, r#""dump_debug": "on""#).unwrap().unwrap();
        assert!(c.debug && c.dumps_single_ops());
        // msprobe's way of skipping a step leaves single ops out.
        let c = cfg(&d, r#""dump_op_switch": "on", "dump_step": "2147483647""#).unwrap().unwrap();
        assert!(!c.dumps_single_ops());
    }

    #[test]
    fn refusals_follow_canns_checks() {
        let d = dir();
        assert!(matches!(parse_dump_json("{"), Err(ConfigError::Parse(_))));
        assert!(matches!(parse_dump_json(r#"{"dump": 3}"#), Err(ConfigError::Invalid(_))));
        assert!(
            matches!(parse_dump_json(r#"{"dump": {"dump_mode": "all"}}"#), Err(ConfigError::Invalid(w)) if w.contains("dump_path"))
        );
        invalid(&d, r#""dump_mode": "both""#, "dump_mode");
        invalid(&d, r#""dump_mode": """#, "empty");
        invalid(&d, r#""dump_mode": 1"#, "must be a string");
        invalid(&d, r#""dump_level": "layer""#, "dump_level");
        invalid(&d, r#""dump_op_switch": "yes""#, "dump_op_switch");
        invalid(&d, r#""dump_kernel_data": "all,bogus""#, "dump_kernel_data");
        invalid(&d, r#""dump_step": "5-1", "dump_op_switch": "on""#, "backwards");
        invalid(&d, r#""dump_step": "1 | 2", "dump_op_switch": "on""#, "dump_step");
        invalid(&d, r#""dump_list": {}"#, "must be an array");
        invalid(&d, r#""dump_list": [{"layer": "a"}]"#, "dump_list[0].layer");
        invalid(&d, r#""dump_list": [{"model_name": ""}]"#, "model_name: must not be empty");
        invalid(&d, r#""dump_list": [{"model_name": "m", "layer": []}]"#, "layer: must not be empty");
        invalid(&d, r#""dump_debug": "on", "dump_op_switch": "on""#, "dump_op_switch");
        invalid(&d, r#""dump_debug": "on", "dump_list": []"#, "dump_list: cannot be set");
        invalid(&d, r#""dump_stats": ["Max"], "dump_op_switch": "on""#, "dump_data is \"tensor\"");
        invalid(
            &d,
            r#""dump_stats": [], "dump_data": "stats", "dump_op_switch": "on""#,
            "dump_stats: must not be empty",
        );
        invalid(&d, r#""dump_stats": ["Median"], "dump_data": "stats""#, "dump_stats[0]");
        invalid(&d, r#""dump_scene": "aic_err_norm_dump", "dump_mode": "all""#, "dump_mode: cannot be set");
        invalid(
            &d,
            r#""dump_list": [{"model_name": "m", "optype_blacklist": [{"name": "Add"}]}]"#,
            "dump_level \"op\"",
        );
        // With the op switch on, an empty layer list is allowed (and means every op).
        assert!(cfg(&d, r#""dump_op_switch": "on", "dump_list": [{"model_name": "m", "layer": []}]"#)
            .unwrap()
            .is_some());
        // An exception scene takes no path check and dumps nothing the simulator runs.
        let c = parse_dump_json(r#"{"dump": {"dump_scene": "aic_err_brief_dump"}}"#).unwrap().unwrap();
        assert!(!c.dumps_single_ops() && !c.selects_model("m"));
    }

    #[test]
    fn dump_path_must_be_an_existing_writable_directory() {
        let d = dir();
        let missing = d.path().join("missing");
        let text = format!(r#"{{"dump": {{"dump_path": "{}", "dump_op_switch": "on"}}}}"#, missing.display());
        assert!(matches!(parse_dump_json(&text), Err(ConfigError::Invalid(w)) if w.contains("dump_path")));
        let file = d.path().join("f");
        std::fs::write(&file, b"").unwrap();
        let text = format!(r#"{{"dump": {{"dump_path": "{}", "dump_op_switch": "on"}}}}"#, file.display());
        assert!(
            matches!(parse_dump_json(&text), Err(ConfigError::Invalid(w)) if w.contains("not a directory"))
        );
        let long = "x".repeat(513);
        assert!(parse_dump_json(&format!(
            r#"{{"dump": {{"dump_path": "{long}", "dump_op_switch": "on"}}}}"#
        ))
        .is_err());
        let remote =
            parse_dump_json(r#"{"dump": {"dump_path": "10.0.0.1:/far/away", "dump_op_switch": "on"}}"#);
        assert_eq!(remote.unwrap().unwrap().dump_path, PathBuf::from("/far/away"));
    }
}
