//! `analyzer`: see `analyzer --help`, README.md and docs/CLI.md.

use clap::Parser;

fn main() {
    let cli = analyzer::cli::Cli::parse();
    let code = match analyzer::commands::run(cli.command) {
        Ok(outcome) => outcome.exit_code(),
        Err(err) => {
            // `{:#}` prints the whole context chain on one line: "cannot open runs/x: No such file ...".
            eprintln!("error: {err:#}");
            2
        }
    };
    std::process::exit(code);
}
