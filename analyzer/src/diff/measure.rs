//! One pair of tensors measured: hashes first, a decode of both sides only where they differ; the device's
//! statistics where they are all a pair has ([`by_device_statistics`]); and what a pair holds while it is
//! measured ([`footprint`]).

use super::values::{compare_host_blocks, compare_values, has_bytes_kernel, TensorDiff};
use super::waves::{compare_host_waves, WAVES_MIN, WAVE_BUFFERS};
use crate::index::{Index, TensorId, TensorInfo};
use crate::sources::Source;
use crate::threads::{largest_tensor_bytes, pairs_for, tensor_bytes, Footprint};
use accutrace_formats::stats::TensorStats;
use accutrace_formats::tensor::element_count;
use anyhow::Result;

/// What one pair came to: its figures, or nothing proven either way (two tensors known by the device's
/// statistics alone whose statistics agree: neither identical nor different).
#[derive(Clone, Debug)]
pub(super) enum PairFound {
    Figures(TensorDiff),
    StatisticsAgree,
}

/// What diff's pairs hold ([`crate::threads`]): each side a tensor as f32 ([`Footprint::DIFF`]), or each
/// side at most the bound of a block-by-block read ([`Source::host_blocks_bytes`]) for the tensors diff
/// reads so, the others as f32: whichever lets more pairs run, since each bounds what a pair holds. A
/// pair large enough to be read in waves also holds their buffers.
pub(super) fn footprint(sources: [&dyn Source; 2]) -> Footprint {
    let largest = largest_tensor_bytes(sources.map(Source::index));
    let extra = if largest >= WAVES_MIN as u64 { WAVE_BUFFERS } else { 0 };
    let side = |s: &dyn Source| {
        let tensors = s.index().tensors.iter().enumerate().filter(|(_, t)| t.has_data);
        let read = |(id, t): (TensorId, &TensorInfo)| {
            let blocks = s.host_blocks_bytes(id).filter(|_| has_bytes_kernel(t.dtype));
            blocks.unwrap_or_else(|| tensor_bytes(t))
        };
        tensors.map(read).max().unwrap_or(0)
    };
    let bounded = Footprint::diff_bounded(side(sources[0]).max(side(sources[1])), extra);
    let plain = Footprint { per_pair: Footprint::DIFF.per_pair + extra, ..Footprint::DIFF };
    let threads = rayon::current_num_threads();
    // The last of equals: the plain count where the bound gains nothing.
    [bounded, plain].into_iter().max_by_key(|f| pairs_for(*f, largest, threads)).unwrap_or(plain)
}

/// The largest change of a statistic (min, max, mean, L2 norm) between two tensors, when both have
/// statistics: tensor `ta` of index `a`, `tb` of `b`.
pub(super) fn stats_delta((a, ta): (&Index, TensorId), (b, tb): (&Index, TensorId)) -> Option<f64> {
    match (a.stats(ta), b.stats(tb)) {
        (Some(x), Some(y)) => Some(
            [(x.min, y.min), (x.max, y.max), (x.mean, y.mean), (x.l2_norm, y.l2_norm)]
                .iter()
                .map(|(p, q)| (p - q).abs())
                .filter(|d| !d.is_nan())
                .fold(0.0, f64::max),
        ),
        _ => None,
    }
}

/// A pair of tensors known by the device's statistics alone (`--mode device-stats`, a CANN statistics
/// dump: no content hash, no data), compared by them: statistics that differ prove the tensors differ (the
/// figures say it was found so); statistics that agree prove nothing. `None` for every other pair.
pub(super) fn by_device_statistics(
    (a, ta): (&Index, TensorId),
    (b, tb): (&Index, TensorId),
) -> Option<PairFound> {
    let statistics_alone = |index: &Index, t: TensorId| {
        let info = &index.tensors[t];
        (!info.has_data && info.hash().is_none()).then(|| index.stats(t)).flatten()
    };
    let (x, y) = (statistics_alone(a, ta)?, statistics_alone(b, tb)?);
    if same_statistics(&x, &y) {
        return Some(PairFound::StatisticsAgree);
    }
    Some(PairFound::Figures(TensorDiff {
        elements: element_count(&a.tensors[ta].shape).unwrap_or(0),
        stats_delta: stats_delta((a, ta), (b, tb)),
        by_device_statistics: true,
        ..Default::default()
    }))
}

/// Whether two tensors' statistics agree field for field, NaN equal to NaN as values are compared
/// ([`compare_values`]): a field the device did not write reads as NaN (or 0) on both sides, so only the
/// fields both hold can tell them apart.
fn same_statistics(x: &TensorStats, y: &TensorStats) -> bool {
    let same = |p: f64, q: f64| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan());
    let counts = |s: &TensorStats| (s.count, s.nan, s.pos_inf, s.neg_inf, s.zero, s.at_saturation);
    counts(x) == counts(y)
        && [(x.min, y.min), (x.max, y.max), (x.mean, y.mean), (x.l2_norm, y.l2_norm)]
            .into_iter()
            .all(|(p, q)| same(p, q))
        && match (x.abs_sum, y.abs_sum) {
            (Some(p), Some(q)) => same(p, q),
            (p, q) => p.is_none() && q.is_none(),
        }
}

/// What one pair came to: [`by_device_statistics`] where statistics are all the pair has, else
/// [`diff_tensor`]'s figures.
pub(super) fn diff_pair(
    a: &dyn Source,
    b: &dyn Source,
    ta: TensorId,
    tb: TensorId,
    spare_threads: bool,
) -> Result<PairFound> {
    match by_device_statistics((a.index(), ta), (b.index(), tb)) {
        Some(found) => Ok(found),
        None => diff_tensor(a, b, ta, tb, spare_threads).map(PairFound::Figures),
    }
}

/// Hash comparison, and only when hashes differ, a decode of both sides; in waves on the pool's threads
/// where a tensor is large and `spare_threads` says there are threads to take them.
fn diff_tensor(
    a: &dyn Source,
    b: &dyn Source,
    ta: TensorId,
    tb: TensorId,
    spare_threads: bool,
) -> Result<TensorDiff> {
    let (ia, ib) = (&a.index().tensors[ta], &b.index().tensors[tb]);
    let ha = match ia.hash() {
        Some(h) => h,
        None => a.content_hash(ta)?,
    };
    let hb = match ib.hash() {
        Some(h) => h,
        None => b.content_hash(tb)?,
    };
    // Only reported (as a share of differing elements); a shape whose product overflows counts as 0.
    let elements = element_count(&ia.shape).unwrap_or(0);
    if ha == hb && ia.dtype == ib.dtype {
        return Ok(TensorDiff { identical: true, elements, ..Default::default() });
    }
    let stats_delta = stats_delta((a.index(), ta), (b.index(), tb));
    if !(ia.has_data && ib.has_data) {
        // The hashes prove a difference; without data its size is only seen through the statistics.
        return Ok(TensorDiff { elements, stats_delta, ..Default::default() });
    }
    // The tensors' own bytes where the source gives them and the dtype has a byte kernel (the common
    // case: no f32 decoding of whole tensors); the values otherwise. Both give the same figures.
    if ia.dtype == ib.dtype && has_bytes_kernel(ia.dtype) {
        // Both tensors read at once, block by block (a capture unshuffles each block of its planes into
        // the kernel's buffer, and checks the content hash once the blocks are read, before
        // `with_host_blocks` returns Ok): the figures, or `None` where a side has no host bytes or the
        // kernel declines.
        let (mut measured, mut inner) = (None, Ok(false));
        a.with_host_blocks(ta, &mut |x| {
            inner = b.with_host_blocks(tb, &mut |y| {
                measured = match spare_threads && x.len() >= WAVES_MIN {
                    true => compare_host_waves(ia.dtype, x, y),
                    false => compare_host_blocks(ia.dtype, x, y),
                }
            });
        })?;
        inner?;
        if let Some(d) = measured {
            return Ok(TensorDiff { stats_delta, ..d });
        }
    }
    let (mut va, mut vb) = (Vec::new(), Vec::new());
    a.read_values(ta, &mut va)?;
    b.read_values(tb, &mut vb)?;
    Ok(TensorDiff { stats_delta, ..compare_values(ia.dtype, &va, &vb) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Io;
    use accutrace_formats::DType;

    /// An index of one op whose output is known by `stats` (a row of a device statistics CSV), and by a
    /// content hash where `hash` gives one.
    fn known_by(stats: TensorStats, hash: Option<u64>) -> Index {
        let mut index = Index::default();
        let op = index.push_op("op".into(), "Add".into(), 0, 0);
        let tensor = TensorInfo::for_test(op, Io::Output, 0, DType::FLOAT, vec![4]);
        let t = index.push_tensor(TensorInfo { has_data: false, ..tensor }.with_hash(hash));
        index.set_stats(t, Some(stats));
        index
    }

    #[test]
    fn device_statistics_that_differ_prove_a_difference_and_agreeing_ones_prove_nothing() {
        // No L2 norm, as CANN's default statistics: NaN on both sides, which agrees.
        let stats =
            TensorStats { count: 4, min: -1.0, max: 2.0, mean: 0.5, l2_norm: f64::NAN, ..Default::default() };
        let found = |x: TensorStats, y: TensorStats| {
            by_device_statistics((&known_by(x, None), 0), (&known_by(y, None), 0))
        };
        assert!(matches!(found(stats, stats), Some(PairFound::StatisticsAgree)));
        let pairs = [
            (stats, TensorStats { max: 2.5, ..stats }),
            (stats, TensorStats { nan: 1, ..stats }),
            (stats, TensorStats { min: f64::NAN, ..stats }),
            // Equal as numbers, not as bits: some element changed its sign.
            (TensorStats { mean: 0.0, ..stats }, TensorStats { mean: -0.0, ..stats }),
        ];
        for (i, (x, y)) in pairs.into_iter().enumerate() {
            let Some(PairFound::Figures(d)) = found(x, y) else { panic!("pair {i}: not different") };
            assert!(d.by_device_statistics && !d.identical && !d.measured, "pair {i}: {d:?}");
        }
        // A side with a content hash is compared by it, not by statistics.
        let hashed = known_by(stats, Some(7));
        assert!(by_device_statistics((&hashed, 0), (&known_by(stats, None), 0)).is_none());
    }
}
