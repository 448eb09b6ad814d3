//! What the reports ask of a comparison beyond its rows: the first API call that diverges (kernels
//! against API calls), the rows of one op (the neighbourhood view), and the fused kernels and whether each
//! fails (against an unfused run).

use super::comparison::Comparison;
use crate::index::Io;
use crate::matching::MatchKind;

/// The first API call whose output diverges, in the target's execution order, and its kernels.
#[derive(Clone, Debug)]
pub struct DivergingApi<'c> {
    /// The benchmark op (the API call).
    pub bench_op: usize,
    /// The row of its first failing output.
    pub row: usize,
    /// The target kernels that implement it.
    pub kernels: &'c [usize],
    /// Other calls that share one of these kernels (a fused kernel computes several calls).
    pub sharing: Vec<usize>,
}

impl Comparison<'_> {
    /// The first API call whose output fails (kernels against API calls only).
    pub fn first_diverging_api(&self) -> Option<DivergingApi<'_>> {
        let ti = self.target.index();
        let (row, r) = self
            .rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.failed && r.how == Some(MatchKind::Api) && r.bench().is_some())
            .min_by_key(|(_, r)| (ti.ops[ti.tensors[r.target()].op()].order, r.target()))?;
        let bench_op = self.bench.index().tensors[r.bench()?].op();
        let call = self.api_calls.iter().find(|c| c.bench_op == bench_op)?;
        let sharing = self
            .api_calls
            .iter()
            .filter(|c| c.bench_op != bench_op && c.kernels.iter().any(|k| call.kernels.contains(k)))
            .map(|c| c.bench_op)
            .collect();
        Some(DivergingApi { bench_op, row, kernels: &call.kernels, sharing })
    }
}

/// Rows of one op's tensors on one side (inputs first), for the report's neighbourhood view.
pub fn rows_of_op(comparison: &Comparison<'_>, op: usize, io: Option<Io>) -> Vec<usize> {
    let index = comparison.target.index();
    comparison
        .rows
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            let t = &index.tensors[r.target()];
            t.op() == op && io.is_none_or(|io| t.io == io)
        })
        .map(|(i, _)| i)
        .collect()
}

/// Fused kernels (target ops matched to the bench through `original_op` names) and whether each fails:
/// against an unfused run this answers "does the problem go away without fusion?". Only judged pairs
/// count: a kernel none of whose outputs was read and measured is not listed (it neither agrees nor not).
pub fn fused_kernels(c: &Comparison<'_>) -> Vec<(usize, bool)> {
    let index = c.target.index();
    let mut kernels: Vec<(usize, bool)> = Vec::new();
    for row in &c.rows {
        if row.how != Some(MatchKind::Provenance) || !row.judged() {
            continue;
        }
        let op = index.tensors[row.target()].op();
        match kernels.iter_mut().find(|(o, _)| *o == op) {
            Some((_, failed)) => *failed |= row.failed,
            None => kernels.push((op, row.failed)),
        }
    }
    kernels
}
