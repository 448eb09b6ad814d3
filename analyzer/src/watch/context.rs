//! What the conditions share while they run: the run, the labels, what is known of each tensor, and how a
//! check's answer is written down.

use super::conditions::Condition;
use super::findings::{Finding, Place};
use super::measure::{Evidence, FromValues, Known, Measure};
use crate::index::{Index, OpId, TensorId};
use crate::roles::{self, Role, Roles};
use crate::sources::Source;
use std::collections::HashMap;
use std::sync::Mutex;

/// What the conditions share.
pub(super) struct Ctx<'a> {
    pub source: &'a dyn Source,
    pub index: &'a Index,
    pub roles: &'a Roles,
    pub known: &'a Knowns<'a>,
    pub read_tensors: bool,
    /// Tensors whose values could not be read here (input problems: in no hit and no can't tell).
    pub unreadable: Mutex<Vec<(TensorId, anyhow::Error)>>,
}

impl Ctx<'_> {
    /// The tensor's values, for the tensor tier (when the capture kept them and reading is allowed).
    pub fn values(&self, t: TensorId) -> Option<Vec<f32>> {
        if !(self.read_tensors && self.index.tensors[t].has_data) {
            return None;
        }
        let mut out = Vec::new();
        match self.source.read_values(t, &mut out) {
            Ok(()) => Some(out),
            Err(e) => {
                self.unreadable.lock().unwrap_or_else(|p| p.into_inner()).push((t, e));
                None
            }
        }
    }

    pub fn place(&self, t: Option<TensorId>, op: Option<OpId>, bounds: Option<Measure>) -> Place {
        let op = op.or(t.map(|t| self.index.tensors[t].op()));
        Place {
            step: op.map(|o| self.index.ops[o].step),
            rank: op.map(|o| self.index.ops[o].rank),
            op: op.map(|o| self.index.ops[o].name.to_string()),
            tensor: t.map(|t| self.index.tensor_label(t)),
            bounds,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn hit(
        &self,
        condition: &'static str,
        t: Option<TensorId>,
        op: Option<OpId>,
        measure: &'static str,
        value: Measure,
        threshold: String,
        evidence: Evidence,
    ) -> Event {
        let p = self.place(t, op, None);
        let op = op.or(t.map(|t| self.index.tensors[t].op()));
        Event::Hit(Finding {
            condition,
            step: p.step,
            rank: p.rank,
            op: p.op,
            op_type: op.map(|o| self.index.ops[o].op_type.to_string()),
            tensor: p.tensor,
            role: t.and_then(|t| self.roles.role(t)).map(Role::as_str),
            param: op
                .filter(|&o| roles::is_optimizer(&self.index.ops[o].op_type))
                .map(|o| roles::param_name(&self.index.ops[o].name)),
            measure,
            value,
            threshold,
            evidence,
            detail: None,
        })
    }

    pub fn cant_tell(
        &self,
        condition: &'static str,
        t: Option<TensorId>,
        op: Option<OpId>,
        bounds: Option<Measure>,
        reason: &str,
        would_decide: &'static str,
    ) -> Event {
        Event::CantTell {
            condition,
            reason: reason.to_string(),
            would_decide,
            place: self.place(t, op, bounds),
        }
    }
}

/// What one check of one condition came to.
#[derive(Clone)]
pub(super) enum Event {
    Hit(Finding),
    Decided(&'static str),
    CantTell { condition: &'static str, reason: String, would_decide: &'static str, place: Place },
}

/// The condition `name` when enabled.
pub(super) fn get<'a>(conditions: &'a [Condition], name: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.name == name && c.enabled)
}

impl Event {
    /// The condition it answers.
    pub fn condition(&self) -> &'static str {
        match self {
            Event::Hit(f) => f.condition,
            Event::Decided(c) => c,
            Event::CantTell { condition, .. } => condition,
        }
    }
}

/// What the non-overflow conditions may look at of a tensor: what is known of it ([`Knowns::get`], read once
/// by the caller for every check on it), when free of NaN/inf.
pub(super) fn finite(known: Option<Known<'_>>) -> Option<Known<'_>> {
    known.filter(|k| !k.stats.has_nonfinite())
}

/// What is known of the watched tensors: the statistics (and histogram) the index stores, read from it when
/// asked, and what was computed from the values of those that stored none. One copy of every tensor's
/// statistics in a map grew with the tensor count (#18).
pub(super) struct Knowns<'a> {
    pub index: &'a Index,
    /// The watched tensors, in ascending order: only they are known.
    pub watched: &'a [TensorId],
    /// Statistics and histograms computed from the values, of the watched tensors that stored none.
    pub computed: HashMap<TensorId, FromValues>,
}

impl Knowns<'_> {
    /// What is known of tensor `t`: `None` when it is not watched, or neither stored statistics nor had
    /// values that could be read. A capture's statistics are decoded again from its record on each call:
    /// callers ask once a tensor and hand the answer to each check on it (#18: watch's CPU).
    pub fn get(&self, t: TensorId) -> Option<Known<'_>> {
        if let Some(c) = self.computed.get(&t) {
            return Some(c.known());
        }
        let info = &self.index.tensors[t];
        // Watched first: a capture's statistics are read from its record.
        self.watched.binary_search(&t).ok()?;
        let stats = self.index.stats(t)?;
        Some(Known {
            stats,
            // Accutrace's own statistics (captures with hashes, or version 4) count zeros exactly.
            counts_exact: info.hash().is_some() || stats.abs_sum.is_some(),
            histogram: info.histogram(),
            dtype: info.dtype,
            from_values: false,
        })
    }
}
