//! `sim-train --eager`: the model driven op by op, as PyTorch eager mode on torch_npu drives it. No model is
//! loaded: every op is one launch (`aclopExecuteV2`, or `aclopCompileAndExecute(V2)` as torch_npu's
//! OpCommand, or `aclopExecute`, or `aclopExecWithHandle`: `--eager-launch`) on operands in device memory,
//! and the runtime dumps each in the single-operator layout (when `dump_op_switch` is on).
//!
//! The arithmetic of the simulated device lives in sim-model, which this framework runs in the device's
//! precision (fp16/bf16); each op's operands, inputs and computed outputs alike, are copied into device
//! memory and launched, so the runtime sees the launch a kernel would get and the values it would leave
//! (see the runtime's `single_op` module). After the optimizer, a loss-scaled (fp16) run updates its loss
//! scale on the device every step, skipped or not, as torch's GradScaler does (`AmpUpdateScale`). Then, as
//! the Python hook `analyzer record` installs would after `optimizer.step()`, it calls
//! `accutrace_step_end()` when the process has one (the collector, preloaded).

use crate::acl::{self, Acl, EagerLaunch, OpLaunch, SingleOp};
use anyhow::{anyhow, Result};
use ascend_sys::*;
use sim_model::{ModelConfig, OpEvent, OpSink, OverflowMode, StepReport, TensorView, Trainer};
use std::ffi::{c_void, CString};

/// The op type of the loss-scale update a loss-scaled run launches at the end of every step.
pub const SCALE_UPDATE_OP: &str = "AmpUpdateScale";

/// The attribute that carries an op's overflow status bits to the simulated runtime (its `single_op`).
const OVERFLOW_STATUS_ATTR: &std::ffi::CStr = c"_sim_overflow_status";

/// `int32_t accutrace_step_end(void)`: the collector's step boundary (the step that begins, or -1).
type StepEndFn = unsafe extern "C" fn() -> i32;

/// Trains `steps` steps of `model` op by op, each launched through `launch`; calls `on_step` with each
/// step's report. With `hook`, calls `accutrace_step_end()` after each step when the process has it.
pub fn run(
    rt: &Acl,
    cfg: &ModelConfig,
    steps: u64,
    hook: bool,
    launch: EagerLaunch,
    mut on_step: impl FnMut(u64, &StepReport),
) -> Result<()> {
    let ops = SingleOp::resolve(rt, launch)?;
    // Looked up in the global scope, as ctypes.CDLL(None) finds it from Python.
    let step_end: Option<StepEndFn> = match hook {
        // SAFETY: the collector exports accutrace_step_end with exactly this signature.
        true => unsafe { acl::lookup(libc::RTLD_DEFAULT, c"accutrace_step_end") },
        false => None,
    };
    let mode = match ops.get_sat_mode {
        Some(get) => {
            let mut m = ACL_RT_OVERFLOW_MODE_INFNAN;
            // SAFETY: a valid out-pointer to an aclrtFloatOverflowMode.
            acl::check("aclrtGetDeviceSatMode", unsafe { get(&mut m) })?;
            if m == ACL_RT_OVERFLOW_MODE_SATURATION {
                OverflowMode::Saturation
            } else {
                OverflowMode::InfNan
            }
        }
        None => OverflowMode::InfNan,
    };
    let mut cfg = cfg.clone();
    cfg.faults = cfg.faults.for_rank(0);
    let scaled = cfg.precision == sim_model::Precision::Fp16;
    let mut trainer = Trainer::new(cfg);
    for step in 0..steps {
        let mut launcher = Launcher { ops: &ops, error: None };
        let report = trainer.step(step, mode, &mut launcher);
        if scaled {
            let found_inf = [f32::from(u8::from(report.skipped))];
            let scale = [report.loss_scale];
            let new_scale = [trainer.loss_scale()];
            launcher.launch_f32(SCALE_UPDATE_OP, &[&found_inf, &scale], &[&new_scale]);
        }
        if let Some(e) = launcher.error {
            return Err(e);
        }
        on_step(step, &report);
        if let Some(f) = step_end {
            // SAFETY: no arguments; the collector catches its own panics.
            unsafe { f() };
        }
    }
    Ok(())
}

/// Launches every op it is told of; keeps the first error (later ops are skipped).
struct Launcher<'a> {
    ops: &'a SingleOp,
    error: Option<anyhow::Error>,
}

/// One operand on the device, with what must be released after the launch.
struct DeviceOperand {
    memory: *mut c_void,
    buffer: *mut aclDataBuffer,
    desc: *mut aclTensorDesc,
}

impl Launcher<'_> {
    /// An op of one-element-or-more fp32 operands (the loss-scale update).
    fn launch_f32(&mut self, op_type: &str, inputs: &[&[f32]], outputs: &[&[f32]]) {
        let bytes = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let ins: Vec<Vec<u8>> = inputs.iter().map(|v| bytes(v)).collect();
        let outs: Vec<Vec<u8>> = outputs.iter().map(|v| bytes(v)).collect();
        fn view(b: &[u8]) -> TensorView<'_> {
            TensorView {
                dtype: accutrace_formats::DType::FLOAT,
                format: ACL_FORMAT_ND,
                device_shape: vec![(b.len() / 4) as u64],
                original_shape: vec![(b.len() / 4) as u64],
                bytes: b,
                original_op: None,
            }
        }
        let event = OpEvent {
            op_type,
            op_name: op_type,
            inputs: ins.iter().map(|b| view(b)).collect(),
            outputs: outs.iter().map(|b| view(b)).collect(),
            overflow_status: 0,
        };
        self.op(&event);
    }

    fn put(&self, t: &TensorView<'_>) -> Result<DeviceOperand> {
        let m = &self.ops.memory;
        let dtype = t.dtype.acl().ok_or_else(|| anyhow!("{} has no aclDataType", t.dtype.name()))?;
        let mut memory = std::ptr::null_mut();
        let size = t.bytes.len().max(1);
        // SAFETY: the functions have their accutrace_acl.h signatures; the out-pointer, the
        // host bytes and the dims arrays are live locals for each call.
        unsafe {
            acl::check("aclrtMalloc", (m.malloc)(&mut memory, size, ACL_MEM_MALLOC_HUGE_FIRST))?;
            acl::check(
                "aclrtMemcpy",
                (m.memcpy)(memory, size, t.bytes.as_ptr().cast(), t.bytes.len(), ACL_MEMCPY_HOST_TO_DEVICE),
            )?;
            let buffer = (m.create_data_buffer)(memory, t.bytes.len());
            let dims: Vec<i64> = t.original_shape.iter().map(|&d| d as i64).collect();
            // NC1HWC0 is a storage form of an NCHW tensor; the other device formats store ND tensors.
            let origin = if t.format == ACL_FORMAT_NC1HWC0 { ACL_FORMAT_NCHW } else { ACL_FORMAT_ND };
            let desc = (self.ops.create_desc)(dtype, dims.len() as i32, dims.as_ptr(), origin);
            if buffer.is_null() || desc.is_null() {
                return Err(anyhow!("aclCreateDataBuffer / aclCreateTensorDesc returned NULL"));
            }
            if t.format != origin || t.device_shape != t.original_shape {
                let storage: Vec<i64> = t.device_shape.iter().map(|&d| d as i64).collect();
                acl::check("aclSetTensorStorageFormat", (self.ops.set_storage_format)(desc, t.format))?;
                acl::check(
                    "aclSetTensorStorageShape",
                    (self.ops.set_storage_shape)(desc, storage.len() as i32, storage.as_ptr()),
                )?;
            }
            Ok(DeviceOperand { memory, buffer, desc })
        }
    }

    fn release(&self, operands: Vec<DeviceOperand>) {
        let m = &self.ops.memory;
        for o in operands {
            // SAFETY: handles and memory this launcher created; each released once.
            unsafe {
                (self.ops.destroy_desc)(o.desc);
                (m.destroy_data_buffer)(o.buffer);
                (m.free)(o.memory);
            }
        }
    }

    fn launch(&self, event: &OpEvent<'_>) -> Result<()> {
        let mut ins = Vec::new();
        let mut outs = Vec::new();
        let placed = (|| -> Result<()> {
            for t in &event.inputs {
                ins.push(self.put(t)?);
            }
            for t in &event.outputs {
                outs.push(self.put(t)?);
            }
            Ok(())
        })();
        let result = placed.and_then(|()| {
            let op_type = CString::new(event.op_type)?;
            let mut in_desc: Vec<*mut aclTensorDesc> = ins.iter().map(|o| o.desc).collect();
            let mut in_buf: Vec<*mut aclDataBuffer> = ins.iter().map(|o| o.buffer).collect();
            let mut out_desc: Vec<*mut aclTensorDesc> = outs.iter().map(|o| o.desc).collect();
            let mut out_buf: Vec<*mut aclDataBuffer> = outs.iter().map(|o| o.buffer).collect();
            // SAFETY: accutrace_acl.h signatures; the arrays hold exactly the counts passed and
            // live across the call; the attribute is created and destroyed here.
            unsafe {
                let attr = (self.ops.create_attr)();
                if event.overflow_status != 0 {
                    let bits = event.overflow_status as i64;
                    acl::check(
                        "aclopSetAttrInt",
                        (self.ops.set_attr_int)(attr, OVERFLOW_STATUS_ATTR.as_ptr(), bits),
                    )?;
                }
                let (n_in, n_out, stream) =
                    (in_desc.len() as i32, out_desc.len() as i32, std::ptr::null_mut());
                let code = match self.ops.execute {
                    OpLaunch::ExecuteV2(f) => f(
                        op_type.as_ptr(),
                        n_in,
                        in_desc.as_mut_ptr(),
                        in_buf.as_mut_ptr(),
                        n_out,
                        out_desc.as_mut_ptr(),
                        out_buf.as_mut_ptr(),
                        attr,
                        stream,
                    ),
                    // The built-in ops: the system engine picks the core, no op path to compile from.
                    OpLaunch::CompileAndExecute(f) => f(
                        op_type.as_ptr(),
                        n_in,
                        in_desc.as_ptr().cast(),
                        in_buf.as_ptr().cast(),
                        n_out,
                        out_desc.as_ptr().cast(),
                        out_buf.as_ptr(),
                        attr,
                        ACL_ENGINE_SYS,
                        ACL_COMPILE_SYS,
                        std::ptr::null(),
                        stream,
                    ),
                    OpLaunch::CompileAndExecuteV2(f) => f(
                        op_type.as_ptr(),
                        n_in,
                        in_desc.as_mut_ptr(),
                        in_buf.as_mut_ptr(),
                        n_out,
                        out_desc.as_mut_ptr(),
                        out_buf.as_mut_ptr(),
                        attr,
                        ACL_ENGINE_SYS,
                        ACL_COMPILE_SYS,
                        std::ptr::null(),
                        stream,
                    ),
                    OpLaunch::Execute(f) => f(
                        op_type.as_ptr(),
                        n_in,
                        in_desc.as_ptr().cast(),
                        in_buf.as_ptr().cast(),
                        n_out,
                        out_desc.as_ptr().cast(),
                        out_buf.as_ptr(),
                        attr,
                        stream,
                    ),
                    // One handle per launch: the overflow attribute the simulated kernel reports through
                    // differs from launch to launch, and a handle fixes its attribute.
                    OpLaunch::ExecWithHandle(by) => {
                        let mut handle: *mut aclopHandle = std::ptr::null_mut();
                        let created = (by.create)(
                            op_type.as_ptr(),
                            n_in,
                            in_desc.as_ptr().cast(),
                            n_out,
                            out_desc.as_ptr().cast(),
                            attr,
                            &mut handle,
                        );
                        if created != ACL_SUCCESS {
                            (self.ops.destroy_attr)(attr);
                            return acl::check(&format!("aclopCreateHandle({})", event.op_type), created);
                        }
                        let code = (by.execute)(
                            handle,
                            n_in,
                            in_buf.as_ptr().cast(),
                            n_out,
                            out_buf.as_ptr(),
                            stream,
                        );
                        (by.destroy)(handle);
                        code
                    }
                };
                (self.ops.destroy_attr)(attr);
                acl::check(&format!("{}({})", self.ops.execute.name(), event.op_type), code)
            }
        });
        ins.extend(outs);
        self.release(ins);
        result
    }
}

impl OpSink for Launcher<'_> {
    fn op(&mut self, event: &OpEvent<'_>) {
        if self.error.is_none() {
            if let Err(e) = self.launch(event) {
                self.error = Some(e);
            }
        }
    }
}
