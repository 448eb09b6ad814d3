//! Which ops, steps and ranks a command looks at (`--step`, `--rank`, `--op`), shared by every command.

use crate::index::{Index, IndexedOp};
use std::collections::BTreeSet;
use std::path::Path;

/// A selection of ops: each list empty means "all"; otherwise an op must match one entry of each.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    pub steps: Vec<u64>,
    pub ranks: Vec<u32>,
    /// Op name patterns: a glob (`*`, `?`) matches the whole name, anything else a substring.
    pub ops: Vec<String>,
}

/// Matches `text` against a glob with `*` (any run) and `?` (any one character).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Iterative matcher with one backtrack point: linear in practice, no recursion on untrusted patterns.
    let (mut pi, mut ti) = (0usize, 0usize);
    let (mut star, mut star_t) = (None::<usize>, 0usize);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            star_t = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            star_t += 1;
            ti = star_t;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

impl Filter {
    /// Whether the filter keeps this op. A pattern without wildcards matches as a substring, which is what
    /// people type (`--op attn`); with wildcards it must match the whole name.
    pub fn keeps(&self, op: &IndexedOp) -> bool {
        self.keeps_at(&op.name, op.step, op.rank)
    }

    /// [`Filter::keeps`] for an op known by its name, step and rank.
    pub fn keeps_at(&self, name: &str, step: u64, rank: u32) -> bool {
        (self.steps.is_empty() || self.steps.contains(&step))
            && (self.ranks.is_empty() || self.ranks.contains(&rank))
            && (self.ops.is_empty()
                || self.ops.iter().any(|p| {
                    if p.contains('*') || p.contains('?') {
                        glob_match(p, name)
                    } else {
                        name.contains(p.as_str())
                    }
                }))
    }

    /// Ids of the ops the filter keeps, in execution order.
    pub fn op_ids(&self, index: &Index) -> Vec<usize> {
        (0..index.ops.len()).filter(|&o| self.keeps(&index.ops[o])).collect()
    }

    /// The selection as options would be typed (`--step 0-22 --rank 0 --op 'x*'`); empty for everything.
    pub fn options(&self) -> String {
        // Runs of steps or ranks as the ranges the options take (`--step 0-22`), not one option per number.
        let spans = |flag: &str, numbers: &[u64]| -> Vec<String> {
            let mut sorted = numbers.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            match sorted.is_empty() {
                true => Vec::new(),
                false => {
                    runs_shortened(&sorted, 2).split(", ").map(|span| format!("--{flag} {span}")).collect()
                }
            }
        };
        let mut words = spans("step", &self.steps);
        words.extend(spans("rank", &self.ranks.iter().map(|&r| u64::from(r)).collect::<Vec<_>>()));
        words.extend(self.ops.iter().map(|o| format!("--op '{o}'")));
        words.join(" ")
    }

    /// Whether it selects anything at all.
    pub fn is_everything(&self) -> bool {
        self.steps.is_empty() && self.ranks.is_empty() && self.ops.is_empty()
    }

    /// Refuses a selection that asks for what the source (`path`) does not have: a step or rank it lacks (the
    /// message lists those it has), a pattern that matches no op name (with a hint when it looks like a
    /// part of a name given as a glob), or selectors that each match but keep no op together. An empty
    /// answer to a selection that misses is not an answer.
    pub fn check(&self, index: &Index, path: &Path) -> anyhow::Result<()> {
        let source = path.display();
        if self.is_everything() && index.ops.is_empty() {
            // Nothing to select from. When the source knows why (lost segments or streams), its input
            // problems lead the report and fail the run; otherwise an empty answer would read as a clean one.
            if index.problems.is_empty() {
                anyhow::bail!(
                    "{source} holds no ops: it was read without a problem but records no operator (an \
                     msprobe dump whose dump.json \"data\" is empty, a capture of a process that launched \
                     none); check that this is the run you meant, and the dump's configuration (its scope or \
                     list)"
                );
            }
            return Ok(());
        }
        self.check_steps_and_ranks(&index.steps(), &index.ranks(), path)?;
        for pattern in &self.ops {
            let single = Filter { ops: vec![pattern.clone()], ..Filter::default() };
            if index.ops.iter().any(|op| single.keeps(op)) {
                continue;
            }
            let example = index.ops.first().map(|o| o.name.as_str()).unwrap_or("");
            let hint = match pattern.contains(['*', '?']) {
                true if !pattern.starts_with('*') => format!(
                    "; a pattern with * or ? must match the whole name (op names look like {example:?}): \
                     try '*{pattern}'"
                ),
                _ => format!("; op names look like {example:?}"),
            };
            anyhow::bail!("--op '{pattern}' matches no op of {source}{hint}");
        }
        if !index.ops.iter().any(|op| self.keeps(op)) {
            anyhow::bail!(none_at_once(path));
        }
        Ok(())
    }

    /// [`Filter::check`] of a selection of steps and ranks, without `--op` (which needs every op's name),
    /// against the places (rank, step) the run's ops are at: where no index of the whole run is built (a
    /// long capture read a window of steps at a time). The same refusals, in the same words.
    pub fn check_places(&self, places: &BTreeSet<(u32, u64)>, path: &Path) -> anyhow::Result<()> {
        let mut steps: Vec<u64> = places.iter().map(|&(_, step)| step).collect();
        steps.sort_unstable();
        steps.dedup();
        let mut ranks: Vec<u32> = places.iter().map(|&(rank, _)| rank).collect();
        ranks.dedup();
        self.check_steps_and_ranks(&steps, &ranks, path)?;
        if !places.iter().any(|&(rank, step)| self.keeps_at("", step, rank)) {
            anyhow::bail!(none_at_once(path));
        }
        Ok(())
    }

    /// Refuses a step or a rank the run lacks (`steps` and `ranks`: those it has, ascending), listing those it
    /// has.
    fn check_steps_and_ranks(&self, steps: &[u64], ranks: &[u32], path: &Path) -> anyhow::Result<()> {
        let source = path.display();
        let missing: Vec<u64> = self.steps.iter().copied().filter(|s| !steps.contains(s)).collect();
        if !missing.is_empty() {
            anyhow::bail!(
                "{} not in {source}: its steps are {}",
                plural_list("step", &missing),
                ranges(steps)
            );
        }
        let ranks: Vec<u64> = ranks.iter().map(|&r| u64::from(r)).collect();
        let missing: Vec<u64> =
            self.ranks.iter().map(|&r| u64::from(r)).filter(|r| !ranks.contains(r)).collect();
        if !missing.is_empty() {
            anyhow::bail!(
                "{} not in {source}: its ranks are {}",
                plural_list("rank", &missing),
                ranges(&ranks)
            );
        }
        Ok(())
    }
}

/// The refusal of selectors that each match but keep no op together.
fn none_at_once(path: &Path) -> String {
    format!(
        "{} has the steps, ranks and op names asked for, but no op has them all at once (--step, --rank and \
         --op must all match one op)",
        path.display()
    )
}

/// "step 5 is" / "steps 5, 7 are".
fn plural_list(what: &str, items: &[u64]) -> String {
    let list: Vec<String> = items.iter().map(u64::to_string).collect();
    match items.len() {
        1 => format!("{what} {} is", list[0]),
        _ => format!("{what}s {} are", list.join(", ")),
    }
}

/// Ascending numbers with runs shortened: `0-2, 5, 7-9`.
pub fn ranges(sorted: &[u64]) -> String {
    runs_shortened(sorted, 2)
}

/// Ranks in a line of text: `rank 3`, `ranks 2, 3`, `ranks 0-511, 513-1023` (sorted, each once), so that a
/// line about a job of thousands of ranks stays one short line. Every line that lists ranks prints them
/// through this; JSON keeps the full lists.
pub fn rank_ranges(ranks: &[u32]) -> String {
    let mut sorted: Vec<u64> = ranks.iter().map(|&r| u64::from(r)).collect();
    sorted.sort_unstable();
    sorted.dedup();
    match sorted.as_slice() {
        [] => "no rank".into(),
        [one] => format!("rank {one}"),
        // Two neighbours read better as `2, 3` than as a range.
        more => format!("ranks {}", runs_shortened(more, 3)),
    }
}

/// Ascending numbers, each run of at least `shortest` consecutive ones written `first-last`.
fn runs_shortened(sorted: &[u64], shortest: usize) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        if j + 1 - i >= shortest {
            parts.push(format!("{}-{}", sorted[i], sorted[j]));
        } else {
            parts.extend(sorted[i..=j].iter().map(u64::to_string));
        }
        i = j + 1;
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_lists_read_as_ranges_however_many_ranks() {
        // 1,024 ranks but one, given out of order and one twice: one short line.
        let mut ranks: Vec<u32> = (0..1024).rev().filter(|&r| r != 512).collect();
        ranks.push(7);
        assert_eq!(rank_ranges(&ranks), "ranks 0-511, 513-1023");
        assert_eq!(rank_ranges(&[3]), "rank 3");
        assert_eq!(rank_ranges(&[3, 2]), "ranks 2, 3");
        assert_eq!(rank_ranges(&[0, 1, 2, 5, 7, 8]), "ranks 0-2, 5, 7, 8");
        assert_eq!(rank_ranges(&[]), "no rank");
        assert_eq!(ranges(&[0, 1, 2, 5, 7, 8]), "0-2, 5, 7-8", "steps keep their ranges");
    }

    /// The options a selection is echoed as take ranges, as the command line does: a selection of 23 steps
    /// reads as one option.
    #[test]
    fn a_selection_is_echoed_as_the_ranges_the_options_take() {
        let filter =
            Filter { steps: (0..=22).rev().collect(), ranks: vec![3, 0, 1, 1], ops: vec!["fc*".into()] };
        assert_eq!(filter.options(), "--step 0-22 --rank 0-1 --rank 3 --op 'fc*'");
        assert_eq!(Filter { steps: vec![5], ..Filter::default() }.options(), "--step 5");
        assert_eq!(Filter::default().options(), "");
    }

    #[test]
    fn globs() {
        assert!(glob_match("*MatMul*", "model/layer_0/attn/MatMul"));
        assert!(glob_match("model/*/attn/?atMul", "model/layer_0/attn/MatMul"));
        assert!(!glob_match("*MatMul", "model/layer_0/attn/MatMul_1"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("a*b", "acbd"));
    }

    fn index() -> Index {
        let mut index = Index::default();
        for step in [0, 1, 2, 5] {
            for name in ["model/layer_0/attn/MatMul", "model/layer_1/mlp/Gelu"] {
                index.push_op(name.into(), "T".into(), step, 0);
            }
        }
        index
    }

    fn refusal(filter: Filter) -> String {
        filter.check(&index(), Path::new("runs/npu")).unwrap_err().to_string()
    }

    #[test]
    fn a_selection_that_misses_says_what_there_is() {
        let ok = Filter { steps: vec![1], ops: vec!["attn".into(), "*/Gelu".into()], ..Filter::default() };
        ok.check(&index(), Path::new("runs/npu")).unwrap();
        assert_eq!(
            refusal(Filter { steps: vec![1, 3], ..Filter::default() }),
            "step 3 is not in runs/npu: its steps are 0-2, 5"
        );
        assert_eq!(
            refusal(Filter { ranks: vec![1, 2], ..Filter::default() }),
            "ranks 1, 2 are not in runs/npu: its ranks are 0"
        );
        let why = refusal(Filter { ops: vec!["layer_0/*".into()], ..Filter::default() });
        assert!(
            why.starts_with("--op 'layer_0/*' matches no op of runs/npu; a pattern with * or ? must match")
        );
        assert!(why.ends_with("try '*layer_0/*'"), "{why}");
        let why = refusal(Filter { ops: vec!["softmax".into()], ..Filter::default() });
        assert!(why.contains("op names look like \"model/layer_0/attn/MatMul\""), "{why}");
        let why = refusal(Filter { steps: vec![1], ops: vec!["layer_2".into()], ..Filter::default() });
        assert!(why.contains("'layer_2'"), "{why}");
        // Each selector matches, yet no op has both.
        let mut index = index();
        index.ops.retain(|o| !(o.step == 5 && o.name.contains("Gelu")));
        let both = Filter { steps: vec![5], ops: vec!["Gelu".into()], ..Filter::default() };
        assert!(both.check(&index, Path::new("r")).unwrap_err().to_string().contains("all match one op"));
    }
}
