//! What the census keeps of each step's HCCL calls on a rank (#18): enough for `diff`, which pairs two runs'
//! calls step by step, to tell whether the calls of the steps before a selection pair without reading
//! those steps' windows: two words a call and a few a step, and while the census reads a stream, three a
//! call.

use accutrace_formats::capture::CollectiveOp;
use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

/// A rank's HCCL calls at one step: each call's function and sequence number (what `diff` pairs them by),
/// in call order, and each communicator's lowest and highest sequence number.
#[derive(Clone, Debug, Default)]
pub struct StepCalls {
    pub calls: Vec<(CollectiveOp, u64)>,
    /// Per communicator (its name's hash): the lowest and the highest sequence number.
    pub seqs: Vec<(u64, u64, u64)>,
}

impl StepCalls {
    /// Adds the call after those added before, on the communicator of that name.
    pub fn push(&mut self, op: CollectiveOp, seq: u64, comm: &str) {
        self.push_placed(op, seq, hash_of(comm));
    }

    fn push_placed(&mut self, op: CollectiveOp, seq: u64, comm: u64) {
        self.calls.push((op, seq));
        match self.seqs.iter_mut().find(|s| s.0 == comm) {
            Some(s) => (s.1, s.2) = (s.1.min(seq), s.2.max(seq)),
            None => self.seqs.push((comm, seq, seq)),
        }
    }
}

fn hash_of(value: impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// A stream's calls as the census reads them, a few words each until every step's start is known: records
/// come in the order files completed, so a call may be read before the op records of its own step, and
/// is placed by its start once the census has read them all.
#[derive(Default)]
pub(super) struct StreamCalls {
    /// Each call's start, its function, and its sequence number shifted past
    /// its communicator's place in `comms`.
    calls: Vec<(u64, CollectiveOp, u64)>,
    comms: Vec<u64>,
    /// A sequence number or a count of communicators too large to pack: the calls are left unplaced.
    unpacked: bool,
}

/// The bits of a packed sequence number that hold its communicator's place: a job makes a few
/// communicators, and each call looks its own up among them.
const COMM_BITS: u32 = 8;

impl StreamCalls {
    /// Adds a call that started at `start_us`, after those added before.
    pub fn add(&mut self, start_us: u64, op: CollectiveOp, seq: u64, comm: &str) {
        if self.unpacked {
            return;
        }
        let comm = hash_of(comm);
        let place = match self.comms.iter().position(|&c| c == comm) {
            Some(place) => place,
            None => {
                self.comms.push(comm);
                self.comms.len() - 1
            }
        };
        if seq >> (64 - COMM_BITS) != 0 || place >> COMM_BITS != 0 {
            self.unpacked = true;
            return;
        }
        self.calls.push((start_us, op, seq << COMM_BITS | place as u64));
    }

    /// Each step's calls, a call placed by `step_of` its start; `None` where a call belongs to no step.
    pub fn by_step(self, step_of: impl Fn(u64) -> Option<u64>) -> Option<BTreeMap<u64, StepCalls>> {
        if self.unpacked {
            return None;
        }
        let mut steps: BTreeMap<u64, StepCalls> = BTreeMap::new();
        for (start_us, op, packed) in self.calls {
            let comm = self.comms[(packed & ((1 << COMM_BITS) - 1)) as usize];
            steps.entry(step_of(start_us)?).or_default().push_placed(op, packed >> COMM_BITS, comm);
        }
        Some(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CollectiveOp::{AllGather, AllReduce};

    fn calls(list: &[(CollectiveOp, u64)]) -> StepCalls {
        let mut calls = StepCalls::default();
        list.iter().for_each(|&(op, seq)| calls.push(op, seq, "world"));
        calls
    }

    /// A call is known by its function and sequence number, not by its communicator's name (each run
    /// names its own), whose sequence numbers are spanned apart.
    #[test]
    fn calls_are_their_functions_and_sequence_numbers() {
        let whole = calls(&[(AllReduce, 1), (AllReduce, 2), (AllGather, 3)]);
        assert_eq!(whole.seqs.len(), 1);
        assert_eq!((whole.seqs[0].1, whole.seqs[0].2), (1, 3));
        for other in [
            calls(&[(AllReduce, 2), (AllReduce, 1), (AllGather, 3)]),
            calls(&[(AllReduce, 1), (AllReduce, 2), (AllReduce, 3)]),
            calls(&[(AllReduce, 1), (AllReduce, 2)]),
        ] {
            assert_ne!(other.calls, whole.calls);
        }
        let mut elsewhere = calls(&[(AllReduce, 1), (AllReduce, 2)]);
        elsewhere.push(AllGather, 3, "pipeline");
        assert_eq!(elsewhere.calls, whole.calls);
        assert_eq!(elsewhere.seqs.len(), 2);
    }

    /// Calls are placed by their starts, whichever step's op records they were read among; a call
    /// before every step, or one whose sequence number is too large to pack, leaves the steps unknown.
    #[test]
    fn calls_are_placed_by_their_starts() {
        let step_of = |us: u64| (us >= 100).then_some(us / 100);
        let mut read = StreamCalls::default();
        read.add(110, AllReduce, 1, "world");
        read.add(120, AllReduce, 2, "world");
        read.add(130, AllGather, 3, "world");
        read.add(250, AllReduce, 4, "world");
        read.add(260, AllReduce, 0, "pipeline");
        let steps = read.by_step(step_of).expect("every call in a step");
        assert_eq!(steps[&1].calls, calls(&[(AllReduce, 1), (AllReduce, 2), (AllGather, 3)]).calls);
        assert_eq!(steps[&2].calls, calls(&[(AllReduce, 4), (AllReduce, 0)]).calls);
        assert_eq!(steps[&2].seqs.iter().map(|s| (s.1, s.2)).collect::<Vec<_>>(), [(4, 4), (0, 0)]);
        let mut early = StreamCalls::default();
        early.add(50, AllReduce, 1, "world");
        assert!(early.by_step(step_of).is_none());
        let mut huge = StreamCalls::default();
        huge.add(110, AllReduce, u64::MAX, "world");
        assert!(huge.by_step(step_of).is_none());
    }
}
