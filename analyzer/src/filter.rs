//! Which ops, steps and ranks a command looks at (`--step`, `--rank`, `--op`), shared by every command.

use crate::index::{Index, IndexedOp};

/// A selection of ops: each list empty means "all"; otherwise an op must match one entry of each.
#[derive(Clone, Debug, Default)]
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("*MatMul*", "model/layer_0/attn/MatMul"));
        assert!(glob_match("model/*/attn/?atMul", "model/layer_0/attn/MatMul"));
        assert!(!glob_match("*MatMul", "model/layer_0/attn/MatMul_1"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("a*b", "acbd"));
    }
}
