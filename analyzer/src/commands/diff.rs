//! `analyzer diff RUN1 RUN2`: is the run reproducible? Hashes first; only tensors whose hashes differ are
//! decoded. Per step and rank, the first op whose output differs is named, and classified: its inputs were
//! identical (the op itself is nondeterministic) or already different (it only propagates).

use super::Outcome;
use crate::cli::{DiffArgs, Format};
use crate::index::{Index, Io, TensorId};
use crate::matching::{match_runs, MatchOptions};
use crate::progress::Progress;
use crate::report::{fmt_num, Output};
use crate::sources::{self, Source};
use accutrace_formats::DType;
use anyhow::Result;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;

/// How two matched tensors differ (all zero when their bytes are equal).
#[derive(Clone, Debug, Default, Serialize)]
pub struct TensorDiff {
    pub identical: bool,
    pub elements: u64,
    pub differing: u64,
    pub max_abs_diff: f64,
    /// Largest distance in units in the last place of the tensor's own dtype.
    pub max_ulp: u64,
    /// Whether the element-wise figures were measured (both sides had data). Without data (a
    /// statistics-mode capture) only the hashes and the statistics are known.
    pub measured: bool,
    /// Largest change of min, max, mean or L2 norm, when statistics are known on both sides.
    pub stats_delta: Option<f64>,
    pub error: Option<String>,
}

impl TensorDiff {
    pub fn share_differing(&self) -> f64 {
        if self.elements == 0 {
            0.0
        } else {
            self.differing as f64 / self.elements as f64
        }
    }
}

/// The first differing op of one step on one rank.
#[derive(Clone, Debug, Serialize)]
pub struct FirstDifference {
    pub step: u64,
    pub rank: u32,
    pub op: String,
    pub op_type: String,
    /// `nondeterministic` when every input was identical, `propagating` when some input already differed,
    /// `unknown` when inputs were not dumped.
    pub verdict: &'static str,
    pub differing_inputs: Vec<String>,
    pub output: TensorDiff,
}

/// Every op that differed somewhere: how often and how much.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CensusRow {
    pub op: String,
    pub op_type: String,
    pub times: u64,
    pub max_abs_diff: f64,
    pub max_ulp: u64,
    pub max_share_differing: f64,
    /// Largest change of a statistic (min, max, mean, L2 norm) when only statistics were known.
    pub max_stats_delta: f64,
    /// Whether element-wise figures were measured for this op (false for statistics-only captures).
    pub measured: bool,
}

#[derive(Serialize)]
struct DiffReport {
    run1: String,
    run2: String,
    compared_tensors: usize,
    differing_tensors: usize,
    decoded_tensors: usize,
    first_differences: Vec<FirstDifference>,
    census: Vec<CensusRow>,
    unmatched_run1: Vec<String>,
    unmatched_run2: Vec<String>,
}

pub fn run(args: DiffArgs) -> Result<Outcome> {
    let run1 = sources::open(&args.run1)?;
    let run2 = sources::open(&args.run2)?;
    let (i1, i2) = (run1.index(), run2.index());
    let matching = match_runs(i1, i2, &MatchOptions::default());
    let pairs: Vec<_> =
        matching.pairs.iter().filter(|p| args.filter.keeps(&i1.ops[i1.tensors[p.target].op])).collect();

    if pairs.is_empty() {
        anyhow::bail!(
            "no tensor of {} matched one of {}: the runs share no op names (check --step/--rank/--op)",
            args.run1.display(),
            args.run2.display()
        );
    }
    let progress = Progress::new("diff", pairs.len() as u64, args.no_progress);
    let diffs: Vec<Result<TensorDiff>> = pairs
        .par_iter()
        .map(|p| {
            let d = diff_tensor(run1.as_ref(), run2.as_ref(), p.target, p.bench);
            progress.inc(1);
            d
        })
        .collect();
    progress.finish();
    let mut by_target: BTreeMap<TensorId, TensorDiff> = BTreeMap::new();
    let mut decoded = 0;
    for (p, d) in pairs.iter().zip(diffs) {
        let d = d.unwrap_or_else(|e| TensorDiff { error: Some(format!("{e:#}")), ..Default::default() });
        if d.measured {
            decoded += 1;
        }
        by_target.insert(p.target, d);
    }

    let first_differences = first_differences(i1, &by_target);
    let census = census(i1, &by_target);
    let differing = by_target.values().filter(|d| !d.identical).count();
    let report = DiffReport {
        run1: args.run1.display().to_string(),
        run2: args.run2.display().to_string(),
        compared_tensors: by_target.len(),
        differing_tensors: differing,
        decoded_tensors: decoded,
        first_differences,
        census,
        unmatched_run1: matching.unmatched_target.iter().map(|&t| i1.tensor_label(t)).collect(),
        unmatched_run2: matching.unmatched_bench.iter().map(|&t| i2.tensor_label(t)).collect(),
    };
    let mut out = Output::open(args.output.as_deref())?;
    match args.format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, &report)?;
            writeln!(out)?;
        }
        Format::Csv => write_csv(&mut out, &report)?,
        Format::Table => print_table(&mut out, &report)?,
    }
    Ok(if differing == 0 && report.unmatched_run1.is_empty() && report.unmatched_run2.is_empty() {
        Outcome::Pass
    } else {
        Outcome::Findings
    })
}

/// Hash comparison, and only when hashes differ, a decode of both sides.
fn diff_tensor(a: &dyn Source, b: &dyn Source, ta: TensorId, tb: TensorId) -> Result<TensorDiff> {
    let (ia, ib) = (&a.index().tensors[ta], &b.index().tensors[tb]);
    let ha = match ia.hash {
        Some(h) => h,
        None => a.content_hash(ta)?,
    };
    let hb = match ib.hash {
        Some(h) => h,
        None => b.content_hash(tb)?,
    };
    let elements = ia.shape.iter().product::<u64>();
    if ha == hb && ia.dtype == ib.dtype {
        return Ok(TensorDiff { identical: true, elements, ..Default::default() });
    }
    let stats_delta = match (&ia.stats, &ib.stats) {
        (Some(x), Some(y)) => Some(
            [(x.min, y.min), (x.max, y.max), (x.mean, y.mean), (x.l2_norm, y.l2_norm)]
                .iter()
                .map(|(p, q)| (p - q).abs())
                .filter(|d| !d.is_nan())
                .fold(0.0, f64::max),
        ),
        _ => None,
    };
    if !(ia.has_data && ib.has_data) {
        // The hashes prove a difference; without data its size is only seen through the statistics.
        return Ok(TensorDiff { elements, stats_delta, ..Default::default() });
    }
    let (mut va, mut vb) = (Vec::new(), Vec::new());
    a.read_values(ta, &mut va)?;
    b.read_values(tb, &mut vb)?;
    Ok(TensorDiff { stats_delta, ..compare_values(ia.dtype, &va, &vb) })
}

/// Element-wise difference of two decodings. NaN equals NaN here: reproducibility is about bits, and a
/// NaN in both runs at one position is the same result.
pub fn compare_values(dtype: DType, a: &[f32], b: &[f32]) -> TensorDiff {
    let mut d = TensorDiff { elements: a.len().max(b.len()) as u64, measured: true, ..Default::default() };
    if a.len() != b.len() {
        d.differing = d.elements;
        d.max_abs_diff = f64::INFINITY;
        d.max_ulp = u64::MAX;
        d.error = Some(format!("element counts differ: {} vs {}", a.len(), b.len()));
        return d;
    }
    for (&x, &y) in a.iter().zip(b) {
        if x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()) {
            continue;
        }
        d.differing += 1;
        let abs = (f64::from(x) - f64::from(y)).abs();
        d.max_abs_diff = if abs.is_nan() { f64::INFINITY } else { d.max_abs_diff.max(abs) };
        d.max_ulp = d.max_ulp.max(ulp_distance(dtype, x, y));
    }
    d.identical = d.differing == 0;
    d
}

/// Distance in units in the last place of `dtype` (fp16, bf16; fp32 otherwise), via the monotonic
/// integer ordering of IEEE bit patterns. Integers count their plain difference.
pub fn ulp_distance(dtype: DType, x: f32, y: f32) -> u64 {
    fn ordered(bits: u64, sign_bit: u64) -> i128 {
        if bits & sign_bit != 0 {
            -((bits & !sign_bit) as i128)
        } else {
            bits as i128
        }
    }
    let (bx, by, sign) = match dtype {
        DType::FLOAT16 => {
            (half::f16::from_f32(x).to_bits() as u64, half::f16::from_f32(y).to_bits() as u64, 0x8000)
        }
        DType::BF16 => {
            (half::bf16::from_f32(x).to_bits() as u64, half::bf16::from_f32(y).to_bits() as u64, 0x8000)
        }
        d if d.is_float() => (x.to_bits() as u64, y.to_bits() as u64, 0x8000_0000),
        _ => return (f64::from(x) - f64::from(y)).abs().min(u64::MAX as f64) as u64,
    };
    (ordered(bx, sign) - ordered(by, sign)).unsigned_abs().min(u64::MAX as u128) as u64
}

fn first_differences(index: &Index, diffs: &BTreeMap<TensorId, TensorDiff>) -> Vec<FirstDifference> {
    let mut ops: Vec<usize> = (0..index.ops.len()).collect();
    ops.sort_by_key(|&o| (index.ops[o].rank, index.ops[o].step, index.ops[o].order));
    let mut seen: BTreeMap<(u64, u32), ()> = BTreeMap::new();
    let mut found = Vec::new();
    for o in ops {
        let op = &index.ops[o];
        if seen.contains_key(&(op.step, op.rank)) {
            continue;
        }
        let Some(output) = op.outputs.iter().filter_map(|t| diffs.get(t)).find(|d| !d.identical) else {
            continue;
        };
        seen.insert((op.step, op.rank), ());
        let input_diffs: Vec<(TensorId, &TensorDiff)> =
            op.inputs.iter().filter_map(|&t| diffs.get(&t).map(|d| (t, d))).collect();
        let differing_inputs: Vec<String> =
            input_diffs.iter().filter(|(_, d)| !d.identical).map(|(t, _)| index.tensor_label(*t)).collect();
        let verdict = if input_diffs.is_empty() {
            "unknown"
        } else if differing_inputs.is_empty() {
            "nondeterministic"
        } else {
            "propagating"
        };
        found.push(FirstDifference {
            step: op.step,
            rank: op.rank,
            op: op.name.clone(),
            op_type: op.op_type.clone(),
            verdict,
            differing_inputs,
            output: output.clone(),
        });
    }
    found.sort_by_key(|f| (f.step, f.rank));
    found
}

/// `times` counts op executions (an op with three differing outputs in one step counts once).
fn census(index: &Index, diffs: &BTreeMap<TensorId, TensorDiff>) -> Vec<CensusRow> {
    let mut rows: BTreeMap<String, (u64, CensusRow)> = BTreeMap::new();
    let mut counted: std::collections::HashSet<usize> = std::collections::HashSet::new();
    for (&t, d) in diffs {
        let tensor = &index.tensors[t];
        if d.identical || tensor.io != Io::Output {
            continue;
        }
        let op = &index.ops[tensor.op];
        let entry = rows.entry(op.name.clone()).or_insert_with(|| {
            (op.order, CensusRow { op: op.name.clone(), op_type: op.op_type.clone(), ..Default::default() })
        });
        entry.0 = entry.0.min(op.order);
        let row = &mut entry.1;
        if counted.insert(tensor.op) {
            row.times += 1;
        }
        row.max_abs_diff = row.max_abs_diff.max(d.max_abs_diff);
        row.max_ulp = row.max_ulp.max(d.max_ulp);
        row.max_share_differing = row.max_share_differing.max(d.share_differing());
        row.max_stats_delta = row.max_stats_delta.max(d.stats_delta.unwrap_or(0.0));
        row.measured |= d.measured;
    }
    let mut rows: Vec<(u64, CensusRow)> = rows.into_values().collect();
    rows.sort_by_key(|(order, _)| *order);
    rows.into_iter().map(|(_, r)| r).collect()
}

fn print_table(out: &mut impl Write, r: &DiffReport) -> Result<()> {
    writeln!(out, "diff {} vs {}", r.run1, r.run2)?;
    writeln!(
        out,
        "{} tensors compared by hash, {} differ ({} decoded to measure the difference)",
        r.compared_tensors, r.differing_tensors, r.decoded_tensors
    )?;
    if r.first_differences.is_empty() {
        writeln!(out, "\nThe runs are bit-identical on every matched tensor.")?;
    } else {
        writeln!(out, "\nFirst differing op per step and rank:")?;
        for f in &r.first_differences {
            writeln!(
                out,
                "  step {} rank {}: {} [{}] is {} ({})",
                f.step,
                f.rank,
                f.op,
                f.op_type,
                match f.verdict {
                    "nondeterministic" => "NONDETERMINISTIC: its inputs were identical",
                    "propagating" => "propagating a difference from its inputs",
                    _ => "different (its inputs were not dumped)",
                },
                size_of_difference(&f.output)
            )?;
            for input in &f.differing_inputs {
                writeln!(out, "      differing input: {input}")?;
            }
        }
        writeln!(out, "\nEvery op whose output differed ({}):", r.census.len())?;
        writeln!(out, "  {:<56} {:>6} {:>12} {:>10} {:>9}", "op", "times", "max |diff|", "max ulp", "share")?;
        const SHOWN: usize = 25;
        for c in r.census.iter().take(SHOWN) {
            if c.measured {
                writeln!(
                    out,
                    "  {:<56} {:>6} {:>12} {:>10} {:>8.2}%",
                    c.op,
                    c.times,
                    fmt_num(c.max_abs_diff),
                    c.max_ulp,
                    100.0 * c.max_share_differing
                )?;
            } else {
                writeln!(
                    out,
                    "  {:<56} {:>6}   hash differs, statistics moved by up to {}",
                    c.op,
                    c.times,
                    fmt_num(c.max_stats_delta)
                )?;
            }
        }
        if r.census.len() > SHOWN {
            writeln!(
                out,
                "  ... {} more ops (--format csv or json lists every one)",
                r.census.len() - SHOWN
            )?;
        }
        if r.census.iter().any(|c| !c.measured) {
            writeln!(out, "  (statistics-only capture: record with --mode tensor for element-wise figures)")?;
        }
    }
    for (side, list) in [("run1", &r.unmatched_run1), ("run2", &r.unmatched_run2)] {
        if !list.is_empty() {
            writeln!(out, "\n{} tensors only in {side}:", list.len())?;
            for name in list.iter().take(20) {
                writeln!(out, "  {name}")?;
            }
            if list.len() > 20 {
                writeln!(out, "  ... and {} more (use --format json for all)", list.len() - 20)?;
            }
        }
    }
    Ok(())
}

/// "max |diff| 0.5, 3 ulp, 1.2% of elements", or what the statistics say when there was no data.
fn size_of_difference(d: &TensorDiff) -> String {
    if d.measured {
        format!(
            "max |diff| {}, {} ulp, {:.2}% of elements",
            fmt_num(d.max_abs_diff),
            d.max_ulp,
            100.0 * d.share_differing()
        )
    } else {
        match d.stats_delta {
            Some(delta) => format!("hash differs; statistics moved by up to {}", fmt_num(delta)),
            None => "hash differs".to_string(),
        }
    }
}

fn write_csv(out: &mut impl Write, r: &DiffReport) -> Result<()> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "op",
        "op_type",
        "times",
        "max_abs_diff",
        "max_ulp",
        "max_share_differing",
        "max_stats_delta",
        "measured",
    ])?;
    for c in &r.census {
        w.write_record([
            c.op.clone(),
            c.op_type.clone(),
            c.times.to_string(),
            c.max_abs_diff.to_string(),
            c.max_ulp.to_string(),
            c.max_share_differing.to_string(),
            c.max_stats_delta.to_string(),
            c.measured.to_string(),
        ])?;
    }
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulp_counts_in_the_dtype() {
        let next = half::f16::from_bits(half::f16::from_f32(1.0).to_bits() + 1).to_f32();
        assert_eq!(ulp_distance(DType::FLOAT16, 1.0, next), 1);
        assert_eq!(ulp_distance(DType::FLOAT, 1.0, f32::from_bits(1.0f32.to_bits() + 3)), 3);
        assert_eq!(ulp_distance(DType::FLOAT, -0.0, 0.0), 0);
        assert_eq!(ulp_distance(DType::FLOAT, f32::from_bits(1), -f32::from_bits(1)), 2);
    }

    #[test]
    fn identical_values_are_identical_and_nan_equals_nan() {
        let d = compare_values(DType::FLOAT, &[1.0, f32::NAN], &[1.0, f32::NAN]);
        assert!(d.identical);
        let d = compare_values(DType::FLOAT, &[1.0, 2.0], &[1.0, 2.5]);
        assert_eq!((d.differing, d.max_abs_diff), (1, 0.5));
    }
}
