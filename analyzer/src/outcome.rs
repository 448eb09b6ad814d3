//! What a command found, which the binary turns into its exit status.

/// 0 when nothing wrong was found, 1 when the command found what it looks for; errors are 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing wrong found.
    Pass,
    /// The command found what it looks for: mismatches, differences, overflows.
    Findings,
}

impl Outcome {
    /// The process exit status for this outcome.
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Pass => 0,
            Outcome::Findings => 1,
        }
    }
}
