//! `analyzer`: see `analyzer --help`, README.md and docs/CLI.md.

use clap::Parser;

fn main() {
    let cli = analyzer::cli::Cli::parse();
    let code = match analyzer::commands::run(cli.command) {
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
