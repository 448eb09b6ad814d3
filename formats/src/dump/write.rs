//! Writing dump files byte for byte as CANN does, for the simulated runtime and for tests.
//!
//! The header's tensor lists describe the tensors (dtype, format, shapes, provenance); the writer takes the
//! bytes separately, fills in every `size` from them and keeps `data` empty (binary layout) or fills it
//! (old layout). A count mismatch between header and slices is the caller's bug: `InvalidInput`.

use accutrace_proto::dumpdata::DumpData;
use prost::Message;
use std::io::{self, Write};

/// The tensor bytes of one dump file, in the header's order.
struct DumpPayload<'a> {
    inputs: &'a [&'a [u8]],
    outputs: &'a [&'a [u8]],
    buffers: &'a [&'a [u8]],
    workspaces: &'a [&'a [u8]],
}

/// Writes a binary-layout dump file: `u64 LE header_len`, header, then inputs, outputs, buffers, workspaces.
pub fn write_dump(
    out: &mut impl Write,
    header: &DumpData,
    inputs: &[&[u8]],
    outputs: &[&[u8]],
    buffers: &[&[u8]],
    workspaces: &[&[u8]],
) -> io::Result<()> {
    let payload = DumpPayload { inputs, outputs, buffers, workspaces };
    let encoded = binary_header(header, &payload)?.encode_to_vec();
    out.write_all(&(encoded.len() as u64).to_le_bytes())?;
    out.write_all(&encoded)?;
    for bytes in inputs.iter().chain(outputs).chain(buffers).chain(workspaces) {
        out.write_all(bytes)?;
    }
    Ok(())
}

/// [`write_dump`] into a new buffer.
pub fn encode_dump(
    header: &DumpData,
    inputs: &[&[u8]],
    outputs: &[&[u8]],
    buffers: &[&[u8]],
    workspaces: &[&[u8]],
) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    write_dump(&mut out, header, inputs, outputs, buffers, workspaces)?;
    Ok(out)
}

/// An old-layout file: one `DumpData` with every `data` inline and `size` set. Its `version` must not be
/// "2.0", which readers take to mean the binary layout.
pub fn encode_legacy_dump(
    header: &DumpData,
    inputs: &[&[u8]],
    outputs: &[&[u8]],
    buffers: &[&[u8]],
    workspaces: &[&[u8]],
) -> io::Result<Vec<u8>> {
    if header.version == "2.0" {
        return Err(invalid(
            "an old-layout dump cannot have version \"2.0\" (readers take it for binary)".into(),
        ));
    }
    let payload = DumpPayload { inputs, outputs, buffers, workspaces };
    let mut header = binary_header(header, &payload)?;
    header.input.iter_mut().zip(inputs).for_each(|(t, b)| t.data = b.to_vec());
    header.output.iter_mut().zip(outputs).for_each(|(t, b)| t.data = b.to_vec());
    header.buffer.iter_mut().zip(buffers).for_each(|(t, b)| t.data = b.to_vec());
    header.space.iter_mut().zip(workspaces).for_each(|(t, b)| t.data = b.to_vec());
    Ok(header.encode_to_vec())
}

/// The header with sizes set from the payload and `data` cleared.
fn binary_header(header: &DumpData, payload: &DumpPayload<'_>) -> io::Result<DumpData> {
    check_count("input", header.input.len(), payload.inputs.len())?;
    check_count("output", header.output.len(), payload.outputs.len())?;
    check_count("buffer", header.buffer.len(), payload.buffers.len())?;
    check_count("workspace", header.space.len(), payload.workspaces.len())?;
    let mut header = header.clone();
    for (t, b) in header.input.iter_mut().zip(payload.inputs) {
        (t.size, t.data) = (b.len() as u64, Vec::new());
    }
    for (t, b) in header.output.iter_mut().zip(payload.outputs) {
        (t.size, t.data) = (b.len() as u64, Vec::new());
    }
    for (t, b) in header.buffer.iter_mut().zip(payload.buffers) {
        (t.size, t.data) = (b.len() as u64, Vec::new());
    }
    for (t, b) in header.space.iter_mut().zip(payload.workspaces) {
        (t.size, t.data) = (b.len() as u64, Vec::new());
    }
    Ok(header)
}

fn check_count(what: &str, in_header: usize, given: usize) -> io::Result<()> {
    if in_header == given {
        return Ok(());
    }
    Err(invalid(format!("header lists {in_header} {what}s but {given} {what} slices were given")))
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}
