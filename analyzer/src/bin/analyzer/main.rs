//! `analyzer`: see `analyzer --help`, README.md and docs/CLI.md.
//!
//! The binary is the command line alone: [`cli`] (clap) and [`commands`], which build each engine's plain
//! options and call the `analyzer` library.

mod cli;
mod commands;

use clap::FromArgMatches;

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let parsed = cli::command().try_get_matches_from(&args).and_then(|m| cli::Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(err) => usage_error(err, &args),
    };
    let mut code = match commands::run(cli.command, cli.colour.into()) {
        Ok(outcome) => outcome.exit_code(),
        // A reader that left early is handled where each report is written; one that escapes here means
        // the outcome is unknown, which is not an all-clear.
        Err(err) if analyzer::report::reader_left(&err) => 2,
        Err(err) => {
            // `{:#}` prints the whole context chain on one line: "cannot open runs/x: No such file ...".
            eprintln!("error: {err:#}");
            2
        }
    };
    let (late, first) = analyzer::late_reads::noted();
    if late > 0 {
        // Reads that failed after the input was checked: the answer printed above missed them.
        eprintln!(
            "error: {late} read(s) failed after the input was checked, so the answer above is incomplete:"
        );
        for what in first {
            eprintln!("  {what}");
        }
        code = 2;
    }
    std::process::exit(code);
}

/// Prints clap's message (help and version included) and exits; `record` without `--` gets a hint, because
/// the training command's own options otherwise read as record's.
fn usage_error(err: clap::Error, args: &[std::ffi::OsString]) -> ! {
    use clap::error::ErrorKind;
    let recording = args.iter().skip(1).take_while(|a| *a != "--").any(|a| a == "record");
    let no_separator = !args.iter().any(|a| a == "--");
    let confused = matches!(
        err.kind(),
        ErrorKind::UnknownArgument | ErrorKind::MissingRequiredArgument | ErrorKind::InvalidValue
    );
    if recording && no_separator && confused {
        let _ = err.print();
        eprintln!(
            "\nhint: put the training command after `--`, so that its own options stay its own:\n  \
             analyzer record -o runs/npu -- python train.py --lr 0.1"
        );
        std::process::exit(2);
    }
    err.exit()
}
