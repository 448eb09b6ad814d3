//! The transformer's forward and backward passes, op by op, on the device.
//!
//! Every op goes through `Device::run`, which rounds its outputs to device precision and reports it; the
//! values that flow on are the device values. Op names follow a framework graph (`model/layer_0/...`,
//! backward `gradients/<forward op>_grad/<op>`); the full list is in the crate docs.

use crate::config::{Activation, ModelConfig};
use crate::data::Batch;
use crate::device::{Arg, Device, Out};
use crate::emit::Fmt;
use crate::ops::{self, Accum};
use crate::params::*;

/// Sizes, named once.
#[derive(Clone, Copy)]
struct Dims {
    b: usize,
    s: usize,
    d: usize,
    h: usize,
    dh: usize,
    f: usize,
    v: usize,
    /// Tokens per batch: b * s.
    n: usize,
}

impl Dims {
    fn of(cfg: &ModelConfig) -> Dims {
        let (b, s) = (cfg.batch, cfg.seq);
        Dims { b, s, d: cfg.d_model, h: cfg.n_heads, dh: cfg.head_dim(), f: cfg.d_ff, v: cfg.vocab, n: b * s }
    }
    fn bsd(&self) -> [usize; 3] {
        [self.b, self.s, self.d]
    }
    fn bhsd(&self) -> [usize; 4] {
        [self.b, self.h, self.s, self.dh]
    }
    fn bhss(&self) -> [usize; 4] {
        [self.b, self.h, self.s, self.s]
    }
}

/// What the backward pass needs from one layer's forward.
struct LayerCache {
    x: Vec<f32>,
    h1: Vec<f32>,
    mean1: Vec<f32>,
    var1: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    p: Vec<f32>,
    cm: Vec<f32>,
    x1: Vec<f32>,
    h2: Vec<f32>,
    mean2: Vec<f32>,
    var2: Vec<f32>,
    u: Vec<f32>,
    g: Vec<f32>,
}

struct Forward {
    layers: Vec<LayerCache>,
    xf: Vec<f32>,
    hf: Vec<f32>,
    meanf: Vec<f32>,
    varf: Vec<f32>,
    backprop: Vec<f32>,
    loss: f32,
}

fn take<const K: usize>(outs: Vec<Vec<f32>>) -> [Vec<f32>; K] {
    outs.try_into().unwrap_or_else(|_| unreachable!("op output count"))
}

/// Loss (unscaled, as the Mean op computed it) and the loss-scaled gradients of every parameter, in
/// parameter order, as the device computed them.
pub fn forward_backward(
    cfg: &ModelConfig,
    w: &[Vec<f32>],
    batch: &Batch,
    loss_scale: f32,
    dev: &mut Device<'_>,
) -> (f32, Vec<Vec<f32>>) {
    let dims = Dims::of(cfg);
    let fwd = forward(cfg, dims, w, batch, dev);
    // Emitted whenever the run scales (fp16, or an fp32 benchmark mirroring fp16's scaler) so both sides
    // have the op and the loss scale is visible in the dump.
    if loss_scale != 1.0 {
        let scaled = fwd.loss * loss_scale;
        dev.run(
            "Mul",
            "model/loss/scale/Mul",
            &[Arg::f32(&[fwd.loss], &[]), Arg::f32(&[loss_scale], &[])],
            vec![Out::f32(vec![scaled], &[])],
        );
    }
    let grads = backward(cfg, dims, w, batch, &fwd, loss_scale, dev);
    (fwd.loss, grads)
}

fn forward(cfg: &ModelConfig, dm: Dims, w: &[Vec<f32>], batch: &Batch, dev: &mut Device<'_>) -> Forward {
    let Dims { b, s, d, v, .. } = dm;
    let bsd = dm.bsd();
    let [x0] = take(dev.run(
        "GatherV2",
        "model/embedding/GatherV2",
        &[Arg::dev(&w[EMB], &[v, d]), Arg::i32(&batch.tokens, &[b, s])],
        vec![Out::dev(ops::gather(&w[EMB], d, &batch.tokens), &bsd)],
    ));
    let [mut x] = take(dev.run(
        "Add",
        "model/embedding/pos/Add",
        &[Arg::dev(&x0, &bsd), Arg::dev(&w[POS], &[s, d])],
        vec![Out::dev(ops::add_periodic(&x0, &w[POS], d), &bsd)],
    ));
    let mut layers = Vec::with_capacity(cfg.n_layers);
    for l in 0..cfg.n_layers {
        let (cache, out) = layer_forward(cfg, dm, l, &w[layer_base(l)..layer_base(l + 1)], x, dev);
        layers.push(cache);
        x = out;
    }
    let fb = final_base(cfg.n_layers);
    let [hf, meanf, varf] = layer_norm(dev, "model/ln_f/LayerNorm", &x, &w[fb + LNF_G], &w[fb + LNF_B], dm);
    let logits = linear(dev, "model/lm_head/MatMul", &hf, &bsd, &w[fb + WLM], d, v);
    let (loss_tok, backprop) = ops::softmax_xent(&logits, &batch.labels, v);
    let [loss_tok, backprop] = take(dev.run(
        "SoftmaxCrossEntropyWithLogits",
        "model/loss/SoftmaxCrossEntropyWithLogits",
        &[Arg::dev(&logits, &[b, s, v]), Arg::i32(&batch.labels, &[b, s])],
        vec![Out::dev(loss_tok, &[b, s]), Out::dev(backprop, &[b, s, v])],
    ));
    let mean = loss_tok.iter().sum::<f32>() / dm.n as f32;
    let [loss] = take(dev.run(
        "ReduceMeanD",
        "model/loss/Mean",
        &[Arg::dev(&loss_tok, &[b, s])],
        vec![Out::f32(vec![mean], &[])],
    ));
    Forward { layers, xf: x, hf, meanf, varf, backprop, loss: loss[0] }
}

/// `model/.../LayerNorm`: (y, mean, variance).
fn layer_norm(
    dev: &mut Device<'_>,
    name: &str,
    x: &[f32],
    g: &[f32],
    beta: &[f32],
    dm: Dims,
) -> [Vec<f32>; 3] {
    let (y, mean, var) = ops::layer_norm(x, g, beta, dm.d);
    let stat = [dm.b, dm.s, 1];
    take(dev.run(
        "LayerNorm",
        name,
        &[Arg::dev(x, &dm.bsd()), Arg::dev(g, &[dm.d]), Arg::dev(beta, &[dm.d])],
        vec![Out::dev(y, &dm.bsd()), Out::dev(mean, &stat), Out::dev(var, &stat)],
    ))
}

/// A `MatMulV2` of a (b, s, k) activation with a (k, n) weight held in FRACTAL_NZ.
fn linear(
    dev: &mut Device<'_>,
    name: &str,
    x: &[f32],
    shape: &[usize],
    w: &[f32],
    k: usize,
    n: usize,
) -> Vec<f32> {
    let rows = x.len() / k;
    let acc = dev.accum(name);
    let y = ops::matmul(x, false, w, false, rows, k, n, acc);
    let out_shape = [&shape[..shape.len() - 1], &[n]].concat();
    let [y] = take(dev.run(
        "MatMulV2",
        name,
        &[Arg::dev(x, shape), Arg::dev(w, &[k, n]).fmt(Fmt::FractalNz)],
        vec![Out::dev(y, &out_shape)],
    ));
    y
}

fn layer_forward(
    cfg: &ModelConfig,
    dm: Dims,
    l: usize,
    w: &[Vec<f32>],
    x: Vec<f32>,
    dev: &mut Device<'_>,
) -> (LayerCache, Vec<f32>) {
    let Dims { b, s, d, h, dh, f, n, .. } = dm;
    let bsd = dm.bsd();
    let p = format!("model/layer_{l}");
    let [h1, mean1, var1] = layer_norm(dev, &format!("{p}/ln_1/LayerNorm"), &x, &w[LN1_G], &w[LN1_B], dm);
    let qkv = linear(dev, &format!("{p}/attn/qkv/MatMul"), &h1, &bsd, &w[WQKV], d, 3 * d);
    let heads = |off| ops::split_heads(&qkv, b, s, h, dh, 3 * d, off);
    let [q, k, v] = take(dev.run(
        "SplitVD",
        &format!("{p}/attn/split_heads/Split"),
        &[Arg::dev(&qkv, &[b, s, 3 * d])],
        vec![
            Out::dev(heads(0), &dm.bhsd()),
            Out::dev(heads(d), &dm.bhsd()),
            Out::dev(heads(2 * d), &dm.bhsd()),
        ],
    ));
    // The 1/sqrt(dh) scale is folded into the scores matmul (an alpha on the product), the causal mask
    // into the softmax.
    let name = format!("{p}/attn/scores/BatchMatMul");
    let acc = dev.accum(&name);
    let sc = 1.0 / (dh as f32).sqrt();
    let scores = ops::scale(&ops::batch_matmul(&q, false, &k, true, b * h, s, dh, s, acc), sc);
    let [scores] = take(dev.run(
        "BatchMatMulV2",
        &name,
        &[Arg::dev(&q, &dm.bhsd()), Arg::dev(&k, &dm.bhsd())],
        vec![Out::dev(scores, &dm.bhss())],
    ));
    let [probs] = take(dev.run(
        "SoftmaxV2",
        &format!("{p}/attn/Softmax"),
        &[Arg::dev(&scores, &dm.bhss())],
        vec![Out::dev(ops::causal_softmax(&scores, s), &dm.bhss())],
    ));
    let name = format!("{p}/attn/context/BatchMatMul");
    let acc = dev.accum(&name);
    let ctx = ops::batch_matmul(&probs, false, &v, false, b * h, s, s, dh, acc);
    let [ctx] = take(dev.run(
        "BatchMatMulV2",
        &name,
        &[Arg::dev(&probs, &dm.bhss()), Arg::dev(&v, &dm.bhsd())],
        vec![Out::dev(ctx, &dm.bhsd())],
    ));
    let mut merged = vec![0f32; n * d];
    ops::merge_heads_into(&ctx, &mut merged, b, s, h, dh, d, 0);
    let [cm] = take(dev.run(
        "TransposeD",
        &format!("{p}/attn/merge_heads/Transpose"),
        &[Arg::dev(&ctx, &dm.bhsd())],
        vec![Out::dev(merged, &bsd)],
    ));
    let a = linear(dev, &format!("{p}/attn/proj/MatMul"), &cm, &bsd, &w[WO], d, d);
    let [x1] = take(dev.run(
        "Add",
        &format!("{p}/attn/residual/Add"),
        &[Arg::dev(&x, &bsd), Arg::dev(&a, &bsd)],
        vec![Out::dev(ops::add(&x, &a), &bsd).fmt(Fmt::Nc1hwc0)],
    ));
    let [h2, mean2, var2] = layer_norm(dev, &format!("{p}/ln_2/LayerNorm"), &x1, &w[LN2_G], &w[LN2_B], dm);
    let (u, g) = mlp_in(cfg, dm, &p, &h2, &w[W1], &w[B1], dev);
    let m2 = linear(dev, &format!("{p}/mlp/fc2/MatMul"), &g, &[b, s, f], &w[W2], f, d);
    let [o] = take(dev.run(
        "BiasAdd",
        &format!("{p}/mlp/fc2/BiasAdd"),
        &[Arg::dev(&m2, &bsd), Arg::dev(&w[B2], &[d])],
        vec![Out::dev(ops::bias_add(&m2, &w[B2]), &bsd)],
    ));
    let [x2] = take(dev.run(
        "Add",
        &format!("{p}/mlp/residual/Add"),
        &[Arg::dev(&x1, &bsd), Arg::dev(&o, &bsd)],
        vec![Out::dev(ops::add(&x1, &o), &bsd)],
    ));
    let cache = LayerCache { x, h1, mean1, var1, q, k, v, p: probs, cm, x1, h2, mean2, var2, u, g };
    (cache, x2)
}

/// The MLP's MatMul + BiasAdd + Gelu: three ops, or one fused kernel whose outputs stand for the Gelu
/// (output 0) and the BiasAdd (output 1, the pre-activation the backward needs). The fc1 MatMul's own
/// output has no counterpart in the fused graph.
fn mlp_in(
    cfg: &ModelConfig,
    dm: Dims,
    p: &str,
    h2: &[f32],
    w1: &[f32],
    b1: &[f32],
    dev: &mut Device<'_>,
) -> (Vec<f32>, Vec<f32>) {
    let Dims { b, s, d, f, n, .. } = dm;
    let bsf = [b, s, f];
    let (bias_name, gelu_name) = (format!("{p}/mlp/fc1/BiasAdd"), format!("{p}/mlp/Gelu"));
    if cfg.fusion {
        let name = format!("{p}/mlp/fused_matmul_biasadd_gelu");
        let (u, g) = if cfg.faults.imprecise_fused_kernel {
            let u = ops::bias_add(&ops::matmul(h2, false, w1, false, n, d, f, Accum::Bf16Running), b1);
            let g = ops::gelu_coarse(&u, dev.precision);
            (u, g)
        } else {
            // Fused: the pre-activation stays fp32 inside the kernel; only the outputs are rounded.
            let acc = dev.accum(&name);
            let u = ops::bias_add(&ops::matmul(h2, false, w1, false, n, d, f, acc), b1);
            let g = ops::gelu(&u);
            (u, g)
        };
        let [g, u] = take(dev.run(
            "FusedMatMulBiasGelu",
            &name,
            &[Arg::dev(h2, &dm.bsd()), Arg::dev(w1, &[d, f]).fmt(Fmt::FractalNz), Arg::dev(b1, &[f])],
            vec![Out::dev(g, &bsf).original(&gelu_name, 0), Out::dev(u, &bsf).original(&bias_name, 0)],
        ));
        return (u, g);
    }
    let m = linear(dev, &format!("{p}/mlp/fc1/MatMul"), h2, &dm.bsd(), w1, d, f);
    let [u] = take(dev.run(
        "BiasAdd",
        &bias_name,
        &[Arg::dev(&m, &bsf), Arg::dev(b1, &[f])],
        vec![Out::dev(ops::bias_add(&m, b1), &bsf)],
    ));
    let act = Act::of(cfg);
    let name = format!("{p}/mlp/{}", act.name());
    let [g] =
        take(dev.run(act.op_type(), &name, &[Arg::dev(&u, &bsf)], vec![Out::dev(act.forward(&u), &bsf)]));
    (u, g)
}

/// The MLP's activation as run: its kind, and the affine map the saturating fault puts on its input
/// (`x * scale + shift` inside the kernel; (1, 0) without the fault).
#[derive(Clone, Copy)]
struct Act {
    kind: Activation,
    scale: f32,
    shift: f32,
}

impl Act {
    fn of(cfg: &ModelConfig) -> Act {
        let (scale, shift) = match (cfg.faults.saturate_activation, cfg.activation) {
            (true, Activation::Tanh | Activation::Sigmoid) => (1e6, 0.0),
            (true, Activation::Relu) => (1.0, -64.0),
            _ => (1.0, 0.0),
        };
        Act { kind: cfg.activation, scale, shift }
    }

    /// The last component of the forward op's name.
    fn name(self) -> &'static str {
        match self.kind {
            Activation::Gelu => "Gelu",
            Activation::Tanh => "Tanh",
            Activation::Sigmoid => "Sigmoid",
            Activation::Relu => "Relu",
        }
    }

    fn op_type(self) -> &'static str {
        match self.kind {
            Activation::Gelu => "GeLU",
            Activation::Tanh => "Tanh",
            Activation::Sigmoid => "Sigmoid",
            Activation::Relu => "Relu",
        }
    }

    fn pre(self, u: &[f32]) -> Vec<f32> {
        if (self.scale, self.shift) == (1.0, 0.0) {
            return u.to_vec(); // keeps -0.0 as it is
        }
        u.iter().map(|&v| v * self.scale + self.shift).collect()
    }

    fn forward(self, u: &[f32]) -> Vec<f32> {
        let z = self.pre(u);
        match self.kind {
            Activation::Gelu => ops::gelu(&z),
            Activation::Tanh => z.iter().map(|v| v.tanh()).collect(),
            Activation::Sigmoid => z.iter().map(|&v| 1.0 / (1.0 + (-v).exp())).collect(),
            Activation::Relu => z.iter().map(|&v| v.max(0.0)).collect(),
        }
    }

    /// The backward op: d loss / d u from d loss / d g, with its CANN op type and inputs.
    fn backward(
        self,
        dev: &mut Device<'_>,
        p: &str,
        dg: &[f32],
        u: &[f32],
        g: &[f32],
        shape: &[usize],
    ) -> Vec<f32> {
        let z = self.pre(u);
        let dz: Vec<f32> = match self.kind {
            Activation::Gelu => ops::gelu_grad(dg, &z),
            Activation::Tanh => dg.iter().zip(g).map(|(&d, &y)| d * (1.0 - y * y)).collect(),
            Activation::Sigmoid => dg.iter().zip(g).map(|(&d, &y)| d * y * (1.0 - y)).collect(),
            Activation::Relu => dg.iter().zip(&z).map(|(&d, &v)| if v > 0.0 { d } else { 0.0 }).collect(),
        };
        let du: Vec<f32> = dz.iter().map(|&v| v * self.scale).collect();
        let (op_type, inputs) = match self.kind {
            Activation::Gelu => {
                ("GeluGrad", vec![Arg::dev(dg, shape), Arg::dev(u, shape), Arg::dev(g, shape)])
            }
            Activation::Tanh => ("TanhGrad", vec![Arg::dev(g, shape), Arg::dev(dg, shape)]),
            Activation::Sigmoid => ("SigmoidGrad", vec![Arg::dev(g, shape), Arg::dev(dg, shape)]),
            Activation::Relu => ("ReluGrad", vec![Arg::dev(dg, shape), Arg::dev(u, shape)]),
        };
        let name = format!("gradients/{p}/mlp/{}_grad/{op_type}", self.name());
        let [du] = take(dev.run(op_type, &name, &inputs, vec![Out::dev(du, shape)]));
        du
    }
}

/// Backward of a `linear`: `{fwd}_grad/MatMul` (dx = dy W^T, W in FRACTAL_NZ) then `{fwd}_grad/MatMul_1`
/// (dW = x^T dy).
#[allow(clippy::too_many_arguments)]
fn linear_grad(
    dev: &mut Device<'_>,
    fwd: &str,
    x: &[f32],
    x_shape: &[usize],
    w: &[f32],
    k: usize,
    n: usize,
    dy: &[f32],
) -> (Vec<f32>, Vec<f32>) {
    let rows = x.len() / k;
    let dy_shape = [&x_shape[..x_shape.len() - 1], &[n]].concat();
    let name = format!("gradients/{fwd}_grad/MatMul");
    let acc = dev.accum(&name);
    let [dx] = take(dev.run(
        "MatMulV2",
        &name,
        &[Arg::dev(dy, &dy_shape), Arg::dev(w, &[k, n]).fmt(Fmt::FractalNz)],
        vec![Out::dev(ops::matmul(dy, false, w, true, rows, n, k, acc), x_shape)],
    ));
    let name = format!("gradients/{fwd}_grad/MatMul_1");
    let acc = dev.accum(&name);
    let [dw] = take(dev.run(
        "MatMulV2",
        &name,
        &[Arg::dev(x, x_shape), Arg::dev(dy, &dy_shape)],
        vec![Out::dev(ops::matmul(x, true, dy, false, k, rows, n, acc), &[k, n])],
    ));
    (dx, dw)
}

/// `{fwd}_grad/LayerNormGrad`: (dx, dgamma, dbeta) from (dy, x, variance, mean, gamma) as in CANN.
#[allow(clippy::too_many_arguments)]
fn layer_norm_grad(
    dev: &mut Device<'_>,
    fwd: &str,
    dm: Dims,
    dy: &[f32],
    x: &[f32],
    var: &[f32],
    mean: &[f32],
    gamma: &[f32],
) -> [Vec<f32>; 3] {
    let (bsd, stat, d) = (dm.bsd(), [dm.b, dm.s, 1], [dm.d]);
    let (dx, dg, db) = ops::layer_norm_grad(dy, x, var, mean, gamma, dm.d);
    take(dev.run(
        "LayerNormGrad",
        &format!("gradients/{fwd}_grad/LayerNormGrad"),
        &[
            Arg::dev(dy, &bsd),
            Arg::dev(x, &bsd),
            Arg::dev(var, &stat),
            Arg::dev(mean, &stat),
            Arg::dev(gamma, &d),
        ],
        vec![Out::dev(dx, &bsd), Out::dev(dg, &d), Out::dev(db, &d)],
    ))
}

fn add_n(dev: &mut Device<'_>, name: &str, a: &[f32], b: &[f32], shape: &[usize]) -> Vec<f32> {
    let [s] = take(dev.run(
        "AddN",
        name,
        &[Arg::dev(a, shape), Arg::dev(b, shape)],
        vec![Out::dev(ops::add(a, b), shape)],
    ));
    s
}

fn bias_grad(dev: &mut Device<'_>, fwd: &str, dy: &[f32], shape: &[usize]) -> Vec<f32> {
    let n = shape[shape.len() - 1];
    let [db] = take(dev.run(
        "BiasAddGrad",
        &format!("gradients/{fwd}_grad/BiasAddGrad"),
        &[Arg::dev(dy, shape)],
        vec![Out::dev(ops::sum_rows(dy, n, 1), &[n])],
    ));
    db
}

fn backward(
    cfg: &ModelConfig,
    dm: Dims,
    w: &[Vec<f32>],
    batch: &Batch,
    fwd: &Forward,
    loss_scale: f32,
    dev: &mut Device<'_>,
) -> Vec<Vec<f32>> {
    let Dims { b, s, d, v, n, .. } = dm;
    let bsd = dm.bsd();
    let mut grads: Vec<Vec<f32>> = vec![Vec::new(); w.len()];
    // d(mean loss)/d logits = backprop / n, times the loss scale.
    let factor = loss_scale / n as f32;
    let [dlogits] = take(dev.run(
        "Mul",
        "gradients/model/loss/Mean_grad/Mul",
        &[Arg::dev(&fwd.backprop, &[b, s, v]), Arg::f32(&[factor], &[])],
        vec![Out::dev(ops::scale(&fwd.backprop, factor), &[b, s, v])],
    ));
    let fb = final_base(cfg.n_layers);
    let (dhf, dwlm) = linear_grad(dev, "model/lm_head/MatMul", &fwd.hf, &bsd, &w[fb + WLM], d, v, &dlogits);
    grads[fb + WLM] = dwlm;
    let [mut dx, dg, db] = layer_norm_grad(
        dev,
        "model/ln_f/LayerNorm",
        dm,
        &dhf,
        &fwd.xf,
        &fwd.varf,
        &fwd.meanf,
        &w[fb + LNF_G],
    );
    grads[fb + LNF_G] = dg;
    grads[fb + LNF_B] = db;
    for l in (0..cfg.n_layers).rev() {
        let base = layer_base(l);
        let layer = &fwd.layers[l];
        dx = layer_backward(
            dm,
            Act::of(cfg),
            l,
            &w[base..layer_base(l + 1)],
            layer,
            dx,
            &mut grads[base..],
            dev,
        );
    }
    let [dpos] = take(dev.run(
        "ReduceSumD",
        "gradients/model/embedding/pos/Add_grad/ReduceSum",
        &[Arg::dev(&dx, &bsd)],
        vec![Out::dev(ops::sum_rows(&dx, d, s), &[s, d])],
    ));
    grads[POS] = dpos;
    let [demb] = take(dev.run(
        "UnsortedSegmentSum",
        "gradients/model/embedding/GatherV2_grad/UnsortedSegmentSum",
        &[Arg::dev(&dx, &bsd), Arg::i32(&batch.tokens, &[b, s])],
        vec![Out::dev(ops::segment_sum(&dx, d, &batch.tokens, v), &[v, d])],
    ));
    grads[EMB] = demb;
    grads
}

/// One layer's backward: takes d(layer output), fills the layer's slots of `grads`, returns d(layer input).
#[allow(clippy::too_many_arguments)]
fn layer_backward(
    dm: Dims,
    act: Act,
    l: usize,
    w: &[Vec<f32>],
    c: &LayerCache,
    dx2: Vec<f32>,
    grads: &mut [Vec<f32>],
    dev: &mut Device<'_>,
) -> Vec<f32> {
    let Dims { b, s, d, h, dh, f, .. } = dm;
    let bsd = dm.bsd();
    let bsf = [b, s, f];
    let p = format!("model/layer_{l}");
    // MLP branch (x2 = x1 + fc2(gelu(fc1(ln_2(x1))))).
    grads[B2] = bias_grad(dev, &format!("{p}/mlp/fc2/BiasAdd"), &dx2, &bsd);
    let (dg, dw2) = linear_grad(dev, &format!("{p}/mlp/fc2/MatMul"), &c.g, &bsf, &w[W2], f, d, &dx2);
    grads[W2] = dw2;
    let du = act.backward(dev, &p, &dg, &c.u, &c.g, &bsf);
    grads[B1] = bias_grad(dev, &format!("{p}/mlp/fc1/BiasAdd"), &du, &bsf);
    let (dh2, dw1) = linear_grad(dev, &format!("{p}/mlp/fc1/MatMul"), &c.h2, &bsd, &w[W1], d, f, &du);
    grads[W1] = dw1;
    let [dx1b, dg2, db2] =
        layer_norm_grad(dev, &format!("{p}/ln_2/LayerNorm"), dm, &dh2, &c.x1, &c.var2, &c.mean2, &w[LN2_G]);
    grads[LN2_G] = dg2;
    grads[LN2_B] = db2;
    let dx1 = add_n(dev, &format!("gradients/{p}/mlp/residual/Add_grad/AddN"), &dx2, &dx1b, &bsd);

    // Attention branch (x1 = x + proj(attn(qkv(ln_1(x))))).
    let (dcm, dwo) = linear_grad(dev, &format!("{p}/attn/proj/MatMul"), &c.cm, &bsd, &w[WO], d, d, &dx1);
    grads[WO] = dwo;
    let [dctx] = take(dev.run(
        "TransposeD",
        &format!("gradients/{p}/attn/merge_heads/Transpose_grad/Transpose"),
        &[Arg::dev(&dcm, &bsd)],
        vec![Out::dev(ops::split_heads(&dcm, b, s, h, dh, d, 0), &dm.bhsd())],
    ));
    let fwd = format!("{p}/attn/context/BatchMatMul");
    let name = format!("gradients/{fwd}_grad/BatchMatMul");
    let acc = dev.accum(&name);
    let [dprobs] = take(dev.run(
        "BatchMatMulV2",
        &name,
        &[Arg::dev(&dctx, &dm.bhsd()), Arg::dev(&c.v, &dm.bhsd())],
        vec![Out::dev(ops::batch_matmul(&dctx, false, &c.v, true, b * h, s, dh, s, acc), &dm.bhss())],
    ));
    let name = format!("gradients/{fwd}_grad/BatchMatMul_1");
    let acc = dev.accum(&name);
    let [dv] = take(dev.run(
        "BatchMatMulV2",
        &name,
        &[Arg::dev(&c.p, &dm.bhss()), Arg::dev(&dctx, &dm.bhsd())],
        vec![Out::dev(ops::batch_matmul(&c.p, true, &dctx, false, b * h, s, s, dh, acc), &dm.bhsd())],
    ));
    let [dscores] = take(dev.run(
        "SoftmaxGrad",
        &format!("gradients/{p}/attn/Softmax_grad/SoftmaxGrad"),
        &[Arg::dev(&c.p, &dm.bhss()), Arg::dev(&dprobs, &dm.bhss())],
        vec![Out::dev(ops::softmax_grad(&c.p, &dprobs, s), &dm.bhss())],
    ));
    let sc = 1.0 / (dh as f32).sqrt();
    let fwd = format!("{p}/attn/scores/BatchMatMul");
    let name = format!("gradients/{fwd}_grad/BatchMatMul");
    let acc = dev.accum(&name);
    let dq = ops::scale(&ops::batch_matmul(&dscores, false, &c.k, false, b * h, s, s, dh, acc), sc);
    let [dq] = take(dev.run(
        "BatchMatMulV2",
        &name,
        &[Arg::dev(&dscores, &dm.bhss()), Arg::dev(&c.k, &dm.bhsd())],
        vec![Out::dev(dq, &dm.bhsd())],
    ));
    let name = format!("gradients/{fwd}_grad/BatchMatMul_1");
    let acc = dev.accum(&name);
    let dk = ops::scale(&ops::batch_matmul(&dscores, true, &c.q, false, b * h, s, s, dh, acc), sc);
    let [dk] = take(dev.run(
        "BatchMatMulV2",
        &name,
        &[Arg::dev(&dscores, &dm.bhss()), Arg::dev(&c.q, &dm.bhsd())],
        vec![Out::dev(dk, &dm.bhsd())],
    ));
    let mut dqkv = vec![0f32; b * s * 3 * d];
    for (i, t) in [&dq, &dk, &dv].into_iter().enumerate() {
        ops::merge_heads_into(t, &mut dqkv, b, s, h, dh, 3 * d, i * d);
    }
    let [dqkv] = take(dev.run(
        "ConcatD",
        &format!("gradients/{p}/attn/split_heads/Split_grad/Concat"),
        &[Arg::dev(&dq, &dm.bhsd()), Arg::dev(&dk, &dm.bhsd()), Arg::dev(&dv, &dm.bhsd())],
        vec![Out::dev(dqkv, &[b, s, 3 * d])],
    ));
    let (dh1, dwqkv) =
        linear_grad(dev, &format!("{p}/attn/qkv/MatMul"), &c.h1, &bsd, &w[WQKV], d, 3 * d, &dqkv);
    grads[WQKV] = dwqkv;
    let [dxb, dg1, db1] =
        layer_norm_grad(dev, &format!("{p}/ln_1/LayerNorm"), dm, &dh1, &c.x, &c.var1, &c.mean1, &w[LN1_G]);
    grads[LN1_G] = dg1;
    grads[LN1_B] = db1;
    add_n(dev, &format!("gradients/{p}/attn/residual/Add_grad/AddN"), &dx1, &dxb, &bsd)
}
