//! How `diff` tells apart a rank's communicators of one size in which it has the same place (#18):
//! Megatron's tensor parallel 2 x data parallel 2 on 4 ranks (`sim-train --tensor-parallel 2`), where
//! rank 0 is place 0 of {0, 1} and of {0, 2}, and both count their calls from 0. A communicator is known
//! across runs by its size, the rank's place and its members (the ranks whose calls name it, as the whole
//! read and the census see them). Each case is read whole, by windows of one step and under `--step`, and
//! gives the same JSON and text every way; where the data lacks members, the calls that cannot be told
//! apart are said to be, and no all-clear rests on them.

mod common;

use accutrace_formats::capture::CollectiveInfo;
use analyzer::diff::{diff, diff_by_windows, diff_by_windows_from, select_steps, DiffOptions, DiffReport};
use analyzer::filter::Filter;
use analyzer::report::{self, Format};
use analyzer::sources::capture::windows::StepWindows;
use analyzer::sources::capture::CaptureSource;
use analyzer::sources::Source;
use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

const STEPS: u64 = 6;
/// shared_job's model: a few hundred tensors a step and rank.
const MODEL: &str = r#"{"preset": "medium", "n_layers": 3, "d_model": 32, "n_heads": 2, "d_ff": 64, "vocab": 100, "batch": 2, "seq": 8}"#;

/// A scratch directory for this file's recordings and copies.
fn dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(scratch).path()
}

/// `sim-train --ranks 4 --tensor-parallel 2 --steps 6`, the collector preloaded with `env` (a ring's, or
/// none): recorded once for this file.
fn tp_job(ring: bool) -> PathBuf {
    static JOBS: OnceLock<Mutex<BTreeMap<bool, PathBuf>>> = OnceLock::new();
    let mut jobs = JOBS.get_or_init(Default::default).lock().unwrap();
    let env: &[(&str, &str)] =
        if ring { &[("ACCUTRACE_SEGMENT_SIZE", "64K"), ("ACCUTRACE_POLICY", "ring:192K")] } else { &[] };
    let name = if ring { "ring" } else { "healthy" };
    let options = ["--tensor-parallel", "2"];
    jobs.entry(ring).or_insert_with(|| record_ranks_with(dir(), name, MODEL, 4, STEPS, &options, env)).clone()
}

/// What is changed in a copy of a recording, all on rank 0.
#[derive(Default)]
struct Edits {
    /// The step whose tensor-parallel call is lost.
    lost: Option<u64>,
    /// The step whose data-parallel call is made before its tensor-parallel call.
    swapped: Option<u64>,
    /// The step whose data-parallel call's result differs (a reduction in another order on this rank).
    nondeterministic: Option<u64>,
}

/// A copy of the capture at `from` (named `name`) with `edits` made to rank 0's group calls, made once for
/// this file.
fn edited(from: &Path, name: &str, edits: Edits) -> PathBuf {
    static MADE: OnceLock<Mutex<BTreeMap<String, PathBuf>>> = OnceLock::new();
    let mut made = MADE.get_or_init(Default::default).lock().unwrap();
    made.entry(name.to_string()).or_insert_with(|| edited_now(from, name, edits)).clone()
}

fn edited_now(from: &Path, name: &str, edits: Edits) -> PathBuf {
    let to = dir().join(name);
    let source = CaptureSource::open(from).unwrap();
    let index = source.index();
    // The ranks whose calls name each communicator.
    let mut members: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for c in &index.collectives {
        members.entry(c.info.comm.clone()).or_default().insert(c.rank);
    }
    // Rank 0's group calls, by (tensor parallel?, step): the tensor-parallel group is {0, 1}.
    let mut group_calls: BTreeMap<(bool, u64), CollectiveInfo> = BTreeMap::new();
    for (c, step) in index.collectives.iter().zip(index.collective_steps()) {
        if c.rank == 0 && c.info.comm_size == 2 {
            let tp = members[&c.info.comm] == BTreeSet::from([0, 1]);
            group_calls.insert((tp, step.unwrap()), c.info.clone());
        }
    }
    let at = |tp: bool, step: Option<u64>| step.map(|s| group_calls[&(tp, s)].clone());
    let (lost, nondeterministic) = (at(true, edits.lost), at(false, edits.nondeterministic));
    let swapped = [at(true, edits.swapped), at(false, edits.swapped)];
    let mut held: Option<CollectiveInfo> = None;
    with_calls_edited(from, &to, |rank, call| {
        if rank != 0 || Some(&call) == lost.as_ref() {
            return if rank == 0 { vec![] } else { vec![call] };
        }
        let mut call = call;
        if Some(&call) == nondeterministic.as_ref() {
            call.output.as_mut().unwrap().content_hash ^= 1;
        }
        if Some(&call) == swapped[0].as_ref() {
            held = Some(call);
            return vec![];
        }
        match held.take() {
            // The data-parallel call in the tensor-parallel call's time, and the other way round.
            Some(tp) => {
                let (first, second) = ((tp.start_us, tp.end_us), (call.start_us, call.end_us));
                let later = CollectiveInfo { start_us: second.0, end_us: second.1, ..tp };
                vec![CollectiveInfo { start_us: first.0, end_us: first.1, ..call }, later]
            }
            None => vec![call],
        }
    });
    to
}

/// The ranks `keep` of the capture at `run`, copied to `dir()/name` with a manifest listing them.
fn ranks_of(run: &Path, name: &str, keep: &[u32]) -> PathBuf {
    let to = dir().join(name);
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(run.join("manifest.json")).unwrap()).unwrap();
    let streams = manifest["streams"].as_array_mut().unwrap();
    streams.retain(|s| keep.contains(&(s["info"]["rank"].as_u64().unwrap() as u32)));
    for s in streams.iter() {
        let name = s["dir"].as_str().unwrap();
        copy_dir(&run.join(name), &to.join(name));
    }
    std::fs::write(to.join("manifest.json"), serde_json::to_vec(&manifest).unwrap()).unwrap();
    to
}

/// The report as JSON and as text.
fn rendered(found: &DiffReport) -> (Value, String) {
    let table = report_text(|to| report::diff::write(found, Format::Table, to).unwrap());
    (serde_json::to_value(found).unwrap(), table)
}

/// The diff of `a` and `b` under `filter` read whole and by windows of one step, or under a selection of
/// steps by its windows only: the same JSON and text every way. Returns the JSON and the text.
fn same_every_way(a: &Path, b: &Path, filter: &Filter) -> (Value, String) {
    let options = DiffOptions { filter: filter.clone(), progress: false };
    let (a_whole, b_whole) = (CaptureSource::open(a).unwrap(), CaptureSource::open(b).unwrap());
    let whole = rendered(&diff(&a_whole, &b_whole, &options).unwrap());
    drop((a_whole, b_whole));
    let what = format!("{} vs {} {:?}", a.display(), b.display(), filter.steps);
    let census = |run: &Path| StepWindows::census_with_calls(run, 1).unwrap().expect("read by windows");
    let (mut wa, mut wb) = (census(a), census(b));
    assert!(StepWindows::align(&mut wa, &mut wb, 1), "{what}: two windows at least");
    let (other, how) = if filter.steps.is_empty() {
        (rendered(&diff_by_windows([&wa, &wb], &options).unwrap()), "windows of a step")
    } else {
        let every = wa.windows().len();
        let calls = select_steps([&mut wa, &mut wb], &filter.steps, 1);
        assert!(wa.windows().len() < every, "{what}: the selection's windows only");
        (rendered(&diff_by_windows_from([&wa, &wb], &options, calls).unwrap()), "the selected windows")
    };
    assert_eq!(other.0, whole.0, "{what}: {how}, the JSON");
    assert_eq!(other.1, whole.1, "{what}: {how}, the text");
    whole
}

fn steps(steps: &[u64]) -> Filter {
    Filter { steps: steps.to_vec(), ..Filter::default() }
}

/// The unmatched entries that are HCCL calls, as (run, step, rank, call).
fn unpaired_calls(report: &Value) -> Vec<(String, u64, u64, String)> {
    let unmatched = report["unmatched"].as_array().unwrap().iter();
    let calls = unmatched.filter(|u| u["hccl_call"] == true);
    let call = |u: &Value| u["tensor"].as_str().unwrap().split(" (").next().unwrap().to_string();
    let entry = |u: &Value| {
        (u["run"].as_str().unwrap().into(), u["step"].as_u64().unwrap(), u["rank"].as_u64().unwrap(), call(u))
    };
    calls.map(entry).collect()
}

/// Every first difference, as (step, rank, op, verdict).
fn firsts(report: &Value) -> Vec<(u64, u64, String, String)> {
    let firsts = report["first_differences"].as_array().unwrap().iter();
    let at = |f: &Value| (f["step"].as_u64().unwrap(), f["rank"].as_u64().unwrap());
    let named =
        |f: &Value| (f["op"].as_str().unwrap().to_string(), f["verdict"].as_str().unwrap().to_string());
    firsts.map(|f| (at(f).0, at(f).1, named(f).0, named(f).1)).collect()
}

fn first(step: u64, rank: u64, op: &str, verdict: &str) -> (u64, u64, String, String) {
    (step, rank, op.to_string(), verdict.to_string())
}

fn problems(report: &Value) -> Vec<String> {
    let items = report["input_problems"].as_array().unwrap().iter();
    items.map(|p| p["message"].as_str().unwrap().to_string()).collect()
}

/// Rank 0's tensor-parallel call of step 1 lost, and its data-parallel reduction of step 3 another
/// result: the lost call is the one call without its counterpart, it parts its group only (the other
/// group's calls, with the same function and numbers, still pair), and the reduction is found; with
/// the runs swapped and under `--step 3`, the same.
#[test]
fn a_call_lost_on_one_group_parts_that_group_only() {
    let healthy = tp_job(false);
    let lacking =
        edited(&healthy, "lacking", Edits { lost: Some(1), nondeterministic: Some(3), ..Edits::default() });
    let cases = [(&healthy, &lacking, "run1", steps(&[3])), (&lacking, &healthy, "run2", Filter::default())];
    for (a, b, full, selection) in cases {
        for filter in [Filter::default(), selection] {
            let (report, text) = same_every_way(a, b, &filter);
            let lost = (full.to_string(), 1, 0, "HcclAllReduce #1".to_string());
            assert_eq!(unpaired_calls(&report), [lost], "{report:#}");
            assert!(text.contains(&format!("\n1 HCCL call only in {full}:\n")), "{text}");
            assert_eq!(firsts(&report), [first(3, 0, "HcclAllReduce #3", "nondeterministic")], "{report:#}");
            assert!(problems(&report).is_empty(), "{report:#}");
        }
    }
}

/// Rank 0's group calls of step 5 made the other way round, its data-parallel reduction there another
/// result: made once for this file.
fn swapped_nondet() -> PathBuf {
    let both = Edits { swapped: Some(5), nondeterministic: Some(5), ..Edits::default() };
    edited(&tp_job(false), "swapped-nondet", both)
}

/// Rank 0's two group calls of a step made the other way round: the same run, identical; with its
/// data-parallel reduction another result too, that call is the one difference, nondeterministic (its
/// members' inputs agree); under `--step` and with the runs swapped, the same.
#[test]
fn two_groups_calls_in_another_order_pair_by_their_members() {
    let healthy = tp_job(false);
    let swapped = edited(&healthy, "swapped", Edits { swapped: Some(2), ..Edits::default() });
    let nondet = swapped_nondet();
    for (a, b, filter) in [(&healthy, &swapped, Filter::default()), (&swapped, &healthy, steps(&[2, 3]))] {
        let (report, _) = same_every_way(a, b, &filter);
        assert_eq!(report["verdict"], "identical", "{report:#}");
    }
    let cases = [(&healthy, &nondet, Filter::default()), (&nondet, &healthy, Filter::default())];
    for (a, b, filter) in cases.into_iter().chain([(&healthy, &nondet, steps(&[4, 5]))]) {
        let (report, _) = same_every_way(a, b, &filter);
        assert!(unpaired_calls(&report).is_empty(), "{report:#}");
        assert_eq!(firsts(&report), [first(5, 0, "HcclAllReduce #5", "nondeterministic")], "{report:#}");
    }
}

/// A ring that deleted the first steps (and cut into the first kept step's calls on some ranks) against
/// a full run whose rank 0 made its group calls of step 5 the other way round, one with another result:
/// the ring's lost calls are no difference and the reduction is found, with the ring as either run.
#[test]
fn a_ring_pairs_each_group_as_the_whole_run() {
    let ring = tp_job(true);
    let first_kept = CaptureSource::open(&ring).unwrap().index().steps()[0];
    assert!((1..5).contains(&first_kept), "the ring kept step {first_kept} on");
    let nondet = swapped_nondet();
    for (a, b) in [(&ring, &nondet), (&nondet, &ring)] {
        let (report, _) = same_every_way(a, b, &Filter::default());
        assert!(unpaired_calls(&report).is_empty(), "{report:#}");
        assert_eq!(firsts(&report), [first(5, 0, "HcclAllReduce #5", "nondeterministic")], "{report:#}");
    }
}

/// Captures that lack some members. Node 0's (ranks 0 and 1): each of rank 0's groups has other
/// members in the data ({0, 1} and {0}), so they are told apart, and the reduction of a group whose
/// other member is not in the data is `unknown`. Rank 0's alone: its two groups cannot be told apart
/// (both {0}): their calls pair in their order, as one sequence, and the report says so, led by an
/// input problem: never an all-clear (the same run read twice is `incomplete`), and a difference among
/// them is `unknown`.
#[test]
fn groups_whose_members_are_not_in_the_data() {
    let (healthy, nondet) = (tp_job(false), swapped_nondet());
    let (node0, nondet0) = (ranks_of(&healthy, "node0", &[0, 1]), ranks_of(&nondet, "nondet-node0", &[0, 1]));
    let (report, _) = same_every_way(&node0, &nondet0, &Filter::default());
    assert_eq!(firsts(&report), [first(5, 0, "HcclAllReduce #5", "unknown")], "{report:#}");
    assert!(problems(&report).is_empty() && unpaired_calls(&report).is_empty(), "{report:#}");

    let (rank0, again) = (ranks_of(&healthy, "rank0", &[0]), ranks_of(&healthy, "rank0-again", &[0]));
    let (report, text) = same_every_way(&rank0, &again, &Filter::default());
    assert_eq!(report["verdict"], "incomplete", "{report:#}");
    let told = problems(&report);
    assert!(told.len() == 1 && told[0].contains("could not be told apart"), "{report:#}");
    assert!(text.starts_with("INCOMPLETE INPUT: rank 0: its HCCL communicators of 2 ranks"), "{text}");
    let nondet_rank0 = ranks_of(&nondet, "nondet-rank0", &[0]);
    let (report, _) = same_every_way(&rank0, &nondet_rank0, &Filter::default());
    assert_eq!(report["verdict"], "different", "{report:#}");
    assert_eq!(problems(&report).len(), 1, "{report:#}");
    let verdicts: BTreeSet<String> = firsts(&report).into_iter().map(|f| f.3).collect();
    assert_eq!(verdicts, BTreeSet::from(["unknown".to_string()]), "{report:#}");
}
