//! How `diff` pairs two runs' HCCL calls on a rank of several communicators (#18): communicator by
//! communicator, each known across runs by its size and the rank's place in it (each run names its own).
//! Sequence numbers count per communicator, and two communicators' calls may come in another order from
//! run to run: a call one communicator lacks parts that communicator only, and the rank's other
//! communicators' calls still pair and are compared. Recorded on a pipeline job (`sim-train --pipeline`:
//! the job's communicator and each stage's data-parallel group) and on a data-parallel job rewritten to
//! gather its loss in groups of two, each read whole, by windows and under `--step`.

mod common;

use accutrace_formats::capture::{CollectiveInfo, CollectiveOp};
use analyzer::diff::{diff, diff_by_windows, diff_by_windows_from, select_steps, DiffOptions, DiffReport};
use analyzer::filter::Filter;
use analyzer::report::{self, Format};
use analyzer::sources::capture::windows::StepWindows;
use analyzer::sources::capture::CaptureSource;
use analyzer::sources::Source;
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

const STEPS: u64 = 6;
/// shared_job's model: a few hundred tensors a step and rank.
const MODEL: &str = r#"{"preset": "medium", "n_layers": 3, "d_model": 32, "n_heads": 2, "d_ff": 64, "vocab": 100, "batch": 2, "seq": 8}"#;

/// `sim-train --ranks 4 --pipeline --steps 6` of shared_job's model with `faults` (the model's, or empty)
/// and `options`, the collector preloaded with `env`: recorded once for this file.
fn pipeline_job(faults: &str, options: &[&str], env: &[(&str, &str)]) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    static JOBS: OnceLock<Mutex<BTreeMap<String, Arc<OnceLock<PathBuf>>>>> = OnceLock::new();
    let key = format!("{faults} {options:?} {env:?}");
    let job = JOBS.get_or_init(Default::default).lock().unwrap().entry(key).or_default().clone();
    job.get_or_init(|| {
        let dir = DIR.get_or_init(scratch).path();
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let name = format!("job-{}", MADE.fetch_add(1, Ordering::Relaxed));
        let model = format!("{}{faults}}}", MODEL.strip_suffix('}').unwrap());
        let options: Vec<&str> = ["--pipeline"].into_iter().chain(options.iter().copied()).collect();
        record_ranks_with(dir, &name, &model, 4, STEPS, &options, env)
    })
    .clone()
}

/// The step of each call of `rank` in the capture at `run`, in call order, with the call.
fn calls_of(run: &Path, rank: u32) -> Vec<(Option<u64>, CollectiveInfo)> {
    let source = CaptureSource::open(run).unwrap();
    let index = source.index();
    let steps = index.collective_steps();
    let calls = index.collectives.iter().zip(steps).filter(|(c, _)| c.rank == rank);
    calls.map(|(c, s)| (s, c.info.clone())).collect()
}

/// Asserts that `diff` reads each of `runs`, a pipeline's captures, by windows of a step (#18: its sends
/// and receives placed in steps as the whole read places them), while the commands whose census keeps no
/// calls read them whole.
fn read_by_windows(runs: &[&Path]) {
    for run in runs {
        let windows =
            StepWindows::census_with_calls(run, 1).unwrap().expect("diff reads a pipeline by windows");
        assert!(windows.windows().len() > 1, "{}: {:?}", run.display(), windows.windows());
        assert!(
            StepWindows::census(run, 1).unwrap().is_none(),
            "{}: the others read it whole",
            run.display()
        );
    }
}

/// The report as JSON and as text.
fn rendered(found: &DiffReport) -> (Value, String) {
    let table = report_text(|to| report::diff::write(found, Format::Table, to).unwrap());
    (serde_json::to_value(found).unwrap(), table)
}

/// The diff of `a` and `b` under `filter` read whole and, where both runs can be read by windows, by
/// windows of one step, or under a selection of steps by its windows only: the same JSON and text every
/// way (diff_calls reads windows of several steps too). Returns the JSON and the text.
fn same_every_way(a: &Path, b: &Path, filter: &Filter) -> (Value, String) {
    let options = DiffOptions { filter: filter.clone(), progress: false };
    let (a_whole, b_whole) = (CaptureSource::open(a).unwrap(), CaptureSource::open(b).unwrap());
    let whole = rendered(&diff(&a_whole, &b_whole, &options).unwrap());
    drop((a_whole, b_whole));
    let what = format!("{} vs {} {:?}", a.display(), b.display(), filter.steps);
    let census = |run: &Path, tensors: u64| StepWindows::census_with_calls(run, tensors).unwrap();
    let (Some(_), Some(_)) = (census(a, 1), census(b, 1)) else { return whole };
    let windows = |tensors: u64| {
        let (mut wa, mut wb) = (census(a, tensors).unwrap(), census(b, tensors).unwrap());
        assert!(StepWindows::align(&mut wa, &mut wb, tensors), "{what}: two windows at least");
        [wa, wb]
    };
    if filter.steps.is_empty() {
        let [wa, wb] = windows(1);
        let by_windows = rendered(&diff_by_windows([&wa, &wb], &options).unwrap());
        assert_eq!(by_windows, whole, "{what}: windows of a step");
    } else {
        let [mut wa, mut wb] = windows(1);
        let every = wa.windows().len();
        let calls = select_steps([&mut wa, &mut wb], &filter.steps, 1);
        assert!(wa.windows().len() < every, "{what}: the selection's windows only");
        let selected = rendered(&diff_by_windows_from([&wa, &wb], &options, calls).unwrap());
        assert_eq!(selected, whole, "{what}: the selected windows");
    }
    whole
}

fn steps(steps: &[u64]) -> Filter {
    Filter { steps: steps.to_vec(), ..Filter::default() }
}

/// The unmatched entries that are HCCL calls, as (run, step, rank, call).
fn unpaired_calls(report: &Value) -> Vec<(String, u64, u64, String)> {
    let unmatched = report["unmatched"].as_array().unwrap().iter();
    let calls = unmatched.filter(|u| u["tensor"].as_str().unwrap().contains("HCCL call"));
    let call = |u: &Value| u["tensor"].as_str().unwrap().split(" (").next().unwrap().to_string();
    calls
        .map(|u| {
            (
                u["run"].as_str().unwrap().into(),
                u["step"].as_u64().unwrap(),
                u["rank"].as_u64().unwrap(),
                call(u),
            )
        })
        .collect()
}

/// The first difference at `step` and `rank`, as (op, verdict).
fn first_at(report: &Value, step: u64, rank: u64) -> Option<(String, String)> {
    let firsts = report["first_differences"].as_array().unwrap();
    let f = firsts.iter().find(|f| f["step"] == step && f["rank"] == rank)?;
    Some((f["op"].as_str().unwrap().into(), f["verdict"].as_str().unwrap().into()))
}

/// Whether `call` is the one of `op` on a communicator of `size`.
fn is(call: &CollectiveInfo, op: CollectiveOp, size: u32) -> bool {
    call.op == op && call.comm_size == size
}

/// A pipeline's run without rank 2's data-parallel HcclAllReduce of step 2, against the run whose send at
/// step 4 was damaged in transit: the group's call is the one call without its counterpart, and rank 2's
/// calls on the job's communicator still pair (the damaged receive at step 4 is found); with the runs
/// swapped, the same.
#[test]
fn a_pipelines_communicators_pair_each_on_its_own() {
    let (healthy, corrupt) = (pipeline_job("", &[], &[]), pipeline_job("", &["--corrupt-send", "4"], &[]));
    read_by_windows(&[&healthy, &corrupt]);
    let dir = scratch();
    let lacking = dir.path().join("lacking");
    let group_reduce = |rank: u32, c: &CollectiveInfo| rank == 2 && is(c, CollectiveOp::AllReduce, 2);
    let dropped =
        calls_of(&corrupt, 2).into_iter().find(|(s, c)| *s == Some(2) && group_reduce(2, c)).unwrap().1;
    with_calls_edited(
        &corrupt,
        &lacking,
        |rank, call| if rank == 2 && call == dropped { vec![] } else { vec![call] },
    );
    let dropped_name = format!("HcclAllReduce #{}", dropped.seq);
    for (a, b, full) in [(&healthy, &lacking, "run1"), (&lacking, &healthy, "run2")] {
        let (report, text) = same_every_way(a, b, &Filter::default());
        assert_eq!(unpaired_calls(&report), [(full.to_string(), 2, 2, dropped_name.clone())], "{report:#}");
        assert!(text.contains(&format!("\n1 HCCL call only in {full}:\n")), "{text}");
        assert_eq!(report["verdict"], "different", "{report:#}");
        let (op, verdict) = first_at(&report, 4, 2).expect("the damaged receive at step 4 rank 2");
        assert!(op.starts_with("HcclRecv #4"), "{report:#}");
        assert_eq!(verdict, "nondeterministic", "{report:#}");
        // What was sent agreed: the receive changed in transit.
        assert!(
            text.contains("HcclRecv #4 [HcclRecv] is CHANGED IN TRANSIT: what was sent was identical"),
            "{text}"
        );
        let firsts = report["first_differences"].as_array().unwrap();
        let in_transit: Vec<bool> = firsts.iter().map(|f| f["in_transit"] == true).collect();
        assert_eq!(
            in_transit,
            firsts.iter().map(|f| f["op"] == "HcclRecv #4").collect::<Vec<_>>(),
            "{report:#}"
        );
        if full == "run2" {
            continue;
        }
        // Under --step after the parting, its call is listed and rank 2's receive is still found.
        let (selected, _) = same_every_way(a, b, &steps(&[4]));
        assert_eq!(unpaired_calls(&selected).len(), 1, "{selected:#}");
        assert!(
            first_at(&selected, 4, 2).is_some_and(|(op, _)| op.starts_with("HcclRecv #4")),
            "{selected:#}"
        );
    }
}

/// A ring that deleted a pipeline's first steps and cut into its first step's calls on some ranks (the
/// job's sends and receives there), against a full run whose send at step 4 was damaged: the ring's lost
/// calls are no difference, and the receive is found; the same with the ring as run 1 or as run 2.
#[test]
fn a_pipelines_ring_pairs_as_the_whole_run_where_both_hold_the_steps() {
    let env = [("ACCUTRACE_SEGMENT_SIZE", "64K"), ("ACCUTRACE_POLICY", "ring:192K")];
    let (ring, corrupt) = (pipeline_job("", &[], &env), pipeline_job("", &["--corrupt-send", "4"], &[]));
    let first = CaptureSource::open(&ring).unwrap().index().steps()[0];
    assert!((1..4).contains(&first), "the ring kept step {first} on");
    let cut = (0..4).filter(|&r| calls_of(&ring, r).iter().filter(|(s, _)| *s == Some(first)).count() < 6);
    assert!(cut.count() > 0, "the ring cut into step {first}'s calls");
    read_by_windows(&[&ring, &corrupt]);
    for (a, b, full) in [(&ring, &corrupt, "run2"), (&corrupt, &ring, "run1")] {
        let (report, _) = same_every_way(a, b, &Filter::default());
        assert!(unpaired_calls(&report).is_empty(), "the ring's lost calls are no difference: {report:#}");
        let unmatched = report["unmatched"].as_array().unwrap();
        assert!(unmatched.iter().any(|u| u["run"] == full && u["step"] == 0), "the gap: {report:#}");
        assert_eq!(report["verdict"], "different", "{report:#}");
        let (op, verdict) = first_at(&report, 4, 2).expect("the damaged receive at step 4 rank 2");
        assert_eq!((op.split(' ').next(), verdict.as_str()), (Some("HcclRecv"), "nondeterministic"));
        // Under --step, the selected windows only, the ring's first step among them or not.
        for selected in [&[4][..], &[first, 4]] {
            let (report, _) = same_every_way(a, b, &steps(selected));
            assert!(unpaired_calls(&report).is_empty(), "{selected:?}: {report:#}");
            assert!(first_at(&report, 4, 2).is_some(), "{selected:?}: {report:#}");
        }
    }
}

/// A data-parallel job's calls with its loss gathered in groups of two ranks (its HcclAllGather on a
/// communicator of its own, numbered from 0), each call passed to `edit` then.
fn gathered_in_pairs(
    from: &Path,
    to: &Path,
    mut edit: impl FnMut(u32, CollectiveInfo) -> Vec<CollectiveInfo>,
) {
    let mut gathered = [0u64; 4];
    with_calls_edited(from, to, |rank, call| {
        if call.op != CollectiveOp::AllGather {
            return edit(rank, call);
        }
        let seq = gathered[rank as usize];
        gathered[rank as usize] += 1;
        let comm = format!("{}-pair{}", call.comm, rank / 2);
        edit(rank, CollectiveInfo { comm, comm_rank: rank % 2, comm_size: 2, seq, ..call })
    });
}

/// A data-parallel job whose loss is gathered in groups of two, without rank 1's gather of step 1,
/// against one whose reduction went another way at step 2 on rank 1: the gather is the one call without its
/// counterpart, and rank 1's reduction is still found; read whole, by windows and under --step (where the
/// census carries the group's parting). Calls of two communicators the other way round are no difference.
#[test]
fn a_data_parallel_jobs_groups_pair_each_on_its_own_by_windows_too() {
    let faults = r#", "faults": {"nondeterministic_reduction": {"step": 2, "rank": 1}}"#;
    let (healthy, nondet) = (shared_job("", 4, STEPS, &[]), shared_job(faults, 4, STEPS, &[]));
    let dir = scratch();
    let (paired, lacking) = (dir.path().join("paired"), dir.path().join("lacking"));
    gathered_in_pairs(&nondet, &paired, |_, call| vec![call]);
    let step_1 = |rank: u32, c: &CollectiveInfo| rank == 1 && c.comm_size == 2 && c.seq == 1;
    gathered_in_pairs(&healthy, &lacking, |rank, call| if step_1(rank, &call) { vec![] } else { vec![call] });
    assert!(calls_of(&lacking, 0).iter().any(|(s, c)| *s == Some(1) && c.comm_size == 2 && c.seq == 1));
    let (whole, selected) = (Filter::default(), steps(&[2, 3]));
    let cases = [(&paired, &lacking, "run1", &whole), (&lacking, &paired, "run2", &whole)];
    for (a, b, full, filter) in cases.into_iter().chain([(&paired, &lacking, "run1", &selected)]) {
        let (report, text) = same_every_way(a, b, filter);
        assert!(text.contains(&format!("\n1 HCCL call only in {full}:\n")), "{text}");
        let lost = (full.to_string(), 1, 1, "HcclAllGather #1".to_string());
        assert_eq!(unpaired_calls(&report), [lost], "{report:#}");
        assert_eq!(report["verdict"], "different", "{report:#}");
        let (op, verdict) = first_at(&report, 2, 1).expect("the reduction at step 2 rank 1");
        assert_eq!((op.split(' ').next(), verdict.as_str()), (Some("HcclAllReduce"), "nondeterministic"));
    }
    // Rank 1's gather of step 3 made before the job's reduction before it.
    let (in_pairs, swapped) = (dir.path().join("in-pairs"), dir.path().join("swapped"));
    gathered_in_pairs(&healthy, &in_pairs, |_, call| vec![call]);
    let mut held: Option<CollectiveInfo> = None;
    gathered_in_pairs(&healthy, &swapped, |rank, call| {
        let next_gather = rank == 1 && call.op == CollectiveOp::AllGather && call.seq == 3;
        match (held.take(), next_gather) {
            (Some(before), true) => {
                let times = |c: &CollectiveInfo| (c.start_us, c.end_us);
                let ((s1, e1), (s2, e2)) = (times(&before), times(&call));
                let later = CollectiveInfo { start_us: s2, end_us: e2, ..before };
                vec![CollectiveInfo { start_us: s1, end_us: e1, ..call }, later]
            }
            (before, _) => {
                let mut out: Vec<CollectiveInfo> = before.into_iter().collect();
                if rank == 1 && call.op == CollectiveOp::AllReduce {
                    held = Some(call);
                } else {
                    out.push(call);
                }
                out
            }
        }
    });
    let at_3 = calls_of(&swapped, 1).into_iter().filter(|(s, _)| *s == Some(3)).map(|(_, c)| c.op);
    let ops: Vec<CollectiveOp> = at_3.collect();
    assert_eq!(ops.last(), Some(&CollectiveOp::AllReduce), "the gather first: {ops:?}");
    for (a, b, filter) in [(&in_pairs, &swapped, Filter::default()), (&swapped, &in_pairs, steps(&[4]))] {
        let (report, _) = same_every_way(a, b, &filter);
        assert_eq!(report["verdict"], "identical", "{report:#}");
    }
}

/// Ranks 2 and 3 of a pipeline (the second stage, as on node 1 of two) against the same ranks of the run
/// whose send at step 4 was damaged in transit: the receive at rank 2 (its send is not in the data, so its
/// step is not known) pairs where it was made and differs, at the step it was received for; with the
/// sender out of the data its verdict is `unknown` (its members are its send and itself, not the
/// communicator's collective of that number). The same with the runs swapped.
#[test]
fn a_receive_whose_send_is_elsewhere_is_compared_where_it_was_made() {
    let dir = scratch();
    let healthy = second_stage(&pipeline_job("", &[], &[]), &dir.path().join("healthy"));
    let corrupt = second_stage(&pipeline_job("", &["--corrupt-send", "4"], &[]), &dir.path().join("corrupt"));
    read_by_windows(&[&healthy, &corrupt]);
    for (a, b) in [(&healthy, &corrupt), (&corrupt, &healthy)] {
        let (report, _) = same_every_way(a, b, &Filter::default());
        assert!(unpaired_calls(&report).is_empty(), "{report:#}");
        assert_eq!(report["verdict"], "different", "{report:#}");
        assert_eq!(first_at(&report, 4, 2), Some(("HcclRecv #4".into(), "unknown".into())), "{report:#}");
        for selected in [&[4][..], &[1, 5]] {
            let (report, _) = same_every_way(a, b, &steps(selected));
            let found = first_at(&report, 4, 2);
            assert_eq!(found.is_some(), selected.contains(&4), "{selected:?}: {report:#}");
        }
    }
}

/// What node 1 of a 2-node pipeline holds: ranks 2 and 3 of the capture at `run`, copied to `to`.
fn second_stage(run: &Path, to: &Path) -> PathBuf {
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(run.join("manifest.json")).unwrap()).unwrap();
    let streams = manifest["streams"].as_array_mut().unwrap();
    streams.retain(|s| s["info"]["rank"].as_u64().unwrap() >= 2);
    for s in streams.iter() {
        let name = s["dir"].as_str().unwrap();
        copy_dir(&run.join(name), &to.join(name));
    }
    std::fs::write(to.join("manifest.json"), serde_json::to_vec(&manifest).unwrap()).unwrap();
    to.to_path_buf()
}
