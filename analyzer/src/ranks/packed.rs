//! An event a fold of a long capture's windows keeps to the end (`fold`), in 64 bytes: an HCCL call packed
//! to the words the replay and the collectives' check read, or any other event whole. A call held as an
//! event and its buffers took 120 bytes and the vector's spare room on top (#18: a call in 130 events or so,
//! every one of a long run's).

use super::events::{CollectiveMeta, Event, EventKind, Name, UNKNOWN_STEP};
use super::thin::ThinBuffers;
use accutrace_formats::capture::CollectiveOp;

/// The packed step of a call whose step is unknown.
const UNKNOWN: u32 = u32::MAX;

/// A call packed: step and sequence number in 32 bits each, where they fit (else the call is kept whole).
/// Its host time is not kept: it placed the call in its window's program order, and nothing after reads it.
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
    /// `e` with its buffers `thin`: packed when it is a call whose step and sequence number fit.
    pub(crate) fn of(e: Event, thin: ThinBuffers) -> Kept {
        let Some(c) = e.collective() else { return Kept::Whole(Box::new((e, thin))) };
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

    /// The event again (a packed call without its host time) and its buffers.
    pub(crate) fn unpack(self) -> (Event, ThinBuffers) {
        match self {
            Kept::Whole(whole) => *whole,
            Kept::Call(c) => {
                let meta = CollectiveMeta {
                    comm: c.comm,
                    seq: u64::from(c.seq),
                    op: c.op,
                    peer: c.has_peer.then_some(c.peer),
                    comm_rank: c.comm_rank,
                    comm_size: c.comm_size,
                };
                let step = if c.step == UNKNOWN { UNKNOWN_STEP } else { u64::from(c.step) };
                let e = Event { step, time_us: None, kind: EventKind::Collective(meta), tensors: Vec::new() };
                (e, ThinBuffers::from_parts((c.input, c.output, c.flags)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
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

    /// A call comes back as it went in but for its host time; at the packing limits it is packed or kept
    /// whole, never cut to 32 bits.
    #[test]
    fn a_call_round_trips_and_a_step_or_sequence_number_past_32_bits_keeps_it_whole() {
        let mut thin = ThinBuffers::empty();
        assert!(thin.add(Io::Output, 0, Some(u64::MAX), false));
        let fits = [(0, 0), (u64::from(u32::MAX) - 1, u64::from(u32::MAX)), (UNKNOWN_STEP, 5)];
        for (step, seq) in fits {
            let kept = Kept::of(call(step, seq), thin);
            assert!(matches!(kept, Kept::Call(_)), "step {step} seq {seq} is packed");
            assert_eq!(kept.unpack(), (Event { time_us: None, ..call(step, seq) }, thin));
        }
        let too_wide =
            [(u64::from(u32::MAX), 0), (u64::from(u32::MAX) + 1, 0), (UNKNOWN_STEP - 1, 0), (0, 1 << 32)];
        for (step, seq) in too_wide {
            let kept = Kept::of(call(step, seq), thin);
            assert!(matches!(kept, Kept::Whole(_)), "step {step} seq {seq} is kept whole");
            assert_eq!(kept.unpack(), (call(step, seq), thin), "its host time too");
        }
        // A call without a peer keeps none.
        let mut all_reduce = call(3, 9);
        if let EventKind::Collective(c) = &mut all_reduce.kind {
            (c.peer, c.op) = (None, CollectiveOp::AllReduce);
        }
        let back = Kept::of(all_reduce.clone(), thin).unpack();
        assert_eq!(back, (Event { time_us: None, ..all_reduce }, thin));
        // An op is kept whole.
        let op = Event { kind: EventKind::Op { name: "a".into(), op_type: "X".into() }, ..call(0, 0) };
        assert_eq!(Kept::of(op.clone(), ThinBuffers::default()).unpack(), (op, ThinBuffers::default()));
        assert!(std::mem::size_of::<Kept>() <= 64, "{} bytes", std::mem::size_of::<Kept>());
    }
}
