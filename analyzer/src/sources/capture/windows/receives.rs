//! Where the census of a pipeline's capture places its sends and receives (#18), so that each window's
//! index gives every call the step the whole read does.
//!
//! A receive belongs to the step of its send where that is later than its own (the step of the op
//! before it on its rank), and without its send in the data, one made between two steps' ops belongs to
//! none ([`received_at`]): its send lies in another rank's stream, so the census places receives once it
//! has read every stream. A window then reads a receive at that step (its span widened to hold the
//! record), where the window's own index finds the send and gives the same step. What a window's index
//! cannot tell alone ties steps into one window: a receive of an earlier step's send (the send and the
//! receive are one call's members, read together), a receive at a step its rank holds no op of, and a
//! receive without its send between two steps' ops (which `diff` pairs at the step of the next call with
//! one, else of the call before) but where the next call is at the step after it: that step's window reads
//! it then, where the other run holds the step too ([`StepWindows::align`](super::StepWindows::align)).

use super::census::{Link, StreamSteps};
use crate::index::received_at;
use std::collections::HashMap;

/// Places every stream's calls in steps (each stream's `step_calls`), receives as the whole read does,
/// and notes the receives a window reads at another step and the steps one window must hold. `false`
/// where the census cannot: a rank with sends or receives but no op, or calls it could not pack.
pub(super) fn place_calls(streams: &mut [StreamSteps]) -> bool {
    let mut sends: HashMap<Link, Option<u64>> = HashMap::new();
    for s in streams.iter() {
        if s.steps.is_empty() && !s.point_to_point.is_empty() {
            return false;
        }
        for p in s.point_to_point.iter().filter(|p| !p.receive) {
            sends.insert(p.link, s.step_of_call(p.start_us));
        }
    }
    streams.iter_mut().all(|s| place_stream(s, &sends))
}

/// [`place_calls`] of one stream, `sends` holding every send's step.
fn place_stream(s: &mut StreamSteps, sends: &HashMap<Link, Option<u64>>) -> bool {
    let Some(calls) = s.kept_calls.take() else { return true };
    let point_to_point = std::mem::take(&mut s.point_to_point);
    let Some(starts) = calls.starts() else { return point_to_point.is_empty() };
    let mut steps: Vec<Option<u64>> = starts.map(|start_us| s.step_of_call(start_us)).collect();
    let receives = || point_to_point.iter().filter(|p| p.receive);
    for p in receives() {
        let around = s.steps_around(p.start_us);
        let send = sends.get(&p.link).copied();
        let own = steps[p.call];
        let whole = received_at(own, around.is_some(), send);
        steps[p.call] = whole;
        match (own, whole) {
            (Some(own), Some(sent_at)) if sent_at > own => {
                s.moved.push((p.at, sent_at));
                if let Some(span) = s.steps.get_mut(&sent_at) {
                    span.widen((p.at.0, p.from), p.at);
                } else {
                    // No op of its rank at that step: the window's index finds the op before it.
                    s.ties.push((own, sent_at));
                }
            }
            // A send of an earlier step: the call's two members are read in one window.
            (Some(own), Some(_)) => {
                if let Some(sent_at) = send.flatten().filter(|&sent_at| sent_at < own) {
                    s.ties.push((sent_at, own));
                }
            }
            _ => {}
        }
    }
    // A receive without its send between two steps' ops, which `diff` pairs at the step of the next call
    // with one, else of the call before: where that is the step after it, its window reads it there (the
    // window's index, without the op before it, gives it that step); else one window holds them all.
    let mut paired_at = Vec::new();
    for p in receives().filter(|p| steps[p.call].is_none()) {
        let Some((before, next)) = s.steps_around(p.start_us) else { continue };
        let later = steps[p.call + 1..].iter().flatten().next().copied();
        let earlier = steps[..p.call].iter().rev().flatten().next().copied();
        match (later, earlier) {
            (Some(later), _) if later == next => {
                s.moved.push((p.at, next));
                if let Some(span) = s.steps.get_mut(&next) {
                    span.widen((p.at.0, p.from), p.at);
                }
                paired_at.push((p.call, next));
                s.received_for.push(next);
            }
            (Some(later), _) => s.ties.push((before, next.max(later))),
            (None, Some(earlier)) => s.ties.push((before.min(earlier), next)),
            (None, None) => s.ties.push((before, next)),
        }
    }
    for (call, step) in paired_at {
        steps[call] = Some(step);
    }
    s.moved.sort_unstable();
    s.step_calls = calls.by_step(|k, _| steps[k]);
    true
}
