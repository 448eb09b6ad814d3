//! One rank of a pipeline-parallel job (`sim-train --ranks N --pipeline`): two stages of N/2 ranks each,
//! data parallel within a stage. Rank r is stage r / (N/2) at data-parallel rank r % (N/2); its pipeline
//! peer is the other stage's rank at the same data-parallel rank, and both read that rank's shard (one
//! micro-batch goes through both stages).
//!
//! The simulated device runs the whole model in one `aclmdlExecute` (sim-model has no partial model), so a
//! stage cannot stop at its boundary: stage 0 sends as its activations the buffer its execute wrote (the
//! gradients, in the model's precision: they carry whatever its forward produced, an injected overflow
//! included), and stage 1 sends its own back as the gradient. Who talks to whom, with which call and in
//! which order is a pipeline's. Per step:
//! 1. stage 0: execute (forward and backward), `HcclSend(activations)` to its peer, `HcclRecv(gradient)`
//!    from it; stage 1: `HcclRecv(activations)` from its peer, execute, `HcclSend(gradient)` to it;
//! 2. the gradient a rank applies (stage 0: the one it got back; stage 1: its own) is summed within the
//!    stage's data-parallel group, on the group's own communicator: `HcclAllReduce`, or with `--zero`
//!    `HcclReduceScatter` (each rank sums its part, as ZeRO's sharded optimizer does) then `HcclAllGather`
//!    of the parts (a group of one rank sums nothing and calls nothing);
//! 3. over the job: `HcclAllReduce(overflow, max)`, the update, `HcclAllGather(loss)` and `HcclBarrier`
//!    (the pipeline's flush).
//!
//! Healthy runs keep every rank's weights bit-identical (the same micro-batch and the same gradients
//! everywhere). `--corrupt-send STEP` makes the simulator's libhccl.so flip one bit of rank 0's activations
//! on their way to its peer at that step (`simHcclInjectFault(comm, "corrupt_next_send")`).

use crate::acl::{self, Acl, Entry, Memory};
use crate::data_parallel::{
    gradient_wire, i32_bytes, join, load_with_shared_seed, rendezvous_at, Device, RankEnv,
};
use crate::hccl::{self, Hccl};
use anyhow::{bail, Context, Result};
use ascend_sys::hccl::*;
use ascend_sys::*;
use sim_model::{ModelConfig, StepReport};
use std::path::Path;

/// The pipeline's options (`--pipeline`, `--zero`, `--corrupt-send`).
pub struct Options {
    /// Sum gradients with ReduceScatter + AllGather instead of AllReduce.
    pub zero: bool,
    /// The step at which rank 0's activations are damaged in transit.
    pub corrupt_send: Option<u64>,
}

/// The HCCL calls only a pipeline makes, found in the library (or the reason they cannot be).
struct PipelineCalls {
    send: HcclSendFn,
    recv: HcclRecvFn,
    reduce_scatter: HcclReduceScatterFn,
    barrier: HcclBarrierFn,
}

impl PipelineCalls {
    fn of(h: &Hccl) -> Result<PipelineCalls> {
        let missing = |name: &str| format!("--pipeline needs {name}, which the HCCL library does not export");
        Ok(PipelineCalls {
            send: h.send.with_context(|| missing("HcclSend"))?,
            recv: h.recv.with_context(|| missing("HcclRecv"))?,
            reduce_scatter: h.reduce_scatter.with_context(|| missing("HcclReduceScatter"))?,
            barrier: h.barrier.with_context(|| missing("HcclBarrier"))?,
        })
    }
}

/// Runs `steps` pipeline-parallel steps of `model` as rank `env.rank`, printing each step's loss.
pub fn run(
    rt: &Acl,
    f: &Entry,
    h: &Hccl,
    env: &RankEnv,
    model: &Path,
    steps: u64,
    options: &Options,
) -> Result<()> {
    if env.ranks < 2 || !env.ranks.is_multiple_of(2) {
        bail!(
            "--pipeline needs an even number of ranks, 2 or more (two stages of equal size); got {}",
            env.ranks
        );
    }
    let cfg = ModelConfig::from_file(model).map_err(anyhow::Error::msg)?;
    let faults = cfg.faults.for_rank(env.rank);
    if faults.nondeterministic_reduction.is_some() || faults.wrong_data.is_some() {
        bail!(
            "the nondeterministic_reduction and wrong_data faults are for data parallel only, not --pipeline"
        );
    }
    if options.corrupt_send.is_some() && h.inject_fault.is_none() {
        bail!("--corrupt-send needs the simulator's libhccl.so (simHcclInjectFault)");
    }
    let calls = PipelineCalls::of(h)?;
    let group = env.ranks / 2;
    let (stage, dp_rank) = (env.rank / group, env.rank % group);
    let peer = if stage == 0 { env.rank + group } else { env.rank - group };

    let mem = Memory::resolve(rt)?;
    let mut dev = Device { mem: &mem, blocks: Vec::new() };
    // The job's communicator first (every rank), then each stage's data-parallel group's.
    let world = join(h, env.ranks, &rendezvous_at(h, &env.rendezvous, env.rank == 0)?, env.rank)?;
    let dp_comm = if group > 1 {
        let path = env.rendezvous.with_extension(format!("stage{stage}"));
        Some(join(h, group, &rendezvous_at(h, &path, dp_rank == 0)?, dp_rank)?)
    } else {
        None
    };
    let stream: aclrtStream = std::ptr::null_mut();

    let (model_id, data_cfg) = load_with_shared_seed(f, h, &mut dev, model, (&cfg, env.rank), world)?;

    let n = cfg.batch * cfg.seq;
    let grad_values = sim_model::Trainer::new(cfg.clone()).param_count();
    let (grad_type, grad_width) = gradient_wire(cfg.precision);
    let (tokens, labels) = (dev.alloc(n * 4)?, dev.alloc(n * 4)?);
    // `own`: what this rank's execute writes; `other`: what its peer sends (stage 1: the activations,
    // stage 0: the gradient it applies).
    let (own, other) = (dev.alloc(grad_values * grad_width)?, dev.alloc(grad_values * grad_width)?);
    let applied = if stage == 0 { &other } else { &own };
    // ReduceScatter splits the buffer in equal parts: padded to a multiple of the group's size.
    let part = grad_values.div_ceil(group as usize);
    let (padded, gathered, mine) = if options.zero && group > 1 {
        let len = part * group as usize * grad_width;
        (Some(dev.alloc(len)?), Some(dev.alloc(len)?), Some(dev.alloc(part * grad_width)?))
    } else {
        (None, None, None)
    };
    let (flag, divisor, loss) = (dev.alloc(4)?, dev.alloc(4)?, dev.alloc(4)?);
    let losses = dev.alloc(4 * env.ranks as usize)?;
    dev.upload(&divisor, &(group as f32).to_le_bytes())?;
    let count = grad_values as u64;

    for step in 0..steps {
        let batch = sim_model::data::shard(&data_cfg, step, u64::from(dp_rank), u64::from(group));
        dev.upload(&tokens, &i32_bytes(&batch.tokens))?;
        dev.upload(&labels, &i32_bytes(&batch.labels))?;
        // SAFETY: HCCL calls in this block: live device buffers of `count` elements of `grad_type`.
        unsafe {
            if stage == 0 {
                dev.execute(f, model_id, &[&tokens, &labels], &[&own, &flag])?;
                if options.corrupt_send == Some(step) && env.rank == 0 {
                    let inject = h.inject_fault.expect("checked above");
                    hccl::check("simHcclInjectFault", inject(world, c"corrupt_next_send".as_ptr()))?;
                }
                hccl::check("HcclSend", (calls.send)(own.ptr, count, grad_type, peer, world, stream))?;
                hccl::check("HcclRecv", (calls.recv)(other.ptr, count, grad_type, peer, world, stream))?;
            } else {
                hccl::check("HcclRecv", (calls.recv)(other.ptr, count, grad_type, peer, world, stream))?;
                dev.execute(f, model_id, &[&tokens, &labels], &[&own, &flag])?;
                hccl::check("HcclSend", (calls.send)(own.ptr, count, grad_type, peer, world, stream))?;
            }
        }
        if let Some(dp) = dp_comm {
            match (&padded, &gathered, &mine) {
                (Some(padded), Some(gathered), Some(mine)) => {
                    let mut bytes = dev.download(applied)?;
                    bytes.resize(padded.len, 0);
                    dev.upload(padded, &bytes)?;
                    let part = part as u64;
                    // SAFETY: `padded` and `gathered` hold group x `part` elements, `mine` one part.
                    unsafe {
                        hccl::check(
                            "HcclReduceScatter",
                            (calls.reduce_scatter)(
                                padded.ptr,
                                mine.ptr,
                                part,
                                grad_type,
                                HCCL_REDUCE_SUM,
                                dp,
                                stream,
                            ),
                        )?;
                        hccl::check(
                            "HcclAllGather",
                            (h.all_gather)(mine.ptr, gathered.ptr, part, grad_type, dp, stream),
                        )?;
                    }
                    let mut summed = dev.download(gathered)?;
                    summed.truncate(applied.len);
                    dev.upload(applied, &summed)?;
                }
                // SAFETY: an in-place reduction of `count` elements of `grad_type`.
                _ => hccl::check("HcclAllReduce", unsafe {
                    (h.all_reduce)(applied.ptr, applied.ptr, count, grad_type, HCCL_REDUCE_SUM, dp, stream)
                })?,
            }
        }
        // SAFETY: one fp32 overflow flag, reduced in place over the job.
        hccl::check("HcclAllReduce", unsafe {
            (h.all_reduce)(flag.ptr, flag.ptr, 1, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_MAX, world, stream)
        })?;
        dev.execute(f, model_id, &[applied, &flag, &divisor], &[])?;
        let report =
            acl::last_step_report(rt).context("the runtime reports no loss (simAclLastStepReport)")?;
        let (_, r) = StepReport::from_json_line(&report).map_err(anyhow::Error::msg)?;
        dev.upload(&loss, &r.loss.to_le_bytes())?;
        // SAFETY: `loss` holds 1 fp32, `losses` one per rank; a barrier takes no buffer.
        unsafe {
            hccl::check(
                "HcclAllGather",
                (h.all_gather)(loss.ptr, losses.ptr, 1, HCCL_DATA_TYPE_FP32, world, stream),
            )?;
            hccl::check("HcclBarrier", (calls.barrier)(world, stream))?;
        }
        let flags = if r.skipped { " overflow: step skipped" } else { "" };
        println!(
            "rank {} stage {stage} step {step} loss {:.6} loss_scale {}{flags}",
            env.rank, r.loss, r.loss_scale
        );
        if env.rank == 0 {
            let all: Vec<f32> = dev
                .download(&losses)?
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4")))
                .collect();
            let mean = all.iter().sum::<f32>() / all.len() as f32;
            println!("step {step} mean loss {mean:.6} over {} ranks", env.ranks);
        }
    }
    for comm in dp_comm.into_iter().chain([world]) {
        // SAFETY: a live communicator, destroyed once.
        hccl::check("HcclCommDestroy", unsafe { (h.comm_destroy)(comm) })?;
    }
    // SAFETY: the id aclmdlLoadFromFile returned.
    acl::check("aclmdlUnload", unsafe { (f.unload)(model_id) })?;
    Ok(())
}
