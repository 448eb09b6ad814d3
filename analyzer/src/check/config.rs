//! Configuration: the command line and the hyperparameters in it, the environment, the files the command
//! names, and the software versions the collector found (docs/COLLECTOR.md, "What gets written").
//!
//! Hyperparameters are `--key value`, `--key=value` and `-k value` arguments, keys compared under common
//! aliases (`lr` = `learning_rate`, `bs` = `batch_size`, `wd` = `weight_decay`, ...). An argument that names a
//! file the collector recorded is compared by the file's content, so `--config a.json` and `--config
//! b.json` agree when the files do; JSON files are compared key by key. Arguments that name where output goes
//! (`*dir*`, `*output*`, `*log*`, `*save*`, `*checkpoint*`) are left out: they differ between any two runs.
//! Environment variables are all those the manifest recorded except accutrace's own (`ACCUTRACE_*`).

use super::item::{listed, Facts, Item, Status};
use accutrace_formats::capture::{FileDigest, Manifest};
use std::collections::{BTreeMap, BTreeSet};

const LOOK: &str = "manifest.json of each run: command, env, environment (versions, files)";

/// Key aliases: every spelling on the left compares as the name on the right.
const ALIASES: &[(&str, &str)] = &[
    ("learning_rate", "lr"),
    ("base_lr", "lr"),
    ("bs", "batch_size"),
    ("train_batch_size", "batch_size"),
    ("global_batch_size", "batch_size"),
    ("wd", "weight_decay"),
    ("num_epochs", "epochs"),
    ("max_epochs", "epochs"),
    ("random_seed", "seed"),
    ("clip_grad", "max_grad_norm"),
    ("grad_clip", "max_grad_norm"),
    ("clip_grad_norm", "max_grad_norm"),
];

/// Words of keys that name where output goes.
const OUTPUT_WORDS: &[&str] = &["dir", "output", "log", "save", "checkpoint", "ckpt", "tensorboard", "cache"];

/// An argument's value: text, or the content of a file the collector recorded.
#[derive(Clone, Debug, PartialEq)]
enum Value {
    Text(String),
    File(String, FileDigest),
}

impl Value {
    fn same(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::File(_, a), Value::File(_, b)) => a.xxh3 == b.xxh3,
            (a, b) => a == b,
        }
    }

    fn show(&self) -> String {
        match self {
            Value::Text(t) => t.clone(),
            Value::File(name, d) => format!("{name} ({} bytes, xxh3 {})", d.size, d.xxh3),
        }
    }
}

fn normalize(key: &str) -> String {
    let k = key.trim_start_matches('-').to_ascii_lowercase().replace('-', "_");
    ALIASES.iter().find(|(from, _)| *from == k).map_or(k, |(_, to)| to.to_string())
}

/// The hyperparameters of a command line (positional arguments as `arg1`, `arg2`, ...).
fn hyperparameters(m: &Manifest) -> BTreeMap<String, Value> {
    let value = |text: &str| match m.environment.files.get(text) {
        Some(d) => Value::File(text.to_string(), d.clone()),
        None => Value::Text(text.to_string()),
    };
    let mut out = BTreeMap::new();
    let args = m.command.get(1..).unwrap_or_default();
    let mut i = 0;
    let mut positional = 0;
    let is_flag = |a: &str| a.starts_with('-') && a.parse::<f64>().is_err() && a.len() > 1;
    while i < args.len() {
        let a = &args[i];
        if is_flag(a) {
            let (key, v) = match a.split_once('=') {
                Some((k, v)) => (k, value(v)),
                None if i + 1 < args.len() && !is_flag(&args[i + 1]) => {
                    i += 1;
                    (a.as_str(), value(&args[i]))
                }
                None => (a.as_str(), Value::Text("true".into())),
            };
            let key = normalize(key);
            if !OUTPUT_WORDS.iter().any(|w| key.contains(w)) {
                out.insert(key, v);
            }
        } else {
            positional += 1;
            out.insert(format!("arg{positional}"), value(a));
        }
        i += 1;
    }
    out
}

/// `key: a vs b` for every flattened JSON key whose value differs.
fn json_differences(a: &serde_json::Value, b: &serde_json::Value) -> Vec<String> {
    fn flatten(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, String>) {
        match v {
            serde_json::Value::Object(o) => {
                for (k, v) in o {
                    let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    flatten(&key, v, out);
                }
            }
            other => {
                out.insert(prefix.to_string(), other.to_string());
            }
        }
    }
    let (mut fa, mut fb) = (BTreeMap::new(), BTreeMap::new());
    flatten("", a, &mut fa);
    flatten("", b, &mut fb);
    let keys: BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
    keys.into_iter()
        .filter(|k| fa.get(*k) != fb.get(*k))
        .map(|k| {
            let show = |m: &BTreeMap<String, String>| m.get(k).cloned().unwrap_or_else(|| "(absent)".into());
            format!("{k}: {} vs {}", show(&fa), show(&fb))
        })
        .collect()
}

fn summary(label: &str, m: &Manifest) -> Vec<String> {
    let hp: Vec<String> = hyperparameters(m).iter().map(|(k, v)| format!("{k}={}", v.show())).collect();
    let versions: Vec<String> =
        m.environment.versions.iter().map(|(k, v)| format!("{k} {}", v.version)).collect();
    vec![
        format!("{label}: command {}", m.command.join(" ")),
        format!(
            "{label}: hyperparameters {}",
            if hp.is_empty() { "none found".into() } else { hp.join(" ") }
        ),
        format!(
            "{label}: versions {}",
            if versions.is_empty() { "none found".into() } else { versions.join(", ") }
        ),
    ]
}

pub(super) fn item(runs: &[Facts<'_>]) -> Item {
    let manifests: Vec<Option<&Manifest>> = runs.iter().map(|r| r.manifest).collect();
    if let Some(r) = runs.iter().zip(&manifests).find(|(_, m)| m.is_none()).map(|(r, _)| r) {
        let reason =
            format!("{} has no manifest: only captures record the command line and environment", r.label);
        return Item::new("configuration", Status::CantTell, reason, LOOK);
    }
    let ms: Vec<&Manifest> = manifests.into_iter().flatten().collect();
    let [a, b] = &ms[..] else {
        let details = summary(&runs[0].label, ms[0]);
        return Item::new(
            "configuration",
            Status::CantTell,
            "give a second run to compare the configuration with",
            LOOK,
        )
        .with(details);
    };
    let differ = differences(a, b);
    let mut details = Vec::new();
    if a.collector_version != b.collector_version {
        details.push(format!("collector {} vs {}", a.collector_version, b.collector_version));
    }
    if differ.is_empty() {
        details.extend(summary("run 1", a));
        return Item::new(
            "configuration",
            Status::Pass,
            "the same hyperparameters, files, environment and versions",
            LOOK,
        )
        .with(details);
    }
    let reason =
        format!("{} configuration difference{}", differ.len(), if differ.len() == 1 { "" } else { "s" });
    let mut lines = listed(&differ, 15);
    lines.extend(details);
    Item::new("configuration", Status::Fail, reason, LOOK).with(lines)
}

/// Variables that place one process in its job: they differ between the ranks of one run, and a manifest's
/// environment is its first writer's, whichever rank that was (`RANK_ID: 0 vs 1` failed two runs of one
/// job). The job's size (`RANK_SIZE`, `WORLD_SIZE`) is configuration and stays compared.
const PER_PROCESS: [&str; 5] = ["RANK_ID", "RANK", "LOCAL_RANK", "DEVICE_ID", "ASCEND_DEVICE_ID"];

/// How two runs' configurations differ (hyperparameters, files by content, environment, versions), one
/// line each; none when they are set up alike. The determinism item reads it too: outputs that differ
/// between runs set up differently are no evidence of nondeterminism.
pub(super) fn differences(a: &Manifest, b: &Manifest) -> Vec<String> {
    let mut differ = Vec::new();
    let (ha, hb) = (hyperparameters(a), hyperparameters(b));
    let keys: BTreeSet<&String> = ha.keys().chain(hb.keys()).collect();
    for k in keys {
        match (ha.get(k), hb.get(k)) {
            (Some(x), Some(y)) if x.same(y) => {}
            (Some(Value::File(_, x)), Some(Value::File(_, y))) => {
                let inner = match (&x.json, &y.json) {
                    (Some(jx), Some(jy)) => json_differences(jx, jy),
                    _ => Vec::new(),
                };
                if inner.is_empty() {
                    differ.push(format!("{k}: the files differ ({} vs {})", x.xxh3, y.xxh3));
                } else {
                    differ.extend(inner.iter().take(10).map(|d| format!("{k}: {d}")));
                }
            }
            (x, y) => {
                let show = |v: Option<&Value>| v.map_or("(absent)".to_string(), Value::show);
                differ.push(format!("{k}: {} vs {}", show(x), show(y)));
            }
        }
    }
    let env_keys: BTreeSet<&String> = a
        .env
        .keys()
        .chain(b.env.keys())
        .filter(|k| !k.starts_with("ACCUTRACE_") && !PER_PROCESS.contains(&k.as_str()))
        .collect();
    for k in env_keys {
        if a.env.get(k) != b.env.get(k) {
            let show = |m: &Manifest| m.env.get(k).cloned().unwrap_or_else(|| "(unset)".into());
            differ.push(format!("environment {k}: {} vs {}", show(a), show(b)));
        }
    }
    let names: BTreeSet<&String> =
        a.environment.versions.keys().chain(b.environment.versions.keys()).collect();
    for n in names {
        let (x, y) = (a.environment.versions.get(n), b.environment.versions.get(n));
        if x.map(|v| &v.version) != y.map(|v| &v.version) {
            let show = |v: Option<&accutrace_formats::capture::FoundVersion>| {
                v.map_or("(not found)".to_string(), |v| v.version.clone())
            };
            differ.push(format!("version of {n}: {} vs {}", show(x), show(y)));
        }
    }
    differ
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(command: &[&str]) -> Manifest {
        Manifest::new("0.1.0", command.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn hyperparameters_come_from_the_command_line_under_their_aliases() {
        let m = manifest(&[
            "python",
            "train.py",
            "--learning-rate",
            "0.1",
            "--bs=32",
            "--fp16",
            "--output_dir",
            "runs/a",
            "-s",
            "-3",
        ]);
        let hp = hyperparameters(&m);
        assert_eq!(hp["lr"], Value::Text("0.1".into()));
        assert_eq!(hp["batch_size"], Value::Text("32".into()));
        assert_eq!(hp["fp16"], Value::Text("true".into()));
        assert_eq!(hp["s"], Value::Text("-3".into()), "a negative number is a value");
        assert_eq!(hp["arg1"], Value::Text("train.py".into()));
        assert!(!hp.contains_key("output_dir"), "where output goes differs between any two runs");
    }

    #[test]
    fn the_rank_of_the_manifests_first_writer_is_no_configuration() {
        let with_env = |vars: &[(&str, &str)]| {
            let mut m = manifest(&["python", "train.py"]);
            m.env = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            m
        };
        let rank = |r: &str, size: &str| {
            with_env(&[
                ("RANK_ID", r),
                ("RANK", r),
                ("LOCAL_RANK", r),
                ("DEVICE_ID", r),
                ("ASCEND_DEVICE_ID", r),
                ("RANK_SIZE", size),
            ])
        };
        assert_eq!(differences(&rank("0", "4"), &rank("1", "4")), Vec::<String>::new());
        assert_eq!(differences(&rank("0", "4"), &rank("0", "2")), ["environment RANK_SIZE: 4 vs 2"]);
    }

    #[test]
    fn json_files_differ_key_by_key() {
        let a = serde_json::json!({"lr": 0.1, "faults": {"lr_scale": 1.0}});
        let b = serde_json::json!({"lr": 0.1, "faults": {"lr_scale": 0.0, "new": true}});
        assert_eq!(json_differences(&a, &b), ["faults.lr_scale: 1.0 vs 0.0", "faults.new: (absent) vs true"]);
    }
}
