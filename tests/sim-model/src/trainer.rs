//! Training steps: weights cast to device precision, forward and backward on the device, dynamic loss
//! scaling, and the optimizer update on the fp32 master weights (reported as `optimizer/...` ops).

use crate::config::{ModelConfig, Optimizer};
use crate::data;
use crate::device::{Arg, Device, Out};
use crate::model;
use crate::params::{self, Param};
use crate::precision;
use crate::{OpSink, OverflowMode, Precision};

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepReport {
    /// Mean cross-entropy of the step (unscaled; inf/NaN when the forward overflowed in INF/NaN mode).
    pub loss: f32,
    /// The loss scale this step used (1 outside fp16).
    pub loss_scale: f32,
    /// Some op raised overflow status bits, or the loss or a gradient was not finite.
    pub overflowed: bool,
    /// The update was skipped (because of the overflow).
    pub skipped: bool,
    /// OR of every op's status bits (0x20, 0x100: docs/CANN.md §4).
    pub overflow_status: u64,
}

impl StepReport {
    /// The report as one JSON line with the step number (no trailing newline): the runtime-to-framework
    /// loss channel. Non-finite losses are written as strings ("inf", "-inf", "NaN"), JSON having no
    /// number for them.
    pub fn to_json_line(&self, step: u64) -> String {
        let loss =
            if self.loss.is_finite() { format!("{}", self.loss) } else { format!("\"{}\"", self.loss) };
        format!(
            "{{\"step\":{step},\"loss\":{loss},\"loss_scale\":{},\"overflowed\":{},\"skipped\":{},\"overflow_status\":{}}}",
            self.loss_scale, self.overflowed, self.skipped, self.overflow_status
        )
    }

    /// Parses [`StepReport::to_json_line`]: (step, report).
    pub fn from_json_line(line: &str) -> Result<(u64, StepReport), String> {
        let v: serde_json::Value =
            serde_json::from_str(line.trim()).map_err(|e| format!("step report: {e}"))?;
        let num = |k: &str| v.get(k).and_then(|x| x.as_f64()).ok_or(format!("step report: no number {k:?}"));
        let flag = |k: &str| v.get(k).and_then(|x| x.as_bool()).ok_or(format!("step report: no bool {k:?}"));
        let loss = match v.get("loss") {
            Some(serde_json::Value::String(s)) => {
                s.parse::<f32>().map_err(|e| format!("step report: loss: {e}"))?
            }
            _ => num("loss")? as f32,
        };
        let step = v.get("step").and_then(|x| x.as_u64()).ok_or("step report: no step")?;
        let report = StepReport {
            loss,
            loss_scale: num("loss_scale")? as f32,
            overflowed: flag("overflowed")?,
            skipped: flag("skipped")?,
            overflow_status: v.get("overflow_status").and_then(|x| x.as_u64()).unwrap_or(0),
        };
        Ok((step, report))
    }
}

/// The gradients of one step before the optimizer sees them (see [`Trainer::compute_gradients`]).
#[derive(Clone, Debug)]
pub struct StepGradients {
    pub loss: f32,
    pub loss_scale: f32,
    /// Per parameter, scaled by `loss_scale`.
    pub grads: Vec<Vec<f32>>,
    /// An op raised status bits, or the loss or a gradient was not finite (on this replica).
    pub overflowed: bool,
    pub overflow_status: u64,
}

impl StepGradients {
    /// The gradients as one buffer, parameter after parameter.
    pub fn flat(&self) -> Vec<f32> {
        self.grads.concat()
    }
}

const ADAM_B1: f32 = 0.9;
const ADAM_B2: f32 = 0.999;
const ADAM_EPS: f32 = 1e-8;

pub struct Trainer {
    cfg: ModelConfig,
    params: Vec<Param>,
    adam_m: Vec<Vec<f32>>,
    adam_v: Vec<Vec<f32>>,
    loss_scale: f32,
    good_steps: u32,
    /// Updates applied so far (Adam's bias correction counts these, not skipped steps).
    updates: u64,
    /// The runtime's deterministic-computation option (`ACL_OPT_DETERMINISTIC`): it cancels the
    /// `missing_determinism` fault.
    deterministic: bool,
}

impl Trainer {
    /// A trainer at initialization. The config must be valid (`ModelConfig::validate`); an invalid one panics.
    pub fn new(cfg: ModelConfig) -> Trainer {
        if let Err(e) = cfg.validate() {
            panic!("invalid model config: {e}");
        }
        let params = params::init(&cfg);
        let zeros: Vec<Vec<f32>> = params.iter().map(|p| vec![0.0; p.data.len()]).collect();
        let loss_scale = if scaled(&cfg) { cfg.loss_scale.initial } else { 1.0 };
        Trainer {
            cfg,
            params,
            adam_m: zeros.clone(),
            adam_v: zeros,
            loss_scale,
            good_steps: 0,
            updates: 0,
            deterministic: false,
        }
    }

    /// Sets the deterministic-computation option, as the runtime holds it for the job.
    pub fn set_deterministic(&mut self, on: bool) {
        self.deterministic = on;
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The master weights (fp32), in the order the optimizer ops are reported.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    pub fn loss_scale(&self) -> f32 {
        self.loss_scale
    }

    /// Runs training step `step` (steps pick the batch; call them in order 0, 1, 2, ...), reporting every
    /// forward, backward and optimizer op to `sink` in execution order.
    pub fn step(&mut self, step: u64, mode: OverflowMode, sink: &mut dyn OpSink) -> StepReport {
        let batch = data::batch(&self.cfg, step);
        let grads = self.compute_gradients(step, mode, sink, &batch);
        let overflowed = grads.overflowed;
        self.apply_gradients(step, mode, sink, grads, overflowed, 1.0)
    }

    /// The first half of a step: the weight bit-flip fault if it is due, the forward and backward passes
    /// on `batch`. A data-parallel framework all-reduces the result's gradients and overflow flag before
    /// [`Trainer::apply_gradients`].
    pub fn compute_gradients(
        &mut self,
        step: u64,
        mode: OverflowMode,
        sink: &mut dyn OpSink,
        batch: &data::Batch,
    ) -> StepGradients {
        if let Some(f) = self.cfg.faults.weight_bitflip.clone().filter(|f| f.step == step) {
            // `validate` checked the parameter, element and bit exist.
            if let Some(p) = self.params.iter_mut().find(|p| p.name == f.param) {
                p.data[f.index] = f32::from_bits(p.data[f.index].to_bits() ^ (1 << f.bit));
            }
        }
        let cfg = &self.cfg;
        // Weights are cast to device precision once per step (the master copy stays fp32).
        let w: Vec<Vec<f32>> = self
            .params
            .iter()
            .map(|p| {
                let mut v = p.data.clone();
                precision::round_slice(cfg.precision, &mut v);
                v
            })
            .collect();
        let mut faults = cfg.faults.clone();
        faults.missing_determinism &= !self.deterministic;
        let mut dev = Device::new(cfg.precision, mode, step, cfg.device_formats, &faults, cfg.run_seed, sink);
        let scale = self.loss_scale;
        let (loss, grads) = model::forward_backward(cfg, &w, batch, scale, &mut dev);
        let grads_finite = grads.iter().all(|g| g.iter().all(|x| x.is_finite()));
        let overflowed = dev.status != 0 || !loss.is_finite() || !grads_finite;
        StepGradients { loss, loss_scale: scale, grads, overflowed, overflow_status: dev.status }
    }

    /// The second half of a step: the optimizer update with `grads` (scaled by the loss scale and summed
    /// over `divisor` replicas, which it divides back out), or, when `skip` (an overflow on this or any
    /// replica) or a gradient is not finite (a sum that overflowed), no update and a smaller loss scale.
    /// Replicas given the same gradients and the same `skip` stay bit-identical.
    pub fn apply_gradients(
        &mut self,
        step: u64,
        mode: OverflowMode,
        sink: &mut dyn OpSink,
        grads: StepGradients,
        skip: bool,
        divisor: f32,
    ) -> StepReport {
        let cfg = &self.cfg;
        let mut dev =
            Device::new(cfg.precision, mode, step, cfg.device_formats, &cfg.faults, cfg.run_seed, sink);
        let skip = skip || !grads.grads.iter().all(|g| g.iter().all(|x| x.is_finite()));
        if skip {
            if scaled(cfg) && cfg.loss_scale.dynamic {
                self.loss_scale = (self.loss_scale / 2.0).max(cfg.loss_scale.min);
            }
            self.good_steps = 0;
        } else {
            self.apply(&grads.grads, grads.loss_scale * divisor, &mut dev);
            self.good_steps += 1;
            let ls = &self.cfg.loss_scale;
            if scaled(&self.cfg) && ls.dynamic && self.good_steps >= ls.growth_interval {
                self.loss_scale *= 2.0;
                self.good_steps = 0;
            }
        }
        StepReport {
            loss: grads.loss,
            loss_scale: grads.loss_scale,
            overflowed: grads.overflowed || skip,
            skipped: skip,
            overflow_status: grads.overflow_status | dev.status,
        }
    }

    /// Number of fp32 values in the flattened gradients (every parameter's, in order).
    pub fn param_count(&self) -> usize {
        self.params.iter().map(|p| p.data.len()).sum()
    }

    /// Overwrites the gradients of `grads` from a flat buffer of [`Trainer::param_count`] values (what a
    /// collective returned); `None` when the length is wrong.
    pub fn unflatten_into(&self, flat: &[f32], grads: &mut StepGradients) -> Option<()> {
        if flat.len() != self.param_count() {
            return None;
        }
        let mut rest = flat;
        grads.grads = self
            .params
            .iter()
            .map(|p| {
                let (mine, tail) = rest.split_at(p.data.len());
                rest = tail;
                mine.to_vec()
            })
            .collect();
        Some(())
    }

    /// The optimizer update, one `optimizer/{param}/Apply*` op per parameter, on unscaled fp32 gradients.
    fn apply(&mut self, grads: &[Vec<f32>], scale: f32, dev: &mut Device<'_>) {
        let lr = self.cfg.lr * self.cfg.faults.lr_scale;
        self.updates += 1;
        let t = self.updates as i32;
        let (c1, c2) = (1.0 - ADAM_B1.powi(t), 1.0 - ADAM_B2.powi(t));
        let frozen = self.cfg.faults.frozen.clone();
        if self.cfg.grad_concat {
            // The gradients as the device holds them, as a fused finiteness check reads them.
            let inputs: Vec<Arg<'_>> =
                grads.iter().zip(&self.params).map(|(g, p)| Arg::dev(g, &p.shape)).collect();
            let all: Vec<f32> = grads.concat();
            let len = all.len();
            dev.run("ConcatD", "optimizer/grads/Concat", &inputs, vec![Out::dev(all, &[len])]);
        }
        for (i, p) in self.params.iter_mut().enumerate() {
            // A frozen parameter's group has learning rate 0: the op runs, the weight stays.
            let lr = if frozen.as_deref().is_some_and(|f| p.name.starts_with(f)) { 0.0 } else { lr };
            let g: Vec<f32> = grads[i].iter().map(|&x| x / scale).collect();
            let shape = p.shape.clone();
            match self.cfg.optimizer {
                Optimizer::Sgd => {
                    let new: Vec<f32> = p.data.iter().zip(&g).map(|(w, g)| w - lr * g).collect();
                    let [new] = take(dev.run(
                        "ApplyGradientDescent",
                        &format!("optimizer/{}/ApplyGradientDescent", p.name),
                        &[Arg::f32(&p.data, &shape), Arg::f32(&g, &shape)],
                        vec![Out::f32(new, &shape)],
                    ));
                    p.data = new;
                }
                Optimizer::Adam => {
                    let m: Vec<f32> = self.adam_m[i]
                        .iter()
                        .zip(&g)
                        .map(|(m, g)| ADAM_B1 * m + (1.0 - ADAM_B1) * g)
                        .collect();
                    let v: Vec<f32> = self.adam_v[i]
                        .iter()
                        .zip(&g)
                        .map(|(v, g)| ADAM_B2 * v + (1.0 - ADAM_B2) * g * g)
                        .collect();
                    let new: Vec<f32> = p
                        .data
                        .iter()
                        .zip(m.iter().zip(&v))
                        .map(|(w, (m, v))| w - lr * (m / c1) / ((v / c2).sqrt() + ADAM_EPS))
                        .collect();
                    let [new, m, v] = take(dev.run(
                        "ApplyAdamD",
                        &format!("optimizer/{}/ApplyAdam", p.name),
                        &[
                            Arg::f32(&p.data, &shape),
                            Arg::f32(&self.adam_m[i], &shape),
                            Arg::f32(&self.adam_v[i], &shape),
                            Arg::f32(&g, &shape),
                        ],
                        vec![Out::f32(new, &shape), Out::f32(m, &shape), Out::f32(v, &shape)],
                    ));
                    p.data = new;
                    self.adam_m[i] = m;
                    self.adam_v[i] = v;
                }
            }
        }
    }

    /// Loss and unscaled gradients at the current weights without updating (gradient checks).
    #[doc(hidden)]
    pub fn loss_and_grads(&self, step: u64) -> (f32, Vec<Vec<f32>>) {
        let cfg = &self.cfg;
        let batch = data::batch(cfg, step);
        let w: Vec<Vec<f32>> = self.params.iter().map(|p| p.data.clone()).collect();
        let mut sink = crate::NullSink;
        let mut dev = Device::new(
            Precision::Fp32,
            OverflowMode::InfNan,
            step,
            false,
            &cfg.faults,
            cfg.run_seed,
            &mut sink,
        );
        model::forward_backward(cfg, &w, &batch, 1.0, &mut dev)
    }

    /// Overwrites one master weight element (gradient checks).
    #[doc(hidden)]
    pub fn set_param(&mut self, param: usize, index: usize, value: f32) {
        self.params[param].data[index] = value;
    }
}

fn take<const K: usize>(outs: Vec<Vec<f32>>) -> [Vec<f32>; K] {
    outs.try_into().unwrap_or_else(|_| unreachable!("op output count"))
}

/// Whether the run uses loss scaling: fp16, or an fp32 benchmark mirroring an fp16 run.
fn scaled(cfg: &ModelConfig) -> bool {
    cfg.precision == Precision::Fp16 || (cfg.precision == Precision::Fp32 && cfg.loss_scale.in_fp32)
}
