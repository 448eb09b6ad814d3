//! Per-tensor statistics and the 64-bit content hash: the "tier 1" that every captured tensor gets.
//!
//! Both the collector (writing) and the analyzer (reading CANN dumps, .npy files, other captures) call the
//! same two functions, so the numbers of two sources are comparable by construction:
//! - [`TensorStats::of_bytes`] (or [`StatsAccumulator`] fed with decoded values) for the statistics;
//! - [`content_hash`] for the hash.
//!
//! Conventions (they matter when two tools are compared):
//! - `count` is every element; `nan`, `pos_inf`, `neg_inf` classify the non-finite ones.
//! - `min`, `max`, `mean`, `l2_norm` and `abs_sum` are over the FINITE values only, accumulated in f64, so
//!   one inf does not hide the rest of the tensor. With no finite value, `min`, `max` and `mean` are NaN and
//!   `l2_norm` and `abs_sum` are 0.
//! - `zero` counts values equal to zero (+0 and -0).
//! - `at_saturation` counts finite values with `|x|` equal to the dtype's largest finite magnitude
//!   ([`DType::saturation_limit`]): what saturation mode leaves of an overflow (fp16 inf -> +-65504).
//!   Integer tensors count their limits too (127 for int8); whether that means anything is the reader's call.
//! - Complex values are counted per part (re and im are two values).

pub use crate::histogram::{Histogram, HistogramAccumulator};
use crate::tensor;
use crate::{DType, FormatError, Result};
use serde::{Deserialize, Serialize};

/// The statistics of one tensor. See the module documentation for what each field counts.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorStats {
    /// Number of values (elements; two per complex element).
    pub count: u64,
    /// Values that are NaN.
    pub nan: u64,
    /// Values that are +inf.
    pub pos_inf: u64,
    /// Values that are -inf.
    pub neg_inf: u64,
    /// Values equal to zero.
    pub zero: u64,
    /// Smallest finite value; NaN when there is none.
    #[serde(with = "nan_as_null")]
    pub min: f64,
    /// Largest finite value; NaN when there is none.
    #[serde(with = "nan_as_null")]
    pub max: f64,
    /// Mean of the finite values; NaN when there is none.
    #[serde(with = "nan_as_null")]
    pub mean: f64,
    /// Euclidean norm of the finite values.
    pub l2_norm: f64,
    /// Sum of |x| over the finite values (mean |x| = `abs_sum / finite`). `None` where the statistics came
    /// from somewhere that does not keep it: captures before format version 4, device statistics, msprobe.
    #[serde(default)]
    pub abs_sum: Option<f64>,
    /// Finite values whose magnitude equals the dtype's saturation limit.
    pub at_saturation: u64,
}

impl Default for TensorStats {
    fn default() -> Self {
        StatsAccumulator::new(None).finish()
    }
}

impl TensorStats {
    /// Values that are finite.
    pub fn finite(&self) -> u64 {
        self.count - self.nan - self.pos_inf - self.neg_inf
    }

    /// Mean of |x| over the finite values (NaN when there is none), when the sum of |x| is known.
    pub fn abs_mean(&self) -> Option<f64> {
        let finite = self.finite();
        self.abs_sum.map(|s| if finite == 0 { f64::NAN } else { s / finite as f64 })
    }

    /// Whether the tensor holds NaN or inf.
    pub fn has_nonfinite(&self) -> bool {
        self.nan + self.pos_inf + self.neg_inf > 0
    }

    /// Whether a float tensor shows an overflow: NaN, inf, or values at the saturation limit.
    /// (Saturated values in integer tensors are ordinary, so they only count for floats.)
    pub fn shows_overflow(&self, dtype: DType) -> bool {
        self.has_nonfinite() || (dtype.is_float() && self.at_saturation > 0)
    }

    /// Statistics of f32 values (what [`tensor::decode_f32`] produces), with the dtype's saturation limit.
    pub fn of_f32(values: &[f32], dtype: DType) -> TensorStats {
        let mut acc = StatsAccumulator::new(dtype.saturation_limit());
        acc.push_f32(values);
        acc.finish()
    }

    /// Statistics of f64 values, with the dtype's saturation limit.
    pub fn of_f64(values: &[f64], dtype: DType) -> TensorStats {
        let mut acc = StatsAccumulator::new(dtype.saturation_limit());
        acc.push_f64(values);
        acc.finish()
    }

    /// Statistics of the raw little-endian bytes of `dtype` values, decoded by the shared tensor decoder
    /// ([`tensor::decode_f32_into`]) chunk by chunk through stack buffers: no allocation, whatever the size.
    /// 32/64-bit integers and fp64 go through f64 lanes (f32 would round `i32::MAX` off its limit). The element
    /// count is `bytes * 8 / bits` (a packed int4 tensor of odd length counts its padding nibble); bytes that
    /// do not make whole elements and dtypes the decoder refuses are errors.
    pub fn of_bytes(dtype: DType, bytes: &[u8]) -> Result<TensorStats> {
        Self::of_bytes_visiting(dtype, bytes, None, |_| {})
    }

    /// [`of_bytes`](Self::of_bytes) and the tensor's [`Histogram`] from the same decoded chunks.
    pub fn of_bytes_with_histogram(dtype: DType, bytes: &[u8]) -> Result<(TensorStats, Histogram)> {
        let mut hist = HistogramAccumulator::new();
        let stats = Self::of_bytes_visiting(dtype, bytes, Some(&mut hist), |_| {})?;
        Ok((stats, hist.finish()))
    }

    /// [`of_bytes`](Self::of_bytes) that also hands every raw chunk, in order, to `visit` right before the
    /// chunk is decoded (while it is in cache): the chunks concatenate to `bytes` when the result is `Ok`.
    /// With `hist`, the decoded values also go into it (a pass of its own over the chunk, still in L1).
    fn of_bytes_visiting(
        dtype: DType,
        bytes: &[u8],
        mut hist: Option<&mut HistogramAccumulator>,
        mut visit: impl FnMut(&[u8]),
    ) -> Result<TensorStats> {
        let plan = ChunkPlan::of(dtype)?;
        plan.check_whole(dtype, bytes.len() as u64)?;
        let elements = plan.elements(bytes.len() as u64);
        let mut acc = StatsAccumulator::new(dtype.saturation_limit());
        // Most tensors of a dump are small, and zeroing a whole chunk's buffers took longer than the
        // statistics of a tensor of 64 values: a tensor that fits in SMALL values (one chunk) is decoded
        // through a buffer of that size, of its lane type only.
        if elements.min(plan.per_chunk) as usize * plan.lanes <= SMALL {
            for chunk in bytes.chunks(plan.chunk_bytes) {
                visit(chunk);
                if plan.wide {
                    plan.push(
                        dtype,
                        chunk,
                        elements,
                        &mut acc,
                        hist.as_deref_mut(),
                        &mut [],
                        &mut [0f64; SMALL],
                    )?;
                } else {
                    plan.push(
                        dtype,
                        chunk,
                        elements,
                        &mut acc,
                        hist.as_deref_mut(),
                        &mut [0f32; SMALL],
                        &mut [],
                    )?;
                }
            }
            return Ok(acc.finish());
        }
        let mut left = elements;
        // One reused stack buffer per lane type (8 KiB / 16 KiB: stays in L1 next to the chunk's bytes).
        let mut buf32 = [0f32; CHUNK];
        let mut buf64 = [0f64; CHUNK];
        for chunk in bytes.chunks(plan.chunk_bytes) {
            let n = left.min(plan.per_chunk);
            left -= n;
            visit(chunk);
            plan.push(dtype, chunk, n, &mut acc, hist.as_deref_mut(), &mut buf32, &mut buf64)?;
        }
        Ok(acc.finish())
    }
}

/// How [`TensorStats::of_bytes`] cuts a tensor's bytes into chunks of [`CHUNK`] values (the last one
/// shorter) and decodes each: shared by the whole-tensor pass and [`StatsStream`], so that both push the
/// same chunks and get the same bits.
#[derive(Clone, Copy, Debug)]
struct ChunkPlan {
    bits: u32,
    lanes: usize,
    /// Elements per chunk.
    per_chunk: u64,
    /// Bytes per chunk (`per_chunk` elements).
    chunk_bytes: usize,
    /// 32/64-bit integers and fp64 go through f64 lanes (f32 would round `i32::MAX` off its limit).
    wide: bool,
}

impl ChunkPlan {
    fn of(dtype: DType) -> Result<ChunkPlan> {
        let bits = dtype
            .bits()
            .filter(|_| dtype.is_decodable())
            .ok_or_else(|| FormatError::whole(format!("no statistics for dtype {dtype}")))?;
        let lanes = tensor::lanes_per_element(dtype);
        // CHUNK is a multiple of 8, so chunks of sub-byte types start on byte boundaries.
        let per_chunk = (CHUNK / lanes) as u64;
        let chunk_bytes = dtype.byte_size(per_chunk).unwrap_or(1).max(1) as usize;
        let wide = matches!(
            dtype,
            DType::DOUBLE
                | DType::COMPLEX128
                | DType::INT32
                | DType::QINT32
                | DType::UINT32
                | DType::INT64
                | DType::UINT64
        );
        Ok(ChunkPlan { bits, lanes, per_chunk, chunk_bytes, wide })
    }

    /// Elements in `len` bytes (a packed int4 tensor of odd length counts its padding nibble).
    fn elements(&self, len: u64) -> u64 {
        len * 8 / u64::from(self.bits)
    }

    /// An error unless `len` bytes make whole elements.
    fn check_whole(&self, dtype: DType, len: u64) -> Result<()> {
        let whole = dtype.byte_size(self.elements(len)).unwrap_or(0);
        if whole != len {
            return Err(FormatError::at(
                whole,
                format!("{len} bytes are not a whole number of {dtype} elements"),
            ));
        }
        Ok(())
    }

    /// Decodes the `elements` elements of `chunk` into the accumulator (and the histogram), through
    /// `buf64` when the plan is wide, else `buf32`: that buffer holds at least the chunk's values.
    #[allow(clippy::too_many_arguments)]
    fn push(
        &self,
        dtype: DType,
        chunk: &[u8],
        elements: u64,
        acc: &mut StatsAccumulator,
        hist: Option<&mut HistogramAccumulator>,
        buf32: &mut [f32],
        buf64: &mut [f64],
    ) -> Result<()> {
        let n = elements as usize * self.lanes;
        if self.wide {
            tensor::decode_f64_into(dtype, chunk, &mut buf64[..n])?;
            acc.push_f64(&buf64[..n]);
            if let Some(h) = hist {
                h.push_f64(&buf64[..n]);
            }
        } else {
            tensor::decode_f32_into(dtype, chunk, &mut buf32[..n])?;
            acc.push_f32(&buf32[..n]);
            if let Some(h) = hist {
                h.push_f32(&buf32[..n]);
            }
        }
        Ok(())
    }
}

/// [`stats_and_hash`] (and [`stats_hash_and_histogram`]) of a tensor whose bytes come in pieces: feed them
/// in order with [`update`](Self::update), in pieces of any size (a piece may end inside an element), then
/// [`finish`](Self::finish). The results are bit for bit those of the whole-tensor functions on the
/// concatenated bytes: the stream carries partial chunks over to the next piece and decodes exactly the
/// 2048-value chunks the whole-tensor pass decodes, and XXH3's streaming digest equals its one-shot
/// hash. A piece is decoded where it lies; only a chunk split across pieces is copied (into a buffer of one
/// chunk). [`reset`](Self::reset) reuses the stream's buffers for the next tensor.
pub struct StatsStream {
    dtype: DType,
    /// `Err` for a dtype without statistics (the hash is still computed).
    plan: Result<ChunkPlan>,
    hasher: crate::hash::Xxh3,
    acc: StatsAccumulator,
    hist: Option<HistogramAccumulator>,
    /// Bytes of the chunk in progress (fewer than a chunk).
    carry: Vec<u8>,
    /// Bytes seen.
    len: u64,
    /// The first decoding error, after which nothing more is decoded.
    failed: Option<FormatError>,
    buf32: Box<[f32; CHUNK]>,
    buf64: Box<[f64; CHUNK]>,
}

impl StatsStream {
    /// A stream for a tensor of `dtype`; with `histogram`,
    /// [`finish_with_histogram`](Self::finish_with_histogram) also gives its histogram.
    pub fn new(dtype: DType, histogram: bool) -> StatsStream {
        StatsStream {
            dtype,
            plan: ChunkPlan::of(dtype),
            hasher: crate::hash::Xxh3::new(),
            acc: StatsAccumulator::new(dtype.saturation_limit()),
            hist: histogram.then(HistogramAccumulator::new),
            carry: Vec::new(),
            len: 0,
            failed: None,
            buf32: Box::new([0.0; CHUNK]),
            buf64: Box::new([0.0; CHUNK]),
        }
    }

    /// Starts over for a new tensor, keeping the buffers.
    pub fn reset(&mut self, dtype: DType, histogram: bool) {
        self.dtype = dtype;
        self.plan = ChunkPlan::of(dtype);
        self.hasher.reset();
        self.acc = StatsAccumulator::new(dtype.saturation_limit());
        self.hist = histogram.then(HistogramAccumulator::new);
        self.carry.clear();
        self.len = 0;
        self.failed = None;
    }

    /// Bytes fed so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was fed yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Feeds the tensor's next bytes.
    pub fn update(&mut self, mut bytes: &[u8]) {
        self.hasher.update(bytes);
        self.len += bytes.len() as u64;
        let plan = match &self.plan {
            Ok(plan) if self.failed.is_none() => *plan,
            _ => return,
        };
        if !self.carry.is_empty() {
            let take = (plan.chunk_bytes - self.carry.len()).min(bytes.len());
            self.carry.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.carry.len() < plan.chunk_bytes {
                return;
            }
            let carry = std::mem::take(&mut self.carry);
            self.push_full(&plan, &carry);
            self.carry = carry;
            self.carry.clear();
        }
        let mut chunks = bytes.chunks_exact(plan.chunk_bytes);
        for chunk in &mut chunks {
            self.push_full(&plan, chunk);
        }
        self.carry.extend_from_slice(chunks.remainder());
    }

    fn push_full(&mut self, plan: &ChunkPlan, chunk: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        let pushed = plan.push(
            self.dtype,
            chunk,
            plan.per_chunk,
            &mut self.acc,
            self.hist.as_mut(),
            &mut self.buf32[..],
            &mut self.buf64[..],
        );
        if let Err(e) = pushed {
            self.failed = Some(e);
        }
    }

    /// What [`stats_and_hash`] gives for the bytes fed.
    pub fn finish(&mut self) -> (Result<TensorStats>, u64) {
        let (stats, hash) = self.finish_all();
        (stats.map(|(s, _)| s), hash)
    }

    /// What [`stats_hash_and_histogram`] gives for the bytes fed (a stream made without `histogram` gives
    /// an empty histogram).
    pub fn finish_with_histogram(&mut self) -> (Result<(TensorStats, Histogram)>, u64) {
        self.finish_all()
    }

    fn finish_all(&mut self) -> (Result<(TensorStats, Histogram)>, u64) {
        let hash = self.hasher.digest();
        let plan = match &self.plan {
            Ok(plan) => *plan,
            Err(e) => return (Err(e.clone()), hash),
        };
        // The whole-tensor pass refuses ragged bytes before decoding anything.
        if let Err(e) = plan.check_whole(self.dtype, self.len) {
            return (Err(e), hash);
        }
        if let Some(e) = &self.failed {
            return (Err(e.clone()), hash);
        }
        if !self.carry.is_empty() {
            // The last chunk: the elements of the bytes left (fewer than a chunk's).
            let elements = plan.elements(self.carry.len() as u64);
            let carry = std::mem::take(&mut self.carry);
            let pushed = plan.push(
                self.dtype,
                &carry,
                elements,
                &mut self.acc,
                self.hist.as_mut(),
                &mut self.buf32[..],
                &mut self.buf64[..],
            );
            self.carry = carry;
            self.carry.clear();
            if let Err(e) = pushed {
                self.failed = Some(e.clone());
                return (Err(e), hash);
            }
        }
        let hist = self.hist.as_ref().map(HistogramAccumulator::finish).unwrap_or_default();
        (Ok((self.acc.finish(), hist)), hash)
    }
}

/// The statistics ([`TensorStats::of_bytes`]) and the content hash ([`content_hash`]) of a tensor in ONE
/// pass over its bytes: each chunk is hashed and decoded while it is in cache, so the tensor is read from
/// memory once instead of twice. The hash is computed whether or not the statistics succeed, and both
/// results are exactly those of the two separate functions.
pub fn stats_and_hash(dtype: DType, bytes: &[u8]) -> (Result<TensorStats>, u64) {
    let mut hasher = crate::hash::Xxh3::new();
    match TensorStats::of_bytes_visiting(dtype, bytes, None, |chunk| hasher.update(chunk)) {
        Ok(stats) => (Ok(stats), hasher.digest()),
        Err(e) => (Err(e), content_hash(bytes)),
    }
}

/// [`stats_and_hash`] plus the tensor's [`Histogram`], still in one pass over its bytes (the histogram
/// takes the decoded values of each chunk while they are in L1). The statistics and hash are exactly
/// [`stats_and_hash`]'s.
pub fn stats_hash_and_histogram(dtype: DType, bytes: &[u8]) -> (Result<(TensorStats, Histogram)>, u64) {
    let mut hasher = crate::hash::Xxh3::new();
    let mut hist = HistogramAccumulator::new();
    match TensorStats::of_bytes_visiting(dtype, bytes, Some(&mut hist), |chunk| hasher.update(chunk)) {
        Ok(stats) => (Ok((stats, hist.finish())), hasher.digest()),
        Err(e) => (Err(e), content_hash(bytes)),
    }
}

/// The 64-bit content hash of a tensor's raw bytes: XXH3-64 with seed 0 ([`crate::hash::xxh3_64`]).
///
/// For `diff`, equal hashes are taken to mean equal bytes and vice versa: a collision between two different
/// tensors of the same op, step and rank has probability about 2^-64, far below any hardware error rate.
/// The hash covers bytes only: the dtype, shape and layout are compared from the metadata.
pub fn content_hash(bytes: &[u8]) -> u64 {
    crate::hash::xxh3_64(bytes)
}

/// Independent lanes per accumulator: with f32 min/max/counts and f64 sums they fit the 16 vector registers
/// of baseline x86_64 (SSE2) and aarch64 (NEON) without spilling.
const LANES: usize = 8;
/// Values per block of [`StatsAccumulator::push_f32`]: the block's partials live in registers and are
/// merged into the totals once per block (and its u32 counters cannot overflow).
const BLOCK: usize = 256;
/// Values decoded per chunk by [`TensorStats::of_bytes`] (a multiple of [`BLOCK`], so that pushing a tensor
/// chunk by chunk and pushing it whole give bit-identical results).
const CHUNK: usize = 2048;
const _: () = assert!(CHUNK.is_multiple_of(BLOCK) && BLOCK.is_multiple_of(LANES));
/// The values of the buffer [`TensorStats::of_bytes`] decodes a tensor into when the whole tensor fits.
const SMALL: usize = 256;
const _: () = assert!(SMALL <= CHUNK);

/// One-pass, chunked statistics: feed decoded values in any number of slices, then [`finish`](Self::finish).
///
/// f32 values go block by block ([`F32_BLOCK`] values) through a branch-free kernel that the compiler
/// vectorizes: min/max and the zero/saturation counts in f32/u32 lanes (exact: they only compare), sums and
/// sums of squares in f64 lanes (each f32 and its square are exact in f64, so only the f64 additions round,
/// as before). The kernel does not test for NaN/inf per value: a non-finite value makes the block's f64 sum of
/// squares NaN or inf, and such a (rare) block is redone by the classifying per-value path. f64 values go
/// through the classifying path in blocks of [`F32_LANES`] values. Lanes and blocks are combined in a fixed
/// order, so the result depends on the values and on the slice boundaries of the pushes only.
#[derive(Clone, Debug)]
pub struct StatsAccumulator {
    limit: f64,
    /// `limit` as f32 when it is exactly an f32 (else NaN: then no f32 value can equal it in f64 either).
    limit32: f32,
    count: u64,
    sum: [f64; LANES],
    sumsq: [f64; LANES],
    abs_sum: [f64; LANES],
    min: [f64; LANES],
    max: [f64; LANES],
    nan: [u64; LANES],
    pos_inf: [u64; LANES],
    neg_inf: [u64; LANES],
    zero: [u64; LANES],
    sat: [u64; LANES],
}

/// Values per block of [`StatsAccumulator::push_f32`], for kernels that form its partials themselves
/// ([`StatsAccumulator::push_f32_block`]).
pub const F32_BLOCK: usize = BLOCK;
/// Lanes of [`BlockF32`]: value `j` of a block goes to lane `j % F32_LANES`.
pub const F32_LANES: usize = LANES;

/// The register-resident partials of one block of finite f32 values (see [`StatsAccumulator`]), as
/// [`StatsAccumulator::push_f32`] forms them: for the block's whole groups of [`F32_LANES`] values, lane `i`
/// holds the values `j` with `j % F32_LANES == i`; `sum` and `sumsq` add them (and their squares) in f64 in
/// order, starting from zero; `min`/`max` are the lane's extremes (infinite when empty), `zero` and `sat`
/// its counts of zeros and of magnitudes equal to the saturation limit; `abs_sum` adds the values' magnitudes
/// like `sum` adds the values.
#[derive(Clone, Copy, Debug)]
pub struct BlockF32 {
    /// Per-lane sums.
    pub sum: [f64; LANES],
    /// Per-lane sums of squares.
    pub sumsq: [f64; LANES],
    /// Per-lane sums of magnitudes.
    pub abs_sum: [f64; LANES],
    /// Per-lane minima.
    pub min: [f32; LANES],
    /// Per-lane maxima.
    pub max: [f32; LANES],
    /// Per-lane counts of zeros.
    pub zero: [u32; LANES],
    /// Per-lane counts of values at the saturation limit.
    pub sat: [u32; LANES],
}

impl BlockF32 {
    /// The partials of `values` (whole groups of [`LANES`]), assuming they are all finite.
    #[inline(always)]
    fn of(values: &[f32], limit: f32) -> BlockF32 {
        // Two loops over the (L1-resident) block, in two functions: in one loop (or one function) the
        // compiler vectorizes the f32 lanes 2-wide to match the f64 ones, and the accumulators spill.
        let (min, max, zero, sat) = extremes(values, limit);
        let (sum, sumsq, abs_sum) = sums(values);
        BlockF32 { sum, sumsq, abs_sum, min, max, zero, sat }
    }

    /// Whether every value of the block was finite: NaN and ±inf make a square NaN or +inf, and the squares
    /// of finite f32 values (< 2^256) cannot overflow an f64 sum of [`BLOCK`] of them.
    #[inline(always)]
    fn all_finite(&self) -> bool {
        self.sumsq.iter().fold(0.0, |a, &s| a + s).is_finite()
    }
}

/// The extremes and counts of [`BlockF32::of`]: f32/u32 lanes (4-wide SSE2/NEON vectors, two of each; one
/// AVX2 vector), the build chosen by [`crate::simd`].
type Extremes = ([f32; LANES], [f32; LANES], [u32; LANES], [u32; LANES]);

/// The min/max/zero/saturation loop of [`BlockF32::of`], compiled into each instruction-set build.
#[inline(always)]
fn extremes_kernel(values: &[f32], limit: f32) -> Extremes {
    let mut min = [f32::INFINITY; LANES];
    let mut max = [f32::NEG_INFINITY; LANES];
    let mut zero = [0u32; LANES];
    let mut sat = [0u32; LANES];
    for group in values.chunks_exact(LANES) {
        for (i, &x) in group.iter().enumerate() {
            // Comparisons and selects (not f32::min, whose NaN rule defeats vectorization): minps/maxps.
            min[i] = if x < min[i] { x } else { min[i] };
            max[i] = if x > max[i] { x } else { max[i] };
            zero[i] += u32::from(x == 0.0);
            sat[i] += u32::from(x.abs() == limit);
        }
    }
    (min, max, zero, sat)
}

/// The sums of [`BlockF32::of`] in f64 lanes: values, squares and magnitudes (each f32, its square and its
/// magnitude are exact in f64), compiled into each instruction-set build.
type Sums = ([f64; LANES], [f64; LANES], [f64; LANES]);

/// The loop of [`Sums`].
#[inline(always)]
fn sums_kernel(values: &[f32]) -> Sums {
    let mut sum = [0f64; LANES];
    let mut sumsq = [0f64; LANES];
    let mut abs_sum = [0f64; LANES];
    for group in values.chunks_exact(LANES) {
        for (i, &x) in group.iter().enumerate() {
            let w = f64::from(x);
            sum[i] += w;
            sumsq[i] += w * w;
            abs_sum[i] += w.abs();
        }
    }
    (sum, sumsq, abs_sum)
}

// Both up to AVX2. In the AVX-512 build the compiler packs the 8 f32 lanes of min and max into one zmm
// register and merges the two compare masks for every group of 8 values (kunpckbw, vinsertf64x4,
// vextractf64x4): a dependency chain that made `stats_and_hash` of fp16 run at 2.95 GB/s against the AVX2
// build's 4.7-4.9 (one core of the development VM's EPYC; `sums` alone: 3% slower at AVX-512). The AVX2
// build is tested bit-identical to the portable one like every other
// (`every_build_forms_the_same_block_partials`).
crate::multiversion!(
    #[inline(never)] fn extremes(values: &[f32], limit: f32) -> Extremes = extremes_kernel, up_to Avx2
);
crate::multiversion!(#[inline(never)] fn sums(values: &[f32]) -> Sums = sums_kernel, up_to Avx2);

impl StatsAccumulator {
    /// An empty accumulator; `saturation_limit` is the magnitude counted by `at_saturation` (None: never).
    pub fn new(saturation_limit: Option<f64>) -> Self {
        // NaN never compares equal, so "no limit" counts nothing.
        let limit = saturation_limit.unwrap_or(f64::NAN);
        let limit32 = if f64::from(limit as f32) == limit { limit as f32 } else { f32::NAN };
        StatsAccumulator {
            limit,
            limit32,
            count: 0,
            sum: [0.0; LANES],
            sumsq: [0.0; LANES],
            abs_sum: [0.0; LANES],
            min: [f64::INFINITY; LANES],
            max: [f64::NEG_INFINITY; LANES],
            nan: [0; LANES],
            pos_inf: [0; LANES],
            neg_inf: [0; LANES],
            zero: [0; LANES],
            sat: [0; LANES],
        }
    }

    /// Adds f32 values.
    pub fn push_f32(&mut self, values: &[f32]) {
        for block in values.chunks(BLOCK) {
            let whole = block.len() / LANES * LANES;
            let (main, rest) = block.split_at(whole);
            let b = BlockF32::of(main, self.limit32);
            if b.all_finite() {
                self.push_f32_block(&b, 0);
            } else {
                // Rare: NaN or inf in this block. Classify value by value.
                for group in main.chunks_exact(LANES) {
                    for (i, &v) in group.iter().enumerate() {
                        self.one(i, f64::from(v));
                    }
                }
            }
            for &v in rest {
                self.one(0, f64::from(v));
            }
        }
        self.count += values.len() as u64;
    }

    /// Adds the partials of one block of `count` finite values formed elsewhere: pushing the blocks of
    /// [`F32_BLOCK`] values of a slice in order (the last one shorter, its values beyond whole groups of
    /// [`F32_LANES`] then given to [`push_f32`](Self::push_f32)) gives exactly what `push_f32` of the slice
    /// gives. A block of empty lanes changes nothing but the count (a sum that starts at +0 never becomes
    /// -0, so adding +0 leaves it as it is), so extremes and counts may also come in a block of their own.
    pub fn push_f32_block(&mut self, b: &BlockF32, count: u64) {
        for i in 0..LANES {
            self.sum[i] += b.sum[i];
            self.sumsq[i] += b.sumsq[i];
            self.abs_sum[i] += b.abs_sum[i];
            let (lo, hi) = (f64::from(b.min[i]), f64::from(b.max[i]));
            self.min[i] = if lo < self.min[i] { lo } else { self.min[i] };
            self.max[i] = if hi > self.max[i] { hi } else { self.max[i] };
            self.zero[i] += u64::from(b.zero[i]);
            self.sat[i] += u64::from(b.sat[i]);
        }
        self.count += count;
    }

    /// The saturation limit as f32 (NaN when there is none, or when it is not an f32: then no f32 value
    /// equals it), for kernels that count [`BlockF32::sat`] themselves.
    pub fn saturation_limit_f32(&self) -> f32 {
        self.limit32
    }

    /// Adds f64 values.
    pub fn push_f64(&mut self, values: &[f64]) {
        let mut blocks = values.chunks_exact(LANES);
        for block in &mut blocks {
            let lane: &[f64; LANES] = block.try_into().unwrap_or(&[0.0; LANES]);
            self.block(lane);
        }
        for &v in blocks.remainder() {
            self.one(0, v);
        }
        self.count += values.len() as u64;
    }

    #[inline(always)]
    fn block(&mut self, lane: &[f64; LANES]) {
        // Fast path for the common all-finite block: seven accumulators instead of ten, no selects.
        if lane.iter().all(|x| x.is_finite()) {
            for (i, &x) in lane.iter().enumerate() {
                self.sum[i] += x;
                self.sumsq[i] += x * x;
                self.abs_sum[i] += x.abs();
                self.min[i] = if x < self.min[i] { x } else { self.min[i] };
                self.max[i] = if x > self.max[i] { x } else { self.max[i] };
                self.zero[i] += u64::from(x == 0.0);
                self.sat[i] += u64::from(x.abs() == self.limit);
            }
            return;
        }
        for (i, &x) in lane.iter().enumerate() {
            self.one(i, x);
        }
    }

    /// Branch-free update of lane `i` (selects and comparisons instead of ifs and `f64::min`, whose NaN
    /// handling defeats vectorization; non-finite values are replaced before they reach min/max).
    #[inline(always)]
    fn one(&mut self, i: usize, x: f64) {
        let finite = x.is_finite();
        let fx = if finite { x } else { 0.0 };
        let lo = if finite { x } else { f64::INFINITY };
        let hi = if finite { x } else { f64::NEG_INFINITY };
        self.sum[i] += fx;
        self.sumsq[i] += fx * fx;
        self.abs_sum[i] += fx.abs();
        self.min[i] = if lo < self.min[i] { lo } else { self.min[i] };
        self.max[i] = if hi > self.max[i] { hi } else { self.max[i] };
        self.nan[i] += u64::from(x.is_nan());
        self.pos_inf[i] += u64::from(x == f64::INFINITY);
        self.neg_inf[i] += u64::from(x == f64::NEG_INFINITY);
        self.zero[i] += u64::from(x == 0.0);
        self.sat[i] += u64::from(fx.abs() == self.limit);
    }

    /// The statistics of everything pushed so far.
    pub fn finish(&self) -> TensorStats {
        let nan: u64 = self.nan.iter().sum();
        let pos_inf: u64 = self.pos_inf.iter().sum();
        let neg_inf: u64 = self.neg_inf.iter().sum();
        let finite = self.count - nan - pos_inf - neg_inf;
        let min = self.min.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.max.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = self.sum.iter().sum();
        let sumsq: f64 = self.sumsq.iter().sum();
        TensorStats {
            count: self.count,
            nan,
            pos_inf,
            neg_inf,
            zero: self.zero.iter().sum(),
            min: if finite == 0 { f64::NAN } else { min },
            max: if finite == 0 { f64::NAN } else { max },
            mean: if finite == 0 { f64::NAN } else { sum / finite as f64 },
            l2_norm: sumsq.sqrt(),
            abs_sum: Some(self.abs_sum.iter().sum()),
            at_saturation: self.sat.iter().sum(),
        }
    }
}

/// JSON has no NaN: write it as `null` and read `null` back as NaN.
mod nan_as_null {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &f64, s: S) -> Result<S::Ok, S::Error> {
        if value.is_nan() {
            s.serialize_none()
        } else {
            s.serialize_f64(*value)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    fn fp16_bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes()).collect()
    }

    #[test]
    fn empty_tensor() {
        let s = TensorStats::of_f32(&[], DType::FLOAT);
        assert_eq!((s.count, s.nan, s.zero, s.at_saturation), (0, 0, 0, 0));
        assert!(s.min.is_nan() && s.max.is_nan() && s.mean.is_nan());
        assert_eq!((s.l2_norm, s.abs_sum), (0.0, Some(0.0)));
        assert!(s.abs_mean().unwrap().is_nan());
        let b = TensorStats::of_bytes(DType::FLOAT16, &[]).unwrap();
        assert_eq!((b.count, b.l2_norm), (0, 0.0));
        assert!(b.min.is_nan());
    }

    #[test]
    fn all_nan() {
        let values = vec![f32::NAN; 19];
        let s = TensorStats::of_f32(&values, DType::FLOAT);
        assert_eq!((s.count, s.nan, s.finite()), (19, 19, 0));
        assert!(s.min.is_nan() && s.mean.is_nan());
        assert!(s.has_nonfinite());
    }

    #[test]
    fn inf_mix_keeps_finite_statistics() {
        let values = [1.0, f32::INFINITY, -3.0, f32::NEG_INFINITY, f32::NAN, 0.0, -0.0, 2.0, f32::INFINITY];
        let s = TensorStats::of_f32(&values, DType::FLOAT);
        assert_eq!((s.count, s.nan, s.pos_inf, s.neg_inf, s.zero), (9, 1, 2, 1, 2));
        assert_eq!((s.min, s.max), (-3.0, 2.0));
        assert_eq!(s.mean, 0.0);
        assert_eq!(s.abs_sum, Some(6.0), "|1| + |-3| + |2|: non-finite values are not summed");
        assert_eq!(s.abs_mean(), Some(1.2), "over the 5 finite values, zeros included");
        assert!((s.l2_norm - 14f64.sqrt()).abs() < 1e-12);
    }

    #[test]
    fn fp16_saturation_is_counted_both_signs() {
        let values = [65504.0, -65504.0, 65504.0, 1.0, 60000.0, f32::INFINITY];
        let s = TensorStats::of_bytes(DType::FLOAT16, &fp16_bytes(&values)).unwrap();
        assert_eq!(s.at_saturation, 3);
        assert_eq!(s.pos_inf, 1);
        assert_eq!(s.max, 65504.0);
        assert!(s.shows_overflow(DType::FLOAT16));
        let ok = TensorStats::of_bytes(DType::FLOAT16, &fp16_bytes(&[1.0, 2.0])).unwrap();
        assert!(!ok.shows_overflow(DType::FLOAT16));
    }

    #[test]
    fn integer_limits_are_exact() {
        let bytes: Vec<u8> =
            [i32::MAX, -i32::MAX, 5, i32::MIN].iter().flat_map(|v| v.to_le_bytes()).collect();
        let s = TensorStats::of_bytes(DType::INT32, &bytes).unwrap();
        assert_eq!(s.at_saturation, 2);
        assert_eq!(s.min, f64::from(i32::MIN));
        assert!(!s.shows_overflow(DType::INT32), "saturated integers are not overflow evidence");
    }

    #[test]
    fn bytes_and_values_agree_across_chunks() {
        // More than one CHUNK and not a multiple of LANES, with specials spread around.
        let values: Vec<f32> = (0..5003)
            .map(|i| match i % 997 {
                0 => f32::NAN,
                1 => f32::INFINITY,
                _ => ((i as f32) * 0.37).sin() * 100.0,
            })
            .collect();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let a = TensorStats::of_bytes(DType::FLOAT, &bytes).unwrap();
        let b = TensorStats::of_f32(&values, DType::FLOAT);
        assert_eq!(a, b);
        assert_eq!(a.count, 5003);
        assert_eq!(a.nan, 6);
        let naive_sum: f64 = values.iter().filter(|v| v.is_finite()).map(|&v| f64::from(v)).sum();
        assert!((a.mean * a.finite() as f64 - naive_sum).abs() < 1e-6);
    }

    #[test]
    fn bf16_and_f64() {
        let bytes: Vec<u8> =
            [1.5f32, -2.0].iter().flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes()).collect();
        let s = TensorStats::of_bytes(DType::BF16, &bytes).unwrap();
        assert_eq!((s.min, s.max, s.mean), (-2.0, 1.5, -0.25));
        let bytes: Vec<u8> = [f64::MAX, 1e300].iter().flat_map(|v| v.to_le_bytes()).collect();
        let s = TensorStats::of_bytes(DType::DOUBLE, &bytes).unwrap();
        assert_eq!((s.at_saturation, s.max), (1, f64::MAX));
    }

    #[test]
    fn ragged_bytes_are_an_error() {
        let err = TensorStats::of_bytes(DType::FLOAT, &[0; 7]).unwrap_err();
        assert_eq!(err.offset, Some(4));
        assert!(TensorStats::of_bytes(DType::STRING, &[0; 8]).is_err());
        assert!(TensorStats::of_bytes(DType::COMPLEX64, &[0; 12]).is_err());
    }

    #[test]
    fn other_dtypes_go_through_the_shared_decoder() {
        // int4, two per byte, low nibble first: 0x7F -> (-1, 7); 0x80 -> (0, -8).
        let s = TensorStats::of_bytes(DType::INT4, &[0x7F, 0x80]).unwrap();
        assert_eq!((s.count, s.min, s.max, s.zero, s.at_saturation), (4, -8.0, 7.0, 1, 1));
        // complex64: parts are values.
        let bytes: Vec<u8> = [1.0f32, f32::NAN, -2.0, 0.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let s = TensorStats::of_bytes(DType::COMPLEX64, &bytes).unwrap();
        assert_eq!((s.count, s.nan, s.zero, s.min), (4, 1, 1, -2.0));
        // Many chunks of uint1 bits.
        let s = TensorStats::of_bytes(DType::UINT1, &[0xFF; 1000]).unwrap();
        assert_eq!((s.count, s.mean), (8000, 1.0));
    }

    #[test]
    fn json_round_trip_keeps_nan() {
        let s = TensorStats::of_f32(&[f32::NAN], DType::FLOAT);
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"min\":null"));
        let back: TensorStats = serde_json::from_str(&json).unwrap();
        assert!(back.min.is_nan() && back.nan == 1);
    }

    /// The plain definition, value by value in f64, that the blocked kernel must reproduce.
    fn reference(values: &[f32], limit: f64) -> TensorStats {
        let finite: Vec<f64> = values.iter().filter(|v| v.is_finite()).map(|&v| f64::from(v)).collect();
        let n = finite.len();
        TensorStats {
            count: values.len() as u64,
            nan: values.iter().filter(|v| v.is_nan()).count() as u64,
            pos_inf: values.iter().filter(|&&v| v == f32::INFINITY).count() as u64,
            neg_inf: values.iter().filter(|&&v| v == f32::NEG_INFINITY).count() as u64,
            zero: values.iter().filter(|&&v| v == 0.0).count() as u64,
            min: if n == 0 { f64::NAN } else { finite.iter().copied().fold(f64::INFINITY, f64::min) },
            max: if n == 0 { f64::NAN } else { finite.iter().copied().fold(f64::NEG_INFINITY, f64::max) },
            mean: if n == 0 { f64::NAN } else { finite.iter().sum::<f64>() / n as f64 },
            l2_norm: finite.iter().map(|x| x * x).sum::<f64>().sqrt(),
            abs_sum: Some(finite.iter().map(|x| x.abs()).sum::<f64>()),
            at_saturation: finite.iter().filter(|x| x.abs() == limit).count() as u64,
        }
    }

    fn assert_close(got: TensorStats, want: TensorStats) {
        let exact = (got.count, got.nan, got.pos_inf, got.neg_inf, got.zero, got.at_saturation);
        let want_exact = (want.count, want.nan, want.pos_inf, want.neg_inf, want.zero, want.at_saturation);
        assert_eq!(exact, want_exact);
        for (g, w) in [(got.min, want.min), (got.max, want.max)] {
            assert!(g == w || (g.is_nan() && w.is_nan()), "{g} vs {w}");
        }
        let abs = |s: &TensorStats| s.abs_sum.expect("computed statistics keep the sum of |x|");
        for (g, w) in [(got.mean, want.mean), (got.l2_norm, want.l2_norm), (abs(&got), abs(&want))] {
            assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0) || (g.is_nan() && w.is_nan()), "{g} vs {w}");
        }
    }

    #[test]
    fn blocked_kernel_matches_the_definition_with_specials_in_some_blocks() {
        // Several BLOCKs and CHUNKs, a ragged tail; specials only in some blocks (the others take the fast
        // path), saturated values and zeros in fast blocks, a -inf in a block of its own.
        let n = 3 * CHUNK + 5 * BLOCK + 13;
        let values: Vec<f32> = (0..n)
            .map(|i| match i {
                _ if i == 3 * BLOCK + 7 => f32::NAN,
                _ if i == 3 * BLOCK + 8 => f32::INFINITY,
                _ if i == 9 * BLOCK + 1 => f32::NEG_INFINITY,
                _ if i % 1009 == 0 => 65504.0,
                _ if i % 1013 == 0 => -65504.0,
                _ if i % 7 == 0 => 0.0,
                _ => half::f16::from_f32(((i as f32) * 0.731).sin() * 300.0).to_f32(),
            })
            .collect();
        let want = reference(&values, 65504.0);
        assert!(want.nan == 1 && want.pos_inf == 1 && want.neg_inf == 1 && want.at_saturation > 4);
        let bytes = fp16_bytes(&values);
        assert_close(TensorStats::of_bytes(DType::FLOAT16, &bytes).unwrap(), want);
        assert_close(TensorStats::of_f32(&values, DType::FLOAT16), want);
        // Any slicing of the pushes gives the same counts and extremes (sums may round differently).
        let mut acc = StatsAccumulator::new(Some(65504.0));
        for piece in values.chunks(37) {
            acc.push_f32(piece);
        }
        assert_close(acc.finish(), want);
        // The same through bf16 and fp32 bytes (no saturation there for these values).
        let bf: Vec<f32> = values.iter().map(|&v| half::bf16::from_f32(v).to_f32()).collect();
        let bf_bytes: Vec<u8> =
            bf.iter().flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes()).collect();
        assert_close(
            TensorStats::of_bytes(DType::BF16, &bf_bytes).unwrap(),
            reference(&bf, 3.3895313892515355e38),
        );
        let f32_bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_close(
            TensorStats::of_bytes(DType::FLOAT, &f32_bytes).unwrap(),
            reference(&values, f32::MAX as f64),
        );
    }

    #[test]
    fn saturation_limit_that_is_not_an_f32_counts_nothing_in_f32_lanes() {
        // u32::MAX is not an f32; its f32 rounding (2^32) must not count as saturated.
        let s = TensorStats::of_f32(&[4294967296.0; 40], DType::UINT32);
        assert_eq!(s.at_saturation, 0);
        let s = TensorStats::of_f32(&[f32::MAX, -f32::MAX, 1.0, f32::MAX], DType::FLOAT);
        assert_eq!(s.at_saturation, 3);
    }

    #[test]
    fn every_build_forms_the_same_block_partials() {
        let values: Vec<f32> = (0..BLOCK)
            .map(|i| match i % 97 {
                0 => 65504.0,
                1 => -65504.0,
                2 => 0.0,
                3 => -0.0,
                _ => ((i as f32) * 0.37).sin() * 1e3 + (i as f32) * 1e-3,
            })
            .collect();
        let bits = |b: &BlockF32| {
            let f = |a: &[f64; LANES]| a.map(f64::to_bits);
            let g = |a: &[f32; LANES]| a.map(f32::to_bits);
            (f(&b.sum), f(&b.sumsq), f(&b.abs_sum), g(&b.min), g(&b.max), b.zero, b.sat)
        };
        for len in [0, LANES, 5 * LANES, BLOCK] {
            let want = crate::simd::with_ceiling(crate::simd::Level::Portable, || {
                BlockF32::of(&values[..len], 65504.0)
            });
            for level in crate::simd::available() {
                let got = crate::simd::with_ceiling(level, || BlockF32::of(&values[..len], 65504.0));
                assert_eq!(bits(&got), bits(&want), "len {len}, {level:?}");
            }
        }
    }

    #[test]
    fn stats_and_hash_equal_the_separate_functions() {
        for len in [0usize, 1, 2, 6, 4094, 4096, 4098, 3 * 4 * CHUNK + 10] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 131 % 251) as u8).collect();
            for dtype in [DType::FLOAT16, DType::BF16, DType::FLOAT, DType::DOUBLE, DType::INT8, DType::INT4]
            {
                let (stats, hash) = stats_and_hash(dtype, &bytes);
                assert_eq!(hash, content_hash(&bytes), "{dtype} {len}");
                match (stats, TensorStats::of_bytes(dtype, &bytes)) {
                    (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{dtype} {len}"),
                    (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                    (a, b) => panic!("{dtype} {len}: {a:?} vs {b:?}"),
                }
            }
        }
        let (stats, hash) = stats_and_hash(DType::STRING, b"abc");
        assert!(stats.is_err());
        assert_eq!(hash, content_hash(b"abc"));
    }

    #[test]
    fn the_histogram_pass_changes_nothing_else_and_counts_every_chunk() {
        for dtype in [DType::FLOAT16, DType::BF16, DType::FLOAT, DType::DOUBLE, DType::INT32, DType::INT8] {
            let len = 3 * 4 * CHUNK + 10;
            let bytes: Vec<u8> = (0..len).map(|i| (i * 131 % 251) as u8).collect();
            let bytes = &bytes[..len / 8 * 8];
            let (with, hash) = stats_hash_and_histogram(dtype, bytes);
            let (stats, hist) = with.unwrap();
            let (plain, plain_hash) = stats_and_hash(dtype, bytes);
            assert_eq!((format!("{stats:?}"), hash), (format!("{:?}", plain.unwrap()), plain_hash));
            hist.validate(stats.finite() - stats.zero).unwrap();
            let mut values = Vec::new();
            let elements = bytes.len() * 8 / dtype.bits().unwrap() as usize;
            tensor::decode_f64(dtype, bytes, elements, &mut values).unwrap();
            let mut acc = HistogramAccumulator::new();
            acc.push_f64(&values);
            assert_eq!(hist, acc.finish(), "{dtype}");
        }
    }

    /// Feeds `bytes` to a stream cut at `cuts` (positions, any order, clamped) and checks every result bit
    /// for bit against the whole-tensor functions.
    fn stream_equals_whole(stream: &mut StatsStream, dtype: DType, bytes: &[u8], cuts: &[usize], hist: bool) {
        let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(bytes.len())).collect();
        cuts.sort_unstable();
        stream.reset(dtype, hist);
        let mut at = 0;
        for c in cuts.into_iter().chain([bytes.len()]) {
            stream.update(&bytes[at..c]);
            at = c;
        }
        assert_eq!(stream.len(), bytes.len() as u64);
        let show = |r: &Result<(TensorStats, Histogram)>| match r {
            // Debug of f64 prints the shortest string that round-trips: equal strings, equal bits.
            Ok((s, h)) => format!("{s:?} {h:?}"),
            Err(e) => format!("error {e}"),
        };
        let (got, got_hash) = stream.finish_with_histogram();
        if hist {
            let (want, want_hash) = stats_hash_and_histogram(dtype, bytes);
            assert_eq!((show(&got), got_hash), (show(&want), want_hash), "{dtype}, {} bytes", bytes.len());
        } else {
            let (want, want_hash) = stats_and_hash(dtype, bytes);
            let want = want.map(|s| (s, Histogram::default()));
            assert_eq!((show(&got), got_hash), (show(&want), want_hash), "{dtype}, {} bytes", bytes.len());
        }
        assert_eq!(got_hash, content_hash(bytes), "the hash the reader checks");
    }

    /// Values that exercise every path: normal values, zeros, saturated values and, in some chunks, NaN and
    /// infinities (as raw bytes of each dtype).
    fn varied_bytes(dtype: DType, len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = ((x >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 600.0;
            let v = match x % 4001 {
                0 => f64::NAN,
                1 => f64::INFINITY,
                2 => f64::NEG_INFINITY,
                3..=40 => 0.0,
                41..=60 => 65504.0,
                _ => v,
            };
            match dtype {
                DType::FLOAT16 => out.extend(f16::from_f64(v).to_bits().to_le_bytes()),
                DType::BF16 => out.extend(half::bf16::from_f64(v).to_bits().to_le_bytes()),
                DType::FLOAT => out.extend((v as f32).to_le_bytes()),
                DType::DOUBLE => out.extend(v.to_le_bytes()),
                _ => out.extend(x.to_le_bytes()),
            }
        }
        out.truncate(len);
        out
    }

    // The stream has no unsafe code of its own; these tests push megabytes, too slow under Miri.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_stream_equals_the_whole_pass_at_chunk_edges() {
        // Splits at, just before and just after the decoder's chunks, inside elements, in pieces of 7 and 11.
        let mut stream = StatsStream::new(DType::FLOAT16, false);
        for dtype in [DType::FLOAT16, DType::BF16, DType::FLOAT, DType::DOUBLE, DType::INT8, DType::INT4] {
            let size = dtype.byte_size(CHUNK as u64).unwrap() as usize;
            for len in [0, 1, 3, size - 1, size, size + 1, 3 * size + 5, 3 * size + 6] {
                let bytes = varied_bytes(dtype, len, len as u64);
                for cuts in
                    [vec![], vec![0], vec![1], vec![size - 1], vec![size, size + 1], vec![len / 2, len / 3]]
                {
                    for hist in [false, true] {
                        stream_equals_whole(&mut stream, dtype, &bytes, &cuts, hist);
                    }
                }
                if len < 3 * size {
                    let every: Vec<usize> = (0..len).step_by(7).chain((0..len).step_by(11)).collect();
                    stream_equals_whole(&mut stream, dtype, &bytes, &every, true);
                }
            }
        }
        // A dtype without statistics still hashes; ragged bytes give the whole pass's error.
        stream_equals_whole(&mut stream, DType::STRING, b"abcdef", &[2], false);
        stream_equals_whole(&mut stream, DType::FLOAT, &[1; 4099], &[4096, 4098], false);
        stream_equals_whole(&mut stream, DType::COMPLEX64, &[0; 8 * CHUNK + 12], &[5, 8 * CHUNK], false);
    }

    #[test]
    fn small_tensors_give_what_the_chunk_sized_buffers_give() {
        // The whole pass decodes a tensor of at most SMALL values through a buffer of that size; the
        // stream always decodes through its chunk-sized ones. Both lane types, complex (2 values per
        // element), sub-byte, at and around the edge, at every SIMD level.
        let mut stream = StatsStream::new(DType::FLOAT16, false);
        for level in crate::simd::available() {
            crate::simd::with_ceiling(level, || {
                for dtype in [
                    DType::FLOAT16,
                    DType::BF16,
                    DType::FLOAT,
                    DType::DOUBLE,
                    DType::INT32,
                    DType::INT64,
                    DType::INT8,
                    DType::INT4,
                    DType::COMPLEX64,
                    DType::COMPLEX128,
                ] {
                    let lanes = tensor::lanes_per_element(dtype);
                    for values in [0, 1, 7, SMALL - 1, SMALL, SMALL + 1, 2 * SMALL] {
                        let elements = (values / lanes) as u64;
                        let len = dtype.byte_size(elements).unwrap() as usize;
                        let bytes = varied_bytes(dtype, len, values as u64);
                        for hist in [false, true] {
                            stream_equals_whole(&mut stream, dtype, &bytes, &[], hist);
                        }
                    }
                }
            });
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_stream_equals_the_whole_pass_at_every_simd_level() {
        let bytes = varied_bytes(DType::FLOAT16, 5 * 4096 + 6, 7);
        let mut stream = StatsStream::new(DType::FLOAT16, false);
        for level in crate::simd::available() {
            crate::simd::with_ceiling(level, || {
                stream_equals_whole(&mut stream, DType::FLOAT16, &bytes, &[1, 4095, 4097, 9999], false);
            });
        }
    }

    proptest::proptest! {
        #[test]
        #[cfg_attr(miri, ignore)]
        fn a_stream_split_anywhere_equals_the_whole_pass(
            which in 0usize..8,
            len in 0usize..20_000,
            seed in proptest::prelude::any::<u64>(),
            cuts in proptest::collection::vec(0usize..20_000, 0..12),
            hist in proptest::prelude::any::<bool>(),
        ) {
            let dtype = [
                DType::FLOAT16, DType::BF16, DType::FLOAT, DType::DOUBLE, DType::INT8, DType::INT32,
                DType::INT4, DType::COMPLEX64,
            ][which];
            let bytes = varied_bytes(dtype, len, seed);
            let mut stream = StatsStream::new(dtype, hist);
            stream_equals_whole(&mut stream, dtype, &bytes, &cuts, hist);
        }
    }

    #[test]
    fn hash_is_of_bytes() {
        assert_eq!(content_hash(b"abc"), content_hash(b"abc"));
        assert_ne!(content_hash(b"abc"), content_hash(b"abd"));
        assert_eq!(content_hash(b""), xxhash_rust::xxh3::xxh3_64(b""));
    }
}
