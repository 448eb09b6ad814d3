//! Which runs a capture directory's streams are of. A job run again into the same `ACCUTRACE_DIR`
//! (relaunched, its workers restarted by torchrun, or another job) leaves streams of different runs side by
//! side, and no answer about "the run" holds for such a mix: the capture source reports it as an input
//! problem, so every command reading the capture leads with it (`ranks` too, which then leaves out its own
//! evidence of different runs rather than say it twice).

use crate::filter::rank_ranges;
use crate::index::StreamCommunicators;
use crate::problems::InputProblem;
use std::path::Path;

/// The input problem of a capture at `root` whose streams are of different runs (see
/// [`streams_of_different_runs`]), with what to do; `None` for a capture of one run, or one whose
/// communicators are not recorded (unknown, never "mixed" on a guess).
pub fn different_runs_problem(root: &Path, by_stream: &[StreamCommunicators]) -> Option<InputProblem> {
    streams_of_different_runs(by_stream).map(|mixed| {
        InputProblem::incomplete(format!(
            "{}: {mixed}; record each run into its own directory",
            root.display()
        ))
    })
}

/// Whether a capture directory holds streams of different runs (the job run again, or its workers
/// restarted, or another job run, into the same directory). Processes that made a communicator from the
/// same root info are of one run; one run has one process per rank, so a rank whose processes fall into
/// groups with no communicator in common proves that the groups are of different runs. Only root-info
/// communicators count, of any size: the manifest records one job size, the first writer's.
pub fn streams_of_different_runs(by_stream: &[StreamCommunicators]) -> Option<String> {
    // Stream positions whose communicators meet, with the communicators.
    let mut groups: Vec<(Vec<&str>, Vec<usize>)> = Vec::new();
    for (at, stream) in by_stream.iter().enumerate() {
        let made: Vec<&str> =
            stream.made.iter().filter(|c| c.comm.starts_with("root-")).map(|c| c.comm.as_str()).collect();
        if !made.is_empty() {
            join_run(&mut groups, made, at);
        }
    }
    let of = |at: &usize| &by_stream[*at];
    let ranks_of = |streams: &[usize]| {
        let mut ranks: Vec<u32> = streams.iter().map(|at| of(at).rank).collect();
        ranks.sort_unstable();
        ranks.dedup();
        ranks
    };
    let mut in_two: Vec<u32> = Vec::new();
    for (i, (_, streams)) in groups.iter().enumerate() {
        for rank in ranks_of(streams) {
            if groups[i + 1..].iter().any(|(_, other)| other.iter().any(|at| of(at).rank == rank)) {
                in_two.push(rank);
            }
        }
    }
    in_two.sort_unstable();
    in_two.dedup();
    if in_two.is_empty() {
        return None;
    }
    let each: Vec<String> = groups
        .iter()
        .map(|(comms, streams)| {
            format!(
                "{} streams of {} (the first {}) made HCCL communicator {}",
                streams.len(),
                rank_ranges(&ranks_of(streams)),
                of(&streams[0]).stream,
                comms.join(" and ")
            )
        })
        .collect();
    Some(format!(
        "the capture holds different runs: {}, and {} {} a process in more than one of these, where one run \
         has one process per rank",
        each.join(", "),
        rank_ranges(&in_two),
        if in_two.len() == 1 { "has" } else { "have" }
    ))
}

/// Puts `member` (a rank, or a stream) with the runs whose communicators meet `comms`, joining every such
/// run into one (a member in two groups ties them together), or starts a run of its own.
pub fn join_run<'a, T: Ord>(runs: &mut Vec<(Vec<&'a str>, Vec<T>)>, comms: Vec<&'a str>, member: T) {
    let (mut joined, mut ranks) = (comms, vec![member]);
    let mut i = 0;
    while i < runs.len() {
        if runs[i].0.iter().any(|c| joined.contains(c)) {
            let (comms, others) = runs.remove(i);
            for c in comms {
                if !joined.contains(&c) {
                    joined.push(c);
                }
            }
            ranks.extend(others);
        } else {
            i += 1;
        }
    }
    ranks.sort_unstable();
    runs.push((joined, ranks));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::MadeCommunicator;

    /// Streams, each `(rank, communicators made, each of 2 members)`, in stream order.
    fn streams(made: &[(u32, &[&str])]) -> Vec<StreamCommunicators> {
        made.iter()
            .enumerate()
            .map(|(at, (rank, comms))| StreamCommunicators {
                stream: format!("stream-{at:03}-rank{rank}"),
                rank: *rank,
                made: comms
                    .iter()
                    .map(|c| MadeCommunicator { comm: c.to_string(), comm_rank: rank % 2, comm_size: 2 })
                    .collect(),
            })
            .collect()
    }

    #[test]
    fn streams_of_one_run_in_groups_without_a_communicator_in_common_are_not_called_different_runs() {
        // Tensor parallel in pairs, no communicator spanning the job: two groups, one process per rank.
        let one = [(0, &["root-a"][..]), (1, &["root-a"]), (2, &["root-b"]), (3, &["root-b"])];
        assert_eq!(streams_of_different_runs(&streams(&one)), None);
        // The same job run again into the directory: every rank has a process in two groups.
        let twice =
            [one.as_slice(), &[(0, &["root-c"][..]), (1, &["root-c"]), (2, &["root-d"]), (3, &["root-d"])]]
                .concat();
        let said = streams_of_different_runs(&streams(&twice)).expect("different runs");
        assert!(
            said.starts_with(
                "the capture holds different runs: 2 streams of ranks 0, 1 (the first stream-000-rank0)"
            ) && said.contains(
                "2 streams of ranks 2, 3 (the first stream-006-rank2) made HCCL communicator root-d"
            ) && said.contains("ranks 0-3 have a process in more than one"),
            "{said}"
        );
        // A rank's second process that made no communicator (a helper process): nothing to say.
        let helper = [one.as_slice(), &[(0, &[][..])]].concat();
        assert_eq!(streams_of_different_runs(&streams(&helper)), None);
    }

    #[test]
    fn a_job_of_a_thousand_ranks_run_twice_is_said_in_one_short_line() {
        // 1,024 ranks, every one recorded twice but rank 512 once: its ranks read as ranges.
        let first: Vec<(u32, &[&str])> = (0..1024).map(|r| (r, &["root-a"][..])).collect();
        let again: Vec<(u32, &[&str])> =
            (0..1024).filter(|&r| r != 512).map(|r| (r, &["root-b"][..])).collect();
        let said = streams_of_different_runs(&streams(&[first, again].concat())).expect("different runs");
        assert!(
            said.contains(
                "1024 streams of ranks 0-1023 (the first stream-000-rank0) made HCCL communicator root-a"
            ) && said.contains("1023 streams of ranks 0-511, 513-1023 (the first stream-1024-rank0)")
                && said.contains("and ranks 0-511, 513-1023 have a process in more than one"),
            "{said}"
        );
        assert!(said.len() < 400, "{} characters: {said}", said.len());
    }
}
