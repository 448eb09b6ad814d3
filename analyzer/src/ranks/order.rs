//! Happens-before across ranks, and the anomalies nothing anomalous happened before.
//!
//! Program order within a rank; every collective synchronizes its members, matched by (communicator,
//! sequence number); a send happens before its receive, matched by (communicator, source, destination,
//! count). The ranks are replayed together: a rank runs until it reaches a collective whose members have
//! not all arrived (or a receive whose send has not run), then waits. Each collective and each op is visited
//! once, so the replay is linear in events. Lamport times come out of it, and so does the question the
//! analysis asks: did an anomaly happen before this event? A rank carries the earliest anomaly that
//! happened before its current point; members of a collective take the earliest any of them carried into
//! it (for a broadcast, the root's; for a receive, the sender's). An anomalous event that carries none is an
//! origin. A collective that no member carries an anomaly into, yet anomalous on several members (an
//! all-reduce whose sum overflows), is one origin on all of them: its result is theirs together.
//!
//! A collective that never completes (a member's capture is missing, or stops early) is let go with the
//! members that arrived once nothing else can run, and reported: what happened-before through it is then
//! incomplete. A receive whose send no rank recorded is given up (and reported) before any collective is
//! let go, so that the members waiting for its rank in a later collective are not reported missing it.

use super::detect::EventRef;
use super::events::{step_words, Name, RunEvents, UNKNOWN_STEP};
use super::program::ProgramEvent;
use accutrace_formats::capture::CollectiveOp;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

/// The earliest anomaly that happened before a point, and the collective that brought it to this rank.
#[derive(Clone, Debug, PartialEq)]
pub struct Taint {
    pub origin: EventRef,
    /// `None` on the origin's own rank.
    pub via: Option<EventRef>,
}

/// What the replay found.
#[derive(Clone, Debug, Default)]
pub struct Replay {
    /// Lamport time of every event, by rank then event.
    pub lamport: Vec<Vec<u64>>,
    /// Anomalous events with no anomalous event before them.
    pub origins: Vec<EventRef>,
    /// Origins at a collective anomalous on several members with nothing anomalous carried in: the other
    /// members' calls, where the same anomaly began together (they are no origins of their own).
    pub began_with: BTreeMap<EventRef, Vec<EventRef>>,
    /// For each rank, the first event an anomaly had reached (the taint then), if any.
    pub reached: Vec<Option<(usize, Taint)>>,
    /// Collectives let go incomplete: (communicator, sequence, op, members that arrived, members expected).
    pub incomplete: Vec<(String, u64, CollectiveOp, Vec<u32>, u32)>,
    /// Receives whose send never came.
    pub unmatched_receives: Vec<EventRef>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key {
    Collective(Name, u64),
    /// (communicator, source, destination, count)
    Message(Name, u32, u32, u64),
}

/// Replays `run`; `anomalous(event)` says which events are anomalous. When taints of two origins meet in a
/// collective, the members carry on the one of the lower (rank, event) position.
pub fn replay<E: ProgramEvent>(run: &RunEvents<E>, anomalous: &dyn Fn(EventRef) -> bool) -> Replay {
    replay_thinned(run, anomalous, &|_| 0)
}

/// [`replay`] of a run whose events are a thinned selection of a longer one's (a fold over windows of steps
/// keeps the calls and a rank's first anomalous op): `skipped(event)` is how many ops were left out just
/// before it on its rank, each a tick of its rank's clock, so that Lamport times are the longer run's.
pub fn replay_thinned<E: ProgramEvent>(
    run: &RunEvents<E>,
    anomalous: &dyn Fn(EventRef) -> bool,
    skipped: &dyn Fn(EventRef) -> u64,
) -> Replay {
    let n = run.ranks.len();
    let mut out = Replay {
        lamport: run.ranks.iter().map(|r| vec![0; r.events.len()]).collect(),
        reached: vec![None; n],
        ..Replay::default()
    };
    let mut pos = vec![0usize; n];
    let mut clock = vec![0u64; n];
    let mut taint: Vec<Option<Taint>> = vec![None; n];
    // Collectives waiting for members: key -> arrived ranks (by index), expected count.
    let mut waiting: HashMap<Key, (Vec<usize>, usize)> = HashMap::new();
    // Sent messages: key -> (Lamport time of the send, the sender's taint then).
    let mut sent: HashMap<Key, (u64, Option<Taint>)> = HashMap::new();
    // Every message some rank sends, sent yet or not.
    let sends: HashSet<Key> = run
        .ranks
        .iter()
        .flat_map(|r| &r.events)
        .filter_map(|e| e.call())
        .filter(|c| c.op == CollectiveOp::Send)
        .filter_map(|c| Some(Key::Message(c.comm.clone(), c.comm_rank, c.peer?, c.seq)))
        .collect();
    let present: BTreeSet<u32> = run.ranks.iter().map(|r| r.rank).collect();
    let mut ready: VecDeque<usize> = (0..n).collect();
    let mut blocked_on: Vec<Option<Key>> = vec![None; n];
    // Per rank, the events whose skipped ops are counted: a rank blocked on a receive comes back to it.
    let mut counted = vec![0usize; n];

    let visit = |r: usize,
                 i: usize,
                 t: u64,
                 incoming: Option<Taint>,
                 out: &mut Replay,
                 taint: &mut [Option<Taint>]| {
        out.lamport[r][i] = t;
        if taint[r].is_none() {
            if let Some(inc) = incoming {
                taint[r] = Some(inc);
            }
        }
        if anomalous((r, i)) && taint[r].is_none() {
            out.origins.push((r, i));
            taint[r] = Some(Taint { origin: (r, i), via: None });
        }
        if out.reached[r].is_none() {
            if let Some(t) = &taint[r] {
                out.reached[r] = Some((i, t.clone()));
            }
        }
    };

    loop {
        while let Some(r) = ready.pop_front() {
            let events = &run.ranks[r].events;
            while pos[r] < events.len() {
                let i = pos[r];
                let e = &events[i];
                if counted[r] == i {
                    clock[r] += skipped((r, i));
                    counted[r] += 1;
                }
                let Some(c) = e.call() else {
                    clock[r] += 1;
                    visit(r, i, clock[r], None, &mut out, &mut taint);
                    pos[r] += 1;
                    continue;
                };
                match (c.op, c.peer) {
                    (CollectiveOp::Send, Some(dst)) => {
                        clock[r] += 1;
                        visit(r, i, clock[r], None, &mut out, &mut taint);
                        let key = Key::Message(c.comm.clone(), c.comm_rank, dst, c.seq);
                        sent.insert(key.clone(), (clock[r], taint[r].clone()));
                        pos[r] += 1;
                        // A receiver waiting for this message can go on.
                        if let Some(w) = (0..n).find(|&q| blocked_on[q].as_ref() == Some(&key)) {
                            blocked_on[w] = None;
                            ready.push_back(w);
                        }
                    }
                    (CollectiveOp::Recv, Some(src)) => {
                        let key = Key::Message(c.comm.clone(), src, c.comm_rank, c.seq);
                        match sent.get(&key) {
                            Some((t, sender_taint)) => {
                                clock[r] = clock[r].max(*t) + 1;
                                let incoming = sender_taint.clone().map(|t| Taint { via: Some((r, i)), ..t });
                                visit(r, i, clock[r], incoming, &mut out, &mut taint);
                                pos[r] += 1;
                            }
                            None => {
                                blocked_on[r] = Some(key);
                                break;
                            }
                        }
                    }
                    _ => {
                        let key = Key::Collective(c.comm.clone(), c.seq);
                        // Members: the communicator's size when known, else every rank present.
                        let expected = if c.comm_size > 0 { c.comm_size as usize } else { present.len() };
                        let entry = waiting.entry(key.clone()).or_insert_with(|| (Vec::new(), expected));
                        entry.0.push(r);
                        blocked_on[r] = Some(key.clone());
                        if entry.0.len() >= entry.1 {
                            let (members, _) = waiting.remove(&key).expect("just seen");
                            complete(
                                run,
                                anomalous,
                                &members,
                                &mut pos,
                                &mut clock,
                                &mut taint,
                                &mut blocked_on,
                                &mut out,
                                &visit,
                            );
                            ready.extend(members.iter().filter(|&&m| m != r));
                            continue;
                        }
                        break;
                    }
                }
            }
        }
        // Nothing can run. A receive whose send no rank recorded can never go on: give it up first, so that
        // its rank reaches the collectives its fellow members wait in (letting one go before would report
        // members missing that only waited behind the lost message). Then let the fullest waiting collective
        // go incomplete, or give up on a receive.
        if let Some(r) = (0..n).find(|&q| {
            matches!(&blocked_on[q], Some(k @ Key::Message(..)) if !sends.contains(k))
                && pos[q] < run.ranks[q].events.len()
        }) {
            give_up_receive(r, &mut pos, &mut clock, &mut blocked_on, &mut out, &mut taint, &visit);
            ready.push_back(r);
            continue;
        }
        let stuck = waiting
            .iter()
            .max_by_key(|(k, (m, _))| (m.len(), std::cmp::Reverse((*k).clone())))
            .map(|(k, _)| k.clone());
        if let Some(key) = stuck {
            let (members, expected) = waiting.remove(&key).expect("just found");
            if let Key::Collective(comm, seq) = &key {
                let (r0, i0) = (members[0], pos[members[0]]);
                let op = run.ranks[r0].events[i0].call().map_or(CollectiveOp::Barrier, |c| c.op);
                let mut arrived: Vec<u32> = members.iter().map(|&m| run.ranks[m].rank).collect();
                arrived.sort_unstable();
                out.incomplete.push((comm.to_string(), *seq, op, arrived, expected as u32));
            }
            complete(
                run,
                anomalous,
                &members,
                &mut pos,
                &mut clock,
                &mut taint,
                &mut blocked_on,
                &mut out,
                &visit,
            );
            ready.extend(members);
            continue;
        }
        let Some(r) = (0..n).find(|&q| blocked_on[q].is_some() && pos[q] < run.ranks[q].events.len()) else {
            break;
        };
        give_up_receive(r, &mut pos, &mut clock, &mut blocked_on, &mut out, &mut taint, &visit);
        ready.push_back(r);
    }
    out
}

/// Rank `r` goes past the receive it is blocked on, reported as unmatched.
fn give_up_receive(
    r: usize,
    pos: &mut [usize],
    clock: &mut [u64],
    blocked_on: &mut [Option<Key>],
    out: &mut Replay,
    taint: &mut [Option<Taint>],
    visit: &Visit<'_>,
) {
    let i = pos[r];
    out.unmatched_receives.push((r, i));
    clock[r] += 1;
    visit(r, i, clock[r], None, out, taint);
    pos[r] += 1;
    blocked_on[r] = None;
}

/// The input problem of a receive whose send never came: the message's number among those between the
/// two ranks on its communicator (what the origin lines say, `message #k`), not the event's position in
/// the rank's order, and its step; where only its send could tell the step (it came between the ops of two
/// steps, `events::unsent_receives_between_steps`), the two steps the ops around it are at.
pub fn unmatched_receive<E: ProgramEvent>(run: &RunEvents<E>, (r, i): EventRef) -> String {
    let rank = &run.ranks[r];
    let e = &rank.events[i];
    let message = match e.call() {
        Some(c) => {
            let from = c.peer.map(|p| format!(" from communicator rank {p}")).unwrap_or_default();
            format!(" message #{}{from} on {}", c.seq, c.comm)
        }
        None => String::new(),
    };
    let op_step = |e: &E| e.call().is_none().then_some(e.step());
    let before = rank.events[..i].iter().rev().find_map(op_step);
    let after = rank.events[i + 1..].iter().find_map(op_step);
    match (e.step(), before, after) {
        (UNKNOWN_STEP, Some(a), Some(b)) if a != b => format!(
            "rank {} between step {a} and step {b}: {}{message} has no matching send (the send's step would \
             say which)",
            rank.rank,
            e.name()
        ),
        // Ops around it left out (a --step selection): where it came is all there is to say.
        (UNKNOWN_STEP, None, Some(b)) => format!(
            "rank {} step unknown (before step {b}'s ops): {}{message} has no matching send",
            rank.rank,
            e.name()
        ),
        (UNKNOWN_STEP, Some(a), None) => format!(
            "rank {} step unknown (after step {a}'s ops): {}{message} has no matching send",
            rank.rank,
            e.name()
        ),
        _ => {
            format!("rank {} {}: {}{message} has no matching send", rank.rank, step_words(e.step()), e.name())
        }
    }
}

/// Records one event: (rank, event, Lamport time, taint carried in, the replay, every rank's taint).
type Visit<'a> = dyn Fn(usize, usize, u64, Option<Taint>, &mut Replay, &mut [Option<Taint>]) + 'a;

/// Completes one collective: every member at its current event gets the same Lamport time and the
/// earliest taint any member carried in (a broadcast's: the root's). Where none carried one in, a member
/// whose buffer is anomalous brought it; with none, a call anomalous on several members began on all of them.
#[allow(clippy::too_many_arguments)]
fn complete<E: ProgramEvent>(
    run: &RunEvents<E>,
    anomalous: &dyn Fn(EventRef) -> bool,
    members: &[usize],
    pos: &mut [usize],
    clock: &mut [u64],
    taint: &mut [Option<Taint>],
    blocked_on: &mut [Option<Key>],
    out: &mut Replay,
    visit: &Visit<'_>,
) {
    let t = members.iter().map(|&m| clock[m]).max().unwrap_or(0) + 1;
    let event = |m: usize| &run.ranks[m].events[pos[m]];
    let root = members.iter().copied().find(|&m| {
        event(m).call().is_some_and(|c| c.op == CollectiveOp::Broadcast && c.peer == Some(c.comm_rank))
    });
    let carriers: Vec<usize> = match root {
        Some(root) => vec![root],
        None => members.to_vec(),
    };
    // The earliest carried-in anomaly: the lowest (rank, event) of the origins among the carriers.
    let mut carried = carriers.iter().filter_map(|&m| taint[m].clone()).min_by_key(|t| t.origin);
    // Nothing anomalous came in through the replay. A member whose own buffer was anomalous brought it in (its
    // ops before the call were not dumped): it began there, each such member, and the others had it through
    // the collective. Else a call anomalous on several members is the collective's own result (an all-reduce
    // of finite inputs whose sum overflows), one for all of them: it began on each, named by the lowest.
    let (mut brought, mut began_here) = (Vec::new(), Vec::new());
    if carried.is_none() {
        let mut fresh: Vec<usize> =
            members.iter().copied().filter(|&m| taint[m].is_none() && anomalous((m, pos[m]))).collect();
        fresh.sort_unstable();
        let input_anomalous = |m: usize| run.input_anomalous((m, pos[m]));
        brought = fresh.iter().copied().filter(|&m| carriers.contains(&m) && input_anomalous(m)).collect();
        if let Some(&b) = brought.first() {
            carried = Some(Taint { origin: (b, pos[b]), via: None });
        } else if fresh.len() > 1 {
            let first = (fresh[0], pos[fresh[0]]);
            out.origins.push(first);
            out.began_with.insert(first, fresh[1..].iter().map(|&m| (m, pos[m])).collect());
            carried = Some(Taint { origin: first, via: None });
            began_here = fresh;
        }
    }
    for &m in members {
        let i = pos[m];
        clock[m] = t;
        // Members that brought an anomaly in are origins of their own (`visit` makes them so).
        let incoming = match (brought.contains(&m), began_here.contains(&m)) {
            (true, _) => None,
            (false, true) => carried.clone(),
            (false, false) => carried.clone().map(|c| Taint { via: Some((m, i)), ..c }),
        };
        visit(m, i, t, incoming, out, taint);
        pos[m] += 1;
        blocked_on[m] = None;
    }
    debug_assert!(members.iter().all(|&m| run.ranks[m].events[pos[m] - 1].call().is_some()));
}

#[cfg(test)]
mod tests {
    use super::super::events::{CollectiveMeta, Event, EventKind, RankEvents, TensorSummary};
    use super::*;
    use crate::index::Io;

    fn op(name: &str) -> Event {
        Event {
            step: 0,
            time_us: None,
            kind: EventKind::Op { name: name.into(), op_type: "X".into() },
            tensors: vec![],
        }
    }

    fn call(op: CollectiveOp, seq: u64, rank: u32, peer: Option<u32>) -> Event {
        let meta = CollectiveMeta { comm: "c".into(), seq, op, peer, comm_rank: rank, comm_size: 3 };
        Event { step: 0, time_us: None, kind: EventKind::Collective(meta), tensors: vec![] }
    }

    fn run(ranks: Vec<Vec<Event>>) -> RunEvents {
        RunEvents {
            ranks: ranks
                .into_iter()
                .enumerate()
                .map(|(r, events)| RankEvents { rank: r as u32, events })
                .collect(),
            ..RunEvents::default()
        }
    }

    #[test]
    fn an_anomaly_spreads_through_a_collective_and_only_its_source_is_an_origin() {
        let ar = |r| call(CollectiveOp::AllReduce, 0, r, None);
        let job = run(vec![
            vec![op("a"), ar(0), op("b")],
            vec![op("a"), ar(1), op("b")],
            vec![op("x"), ar(2), op("b")],
        ]);
        // x on rank 2 is anomalous, and so is everything after the all-reduce everywhere.
        let bad = |(r, i): EventRef| (r == 2 && i == 0) || i >= 1;
        let replay = replay(&job, &bad);
        assert_eq!(replay.origins, [(2, 0)]);
        assert_eq!(replay.reached[0], Some((1, Taint { origin: (2, 0), via: Some((0, 1)) })));
        assert_eq!(replay.lamport[0][1], replay.lamport[2][1], "members of a collective meet");
        assert!(replay.lamport[0][2] > replay.lamport[2][0]);
        assert!(replay.incomplete.is_empty());
    }

    /// Rank `r`'s all-reduce #0 of a 3-rank communicator, its send buffer holding `input_nan` NaN.
    fn all_reduce(r: u32, input_nan: u64) -> Event {
        let mut e = call(CollectiveOp::AllReduce, 0, r, None);
        e.tensors.push(TensorSummary { nan: input_nan, ..TensorSummary::zeros(Io::Input, 4, None) });
        e
    }

    #[test]
    fn a_collective_anomalous_on_every_member_with_nothing_before_it_began_on_all_of_them() {
        let job = run((0..3).map(|r| vec![op("a"), all_reduce(r, 0), op("b")]).collect());
        // Every member's all-reduce output overflows from finite inputs; nothing before it is anomalous.
        let replay = replay(&job, &|(_, i): EventRef| i == 1);
        assert_eq!(replay.origins, [(0, 1)], "one origin, not one per member");
        assert_eq!(replay.began_with[&(0, 1)], [(1, 1), (2, 1)]);
        for r in 0..3 {
            assert_eq!(replay.reached[r], Some((1, Taint { origin: (0, 1), via: None })), "rank {r}");
        }
    }

    #[test]
    fn a_member_whose_buffer_was_anomalous_brought_the_anomaly_into_the_collective() {
        // Rank 1's ops before the all-reduce were not dumped: its send buffer is NaN already.
        let job = run((0..3).map(|r| vec![op("a"), all_reduce(r, u64::from(r == 1)), op("b")]).collect());
        let replay = replay(&job, &|(_, i): EventRef| i == 1);
        assert_eq!(replay.origins, [(1, 1)]);
        assert!(replay.began_with.is_empty());
        assert_eq!(replay.reached[1], Some((1, Taint { origin: (1, 1), via: None })));
        assert_eq!(replay.reached[0], Some((1, Taint { origin: (1, 1), via: Some((0, 1)) })));
    }

    #[test]
    fn concurrent_anomalies_are_separate_origins_and_sends_order_receives() {
        let job = run(vec![
            vec![op("a"), call(CollectiveOp::Send, 0, 0, Some(1))],
            vec![call(CollectiveOp::Recv, 0, 1, Some(0)), op("b")],
            vec![op("c")],
        ]);
        // Rank 0's a is anomalous; so are rank 1's receive (inherited) and rank 2's c (its own).
        let bad = |at: EventRef| matches!(at, (0, 0) | (1, 0) | (1, 1) | (2, 0));
        let replay = replay(&job, &bad);
        let mut origins = replay.origins.clone();
        origins.sort();
        assert_eq!(origins, [(0, 0), (2, 0)]);
        assert!(replay.lamport[1][0] > replay.lamport[0][1], "the receive comes after the send");
    }

    #[test]
    fn a_receive_without_its_send_is_named_by_its_message_number_and_step() {
        // Rank 1 receives two messages from rank 0, which sent only the first; the unmatched receive is
        // rank 1's third event but the second message (#1) from rank 0.
        let mut second = call(CollectiveOp::Recv, 1, 1, Some(0));
        second.step = 4;
        let job = run(vec![
            vec![call(CollectiveOp::Send, 0, 0, Some(1))],
            vec![op("a"), call(CollectiveOp::Recv, 0, 1, Some(0)), second],
        ]);
        let replay = replay(&job, &|_| false);
        assert_eq!(replay.unmatched_receives, [(1, 2)]);
        assert_eq!(
            unmatched_receive(&job, replay.unmatched_receives[0]),
            "rank 1 step 4: HcclRecv message #1 from communicator rank 0 on c has no matching send"
        );
    }

    #[test]
    fn a_receive_without_its_send_between_two_steps_names_both() {
        // Rank 1 received message #1 after step 0's ops and before step 1's; rank 0's send of it is lost, so
        // its step is unknown (events::unsent_receives_between_steps), and the line says where it came.
        let (mut between, mut a, mut b) = (call(CollectiveOp::Recv, 1, 1, Some(0)), op("a"), op("b"));
        between.step = UNKNOWN_STEP;
        (a.step, b.step) = (0, 1);
        let job = run(vec![vec![op("x")], vec![a, between, b]]);
        let replayed = replay(&job, &|_| false);
        assert_eq!(
            unmatched_receive(&job, replayed.unmatched_receives[0]),
            "rank 1 between step 0 and step 1: HcclRecv message #1 from communicator rank 0 on c has no \
             matching send (the send's step would say which)"
        );
        // With step 0's ops left out (`--step 1`), only the op after it is there.
        let (mut between, mut b) = (call(CollectiveOp::Recv, 1, 1, Some(0)), op("b"));
        (between.step, b.step) = (UNKNOWN_STEP, 1);
        let job = run(vec![vec![op("x")], vec![between, b]]);
        let replayed = replay(&job, &|_| false);
        assert_eq!(
            unmatched_receive(&job, replayed.unmatched_receives[0]),
            "rank 1 step unknown (before step 1's ops): HcclRecv message #1 from communicator rank 0 on c has no \
             matching send"
        );
    }

    #[test]
    fn a_receive_whose_send_no_rank_recorded_is_given_up_before_a_collective_its_peer_waits_in() {
        // Rank 0 receives a message rank 1's lost records held, then all-reduces with rank 1, which is
        // already waiting in the all-reduce: both recorded it, so it is not incomplete.
        let ar = |r| {
            let mut e = call(CollectiveOp::AllReduce, 0, r, None);
            if let EventKind::Collective(c) = &mut e.kind {
                c.comm_size = 2;
            }
            e
        };
        let job = run(vec![vec![call(CollectiveOp::Recv, 0, 0, Some(1)), ar(0)], vec![ar(1)]]);
        let replay = replay(&job, &|_| false);
        assert_eq!(replay.unmatched_receives, [(0, 0)]);
        assert!(replay.incomplete.is_empty(), "{:?}", replay.incomplete);
        assert_eq!(replay.lamport[0][1], replay.lamport[1][0], "the members met");
    }

    /// Ops left out of a thinned run tick their rank's clock as the whole run's did: the kept events get the
    /// whole run's Lamport times, a receive that waited for its send counted once.
    #[test]
    fn a_thinned_replay_gives_the_kept_events_the_whole_runs_lamport_times() {
        let ar = |r| call(CollectiveOp::AllReduce, 0, r, None);
        let (recv, send) = (call(CollectiveOp::Recv, 0, 0, Some(1)), call(CollectiveOp::Send, 0, 1, Some(0)));
        // Rank 0 reaches its receive before rank 1 sends, and waits there.
        let mut receiver: Vec<Event> = ["a", "b", "c", "d", "e", "f"].map(op).into();
        receiver.extend([recv.clone(), op("g"), ar(0)]);
        let whole = run(vec![receiver, vec![op("a"), send.clone(), ar(1)], vec![ar(2)]]);
        let full = replay(&whole, &|_| false);
        let thin = run(vec![vec![recv, ar(0)], vec![send, ar(1)], vec![ar(2)]]);
        let skipped = |at: EventRef| match at {
            (0, 0) => 6,
            (0, 1) | (1, 0) => 1,
            _ => 0,
        };
        let thinned = replay_thinned(&thin, &|_| false, &skipped);
        assert_eq!(thinned.lamport[0], [full.lamport[0][6], full.lamport[0][8]]);
        assert_eq!(thinned.lamport[1], [full.lamport[1][1], full.lamport[1][2]]);
        assert_eq!(full.lamport[0][6], 7, "the receive comes after its rank's six ops");
    }

    #[test]
    fn a_collective_with_a_missing_member_is_let_go_and_reported() {
        let ar = |r| call(CollectiveOp::AllReduce, 0, r, None);
        // Rank 2's capture has no all-reduce: ranks 0 and 1 wait for it until nothing else can run.
        let job = run(vec![vec![ar(0), op("a")], vec![ar(1), op("a")], vec![op("b")]]);
        let replay = replay(&job, &|_| false);
        assert_eq!(replay.incomplete.len(), 1);
        assert_eq!(replay.incomplete[0].3, [0, 1]);
        assert!(replay.lamport.iter().flatten().all(|&t| t > 0), "every event was visited");
    }
}
