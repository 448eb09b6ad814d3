//! `sim-train --ranks N` without `RANK_ID`: a launcher in the manner of torchrun. It starts N copies of
//! this command line, one per rank, each with
//! `RANK_ID` = `RANK` = `LOCAL_RANK` = `DEVICE_ID` = r, `RANK_SIZE` = `WORLD_SIZE` = N, and a shared
//! `SIM_TRAIN_RENDEZVOUS` file where rank 0 publishes the HCCL root info (torchrun's store).
//! `ASCEND_DEVICE_ID` is removed from the workers' environment, so that `DEVICE_ID` picks each one's device.
//!
//! Workers also get `SIM_HCCL_DIR` (the communicator's meeting place) inside the launcher's scratch
//! directory unless it is set, and `SIM_ACL_CLOCK=host` unless `SIM_ACL_CLOCK` is set: dump timestamps
//! then come from the host clock, as a real device's do, so they order against the collectives a
//! collector records (see the runtime's `clock`).
//!
//! When a worker fails, the launcher stops the others (SIGTERM) and exits with the failure, as torchrun
//! does; the scratch directory is removed at the end either way.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

/// Runs `ranks` workers of the current command line and waits for them.
pub fn launch(ranks: u32) -> Result<()> {
    if ranks == 0 {
        bail!("--ranks must be at least 1");
    }
    let exe = std::env::current_exe().context("locating this executable")?;
    let scratch = scratch_dir()?;
    let result = run_workers(&exe, ranks, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn scratch_dir() -> Result<PathBuf> {
    let base = std::env::var_os("SIM_HCCL_DIR").filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = base.unwrap_or_else(std::env::temp_dir);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = base.join(format!("sim-train-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn run_workers(exe: &PathBuf, ranks: u32, scratch: &std::path::Path) -> Result<()> {
    let mut children: Vec<(u32, Child)> = Vec::new();
    for rank in 0..ranks {
        let mut cmd = Command::new(exe);
        cmd.args(std::env::args_os().skip(1));
        let r = rank.to_string();
        let n = ranks.to_string();
        for key in ["RANK_ID", "RANK", "LOCAL_RANK", "DEVICE_ID"] {
            cmd.env(key, &r);
        }
        cmd.env("RANK_SIZE", &n).env("WORLD_SIZE", &n).env_remove("ASCEND_DEVICE_ID");
        cmd.env("SIM_TRAIN_RENDEZVOUS", scratch.join("root-info"));
        if std::env::var_os("SIM_HCCL_DIR").is_none() {
            cmd.env("SIM_HCCL_DIR", scratch);
        }
        if std::env::var_os("SIM_ACL_CLOCK").is_none() {
            cmd.env("SIM_ACL_CLOCK", "host");
        }
        match cmd.spawn() {
            Ok(child) => children.push((rank, child)),
            Err(e) => {
                stop(&mut children);
                bail!("starting rank {rank}: {e}");
            }
        }
    }
    // Poll rather than wait on one child: whichever fails first must stop the rest, which would otherwise
    // wait for it in a collective until HCCL's timeout.
    let mut failure: Option<(u32, ExitStatus)> = None;
    while !children.is_empty() {
        let mut i = 0;
        while i < children.len() {
            match children[i].1.try_wait().context("waiting for a rank")? {
                Some(status) => {
                    let (rank, _) = children.remove(i);
                    if !status.success() && failure.is_none() {
                        failure = Some((rank, status));
                        stop(&mut children);
                    }
                }
                None => i += 1,
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    match failure {
        Some((rank, status)) => bail!("rank {rank} failed ({status}); the other ranks were stopped"),
        None => Ok(()),
    }
}

/// SIGTERM to every remaining worker, then reap them.
fn stop(children: &mut Vec<(u32, Child)>) {
    for (_, child) in children.iter() {
        // SAFETY: kill(2) on a child's pid that has not been reaped yet (so it cannot have been reused).
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    }
    for (_, mut child) in children.drain(..) {
        let _ = child.wait();
    }
}
