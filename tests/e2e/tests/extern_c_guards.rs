//! The house rule of docs/DEVELOPING.md: every `extern "C"` function of `collector/src` catches panics (one
//! unwinding out of it aborts the process, the training job with it). Its body must begin with the guard,
//! `crate::entry_guard`'s `guarded(` or a `catch_unwind(`, so that nothing runs outside it. Naked functions
//! (`dlsym`'s assembly) hold no Rust code and are exempt. Test modules and comments do not count.

use std::path::{Path, PathBuf};

/// How a guarded body begins.
const GUARDS: [&str; 4] = ["guarded(", "catch_unwind(", "let _ = catch_unwind(", "match catch_unwind("];

/// The code a file runs outside its tests, without comments.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines().map(|l| l.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

/// The index just past the bracket that closes the one at `open`.
fn closing(text: &str, open: usize, (o, c): (char, char)) -> usize {
    let mut depth = 0;
    for (i, ch) in text[open..].char_indices() {
        if ch == o {
            depth += 1;
        } else if ch == c {
            depth -= 1;
            if depth == 0 {
                return open + i + 1;
            }
        }
    }
    text.len()
}

/// The `extern "C"` functions of a file's code (not function pointer types) whose body does not begin with
/// a guard.
fn unguarded(text: &str) -> Vec<String> {
    let text = code(text);
    let mut found = Vec::new();
    for (at, key) in text.match_indices("extern \"C\" fn ") {
        let rest = &text[at + key.len()..];
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            continue; // a type: `extern "C" fn(...)`
        }
        let params = at + key.len() + name.len();
        if !text[params..].starts_with('(') {
            continue;
        }
        let after_params = closing(&text, params, ('(', ')'));
        let Some(open) = text[after_params..].find(['{', ';']).map(|i| after_params + i) else { continue };
        if text[open..].starts_with(';') {
            continue; // a declaration
        }
        let attributes_from = text[..at].rfind("\n\n").unwrap_or(0);
        if text[attributes_from..at].contains("naked") {
            continue;
        }
        let body = &text[open + 1..closing(&text, open, ('{', '}')) - 1];
        let body = body.trim_start();
        if !GUARDS.iter().any(|g| body.starts_with(g)) {
            found.push(name);
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_extern_c_function_of_the_collector_catches_panics() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../collector/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut found = Vec::new();
    let mut functions = 0;
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        functions += code(&text).matches("extern \"C\" fn ").count();
        let file = path.strip_prefix(&src).unwrap_or(path).display().to_string();
        found.extend(unguarded(&text).into_iter().map(|f| format!("collector/src/{file}: {f}")));
    }
    assert!(functions > 20, "the checker found only {functions} extern \"C\" mentions in {}", src.display());
    assert!(
        found.is_empty(),
        "extern \"C\" functions whose body does not begin with crate::entry_guard::guarded or catch_unwind \
         (docs/DEVELOPING.md):\n{}",
        found.join("\n")
    );
}

/// The checker finds what it is for, and lets through what it should.
#[test]
fn the_checker_sees_an_unguarded_function() {
    let text = r#"
type Callback = unsafe extern "C" fn(x: i32) -> i32;
extern "C" {
    fn declared(x: i32) -> i32;
}

/// Forwards.
#[no_mangle]
pub unsafe extern "C" fn forwards(cb: Option<unsafe extern "C" fn(i32) -> i32>) -> i32 {
    let code = real(); // a comment: guarded(
    guarded("forwards", -1, |_| code)
}

pub extern "C" fn wrapped(x: i32) -> i32 {
    guarded("wrapped", -1, |_| { let f: extern "C" fn(i32) = g; x })
}

extern "C" fn caught() {
    let _ = catch_unwind(|| {});
}

#[unsafe(naked)]
pub unsafe extern "C" fn dlsym() {
    core::arch::naked_asm!("ret")
}

#[cfg(test)]
mod tests {
    extern "C" fn in_a_test() { panic!() }
}
"#;
    assert_eq!(unguarded(text), ["forwards"]);
}
