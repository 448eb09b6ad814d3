//! A capture opened and indexed from its records' heads: ops, tensors (hashes, places; their statistics
//! stay in the records, which the index reads again by place), overflow records tied to the ops they
//! blame, steps, what the ring deleted, the settings that change results.

use super::walk::{Building, StreamWalk};
use super::{runs, unpack, CaptureSource, Layouts};
use crate::index::{Index, RecordStats};
use crate::problems::InputProblem;
use accutrace_formats::capture::completeness::{self, RecordTally};
use accutrace_formats::capture::reader::{CaptureRun, StreamReader};
use accutrace_formats::stats::TensorStats;
use anyhow::{Context, Result};
use std::path::Path;
use std::sync::Arc;

impl CaptureSource {
    pub fn open(root: &Path) -> Result<Self> {
        let run =
            CaptureRun::open(root).with_context(|| format!("cannot open capture {}", root.display()))?;
        let mut building = Building::default();
        // Records found per stream, held against the manifest's counts at the end.
        let mut tallies = vec![RecordTally::default(); run.streams.len()];
        for (s, stream) in run.streams.iter().enumerate() {
            let mut walk = StreamWalk::new(s, stream);
            for item in stream.records() {
                let item = item?;
                tallies[s].count(&item.record);
                walk.add(&mut building, item, root)?;
            }
            walk.finish(&mut building, stream, segments_deleted(&run, stream));
        }
        let Building { mut index, layouts } = building;
        index.only_overflowing_ops |=
            run.manifest.as_ref().is_some_and(|m| captured_overflow_records_only(&m.config));
        index.only_overflowing_ops |= !index.overflow_records.is_empty();
        let mut source = finish_index(root, Arc::new(run), index, layouts);
        let index = &mut source.index;
        // Leads the other problems: an answer about a mix of runs is wrong whatever else is missing.
        if let Some(mixed) = runs::different_runs_problem(root, &index.communicators_by_stream) {
            index.problems.insert(0, mixed);
        }
        index.problems.extend(
            completeness::check(&source.run, &tallies)
                .iter()
                .map(|short| InputProblem::incomplete(short.to_string())),
        );
        Ok(source)
    }
}

/// What the manifest counts as deleted by the ring policy in `stream`.
pub(super) fn segments_deleted(run: &CaptureRun, stream: &StreamReader) -> Option<u64> {
    let manifest = run.manifest.as_ref()?;
    let dir = stream.dir().file_name()?.to_str()?;
    manifest.streams.iter().find(|e| e.dir == dir).map(|e| e.counts.segments_deleted)
}

/// The index of records walked made a source: what the manifest says about the run, the ops in execution
/// order, the statistics read from the records by place.
pub(super) fn finish_index(
    root: &Path,
    run: Arc<CaptureRun>,
    mut index: Index,
    layouts: Layouts,
) -> CaptureSource {
    if let Some(manifest) = &run.manifest {
        index.settings = Some(settings(manifest));
        index.job_ranks = ["RANK_SIZE", "WORLD_SIZE"]
            .iter()
            .find_map(|key| manifest.env.get(*key).and_then(|v| v.trim().parse().ok()));
        index.communicators_by_stream = communicators_by_stream(&run, &manifest.config);
        for s in &index.communicators_by_stream {
            index.communicators_made.entry(s.rank).or_default().extend(s.made.iter().cloned());
        }
    }
    // Records are in the order files completed (a big file after a small one that started later, and
    // several writer threads append in turn): execution order comes from the ops' own launch fields.
    let reorder = index.order_by_execution();
    let layouts = layouts.reorder(&reorder.tensors, index.tensors.len());
    index.read_record_stats_with(Arc::new(RecordsOf(run.clone())));
    CaptureSource { root: root.to_path_buf(), run, index, layouts }
}

/// The run's tensor records, which the index reads tensors' statistics from by locator. The records were
/// checked when the capture was opened: a read that fails now found bytes changed since, noted for the exit
/// status ([`late_reads`](crate::late_reads)).
struct RecordsOf(Arc<CaptureRun>);

impl RecordStats for RecordsOf {
    fn stats_at(&self, locator: u64) -> Option<TensorStats> {
        let (s, segment, offset) = unpack(locator);
        match self.0.streams.get(s)?.tensor_stats_at(segment, offset) {
            Ok(stats) => Some(stats),
            Err(e) => {
                crate::late_reads::note(format!(
                    "{e}: the tensor's statistics, read when the capture was opened, could not be read again: \
                     its bytes changed while this command ran; copy the capture again and rerun"
                ));
                None
            }
        }
    }
}

/// The environment variables of the real stack that change results or their reproducibility
/// (cann-facts §3): the toolkit (a CANN version has its own kernels), the device's inf/NaN mode, HCCL's
/// deterministic reductions, synchronous launches, the number of ranks.
const SETTINGS_ENV: [&str; 5] = [
    "ASCEND_TOOLKIT_HOME",
    "INF_NAN_MODE_ENABLE",
    "HCCL_DETERMINISTIC",
    "ASCEND_LAUNCH_BLOCKING",
    "RANK_SIZE",
];

/// What the manifest says about the settings that change results: the device overflow mode the collector
/// read, and [`SETTINGS_ENV`] where set.
fn settings(manifest: &accutrace_formats::capture::Manifest) -> std::collections::BTreeMap<String, String> {
    let mut settings: std::collections::BTreeMap<String, String> = SETTINGS_ENV
        .iter()
        .filter_map(|&key| manifest.env.get(key).map(|v| (key.to_string(), v.clone())))
        .collect();
    if let Some(mode) = &manifest.overflow_mode {
        settings.insert("the device overflow mode".into(), mode.clone());
    }
    settings
}

/// The communicators each stream's process made from a root info, in stream order (`config.communicators.<stream
/// dir>`, which collectors since it was recorded write for every stream, empty when none were made). A
/// stream without an entry, or without a rank, is left out: unknown, not "none".
pub(super) fn communicators_by_stream(
    run: &CaptureRun,
    config: &serde_json::Value,
) -> Vec<crate::index::StreamCommunicators> {
    let mut made = Vec::new();
    let Some(by_stream) = config.get("communicators").and_then(|v| v.as_object()) else { return made };
    for stream in &run.streams {
        let dir = stream.dir().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let (Some(rank), Some(entry)) = (stream.info().rank, by_stream.get(&dir)) else { continue };
        if let Ok(list) = serde_json::from_value::<Vec<crate::index::MadeCommunicator>>(entry.clone()) {
            made.push(crate::index::StreamCommunicators { stream: dir, rank, made: list });
        }
    }
    made
}

/// Whether the collector ran with the runtime's overflow detection (`ACCUTRACE_OVERFLOW=1`, the dump JSON's
/// `dump_debug: on`): then only overflowing ops were dumped.
pub(super) fn captured_overflow_records_only(config: &serde_json::Value) -> bool {
    config.pointer("/dump_json/dump/dump_debug").and_then(|v| v.as_str()) == Some("on")
        || config.pointer("/collector/overflow").and_then(|v| v.as_bool()) == Some(true)
}

#[cfg(test)]
mod tests {
    use super::super::test_data::{noise, read_as_whole, write, write_keeping, Written};
    use super::super::{DeviceLayout, OriginalShape, StoredLayout};
    use super::*;
    use crate::sources::Source;
    use accutrace_formats::layout::Format;
    use accutrace_formats::DType;

    /// A statistics capture's record changed after it was opened: its statistics are not made up, the
    /// tensor has none, and the failure is noted, naming the segment, for the exit status (never an
    /// all-clear on statistics that were not read).
    #[test]
    fn statistics_of_a_record_changed_after_opening_are_noted_not_made_up() {
        use std::io::{Seek, SeekFrom, Write};
        let tensors: Vec<Written> =
            (0..3).map(|k| (DType::FLOAT, Format::ND, vec![4], None, noise(16, k))).collect();
        let dir = tempfile::tempdir().unwrap();
        write_keeping(dir.path(), &tensors, |_| false);
        let source = CaptureSource::open(dir.path()).unwrap();
        let index = source.index();
        assert!(index.stats(1).is_some_and(|s| s.count == 4));
        let (s, _, offset) = unpack(index.tensors[1].locator);
        let segment = source.run.streams[s].segment_paths().next().unwrap().to_path_buf();
        // A byte of the record's head, which its checksum covers, changed in place (the mapping sees it).
        let mut file = std::fs::OpenOptions::new().read(true).write(true).open(&segment).unwrap();
        file.seek(SeekFrom::Start(offset + 12)).unwrap();
        let mut byte = [0u8];
        std::io::Read::read_exact(&mut file, &mut byte).unwrap();
        file.seek(SeekFrom::Start(offset + 12)).unwrap();
        file.write_all(&[byte[0] ^ 0x40]).unwrap();
        drop(file);
        assert!(index.stats(1).is_none(), "statistics of a changed record are not made up");
        assert!(index.stats(0).is_some() && index.stats(2).is_some(), "the others still read");
        let (count, first) = crate::late_reads::noted();
        let name = segment.display().to_string();
        assert!(
            count >= 1 && first.iter().any(|m| m.contains(&name) && m.contains("copy the capture")),
            "{first:?}"
        );
    }

    /// Beside the index, a capture keeps per tensor only what the host conversions read and the index
    /// lacks: no shape twice (#18: with the record's meta and its two shapes per tensor, a third table
    /// of 96 bytes and two allocations a tensor, the index of a 200,000-tensor stats capture grew by a
    /// sixth). The layout read back is the record's.
    #[test]
    fn a_tensors_layout_keeps_no_shape_the_index_holds() {
        assert!(std::mem::size_of::<Option<StoredLayout>>() <= 32);
        let nd = |shape: Vec<u64>, original: Option<Vec<u64>>| {
            let bytes = noise(4 * shape.iter().product::<u64>() as usize, 9);
            (DType::FLOAT, Format::ND, shape, original, bytes)
        };
        let tensors = vec![
            nd(vec![4, 3], None),
            nd(vec![12], Some(vec![4, 3])),
            // A framework shape that does not fit: the host shape is the device's, the record's kept.
            nd(vec![6], Some(vec![4, 3])),
        ];
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &tensors);
        let source = CaptureSource::open(dir.path()).unwrap();
        let kept: Vec<&OriginalShape> =
            (0..tensors.len()).map(|t| &source.layouts.get(t).unwrap().original_shape).collect();
        assert_eq!(
            kept,
            [&OriginalShape::None, &OriginalShape::HostShape, &OriginalShape::Other(Box::new([4, 3]))]
        );
        for (t, (dtype, format, device_shape, original_shape, _)) in tensors.iter().enumerate() {
            let expected = DeviceLayout {
                dtype: *dtype,
                format: format.code(),
                sub_format: 0,
                device_shape,
                original_shape: original_shape.as_deref(),
            };
            assert_eq!(source.layout(t), Some(expected), "tensor {t}");
        }
    }

    /// A statistics-only capture (the mode for long runs) holds no layout table: a slot a tensor was 32
    /// bytes of every command's memory (#18). Where the capture holds some tensors' data, those tensors'
    /// layouts are found by id and their values read; a tensor kept as statistics alone says so when read.
    #[test]
    fn layouts_are_held_for_the_tensors_whose_data_the_capture_holds() {
        let tensors: Vec<Written> = (0..6u64)
            .map(|i| (DType::FLOAT, Format::ND, vec![i + 1, 3], None, noise(12 * (i as usize + 1), i)))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        write_keeping(dir.path(), &tensors, |_| false);
        let source = CaptureSource::open(dir.path()).unwrap();
        assert_eq!(source.index.tensors.len(), 6);
        assert!(source.layouts.0.is_empty(), "a table of {} slots", source.layouts.0.len());
        let error = source.read_values(0, &mut Vec::new()).unwrap_err();
        assert!(format!("{error:#}").contains("statistics only"), "{error:#}");

        let dir = tempfile::tempdir().unwrap();
        write_keeping(dir.path(), &tensors, |i| i % 2 == 1);
        let source = CaptureSource::open(dir.path()).unwrap();
        let mut out = Vec::new();
        for t in 0..6 {
            let shape = &source.index.tensors[t].shape;
            assert_eq!(shape[..], [t as u64 + 1, 3]);
            assert_eq!(source.layout(t).is_some(), t % 2 == 1, "tensor {t}");
            if t % 2 == 1 {
                assert_eq!(read_as_whole(&source, t, &mut out).unwrap().len(), 3 * (t + 1));
            } else {
                assert!(source.read_values(t, &mut out).is_err(), "tensor {t}");
            }
        }
    }
}
