//! Running the conditions: what is known of each tensor (statistics, histogram, values), then each
//! condition over the tensors, updates and steps it looks at, tallied into the report.

use super::conditions::Condition;
use super::context::Knowns;
use super::context::{Ctx, Event};
use super::findings::{CantTell, ConditionSummary, Finding, LabelCounts, WatchOptions, WatchReport};
use super::measure::FromValues;
use super::{checks, updates};
use crate::index::{OpId, TensorId};
use crate::problems::InputProblems;
use crate::progress::Progress;
use crate::roles::{Role, Roles, Update};
use crate::sources::Source;
use crate::threads::{in_flight, pairs_in_flight, release_kept_buffers, tensor_bytes, Footprint};
use accutrace_formats::stats::{HistogramAccumulator, TensorStats};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// How many places a "can't tell" group lists.
const EXAMPLES: usize = 3;

/// Runs the enabled conditions of `options` over the ops of `source` its filter keeps.
pub fn watch(source: &dyn Source, options: &WatchOptions) -> WatchReport {
    let index = source.index();
    let ops = options.filter.op_ids(index);
    let roles = Roles::of(index);
    let selected: Vec<bool> = {
        let mut keep = vec![false; index.ops.len()];
        ops.iter().for_each(|&o| keep[o] = true);
        keep
    };
    let watched: Vec<TensorId> = (0..index.tensors.len())
        .filter(|&t| selected[index.tensors[t].op()] && roles.role(t).is_some())
        .collect();
    let mut problems = InputProblems::of_sources(&[source]);
    let known = Knowns {
        index,
        watched: &watched,
        computed: gather(source, &watched, &mut problems, options.progress),
    };
    let ctx = Ctx {
        source,
        index,
        roles: &roles,
        known: &known,
        read_tensors: options.read_tensors,
        unreadable: Mutex::new(Vec::new()),
    };
    let mut tally = Tally::new(&options.conditions);
    tally.labels = label_counts(&roles, &watched);
    let updates: Vec<&Update> = roles.updates.iter().filter(|u| selected[u.op]).collect();
    let mut groups: BTreeMap<(u32, u64), Vec<OpId>> = BTreeMap::new();
    for &o in &ops {
        groups.entry((index.ops[o].rank, index.ops[o].step)).or_default().push(o);
    }
    let conditions = &options.conditions;
    let (loss, events) = checks::loss(&ctx, conditions, &groups);
    tally.add(conditions, events);
    let bar = Progress::new("watch", watched.len() as u64, !options.progress);
    // A check that statistics leave undecided reads the tensor's values (or an update's two): within the
    // memory budget, as compare's pairs.
    let reads = |t: TensorId| ctx.read_tensors && index.tensors[t].has_data;
    // Each tensor's statistics read once for its label, tensor_overflow and the checks on it (#18: a read
    // decodes the record again). tensor_overflow's event, if any, comes first.
    let check = |_: &mut Vec<f32>, k: usize| {
        bar.inc(1);
        let (t, known) = (watched[k], known.get(watched[k]));
        let mut events = checks::tensor(&ctx, conditions, t, known);
        // Into the checks' list, not a list of its own: an allocation a tensor fewer.
        if let Some(overflow) = checks::tensor_overflow(&ctx, t, known) {
            events.insert(0, overflow);
        }
        (known.map(|k| k.stats.has_nonfinite()), events)
    };
    // The findings keep their order: every tensor_overflow hit, operator_overflow's, then the checks'.
    let mut checked = Tally::new(conditions);
    in_windows(source, &watched, reads, check, |_, (nonfinite, events)| {
        match nonfinite {
            Some(true) => tally.labels.nonfinite += 1,
            Some(false) => {}
            None => tally.labels.unknown += 1,
        }
        let mut events = events.into_iter().peekable();
        tally.add(conditions, events.next_if(|e| e.condition() == "tensor_overflow"));
        checked.add(conditions, events);
    });
    bar.finish();
    tally.add(conditions, checks::operator_overflow(&ctx, &groups));
    tally.append(checked);
    let (norms, trends) = updates::gradient_norms(&ctx, &updates);
    // An update whose weight was not read (its input 0's file torn) is not judged: the input problem leads.
    let judged: Vec<&Update> = updates.iter().copied().filter(|u| u.weight_read(index)).collect();
    let before: Vec<TensorId> = judged.iter().map(|u| u.before).collect();
    let judge = |_: &mut Vec<f32>, k: usize| updates::update(&ctx, conditions, judged[k], &updates, &trends);
    in_windows(source, &before, reads, judge, |_, events| tally.add(conditions, events));
    tally.add(conditions, updates::initialization(&ctx, conditions, &updates));
    // Overflow that reached a rank through a collective: no tensor of the rank's ops shows where it came
    // from, but the collective's receive buffer holds it (tensor_overflow, named as arriving).
    let arrivals = crate::overflow::collective_arrivals(index, &options.filter);
    tally.add(conditions, arrivals.iter().map(arrival_hit));
    let without_origin = {
        let stats_of = |t: TensorId| -> Option<TensorStats> {
            let info = &index.tensors[t];
            known.get(t).map(|k| k.stats).or_else(|| index.stats(t)).or_else(|| {
                let mut values = Vec::new();
                let one = info.has_data && info.shape.iter().product::<u64>() == 1;
                (one && source.read_values(t, &mut values).is_ok())
                    .then(|| TensorStats::of_f32(&values, info.dtype))
            })
        };
        let scales = crate::overflow::loss_scales(index, &ops, &stats_of);
        let explained: std::collections::BTreeSet<u64> = tally
            .findings
            .iter()
            .filter(|f| f.condition.ends_with("_overflow"))
            .filter_map(|f| f.step)
            .collect();
        // Any overflow hit explains its step on every rank: the overflow flag spans the job.
        crate::overflow::without_origin(index, &options.filter, &scales, &|_, step| explained.contains(&step))
    };
    let mut steps: Vec<u64> = groups.keys().map(|&(_, s)| s).collect();
    steps.sort_unstable();
    steps.dedup();
    let mut ranks: Vec<u32> = groups.keys().map(|&(r, _)| r).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let mut unreadable = ctx.unreadable.into_inner().unwrap_or_else(|p| p.into_inner());
    unreadable.sort_by_key(|(t, _)| *t);
    unreadable.dedup_by_key(|(t, _)| *t);
    for (t, e) in unreadable {
        problems.push_unreadable(&index.tensor_label(t), &e);
    }
    WatchReport {
        run: source.root().display().to_string(),
        input_problems: problems,
        warnings: index.warnings.clone(),
        steps,
        ranks,
        labels: tally.labels,
        conditions: tally.summaries,
        findings: tally.findings,
        without_origin,
        scope: index.ring_scope(),
        cant_tell: tally.cant_tell.into_values().collect(),
        loss,
        gradient_norm: norms,
    }
}

/// tensor_overflow's hit for an overflow that arrived through a collective.
fn arrival_hit(a: &crate::overflow::Arrival) -> Event {
    let (measure, n) = if a.anomaly.nan + a.anomaly.inf > 0 {
        ("nan_inf", a.anomaly.nan + a.anomaly.inf)
    } else {
        ("at_saturation", a.anomaly.saturated)
    };
    Event::Hit(Finding {
        condition: "tensor_overflow",
        step: a.step,
        rank: Some(a.rank),
        op: Some(a.call.clone()),
        op_type: a.call.split(' ').next().map(str::to_string),
        tensor: Some(format!("{}.output.0", a.call)),
        role: Some("collective output"),
        param: None,
        measure,
        value: super::measure::Measure::exact(n as f64),
        threshold: "> 0".into(),
        evidence: super::measure::Evidence::Statistics,
        // A call every member sent finite buffers into is where it began, not another rank.
        detail: Some(if a.began_here_on.is_empty() {
            format!(
                "{} of {}: arrived through {} on {} ({} on this rank): the origin is on another rank; run \
                 `analyzer ranks` over every rank's capture",
                a.anomaly.describe(),
                a.elements,
                a.call,
                a.comm,
                a.inputs
            )
        } else {
            format!(
                "{} of {}: began in {} on {}: {}",
                a.anomaly.describe(),
                a.elements,
                a.call,
                a.comm,
                a.why_it_began_here()
            )
        }),
    })
}

/// The report's counters, findings and "can't tell" groups.
struct Tally {
    summaries: Vec<ConditionSummary>,
    findings: Vec<Finding>,
    cant_tell: BTreeMap<(&'static str, String), CantTell>,
    labels: LabelCounts,
}

impl Tally {
    fn new(conditions: &[Condition]) -> Tally {
        let summaries = conditions
            .iter()
            .map(|c| ConditionSummary {
                name: c.name,
                enabled: c.enabled,
                summary: c.summary,
                params: c.params.clone(),
                decided: 0,
                hits: 0,
                cant_tell: 0,
            })
            .collect();
        Tally { summaries, findings: Vec::new(), cant_tell: BTreeMap::new(), labels: LabelCounts::default() }
    }

    fn add(&mut self, conditions: &[Condition], events: impl IntoIterator<Item = Event>) {
        for e in events {
            let name = e.condition();
            let Some(i) = conditions.iter().position(|c| c.name == name && c.enabled) else { continue };
            let s = &mut self.summaries[i];
            match e {
                Event::Hit(f) => {
                    s.decided += 1;
                    s.hits += 1;
                    self.findings.push(f);
                }
                Event::Decided(_) => s.decided += 1,
                Event::CantTell { condition, reason, would_decide, place } => {
                    s.cant_tell += 1;
                    let group = self.cant_tell.entry((condition, reason.clone())).or_insert_with(|| {
                        CantTell { condition, reason, would_decide, count: 0, examples: Vec::new() }
                    });
                    group.count += 1;
                    if group.examples.len() < EXAMPLES {
                        group.examples.push(place);
                    }
                }
            }
        }
    }

    /// `later`'s answers added after this tally's own: its counts, its findings after these, its "can't
    /// tell" examples after these (as if its events had been added last).
    fn append(&mut self, later: Tally) {
        for (s, l) in self.summaries.iter_mut().zip(later.summaries) {
            (s.decided, s.hits, s.cant_tell) =
                (s.decided + l.decided, s.hits + l.hits, s.cant_tell + l.cant_tell);
        }
        self.findings.extend(later.findings);
        for (key, group) in later.cant_tell {
            match self.cant_tell.entry(key) {
                Entry::Vacant(e) => _ = e.insert(group),
                Entry::Occupied(mut e) => {
                    let mine = e.get_mut();
                    mine.count += group.count;
                    let room = EXAMPLES.saturating_sub(mine.examples.len());
                    mine.examples.extend(group.examples.into_iter().take(room));
                }
            }
        }
    }
}

/// Statistics and a histogram computed from the values of every watched tensor that stored no statistics
/// (those that did are read from the index when asked: [`Knowns`]); a tensor whose values cannot be read is
/// an input problem. `progress`: a bar on stderr (when it is a terminal) while values are decoded.
fn gather(
    source: &dyn Source,
    tensors: &[TensorId],
    problems: &mut InputProblems,
    progress: bool,
) -> HashMap<TensorId, FromValues> {
    let index = source.index();
    let to_decode: Vec<TensorId> = tensors
        .iter()
        .copied()
        .filter(|&t| !index.tensors[t].has_stats() && index.tensors[t].has_data)
        .collect();
    let bar = Progress::new("statistics", to_decode.len() as u64, !progress || to_decode.is_empty());
    let mut known = HashMap::new();
    let measure = |values: &mut Vec<f32>, k: usize| {
        let (t, mut found) = (to_decode[k], None);
        let dtype = index.tensors[t].dtype;
        let read = source.with_values(t, values, &mut |values| {
            let mut h = HistogramAccumulator::new();
            h.push_f32(values);
            found =
                Some(FromValues { stats: TensorStats::of_f32(values, dtype), histogram: h.finish(), dtype });
        });
        bar.inc(1);
        read.and_then(|()| found.ok_or_else(|| anyhow::anyhow!("the source gave no values")))
    };
    in_windows(
        source,
        &to_decode,
        |_| true,
        measure,
        |k, r| match r {
            Ok(found) => {
                known.insert(to_decode[k], found);
            }
            Err(e) => problems.push_unreadable(&index.tensor_label(to_decode[k]), &e),
        },
    );
    bar.finish();
    known
}

/// Tensors checked (or decoded) at a time: each window's results are taken before the next is made, so that
/// no list of every tensor's results is held (#18: memory must not grow with the tensor count).
const WINDOW: usize = 1024;

/// `work(values, k)` for every position `k` of `tensors` as [`crate::threads::tensors_in_flight`] runs it
/// (as many reads at once as the budget lets, those `reads` names counted), a window at a time, each result
/// handed to `take(k, result)` in order before the next window is read.
fn in_windows<R: Send>(
    source: &dyn Source,
    tensors: &[TensorId],
    reads: impl Fn(TensorId) -> bool + Sync,
    work: impl Fn(&mut Vec<f32>, usize) -> R + Sync,
    mut take: impl FnMut(usize, R),
) {
    let index = source.index();
    let limits = pairs_in_flight(Footprint::compare([source, source]), [source, source]);
    for start in (0..tensors.len()).step_by(WINDOW) {
        let window = &tensors[start..(start + WINDOW).min(tensors.len())];
        let size = |k: usize| if reads(window[k]) { tensor_bytes(&index.tensors[window[k]]) } else { 0 };
        let done = in_flight(limits, window.len(), size, Vec::new, |values, k| work(values, start + k));
        for (k, r) in done.into_iter().enumerate() {
            take(start + k, r);
        }
    }
    release_kept_buffers();
}

/// The watched tensors' labels (the count of those holding NaN/inf or unknown is made as they are checked).
fn label_counts(roles: &Roles, watched: &[TensorId]) -> LabelCounts {
    let mut l = LabelCounts::default();
    for &t in watched {
        match roles.role(t) {
            Some(Role::Weight) => l.weights += 1,
            Some(Role::Gradient) => l.gradients += 1,
            Some(Role::Activation) => l.activations += 1,
            Some(Role::OptimizerState) => l.optimizer_state += 1,
            Some(Role::Leaf) => l.leaves += 1,
            None => {}
        }
    }
    l.updates = roles.updates.len() as u64;
    l
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{Index, Io, RecordStats, TensorInfo};
    use crate::threads::counting::Tensors;
    use accutrace_formats::DType;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A capture's records, each tensor's statistics read from them counted (the locator is the tensor).
    struct Records(Vec<AtomicUsize>);

    impl RecordStats for Records {
        fn stats_at(&self, locator: u64) -> Option<TensorStats> {
            self.0[locator as usize].fetch_add(1, Ordering::SeqCst);
            Some(TensorStats::of_f32(&[0.0, 0.5, locator as f32], DType::FLOAT))
        }
    }

    /// Two steps of activations (MatMul, Relu) and a weight's update, statistics in records only.
    struct Capture(Index);

    impl Source for Capture {
        fn kind(&self) -> &'static str {
            "capture"
        }
        fn root(&self) -> &std::path::Path {
            std::path::Path::new("run")
        }
        fn index(&self) -> &Index {
            &self.0
        }
        fn read_values(&self, _: TensorId, _: &mut Vec<f32>) -> anyhow::Result<()> {
            anyhow::bail!("statistics only")
        }
        fn content_hash(&self, _: TensorId) -> anyhow::Result<u64> {
            anyhow::bail!("statistics only")
        }
    }

    /// Every condition on, each check a tensor is given (label, overflow, all zero, size, saturation,
    /// range) reads its record once; an update's tensors are asked again by the update's conditions only.
    #[test]
    fn each_tensor_s_statistics_are_read_once_for_its_checks() {
        let mut index = Index::default();
        for step in 0..2 {
            for (name, op_type, tensors) in [
                ("layer_0/mm", "MatMul", &[Io::Input, Io::Input, Io::Output][..]),
                ("layer_0/relu", "Relu", &[Io::Input, Io::Output]),
                ("optimizer/w/ApplyAdam", "ApplyAdam", &[Io::Input, Io::Input, Io::Output]),
            ] {
                let op = index.push_op(name.into(), op_type.into(), step, 0);
                for (k, &io) in tensors.iter().enumerate() {
                    let t = index.tensors.len() as u64;
                    let info = TensorInfo {
                        locator: t,
                        ..TensorInfo::for_test(op, io, k as u32, DType::FLOAT, vec![4])
                    };
                    let t = index.push_tensor(info);
                    index.set_stats_in_record(t);
                }
            }
        }
        let records = Arc::new(Records((0..index.tensors.len()).map(|_| AtomicUsize::new(0)).collect()));
        index.read_record_stats_with(records.clone());
        let mut conditions = super::super::defaults();
        for c in &mut conditions {
            c.enabled = true;
            for &p in c.accepts {
                c.params.entry(p).or_insert(if p == "range_start" { 0.0 } else { 1.0 });
            }
        }
        let options =
            WatchOptions { filter: Default::default(), conditions, read_tensors: false, progress: false };
        let source = Capture(index);
        let report = watch(&source, &options);
        let roles = Roles::of(source.index());
        let named: Vec<TensorId> =
            roles.updates.iter().flat_map(|u| [Some(u.before), u.after, u.gradient]).flatten().collect();
        assert_eq!(named.len(), 6, "two updates of a weight by its gradient");
        let reads = |t: TensorId| records.0[t].load(Ordering::SeqCst);
        for t in (0..source.index().tensors.len()).filter(|t| roles.role(*t).is_some()) {
            // A weight before its update is asked by the update and the initial weight's check too, a
            // gradient by the gradient norms and the update.
            let most = if named.contains(&t) { 3 } else { 1 };
            assert!((1..=most).contains(&reads(t)), "tensor {t} read {} times, at most {most}", reads(t));
        }
        let answered =
            |name: &str| report.conditions.iter().any(|c| c.name == name && c.decided + c.cant_tell > 0);
        // The checks ran: every condition on tensors answered.
        for name in [
            "tensor_overflow",
            "tensor_all_zero",
            "activation_too_large",
            "activation_too_small",
            "dead_relu",
            "activation_range",
            "weight_initialization",
            "weight_change_too_large",
            "weight_too_large",
            "gradient_overflow",
            "gradient_too_large",
        ] {
            assert!(answered(name), "{name}: {:?}", report.conditions);
        }
    }

    /// A tally appended to another counts as its events added after the other's: counts summed, a "can't
    /// tell" group's examples first-come, at most three.
    #[test]
    fn an_appended_tally_comes_after() {
        let conditions = super::super::defaults();
        let cant_tell = |step| Event::CantTell {
            condition: "tensor_all_zero",
            reason: "r".into(),
            would_decide: "w",
            place: crate::watch::Place { step: Some(step), rank: None, op: None, tensor: None, bounds: None },
        };
        let (mut first, mut later) = (Tally::new(&conditions), Tally::new(&conditions));
        first.add(&conditions, [cant_tell(0), cant_tell(1), Event::Decided("tensor_all_zero")]);
        later.add(&conditions, [cant_tell(2), cant_tell(3), Event::Decided("loss_zero")]);
        first.append(later);
        let group = &first.cant_tell[&("tensor_all_zero", "r".to_string())];
        let steps: Vec<Option<u64>> = group.examples.iter().map(|p| p.step).collect();
        assert_eq!((group.count, steps), (4, vec![Some(0), Some(1), Some(2)]));
        let count =
            |name: &str| first.summaries.iter().find(|c| c.name == name).map(|c| (c.decided, c.cant_tell));
        assert_eq!((count("tensor_all_zero"), count("loss_zero")), (Some((1, 4)), Some((1, 0))));
    }

    /// Statistics and histograms computed from the values of a source that stored none: tensors of 512 MiB
    /// as f32 one at a time on a pool of four threads (the budget's one), each tensor's own.
    #[test]
    fn values_of_large_tensors_are_read_one_at_a_time() {
        let elements: Vec<u64> = (0..12).map(|k| if k % 3 == 0 { 128 << 20 } else { 16 }).collect();
        let source = Tensors::new(&elements);
        let tensors: Vec<TensorId> = (0..elements.len()).collect();
        let mut problems = InputProblems::default();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
        let known = pool.install(|| gather(&source, &tensors, &mut problems, false));
        assert_eq!(source.large_most.load(Ordering::SeqCst), 1, "large tensors read at once");
        assert!(problems.is_empty());
        assert_eq!(known.len(), 12);
        for (&t, k) in &known {
            let k = k.known();
            assert!(k.from_values && k.histogram.is_some(), "tensor {t}");
            assert_eq!((k.stats.count, k.stats.max), (2, t as f64), "tensor {t}");
        }
    }
}
