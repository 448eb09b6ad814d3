//! Overflows that reached a rank through a collective: an HCCL call whose receive buffer holds inf/NaN (or
//! saturated values) while this rank's send buffer did not.

use super::anomaly::Anomaly;
use crate::filter::Filter;
use crate::index::Index;
use accutrace_formats::capture::CollectiveInfo;
use serde::Serialize;
use std::collections::HashMap;

/// An overflow that reached a rank through a collective: an HCCL call whose receive buffer holds inf/NaN (or
/// saturated values) while this rank's send buffer did not. No op of this rank produced it; its origin is
/// on another member of the communicator.
#[derive(Clone, Debug, Serialize)]
pub struct Arrival {
    /// `None` when the capture cannot place the call at a step (an overflow-detection capture whose rank
    /// dumped no op around it).
    pub step: Option<u64>,
    pub rank: u32,
    /// `HcclAllReduce #4`: the call and its sequence number on its communicator.
    pub call: String,
    pub comm: String,
    pub anomaly: Anomaly,
    /// Elements of the receive buffer.
    pub elements: u64,
    /// `finite inputs` when this rank's send buffer was recorded clean, `no send buffer` for a receive
    /// (or a call whose send buffer was not read).
    pub inputs: &'static str,
    /// Every member of the call's communicator, examined, recorded it with a finite send buffer: the
    /// collective's own result overflowed (an all-reduce whose sum passes the dtype's range), so it began
    /// here, on these ranks, not elsewhere. Empty otherwise.
    pub began_here_on: Vec<u32>,
}

impl Arrival {
    /// Why an overflow that every member sent finite buffers into began in the call itself.
    pub fn why_it_began_here(&self) -> String {
        format!(
            "every member's send buffer was finite ({}) and the call's own result overflowed (a reduction past \
             the dtype's range), one for all of them",
            crate::filter::rank_ranges(&self.began_here_on)
        )
    }
}

/// The collectives of `index` that `filter` keeps whose receive buffer holds inf/NaN or saturated values
/// while this rank's send buffer did not: the overflow arrived on this rank through them.
pub fn collective_arrivals(index: &Index, filter: &Filter) -> Vec<Arrival> {
    let mut found = Vec::new();
    let steps = index.collective_steps();
    let float =
        |c: &CollectiveInfo| accutrace_formats::dtype::hccl::dtype(c.dtype).is_some_and(|d| d.is_float());
    // A call whose step is unknown may be at any selected step.
    let kept = |c: &CollectiveInfo, rank: u32, step: Option<u64>| {
        filter.keeps_at(c.op.api_name(), step.unwrap_or(filter.steps.first().copied().unwrap_or(0)), rank)
    };
    // Per call (communicator, sequence): the members examined whose send buffer was recorded finite.
    let mut finite_senders: HashMap<(&str, u64), Vec<u32>> = HashMap::new();
    for (call, &step) in index.collectives.iter().zip(&steps) {
        let c = &call.info;
        if kept(c, call.rank, step)
            && c.input.as_ref().is_some_and(|i| !Anomaly::of(&i.stats, float(c)).any())
        {
            finite_senders.entry((c.comm.as_str(), c.seq)).or_default().push(call.rank);
        }
    }
    for (call, step) in index.collectives.iter().zip(steps.iter().copied()) {
        let c = &call.info;
        let Some(output) = &c.output else { continue };
        let float = float(c);
        let out = Anomaly::of(&output.stats, float);
        if !out.any() {
            continue;
        }
        if c.input.as_ref().is_some_and(|i| Anomaly::of(&i.stats, float).any()) {
            continue;
        }
        let name = c.op.api_name();
        if !kept(c, call.rank, step) {
            continue;
        }
        let mut finite = finite_senders.get(&(c.comm.as_str(), c.seq)).cloned().unwrap_or_default();
        finite.sort_unstable();
        finite.dedup();
        let every_member_finite = c.comm_size > 1 && finite.len() == c.comm_size as usize;
        found.push(Arrival {
            step,
            rank: call.rank,
            call: format!("{name} #{}", c.seq),
            comm: c.comm.clone(),
            anomaly: out,
            elements: output.stats.count,
            inputs: if c.input.is_some() { "finite inputs" } else { "no send buffer" },
            began_here_on: if every_member_finite { finite } else { Vec::new() },
        });
    }
    found.sort_by_key(|a| (a.step.is_none(), a.step, a.rank));
    found
}
