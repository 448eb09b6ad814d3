//! PyTorch `.pt` files (`torch.save` of one tensor), read without Python.
//!
//! The file is a zip archive: `{prefix}/data.pkl` (a pickle describing the tensor), `{prefix}/data/{key}`
//! (raw storage bytes), `{prefix}/byteorder` (`little`/`big`, absent in old files = little) and version
//! files. The pickle runs in [`super::pickle`]'s safe interpreter; the view it describes (offset, size,
//! stride) is checked against the storage's real size before anything is allocated (`view.rs`), gathered
//! into C order and decoded by the shared `crate::tensor` decoders.
//!
//! Three ways in, one file each, over the archive's members (`archive.rs`):
//! - [`read_pt_file`] / [`parse_pt`] hold the whole archive in memory (a map or the fuzz target's bytes)
//!   (`whole.rs`);
//! - [`stream_pt_file`], what `compare` uses, streams a stored storage member through a small per-thread
//!   buffer, checking its CRC-32 and decoding it chunk by chunk into the caller's buffer (`stream.rs`);
//! - [`PtBlocks`] hands the tensor's bytes out block by block from positioned reads (`blocks.rs`).

mod archive;
#[cfg(unix)]
mod blocks;
#[cfg(unix)]
mod plan;
mod stream;
mod view;
mod whole;

#[cfg(unix)]
pub use blocks::{open_pt_blocks, streamed_dtype, PtBlocks, PT_BLOCKS_BUFFER_BYTES};
pub use stream::{stream_pt_file, stream_pt_file_hash};
pub use whole::{parse_pt, read_pt_bytes, read_pt_file, PtTensor, RawTensor};

#[cfg(test)]
mod tests;
