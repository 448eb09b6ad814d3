//! PyTorch `.pt` files (`torch.save` of one tensor), read without Python.
//!
//! The file is a zip archive: `{prefix}/data.pkl` (a pickle describing the tensor), `{prefix}/data/{key}`
//! (raw storage bytes), `{prefix}/byteorder` (`little`/`big`, absent in old files = little) and version
//! files. The pickle runs in [`super::pickle`]'s safe interpreter; the view it describes (offset, size,
//! stride) is checked against the storage's real size before anything is allocated, gathered into C order
//! and decoded by the shared `accutrace_formats::tensor` decoders.

use super::pickle::{self, TensorRef};
use accutrace_formats::dump::MappedFile;
use accutrace_formats::{DType, FormatError, Result};
use std::borrow::Cow;
use std::io::{Cursor, Read, Seek};
use std::path::Path;

/// Largest `data.pkl` accepted: tensor pickles are a few hundred bytes.
const MAX_PICKLE_BYTES: u64 = 16 << 20;
/// A view may repeat storage elements (stride 0, broadcast) but may not produce more than this many
/// times the storage's real bytes: the output size must stay tied to what the archive holds.
const MAX_EXPANSION: u64 = 64;

/// A tensor read from a `.pt` file: dtype, shape and its elements in C order as little-endian bytes.
#[derive(Debug)]
pub struct RawTensor {
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub bytes: Vec<u8>,
}

impl RawTensor {
    pub fn elements(&self) -> usize {
        self.shape.iter().product::<u64>() as usize
    }
}

/// A tensor of a `.pt` archive held in memory: its bytes (C order, little-endian) are borrowed from the
/// archive where they can be (a stored, contiguous, little-endian storage: what `torch.save` writes).
#[derive(Debug)]
pub struct PtTensor<'a> {
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub bytes: Cow<'a, [u8]>,
}

impl PtTensor<'_> {
    pub fn elements(&self) -> usize {
        self.shape.iter().product::<u64>() as usize
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

/// Maps the `.pt` file at `path` and hands its tensor to `f` without copying the storage out of the map
/// (see [`PtTensor`]); errors name the file.
pub fn with_pt_file<R>(path: &Path, f: impl FnOnce(&PtTensor<'_>) -> Result<R>) -> Result<R> {
    let map = MappedFile::open(path)?;
    let tensor = parse_pt(map.bytes()).map_err(|e| e.in_file(path))?;
    f(&tensor).map_err(|e| e.in_file(path))
}

/// Reads a `.pt` archive from memory (the fuzz target's entry point).
pub fn read_pt_bytes(bytes: &[u8]) -> Result<RawTensor> {
    parse_pt(bytes).map(PtTensor::into_raw)
}

fn zip_err(e: zip::result::ZipError) -> FormatError {
    FormatError::whole(format!("not a readable torch.save zip archive: {e}"))
}

/// Reads one archive entry completely through the zip reader (decompressing, checking the CRC), checking
/// that it holds exactly the size its header claims and never reserving more than `limit` bytes up front.
fn read_entry<R: Read + Seek>(
    zip: &mut zip::ZipArchive<R>,
    name: &str,
    limit: u64,
) -> Result<(Vec<u8>, u64)> {
    let entry = zip.by_name(name).map_err(|e| FormatError::whole(format!("archive entry {name}: {e}")))?;
    let start = entry.data_start();
    let declared = entry.size();
    if declared > limit {
        return Err(FormatError::at(
            start,
            format!("archive entry {name} declares {declared} bytes, limit {limit}"),
        ));
    }
    let mut buf = Vec::new();
    entry
        .take(declared.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| FormatError::at(start, format!("archive entry {name}: {e}")))?;
    if buf.len() as u64 != declared {
        return Err(FormatError::at(
            start,
            format!("archive entry {name} holds {} bytes, its header says {declared}", buf.len()),
        ));
    }
    Ok((buf, start))
}

/// One archive entry's bytes: a stored (uncompressed) member, which is what `torch.save` writes, is a
/// slice of `archive` itself, bounds- and CRC-checked like the zip reader would; anything else is read
/// through [`read_entry`].
fn entry_bytes<'a>(
    zip: &mut zip::ZipArchive<Cursor<&'a [u8]>>,
    archive: &'a [u8],
    name: &str,
    limit: u64,
) -> Result<(Cow<'a, [u8]>, u64)> {
    let stored = {
        let entry =
            zip.by_name(name).map_err(|e| FormatError::whole(format!("archive entry {name}: {e}")))?;
        let (start, declared) = (entry.data_start(), entry.size());
        let plain = entry.compression() == zip::CompressionMethod::Stored
            && entry.compressed_size() == declared
            && !entry.encrypted();
        plain.then_some((start, declared, entry.crc32()))
    };
    let Some((start, declared, crc)) = stored else {
        return read_entry(zip, name, limit).map(|(b, start)| (Cow::Owned(b), start));
    };
    if declared > limit {
        return Err(FormatError::at(
            start,
            format!("archive entry {name} declares {declared} bytes, limit {limit}"),
        ));
    }
    let range = usize::try_from(start)
        .ok()
        .zip(usize::try_from(declared).ok())
        .and_then(|(s, n)| Some(s..s.checked_add(n)?))
        .filter(|r| r.end <= archive.len());
    let Some(range) = range else {
        return Err(FormatError::at(
            start,
            format!("archive entry {name} declares {declared} bytes past the end of the archive"),
        ));
    };
    let bytes = &archive[range];
    if crc32fast::hash(bytes) != crc {
        return Err(FormatError::at(start, format!("archive entry {name}: checksum mismatch")));
    }
    Ok((Cow::Borrowed(bytes), start))
}

/// Parses a `.pt` archive held in memory.
pub fn parse_pt(archive: &[u8]) -> Result<PtTensor<'_>> {
    let mut zip = zip::ZipArchive::new(Cursor::new(archive)).map_err(zip_err)?;
    let pkl_name = zip
        .file_names()
        .filter(|n| n.ends_with("data.pkl") && n.matches('/').count() <= 1)
        .min_by_key(|n| n.len())
        .map(str::to_owned)
        .ok_or_else(|| FormatError::whole("archive has no data.pkl: not a torch.save file"))?;
    let prefix = pkl_name.strip_suffix("data.pkl").unwrap_or_default().to_owned();
    let (pkl, pkl_start) = entry_bytes(&mut zip, archive, &pkl_name, MAX_PICKLE_BYTES)?;
    let tensor = pickle::load_tensor(&pkl).map_err(|e| e.shifted(pkl_start))?;

    let big_endian = match zip.by_name(&format!("{prefix}byteorder")) {
        Ok(mut f) => {
            let mut s = String::new();
            f.by_ref()
                .take(16)
                .read_to_string(&mut s)
                .map_err(|e| FormatError::whole(format!("byteorder: {e}")))?;
            match s.trim() {
                "little" => false,
                "big" => true,
                other => return Err(FormatError::whole(format!("byteorder is {other:?}, not little/big"))),
            }
        }
        Err(_) => false,
    };

    let elsize =
        tensor.storage.dtype.bits().map(|b| u64::from(b / 8)).filter(|&b| b > 0).ok_or_else(|| {
            FormatError::whole(format!("storage {} has no byte width", tensor.storage.class))
        })?;
    let storage_name = format!("{prefix}data/{}", tensor.storage.key);
    let storage_limit = {
        let entry =
            zip.by_name(&storage_name).map_err(|e| FormatError::whole(format!("{storage_name}: {e}")))?;
        entry.size()
    };
    let storage_bytes =
        tensor.storage.numel.checked_mul(elsize).filter(|&b| b <= storage_limit).ok_or_else(|| {
            FormatError::whole(format!(
                "{} of {} elements does not fit in {storage_name} ({storage_limit} bytes)",
                tensor.storage.class, tensor.storage.numel
            ))
        })? as usize;
    let (storage, _) = entry_bytes(&mut zip, archive, &storage_name, storage_limit)?;
    let mut bytes = match storage {
        Cow::Borrowed(s) => gather(&tensor, &s[..storage_bytes], elsize as usize)?,
        Cow::Owned(s) => Cow::Owned(gather(&tensor, &s[..storage_bytes], elsize as usize)?.into_owned()),
    };
    if big_endian && elsize > 1 {
        for el in bytes.to_mut().chunks_exact_mut(elsize as usize) {
            el.reverse();
        }
    }
    Ok(PtTensor { dtype: tensor.storage.dtype, shape: tensor.size, bytes })
}

/// Copies the view's elements in C order. Every index the view can reach is checked to lie inside the
/// storage first, so the loop below cannot go out of bounds and the output size is bounded by the input.
fn gather<'a>(t: &TensorRef, storage: &'a [u8], elsize: usize) -> Result<Cow<'a, [u8]>> {
    let storage_elems = (storage.len() / elsize) as u64;
    let numel = t
        .size
        .iter()
        .try_fold(1u64, |acc, &s| acc.checked_mul(s))
        .ok_or_else(|| FormatError::whole(format!("tensor size {:?} overflows", t.size)))?;
    if numel == 0 {
        return Ok(Cow::Borrowed(&[]));
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
    let out_bytes = numel
        .checked_mul(elsize as u64)
        .filter(|&b| b <= (storage.len() as u64).saturating_mul(MAX_EXPANSION));
    let out_bytes = out_bytes.ok_or_else(|| {
        FormatError::whole(format!(
            "tensor of {numel} elements expands its {}-byte storage too far",
            storage.len()
        ))
    })? as usize;

    let offset = t.storage_offset as usize;
    if is_contiguous(&t.size, &t.stride) {
        return Ok(Cow::Borrowed(&storage[offset * elsize..offset * elsize + out_bytes]));
    }
    // Odometer over the C-order index: the innermost dimension runs fastest.
    let mut out = Vec::with_capacity(out_bytes);
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

#[cfg(test)]
mod tests {
    use super::pickle::StorageRef;
    use super::*;

    fn view(size: &[u64], stride: &[u64], offset: u64) -> TensorRef {
        TensorRef {
            storage: StorageRef {
                dtype: DType::INT8,
                class: "CharStorage".into(),
                key: "0".into(),
                numel: 12,
            },
            storage_offset: offset,
            size: size.to_vec(),
            stride: stride.to_vec(),
        }
    }

    #[test]
    fn gathers_strided_views_in_c_order() {
        let storage: Vec<u8> = (0..12).collect();
        // A transposed 3x4 (stored 4x3): element [i][j] lives at j*3 + i.
        let got = gather(&view(&[3, 4], &[1, 3], 0), &storage, 1).unwrap();
        assert_eq!(got, vec![0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11]);
        let got = gather(&view(&[2, 2], &[4, 1], 5), &storage, 1).unwrap();
        assert_eq!(got, vec![5, 6, 9, 10]);
        let got = gather(&view(&[3], &[0], 2), &storage, 1).unwrap();
        assert_eq!(got, vec![2, 2, 2]);
        assert_eq!(gather(&view(&[0, 5], &[5, 1], 0), &storage, 1).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn refuses_views_outside_the_storage() {
        let storage: Vec<u8> = (0..12).collect();
        assert!(gather(&view(&[4, 4], &[4, 1], 0), &storage, 1).is_err());
        assert!(gather(&view(&[2], &[u64::MAX], 0), &storage, 1).is_err());
        assert!(gather(&view(&[u64::MAX, u64::MAX], &[0, 0], 0), &storage, 1).is_err());
        // Stride 0 may repeat, but not beyond MAX_EXPANSION times the storage.
        assert!(gather(&view(&[1 << 20], &[0], 0), &storage, 1).is_err());
    }
}
