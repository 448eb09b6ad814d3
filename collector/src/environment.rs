//! What the job runs with, found without touching the script, for `manifest.json`'s `environment`
//! (`accutrace_formats::capture::RunEnvironment`; `analyzer check` compares two runs' by item):
//! - software versions: CANN's `version.info` under `ASCEND_TOOLKIT_HOME` / `ASCEND_HOME_PATH`; Python
//!   packages (`torch`, `torch_npu`, ...) from the `site-packages` directories the process has mapped
//!   libraries from, then `PYTHONPATH`, `VIRTUAL_ENV` and `CONDA_PREFIX`, read from their `.dist-info`
//!   `METADATA` (`Version:`), else a package's `version.py`; Python's own version from the mapped
//!   `libpython3.N`.
//! - the files the command line names (the script, configuration files): size and XXH3 of the content,
//!   and the parsed content of small JSON files.
//!
//! Everything is gathered once at activation, on the job's thread, from a few small files: bounded reads
//! only, and what cannot be read is left out (never an error: the job must not notice).

use accutrace_formats::capture::{FileDigest, FoundVersion, RunEnvironment, MAX_JSON_KEPT};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Python distributions worth knowing for an accuracy comparison (msprobe's config_check list, plus the
/// Ascend adapters).
pub const PYTHON_PACKAGES: &[&str] = &[
    "torch",
    "torch_npu",
    "numpy",
    "transformers",
    "deepspeed",
    "megatron_core",
    "mindspeed",
    "mindspore",
    "apex",
    "accelerate",
    "datasets",
    "peft",
];

/// Files on the command line larger than this are skipped: a dataset is not configuration, and hashing
/// gigabytes would delay the job.
const MAX_FILE_HASHED: u64 = 16 << 20;
/// Extensions of command-line arguments worth a digest: scripts and configuration.
const CONFIG_EXTENSIONS: &[&str] = &["py", "sh", "json", "yaml", "yml", "toml", "cfg", "ini", "conf", "txt"];

/// Everything [`RunEnvironment`] holds that can be found at activation (the job's settings come later).
pub fn collect(command: &[String], env: &dyn Fn(&str) -> Option<String>) -> RunEnvironment {
    let cwd = std::env::current_dir().ok();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut versions = BTreeMap::new();
    if let Some(found) = cann_version(env) {
        versions.insert("cann".to_string(), found);
    }
    if let Some(found) = python_version(&maps) {
        versions.insert("python".to_string(), found);
    }
    let dirs = site_packages(&maps, env);
    for &name in PYTHON_PACKAGES {
        if let Some(found) = dirs.iter().find_map(|d| package_version(d, name)) {
            versions.insert(name.to_string(), found);
        }
    }
    RunEnvironment {
        cwd: cwd.as_ref().map(|c| c.display().to_string()),
        versions,
        files: command_files(command, cwd.as_deref()),
        settings: Default::default(),
    }
}

/// `Version=8.0.RC1` (or `version: ...`): the value of the first line whose key is `version`.
pub fn version_line(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(['=', ':'])?;
        let value = value.trim().trim_matches('"');
        (key.trim().eq_ignore_ascii_case("version") && !value.is_empty()).then(|| value.to_string())
    })
}

/// Reads at most 64 KiB of a small text file.
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path).ok()?.take(64 << 10).read_to_string(&mut text).ok()?;
    Some(text)
}

/// CANN's version: `version.info` in the toolkit home, else in one of its component directories
/// (`runtime/`, `compiler/`, `{arch}-linux/`), else `{arch}-linux/ascend_toolkit_install.info`.
fn cann_version(env: &dyn Fn(&str) -> Option<String>) -> Option<FoundVersion> {
    for var in ["ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"] {
        let Some(home) = env(var).filter(|h| !h.is_empty()).map(PathBuf::from) else { continue };
        let mut candidates = vec![home.join("version.info")];
        let mut subdirs: Vec<PathBuf> = std::fs::read_dir(&home)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        subdirs.sort();
        candidates.extend(subdirs.iter().map(|d| d.join("version.info")));
        candidates.extend(subdirs.iter().map(|d| d.join("ascend_toolkit_install.info")));
        for path in candidates {
            if let Some(version) = read_small(&path).as_deref().and_then(version_line) {
                return Some(FoundVersion { version, source: path.display().to_string() });
            }
        }
    }
    None
}

/// `3.10` from a mapped `libpython3.10.so`.
fn python_version(maps: &str) -> Option<FoundVersion> {
    maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find_map(|path| {
        let name = Path::new(path).file_name()?.to_str()?;
        let rest = name.strip_prefix("libpython")?;
        let version: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
        let version = version.trim_end_matches('.').to_string();
        (version.contains('.')).then(|| FoundVersion { version, source: path.to_string() })
    })
}

/// Candidate `site-packages` directories, most trustworthy first: those the process loaded libraries
/// from, then `PYTHONPATH`, `VIRTUAL_ENV`, `CONDA_PREFIX`.
fn site_packages(maps: &str, env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut push = |d: PathBuf| {
        if d.is_dir() && !dirs.contains(&d) {
            dirs.push(d);
        }
    };
    for path in maps.lines().filter_map(|l| l.split_whitespace().nth(5)) {
        for marker in ["/site-packages/", "/dist-packages/"] {
            if let Some(i) = path.find(marker) {
                push(PathBuf::from(&path[..i + marker.len() - 1]));
            }
        }
    }
    if let Some(pp) = env("PYTHONPATH") {
        pp.split(':').filter(|p| !p.is_empty()).for_each(|p| push(PathBuf::from(p)));
    }
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        let Some(prefix) = env(var).filter(|p| !p.is_empty()) else { continue };
        let lib = Path::new(&prefix).join("lib");
        let mut found: Vec<PathBuf> = std::fs::read_dir(&lib)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("python")))
            .map(|p| p.join("site-packages"))
            .collect();
        found.sort();
        found.into_iter().for_each(&mut push);
    }
    dirs
}

/// Python's normalized distribution name: lower case, runs of `-`, `_`, `.` as one `_`.
fn normalize(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('_') {
                out.push('_');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// The version of distribution `name` installed in `dir`: its `.dist-info/METADATA` (or `.egg-info/PKG-INFO`)
/// `Version:` line, else `{name}/version.py`'s `__version__`.
fn package_version(dir: &Path, name: &str) -> Option<FoundVersion> {
    let want = normalize(name);
    let mut infos: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let Some(file) = p.file_name().and_then(|n| n.to_str()) else { return false };
            let Some(stem) = file.strip_suffix(".dist-info").or_else(|| file.strip_suffix(".egg-info"))
            else {
                return false;
            };
            // `{name}-{version}`: the name ends at the first '-' (names use '_' in these directories).
            normalize(stem.split('-').next().unwrap_or(stem)) == want
        })
        .collect();
    infos.sort();
    for info in &infos {
        for meta in ["METADATA", "PKG-INFO"] {
            let path = info.join(meta);
            if let Some(version) = read_small(&path).as_deref().and_then(version_line) {
                return Some(FoundVersion { version, source: path.display().to_string() });
            }
        }
    }
    let path = dir.join(name).join("version.py");
    let text = read_small(&path)?;
    let version = text.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "__version__").then(|| value.trim().trim_matches(['\'', '"']).to_string())
    })?;
    Some(FoundVersion { version, source: path.display().to_string() })
}

/// Digests of the scripts and configuration files the command line names (`train.py`, `--config x.yaml`,
/// `--config=x.json`), resolved against the working directory.
fn command_files(command: &[String], cwd: Option<&Path>) -> BTreeMap<String, FileDigest> {
    let mut files = BTreeMap::new();
    for arg in command.iter().skip(1) {
        let candidate = arg.split_once('=').map_or(arg.as_str(), |(_, v)| v);
        let extension = Path::new(candidate).extension().and_then(|e| e.to_str()).unwrap_or("");
        if !CONFIG_EXTENSIONS.contains(&extension.to_ascii_lowercase().as_str()) {
            continue;
        }
        let path = match cwd {
            Some(dir) => dir.join(candidate),
            None => PathBuf::from(candidate),
        };
        if let Some(digest) = digest(&path) {
            files.insert(candidate.to_string(), digest);
        }
    }
    files
}

fn digest(path: &Path) -> Option<FileDigest> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE_HASHED {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    let is_json = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let json = (is_json && bytes.len() as u64 <= MAX_JSON_KEPT)
        .then(|| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .flatten();
    Some(FileDigest {
        size: bytes.len() as u64,
        xxh3: format!("{:016x}", accutrace_formats::stats::content_hash(&bytes)),
        json,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_lines_of_cann_and_python_metadata() {
        assert_eq!(version_line("Version=8.0.RC1\nother=1").as_deref(), Some("8.0.RC1"));
        assert_eq!(version_line("package_name=x\nversion=7.0.0").as_deref(), Some("7.0.0"));
        assert_eq!(
            version_line("Metadata-Version: 2.1\nName: torch\nVersion: 2.1.0+cpu").as_deref(),
            Some("2.1.0+cpu")
        );
        assert_eq!(version_line("nothing here"), None);
    }

    #[test]
    fn versions_and_files_are_found_where_a_real_install_keeps_them() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // CANN toolkit with its version in a component directory.
        std::fs::create_dir_all(root.join("cann/runtime")).unwrap();
        std::fs::write(root.join("cann/runtime/version.info"), "Version=8.0.RC2\n").unwrap();
        // A site-packages with torch (dist-info), torch_npu (version.py only) and a look-alike name.
        let sp = root.join("venv/lib/python3.10/site-packages");
        std::fs::create_dir_all(sp.join("torch-2.1.0.dist-info")).unwrap();
        std::fs::write(sp.join("torch-2.1.0.dist-info/METADATA"), "Name: torch\nVersion: 2.1.0\n").unwrap();
        std::fs::create_dir_all(sp.join("torchvision-0.16.0.dist-info")).unwrap();
        std::fs::write(sp.join("torchvision-0.16.0.dist-info/METADATA"), "Version: 0.16.0\n").unwrap();
        std::fs::create_dir_all(sp.join("torch_npu")).unwrap();
        std::fs::write(sp.join("torch_npu/version.py"), "__version__ = '2.1.0.post3'\n").unwrap();
        // The command line's files.
        std::fs::write(root.join("train.py"), "print(1)\n").unwrap();
        std::fs::write(root.join("hp.json"), r#"{"lr": 0.1}"#).unwrap();
        let home = root.join("cann").display().to_string();
        let venv = root.join("venv").display().to_string();
        let env = move |k: &str| match k {
            "ASCEND_TOOLKIT_HOME" => Some(home.clone()),
            "VIRTUAL_ENV" => Some(venv.clone()),
            _ => None,
        };
        let command: Vec<String> = ["python", "train.py", "--config=hp.json", "--lr", "0.1", "missing.yaml"]
            .map(String::from)
            .to_vec();
        let found = collect(&[], &env);
        assert_eq!(found.versions["cann"].version, "8.0.RC2");
        assert!(found.versions["cann"].source.ends_with("runtime/version.info"));
        assert_eq!(found.versions["torch"].version, "2.1.0");
        assert_eq!(found.versions["torch_npu"].version, "2.1.0.post3");
        assert!(!found.versions.contains_key("numpy"));
        let files = command_files(&command, Some(root));
        assert_eq!(files.keys().collect::<Vec<_>>(), ["hp.json", "train.py"]);
        assert_eq!(files["hp.json"].json, Some(serde_json::json!({"lr": 0.1})));
        assert_eq!((files["train.py"].size, files["train.py"].json.as_ref()), (9, None));
    }

    #[test]
    fn python_from_maps() {
        let maps = "7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libpython3.10.so.1.0\n\
                    7f02-7f03 r-xp 0 08:01 2 /opt/venv/lib/python3.10/site-packages/torch/lib/libc10.so\n";
        assert_eq!(python_version(maps).unwrap().version, "3.10");
        assert_eq!(normalize("Megatron-Core"), "megatron_core");
    }
}
