//! What a command found, which the binary turns into its exit status.

use crate::problems::InputProblems;

/// 0 when nothing wrong was found, 1 when the command found what it looks for, 2 when the input kept it
/// from seeing everything (the report was still written) or for errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing wrong found.
    Pass,
    /// The command found what it looks for: mismatches, differences, overflows.
    Findings,
    /// The report was written, but input problems lead it ([`InputProblems`]): the answer does not cover
    /// everything, whatever it found.
    InputErrors,
}

impl Outcome {
    /// The process exit status for this outcome.
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Pass => 0,
            Outcome::Findings => 1,
            Outcome::InputErrors => 2,
        }
    }

    /// This outcome, or [`Outcome::InputErrors`] when `problems` fail the run (`allow_incomplete` accepts
    /// an incomplete source, not an unreadable tensor).
    pub fn or_input_errors(self, problems: &InputProblems, allow_incomplete: bool) -> Outcome {
        if problems.fail_the_run(allow_incomplete) {
            Outcome::InputErrors
        } else {
            self
        }
    }
}
