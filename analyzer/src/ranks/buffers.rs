//! An HCCL call's buffers as the cross-rank analysis reads them once their statistics were judged: each
//! buffer's content hash, and whether the send buffer was anomalous. A fold of a long capture's windows
//! keeps every call to the end for the replay (`fold`), and two tensor summaries of 112 bytes a call (with
//! their vector) were most of what `ranks` held a (rank, step) place (#18); a call's overflow is found in its
//! window, where its summaries are whole, and the call keeps these few words instead.
//!
//! [`RunEvents`]' call readers below read a thinned call from its [`ThinBuffers`] and any other event from
//! its tensors, so the analysis gives the same answer either way (a fold's kept calls: `packed`).

use super::detect::EventRef;
use super::events::{Event, RunEvents, TensorSummary};
use super::program::ProgramEvent;
use super::thin::ThinBuffers;
use crate::index::Io;

/// The thin form of a call `e`, or `None` when it does not fit one (an op, or a call with more than one
/// buffer of a side, or one at another index than 0): such an event keeps its tensors, never a part of them.
pub fn thin_buffers(e: &Event) -> Option<ThinBuffers> {
    e.collective()?;
    let mut thin = ThinBuffers::empty();
    let fits = e.tensors.iter().all(|t| thin.add(t.io, t.index, t.hash, t.anomalous()));
    fits.then_some(thin)
}

impl<E: ProgramEvent> RunEvents<E> {
    fn event(&self, (r, i): EventRef) -> &E {
        &self.ranks[r].events[i]
    }

    fn tensor(&self, at: EventRef, io: Io) -> Option<&TensorSummary> {
        self.event(at).tensors().iter().find(|t| t.io == io)
    }

    /// The content hash of the event's first tensor of side `io`, when it has one.
    pub fn call_hash(&self, at: EventRef, io: Io) -> Option<u64> {
        match self.event(at).thin() {
            Some(b) => b.hash(io),
            None => self.tensor(at, io).and_then(|t| t.hash),
        }
    }

    /// `name.output.0` of the event's first tensor of side `io`, when it has one.
    pub fn call_label(&self, at: EventRef, io: Io) -> Option<String> {
        let e = self.event(at);
        let index = match e.thin() {
            Some(b) => b.has(io).then_some(0),
            None => self.tensor(at, io).map(|t| t.index),
        };
        index.map(|index| format!("{}.{}.{index}", e.name(), io.as_str()))
    }

    /// Whether an input of the event is anomalous (NaN, inf, saturated).
    pub fn input_anomalous(&self, at: EventRef) -> bool {
        match self.event(at).thin() {
            Some(b) => b.input_anomalous(),
            None => self.event(at).tensors().iter().any(|t| t.io == Io::Input && t.anomalous()),
        }
    }

    /// Whether any tensor of the event carries a content hash.
    pub fn buffer_hashed(&self, at: EventRef) -> bool {
        match self.event(at).thin() {
            Some(b) => b.any_hashed(),
            None => self.event(at).tensors().iter().any(|t| t.hash.is_some()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::events::{CollectiveMeta, EventKind, RankEvents};
    use super::super::packed::Kept;
    use super::*;
    use accutrace_formats::capture::CollectiveOp;

    fn call(tensors: Vec<TensorSummary>) -> Event {
        let meta = CollectiveMeta {
            comm: "c".into(),
            seq: u64::MAX,
            op: CollectiveOp::AllReduce,
            peer: None,
            comm_rank: 0,
            comm_size: 2,
        };
        Event { step: u64::MAX, time_us: None, kind: EventKind::Collective(meta), tensors }
    }

    /// Input and output hash, input and output label, input anomalous, any hash: what the readers say.
    type Read = (Option<u64>, Option<u64>, Option<String>, Option<String>, bool, bool);

    /// What the readers say of every event of `run`, in order.
    fn read<E: ProgramEvent>(run: &RunEvents<E>) -> Vec<Read> {
        let at = (0..run.ranks[0].events.len()).map(|i| (0, i));
        at.map(|at| {
            (
                run.call_hash(at, Io::Input),
                run.call_hash(at, Io::Output),
                run.call_label(at, Io::Input),
                run.call_label(at, Io::Output),
                run.input_anomalous(at),
                run.buffer_hashed(at),
            )
        })
        .collect()
    }

    /// A thinned call reads as its whole event did: hashes at both ends of their range, hashes missing, a
    /// side missing, an anomalous send buffer; what does not fit the thin form keeps its tensors.
    #[test]
    fn a_thinned_call_reads_as_its_whole_event_and_what_does_not_fit_stays_whole() {
        let t = |io, hash| TensorSummary::zeros(io, 8, hash);
        let nan_input = TensorSummary { nan: 1, ..t(Io::Input, Some(7)) };
        let events = vec![
            call(vec![t(Io::Input, Some(0)), t(Io::Output, Some(u64::MAX))]),
            call(vec![t(Io::Input, Some(u64::MAX)), t(Io::Output, Some(0))]),
            call(vec![t(Io::Input, None), t(Io::Output, None)]),
            call(vec![t(Io::Output, Some(3))]),
            call(vec![nan_input]),
            call(vec![]),
        ];
        let whole = RunEvents { ranks: vec![RankEvents { rank: 0, events }], ..RunEvents::default() };
        // Kept as a fold keeps them: thinned, packed where step and sequence number fit in 32 bits (here
        // they do not) and where they do (step and sequence number 0).
        let kept = |e: &Event, packed: bool| {
            let thin = thin_buffers(e).expect("fits");
            let mut e = Event { tensors: Vec::new(), ..e.clone() };
            if let (true, EventKind::Collective(c)) = (packed, &mut e.kind) {
                (e.step, c.seq) = (0, 0);
            }
            let kept = Kept::of(e, thin);
            assert_eq!(matches!(kept, Kept::Call(_)), packed);
            kept
        };
        for packed in [false, true] {
            let events = whole.ranks[0].events.iter().map(|e| kept(e, packed)).collect();
            let thinned = RunEvents { ranks: vec![RankEvents { rank: 0, events }], ..RunEvents::default() };
            assert_eq!(read(&thinned), read(&whole), "packed: {packed}");
        }
        assert_eq!(read(&whole)[0].3.as_deref(), Some("HcclAllReduce.output.0"));
        assert!(read(&whole)[4].4, "the anomalous send buffer");
        assert!(!read(&whole)[2].5, "no hash");

        // Two buffers of one side, or one at index 1: no thin form (the event stays whole).
        assert_eq!(thin_buffers(&call(vec![t(Io::Output, Some(1)), t(Io::Output, Some(2))])), None);
        assert_eq!(thin_buffers(&call(vec![TensorSummary { index: 1, ..t(Io::Input, Some(1)) }])), None);
        let op = Event { kind: EventKind::Op { name: "a".into(), op_type: "X".into() }, ..call(vec![]) };
        assert_eq!(thin_buffers(&op), None, "an op is never thinned");
        // A call kept without a thin form reads its tensors.
        let events =
            whole.ranks[0].events.iter().map(|e| Kept::of(e.clone(), ThinBuffers::default())).collect();
        let partial = RunEvents { ranks: vec![RankEvents { rank: 0, events }], ..RunEvents::default() };
        assert_eq!(read(&partial), read(&whole));
    }
}
