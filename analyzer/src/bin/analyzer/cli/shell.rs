//! `analyzer completions`'s argument (`commands/shell.rs` prints completions and the man page).

use clap::Args;

/// `analyzer completions SHELL`.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}
