//! Plots as inline SVG, written by hand: axes with ticks, labels and units; lines decimated per pixel
//! column keeping each column's first, lowest, highest and last point (a spike survives any length);
//! markers with hover titles; vertical marks and shaded steps; heatmaps whose values the page's script
//! shows on hover. No `xmlns` and no URL: the SVG lives inside the HTML page.

use super::text::escape;
use crate::report::fmt_num;
use std::collections::HashMap;
use std::fmt::Write;

/// The plot area's size and margins, in SVG pixels.
pub const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 300.0;
const LEFT: f64 = 76.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = 46.0;

/// The inner width in pixels, where one column holds at most four points of a line.
pub const PLOT_WIDTH: f64 = WIDTH - LEFT - RIGHT;

/// Colours that stay apart for people with the common colour-vision deficiencies (Okabe-Ito).
pub const PALETTE: [&str; 8] =
    ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000"];

/// A linear or logarithmic axis over `lo..=hi`.
#[derive(Clone, Debug)]
pub struct Scale {
    pub lo: f64,
    pub hi: f64,
    pub log: bool,
    /// Ticks at whole numbers only (steps, op positions).
    pub whole: bool,
}

impl Scale {
    /// A linear axis covering every finite value of `values` (and `lo..hi` when there is none).
    pub fn linear(values: impl Iterator<Item = f64>, pad: bool) -> Scale {
        let (mut lo, mut hi) = bounds(values.filter(|v| v.is_finite())).unwrap_or((0.0, 1.0));
        if lo == hi {
            (lo, hi) = (lo - 0.5_f64.max(lo.abs() * 0.1), hi + 0.5_f64.max(hi.abs() * 0.1));
        } else if pad {
            let margin = (hi - lo) * 0.05;
            (lo, hi) = (lo - margin, hi + margin);
        }
        Scale { lo, hi, log: false, whole: false }
    }

    /// A linear axis of whole numbers (steps, positions): ticks never fall between two of them.
    pub fn whole(values: impl Iterator<Item = f64>) -> Scale {
        Scale { whole: true, ..Scale::linear(values, false) }
    }

    /// A logarithmic axis over whole decades covering the positive finite `values`, never below `floor`.
    pub fn log(values: impl Iterator<Item = f64>, floor: f64) -> Scale {
        let (lo, hi) = bounds(values.filter(|v| v.is_finite() && *v > 0.0)).unwrap_or((floor, 1.0));
        let lo = lo.max(floor).log10().floor();
        let hi = hi.max(floor).log10().ceil().max(lo + 1.0);
        Scale { lo: 10f64.powf(lo), hi: 10f64.powf(hi), log: true, whole: false }
    }

    /// Where `v` falls, 0 at `lo` and 1 at `hi` (values under a log axis's floor sit on it).
    fn frac(&self, v: f64) -> f64 {
        if self.log {
            let v = v.max(self.lo);
            (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    /// Tick positions: powers of ten on a log axis (every other one past eight decades), a 1-2-5 step on a
    /// linear one.
    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (self.lo.log10().round() as i32, self.hi.log10().round() as i32);
            let every = if b - a > 8 { 2 } else { 1 };
            return (a..=b).filter(|e| (e - a) % every == 0).map(|e| 10f64.powi(e)).collect();
        }
        let raw = (self.hi - self.lo) / 6.0;
        let magnitude = 10f64.powf(raw.log10().floor());
        let mut step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * magnitude).find(|s| *s >= raw).unwrap_or(raw);
        if self.whole {
            step = step.max(1.0).round();
        }
        let mut t = (self.lo / step).ceil() * step;
        let mut out = Vec::new();
        while t <= self.hi + step * 1e-9 && out.len() < 20 {
            out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
            t += step;
        }
        out
    }
}

fn bounds(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| Some(acc.map_or((v, v), |(lo, hi): (f64, f64)| (lo.min(v), hi.max(v)))))
}

/// A line of `(x, y)` points, ascending in x. A non-finite y breaks the line and is drawn as a triangle at
/// the top of the plot (inf or NaN is the spike that matters most).
pub struct Line {
    pub name: String,
    pub colour: &'static str,
    pub width: f64,
    pub dashed: bool,
    /// Drawn against the right axis.
    pub right: bool,
    /// Drawn as steps (the value holds until the next point): a loss scale.
    pub steps: bool,
    pub points: Vec<(f64, f64)>,
}

/// A point drawn on its own, with a title shown on hover.
pub struct Marker {
    pub x: f64,
    pub y: f64,
    pub colour: &'static str,
    pub title: String,
}

/// A vertical line across the plot, labelled at its top (the culprit, the first divergent step).
pub struct Mark {
    pub x: f64,
    pub colour: &'static str,
    pub label: String,
}

/// A line plot.
pub struct Plot {
    pub id: String,
    pub x_label: String,
    pub y_label: String,
    /// The right axis's label when some line is drawn against it.
    pub y2_label: Option<String>,
    pub x: Scale,
    pub y: Scale,
    pub y2: Option<Scale>,
    pub lines: Vec<Line>,
    pub markers: Vec<Marker>,
    /// Legend entries for the markers' colours.
    pub marker_legend: Vec<(&'static str, String)>,
    pub marks: Vec<Mark>,
    /// Shaded x ranges with a title (`(x0, x1, colour, title)`): skipped steps.
    pub bands: Vec<(f64, f64, &'static str, String)>,
    /// Horizontal reference lines on the left axis (`(y, label)`): a threshold.
    pub rules: Vec<(f64, String)>,
}

fn px(x: f64) -> String {
    let r = (x * 10.0).round() / 10.0;
    if r == r.trunc() {
        format!("{}", r as i64)
    } else {
        format!("{r:.1}")
    }
}

impl Plot {
    fn sx(&self, x: f64) -> f64 {
        LEFT + self.x.frac(x) * PLOT_WIDTH
    }

    fn sy(&self, scale: &Scale, y: f64) -> f64 {
        TOP + (1.0 - scale.frac(y).clamp(0.0, 1.0)) * (HEIGHT - TOP - BOTTOM)
    }

    /// The SVG element.
    pub fn svg(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg id="{}" class="plot" viewBox="0 0 {} {}" width="{}" height="{}" role="img">"#,
            escape(&self.id),
            WIDTH,
            HEIGHT,
            WIDTH,
            HEIGHT
        );
        let (x0, x1, y0, y1) = (LEFT, LEFT + PLOT_WIDTH, TOP, HEIGHT - BOTTOM);
        for (a, b, colour, title) in &self.bands {
            let (l, r) = (self.sx(*a), self.sx(*b));
            let _ = write!(
                s,
                r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{colour}" opacity="0.25"><title>{}</title></rect>"#,
                px(l),
                px(y0),
                px((r - l).max(2.0)),
                px(y1 - y0),
                escape(title)
            );
        }
        self.axes(&mut s, x0, x1, y0, y1);
        for (y, label) in &self.rules {
            let py = self.sy(&self.y, *y);
            let _ = write!(
                s,
                r##"<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#888" stroke-dasharray="2 3"/><text x="{}" y="{}" class="note">{}</text>"##,
                px(x0),
                px(x1),
                px(py),
                px(py),
                px(x0 + 4.0),
                px(py - 3.0),
                escape(label)
            );
        }
        for line in &self.lines {
            self.line(&mut s, line);
        }
        for m in &self.markers {
            let _ = write!(
                s,
                r#"<circle cx="{}" cy="{}" r="3.5" fill="{}"><title>{}</title></circle>"#,
                px(self.sx(m.x)),
                px(self.sy(&self.y, m.y)),
                m.colour,
                escape(&m.title)
            );
        }
        for mark in &self.marks {
            let x = self.sx(mark.x);
            let anchor = if x > x0 + PLOT_WIDTH * 0.6 { "end" } else { "start" };
            let dx = if anchor == "end" { -4.0 } else { 4.0 };
            let _ = write!(
                s,
                r#"<line class="mark" x1="{}" x2="{}" y1="{}" y2="{}" stroke="{}" stroke-width="1.5"/><text x="{}" y="{}" fill="{}" text-anchor="{anchor}" class="marklabel">{}</text>"#,
                px(x),
                px(x),
                px(y0),
                px(y1),
                mark.colour,
                px(x + dx),
                px(y0 + 11.0),
                mark.colour,
                escape(&mark.label)
            );
        }
        // Beside the right axis's tick labels when there is one.
        match self.y2 {
            Some(_) => self.legend(&mut s, x1 + 44.0, 14),
            None => self.legend(&mut s, x1 + 12.0, 20),
        }
        s.push_str("</svg>");
        s
    }

    fn axes(&self, s: &mut String, x0: f64, x1: f64, y0: f64, y1: f64) {
        let _ = write!(
            s,
            r##"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#444"/>"##,
            px(x0),
            px(y0),
            px(x1 - x0),
            px(y1 - y0)
        );
        for t in self.x.ticks() {
            let x = self.sx(t);
            let _ = write!(
                s,
                r##"<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#444"/><text x="{}" y="{}" text-anchor="middle" class="tick">{}</text>"##,
                px(x),
                px(x),
                px(y1),
                px(y1 + 4.0),
                px(x),
                px(y1 + 16.0),
                tick_text(t, self.x.log)
            );
        }
        for t in self.y.ticks() {
            let y = self.sy(&self.y, t);
            let _ = write!(
                s,
                r##"<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end" class="tick">{}</text>"##,
                px(x0),
                px(x1),
                px(y),
                px(y),
                px(x0 - 5.0),
                px(y + 4.0),
                tick_text(t, self.y.log)
            );
        }
        if let Some(y2) = &self.y2 {
            for t in y2.ticks() {
                let y = self.sy(y2, t);
                let _ = write!(
                    s,
                    r##"<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#444"/><text x="{}" y="{}" class="tick">{}</text>"##,
                    px(x1),
                    px(x1 + 4.0),
                    px(y),
                    px(y),
                    px(x1 + 6.0),
                    px(y + 4.0),
                    tick_text(t, y2.log)
                );
            }
        }
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle" class="axis">{}</text>"#,
            px((x0 + x1) / 2.0),
            px(HEIGHT - 8.0),
            escape(&self.x_label)
        );
        let _ = write!(
            s,
            r#"<text transform="translate(14 {}) rotate(-90)" text-anchor="middle" class="axis">{}</text>"#,
            px((y0 + y1) / 2.0),
            escape(&self.y_label)
        );
        if let Some(label) = &self.y2_label {
            let _ = write!(
                s,
                r#"<text transform="translate({} {}) rotate(90)" text-anchor="middle" class="axis">{}</text>"#,
                px(WIDTH - 8.0),
                px((y0 + y1) / 2.0),
                escape(label)
            );
        }
    }

    fn line(&self, s: &mut String, line: &Line) {
        let scale = if line.right { self.y2.as_ref().unwrap_or(&self.y) } else { &self.y };
        // Finite runs become polylines; non-finite points triangles at the top.
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        let mut spikes = Vec::new();
        for &(x, y) in &line.points {
            if y.is_finite() {
                runs.last_mut().expect("one run at least").push((self.sx(x), self.sy(scale, y)));
            } else {
                spikes.push((x, y));
                runs.push(Vec::new());
            }
        }
        let dash = if line.dashed { r#" stroke-dasharray="6 4""# } else { "" };
        for run in runs.iter().filter(|r| !r.is_empty()) {
            let mut points = decimate(run);
            if line.steps {
                points = as_steps(&points);
            }
            let mut text = String::new();
            for (x, y) in &points {
                let _ = write!(text, "{},{} ", px(*x), px(*y));
            }
            if points.len() == 1 {
                let (x, y) = points[0];
                let _ =
                    write!(s, r#"<circle cx="{}" cy="{}" r="2.5" fill="{}"/>"#, px(x), px(y), line.colour);
            }
            let _ = write!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="{}"{dash}><title>{}</title></polyline>"#,
                text.trim_end(),
                line.colour,
                line.width,
                escape(&line.name)
            );
        }
        for (x, y) in spikes {
            let (cx, cy) = (self.sx(x), TOP + 6.0);
            let _ = write!(
                s,
                r#"<path d="M{} {}l-5 9h10z" fill="{}"><title>{} at {}: {}</title></path>"#,
                px(cx),
                px(cy - 5.0),
                line.colour,
                escape(&line.name),
                fmt_num(x),
                fmt_num(y)
            );
        }
    }

    /// The legend at `x`, names cut to `chars` characters (the full name is the line's hover title).
    fn legend(&self, s: &mut String, x: f64, chars: usize) {
        let mut y = TOP + 10.0;
        // A line drawn in several pieces (broken where it has no point) is named once.
        let mut named = std::collections::HashSet::new();
        for line in self.lines.iter().filter(|l| !l.name.is_empty() && named.insert(&l.name)).take(14) {
            let dash = if line.dashed { r#" stroke-dasharray="6 4""# } else { "" };
            let _ = write!(
                s,
                r#"<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="{}" stroke-width="{}"{dash}/><text x="{}" y="{}" class="legend">{}</text>"#,
                px(x),
                px(x + 18.0),
                px(y),
                px(y),
                line.colour,
                line.width.max(1.5),
                px(x + 22.0),
                px(y + 4.0),
                escape(&truncate(&line.name, chars))
            );
            y += 15.0;
        }
        for (colour, what) in &self.marker_legend {
            let _ = write!(
                s,
                r#"<circle cx="{}" cy="{}" r="3.5" fill="{colour}"/><text x="{}" y="{}" class="legend">{}</text>"#,
                px(x + 9.0),
                px(y),
                px(x + 22.0),
                px(y + 4.0),
                escape(what)
            );
            y += 15.0;
        }
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let head: String = text.chars().take(max - 1).collect();
        format!("{head}…")
    }
}

fn tick_text(v: f64, log: bool) -> String {
    if log {
        let e = v.log10().round() as i32;
        return if (-2..=3).contains(&e) { fmt_num(v) } else { format!("1e{e}") };
    }
    fmt_num(v)
}

/// Points in pixel space reduced to at most four per pixel column: the column's first, lowest, highest
/// and last point, in their original order. The drawn line is the same to the eye, and no spike is lost.
pub fn decimate(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(points.len().min(4 * PLOT_WIDTH as usize + 4));
    let mut start = 0;
    while start < points.len() {
        let column = points[start].0.floor();
        let mut end = start;
        while end < points.len() && points[end].0.floor() == column {
            end += 1;
        }
        let group = &points[start..end];
        if group.len() <= 4 {
            out.extend_from_slice(group);
        } else {
            // In SVG y grows downwards: the lowest value has the largest y.
            let (mut lo, mut hi) = (0, 0);
            for (i, p) in group.iter().enumerate() {
                if p.1 > group[lo].1 {
                    lo = i;
                }
                if p.1 < group[hi].1 {
                    hi = i;
                }
            }
            let mut keep = vec![0, lo, hi, group.len() - 1];
            keep.sort_unstable();
            keep.dedup();
            out.extend(keep.into_iter().map(|i| group[i]));
        }
        start = end;
    }
    out
}

/// A step line through `points`: each value holds until the next point.
fn as_steps(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2);
    for (i, &(x, y)) in points.iter().enumerate() {
        if i > 0 {
            out.push((x, points[i - 1].1));
        }
        out.push((x, y));
    }
    out
}

/// How a heatmap colours its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Colouring {
    /// A sequential scale over the decades of the positive values (magnitudes, errors).
    LogMagnitude,
    /// Zero is quiet; counts above zero go from orange to dark red by decade.
    Count,
}

/// A heatmap: rows x columns of optional values.
pub struct Heatmap {
    pub id: String,
    pub rows: Vec<String>,
    /// Column labels (steps), ascending.
    pub columns: Vec<u64>,
    /// Row-major; `None`: nothing recorded there.
    pub cells: Vec<Option<f64>>,
    pub colouring: Colouring,
    pub x_label: String,
    /// What a value is, with its unit, for the colour key.
    pub value_label: String,
    /// A cell to outline, as (row, step): where something began.
    pub outline: Option<(usize, u64)>,
    /// What an empty cell means (`no data`), in the key and on hover.
    pub empty: &'static str,
    /// What each cell is made of, shown on hover after its value (`rank 0: 3, rank 1: 5`), row-major as
    /// `cells`; empty when the value says it all.
    pub details: Vec<String>,
}

/// Most columns a heatmap draws: more steps are merged (the column keeps the largest value).
pub const MAX_COLUMNS: usize = 240;
/// Most rows a heatmap draws: more rows are merged (adjacent rows, the largest value).
pub const MAX_ROWS: usize = 120;

/// A heatmap as drawn: merged rows, step ranges, and cells.
struct Fitted {
    rows: Vec<String>,
    /// First and last step of each drawn column.
    columns: Vec<(u64, u64)>,
    cells: Vec<Option<f64>>,
    /// Each drawn cell's details: those of the cell whose value it keeps (empty when the map has none).
    details: Vec<String>,
}

impl Heatmap {
    /// Merges adjacent columns and rows, keeping the largest value, until the map fits the drawn size.
    fn fitted(&self) -> Fitted {
        let (nr, nc) = (self.rows.len(), self.columns.len());
        let col_groups = groups(nc, MAX_COLUMNS);
        let row_groups = groups(nr, MAX_ROWS);
        let rows = row_groups
            .iter()
            .map(|&(a, b)| {
                if b - a == 1 {
                    self.rows[a].clone()
                } else {
                    format!("{} .. {}", self.rows[a], self.rows[b - 1])
                }
            })
            .collect();
        let cols = col_groups.iter().map(|&(a, b)| (self.columns[a], self.columns[b - 1])).collect();
        let mut cells = Vec::with_capacity(row_groups.len() * col_groups.len());
        let mut details = Vec::new();
        for &(ra, rb) in &row_groups {
            for &(ca, cb) in &col_groups {
                let mut v: Option<f64> = None;
                // The cell whose value the merged cell keeps, for its details.
                let mut kept = None;
                for r in ra..rb {
                    for c in ca..cb {
                        if let Some(x) = self.cells[r * nc + c] {
                            if v.is_none_or(|old| x > old) {
                                kept = Some(r * nc + c);
                            }
                            v = Some(v.map_or(x, |old| old.max(x)));
                        }
                    }
                }
                cells.push(v);
                if !self.details.is_empty() {
                    let merged = (rb - ra) * (cb - ca) > 1;
                    details.push(match kept.and_then(|k| self.details.get(k)).filter(|d| !d.is_empty()) {
                        Some(d) if merged => format!("the largest merged cell: {d}"),
                        Some(d) => d.clone(),
                        None => String::new(),
                    });
                }
            }
        }
        Fitted { rows, columns: cols, cells, details }
    }

    /// The SVG element; each cell's row, steps and value are in data attributes the page's script shows
    /// on hover (a title per cell would weigh more than the map).
    pub fn svg(&self) -> String {
        let Fitted { rows, columns: cols, cells, details } = self.fitted();
        let label_width = 190.0;
        let width = WIDTH - label_width - 20.0;
        let cell_w = width / cols.len().max(1) as f64;
        let cell_h = (360.0 / rows.len().max(1) as f64).clamp(6.0, 16.0);
        let height = TOP + rows.len() as f64 * cell_h + 70.0;
        let positive = cells.iter().flatten().copied().filter(|v| v.is_finite() && *v > 0.0);
        let scale = Scale::log(positive, 1e-12);
        let mut s = String::new();
        let values: Vec<String> = cells.iter().map(|v| v.map_or(String::new(), fmt_num)).collect();
        let steps: Vec<String> =
            cols.iter().map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
        // Each distinct detail once, and per cell its number (empty: none): most cells repeat a few texts
        // (`rank 0: 0, rank 1: 0`), which written out per cell weighed a fifth of a large page.
        let details_attribute = if details.is_empty() {
            String::new()
        } else {
            let mut texts: Vec<&str> = Vec::new();
            let mut numbers: HashMap<&str, usize> = HashMap::new();
            let cells: Vec<String> = details
                .iter()
                .map(|d| match d.as_str() {
                    "" => String::new(),
                    d => numbers
                        .entry(d)
                        .or_insert_with(|| {
                            texts.push(d);
                            texts.len() - 1
                        })
                        .to_string(),
                })
                .collect();
            format!(
                r#" data-detail-texts="{}" data-details="{}""#,
                escape(&texts.join("\u{1f}")),
                cells.join(",")
            )
        };
        let _ = write!(
            s,
            r#"<svg id="{}" class="heatmap" viewBox="0 0 {} {}" width="{}" height="{}" role="img" data-x0="{}" data-y0="{}" data-cw="{}" data-ch="{}" data-rows="{}" data-steps="{}" data-values="{}" data-empty="{}"{}>"#,
            escape(&self.id),
            WIDTH,
            px(height),
            WIDTH,
            px(height),
            label_width,
            TOP,
            cell_w,
            cell_h,
            escape(&rows.join("\u{1f}")),
            steps.join(","),
            values.join(","),
            escape(self.empty),
            details_attribute
        );
        // Labels 11 px high: with thinner rows, every n-th row is labelled (hover names each one).
        let label_every = (11.0 / cell_h).ceil().max(1.0) as usize;
        for (r, label) in rows.iter().enumerate() {
            let y = TOP + r as f64 * cell_h;
            if r % label_every == 0 {
                let _ = write!(
                    s,
                    r#"<text x="{}" y="{}" text-anchor="end" class="rowlabel">{}</text>"#,
                    px(label_width - 6.0),
                    px(y + cell_h.max(9.0) * 0.8),
                    escape(&truncate(label, 30))
                );
            }
            // Adjacent cells of one colour are one rectangle.
            let mut c = 0;
            while c < cols.len() {
                let fill = self.fill(cells[r * cols.len() + c], &scale);
                let mut end = c + 1;
                while end < cols.len() && self.fill(cells[r * cols.len() + end], &scale) == fill {
                    end += 1;
                }
                let _ = write!(
                    s,
                    r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{fill}"/>"#,
                    px(label_width + c as f64 * cell_w),
                    px(y),
                    px((end - c) as f64 * cell_w),
                    px(cell_h)
                );
                c = end;
            }
        }
        if let Some((r, c)) = self.outlined() {
            let _ = write!(
                s,
                r##"<rect class="outline" x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#000" stroke-width="2"/>"##,
                px(label_width + c as f64 * cell_w),
                px(TOP + r as f64 * cell_h),
                px(cell_w),
                px(cell_h)
            );
        }
        let bottom = TOP + rows.len() as f64 * cell_h;
        let every = (cols.len() / 12).max(1);
        for (c, step) in steps.iter().enumerate().filter(|(c, _)| c % every == 0) {
            let _ = write!(
                s,
                r#"<text x="{}" y="{}" text-anchor="middle" class="tick">{}</text>"#,
                px(label_width + (c as f64 + 0.5) * cell_w),
                px(bottom + 14.0),
                step
            );
        }
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle" class="axis">{}</text>"#,
            px(label_width + width / 2.0),
            px(bottom + 32.0),
            escape(&self.x_label)
        );
        self.key(&mut s, &scale, label_width, bottom + 44.0);
        s.push_str("</svg>");
        s
    }

    /// The drawn (merged) row and column of the outlined cell.
    fn outlined(&self) -> Option<(usize, usize)> {
        let (row, step) = self.outline?;
        let column = self.columns.iter().position(|&c| c == step)?;
        let within =
            |n: usize, max: usize, i: usize| groups(n, max).iter().position(|&(a, b)| (a..b).contains(&i));
        Some((within(self.rows.len(), MAX_ROWS, row)?, within(self.columns.len(), MAX_COLUMNS, column)?))
    }

    fn fill(&self, v: Option<f64>, scale: &Scale) -> &'static str {
        match (v, self.colouring) {
            (None, _) => "#f2f2f2",
            (Some(v), _) if v.is_nan() => "#000000",
            (Some(v), Colouring::Count) if v <= 0.0 => "#e3efe3",
            (Some(v), Colouring::Count) => {
                const REDS: [&str; 4] = ["#fdae61", "#f46d43", "#d73027", "#a50026"];
                REDS[(v.log10().floor().max(0.0) as usize).min(REDS.len() - 1)]
            }
            (Some(v), Colouring::LogMagnitude) if v <= 0.0 => VIRIDIS[0],
            (Some(v), Colouring::LogMagnitude) => {
                let t = scale.frac(v).clamp(0.0, 1.0);
                VIRIDIS[((t * (VIRIDIS.len() - 1) as f64).round() as usize).min(VIRIDIS.len() - 1)]
            }
        }
    }

    fn key(&self, s: &mut String, scale: &Scale, x: f64, y: f64) {
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" class="legend">{}:</text>"#,
            px(x),
            px(y + 9.0),
            escape(&self.value_label)
        );
        let mut x = x + 8.0 * self.value_label.chars().count() as f64 + 12.0;
        let entries: Vec<(&str, String)> = match self.colouring {
            Colouring::Count => vec![
                ("#e3efe3", "0".into()),
                ("#fdae61", "1-9".into()),
                ("#f46d43", "10-99".into()),
                ("#d73027", "100-999".into()),
                ("#a50026", "1000+".into()),
            ],
            Colouring::LogMagnitude => {
                let (a, b) = (scale.lo.log10().round() as i32, scale.hi.log10().round() as i32);
                let step = ((b - a) / 6).max(1);
                (a..=b)
                    .step_by(step as usize)
                    .map(|e| (self.fill(Some(10f64.powi(e)), scale), tick_text(10f64.powi(e), true)))
                    .collect()
            }
        };
        for (fill, text) in entries.into_iter().chain([("#f2f2f2", self.empty.to_string())]) {
            let _ = write!(
                s,
                r##"<rect x="{}" y="{}" width="12" height="12" fill="{fill}" stroke="#999"/><text x="{}" y="{}" class="legend">{}</text>"##,
                px(x),
                px(y),
                px(x + 15.0),
                px(y + 10.0),
                escape(&text)
            );
            x += 22.0 + 7.0 * text.chars().count() as f64;
        }
    }
}

/// `n` items split into at most `max` runs of adjacent items, as `(start, end)` ranges.
fn groups(n: usize, max: usize) -> Vec<(usize, usize)> {
    let per = n.div_ceil(max.max(1)).max(1);
    (0..n).step_by(per).map(|a| (a, (a + per).min(n))).collect()
}

/// A perceptually even sequential scale (viridis, sampled at 16 points).
const VIRIDIS: [&str; 16] = [
    "#440154", "#481a6c", "#472f7d", "#414487", "#39568c", "#31688e", "#2a788e", "#23888e", "#1f988b",
    "#22a884", "#35b779", "#54c568", "#7ad151", "#a5db36", "#d2e21b", "#fde725",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimation_keeps_the_spike_and_bounds_the_points() {
        // 100,000 points over 700 pixel columns, one spike in the middle.
        let n = 100_000;
        let points: Vec<(f64, f64)> = (0..n)
            .map(|i| {
                let x = LEFT + i as f64 * PLOT_WIDTH / n as f64;
                (x, if i == 54_321 { 0.0 } else { 200.0 + (i % 7) as f64 })
            })
            .collect();
        let kept = decimate(&points);
        assert!(kept.len() <= 4 * (PLOT_WIDTH as usize + 1), "{} points kept", kept.len());
        assert!(kept.contains(&points[54_321]), "the spike is gone");
        assert!(kept.windows(2).all(|w| w[0].0 <= w[1].0), "order changed");
        // Few points pass unchanged.
        assert_eq!(decimate(&points[..3]), points[..3].to_vec());
    }

    #[test]
    fn log_axes_cover_whole_decades_and_ticks_read_well() {
        let s = Scale::log([3e-5, 0.2].into_iter(), 1e-9);
        assert_eq!((s.lo, s.hi), (1e-5, 1.0));
        assert_eq!(s.ticks().len(), 6);
        let l = Scale::linear([0.0, 9.0].into_iter(), false);
        assert_eq!(l.ticks(), [0.0, 2.0, 4.0, 6.0, 8.0]);
        let steps = Scale::whole([0.0, 2.0].into_iter());
        assert_eq!(steps.ticks(), [0.0, 1.0, 2.0]);
    }

    #[test]
    fn heatmaps_merge_what_does_not_fit() {
        assert_eq!(groups(5, 240), [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]);
        assert_eq!(groups(500, 240).len(), 167);
        let map = Heatmap {
            id: "h".into(),
            rows: vec!["a".into(), "b".into()],
            columns: (0..1000).collect(),
            cells: (0..2000).map(|i| if i == 1500 { Some(9.0) } else { Some(1.0) }).collect(),
            colouring: Colouring::LogMagnitude,
            x_label: "step".into(),
            value_label: "max |x|".into(),
            outline: Some((1, 500)),
            empty: "no data",
            details: Vec::new(),
        };
        // The outlined cell is found in its merged column.
        let (r, c) = map.outlined().unwrap();
        assert_eq!(r, 1);
        let per = 1000_usize.div_ceil(MAX_COLUMNS);
        assert_eq!(c, 500 / per);
        assert!(map.svg().contains("class=\"outline\""));
        let Fitted { rows, columns: cols, cells, .. } = map.fitted();
        assert_eq!(rows.len(), 2);
        assert!(cols.len() <= MAX_COLUMNS);
        assert_eq!(cells.iter().flatten().filter(|v| **v == 9.0).count(), 1, "the peak survives merging");
    }
}
