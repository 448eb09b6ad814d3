//! Stamps the commit the analyzer is built from into `analyzer --version` (`ACCUTRACE_COMMIT`): from the
//! environment when the builder sets it (a release tarball has no git), else from git, else `unknown`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=ACCUTRACE_COMMIT");
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok().filter(|o| o.status.success())?;
        Some(String::from_utf8(out.stdout).ok()?.trim().to_string()).filter(|s| !s.is_empty())
    };
    // A new commit moves HEAD (or the branch it names) and appends to HEAD's reflog: watch both.
    for path in ["HEAD", "logs/HEAD"] {
        if let Some(file) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    let commit = std::env::var("ACCUTRACE_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=ACCUTRACE_COMMIT={commit}");
}
