//! Opening the runs a command reads.

use analyzer::sources::{self, Source};
use anyhow::Result;
use std::mem::ManuallyDrop;
use std::path::Path;

/// A run opened for the rest of the process ([`open_run`]).
pub(super) type OpenRun = ManuallyDrop<Box<dyn Source>>;

/// The run at `path`, kept until the process ends: every command ends it, and the exit takes the index
/// back whole, where freeing it block by block (a few heap blocks a tensor) when the command returned was
/// 12% of `overflow`'s time on a run of 200K tensors. Only for a run read to the command's end: one read and
/// done with before the rest of the work (ranks' baseline) is dropped as usual, so the work after it has
/// its memory.
pub(super) fn open_run(path: &Path) -> Result<OpenRun> {
    sources::open(path).map(ManuallyDrop::new)
}
