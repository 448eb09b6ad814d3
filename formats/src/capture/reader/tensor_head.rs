//! Two fields of a tensor record's head, read without decoding the record ([`TensorHead`]): what a walk
//! that passes tensor records over ([`Records::passing_tensors`](super::Records::passing_tensors)) may still
//! ask of each, at a few bytes' cost (a census of a long capture, #18).

use super::OpInfo;
use crate::dump::Io;
use std::sync::Arc;

/// Of a tensor record passed over: its op, whether it is an input or an output, and the op name its
/// `original_op` gives (as [`TensorMeta`](crate::capture::record::TensorMeta) has them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorHead {
    /// The op record before it, whose tensor it is.
    pub op: Arc<OpInfo>,
    /// Input or output.
    pub io: Io,
    /// The name of the op it stands for after fusion, where the record gives one.
    pub original_op: Option<Arc<str>>,
}

/// The `io` and `original_op` fields (1 and 8) of an encoded `TensorRecord`, the last of each taking
/// effect as a full decode takes it (both 0 when absent); `None` where the bytes are not a message this
/// scan can walk (a full decode says what is wrong).
pub(super) fn io_and_original_op(mut head: &[u8]) -> Option<(u64, u64)> {
    let (mut io, mut original_op) = (0, 0);
    while !head.is_empty() {
        let key = varint(&mut head)?;
        let skip = match (key >> 3, key & 7) {
            (1, 0) => {
                io = varint(&mut head)?;
                0
            }
            (8, 0) => {
                original_op = varint(&mut head)?;
                0
            }
            (1 | 8, _) => return None,
            (_, 0) => {
                varint(&mut head)?;
                0
            }
            (_, 1) => 8,
            (_, 2) => usize::try_from(varint(&mut head)?).ok()?,
            (_, 5) => 4,
            _ => return None,
        };
        head = head.get(skip..)?;
    }
    Some((io, original_op))
}

/// A protobuf varint taken from the front of `bytes`.
fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7F) << (7 * i);
        if b < 0x80 {
            *bytes = &bytes[i + 1..];
            return Some(value);
        }
    }
    None
}

/// The record's `io` field as a full decode reads it: only OUTPUT is an output.
pub(super) fn io_of(code: u64) -> Io {
    if code as i32 == accutrace_proto::capture::Io::Output as i32 {
        Io::Output
    } else {
        Io::Input
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accutrace_proto::capture as pb;
    use prost::Message;

    /// The scan reads what prost decodes, of records with every field set, none, and repeated ones.
    #[test]
    fn the_scan_reads_what_a_decode_reads() {
        let full = pb::TensorRecord {
            io: pb::Io::Output as i32,
            index: 3,
            dtype: 1,
            format: 29,
            sub_format: 2,
            device_shape: vec![1, 4, 16, 16],
            original_shape: Some(pb::Shape { dim: vec![64, 16] }),
            original_op: 300,
            original_output_index: 1,
            stats: Some(pb::Stats { count: 9, min: -1.5, ..Default::default() }),
            content_hash: u64::MAX,
            data_size: 1 << 40,
            encoding: 1,
            shuffle_width: 2,
            histogram: Some(pb::Histogram { lowest: -3, negative: vec![1, 2], positive: vec![3] }),
        };
        // A negative code takes ten bytes.
        let negative = pb::TensorRecord { io: -1, original_op: 1, ..Default::default() };
        for record in [full, pb::TensorRecord::default(), negative] {
            let bytes = record.encode_to_vec();
            let decoded = pb::TensorRecord::decode(bytes.as_slice()).unwrap();
            let want = (decoded.io as u64, u64::from(decoded.original_op));
            assert_eq!(io_and_original_op(&bytes), Some(want));
        }
        // Fields again later in the message: the last one counts, as in a decode.
        let mut twice = pb::TensorRecord { io: 1, original_op: 5, ..Default::default() }.encode_to_vec();
        twice.extend(pb::TensorRecord { original_op: 7, ..Default::default() }.encode_to_vec());
        assert_eq!(pb::TensorRecord::decode(twice.as_slice()).unwrap().original_op, 7);
        assert_eq!(io_and_original_op(&twice), Some((1, 7)));
        assert_eq!(io_of(1), Io::Output);
        assert_eq!(io_of(0), Io::Input);
    }

    /// Bytes cut short or of a wire type the fields cannot have give no answer rather than a wrong one.
    #[test]
    fn a_head_it_cannot_walk_says_so() {
        let bytes = pb::TensorRecord { io: 1, original_op: 300, ..Default::default() }.encode_to_vec();
        assert_eq!(io_and_original_op(&bytes[..bytes.len() - 1]), None);
        // Field 8 as a length-delimited field.
        assert_eq!(io_and_original_op(&[0x42, 0x01, 0x00]), None);
        // A length past the end.
        assert_eq!(io_and_original_op(&[0x3A, 0x05, 0x00]), None);
    }
}
