//! Whether a `.pt` file's storage can be streamed (stored, contiguous, little-endian, a dtype that decodes
//! element by element: what `torch.save` writes), read from its directory and `data.pkl` alone.

use super::super::pickle;
use super::archive::{
    past_the_end, read_entry, read_header, zip_err, Header, WindowedFile, MAX_PICKLE_BYTES,
};
use super::view::{check_view, ViewSpan};
use crate::{FormatError, Result};
use std::path::Path;

/// A `.pt` file opened for streaming ([`plan`]): a stored, contiguous, little-endian storage of a dtype that
/// decodes element by element (what `torch.save` writes), the member's place in the file and its CRC.
#[cfg(unix)]
pub(super) struct Plan {
    pub(super) file: std::fs::File,
    pub(super) h: Header,
    pub(super) span: ViewSpan,
    /// The storage member's first byte in the file, its declared size and CRC-32.
    pub(super) start: u64,
    pub(super) declared: u64,
    pub(super) crc: u32,
}

/// Reads the `.pt` file's directory and `data.pkl` through [`WindowedFile`] and checks its view: `None`
/// where the storage cannot be streamed (read it whole through [`parse_pt`](super::parse_pt) then).
#[cfg(unix)]
pub(super) fn plan(path: &Path) -> Result<Option<Plan>> {
    let file = std::fs::File::open(path).map_err(|e| FormatError::io(path, &e))?;
    let len = file.metadata().map_err(|e| FormatError::io(path, &e))?.len();
    let reader = WindowedFile::new(&file, len).map_err(|e| FormatError::io(path, &e))?;
    let mut zip = zip::ZipArchive::new(reader).map_err(zip_err)?;
    let h = read_header(&mut zip, |zip, name| {
        let (pkl, pkl_start) = read_entry(zip, name, MAX_PICKLE_BYTES)?;
        pickle::load_tensor(&pkl).map_err(|e| e.shifted(pkl_start))
    })?;
    let dtype = h.tensor.storage.dtype;
    let stored = {
        let entry = zip
            .by_name(&h.storage_name)
            .map_err(|e| FormatError::whole(format!("archive entry {}: {e}", h.storage_name)))?;
        let plain = entry.compression() == zip::CompressionMethod::Stored
            && entry.compressed_size() == entry.size()
            && !entry.encrypted();
        plain.then(|| (entry.data_start(), entry.size(), entry.crc32()))
    };
    let span = check_view(&h.tensor, h.storage_bytes, h.elsize)?;
    let decodes_alone = dtype.is_decodable()
        && crate::tensor::lanes_per_element(dtype) == 1
        && dtype.bits() == Some(8 * h.elsize as u32);
    let Some((start, declared, crc)) = stored else {
        return Ok(None);
    };
    if !span.contiguous || (h.big_endian && h.elsize > 1) || !decodes_alone {
        return Ok(None);
    }
    let name = &h.storage_name;
    start.checked_add(declared).filter(|&e| e <= len).ok_or_else(|| past_the_end(start, name, declared))?;
    Ok(Some(Plan { file, h, span, start, declared, crc }))
}
