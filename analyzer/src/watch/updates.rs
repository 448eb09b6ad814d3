//! The conditions on weight updates: each update (weight not changed, change too large or small, weight
//! and gradient size, gradient overflow and vanishing with the gradient's norm over the steps), and the
//! weights before their first update.

use super::checks::{thresholds, with_detail, GT, LT, TENSORS, ZEROS};
use super::conditions::Condition;
use super::context::{finite, get, Ctx, Event};
use super::findings::{Finding, NormPoint};
use super::measure::{self, above, below, Measure, Verdict};
use crate::index::TensorId;
use crate::overflow::Anomaly;
use crate::roles::Update;
use std::collections::BTreeMap;

/// The gradients' L2 norms of one (rank, parameter), by step.
pub(super) type Series = BTreeMap<(u32, String), Vec<(u64, f64)>>;

/// Every parameter's gradient norm by step, and per (rank, parameter) its gradient's L2 norm over the
/// steps (the trend a vanishing or exploding finding shows).
pub(super) fn gradient_norms(ctx: &Ctx<'_>, updates: &[&Update]) -> (Vec<NormPoint>, Series) {
    // Per (rank, step): gradients, those holding inf/NaN, the sum of the finite ones' squared norms.
    let mut by_step: BTreeMap<(u32, u64), (usize, usize, f64)> = BTreeMap::new();
    let mut series = Series::new();
    for u in updates {
        let Some(k) = u.gradient.and_then(|g| ctx.known.get(g)) else { continue };
        let e = by_step.entry((u.rank, u.step)).or_default();
        e.0 += 1;
        if k.stats.has_nonfinite() {
            // Left out of the sum, the norm would read as a finite value smaller than the truth.
            e.1 += 1;
            continue;
        }
        let l2 = k.stats.l2_norm;
        e.2 += l2 * l2;
        series.entry((u.rank, u.param.clone())).or_default().push((u.step, l2));
    }
    let norms = by_step
        .into_iter()
        .map(|((rank, step), (gradients, nonfinite, sumsq))| NormPoint {
            step,
            rank,
            gradients,
            nonfinite_gradients: nonfinite,
            l2_norm: if nonfinite > 0 { f64::INFINITY } else { sumsq.sqrt() },
        })
        .collect();
    (norms, series)
}

/// The points a trend line shows of one gradient's norms, kept as they come, step after step: the first
/// three and the last three, not every step's (a run read by windows holds a few a parameter).
#[derive(Default)]
pub(super) struct Trend {
    head: Vec<(u64, f64)>,
    /// The points after the first three, at most the last three.
    tail: std::collections::VecDeque<(u64, f64)>,
    points: usize,
}

/// Points a trend line shows at most.
const SHOWN: usize = 6;

impl Trend {
    pub fn push(&mut self, point: (u64, f64)) {
        self.points += 1;
        if self.head.len() < SHOWN / 2 {
            self.head.push(point);
            return;
        }
        if self.tail.len() == SHOWN / 2 {
            self.tail.pop_front();
        }
        self.tail.push_back(point);
    }

    /// `gradient L2 by step: 0:1.2e-3 1:9.8e-4 ... 9:1.1e-8 (x9.2e-6 first to last)`: at most 6 points.
    pub fn line(&self) -> String {
        let shown: Vec<&(u64, f64)> = self.head.iter().chain(&self.tail).collect();
        let mut parts: Vec<String> =
            shown.iter().map(|(s, v)| format!("{s}:{}", crate::report::fmt_num(*v))).collect();
        if self.points > SHOWN {
            parts.insert(SHOWN / 2, "...".into());
        }
        let (first, last) = (shown[0].1, shown[shown.len() - 1].1);
        let change = if first > 0.0 {
            format!(" (x{} first to last)", crate::report::fmt_num(last / first))
        } else {
            String::new()
        };
        format!("gradient L2 by step: {}{change}", parts.join(" "))
    }
}

/// A gradient finding of an update ([`update`]) with its gradient's trend line (`None`: no finite norm),
/// which only the whole run's steps give.
pub(super) fn with_trend(f: &mut Finding, trend: Option<String>) {
    match f.condition {
        "gradient_overflow" => {
            f.detail =
                Some(format!("{}; {}", f.detail.as_deref().unwrap_or(""), trend.as_deref().unwrap_or("")))
        }
        "gradient_vanishing" | "gradient_too_large" => f.detail = trend,
        _ => {}
    }
}

/// The weight after update `u`: its optimizer op's output, else the weight before the parameter's next
/// update (steps skipped between them change nothing).
pub(super) fn after(u: &Update, all: &[&Update]) -> Option<TensorId> {
    u.after.or_else(|| {
        all.iter()
            .filter(|v| v.rank == u.rank && v.param == u.param && v.step > u.step)
            .min_by_key(|v| v.step)
            .map(|v| v.before)
    })
}

/// The conditions on one update: weight not changed, change too large or small, weight and gradient size,
/// gradient overflow and vanishing.
pub(super) fn update(ctx: &Ctx<'_>, conditions: &[Condition], u: &Update, all: &[&Update]) -> Vec<Event> {
    let mut events = Vec::new();
    let after = after(u, all);
    // What is known of the update's tensors, read once for all its conditions (#18: a read decodes a record).
    let before = (u.before, ctx.known.get(u.before));
    let known_after = after.and_then(|a| ctx.known.get(a));
    let hash = |t: TensorId| ctx.index.tensors[t].hash();
    let equal = after.and_then(|a| Some(hash(u.before)? == hash(a)?));
    if let (Some(c), Some(a)) = (get(conditions, "weight_not_changed"), after) {
        let (rtol, atol) = (c.get("rtol").unwrap_or(0.0), c.get("atol").unwrap_or(0.0));
        let exact_test = rtol == 0.0 && atol == 0.0;
        let threshold = format!("{} {}", measure::test_text("rtol", rtol), measure::test_text("atol", atol));
        let zero = Measure::exact(0.0);
        events.push(match equal {
            Some(true) => ctx.hit(c.name, Some(a), Some(u.op), "change", zero, threshold, measure::Evidence::ContentHash),
            Some(false) if exact_test => Event::Decided(c.name),
            _ => match ctx.values(u.before).zip(ctx.values(a)) {
                Some((b, v)) => match measure::unchanged_within(&b, &v, rtol, atol) {
                    Some(true) => ctx.hit(c.name, Some(a), Some(u.op), "change", zero, threshold, measure::Evidence::Tensor),
                    _ => Event::Decided(c.name),
                },
                None => ctx.cant_tell(
                    c.name,
                    Some(a),
                    Some(u.op),
                    None,
                    "the bytes changed (or have no hash); whether every element stays within rtol/atol needs both",
                    TENSORS,
                ),
            },
        });
    }
    for (name, param, gt) in [
        ("weight_change_too_large", "abs_mean_update_ratio_gt", true),
        ("weight_change_too_small", "abs_mean_update_ratio_lt", false),
    ] {
        let (Some(c), Some(a)) = (get(conditions, name), after) else { continue };
        let (Some(threshold), Some(kb), Some(ka)) = (c.get(param), finite(before.1), finite(known_after))
        else {
            continue;
        };
        let eps = c.get("epsilon").unwrap_or(1e-9);
        let Some((mut m, mut evidence)) = measure::update_ratio(&kb, &ka, equal == Some(true), eps) else {
            continue;
        };
        let test = |m: Measure| if gt { above(m, threshold) } else { below(m, threshold) };
        if test(m) == Verdict::CantTell {
            if let Some(r) = ctx
                .values(u.before)
                .zip(ctx.values(a))
                .and_then(|(b, v)| measure::update_ratio_of(&b, &v, eps))
            {
                (m, evidence) = (Measure::exact(r), measure::Evidence::Tensor);
            }
        }
        let th = measure::test_text(param, threshold);
        events.push(match test(m) {
            Verdict::Hit => ctx.hit(name, Some(a), Some(u.op), "update_ratio", m, th, evidence),
            Verdict::NotHit => Event::Decided(name),
            Verdict::CantTell => ctx.cant_tell(
                name,
                Some(a),
                Some(u.op),
                Some(m),
                "the statistics of the two weights bound the update ratio, not enough to decide",
                TENSORS,
            ),
        });
    }
    for (name, params) in [("weight_too_large", GT), ("weight_too_small", LT)] {
        if let Some(c) = get(conditions, name) {
            events.extend(thresholds(ctx, c, params, before, None));
        }
    }
    let Some(g) = u.gradient else { return events };
    let gradient = (g, ctx.known.get(g));
    if let (Some(c), Some(k)) = (get(conditions, "gradient_overflow"), gradient.1) {
        let a = Anomaly::of(&k.stats, true);
        events.push(if a.nan + a.inf > 0 {
            let n = Measure::exact((a.nan + a.inf) as f64);
            let hit = ctx.hit(c.name, Some(g), Some(u.op), "nan_inf", n, "> 0".into(), k.evidence());
            // The trend is added when the run's every step is known (`with_trend`).
            with_detail(hit, Some(a.describe()))
        } else {
            Event::Decided(c.name)
        });
    }
    for (name, params) in [("gradient_vanishing", LT), ("gradient_too_large", GT)] {
        if let Some(c) = get(conditions, name) {
            events.extend(thresholds(ctx, c, params, gradient, None));
        }
    }
    events
}

/// weight_initialization of update `u`, its parameter's first (the caller knows which across a run read by
/// windows) on a rank whose capture starts at step `start`: from step 0 on, the weight before it is the
/// initial weight (steps skipped before that update change nothing).
pub(super) fn initialization(ctx: &Ctx<'_>, c: &Condition, u: &Update, start: u64) -> Vec<Event> {
    if !u.weight_read(ctx.index) {
        let reason = "the weight, input 0 of its first update, was not read (a torn or missing file)";
        return vec![ctx.cant_tell(c.name, None, Some(u.op), None, reason, "the file read whole")];
    }
    if start > 0 {
        let reason =
            format!("the capture starts at step {start}: its first weights need not be the initial ones");
        return vec![ctx.cant_tell(
            c.name,
            Some(u.before),
            Some(u.op),
            None,
            &reason,
            "a capture from step 0",
        )];
    }
    let before = (u.before, ctx.known.get(u.before));
    let Some(k) = finite(before.1) else { return Vec::new() };
    let matrix = ctx.index.tensors[u.before].shape.iter().filter(|&&d| d > 1).count() >= 2;
    let mut params: Vec<&str> = vec!["max_gt", "min_lt"];
    if matrix {
        params.extend(["abs_mean_gt", "abs_mean_lt"]);
    }
    let mut these = thresholds(ctx, c, &params, before, None);
    if let (true, Some(ge)) = (matrix, c.get("zero_percentage_ge")) {
        match k.zero_percentage() {
            Some(p) if p >= ge => {
                let th = format!("zero_percentage_ge {ge}");
                these.push(ctx.hit(
                    c.name,
                    Some(u.before),
                    Some(u.op),
                    "zero_percentage",
                    Measure::exact(p),
                    th,
                    k.evidence(),
                ));
            }
            Some(_) => {}
            None => these.push(ctx.cant_tell(
                c.name,
                Some(u.before),
                Some(u.op),
                None,
                "the statistics do not count zeros",
                ZEROS,
            )),
        }
    }
    // One answer per weight: its hits, else its "can't tell", else decided.
    let hits: Vec<Event> = these.iter().filter(|e| matches!(e, Event::Hit(_))).cloned().collect();
    if !hits.is_empty() {
        hits
    } else if let Some(e) = these.iter().find(|e| matches!(e, Event::CantTell { .. })) {
        vec![e.clone()]
    } else {
        vec![Event::Decided(c.name)]
    }
}

#[cfg(test)]
mod tests {
    use super::Trend;

    /// A gradient's norm by step: every point up to six, else the first three, `...` and the last three,
    /// however many steps came between; the change from the first to the last.
    #[test]
    fn a_trend_shows_the_first_and_last_three_points() {
        let line = |n: u64| {
            let mut trend = Trend::default();
            (0..n).for_each(|s| trend.push((s, (s + 1) as f64)));
            trend.line()
        };
        assert_eq!(line(1), "gradient L2 by step: 0:1 (x1 first to last)");
        assert_eq!(line(4), "gradient L2 by step: 0:1 1:2 2:3 3:4 (x4 first to last)");
        assert_eq!(line(6), "gradient L2 by step: 0:1 1:2 2:3 3:4 4:5 5:6 (x6 first to last)");
        assert_eq!(line(7), "gradient L2 by step: 0:1 1:2 2:3 ... 4:5 5:6 6:7 (x7 first to last)");
        assert_eq!(
            line(300),
            "gradient L2 by step: 0:1 1:2 2:3 ... 297:298 298:299 299:300 (x300 first to last)"
        );
        let mut zero = Trend::default();
        [(3, 0.0), (4, 2.0)].into_iter().for_each(|p| zero.push(p));
        assert_eq!(zero.line(), "gradient L2 by step: 3:0 4:2", "no change from a first norm of 0");
    }
}
