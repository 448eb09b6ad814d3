//! An event as the replay, the collectives' check and the report read it: a whole read's [`Event`], or what
//! a fold of a long capture's windows kept of one (`packed`), read in place. A fold keeps every HCCL call to
//! the end; unpacking them into events there took a full event a call more than the fold held (#18: ~150
//! bytes a call, 80 MB at 64 ranks x 3,000 steps).

use super::events::{Called, CollectiveMeta, Event, Name, RankEvents, TensorSummary};
use super::thin::ThinBuffers;
use accutrace_formats::capture::CollectiveOp;

/// A collective call's place among its communicator's calls, as [`CollectiveMeta`] says it, borrowed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Call<'a> {
    pub comm: &'a Name,
    pub seq: u64,
    pub op: CollectiveOp,
    /// Broadcast's root, Send's destination, Recv's source (communicator ranks).
    pub peer: Option<u32>,
    pub comm_rank: u32,
    pub comm_size: u32,
}

impl<'a> Call<'a> {
    /// The call of `c`.
    pub fn of(c: &'a CollectiveMeta) -> Call<'a> {
        Call {
            comm: &c.comm,
            seq: c.seq,
            op: c.op,
            peer: c.peer,
            comm_rank: c.comm_rank,
            comm_size: c.comm_size,
        }
    }
}

/// What the cross-rank analysis reads of an event once its tensors were judged.
pub trait ProgramEvent {
    /// Its step ([`UNKNOWN_STEP`](super::events::UNKNOWN_STEP) when unknown).
    fn step(&self) -> u64;
    /// Its place among its communicator's calls, when it is an HCCL call.
    fn call(&self) -> Option<Call<'_>>;
    /// The op's name, or the HCCL function's.
    fn name(&self) -> &str;
    /// The op's type, or the HCCL function's name.
    fn op_type(&self) -> &str;
    /// Its buffers, when it is a call thinned to them (`buffers`); else its tensors are read.
    fn thin(&self) -> Option<ThinBuffers>;
    /// Its tensors (none for a thinned call).
    fn tensors(&self) -> &[TensorSummary];
}

/// The communicators `events` called, as `events::called` says them of a whole read's.
pub(crate) fn called<E: ProgramEvent>(events: &RankEvents<E>) -> Called {
    events.events.iter().filter_map(E::call).map(|c| (c.comm.clone(), c.comm_size)).collect()
}

impl ProgramEvent for Event {
    fn step(&self) -> u64 {
        self.step
    }

    fn call(&self) -> Option<Call<'_>> {
        self.collective().map(Call::of)
    }

    fn name(&self) -> &str {
        Event::name(self)
    }

    fn op_type(&self) -> &str {
        Event::op_type(self)
    }

    fn thin(&self) -> Option<ThinBuffers> {
        None
    }

    fn tensors(&self) -> &[TensorSummary] {
        &self.tensors
    }
}
