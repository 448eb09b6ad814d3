//! The runs as the checklist's items judge them, gathered from a run read whole or a window of steps at a
//! time (#18). Each item's facts are each step's own (data signatures, the loss scale by step) or add up over
//! steps (the dtype census, each weight's first update), so the windows of a long capture, added in step
//! order, give the facts of the whole run while holding one window's index at a time.

use super::item::{Facts, Seen};
use super::{data, loss_scale, precision, weights};
use accutrace_formats::capture::Manifest;
use std::collections::BTreeSet;

impl<'a> Facts<'a> {
    pub fn new(label: String, manifest: Option<&'a Manifest>) -> Facts<'a> {
        Facts {
            label,
            manifest,
            ranks: BTreeSet::new(),
            signatures: Default::default(),
            weights: Default::default(),
            census: Default::default(),
            scales: Default::default(),
        }
    }

    /// The facts of a run read whole.
    pub fn of(r: &Seen<'a>) -> Facts<'a> {
        let mut facts = Facts::new(r.label.clone(), r.manifest);
        facts.add(r);
        facts
    }

    /// Adds a part of the run: its steps come after those of the parts added before.
    pub fn add(&mut self, r: &Seen<'_>) {
        self.ranks.extend(r.index().ranks());
        self.signatures.extend(data::signatures(r));
        weights::add(r, &mut self.weights);
        precision::census(r, &mut self.census);
        loss_scale::add(r, &mut self.scales);
    }
}

/// A tensor an item could not read: its (rank, step), its label and why.
pub(crate) type Unread = ((u32, u64), String, anyhow::Error);

/// The tensors the items could not read in `r`, each once, in `r`'s order.
pub(crate) fn unread(r: &Seen<'_>) -> Vec<Unread> {
    let index = r.index();
    let mut unreadable = r.unreadable.take();
    unreadable.sort_by_key(|(t, _)| *t);
    unreadable.dedup_by_key(|(t, _)| *t);
    unreadable
        .into_iter()
        .map(|(t, e)| {
            let op = &index.ops[index.tensors[t].op()];
            ((op.rank, op.step), index.tensor_label(t), e)
        })
        .collect()
}
