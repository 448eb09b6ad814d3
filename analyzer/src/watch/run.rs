//! Running the conditions over one index, the whole run's or a window of its steps' ([`WatchFold::add`]):
//! what is known of each tensor (statistics, histogram, values), then each condition over the tensors,
//! updates and steps it looks at, tallied into the fold ([`super::fold`]).

use super::checks;
use super::context::Knowns;
use super::context::{get, Ctx};
use super::findings::{LabelCounts, WatchOptions, WatchReport};
use super::fold::{ReadWhole, WatchFold};
use super::measure::FromValues;
use super::tally::Phase;
use super::updates;
use crate::index::TensorId;
use crate::overflow::{loss_scale_candidates, updates_of, WholeRun};
use crate::progress::Progress;
use crate::roles::{Role, Roles, Update};
use crate::sources::capture::windows::StepWindows;
use crate::sources::Source;
use crate::threads::{in_flight, pairs_in_flight, release_kept_buffers, tensor_bytes, Footprint};
use accutrace_formats::stats::{HistogramAccumulator, TensorStats};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// Runs the enabled conditions of `options` over the ops of `source` its filter keeps.
pub fn watch(source: &dyn Source, options: &WatchOptions) -> WatchReport {
    let mut fold = WatchFold::new(options);
    // One index: no later one can hold what an update of it waits for.
    let _whole = fold.add(source);
    let scope = source.index().ring_scope();
    fold.finish(source.root().display().to_string(), WholeRun { scope, ..WholeRun::default() })
}

/// [`watch`] of a long capture read a window of steps at a time ([`StepWindows`]): the same report, holding
/// one window's index at a time. `None` when the run must be read whole after all: an update whose weight
/// after it is the weight before the parameter's next update, and that update in a later window.
pub fn watch_by_windows(
    windows: &StepWindows,
    options: &WatchOptions,
) -> anyhow::Result<Option<WatchReport>> {
    let mut fold = WatchFold::new(options);
    // A selection's windows may begin after a rank's first step, which weight_initialization needs.
    fold.first_step.extend(windows.first_steps());
    for w in 0..windows.windows().len() {
        let source = windows.open(w)?;
        if let Err(ReadWhole) = fold.add(&source) {
            return Ok(None);
        }
    }
    let whole = WholeRun {
        leading: windows.mixed_runs().into_iter().cloned().collect(),
        shortfalls: windows.shortfalls().to_vec(),
        scope: crate::index::ring_scope_of(windows.ring_deleted()),
    };
    Ok(Some(fold.finish(windows.root().display().to_string(), whole)))
}

impl WatchFold<'_> {
    /// The conditions over the ops of `source` the filter keeps: a run's index, or the next window of its
    /// steps. `Err`: an update of an earlier window waits for this window's weight (see [`watch_by_windows`]).
    pub fn add(&mut self, source: &dyn Source) -> Result<(), ReadWhole> {
        let options = self.options;
        let conditions = &options.conditions;
        let index = source.index();
        let ops = options.filter.op_ids(index);
        let roles = Roles::of(index);
        let selected: Vec<bool> = {
            let mut keep = vec![false; index.ops.len()];
            ops.iter().for_each(|&o| keep[o] = true);
            keep
        };
        let updates: Vec<&Update> = roles.updates.iter().filter(|u| selected[u.op]).collect();
        if updates.iter().any(|u| self.awaits_after(u)) {
            return Err(ReadWhole);
        }
        let watched: Vec<TensorId> = (0..index.tensors.len())
            .filter(|&t| selected[index.tensors[t].op()] && roles.role(t).is_some())
            .collect();
        let place = |t: TensorId| {
            let op = &index.ops[index.tensors[t].op()];
            (op.rank, op.step)
        };
        let mut unreadable = Vec::new();
        let known = Knowns {
            index,
            watched: &watched,
            computed: gather(source, &watched, &mut unreadable, options.progress),
        };
        for (t, e) in unreadable {
            self.unreadable(false, place(t), t, index.tensor_label(t), &e);
        }
        let ctx = Ctx {
            source,
            index,
            roles: &roles,
            known: &known,
            read_tensors: options.read_tensors,
            unreadable: Mutex::new(Vec::new()),
        };
        count_labels(&mut self.labels, &roles, &watched, updates.len());
        let mut groups: BTreeMap<(u32, u64), Vec<usize>> = BTreeMap::new();
        for &o in &ops {
            groups.entry((index.ops[o].rank, index.ops[o].step)).or_default().push(o);
        }
        for (&(rank, step), ops) in &groups {
            self.steps.insert(step);
            self.ranks.insert(rank);
            let (point, events) = checks::loss(&ctx, conditions, (rank, ops), &mut self.first_loss);
            self.loss.extend(point);
            self.tally.add(conditions, (Phase::Loss, rank, step), events);
        }
        let bar = Progress::new("watch", watched.len() as u64, !options.progress);
        // A check that statistics leave undecided reads the tensor's values (or an update's two): within the
        // memory budget, as compare's pairs.
        let reads = |t: TensorId| ctx.read_tensors && index.tensors[t].has_data;
        // Each tensor's statistics read once for its label, tensor_overflow and the checks on it (#18: a read
        // decodes the record again).
        let check = |_: &mut Vec<f32>, k: usize| {
            bar.inc(1);
            let (t, known) = (watched[k], known.get(watched[k]));
            let overflow = checks::tensor_overflow(&ctx, t, known);
            (known.map(|k| k.stats.has_nonfinite()), overflow, checks::tensor(&ctx, conditions, t, known))
        };
        let tally = &mut self.tally;
        let labels = &mut self.labels;
        in_windows(source, &watched, reads, check, |k, (nonfinite, overflow, events)| {
            match nonfinite {
                Some(true) => labels.nonfinite += 1,
                Some(false) => {}
                None => labels.unknown += 1,
            }
            let (rank, step) = place(watched[k]);
            tally.add(conditions, (Phase::TensorOverflow, rank, step), overflow);
            tally.add(conditions, (Phase::Tensors, rank, step), events);
        });
        bar.finish();
        let (events, seen) = checks::operator_overflow(&ctx, &groups);
        self.operator_records_seen |= seen;
        self.tally.add(conditions, (Phase::OperatorOverflow, 0, 0), events);
        let (norms, series) = updates::gradient_norms(&ctx, &updates);
        self.norms.extend(norms);
        for (key, points) in series {
            let trend = self.trends.entry(key).or_default();
            points.into_iter().for_each(|p| trend.push(p));
        }
        // An update whose weight was not read (its input 0's file torn) is not judged: the input problem leads.
        let judged: Vec<&Update> = updates.iter().copied().filter(|u| u.weight_read(index)).collect();
        let before: Vec<TensorId> = judged.iter().map(|u| u.before).collect();
        let judge = |_: &mut Vec<f32>, k: usize| updates::update(&ctx, conditions, judged[k], &updates);
        let tally = &mut self.tally;
        in_windows(source, &before, reads, judge, |k, events| {
            tally.add(conditions, (Phase::Updates, judged[k].rank, judged[k].step), events)
        });
        // The weight after an update without an output of it is the weight before the parameter's next
        // update: in a later window, it is not here to judge by.
        for u in judged.iter().filter(|u| u.after.is_none() && updates::after(u, &updates).is_none()) {
            self.awaiting_after.insert((u.rank, u.param.clone()));
        }
        self.initialization(&ctx, &updates);
        // Overflow that reached a rank through a collective: no tensor of the rank's ops shows where it came
        // from, but the collective's receive buffer holds it (tensor_overflow, named as arriving).
        self.arrivals.extend(crate::overflow::collective_arrivals(index, &options.filter));
        let stats_of = |t: TensorId| -> Option<TensorStats> {
            let info = &index.tensors[t];
            known.get(t).map(|k| k.stats).or_else(|| index.stats(t)).or_else(|| {
                let mut values = Vec::new();
                let one = info.has_data && info.shape.iter().product::<u64>() == 1;
                (one && source.read_values(t, &mut values).is_ok())
                    .then(|| TensorStats::of_f32(&values, info.dtype))
            })
        };
        let (named, multiplied) = loss_scale_candidates(index, &ops, &stats_of);
        self.scales.0.extend(named);
        self.scales.1.extend(multiplied);
        for (rank, steps) in updates_of(index, &options.filter) {
            self.updated.entry(rank).or_default().extend(steps);
        }
        self.only_overflowing_ops |= index.only_overflowing_ops;
        let mut unreadable = ctx.unreadable.into_inner().unwrap_or_else(|p| p.into_inner());
        unreadable.sort_by_key(|(t, _)| *t);
        unreadable.dedup_by_key(|(t, _)| *t);
        for (t, e) in unreadable {
            self.unreadable(true, place(t), t, index.tensor_label(t), &e);
        }
        self.index_problems.extend(index.problems.iter().cloned());
        self.warnings.extend(index.warnings.iter().cloned());
        Ok(())
    }

    /// weight_initialization of each parameter's first update, on a rank whose capture starts at step 0.
    fn initialization(&mut self, ctx: &Ctx<'_>, updates: &[&Update]) {
        let conditions = &self.options.conditions;
        let Some(c) = get(conditions, "weight_initialization") else { return };
        // Windows come in the order of their steps: the first to hold a rank holds its first step.
        let mut first_here: HashMap<u32, u64> = HashMap::new();
        for op in &ctx.index.ops {
            let s = first_here.entry(op.rank).or_insert(op.step);
            *s = (*s).min(op.step);
        }
        for (rank, step) in first_here {
            self.first_step.entry(rank).or_insert(step);
        }
        for u in updates {
            if !self.initialized.insert((u.rank, u.param.clone())) {
                continue;
            }
            let start = self.first_step.get(&u.rank).copied().unwrap_or(0);
            let events = updates::initialization(ctx, c, u, start);
            self.tally.add(conditions, (Phase::Initialization, u.rank, u.step), events);
        }
    }
}

/// Statistics and a histogram computed from the values of every watched tensor that stored no statistics
/// (those that did are read from the index when asked: [`Knowns`]); a tensor whose values cannot be read is
/// put in `unreadable`, with why. `progress`: a bar on stderr (when it is a terminal) while values are decoded.
fn gather(
    source: &dyn Source,
    tensors: &[TensorId],
    unreadable: &mut Vec<(TensorId, anyhow::Error)>,
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
            Err(e) => unreadable.push((to_decode[k], e)),
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

/// The watched tensors' labels and the selection's `updates` added to `l` (the count of those holding
/// NaN/inf or unknown is made as they are checked).
fn count_labels(l: &mut LabelCounts, roles: &Roles, watched: &[TensorId], updates: usize) {
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
    l.updates += updates as u64;
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

    /// An update whose optimizer op outputs no weight is judged by the weight before its parameter's next
    /// update: when that update is in a later window, the fold asks for the run read whole.
    #[test]
    fn an_update_waiting_for_a_later_window_s_weight_asks_for_the_whole_run() {
        let window = |step: u64, param: &str| {
            let mut index = Index::default();
            let op = index.push_op(format!("optimizer/{param}/ApplyFoo"), "ApplyFoo".into(), step, 0);
            for (k, io, shape) in [(0, Io::Input, vec![4]), (1, Io::Input, vec![4]), (0, Io::Output, vec![1])]
            {
                index.push_tensor(TensorInfo::for_test(op, io, k, DType::FLOAT, shape));
            }
            Capture(index)
        };
        let conditions = super::super::defaults();
        let options =
            WatchOptions { filter: Default::default(), conditions, read_tensors: false, progress: false };
        let mut fold = WatchFold::new(&options);
        assert!(fold.add(&window(0, "w")).is_ok());
        assert!(fold.add(&window(1, "v")).is_ok(), "another parameter's update");
        assert!(fold.add(&window(2, "w")).is_err(), "w's update at step 0 waits for step 2's weight");
    }

    /// Statistics and histograms computed from the values of a source that stored none: tensors of 512 MiB
    /// as f32 one at a time on a pool of four threads (the budget's one), each tensor's own.
    #[test]
    fn values_of_large_tensors_are_read_one_at_a_time() {
        let elements: Vec<u64> = (0..12).map(|k| if k % 3 == 0 { 128 << 20 } else { 16 }).collect();
        let source = Tensors::new(&elements);
        let tensors: Vec<TensorId> = (0..elements.len()).collect();
        let mut unreadable = Vec::new();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
        let known = pool.install(|| gather(&source, &tensors, &mut unreadable, false));
        assert_eq!(source.large_most.load(Ordering::SeqCst), 1, "large tensors read at once");
        assert!(unreadable.is_empty());
        assert_eq!(known.len(), 12);
        for (&t, k) in &known {
            let k = k.known();
            assert!(k.from_values && k.histogram.is_some(), "tensor {t}");
            assert_eq!((k.stats.count, k.stats.max), (2, t as f64), "tensor {t}");
        }
    }
}
