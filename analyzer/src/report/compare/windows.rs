//! `compare` of two long captures read a window of the same steps of each at a time (#18), its CSV and
//! JSON reports the whole runs' byte for byte. What a report lists of every pair, failing op or unmatched
//! tensor is written as each window is compared, to a spill file, a region per rank and window; at the end
//! the regions are copied into the report in the whole runs' order (rank, then window), the small rest
//! made from the windows folded (`CompareFold`).

use super::json_rows::RowJson;
use super::{
    csv_header, csv_record, culprit_tables, failing_json, failing_line, failing_list, first_failing_text,
    fused_json, fused_text, fusion_line, op_json, title, unmatched_json, unmatched_line, unmatched_list,
    CompareFormat, Counts, CulpritLines, Headline, Report, LISTED_FAILING, LISTED_UNMATCHED,
};
use crate::compare::fold::CompareFold;
use crate::compare::fold::Placed;
use crate::compare::{compare_part, fused_kernels, CompareOptions, Comparison};
use crate::index::Io;
use crate::outcome::Outcome;
use crate::problems::InputProblems;
use crate::progress::Progress;
use crate::report::{lead, paint, write_json, Destination, Output};
use crate::sources::capture::windows::StepWindows;
use crate::sources::Source;
use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// What the command needs of a comparison by windows once its report is written.
pub struct Windowed {
    pub outcome: Outcome,
    pub problems: InputProblems,
    /// How many windows were compared (of the selected steps only, where that sufficed).
    pub windows: usize,
}

/// How an attempt at a comparison by windows ended.
enum Attempt {
    Done(Windowed),
    /// The whole runs must be compared instead.
    Whole,
    /// A selection's windows cannot say what the whole runs' comparison would: every step's are read.
    EveryStep,
}

/// The lists a report takes from the spill file.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Section {
    Rows,
    FailingOps,
    FusedKernels,
    UnmatchedTarget,
    UnmatchedBench,
    TargetLabels,
    BenchLabels,
}

/// A region of the spill file: a section's items of one rank in one window.
struct Region {
    section: Section,
    rank: u32,
    window: usize,
    start: u64,
    end: u64,
}

/// An unnamed temporary file the report's lists are written to as they are made (removed at once: it
/// lives while it is open).
struct Spill {
    file: BufWriter<File>,
    /// Where it is: what an error names, so that the user can move it (a full disk).
    dir: PathBuf,
    len: u64,
    regions: Vec<Region>,
}

impl Spill {
    /// A spill file in TMPDIR (else the system's temporary directory).
    fn new() -> Result<Spill> {
        Spill::new_in(&std::env::temp_dir())
    }

    fn new_in(dir: &Path) -> Result<Spill> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let path = dir.join(format!("accutrace-compare-{}-{}.spill", std::process::id(), nanos.as_nanos()));
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| trouble("create", dir))?;
        // Removed while open: nothing is left behind, however the command ends.
        let _ = std::fs::remove_file(&path);
        Ok(Spill { file: BufWriter::new(file), dir: dir.to_path_buf(), len: 0, regions: Vec::new() })
    }

    fn push(&mut self, section: Section, rank: u32, window: usize, bytes: &[u8]) -> Result<()> {
        self.file.write_all(bytes).with_context(|| trouble("write", &self.dir))?;
        let start = self.len;
        self.len += bytes.len() as u64;
        match self.regions.last_mut() {
            Some(r) if (r.section, r.rank, r.window) == (section, rank, window) && r.end == start => {
                r.end = self.len
            }
            _ => self.regions.push(Region { section, rank, window, start, end: self.len }),
        }
        Ok(())
    }

    /// Whether the sections hold anything.
    fn holds(&self, sections: &[Section]) -> bool {
        self.regions.iter().any(|r| sections.contains(&r.section) && r.end > r.start)
    }

    /// The sections' regions copied to `out`, each section by rank then window, the first `skip` bytes
    /// left out.
    fn copy(&mut self, sections: &[Section], out: &mut dyn Write, mut skip: u64) -> Result<()> {
        self.file.flush().with_context(|| trouble("write", &self.dir))?;
        let mut regions: Vec<&Region> = Vec::new();
        for &section in sections {
            let mut of: Vec<&Region> = self.regions.iter().filter(|r| r.section == section).collect();
            of.sort_by_key(|r| (r.rank, r.window));
            regions.extend(of);
        }
        let file = self.file.get_mut();
        let read = || trouble("read", &self.dir);
        for r in regions {
            let start = r.start + skip.min(r.end - r.start);
            skip -= start - r.start;
            file.seek(SeekFrom::Start(start)).with_context(read)?;
            let mut part = Read::take(&mut *file, r.end - start);
            std::io::copy(&mut part, out).with_context(read)?;
        }
        file.seek(SeekFrom::End(0)).with_context(read)?;
        Ok(())
    }
}

/// Why the spill file in `dir` failed, and what to do: it holds about what the report lists (a full disk
/// is the likely cause of a failed write).
fn trouble(doing: &str, dir: &Path) -> String {
    format!(
        "cannot {doing} the temporary file in {} that holds the report's lists until the end (about the \
         report's size: compare by windows of long captures writes them there): set TMPDIR to a directory \
         on a disk with that much room",
        dir.display()
    )
}

/// `value` as an element of a top-level array of the pretty-printed report: after a separator, indented
/// two levels (its strings hold no newline: JSON escapes them).
fn element(value: &impl Serialize) -> Result<Vec<u8>> {
    let text = serde_json::to_string_pretty(value)?;
    Ok(format!(",\n    {}", text.replace('\n', "\n    ")).into_bytes())
}

/// What the text around the lists says of the culprit and of the first failing op, kept from the window
/// that held them; for the table, the first lines of its lists, by rank (the whole run lists rank by rank).
#[derive(Default)]
struct Kept {
    culprit: Option<CulpritLines>,
    culprit_json: serde_json::Value,
    culprit_tables: Vec<u8>,
    first_failing: Option<String>,
    note: Option<String>,
    /// Fused kernels, how many fail, and the first that does (by rank, then window).
    fused: [usize; 2],
    first_fused: Option<((u32, usize), String)>,
    /// The first failing ops of each rank: place, line but the tag, the tag unless it is the culprit.
    failing: BTreeMap<u32, Vec<(Placed, String, &'static str)>>,
    /// The first unmatched tensors of each rank, each side's.
    unmatched: [BTreeMap<u32, Vec<String>>; 2],
}

impl Kept {
    /// Window `w`'s first lines of the table's lists, where they come before those kept.
    fn table(&mut self, c: &Comparison<'_>, w: usize) {
        let (ti, bi) = (c.target.index(), c.bench.index());
        let kernels = fused_kernels(c);
        let failing: Vec<usize> = kernels.iter().filter(|(_, f)| *f).map(|(o, _)| *o).collect();
        self.fused[0] += kernels.len();
        self.fused[1] += failing.len();
        if let Some(&o) = failing.first() {
            let at = (ti.ops[o].rank, w);
            if self.first_fused.as_ref().is_none_or(|(held, _)| at < *held) {
                self.first_fused = Some((at, fused_text(ti, o)));
            }
        }
        for f in &c.failing_ops {
            let op = &ti.ops[f.op];
            let lines = self.failing.entry(op.rank).or_default();
            if lines.len() < LISTED_FAILING {
                let tag = match (f.inputs_pass, &f.inputs_unverified) {
                    (true, _) => "fails, inputs pass",
                    (false, Some(_)) => "fails, inputs unverified",
                    (false, None) => "propagates",
                };
                lines.push(((op.rank, op.step, op.order), failing_line(ti, f, ""), tag));
            }
        }
        for (side, (list, index)) in
            [(&c.unmatched_target, ti), (&c.unmatched_bench, bi)].into_iter().enumerate()
        {
            for &t in list {
                let lines = self.unmatched[side].entry(index.ops[index.tensors[t].op()].rank).or_default();
                if lines.len() < LISTED_UNMATCHED {
                    lines.push(unmatched_line(index, t));
                }
            }
        }
    }
}

/// Compares two captures a window of the same steps of each at a time ([`StepWindows::align`]) and writes
/// the report in `format` (the table without `--all`, CSV or JSON) to `to`; `None`, having written nothing,
/// when a window says the whole runs must be compared instead (`CompareFold::add`) or no pair matched.
pub fn compare_by_windows(
    runs: [&StepWindows; 2],
    options: &CompareOptions,
    format: CompareFormat,
    to: &Destination<'_>,
) -> Result<Option<Windowed>> {
    Ok(match attempt(runs, options, format, to)? {
        Attempt::Done(done) => Some(done),
        Attempt::Whole | Attempt::EveryStep => None,
    })
}

/// [`compare_by_windows`] of runs whose windows may keep to the selected steps
/// ([`StepWindows::select_steps`], then aligned): their windows alone are compared where the report they
/// give is the whole runs'; else every step's are, the selection the filter's only, as before. What the
/// whole runs' report says of the other steps: whether the benchmark holds inputs anywhere and the names
/// it fuses in any step (which clear target ops of having no counterpart) come from its census
/// ([`StepWindows::tensor_heads`]), else (a census that did not note them) from the indexes of its other
/// steps, read without comparing them, and every step's windows where the selection's hold no input. The
/// count of pairs narrower in the benchmark is over every step: every step's windows are read for it.
pub fn compare_steps_by_windows(
    runs: [&mut StepWindows; 2],
    options: &CompareOptions,
    format: CompareFormat,
    to: &Destination<'_>,
) -> Result<Option<Windowed>> {
    let [a, b] = runs;
    if a.is_selection() {
        match attempt([a, b], options, format, to)? {
            Attempt::Done(done) => return Ok(Some(done)),
            Attempt::Whole => return Ok(None),
            Attempt::EveryStep => {}
        }
        a.every_step();
        b.every_step();
        let window_tensors = a.window_tensors();
        if !StepWindows::align(a, b, window_tensors) {
            return Ok(None);
        }
    }
    compare_by_windows([a, b], options, format, to)
}

/// The comparison by windows, its report written where it is [`Attempt::Done`].
fn attempt(
    runs: [&StepWindows; 2],
    options: &CompareOptions,
    format: CompareFormat,
    to: &Destination<'_>,
) -> Result<Attempt> {
    let count = runs[0].windows().len();
    let selection = runs[0].is_selection();
    let progress = Progress::counting("compare", "windows", count as u64, !options.progress);
    // A window's pairs are many and quick: the bar counts windows.
    let quiet = CompareOptions { progress: false, ..options.clone() };
    let mut fold = CompareFold::default();
    // The table keeps its first lines only: no spill file, which might not find room.
    let mut spill = match format {
        CompareFormat::Csv | CompareFormat::Json => Some(Spill::new()?),
        _ => None,
    };
    let mut kept = Kept::default();
    // What the benchmark's census noted of its every tensor: whether it holds inputs anywhere and what it fuses.
    let heads = runs[1].tensor_heads();
    let (mut inputs_seen, mut decided_without_inputs) = (false, false);
    for w in 0..count {
        // Indexing one run does not depend on the other: both at once.
        let (a, b) = rayon::join(|| runs[0].open(w), || runs[1].open(w));
        let (a, b) = (a?, b?);
        // Whether the benchmark holds inputs is the whole run's word (a target input without a counterpart
        // is listed only then): its census's, else a window of no benchmark inputs takes the windows' before
        // it, and a window that decided without inputs before one that has them leaves the runs to the whole
        // compare.
        let inputs = heads.map_or_else(|| b.index().tensors.iter().any(|t| t.io == Io::Input), |h| h.inputs);
        if inputs && decided_without_inputs {
            progress.finish();
            // Every step's windows from the first may hold the benchmark's inputs before this one.
            return Ok(if selection { Attempt::EveryStep } else { Attempt::Whole });
        }
        inputs_seen |= inputs;
        decided_without_inputs |= !inputs_seen;
        let (c, facts) = compare_part(&a, &b, &quiet, Some(inputs_seen));
        let Some(added) = fold.add(w, &c, facts, &options.filter) else {
            progress.finish();
            return Ok(Attempt::Whole);
        };
        // What the other steps say too (`compare_steps_by_windows`): a count over every step.
        if selection && fold.narrower()[0] > 0 {
            progress.finish();
            return Ok(Attempt::EveryStep);
        }
        let ti = c.target.index();
        if let Some(i) = added.culprit {
            kept.culprit = Some(CulpritLines::of(&c, &c.failing_ops[i]));
            kept.culprit_json = op_json(ti, c.failing_ops[i].op);
        }
        if added.first_failing {
            let first = &c.failing_ops[0];
            kept.first_failing = Some(first_failing_text(&c, first));
            kept.note = Some(first.before_culprit_note(ti));
        }
        match (format, spill.as_mut()) {
            (CompareFormat::Csv, Some(spill)) => spill_csv(spill, &c, w)?,
            (CompareFormat::Json, Some(spill)) => spill_json(spill, &c, w)?,
            _ => {
                if let Some(i) = added.culprit {
                    kept.culprit_tables.clear();
                    culprit_tables(&mut kept.culprit_tables, &c, &c.failing_ops[i], to.paints())?;
                }
                kept.table(&c, w);
            }
        }
        progress.inc(1);
    }
    progress.finish();
    if fold.rows == 0 {
        return Ok(Attempt::Whole);
    }
    // No benchmark input in the selection: the other steps say whether the benchmark holds any.
    if selection && !inputs_seen && heads.is_none() {
        return Ok(Attempt::EveryStep);
    }
    // Target ops without a counterpart: a fused kernel in any of the benchmark's steps may name them (an
    // fp16 run's loss scaling against an fp32 one's has none): its census, else the other steps' indexes,
    // tell.
    if let Some(heads) = heads {
        fold.add_fused_names(heads.fused.iter().map(|name| &**name));
    } else if selection && fold.without_counterpart() > 0 {
        for window in runs[1].unselected_windows() {
            fold.add_bench_fusions(runs[1].open_steps(&window, false)?.index());
        }
    }
    let problems = fold.problems([runs[0].whole_run(), runs[1].whole_run()]);
    let warnings = fold.warnings();
    let [compared, passed, failed, unread, unmeasured, unmatched_target, unmatched_bench] = fold.counts();
    let mut culprit = kept.culprit.filter(|_| fold.culprit().is_some());
    if let Some(lines) = culprit.as_mut() {
        lines.note = kept.note.filter(|_| fold.failing_before_culprit());
    }
    let headline = Headline {
        warnings: &warnings,
        counts: Some(Counts {
            compared,
            passed,
            failed,
            unread,
            unmeasured,
            unmatched: [unmatched_target, unmatched_bench],
        }),
        refused: false,
        culprit,
        first_failing: kept.first_failing,
        judged: fold.judged(),
        problems: !problems.is_empty(),
        without_counterpart: fold.without_counterpart(),
    };
    let mut out = Output::open(to.output)?;
    let table = !matches!(format, CompareFormat::Csv | CompareFormat::Json);
    lead(&problems, table, to.output.is_some(), &mut out)?;
    match (format, spill.as_mut()) {
        (CompareFormat::Csv, Some(spill)) => {
            let mut w = csv::Writer::from_writer(&mut out);
            w.write_record(csv_header())?;
            w.flush()?;
            drop(w);
            spill.copy(&[Section::Rows], &mut out, 0)?;
        }
        (CompareFormat::Json, Some(spill)) => {
            let root = |w: usize| json!({"path": runs[w].root(), "kind": "capture"});
            let report = Report {
                api_calls: Vec::new(),
                bench: root(1),
                culprit: kept.culprit_json,
                failing_ops: Vec::new(),
                first_diverging_api: serde_json::Value::Null,
                fused_kernels: Vec::new(),
                input_problems: json!(problems),
                refused: serde_json::Value::Null,
                rows: Vec::<()>::new(),
                target: root(0),
                unmatched: Vec::new(),
                unmatched_bench: Vec::new(),
                unmatched_target: Vec::new(),
                warnings: json!(warnings),
            };
            write_spliced(&mut out, &report, spill)?;
        }
        _ => {
            title(&mut out, [(runs[0].root(), "capture"), (runs[1].root(), "capture")])?;
            headline.write(&mut out, to.paints())?;
            let first_fused = kept.first_fused.as_ref().map(|(_, text)| text.as_str());
            fusion_line(&mut out, kept.fused[0], kept.fused[1], first_fused)?;
            out.write_all(&kept.culprit_tables)?;
            let culprit = fold.culprit();
            let lines: Vec<String> = kept
                .failing
                .values()
                .flatten()
                .take(LISTED_FAILING)
                .map(|(at, line, tag)| {
                    format!("{line}{}", if Some(*at) == culprit { "culprit" } else { tag })
                })
                .collect();
            failing_list(&mut out, fold.failing_ops, &lines, false)?;
            for (side, lines) in ["target", "bench"].into_iter().zip(&kept.unmatched) {
                let lines: Vec<String> = lines.values().flatten().take(LISTED_UNMATCHED).cloned().collect();
                let count = if side == "target" { unmatched_target } else { unmatched_bench };
                unmatched_list(&mut out, side, count, &lines)?;
            }
        }
    }
    out.flush()?;
    let mut stderr = std::io::stderr().lock();
    if to.output.is_some() {
        headline.write(&mut stderr, to.colour.for_stderr())?;
    } else if !table {
        for w in &warnings {
            writeln!(stderr, "{}: {w}", paint("WARNING", "1;33", to.colour.for_stderr()))?;
        }
    }
    let outcome = match fold.failing_ops == 0 && fold.without_counterpart() == 0 {
        true => Outcome::Pass,
        false => Outcome::Findings,
    };
    Ok(Attempt::Done(Windowed { outcome, problems, windows: count }))
}

/// Window `w`'s rows as CSV records.
fn spill_csv(spill: &mut Spill, c: &Comparison<'_>, w: usize) -> Result<()> {
    let (ti, bi) = (c.target.index(), c.bench.index());
    for row in &c.rows {
        // A writer a record: the bytes of each, as one writer of every record writes them.
        let mut record = csv::Writer::from_writer(Vec::new());
        record.write_record(csv_record(ti, bi, row))?;
        let rank = ti.ops[ti.tensors[row.target()].op()].rank;
        spill.push(Section::Rows, rank, w, &record.into_inner().context("cannot write a CSV record")?)?;
    }
    Ok(())
}

/// Window `w`'s lists of the JSON report, each item an element of its array.
fn spill_json(spill: &mut Spill, c: &Comparison<'_>, w: usize) -> Result<()> {
    let (ti, bi) = (c.target.index(), c.bench.index());
    let rank = |index: &crate::index::Index, t: usize| index.ops[index.tensors[t].op()].rank;
    for row in &c.rows {
        spill.push(Section::Rows, rank(ti, row.target()), w, &element(&RowJson::new(row, ti, bi))?)?;
    }
    for f in &c.failing_ops {
        spill.push(Section::FailingOps, ti.ops[f.op].rank, w, &element(&failing_json(ti, f))?)?;
    }
    for k in fused_kernels(c) {
        spill.push(Section::FusedKernels, ti.ops[k.0].rank, w, &element(&fused_json(ti, k))?)?;
    }
    for &t in &c.unmatched_target {
        let r = rank(ti, t);
        spill.push(Section::UnmatchedTarget, r, w, &element(&unmatched_json("target", ti, t))?)?;
        spill.push(Section::TargetLabels, r, w, &element(&ti.tensor_label(t))?)?;
    }
    for &t in &c.unmatched_bench {
        let r = rank(bi, t);
        spill.push(Section::UnmatchedBench, r, w, &element(&unmatched_json("bench", bi, t))?)?;
        spill.push(Section::BenchLabels, r, w, &element(&bi.tensor_label(t))?)?;
    }
    Ok(())
}

/// `report` written as [`write_json`] writes it, its empty lists replaced by the spilled ones.
fn write_spliced(out: &mut dyn Write, report: &Report<Vec<()>>, spill: &mut Spill) -> Result<()> {
    let mut text = Vec::new();
    write_json(&mut text, "compare", report)?;
    let lists: [(&str, &[Section]); 6] = [
        ("failing_ops", &[Section::FailingOps]),
        ("fused_kernels", &[Section::FusedKernels]),
        ("rows", &[Section::Rows]),
        ("unmatched", &[Section::UnmatchedTarget, Section::UnmatchedBench]),
        ("unmatched_bench", &[Section::BenchLabels]),
        ("unmatched_target", &[Section::TargetLabels]),
    ];
    let mut at = 0;
    for (key, sections) in lists {
        // A top-level key is the only text at the start of a line indented by two spaces.
        let needle = format!("\n  \"{key}\": []");
        let found = find(&text[at..], needle.as_bytes()).context("the report's JSON lost a list")? + at;
        let value = found + needle.len() - 2;
        out.write_all(&text[at..value])?;
        if spill.holds(sections) {
            out.write_all(b"[\n")?;
            spill.copy(sections, out, 2)?;
            out.write_all(b"\n  ]")?;
        } else {
            out.write_all(b"[]")?;
        }
        at = value + 2;
    }
    out.write_all(&text[at..])?;
    Ok(())
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An element spliced into a top-level list reads as the pretty printer writes it in place.
    #[test]
    fn an_element_is_indented_as_in_its_list() {
        let v = json!({"a": [1, {"b": "x\ny"}], "c": null, "d": []});
        let whole = serde_json::to_string_pretty(&json!({"list": [v.clone(), v.clone()]})).unwrap();
        let elements = [element(&v).unwrap(), element(&v).unwrap()].concat();
        let spliced = format!("{{\n  \"list\": [\n{}\n  ]\n}}", std::str::from_utf8(&elements[2..]).unwrap());
        assert_eq!(spliced, whole);
    }

    /// A spill file that cannot be made (TMPDIR names no directory) says where it was to be and what to do.
    #[test]
    fn a_spill_that_cannot_be_made_names_its_directory_and_tmpdir() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        let Err(e) = Spill::new_in(&gone) else { panic!("a spill file in a missing directory") };
        let text = format!("{e:#}");
        assert!(text.contains(&format!("in {} ", gone.display())), "{text}");
        assert!(text.contains("set TMPDIR to a directory on a disk with that much room"), "{text}");
        assert!(Spill::new_in(dir.path()).is_ok());
    }

    /// A section's regions come back by rank, then window, whatever order they were written in; another
    /// section's are left out, and the first bytes skipped.
    #[test]
    fn the_spill_gives_a_section_by_rank_then_window() {
        let mut spill = Spill::new().unwrap();
        for (rank, w, text) in [(1, 0, "b0"), (0, 0, "a0"), (1, 1, "b1"), (0, 1, "a1"), (0, 1, "+")] {
            spill.push(Section::Rows, rank, w, text.as_bytes()).unwrap();
        }
        spill.push(Section::FailingOps, 0, 0, b"x").unwrap();
        let mut out = Vec::new();
        spill.copy(&[Section::Rows], &mut out, 1).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "0a1+b0b1");
        assert!(spill.holds(&[Section::FailingOps]) && !spill.holds(&[Section::BenchLabels]));
    }
}
