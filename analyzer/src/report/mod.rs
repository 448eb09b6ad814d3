//! The reports, one module per command, and what they share: the output formats, where a report goes,
//! and how numbers and sizes read.

pub mod compare;
pub mod convert;
pub mod diff;
pub mod inspect;
pub mod overflow;
pub mod record;

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

/// Where a report goes: a file named by `-o`, or standard output.
pub enum Output {
    File(std::io::BufWriter<std::fs::File>),
    Stdout(std::io::Stdout),
}

impl Output {
    pub fn open(path: Option<&std::path::Path>) -> anyhow::Result<Output> {
        use anyhow::Context;
        Ok(match path {
            Some(path) => Output::File(std::io::BufWriter::new(
                std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
            )),
            None => Output::Stdout(std::io::stdout()),
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
    fn sizes_read_well() {
        assert_eq!(super::human_bytes(512), "512 B");
        assert_eq!(super::human_bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
