//! `analyzer`: see `analyzer --help`, README.md and docs/CLI.md.
//!
//! The binary is the command line alone: [`cli`] (clap) and [`commands`], which build each engine's plain
//! options and call the `analyzer` library.

mod cli;
mod commands;

use clap::Parser;

fn main() {
    let cli = cli::Cli::parse();
    let code = match commands::run(cli.command) {
        Ok(outcome) => outcome.exit_code(),
        // `analyzer ... | head`: the reader left; that is not an error worth a message.
        Err(err) if is_broken_pipe(&err) => 0,
        Err(err) => {
            // `{:#}` prints the whole context chain on one line: "cannot open runs/x: No such file ...".
            eprintln!("error: {err:#}");
            2
        }
    };
    std::process::exit(code);
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
