//! The page's plots, from the engines' results: error along execution order, loss and loss scale over
//! steps, gradient norms, the layer x step and rank x step heatmaps, watch's timeline. Each figure has axes with
//! units and a caption that says how to read it; a plot the runs cannot feed says why instead.

use super::findings::Findings;
use super::svg::{Colouring, Heatmap, Line, Mark, Marker, Plot, Scale, PALETTE, PLOT_WIDTH};
use super::text::escape;
use crate::compare::Comparison;
use crate::index::TensorId;
use crate::report::fmt_num;
use crate::series::{layer_of, phase, Grid};
use std::collections::{HashMap, HashSet};

const CULPRIT: &str = "#d00000";
const FAILING: &str = "#d55e00";
const FUSED: &str = "#cc79a7";
const FUSED_FAILING: &str = "#7b2d8e";
const OVERFLOW: &str = "#d55e00";
/// The other ranks' lines (apart from the lowest rank's blue, the loss scale's green and the overflow
/// bands' orange).
const OTHER_RANKS: [&str; 7] = ["#e69f00", "#cc79a7", "#56b4e9", "#000000", "#f0e442", "#8c564b", "#999999"];
/// The most other ranks drawn in one plot: the page stays small whatever the job's size.
const MAX_OTHER_RANKS: usize = OTHER_RANKS.len();

/// Which other ranks' lines a plot draws, and a sentence for its caption. With few ranks, every rank's
/// (each has its own loss in data parallel); with more, the ranks that `departs` from the lowest rank's
/// line, up to [`MAX_OTHER_RANKS`], the rest counted.
fn other_rank_lines<'s>(
    lowest: Option<&crate::series::Line>,
    others: impl Iterator<Item = (u32, &'s crate::series::Line)>,
    departs: fn(&crate::series::Line, &crate::series::Line) -> bool,
    ranks: usize,
) -> OtherRanks<'s> {
    let all: Vec<(u32, &crate::series::Line)> = others.collect();
    let every = ranks <= MAX_OTHER_RANKS + 1;
    let mut drawn: Vec<(u32, &crate::series::Line)> =
        all.iter().copied().filter(|(_, l)| every || lowest.is_none_or(|low| departs(low, l))).collect();
    let agreeing = all.len() - drawn.len();
    let cut = drawn.len().saturating_sub(MAX_OTHER_RANKS);
    drawn.truncate(MAX_OTHER_RANKS);
    OtherRanks { drawn, agreeing, cut }
}

/// The other ranks a plot draws, and those it leaves out: `agreeing` with the lowest rank's line, or
/// `cut` past [`MAX_OTHER_RANKS`] though they depart.
struct OtherRanks<'s> {
    drawn: Vec<(u32, &'s crate::series::Line)>,
    agreeing: usize,
    cut: usize,
}

/// Whether a rank's loss is inf or NaN at a step where the lowest rank's is finite, or the reverse.
fn finiteness_departs(low: &crate::series::Line, other: &crate::series::Line) -> bool {
    let low: HashMap<u64, f64> = low.points.iter().copied().collect();
    other.points.iter().any(|(step, v)| low.get(step).is_some_and(|l| l.is_finite() != v.is_finite()))
}

/// Whether a rank's gradient norm differs from the lowest rank's at some step (data parallel: the
/// all-reduce gives every rank the same gradient), or has steps the lowest rank's lacks.
fn value_departs(low: &crate::series::Line, other: &crate::series::Line) -> bool {
    let low: HashMap<u64, f64> = low.points.iter().copied().collect();
    other.points.iter().any(|(step, v)| low.get(step).is_none_or(|l| l.to_bits() != v.to_bits()))
}

pub fn all(page: &mut String, f: &Findings<'_>) {
    page.push_str("<section id=\"plots\"><h2>Plots</h2>");
    if let Some(c) = f.comparison.filter(|c| c.refused.is_none()) {
        error_along_order(page, c);
    }
    loss(page, f);
    grad_norms(page, f);
    layer_heatmaps(page, f);
    rank_heatmap(page, f);
    super::health::timeline(page, f);
    page.push_str("</section>\n");
}

fn figure(page: &mut String, id: &str, title: &str, body: &str, caption: &str) {
    page.push_str(&format!(
        "<figure id=\"{id}\"><h3>{}</h3><div class=\"frame\">{body}</div><figcaption>{}</figcaption></figure>\n",
        escape(title),
        escape(caption)
    ));
}

fn not_drawn(page: &mut String, id: &str, title: &str, why: &str) {
    page.push_str(&format!(
        "<figure id=\"{id}\" class=\"empty\"><h3>{}</h3><p>Not drawn: {}</p></figure>\n",
        escape(title),
        escape(why)
    ));
}

/// Per op of one step (the culprit's, else the first failing op's, else the first compared): the worst
/// 1 - cosine and max relative error of its compared outputs, on a log axis.
fn error_along_order(page: &mut String, c: &Comparison<'_>) {
    const TITLE: &str = "Error along execution order";
    let index = c.target.index();
    let focus = c
        .culprit
        .map(|i| c.failing_ops[i].op)
        .or_else(|| c.failing_ops.first().map(|f| f.op))
        .or_else(|| c.rows.first().map(|r| index.tensors[r.target()].op()));
    let Some(focus) = focus else {
        return not_drawn(page, "fig-error", TITLE, "no tensor pair was compared");
    };
    let (step, rank) = (index.ops[focus].step, index.ops[focus].rank);
    let row_of: HashMap<TensorId, usize> = c.rows.iter().enumerate().map(|(i, r)| (r.target(), i)).collect();
    let failing: HashSet<usize> = c.failing_ops.iter().map(|f| f.op).collect();
    let ops: Vec<usize> =
        (0..index.ops.len()).filter(|&o| index.ops[o].step == step && index.ops[o].rank == rank).collect();
    let n = ops.len();
    let (mut cos_points, mut rel_points) = (Vec::new(), Vec::new());
    // Markers, one per pixel column and colour (the worst), so that 10^5 ops stay readable and small.
    let mut markers: HashMap<(usize, &str), Marker> = HashMap::new();
    let mut culprit_x = None;
    for (x, &o) in ops.iter().enumerate() {
        let op = &index.ops[o];
        let rows: Vec<usize> = op.outputs().filter_map(|t| row_of.get(&t).copied()).collect();
        if rows.is_empty() {
            continue;
        }
        let worst = |get: &dyn Fn(usize) -> Option<f64>| {
            rows.iter()
                .filter_map(|&r| get(r))
                .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.max(v))))
        };
        let cos = worst(&|r| c.rows[r].msprobe().cosine.value().map(|v| (1.0 - v).max(0.0)));
        let rel = worst(&|r| c.rows[r].msprobe().max_relative_err.value());
        let x = x as f64;
        if let Some(v) = cos {
            cos_points.push((x, v));
        }
        if let Some(v) = rel {
            rel_points.push((x, v));
        }
        let originals = op.original_names(index);
        let fused = !originals.is_empty() && originals.iter().any(|n| *n != op.name);
        let fails = failing.contains(&o);
        if c.culprit.is_some_and(|i| c.failing_ops[i].op == o) {
            culprit_x = Some(x);
        }
        let colour = match (fused, fails) {
            (true, true) => FUSED_FAILING,
            (true, false) => FUSED,
            (false, true) => FAILING,
            (false, false) => continue,
        };
        let y = cos.into_iter().chain(rel).fold(0.0, f64::max);
        let column = (x / n.max(1) as f64 * PLOT_WIDTH) as usize;
        let title = format!(
            "#{} {} [{}]{}: 1 - cosine {}, max rel err {}{}",
            x as u64,
            op.name,
            op.op_type,
            if fused { format!(" (fused: {})", originals.join(" + ")) } else { String::new() },
            cos.map_or("n/a".into(), fmt_num),
            rel.map_or("n/a".into(), fmt_num),
            match (fails, rows.iter().any(|&r| c.rows[r].judged())) {
                (true, _) => ", fails",
                (false, true) => ", passes",
                (false, false) => ", not measured",
            }
        );
        let slot = markers.entry((column, colour)).or_insert(Marker { x, y, colour, title: title.clone() });
        if y > slot.y {
            *slot = Marker { x, y, colour, title };
        }
    }
    if cos_points.is_empty() && rel_points.is_empty() {
        return not_drawn(page, "fig-error", TITLE, "no compared pair of this step has metrics");
    }
    let mut markers: Vec<Marker> = markers.into_values().collect();
    markers.sort_by(|a, b| a.x.total_cmp(&b.x));
    let y = Scale::log(cos_points.iter().chain(&rel_points).map(|p| p.1), 1e-9);
    let mut marks = Vec::new();
    if let Some(x) = culprit_x {
        let name = c.culprit.map(|i| index.ops[c.failing_ops[i].op].name.clone()).unwrap_or_default();
        marks.push(Mark { x, colour: CULPRIT, label: format!("CULPRIT {name}") });
    }
    let plot = Plot {
        id: "plot-error".into(),
        x_label: format!("op in execution order (step {step}, rank {rank}; {n} ops)"),
        y_label: "error (log, dimensionless)".into(),
        y2_label: None,
        x: Scale { whole: true, ..Scale::linear([0.0, n.saturating_sub(1) as f64].into_iter(), true) },
        y,
        y2: None,
        lines: vec![
            line("1 - cosine", PALETTE[0], 1.2, cos_points),
            line("max relative error", PALETTE[1], 1.2, rel_points),
        ],
        markers,
        marker_legend: vec![
            (FAILING, "failing op".into()),
            (FUSED, "fused kernel".into()),
            (FUSED_FAILING, "fused, failing".into()),
        ],
        marks,
        bands: Vec::new(),
        rules: vec![(0.01, "cosine 0.99 (msprobe)".into())],
    };
    figure(
        page,
        "fig-error",
        TITLE,
        &plot.svg(),
        "Each op of the step, left to right in the order the device ran them, with the worst of its compared \
         outputs: 1 - cosine similarity (blue) and max relative error (orange) against the benchmark, log \
         scale; zero sits on the bottom edge. Below the dotted line an output meets msprobe's cosine rule. \
         Dots mark failing ops (red), fused kernels (pink) and failing fused kernels (purple); hover for the \
         op. The red line is the culprit: where the error jumps while the ops before it pass. A long series \
         keeps each pixel column's lowest and highest point, so no spike is lost.",
    );
}

fn line(name: &str, colour: &'static str, width: f64, points: Vec<(f64, f64)>) -> Line {
    Line { name: name.into(), colour, width, dashed: false, right: false, steps: false, points }
}

/// `points` (by step, ascending) cut where a step of `steps` has no point: the runs of consecutive steps.
fn across_steps<'p>(points: &'p [(u64, f64)], steps: &[u64]) -> Vec<&'p [(u64, f64)]> {
    let position = |step: u64| steps.binary_search(&step).ok();
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..=points.len() {
        let joined = i < points.len()
            && matches!((position(points[i - 1].0), position(points[i].0)), (Some(a), Some(b)) if b == a + 1);
        if !joined {
            runs.push(&points[start..i]);
            start = i;
        }
    }
    runs
}

fn as_xy(points: &[(u64, f64)]) -> Vec<(f64, f64)> {
    points.iter().map(|&(s, v)| (s as f64, v)).collect()
}

/// Steps with an overflow on any rank, as shaded bands (one per step, its first origin in the title): a
/// dynamic loss scaler reduces its overflow flag over the ranks, so every rank skips that update.
fn overflow_bands(f: &Findings<'_>) -> Vec<(f64, f64, &'static str, String)> {
    let mut seen = HashSet::new();
    f.overflow
        .origins
        .iter()
        .filter(|o| seen.insert(o.step))
        .map(|o| {
            let s = o.step as f64;
            let title = format!(
                "step {} rank {}: {} in {} [{}]; a dynamic loss scaler skips this update and lowers the scale",
                o.step,
                o.rank,
                o.anomaly.describe(),
                o.op,
                o.op_type
            );
            (s - 0.4, s + 0.4, OVERFLOW, title)
        })
        .collect()
}

fn loss(page: &mut String, f: &Findings<'_>) {
    const TITLE: &str = "Loss over steps";
    let Some((op, target)) = &f.series.loss else {
        return not_drawn(
            page,
            "fig-loss",
            TITLE,
            "no op named like a loss (loss, cross_entropy, nll) has a one-element output in the target, and no \
             Mul of two one-element inputs scales one by a power of two (a loss scaler)",
        );
    };
    let mut lines = vec![line(&format!("target ({op})"), PALETTE[0], 2.0, as_xy(&target.points))];
    let others = other_rank_lines(
        Some(target),
        f.series.other_ranks.iter().filter_map(|r| Some((r.rank, r.loss.as_ref()?))),
        finiteness_departs,
        f.series.ranks.len(),
    );
    for (i, (rank, l)) in others.drawn.iter().enumerate() {
        lines.push(line(&format!("rank {rank}"), OTHER_RANKS[i], 1.2, as_xy(&l.points)));
    }
    let ranks_drawn =
        ranks_caption(&others, &format!("whose losses are finite wherever rank {}'s is", f.series.rank));
    if let Some((_, bench)) = f.bench_series.and_then(|b| b.loss.as_ref()) {
        let mut l = line("benchmark", "#555555", 1.5, as_xy(&bench.points));
        l.dashed = true;
        lines.push(l);
    }
    let mut scale: Vec<(f64, f64)> = f
        .overflow
        .loss_scale
        .iter()
        .filter(|l| l.rank == f.series.rank)
        .map(|l| (l.step as f64, l.value))
        .collect();
    // overflow's loss scale is the one detection (by name, else a loss scaler's multiply in eager runs).
    let mut scale_source = match (f.overflow.loss_scale.first(), &f.series.scaler_scale) {
        (Some(l), Some((op, _))) if l.op == *op => {
            format!(" (the power-of-two input of {op} that multiplies the loss)")
        }
        (Some(l), _) => format!(" (the {} of {})", l.tensor, l.op),
        (None, _) => String::new(),
    };
    // No op named like a loss scale (eager kernels): the power of two the scaler's multiply used.
    if let (true, Some((op, line))) = (scale.is_empty(), &f.series.scaler_scale) {
        scale = as_xy(&line.points);
        scale_source = format!(" (the power-of-two input of {op} that multiplies the loss)");
    }
    let y2 = (!scale.is_empty()).then(|| Scale::log(scale.iter().map(|p| p.1), 1e-30));
    let y2_label = (!scale.is_empty()).then(|| "loss scale (log)".to_string());
    if !scale.is_empty() {
        lines.push(Line {
            name: "loss scale".into(),
            colour: PALETTE[2],
            width: 1.5,
            dashed: false,
            right: true,
            steps: true,
            points: scale,
        });
    }
    let values =
        lines.iter().filter(|l| !l.right).flat_map(|l| l.points.iter().map(|p| p.1)).collect::<Vec<_>>();
    let steps = f.series.steps.iter().map(|&s| s as f64);
    let read = if f.series.loss_from_scaler {
        format!("the one-element input of {op} that the loss scaler multiplies (no op is named like a loss)")
    } else {
        format!("the one-element output of {op}")
    };
    let plot = Plot {
        id: "plot-loss".into(),
        x_label: "training step".into(),
        y_label: "loss (as the loss op computed it)".into(),
        y2_label,
        x: Scale::whole(steps),
        y: Scale::linear(values.into_iter(), true),
        y2,
        lines,
        markers: Vec::new(),
        marker_legend: vec![(OVERFLOW, "overflow step".into())],
        marks: Vec::new(),
        bands: overflow_bands(f),
        rules: Vec::new(),
    };
    figure(
        page,
        "fig-loss",
        TITLE,
        &plot.svg(),
        &format!(
            "The loss per step on rank {} (blue){ranks_drawn}, read from {read}, against the \
             benchmark's (grey, dashed) when it has one. Green, right axis: the loss scale{scale_source}, \
             where the run dumps it. Shaded steps had an overflow (inf/NaN from finite inputs) on some rank: a dynamic loss scaler skips \
             their update and halves the scale, so a run of them is a collapsing scale. A triangle on the top \
             edge is a loss that was inf or NaN, in its rank's colour.",
            f.series.rank
        ),
    );
}

/// What a plot's caption says of the other ranks: those drawn (each named in the legend), and how many
/// were left out, `agreeing` (a clause: why they need no line of their own) or cut.
fn ranks_caption(others: &OtherRanks<'_>, agreeing: &str) -> String {
    let ranks = |n: usize| if n == 1 { "1 other rank".to_string() } else { format!("{n} other ranks") };
    let mut said = String::new();
    if !others.drawn.is_empty() {
        let names: Vec<String> = others.drawn.iter().map(|(r, _)| format!("rank {r}")).collect();
        said.push_str(&format!(", and on {} (named in the legend)", names.join(", ")));
    }
    if others.agreeing > 0 {
        said.push_str(&format!("; {}, {agreeing}, not drawn", ranks(others.agreeing)));
    }
    if others.cut > 0 {
        said.push_str(&format!(
            "; {} that depart from it not drawn (the page draws {MAX_OTHER_RANKS})",
            ranks(others.cut)
        ));
    }
    said
}

/// Other ranks' per-layer gradient-norm lines that depart from the lowest rank's line of the same layer (or
/// that it lacks), at most `room` drawn, ascending by rank then in each rank's layer order.
fn departing_layers<'s>(
    lowest: &'s [crate::series::Line],
    others: &'s [crate::series::RankLines],
    room: usize,
) -> DepartingLayers<'s> {
    // The lowest rank's lines after its global one are its layers'.
    let low: HashMap<&str, &crate::series::Line> =
        lowest.iter().skip(1).map(|l| (l.name.as_str(), l)).collect();
    let mut drawn: Vec<(u32, &crate::series::Line)> = Vec::new();
    let mut agreeing = 0;
    for r in others {
        for l in &r.layer_grad_norms {
            if low.get(l.name.as_str()).is_none_or(|low| value_departs(low, l)) {
                drawn.push((r.rank, l));
            } else {
                agreeing += 1;
            }
        }
    }
    let cut = drawn.len().saturating_sub(room);
    drawn.truncate(room);
    DepartingLayers { drawn, agreeing, cut }
}

/// The per-layer lines [`departing_layers`] draws, and those it leaves out.
struct DepartingLayers<'s> {
    drawn: Vec<(u32, &'s crate::series::Line)>,
    /// Other ranks' layer lines equal to the lowest rank's.
    agreeing: usize,
    /// Departing layer lines past the page's room.
    cut: usize,
}

impl DepartingLayers<'_> {
    /// What the caption says of them (nothing when no other rank has per-layer lines).
    fn caption(&self, lowest: u32) -> String {
        let lines = |n: usize| if n == 1 { "1 layer line".to_string() } else { format!("{n} layer lines") };
        let mut said = String::new();
        if !self.drawn.is_empty() {
            let names: Vec<String> = self.drawn.iter().map(|(r, l)| format!("rank {r} {}", l.name)).collect();
            said.push_str(&format!(
                "; per layer, where another rank's departs from rank {lowest}'s (dashed): {}",
                names.join(", ")
            ));
        }
        if self.cut > 0 {
            said.push_str(&format!(
                "; {} of other ranks that depart not drawn (the page draws {MAX_OTHER_RANKS} other ranks' lines)",
                lines(self.cut)
            ));
        }
        if self.agreeing > 0 && self.drawn.is_empty() && self.cut == 0 {
            said.push_str(&format!("; the other ranks' per-layer norms equal rank {lowest}'s"));
        }
        said
    }
}

/// The first step where the runs part: compare's first failing op, else diff's first difference, else the
/// first overflow; with what says so.
fn first_divergence(f: &Findings<'_>) -> Option<(u64, &'static str)> {
    let compared = f.comparison.and_then(|c| {
        let index = c.target.index();
        c.failing_ops.iter().map(|o| index.ops[o.op].step).min().map(|s| (s, "first failing step"))
    });
    let differing = || match &f.diff {
        Some(Ok(d)) => d.first_differences.iter().map(|d| d.step).min().map(|s| (s, "first differing step")),
        _ => None,
    };
    compared
        .or_else(differing)
        .or_else(|| f.overflow.steps_with_overflow.first().map(|&s| (s, "first overflow")))
}

fn grad_norms(page: &mut String, f: &Findings<'_>) {
    const TITLE: &str = "Gradient norms over steps";
    if f.series.grad_norms.is_empty() {
        return not_drawn(
            page,
            "fig-grad",
            TITLE,
            "the target dumps no optimizer op (Apply*) whose gradient input has statistics",
        );
    }
    let mut lines = Vec::new();
    for (i, l) in f.series.grad_norms.iter().enumerate() {
        let (colour, width, name) = match i {
            0 => ("#000000", 2.5, l.name.clone()),
            i if i <= 6 => (PALETTE[(i - 1) % 7], 1.2, l.name.clone()),
            _ => ("#bbbbbb", 0.8, if i == 7 { "other layers".into() } else { String::new() }),
        };
        // A step without a point applied no update: the line breaks there rather than bridging it.
        for segment in across_steps(&l.points, &f.series.steps) {
            lines.push(line(&name, colour, width, as_xy(segment)));
        }
    }
    let others = other_rank_lines(
        f.series.grad_norms.first(),
        f.series.other_ranks.iter().filter_map(|r| Some((r.rank, r.grad_norm.as_ref()?))),
        value_departs,
        // Every rank applies the same all-reduced gradient: only those that depart are drawn.
        usize::MAX,
    );
    for (i, (rank, l)) in others.drawn.iter().enumerate() {
        for segment in across_steps(&l.points, &f.series.steps) {
            let mut l = line(&format!("rank {rank} global"), OTHER_RANKS[i], 1.5, as_xy(segment));
            l.dashed = true;
            lines.push(l);
        }
    }
    // Per layer, the other ranks' lines that depart from the lowest rank's same layer (a NaN gradient
    // applied on one rank, a layer only another rank updates), in the room the global lines leave.
    let layers =
        departing_layers(&f.series.grad_norms, &f.series.other_ranks, MAX_OTHER_RANKS - others.drawn.len());
    for (i, (rank, l)) in layers.drawn.iter().enumerate() {
        let colour = OTHER_RANKS[(others.drawn.len() + i) % OTHER_RANKS.len()];
        for segment in across_steps(&l.points, &f.series.steps) {
            let mut l = line(&format!("rank {rank} {}", l.name), colour, 1.2, as_xy(segment));
            l.dashed = true;
            lines.push(l);
        }
    }
    let mut ranks_drawn =
        ranks_caption(&others, &format!("whose global norms equal rank {}'s", f.series.rank));
    ranks_drawn.push_str(&layers.caption(f.series.rank));
    let y = Scale::log(lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)), 1e-12);
    let marks = first_divergence(f)
        .map(|(step, what)| vec![Mark { x: step as f64, colour: CULPRIT, label: format!("{what}: {step}") }])
        .unwrap_or_default();
    let plot = Plot {
        id: "plot-grad".into(),
        x_label: "training step".into(),
        y_label: "gradient L2 norm (log)".into(),
        y2_label: None,
        x: Scale::whole(f.series.steps.iter().map(|&s| s as f64)),
        y,
        y2: None,
        lines,
        markers: Vec::new(),
        marker_legend: Vec::new(),
        marks,
        bands: overflow_bands(f),
        rules: Vec::new(),
    };
    figure(
        page,
        "fig-grad",
        TITLE,
        &plot.svg(),
        &format!(
            "The L2 norm of the gradients the optimizer applied on rank {} (the input of each Apply* op shaped \
             like its parameter), globally (black) and per layer, log scale{ranks_drawn}. The lines break at a step \
             that applied no update (an overflow skipped it: shaded). The red line marks where the runs first part; a \
             norm that grows by decades or jumps to the top edge (inf/NaN) before it points at the cause.",
            f.series.rank
        ),
    );
}

/// The worst 1 - cosine per heatmap row and step, from the compared pairs.
fn error_grid(c: &Comparison<'_>, rows: &[String], steps: &[u64]) -> Grid {
    let index = c.target.index();
    let row_pos: HashMap<&str, usize> = rows.iter().enumerate().map(|(i, r)| (r.as_str(), i)).collect();
    let step_pos: HashMap<u64, usize> = steps.iter().enumerate().map(|(i, &s)| (s, i)).collect();
    let mut grid = Grid::new(rows.to_vec(), steps.to_vec());
    for row in &c.rows {
        let op = &index.ops[index.tensors[row.target()].op()];
        let label = crate::series::row_label(phase(op), &layer_of(&op.name));
        let (Some(&r), Some(&s), Some(cos)) =
            (row_pos.get(label.as_str()), step_pos.get(&op.step), row.msprobe().cosine.value())
        else {
            continue;
        };
        grid.merge(r, s, (1.0 - cos).max(0.0), f64::max);
    }
    grid
}

fn heatmap(id: &str, grid: &Grid, colouring: Colouring, value_label: &str) -> String {
    heatmap_of(id, grid, colouring, value_label).svg()
}

fn heatmap_of(id: &str, grid: &Grid, colouring: Colouring, value_label: &str) -> Heatmap {
    Heatmap {
        id: id.into(),
        rows: grid.rows.clone(),
        columns: grid.steps.clone(),
        cells: grid.cells.clone(),
        colouring,
        x_label: "training step".into(),
        value_label: value_label.into(),
        outline: None,
        empty: "no data",
        details: Vec::new(),
    }
}

/// The inf/NaN count per layer and step, each cell naming the ranks it adds and each one's count.
fn nonfinite_map(s: &crate::series::RunSeries) -> Heatmap {
    let mut map = heatmap_of("heat-nonfinite", &s.nonfinite, Colouring::Count, "inf + NaN values");
    map.details = s
        .nonfinite_by_rank
        .iter()
        .map(|ranks| {
            ranks.iter().map(|(rank, count)| format!("rank {rank}: {count}")).collect::<Vec<_>>().join(", ")
        })
        .collect();
    map
}

fn layer_heatmaps(page: &mut String, f: &Findings<'_>) {
    let s = f.series;
    if s.max_abs.rows.is_empty() || s.steps.is_empty() {
        return not_drawn(page, "fig-layers", "Layer x step", "the selection holds no op");
    }
    let mut maps = vec![
        ("max |x|", heatmap("heat-maxabs", &s.max_abs, Colouring::LogMagnitude, "max |x|"), "The largest finite magnitude among each layer's outputs (max over ranks), log colour scale: a layer whose values climb by decades towards the dtype's limit (65504 in fp16) is about to overflow."),
        ("inf/NaN count", nonfinite_map(s).svg(), "How many inf and NaN values each layer's outputs held: the first coloured cell in a column is where a step's overflow starts, the cells after it are where it spread."),
    ];
    // A cell adds every rank's count: said, or one rank's count would read as the layer's.
    let adds_ranks = match &s.ranks[..] {
        [one] => format!(" The run has one rank (rank {one})."),
        ranks => format!(
            " A cell adds the counts of ranks {} ({} ranks): hover a cell for each rank's count.",
            crate::filter::ranges(&ranks.iter().map(|&r| u64::from(r)).collect::<Vec<_>>()),
            ranks.len()
        ),
    };

    if let Some(c) = f.comparison.filter(|c| c.refused.is_none() && !c.rows.is_empty()) {
        let grid = error_grid(c, &s.max_abs.rows, &s.steps);
        maps.push(("error vs benchmark", heatmap("heat-error", &grid, Colouring::LogMagnitude, "max 1 - cosine"), "The worst 1 - cosine similarity against the benchmark among each layer's compared outputs, log colour scale: the first row (in execution order) that turns bright in a step is where the runs part; grey cells were not compared."));
    }
    let mut maps: Vec<_> =
        maps.into_iter().map(|(name, svg, caption)| (name, svg, caption.to_string())).collect();
    maps[1].2.push_str(&adds_ranks);
    tabbed(
        page,
        "fig-layers",
        "Layer x step",
        &maps,
        "Rows are layers (from op names; op types for eager kernels, whose names carry no layer) in the order they \
         first run, forward, then backward, then the optimizer's update; hover a cell for its value. Long runs merge \
         adjacent steps or rows, keeping the largest value.",
    );
}

/// One figure showing one of `maps` (name, SVG, caption) at a time; `note` ends every caption.
fn tabbed(page: &mut String, id: &str, title: &str, maps: &[(&str, String, String)], note: &str) {
    page.push_str(&format!("<figure id=\"{id}\"><h3>{}</h3><div class=\"tabs\">", escape(title)));
    for (i, (name, _, _)) in maps.iter().enumerate() {
        page.push_str(&format!("<button type=\"button\" data-map=\"{i}\">{}</button>", escape(name)));
    }
    page.push_str("</div>");
    for (i, (_, svg, caption)) in maps.iter().enumerate() {
        page.push_str(&format!(
            "<div class=\"map\" data-map=\"{i}\"><div class=\"frame\">{svg}</div><figcaption>{} {}</figcaption></div>",
            escape(caption),
            escape(note)
        ));
    }
    page.push_str("</figure>\n");
}

fn rank_heatmap(page: &mut String, f: &Findings<'_>) {
    let s = f.series;
    let mut maps = Vec::new();
    if let Some(r) = f.ranks.filter(|r| r.ranks.len() > 1) {
        let rows: Vec<String> = r.ranks.iter().map(|k| format!("rank {k}")).collect();
        let mut grid = Grid::new(rows, r.steps.clone());
        for (i, rank) in r.ranks.iter().enumerate() {
            let counts = r.anomalous_per_step.get(rank);
            for (j, step) in r.steps.iter().enumerate() {
                grid.merge(i, j, counts.and_then(|c| c.get(step)).copied().unwrap_or(0) as f64, f64::max);
            }
        }
        let mut map = heatmap_of("heat-rank-events", &grid, Colouring::Count, "anomalous events");
        map.outline =
            r.origins.first().and_then(|o| Some((r.ranks.iter().position(|&k| k == o.rank)?, o.step)));
        let caption = match r.origins.first() {
            Some(o) => format!(
                "Events (ops and HCCL calls) of each rank that the cross-rank analysis found anomalous, per step: \
                 overflow, collective disagreement, replica divergence{}. The outlined cell is the first anomaly \
                 (rank {}, step {}: nothing anomalous happened before it); the cells lit after it on other ranks are \
                 where it spread through the collectives (table below).",
                if r.baseline.is_some() { ", difference from the baseline" } else { "" },
                o.rank,
                o.step
            ),
            None => "Events (ops and HCCL calls) of each rank that the cross-rank analysis found anomalous, per \
                     step: overflow, collective disagreement, replica divergence. All green: none."
                .to_string(),
        };
        maps.push(("anomalous events", map.svg(), caption));
    }
    if s.ranks.len() > 1 {
        let svg = heatmap(
            "heat-ranks",
            &s.rank_anomalies,
            Colouring::Count,
            "tensors with inf/NaN/saturated values",
        );
        maps.push((
            "inf/NaN tensors",
            svg,
            "How many tensors of each rank held inf, NaN or values at the dtype's saturation limit, per step. \
             One rank lit while the others stay quiet is a rank-local fault (its data, its device); a whole column \
             lit is a step that overflowed everywhere, usually after the collective that spread it."
                .to_string(),
        ));
    }
    if maps.is_empty() {
        return;
    }
    tabbed(page, "fig-ranks", "Rank x step", &maps, "Hover a cell for its value.");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::Line as Series;

    fn series(points: &[(u64, f64)]) -> Series {
        Series { name: "loss".into(), points: points.to_vec() }
    }

    #[test]
    fn past_eight_ranks_only_the_ranks_that_depart_are_drawn_and_the_others_counted() {
        let lowest = series(&[(0, 1.0), (1, 2.0)]);
        let (nan, finite) = (series(&[(0, 1.5), (1, f64::NAN)]), series(&[(0, 1.1), (1, 2.1)]));
        let others: Vec<(u32, &Series)> = (1..12).map(|r| (r, if r == 5 { &nan } else { &finite })).collect();
        // 12 ranks: rank 5's NaN loss where rank 0's is finite, nothing else.
        let drawn = other_rank_lines(Some(&lowest), others.iter().copied(), finiteness_departs, 12);
        assert_eq!(drawn.drawn.iter().map(|(r, _)| *r).collect::<Vec<_>>(), [5]);
        assert_eq!((drawn.agreeing, drawn.cut), (10, 0));
        assert_eq!(
            ranks_caption(&drawn, "whose losses are finite wherever rank 0's is"),
            ", and on rank 5 (named in the legend); 10 other ranks, whose losses are finite wherever rank \
             0's is, not drawn"
        );
        // 4 ranks: every rank's own loss.
        let drawn = other_rank_lines(Some(&lowest), others[..3].iter().copied(), finiteness_departs, 4);
        assert_eq!((drawn.drawn.len(), drawn.agreeing, drawn.cut), (3, 0, 0));
        // Gradient norms: the same bits agree, any other value departs; past 7 departing ranks, counted.
        assert!(!value_departs(&lowest, &lowest.clone()) && value_departs(&lowest, &finite));
        let drawn = other_rank_lines(Some(&lowest), others.iter().copied(), value_departs, usize::MAX);
        assert_eq!(
            (drawn.drawn.len(), drawn.agreeing, drawn.cut),
            (MAX_OTHER_RANKS, 0, 11 - MAX_OTHER_RANKS)
        );
    }

    #[test]
    fn another_ranks_layer_that_departs_is_drawn_named_and_the_rest_counted() {
        use crate::series::RankLines;
        let layer = |name: &str, points: &[(u64, f64)]| Series { name: name.into(), points: points.to_vec() };
        let lowest = [
            layer("global", &[(0, 2.0), (1, 1.5)]),
            layer("layer_0", &[(0, 1.0), (1, 1.0)]),
            layer("layer_1", &[(0, 1.5), (1, 0.5)]),
        ];
        let rank = |rank: u32, layer_1: &[(u64, f64)]| RankLines {
            rank,
            layer_grad_norms: vec![lowest[1].clone(), layer("layer_1", layer_1)],
            ..RankLines::default()
        };
        // Rank 1 applied a NaN gradient in layer_1 at step 1; rank 2's layers equal rank 0's.
        let others = [rank(1, &[(0, 1.5), (1, f64::NAN)]), rank(2, &[(0, 1.5), (1, 0.5)])];
        let found = departing_layers(&lowest, &others, MAX_OTHER_RANKS);
        assert_eq!(
            found.drawn.iter().map(|(r, l)| (*r, l.name.as_str())).collect::<Vec<_>>(),
            [(1, "layer_1")]
        );
        assert_eq!((found.agreeing, found.cut), (3, 0));
        assert_eq!(
            found.caption(0),
            "; per layer, where another rank's departs from rank 0's (dashed): rank 1 layer_1"
        );
        // No room left by the global lines: counted, never dropped silently.
        let found = departing_layers(&lowest, &others, 0);
        assert!(found.drawn.is_empty());
        assert_eq!(
            found.caption(0),
            "; 1 layer line of other ranks that depart not drawn (the page draws 7 other ranks' lines)"
        );
        // Every other rank's layers agree: the caption says so.
        let found = departing_layers(&lowest, &others[1..], MAX_OTHER_RANKS);
        assert_eq!(found.caption(0), "; the other ranks' per-layer norms equal rank 0's");
        // A layer only another rank updates (pipeline parallel) departs.
        let only = [RankLines {
            rank: 1,
            layer_grad_norms: vec![layer("layer_2", &[(0, 1.0)])],
            ..RankLines::default()
        }];
        assert_eq!(departing_layers(&lowest, &only, MAX_OTHER_RANKS).drawn.len(), 1);
    }

    #[test]
    fn a_step_without_a_point_breaks_the_line() {
        let steps = [0, 1, 2, 3, 4];
        let points = [(0, 1.0), (1, 2.0), (3, 4.0), (4, 5.0)];
        let runs = super::across_steps(&points, &steps);
        assert_eq!(runs, [&points[..2], &points[2..]]);
        assert_eq!(super::across_steps(&points[..2], &steps), [&points[..2]]);
        assert!(super::across_steps(&[], &steps).is_empty());
    }
}
