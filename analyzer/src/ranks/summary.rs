//! Per-rank summaries: what `analyzer scan` writes on each node, one Parquet file per rank, and `analyzer
//! merge` reads on one host to answer the cross-rank question without the tensors. A summary holds exactly a
//! rank's [`RankEvents`] (the events `analyzer ranks` reasons about), so merging gives the same answer as
//! analysing all ranks in one process; being Parquet, the same files answer SQL in DuckDB, Spark or Trino
//! (docs/RANK_SUMMARIES.md: the schema, its version, and the first-anomaly query).
//!
//! - [`columns`]: the schema, and a rank's events as columns (one row per tensor of each event) and back.
//! - [`series`]: the rank's downsampled statistic series (loss, gradient norms, per-layer magnitudes, ...),
//!   in a second file per rank, `series/rank{R:06}.parquet`.
//! - here: what a scan reads, the files (names, key-value metadata, writing each whole or not at all) and
//!   finding them.

pub mod columns;
pub mod series;

use super::events::{different_runs, fill_unknown_steps, identity_unknown, Names, RankEvents, RunEvents};
use crate::filter::{rank_ranges, Filter};
use crate::index::{MadeCommunicator, OpId};
use crate::overflow::gather_stats;
use crate::problems::{InputProblem, InputProblems};
use crate::progress::Progress;
use crate::sources::Source;
use anyhow::{bail, Context, Result};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use serde::Serialize;
use series::SeriesRow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The summary format's version (key `accutrace.summary_version`) that `scan` writes.
/// 1 was JSON (`rank{R}.events.json`); 2 is Parquet; 3 adds the series files (the events' columns are
/// version 2's).
pub const SUMMARY_VERSION: u32 = 3;

/// The versions whose events `merge` reads (2's files are 3's without series); it refuses others.
pub const READS: [u32; 2] = [2, 3];

/// The directory beside the summaries that holds the series files.
pub const SERIES_DIR: &str = "series";

/// Keys of the file's key-value metadata.
const KEY_VERSION: &str = "accutrace.summary_version";
const KEY_RUN: &str = "accutrace.run";
const KEY_RANK: &str = "accutrace.rank";
const KEY_EVENTS: &str = "accutrace.events";
const KEY_WARNINGS: &str = "accutrace.warnings";
const KEY_PROBLEMS: &str = "accutrace.problems";
const KEY_SERIES_POINTS: &str = "accutrace.series_points";
/// The scan's `--step/--rank/--op` selection: JSON `{"steps": [..], "ranks": [..], "ops": [..]}`, each
/// empty for "all". Absent in files of scans before it was recorded (then unknown: read as none).
const KEY_SELECTION: &str = "accutrace.selection";
/// How many ranks the job had (`RANK_SIZE`/`WORLD_SIZE` recorded with the run); absent when unknown.
const KEY_JOB_RANKS: &str = "accutrace.job_ranks";
/// The HCCL communicators the rank's process made from a root info (JSON `[{comm, comm_rank, comm_size}]`):
/// what tells one run's ranks from another's. Absent when unknown (a capture of an older collector, a dump
/// tree, scans before it was recorded).
const KEY_COMMUNICATORS: &str = "accutrace.communicators";

/// A selection as the metadata holds it.
#[derive(Debug, Default, PartialEq, Serialize, serde::Deserialize)]
struct SelectionKey {
    steps: Vec<u64>,
    ranks: Vec<u32>,
    ops: Vec<String>,
}

/// One rank of a job, as a summary holds it.
#[derive(Debug)]
pub struct RankSummary {
    /// The run it was scanned from, as named to `scan`.
    pub run: String,
    pub events: RankEvents,
    /// What the scan could not place, and what its source misses (the scan's, in each file it wrote).
    pub warnings: Vec<String>,
    pub problems: Vec<InputProblem>,
    /// The scan's selection (everything when empty).
    pub selection: Filter,
    /// How many ranks the job had, when the run recorded it.
    pub job_ranks: Option<u32>,
    /// The communicators the rank made from a root info, when the run recorded them.
    pub communicators_made: Option<Vec<MadeCommunicator>>,
}

/// The file name of rank `rank`'s summary.
pub fn file_name(rank: u32) -> String {
    format!("rank{rank:06}.parquet")
}

/// One summary written by [`write()`]: the events' file, and the series' file.
#[derive(Debug, Serialize)]
pub struct Written {
    pub rank: u32,
    pub file: PathBuf,
    pub events: u64,
    pub bytes: u64,
    pub series_file: PathBuf,
    /// Buckets of all its series.
    pub series_rows: u64,
    pub series_bytes: u64,
}

/// What `scan` reads of a run: each rank's events and its downsampled series, from one pass over the
/// statistics.
pub struct Scanned {
    pub events: RunEvents,
    pub series: BTreeMap<u32, Vec<SeriesRow>>,
}

/// Reads the events and series of the ops of `source` that `filter` keeps (`progress`: a bar on stderr,
/// when it is a terminal, while statistics the source does not store are decoded).
pub fn scan(source: &dyn Source, filter: &Filter, progress: bool) -> Scanned {
    let index = source.index();
    let ops = filter.op_ids(index);
    let mut unreadable = InputProblems::default();
    let stats = gather_stats(source, &ops, &mut unreadable, progress);
    let events = RunEvents::from_statistics(index, filter, &stats, &unreadable);
    let series = events
        .rank_ids()
        .into_iter()
        .map(|rank| {
            let of_rank: Vec<OpId> = ops.iter().copied().filter(|&o| index.ops[o].rank == rank).collect();
            (rank, series::of_rank(&crate::series::build(index, &of_rank, &stats), series::POINTS))
        })
        .collect();
    Scanned { events, series }
}

/// Writes one summary per rank of `run` into `dir` (created when missing), and its series (`series`; a rank
/// without is written with none) into `dir/series/`.
pub fn write(
    run: &RunEvents,
    series: &BTreeMap<u32, Vec<SeriesRow>>,
    run_name: &str,
    dir: &Path,
) -> Result<Vec<Written>> {
    let series_dir = dir.join(SERIES_DIR);
    std::fs::create_dir_all(&series_dir)
        .with_context(|| format!("cannot create {}", series_dir.display()))?;
    let mut written = Vec::new();
    for rank in &run.ranks {
        // Every file carries the scan's warnings and problems (merge keeps each once): a rank's torn tail
        // must lead merge's answer even when another rank's file is the one lost.
        let summary = RankSummary {
            run: run_name.to_string(),
            events: rank.clone(),
            warnings: run.warnings.clone(),
            problems: run.problems.clone(),
            selection: run.selection.clone(),
            job_ranks: run.job_ranks,
            communicators_made: run.communicators_made.get(&rank.rank).cloned(),
        };
        let file = dir.join(file_name(rank.rank));
        let bytes = write_one(&summary, &file)?;
        let rows = series.get(&rank.rank).map_or(&[][..], Vec::as_slice);
        let series_file = series_dir.join(file_name(rank.rank));
        let series_bytes = write_series(run_name, rank.rank, rows, &series_file)?;
        written.push(Written {
            rank: rank.rank,
            file,
            events: rank.events.len() as u64,
            bytes,
            series_file,
            series_rows: rows.len() as u64,
            series_bytes,
        });
    }
    Ok(written)
}

/// Writes a file through a temporary name, so that a scan stopped half-way leaves no file that looks
/// whole: `fill` writes the row groups. Returns its size.
fn write_whole(
    file: &Path,
    schema: parquet::schema::types::Type,
    metadata: Vec<KeyValue>,
    fill: impl FnOnce(&mut SerializedFileWriter<std::fs::File>) -> Result<()>,
) -> Result<u64> {
    let partial = file.with_extension("parquet.partial");
    let out =
        std::fs::File::create(&partial).with_context(|| format!("cannot write {}", partial.display()))?;
    let properties = WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .set_key_value_metadata(Some(metadata))
        .set_created_by(format!("accutrace analyzer {}", env!("CARGO_PKG_VERSION")))
        .build();
    let mut writer = SerializedFileWriter::new(out, Arc::new(schema), Arc::new(properties))
        .with_context(|| format!("cannot write {}", partial.display()))?;
    fill(&mut writer)
        .and_then(|()| Ok(writer.close()?))
        .with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, file).with_context(|| format!("cannot write {}", file.display()))?;
    Ok(std::fs::metadata(file).with_context(|| format!("cannot read {}", file.display()))?.len())
}

/// Writes rank `rank`'s series to `file` (whole or not at all). Returns its size.
pub fn write_series(run: &str, rank: u32, rows: &[SeriesRow], file: &Path) -> Result<u64> {
    let metadata = vec![
        KeyValue::new(KEY_VERSION.into(), SUMMARY_VERSION.to_string()),
        KeyValue::new(KEY_RUN.into(), run.to_string()),
        KeyValue::new(KEY_RANK.into(), rank.to_string()),
        KeyValue::new(KEY_SERIES_POINTS.into(), series::POINTS.to_string()),
    ];
    write_whole(file, series::schema(), metadata, |w| series::write(rank, rows, w))
}

/// Reads a series file: its rank and rows. Only this version's (3) has them.
pub fn read_series(file: &Path) -> Result<(u32, Vec<SeriesRow>)> {
    let f = std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
    let reader = SerializedFileReader::new(f)
        .with_context(|| format!("{}: not a Parquet rank series file", file.display()))?;
    let meta = Metadata::of(&reader);
    match meta.get(KEY_VERSION) {
        Some(v) if v == SUMMARY_VERSION.to_string() => {}
        Some(v) => bail!(
            "{}: summary version {v}; series files are version {SUMMARY_VERSION}'s (scan again with it)",
            file.display()
        ),
        None => bail!("{}: no {KEY_VERSION}: not a series file written by `analyzer scan`", file.display()),
    }
    let rank: u32 = meta.parse(KEY_RANK).with_context(|| file.display().to_string())?;
    let rows = series::read(&reader, rank).with_context(|| file.display().to_string())?;
    Ok((rank, rows))
}

/// Writes `summary` to `file` through a temporary name, so that a scan stopped half-way leaves no file
/// that looks like a summary. Returns its size.
pub fn write_one(summary: &RankSummary, file: &Path) -> Result<u64> {
    let metadata = vec![
        KeyValue::new(KEY_VERSION.into(), SUMMARY_VERSION.to_string()),
        KeyValue::new(KEY_RUN.into(), summary.run.clone()),
        KeyValue::new(KEY_RANK.into(), summary.events.rank.to_string()),
        KeyValue::new(KEY_EVENTS.into(), summary.events.events.len().to_string()),
        KeyValue::new(KEY_WARNINGS.into(), serde_json::to_string(&summary.warnings)?),
        KeyValue::new(KEY_PROBLEMS.into(), serde_json::to_string(&summary.problems)?),
        KeyValue::new(
            KEY_SELECTION.into(),
            serde_json::to_string(&SelectionKey {
                steps: summary.selection.steps.clone(),
                ranks: summary.selection.ranks.clone(),
                ops: summary.selection.ops.clone(),
            })?,
        ),
    ];
    let mut metadata = metadata;
    if let Some(n) = summary.job_ranks {
        metadata.push(KeyValue::new(KEY_JOB_RANKS.into(), n.to_string()));
    }
    if let Some(made) = &summary.communicators_made {
        metadata.push(KeyValue::new(KEY_COMMUNICATORS.into(), serde_json::to_string(made)?));
    }
    write_whole(file, columns::schema(), metadata, |w| columns::Columns::of(&summary.events)?.write(w))
}

/// Every `rank*.parquet` in `dirs` (a directory, or one summary file), as one run. A rank found twice, a
/// file that is not a summary or of another version is an error naming the file.
pub fn read(dirs: &[PathBuf]) -> Result<RunEvents> {
    read_showing(dirs, false)
}

/// [`read()`], with a bar on stderr (when `progress` and it is a terminal) counting the files read.
pub fn read_showing(dirs: &[PathBuf], progress: bool) -> Result<RunEvents> {
    let files = find(dirs)?;
    let bar = Progress::counting("reading", "summaries", files.len() as u64, !progress);
    let mut run = RunEvents::default();
    let mut from: Vec<(u32, PathBuf)> = Vec::new();
    // Each distinct selection (as options) and the ranks scanned with it.
    let mut selections: Vec<(String, Vec<u32>)> = Vec::new();
    let mut names = Names::default();
    // Each job size the summaries recorded and the ranks that recorded it: two sizes are two jobs.
    let mut job_sizes: Vec<(u32, Vec<u32>)> = Vec::new();
    for file in files {
        let s = read_one_with(&file, &mut names)?;
        bar.inc(1);
        if let Some((_, other)) = from.iter().find(|(r, _)| *r == s.events.rank) {
            bail!("rank {} is summarized twice: {} and {}", s.events.rank, other.display(), file.display());
        }
        for w in s.warnings {
            if !run.warnings.contains(&w) {
                run.warnings.push(w);
            }
        }
        for p in s.problems {
            if !run.problems.contains(&p) {
                run.problems.push(p);
            }
        }
        run.job_ranks = run.job_ranks.max(s.job_ranks);
        if let Some(made) = s.communicators_made {
            run.communicators_made.insert(s.events.rank, made);
        }
        if let Some(n) = s.job_ranks {
            match job_sizes.iter().position(|(size, _)| *size == n) {
                Some(i) => job_sizes[i].1.push(s.events.rank),
                None => job_sizes.push((n, vec![s.events.rank])),
            }
        }
        let options = s.selection.options();
        match selections.iter().position(|(o, _)| *o == options) {
            Some(i) => selections[i].1.push(s.events.rank),
            None => selections.push((options, vec![s.events.rank])),
        }
        if !s.selection.is_everything() && run.selection.is_everything() {
            run.selection = s.selection;
        }
        from.push((s.events.rank, file));
        run.ranks.push(s.events);
    }
    if selections.len() > 1 {
        let each: Vec<String> = selections
            .iter()
            .map(|(o, ranks)| {
                let o = if o.is_empty() { "no selection" } else { o.as_str() };
                format!("{o} ({})", rank_ranges(ranks))
            })
            .collect();
        run.warnings
            .push(format!("the summaries were scanned with different selections: {}", each.join("; ")));
    }
    if job_sizes.len() > 1 {
        // Summaries of two jobs in one answer (a scan into a directory that held another job's summaries):
        // their collectives cannot match, and no answer covers either job.
        let each: Vec<String> = job_sizes
            .iter()
            .map(|(n, ranks)| format!("{} of a job of {n} ranks", rank_ranges(ranks)))
            .collect();
        run.problems.push(InputProblem::incomplete(format!(
            "the summaries are of different jobs: {}; scan each job into its own directory and merge one \
             job's summaries",
            each.join(", ")
        )));
    }
    run.ranks.sort_by_key(|r| r.rank);
    // Two runs of one job size, each contributing ranks (one node's scan of another run): the ranks'
    // collectives cannot match, and no answer covers either run. Where summaries do not record the
    // communicators their ranks made, their calls tell it. Said once when a scan already said it.
    if let Some(mixed) = different_runs(&run).or_else(|| identity_unknown(&run)) {
        if !run.problems.iter().any(|p| p.message.starts_with(&mixed)) {
            run.problems.push(InputProblem::incomplete(format!(
                "{mixed}; scan each run into its own directory and merge one run's summaries"
            )));
        }
    }
    fill_unknown_steps(&mut run);
    Ok(run)
}

/// The summary files named or found in the directories named.
fn find(dirs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for d in dirs {
        if d.is_file() {
            files.push(d.clone());
            continue;
        }
        let entries = std::fs::read_dir(d).with_context(|| format!("cannot read {}", d.display()))?;
        for e in entries {
            let path = e.with_context(|| format!("cannot read {}", d.display()))?.path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if name.starts_with("rank") && name.ends_with(".parquet") {
                files.push(path);
            }
        }
    }
    if files.is_empty() {
        let named: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        bail!("no rank summaries (rank*.parquet, written by `analyzer scan`) in {}", named.join(", "));
    }
    files.sort();
    Ok(files)
}

/// Reads one summary file.
pub fn read_one(file: &Path) -> Result<RankSummary> {
    read_one_with(file, &mut Names::default())
}

/// Reads one summary file, its names shared through `names` with the files read before.
fn read_one_with(file: &Path, names: &mut Names) -> Result<RankSummary> {
    let f = std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
    let reader = SerializedFileReader::new(f).with_context(|| {
        format!(
            "{}: not a Parquet rank summary (cut short, or not Parquet): copy it again from the node that \
                 wrote it, or run `analyzer scan` on that rank's capture again",
            file.display()
        )
    })?;
    let meta = Metadata::of(&reader);
    match meta.get(KEY_VERSION) {
        Some(v) if READS.iter().any(|r| v == r.to_string()) => {}
        Some(v) => bail!(
            "{}: summary version {v}; this analyzer reads versions {} and {} (scan again with it)",
            file.display(),
            READS[0],
            READS[1]
        ),
        None => bail!("{}: no {KEY_VERSION}: not a rank summary written by `analyzer scan`", file.display()),
    }
    let rank: u32 = meta.parse(KEY_RANK).with_context(|| file.display().to_string())?;
    let events: usize = meta.parse(KEY_EVENTS).with_context(|| file.display().to_string())?;
    let summary = RankSummary {
        run: meta.get(KEY_RUN).unwrap_or_default().to_string(),
        events: columns::Columns::read(&reader)
            .and_then(|c| c.events(rank, events, names))
            .with_context(|| file.display().to_string())?,
        warnings: meta.json(KEY_WARNINGS).with_context(|| file.display().to_string())?,
        problems: meta.json(KEY_PROBLEMS).with_context(|| file.display().to_string())?,
        selection: match meta.get(KEY_SELECTION) {
            None => Filter::default(),
            Some(_) => {
                let s: SelectionKey = meta.json(KEY_SELECTION).with_context(|| file.display().to_string())?;
                Filter { steps: s.steps, ranks: s.ranks, ops: s.ops }
            }
        },
        job_ranks: match meta.get(KEY_JOB_RANKS) {
            None => None,
            Some(_) => Some(meta.parse(KEY_JOB_RANKS).with_context(|| file.display().to_string())?),
        },
        communicators_made: match meta.get(KEY_COMMUNICATORS) {
            None => None,
            Some(_) => Some(meta.json(KEY_COMMUNICATORS).with_context(|| file.display().to_string())?),
        },
    };
    Ok(summary)
}

/// The key-value metadata of a summary file.
struct Metadata<'a>(&'a [KeyValue]);

impl<'a> Metadata<'a> {
    fn of(reader: &'a SerializedFileReader<std::fs::File>) -> Self {
        Metadata(reader.metadata().file_metadata().key_value_metadata().map_or(&[], |kv| kv.as_slice()))
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.0.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_deref())
    }

    fn parse<T: std::str::FromStr>(&self, key: &str) -> Result<T> {
        let value = self.get(key).with_context(|| format!("no {key} in the file's metadata"))?;
        value.parse().ok().with_context(|| format!("{key} `{value}` is not a count"))
    }

    fn json<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<T> {
        let value = self.get(key).with_context(|| format!("no {key} in the file's metadata"))?;
        serde_json::from_str(value).with_context(|| format!("{key} is not what `analyzer scan` writes"))
    }
}
