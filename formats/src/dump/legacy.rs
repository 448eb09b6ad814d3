//! The old dump layout: the whole file is one `DumpData` with tensor bytes inline.
//!
//! prost decodes the header (copying the inline bytes once, transiently); to hand out zero-copy slices we
//! then locate each `data` field in the file with a minimal protobuf wire scanner and check that it agrees
//! with what prost decoded.

use super::file::{clear_data, input_ref, output_ref, DumpFile, DumpLayout};
use crate::error::{FormatError, Result};
use accutrace_proto::dumpdata::DumpData;
use prost::Message;

// Field numbers of docs/CANN.md §1: (repeated field in DumpData, its `data` field).
const INPUT: (u64, u64) = (4, 4);
const OUTPUT: (u64, u64) = (3, 5);
const BUFFER: (u64, u64) = (5, 2);
const SPACE: (u64, u64) = (8, 2);

/// `None` when the bytes are not an old-layout file (do not decode as a whole, or claim version "2.0").
pub(super) fn parse_legacy(bytes: &[u8]) -> Option<Result<DumpFile<'_>>> {
    let mut header = DumpData::decode(bytes).ok()?;
    if header.version == "2.0" {
        return None;
    }
    Some(locate(bytes, &mut header))
}

fn locate<'a>(bytes: &'a [u8], header: &mut DumpData) -> Result<DumpFile<'a>> {
    let unsupported = || {
        FormatError::at(
            0,
            "old-layout dump repeats or splits messages in a way the zero-copy reader does not follow",
        )
    };
    let spans = |field| data_spans(bytes, field).ok_or_else(unsupported);
    let (ins, outs, bufs, spaces) = (spans(INPUT)?, spans(OUTPUT)?, spans(BUFFER)?, spans(SPACE)?);
    let agree = |spans: &[(usize, usize)], lens: Vec<usize>| {
        spans.len() == lens.len() && spans.iter().zip(lens).all(|(s, l)| s.1 - s.0 == l)
    };
    if !agree(&ins, header.input.iter().map(|t| t.data.len()).collect())
        || !agree(&outs, header.output.iter().map(|t| t.data.len()).collect())
        || !agree(&bufs, header.buffer.iter().map(|t| t.data.len()).collect())
        || !agree(&spaces, header.space.iter().map(|t| t.data.len()).collect())
    {
        return Err(unsupported());
    }
    let slice = |(s, e): (usize, usize)| &bytes[s..e];
    let inputs = header
        .input
        .iter()
        .zip(&ins)
        .enumerate()
        .map(|(i, (t, &sp))| input_ref(i, t, slice(sp), sp.0 as u64));
    let inputs = inputs.collect();
    let outputs = header
        .output
        .iter()
        .zip(&outs)
        .enumerate()
        .map(|(i, (t, &sp))| output_ref(i, t, slice(sp), sp.0 as u64));
    let outputs = outputs.collect();
    let buffers = bufs.iter().map(|&sp| slice(sp)).collect();
    let workspaces = spaces.iter().map(|&sp| slice(sp)).collect();
    let mut header = std::mem::take(header);
    clear_data(&mut header);
    Ok(DumpFile { layout: DumpLayout::Legacy, header, inputs, outputs, buffers, workspaces })
}

/// For each occurrence of `field.0` in the top-level message, the byte range of its last `field.1`
/// (protobuf's last-one-wins rule), or an empty range when absent. `None` on wire-format trouble.
fn data_spans(buf: &[u8], field: (u64, u64)) -> Option<Vec<(usize, usize)>> {
    let mut spans = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let outer = next_field(buf, &mut pos)?;
        if outer.number != field.0 {
            continue;
        }
        if outer.wire != 2 {
            return None;
        }
        let mut span = (outer.end, outer.end);
        let mut inner_pos = outer.start;
        while inner_pos < outer.end {
            let inner = next_field(&buf[..outer.end], &mut inner_pos)?;
            if inner.number == field.1 && inner.wire == 2 {
                span = (inner.start, inner.end);
            }
        }
        spans.push(span);
    }
    Some(spans)
}

struct Field {
    number: u64,
    wire: u8,
    /// Payload range (for length-delimited fields, the bytes after the length).
    start: usize,
    end: usize,
}

fn next_field(buf: &[u8], pos: &mut usize) -> Option<Field> {
    let tag = read_varint(buf, pos)?;
    let (number, wire) = (tag >> 3, (tag & 7) as u8);
    let start = *pos;
    let end = match wire {
        0 => {
            read_varint(buf, pos)?;
            *pos
        }
        1 => start.checked_add(8)?,
        2 => {
            let len = usize::try_from(read_varint(buf, pos)?).ok()?;
            let payload = *pos;
            return advance(buf, pos, payload.checked_add(len)?).map(|end| Field {
                number,
                wire,
                start: payload,
                end,
            });
        }
        5 => start.checked_add(4)?,
        _ => return None, // groups: prost only skips them; too rare to follow here
    };
    advance(buf, pos, end).map(|end| Field { number, wire, start, end })
}

fn advance(buf: &[u8], pos: &mut usize, end: usize) -> Option<usize> {
    (end <= buf.len()).then(|| {
        *pos = end;
        end
    })
}

fn read_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *buf.get(*pos)?;
        *pos += 1;
        value |= u64::from(byte & 0x7f).checked_shl(shift).unwrap_or(0);
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}
