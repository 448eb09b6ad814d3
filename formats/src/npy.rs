//! NumPy `.npy` files (format versions 1.0, 2.0 and 3.0): a zero-copy reader over a byte slice (the caller
//! memory-maps the file) and a writer.
//!
//! Layout: magic `\x93NUMPY`, major and minor version bytes, the header length (u16 LE in 1.0, u32 LE in
//! 2.0/3.0), the header (an ASCII or, in 3.0, UTF-8 Python dict literal with `descr`, `fortran_order` and
//! `shape`, padded with spaces and ending in `\n`), then the raw array bytes.

mod header;

use crate::tensor::{decode_f32, decode_f64, element_count, element_count_usize, lanes_per_element};
use crate::{DType, FormatError, Result};
use header::{Parser, Value};
use std::borrow::Cow;
use std::io::{self, Write};
use std::path::Path;

const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// A parsed `.npy` file whose data still lives in the caller's bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyView<'a> {
    /// The element type (from `descr`).
    pub dtype: DType,
    /// The array shape; empty for a 0-d array (one element).
    pub shape: Vec<u64>,
    /// Whether `data` is in column-major (Fortran) order.
    pub fortran_order: bool,
    /// Whether multi-byte elements in `data` are big-endian (`>` in `descr`).
    pub big_endian: bool,
    /// The raw array bytes, exactly `dtype.byte_size(elements)` of them.
    pub data: &'a [u8],
    /// Where `data` starts in the file.
    pub data_offset: u64,
}

/// The `descr` of a dtype that NumPy has natively (little-endian), or `None`.
pub fn descr_of(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::FLOAT16 => "<f2",
        DType::FLOAT => "<f4",
        DType::DOUBLE => "<f8",
        DType::INT8 => "|i1",
        DType::INT16 => "<i2",
        DType::INT32 => "<i4",
        DType::INT64 => "<i8",
        DType::UINT8 => "|u1",
        DType::UINT16 => "<u2",
        DType::UINT32 => "<u4",
        DType::UINT64 => "<u8",
        DType::BOOL => "|b1",
        DType::COMPLEX64 => "<c8",
        DType::COMPLEX128 => "<c16",
        _ => return None,
    })
}

/// Parses a `descr` string: (dtype, big_endian).
fn parse_descr(descr: &str) -> Option<(DType, bool)> {
    if descr == "?" {
        return Some((DType::BOOL, false));
    }
    let (order, code) = descr.split_at_checked(1)?;
    let big_endian = match order {
        "<" | "|" => false,
        ">" => true,
        "=" => cfg!(target_endian = "big"),
        _ => return None,
    };
    let dtype = match code {
        "f2" => DType::FLOAT16,
        "f4" => DType::FLOAT,
        "f8" => DType::DOUBLE,
        "i1" => DType::INT8,
        "i2" => DType::INT16,
        "i4" => DType::INT32,
        "i8" => DType::INT64,
        "u1" => DType::UINT8,
        "u2" => DType::UINT16,
        "u4" => DType::UINT32,
        "u8" => DType::UINT64,
        "b1" => DType::BOOL,
        "c8" => DType::COMPLEX64,
        "c16" => DType::COMPLEX128,
        _ => return None,
    };
    Some((dtype, big_endian))
}

impl<'a> NpyView<'a> {
    /// Parses the whole file. Every problem is an error with the byte offset where it was found.
    pub fn parse(bytes: &'a [u8]) -> Result<NpyView<'a>> {
        if bytes.len() < 10 || &bytes[..6] != MAGIC {
            return Err(FormatError::at(0, "not a .npy file: missing the \\x93NUMPY magic"));
        }
        let (major, minor) = (bytes[6], bytes[7]);
        let (header_len, header_start) = match major {
            1 => (u64::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10u64),
            2 | 3 => {
                let len =
                    bytes.get(8..12).ok_or_else(|| FormatError::at(8, "npy: truncated header length"))?;
                (u64::from(u32::from_le_bytes([len[0], len[1], len[2], len[3]])), 12)
            }
            _ => {
                return Err(FormatError::at(
                    6,
                    format!("npy format version {major}.{minor} is not supported"),
                ))
            }
        };
        let data_offset = header_start + header_len;
        if data_offset > bytes.len() as u64 {
            return Err(FormatError::at(
                header_start - 4,
                format!(
                    "npy header of {header_len} bytes runs past the end of the {}-byte file",
                    bytes.len()
                ),
            ));
        }
        let text = &bytes[header_start as usize..data_offset as usize];
        if major < 3 && !text.is_ascii() {
            return Err(FormatError::at(
                header_start,
                "npy header is not ASCII (required before version 3.0)",
            ));
        }
        let (mut descr, mut fortran_order, mut shape) = (None, None, None);
        for (key, value, at) in Parser::new(text, header_start).dict()? {
            match (key.as_str(), value) {
                ("descr", Value::Str(s)) => descr = Some((s, at)),
                ("descr", Value::List) => {
                    return Err(FormatError::at(
                        at,
                        "npy: structured dtypes (a list descr) are not supported",
                    ))
                }
                ("fortran_order", Value::Bool(b)) => fortran_order = Some(b),
                ("shape", Value::Tuple(t)) => shape = Some(t),
                ("descr" | "fortran_order" | "shape", _) => {
                    return Err(FormatError::at(at, format!("npy header: '{key}' has the wrong type")))
                }
                _ => {}
            }
        }
        let missing = |key| FormatError::at(header_start, format!("npy header has no '{key}'"));
        let (descr, descr_at) = descr.ok_or_else(|| missing("descr"))?;
        let fortran_order = fortran_order.ok_or_else(|| missing("fortran_order"))?;
        let shape = shape.ok_or_else(|| missing("shape"))?;
        let (dtype, big_endian) = parse_descr(&descr).ok_or_else(|| {
            FormatError::at(descr_at, format!("npy dtype '{descr}' is not a supported numeric type"))
        })?;
        let elements = element_count(&shape).and_then(|n| dtype.byte_size(n).map(|b| (n, b)));
        let Some((_, nbytes)) = elements else {
            return Err(FormatError::at(header_start, format!("npy shape {shape:?} overflows 64 bits")));
        };
        let available = bytes.len() as u64 - data_offset;
        if available != nbytes {
            let what = if available < nbytes { "truncated" } else { "has trailing bytes" };
            return Err(FormatError::at(
                data_offset,
                format!("npy data {what}: shape {shape:?} of {descr} needs {nbytes} bytes, the file has {available}"),
            ));
        }
        Ok(NpyView {
            dtype,
            shape,
            fortran_order,
            big_endian,
            data: &bytes[data_offset as usize..],
            data_offset,
        })
    }

    /// Number of elements (1 for a 0-d array).
    pub fn elements(&self) -> u64 {
        // Checked when parsing: the product fits (0 would only come of a shape that does not).
        element_count(&self.shape).unwrap_or(0)
    }

    /// The data as little-endian bytes in storage order: borrowed, or byte-swapped for big-endian files.
    pub fn data_le(&self) -> Cow<'a, [u8]> {
        let width = (self.dtype.bits().unwrap_or(8) / 8) as usize / lanes_per_element(self.dtype);
        if !self.big_endian || width <= 1 {
            return Cow::Borrowed(self.data);
        }
        let mut swapped = self.data.to_vec();
        swapped.chunks_exact_mut(width).for_each(<[u8]>::reverse);
        Cow::Owned(swapped)
    }

    /// Values as f32 lanes (complex: interleaved re, im) in C (row-major) order, whatever the file's order.
    pub fn to_f32_c_order(&self) -> Result<Vec<f32>> {
        let mut values = Vec::new();
        decode_f32(self.dtype, &self.data_le(), self.element_count()?, &mut values)
            .map_err(|e| e.shifted(self.data_offset))?;
        Ok(self.c_order(values))
    }

    /// Like [`to_f32_c_order`](Self::to_f32_c_order) with f64 lanes.
    pub fn to_f64_c_order(&self) -> Result<Vec<f64>> {
        let mut values = Vec::new();
        decode_f64(self.dtype, &self.data_le(), self.element_count()?, &mut values)
            .map_err(|e| e.shifted(self.data_offset))?;
        Ok(self.c_order(values))
    }

    fn element_count(&self) -> Result<usize> {
        usize::try_from(self.elements())
            .map_err(|_| FormatError::at(self.data_offset, "npy array does not fit the address space"))
    }

    fn c_order<T: Copy>(&self, values: Vec<T>) -> Vec<T> {
        if self.fortran_order && self.shape.iter().filter(|&&d| d > 1).count() > 1 {
            fortran_to_c(&values, &self.shape, lanes_per_element(self.dtype))
        } else {
            values
        }
    }
}

/// Reorders column-major `values` (`lanes` values per element) into row-major order.
fn fortran_to_c<T: Copy>(values: &[T], shape: &[u64], lanes: usize) -> Vec<T> {
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    // Column-major strides, in elements.
    let mut strides = vec![1usize; dims.len()];
    for k in 1..dims.len() {
        strides[k] = strides[k - 1] * dims[k - 1];
    }
    let mut out = Vec::with_capacity(values.len());
    let mut index = vec![0usize; dims.len()];
    for _ in 0..values.len() / lanes.max(1) {
        let offset: usize = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
        out.extend_from_slice(&values[offset * lanes..(offset + 1) * lanes]);
        // Row-major odometer: the last axis moves fastest.
        for k in (0..dims.len()).rev() {
            index[k] += 1;
            if index[k] < dims[k] {
                break;
            }
            index[k] = 0;
        }
    }
    out
}

fn invalid(problem: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, problem)
}

/// Writes a C-order `.npy` (version 1.0, or 2.0 when the header needs it) of little-endian `data_le`.
pub fn write_npy(w: &mut impl Write, dtype: DType, shape: &[u64], data_le: &[u8]) -> io::Result<()> {
    write_npy_ordered(w, dtype, shape, data_le, false)
}

/// Like [`write_npy`], with the data in Fortran (column-major) order when `fortran_order` is set.
pub fn write_npy_ordered(
    w: &mut impl Write,
    dtype: DType,
    shape: &[u64],
    data_le: &[u8],
    fortran_order: bool,
) -> io::Result<()> {
    let descr = descr_of(dtype).ok_or_else(|| invalid(format!("numpy has no dtype for {}", dtype.name())))?;
    let expected = element_count(shape).and_then(|n| dtype.byte_size(n));
    if expected != Some(data_le.len() as u64) {
        return Err(invalid(format!(
            "shape {shape:?} of {} needs {expected:?} bytes, got {}",
            dtype.name(),
            data_le.len()
        )));
    }
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    // NumPy writes a 1-tuple as "(3,)".
    let shape_text =
        if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let order = if fortran_order { "True" } else { "False" };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape_text}, }}");
    // Pad with spaces and a final newline so the data starts on a 64-byte boundary, as NumPy does.
    let prefix = if header.len() + 11 > usize::from(u16::MAX) { 12 } else { 10 };
    let total = (prefix + header.len() + 1).next_multiple_of(64);
    header.extend(std::iter::repeat_n(' ', total - prefix - header.len() - 1));
    header.push('\n');
    w.write_all(MAGIC)?;
    if prefix == 10 {
        w.write_all(&[1, 0])?;
        w.write_all(&(header.len() as u16).to_le_bytes())?;
    } else {
        let len = u32::try_from(header.len()).map_err(|_| invalid("npy header too long".into()))?;
        w.write_all(&[2, 0])?;
        w.write_all(&len.to_le_bytes())?;
    }
    w.write_all(header.as_bytes())?;
    w.write_all(data_le)
}

/// Writes f32 values as a C-order `<f4` `.npy` file at `path`.
pub fn write_f32(path: &Path, shape: &[u64], values: &[f32]) -> io::Result<()> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut file = io::BufWriter::new(std::fs::File::create(path)?);
    write_npy(&mut file, DType::FLOAT, shape, &bytes)?;
    file.flush()
}

/// Writes any decodable dtype so that NumPy can load it: native dtypes as they are, the others widened
/// (bf16 / fp8 / hifloat8 to float32, complex32 to complex64, int4 to int8, uint1 to uint8, QINT/QUINT to their integer
/// storage). Returns a note saying what was changed, for the user, or `None` if nothing was.
pub fn write_for_numpy(
    w: &mut impl Write,
    dtype: DType,
    shape: &[u64],
    data_le: &[u8],
) -> io::Result<Option<String>> {
    if descr_of(dtype).is_some() {
        return write_npy(w, dtype, shape, data_le).map(|()| None);
    }
    let storage = match dtype {
        DType::QINT8 => Some(DType::INT8),
        DType::QINT16 => Some(DType::INT16),
        DType::QINT32 => Some(DType::INT32),
        DType::QUINT8 => Some(DType::UINT8),
        DType::QUINT16 => Some(DType::UINT16),
        _ => None,
    };
    if let Some(storage) = storage {
        write_npy(w, storage, shape, data_le)?;
        return Ok(Some(format!("{} written as {} (its storage type)", dtype.name(), numpy_name(storage))));
    }
    let (target, reason) = match dtype {
        DType::BF16 => (DType::FLOAT, "numpy has no bfloat16"),
        DType::FLOAT8_E4M3FN | DType::FLOAT8_E5M2 => (DType::FLOAT, "numpy has no float8"),
        DType::HIFLOAT8 => (DType::FLOAT, "numpy has no hifloat8"),
        DType::COMPLEX32 => (DType::COMPLEX64, "numpy has no complex32"),
        DType::INT4 => (DType::INT8, "numpy has no int4; unpacked, one value per byte"),
        DType::UINT1 => (DType::UINT8, "numpy has no 1-bit type; unpacked, one value per byte"),
        _ => return Err(invalid(format!("dtype {} cannot be written for numpy", dtype.name()))),
    };
    let elements = element_count_usize(shape).map_err(|e| invalid(e.problem))?;
    let mut values = Vec::new();
    decode_f32(dtype, data_le, elements, &mut values).map_err(|e| invalid(e.to_string()))?;
    // Every value of the narrow type is exactly representable in the wider one, so this re-encoding is exact.
    let widened = crate::tensor::encode_f32(target, &values).map_err(|e| invalid(e.to_string()))?;
    write_npy(w, target, shape, &widened)?;
    Ok(Some(format!("{} written as {}; {reason}", dtype.name(), numpy_name(target))))
}

fn numpy_name(dtype: DType) -> &'static str {
    match dtype {
        DType::FLOAT => "float32",
        DType::COMPLEX64 => "complex64",
        DType::INT8 => "int8",
        DType::INT16 => "int16",
        DType::INT32 => "int32",
        DType::UINT8 => "uint8",
        DType::UINT16 => "uint16",
        _ => "?",
    }
}
