//! Determinism: is every source of run-to-run variation switched off?
//!
//! From the manifest: the deterministic-computation option the job set (`aclrtCtxSetSysParamOpt(
//! ACL_OPT_DETERMINISTIC)`, seen by the collector), `HCCL_DETERMINISTIC` when there are collectives (more
//! than one rank), `ASCEND_LAUNCH_BLOCKING`, and the device's overflow mode (saturation or INF/NaN: the two
//! runs must overflow alike). Against a second run, also the evidence: in the first step both runs
//! captured, the first op whose output differs while all its inputs are identical is nondeterministic.

use super::item::{worst, Facts, Item, Status};
use crate::comparable::{kernel_types_part, mostly_kernels_by_type, KernelTypesPart};
use crate::index::{Index, Io, OpId};
use crate::problems::ProblemKind;
use std::collections::HashMap;

const LOOK: &str =
    "manifest.json (environment.settings, env); `analyzer diff RUN RUN2` names every nondeterministic op";

/// The settings that make a run reproducible, as one run recorded them.
struct Settings {
    deterministic: Option<i64>,
    hccl: Option<String>,
    launch_blocking: Option<String>,
    overflow_mode: Option<String>,
    ranks: usize,
}

fn settings(r: &Facts<'_>) -> Option<Settings> {
    let m = r.manifest?;
    Some(Settings {
        deterministic: m.environment.settings.deterministic,
        hccl: m.env.get("HCCL_DETERMINISTIC").cloned(),
        launch_blocking: m.env.get("ASCEND_LAUNCH_BLOCKING").cloned(),
        overflow_mode: m.overflow_mode.clone(),
        ranks: r.ranks.len().max(m.streams.len()),
    })
}

/// A setting as the reason words it: its value, or `unset` (never Rust's `Some(1)` / `None`).
fn unset<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "unset".to_string(), T::to_string)
}

/// What a value of ACL_OPT_DETERMINISTIC turns on: 1 deterministic computation, 2 strong consistency (also
/// the same result wherever the data sits), 3 batch consistency (also the same result whatever the batch);
/// 0 and anything else, nothing (hicann/runtime `docs/zh/api_ref/25-02_Enumerations.md`; the runtime takes
/// 0 to 3, `src/runtime/api/impl/api_error.cc`).
fn deterministic_level(v: i64) -> Option<&'static str> {
    match v {
        1 => Some("on"),
        2 => Some("on, with strong consistency"),
        3 => Some("on, with batch consistency"),
        _ => None,
    }
}

fn truthy(v: &str) -> bool {
    matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "on" | "yes")
}

/// One run's verdict on its own settings, with what it saw.
fn judge(r: &Facts<'_>, s: &Settings) -> (Status, String, Vec<String>) {
    let mut details = vec![
        format!(
            "{}: deterministic computation {}",
            r.label,
            match s.deterministic {
                Some(v) => match deterministic_level(v) {
                    Some(level) => format!("{level} (the job set ACL_OPT_DETERMINISTIC = {v})"),
                    None => format!("OFF (the job set ACL_OPT_DETERMINISTIC = {v})"),
                },
                None =>
                    "not seen set (the default is off; a framework that looks the call up through its own \
                         library handle hides it from the collector)"
                        .to_string(),
            }
        ),
        format!(
            "{}: overflow mode {}, ASCEND_LAUNCH_BLOCKING {}, HCCL_DETERMINISTIC {} ({} rank{})",
            r.label,
            s.overflow_mode.as_deref().unwrap_or("unknown"),
            s.launch_blocking.as_deref().unwrap_or("unset"),
            s.hccl.as_deref().unwrap_or("unset"),
            s.ranks,
            if s.ranks == 1 { "" } else { "s" }
        ),
    ];
    let hccl_off = s.ranks > 1 && !s.hccl.as_deref().is_some_and(truthy);
    if hccl_off {
        details.push(format!(
            "{}: collectives without HCCL_DETERMINISTIC=true reduce in a varying order",
            r.label
        ));
    }
    match (s.deterministic, hccl_off) {
        (Some(v), _) if deterministic_level(v).is_none() => {
            (Status::Fail, format!("{} turned deterministic computation off", r.label), details)
        }
        (_, true) => {
            (Status::Fail, format!("{} runs collectives without HCCL_DETERMINISTIC", r.label), details)
        }
        (Some(_), false) => (Status::Pass, format!("{} computes deterministically", r.label), details),
        (None, false) => (
            Status::CantTell,
            format!("{} never set deterministic computation where the collector could see it", r.label),
            details,
        ),
    }
}

/// `same_run`: the two runs are one run given twice (`sources::same_run`): only its settings are judged.
/// `divergence`: where two runs that are not one first differ ([`first_divergence`]; `None` when they share
/// no step and rank).
pub(super) fn item(runs: &[Facts<'_>], same_run: bool, divergence: Option<Divergence>) -> Item {
    let all: Vec<Option<Settings>> = runs.iter().map(settings).collect();
    let mut statuses = Vec::new();
    let mut reasons = Vec::new();
    let mut details = Vec::new();
    for (r, s) in runs.iter().zip(&all) {
        match s {
            Some(s) => {
                let (status, reason, d) = judge(r, s);
                statuses.push(status);
                if status != Status::Pass {
                    reasons.push(reason);
                }
                details.extend(d);
            }
            None => {
                statuses.push(Status::CantTell);
                reasons.push(format!("{} has no manifest: only captures record the environment", r.label));
            }
        }
    }
    if same_run {
        details.push("RUN2 is RUN: identical outputs of a run compared with itself are no evidence".into());
    } else if let [a, b] = runs {
        // Runs set up differently (any configuration difference, or the settings below): an op whose
        // outputs differ from identical inputs may be the change at work, not nondeterminism.
        let configuration = match (a.manifest, b.manifest) {
            (Some(ma), Some(mb)) => super::config::differences(ma, mb).len(),
            _ => 0,
        };
        let mut set_up_differently = configuration;
        if let (Some(sa), Some(sb)) = (&all[0], &all[1]) {
            let mut differ = Vec::new();
            if sa.overflow_mode != sb.overflow_mode {
                differ.push(format!(
                    "overflow mode {} vs {}",
                    unset(&sa.overflow_mode),
                    unset(&sb.overflow_mode)
                ));
            }
            if sa.deterministic != sb.deterministic {
                let (da, db) = (unset(&sa.deterministic), unset(&sb.deterministic));
                differ.push(format!("ACL_OPT_DETERMINISTIC {da} vs {db}"));
            }
            if sa.hccl != sb.hccl {
                differ.push(format!("HCCL_DETERMINISTIC {} vs {}", unset(&sa.hccl), unset(&sb.hccl)));
            }
            if !differ.is_empty() {
                set_up_differently += differ.len();
                statuses.push(Status::Fail);
                reasons.push(format!("the runs are set up differently: {}", differ.join("; ")));
            }
        }
        let divergence = divergence
            .unwrap_or_else(|| Divergence::Unknown("the runs share no step and rank to compare".into()));
        match divergence {
            Divergence::Nondeterministic { step, rank, op } if set_up_differently > 0 => {
                let see = match configuration {
                    0 => String::new(),
                    1 => " (1 configuration difference: see configuration)".to_string(),
                    n => format!(" ({n} configuration differences: see configuration)"),
                };
                statuses.push(Status::CantTell);
                reasons.insert(
                    0,
                    format!(
                        "step {step} rank {rank}: {op} gave different outputs from identical inputs, but the \
                         runs are set up differently{see}: they cannot tell nondeterminism from the setting \
                         change; compare two runs set up alike"
                    ),
                );
            }
            Divergence::Nondeterministic { step, rank, op } => {
                statuses.push(Status::Fail);
                reasons.insert(
                    0,
                    format!("step {step} rank {rank}: {op} gave different outputs from identical inputs"),
                );
            }
            Divergence::Inputs { step, rank, op } => details.push(format!(
                "the runs first differ in the inputs of {op} (step {step} rank {rank}): see data and initial weights"
            )),
            Divergence::None { step, held_in_part } => {
                let mut same = format!("step {step}: every op both runs dumped gave identical outputs");
                // A pass that skipped an op says which: its kept tensors alone are no evidence.
                if let Some(first) = held_in_part.first() {
                    same += &match held_in_part.len() {
                        1 => format!(", but 1 op one run holds only in part was not compared: {first}"),
                        n => format!(
                            ", but {n} ops one run holds only in part were not compared, the first {first}"
                        ),
                    };
                }
                details.push(same.clone());
                // Identical results are the evidence an unseen setting could not give: the pass says so, and
                // keeps what was not set (later steps, other inputs may still vary).
                if !statuses.contains(&Status::Fail) {
                    statuses.iter_mut().for_each(|s| *s = Status::Pass);
                    if !reasons.is_empty() {
                        let unset = reasons.join("; ");
                        reasons = vec![format!(
                            "{same} (later steps may still vary: deterministic computation not set or not \
                             seen set: {unset})"
                        )];
                    } else {
                        reasons = vec![format!(
                            "deterministic computation is on and the runs are set up alike; {same}"
                        )];
                    }
                }
            }
            Divergence::Unknown(why) => details.push(why),
        }
    }
    let status = worst(statuses);
    let reason = if reasons.is_empty() {
        "deterministic computation is on and the runs are set up alike".to_string()
    } else {
        reasons.join("; ")
    };
    Item::new("determinism", status, reason, LOOK).with(details)
}

pub(super) enum Divergence {
    /// An op whose inputs were identical gave different outputs.
    Nondeterministic {
        step: u64,
        rank: u32,
        op: String,
    },
    /// The first difference is in an op's inputs: data or weights differ, not the computation.
    Inputs {
        step: u64,
        rank: u32,
        op: String,
    },
    /// Every compared op was identical in this step; `held_in_part` names the ops skipped because one
    /// run holds only some of their tensors (with how many), in execution order.
    None {
        step: u64,
        held_in_part: Vec<String>,
    },
    Unknown(String),
}

/// Walks the first (rank, step) both runs have, in run 1's execution order, matching ops by name and
/// occurrence, and compares content hashes; `None` when the runs share no step and rank. `lost`: either run
/// lost records ([`ProblemKind::Incomplete`]), which a run read by windows knows only once all are read.
pub(super) fn first_divergence(
    a: &Index,
    ops_a: &[OpId],
    b: &Index,
    ops_b: &[OpId],
    lost: bool,
) -> Option<Divergence> {
    // An FFTS+ sub-task's copy of an op is no op of its own: runs dumped at other `dump_level`s launched
    // the same kernels.
    let own = |i: &Index, ops: &[OpId]| {
        let copies = i.sub_task_copies();
        ops.iter().copied().filter(|o| !copies.contains_key(o)).collect::<Vec<_>>()
    };
    let (ops_a, ops_b) = (&own(a, ops_a)[..], &own(b, ops_b)[..]);
    let key = |i: &Index, o: OpId| (i.ops[o].rank, i.ops[o].step);
    let mut common: Vec<(u32, u64)> = ops_a.iter().map(|&o| key(a, o)).collect();
    let in_b: std::collections::HashSet<(u32, u64)> = ops_b.iter().map(|&o| key(b, o)).collect();
    common.retain(|k| in_b.contains(k));
    common.sort_by_key(|&(r, s)| (s, r));
    let &(rank, step) = common.first()?;
    let mut occurrence: HashMap<&str, usize> = HashMap::new();
    let mut by_name: HashMap<(&str, usize), OpId> = HashMap::new();
    for &o in ops_b.iter().filter(|&&o| key(b, o) == (rank, step)) {
        let n = occurrence.entry(b.ops[o].name.as_str()).or_default();
        by_name.insert((b.ops[o].name.as_str(), *n), o);
        *n += 1;
    }
    occurrence.clear();
    let (step_a, step_b): (Vec<OpId>, Vec<OpId>) = (
        ops_a.iter().copied().filter(|&o| key(a, o) == (rank, step)).collect(),
        ops_b.iter().copied().filter(|&o| key(b, o) == (rank, step)).collect(),
    );
    let parting = kernel_types_part_of(a, &step_a, b, &step_b, &by_name, lost);
    let hashes = |i: &Index, ts: std::ops::Range<crate::index::TensorId>| {
        ts.map(|t| i.tensors[t].hash()).collect::<Vec<_>>()
    };
    let shapes = |i: &Index, o: OpId| {
        let op = &i.ops[o];
        op.tensors().map(|t| i.tensors[t].shape.clone()).collect::<Vec<_>>()
    };
    /// Each tensor's shape by its place among the op's inputs and outputs.
    fn slots(i: &Index, o: OpId) -> HashMap<(Io, u32), &[u64]> {
        let op = &i.ops[o];
        op.tensors().map(|t| ((i.tensors[t].io, i.tensors[t].index), &i.tensors[t].shape[..])).collect()
    }
    let mut compared = 0;
    let mut held_in_part = Vec::new();
    for (position, &o) in step_a.iter().enumerate() {
        let name = a.ops[o].name.as_str();
        let n = occurrence.entry(name).or_default();
        let Some(&ob) = by_name.get(&(name, *n)) else { continue };
        *n += 1;
        // Eager kernels past a kernel one run fused and the other did not: the name is another kernel.
        if let Some(part) = parting.as_ref().filter(|part| position >= part.from) {
            return Some(Divergence::Unknown(format!(
                "step {step} rank {rank}: {name} is not the same op in the two runs (the kernel types in \
                 execution order part before it: {}; eager kernels are named by type and a per-type \
                 counter, so past a kernel one run fused and the other did not, one name is another kernel); \
                 {compared} ops before it gave identical outputs, the rest are not compared",
                part.what
            )));
        }
        // An op one run holds in part (a ring capture deleted the segment with its first tensors, a chunk
        // was lost): the tensors it kept are the other run's, and prove nothing either way.
        let (slots_a, slots_b) = (slots(a, o), slots(b, ob));
        let within = |part: &HashMap<_, &[u64]>, whole: &HashMap<_, &[u64]>| {
            part.iter().all(|(slot, shape)| whole.get(slot) == Some(shape))
        };
        if slots_a != slots_b && (within(&slots_a, &slots_b) || within(&slots_b, &slots_a)) {
            let (part, whole, run) = if slots_a.len() < slots_b.len() {
                (slots_a.len(), slots_b.len(), 1)
            } else {
                (slots_b.len(), slots_a.len(), 2)
            };
            held_in_part.push(format!(
                "{name} (run {run} holds {part} of its {whole} inputs and outputs: a ring capture deleted the \
                 segment with the others, or a chunk was lost)"
            ));
            continue;
        }
        // One name, other shapes: not one op (an eager kernel's per-type counter shifts past a kernel one
        // run fused and the other did not), so its hashes say nothing of data or determinism.
        let (sa, sb) = (shapes(a, o), shapes(b, ob));
        if sa != sb {
            return Some(Divergence::Unknown(format!(
                "step {step} rank {rank}: {name} is not the same op in the two runs (its inputs and outputs \
                 are {sa:?} in run 1 and {sb:?} in run 2: another model or batch, or eager kernels, named by \
                 type and a per-type counter, that one run fused and the other did not); {compared} ops \
                 before it gave identical outputs, the rest are not compared"
            )));
        }
        let (ia, ib) = (hashes(a, a.ops[o].inputs()), hashes(b, b.ops[ob].inputs()));
        let (oa, obh) = (hashes(a, a.ops[o].outputs()), hashes(b, b.ops[ob].outputs()));
        if ia.iter().chain(&ib).chain(&oa).chain(&obh).any(Option::is_none) {
            return Some(Divergence::Unknown("the runs carry no content hashes (only captures do)".into()));
        }
        compared += 1;
        let op = name.to_string();
        if ia != ib {
            return Some(Divergence::Inputs { step, rank, op });
        }
        if oa != obh {
            return Some(Divergence::Nondeterministic { step, rank, op });
        }
    }
    if compared == 0 {
        // Eager kernels (`GatherV2_0`) against ops named by their place in a graph: names never tie them.
        let eager = |i: &Index, ops: &[OpId]| {
            mostly_kernels_by_type(&ops.iter().map(|&o| &i.ops[o]).collect::<Vec<_>>())
        };
        let why = match (eager(a, ops_a), eager(b, ops_b)) {
            (true, false) => {
                " (run 1 holds eager kernels, named by type and a counter, and run 2 ops named \
                               otherwise, as graph mode names them: the runs were recorded in different \
                               execution modes; record both the same way)"
            }
            (false, true) => {
                " (run 2 holds eager kernels, named by type and a counter, and run 1 ops named \
                               otherwise, as graph mode names them: the runs were recorded in different \
                               execution modes; record both the same way)"
            }
            _ => "",
        };
        let held = match held_in_part.len() {
            0 => String::new(),
            n => {
                format!(" ({n} ops both runs name alike were not compared: one run holds them only in part)")
            }
        };
        return Some(Divergence::Unknown(format!(
            "step {step} rank {rank}: no op of one run matches the other's{why}{held}"
        )));
    }
    Some(Divergence::None { step, held_in_part })
}

/// Whether an index lost records: an eager walk past a gap cannot tie kernels by position.
pub(super) fn lost(i: &Index) -> bool {
    i.problems.iter().any(|p| p.kind == ProblemKind::Incomplete)
}

/// Where two eager runs' kernel types part in one step (`step_a`, `step_b`: its ops in execution order),
/// with the pairs by name and occurrence that `by_name` makes; `None` unless both sides are mostly eager
/// kernels named by type and counter (names in a graph tie ops whatever ran around them).
fn kernel_types_part_of<'a>(
    a: &'a Index,
    step_a: &[OpId],
    b: &'a Index,
    step_b: &[OpId],
    by_name: &HashMap<(&str, usize), OpId>,
    lost: bool,
) -> Option<KernelTypesPart> {
    let eager =
        |i: &Index, ops: &[OpId]| mostly_kernels_by_type(&ops.iter().map(|&o| &i.ops[o]).collect::<Vec<_>>());
    if !eager(a, step_a) || !eager(b, step_b) {
        return None;
    }
    let position_b: HashMap<OpId, usize> = step_b.iter().enumerate().map(|(j, &o)| (o, j)).collect();
    let mut occurrence: HashMap<&str, usize> = HashMap::new();
    let mut anchors = Vec::new();
    for (i, &o) in step_a.iter().enumerate() {
        let name = a.ops[o].name.as_str();
        let n = occurrence.entry(name).or_default();
        // Counted as the walk counts: an occurrence is used up by a match only.
        let Some(ob) = by_name.get(&(name, *n)) else { continue };
        *n += 1;
        anchors.push((i, position_b[ob], true));
    }
    let sequence = |i: &'a Index, ops: &[OpId]| -> Vec<(&'a str, &'a str)> {
        ops.iter().map(|&o| (i.ops[o].name.as_str(), i.ops[o].op_type.as_str())).collect()
    };
    kernel_types_part(&sequence(a, step_a), &sequence(b, step_b), anchors, lost, ["run 1", "run 2"])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::item::Seen;
    use crate::index::TensorInfo;
    use crate::roles::Roles;
    use accutrace_formats::DType;

    /// The determinism item of two runs.
    fn checked(a: &Seen<'_>, b: &Seen<'_>) -> Item {
        let divergence = first_divergence(a.index(), &a.ops, b.index(), &b.ops, false);
        item(&[Facts::of(a), Facts::of(b)], false, divergence)
    }

    /// A tensor's place among its op's inputs and outputs.
    type Slot = (Io, u32);

    /// Ops of one step: (name, type, the (io, index) of each tensor recorded); every tensor is [2] with
    /// content hash 7.
    fn run(ops: &[(&str, &str, &[Slot])]) -> Index {
        let mut index = Index::default();
        for &(name, op_type, tensors) in ops {
            let op = index.push_op(name.into(), op_type.into(), 1, 0);
            for &(io, slot) in tensors {
                let t = index.push_tensor(TensorInfo::for_test(op, io, slot, DType::FLOAT, vec![2]));
                index.tensors[t].set_hash(Some(7));
            }
        }
        index
    }

    /// A run held in memory, its content hashes stored.
    struct Held(Index);

    impl crate::sources::Source for Held {
        fn kind(&self) -> &'static str {
            "test"
        }
        fn root(&self) -> &std::path::Path {
            std::path::Path::new("test")
        }
        fn index(&self) -> &Index {
            &self.0
        }
        fn read_values(&self, _: crate::index::TensorId, _: &mut Vec<f32>) -> anyhow::Result<()> {
            anyhow::bail!("determinism reads content hashes only")
        }
        fn content_hash(&self, t: crate::index::TensorId) -> anyhow::Result<u64> {
            self.0.tensors[t].hash().ok_or_else(|| anyhow::anyhow!("no content hash"))
        }
    }

    /// A ring capture that deleted its oldest segments may hold the first op it kept in part (three of an
    /// ApplyAdamD's seven tensors): the tensors it kept are the other run's, so the op is skipped, not
    /// called another op ('ApplyAdamD_39 is not the same op in the two runs', from a ring capture against
    /// a full one of the same job), and the ops after it are compared.
    #[test]
    fn an_op_one_run_recorded_in_part_is_skipped_not_called_another_op() {
        let all: &[Slot] = &[(Io::Input, 0), (Io::Input, 1), (Io::Output, 0)];
        let full = run(&[("ApplyAdamD_39", "ApplyAdamD", all), ("ApplyAdamD_40", "ApplyAdamD", all)]);
        let ring = run(&[
            ("ApplyAdamD_39", "ApplyAdamD", &[(Io::Input, 1), (Io::Output, 0)]),
            ("ApplyAdamD_40", "ApplyAdamD", all),
        ]);
        let ops = |i: &Index| (0..i.ops.len()).collect::<Vec<_>>();
        for (a, b, held) in
            [(&ring, &full, "run 1 holds 2 of its 3"), (&full, &ring, "run 2 holds 2 of its 3")]
        {
            match first_divergence(a, &ops(a), b, &ops(b), false).expect("one step") {
                Divergence::None { step: 1, held_in_part } => {
                    assert_eq!(held_in_part.len(), 1, "{held_in_part:?}");
                    assert!(
                        held_in_part[0].starts_with(&format!("ApplyAdamD_39 ({held}")),
                        "{held_in_part:?}"
                    );
                }
                Divergence::Unknown(why) => panic!("{why}"),
                _ => panic!("the ops kept are identical"),
            }
        }
        // The pass names what it skipped (it read 'every op both runs dumped gave identical outputs' alone).
        let seen = |index: &Index, label: &str| Seen {
            source: Box::leak(Box::new(Held(index.clone()))),
            manifest: None,
            ops: ops(index),
            roles: Roles::of(index),
            label: label.into(),
            unreadable: Default::default(),
        };
        let pass = checked(&seen(&ring, "run 1"), &seen(&full, "run 2"));
        assert!(
            pass.reason.contains(
                "step 1: every op both runs dumped gave identical outputs, but 1 op one run holds only in part \
                 was not compared: ApplyAdamD_39 (run 1 holds 2 of its 3 inputs and outputs"
            ),
            "{}",
            pass.reason
        );
        assert!(pass.details.iter().any(|d| d.contains("not compared: ApplyAdamD_39")), "{:?}", pass.details);
        // Several: how many, and the first.
        let ring2 = run(&[
            ("ApplyAdamD_39", "ApplyAdamD", &[(Io::Input, 1), (Io::Output, 0)]),
            ("ApplyAdamD_40", "ApplyAdamD", &[(Io::Output, 0)]),
            ("ApplyAdamD_41", "ApplyAdamD", all),
        ]);
        let full2 = run(&[
            ("ApplyAdamD_39", "ApplyAdamD", all),
            ("ApplyAdamD_40", "ApplyAdamD", all),
            ("ApplyAdamD_41", "ApplyAdamD", all),
        ]);
        match first_divergence(&ring2, &ops(&ring2), &full2, &ops(&full2), false).expect("one step") {
            Divergence::None { held_in_part, .. } => assert_eq!(held_in_part.len(), 2, "{held_in_part:?}"),
            _ => panic!("the ops kept are identical"),
        }
        let pass = checked(&seen(&ring2, "run 1"), &seen(&full2, "run 2"));
        assert!(
            pass.reason
                .contains("but 2 ops one run holds only in part were not compared, the first ApplyAdamD_39"),
            "{}",
            pass.reason
        );
        // A tensor both hold, of another shape: still another op.
        let mut other = full.clone();
        other.tensors[1].shape = vec![3].into();
        match first_divergence(&ring, &ops(&ring), &other, &ops(&other), false).expect("one step") {
            Divergence::Unknown(why) => assert!(why.contains("ApplyAdamD_39 is not the same op"), "{why}"),
            _ => panic!("another shape is another op"),
        }
    }
}
