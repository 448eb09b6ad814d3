//! A tensor's view of its storage (offset, size, stride) checked against the storage's real size, and
//! gathered into C order.

use super::super::pickle::PickledTensor;
use crate::{FormatError, Result};
use std::borrow::Cow;

/// A view may repeat storage elements (stride 0, broadcast) but may not produce more than this many
/// times the storage's real bytes: the output size must stay tied to what the archive holds.
const MAX_EXPANSION: u64 = 64;

/// Where a view's elements lie in its storage, after [`check_view`].
pub(super) struct ViewSpan {
    /// Byte offset of the first element.
    pub(super) offset: usize,
    /// Bytes of the view in C order (elements times element size).
    pub(super) bytes: usize,
    /// The elements are one run of storage (no gather needed).
    pub(super) contiguous: bool,
}

/// Checks that every index the view can reach lies inside a storage of `storage_len` bytes and that the
/// view's size is bounded by the storage's (at most [`MAX_EXPANSION`] times).
pub(super) fn check_view(t: &PickledTensor, storage_len: usize, elsize: usize) -> Result<ViewSpan> {
    let storage_elems = (storage_len / elsize) as u64;
    let numel = t
        .size
        .iter()
        .try_fold(1u64, |acc, &s| acc.checked_mul(s))
        .ok_or_else(|| FormatError::whole(format!("tensor size {:?} overflows", t.size)))?;
    if numel == 0 {
        return Ok(ViewSpan { offset: 0, bytes: 0, contiguous: true });
    }
    let mut last = t.storage_offset;
    for (&size, &stride) in t.size.iter().zip(&t.stride) {
        last = (size - 1)
            .checked_mul(stride)
            .and_then(|span| last.checked_add(span))
            .ok_or_else(|| FormatError::whole("tensor view overflows its storage index"))?;
    }
    if last >= storage_elems {
        return Err(FormatError::whole(format!(
            "tensor view (offset {}, size {:?}, stride {:?}) reaches element {last} of a storage of {storage_elems}",
            t.storage_offset, t.size, t.stride
        )));
    }
    let out_bytes =
        numel.checked_mul(elsize as u64).filter(|&b| b <= (storage_len as u64).saturating_mul(MAX_EXPANSION));
    let out_bytes = out_bytes.ok_or_else(|| {
        FormatError::whole(format!(
            "tensor of {numel} elements expands its {storage_len}-byte storage too far"
        ))
    })? as usize;
    Ok(ViewSpan {
        offset: t.storage_offset as usize * elsize,
        bytes: out_bytes,
        contiguous: is_contiguous(&t.size, &t.stride),
    })
}

/// Copies the view's elements in C order. Every index the view can reach is checked to lie inside the
/// storage first, so the loop below cannot go out of bounds and the output size is bounded by the input.
pub(super) fn gather<'a>(t: &PickledTensor, storage: &'a [u8], elsize: usize) -> Result<Cow<'a, [u8]>> {
    let span = check_view(t, storage.len(), elsize)?;
    if span.bytes == 0 {
        return Ok(Cow::Borrowed(&[]));
    }
    if span.contiguous {
        return Ok(Cow::Borrowed(&storage[span.offset..span.offset + span.bytes]));
    }
    let numel = span.bytes / elsize;
    // Odometer over the C-order index: the innermost dimension runs fastest.
    let mut out = Vec::with_capacity(span.bytes);
    let dims = t.size.len();
    let mut idx = vec![0u64; dims];
    let mut pos = t.storage_offset;
    for _ in 0..numel {
        let p = pos as usize * elsize;
        out.extend_from_slice(&storage[p..p + elsize]);
        for d in (0..dims).rev() {
            idx[d] += 1;
            pos += t.stride[d];
            if idx[d] < t.size[d] {
                break;
            }
            pos -= t.stride[d] * t.size[d];
            idx[d] = 0;
        }
    }
    Ok(Cow::Owned(out))
}

/// C-contiguous: strides are the running products of the sizes (dimensions of size 1 may have any stride).
fn is_contiguous(size: &[u64], stride: &[u64]) -> bool {
    let mut expected = 1u64;
    for (&s, &st) in size.iter().zip(stride).rev() {
        if s != 1 && st != expected {
            return false;
        }
        expected = expected.saturating_mul(s);
    }
    true
}
