//! Steps from `ACCUTRACE_STEP_MARKER` marks. The collector writes a [`StepMark`] for every op whose type
//! matches the marker (the op that ends a step, e.g. the optimizer's apply op), naming that op by its
//! dump timestamp and dump number. Writer threads record files in the order they finish them, not in the
//! order the device ran them, so the step the collector writes into each op is only its count at the time;
//! the exact steps follow from the marks and the execution order, which is what this module computes.
//!
//! A step ends after a run of consecutive marker ops in execution order (an optimizer applies one op per
//! parameter): the ops of the run belong to the step they end, the next op starts the next step. Execution
//! order is [`OpInfo::launch`](super::record::OpInfo::launch) (dump timestamp, dump number, ...), the order
//! the runtime dumped the ops in.

use super::record::{StepMark, StepSource};
use crate::dump::Launch;
use std::collections::HashSet;

/// The step of each op of a stream, given as its launch ([`OpInfo::launch`](super::record::OpInfo::launch)),
/// in the order given: a launch is all a mark names an op by, so a reader need not keep the ops' records.
/// `first_step` is the step of the first op in execution order (0 for a complete stream; a ring that
/// deleted old segments starts later).
pub fn marker_steps(ops: &[Launch], marks: &[StepMark], first_step: u64) -> Vec<u64> {
    let markers: HashSet<(u64, Option<u64>)> = marks
        .iter()
        .filter(|m| m.source == StepSource::Marker)
        .map(|m| (m.op_timestamp_us, m.op_dump_number))
        .collect();
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by_key(|&i| (ops[i], i));
    let mut steps = vec![0; ops.len()];
    let (mut step, mut in_run) = (first_step, false);
    for i in order {
        let is_marker = markers.contains(&(ops[i].timestamp_us, ops[i].dump_number));
        if !is_marker && in_run {
            step += 1;
        }
        in_run = is_marker;
        steps[i] = step;
    }
    steps
}

/// The step of the first op of a stream whose oldest segments may have been deleted: 0 when the stream
/// starts at its first segment, else the step the collector counted for the earliest mark (best effort:
/// the marks before it are gone).
pub fn first_step(starts_at_first_segment: bool, marks: &[StepMark]) -> u64 {
    if starts_at_first_segment {
        return 0;
    }
    marks
        .iter()
        .filter(|m| m.source == StepSource::Marker)
        .min_by_key(|m| (m.op_timestamp_us, m.op_dump_number))
        .map_or(0, |m| m.step)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::record::OpInfo;

    fn op(ts: u64, op_type: &str) -> OpInfo {
        OpInfo { op_type: op_type.into(), timestamp_us: ts, dump_number: Some(ts), ..OpInfo::default() }
    }

    fn mark(o: &OpInfo, counted: u64) -> StepMark {
        StepMark {
            source: StepSource::Marker,
            step: counted,
            op_timestamp_us: o.timestamp_us,
            op_dump_number: o.dump_number,
            op_type: o.op_type.clone(),
            ..StepMark::default()
        }
    }

    #[test]
    fn runs_of_marker_ops_end_steps_whatever_order_they_were_recorded_in() {
        // Three steps: two applies, then a skipped step with only the scale update, then two applies.
        let types =
            ["Mul", "Apply", "Apply", "Scale", "Mul", "Scale", "Mul", "Apply", "Apply", "Scale", "Add"];
        let ops: Vec<OpInfo> = types.iter().enumerate().map(|(i, t)| op(100 + i as u64, t)).collect();
        let marks: Vec<StepMark> =
            ops.iter().filter(|o| o.op_type != "Mul" && o.op_type != "Add").map(|o| mark(o, 99)).collect();
        // Recorded out of order, as two writer threads may.
        let recorded: Vec<&OpInfo> = [1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 10].iter().map(|&i| &ops[i]).collect();
        let launches: Vec<Launch> = recorded.iter().map(|o| o.launch()).collect();
        let steps = marker_steps(&launches, &marks, 0);
        let by_time: Vec<u64> = {
            let mut v: Vec<(u64, u64)> =
                recorded.iter().zip(&steps).map(|(o, s)| (o.timestamp_us, *s)).collect();
            v.sort();
            v.into_iter().map(|(_, s)| s).collect()
        };
        assert_eq!(by_time, [0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 3]);
    }

    #[test]
    fn first_step_of_a_ring_comes_from_the_earliest_mark() {
        let ops = [op(5, "Apply"), op(9, "Apply")];
        let marks = [mark(&ops[1], 8), mark(&ops[0], 7)];
        assert_eq!(first_step(true, &marks), 0);
        assert_eq!(first_step(false, &marks), 7);
        assert_eq!(first_step(false, &[]), 0);
    }
}
