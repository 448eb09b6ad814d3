//! The `.pt` archive held in memory: its members lent from it where they are stored (what `torch.save`
//! writes), the view gathered into C order.

use super::super::pickle;
use super::archive::{entry_bytes, read_header, zip_err, MAX_PICKLE_BYTES};
use super::view::gather;
use crate::dump::MappedFile;
use crate::{DType, Result};
use std::borrow::Cow;
use std::io::Cursor;
use std::path::Path;

/// A tensor read from a `.pt` file: dtype, shape and its elements in C order as little-endian bytes.
#[derive(Debug)]
pub struct RawTensor {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<u64>,
    /// Elements in C order, little-endian.
    pub bytes: Vec<u8>,
}

impl RawTensor {
    /// Number of elements (the product of the shape), checked: the shape comes from the file.
    pub fn elements(&self) -> Result<usize> {
        crate::tensor::element_count_usize(&self.shape)
    }
}

/// A tensor of a `.pt` archive held in memory: its bytes (C order, little-endian) are borrowed from the
/// archive where they can be (a stored, contiguous, little-endian storage: what `torch.save` writes).
#[derive(Debug)]
pub struct PtTensor<'a> {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<u64>,
    /// Elements in C order, little-endian.
    pub bytes: Cow<'a, [u8]>,
}

impl PtTensor<'_> {
    /// Number of elements (the product of the shape), checked: the shape comes from the file.
    pub fn elements(&self) -> Result<usize> {
        crate::tensor::element_count_usize(&self.shape)
    }

    fn into_raw(self) -> RawTensor {
        RawTensor { dtype: self.dtype, shape: self.shape, bytes: self.bytes.into_owned() }
    }
}

/// Reads the `.pt` file at `path`; every error names the file and, where known, the byte offset.
pub fn read_pt_file(path: &Path) -> Result<RawTensor> {
    let map = MappedFile::open(path)?;
    parse_pt(map.bytes()).map(PtTensor::into_raw).map_err(|e| e.in_file(path))
}

/// Reads a `.pt` archive from memory (the fuzz target's entry point).
pub fn read_pt_bytes(bytes: &[u8]) -> Result<RawTensor> {
    parse_pt(bytes).map(PtTensor::into_raw)
}

/// Parses a `.pt` archive held in memory.
pub fn parse_pt(archive: &[u8]) -> Result<PtTensor<'_>> {
    let mut zip = zip::ZipArchive::new(Cursor::new(archive)).map_err(zip_err)?;
    let h = read_header(&mut zip, |zip, name| {
        let (pkl, pkl_start) = entry_bytes(zip, archive, name, MAX_PICKLE_BYTES)?;
        pickle::load_tensor(&pkl).map_err(|e| e.shifted(pkl_start))
    })?;
    let (storage, _) = entry_bytes(&mut zip, archive, &h.storage_name, h.storage_limit)?;
    let (tensor, elsize) = (&h.tensor, h.elsize);
    let mut bytes = match storage {
        Cow::Borrowed(s) => gather(tensor, &s[..h.storage_bytes], elsize)?,
        Cow::Owned(s) => Cow::Owned(gather(tensor, &s[..h.storage_bytes], elsize)?.into_owned()),
    };
    if h.big_endian && elsize > 1 {
        for el in bytes.to_mut().chunks_exact_mut(elsize) {
            el.reverse();
        }
    }
    Ok(PtTensor { dtype: h.tensor.storage.dtype, shape: h.tensor.size, bytes })
}
