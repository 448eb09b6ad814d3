//! The collector's options: `ACCUTRACE_*` environment variables, optionally a JSON file of the same keys
//! (`ACCUTRACE_CONFIG`), validated into a [`Config`]; and the CANN dump JSON generated from it.
//!
//! Precedence: environment over file over defaults. Keys in the file may be spelled like the variables
//! (`"ACCUTRACE_MODE"`) or short (`"mode"`); values may be JSON strings, numbers or booleans. Unknown keys are
//! errors (a typo must not silently capture something else). Every error is one line for the log.

use accutrace_formats::capture::policy::{parse_size, Policy};
use accutrace_formats::steps::StepSet;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What is kept of each tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Statistics and content hash per tensor (the runtime dumps tensors; the collector keeps no data).
    Stats,
    /// Statistics, hash and the data (byte-shuffled, zstd).
    Tensor,
    /// CANN computes the statistics on the device (`dump_data: stats`); its CSV is kept verbatim.
    DeviceStats,
}

/// What the callback does when no chunk slot is free.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueFull {
    /// Wait (spin, then sleep) until a writer frees a slot: nothing is lost, the runtime's dump thread waits.
    Block,
    /// Drop the chunk, count it, and mark its file incomplete.
    Drop,
}

/// What the collector records of each HCCL call (`ACCUTRACE_COLLECTIVES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Collectives {
    /// Communicator, sequence number, op, count, type, root or peer, and the statistics and content hash
    /// of the input and output buffers (read after synchronizing the call's stream).
    Stats,
    /// The same without the buffers: nothing is read and no stream is synchronized.
    Meta,
    /// Nothing.
    Off,
}

/// A test-only fault: panic at this point (`ACCUTRACE_TEST_PANIC`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PanicPoint {
    Init,
    Callback,
    Writer,
}

/// The validated configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Config {
    pub dir: PathBuf,
    pub mode: Mode,
    pub policy: Policy,
    /// `dump_step`, CANN syntax, validated; `None` = every step.
    pub steps: Option<String>,
    /// `dump_list` layer names; empty = every op.
    pub ops: Vec<String>,
    /// `dump_mode`: `input`, `output` or `all`.
    pub io: String,
    pub zstd_level: i32,
    /// Also keep a histogram of each tensor's values (log2 magnitude per sign, `accutrace_formats::histogram`).
    pub histogram: bool,
    /// `dump_debug: on` (overflow detection; CANN makes it exclusive with the data dump).
    pub overflow: bool,
    pub queue_full: QueueFull,
    pub slots: usize,
    pub slot_size: usize,
    pub segment_size: u64,
    pub writers: usize,
    /// Keep the framework's own dump configuration; only register the callback.
    pub respect_framework_dump: bool,
    pub collectives: Collectives,
    /// `dump_level` (`op`, `kernel` or `all`); `None` leaves CANN's default (`all`).
    pub dump_level: Option<String>,
    /// A regular expression on op types: a run of matching ops ends a step (e.g. the optimizer's apply op).
    pub step_marker: Option<String>,
    pub test_panic: Option<PanicPoint>,
    pub test_slow_writer_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            dir: PathBuf::new(),
            mode: Mode::Stats,
            policy: Policy::KeepAll,
            steps: None,
            ops: Vec::new(),
            io: "all".into(),
            zstd_level: 1,
            histogram: false,
            overflow: false,
            queue_full: QueueFull::Block,
            slots: DEFAULT_SLOTS,
            slot_size: DEFAULT_SLOT_SIZE,
            segment_size: accutrace_formats::capture::DEFAULT_SEGMENT_SIZE,
            writers: 1,
            respect_framework_dump: false,
            collectives: Collectives::Stats,
            dump_level: None,
            step_marker: None,
            test_panic: None,
            test_slow_writer_ms: 0,
        }
    }
}

/// Default pool: 256 slots of 256 KiB (64 MiB reserved, resident as used). A chunk takes a slot whatever its
/// size, so the slot count bounds how far a writer may lag behind the runtime: with 64 slots of 1 MiB the
/// simulated runtime's 64 KiB chunks filled the pool with 4 MiB queued, a quarter of one `small` step's
/// dump, and the runtime's dump thread (then the training thread) waited for the writer in every run at
/// load 10-20; 256 slots hold 16 MiB of such chunks. Chunks above a slot are split over several slots as
/// before (the same 64 MiB of room), at the cost of one copy on the writer for a file that came in one such
/// chunk (docs/BENCHMARKS.md, "Step time and disk").
pub const DEFAULT_SLOTS: usize = 256;
/// Default segment size when no tensor data is stored (tensor mode: the format's 64 MiB default).
pub const STATS_SEGMENT_SIZE: u64 = 8 << 20;
/// See [`DEFAULT_SLOTS`].
pub const DEFAULT_SLOT_SIZE: usize = 256 << 10;
/// A slot must hold the longest file name (4095 bytes) and some payload.
pub const MIN_SLOT_SIZE: usize = 8 << 10;
/// Upper bound of the pre-allocated pool (slots x slot size).
pub const MAX_POOL_BYTES: u64 = 16 << 30;

/// Every key, short form. The variable is `ACCUTRACE_` + upper case.
pub const KEYS: &[&str] = &[
    "dir",
    "mode",
    "policy",
    "steps",
    "ops",
    "io",
    "zstd_level",
    "histogram",
    "overflow",
    "queue_full",
    "slots",
    "slot_size",
    "segment_size",
    "writers",
    "respect_framework_dump",
    "collectives",
    "dump_level",
    "step_marker",
    "test_panic",
    "test_slow_writer_ms",
];

/// What the environment says about activation.
#[derive(Debug, PartialEq)]
pub enum Activation {
    /// Neither `ACCUTRACE_DIR` nor `ACCUTRACE_CONFIG`: preloaded but inert.
    Inert,
    Active(Box<Config>),
}

/// Reads the process environment (and the config file it names).
pub fn from_env() -> Result<Activation, String> {
    let vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let file = match vars.iter().find(|(k, _)| k == "ACCUTRACE_CONFIG") {
        Some((_, path)) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("ACCUTRACE_CONFIG={path}: {e}"))?;
            Some((path.clone(), text))
        }
        None => None,
    };
    from_sources(&vars, file.as_ref().map(|(p, t)| (p.as_str(), t.as_str())))
}

/// [`from_env`] on explicit inputs: environment pairs and an optional (path, JSON text).
pub fn from_sources(env: &[(String, String)], file: Option<(&str, &str)>) -> Result<Activation, String> {
    let mut values: BTreeMap<&'static str, (String, String)> = BTreeMap::new();
    if let Some((path, text)) = file {
        let json: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("ACCUTRACE_CONFIG={path}: invalid JSON: {e}"))?;
        let obj =
            json.as_object().ok_or_else(|| format!("ACCUTRACE_CONFIG={path}: expected a JSON object"))?;
        for (k, v) in obj {
            let short = k.strip_prefix("ACCUTRACE_").unwrap_or(k).to_ascii_lowercase();
            let key = KEYS
                .iter()
                .find(|&&known| known == short)
                .ok_or_else(|| format!("ACCUTRACE_CONFIG={path}: unknown key {k:?}"))?;
            let text = match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => (if *b { "1" } else { "0" }).to_string(),
                serde_json::Value::Array(items) if *key == "ops" => {
                    let names: Option<Vec<&str>> = items.iter().map(|i| i.as_str()).collect();
                    names
                        .ok_or_else(|| format!("ACCUTRACE_CONFIG={path}: \"ops\" must hold strings"))?
                        .join(",")
                }
                other => return Err(format!("ACCUTRACE_CONFIG={path}: {k}: unsupported value {other}")),
            };
            values.insert(key, (format!("{k} in {path}"), text));
        }
    }
    for (k, v) in env {
        let Some(rest) = k.strip_prefix("ACCUTRACE_") else { continue };
        if k == "ACCUTRACE_CONFIG" {
            continue;
        }
        let short = rest.to_ascii_lowercase();
        match KEYS.iter().find(|&&known| known == short) {
            Some(key) => {
                values.insert(key, (k.clone(), v.clone()));
            }
            // Variables of other accutrace tools (tests, benchmarks) share the prefix: ignore what we
            // do not know rather than refuse to run; the docs list ours.
            None => continue,
        }
    }
    let has_config = file.is_some();
    if !values.contains_key("dir") && !has_config {
        return Ok(Activation::Inert);
    }
    let mut c = Config::default();
    for (key, (origin, text)) in &values {
        let bad = |why: String| format!("{origin}={text:?}: {why}");
        let t = text.trim();
        match *key {
            "dir" => {
                if t.is_empty() {
                    return Err(bad("must name a directory".into()));
                }
                c.dir = PathBuf::from(t);
            }
            "mode" => {
                c.mode = match t {
                    "stats" => Mode::Stats,
                    "tensor" => Mode::Tensor,
                    "device-stats" => Mode::DeviceStats,
                    _ => return Err(bad("expected stats, tensor or device-stats".into())),
                }
            }
            "policy" => c.policy = Policy::parse(t).map_err(bad)?,
            "steps" => c.steps = Some(StepSet::parse(t).map_err(bad)?.to_string()),
            "ops" => {
                c.ops = t.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
            }
            "io" => {
                if !matches!(t, "input" | "output" | "all") {
                    return Err(bad("expected input, output or all".into()));
                }
                c.io = t.to_string();
            }
            "zstd_level" => c.zstd_level = parse_int(t, -7, 22).map_err(bad)? as i32,
            "overflow" => c.overflow = parse_bool(t).map_err(bad)?,
            "histogram" => c.histogram = parse_bool(t).map_err(bad)?,
            "queue_full" => {
                c.queue_full = match t {
                    "block" => QueueFull::Block,
                    "drop" => QueueFull::Drop,
                    _ => return Err(bad("expected block or drop".into())),
                }
            }
            "slots" => c.slots = parse_int(t, 2, 1 << 20).map_err(bad)? as usize,
            "slot_size" => {
                c.slot_size = parse_size(t)
                    .and_then(|s| in_range(s, MIN_SLOT_SIZE as u64, 1 << 30))
                    .map_err(bad)? as usize
            }
            "segment_size" => {
                let s = parse_size(t).and_then(|s| in_range(s, 64 << 10, 1 << 40)).map_err(bad)?;
                if s % 8 != 0 {
                    return Err(bad("must be a multiple of 8".into()));
                }
                c.segment_size = s;
            }
            "writers" => c.writers = parse_int(t, 1, 64).map_err(bad)? as usize,
            "respect_framework_dump" => c.respect_framework_dump = parse_bool(t).map_err(bad)?,
            "collectives" => {
                c.collectives = match t {
                    "stats" => Collectives::Stats,
                    "meta" => Collectives::Meta,
                    "off" => Collectives::Off,
                    _ => return Err(bad("expected stats, meta or off".into())),
                }
            }
            "dump_level" => {
                if !matches!(t, "op" | "kernel" | "all") {
                    return Err(bad("expected op, kernel or all".into()));
                }
                c.dump_level = Some(t.to_string());
            }
            "step_marker" => {
                regex::Regex::new(t)
                    .map_err(|e| bad(format!("not a regular expression: {}", one_line(&e))))?;
                c.step_marker = (!t.is_empty()).then(|| t.to_string());
            }
            "test_panic" => {
                c.test_panic = match t {
                    "" => None,
                    "init" => Some(PanicPoint::Init),
                    "callback" => Some(PanicPoint::Callback),
                    "writer" => Some(PanicPoint::Writer),
                    _ => return Err(bad("expected init, callback or writer".into())),
                }
            }
            "test_slow_writer_ms" => c.test_slow_writer_ms = parse_int(t, 0, 60_000).map_err(bad)? as u64,
            _ => unreachable!("every key in KEYS is handled"),
        }
    }
    if !values.contains_key("segment_size") && c.mode != Mode::Tensor {
        // Statistics records are ~100 bytes per tensor: a 64 MiB pre-allocated segment would be mostly zeros.
        c.segment_size = STATS_SEGMENT_SIZE;
    }
    if c.dir.as_os_str().is_empty() {
        return Err("ACCUTRACE_DIR (or \"dir\" in ACCUTRACE_CONFIG) is required".into());
    }
    if (c.slots as u64).saturating_mul(c.slot_size as u64) > MAX_POOL_BYTES {
        return Err(format!(
            "ACCUTRACE_SLOTS x ACCUTRACE_SLOT_SIZE = {} x {} exceeds {} bytes",
            c.slots, c.slot_size, MAX_POOL_BYTES
        ));
    }
    if c.histogram && c.mode == Mode::DeviceStats {
        return Err(
            "ACCUTRACE_HISTOGRAM=1 needs ACCUTRACE_MODE=stats or tensor (device statistics bring no \
                    values to count)"
                .into(),
        );
    }
    if c.overflow && c.mode == Mode::DeviceStats {
        return Err("ACCUTRACE_OVERFLOW=1 needs ACCUTRACE_MODE=stats or tensor (CANN's op-debug dump \
                    writes tensor files)"
            .into());
    }
    Ok(Activation::Active(Box::new(c)))
}

fn parse_bool(t: &str) -> Result<bool, String> {
    match t.to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" | "" => Ok(false),
        _ => Err("expected 1 or 0".into()),
    }
}

fn parse_int(t: &str, min: i64, max: i64) -> Result<i64, String> {
    let n: i64 = t.parse().map_err(|_| "not an integer".to_string())?;
    if n < min || n > max {
        return Err(format!("must be between {min} and {max}"));
    }
    Ok(n)
}

fn in_range(n: u64, min: u64, max: u64) -> Result<u64, String> {
    if n < min || n > max {
        return Err(format!("must be between {min} and {max} bytes"));
    }
    Ok(n)
}

/// An error message on one line (regex errors come with a caret diagram).
fn one_line(e: &dyn std::fmt::Display) -> String {
    e.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Config {
    /// The CANN dump JSON (`{"dump": {...}}`) that makes the runtime deliver what this configuration asks
    /// for, dumping "to" `dump_path` (CANN requires an existing directory even with a callback registered;
    /// nothing is written there). `steps` is the `dump_step` to set, if any.
    ///
    /// It passes CANN's `NeedDump`: a data dump turns `dump_op_switch` on (single-operator calls, the eager
    /// path, are dumped only then, and it sets the dump even with an empty `dump_list`); the overflow dump
    /// (`dump_debug: on`) excludes both the op switch and any `dump_list` key.
    pub fn dump_json_at(&self, dump_path: &std::path::Path, steps: Option<&str>) -> serde_json::Value {
        let mut dump = serde_json::Map::new();
        dump.insert("dump_path".into(), dump_path.display().to_string().into());
        dump.insert("dump_mode".into(), self.io.clone().into());
        if self.overflow {
            dump.insert("dump_debug".into(), "on".into());
        } else {
            let list: Vec<serde_json::Value> =
                if self.ops.is_empty() { Vec::new() } else { vec![serde_json::json!({ "layer": self.ops })] };
            dump.insert("dump_list".into(), list.into());
            dump.insert("dump_op_switch".into(), "on".into());
            let data = if self.mode == Mode::DeviceStats { "stats" } else { "tensor" };
            dump.insert("dump_data".into(), data.into());
            if let Some(level) = &self.dump_level {
                dump.insert("dump_level".into(), level.clone().into());
            }
        }
        if let Some(steps) = steps {
            dump.insert("dump_step".into(), steps.into());
        }
        serde_json::json!({ "dump": dump })
    }

    /// [`Config::dump_json_at`] the run directory, with the configured steps: what activation sets.
    pub fn dump_json(&self) -> serde_json::Value {
        self.dump_json_at(&self.dir, self.steps.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn active(pairs: &[(&str, &str)]) -> Config {
        match from_sources(&env(pairs), None).unwrap() {
            Activation::Active(c) => *c,
            Activation::Inert => panic!("inert"),
        }
    }

    #[test]
    fn inert_without_dir_or_config() {
        assert_eq!(from_sources(&env(&[("ACCUTRACE_MODE", "tensor")]), None).unwrap(), Activation::Inert);
        assert_eq!(from_sources(&[], None).unwrap(), Activation::Inert);
    }

    #[test]
    fn defaults_and_every_key() {
        let c = active(&[("ACCUTRACE_DIR", "runs/x")]);
        assert_eq!(c, Config { dir: "runs/x".into(), segment_size: STATS_SEGMENT_SIZE, ..Config::default() });
        let c = active(&[("ACCUTRACE_DIR", "runs/x"), ("ACCUTRACE_MODE", "tensor")]);
        assert_eq!(c.segment_size, accutrace_formats::capture::DEFAULT_SEGMENT_SIZE);
        let c = active(&[
            ("ACCUTRACE_DIR", "d"),
            ("ACCUTRACE_MODE", "tensor"),
            ("ACCUTRACE_POLICY", "trigger:1G:3"),
            ("ACCUTRACE_STEPS", "0|5|10-20"),
            ("ACCUTRACE_OPS", "a/b, c"),
            ("ACCUTRACE_IO", "output"),
            ("ACCUTRACE_ZSTD_LEVEL", "3"),
            ("ACCUTRACE_OVERFLOW", "1"),
            ("ACCUTRACE_HISTOGRAM", "yes"),
            ("ACCUTRACE_QUEUE_FULL", "drop"),
            ("ACCUTRACE_SLOTS", "8"),
            ("ACCUTRACE_SLOT_SIZE", "64K"),
            ("ACCUTRACE_SEGMENT_SIZE", "1M"),
            ("ACCUTRACE_WRITERS", "2"),
            ("ACCUTRACE_RESPECT_FRAMEWORK_DUMP", "1"),
            ("ACCUTRACE_COLLECTIVES", "meta"),
            ("ACCUTRACE_TEST_PANIC", "writer"),
            ("ACCUTRACE_TEST_SLOW_WRITER_MS", "5"),
            ("ACCUTRACE_DUMP_LEVEL", "op"),
            ("ACCUTRACE_STEP_MARKER", "^ApplyAdamD$|^AmpUpdateScale$"),
            ("ACCUTRACE_SOMETHING_ELSE", "ignored"),
        ]);
        assert_eq!(c.mode, Mode::Tensor);
        assert_eq!(c.policy, Policy::Trigger { ring_bytes: 1 << 30, keep_steps_after: 3 });
        assert_eq!(c.steps.as_deref(), Some("0|5|10-20"));
        assert_eq!(c.ops, ["a/b", "c"]);
        assert_eq!((c.io.as_str(), c.zstd_level, c.overflow, c.histogram), ("output", 3, true, true));
        assert_eq!((c.queue_full, c.slots, c.slot_size), (QueueFull::Drop, 8, 64 << 10));
        assert_eq!((c.segment_size, c.writers, c.respect_framework_dump), (1 << 20, 2, true));
        assert_eq!(c.collectives, Collectives::Meta);
        assert_eq!((c.test_panic, c.test_slow_writer_ms), (Some(PanicPoint::Writer), 5));
        assert_eq!(c.dump_level.as_deref(), Some("op"));
        assert_eq!(c.step_marker.as_deref(), Some("^ApplyAdamD$|^AmpUpdateScale$"));
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (k, v) in [
            ("ACCUTRACE_MODE", "full"),
            ("ACCUTRACE_POLICY", "ring"),
            ("ACCUTRACE_POLICY", "ring:12Q"),
            ("ACCUTRACE_POLICY", "ring:0"),
            ("ACCUTRACE_POLICY", "trigger:1G:x"),
            ("ACCUTRACE_STEPS", "5-1"),
            ("ACCUTRACE_STEPS", "1||2"),
            ("ACCUTRACE_STEPS", "a"),
            ("ACCUTRACE_ZSTD_LEVEL", "99"),
            ("ACCUTRACE_OVERFLOW", "maybe"),
            ("ACCUTRACE_HISTOGRAM", "2"),
            ("ACCUTRACE_QUEUE_FULL", "wait"),
            ("ACCUTRACE_SLOTS", "1"),
            ("ACCUTRACE_SLOT_SIZE", "100"),
            ("ACCUTRACE_SEGMENT_SIZE", "100001"),
            ("ACCUTRACE_WRITERS", "0"),
            ("ACCUTRACE_IO", "both"),
            ("ACCUTRACE_TEST_PANIC", "everywhere"),
            ("ACCUTRACE_DUMP_LEVEL", "layer"),
            ("ACCUTRACE_STEP_MARKER", "Apply(Adam"),
        ] {
            let err = from_sources(&env(&[("ACCUTRACE_DIR", "d"), (k, v)]), None).unwrap_err();
            assert!(err.starts_with(k), "{k}={v}: {err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
        let err =
            from_sources(&env(&[("ACCUTRACE_DIR", "d"), ("ACCUTRACE_SLOTS", "1048576")]), None).unwrap_err();
        assert!(err.contains("exceeds"), "{err}");
        assert!(from_sources(&env(&[("ACCUTRACE_DIR", " ")]), None).is_err());
        let device =
            [("ACCUTRACE_DIR", "d"), ("ACCUTRACE_MODE", "device-stats"), ("ACCUTRACE_HISTOGRAM", "1")];
        assert!(from_sources(&env(&device), None).unwrap_err().contains("ACCUTRACE_HISTOGRAM=1 needs"));
    }

    #[test]
    fn config_file_with_env_overrides() {
        let text = r#"{"dir": "from-file", "ACCUTRACE_MODE": "tensor", "slots": 16, "overflow": true,
                       "ops": ["x", "y"]}"#;
        let env = env(&[("ACCUTRACE_MODE", "stats")]);
        let Activation::Active(c) = from_sources(&env, Some(("c.json", text))).unwrap() else { panic!() };
        assert_eq!(c.dir, PathBuf::from("from-file"));
        assert_eq!(c.mode, Mode::Stats, "environment wins");
        assert_eq!((c.slots, c.overflow), (16, true));
        assert_eq!(c.ops, ["x", "y"]);
        let err = from_sources(&[], Some(("c.json", r#"{"dir": "d", "mdoe": "x"}"#))).unwrap_err();
        assert!(err.contains("unknown key \"mdoe\""), "{err}");
        assert!(from_sources(&[], Some(("c.json", "{"))).unwrap_err().contains("invalid JSON"));
        assert!(from_sources(&[], Some(("c.json", r#"{"mode": "stats"}"#)))
            .unwrap_err()
            .contains("required"));
    }

    #[test]
    fn sizes_and_dump_json() {
        let mut c = Config {
            dir: "/r".into(),
            steps: Some("1-2".into()),
            ops: vec!["a".into()],
            ..Config::default()
        };
        let j = c.dump_json();
        assert_eq!(j["dump"]["dump_path"], "/r");
        assert_eq!(j["dump"]["dump_mode"], "all");
        assert_eq!(j["dump"]["dump_step"], "1-2");
        assert_eq!(j["dump"]["dump_list"][0]["layer"][0], "a");
        assert_eq!(j["dump"]["dump_data"], "tensor");
        assert_eq!(j["dump"]["dump_op_switch"], "on");
        assert!(j["dump"].get("dump_level").is_none() && j["dump"].get("dump_debug").is_none());
        c.mode = Mode::DeviceStats;
        c.dump_level = Some("kernel".into());
        assert_eq!(c.dump_json()["dump"]["dump_data"], "stats");
        assert_eq!(c.dump_json()["dump"]["dump_level"], "kernel");
        c.overflow = true;
        let j = c.dump_json();
        assert_eq!(j["dump"]["dump_debug"], "on");
        assert!(j["dump"].get("dump_list").is_none() && j["dump"].get("dump_op_switch").is_none());
    }
}
