//! accutrace's byte formats, in the one place that the collector and the analyzer both use.
//!
//! - [`dtype`]: the dtype table (storage width, kind, C0, saturation limit) keyed on CANN's enum.
//! - [`tensor`]: decoding tensor bytes of every numeric dtype into f32/f64 lanes; device tensors to host
//!   values ([`tensor::host`]).
//! - [`layout`]: device formats (NC1HWC0, FRACTAL_Z, FRACTAL_NZ, ...) to and from the host layout.
//! - [`npy`]: NumPy `.npy` files, read and write.
//! - [`dump`]: CANN dump files (both layouts), file names, dump trees, op-debug records, stats CSV.
//! - [`msprobe`]: msprobe dumps: `dump.json`, the `.pt` (zip + pickle) and `.npy` tensor files.
//! - [`stats`]: per-tensor statistics and the 64-bit content hash.
//! - [`hash`]: XXH3-64 (the content hash), one-shot and streaming, at the CPU's SIMD level; XXH64.
//! - [`simd`]: which instruction-set build of a kernel runs (SSE2/AVX2/AVX-512, NEON, portable).
//! - [`steps`]: step selections in CANN's `dump_step` syntax (`0|5|10-20`), for every place that takes one.
//! - [`capture`]: accutrace's own capture format (segments, records, manifest): writer and reader.
//! - [`error`]: the error type every reader returns, naming the file, the offset and the problem.

#![warn(missing_docs)]

pub mod capture;
pub mod dtype;
pub mod dump;
pub mod error;
pub mod hash;
pub mod histogram;
pub mod layout;
pub mod msprobe;
pub mod npy;
pub mod simd;
pub mod stats;
pub mod steps;
pub mod tensor;

pub use dtype::DType;
pub use error::{FormatError, Result};
