//! The house rule of docs/DEVELOPING.md: no two files of `analyzer/src` (library and binary) or
//! `collector/src` import each other. A file imports another when it names it through `crate::`, `super::`
//! or a child module it declares (`mod x;` ... `x::`); paths are resolved to the deepest file that exists.
//! Test modules (`#[cfg(test)] mod ...` to the end of the file) and comments do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path (`["compare", "msprobe_table"]`) for each file of the tree rooted at `root`.
fn modules(root: &Path, dir: &Path, skip: &[&str], out: &mut BTreeMap<Vec<String>, PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        if skip.contains(&rel.as_str()) {
            continue;
        }
        if path.is_dir() {
            modules(root, &path, skip, out);
        } else if rel.ends_with(".rs") {
            let mut parts: Vec<String> = rel.trim_end_matches(".rs").split('/').map(str::to_string).collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                parts.pop();
            }
            out.insert(parts, path);
        }
    }
}

/// The code a file runs outside its tests, without comments.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines().map(|l| l.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths a file names from `start` (just after `crate::` or `super::`): `a::b::c`, or each item of a
/// `{a, b::c}` group, as segments.
fn paths_at(text: &str, start: usize) -> Vec<Vec<String>> {
    let rest = &text[start..];
    let head: String = rest.chars().take_while(|&c| is_ident(c) || c == ':').collect();
    let mut prefix: Vec<String> = head.split("::").filter(|s| !s.is_empty()).map(str::to_string).collect();
    let after = &rest[head.len()..];
    if !after.starts_with('{') {
        return vec![prefix];
    }
    let (mut depth, mut end) = (0, after.len());
    for (i, c) in after.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    end = i;
                    break;
                }
            }
            _ => {}
        }
    }
    let inner = &after[1..end];
    let mut items = Vec::new();
    let (mut depth, mut item) = (0, String::new());
    for c in inner.chars().chain([',']) {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                let first: String = item.trim().chars().take_while(|&c| is_ident(c) || c == ':').collect();
                let mut path = prefix.clone();
                path.extend(first.split("::").filter(|s| !s.is_empty()).map(str::to_string));
                items.push(path);
                item.clear();
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    prefix.clear();
    items
}

/// The deepest module of `files` that `path` names, seen from module `from`.
fn resolve(
    files: &BTreeMap<Vec<String>, PathBuf>,
    from: &[String],
    path: &[String],
    relative: bool,
) -> Option<Vec<String>> {
    let mut base: Vec<String> = if relative { from.to_vec() } else { Vec::new() };
    let mut segs = path;
    while let Some(("super", rest)) = segs.split_first().map(|(h, r)| (h.as_str(), r)) {
        base.pop();
        segs = rest;
    }
    let mut best = files.contains_key(&base).then(|| base.clone());
    for seg in segs {
        base.push(seg.clone());
        if !files.contains_key(&base) {
            break;
        }
        best = Some(base.clone());
    }
    best
}

fn circles(root: &Path, skip: &[&str]) -> Vec<String> {
    let mut files = BTreeMap::new();
    modules(root, root, skip, &mut files);
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, path) in &files {
        let text = code(path);
        let mut targets = BTreeSet::new();
        for (keyword, relative) in [("crate::", false), ("super::", true)] {
            for (at, _) in text.match_indices(keyword) {
                if text[..at].chars().next_back().is_some_and(|c| is_ident(c) || c == ':' || c == '$') {
                    continue;
                }
                let start = if relative { at } else { at + keyword.len() };
                // `super::` paths keep their leading `super` segments for `resolve`.
                for path in paths_at(&text, start) {
                    if let Some(t) = resolve(&files, module, &path, relative) {
                        targets.insert(t);
                    }
                }
            }
        }
        // Child modules named without a prefix: `mod x;` then `x::`.
        for line in text.lines().map(str::trim) {
            let name = line.trim_start_matches("pub ").trim_start_matches("pub(crate) ");
            let Some(child) = name.strip_prefix("mod ").and_then(|n| n.strip_suffix(';')) else { continue };
            let mut child_path = module.clone();
            child_path.push(child.to_string());
            let named = text
                .match_indices(&format!("{child}::"))
                .any(|(at, _)| !text[..at].chars().next_back().is_some_and(|c| is_ident(c) || c == ':'));
            if named && files.contains_key(&child_path) {
                targets.insert(child_path);
            }
        }
        targets.remove(module);
        edges.insert(module.clone(), targets);
    }
    let mut found = Vec::new();
    for (a, targets) in &edges {
        for b in targets {
            if a < b && edges.get(b).is_some_and(|t| t.contains(a)) {
                found.push(format!("{} <-> {}", files[a].display(), files[b].display()));
            }
        }
    }
    found
}

#[test]
fn no_two_files_import_each_other() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut found = Vec::new();
    found.extend(circles(&repo.join("analyzer/src"), &["bin"]));
    found.extend(circles(&repo.join("analyzer/src/bin/analyzer"), &[]));
    found.extend(circles(&repo.join("collector/src"), &[]));
    assert!(found.is_empty(), "import circles (docs/DEVELOPING.md):\n{}", found.join("\n"));
}

/// The checker finds what it is for: the circle the collector had before #13.
#[test]
fn the_checker_sees_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "pub mod activate;\npub mod callback;\n").unwrap();
    std::fs::write(src.join("activate.rs"), "use crate::callback::dump;\npub fn current() {}\n").unwrap();
    std::fs::write(src.join("callback.rs"), "pub fn dump() { crate::activate::current() }\n").unwrap();
    let found = circles(src, &[]);
    assert_eq!(found.len(), 1, "{found:?}");
    std::fs::write(src.join("callback.rs"), "pub fn dump() {}\n// crate::activate::current()\n").unwrap();
    assert!(circles(src, &[]).is_empty(), "a comment is no import");
}
