//! The conditions on steps and tensors: the loss of each step, overflow over every tensor and the device's
//! records, each tensor (all zero, activations); and the threshold tests the update conditions
//! ([`super::updates`]) share.

use super::conditions::Condition;
use super::context::{finite, get, Ctx, Event};
use super::findings::{Finding, LossPoint, Place};
use super::measure::{self, above, at_least, below, Evidence, Known, Measure, Verdict};
use crate::index::{OpId, TensorId};
use crate::overflow::Anomaly;
use crate::roles::{self, ActivationKind, Role};
use accutrace_formats::stats::TensorStats;
use std::collections::{BTreeMap, HashMap};

/// What decides a "can't tell", by what is missing.
pub(super) const TENSORS: &str = "both tensors' values (record --mode tensor)";
const RANGE: &str = "a histogram (record --histogram) or the tensor's values (record --mode tensor)";
const ABS_SUM: &str =
    "the sum of |x| (a capture of format 4 or later) or the tensor's values (record --mode tensor)";
pub(super) const ZEROS: &str = "statistics that count zeros (a capture in stats or tensor mode)";

/// loss_overflow, loss_zero and loss_too_large at the step of `rank` whose ops are `ops`; `first`: each
/// rank's first finite loss so far, the base of a rise (carried from step to step, window to window).
pub(super) fn loss(
    ctx: &Ctx<'_>,
    conditions: &[Condition],
    (rank, ops): (u32, &[OpId]),
    first: &mut HashMap<u32, f64>,
) -> (Option<LossPoint>, Vec<Event>) {
    let mut events = Vec::new();
    let too_large = get(conditions, "loss_too_large");
    let Some(t) = roles::loss_tensor(ctx.index, ops).or_else(|| scaled_loss(ctx, ops)) else {
        let reason =
            "no op of the step looks like the loss (a one-element output of a forward op named like a loss: \
             loss, cross_entropy, nll; nor a loss scaler's Mul of it by a power of two)";
        for c in ["loss_overflow", "loss_zero", "loss_too_large"] {
            events.push(ctx.cant_tell(
                c,
                None,
                ops.first().copied(),
                None,
                reason,
                "the loss op in the dump",
            ));
        }
        return (None, events);
    };
    let Some((s, ev)) = scalar_stats(ctx, t) else { return (None, events) };
    let value = if s.nan > 0 {
        f64::NAN
    } else if s.pos_inf > 0 {
        f64::INFINITY
    } else if s.neg_inf > 0 {
        f64::NEG_INFINITY
    } else {
        s.max
    };
    let op = &ctx.index.ops[ctx.index.tensors[t].op()];
    let point =
        LossPoint { step: op.step, rank, op: op.name.to_string(), value: value.is_finite().then_some(value) };
    let exact = Measure::exact(value);
    if !value.is_finite() {
        events.push(ctx.hit("loss_overflow", Some(t), None, "loss", exact, "NaN or inf".into(), ev));
        return (Some(point), events);
    }
    events.push(Event::Decided("loss_overflow"));
    events.push(if value == 0.0 {
        ctx.hit("loss_zero", Some(t), None, "loss", exact, "== 0".into(), ev)
    } else {
        Event::Decided("loss_zero")
    });
    let base = *first.entry(rank).or_insert(value);
    let Some(c) = too_large else { return (Some(point), events) };
    let mut hit = None;
    if let Some(gt) = c.get("gt").filter(|&gt| value > gt) {
        hit = Some(format!("gt {gt}"));
    }
    if let Some(rise) = c.get("rise_gt").filter(|&r| base > 0.0 && value > r * base) {
        hit = Some(format!("rise_gt {rise} (first loss {})", crate::report::fmt_num(base)));
    }
    events.push(match hit {
        Some(threshold) => ctx.hit("loss_too_large", Some(t), None, "loss", exact, threshold, ev),
        None => Event::Decided("loss_too_large"),
    });
    (Some(point), events)
}

/// What is known of a one-element tensor, and from what. A scaler's input is no watched tensor (an earlier
/// op produced it): its own statistics then, else (a dump tree stores none) its one value, read.
fn scalar_stats(ctx: &Ctx<'_>, t: TensorId) -> Option<(TensorStats, Evidence)> {
    if let Some(k) = ctx.known.get(t) {
        return Some((k.stats, k.evidence()));
    }
    let info = &ctx.index.tensors[t];
    if let Some(st) = ctx.index.stats(t) {
        return Some((st, Evidence::Statistics));
    }
    let mut values = Vec::new();
    let one = info.has_data && info.shape.iter().product::<u64>() == 1;
    (one && ctx.source.read_values(t, &mut values).is_ok())
        .then(|| (TensorStats::of_f32(&values, info.dtype), Evidence::Tensor))
}

/// Where no op of the step is named like a loss (eager kernels are named by type): the one-element input
/// that a loss scaler's `Mul` multiplies by a power of two, the loss the report plots then.
fn scaled_loss(ctx: &Ctx<'_>, ops: &[OpId]) -> Option<TensorId> {
    let stats = |t: TensorId| scalar_stats(ctx, t).map(|(st, _)| st);
    let is_scale = |t: TensorId| stats(t).is_some_and(|st| st.max >= 2.0 && st.max.log2().fract() == 0.0);
    ops.iter().find_map(|&o| {
        let op = &ctx.index.ops[o];
        crate::overflow::scaler_multiply(op, &stats)?;
        op.inputs().find(|&t| !is_scale(t))
    })
}

/// tensor_overflow on a watched tensor (a float one that is known: `known`).
pub(super) fn tensor_overflow(ctx: &Ctx<'_>, t: TensorId, known: Option<Known<'_>>) -> Option<Event> {
    let k = known.filter(|_| ctx.index.tensors[t].dtype.is_float())?;
    let a = Anomaly::of(&k.stats, true);
    if !a.any() {
        return Some(Event::Decided("tensor_overflow"));
    }
    let (measure, n) =
        if a.nan + a.inf > 0 { ("nan_inf", a.nan + a.inf) } else { ("at_saturation", a.saturated) };
    let value = Measure::exact(n as f64);
    Some(with_detail(
        ctx.hit("tensor_overflow", Some(t), None, measure, value, "> 0".into(), k.evidence()),
        Some(a.describe()),
    ))
}

/// operator_overflow over the device's records of the steps of `groups`, and whether there were any.
pub(super) fn operator_overflow(
    ctx: &Ctx<'_>,
    groups: &BTreeMap<(u32, u64), Vec<OpId>>,
) -> (Vec<Event>, bool) {
    let mut events = Vec::new();
    for r in ctx.index.overflow_records.iter().filter(|r| groups.contains_key(&(r.rank, r.step))) {
        let bits = Measure::exact(r.status.iter().fold(0u64, |a, &s| a | s) as f64);
        let mut event = ctx.hit(
            "operator_overflow",
            None,
            r.op,
            "status",
            bits,
            "status bits set".into(),
            measure::Evidence::Statistics,
        );
        if let Event::Hit(f) = &mut event {
            (f.step, f.rank) = (Some(r.step), Some(r.rank));
        }
        events.push(with_detail(event, Some(format!("{}: {}", r.engine, r.status_names.join(", ")))));
    }
    let seen = !events.is_empty();
    (events, seen)
}

/// operator_overflow's one answer for a run without device records: none expected of a dump of the flagged
/// ops only (`only_overflowing_ops`), else it cannot tell.
pub(super) fn no_operator_overflow_records(only_overflowing_ops: bool) -> Event {
    if only_overflowing_ops {
        return Event::Decided("operator_overflow");
    }
    Event::CantTell {
        condition: "operator_overflow",
        reason: "the capture has no device overflow records (the runtime's op-debug dump was off)".into(),
        would_decide: "a capture with the device's overflow detection (record --overflow)",
        place: Place { step: None, rank: None, op: None, tensor: None, bounds: None },
    }
}

/// tensor_overflow's hit for an overflow that arrived through a collective.
pub(super) fn arrival_hit(a: &crate::overflow::Arrival) -> Event {
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
        value: Measure::exact(n as f64),
        threshold: "> 0".into(),
        evidence: Evidence::Statistics,
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

/// A hit with `detail` added.
pub(super) fn with_detail(mut event: Event, detail: Option<String>) -> Event {
    if let Event::Hit(f) = &mut event {
        f.detail = detail;
    }
    event
}

/// The statistic a "too large" / "too small" parameter compares (`abs_mean_gt` compares mean |x|).
fn statistic(k: &Known<'_>, param: &str) -> Option<(Measure, &'static str)> {
    let s = &k.stats;
    match param.rsplit_once('_')?.0 {
        "abs_mean" => k.abs_mean().map(|m| (m, "abs_mean")),
        "max" => Some((Measure::exact(s.max), "max")),
        "min" => Some((Measure::exact(s.min), "min")),
        "mean" => Some((Measure::exact(s.mean), "mean")),
        _ => None,
    }
}

/// Every set threshold of `c` among `params` on tensor `t` (finite; `known` of it): a hit per threshold
/// crossed, else one decided, else a "can't tell" (only mean |x| can be undecided: the values then decide
/// it).
pub(super) fn thresholds(
    ctx: &Ctx<'_>,
    c: &Condition,
    params: &[&str],
    (t, known): (TensorId, Option<Known<'_>>),
    detail: Option<&String>,
) -> Vec<Event> {
    let Some(k) = finite(known) else { return Vec::new() };
    let mut events = Vec::new();
    let mut undecided = None;
    let mut exact_abs_mean = None;
    for (&param, &threshold) in c.params.iter().filter(|(p, _)| params.contains(p)) {
        let Some((mut m, measure)) = statistic(&k, param) else { continue };
        let test =
            |m: Measure| if param.ends_with("_gt") { above(m, threshold) } else { below(m, threshold) };
        let mut evidence = k.evidence();
        if test(m) == Verdict::CantTell {
            if exact_abs_mean.is_none() {
                exact_abs_mean = Some(ctx.values(t).and_then(|v| abs_mean_of(&v)));
            }
            match exact_abs_mean.flatten() {
                Some(v) => (m, evidence) = (Measure::exact(v), measure::Evidence::Tensor),
                None => {
                    undecided = Some(m);
                    continue;
                }
            }
        }
        if test(m) == Verdict::Hit {
            let hit =
                ctx.hit(c.name, Some(t), None, measure, m, measure::test_text(param, threshold), evidence);
            events.push(with_detail(hit, detail.cloned()));
        }
    }
    if events.is_empty() {
        events.push(match undecided {
            Some(m) => ctx.cant_tell(
                c.name,
                Some(t),
                None,
                Some(m),
                "mean |x| between |mean| and the smaller of the RMS and max |x| straddles the threshold",
                ABS_SUM,
            ),
            None => Event::Decided(c.name),
        });
    }
    events
}

fn abs_mean_of(values: &[f32]) -> Option<f64> {
    let finite: Vec<f64> = values.iter().filter(|v| v.is_finite()).map(|&v| f64::from(v).abs()).collect();
    (!finite.is_empty()).then(|| finite.iter().sum::<f64>() / finite.len() as f64)
}

pub(super) const GT: &[&str] = &["abs_mean_gt", "max_gt", "min_gt", "mean_gt"];
pub(super) const LT: &[&str] = &["abs_mean_lt", "max_lt", "min_lt", "mean_lt"];

/// The conditions on one tensor (`known` of it): all zero (activations and gradients), activation size,
/// saturation and range.
pub(super) fn tensor(
    ctx: &Ctx<'_>,
    conditions: &[Condition],
    t: TensorId,
    known: Option<Known<'_>>,
) -> Vec<Event> {
    let mut events = Vec::new();
    let role = ctx.roles.role(t);
    let Some(k) = finite(known) else { return events };
    if k.stats.count == 0 {
        return events;
    }
    if let (Some(c), Some(Role::Activation | Role::Gradient)) = (get(conditions, "tensor_all_zero"), role) {
        let ge = c.get("zero_percentage_ge").unwrap_or(100.0);
        events.push(match k.zero_percentage() {
            Some(p) if at_least(Measure::exact(p), ge) == Verdict::Hit => ctx.hit(
                c.name,
                Some(t),
                None,
                "zero_percentage",
                Measure::exact(p),
                format!("zero_percentage_ge {ge}"),
                k.evidence(),
            ),
            Some(_) => Event::Decided(c.name),
            None => ctx.cant_tell(c.name, Some(t), None, None, "the statistics do not count zeros", ZEROS),
        });
    }
    if role != Some(Role::Activation) {
        return events;
    }
    for (name, params) in [("activation_too_large", GT), ("activation_too_small", LT)] {
        if let Some(c) = get(conditions, name) {
            events.extend(thresholds(ctx, c, params, (t, known), None));
        }
    }
    let op = &ctx.index.ops[ctx.index.tensors[t].op()];
    let saturation = match roles::activation_kind(&op.op_type) {
        Some(ActivationKind::Tanh) => Some("tanh_saturated"),
        Some(ActivationKind::Sigmoid) => Some("sigmoid_saturated"),
        Some(ActivationKind::Relu) => Some("dead_relu"),
        None => None,
    };
    if let Some(c) = saturation.filter(|_| op.outputs().next() == Some(t)).and_then(|n| get(conditions, n)) {
        events.extend(range(ctx, c, t, &k));
    }
    if let Some(c) = get(conditions, "activation_range") {
        events.extend(range(ctx, c, t, &k));
        for (param, gt) in [("max_min_gt", true), ("max_min_lt", false)] {
            let Some(threshold) = c.get(param) else { continue };
            let spread = Measure::exact(k.stats.max - k.stats.min);
            let v = if gt { above(spread, threshold) } else { below(spread, threshold) };
            if v == Verdict::Hit {
                let th = measure::test_text(param, threshold);
                events.push(ctx.hit(c.name, Some(t), None, "max_min", spread, th, k.evidence()));
            }
        }
    }
    events
}

/// A range condition (`range_start`..`range_end` with `range_percentage_lt` / `_gt`) on tensor `t`.
fn range(ctx: &Ctx<'_>, c: &Condition, t: TensorId, k: &Known<'_>) -> Vec<Event> {
    let (Some(lo), Some(hi)) = (c.get("range_start"), c.get("range_end")) else { return Vec::new() };
    let Some((mut pct, mut evidence)) = k.range_percentage(lo, hi) else { return Vec::new() };
    let tests: Vec<(&str, f64)> = ["range_percentage_lt", "range_percentage_gt"]
        .into_iter()
        .filter_map(|p| c.get(p).map(|v| (p, v)))
        .collect();
    let verdict = |pct: Measure, (param, threshold): (&str, f64)| {
        if param.ends_with("_lt") {
            below(pct, threshold)
        } else {
            above(pct, threshold)
        }
    };
    if tests.iter().any(|&p| verdict(pct, p) == Verdict::CantTell) {
        if let Some(exact) = ctx.values(t).and_then(|v| measure::range_percentage_of(&v, lo, hi)) {
            (pct, evidence) = (Measure::exact(exact), measure::Evidence::Tensor);
        }
    }
    let mut events = Vec::new();
    for &(param, threshold) in &tests {
        match verdict(pct, (param, threshold)) {
            Verdict::Hit => events.push(ctx.hit(
                c.name,
                Some(t),
                None,
                "range_percentage",
                pct,
                format!("{param} {threshold} in [{lo:.9}, {hi:.9}]"),
                evidence,
            )),
            Verdict::NotHit => {}
            Verdict::CantTell => events.push(ctx.cant_tell(
                c.name,
                Some(t),
                None,
                Some(pct),
                "the statistics bound the share of values in the range, not enough to decide",
                RANGE,
            )),
        }
    }
    if events.is_empty() {
        events.push(Event::Decided(c.name));
    }
    events
}
