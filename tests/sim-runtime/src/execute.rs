//! `aclmdlExecute`: a whole training step, or one half of a data-parallel step, chosen by the datasets.
//!
//! | input | output | what runs |
//! |---|---|---|
//! | none | none | a whole step on the model's own data |
//! | none, or [tokens, labels] (int32, batch x seq each) | [gradients (every parameter's, in the model's precision: fp16, bf16 or fp32), overflow (one fp32, 1 = yes)] | forward and backward; the step's dump stays open |
//! | [gradients, overflow, divisor (one fp32 each)] | none | the optimizer on gradients summed over `divisor` replicas, skipped when overflow is non-zero; ends the step |
//!
//! A data-parallel framework all-reduces the gradients (sum) and the overflow flag (max) between the two
//! halves, as torch's DistributedDataParallel and its grad scaler do. Both halves dump into the same step
//! directory, with task ids that continue from one half to the next.

use crate::dumper::Delivery;
use crate::emit::{Emitter, StepTarget};
use crate::memory::DeviceSlice;
use crate::state::{self, LoadedModel};
use crate::{overflow, publish_step_report};
use sim_model::data::Batch;

/// Runs what the datasets ask for on a locked model; the error says what was wrong with them.
pub fn run(
    m: &mut LoadedModel,
    device_id: i32,
    inputs: &[DeviceSlice],
    outputs: &[DeviceSlice],
) -> Result<(), String> {
    match (inputs.len(), outputs.len()) {
        (0, 0) => {
            let step = begin(m);
            let mut emitter = emitter(m, device_id, step);
            let report = m.model.step(step, overflow::model_mode(), &mut emitter);
            emitter.finish();
            if let Some(line) = report {
                publish_step_report(line);
            }
            Ok(())
        }
        (0 | 2, 2) => compute_half(m, device_id, inputs, outputs),
        (3, 0) => apply_half(m, inputs),
        (i, o) => Err(format!(
            "{i} input and {o} output buffers: the model takes none and none, [tokens, labels] (or none) and \
             [gradients, overflow], or [gradients, overflow, divisor] and none"
        )),
    }
}

/// The step this execution belongs to, advancing the model's counter (a whole step, or a first half).
/// Starts a step: the next step number, and the context's deterministic option handed to the model.
fn begin(m: &mut LoadedModel) -> u64 {
    m.pending = None;
    m.model.set_deterministic(crate::sysparam::deterministic());
    let step = m.next_step;
    m.next_step += 1;
    step
}

fn emitter(m: &LoadedModel, device_id: i32, step: u64) -> Emitter {
    let delivery = match state::callback() {
        Some(cb) => Delivery::Callback(cb),
        None => Delivery::Disk,
    };
    let target = m.dump.clone().map(|cfg| StepTarget {
        cfg,
        model_name: m.model.name().to_string(),
        model_id: m.id,
        device_id,
        step,
        session_dir: m.session_dir.clone(),
        opdebug_layout: overflow::layout_from_env(),
        delivery,
    });
    Emitter::new(target)
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect()
}

fn expect_len(what: &str, slice: &DeviceSlice, values: usize) -> Result<(), String> {
    expect_bytes(what, slice, values, 4)
}

fn expect_bytes(what: &str, slice: &DeviceSlice, values: usize, width: usize) -> Result<(), String> {
    if slice.len() == values * width {
        Ok(())
    } else {
        Err(format!(
            "{what}: {} bytes where {} ({values} {width}-byte values) are due",
            slice.len(),
            values * width
        ))
    }
}

/// Bytes per gradient value in the model's precision.
fn grad_width(p: sim_model::Precision) -> usize {
    if p == sim_model::Precision::Fp32 {
        4
    } else {
        2
    }
}

fn compute_half(
    m: &mut LoadedModel,
    device_id: i32,
    inputs: &[DeviceSlice],
    outputs: &[DeviceSlice],
) -> Result<(), String> {
    let io = m.model.io().ok_or("this model executes whole steps only")?;
    expect_bytes("output 0 (gradients)", &outputs[0], io.grad_values, grad_width(io.grad_precision))?;
    expect_len("output 1 (overflow flag)", &outputs[1], 1)?;
    let batch = match inputs {
        [tokens, labels] => {
            let read = |what: &str, s: &DeviceSlice| -> Result<Vec<i32>, String> {
                expect_len(what, s, io.batch_values)?;
                let v: Vec<i32> =
                    s.read().chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().expect("4"))).collect();
                match v.iter().find(|&&t| t < 0 || t as usize >= io.vocab) {
                    Some(t) => Err(format!("{what}: token {t} is outside the vocabulary of {}", io.vocab)),
                    None => Ok(v),
                }
            };
            Some(Batch {
                tokens: read("input 0 (tokens)", tokens)?,
                labels: read("input 1 (labels)", labels)?,
            })
        }
        _ => None,
    };
    let step = begin(m);
    let mut emitter = emitter(m, device_id, step);
    let (grads, overflowed) = m.model.compute_gradients(step, overflow::model_mode(), &mut emitter, batch)?;
    emitter.flush();
    m.pending = Some(emitter);
    // Exact: the gradients are device outputs, already values of the device's precision.
    outputs[0].write(&sim_model::precision::encode(io.grad_precision, &grads));
    outputs[1].write(&f32::from(u8::from(overflowed)).to_le_bytes());
    Ok(())
}

fn apply_half(m: &mut LoadedModel, inputs: &[DeviceSlice]) -> Result<(), String> {
    let io = m.model.io().ok_or("this model executes whole steps only")?;
    let mut emitter = m.pending.take().ok_or("no first half to apply: execute with output buffers first")?;
    expect_bytes("input 0 (gradients)", &inputs[0], io.grad_values, grad_width(io.grad_precision))?;
    expect_len("input 1 (overflow flag)", &inputs[1], 1)?;
    expect_len("input 2 (divisor)", &inputs[2], 1)?;
    let skip = f32s(&inputs[1].read())[0] != 0.0;
    let divisor = f32s(&inputs[2].read())[0];
    if !(divisor.is_finite() && divisor > 0.0) {
        return Err(format!("input 2 (divisor) is {divisor}, not a positive number"));
    }
    let step = m.next_step - 1;
    let flat = sim_model::precision::decode(io.grad_precision, &inputs[0].read());
    let report = m.model.apply_gradients(step, overflow::model_mode(), &mut emitter, &flat, skip, divisor)?;
    emitter.finish();
    if let Some(line) = report {
        publish_step_report(line);
    }
    Ok(())
}
