//! Whether two runs are one configuration, `diff`'s precondition: settings, op sequences, dtypes and
//! shapes, per step and rank both runs hold; folded part by part so that runs read in windows of steps are
//! judged as the whole runs are.

use crate::filter::Filter;
use crate::index::{Index, Io, OpId};
use crate::problems::ProblemKind;
use crate::sources::Source;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// One way in which two runs are not the same configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigurationDifference {
    /// `settings`, `op sequence`, `precision` or `shapes`.
    pub aspect: &'static str,
    /// How many ops or tensors differ in this aspect.
    pub count: usize,
    /// The first one, in words, with where it is.
    pub first: String,
    /// For the op sequence: the first and last of the steps both runs hold before the first step whose ops
    /// differ, where there are any (their ops are alike, so `--step FIRST-LAST` keeps to them).
    pub steps_alike: Option<(u64, u64)>,
}

/// The ops of one rank and step, in execution order; an FFTS+ sub-task's copy of an op is not an op of its
/// own ([`Index::sub_task_copies`]: two runs dumped at different `dump_level`s launched the same kernels).
pub(super) fn by_step(index: &Index, filter: &Filter) -> BTreeMap<(u32, u64), Vec<OpId>> {
    let copies = index.sub_task_copies();
    let mut groups: BTreeMap<(u32, u64), Vec<OpId>> = BTreeMap::new();
    for o in filter.op_ids(index).into_iter().filter(|o| !copies.contains_key(o)) {
        groups.entry((index.ops[o].rank, index.ops[o].step)).or_default().push(o);
    }
    groups
}

/// Whether every item of `short` is in `long`, in the same order.
pub(super) fn is_subsequence<T: PartialEq>(short: &[T], long: &[T]) -> bool {
    let mut rest = long.iter();
    short.iter().all(|x| rest.any(|y| y == x))
}

/// (name, type) of each op, in order.
pub(super) fn sequence<'a>(index: &'a Index, ops: &[OpId]) -> Vec<(&'a str, &'a str)> {
    ops.iter().map(|&o| (index.ops[o].name.as_str(), index.ops[o].op_type.as_str())).collect()
}

/// What differs between two runs that should be one configuration, aspect by aspect (empty: nothing
/// found). Only steps and ranks both runs have are looked at, and a step one run holds only the start or
/// the end of is no difference, nor one with ops missing inside it when a run lost records: a run that
/// dumped less is not another configuration. Settings are compared where both runs recorded them.
pub fn configuration_differences(a: &Index, b: &Index, filter: &Filter) -> Vec<ConfigurationDifference> {
    let mut fold = ConfigurationFold::default();
    fold.add(a, b, filter);
    let lost = |i: &Index| i.problems.iter().any(|p| p.kind == ProblemKind::Incomplete);
    fold.finish(lost(a) || lost(b))
}

/// [`configuration_differences`] of two runs read in parts (windows of the same steps of each, added in
/// step order): each aspect's count and its first difference (at the lowest rank, then step), the steps
/// both runs hold, the first step whose ops differ. Whether a run lost records is known only once every
/// part is read, so the op sequences are judged both ways until [`ConfigurationFold::finish`] is told.
#[derive(Default)]
pub struct ConfigurationFold {
    settings: Option<Vec<String>>,
    dtypes: Tally,
    shapes: Tally,
    /// Op sequences that differ where a run that lost records may miss ops inside a step, and where not.
    sequences: [Tally; 2],
    /// The first step whose ops differ, both ways.
    first_sequence_step: [Option<u64>; 2],
    common_steps: BTreeSet<u64>,
}

/// How many things differ in one aspect, and the first: at the lowest (rank, step), the first found there.
#[derive(Default)]
struct Tally {
    count: usize,
    first: Option<((u32, u64), String)>,
}

impl Tally {
    fn add(&mut self, place: (u32, u64), text: impl FnOnce() -> String) {
        self.count += 1;
        if self.first.as_ref().is_none_or(|(at, _)| place < *at) {
            self.first = Some((place, text()));
        }
    }
}

/// The `sequences` and `first_sequence_step` of a fold judged as runs without lost records.
const WHOLE: usize = 0;
/// ... and as runs that lost records (a step's ops missing inside it are no difference then).
const HOLED: usize = 1;

impl ConfigurationFold {
    /// Adds a part of each run: the same steps of both.
    pub fn add(&mut self, a: &Index, b: &Index, filter: &Filter) {
        if self.settings.is_none() {
            self.settings = Some(setting_differences(a, b));
        }
        let (groups_a, groups_b) = (by_step(a, filter), by_step(b, filter));
        for (key @ &(rank, step), ops_a) in &groups_a {
            let Some(ops_b) = groups_b.get(key) else { continue };
            self.common_steps.insert(step);
            let place = || format!("step {step} rank {rank}");
            let (seq_a, seq_b) = (sequence(a, ops_a), sequence(b, ops_b));
            // A step one run holds only the start or the end of (a ring that deleted old segments, a capture
            // cut short) is not another configuration: its ops are those of the other run. A run that lost
            // records (a missing segment, a dump file it could not read) may miss ops anywhere in a step:
            // what it kept is still the other run's ops, in their order.
            let (short, long) = if seq_a.len() <= seq_b.len() { (&seq_a, &seq_b) } else { (&seq_b, &seq_a) };
            let cut_short = long.starts_with(short) || long.ends_with(short);
            let with_holes = cut_short || is_subsequence(short, long);
            let parting = (0..seq_a.len().max(seq_b.len())).find(|&i| seq_a.get(i) != seq_b.get(i));
            for (way, cut) in [(WHOLE, cut_short), (HOLED, with_holes)] {
                let Some(i) = parting.filter(|_| !cut) else { continue };
                let show = |s: Option<(&str, &str)>| {
                    s.map_or("nothing (the step ends)".into(), |(n, t)| format!("{n} [{t}]"))
                };
                let first = &mut self.first_sequence_step[way];
                *first = Some(first.map_or(step, |f| f.min(step)));
                self.sequences[way].add((rank, step), || {
                    format!(
                        "{}: op {} is {} in run 1 and {} in run 2",
                        place(),
                        i + 1,
                        show(seq_a.get(i).copied()),
                        show(seq_b.get(i).copied())
                    )
                });
            }
            // Tensors of the ops both runs have, by name (the first op of a name): precision and shapes.
            let named_b: HashMap<&str, OpId> =
                ops_b.iter().rev().map(|&o| (b.ops[o].name.as_str(), o)).collect();
            for &oa in ops_a {
                let Some(&ob) = named_b.get(a.ops[oa].name.as_str()) else { continue };
                let tensors_b: HashMap<(Io, u32), usize> =
                    b.ops[ob].tensors().map(|t| ((b.tensors[t].io, b.tensors[t].index), t)).collect();
                for ta in a.ops[oa].tensors() {
                    let x = &a.tensors[ta];
                    let Some(&tb) = tensors_b.get(&(x.io, x.index)) else { continue };
                    let y = &b.tensors[tb];
                    let label = || a.tensor_label(ta);
                    if x.dtype != y.dtype {
                        self.dtypes.add((rank, step), || {
                            format!(
                                "{} is {} in run 1 and {} in run 2 ({})",
                                label(),
                                x.dtype,
                                y.dtype,
                                place()
                            )
                        });
                    } else if x.shape != y.shape {
                        self.shapes.add((rank, step), || {
                            format!(
                                "{} is {:?} in run 1 and {:?} in run 2 ({})",
                                label(),
                                x.shape,
                                y.shape,
                                place()
                            )
                        });
                    }
                }
            }
        }
    }

    /// Whether the runs are certainly not one configuration, whatever the parts not added yet hold and
    /// whether a run lost records: what is still to be read need not be measured.
    pub fn certain(&self) -> bool {
        self.settings.as_ref().is_some_and(|s| !s.is_empty())
            || self.dtypes.count > 0
            || self.shapes.count > 0
            || self.sequences[HOLED].count > 0
    }

    /// What differs, once every part is in; `lost_records`: whether either run lost records anywhere.
    pub fn finish(self, lost_records: bool) -> Vec<ConfigurationDifference> {
        let way = if lost_records { HOLED } else { WHOLE };
        let [whole, holed] = self.sequences;
        let sequences = if lost_records { holed } else { whole };
        let steps_alike = self.first_sequence_step[way].and_then(|first| {
            let mut alike = self.common_steps.range(..first).copied();
            let earliest = alike.next()?;
            Some((earliest, alike.next_back().unwrap_or(earliest)))
        });
        let mut found = Vec::new();
        let settings = self.settings.unwrap_or_default();
        if let Some(first) = settings.first() {
            found.push(ConfigurationDifference {
                aspect: "settings",
                count: settings.len(),
                first: first.clone(),
                steps_alike: None,
            });
        }
        for (aspect, tally) in
            [("precision", self.dtypes), ("shapes", self.shapes), ("op sequence", sequences)]
        {
            let Some((_, first)) = tally.first else { continue };
            let steps_alike = if aspect == "op sequence" { steps_alike } else { None };
            found.push(ConfigurationDifference { aspect, count: tally.count, first, steps_alike });
        }
        found
    }
}

/// The settings that change results (recorded by both runs) where the runs differ, in words.
fn setting_differences(a: &Index, b: &Index) -> Vec<String> {
    let mut settings = Vec::new();
    if let (Some(sa), Some(sb)) = (&a.settings, &b.settings) {
        let keys: BTreeSet<&String> = sa.keys().chain(sb.keys()).collect();
        for key in keys {
            let (x, y) = (sa.get(key), sb.get(key));
            if x != y {
                let show = |v: Option<&String>| v.map_or("unset".to_string(), |v| format!("{v:?}"));
                settings.push(format!("{key} is {} in run 1 and {} in run 2", show(x), show(y)));
            }
        }
    }
    settings
}

/// Where the runs differ in their op sequence alone (another aspect makes every step incomparable), from
/// some step on: the steps before it, which hold the same ops in both runs, and the `--step` that keeps to
/// them (a run whose ops change late, e.g. once a loss scale reaches 1, is still diffed up to there).
pub fn steps_alike_hint(differences: &[ConfigurationDifference]) -> Option<String> {
    let [only] = differences else { return None };
    let (first, last) = only.steps_alike.filter(|_| only.aspect == "op sequence")?;
    Some(match first == last {
        true => format!("step {first} holds the same ops in both runs: `--step {first}` keeps to it"),
        false => format!(
            "steps {first}-{last} hold the same ops in both runs: `--step {first}-{last}` keeps to them"
        ),
    })
}

/// The refusal `diff` gives when the runs are not one configuration, naming what differs and where.
pub fn not_one_configuration(
    run1: &dyn Source,
    run2: &dyn Source,
    differences: &[ConfigurationDifference],
) -> String {
    not_one_configuration_at(run1.root(), run2.root(), differences)
}

/// [`not_one_configuration`] of the runs at `run1` and `run2`.
pub fn not_one_configuration_at(run1: &Path, run2: &Path, differences: &[ConfigurationDifference]) -> String {
    let mut text = format!(
        "{} and {} are not the same configuration, so `diff` cannot tell nondeterminism from the change:",
        run1.display(),
        run2.display()
    );
    for d in differences {
        let unit = match d.aspect {
            "settings" => "",
            "op sequence" => " steps",
            _ => " tensors",
        };
        let many = if d.count > 1 { format!("{}{unit} differ; first: ", d.count) } else { String::new() };
        text.push_str(&format!("\n  {}: {many}{}", d.aspect, d.first));
    }
    if let Some(hint) = steps_alike_hint(differences) {
        text.push_str(&format!("\n  {hint}"));
    }
    let what = match differences.first().map(|d| d.aspect) {
        Some("precision") => "precision",
        Some("shapes") => "shapes (another model, batch or sequence length)",
        Some("op sequence") => {
            "their ops (fusion, another model or framework version, or files lost from a dump copied in part)"
        }
        _ => "their settings",
    };
    text.push_str(&format!(
        "\nthese runs differ in {what}: compare them with `analyzer compare {} {}`",
        run1.display(),
        run2.display()
    ));
    text
}
