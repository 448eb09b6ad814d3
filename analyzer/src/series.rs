//! What a run says over its steps, read from per-tensor statistics (stored, else decoded the way the
//! overflow engine does): the loss, the gradient norms (global and per layer), the largest magnitude and
//! the inf/NaN count of each layer, and the anomalies of each rank. `analyzer report` plots it.
//!
//! The names of the ops carry the structure: the loss is the last one-element output of an op named like a
//! loss, a gradient is the input of an optimizer op (`Apply*`) shaped like the parameter it updates, and a
//! layer is the `layer_N` / `layers.N` / `blocks.N` part of a name (else the name's first part after
//! `model/`; an eager kernel's name, `MatMulV2_13`, gives its type), split into forward, backward
//! (`gradients/`, `.backward`) and update (`optimizer/`, `Apply*`).

use crate::filter::Filter;
use crate::gathered_stats::GatheredStats;
use crate::index::{Index, IndexedOp, OpId};
use crate::overflow::{gather_stats, scalar_value, scaler_multiply, Anomaly};
use crate::problems::InputProblems;
use crate::sources::Source;
use std::collections::{BTreeMap, HashMap};

/// A value per step (one rank's).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Line {
    /// What it is (`loss`, `global`, `layer_0`).
    pub name: String,
    /// `(step, value)`, ascending by step; a non-finite value is kept (a spike the plot must show).
    pub points: Vec<(u64, f64)>,
}

/// A table of values, `rows` x `steps`, row-major; `None` where the run has nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Grid {
    pub rows: Vec<String>,
    pub steps: Vec<u64>,
    pub cells: Vec<Option<f64>>,
}

impl Grid {
    /// An empty grid of this shape.
    pub fn new(rows: Vec<String>, steps: Vec<u64>) -> Grid {
        let cells = vec![None; rows.len() * steps.len()];
        Grid { rows, steps, cells }
    }

    /// The cell of row `r` and step position `s`.
    pub fn get(&self, r: usize, s: usize) -> Option<f64> {
        self.cells[r * self.steps.len() + s]
    }

    /// Folds `value` into the cell of row `r` and step position `s` with `merge`.
    pub fn merge(&mut self, r: usize, s: usize, value: f64, merge: fn(f64, f64) -> f64) {
        let cell = &mut self.cells[r * self.steps.len() + s];
        *cell = Some(cell.map_or(value, |old| merge(old, value)));
    }
}

/// One rank's loss, global gradient norm and per-layer gradient norms per step, read as [`RunSeries::loss`]
/// and [`RunSeries::grad_norms`] are for the lowest rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RankLines {
    pub rank: u32,
    pub loss: Option<Line>,
    pub grad_norm: Option<Line>,
    /// One line per layer (in the order the rank updates them), when the rank updates several layers.
    pub layer_grad_norms: Vec<Line>,
}

/// A run's series over its steps.
#[derive(Clone, Debug, Default)]
pub struct RunSeries {
    /// Every step of the selection, ascending.
    pub steps: Vec<u64>,
    /// Every rank of the selection, ascending.
    pub ranks: Vec<u32>,
    /// The rank the lines below follow (the lowest).
    pub rank: u32,
    /// The loss per step, and the op it was read from.
    pub loss: Option<(String, Line)>,
    /// The loss was read as the input of a loss scaler's multiply (no op is named like a loss), not as an
    /// op's output.
    pub loss_from_scaler: bool,
    /// When the loss was read from a loss scaler's multiply: the scale it multiplied by (its power-of-two
    /// one-element input) per step, and that op.
    pub scaler_scale: Option<(String, Line)>,
    /// The global gradient norm (the root of the sum of the squared per-parameter norms) and one line per
    /// layer; empty when the run dumps no optimizer op.
    pub grad_norms: Vec<Line>,
    /// Every other rank's loss and gradient norms (global and per layer), ascending by rank (a rank whose
    /// loss is NaN, or whose layer's gradient is, while the lowest rank's is not must show on the page).
    pub other_ranks: Vec<RankLines>,
    /// Largest |x| of each layer's outputs per step (max over ranks).
    pub max_abs: Grid,
    /// inf and NaN values in each layer's outputs per step (summed over ranks).
    pub nonfinite: Grid,
    /// What each cell of `nonfinite` adds, row-major as its cells: the ranks whose outputs were read there,
    /// ascending, with each one's count (a cell must not read as one layer's count when it adds ranks).
    pub nonfinite_by_rank: Vec<BTreeMap<u32, u64>>,
    /// Tensors with inf, NaN or saturated values, per rank and step.
    pub rank_anomalies: Grid,
    /// Tensors the series could not use: no statistics stored and no data to compute them from.
    pub tensors_without_statistics: usize,
    /// What the source misses and the tensors that could not be read (the series leave them out).
    pub problems: InputProblems,
}

/// Whether an op runs forward, backward or updates the weights (the heatmap's rows are split by it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    Forward,
    Backward,
    Update,
}

/// The phase of an op, from its name and type.
pub fn phase(op: &IndexedOp) -> Phase {
    let name = op.name.as_str();
    if is_optimizer(op) || name.starts_with("optimizer/") {
        Phase::Update
    } else if name.starts_with("gradients/") || name.contains(".backward") || name.contains("_grad/") {
        Phase::Backward
    } else {
        Phase::Forward
    }
}

/// Whether the op updates a parameter (CANN's optimizer kernels are `ApplyAdamD`, `ApplyGradientDescent`,
/// `ApplyMomentum`, ...).
fn is_optimizer(op: &IndexedOp) -> bool {
    op.op_type.starts_with("Apply")
}

/// The layer an op (or parameter) belongs to: a `layer_3` / `layer3` / `block_2` part of its name, or a
/// number after `layers` / `blocks` / `h` (`model.layers.3.mlp`); else the first part after the common
/// prefixes (`model/embedding/GatherV2` -> `embedding`).
pub fn layer_of(name: &str) -> String {
    const GROUPS: [&str; 6] = ["layer", "layers", "block", "blocks", "h", "encoder"];
    let parts: Vec<&str> = name.split(['/', '.']).filter(|p| !p.is_empty()).collect();
    for (i, part) in parts.iter().enumerate() {
        let digits = part.trim_start_matches(|c: char| !c.is_ascii_digit());
        let prefix = part[..part.len() - digits.len()].trim_end_matches(['_', '-']);
        if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) {
            if GROUPS.contains(&prefix.to_ascii_lowercase().as_str()) {
                return part.to_string();
            }
            if prefix.is_empty() && i > 0 && GROUPS.contains(&parts[i - 1].to_ascii_lowercase().as_str()) {
                return format!("{}.{}", parts[i - 1], part);
            }
        }
    }
    // An eager kernel's name carries no layer (`MatMulV2_13`, a per-type counter): its type is the row.
    if parts.len() == 1 {
        let counter = name.trim_end_matches(|c: char| c.is_ascii_digit());
        return counter.strip_suffix('_').filter(|t| !t.is_empty()).unwrap_or(name).to_string();
    }
    const SKIP: [&str; 6] = ["model", "gradients", "optimizer", "Module", "Functional", "Tensor"];
    parts.iter().find(|p| !SKIP.contains(p)).map_or_else(|| name.to_string(), |p| p.to_string())
}

/// The row label of an op in the layer heatmaps: its layer, marked by phase.
pub fn row_label(phase: Phase, layer: &str) -> String {
    match phase {
        Phase::Forward => layer.to_string(),
        Phase::Backward => format!("{layer} (backward)"),
        Phase::Update => format!("{layer} (update)"),
    }
}

/// Whether an op's name says it computes the loss (and not its gradient or its scaling).
fn names_a_loss(op: &IndexedOp) -> bool {
    crate::roles::names_a_loss(&op.name)
}

/// The series of the ops `filter` keeps (`progress`: a bar on stderr while statistics are decoded).
pub fn series(source: &dyn Source, filter: &Filter, progress: bool) -> RunSeries {
    let index = source.index();
    let ops = filter.op_ids(index);
    let mut problems = InputProblems::of_sources(&[source]);
    let stats = gather_stats(source, &ops, &mut problems, progress);
    RunSeries { problems, ..build(index, &ops, &stats) }
}

/// [`series`] from statistics already gathered (`stats` may lack tensors: they are counted, not guessed).
pub fn build(index: &Index, ops: &[OpId], stats: &GatheredStats) -> RunSeries {
    let mut steps: Vec<u64> = ops.iter().map(|&o| index.ops[o].step).collect();
    steps.sort_unstable();
    steps.dedup();
    let mut ranks: Vec<u32> = ops.iter().map(|&o| index.ops[o].rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let rank = ranks.first().copied().unwrap_or(0);
    let step_pos: HashMap<u64, usize> = steps.iter().enumerate().map(|(i, &s)| (s, i)).collect();

    // Rows: layers in the order they first run, forward rows first, then backward, then update.
    let mut first_seen: HashMap<String, usize> = HashMap::new();
    let mut keys: Vec<(Phase, String)> = Vec::new();
    let mut key_of: Vec<usize> = Vec::with_capacity(ops.len());
    let mut key_ids: HashMap<(Phase, String), usize> = HashMap::new();
    for &o in ops {
        let op = &index.ops[o];
        let layer = layer_of(&op.name);
        let n = first_seen.len();
        first_seen.entry(layer.clone()).or_insert(n);
        let key = (phase(op), layer);
        let id = *key_ids.entry(key.clone()).or_insert_with(|| {
            keys.push(key);
            keys.len() - 1
        });
        key_of.push(id);
    }
    let mut row_order: Vec<usize> = (0..keys.len()).collect();
    row_order.sort_by_key(|&k| (keys[k].0, first_seen[&keys[k].1]));
    let mut row_of_key = vec![0; keys.len()];
    for (row, &k) in row_order.iter().enumerate() {
        row_of_key[k] = row;
    }
    let rows: Vec<String> = row_order.iter().map(|&k| row_label(keys[k].0, &keys[k].1)).collect();
    let mut max_abs = Grid::new(rows.clone(), steps.clone());
    let mut nonfinite = Grid::new(rows, steps.clone());
    let mut nonfinite_by_rank = vec![BTreeMap::new(); nonfinite.cells.len()];
    let mut rank_anomalies = Grid::new(ranks.iter().map(|r| format!("rank {r}")).collect(), steps.clone());
    let rank_pos: HashMap<u32, usize> = ranks.iter().enumerate().map(|(i, &r)| (r, i)).collect();

    // Per rank and step: the loss (op named like one), the loss a scaler multiplies, and the sum of squared
    // parameter-gradient norms, globally and per layer (every rank: a rank whose layer departs must show).
    let mut loss_of: BTreeMap<u32, BTreeMap<u64, (OpId, f64)>> = BTreeMap::new();
    let mut scaled_of: BTreeMap<u32, BTreeMap<u64, (OpId, f64, f64)>> = BTreeMap::new();
    let mut grad_sq_of: BTreeMap<u32, BTreeMap<u64, f64>> = BTreeMap::new();
    let mut layer_grad_sq_of: BTreeMap<u32, BTreeMap<String, BTreeMap<u64, f64>>> = BTreeMap::new();
    let mut layer_first_of: BTreeMap<u32, HashMap<String, usize>> = BTreeMap::new();
    let mut without = 0;

    for (&o, &key) in ops.iter().zip(&key_of) {
        let op = &index.ops[o];
        let s = step_pos[&op.step];
        let row = row_of_key[key];
        for t in op.tensors() {
            let Some(st) = stats.get(&t) else {
                without += 1;
                continue;
            };
            let anomaly = Anomaly::of(&st, index.tensors[t].dtype.is_float());
            let found = if anomaly.any() { 1.0 } else { 0.0 };
            rank_anomalies.merge(rank_pos[&op.rank], s, found, |a, b| a + b);
        }
        for t in op.outputs() {
            let Some(st) = stats.get(&t) else { continue };
            let biggest = st.max.abs().max(st.min.abs());
            if biggest.is_finite() {
                max_abs.merge(row, s, biggest, f64::max);
            }
            let count = st.nan + st.pos_inf + st.neg_inf;
            nonfinite.merge(row, s, count as f64, |a, b| a + b);
            *nonfinite_by_rank[row * steps.len() + s].entry(op.rank).or_default() += count;
        }
        if names_a_loss(op) {
            if let Some(st) = op.outputs().filter_map(|t| stats.get(&t)).find(|st| st.count == 1) {
                loss_of.entry(op.rank).or_default().insert(op.step, (o, scalar_value(&st)));
            }
        } else if let Some((value, scale)) = scaler_multiply(op, &|t| stats.get(&t)) {
            scaled_of.entry(op.rank).or_default().entry(op.step).or_insert((o, value, scale));
        }
        if let Some(norm) = gradient_norm(index, op, stats) {
            *grad_sq_of.entry(op.rank).or_default().entry(op.step).or_default() += norm * norm;
            let layer = layer_of(parameter_name(op));
            let layer_first = layer_first_of.entry(op.rank).or_default();
            let n = layer_first.len();
            layer_first.entry(layer.clone()).or_insert(n);
            let layers = layer_grad_sq_of.entry(op.rank).or_default();
            *layers.entry(layer).or_default().entry(op.step).or_default() += norm * norm;
        }
    }

    // A rank's per-layer lines in the order it first updates each layer; none when it updates one layer
    // (that line would only repeat the global one).
    let mut layer_lines = |r: u32| -> Vec<Line> {
        let first = layer_first_of.remove(&r).unwrap_or_default();
        let mut layers: Vec<(String, BTreeMap<u64, f64>)> =
            layer_grad_sq_of.remove(&r).unwrap_or_default().into_iter().collect();
        layers.sort_by_key(|(layer, _)| first[layer]);
        layers
            .into_iter()
            .filter(|_| first.len() > 1)
            .map(|(name, by_step)| Line {
                name,
                points: by_step.into_iter().map(|(s, sq)| (s, sq.sqrt())).collect(),
            })
            .collect()
    };
    let other_ranks = ranks
        .iter()
        .filter(|&&r| r != rank)
        .map(|&r| {
            let loss = loss_of.remove(&r).unwrap_or_default();
            let scaled = scaled_of.remove(&r).unwrap_or_default();
            let loss = if loss.is_empty() {
                scaled.into_iter().map(|(step, (o, value, _))| (step, (o, value))).collect()
            } else {
                loss
            };
            let line = |name: &str, points: Vec<(u64, f64)>| {
                (!points.is_empty()).then(|| Line { name: name.into(), points })
            };
            let grad = grad_sq_of.remove(&r).unwrap_or_default();
            RankLines {
                rank: r,
                loss: line("loss", loss.into_iter().map(|(step, (_, v))| (step, v)).collect()),
                grad_norm: line("global", grad.into_iter().map(|(step, sq)| (step, sq.sqrt())).collect()),
                layer_grad_norms: layer_lines(r),
            }
        })
        .collect();
    let loss = loss_of.remove(&rank).unwrap_or_default();
    let scaled_loss = scaled_of.remove(&rank).unwrap_or_default();
    let grad_sq = grad_sq_of.remove(&rank).unwrap_or_default();
    // Ops named like a loss first; else (eager kernels named by type) the loss a scaler multiplies.
    let loss_from_scaler = loss.is_empty() && !scaled_loss.is_empty();
    let scaler_scale = scaled_loss.values().next().filter(|_| loss_from_scaler).map(|&(o, _, _)| {
        let points = scaled_loss.iter().map(|(&step, &(_, _, scale))| (step, scale)).collect();
        (index.ops[o].name.to_string(), Line { name: "loss scale".into(), points })
    });
    let loss: BTreeMap<u64, (OpId, f64)> = if loss_from_scaler {
        scaled_loss.into_iter().map(|(step, (o, value, _))| (step, (o, value))).collect()
    } else {
        loss
    };
    let loss = loss.values().next().map(|&(o, _)| {
        let points = loss.iter().map(|(&step, &(_, v))| (step, v)).collect();
        (index.ops[o].name.to_string(), Line { name: "loss".into(), points })
    });
    let mut grad_norms = Vec::new();
    if !grad_sq.is_empty() {
        let points = grad_sq.iter().map(|(&s, &sq)| (s, sq.sqrt())).collect();
        grad_norms.push(Line { name: "global".into(), points });
        grad_norms.extend(layer_lines(rank));
    }
    RunSeries {
        steps,
        ranks,
        rank,
        loss,
        loss_from_scaler,
        scaler_scale,
        grad_norms,
        other_ranks,
        max_abs,
        nonfinite,
        nonfinite_by_rank,
        rank_anomalies,
        tensors_without_statistics: without,
        problems: InputProblems::default(),
    }
}

/// The parameter an optimizer op updates: its name without the `optimizer/` prefix and the op's own last
/// part (`optimizer/model/layer_0/attn/qkv/weight/ApplyAdam` -> `model/layer_0/attn/qkv/weight`).
fn parameter_name(op: &IndexedOp) -> &str {
    let name = op.name.strip_prefix("optimizer/").unwrap_or(&op.name);
    name.rsplit_once('/').map_or(name, |(param, _)| param)
}

/// The L2 norm of the gradient an optimizer op applies: its last input shaped like the parameter (input 0),
/// which is where CANN's `Apply*` kernels take it (`ApplyAdamD`: var, m, v, ..., grad; `ApplyMomentum`:
/// var, accum, lr, grad, momentum). Infinite when the gradient holds inf or NaN.
fn gradient_norm(index: &Index, op: &IndexedOp, stats: &GatheredStats) -> Option<f64> {
    if !is_optimizer(op) {
        return None;
    }
    let mut inputs = op.inputs();
    let var = inputs.next()?;
    let shape = &index.tensors[var].shape;
    let grad = inputs.rev().find(|&t| index.tensors[t].shape == *shape)?;
    let st = stats.get(&grad)?;
    Some(if st.has_nonfinite() { f64::INFINITY } else { st.l2_norm })
}

#[cfg(test)]
mod tests {
    use super::*;
    use accutrace_formats::stats::TensorStats;

    #[test]
    fn the_loss_is_found_by_name_or_as_what_a_scaler_multiplies() {
        use crate::index::{Io, TensorInfo};
        use accutrace_formats::DType;
        let scalar = |v: f32| TensorStats::of_f32(&[v], DType::FLOAT);
        let mut index = Index::default();
        let mut stats = BTreeMap::new();
        // Eager kernels: the loss, then the scaler's multiply (loss x 1024), then a multiply of two scalars
        // neither of which is a scale.
        for (step, loss) in [(0u64, 4.5f32), (1, 4.25)] {
            for (name, inputs) in [("Mul_0", [loss, 1024.0]), ("Mul_1", [3.0, 5.0])] {
                let op = index.push_op(name.into(), "Mul".into(), step, 0);
                for (i, v) in inputs.into_iter().enumerate() {
                    let t = index.push_tensor(TensorInfo::for_test(
                        op,
                        Io::Input,
                        i as u32,
                        DType::FLOAT,
                        vec![],
                    ));
                    stats.insert(t, scalar(v));
                }
            }
        }
        let ops: Vec<OpId> = (0..index.ops.len()).collect();
        let found = build(&index, &ops, &stats.into());
        assert!(found.loss_from_scaler);
        let (op, line) = found.loss.expect("a loss");
        assert_eq!(op, "Mul_0");
        assert_eq!(line.points, [(0, 4.5), (1, 4.25)]);
        let (op, scale) = found.scaler_scale.expect("the scale it multiplied by");
        assert_eq!(op, "Mul_0");
        assert_eq!(scale.points, [(0, 1024.0), (1, 1024.0)]);
    }

    #[test]
    fn every_ranks_per_layer_gradient_norms_are_kept_a_nan_one_infinite() {
        use crate::index::{Io, TensorInfo};
        use accutrace_formats::DType;
        let mut index = Index::default();
        let mut stats = BTreeMap::new();
        // Two ranks update layer_0 and layer_1 at two steps; rank 1's layer_1 gradient holds a NaN at step 1.
        for step in 0..2u64 {
            for rank in 0..2u32 {
                for layer in ["layer_0", "layer_1"] {
                    let name = format!("optimizer/model/{layer}/w/ApplyAdam");
                    let op = index.push_op(name, "ApplyAdamD".into(), step, rank);
                    let nan = step == 1 && rank == 1 && layer == "layer_1";
                    for (i, values) in
                        [[1.0f32, 2.0], [0.5, if nan { f32::NAN } else { 0.5 }]].iter().enumerate()
                    {
                        let info = TensorInfo::for_test(op, Io::Input, i as u32, DType::FLOAT, vec![2]);
                        let t = index.push_tensor(info);
                        stats.insert(t, TensorStats::of_f32(values, DType::FLOAT));
                    }
                }
            }
        }
        let ops: Vec<OpId> = (0..index.ops.len()).collect();
        let found = build(&index, &ops, &stats.into());
        let names: Vec<&str> = found.grad_norms.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["global", "layer_0", "layer_1"]);
        let other = &found.other_ranks[0];
        assert_eq!(other.rank, 1);
        let layers: Vec<&str> = other.layer_grad_norms.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(layers, ["layer_0", "layer_1"], "rank 1's layers are kept, not only rank 0's");
        let layer_1 = &other.layer_grad_norms[1].points;
        assert_eq!(layer_1[0], found.grad_norms[2].points[0], "step 0 agrees with rank 0");
        assert!(layer_1[1].1.is_infinite(), "the NaN gradient reads infinite: {layer_1:?}");
        assert!(found.grad_norms[2].points[1].1.is_finite());
    }

    #[test]
    fn layers_come_from_the_names_people_give_them() {
        assert_eq!(layer_of("model/layer_0/attn/qkv/MatMul"), "layer_0");
        assert_eq!(layer_of("gradients/model/layer_12/mlp/Gelu_grad/GeluGrad"), "layer_12");
        assert_eq!(layer_of("Module.layers.3.mlp.forward.0"), "layers.3");
        assert_eq!(layer_of("transformer/h_2/attn"), "h_2");
        assert_eq!(layer_of("model/embedding/GatherV2"), "embedding");
        assert_eq!(layer_of("optimizer/model/ln_f/gamma/ApplyAdam"), "ln_f");
        // A number that is not a layer's stays part of the name.
        assert_eq!(layer_of("model/fc1/MatMul"), "fc1");
        // Eager kernels are grouped by type.
        assert_eq!(layer_of("MatMulV2_13"), "MatMulV2");
        assert_eq!(layer_of("ApplyAdamD_0"), "ApplyAdamD");
    }
}
