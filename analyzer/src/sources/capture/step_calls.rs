//! What the census keeps of each step's HCCL calls on a rank (#18): enough for `diff`, which pairs two runs'
//! calls step by step, to tell whether the calls of the steps before a selection pair without reading
//! those steps' windows: four words a call and a few a step, and while the census reads a stream, three
//! a call; and which ranks used each communicator, which tells a rank's communicators apart.

use accutrace_formats::capture::{CollectiveInfo, CollectiveOp};
use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

/// Which of a rank's communicators a call is on: the communicator's size, the rank's place in it, and a
/// third word that tells apart the rank's communicators of one size and place. Each run names its own
/// communicators, so the name says nothing across runs: as read ([`CallKey::of`]) the third word is the
/// name's hash, which `diff` turns into what both runs can tell (the communicator's members) before it
/// pairs calls.
pub type CommPlace = (u32, u32, u64);

/// What pairs a call with the other run's: its communicator's [`CommPlace`], function and sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallKey {
    pub comm: CommPlace,
    pub op: CollectiveOp,
    pub seq: u64,
}

impl CallKey {
    /// The call's key as its run knows it (its communicator by its name's hash).
    pub fn of(call: &CollectiveInfo) -> CallKey {
        CallKey { comm: (call.comm_size, call.comm_rank, hash_of(&call.comm)), op: call.op, seq: call.seq }
    }
}

/// A rank's use of a communicator: its name's hash, size and the rank's place in it. A run's uses tell
/// which ranks each communicator has (the same name on every member).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CommUse {
    pub rank: u32,
    pub comm: CommPlace,
}

/// The communicators each rank of `calls` (rank, call) used, once each, in order.
pub fn comm_uses<'a>(calls: impl IntoIterator<Item = (u32, &'a CollectiveInfo)>) -> Vec<CommUse> {
    let mut uses: Vec<CommUse> =
        calls.into_iter().map(|(rank, c)| CommUse { rank, comm: CallKey::of(c).comm }).collect();
    uses.sort_unstable();
    uses.dedup();
    uses
}

/// What numbers a call: its communicator (its name's hash) and, for a send or a receive, its function
/// (point-to-point calls are numbered apart from the communicator's collectives).
pub type SeqCounter = (u64, Option<CollectiveOp>);

/// A rank's HCCL calls at one step: what `diff` pairs each call by (its communicator's size and the rank's
/// place in it, its function and sequence number), in call order, and each [`SeqCounter`]'s lowest and
/// highest sequence number.
#[derive(Clone, Debug, Default)]
pub struct StepCalls {
    pub calls: Vec<CallKey>,
    /// Per [`SeqCounter`]: the lowest and the highest sequence number.
    pub seqs: Vec<(SeqCounter, u64, u64)>,
}

impl StepCalls {
    /// Adds the call after those added before.
    pub fn push(&mut self, call: &CollectiveInfo) {
        self.push_key(CallKey::of(call));
    }

    /// Adds the call known by `key` (its communicator by its name's hash), after those added before.
    pub fn push_key(&mut self, key: CallKey) {
        let counter = (key.comm.2, key.op.is_point_to_point().then_some(key.op));
        let seq = key.seq;
        self.calls.push(key);
        match self.seqs.iter_mut().find(|s| s.0 == counter) {
            Some(s) => (s.1, s.2) = (s.1.min(seq), s.2.max(seq)),
            None => self.seqs.push((counter, seq, seq)),
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
#[derive(Debug, Default)]
pub(super) struct StreamCalls {
    /// Each call's start, its function, and its sequence number shifted past its communicator's place in
    /// `comms`.
    calls: Vec<(u64, CollectiveOp, u64)>,
    /// Each communicator the stream used, as [`CallKey::comm`].
    comms: Vec<CommPlace>,
    /// A sequence number or a count of communicators too large to pack: the calls are left unplaced.
    unpacked: bool,
}

/// The bits of a packed sequence number that hold its communicator's place: a job makes a few
/// communicators, and each call looks its own up among them.
const COMM_BITS: u32 = 8;

impl StreamCalls {
    /// Adds a call, after those added before.
    pub fn add(&mut self, call: &CollectiveInfo) {
        let comm = CallKey::of(call).comm;
        let (seq, op) = (call.seq, call.op);
        let place = match self.comms.iter().position(|&c| c == comm) {
            Some(place) => place,
            None => {
                self.comms.push(comm);
                self.comms.len() - 1
            }
        };
        if self.unpacked || seq >> (64 - COMM_BITS) != 0 || place >> COMM_BITS != 0 {
            self.unpacked = true;
            return;
        }
        self.calls.push((call.start_us, op, seq << COMM_BITS | place as u64));
    }

    /// The communicators the stream used, as [`CallKey::comm`].
    pub fn comms(&self) -> &[CommPlace] {
        &self.comms
    }

    /// Each call's start, in call order; `None` where some call was left unplaced (too large to pack).
    pub fn starts(&self) -> Option<impl Iterator<Item = u64> + '_> {
        (!self.unpacked).then(|| self.calls.iter().map(|&(start_us, _, _)| start_us))
    }

    /// Each step's calls, the `k`-th call that started at `start_us` placed by `step_of(k, start_us)`;
    /// `None` where a call belongs to no step.
    pub fn by_step(self, step_of: impl Fn(usize, u64) -> Option<u64>) -> Option<BTreeMap<u64, StepCalls>> {
        if self.unpacked {
            return None;
        }
        let mut steps: BTreeMap<u64, StepCalls> = BTreeMap::new();
        for (k, (start_us, op, packed)) in self.calls.into_iter().enumerate() {
            let comm = self.comms[(packed & ((1 << COMM_BITS) - 1)) as usize];
            let key = CallKey { comm, op, seq: packed >> COMM_BITS };
            steps.entry(step_of(k, start_us)?).or_default().push_key(key);
        }
        Some(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CollectiveOp::{AllGather, AllReduce};

    /// A call of rank 1 on `comm`, a communicator of 4 ranks unless named `group` (of 2).
    fn call(start_us: u64, op: CollectiveOp, seq: u64, comm: &str) -> CollectiveInfo {
        let comm_size = if comm == "group" { 2 } else { 4 };
        CollectiveInfo {
            comm: comm.to_string(),
            comm_rank: 1,
            comm_size,
            seq,
            op,
            count: 1,
            dtype: 0,
            reduce_op: None,
            peer: None,
            input: None,
            output: None,
            start_us,
            end_us: start_us,
            result: 0,
        }
    }

    fn calls(list: &[(CollectiveOp, u64)]) -> StepCalls {
        let mut calls = StepCalls::default();
        list.iter().for_each(|&(op, seq)| calls.push(&call(0, op, seq, "world")));
        calls
    }

    /// The calls' keys without their communicators' names, as two runs can compare them.
    fn placed(calls: &StepCalls) -> Vec<(u32, u32, CollectiveOp, u64)> {
        calls.calls.iter().map(|k| (k.comm.0, k.comm.1, k.op, k.seq)).collect()
    }

    /// A call is known by its communicator's size and the rank's place in it, its function and sequence
    /// number, and its run's name of the communicator (which only the run's other calls can make sense
    /// of); each communicator's sequence numbers are spanned apart.
    #[test]
    fn calls_are_their_places_functions_and_sequence_numbers() {
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
        elsewhere.push(&call(0, AllGather, 3, "pipeline"));
        assert_ne!(elsewhere.calls, whole.calls);
        assert_eq!(placed(&elsewhere), placed(&whole));
        assert_eq!(elsewhere.seqs.len(), 2);
        let mut in_a_group = calls(&[(AllReduce, 1), (AllReduce, 2)]);
        in_a_group.push(&call(0, AllGather, 3, "group"));
        assert_ne!(placed(&in_a_group), placed(&whole));
    }

    /// Calls are placed by their starts, whichever step's op records they were read among, and keep their
    /// communicators; a call before every step, or one whose sequence number is too large to pack, leaves
    /// the steps unknown.
    #[test]
    fn calls_are_placed_by_their_starts() {
        let step_of = |_, us: u64| (us >= 100).then_some(us / 100);
        let mut read = StreamCalls::default();
        read.add(&call(110, AllReduce, 1, "world"));
        read.add(&call(120, AllReduce, 2, "world"));
        read.add(&call(130, AllGather, 3, "world"));
        read.add(&call(250, AllReduce, 4, "world"));
        read.add(&call(260, AllReduce, 0, "group"));
        assert_eq!(read.comms().len(), 2);
        let steps = read.by_step(step_of).expect("every call in a step");
        assert_eq!(steps[&1].calls, calls(&[(AllReduce, 1), (AllReduce, 2), (AllGather, 3)]).calls);
        let mut second = calls(&[(AllReduce, 4)]);
        second.push(&call(0, AllReduce, 0, "group"));
        assert_eq!(steps[&2].calls, second.calls);
        assert_eq!(steps[&2].seqs.iter().map(|s| (s.1, s.2)).collect::<Vec<_>>(), [(4, 4), (0, 0)]);
        let mut early = StreamCalls::default();
        early.add(&call(50, AllReduce, 1, "world"));
        assert!(early.by_step(step_of).is_none());
        let mut huge = StreamCalls::default();
        huge.add(&call(110, AllReduce, u64::MAX, "world"));
        huge.add(&call(120, AllReduce, 1, "group"));
        assert_eq!(huge.comms().len(), 2, "every communicator, placed or not");
        assert!(huge.by_step(step_of).is_none());
    }
}
