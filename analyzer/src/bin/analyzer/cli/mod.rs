//! The command line: a user-facing contract, documented in docs/CLI.md and tested in analyzer/tests/cli*.rs.
//! Only the binary sees these types: each command turns them into the plain options of its engine.
//!
//! The modules, one job each:
//! - `root`: `analyzer` itself ([`Cli`], [`command`], [`version_line`]): the global `--color`, every
//!   subcommand with its help and examples ([`Command`]).
//! - `shared`: the options several commands share: which ops, steps and ranks (`--step`, `--rank`, `--op`),
//!   `--allow-incomplete`, a report's form and destination (`--format`, `-o`).
//! - one module per subcommand, as in `commands/`: its arguments and the option values only it takes
//!   (`compare`'s report forms and metric families, `record`'s modes, dump levels and tensors);
//!   `shell` has `analyzer completions`'s.

mod check;
mod compare;
mod convert;
mod diff;
mod inspect;
mod merge;
mod overflow;
mod ranks;
mod record;
mod report;
mod root;
mod scan;
mod shared;
mod shell;
mod watch;

pub use check::CheckArgs;
pub use compare::CompareArgs;
pub use convert::ConvertArgs;
pub use diff::DiffArgs;
pub use inspect::InspectArgs;
pub use merge::MergeArgs;
pub use overflow::OverflowArgs;
pub use ranks::RanksArgs;
pub use record::{RecordArgs, RecordDumpLevel, RecordMode};
pub use report::ReportArgs;
pub use root::{command, version_line, Cli, Command};
pub use scan::ScanArgs;
pub use shared::Format;
pub use watch::WatchArgs;
