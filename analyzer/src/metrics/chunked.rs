//! msprobe's metrics of a large pair given a chunk at a time ([`MsprobeChunks`]), for a reader that decodes
//! the pair piece by piece instead of whole (compare of two captures): [`measure`](super::measure)'s
//! figures bit for bit. The fused pass cuts a pair of at least `PARALLEL_MIN` elements into chunks of
//! [`CHUNK`] and merges their sums in order; the same chunks, merged in the same order, give the same sums.
//! msprobe's inf/NaN rule needs no second read here: a chunk with an inf or a NaN checks its positions and
//! forms its zeroed sums at once (a chunk without any gives the same sums zeroed or not).

use super::f16_re::probe_of_f16_bytes;
use super::fused::{msprobe_chunk, thresholds_f16};
use super::kernel::{RePrecision, PARALLEL_MIN};
use super::msprobe::metrics_of_sums;
use super::sums::MsprobeSums;
use super::{Families, MetricsRequest, PairMetrics};
use accutrace_formats::DType;

pub use super::kernel::CHUNK;

/// One chunk's part of [`MsprobeChunks`].
pub struct ChunkSums {
    /// The sums with inf/NaN as they are.
    plain: MsprobeSums,
    /// The sums with inf/NaN mapped to 0 where the chunk has some (else `plain` stands for them).
    zeroed: Option<MsprobeSums>,
    /// Some inf or NaN sits where the other side has none of its kind.
    positions_differ: bool,
}

/// msprobe's sums of a pair folded chunk by chunk, in order.
pub struct MsprobeChunks {
    /// Elements per chunk: [`CHUNK`], or the whole pair where the fused pass does not cut it.
    chunk: usize,
    f16: bool,
    plain: Option<MsprobeSums>,
    zeroed: Option<MsprobeSums>,
    positions_differ: bool,
}

impl MsprobeChunks {
    /// The fold for a pair of `len` elements under `request`, where [`measure`](super::measure) would give
    /// exactly what it forms: msprobe's metrics alone (no msaccucmp, whose KL needs a second pass), no
    /// statistics, not 0-d nor empty, relative error in f32 or f16 (the fused pass). `None` otherwise: the
    /// pair is measured whole. A pair shorter than `PARALLEL_MIN` is one chunk
    /// ([`chunk_len`](Self::chunk_len)), as the fused pass takes it.
    pub fn new(request: &MetricsRequest, len: usize) -> Option<MsprobeChunks> {
        let f16 = match request.msprobe.re_precision {
            RePrecision::F16 => true,
            RePrecision::F32 => false,
            RePrecision::F64 => return None,
        };
        let whole_only = request.families != Families::Msprobe || request.stats || request.msprobe.zero_dim;
        (!whole_only && len > 0).then_some(MsprobeChunks {
            chunk: if len < PARALLEL_MIN { len } else { CHUNK },
            f16,
            plain: None,
            zeroed: None,
            positions_differ: false,
        })
    }

    /// Elements per chunk: pass each chunk of this many (fewer in the last) to [`measure`](Self::measure).
    pub fn chunk_len(&self) -> usize {
        self.chunk
    }

    /// The part of one chunk, the values `k * chunk_len()..` of both sides (all `chunk_len()` of them but
    /// in the last chunk). Chunks may be measured on any thread, then [`push`](Self::push)ed in order.
    pub fn measure(&self, n: &[f32], b: &[f32]) -> ChunkSums {
        debug_assert_eq!(n.len(), b.len());
        let sums = |zero: bool| match (zero, self.f16) {
            (false, false) => msprobe_chunk::<false, false>(n, b),
            (false, true) => msprobe_chunk::<false, true>(n, b),
            (true, false) => msprobe_chunk::<true, false>(n, b),
            (true, true) => msprobe_chunk::<true, true>(n, b),
        };
        let plain = sums(false);
        if !plain.nonfinite {
            return ChunkSums { plain, zeroed: None, positions_differ: false };
        }
        // As `with_nonfinite_rule` checks the whole pair: inf and NaN at the same places, per kind.
        let kind = |v: f32| if v.is_nan() { 2u8 } else { u8::from(v.is_infinite()) };
        let positions_differ = n.iter().zip(b).any(|(&x, &y)| kind(x) != kind(y));
        let zeroed = (!positions_differ).then(|| sums(true));
        ChunkSums { plain, zeroed, positions_differ }
    }

    /// [`measure`](Self::measure) of a chunk of an fp16 pair (`dtypes` both fp16) given as its bytes: the
    /// values widened as the fused pass reads them (`f16_re::probe_of_f16_bytes`), the same sums as
    /// `measure` of the decoded values. `None` where that pass does not apply: other dtypes, a CPU without
    /// F16C, or a chunk holding inf/NaN (whose rule needs the values): decode it and `measure`.
    pub fn measure_fp16_bytes(&self, dtypes: (DType, DType), n: &[u8], b: &[u8]) -> Option<ChunkSums> {
        if !(self.f16 && dtypes == (DType::FLOAT16, DType::FLOAT16) && n.len() == b.len()) {
            return None;
        }
        let plain = probe_of_f16_bytes(n, b, thresholds_f16())?;
        (!plain.nonfinite).then_some(ChunkSums { plain, zeroed: None, positions_differ: false })
    }

    /// Folds in the next chunk's part.
    pub fn push(&mut self, part: ChunkSums) {
        let merge = |acc: Option<MsprobeSums>, s: MsprobeSums| Some(acc.map_or(s, |acc| acc.merge(s)));
        self.plain = merge(self.plain, part.plain);
        self.zeroed = merge(self.zeroed, part.zeroed.unwrap_or(part.plain));
        self.positions_differ |= part.positions_differ;
    }

    /// The pair's metrics, once every chunk is pushed.
    pub fn finish(self) -> PairMetrics {
        let plain = self.plain.unwrap_or_default();
        let sums = match (plain.nonfinite, self.positions_differ) {
            (false, _) => Some(plain),
            (true, true) => None,
            (true, false) => self.zeroed,
        };
        PairMetrics { msprobe: metrics_of_sums(sums), msaccucmp: None, stats: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::measure;
    use accutrace_formats::DType;

    /// Smooth values with a little noise; `specials` puts infinities and NaNs near every 200,003rd place,
    /// so that some chunks hold them and others do not.
    fn values(len: usize, seed: u32, specials: bool) -> Vec<f32> {
        (0..len)
            .map(|i| {
                let v = ((i as f32) * 0.00731 + seed as f32).sin() * 40.0;
                let noise = ((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 97;
                let v = v + noise as f32 * 1e-3 - 0.048;
                match (specials, i % 200_003) {
                    (true, 3) => f32::INFINITY,
                    (true, 5) => f32::NAN,
                    (true, 8) if i % 2 == 0 => f32::NEG_INFINITY,
                    _ => v,
                }
            })
            .collect()
    }

    /// `values` rounded to `dtype`, as a reader decodes them.
    fn rounded(v: &[f32], dtype: DType) -> Vec<f32> {
        match dtype {
            DType::FLOAT16 => v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect(),
            DType::BF16 => v.iter().map(|&x| half::bf16::from_f32(x).to_f32()).collect(),
            _ => v.to_vec(),
        }
    }

    /// Pairs of fp16, bf16 and fp32 (f16 and f32 relative errors), with a ragged last chunk, with inf/NaN
    /// at the same places and at different ones, folded chunk by chunk: `measure`'s metrics, bit for bit
    /// (their debug text: NaN cells print alike).
    #[test]
    fn chunks_folded_in_order_give_measures_metrics() {
        let mut cases = 0;
        // Long pairs the fused pass cuts into chunks, and short ones it measures in one.
        let pairs = [
            (DType::FLOAT16, DType::FLOAT16),
            (DType::FLOAT16, DType::FLOAT),
            (DType::BF16, DType::BF16),
            (DType::FLOAT, DType::FLOAT),
        ];
        for (len, dtypes) in [PARALLEL_MIN + 3 * CHUNK + 1234, PARALLEL_MIN - 1, CHUNK + 5, 9]
            .into_iter()
            .flat_map(|len| pairs.map(|d| (len, d)))
        {
            for (specials_n, specials_b) in [(false, false), (true, true), (true, false)] {
                let n = rounded(&values(len, 1, specials_n), dtypes.0);
                let mut b = rounded(&values(len, 1, specials_b), dtypes.1);
                b.iter_mut().step_by(7).for_each(|v| *v *= 1.002);
                let request = MetricsRequest::for_pair(Families::Msprobe, dtypes, &[len as u64], false);
                let want = measure(&n, &b, &request);
                let mut fold = MsprobeChunks::new(&request, len).expect("a chunked pair");
                let chunk = fold.chunk_len();
                for (x, y) in n.chunks(chunk).zip(b.chunks(chunk)) {
                    fold.push(fold.measure(x, y));
                }
                let got = fold.finish();
                if specials_n && specials_b && len > PARALLEL_MIN {
                    // Both kinds of chunk were folded: with inf/NaN (zeroed) and without.
                    let holds =
                        |k: usize| n[k * CHUNK..len.min((k + 1) * CHUNK)].iter().any(|v| !v.is_finite());
                    let chunks = len.div_ceil(CHUNK);
                    assert!((0..chunks).any(holds) && !(0..chunks).all(holds));
                }
                assert_eq!(
                    format!("{got:?}"),
                    format!("{want:?}"),
                    "{len} {dtypes:?} {specials_n} {specials_b}"
                );
                cases += 1;
            }
        }
        assert_eq!(cases, 48);
    }

    /// Pairs `measure` takes whole are not folded: empty ones, 0-d ones, with msaccucmp's metrics or the
    /// statistics, and fp64 ones; short ones are one chunk.
    #[test]
    fn only_pairs_the_fused_pass_chunks_are_folded() {
        let pair = (DType::FLOAT16, DType::FLOAT16);
        let request = |families, stats, shape: &[u64]| MetricsRequest::for_pair(families, pair, shape, stats);
        let long = [PARALLEL_MIN as u64];
        let chunk_len =
            |len| MsprobeChunks::new(&request(Families::Msprobe, false, &long), len).map(|f| f.chunk_len());
        assert_eq!(chunk_len(PARALLEL_MIN), Some(CHUNK));
        // Shorter pairs the fused pass measures in one chunk: so are they folded.
        assert_eq!(chunk_len(PARALLEL_MIN - 1), Some(PARALLEL_MIN - 1));
        assert_eq!(chunk_len(1), Some(1));
        assert_eq!(chunk_len(0), None);
        assert!(MsprobeChunks::new(&request(Families::All, false, &long), PARALLEL_MIN).is_none());
        assert!(MsprobeChunks::new(&request(Families::Msprobe, true, &long), PARALLEL_MIN).is_none());
        assert!(MsprobeChunks::new(&request(Families::Msprobe, false, &[]), PARALLEL_MIN).is_none());
        let f64_pair =
            MetricsRequest::for_pair(Families::Msprobe, (DType::DOUBLE, DType::DOUBLE), &long, false);
        assert!(MsprobeChunks::new(&f64_pair, PARALLEL_MIN).is_none());
    }
}
