//! One rank of a tensor-parallel x data-parallel job (`sim-train --ranks N --tensor-parallel T`), as
//! Megatron lays one out: groups of T consecutive ranks are tensor parallel (rank r is place r % T of
//! group r / T), and the ranks at the same place of every such group are a data-parallel group (place
//! r / T of group r % T). With 4 ranks and T = 2, rank 0 is place 0 of two communicators of 2 ranks,
//! {0, 1} and {0, 2}, whose calls both count from 0: the case `diff` has to tell apart by their members.
//!
//! Each communicator is made from its own root info (the job's, then each rank's tensor-parallel group's,
//! then its data-parallel group's). A tensor-parallel group's ranks read the same shard of the data. Per
//! step:
//! 1. `aclmdlExecute`: forward and backward (the whole model on every rank: sim-model has no partial
//!    model);
//! 2. tensor parallel: each rank keeps its part of the gradients (its T-th, zeros elsewhere), as a
//!    row-parallel layer holds a partial result, and `HcclAllReduce(sum)` over the group rebuilds them
//!    (exactly: a value plus zeros);
//! 3. data parallel: `HcclAllReduce(sum)` of the gradients over the data-parallel group;
//! 4. over the job: `HcclAllReduce(overflow, max)`, the update (averaged over the data-parallel group),
//!    and `HcclAllGather(loss)`.
//!
//! Healthy runs keep every rank's weights bit-identical. The model file's framework faults
//! (`nondeterministic_reduction`, `wrong_data`) are for plain data parallel only.

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

/// Runs `steps` steps of `model` as rank `env.rank` of groups of `tp` tensor-parallel ranks, printing
/// each step's loss.
pub fn run(rt: &Acl, f: &Entry, h: &Hccl, env: &RankEnv, model: &Path, steps: u64, tp: u32) -> Result<()> {
    if tp < 2 || !env.ranks.is_multiple_of(tp) || env.ranks / tp < 2 {
        bail!(
            "--tensor-parallel {tp} needs --ranks a multiple of it, 2 or more groups of 2 or more ranks; got {}",
            env.ranks
        );
    }
    let cfg = ModelConfig::from_file(model).map_err(anyhow::Error::msg)?;
    let faults = cfg.faults.for_rank(env.rank);
    if faults.nondeterministic_reduction.is_some() || faults.wrong_data.is_some() {
        bail!("the nondeterministic_reduction and wrong_data faults are for data parallel only, not --tensor-parallel");
    }
    let dp = env.ranks / tp;
    let (tp_group, tp_rank) = (env.rank / tp, env.rank % tp);
    let (dp_group, dp_rank) = (tp_rank, tp_group);

    let mem = Memory::resolve(rt)?;
    let mut dev = Device { mem: &mem, blocks: Vec::new() };
    let world = join(h, env.ranks, &rendezvous_at(h, &env.rendezvous, env.rank == 0)?, env.rank)?;
    let path = env.rendezvous.with_extension(format!("tp{tp_group}"));
    let tp_comm = join(h, tp, &rendezvous_at(h, &path, tp_rank == 0)?, tp_rank)?;
    let path = env.rendezvous.with_extension(format!("dp{dp_group}"));
    let dp_comm = join(h, dp, &rendezvous_at(h, &path, dp_rank == 0)?, dp_rank)?;
    let stream: aclrtStream = std::ptr::null_mut();

    let (model_id, data_cfg) = load_with_shared_seed(f, h, &mut dev, model, (&cfg, env.rank), world)?;

    let n = cfg.batch * cfg.seq;
    let grad_values = sim_model::Trainer::new(cfg.clone()).param_count();
    let (grad_type, grad_width) = gradient_wire(cfg.precision);
    let (tokens, labels) = (dev.alloc(n * 4)?, dev.alloc(n * 4)?);
    let grads = dev.alloc(grad_values * grad_width)?;
    let (flag, divisor, loss) = (dev.alloc(4)?, dev.alloc(4)?, dev.alloc(4)?);
    let losses = dev.alloc(4 * env.ranks as usize)?;
    dev.upload(&divisor, &(dp as f32).to_le_bytes())?;
    // This rank's part of the gradients' bytes.
    let part = grad_values.div_ceil(tp as usize) * grad_width;
    let mine = (part * tp_rank as usize).min(grads.len)..(part * (tp_rank as usize + 1)).min(grads.len);
    let count = grad_values as u64;

    for step in 0..steps {
        let batch = sim_model::data::shard(&data_cfg, step, u64::from(dp_rank), u64::from(dp));
        dev.upload(&tokens, &i32_bytes(&batch.tokens))?;
        dev.upload(&labels, &i32_bytes(&batch.labels))?;
        dev.execute(f, model_id, &[&tokens, &labels], &[&grads, &flag])?;
        let mut partial = dev.download(&grads)?;
        partial[..mine.start].fill(0);
        partial[mine.end..].fill(0);
        dev.upload(&grads, &partial)?;
        // SAFETY: in-place sums of `count` elements of `grad_type`, then one fp32 flag's maximum.
        unsafe {
            hccl::check(
                "HcclAllReduce",
                (h.all_reduce)(grads.ptr, grads.ptr, count, grad_type, HCCL_REDUCE_SUM, tp_comm, stream),
            )?;
            hccl::check(
                "HcclAllReduce",
                (h.all_reduce)(grads.ptr, grads.ptr, count, grad_type, HCCL_REDUCE_SUM, dp_comm, stream),
            )?;
            hccl::check(
                "HcclAllReduce",
                (h.all_reduce)(flag.ptr, flag.ptr, 1, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_MAX, world, stream),
            )?;
        }
        dev.execute(f, model_id, &[&grads, &flag, &divisor], &[])?;
        let report =
            acl::last_step_report(rt).context("the runtime reports no loss (simAclLastStepReport)")?;
        let (_, r) = StepReport::from_json_line(&report).map_err(anyhow::Error::msg)?;
        dev.upload(&loss, &r.loss.to_le_bytes())?;
        // SAFETY: `loss` holds 1 fp32, `losses` one per rank.
        hccl::check("HcclAllGather", unsafe {
            (h.all_gather)(loss.ptr, losses.ptr, 1, HCCL_DATA_TYPE_FP32, world, stream)
        })?;
        let flags = if r.skipped { " overflow: step skipped" } else { "" };
        println!(
            "rank {} tp {tp_group}.{tp_rank} dp {dp_group}.{dp_rank} step {step} loss {:.6} loss_scale {}{flags}",
            env.rank, r.loss, r.loss_scale
        );
    }
    for comm in [dp_comm, tp_comm, world] {
        // SAFETY: a live communicator, destroyed once.
        hccl::check("HcclCommDestroy", unsafe { (h.comm_destroy)(comm) })?;
    }
    // SAFETY: the id aclmdlLoadFromFile returned.
    acl::check("aclmdlUnload", unsafe { (f.unload)(model_id) })?;
    Ok(())
}
