//! The reports, one module per command, and what they share: the output formats, where a report goes,
//! colour, JSON's envelope, a reader that leaves early, and how numbers and sizes read.

use anyhow::{Context, Result};
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::path::Path;

pub mod check;
pub mod compare;
pub mod convert;
pub mod diff;
pub mod html;
pub mod inspect;
pub mod overflow;
pub mod ranks;
pub mod record;
pub mod scan;
pub mod watch;

/// The output formats a report can take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    /// A human summary.
    #[default]
    Table,
    /// CSV.
    Csv,
    /// JSON.
    Json,
}

/// The version of the JSON reports' layout, in every report as `schema_version`: bumped when a field
/// changes meaning or goes away (new fields may appear without a bump).
pub const JSON_SCHEMA_VERSION: u32 = 1;

/// Writes `body` as pretty JSON, its fields preceded by `schema_version` and `command`.
pub fn write_json<T: Serialize>(out: &mut impl Write, command: &str, body: &T) -> Result<()> {
    #[derive(Serialize)]
    struct Envelope<'a, T> {
        schema_version: u32,
        command: &'a str,
        #[serde(flatten)]
        body: &'a T,
    }
    serde_json::to_writer_pretty(
        &mut *out,
        &Envelope { schema_version: JSON_SCHEMA_VERSION, command, body },
    )?;
    writeln!(out)?;
    Ok(())
}

/// When table reports use colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Colour {
    /// When the report goes to a terminal and `NO_COLOR` is unset or empty (no-color.org).
    #[default]
    Auto,
    /// Always, whatever `NO_COLOR` says (the user asked).
    Always,
    /// Never.
    Never,
}

impl Colour {
    /// Whether to paint a report going to a terminal (`terminal`), given the `NO_COLOR` variable.
    pub fn decide(self, terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
        match self {
            Colour::Always => true,
            Colour::Never => false,
            Colour::Auto => terminal && no_color.is_none_or(|v| v.is_empty()),
        }
    }

    /// [`Colour::decide`] for standard output and this process's `NO_COLOR`.
    pub fn for_stdout(self) -> bool {
        self.decide(std::io::stdout().is_terminal(), std::env::var_os("NO_COLOR").as_deref())
    }

    /// [`Colour::decide`] for standard error and this process's `NO_COLOR`.
    pub fn for_stderr(self) -> bool {
        self.decide(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").as_deref())
    }
}

/// Where a report goes and whether it may be coloured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Destination<'a> {
    /// A file (`-o`), or standard output when `None`.
    pub output: Option<&'a Path>,
    /// Colour for table reports on standard output (never in files).
    pub colour: Colour,
}

impl Destination<'_> {
    /// Whether a table report to this destination is painted.
    pub fn paints(&self) -> bool {
        self.output.is_none() && self.colour.for_stdout()
    }
}

/// `text` in the ANSI colour `code` (`1;31` bold red) when `on`.
pub fn paint(text: &str, code: &str, on: bool) -> String {
    if on {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

/// A report the reader stopped reading (`analyzer ... | head`) is not an error: what the command found is
/// still its exit status. Any other failure to write stays an error.
pub fn reader_may_leave(written: Result<()>) -> Result<()> {
    match written {
        Err(err) if reader_left(&err) => Ok(()),
        other => other,
    }
}

/// Whether `err` is a write to a reader that closed its end (EPIPE), wherever it sits in the chain: an
/// `io::Error`, or one that the CSV or JSON writer wrapped. Neither `csv::Error` nor `serde_json::Error`
/// gives its `io::Error` as `source()`, so each is asked for it.
pub fn reader_left(err: &anyhow::Error) -> bool {
    use std::io::ErrorKind::BrokenPipe;
    err.chain().any(|cause| {
        if let Some(e) = cause.downcast_ref::<std::io::Error>() {
            return e.kind() == BrokenPipe;
        }
        if let Some(e) = cause.downcast_ref::<csv::Error>() {
            return matches!(e.kind(), csv::ErrorKind::Io(io) if io.kind() == BrokenPipe);
        }
        if let Some(e) = cause.downcast_ref::<serde_json::Error>() {
            return e.io_error_kind() == Some(BrokenPipe);
        }
        false
    })
}

/// Puts the input problems where the reader looks first: at the top of a table, and on standard error when
/// the report is CSV or JSON (JSON reports also carry them as `input_problems`) or goes to a file.
pub fn lead(
    problems: &crate::problems::InputProblems,
    table: bool,
    to_file: bool,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    if table {
        problems.lead(out)?;
    }
    if !table || to_file {
        problems.lead(&mut std::io::stderr().lock())?;
    }
    Ok(())
}

/// Puts the warnings (what the sources said about themselves: steps they inferred, files they skipped) where
/// [`lead`] puts the input problems, one `WARNING:` line each; they change no exit status. JSON reports also
/// carry them as `warnings`.
pub fn lead_warnings(
    warnings: &[String],
    table: bool,
    to: &Destination<'_>,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let write = |out: &mut dyn std::io::Write, colour: bool| -> std::io::Result<()> {
        for w in warnings {
            writeln!(out, "{}: {w}", paint("WARNING", "1;33", colour))?;
        }
        Ok(())
    };
    if table {
        write(out, to.paints())?;
    }
    if !table || to.output.is_some() {
        write(&mut std::io::stderr().lock(), to.colour.for_stderr())?;
    }
    Ok(())
}

/// A number in at most 11 characters: plain when readable, scientific otherwise.
pub fn fmt_num(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let a = x.abs();
    if a == 0.0 || (1e-3..1e6).contains(&a) {
        format!("{x:.6}").trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{x:.4e}")
    }
}

/// A byte count in binary units: `512 B`, `3.0 MiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `"s"` for counts other than one.
pub fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Where a report goes: a file named by `-o`, or standard output; buffered either way (each report
/// flushes at its end, so a write error is reported, not lost in a drop).
pub enum Output {
    /// `-o FILE`.
    File(std::io::BufWriter<std::fs::File>),
    /// Standard output.
    Stdout(std::io::BufWriter<std::io::Stdout>),
}

impl Output {
    /// Creates `path`, or takes standard output when `None`.
    pub fn open(path: Option<&Path>) -> Result<Output> {
        Ok(match path {
            Some(path) => Output::File(std::io::BufWriter::new(
                std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
            )),
            None => Output::Stdout(std::io::BufWriter::new(std::io::stdout())),
        })
    }
}

impl std::io::Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Output::File(f) => f.write(buf),
            Output::Stdout(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::File(f) => f.flush(),
            Output::Stdout(s) => s.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn numbers_stay_short() {
        assert_eq!(super::fmt_num(1.5), "1.5");
        assert_eq!(super::fmt_num(65504.0), "65504");
        assert_eq!(super::fmt_num(1e-7), "1.0000e-7");
        assert_eq!(super::fmt_num(0.0), "0");
        assert_eq!(super::fmt_num(f64::NAN), "nan");
    }

    #[test]
    fn colour_follows_the_terminal_and_no_color() {
        use super::Colour;
        let set = Some(std::ffi::OsStr::new("1"));
        let empty = Some(std::ffi::OsStr::new(""));
        assert!(Colour::Auto.decide(true, None));
        assert!(Colour::Auto.decide(true, empty), "an empty NO_COLOR does not count");
        assert!(!Colour::Auto.decide(true, set));
        assert!(!Colour::Auto.decide(false, None));
        assert!(Colour::Always.decide(false, set), "--color always overrides NO_COLOR");
        assert!(!Colour::Never.decide(true, None));
    }

    #[test]
    fn a_reader_that_left_is_not_an_error_other_failures_are() {
        let pipe = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert!(super::reader_may_leave(Err(anyhow::Error::from(pipe).context("writing"))).is_ok());
        let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        assert!(super::reader_may_leave(Err(full.into())).is_err());
    }

    /// A writer whose reader is gone (EPIPE), or whose disk is full.
    struct Fails(std::io::ErrorKind);

    impl std::io::Write for Fails {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(self.0.into())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Err(self.0.into())
        }
    }

    /// The CSV and JSON writers wrap the io::Error in their own, which does not give it as `source()`.
    #[test]
    fn a_reader_that_left_a_csv_or_json_report_is_not_an_error_either() {
        use anyhow::Context;
        use std::io::ErrorKind::{BrokenPipe, StorageFull};
        let csv = |kind| -> anyhow::Result<()> {
            // Past the CSV writer's own buffer, so that the error is the CSV writer's.
            let mut w = csv::Writer::from_writer(Fails(kind));
            for _ in 0..10_000 {
                w.write_record(["a", "b"])?;
            }
            w.flush()?;
            Ok(())
        };
        let json = |kind| super::write_json(&mut Fails(kind), "compare", &[1, 2, 3]);
        assert!(csv(BrokenPipe).is_err() && json(BrokenPipe).is_err(), "the writers do fail");
        assert!(super::reader_may_leave(csv(BrokenPipe)).is_ok());
        assert!(super::reader_may_leave(json(BrokenPipe)).is_ok());
        assert!(super::reader_may_leave(json(BrokenPipe).context("writing the report")).is_ok());
        assert!(super::reader_may_leave(csv(StorageFull)).is_err());
        assert!(super::reader_may_leave(json(StorageFull)).is_err());
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(super::human_bytes(512), "512 B");
        assert_eq!(super::human_bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
