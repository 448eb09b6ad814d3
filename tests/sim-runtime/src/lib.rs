//! A simulated CANN runtime: `libascendcl.so` with the real ACL ABI (`ascend-sys`) and the real dump byte
//! formats (`accutrace_formats::dump`), executing the sim-model transformer as its "device".
//!
//! - [`abi`]: the exported entry points (aclInit, aclmdlSetDump, acldumpRegCallback, aclmdlExecute, ...).
//! - [`execute`]: what `aclmdlExecute` runs: a whole step, or one half of a data-parallel step.
//! - [`single_op`]: single-operator execution (`aclopExecuteV2`, `aclopCompileAndExecute(V2)`,
//!   `aclopExecute`, `aclopExecWithHandle` and its op handles, tensor descriptions, op attributes), the path of eager frameworks, dumped in the single-op layout.
//! - [`memory`]: device memory (`aclrtMalloc`, ...) and the datasets that carry model inputs and outputs.
//! - [`config`]: the dump JSON. [`model`]: model files and the model interface.
//! - [`emit`]: ops to dump files in the dump tree. [`payload`]: op-debug records and stats CSVs.
//! - [`stream`]: the default stream, asynchronous with `SIM_ACL_ASYNC_DEPTH`. [`dumper`]: the runtime's own
//!   dump thread. [`chunker`]: `acldumpChunk`s, interleaving.
//! - [`overflow`]: saturation mode and the overflow status register. [`sysparam`]: context options
//!   (deterministic computation). [`clock`]: the deterministic clock.
//!
//! Environment: `SIM_ACL_CHUNK_SIZE` (callback chunk payload bytes, default 65536), `SIM_ACL_SAT_MODE`
//! (`saturation`; default INF/NaN), `SIM_ACL_OPDEBUG_LAYOUT` (`legacy` | `v2`, default v2),
//! `SIM_ACL_EPOCH_US` (start of the simulated clock, µs since the Unix epoch), `SIM_ACL_CLOCK` (`host`: dump
//! timestamps follow the host clock; see [`clock`]), `SIM_ACL_ASYNC_DEPTH` (`N`: aclopExecuteV2 returns
//! before its op runs, the device running N launches behind the host until a synchronization, and
//! aclmdlFinalizeDump drops the dumps still in flight; see [`stream`]), `SIM_ACL_SYNC_DEVICE` (`fail`:
//! aclrtSynchronizeDevice answers ACL_ERROR_FAILURE without waiting), `RANK_ID` (which rank of a data-parallel job this
//! device is: faults with a `rank` key apply on that rank only), `SIM_ACL_OTHER_DUMP_CALLBACK` (`1`, or `rank:N` for
//! the process whose RANK_ID is N: aclInit registers another tool's dump callback through the exported
//! `acldumpRegCallback`, which then receives every chunk, a later registration being ignored; `unseen` (or
//! `unseen:rank:N`): the same without calling an exported symbol; `after` (or `after:rank:N`): the first
//! aclrtSetDevice registers it, after a collector's, and the runtime ignores it; `after-unregister`: then
//! it calls `acldumpUnregCallback` at once, which removes the collector's).

pub mod abi;
pub mod chunker;
pub mod clock;
pub mod config;
pub mod dumper;
pub mod emit;
pub mod execute;
pub mod memory;
pub mod model;
pub mod overflow;
pub mod payload;
pub mod single_op;
pub mod state;
pub mod stream;

pub(crate) use abi::publish_step_report;
pub mod sysparam;
