//! Forward and backward kernels on row-major f32 slices. They compute in fp32 (the device's matmul and
//! vector units accumulate in fp32); rounding to device precision happens afterwards, in `device.rs`.

use crate::precision::round;
use crate::rng::Rng;
use crate::Precision;
use rayon::prelude::*;

/// How a matmul accumulates.
#[derive(Clone, Copy, Debug)]
pub enum Accum {
    /// fp32, in order (the normal, deterministic kernel).
    Fp32,
    /// Split-K: K is cut into chunks whose partial sums are added into the output in an order drawn per
    /// row from `seed`, rounding to `precision` after each add (an atomic add into a device-dtype buffer):
    /// the order changes the bits, as a nondeterministic kernel's does.
    SplitK { seed: u64, precision: Precision },
    /// The running sum is rounded to bf16 after every product (a poor kernel).
    Bf16Running,
}

/// `C (m x n) = op(A) op(B)` where op(A) is m x k (A stored k x m when `ta`), op(B) is k x n (B stored n x k
/// when `tb`).
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    a: &[f32],
    ta: bool,
    b: &[f32],
    tb: bool,
    m: usize,
    k: usize,
    n: usize,
    acc: Accum,
) -> Vec<f32> {
    debug_assert_eq!(a.len(), m * k);
    debug_assert_eq!(b.len(), k * n);
    let a = if ta { transpose(a, k, m) } else { a.to_vec() };
    let b = if tb { transpose(b, n, k) } else { b.to_vec() };
    let mut c = vec![0f32; m * n];
    if n == 0 {
        return c;
    }
    match acc {
        Accum::Fp32 => {
            // i-p-j order: the inner loop is a contiguous axpy that vectorizes; rows are independent, so the
            // parallel split does not change any bit.
            c.par_chunks_mut(n).enumerate().with_min_len(16).for_each(|(i, row)| {
                for p in 0..k {
                    let x = a[i * k + p];
                    let brow = &b[p * n..(p + 1) * n];
                    row.iter_mut().zip(brow).for_each(|(r, &y)| *r += x * y);
                }
            });
        }
        Accum::Bf16Running => {
            for (i, row) in c.chunks_mut(n).enumerate() {
                for p in 0..k {
                    let x = a[i * k + p];
                    let brow = &b[p * n..(p + 1) * n];
                    row.iter_mut().zip(brow).for_each(|(r, &y)| *r = round(Precision::Bf16, *r + x * y));
                }
            }
        }
        Accum::SplitK { seed, precision } => {
            let chunks = k.clamp(1, 4);
            let bounds: Vec<usize> = (0..=chunks).map(|c| c * k / chunks).collect();
            let mut partial = vec![0f32; n];
            let mut order: Vec<usize> = (0..chunks).collect();
            for (i, row) in c.chunks_mut(n).enumerate() {
                Rng::derive(seed, "split_k", i as u64).shuffle(&mut order);
                for &ch in &order {
                    partial.iter_mut().for_each(|v| *v = 0.0);
                    for p in bounds[ch]..bounds[ch + 1] {
                        let x = a[i * k + p];
                        let brow = &b[p * n..(p + 1) * n];
                        partial.iter_mut().zip(brow).for_each(|(r, &y)| *r += x * y);
                    }
                    row.iter_mut().zip(&partial).for_each(|(r, &v)| *r = round(precision, *r + v));
                }
            }
        }
    }
    c
}

/// Batched matmul: `batch` independent products, each laid out as in [`matmul`].
#[allow(clippy::too_many_arguments)]
pub fn batch_matmul(
    a: &[f32],
    ta: bool,
    b: &[f32],
    tb: bool,
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    acc: Accum,
) -> Vec<f32> {
    let mut out = Vec::with_capacity(batch * m * n);
    for i in 0..batch {
        let acc = match acc {
            Accum::SplitK { seed, precision } => Accum::SplitK { seed: seed ^ ((i as u64) << 32), precision },
            other => other,
        };
        out.extend(matmul(
            &a[i * m * k..(i + 1) * m * k],
            ta,
            &b[i * k * n..(i + 1) * k * n],
            tb,
            m,
            k,
            n,
            acc,
        ));
    }
    out
}

/// Transpose of a rows x cols matrix.
pub fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = x[r * cols + c];
        }
    }
    out
}

pub const LN_EPS: f32 = 1e-5;

/// LayerNorm over the last axis (width `d`): returns (y, mean, variance) like CANN's LayerNorm.
pub fn layer_norm(x: &[f32], gamma: &[f32], beta: &[f32], d: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let rows = x.len() / d;
    let (mut y, mut mean, mut var) = (vec![0f32; x.len()], vec![0f32; rows], vec![0f32; rows]);
    for r in 0..rows {
        let xr = &x[r * d..(r + 1) * d];
        let mu = xr.iter().sum::<f32>() / d as f32;
        let v = xr.iter().map(|&t| (t - mu) * (t - mu)).sum::<f32>() / d as f32;
        let rstd = 1.0 / (v + LN_EPS).sqrt();
        for j in 0..d {
            y[r * d + j] = (xr[j] - mu) * rstd * gamma[j] + beta[j];
        }
        mean[r] = mu;
        var[r] = v;
    }
    (y, mean, var)
}

/// LayerNormGrad: (dx, dgamma, dbeta) from dy, x and the forward's mean and variance.
pub fn layer_norm_grad(
    dy: &[f32],
    x: &[f32],
    var: &[f32],
    mean: &[f32],
    gamma: &[f32],
    d: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let rows = x.len() / d;
    let (mut dx, mut dg, mut db) = (vec![0f32; x.len()], vec![0f32; d], vec![0f32; d]);
    let mut xhat = vec![0f32; d];
    for r in 0..rows {
        let rstd = 1.0 / (var[r] + LN_EPS).sqrt();
        let (mut s1, mut s2) = (0f32, 0f32);
        for j in 0..d {
            xhat[j] = (x[r * d + j] - mean[r]) * rstd;
            let g = dy[r * d + j] * gamma[j];
            s1 += g;
            s2 += g * xhat[j];
            dg[j] += dy[r * d + j] * xhat[j];
            db[j] += dy[r * d + j];
        }
        let (m1, m2) = (s1 / d as f32, s2 / d as f32);
        for j in 0..d {
            dx[r * d + j] = rstd * (dy[r * d + j] * gamma[j] - m1 - xhat[j] * m2);
        }
    }
    (dx, dg, db)
}

/// Row softmax of `rows` rows of `s` x `s` scores with a causal mask: row i sees columns 0..=i (index
/// within its s x s block); masked entries are 0.
pub fn causal_softmax(x: &[f32], s: usize) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    for (r, (xr, yr)) in x.chunks(s).zip(out.chunks_mut(s)).enumerate() {
        let visible = r % s + 1;
        let max = xr[..visible].iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let mut sum = 0f32;
        for j in 0..visible {
            yr[j] = (xr[j] - max).exp();
            sum += yr[j];
        }
        yr[..visible].iter_mut().for_each(|v| *v /= sum);
    }
    out
}

/// SoftmaxGrad: dx = y * (dy - sum(dy * y)) per row of width `s`.
pub fn softmax_grad(y: &[f32], dy: &[f32], s: usize) -> Vec<f32> {
    let mut dx = vec![0f32; y.len()];
    for ((yr, dyr), dxr) in y.chunks(s).zip(dy.chunks(s)).zip(dx.chunks_mut(s)) {
        let dot: f32 = yr.iter().zip(dyr).map(|(a, b)| a * b).sum();
        for j in 0..s {
            dxr[j] = yr[j] * (dyr[j] - dot);
        }
    }
    dx
}

const GELU_C: f32 = 0.797_884_6; // sqrt(2 / pi)
const GELU_A: f32 = 0.044_715;

/// GELU, tanh form (what CANN's GeLU computes).
pub fn gelu(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| 0.5 * v * (1.0 + (GELU_C * (v + GELU_A * v * v * v)).tanh())).collect()
}

/// GELU with the tanh replaced by its truncated series z - z^3/3 clamped to [-1, 1], each step rounded to
/// `p`: the imprecise fused kernel's approximation (badly wrong for |z| > ~0.7).
pub fn gelu_coarse(x: &[f32], p: Precision) -> Vec<f32> {
    x.iter()
        .map(|&v| {
            let z = round(p, GELU_C * round(p, v + round(p, GELU_A * v * v * v)));
            let t = round(p, z - z * z * z / 3.0).clamp(-1.0, 1.0);
            round(p, 0.5 * v * (1.0 + t))
        })
        .collect()
}

/// GeluGrad: dx = dy * d gelu(x)/dx.
pub fn gelu_grad(dy: &[f32], x: &[f32]) -> Vec<f32> {
    dy.iter()
        .zip(x)
        .map(|(&g, &v)| {
            let t = (GELU_C * (v + GELU_A * v * v * v)).tanh();
            let dt = (1.0 - t * t) * GELU_C * (1.0 + 3.0 * GELU_A * v * v);
            g * (0.5 * (1.0 + t) + 0.5 * v * dt)
        })
        .collect()
}

/// Adds `bias` (width d) to every row.
pub fn bias_add(x: &[f32], bias: &[f32]) -> Vec<f32> {
    let d = bias.len();
    x.iter().enumerate().map(|(i, &v)| v + bias[i % d]).collect()
}

/// Sums rows of width `d` (BiasAddGrad, and the positional embedding's gradient over the batch).
pub fn sum_rows(x: &[f32], d: usize, period: usize) -> Vec<f32> {
    // Row r lands in slot r % period: period 1 sums everything into one row of width d.
    let mut out = vec![0f32; d * period];
    for (r, row) in x.chunks(d).enumerate() {
        let slot = &mut out[(r % period) * d..(r % period + 1) * d];
        slot.iter_mut().zip(row).for_each(|(o, &v)| *o += v);
    }
    out
}

pub fn add(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// Adds a (rows % period) broadcast: `x` rows of width d plus `p` with `period` rows.
pub fn add_periodic(x: &[f32], p: &[f32], d: usize) -> Vec<f32> {
    let period = p.len() / d;
    x.iter().enumerate().map(|(i, &v)| v + p[((i / d) % period) * d + i % d]).collect()
}

/// GatherV2 on axis 0.
pub fn gather(table: &[f32], d: usize, idx: &[i32]) -> Vec<f32> {
    idx.iter().flat_map(|&t| table[t as usize * d..(t as usize + 1) * d].iter().copied()).collect()
}

/// UnsortedSegmentSum: rows of `x` summed into `segments` rows by `idx`.
pub fn segment_sum(x: &[f32], d: usize, idx: &[i32], segments: usize) -> Vec<f32> {
    let mut out = vec![0f32; segments * d];
    for (row, &t) in x.chunks(d).zip(idx) {
        out[t as usize * d..(t as usize + 1) * d].iter_mut().zip(row).for_each(|(o, &v)| *o += v);
    }
    out
}

/// SoftmaxCrossEntropyWithLogits with integer labels: (per-row loss, backprop = softmax - onehot).
pub fn softmax_xent(logits: &[f32], labels: &[i32], v: usize) -> (Vec<f32>, Vec<f32>) {
    let mut loss = Vec::with_capacity(labels.len());
    let mut back = vec![0f32; logits.len()];
    for ((row, br), &y) in logits.chunks(v).zip(back.chunks_mut(v)).zip(labels) {
        let max = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let sum: f32 = row.iter().map(|&z| (z - max).exp()).sum();
        let lse = max + sum.ln();
        loss.push(lse - row[y as usize]);
        for j in 0..v {
            br[j] = (row[j] - lse).exp();
        }
        br[y as usize] -= 1.0;
    }
    (loss, back)
}

/// (B, S, H*dh) -> (B, H, S, dh).
pub fn split_heads(
    x: &[f32],
    b: usize,
    s: usize,
    h: usize,
    dh: usize,
    stride: usize,
    offset: usize,
) -> Vec<f32> {
    // `stride`/`offset` pick one of Q, K, V out of the packed (B, S, 3D) projection.
    let mut out = vec![0f32; b * h * s * dh];
    for bi in 0..b {
        for si in 0..s {
            for hi in 0..h {
                let src = (bi * s + si) * stride + offset + hi * dh;
                let dst = ((bi * h + hi) * s + si) * dh;
                out[dst..dst + dh].copy_from_slice(&x[src..src + dh]);
            }
        }
    }
    out
}

/// (B, H, S, dh) -> (B, S, H*dh) written into `out` at column `offset` of rows of width `stride`.
#[allow(clippy::too_many_arguments)]
pub fn merge_heads_into(
    x: &[f32],
    out: &mut [f32],
    b: usize,
    s: usize,
    h: usize,
    dh: usize,
    stride: usize,
    offset: usize,
) {
    for bi in 0..b {
        for si in 0..s {
            for hi in 0..h {
                let src = ((bi * h + hi) * s + si) * dh;
                let dst = (bi * s + si) * stride + offset + hi * dh;
                out[dst..dst + dh].copy_from_slice(&x[src..src + dh]);
            }
        }
    }
}

pub fn scale(x: &[f32], f: f32) -> Vec<f32> {
    x.iter().map(|&v| v * f).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_variants_agree_with_a_naive_product() {
        let (m, k, n) = (3, 5, 4);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.21).cos()).collect();
        let naive: Vec<f32> =
            (0..m * n).map(|ij| (0..k).map(|p| a[ij / n * k + p] * b[p * n + ij % n]).sum()).collect();
        let c = matmul(&a, false, &b, false, m, k, n, Accum::Fp32);
        let ct = matmul(&transpose(&a, m, k), true, &transpose(&b, k, n), true, m, k, n, Accum::Fp32);
        let split = Accum::SplitK { seed: 9, precision: Precision::Fp32 };
        let cs = matmul(&a, false, &b, false, m, k, n, split);
        for i in 0..m * n {
            assert!((c[i] - naive[i]).abs() < 1e-5 && (ct[i] - naive[i]).abs() < 1e-5);
            assert!((cs[i] - naive[i]).abs() < 1e-5);
        }
    }

    #[test]
    fn causal_softmax_masks_the_future() {
        let p = causal_softmax(&[1.0, 5.0, 2.0, 3.0], 2);
        assert_eq!(p[..2], [1.0, 0.0]);
        assert!((p[2] + p[3] - 1.0).abs() < 1e-6 && p[3] > p[2]);
    }

    #[test]
    fn coarse_gelu_is_close_near_zero_and_wrong_further_out() {
        let exact = gelu(&[0.1, 2.0]);
        let coarse = gelu_coarse(&[0.1, 2.0], Precision::Fp16);
        assert!((exact[0] - coarse[0]).abs() < 1e-3);
        assert!((exact[1] - coarse[1]).abs() > 0.1);
    }
}
