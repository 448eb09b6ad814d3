//! One rank of a data-parallel job (`sim-train --ranks N` under a launcher that sets `RANK_ID`): the
//! framework's side of torch's DistributedDataParallel with a grad scaler, over ACL and HCCL.
//!
//! Set-up: rank 0 makes the HCCL root info and publishes it in the rendezvous file
//! (`$SIM_TRAIN_RENDEZVOUS`, the launcher's store); every rank joins the communicator; rank 0 broadcasts
//! the sampler's seed. Then per step, on this rank's shard of the data (`sim_model::data::shard`):
//! 1. `aclmdlExecute(model, [tokens, labels], [gradients, overflow])`: forward and backward;
//! 2. `HcclAllReduce(gradients, sum)` (in the model's precision) and `HcclAllReduce(overflow, max)`;
//! 3. `aclmdlExecute(model, [gradients, overflow, ranks], none)`: the update on the averaged gradients, or
//!    a skipped step on every rank when any rank overflowed;
//! 4. `HcclAllGather(loss)`, so rank 0 can print the mean loss.
//!
//! Healthy replicas hold bit-identical weights after every step: they apply the same reduced gradients
//! with the same loss scale. The framework-level faults of the model file are applied here (`wrong_data`,
//! `nondeterministic_reduction`); the device applies the others.

use crate::acl::{self, Acl, Entry, Memory};
use crate::hccl::{self, Hccl};
use anyhow::{bail, Context, Result};
use ascend_sys::hccl::*;
use ascend_sys::*;
use sim_model::{Faults, ModelConfig, Precision, StepReport};
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The rank this process is and the job it belongs to, from the launcher's environment.
pub struct RankEnv {
    pub rank: u32,
    pub ranks: u32,
    /// Where rank 0 publishes the root info (`SIM_TRAIN_RENDEZVOUS`).
    pub rendezvous: PathBuf,
}

impl RankEnv {
    /// Reads `RANK_ID` (required), `RANK_SIZE` (optional; must equal `ranks`) and
    /// `SIM_TRAIN_RENDEZVOUS` (required).
    pub fn from_env(ranks: u32) -> Result<RankEnv> {
        let rank: u32 = env_number("RANK_ID")?.context("RANK_ID is not set")?;
        if let Some(size) = env_number::<u32>("RANK_SIZE")? {
            if size != ranks {
                bail!("RANK_SIZE={size} but --ranks {ranks}");
            }
        }
        if rank >= ranks {
            bail!("RANK_ID={rank} is not a rank of {ranks}");
        }
        let rendezvous = std::env::var_os("SIM_TRAIN_RENDEZVOUS")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .context("SIM_TRAIN_RENDEZVOUS is not set: name a file path every rank can reach")?;
        Ok(RankEnv { rank, ranks, rendezvous })
    }
}

fn env_number<T: std::str::FromStr>(name: &str) -> Result<Option<T>> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().map(Some).map_err(|_| anyhow::anyhow!("{name}={v:?} is not a number")),
        Err(_) => Ok(None),
    }
}

/// A block of device memory.
pub(crate) struct DeviceBuffer {
    pub(crate) ptr: *mut c_void,
    pub(crate) len: usize,
}

/// Device memory through the runtime, freed when the job ends.
pub(crate) struct Device<'a> {
    pub(crate) mem: &'a Memory,
    pub(crate) blocks: Vec<*mut c_void>,
}

impl Device<'_> {
    pub(crate) fn alloc(&mut self, len: usize) -> Result<DeviceBuffer> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is a writable pointer slot; the policy is a defined value.
        acl::check("aclrtMalloc", unsafe { (self.mem.malloc)(&mut ptr, len, ACL_MEM_MALLOC_HUGE_FIRST) })?;
        self.blocks.push(ptr);
        Ok(DeviceBuffer { ptr, len })
    }

    pub(crate) fn upload(&self, to: &DeviceBuffer, bytes: &[u8]) -> Result<()> {
        // SAFETY: `to` holds `to.len` bytes (checked against `bytes.len()` by the call's destMax).
        let code = unsafe {
            (self.mem.memcpy)(to.ptr, to.len, bytes.as_ptr().cast(), bytes.len(), ACL_MEMCPY_HOST_TO_DEVICE)
        };
        acl::check("aclrtMemcpy", code)
    }

    pub(crate) fn download(&self, from: &DeviceBuffer) -> Result<Vec<u8>> {
        let mut out = vec![0u8; from.len];
        // SAFETY: `out` has room for `from.len` bytes, which `from` holds.
        let code = unsafe {
            (self.mem.memcpy)(
                out.as_mut_ptr().cast(),
                out.len(),
                from.ptr,
                from.len,
                ACL_MEMCPY_DEVICE_TO_HOST,
            )
        };
        acl::check("aclrtMemcpy", code)?;
        Ok(out)
    }

    /// Executes `model` with datasets over `input` and `output` buffers (none = NULL).
    pub(crate) fn execute(
        &self,
        f: &Entry,
        model: u32,
        input: &[&DeviceBuffer],
        output: &[&DeviceBuffer],
    ) -> Result<()> {
        let (i, o) = (self.dataset(input)?, self.dataset(output)?);
        // SAFETY: the datasets are live (or NULL) and describe live device buffers.
        let code = unsafe { (f.execute)(model, i.handle, o.handle) };
        self.destroy(i);
        self.destroy(o);
        acl::check("aclmdlExecute", code)
    }

    fn dataset(&self, bufs: &[&DeviceBuffer]) -> Result<Dataset> {
        let mut d = Dataset { handle: std::ptr::null_mut(), buffers: Vec::new() };
        if bufs.is_empty() {
            return Ok(d);
        }
        // SAFETY: this block: the runtime's dataset calls, on handles it returned and live buffers.
        unsafe {
            d.handle = (self.mem.create_dataset)();
            for b in bufs {
                let db = (self.mem.create_data_buffer)(b.ptr, b.len);
                d.buffers.push(db);
                if let Err(e) =
                    acl::check("aclmdlAddDatasetBuffer", (self.mem.add_dataset_buffer)(d.handle, db))
                {
                    self.destroy(d);
                    return Err(e);
                }
            }
        }
        Ok(d)
    }

    fn destroy(&self, d: Dataset) {
        // SAFETY: handles the runtime returned, each destroyed once (NULL ones are skipped).
        unsafe {
            for b in d.buffers {
                (self.mem.destroy_data_buffer)(b);
            }
            if !d.handle.is_null() {
                (self.mem.destroy_dataset)(d.handle);
            }
        }
    }
}

/// A dataset and the data buffers in it (destroyed together).
struct Dataset {
    handle: *mut aclmdlDataset,
    buffers: Vec<*mut aclDataBuffer>,
}

impl Drop for Device<'_> {
    fn drop(&mut self) {
        for p in self.blocks.drain(..) {
            // SAFETY: a block aclrtMalloc returned, freed once.
            unsafe { (self.mem.free)(p) };
        }
    }
}

/// Rank 0 makes the root info and publishes it; the others wait for it (as torchrun's store hands out
/// `init_process_group`'s unique id).
fn rendezvous(h: &Hccl, env: &RankEnv) -> Result<HcclRootInfo> {
    rendezvous_at(h, &env.rendezvous, env.rank == 0)
}

/// The `leader` makes a root info and publishes it at `path`; the others wait for it there.
pub(crate) fn rendezvous_at(h: &Hccl, path: &Path, leader: bool) -> Result<HcclRootInfo> {
    let mut info = HcclRootInfo { internal: [0; ROOT_INFO_LEN] };
    if leader {
        // SAFETY: `info` is a writable HcclRootInfo.
        hccl::check("HcclGetRootInfo", unsafe { (h.get_root_info)(&mut info) })?;
        let bytes: Vec<u8> = info.internal.iter().map(|&c| c as u8).collect();
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, &bytes).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("publishing {}", path.display()))?;
        return Ok(info);
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if let Ok(bytes) = std::fs::read(path) {
            if bytes.len() != ROOT_INFO_LEN {
                bail!("{}: {} bytes, not a root info of {ROOT_INFO_LEN}", path.display(), bytes.len());
            }
            for (c, b) in info.internal.iter_mut().zip(bytes) {
                *c = b as std::ffi::c_char;
            }
            return Ok(info);
        }
        if Instant::now() > deadline {
            bail!(
                "no root info was published in {} within 300 s (its group's first rank makes it)",
                path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub(crate) fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Joins the communicator of `info` as `rank` of `ranks` (with `HcclCommInitRootInfoConfig` when asked).
pub(crate) fn join(h: &Hccl, ranks: u32, info: &HcclRootInfo, rank: u32) -> Result<HcclComm> {
    let mut comm: HcclComm = std::ptr::null_mut();
    if h.init_with_config {
        let init =
            h.comm_init_root_info_config.context("the HCCL library has no HcclCommInitRootInfoConfig")?;
        // The simulator reads nothing of the config (buffer size, determinism, name): zeroed storage
        // stands in for torch_npu's HcclCommConfig.
        let config = [0u64; 64];
        // SAFETY: `info` is a root info, `config` readable storage and `comm` a writable handle slot.
        hccl::check("HcclCommInitRootInfoConfig", unsafe {
            init(ranks, info, rank, config.as_ptr().cast(), &mut comm)
        })?;
    } else {
        // SAFETY: `info` is a root info and `comm` a writable handle slot.
        hccl::check("HcclCommInitRootInfo", unsafe {
            (h.comm_init_root_info)(ranks, info, rank, &mut comm)
        })?;
    }
    Ok(comm)
}

/// Loads `model` and gives every rank rank 0's sampler seed over `comm` (a torch job broadcasts it so that
/// shards never overlap): the model's id and the data's configuration.
pub(crate) fn load_with_shared_seed(
    f: &Entry,
    h: &Hccl,
    dev: &mut Device,
    model: &Path,
    (cfg, rank): (&ModelConfig, u32),
    comm: HcclComm,
) -> Result<(u32, ModelConfig)> {
    let model_path = acl::path_cstring(model)?;
    let mut model_id = 0u32;
    // SAFETY: a NUL-terminated path and a writable id.
    acl::check("aclmdlLoadFromFile", unsafe { (f.load)(model_path.as_ptr(), &mut model_id) })?;
    let seed_buf = dev.alloc(8)?;
    dev.upload(&seed_buf, &(if rank == 0 { cfg.seed } else { 0 }).to_le_bytes())?;
    let stream: aclrtStream = std::ptr::null_mut();
    // SAFETY: a live device buffer holding one u64.
    hccl::check("HcclBroadcast", unsafe {
        (h.broadcast)(seed_buf.ptr, 1, HCCL_DATA_TYPE_UINT64, 0, comm, stream)
    })?;
    let seed = u64::from_le_bytes(dev.download(&seed_buf)?.try_into().expect("8 bytes"));
    Ok((model_id, ModelConfig { seed, ..cfg.clone() }))
}

/// The HCCL type and byte width gradients travel in: the model's precision, as a framework with fp32 master
/// weights in its optimizer all-reduces them (a reduction that rounds: its order shows in the result).
pub(crate) fn gradient_wire(precision: Precision) -> (HcclDataType, usize) {
    match precision {
        Precision::Fp16 => (HCCL_DATA_TYPE_FP16, 2),
        Precision::Bf16 => (HCCL_DATA_TYPE_BFP16, 2),
        Precision::Fp32 => (HCCL_DATA_TYPE_FP32, 4),
    }
}

/// Runs `steps` data-parallel steps of `model` as rank `env.rank`, printing each step's loss.
pub fn run(rt: &Acl, f: &Entry, h: &Hccl, env: &RankEnv, model: &Path, steps: u64) -> Result<()> {
    let cfg = ModelConfig::from_file(model).map_err(anyhow::Error::msg)?;
    let faults: Faults = cfg.faults.for_rank(env.rank);
    if faults.nondeterministic_reduction.is_some() && env.ranks < 3 {
        bail!("the nondeterministic_reduction fault needs 3 or more ranks (a sum of two is the same in any order)");
    }
    if faults.nondeterministic_reduction.is_some() && h.inject_fault.is_none() {
        bail!("the nondeterministic_reduction fault needs the simulator's libhccl.so (simHcclInjectFault)");
    }
    let mem = Memory::resolve(rt)?;
    let mut dev = Device { mem: &mem, blocks: Vec::new() };
    let info = rendezvous(h, env)?;
    let comm = join(h, env.ranks, &info, env.rank)?;
    let stream: aclrtStream = std::ptr::null_mut();
    let (model_id, data_cfg) = load_with_shared_seed(f, h, &mut dev, model, (&cfg, env.rank), comm)?;

    let n = cfg.batch * cfg.seq;
    let grad_values = sim_model::Trainer::new(cfg.clone()).param_count();
    let (grad_type, grad_width) = gradient_wire(cfg.precision);
    let (tokens, labels) = (dev.alloc(n * 4)?, dev.alloc(n * 4)?);
    let grads = dev.alloc(grad_values * grad_width)?;
    let (flag, divisor, loss) = (dev.alloc(4)?, dev.alloc(4)?, dev.alloc(4)?);
    let losses = dev.alloc(4 * env.ranks as usize)?;
    dev.upload(&divisor, &(env.ranks as f32).to_le_bytes())?;

    for step in 0..steps {
        let due = |f: &Option<sim_model::StepFault>| f.as_ref().is_some_and(|f| f.step == step);
        // The wrong_data fault: this rank reads the next rank's shard.
        let shard = u64::from(env.rank) + u64::from(due(&faults.wrong_data));
        let batch = sim_model::data::shard(&data_cfg, step, shard, u64::from(env.ranks));
        dev.upload(&tokens, &i32_bytes(&batch.tokens))?;
        dev.upload(&labels, &i32_bytes(&batch.labels))?;
        dev.execute(f, model_id, &[&tokens, &labels], &[&grads, &flag])?;
        if due(&faults.nondeterministic_reduction) {
            let inject = h.inject_fault.expect("checked above");
            // SAFETY: a live communicator and a NUL-terminated fault name.
            hccl::check("simHcclInjectFault", unsafe { inject(comm, c"reverse_reduction_order".as_ptr()) })?;
        }
        // SAFETY: HCCL calls: in-place reductions of live device buffers of the counts given.
        unsafe {
            let count = grad_values as u64;
            hccl::check(
                "HcclAllReduce",
                (h.all_reduce)(grads.ptr, grads.ptr, count, grad_type, HCCL_REDUCE_SUM, comm, stream),
            )?;
            hccl::check(
                "HcclAllReduce",
                (h.all_reduce)(flag.ptr, flag.ptr, 1, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_MAX, comm, stream),
            )?;
        }
        dev.execute(f, model_id, &[&grads, &flag, &divisor], &[])?;
        let report =
            acl::last_step_report(rt).context("the runtime reports no loss (simAclLastStepReport)")?;
        let (_, r) = StepReport::from_json_line(&report).map_err(anyhow::Error::msg)?;
        dev.upload(&loss, &r.loss.to_le_bytes())?;
        // SAFETY: `loss` holds 1 fp32, `losses` one per rank.
        hccl::check("HcclAllGather", unsafe {
            (h.all_gather)(loss.ptr, losses.ptr, 1, HCCL_DATA_TYPE_FP32, comm, stream)
        })?;
        let flags = if r.skipped { " overflow: step skipped" } else { "" };
        println!("rank {} step {step} loss {:.6} loss_scale {}{flags}", env.rank, r.loss, r.loss_scale);
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
    // SAFETY: a live communicator, destroyed once.
    hccl::check("HcclCommDestroy", unsafe { (h.comm_destroy)(comm) })?;
    // SAFETY: the id aclmdlLoadFromFile returned.
    acl::check("aclmdlUnload", unsafe { (f.unload)(model_id) })?;
    Ok(())
}
