//! A pair measured a wave at a time from both sides' host bytes ([`Source::with_host_blocks`]): each
//! wave's chunks (a short pair is one, as the fused pass takes it) decoded to f32 (an fp16 pair's widened
//! inside the measuring pass, where the CPU has F16C) and measured on the pool's threads
//! ([`MsprobeChunks`]), instead of both sides decoded whole into f32 buffers and measured after. The
//! values then stay in cache between their decode and their measure, and no buffer the size of the tensor
//! as f32 is written (or zero-filled when a thread's buffer grows). Only where the metrics can be folded
//! chunk by chunk: msprobe's alone, without statistics (compare's table, msprobe's CSV and the HTML report
//! between captures); the figures are the whole read's bit for bit.

use crate::index::{TensorId, TensorInfo};
use crate::metrics::chunked::{ChunkSums, MsprobeChunks, CHUNK};
use crate::metrics::kernel::PARALLEL_MIN;
use crate::metrics::{MetricsRequest, PairMetrics};
use crate::sources::{HostBlocks, Source};
use crate::threads::{pairs_in_flight, tensor_bytes, Footprint, InFlight};
use accutrace_formats::tensor::{decode_f32_into, element_count, lanes_per_element};
use accutrace_formats::DType;
use rayon::prelude::*;
use std::cell::Cell;

/// Chunks of each side read at a time: work for 8 threads, in 1 MiB of fp16 a side (2 MiB of fp32), which
/// stays in a core's L2 cache between its unshuffle and its decode.
const WAVE_CHUNKS: usize = 8;

thread_local! {
    /// Each side's bytes of a wave, kept by the thread that measures pairs (taken while in use): they only
    /// grow (to a wave's bytes, at most 2 MiB a side), so nothing is zero-filled again.
    static WAVE_BYTES: Cell<(Vec<u8>, Vec<u8>)> = const { Cell::new((Vec::new(), Vec::new())) };
    /// One chunk of each side as f32, kept by every thread that measures chunks (2 x 256 KiB; up to 2 x 1
    /// MiB for a short pair measured as one chunk).
    static CHUNK_VALUES: Cell<(Vec<f32>, Vec<f32>)> = const { Cell::new((Vec::new(), Vec::new())) };
}

/// Frees this thread's wave and chunk buffers.
pub(super) fn release_wave_buffers() {
    WAVE_BYTES.with(|w| w.take());
    CHUNK_VALUES.with(|c| c.take());
}

/// How a pair is measured in waves: its values, the fold of its chunks and each side's bytes per value.
struct Plan {
    len: usize,
    fold: MsprobeChunks,
    widths: (usize, usize),
}

/// The pair's [`Plan`] where it is measured in waves: two sources that decode on read (captures), a pair the
/// fold takes ([`MsprobeChunks::new`]), dtypes of whole bytes with one value each, the target's content hash
/// known. `None` otherwise.
fn plan(
    (target, bench): (&dyn Source, &dyn Source),
    (ti, bi): (&TensorInfo, &TensorInfo),
    request: &MetricsRequest,
) -> Option<Plan> {
    let len = element_count(&ti.shape).filter(|&n| Some(n) == element_count(&bi.shape))?;
    let len = usize::try_from(len).ok()?;
    let fold = MsprobeChunks::new(request, len)?;
    let widths = (value_width(ti.dtype)?, value_width(bi.dtype)?);
    let decodes = target.decodes_on_read() && bench.decodes_on_read() && ti.hash().is_some();
    decodes.then_some(Plan { len, fold, widths })
}

/// The metrics of pair `t` (target) and `b` (bench) under `request`, measured in waves where that gives
/// them ([`plan`]). `None` otherwise, and wherever a read failed or a side held other bytes than its shape
/// says: the caller then reads the pair whole, which gives the error the user sees.
pub(super) fn measure_in_waves(
    target: &dyn Source,
    bench: &dyn Source,
    (t, ti): (TensorId, &TensorInfo),
    (b, bi): (TensorId, &TensorInfo),
    request: &MetricsRequest,
) -> Option<PairMetrics> {
    let Plan { len, mut fold, widths } = plan((target, bench), (ti, bi), request)?;
    let (mut whole, mut bench_read) = (false, Ok(false));
    let target_read = target.with_host_blocks(t, &mut |x| {
        bench_read = bench.with_host_blocks(b, &mut |y| {
            let sides = Sides { x, y, dtypes: (ti.dtype, bi.dtype), widths };
            whole = sides.fold(len, &mut fold);
        });
    });
    // What was folded counts only once both reads matched their content hashes.
    (whole && matches!(target_read, Ok(true)) && matches!(bench_read, Ok(true))).then(|| fold.finish())
}

/// How many pairs to measure at once, from what each pair read from both sides (`pairs`: target, bench and
/// the metrics asked of them) holds while it is measured: one measured in waves, each side through a
/// bounded read ([`Source::host_blocks_bytes`]), holds those reads' scratch and its wave and chunk buffers,
/// not both tensors as f32; one read whole holds each side's [`Source::buffers_per_tensor`] tensors as f32.
/// Where the large pairs are measured in waves, more of them fit the budget than compare's footprint of
/// whole reads allows, and the threads that read one pair's next wave overlap the others' measuring. A
/// pair whose read fails in waves is read whole again for its error ([`measure_in_waves`]): only a failing
/// pair holds more.
pub(super) fn pairs_in_flight_by_pair(
    (target, bench): (&dyn Source, &dyn Source),
    pairs: impl Iterator<Item = (TensorId, TensorId, MetricsRequest)>,
) -> InFlight {
    let (ti, bi) = (&target.index().tensors, &bench.index().tensors);
    // Asked once: a capture answers from all its tensors, and per pair that made compare quadratic in the
    // tensor count (0.69 s for 3,090 ops a step, 8.6x the time of 786).
    let per_tensor = (target.buffers_per_tensor(), bench.buffers_per_tensor());
    let whole = |t: &TensorInfo, buffers: u64| tensor_bytes(t).saturating_mul(buffers);
    // A thread keeps its buffers of each kind between pairs: one that read a pair whole, then measures one
    // in waves, holds both.
    let (mut in_waves, mut read_whole) = (0u64, 0u64);
    for (t, b, request) in pairs {
        let (x, y) = (&ti[t], &bi[b]);
        // Pairs of other element counts are not read.
        if !(x.has_data && y.has_data) || element_count(&x.shape) != element_count(&y.shape) {
            continue;
        }
        let planned = plan((target, bench), (x, y), &request);
        match (planned, target.host_blocks_bytes(t), bench.host_blocks_bytes(b)) {
            (Some(Plan { widths, .. }), Some(tb), Some(bb)) => {
                in_waves = in_waves.max(wave_buffers(widths) + tb + bb);
            }
            _ => read_whole = read_whole.max(whole(x, per_tensor.0).saturating_add(whole(y, per_tensor.1))),
        }
    }
    let most = in_waves.saturating_add(read_whole);
    pairs_in_flight(Footprint::compare_per_pair(most), [target, bench])
}

/// What a pair measured in waves holds beside its two reads: each side's wave bytes, and one chunk of each
/// side as f32 (a short pair's chunk is the pair, up to `PARALLEL_MIN` values).
fn wave_buffers((wn, wb): (usize, usize)) -> u64 {
    let waves = WAVE_CHUNKS * CHUNK * (wn + wb);
    let chunk_values = 2 * PARALLEL_MIN * size_of::<f32>();
    (waves + chunk_values) as u64
}

/// Bytes per value of a dtype the waves decode: whole bytes, one value per element (not complex).
fn value_width(dtype: DType) -> Option<usize> {
    let bits = dtype.bits()? as usize;
    (bits >= 8 && bits.is_multiple_of(8) && dtype.is_decodable() && lanes_per_element(dtype) == 1)
        .then_some(bits / 8)
}

/// Both sides' host blocks, read in lockstep.
struct Sides<'r> {
    x: &'r mut dyn HostBlocks,
    y: &'r mut dyn HostBlocks,
    dtypes: (DType, DType),
    widths: (usize, usize),
}

impl Sides<'_> {
    /// Folds every chunk of `len` values into `fold`, a wave at a time, on this thread's wave buffers; false
    /// where a side holds other than `len` values' bytes or a chunk does not decode.
    fn fold(self, len: usize, fold: &mut MsprobeChunks) -> bool {
        let mut waves = WAVE_BYTES.with(|w| w.take());
        let folded = self.fold_with(len, fold, &mut waves);
        WAVE_BYTES.with(|w| w.set(waves));
        folded
    }

    /// [`fold`](Self::fold) with `wave_x` and `wave_y` as the waves' bytes (grown to a wave, never shrunk).
    fn fold_with(
        self,
        len: usize,
        fold: &mut MsprobeChunks,
        (wave_x, wave_y): &mut (Vec<u8>, Vec<u8>),
    ) -> bool {
        let Sides { x, y, dtypes, widths: (wn, wb) } = self;
        if x.len() != len * wn || y.len() != len * wb {
            return false;
        }
        let chunk = fold.chunk_len();
        let wave = len.min(WAVE_CHUNKS * CHUNK);
        for (buf, width) in [(&mut *wave_x, wn), (&mut *wave_y, wb)] {
            if buf.len() < wave * width {
                buf.resize(wave * width, 0);
            }
        }
        let mut left = len;
        while left > 0 {
            let take = left.min(wave);
            left -= take;
            let mut parts: Option<Vec<ChunkSums>> = None;
            let sides = ((dtypes.0, wn), (dtypes.1, wb));
            let measure = |xs: &[u8], ys: &[u8]| measure_chunk(fold, sides, xs, ys);
            x.with_next_wave(&mut wave_x[..take * wn], &mut |xs| {
                y.with_next_wave(&mut wave_y[..take * wb], &mut |ys| {
                    parts = (xs.len() == take * wn && ys.len() == take * wb)
                        .then(|| {
                            let chunks = xs.par_chunks(chunk * wn).zip(ys.par_chunks(chunk * wb));
                            chunks.map(|(xs, ys)| measure(xs, ys)).collect()
                        })
                        .flatten();
                })
            });
            let Some(parts) = parts else { return false };
            parts.into_iter().for_each(|part| fold.push(part));
        }
        true
    }
}

/// One chunk of each side's bytes measured: an fp16 pair straight from its bytes where it can be, else
/// both sides decoded into this thread's chunk buffers first; `None` where a side does not decode.
fn measure_chunk(
    fold: &MsprobeChunks,
    ((dn, wn), (db, _)): ((DType, usize), (DType, usize)),
    xs: &[u8],
    ys: &[u8],
) -> Option<ChunkSums> {
    if let Some(part) = fold.measure_fp16_bytes((dn, db), xs, ys) {
        return Some(part);
    }
    let (mut n, mut b) = CHUNK_VALUES.with(|c| c.take());
    let count = xs.len() / wn;
    for v in [&mut n, &mut b] {
        if v.len() < count {
            v.resize(CHUNK.max(count), 0.0);
        }
    }
    let decoded =
        decode_f32_into(dn, xs, &mut n[..count]).and_then(|()| decode_f32_into(db, ys, &mut b[..count]));
    let part = decoded.ok().map(|()| fold.measure(&n[..count], &b[..count]));
    CHUNK_VALUES.with(|c| c.set((n, b)));
    part
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{Index, Io};
    use crate::metrics::{measure, Families};
    use crate::sources::SliceBlocks;
    use anyhow::Result;

    /// One tensor stored as `dtype` bytes that a read decodes (as a capture's are); its host blocks lent from
    /// memory, and reported as not matching their hash where `bad_hash`.
    struct Stored {
        index: Index,
        bytes: Vec<u8>,
        bad_hash: bool,
        /// Whether its host blocks are read through a bounded scratch (a capture's in host order).
        bounded: bool,
        /// How often [`Source::buffers_per_tensor`] was asked (a capture answers from all its tensors).
        asked_buffers: std::sync::atomic::AtomicUsize,
    }

    impl Stored {
        fn new(dtype: DType, values: &[f32], bad_hash: bool) -> Stored {
            let bytes: Vec<u8> = match dtype {
                DType::FLOAT16 => values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect(),
                DType::BF16 => values.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect(),
                _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            };
            let mut index = Index::default();
            let op = index.push_op("layer/mm".into(), "MatMul".into(), 0, 0);
            let info = TensorInfo::for_test(op, Io::Output, 0, dtype, vec![values.len() as u64]);
            index.push_tensor(info.with_hash(Some(1)));
            Stored { index, bytes, bad_hash, bounded: true, asked_buffers: Default::default() }
        }
    }

    impl Source for Stored {
        fn kind(&self) -> &'static str {
            "capture"
        }
        fn decodes_on_read(&self) -> bool {
            true
        }
        fn root(&self) -> &std::path::Path {
            std::path::Path::new("stored")
        }
        fn index(&self) -> &Index {
            &self.index
        }
        fn read_values(&self, t: TensorId, out: &mut Vec<f32>) -> Result<()> {
            let n = self.bytes.len() / value_width(self.index.tensors[t].dtype).unwrap();
            out.resize(n, 0.0);
            Ok(decode_f32_into(self.index.tensors[t].dtype, &self.bytes, out)?)
        }
        fn content_hash(&self, t: TensorId) -> Result<u64> {
            Ok(self.index.tensors[t].hash().unwrap())
        }
        fn host_blocks_bytes(&self, _: TensorId) -> Option<u64> {
            self.bounded.then_some(self.bytes.len() as u64)
        }
        fn buffers_per_tensor(&self) -> u64 {
            self.asked_buffers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            2
        }
        fn with_host_blocks(&self, _: TensorId, f: &mut dyn FnMut(&mut dyn HostBlocks)) -> Result<bool> {
            f(&mut SliceBlocks::new(&self.bytes));
            match self.bad_hash {
                true => anyhow::bail!("the data does not match its content hash"),
                false => Ok(true),
            }
        }
    }

    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| match (i + seed) % 200_003 {
                17 => f32::INFINITY,
                29 => f32::NAN,
                _ => ((i * 7 + seed) as f32 * 0.00913).sin() * 20.0 + (i % 11) as f32 * 1e-3,
            })
            .collect()
    }

    /// Pairs of every dtype the waves decode (fp16 against fp16 and fp32, bf16, fp32), a wave and a ragged
    /// part long and shorter than a chunk of the fused pass, with inf/NaN at the same places and at
    /// different ones, on pools of 1 and 3 threads: the metrics of both sides read whole, bit for bit.
    #[test]
    fn waves_give_the_metrics_of_the_whole_read() {
        for len in [WAVE_CHUNKS * CHUNK + 3 * CHUNK + 1001, PARALLEL_MIN - 3, CHUNK + 7, 1] {
            waves_of_len_give_the_metrics_of_the_whole_read(len);
        }
    }

    fn waves_of_len_give_the_metrics_of_the_whole_read(len: usize) {
        let pools: Vec<rayon::ThreadPool> =
            [1, 3].map(|n| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap()).into();
        let pairs = [
            (DType::FLOAT16, DType::FLOAT16),
            (DType::FLOAT16, DType::FLOAT),
            (DType::BF16, DType::BF16),
            (DType::FLOAT, DType::FLOAT),
        ];
        for (dn, db) in pairs {
            for bench_seed in [0, 5] {
                let target = Stored::new(dn, &values(len, 0), false);
                let mut bv = values(len, 0);
                bv.iter_mut().enumerate().filter(|(i, _)| i % 9 == 0).for_each(|(_, v)| *v *= 1.003);
                if bench_seed != 0 {
                    bv = values(len, bench_seed);
                }
                let bench = Stored::new(db, &bv, false);
                let (ti, bi) = (&target.index.tensors[0], &bench.index.tensors[0]);
                let request = MetricsRequest::for_pair(Families::Msprobe, (dn, db), &ti.shape, false);
                let (mut n, mut b) = (Vec::new(), Vec::new());
                target.read_values(0, &mut n).unwrap();
                bench.read_values(0, &mut b).unwrap();
                let whole = format!("{:?}", measure(&n, &b, &request));
                for pool in &pools {
                    let got = pool.install(|| measure_in_waves(&target, &bench, (0, ti), (0, bi), &request));
                    let got = got.unwrap_or_else(|| panic!("{dn:?} {db:?}: not measured in waves"));
                    assert_eq!(format!("{got:?}"), whole, "{len}: {dn:?} {db:?} seed {bench_seed}");
                }
            }
        }
    }

    /// 18 MiB tensors as f32 (9 MiB of fp16 data a side, big-seq384-2's) on two threads: compare's
    /// footprint of whole reads lets one pair be measured at a time, pairs measured in waves two; one at a
    /// time again where they are read whole (metrics that need the whole read, a side in a device layout).
    #[test]
    fn pairs_measured_in_waves_fit_the_budget_more_at_once() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let [mut target, bench] = [0, 1].map(|_| Stored::new(DType::FLOAT16, &vec![1.5; 9 << 19], false));
        let shape = target.index.tensors[0].shape.clone();
        let request =
            |families| MetricsRequest::for_pair(families, (DType::FLOAT16, DType::FLOAT16), &shape, false);
        let at_once = |target: &Stored, bench: &Stored, families| {
            let pairs = [(0, 0, request(families))].into_iter();
            pool.install(|| pairs_in_flight_by_pair((target, bench), pairs).large)
        };
        let whole =
            pool.install(|| pairs_in_flight(Footprint::compare([&target, &bench]), [&target, &bench]));
        assert_eq!(whole.large, 1);
        assert_eq!(at_once(&target, &bench, Families::Msprobe), 2);
        assert_eq!(at_once(&target, &bench, Families::All), 1, "msaccucmp's metrics read the pair whole");
        target.bounded = false;
        assert_eq!(at_once(&target, &bench, Families::Msprobe), 1, "a side read whole");
    }

    /// Sizing the pool asks each side once how many buffers a tensor's read holds, not once a pair: a
    /// capture answers from all its tensors, and compare of 50,513 pairs took 8.0 s for it (1.25 s now).
    #[test]
    fn the_buffers_a_read_holds_are_asked_once_a_side() {
        let [mut target, mut bench] = [0, 1].map(|_| Stored::new(DType::FLOAT16, &[1.5; 64], false));
        (target.bounded, bench.bounded) = (false, false);
        let request = MetricsRequest::for_pair(Families::All, (DType::FLOAT16, DType::FLOAT16), &[64], false);
        let pairs = std::iter::repeat_n((0, 0, request), 1000);
        pairs_in_flight_by_pair((&target, &bench), pairs);
        for side in [&target, &bench] {
            assert_eq!(side.asked_buffers.load(std::sync::atomic::Ordering::Relaxed), 1);
        }
    }

    /// Pairs the waves leave to the whole read: empty ones, metrics that need the whole read,
    /// a side holding fewer bytes than its shape says, a side whose data fails its hash.
    #[test]
    fn what_the_waves_cannot_measure_is_left_to_the_whole_read() {
        let len = PARALLEL_MIN + 3;
        let measured = |target: &Stored, bench: &Stored, families| {
            let (ti, bi) = (&target.index.tensors[0], &bench.index.tensors[0]);
            let request = MetricsRequest::for_pair(families, (ti.dtype, bi.dtype), &ti.shape, false);
            measure_in_waves(target, bench, (0, ti), (0, bi), &request).is_some()
        };
        let fp16 = |len, bad_hash| Stored::new(DType::FLOAT16, &values(len, 0), bad_hash);
        assert!(measured(&fp16(len, false), &fp16(len, false), Families::Msprobe));
        assert!(!measured(&fp16(len, false), &fp16(len, false), Families::All));
        // A short pair is one chunk, an empty one is left to the whole read.
        assert!(measured(&fp16(PARALLEL_MIN - 1, false), &fp16(PARALLEL_MIN - 1, false), Families::Msprobe));
        assert!(!measured(&fp16(0, false), &fp16(0, false), Families::Msprobe));
        assert!(!measured(&fp16(len, true), &fp16(len, false), Families::Msprobe));
        assert!(!measured(&fp16(len, false), &fp16(len, true), Families::Msprobe));
        let mut short = fp16(len, false);
        short.bytes.truncate(short.bytes.len() - 2);
        assert!(!measured(&fp16(len, false), &short, Families::Msprobe));
        assert!(!measured(&short, &fp16(len, false), Families::Msprobe));
    }
}
