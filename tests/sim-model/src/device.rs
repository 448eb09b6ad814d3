//! The "device" an op runs on: turns each op's fp32 results into device values (rounding, overflow mode,
//! status bits, injected faults) and reports the op to the sink with its tensors as device bytes.

use crate::config::Faults;
use crate::emit::{self, Fmt};
use crate::ops::Accum;
use crate::precision::{self, round};
use crate::rng::Rng;
use crate::{OpEvent, OpSink, OverflowMode, Precision, TensorView};
use accutrace_formats::DType;

/// Values of an op's input, by how the device stores them.
#[derive(Clone, Copy)]
pub enum Vals<'a> {
    /// Device precision (fp16/bf16; fp32 in the benchmark).
    Dev(&'a [f32]),
    /// Always fp32 (master weights, optimizer state, the loss).
    F32(&'a [f32]),
    /// Token ids.
    I32(&'a [i32]),
}

/// One input of an op.
pub struct Arg<'a> {
    pub vals: Vals<'a>,
    pub shape: Vec<usize>,
    pub fmt: Fmt,
}

impl<'a> Arg<'a> {
    pub fn dev(v: &'a [f32], shape: &[usize]) -> Arg<'a> {
        Arg { vals: Vals::Dev(v), shape: shape.to_vec(), fmt: Fmt::Nd }
    }
    pub fn f32(v: &'a [f32], shape: &[usize]) -> Arg<'a> {
        Arg { vals: Vals::F32(v), shape: shape.to_vec(), fmt: Fmt::Nd }
    }
    pub fn i32(v: &'a [i32], shape: &[usize]) -> Arg<'a> {
        Arg { vals: Vals::I32(v), shape: shape.to_vec(), fmt: Fmt::Nd }
    }
    pub fn fmt(mut self, fmt: Fmt) -> Arg<'a> {
        self.fmt = fmt;
        self
    }
}

/// One output of an op, as the kernel computed it (fp32, before the device rounds it).
pub struct Out {
    pub data: Vec<f32>,
    pub shape: Vec<usize>,
    /// Stored in fp32 whatever the precision (the loss, optimizer outputs).
    pub fp32: bool,
    pub fmt: Fmt,
    /// The framework op this output stands for; `None` = the op itself, same index.
    pub original: Option<(String, u32)>,
}

impl Out {
    pub fn dev(data: Vec<f32>, shape: &[usize]) -> Out {
        Out { data, shape: shape.to_vec(), fp32: false, fmt: Fmt::Nd, original: None }
    }
    pub fn f32(data: Vec<f32>, shape: &[usize]) -> Out {
        Out { fp32: true, ..Out::dev(data, shape) }
    }
    pub fn fmt(mut self, fmt: Fmt) -> Out {
        self.fmt = fmt;
        self
    }
    pub fn original(mut self, op: &str, index: u32) -> Out {
        self.original = Some((op.to_string(), index));
        self
    }
}

/// The op whose device kernel accumulates with atomic adds (the embedding gradient's scatter-add): the
/// `missing_determinism` fault makes its order vary from run to run.
const ATOMIC_ADD_OP: &str = "gradients/model/embedding/GatherV2_grad/UnsortedSegmentSum";

pub struct Device<'s> {
    pub precision: Precision,
    mode: OverflowMode,
    step: u64,
    device_formats: bool,
    faults: Faults,
    run_seed: u64,
    sink: &'s mut dyn OpSink,
    /// OR of every op's status bits this step (the float status register a framework reads).
    pub status: u64,
    /// Whether the nondeterministic op's kernel already drew its order (then no fallback is needed).
    split_k_drawn: bool,
}

impl<'s> Device<'s> {
    pub fn new(
        precision: Precision,
        mode: OverflowMode,
        step: u64,
        device_formats: bool,
        faults: &Faults,
        run_seed: u64,
        sink: &'s mut dyn OpSink,
    ) -> Device<'s> {
        Device {
            precision,
            mode,
            step,
            device_formats: device_formats && precision != Precision::Fp32,
            faults: faults.clone(),
            run_seed,
            sink,
            status: 0,
            split_k_drawn: false,
        }
    }

    fn is_nondeterministic(&self, op_name: &str) -> bool {
        self.faults.nondeterministic_op.as_deref() == Some(op_name)
            || (self.faults.missing_determinism && op_name == ATOMIC_ADD_OP)
    }

    fn nondet_seed(&self, op_name: &str) -> u64 {
        Rng::derive(self.run_seed, op_name, self.step).next_u64()
    }

    /// The accumulation a matmul named `op_name` uses: split-K in a run-seeded order for the
    /// nondeterministic op, plain fp32 otherwise.
    pub fn accum(&mut self, op_name: &str) -> Accum {
        if self.is_nondeterministic(op_name) {
            self.split_k_drawn = true;
            Accum::SplitK { seed: self.nondet_seed(op_name), precision: self.precision }
        } else {
            Accum::Fp32
        }
    }

    /// Finishes an op: rounds its outputs to device values, applies the injected faults, records the
    /// status bits, reports the op, and returns the device values of the outputs.
    pub fn run(
        &mut self,
        op_type: &str,
        op_name: &str,
        inputs: &[Arg<'_>],
        mut outs: Vec<Out>,
    ) -> Vec<Vec<f32>> {
        let inputs_finite = inputs.iter().all(|a| match a.vals {
            Vals::Dev(v) | Vals::F32(v) => v.iter().all(|x| x.is_finite()),
            Vals::I32(_) => true,
        });
        if let Some(f) = &self.faults.overflow {
            if f.op == op_name && f.step == self.step {
                // fp16: far past 65504 (a conversion overflow); bf16/fp32: past f32's own range.
                let factor = if self.precision == Precision::Fp16 { 1e5 } else { f32::MAX };
                outs.iter_mut().for_each(|o| o.data.iter_mut().for_each(|x| *x *= factor));
            }
        }
        let mut status = 0;
        for o in outs.iter_mut() {
            let p = if o.fp32 { Precision::Fp32 } else { self.precision };
            status |= precision::quantize(p, self.mode, &mut o.data, inputs_finite);
        }
        if self.is_nondeterministic(op_name) && !std::mem::take(&mut self.split_k_drawn) {
            self.nudge(op_name, &mut outs);
        }
        self.status |= status;
        if self.sink.wants(op_name) {
            self.emit(op_type, op_name, inputs, &outs, status);
        }
        outs.into_iter().map(|o| o.data).collect()
    }

    /// Nondeterminism for ops without a matmul reduction: about one element in eight moves by one unit in
    /// the last place, as a different reduction order would move it.
    fn nudge(&self, op_name: &str, outs: &mut [Out]) {
        let mut rng = Rng::new(self.nondet_seed(op_name));
        for o in outs.iter_mut() {
            let p = if o.fp32 { Precision::Fp32 } else { self.precision };
            for x in o.data.iter_mut().filter(|x| x.is_finite()) {
                if rng.below(8) == 0 {
                    *x = next_up(p, *x);
                }
            }
        }
    }

    fn emit(&mut self, op_type: &str, op_name: &str, inputs: &[Arg<'_>], outs: &[Out], status: u64) {
        let p = self.precision;
        let encoded_in: Vec<emit::Encoded> = inputs
            .iter()
            .map(|a| {
                let (dtype, bytes) = match a.vals {
                    Vals::Dev(v) => (precision::dtype(p), precision::encode(p, v)),
                    Vals::F32(v) => (DType::FLOAT, precision::encode(Precision::Fp32, v)),
                    Vals::I32(v) => (DType::INT32, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
                };
                emit::encode(dtype, &a.shape, bytes, if self.device_formats { a.fmt } else { Fmt::Nd })
            })
            .collect();
        let encoded_out: Vec<emit::Encoded> = outs
            .iter()
            .map(|o| {
                let q = if o.fp32 { Precision::Fp32 } else { p };
                let fmt = if self.device_formats { o.fmt } else { Fmt::Nd };
                emit::encode(precision::dtype(q), &o.shape, precision::encode(q, &o.data), fmt)
            })
            .collect();
        let event = OpEvent {
            op_type,
            op_name,
            inputs: encoded_in.iter().map(view).collect(),
            outputs: encoded_out
                .iter()
                .zip(outs)
                .enumerate()
                .map(|(i, (e, o))| TensorView {
                    original_op: Some(o.original.clone().unwrap_or_else(|| (op_name.to_string(), i as u32))),
                    ..view(e)
                })
                .collect(),
            overflow_status: status,
        };
        self.sink.op(&event);
    }
}

fn view(e: &emit::Encoded) -> TensorView<'_> {
    TensorView {
        dtype: e.dtype,
        format: e.format,
        device_shape: e.device_shape.clone(),
        original_shape: e.original_shape.clone(),
        bytes: &e.bytes,
        original_op: None,
    }
}

/// The next representable value of `p` above `x` (toward +inf).
fn next_up(p: Precision, x: f32) -> f32 {
    match p {
        Precision::Fp32 => {
            let b = x.to_bits();
            f32::from_bits(if x >= 0.0 { b + 1 } else { b - 1 })
        }
        _ => {
            // Step by the precision's ulp at x: 2^(exponent - mantissa bits).
            let bits = if p == Precision::Fp16 { 10 } else { 7 };
            let e = if x == 0.0 { -14 } else { x.abs().log2().floor() as i32 };
            let min_e = if p == Precision::Fp16 { -14 } else { -126 };
            round(p, x + 2f32.powi(e.max(min_e) - bits))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_up_moves_one_ulp() {
        assert_eq!(next_up(Precision::Fp16, 1.0), 1.0 + 2f32.powi(-10));
        assert_eq!(next_up(Precision::Bf16, 1.0), 1.0 + 2f32.powi(-7));
        assert_eq!(next_up(Precision::Fp16, -1.0), -1.0 + 2f32.powi(-10));
        assert!(next_up(Precision::Fp32, 3.0) > 3.0);
    }
}
