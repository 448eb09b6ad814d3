//! msprobe dumps (mindstudio-probe, PyTorch and MindSpore): `dump.json` plus `dump_tensor_data/*.pt|*.npy`.
//!
//! [`MsprobeDump::open`] reads `dump.json` (and `construct.json` / `stack.json` beside it when present)
//! into a flat list of entries in dump order, named exactly as msprobe's compare names them; tensor bytes
//! are read only by [`MsprobeDump::load_values`]. Like msprobe, data files are resolved relative to the
//! directory that holds `dump.json`, not the `dump_data_dir` recorded by the machine that made the dump.

pub mod dump_json;
pub mod pickle;
pub mod pt;
mod py_float;
mod values_hash;

pub use dump_json::{Direction, EntryKind, MsprobeEntry, Role, StatValue, TensorMeta};
pub use py_float::py_float_repr;

use crate::{DType, FormatError, Result};
use std::path::{Path, PathBuf};

/// An opened msprobe dump of one rank and step.
#[derive(Clone, Debug)]
pub struct MsprobeDump {
    /// The `dump.json` read.
    pub json_path: PathBuf,
    /// Where tensor files are looked up (`<dir of dump.json>/dump_tensor_data`).
    pub data_dir: PathBuf,
    /// `tensor`, `statistics`, `md5`, ...
    pub task: String,
    /// `L0` (modules), `L1` (APIs), `mix`, ...
    pub level: String,
    /// `pytorch` or `mindspore`, when recorded.
    pub framework: Option<String>,
    /// The directory recorded in the dump (informational: it names the dumping machine's filesystem).
    pub dump_data_dir: Option<String>,
    /// Every leaf of every record, in dump order.
    pub entries: Vec<MsprobeEntry>,
    /// `construct.json` (parent module of each API), when present and non-empty.
    pub construct: Option<serde_json::Value>,
    /// `stack.json` (Python call stacks), when present.
    pub stack: Option<serde_json::Value>,
}

impl MsprobeDump {
    /// Opens `path`: a `dump.json` or the directory holding one.
    pub fn open(path: &Path) -> Result<Self> {
        let json_path = if path.is_dir() { path.join("dump.json") } else { path.to_path_buf() };
        let bytes = std::fs::read(&json_path).map_err(|e| FormatError::io(&json_path, &e))?;
        let parsed = dump_json::parse(&bytes).map_err(|e| e.in_file(&json_path))?;
        let dir = json_path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let optional_json = |name: &str| -> Result<Option<serde_json::Value>> {
            let p = dir.join(name);
            match std::fs::read(&p) {
                Ok(b) => {
                    let v: serde_json::Value = serde_json::from_slice(&b)
                        .map_err(|e| FormatError::whole(format!("invalid JSON: {e}")).in_file(&p))?;
                    let empty = v.as_object().is_some_and(|o| o.is_empty());
                    Ok((!empty).then_some(v))
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(FormatError::io(&p, &e)),
            }
        };
        Ok(MsprobeDump {
            construct: optional_json("construct.json")?,
            stack: optional_json("stack.json")?,
            data_dir: dir.join("dump_tensor_data"),
            json_path,
            task: parsed.task,
            level: parsed.level,
            framework: parsed.framework,
            dump_data_dir: parsed.dump_data_dir,
            entries: parsed.entries,
        })
    }

    /// The entry with this full name (linear scan; build a map for repeated lookups).
    pub fn find(&self, name: &str) -> Option<&MsprobeEntry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// The data file of a tensor entry; `data_name` must be a plain file name (no directories), so a
    /// crafted dump.json cannot point outside the dump.
    pub fn data_path(&self, entry: &MsprobeEntry) -> Result<PathBuf> {
        let meta = entry.tensor().ok_or_else(|| self.err(format!("{} is not a tensor", entry.name)))?;
        let name = meta.data_name.as_deref().ok_or_else(|| {
            self.err(format!("{} has no data file (task {:?} keeps statistics only)", entry.name, self.task))
        })?;
        let plain = Path::new(name).file_name().is_some_and(|f| f == name) && name != ".." && name != ".";
        if !plain {
            return Err(self.err(format!("{}: data_name {name:?} is not a plain file name", entry.name)));
        }
        Ok(self.data_dir.join(name))
    }

    /// Reads a tensor's values as f32 (bf16 and fp16 exactly, int64 rounded beyond 2^24).
    pub fn load_values(&self, entry: &MsprobeEntry) -> Result<(DType, Vec<u64>, Vec<f32>)> {
        let (dtype, shape, bytes, path) = self.load_raw(entry)?;
        let mut out = Vec::new();
        crate::tensor::decode_f32(
            dtype,
            &bytes,
            element_count(&shape).map_err(|e| e.in_file(&path))?,
            &mut out,
        )
        .map_err(|e| e.in_file(&path))?;
        Ok((dtype, shape, out))
    }

    /// Reads a tensor's values as f32 into `out` (like [`MsprobeDump::load_values`], same values), reusing
    /// its memory; a `.pt` file's storage is streamed and decoded chunk by chunk ([`pt::stream_pt_file`]).
    /// Returns the dtype.
    pub fn load_values_into(&self, entry: &MsprobeEntry, out: &mut Vec<f32>) -> Result<DType> {
        self.load_into(entry, out, None)
    }

    /// [`MsprobeDump::load_values_into`] plus the xxh3 hash of the values' little-endian f32 bytes, taken
    /// from the same read.
    pub fn load_values_and_hash_into(
        &self,
        entry: &MsprobeEntry,
        out: &mut Vec<f32>,
    ) -> Result<(DType, u64)> {
        let mut hasher = crate::hash::Xxh3::new();
        let dtype = self.load_into(entry, out, Some(&mut hasher))?;
        Ok((dtype, hasher.digest()))
    }

    /// The hash [`MsprobeDump::load_values_and_hash_into`] gives, without keeping the values: a `.pt` file's
    /// are decoded a step at a time and dropped ([`pt::stream_pt_file_hash`]: no buffer the size of the
    /// tensor), with the same checks and errors. Returns the dtype too.
    pub fn values_hash(&self, entry: &MsprobeEntry) -> Result<(DType, u64)> {
        let path = self.data_path(entry)?;
        let mut hasher = crate::hash::Xxh3::new();
        let dtype = if path.extension().and_then(|e| e.to_str()) == Some("pt") {
            pt::stream_pt_file_hash(&path, &mut hasher)?
        } else {
            self.load_into(entry, &mut Vec::new(), Some(&mut hasher))?
        };
        Ok((dtype, hasher.digest()))
    }

    fn load_into(
        &self,
        entry: &MsprobeEntry,
        out: &mut Vec<f32>,
        hasher: Option<&mut crate::hash::Xxh3>,
    ) -> Result<DType> {
        let path = self.data_path(entry)?;
        if path.extension().and_then(|e| e.to_str()) == Some("pt") {
            return pt::stream_pt_file(&path, out, hasher);
        }
        let (dtype, shape, bytes, path) = self.load_raw(entry)?;
        crate::tensor::host::decode_reusing(
            dtype,
            &bytes,
            element_count(&shape).map_err(|e| e.in_file(&path))?,
            out,
        )
        .map_err(|e| e.in_file(&path))?;
        if let Some(h) = hasher {
            values_hash::hash_f32_le(h, out);
        }
        Ok(dtype)
    }

    /// Reads a tensor's values as f64 (exact for every dtype but 64-bit integers beyond 2^53).
    pub fn load_values_f64(&self, entry: &MsprobeEntry) -> Result<(DType, Vec<u64>, Vec<f64>)> {
        let (dtype, shape, bytes, path) = self.load_raw(entry)?;
        let mut out = Vec::new();
        crate::tensor::decode_f64(
            dtype,
            &bytes,
            element_count(&shape).map_err(|e| e.in_file(&path))?,
            &mut out,
        )
        .map_err(|e| e.in_file(&path))?;
        Ok((dtype, shape, out))
    }

    fn load_raw(&self, entry: &MsprobeEntry) -> Result<(DType, Vec<u64>, Vec<u8>, PathBuf)> {
        let path = self.data_path(entry)?;
        match path.extension().and_then(|e| e.to_str()) {
            Some("pt") => {
                let t = pt::read_pt_file(&path)?;
                Ok((t.dtype, t.shape, t.bytes, path))
            }
            Some("npy") => {
                let bytes = std::fs::read(&path).map_err(|e| FormatError::io(&path, &e))?;
                let view = crate::npy::NpyView::parse(&bytes).map_err(|e| e.in_file(&path))?;
                if view.fortran_order && view.shape.len() > 1 {
                    // msprobe (MindSpore) writes C order; a Fortran-order file is refused rather than misread.
                    return Err(FormatError::whole("Fortran-order .npy is not expected in an msprobe dump")
                        .in_file(&path));
                }
                Ok((view.dtype, view.shape.clone(), view.data_le().into_owned(), path))
            }
            _ => Err(FormatError::whole("unknown tensor file type (expected .pt or .npy)").in_file(&path)),
        }
    }

    fn err(&self, problem: String) -> FormatError {
        FormatError::whole(problem).in_file(&self.json_path)
    }
}

fn element_count(shape: &[u64]) -> Result<usize> {
    crate::tensor::element_count_usize(shape)
}
