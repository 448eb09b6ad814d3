//! The loss scale by step and rank, where the run shows it: by name, or as the power of two a loss scaler's
//! multiply reads. The one detection `overflow`, `check` and the report page share.

use crate::index::{Index, IndexedOp, OpId, TensorId};
use accutrace_formats::stats::TensorStats;
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct LossScale {
    pub step: u64,
    pub rank: u32,
    pub op: String,
    /// Which tensor of `op` holds it: `input` (the power-of-two scalar multiplying the loss) or `output`
    /// (a scale-update op's new scale).
    pub tensor: &'static str,
    pub value: f64,
}

/// The loss scales by step and rank, where the run shows them, ordered by rank, step and execution: by name
/// ([`loss_scale_value`]), and as the scale a loss scaler's multiply reads ([`scaler_multiply`], the first
/// per step and rank). A run's scales are those by name; where no op is named like a scale (eager kernels
/// are named by type, `Mul_0`), those by multiply. The one detection `overflow`, `check` and the report page
/// share. `stats`: a tensor's statistics, when known.
pub(crate) fn loss_scale_candidates(
    index: &Index,
    ops: &[OpId],
    stats: &dyn Fn(TensorId) -> Option<TensorStats>,
) -> (Vec<LossScale>, Vec<LossScale>) {
    let mut ordered = ops.to_vec();
    ordered.sort_by_key(|&o| (index.ops[o].rank, index.ops[o].step, index.ops[o].order));
    let found = |o: OpId, tensor, value| {
        let op = &index.ops[o];
        LossScale { step: op.step, rank: op.rank, op: op.name.to_string(), tensor, value }
    };
    let named: Vec<LossScale> = ordered
        .iter()
        .filter_map(|&o| loss_scale_value(index, o, stats).map(|(tensor, value)| found(o, tensor, value)))
        .collect();
    let mut multiplied: Vec<LossScale> = Vec::new();
    for &o in &ordered {
        let op = &index.ops[o];
        if multiplied.last().is_some_and(|l| (l.rank, l.step) == (op.rank, op.step)) {
            continue;
        }
        if let Some((_, scale)) = scaler_multiply(op, stats) {
            multiplied.push(found(o, "input", scale));
        }
    }
    (named, multiplied)
}

/// The value of a one-element tensor from its statistics: NaN or inf when that is what it held.
pub(crate) fn scalar_value(st: &TensorStats) -> f64 {
    if st.nan > 0 {
        f64::NAN
    } else if st.pos_inf > 0 {
        f64::INFINITY
    } else if st.neg_inf > 0 {
        f64::NEG_INFINITY
    } else {
        st.max
    }
}

/// The loss and the scale as a loss scaler's multiply reads them: a `Mul` of two one-element inputs, one of
/// them a power of two of at least 2 (the scale), the other the loss (where eager kernel names say nothing
/// of a loss).
pub(crate) fn scaler_multiply(
    op: &IndexedOp,
    stats: &dyn Fn(TensorId) -> Option<TensorStats>,
) -> Option<(f64, f64)> {
    if op.op_type != "Mul" || op.inputs().len() != 2 {
        return None;
    }
    let a = stats(op.inputs().start).filter(|st| st.count == 1)?;
    let b = stats(op.inputs().start + 1).filter(|st| st.count == 1)?;
    let scale = |st: &TensorStats| st.max >= 2.0 && st.max.log2().fract() == 0.0;
    match (scale(&a), scale(&b)) {
        (false, true) => Some((scalar_value(&a), b.max)),
        (true, false) => Some((scalar_value(&b), a.max)),
        _ => None,
    }
}

/// The loss scale, where the run dumps it, and which tensor holds it: an op named like `loss_scale` /
/// `loss/scale` with a one-element input that is a power of two (the scale multiplying the loss), or the
/// one-element output of a scale-update op (`AmpUpdateScale`-style: `update` in its name or type). The
/// output of the multiplication itself is the loss times the scale, not the scale: never taken.
fn loss_scale_value(
    index: &Index,
    o: OpId,
    stats: &dyn Fn(TensorId) -> Option<TensorStats>,
) -> Option<(&'static str, f64)> {
    let op = &index.ops[o];
    let name = op.name.to_ascii_lowercase();
    if !(name.contains("loss_scale") || name.contains("loss/scale") || name.contains("lossscale")) {
        return None;
    }
    let scalar = |t: &TensorId| stats(*t).filter(|s| s.count == 1).map(|s| s.max);
    let power_of_two = |v: &f64| *v > 0.0 && v.log2().fract() == 0.0;
    if let Some(v) = op.inputs().filter_map(|t| scalar(&t)).find(power_of_two) {
        return Some(("input", v));
    }
    let updates = name.contains("update") || op.op_type.to_ascii_lowercase().contains("update");
    updates.then(|| op.outputs().next().and_then(|t| scalar(&t)).map(|v| ("output", v))).flatten()
}
