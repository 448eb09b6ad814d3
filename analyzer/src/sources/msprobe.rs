//! msprobe dumps as a [`Source`]: every `dump.json` found (`step{N}/rank{N}/dump.json`), its API calls as
//! ops and its tensor arguments as tensors, named exactly as msprobe names them.
//!
//! Non-tensor arguments (Python scalars, `None`, slices) are not tensors and are left out of the index's
//! tensors; every argument is listed in [`Index::recorded_args`], from which `--format msprobe-csv`
//! writes msprobe's own table (non-tensor arguments as "unsupported" rows). Statistics come from `dump.json` (what msprobe
//! computed on the device, in the tensor's dtype), so statistics-only dumps compare too.

use super::missing_steps::StepsHeld;
use super::source::{HostBlocks, SliceBlocks, Source};
use crate::index::{Index, Io, RecordedArg, TensorExtras, TensorId, TensorInfo};
use crate::problems::InputProblem;
use accutrace_formats::dump::MappedFile;
use accutrace_formats::msprobe::{self, pt, EntryKind, MsprobeDump, MsprobeEntry, StatValue};
use accutrace_formats::stats::TensorStats;
use accutrace_formats::tensor::element_count;
use accutrace_formats::tensor::host::decode_reusing;
use accutrace_formats::DType;
use anyhow::Result;
use std::path::{Path, PathBuf};

pub struct MsprobeSource {
    root: PathBuf,
    dumps: Vec<MsprobeDump>,
    index: Index,
    /// (dump, entry) of each tensor, by tensor id.
    entries: Vec<(usize, usize)>,
}

/// `step3` -> 3 and `rank1` -> 1 from the directories above a dump.json.
fn numbered_component(path: &Path, prefix: &str) -> Option<u64> {
    path.components().rev().find_map(|c| c.as_os_str().to_str()?.strip_prefix(prefix)?.parse().ok())
}

impl MsprobeSource {
    pub fn open(root: &Path, dump_jsons: &[PathBuf]) -> Result<Self> {
        let mut dumps = Vec::new();
        let mut index = Index::default();
        let mut entries = Vec::new();
        let mut first_error = None;
        // The steps each rank's directories hold, unreadable dump.json files included (those are problems
        // already).
        let mut steps_held = StepsHeld::default();
        for dir in dump_jsons.iter().map(|path| path.parent().unwrap_or(Path::new("."))) {
            if let Some(step) = numbered_component(dir, "step") {
                steps_held.add(numbered_component(dir, "rank").unwrap_or(0) as u32, step);
            }
        }
        index.problems.extend(steps_held.problem(root));
        for path in dump_jsons {
            // One unreadable dump.json (of one step or rank) is an input problem; the others are read.
            let dump = match MsprobeDump::open(path) {
                Ok(dump) => dump,
                Err(e) => {
                    let e =
                        anyhow::Error::new(e).context(format!("cannot read msprobe dump {}", path.display()));
                    index
                        .problems
                        .push(InputProblem::incomplete(format!("{e:#}; the other dumps were read")));
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            let dir = path.parent().unwrap_or(Path::new("."));
            let step = numbered_component(dir, "step").unwrap_or(0);
            let rank = numbered_component(dir, "rank").unwrap_or(0) as u32;
            let d = dumps.len();
            let mut current: Option<(String, usize)> = None;
            let mut counts = (0u32, 0u32);
            for (e, entry) in dump.entries.iter().enumerate() {
                // Every argument is listed for msprobe's own table; the tensors are indexed too.
                let arg = index.recorded_args.len();
                index.recorded_args.push(recorded_arg(entry, step, rank));
                let EntryKind::Tensor(meta) = &entry.kind else { continue };
                let op = match &current {
                    Some((name, id)) if *name == entry.op_name => *id,
                    _ => {
                        let api = entry.op_name.split('.').nth(1).unwrap_or(&entry.op_name).to_string();
                        let id = index.push_op(entry.op_name.clone(), api, step, rank);
                        current = Some((entry.op_name.clone(), id));
                        counts = (0, 0);
                        id
                    }
                };
                let io = match entry.role {
                    msprobe::Role::Input | msprobe::Role::Parameters => Io::Input,
                    msprobe::Role::Output | msprobe::Role::ParametersGrad => Io::Output,
                };
                let slot = if io == Io::Input { &mut counts.0 } else { &mut counts.1 };
                let position = *slot;
                *slot += 1;
                let Some(dtype) = meta.dtype else {
                    index.problems.push(InputProblem::unreadable(format!(
                        "{}: {}: dtype {} is not one this reader decodes; the tensor is left out",
                        path.display(),
                        entry.name,
                        meta.dtype_name
                    )));
                    continue;
                };
                let tensor = TensorInfo {
                    has_data: meta.data_name.is_some(),
                    ..TensorInfo::new(op, io, position, dtype, meta.shape.clone())
                };
                let tensor = index.push_tensor(tensor.with_extras(TensorExtras {
                    label: Some(entry.name.clone()),
                    requires_grad: meta.requires_grad,
                    ..TensorExtras::default()
                }));
                index.set_stats(tensor, stats_of(meta));
                index.recorded_args[arg].tensor = Some(tensor);
                entries.push((d, e));
            }
            dumps.push(dump);
        }
        if let (true, Some(e)) = (dumps.is_empty(), first_error) {
            return Err(e);
        }
        // msprobe records no launch: `dump.json` lists the calls in the order they were made, which is the
        // order they were added in (per step and rank).
        let reorder = index.order_by_execution();
        let entries = crate::index::Reorder::apply(&reorder.tensors, entries);
        Ok(MsprobeSource { root: root.to_path_buf(), dumps, index, entries })
    }
}

/// An argument as msprobe's table shows it: a tensor's dtype name, shape, statistics and data file; a
/// scalar as `<class 'int'>` with its value in every statistic; `None` as N/A.
fn recorded_arg(entry: &MsprobeEntry, step: u64, rank: u32) -> RecordedArg {
    let none = || StatValue::None.py_repr();
    let (dtype, shape, requires_grad, stats, data_name) = match &entry.kind {
        EntryKind::Tensor(t) => (
            Some(t.dtype_name.clone()),
            Some(t.shape.clone()),
            t.requires_grad,
            [t.max.py_repr(), t.min.py_repr(), t.mean.py_repr(), t.norm.py_repr()],
            t.data_name.clone(),
        ),
        EntryKind::Scalar { type_name, value } => (
            Some(format!("<class '{type_name}'>")),
            Some(Vec::new()),
            None,
            std::array::from_fn(|_| value.py_repr()),
            None,
        ),
        EntryKind::Other { type_name, .. } => (
            Some(format!("<class '{type_name}'>")),
            Some(Vec::new()),
            None,
            std::array::from_fn(|_| none()),
            None,
        ),
        EntryKind::None => (None, None, None, std::array::from_fn(|_| none()), None),
    };
    RecordedArg {
        name: entry.name.clone(),
        op_name: entry.op_name.clone(),
        step,
        rank,
        tensor: None,
        dtype,
        shape,
        requires_grad,
        stats,
        data_name,
    }
}

/// msprobe's Max/Min/Mean/Norm as [`TensorStats`]; counts msprobe does not record stay 0, except that
/// an inf/NaN extreme is counted once so overflow analysis sees it.
fn stats_of(meta: &msprobe::TensorMeta) -> Option<TensorStats> {
    let (max, min) = (meta.max.as_f64()?, meta.min.as_f64()?);
    let num = |v: &StatValue| v.as_f64().unwrap_or(f64::NAN);
    let count = element_count(&meta.shape)?;
    Some(TensorStats {
        count,
        nan: u64::from(max.is_nan() || min.is_nan()),
        pos_inf: u64::from(max == f64::INFINITY),
        neg_inf: u64::from(min == f64::NEG_INFINITY),
        zero: 0,
        min: if min.is_finite() { min } else { f64::NAN },
        max: if max.is_finite() { max } else { f64::NAN },
        mean: num(&meta.mean),
        l2_norm: num(&meta.norm),
        abs_sum: None,
        at_saturation: 0,
    })
}

impl Source for MsprobeSource {
    fn kind(&self) -> &'static str {
        "msprobe"
    }

    fn root(&self) -> &Path {
        &self.root
    }

    fn index(&self) -> &Index {
        &self.index
    }

    fn read_values(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<()> {
        let (d, e) = self.entries[tensor];
        self.dumps[d].load_values_into(&self.dumps[d].entries[e], out)?;
        Ok(())
    }

    /// msprobe's files are pickles with varying framing, so the hash is taken over the decoded values
    /// (`read_values_and_hash`'s), which are not kept: a `.pt` file's are hashed a step at a time.
    fn content_hash(&self, tensor: TensorId) -> Result<u64> {
        let (d, e) = self.entries[tensor];
        let (_, hash) = self.dumps[d].values_hash(&self.dumps[d].entries[e])?;
        Ok(hash)
    }

    fn read_values_and_hash(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<u64> {
        let (d, e) = self.entries[tensor];
        let (_, hash) = self.dumps[d].load_values_and_hash_into(&self.dumps[d].entries[e], out)?;
        Ok(hash)
    }

    /// A `.pt` file of fp32 values (the benchmark side of a mixed-precision pair, most of its bytes) is
    /// mapped and its storage handed to `f` in place: no copy out of the page cache, none into `buf`.
    fn with_values(&self, tensor: TensorId, buf: &mut Vec<f32>, f: &mut dyn FnMut(&[f32])) -> Result<()> {
        let (d, e) = self.entries[tensor];
        let (dump, entry) = (&self.dumps[d], &self.dumps[d].entries[e]);
        let path = dump.data_path(entry)?;
        if path.extension().and_then(|e| e.to_str()) != Some("pt") {
            self.read_values(tensor, buf)?;
            f(buf);
            return Ok(());
        }
        let map = MappedFile::open(&path)?;
        let t = pt::parse_pt(map.bytes()).map_err(|e| e.in_file(&path))?;
        match borrowed_f32(&t) {
            Some(values) => f(values),
            None => {
                decode_reusing(t.dtype, &t.bytes, t.elements().map_err(|e| e.in_file(&path))?, buf)
                    .map_err(|e| e.in_file(&path))?;
                f(buf);
            }
        }
        drop(t);
        // Unmapping a large storage (page table entries of 144 MiB) took ~10 ms on this thread while the
        // others waited for the next pair: another thread of the pool does it, one map at a time (a map that
        // waits for a busy pool still counts in the RSS users see: with every map of 8 MiB or more sent
        // there, `time`'s peak on the 0.26 GB pair rose from 40 to 56 MB). Not with one thread, which would
        // run it only once idle.
        if map.bytes().len() >= UNMAP_ON_POOL_BYTES
            && rayon::current_num_threads() > 1
            && !UNMAPPING.swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            rayon::spawn(move || {
                drop(map);
                UNMAPPING.store(false, std::sync::atomic::Ordering::Release);
            });
        }
        Ok(())
    }

    /// A `.pt` file's stored bytes, lent from its map: what diff's byte kernels read block by block, so that
    /// diff of two differing msprobe tensors holds neither side as f32. A storage of another dtype than
    /// `dump.json` names gives `false` (diff then reads the values, as before). [`Source::read_host_bytes`]
    /// stays `None`, so convert writes msprobe tensors from their values as before.
    fn with_host_bytes(&self, tensor: TensorId, f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        let (d, e) = self.entries[tensor];
        with_pt_bytes(&self.dumps[d], &self.dumps[d].entries[e], self.index.tensors[tensor].dtype, f)
    }

    /// A `.pt` file's stored bytes read block by block with positioned reads ([`pt::PtBlocks`]), never
    /// mapped: diff of two differing 144 MiB tensors showed both storages' pages as 297 MiB of RSS, now a
    /// buffer of 256 KiB each. The member's CRC is checked after `f`, which then counts only on `Ok(true)`
    /// (the trait's terms). Storages that cannot be streamed are lent from the map as in
    /// [`Source::with_host_bytes`].
    fn with_host_blocks(&self, tensor: TensorId, f: &mut dyn FnMut(&mut dyn HostBlocks)) -> Result<bool> {
        let (d, e) = self.entries[tensor];
        let (dump, entry) = (&self.dumps[d], &self.dumps[d].entries[e]);
        let path = dump.data_path(entry)?;
        if path.extension().and_then(|e| e.to_str()) != Some("pt") {
            return Ok(false);
        }
        #[cfg(unix)]
        if let Some(mut blocks) = pt::open_pt_blocks(&path)? {
            if blocks.dtype() != self.index.tensors[tensor].dtype {
                return Ok(false);
            }
            f(&mut PtHostBlocks(&mut blocks));
            blocks.finish()?;
            return Ok(true);
        }
        self.with_host_bytes(tensor, &mut |bytes| f(&mut SliceBlocks::new(bytes)))
    }
    /// A `.pt` storage that [`Source::with_host_blocks`] streams ([`pt::PtBlocks`]) holds its buffer of 256
    /// KiB, whatever the tensor's size. `None` where the read holds the tensor whole or reads its values
    /// instead: a storage it cannot stream (lent from the map, gathered where not contiguous), of another
    /// dtype than `dump.json` names, a `.npy` file, or one that cannot be read (the read then fails). Reads
    /// the file's directory and `data.pkl`, not its storage.
    fn host_blocks_bytes(&self, tensor: TensorId) -> Option<u64> {
        let (d, e) = self.entries[tensor];
        let path = self.dumps[d].data_path(&self.dumps[d].entries[e]).ok()?;
        if path.extension().and_then(|e| e.to_str()) != Some("pt") {
            return None;
        }
        #[cfg(unix)]
        if pt::streamed_dtype(&path).ok()?? == self.index.tensors[tensor].dtype {
            return Some(pt::PT_BLOCKS_BUFFER_BYTES as u64);
        }
        None
    }
}

/// A `.pt` file's [`pt::PtBlocks`] as the [`HostBlocks`] a [`Source`] hands out.
#[cfg(unix)]
struct PtHostBlocks<'a>(&'a mut pt::PtBlocks);

#[cfg(unix)]
impl HostBlocks for PtHostBlocks<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn next_block<'s>(&'s mut self, buf: &'s mut [u8]) -> &'s [u8] {
        self.0.next_block(buf)
    }
}

/// Calls `f` with a `.pt` tensor's own bytes (C order, little-endian: `parse_pt`'s, CRC-checked), borrowed
/// from the file's map where it stores them that way (what `torch.save` writes), when its storage holds
/// `dtype` (what `dump.json` says); `false` without calling `f` for a `.npy` file or another dtype.
fn with_pt_bytes(
    dump: &MsprobeDump,
    entry: &MsprobeEntry,
    dtype: DType,
    f: &mut dyn FnMut(&[u8]),
) -> Result<bool> {
    let path = dump.data_path(entry)?;
    if path.extension().and_then(|e| e.to_str()) != Some("pt") {
        return Ok(false);
    }
    let map = MappedFile::open(&path)?;
    let t = pt::parse_pt(map.bytes()).map_err(|e| e.in_file(&path))?;
    if t.dtype != dtype {
        return Ok(false);
    }
    f(&t.bytes);
    Ok(true)
}

/// Maps at least this large that [`Source::with_values`] lent are unmapped on another thread of the pool.
/// (Smaller under test, so that the fixture's files of about 130 KB take that path.)
const UNMAP_ON_POOL_BYTES: usize = if cfg!(test) { 64 << 10 } else { 64 << 20 };
/// Whether a map [`Source::with_values`] lent is waiting to be unmapped on the pool.
static UNMAPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A `.pt` tensor's values as f32 without a copy, when its bytes already are host f32 in C order
/// (little-endian fp32 on a little-endian machine, 4-byte aligned, every element there): what
/// `decode_reusing` would give, bit for bit. `parse_pt` has checked the storage's CRC and gathered the
/// view into C order (borrowed where it is contiguous, which is what `torch.save` writes).
/// `None` also for a shape that does not match the bytes: the decoder then reports it.
fn borrowed_f32<'a>(t: &'a pt::PtTensor<'_>) -> Option<&'a [f32]> {
    if !(cfg!(target_endian = "little") && t.dtype == DType::FLOAT) {
        return None;
    }
    if t.elements().ok()?.checked_mul(4) != Some(t.bytes.len()) {
        return None;
    }
    // SAFETY: every bit pattern is a valid f32, and `align_to` only puts correctly aligned, whole f32s in
    // the middle slice; it borrows `t.bytes` for the same lifetime.
    let (head, values, tail) = unsafe { t.bytes.align_to::<f32>() };
    (head.is_empty() && tail.is_empty()).then_some(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixture's two sides: fp32 and bf16 `.pt` files (and int64).
    fn fixture(side: &str) -> MsprobeSource {
        let root =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/msprobe-tiny").join(side);
        let dumps = vec![root.join("step0/rank0/dump.json")];
        MsprobeSource::open(&root, &dumps).unwrap()
    }

    #[test]
    fn values_lent_from_the_map_are_the_values_read() {
        let mut borrowed = 0;
        for side in ["target", "bench"] {
            let source = fixture(side);
            assert!(source.index.tensors.len() > 100, "{side}");
            // Stale values of a larger tensor in the buffer must not show through.
            let mut buf = vec![f32::NAN; 1 << 16];
            for (t, info) in source.index.tensors.iter().enumerate() {
                let mut want = Vec::new();
                source.read_values(t, &mut want).unwrap();
                let mut calls = 0;
                let lent = buf.as_ptr();
                source
                    .with_values(t, &mut buf, &mut |got| {
                        calls += 1;
                        assert!(got.iter().map(|v| v.to_bits()).eq(want.iter().map(|v| v.to_bits())), "{t}");
                        // fp32 is lent from the file's map, never copied into the buffer.
                        let from_buffer = got.as_ptr() == lent;
                        assert_eq!(from_buffer, info.dtype != DType::FLOAT || got.is_empty(), "{t}");
                        borrowed += usize::from(!from_buffer);
                    })
                    .unwrap();
                assert_eq!(calls, 1);
            }
        }
        assert!(borrowed > 100, "{borrowed}");
    }

    #[test]
    fn content_hashes_are_the_hashes_of_the_values_read() {
        for side in ["target", "bench"] {
            let source = fixture(side);
            for t in 0..source.index.tensors.len() {
                let hash = source.read_values_and_hash(t, &mut Vec::new()).unwrap();
                assert_eq!(source.content_hash(t).unwrap(), hash, "{side} {t}");
            }
        }
    }

    /// diff measures two tensors of one dtype from their lent `.pt` bytes (`with_host_bytes`) where it used
    /// to decode both to f32: every pair of same-dtype, same-size tensors of the fixture gives the figures the
    /// values give.
    #[test]
    fn lent_bytes_measure_as_the_values_do() {
        use crate::diff::{compare_host_bytes, compare_values};
        let (mut pairs, mut differing) = (0, 0);
        for side in ["target", "bench"] {
            let source = fixture(side);
            let mut last_of: std::collections::HashMap<(DType, usize), TensorId> = Default::default();
            for (t, info) in source.index.tensors.iter().enumerate() {
                let mut values = Vec::new();
                source.read_values(t, &mut values).unwrap();
                // The lent bytes are the values' own, and every tensor of the fixture lends them.
                let mut decoded = Vec::new();
                let lent = source
                    .with_host_bytes(t, &mut |bytes| {
                        accutrace_formats::tensor::decode_f32(info.dtype, bytes, values.len(), &mut decoded)
                            .unwrap()
                    })
                    .unwrap();
                assert!(lent, "{side} {t}");
                assert!(decoded.iter().map(|v| v.to_bits()).eq(values.iter().map(|v| v.to_bits())), "{t}");
                if !matches!(info.dtype, DType::FLOAT | DType::BF16 | DType::FLOAT16) {
                    continue;
                }
                if let Some(&u) = last_of.get(&(info.dtype, values.len())) {
                    let mut first = Vec::new();
                    source.read_values(u, &mut first).unwrap();
                    let want = compare_values(info.dtype, &first, &values);
                    let mut got = None;
                    source
                        .with_host_bytes(u, &mut |x| {
                            source
                                .with_host_bytes(t, &mut |y| got = compare_host_bytes(info.dtype, x, y))
                                .unwrap();
                        })
                        .unwrap();
                    let got = got.unwrap_or_else(|| panic!("{side} {u} {t}: not measured from the bytes"));
                    assert_eq!(
                        serde_json::to_value(&got).unwrap(),
                        serde_json::to_value(&want).unwrap(),
                        "{t}"
                    );
                    pairs += 1;
                    differing += usize::from(!want.identical);
                }
                last_of.insert((info.dtype, values.len()), t);
            }
        }
        assert!(pairs > 20 && differing > 20, "{pairs} pairs, {differing} differing");
    }

    #[test]
    fn a_damaged_storage_is_an_error_when_lent_too() {
        let dir = tempfile::tempdir().unwrap();
        let from = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/msprobe-tiny/bench");
        let to = dir.path().join("bench");
        copy_tree(&from, &to);
        let source = MsprobeSource::open(&to, &[to.join("step0/rank0/dump.json")]).unwrap();
        let (t, info) = source
            .index
            .tensors
            .iter()
            .enumerate()
            .find(|(_, i)| i.dtype == DType::FLOAT && element_count(&i.shape).is_some_and(|n| n > 64))
            .unwrap();
        let (d, e) = source.entries[t];
        let path = source.dumps[d].data_path(&source.dumps[d].entries[e]).unwrap();
        // Flip a bit of one stored value: the storage's CRC no longer matches.
        let mut bytes = std::fs::read(&path).unwrap();
        let at = {
            let t = pt::parse_pt(&bytes).unwrap();
            t.bytes.as_ptr() as usize - bytes.as_ptr() as usize + t.bytes.len() / 2
        };
        bytes[at] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let mut calls = 0;
        let err = source.with_values(t, &mut Vec::new(), &mut |_| calls += 1).unwrap_err();
        assert_eq!(calls, 0, "{:?}", info.shape);
        assert!(format!("{err:#}").contains("checksum"), "{err:#}");
        assert!(source.read_values(t, &mut Vec::new()).is_err());
        // The content hash fails as the read with it does, word for word, and the bytes are not lent.
        let read = source.read_values_and_hash(t, &mut Vec::new()).unwrap_err();
        assert_eq!(format!("{:#}", source.content_hash(t).unwrap_err()), format!("{read:#}"));
        let err = source.with_host_bytes(t, &mut |_| calls += 1).unwrap_err();
        assert_eq!(calls, 0);
        assert!(format!("{err:#}").contains("checksum"), "{err:#}");
        // Read block by block, the damage shows once the blocks are read: an error in the map's words.
        let mut blocks_read = 0;
        let err = source
            .with_host_blocks(t, &mut |blocks| {
                let mut buf = [0u8; 100];
                while blocks.next_block(&mut buf).len() == 100 {
                    blocks_read += 1;
                }
            })
            .unwrap_err();
        assert!(blocks_read > 0);
        assert_eq!(format!("{err:#}"), format!("{:#}", source.with_host_bytes(t, &mut |_| ()).unwrap_err()));
        // The damage is in the storage: the header still says it streams.
        assert_eq!(source.host_blocks_bytes(t), Some(256 << 10));
    }

    /// diff's footprint counts a `.pt` read by blocks as the block buffer only where `with_host_blocks` reads
    /// it so: a storage of another dtype than `dump.json` names, or a file that is gone, counts as the
    /// tensor (`None`).
    #[test]
    fn only_storages_read_by_blocks_count_as_the_block_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let from =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/msprobe-tiny/target");
        let to = dir.path().join("target");
        copy_tree(&from, &to);
        let source = MsprobeSource::open(&to, &[to.join("step0/rank0/dump.json")]).unwrap();
        let path_of = |t: TensorId| {
            let (d, e) = source.entries[t];
            source.dumps[d].data_path(&source.dumps[d].entries[e]).unwrap()
        };
        let of = |dtype: DType| source.index.tensors.iter().position(|i| i.dtype == dtype).unwrap();
        let (f, b, gone) = (of(DType::FLOAT), of(DType::BF16), source.index.tensors.len() - 1);
        assert!(gone != f && gone != b);
        for t in [f, b, gone] {
            assert_eq!(source.host_blocks_bytes(t), Some(256 << 10), "{t}");
        }
        std::fs::copy(path_of(b), path_of(f)).unwrap();
        std::fs::remove_file(path_of(gone)).unwrap();
        assert_eq!(source.host_blocks_bytes(f), None);
        assert!(!source.with_host_blocks(f, &mut |_| panic!("a bf16 storage lent as fp32")).unwrap());
        assert_eq!(source.host_blocks_bytes(gone), None);
        assert!(source.with_host_blocks(gone, &mut |_| ()).is_err());
        assert_eq!(source.host_blocks_bytes(b), Some(256 << 10));
    }

    /// diff reads `.pt` storages block by block (`with_host_blocks`): the bytes are the lent bytes, whatever
    /// the blocks' sizes, the pairs measure as the values do, and the file is never mapped (its pages would
    /// stay in the process's RSS, both sides of a 144 MiB pair 297 MiB). On a copy of its own: the tests
    /// beside it map the fixture's files, and /proc/self/maps is the whole process's.
    #[test]
    fn blocks_read_are_the_lent_bytes_and_never_mapped() {
        use crate::diff::{compare_host_blocks, compare_host_bytes};
        let dir = tempfile::tempdir().unwrap();
        let to = dir.path().join("target");
        copy_tree(
            &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/msprobe-tiny/target"),
            &to,
        );
        let source = MsprobeSource::open(&to, &[to.join("step0/rank0/dump.json")]).unwrap();
        let mapped = |t: TensorId| {
            let (d, e) = source.entries[t];
            let path = source.dumps[d].data_path(&source.dumps[d].entries[e]).unwrap();
            let path = path.canonicalize().unwrap();
            std::fs::read_to_string("/proc/self/maps").unwrap().contains(path.to_str().unwrap())
        };
        let (mut read, mut pairs) = (0, 0);
        let mut last_of: std::collections::HashMap<(DType, usize), TensorId> = Default::default();
        for (t, info) in source.index.tensors.iter().enumerate() {
            let mut lent = Vec::new();
            assert!(source.with_host_bytes(t, &mut |b| lent = b.to_vec()).unwrap());
            // What diff's footprint counts for the read below: the block buffer, not the tensor.
            assert_eq!(source.host_blocks_bytes(t), Some(256 << 10), "{t}");
            for size in [1, 7, 4096, 300_000] {
                let mut got = Vec::new();
                let mut was_mapped = false;
                let ok = source
                    .with_host_blocks(t, &mut |blocks| {
                        assert_eq!(blocks.len(), lent.len());
                        let mut buf = vec![0u8; size];
                        loop {
                            let block = blocks.next_block(&mut buf);
                            if block.is_empty() {
                                break;
                            }
                            got.extend_from_slice(block);
                        }
                        was_mapped |= mapped(t);
                    })
                    .unwrap();
                assert!(ok, "{t}");
                assert!(got == lent, "{t}: blocks of {size}");
                if cfg!(target_os = "linux") {
                    assert!(!was_mapped, "{t}: mapped while read");
                }
                read += 1;
            }
            if !matches!(info.dtype, DType::FLOAT | DType::BF16 | DType::FLOAT16) {
                continue;
            }
            if let Some(&u) = last_of.get(&(info.dtype, lent.len())) {
                let mut want = None;
                source
                    .with_host_bytes(u, &mut |x| {
                        source
                            .with_host_bytes(t, &mut |y| want = compare_host_bytes(info.dtype, x, y))
                            .unwrap();
                    })
                    .unwrap();
                let mut got = None;
                source
                    .with_host_blocks(u, &mut |x| {
                        source
                            .with_host_blocks(t, &mut |y| got = compare_host_blocks(info.dtype, x, y))
                            .unwrap();
                    })
                    .unwrap();
                assert_eq!(serde_json::to_value(&got).unwrap(), serde_json::to_value(&want).unwrap(), "{t}");
                assert!(got.is_some());
                pairs += 1;
            }
            last_of.insert((info.dtype, lent.len()), t);
        }
        assert!(read > 400 && pairs > 20, "{read} reads, {pairs} pairs");
    }

    /// `with_values` lends a large fp32 storage from its map and leaves the unmapping to another thread of
    /// the pool: the values are the values read, and no map is left once the pool has run that work. With
    /// one thread (which would run it only once idle) the map is gone when `with_values` returns.
    #[test]
    fn lent_maps_are_unmapped_on_the_pool_or_at_once_with_one_thread() {
        // A copy of its own: other tests map the fixture's files.
        let dir = tempfile::tempdir().unwrap();
        let from = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/msprobe-tiny/bench");
        let to = dir.path().join("bench");
        copy_tree(&from, &to);
        let source = MsprobeSource::open(&to, &[to.join("step0/rank0/dump.json")]).unwrap();
        let path_of = |t: TensorId| {
            let (d, e) = source.entries[t];
            let path = source.dumps[d].data_path(&source.dumps[d].entries[e]).unwrap();
            path.canonicalize().unwrap().to_str().unwrap().to_owned()
        };
        let large: Vec<TensorId> = (0..source.index.tensors.len())
            .filter(|&t| source.index.tensors[t].dtype == DType::FLOAT)
            .filter(|&t| std::fs::metadata(path_of(t)).unwrap().len() >= UNMAP_ON_POOL_BYTES as u64)
            .collect();
        assert!(large.len() > 5, "{}", large.len());
        let mapped = |t: TensorId| std::fs::read_to_string("/proc/self/maps").unwrap().contains(&path_of(t));
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| {
                for &t in &large {
                    let mut want = Vec::new();
                    source.read_values(t, &mut want).unwrap();
                    let mut got = Vec::new();
                    source
                        .with_values(t, &mut Vec::new(), &mut |values| {
                            assert!(mapped(t), "{t}: lent from the map");
                            got = values.to_vec();
                        })
                        .unwrap();
                    assert!(got.iter().map(|v| v.to_bits()).eq(want.iter().map(|v| v.to_bits())), "{t}");
                    if threads == 1 {
                        assert!(!mapped(t), "{t}: still mapped with one thread");
                    }
                }
            });
            let waited = std::time::Instant::now();
            while let Some(t) = large.iter().find(|&&t| mapped(t)) {
                assert!(waited.elapsed().as_secs() < 20, "{t} still mapped, {threads} threads");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }

    fn copy_tree(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy_tree(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
}
