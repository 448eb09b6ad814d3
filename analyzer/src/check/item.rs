//! What every checklist item is made of: its answer, and the runs as the items see them.

use crate::filter::Filter;
use crate::index::{OpId, TensorId};
use crate::overflow::LossScale;
use crate::roles::Roles;
use crate::sources::Source;
use accutrace_formats::capture::Manifest;
use serde::Serialize;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

/// An item's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pass,
    Fail,
    CantTell,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "FAIL",
            Status::CantTell => "can't tell",
        }
    }
}

/// One checklist item.
#[derive(Clone, Debug, Serialize)]
pub struct Item {
    /// `determinism`, `data`, `initial_weights`, `mixed_precision`, `loss_scale`, `configuration`.
    pub name: &'static str,
    pub status: Status,
    /// Why, in one sentence.
    pub reason: String,
    /// Where to look next.
    pub look_at: String,
    /// What was found, line by line.
    pub details: Vec<String>,
    /// The item passed on the data that was read, but input problems lead the report (what is missing or
    /// unreadable), so the pass is no all-clear: `check` then answers `cant_tell`, and a script can tell
    /// this from an item the runs cannot decide at all.
    pub passed_on_what_was_read: bool,
}

impl Item {
    pub(crate) fn new(
        name: &'static str,
        status: Status,
        reason: impl Into<String>,
        look_at: impl Into<String>,
    ) -> Item {
        Item {
            name,
            status,
            reason: reason.into(),
            look_at: look_at.into(),
            details: Vec::new(),
            passed_on_what_was_read: false,
        }
    }

    pub(crate) fn with(mut self, details: Vec<String>) -> Item {
        self.details = details;
        self
    }
}

/// One run as the items see it: its ops (filtered), their roles, and its manifest.
pub(crate) struct Seen<'a> {
    pub source: &'a dyn Source,
    pub manifest: Option<&'a Manifest>,
    pub ops: Vec<OpId>,
    pub roles: Roles,
    /// `run 1` / `run 2` (or the path when there is one run).
    pub label: String,
    /// Tensors the items could not read (input problems, so no item passes on what is missing).
    pub unreadable: RefCell<Vec<(TensorId, anyhow::Error)>>,
}

impl<'a> Seen<'a> {
    /// `source`'s ops that `filter` keeps.
    pub fn of(
        source: &'a dyn Source,
        manifest: Option<&'a Manifest>,
        filter: &Filter,
        label: String,
    ) -> Seen<'a> {
        Seen {
            source,
            manifest,
            ops: filter.op_ids(source.index()),
            roles: Roles::of(source.index()),
            label,
            unreadable: Default::default(),
        }
    }

    pub fn index(&self) -> &crate::index::Index {
        self.source.index()
    }

    /// The tensor's content hash (stored, else computed from its data); an unreadable one is noted.
    pub fn hash(&self, t: TensorId) -> Option<u64> {
        self.hash_or_why(t).ok()
    }

    /// [`Seen::hash`], with why an unreadable tensor could not be read (the error names its file).
    pub fn hash_or_why(&self, t: TensorId) -> Result<u64, String> {
        if let Some(h) = self.index().tensors[t].hash() {
            return Ok(h);
        }
        self.source.content_hash(t).map_err(|e| {
            let why = format!("{e:#}");
            self.unreadable.borrow_mut().push((t, e));
            why
        })
    }

    /// The tensor's values; an unreadable one is noted.
    pub fn values(&self, t: TensorId) -> Option<Vec<f32>> {
        let mut v = Vec::new();
        match self.source.read_values(t, &mut v) {
            Ok(()) => Some(v),
            Err(e) => {
                self.unreadable.borrow_mut().push((t, e));
                None
            }
        }
    }
}

/// The worst of several statuses: fail, then can't tell, then pass.
pub(crate) fn worst(statuses: impl IntoIterator<Item = Status>) -> Status {
    statuses.into_iter().fold(Status::Pass, |a, b| match (a, b) {
        (Status::Fail, _) | (_, Status::Fail) => Status::Fail,
        (Status::CantTell, _) | (_, Status::CantTell) => Status::CantTell,
        _ => Status::Pass,
    })
}

/// Up to `n` items of a list, then "... and k more".
pub(crate) fn listed(items: &[String], n: usize) -> Vec<String> {
    let mut out: Vec<String> = items.iter().take(n).cloned().collect();
    if items.len() > n {
        out.push(format!("... and {} more", items.len() - n));
    }
    out
}

/// One run as the items judge it, gathered from the run read whole or a window of steps at a time (`fold`).
pub(crate) struct Facts<'a> {
    /// `run 1` / `run 2` (or `the run`).
    pub label: String,
    pub manifest: Option<&'a Manifest>,
    /// The ranks of the run's ops.
    pub ranks: BTreeSet<u32>,
    pub signatures: Signatures,
    pub weights: Firsts,
    pub census: Census,
    pub scales: Scales,
}

/// The hashes of each (rank, step)'s data inputs, in execution order (`data`).
pub(crate) type Signatures = BTreeMap<(u32, u64), Vec<u64>>;

/// Op type -> dtype -> number of ops (`precision`).
pub(crate) type Census = BTreeMap<String, BTreeMap<String, u64>>;

/// What a run's first updates read (`weights`).
#[derive(Default)]
pub(crate) struct Firsts {
    /// The first step of the run's ops.
    pub start: Option<u64>,
    /// Each (rank, parameter)'s first update.
    pub first: BTreeMap<(u32, String), First>,
}

/// A parameter's first update: its step, op, and the weight's content hash or why it was not read.
pub(crate) struct First {
    pub step: u64,
    pub op: String,
    pub read: Result<u64, String>,
}

/// What a run shows of its loss scale (`loss_scale`).
#[derive(Default)]
pub(crate) struct Scales {
    /// Per rank, per captured step: whether an optimizer op ran.
    pub updates: BTreeMap<u32, BTreeMap<u64, bool>>,
    /// The scales found by name and by a scaler's multiply: the run's are those by name if any part names
    /// one (the rule `overflow` applies to the whole run).
    pub named: Vec<LossScale>,
    pub multiplied: Vec<LossScale>,
    /// Whether any op computes in fp16.
    pub fp16: bool,
}
