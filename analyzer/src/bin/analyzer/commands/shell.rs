//! `analyzer completions SHELL` and `analyzer manpage`: generated from the clap definition, so they cannot
//! drift from the command line.

use analyzer::outcome::Outcome;
use analyzer::report;
use anyhow::Result;
use std::io::Write;

pub fn completions(shell: clap_complete::Shell) -> Result<Outcome> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut crate::cli::command(), "analyzer", &mut out);
    report::reader_may_leave(std::io::stdout().lock().write_all(&out).map_err(Into::into))?;
    Ok(Outcome::Pass)
}

pub fn manpage() -> Result<Outcome> {
    let mut out = Vec::new();
    clap_mangen::Man::new(crate::cli::command()).render(&mut out)?;
    report::reader_may_leave(std::io::stdout().lock().write_all(&out).map_err(Into::into))?;
    Ok(Outcome::Pass)
}
