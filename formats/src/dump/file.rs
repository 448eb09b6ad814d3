//! Reading one CANN dump file without copying tensor bytes.
//!
//! Two layouts exist (docs/CANN.md §1). The binary layout is `u64 LE header_len`, a `DumpData` header whose
//! `data` fields are empty, then the raw bytes of inputs, outputs, buffers and workspaces in that order.
//! The old layout is one `DumpData` with the bytes inline. [`parse_dump`] tries the binary layout first:
//! its size equation is a strong check, and a binary file almost never decodes as a whole protobuf (the
//! zero high bytes of `header_len` are invalid tags), so the order only matters for corrupt input.

use super::legacy;
use crate::dtype::DType;
use crate::error::{FormatError, Result, ResultExt};
use accutrace_proto::dumpdata::{DumpData, OpInput, OpOutput, OriginalOp, Shape};
use memmap2::Mmap;
use prost::Message;
use std::borrow::Cow;
use std::fs::File;
use std::path::{Path, PathBuf};

/// Which of the two on-disk layouts a file uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DumpLayout {
    /// Length-prefixed header, raw bytes after it (the current default).
    Binary,
    /// One protobuf message with the bytes inline (older CANN versions).
    Legacy,
}

/// Whether a tensor is an input or an output of its op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Io {
    /// An input of the op.
    Input,
    /// An output of the op.
    Output,
}

impl Io {
    /// `"input"` or `"output"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Io::Input => "input",
            Io::Output => "output",
        }
    }
}

/// One input or output tensor of a dump file; `bytes` borrows the caller's buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct DumpTensor<'a> {
    /// Input or output.
    pub io: Io,
    /// Position among the op's inputs (or outputs).
    pub index: usize,
    /// The element type.
    pub dtype: DType,
    /// `OutputFormat` code; open enum, see [`format_name`].
    pub format: i32,
    /// Shape as laid out on the device (padded, blocked).
    pub device_shape: Vec<u64>,
    /// Host shape before device padding; empty when the header has none.
    pub original_shape: Vec<u64>,
    /// Groups of a grouped FRACTAL_Z, else 0.
    pub sub_format: i32,
    /// Fusion provenance (outputs only).
    pub original_op: Option<OriginalOp>,
    /// The tensor's position among the kernel's arguments (`arg_index`): set by the runtime's exception
    /// dump, which skips tensors without an address, so there `index` is not the op's own position. 0 when
    /// the header has none (ordinary dumps, older runtimes), which proto3 cannot tell from argument 0.
    pub arg_index: u32,
    /// The tensor's bytes, as the device wrote them.
    pub bytes: &'a [u8],
    /// Where `bytes` starts in the file.
    pub offset: u64,
}

/// A parsed dump file. `header` keeps every field except the (emptied) `data` fields.
#[derive(Clone, Debug, PartialEq)]
pub struct DumpFile<'a> {
    /// Which of the two file layouts the file has.
    pub layout: DumpLayout,
    /// The `DumpData` header (tensor `data` fields emptied).
    pub header: DumpData,
    /// The op's inputs, in order.
    pub inputs: Vec<DumpTensor<'a>>,
    /// The op's outputs, in order.
    pub outputs: Vec<DumpTensor<'a>>,
    /// Opaque buffers the op dumped (`DumpData.buffer`).
    pub buffers: Vec<&'a [u8]>,
    /// The op's workspaces (`DumpData.space`).
    pub workspaces: Vec<&'a [u8]>,
}

impl<'a> DumpFile<'a> {
    /// The op's real (unsanitized) name.
    pub fn op_name(&self) -> &str {
        &self.header.op_name
    }

    /// The tensor `io[index]`, if present.
    pub fn tensor(&self, io: Io, index: usize) -> Option<&DumpTensor<'a>> {
        match io {
            Io::Input => self.inputs.get(index),
            Io::Output => self.outputs.get(index),
        }
    }
}

/// Short name of an `OutputFormat` code without the `FORMAT_` prefix (`ND`, `FRACTAL_NZ`), or `UNKNOWN(n)`.
pub fn format_name(code: i32) -> Cow<'static, str> {
    crate::layout::Format::from_code(code).name()
}

/// Parses a dump file of either layout. Tensor bytes borrow `bytes`.
pub fn parse_dump(bytes: &[u8]) -> Result<DumpFile<'_>> {
    if bytes.len() <= 8 {
        return Err(FormatError::at(
            0,
            format!(
                "file is {} bytes; a dump file holds an 8-byte header length and then a header",
                bytes.len()
            ),
        ));
    }
    match parse_binary(bytes) {
        Ok(file) => Ok(file),
        Err(binary) => match legacy::parse_legacy(bytes) {
            Some(result) => result,
            None => Err(binary),
        },
    }
}

/// A read-only memory map of a dump file; errors name the path. Empty files are not mapped.
#[derive(Debug)]
pub struct MappedFile {
    path: PathBuf,
    map: Option<Mmap>,
}

impl MappedFile {
    /// Opens and maps `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<MappedFile> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| FormatError::io(path, &e))?;
        let len = file.metadata().map_err(|e| FormatError::io(path, &e))?.len();
        // Mapping zero bytes fails on some platforms, and there is nothing to map anyway.
        let map =
            if len == 0 { None } else { Some(map_read_only(&file).map_err(|e| FormatError::io(path, &e))?) };
        Ok(MappedFile { path: path.to_path_buf(), map })
    }

    /// The file's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's bytes (empty for an empty file).
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

fn map_read_only(file: &File) -> std::io::Result<Mmap> {
    // SAFETY: the map is read-only and lives in `MappedFile`, so slices of it never outlive it. What
    // memmap2 cannot rule out is another process changing the file while it is mapped: we assume, as
    // every memmap2-based reader does, that dump files are complete and no longer written when read
    // (CANN writes each file once and closes it). If that is broken, truncation can raise SIGBUS and
    // rewritten bytes can change under the parser; the parsers check every length against the slice
    // they hold, so they never index out of bounds because of it.
    unsafe { Mmap::map(file) }
}

/// [`parse_dump`] on a mapped file, with the file's path attached to any error.
pub fn parse_dump_file(map: &MappedFile) -> Result<DumpFile<'_>> {
    parse_dump(map.bytes()).in_file(map.path())
}

fn parse_binary(bytes: &[u8]) -> Result<DumpFile<'_>> {
    let file_len = bytes.len() as u64;
    let mut len_field = [0u8; 8];
    len_field.copy_from_slice(&bytes[..8]);
    let header_len = u64::from_le_bytes(len_field);
    let after_len = file_len - 8;
    if header_len > after_len {
        let mut problem =
            format!("header length {header_len} exceeds the {after_len} bytes that follow the length field");
        // The first 8 bytes are not a plausible length: tell why the old layout was not taken either.
        if let Err(e) = DumpData::decode(bytes) {
            problem.push_str(&format!(" (nor is the file an old-layout DumpData: {e})"));
        }
        return Err(FormatError::at(0, problem));
    }
    let header_end = 8 + header_len as usize;
    let (mut header, sizes, total) = decode_header(&bytes[8..header_end])?;
    let follow = after_len - header_len;
    if total != follow {
        return Err(FormatError::at(
            8 + header_len,
            format!(
                "header declares {} tensors totalling {total} bytes but {follow} bytes follow the header",
                sizes.len()
            ),
        ));
    }

    // The sum matched the remaining length, so every slice below is in bounds; `take` still checks.
    let mut cursor = header_end;
    let mut take = |size: u64| -> Result<(&[u8], u64)> {
        let start = cursor;
        let end = usize::try_from(size).ok().and_then(|s| start.checked_add(s)).filter(|&e| e <= bytes.len());
        let end = end.ok_or_else(|| FormatError::at(start as u64, "tensor runs past the end of the file"))?;
        cursor = end;
        Ok((&bytes[start..end], start as u64))
    };
    let mut inputs = Vec::with_capacity(header.input.len());
    for (index, input) in header.input.iter().enumerate() {
        let (data, offset) = take(input.size)?;
        inputs.push(input_ref(index, input, data, offset));
    }
    let mut outputs = Vec::with_capacity(header.output.len());
    for (index, output) in header.output.iter().enumerate() {
        let (data, offset) = take(output.size)?;
        outputs.push(output_ref(index, output, data, offset));
    }
    let mut buffers = Vec::with_capacity(header.buffer.len());
    for buffer in &header.buffer {
        buffers.push(take(buffer.size)?.0);
    }
    let mut workspaces = Vec::with_capacity(header.space.len());
    for space in &header.space {
        workspaces.push(take(space.size)?.0);
    }
    clear_data(&mut header);
    Ok(DumpFile { layout: DumpLayout::Binary, header, inputs, outputs, buffers, workspaces })
}

/// The `DumpData` header of a binary-layout file (the bytes after the length field), every declared
/// (kind, index, size) in file order, and the sum of the sizes.
#[allow(clippy::type_complexity)]
fn decode_header(bytes: &[u8]) -> Result<(DumpData, Vec<(&'static str, usize, u64)>, u64)> {
    let header_len = bytes.len();
    let header = DumpData::decode(bytes)
        .map_err(|e| FormatError::at(8, format!("malformed DumpData header ({header_len} bytes): {e}")))?;
    let sizes = declared_sizes(&header)?;
    let total = sizes.iter().try_fold(0u64, |sum, &(kind, i, size)| {
        sum.checked_add(size).ok_or_else(|| {
            FormatError::at(8, format!("tensor sizes overflow a 64-bit sum at {kind}[{i}] (size {size})"))
        })
    })?;
    Ok((header, sizes, total))
}

/// What a binary-layout dump file's first bytes say of the whole file: its header and its tensors' places.
/// For a reader that gets a file in pieces and never holds it whole (the collector's statistics mode):
/// a file of exactly [`file_len`](Self::file_len) bytes that starts with these bytes is what
/// [`parse_dump`] reads as this header and these tensors, with the tensors' bytes at their offsets.
#[derive(Clone, Debug, PartialEq)]
pub struct BinaryHeader {
    /// The `DumpData` header (tensor `data` fields emptied).
    pub header: DumpData,
    /// The op's inputs, in order; `bytes` is empty and `offset` is where the tensor's bytes start.
    pub inputs: Vec<DumpTensor<'static>>,
    /// The op's outputs, in order, like `inputs`.
    pub outputs: Vec<DumpTensor<'static>>,
    /// The file's length as the header declares it: length field, header, then every input, output,
    /// buffer and workspace.
    pub file_len: u64,
}

impl BinaryHeader {
    /// The header of a binary-layout file from its first bytes: `Ok(None)` while `prefix` is shorter than
    /// the length field and the header it announces; an error where [`parse_dump`] would refuse the
    /// binary layout for any file beginning with `prefix` (the header does not decode, carries inline
    /// data, or its sizes overflow). A file whose first 8 bytes announce a header longer than the file (an
    /// old-layout file) only ever gives `Ok(None)`: the caller that reaches the file's end without a header
    /// has the whole file, for [`parse_dump`].
    pub fn parse(prefix: &[u8]) -> Result<Option<BinaryHeader>> {
        let Some(len_field) = prefix.first_chunk::<8>() else { return Ok(None) };
        let header_len = u64::from_le_bytes(*len_field);
        let Some(header_bytes) =
            usize::try_from(header_len).ok().and_then(|n| prefix.get(8..8usize.checked_add(n)?))
        else {
            return Ok(None);
        };
        let (mut header, _, total) = decode_header(header_bytes)?;
        let header_end = 8 + header_len;
        let file_len = header_end.checked_add(total).ok_or_else(|| {
            FormatError::at(
                8,
                format!("the header ({header_len} bytes) and its tensors ({total} bytes) overflow"),
            )
        })?;
        let mut offset = header_end;
        let mut place = |size: u64| {
            let at = offset;
            offset += size; // no overflow: the sum of every size plus header_end is file_len
            at
        };
        let inputs =
            header.input.iter().enumerate().map(|(i, t)| input_ref(i, t, &[], place(t.size))).collect();
        let outputs =
            header.output.iter().enumerate().map(|(i, t)| output_ref(i, t, &[], place(t.size))).collect();
        clear_data(&mut header);
        Ok(Some(BinaryHeader { header, inputs, outputs, file_len }))
    }

    /// The size of input or output `t` (its bytes end at `t.offset` plus this).
    pub fn size(&self, t: &DumpTensor<'_>) -> u64 {
        let sizes = match t.io {
            Io::Input => self.header.input.get(t.index).map(|x| x.size),
            Io::Output => self.header.output.get(t.index).map(|x| x.size),
        };
        sizes.unwrap_or(0)
    }
}

/// Every (kind, index, size) in file order; refuses inline data, which the binary layout never carries.
fn declared_sizes(header: &DumpData) -> Result<Vec<(&'static str, usize, u64)>> {
    let inputs = header.input.iter().enumerate().map(|(i, t)| ("input", i, t.size, t.data.len()));
    let outputs = header.output.iter().enumerate().map(|(i, t)| ("output", i, t.size, t.data.len()));
    let buffers = header.buffer.iter().enumerate().map(|(i, t)| ("buffer", i, t.size, t.data.len()));
    let spaces = header.space.iter().enumerate().map(|(i, t)| ("workspace", i, t.size, t.data.len()));
    let mut sizes = Vec::new();
    for (kind, i, size, inline) in inputs.chain(outputs).chain(buffers).chain(spaces) {
        if inline != 0 {
            return Err(FormatError::at(
                8,
                format!("{kind}[{i}] carries {inline} inline bytes, but the binary layout keeps every data field empty"),
            ));
        }
        sizes.push((kind, i, size));
    }
    Ok(sizes)
}

pub(super) fn clear_data(header: &mut DumpData) {
    header.input.iter_mut().for_each(|t| t.data = Vec::new());
    header.output.iter_mut().for_each(|t| t.data = Vec::new());
    header.buffer.iter_mut().for_each(|t| t.data = Vec::new());
    header.space.iter_mut().for_each(|t| t.data = Vec::new());
}

fn dims(shape: &Option<Shape>) -> Vec<u64> {
    shape.as_ref().map(|s| s.dim.clone()).unwrap_or_default()
}

pub(super) fn input_ref<'a>(index: usize, t: &OpInput, bytes: &'a [u8], offset: u64) -> DumpTensor<'a> {
    DumpTensor {
        io: Io::Input,
        index,
        dtype: DType::from_code(t.data_type),
        format: t.format,
        device_shape: dims(&t.shape),
        original_shape: dims(&t.original_shape),
        sub_format: t.sub_format,
        original_op: None,
        arg_index: t.arg_index,
        bytes,
        offset,
    }
}

pub(super) fn output_ref<'a>(index: usize, t: &OpOutput, bytes: &'a [u8], offset: u64) -> DumpTensor<'a> {
    DumpTensor {
        io: Io::Output,
        index,
        dtype: DType::from_code(t.data_type),
        format: t.format,
        device_shape: dims(&t.shape),
        original_shape: dims(&t.original_shape),
        sub_format: t.sub_format,
        original_op: t.original_op.clone(),
        arg_index: t.arg_index,
        bytes,
        offset,
    }
}
