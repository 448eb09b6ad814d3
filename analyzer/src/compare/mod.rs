//! The compare engine (`analyzer compare TARGET BENCH`): op by op against a benchmark, and the first op that
//! fails while its inputs pass (the culprit). [`report::compare`](crate::report::compare) prints it.
//!
//! Per tensor pair: msprobe's six metrics and "Accuracy Reached or Not", msaccucmp's metrics, the
//! statistics of both sides, and msprobe's newer Result column. A tensor pair that repeats an earlier pair
//! (each side recorded the tensor twice: an op's output, then the next op's input) with the same stored bytes
//! on each side takes that pair's metrics instead of being read again. accutrace's own verdict (`Status`) is
//! precision only: Accuracy Reached = No, inf/NaN positions that differ, a shape mismatch, or a user
//! threshold. msprobe's Result also flags a dtype change, which every mixed-precision run has, so it is
//! reported but does not make an op fail.
//!
//! The modules, one job each:
//! - `comparison`: what the engine takes ([`CompareOptions`]) and gives ([`Comparison`], [`FailingOp`]), and
//!   what a comparison says of itself: an op's tag, the pairs nothing was measured for, its outcome.
//! - `run`: the engine, [`compare`]: match, measure every pair in parallel, hash what the culprit search
//!   needs, and find the culprit; [`families`], the metric families it computes.
//! - `pair`: one tensor pair read (both sides at once where it pays, into per-thread buffers), measured and
//!   judged.
//! - `in_waves`: a large pair whose metrics fold chunk by chunk, read and measured a wave at a time.
//! - `culprit`: the failing ops in execution order, and the first one the comparison clears of inherited
//!   blame (inputs tied to their producers by content hash).
//! - `views`: what the reports ask of a comparison beyond its rows: the first diverging API call
//!   ([`DivergingApi`]), one op's rows ([`rows_of_op`]), fused kernels ([`fused_kernels`]).
//! - [`msprobe_table`]: msprobe's own table, row for row, made a call at a time, and its `Result` verdicts.
//! - `row`: one compared pair ([`CompareRow`], [`Measured`]).
//! - `fold`: two long captures compared a window of the same steps of each at a time (#18), the windows'
//!   comparisons folded into what the whole runs' says.

mod comparison;
mod culprit;
pub(crate) mod fold;
mod in_waves;
pub mod msprobe_table;
mod pair;
mod row;
mod run;
mod views;

pub use comparison::{CompareOptions, Comparison, FailingOp};
pub use msprobe_table::{MsprobeRow, TableRow};
pub use row::{CompareRow, Measured};
pub(crate) use run::compare_part;
pub use run::{compare, families};
pub use views::{fused_kernels, rows_of_op, DivergingApi};

#[cfg(test)]
mod test_data;
