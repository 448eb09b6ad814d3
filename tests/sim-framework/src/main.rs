//! `sim-train`: trains the simulated model on libascendcl.so the way torch_npu would, or (`bench`) runs
//! the fp32 benchmark on the CPU and writes one `.npy` per original op output.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use sim_framework::{
    acl, bench, bench_msprobe, data_parallel, eager, hccl, launch, pipeline, tensor_parallel,
};
use sim_model::{ModelConfig, StepReport};
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(name = "sim-train", about = "Train the simulated transformer on the (simulated) CANN runtime")]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    train: TrainArgs,
}

#[derive(clap::Args)]
struct TrainArgs {
    /// Model file (JSON ModelConfig), handed to aclmdlLoadFromFile.
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    steps: u64,
    /// ACL config JSON passed to aclInit (dump settings, ...); NULL when absent.
    #[arg(long)]
    acl_config: Option<PathBuf>,
    /// libascendcl.so to load (else $SIM_ACL_LIB, else the one next to this executable, else the name).
    #[arg(long)]
    lib: Option<PathBuf>,
    /// Set the device's overflow mode with aclrtSetDeviceSatMode before loading (default: the runtime's).
    #[arg(long, value_enum)]
    overflow_mode: Option<SatMode>,
    /// Data parallel over N ranks. Without RANK_ID in the environment, launch N processes of this command
    /// like torchrun (RANK_ID, RANK_SIZE, DEVICE_ID, a shared root info); with it, be that rank (under srun
    /// or mpirun, map their rank variable to RANK_ID and set SIM_TRAIN_RENDEZVOUS to a shared path).
    #[arg(long, value_name = "N")]
    ranks: Option<u32>,
    /// Eager mode, as PyTorch on torch_npu: no model is loaded; every op is launched on its own (with
    /// aclopExecuteV2 unless --eager-launch says otherwise) and dumped in the single-operator layout.
    /// Calls accutrace_step_end() after each step when the process has it (the collector), as `analyzer
    /// record`'s Python hook would.
    #[arg(long, conflicts_with = "ranks")]
    eager: bool,
    /// With --eager: never call accutrace_step_end(), as a training script run without the Python hook
    /// (the collector then counts steps by ACCUTRACE_STEP_MARKER, or the analyzer infers them).
    #[arg(long, requires = "eager")]
    no_step_end: bool,
    /// With --eager: the entry point that launches each op. `execute-v2`: aclopExecuteV2 (an op already
    /// compiled); `compile-and-execute-v2`: aclopCompileAndExecuteV2, torch_npu's usual OpCommand path;
    /// `compile-and-execute`: aclopCompileAndExecute; `execute`: aclopExecute (deprecated for
    /// aclopExecuteV2); `exec-with-handle`: aclopCreateHandle, then aclopExecWithHandle (a single-op model
    /// launched by handle), one handle per launch.
    #[arg(long, value_enum, default_value = "execute-v2", requires = "eager")]
    eager_launch: EagerLaunchArg,
    /// How the runtime's functions are found: `global` (RTLD_GLOBAL, then the global scope, as a
    /// framework linked against libascendcl.so) or `handle` (dlopen, then dlsym(handle, name), as
    /// torch_npu's FunctionLoader: an LD_PRELOADed collector sees these calls only by interposing dlsym).
    #[arg(long, value_enum, default_value = "global")]
    resolve: ResolveArg,
    /// libhccl.so to load with --ranks (else $SIM_HCCL_LIB, else the one next to this executable, else
    /// the name). Resolved with dlopen + dlsym(handle), as torch_npu does.
    #[arg(long)]
    hccl_lib: Option<PathBuf>,
    /// With --ranks: make the communicator with HcclCommInitRootInfoConfig, as torch_npu does when
    /// libhccl.so has it (else HcclCommInitRootInfo).
    #[arg(long, requires = "ranks")]
    hccl_comm_config: bool,
    /// With --ranks N (even): pipeline parallel, two stages of N/2 ranks. Stage 0 sends its activations to
    /// its peer in stage 1 with HcclSend/HcclRecv and gets the gradient back the same way; each stage sums
    /// gradients within its data-parallel group; the overflow flag, the loss and a barrier span the job.
    #[arg(long, requires = "ranks", conflicts_with = "tensor_parallel")]
    pipeline: bool,
    /// With --ranks N (a multiple of T): tensor parallel in groups of T consecutive ranks and data parallel
    /// across them (the ranks at the same place of each group), as Megatron lays them out, each group
    /// with its own communicator. Per step each rank sums its part of the gradients within its
    /// tensor-parallel group, then the gradients within its data-parallel group (HcclAllReduce both);
    /// the overflow flag and the loss span the job.
    #[arg(long, value_name = "T", requires = "ranks")]
    tensor_parallel: Option<u32>,
    /// With --pipeline: sum a stage's gradients with HcclReduceScatter + HcclAllGather (ZeRO's sharded
    /// optimizer) instead of HcclAllReduce.
    #[arg(long, requires = "pipeline")]
    zero: bool,
    /// With --pipeline: rank 0's activations arrive at its peer with one bit flipped at step STEP (a link
    /// fault; needs the simulator's libhccl.so).
    #[arg(long, value_name = "STEP", requires = "pipeline")]
    corrupt_send: Option<u64>,
    /// Turn deterministic computation on after setting the device (aclrtCtxSetSysParamOpt(
    /// ACL_OPT_DETERMINISTIC, 1)), as torch.use_deterministic_algorithms(True) does on torch_npu.
    #[arg(long)]
    deterministic: bool,
    /// Set ACL_OPT_DETERMINISTIC to N instead of 1 (2: strong consistency, 3: batch consistency).
    #[arg(long, value_name = "N")]
    deterministic_level: Option<i64>,
}

#[derive(Clone, Copy, ValueEnum)]
enum ResolveArg {
    Global,
    Handle,
}

#[derive(Clone, Copy, ValueEnum)]
enum EagerLaunchArg {
    ExecuteV2,
    CompileAndExecute,
    CompileAndExecuteV2,
    Execute,
    ExecWithHandle,
}

#[derive(Clone, Copy, ValueEnum)]
enum SatMode {
    Saturation,
    Infnan,
}

#[derive(Subcommand)]
enum Command {
    /// The fp32 benchmark on the CPU (no runtime): DIR/step{k}/{op}.{i}.{ts}.npy plus mapping.json, or
    /// (--format msprobe) msprobe's API-level dump of a PyTorch run, DIR/step{k}/rank0/dump.json plus .npy.
    Bench {
        #[arg(long)]
        model: PathBuf,
        #[arg(long, default_value_t = 1)]
        steps: u64,
        #[arg(short = 'o', long = "out")]
        out: PathBuf,
        /// `npy`: one file per original op output (the vendor tools' benchmark); `msprobe`: one record per
        /// torch API call, the kernels grouped as torch would launch them.
        #[arg(long, value_enum, default_value = "npy")]
        format: BenchFormat,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum BenchFormat {
    Npy,
    Msprobe,
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Bench { model, steps, out, format }) => run_bench(&model, steps, &out, format),
        None => train(&cli.train),
    };
    if let Err(e) = result {
        eprintln!("sim-train: {e:#}");
        std::process::exit(1);
    }
}

fn run_bench(model: &Path, steps: u64, out: &Path, format: BenchFormat) -> Result<()> {
    let cfg = ModelConfig::from_file(model).map_err(anyhow::Error::msg)?;
    let losses = match format {
        BenchFormat::Npy => bench::run(&cfg, steps, out)?,
        BenchFormat::Msprobe => bench_msprobe::run(&cfg, steps, out)?,
    };
    for (k, loss) in losses.into_iter().enumerate() {
        println!("step {k} loss {loss:.6} (fp32 benchmark)");
    }
    Ok(())
}

fn train(args: &TrainArgs) -> Result<()> {
    let Some(model) = &args.model else { bail!("--model is required (or use `sim-train bench`)") };
    // Validate here too, so a bad model file is reported in our words before the runtime sees it.
    let model_cfg = ModelConfig::from_file(model).map_err(anyhow::Error::msg)?;
    let rank_env = match args.ranks {
        // A launcher (ours, or srun/mpirun with RANK_ID mapped) started this process as one rank.
        Some(ranks) if std::env::var_os("RANK_ID").is_some() => {
            Some(data_parallel::RankEnv::from_env(ranks)?)
        }
        Some(ranks) => return launch::launch(ranks),
        None => None,
    };
    let lib = acl::library_path(args.lib.as_deref());
    let resolve = match args.resolve {
        ResolveArg::Global => acl::Resolve::Global,
        ResolveArg::Handle => acl::Resolve::Handle,
    };
    let rt = acl::Acl::load_with(&lib, resolve)?;
    let f = acl::Entry::resolve(&rt)?;
    let device: i32 = match std::env::var("ASCEND_DEVICE_ID").or_else(|_| std::env::var("DEVICE_ID")) {
        Ok(v) => v.trim().parse().with_context(|| format!("ASCEND_DEVICE_ID/DEVICE_ID={v:?}"))?,
        Err(_) => 0,
    };
    let config = args.acl_config.as_ref().map(|p| acl::path_cstring(p)).transpose()?;
    // SAFETY: for every call below, the pointers were resolved with these exact signatures (ascend-sys fns),
    // the strings are NUL-terminated CStrings that outlive the calls, and null datasets are what the
    // simulated runtime takes (its model holds its own data).
    unsafe {
        let code = (f.init)(config.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()));
        // A repeated aclInit (a collector or another library got there first) is harmless.
        if code != ascend_sys::ACL_ERROR_REPEAT_INITIALIZE {
            acl::check("aclInit", code)?;
        }
        acl::check("aclrtSetDevice", (f.set_device)(device))?;
        if let (Some(mode), Some(set)) = (args.overflow_mode, f.set_sat_mode) {
            let m = match mode {
                SatMode::Saturation => ascend_sys::ACL_RT_OVERFLOW_MODE_SATURATION,
                SatMode::Infnan => ascend_sys::ACL_RT_OVERFLOW_MODE_INFNAN,
            };
            acl::check("aclrtSetDeviceSatMode", set(m as _))?;
        }
        if args.deterministic || args.deterministic_level.is_some() {
            let set = f.set_sys_param.context("the runtime has no aclrtCtxSetSysParamOpt")?;
            let level = args.deterministic_level.unwrap_or(1);
            acl::check("aclrtCtxSetSysParamOpt", set(ascend_sys::ACL_OPT_DETERMINISTIC, level))?;
        }
        match &rank_env {
            Some(env) => {
                let mut h = hccl::Hccl::load(&hccl::library_path(args.hccl_lib.as_deref()))?;
                h.init_with_config = args.hccl_comm_config;
                if args.pipeline {
                    let options = pipeline::Options { zero: args.zero, corrupt_send: args.corrupt_send };
                    pipeline::run(&rt, &f, &h, env, model, args.steps, &options)?;
                } else if let Some(tp) = args.tensor_parallel {
                    tensor_parallel::run(&rt, &f, &h, env, model, args.steps, tp)?;
                } else {
                    data_parallel::run(&rt, &f, &h, env, model, args.steps)?;
                }
            }
            None if args.eager => {
                let launch = match args.eager_launch {
                    EagerLaunchArg::ExecuteV2 => acl::EagerLaunch::ExecuteV2,
                    EagerLaunchArg::CompileAndExecute => acl::EagerLaunch::CompileAndExecute,
                    EagerLaunchArg::CompileAndExecuteV2 => acl::EagerLaunch::CompileAndExecuteV2,
                    EagerLaunchArg::Execute => acl::EagerLaunch::Execute,
                    EagerLaunchArg::ExecWithHandle => acl::EagerLaunch::ExecWithHandle,
                };
                eager::run(&rt, &model_cfg, args.steps, !args.no_step_end, launch, print_report)?
            }
            None => {
                let model_path = acl::path_cstring(model)?;
                let mut model_id = 0u32;
                acl::check("aclmdlLoadFromFile", (f.load)(model_path.as_ptr(), &mut model_id))?;
                let mut report_file_lines = 0usize;
                for step in 0..args.steps {
                    acl::check(
                        "aclmdlExecute",
                        (f.execute)(model_id, std::ptr::null(), std::ptr::null_mut()),
                    )?;
                    print_step(step, &rt, &mut report_file_lines);
                }
                acl::check("aclmdlUnload", (f.unload)(model_id))?;
            }
        }
        acl::check("aclrtResetDevice", (f.reset_device)(device))?;
        acl::check("aclFinalize", (f.finalize)())?;
    }
    Ok(())
}

/// Prints a step's loss from the runtime's report channel (sim-model docs): the exported
/// `simAclLastStepReport`, else the newest line of `$SIM_ACL_REPORT`.
fn print_step(step: u64, rt: &acl::Acl, seen_lines: &mut usize) {
    let line = acl::last_step_report(rt).or_else(|| {
        let path = std::env::var_os("SIM_ACL_REPORT")?;
        let text = std::fs::read_to_string(path).ok()?;
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let new = lines.len() > *seen_lines;
        *seen_lines = lines.len();
        new.then(|| lines.last().map(|l| l.to_string())).flatten()
    });
    match line.as_deref().map(StepReport::from_json_line) {
        Some(Ok((_, r))) => print_report(step, &r),
        Some(Err(e)) => println!("step {step} (bad step report: {e})"),
        None => println!("step {step} (the runtime reports no loss)"),
    }
}

fn print_report(step: u64, r: &StepReport) {
    let flags = if r.skipped { " overflow: step skipped" } else { "" };
    println!("step {step} loss {:.6} loss_scale {}{flags}", r.loss, r.loss_scale);
}
