//! compare's JSON rows serialized straight from the rows ([`RowJson`]), without a `serde_json::Value` tree
//! in between. The tree cost each row about sixty allocations (every key a `String`, every object a
//! `BTreeMap`) to build and free again, and it was written on one thread after all the pairs were
//! measured: 6-7% of the CPU of `compare a b --format json` on the medium:4 capture pair. The bytes are the
//! tree's: its objects wrote their keys sorted (`serde_json::Map` is a `BTreeMap`), so the fields here are
//! declared in that order, and every value goes through the same `Serializer` calls the tree's made (a
//! non-finite f64 is `null` either way). The tests hold each row's text to the tree's.

use crate::compare::{CompareRow, Measured};
use crate::index::Index;
use crate::matching::MatchKind;
use crate::metrics::{Cell, MsaccucmpMetrics};
use accutrace_formats::stats::TensorStats;
use serde::{Serialize, Serializer};

/// One row of `rows`, its keys in sorted order.
#[derive(Serialize)]
pub(super) struct RowJson<'a> {
    accuracy_reached: String,
    bench: Option<String>,
    bench_stats: Option<StatsJson>,
    cosine: CellJson,
    error: Option<&'a str>,
    euc_dist: CellJson,
    five_thousandths_err_ratio: CellJson,
    #[serde(rename = "match")]
    how: Option<MatchKind>,
    max_abs_err: CellJson,
    max_relative_err: CellJson,
    measured: &'static str,
    messages: &'a [String],
    msaccucmp: Option<MsaccucmpJson>,
    one_thousandth_err_ratio: CellJson,
    rank: u32,
    reason: Option<&'a str>,
    result: String,
    status: &'static str,
    step: u64,
    target: String,
    target_stats: Option<StatsJson>,
}

/// Every row of a comparison as a JSON array, each [`RowJson`] made as it is written: all of them made first
/// held their labels, words and statistics at once (#18: 140 MiB of `compare --format json` at 198,840
/// pairs).
pub(super) struct JsonRows<'a> {
    pub(super) rows: &'a [CompareRow],
    pub(super) ti: &'a Index,
    pub(super) bi: &'a Index,
}

impl Serialize for JsonRows<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.rows.iter().map(|row| RowJson::new(row, self.ti, self.bi)))
    }
}

impl<'a> RowJson<'a> {
    /// `row` of a comparison whose target index is `ti` and bench index `bi`.
    pub(super) fn new(row: &'a CompareRow, ti: &Index, bi: &Index) -> RowJson<'a> {
        let m = row.msprobe();
        let op = &ti.ops[ti.tensors[row.target()].op()];
        RowJson {
            accuracy_reached: row.accuracy.to_string(),
            bench: row.bench().map(|b| bi.tensor_label(b)),
            bench_stats: row.bench_stats(bi).as_ref().map(StatsJson::new),
            cosine: CellJson(m.cosine),
            error: row.error(),
            euc_dist: CellJson(m.euc_dist),
            five_thousandths_err_ratio: CellJson(m.five_thousandths_err_ratio),
            how: row.how,
            max_abs_err: CellJson(m.max_abs_err),
            max_relative_err: CellJson(m.max_relative_err),
            measured: measured_word(row.measured),
            messages: row.messages(),
            msaccucmp: row.msaccucmp.as_deref().map(MsaccucmpJson::new),
            one_thousandth_err_ratio: CellJson(m.one_thousandth_err_ratio),
            rank: op.rank,
            reason: row.reason(),
            result: row.result.to_string(),
            status: status_word(row),
            step: op.step,
            target: ti.tensor_label(row.target()),
            target_stats: row.target_stats(ti).as_ref().map(StatsJson::new),
        }
    }
}

/// An msprobe metric: its value where finite, else its word (`Nan`, `N/A`, ...).
struct CellJson(Cell);

impl Serialize for CellJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Cell::Value(v) if v.is_finite() => s.serialize_f64(v),
            other => s.serialize_str(&other.to_string()),
        }
    }
}

/// The msaccucmp metrics a row shows, keys sorted.
#[derive(Serialize)]
struct MsaccucmpJson {
    cosine_similarity: f64,
    kullback_leibler_divergence: f64,
    max_absolute_error: f64,
    mean_absolute_error: f64,
    mean_relative_error: f64,
    overflow: bool,
    relative_euclidean_distance: f64,
    root_mean_square_error: f64,
}

impl MsaccucmpJson {
    fn new(a: &MsaccucmpMetrics) -> MsaccucmpJson {
        MsaccucmpJson {
            cosine_similarity: a.cosine_similarity,
            kullback_leibler_divergence: a.kullback_leibler_divergence,
            max_absolute_error: a.max_absolute_error,
            mean_absolute_error: a.mean_absolute_error,
            mean_relative_error: a.mean_relative_error,
            overflow: a.overflow,
            relative_euclidean_distance: a.relative_euclidean_distance,
            root_mean_square_error: a.root_mean_square_error,
        }
    }
}

/// [`TensorStats`] as its own `Serialize` writes it, keys sorted. NaN and the infinities are `null` in
/// JSON whether they go through `serialize_none` (its `nan_as_null` fields) or `serialize_f64`.
#[derive(Serialize)]
struct StatsJson {
    abs_sum: Option<f64>,
    at_saturation: u64,
    count: u64,
    l2_norm: f64,
    max: f64,
    mean: f64,
    min: f64,
    nan: u64,
    neg_inf: u64,
    pos_inf: u64,
    zero: u64,
}

impl StatsJson {
    fn new(s: &TensorStats) -> StatsJson {
        // Every field named: a field added to `TensorStats` stops this from compiling until it is here.
        let TensorStats {
            count,
            nan,
            pos_inf,
            neg_inf,
            zero,
            min,
            max,
            mean,
            l2_norm,
            abs_sum,
            at_saturation,
        } = *s;
        StatsJson { abs_sum, at_saturation, count, l2_norm, max, mean, min, nan, neg_inf, pos_inf, zero }
    }
}

/// The CSV's and JSON's Status: `pass`, `fail`, or, not judged, `unreadable` (a side could not be read) or
/// `unmeasured` (a side holds no tensor data).
pub(super) fn status_word(row: &CompareRow) -> &'static str {
    match (row.failed, row.error()) {
        (_, Some(_)) => "unreadable",
        _ if row.unmeasured() => "unmeasured",
        (true, None) => "fail",
        (false, None) => "pass",
    }
}

/// The JSON's `measured`: what the verdict rests on.
fn measured_word(m: Measured) -> &'static str {
    match m {
        Measured::Values => "values",
        Measured::EqualHashes => "equal_hashes",
        Measured::Nothing => "nothing",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::Measured;
    use crate::index::{Io, TensorExtras, TensorInfo};
    use crate::metrics::msprobe::Accuracy;
    use crate::metrics::verdict::Level;
    use crate::metrics::MsprobeMetrics;
    use accutrace_formats::DType;
    use serde_json::json;

    /// A row as `write_report_json` built it before: one `Value`, whose objects sort their keys.
    fn row_value(row: &CompareRow, ti: &Index, bi: &Index) -> serde_json::Value {
        let json_cell = |c: Cell| match c {
            Cell::Value(v) if v.is_finite() => json!(v),
            other => json!(other.to_string()),
        };
        let m = row.msprobe();
        let op = &ti.ops[ti.tensors[row.target()].op()];
        json!({
            "target": ti.tensor_label(row.target()),
            "step": op.step, "rank": op.rank,
            "bench": row.bench().map(|b| bi.tensor_label(b)),
            "match": row.how,
            "cosine": json_cell(m.cosine), "euc_dist": json_cell(m.euc_dist),
            "max_abs_err": json_cell(m.max_abs_err), "max_relative_err": json_cell(m.max_relative_err),
            "one_thousandth_err_ratio": json_cell(m.one_thousandth_err_ratio),
            "five_thousandths_err_ratio": json_cell(m.five_thousandths_err_ratio),
            "msaccucmp": row.msaccucmp.as_deref().map(|a| json!({
                "cosine_similarity": a.cosine_similarity, "max_absolute_error": a.max_absolute_error,
                "mean_absolute_error": a.mean_absolute_error, "root_mean_square_error": a.root_mean_square_error,
                "relative_euclidean_distance": a.relative_euclidean_distance,
                "mean_relative_error": a.mean_relative_error, "kullback_leibler_divergence": a.kullback_leibler_divergence,
                "overflow": a.overflow,
            })),
            "target_stats": row.target_stats(ti), "bench_stats": row.bench_stats(bi),
            "accuracy_reached": row.accuracy.to_string(), "result": row.result.to_string(),
            "messages": row.messages(), "status": status_word(row), "measured": measured_word(row.measured),
            "reason": row.reason(), "error": row.error(),
        })
    }

    /// Rows of every kind of cell, statistics, msaccucmp figure, verdict and text (non-finite values, signed
    /// zeros, subnormals, quotes, control and non-ASCII characters): each row's JSON, pretty and compact,
    /// is the text the `Value` tree gave, byte for byte. Fails on a field out of sorted order, a renamed or
    /// missing key, or a value serialized another way.
    #[test]
    fn rows_are_the_value_trees_bytes() {
        let mut index = Index::default();
        let ops = [
            index.push_op("model/a".into(), "MatMul".into(), 3, 1),
            index.push_op("b".into(), "Add".into(), 0, 0),
        ];
        let mut tensors = Vec::new();
        for (i, &op) in ops.iter().enumerate() {
            let mut t = TensorInfo::for_test(op, Io::Output, i as u32, DType::FLOAT16, vec![2, 3]);
            if i == 1 {
                t.set_extras(TensorExtras {
                    label: Some("quoted \"label\"\twith \\ and é\u{1}".into()),
                    ..t.extras()
                });
            }
            tensors.push(index.push_tensor(t));
        }
        let cells = [
            Cell::Value(0.5),
            Cell::Value(-0.0),
            Cell::Value(1e-310),
            Cell::Value(1.0 / 3.0),
            Cell::Value(f64::NAN),
            Cell::Value(f64::INFINITY),
            Cell::Value(f64::NEG_INFINITY),
            Cell::Nan,
            Cell::Unsupported,
            Cell::NotApplicable,
            Cell::ShapeUnmatched,
        ];
        let floats = [0.25, -0.0, f64::NAN, f64::INFINITY, 5e-324, 123456789.125, -1e300];
        let stats = |k: usize| TensorStats {
            count: 6 + k as u64,
            nan: k as u64 % 2,
            pos_inf: 1,
            neg_inf: 0,
            zero: 2,
            min: floats[k % floats.len()],
            max: floats[(k + 1) % floats.len()],
            mean: floats[(k + 2) % floats.len()],
            l2_norm: floats[(k + 3) % floats.len()],
            abs_sum: (!k.is_multiple_of(3)).then(|| floats[(k + 4) % floats.len()]),
            at_saturation: k as u64,
        };
        let hows = [None, Some(MatchKind::Exact), Some(MatchKind::Fuzzy), Some(MatchKind::Api)];
        let texts = [None, Some("plain".to_string()), Some("line\nbreak \"and\" \u{7f} ünï".to_string())];
        let mut rows = 0;
        for k in 0..cells.len() * 6 {
            let cell = |j: usize| cells[(k + j) % cells.len()];
            let msprobe = MsprobeMetrics {
                cosine: cell(0),
                euc_dist: cell(1),
                max_abs_err: cell(2),
                max_relative_err: cell(3),
                one_thousandth_err_ratio: cell(4),
                five_thousandths_err_ratio: cell(5),
                message: String::new(),
            };
            let f = |j: usize| floats[(k + j) % floats.len()];
            let msaccucmp = (!k.is_multiple_of(4)).then(|| MsaccucmpMetrics {
                cosine_similarity: f(0),
                max_absolute_error: f(1),
                mean_absolute_error: f(2),
                root_mean_square_error: f(3),
                accumulated_relative_error: f(4),
                relative_euclidean_distance: f(5),
                max_relative_error: f(6),
                mean_relative_error: f(7),
                kullback_leibler_divergence: f(8),
                standard_deviation: ((f(9), f(10)), (f(11), f(12))),
                overflow: k.is_multiple_of(3),
            });
            let mut row = CompareRow::new(
                tensors[k % 2],
                (!k.is_multiple_of(5)).then(|| tensors[(k + 1) % 2]),
                hows[k % hows.len()],
            );
            row.set_msprobe(msprobe);
            row.msaccucmp = msaccucmp.map(Box::new);
            row.target_measured_stats = (k % 3 != 1).then(|| Box::new(stats(k)));
            row.bench_measured_stats = (k % 4 != 2).then(|| Box::new(stats(k + 5)));
            row.accuracy = [Accuracy::Yes, Accuracy::No, Accuracy::Unmatched, Accuracy::NotComparable][k % 4];
            row.result = [Level::Pass, Level::Warning, Level::Error][k % 3];
            row.set_messages(texts.iter().take(k % 4).flatten().cloned().collect());
            row.failed = k % 2 == 1;
            row.set_reason(texts[k % 3].clone());
            row.set_error(texts[(k / 3) % 3].clone());
            row.measured = [Measured::Values, Measured::EqualHashes, Measured::Nothing][k % 3];
            let (direct, tree) = (RowJson::new(&row, &index, &index), row_value(&row, &index, &index));
            let pretty = serde_json::to_string_pretty(&direct).unwrap();
            assert_eq!(pretty, serde_json::to_string_pretty(&tree).unwrap(), "row {k}");
            assert_eq!(
                serde_json::to_string(&direct).unwrap(),
                serde_json::to_string(&tree).unwrap(),
                "row {k}"
            );
            rows += 1;
        }
        assert_eq!(rows, 66);
    }
}
