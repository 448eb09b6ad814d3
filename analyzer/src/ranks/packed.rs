//! An event a fold of a long capture's windows keeps to the end (`fold`), in 64 bytes: an HCCL call packed
//! to the words the replay and the collectives' check read, or any other event whole. A call held as an
//! event and its buffers took 120 bytes and the vector's spare room on top (#18: a call in 130 events or so,
//! every one of a long run's).

use super::events::{Event, Name, TensorSummary, UNKNOWN_STEP};
use super::program::{Call, ProgramEvent};
use super::thin::ThinBuffers;
use accutrace_formats::capture::CollectiveOp;

/// The packed step of a call whose step is unknown.
const UNKNOWN: u32 = u32::MAX;

/// A call packed: step and sequence number in 32 bits each, where they fit (else the call is kept whole).
/// Its host time is not kept: it placed the call in its window's program order, and nothing after reads it.
/// The replay and the report read it in place ([`ProgramEvent`]).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PackedCall {
    comm: Name,
    /// [`ThinBuffers::parts`], laid out here so that their flags take no word of their own.
    input: u64,
    output: u64,
    step: u32,
    seq: u32,
    peer: u32,
    comm_rank: u32,
    comm_size: u32,
    op: CollectiveOp,
    has_peer: bool,
    flags: u8,
}

/// What a fold keeps of an event, with its buffers ([`ThinBuffers::default`] for an event kept with its
/// tensors).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Kept {
    Call(PackedCall),
    Whole(Box<(Event, ThinBuffers)>),
}

impl Kept {
    /// `e` with its buffers `thin`: packed when it is a call thinned to them whose step and sequence number
    /// fit (a call that keeps its tensors is kept whole, with them).
    pub(crate) fn of(e: Event, thin: ThinBuffers) -> Kept {
        let Some(c) = e.collective().filter(|_| thin.is_thin()) else {
            return Kept::Whole(Box::new((e, thin)));
        };
        let step = match e.step {
            UNKNOWN_STEP => Some(UNKNOWN),
            s => u32::try_from(s).ok().filter(|&s| s != UNKNOWN),
        };
        match (step, u32::try_from(c.seq)) {
            (Some(step), Ok(seq)) => {
                let (input, output, flags) = thin.parts();
                Kept::Call(PackedCall {
                    comm: c.comm.clone(),
                    input,
                    output,
                    step,
                    seq,
                    peer: c.peer.unwrap_or(0),
                    comm_rank: c.comm_rank,
                    comm_size: c.comm_size,
                    op: c.op,
                    has_peer: c.peer.is_some(),
                    flags,
                })
            }
            _ => Kept::Whole(Box::new((e, thin))),
        }
    }
}

/// A kept event is read where it is: a packed call from its words, any other as its event.
impl ProgramEvent for Kept {
    fn step(&self) -> u64 {
        match self {
            Kept::Call(c) if c.step == UNKNOWN => UNKNOWN_STEP,
            Kept::Call(c) => u64::from(c.step),
            Kept::Whole(whole) => whole.0.step,
        }
    }

    fn call(&self) -> Option<Call<'_>> {
        match self {
            Kept::Call(c) => Some(Call {
                comm: &c.comm,
                seq: u64::from(c.seq),
                op: c.op,
                peer: c.has_peer.then_some(c.peer),
                comm_rank: c.comm_rank,
                comm_size: c.comm_size,
            }),
            Kept::Whole(whole) => whole.0.call(),
        }
    }

    fn name(&self) -> &str {
        match self {
            Kept::Call(c) => c.op.api_name(),
            Kept::Whole(whole) => whole.0.name(),
        }
    }

    fn op_type(&self) -> &str {
        match self {
            Kept::Call(c) => c.op.api_name(),
            Kept::Whole(whole) => whole.0.op_type(),
        }
    }

    fn thin(&self) -> Option<ThinBuffers> {
        let thin = match self {
            Kept::Call(c) => ThinBuffers::from_parts((c.input, c.output, c.flags)),
            Kept::Whole(whole) => whole.1,
        };
        thin.is_thin().then_some(thin)
    }

    fn tensors(&self) -> &[TensorSummary] {
        match self {
            Kept::Call(_) => &[],
            Kept::Whole(whole) => &whole.0.tensors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::events::{CollectiveMeta, EventKind};
    use super::*;
    use crate::index::Io;

    fn call(step: u64, seq: u64) -> Event {
        let meta = CollectiveMeta {
            comm: "root-1".into(),
            seq,
            op: CollectiveOp::Recv,
            peer: Some(3),
            comm_rank: 2,
            comm_size: 4,
        };
        Event { step, time_us: Some(17), kind: EventKind::Collective(meta), tensors: Vec::new() }
    }

    /// Step, call, name, type, buffers and tensors: all that is read of an event.
    type Read<'a> = (u64, Option<Call<'a>>, &'a str, &'a str, Option<ThinBuffers>, &'a [TensorSummary]);

    fn read(e: &impl ProgramEvent) -> Read<'_> {
        (e.step(), e.call(), e.name(), e.op_type(), e.thin(), e.tensors())
    }

    /// What a call thinned to `thin` was read as before it was kept: its event, with those buffers.
    fn as_thinned(e: &Event, thin: ThinBuffers) -> Read<'_> {
        (e.step, e.call(), e.name(), e.op_type(), Some(thin), &[])
    }

    /// A kept call reads as its event with its buffers did; at the packing limits it is packed or kept
    /// whole, never cut to 32 bits; a call that keeps its tensors, and an op, are kept whole.
    #[test]
    fn a_kept_call_reads_as_its_event_and_a_step_or_sequence_number_past_32_bits_keeps_it_whole() {
        let mut thin = ThinBuffers::empty();
        assert!(thin.add(Io::Output, 0, Some(u64::MAX), false));
        let fits = [(0, 0), (u64::from(u32::MAX) - 1, u64::from(u32::MAX)), (UNKNOWN_STEP, 5)];
        for (step, seq) in fits {
            let e = call(step, seq);
            let kept = Kept::of(e.clone(), thin);
            assert!(matches!(kept, Kept::Call(_)), "step {step} seq {seq} is packed");
            assert_eq!(read(&kept), as_thinned(&e, thin));
        }
        let too_wide =
            [(u64::from(u32::MAX), 0), (u64::from(u32::MAX) + 1, 0), (UNKNOWN_STEP - 1, 0), (0, 1 << 32)];
        for (step, seq) in too_wide {
            let e = call(step, seq);
            let kept = Kept::of(e.clone(), thin);
            assert!(matches!(kept, Kept::Whole(_)), "step {step} seq {seq} is kept whole");
            assert_eq!(read(&kept), as_thinned(&e, thin));
        }
        // A call without a peer keeps none.
        let mut all_reduce = call(3, 9);
        if let EventKind::Collective(c) = &mut all_reduce.kind {
            (c.peer, c.op) = (None, CollectiveOp::AllReduce);
        }
        assert_eq!(read(&Kept::of(all_reduce.clone(), thin)), as_thinned(&all_reduce, thin));
        // A call not thinned keeps its tensors, and an op is kept whole: each reads as its event.
        let mut whole = call(3, 9);
        whole.tensors = vec![TensorSummary::zeros(Io::Output, 8, Some(1))];
        let op = Event { kind: EventKind::Op { name: "a".into(), op_type: "X".into() }, ..call(0, 0) };
        for e in [whole, op] {
            let kept = Kept::of(e.clone(), ThinBuffers::default());
            assert!(matches!(kept, Kept::Whole(_)));
            assert_eq!(read(&kept), read(&e));
        }
        assert!(std::mem::size_of::<Kept>() <= 64, "{} bytes", std::mem::size_of::<Kept>());
    }
}
