//! A longest common subsequence of two sequences in linear memory and O((n+m)·D) time, D the number of
//! items on either side outside it: Myers' diff ("An O(ND) difference algorithm and its variations",
//! 1986) with its linear-space refinement, a middle snake found by searching from both ends at once, then
//! each half aligned the same way. Two runs of one model differ by a few ops, so D is small where a table
//! of n·m cells (#18: 100,000 tensors a side, 10^10 cells) is not.
//!
//! The work is bounded: past `budget` steps (each a diagonal tried or an item compared) a stretch still to
//! be aligned is left out and counted, so two unrelated sequences (D near n+m, work near (n+m)²/2) cost
//! the budget, not hours.

/// What [`common_subsequence`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Alignment {
    /// Index pairs `(i, j)` with `a[i] == b[j]`, increasing in both.
    pub pairs: Vec<(usize, usize)>,
    /// The items of `a` and of `b` in the stretches left out when the budget ran out: `(0, 0)` when it did
    /// not, and then `pairs` is a longest common subsequence.
    pub left_out: (usize, usize),
}

/// A common subsequence of `a` and `b`, the longest there is unless `budget` runs out first
/// ([`Alignment::left_out`]).
pub fn common_subsequence<T: PartialEq>(a: &[T], b: &[T], budget: u64) -> Alignment {
    // A search reaches D/2 edits from each end; within the budget it cannot pass about √budget of them
    // (the d-th costs at least 2d + 2 steps), so the diagonals held stop there too.
    let half_edits = (a.len() + b.len()).div_ceil(2) + 1;
    let reach = half_edits.min(budget.isqrt() as usize + 2);
    let diagonals = 2 * (reach + 2) + 1;
    let mut search = Search {
        a,
        b,
        forward: vec![0; diagonals],
        backward: vec![0; diagonals],
        centre: reach as isize + 2,
        reach: reach as isize,
        budget,
        found: Alignment::default(),
    };
    search.align(0, a.len(), 0, b.len());
    search.found
}

struct Search<'s, T> {
    a: &'s [T],
    b: &'s [T],
    /// Per diagonal `k = x - y` (at `centre + k`): how far (in x) the search from the start has reached.
    forward: Vec<isize>,
    /// Per diagonal, counted from the ends (`k = (n - x) - (m - y)`): how far the search from the end has
    /// reached, in items from the end of `a`.
    backward: Vec<isize>,
    centre: isize,
    /// The most edits a search from one end may reach before it gives up.
    reach: isize,
    budget: u64,
    found: Alignment,
}

impl<T: PartialEq> Search<'_, T> {
    /// Aligns `a[a0..a1]` with `b[b0..b1]`, pushing pairs in order.
    fn align(&mut self, mut a0: usize, mut a1: usize, mut b0: usize, mut b1: usize) {
        while a0 < a1 && b0 < b1 && self.a[a0] == self.b[b0] {
            self.found.pairs.push((a0, b0));
            (a0, b0) = (a0 + 1, b0 + 1);
        }
        let mut suffix = 0;
        while a0 < a1 - suffix && b0 < b1 - suffix && self.a[a1 - suffix - 1] == self.b[b1 - suffix - 1] {
            suffix += 1;
        }
        (a1, b1) = (a1 - suffix, b1 - suffix);
        // Both sides left and trimmed: at least two edits, so the middle point splits both halves smaller.
        if a0 < a1 && b0 < b1 {
            match self.middle(a0, a1, b0, b1) {
                // Strictly between the corners (checked: a corner would recurse without end).
                Some((x, y)) if (x, y) != (a0, b0) && (x, y) != (a1, b1) && x <= a1 && y <= b1 => {
                    self.align(a0, x, b0, y);
                    self.align(x, a1, y, b1);
                }
                _ => {
                    self.found.left_out.0 += a1 - a0;
                    self.found.left_out.1 += b1 - b0;
                }
            }
        }
        self.found.pairs.extend((0..suffix).map(|s| (a1 + s, b1 + s)));
    }

    /// Takes `cost` steps from the budget; `false` once it is spent.
    fn spend(&mut self, cost: usize) -> bool {
        self.budget = self.budget.saturating_sub(cost as u64 + 1);
        self.budget > 0
    }

    /// A point `(x, y)` of `a[a0..a1]` against `b[b0..b1]` (absolute) that an alignment with the fewest
    /// edits passes through, strictly between the two corners; `None` when the budget runs out first.
    ///
    /// Both searches run in an edit graph without bounds (no matches outside the grid, so every path there
    /// is a real one's extension); where they meet is compared on the grid only, so the point found is
    /// always within it. On one diagonal the edits needed to reach a point never fall as the point moves
    /// away from the end searched from, so a point between the two searches' furthest reaches is reached
    /// by both within their edits, and at the first meeting their edits add up to the fewest there are.
    fn middle(&mut self, a0: usize, a1: usize, b0: usize, b1: usize) -> Option<(usize, usize)> {
        let (n, m) = ((a1 - a0) as isize, (b1 - b0) as isize);
        let delta = n - m;
        let odd = delta % 2 != 0;
        let c = self.centre;
        // Where the two searches meet on forward diagonal `k`, given the forward reach x and the backward
        // reach counted from the end: the forward point, if it lies on the grid at or past the backward one.
        let meet = |k: isize, forward: isize, from_end: isize| -> Option<(usize, usize)> {
            let x = forward.min(n).min(m + k);
            let backward = (n - from_end).max(0).max(k);
            (x >= backward).then(|| (a0 + x as usize, (b0 as isize + x - k) as usize))
        };
        self.forward[(c + 1) as usize] = 0;
        self.backward[(c + 1) as usize] = 0;
        for d in 0..=(n + m + 1) / 2 {
            if d > self.reach {
                return None;
            }
            for k in (-d..=d).step_by(2) {
                let (left, right) = (self.forward[(c + k - 1) as usize], self.forward[(c + k + 1) as usize]);
                let mut x = if k == -d || (k != d && left < right) { right } else { left + 1 };
                let start = x;
                while x < n && x - k < m && self.a[a0 + x as usize] == self.b[(b0 as isize + x - k) as usize]
                {
                    x += 1;
                }
                self.forward[(c + k) as usize] = x;
                if !self.spend((x - start) as usize) {
                    return None;
                }
                if odd && (k - delta).abs() < d {
                    if let Some(point) = meet(k, x, self.backward[(c + delta - k) as usize]) {
                        return Some(point);
                    }
                }
            }
            for k in (-d..=d).step_by(2) {
                let (left, right) =
                    (self.backward[(c + k - 1) as usize], self.backward[(c + k + 1) as usize]);
                let mut x = if k == -d || (k != d && left < right) { right } else { left + 1 };
                let start = x;
                while x < n
                    && x - k < m
                    && self.a[a1 - 1 - x as usize] == self.b[(b1 as isize - 1 - x + k) as usize]
                {
                    x += 1;
                }
                self.backward[(c + k) as usize] = x;
                if !self.spend((x - start) as usize) {
                    return None;
                }
                if !odd && (k - delta).abs() <= d {
                    if let Some(point) = meet(delta - k, self.forward[(c + delta - k) as usize], x) {
                        return Some(point);
                    }
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNBOUNDED: u64 = u64::MAX;

    /// The length of a longest common subsequence by the full table (what matching used before).
    fn lcs_length<T: PartialEq>(a: &[T], b: &[T]) -> usize {
        let mut row = vec![0usize; b.len() + 1];
        for x in a {
            let mut diagonal = 0;
            for (j, y) in b.iter().enumerate() {
                let above = row[j + 1];
                row[j + 1] = if x == y { diagonal + 1 } else { above.max(row[j]) };
                diagonal = above;
            }
        }
        row[b.len()]
    }

    /// The pairs are a common subsequence: increasing in both, each pairing equal items.
    fn assert_common<T: PartialEq + std::fmt::Debug>(a: &[T], b: &[T], found: &Alignment) {
        for w in found.pairs.windows(2) {
            assert!(w[0].0 < w[1].0 && w[0].1 < w[1].1, "{:?} not increasing", found.pairs);
        }
        for &(i, j) in &found.pairs {
            assert_eq!(a[i], b[j], "pair ({i}, {j}) of {a:?} and {b:?}");
        }
    }

    fn aligned(a: &str, b: &str) -> Vec<(usize, usize)> {
        let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
        let found = common_subsequence(&a, &b, UNBOUNDED);
        assert_common(&a, &b, &found);
        assert_eq!(found.left_out, (0, 0));
        found.pairs
    }

    #[test]
    fn empty_sides_pair_nothing() {
        assert_eq!(aligned("", ""), []);
        assert_eq!(aligned("abc", ""), []);
        assert_eq!(aligned("", "abc"), []);
    }

    #[test]
    fn identical_sequences_pair_every_item() {
        assert_eq!(aligned("abcab", "abcab"), [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]);
    }

    #[test]
    fn one_extra_item_on_either_side_shifts_nothing_else() {
        assert_eq!(aligned("abXcd", "abcd"), [(0, 0), (1, 1), (3, 2), (4, 3)]);
        assert_eq!(aligned("abcd", "abXcd"), [(0, 0), (1, 1), (2, 3), (3, 4)]);
        assert_eq!(aligned("Xabcd", "abcd"), [(1, 0), (2, 1), (3, 2), (4, 3)]);
        assert_eq!(aligned("abcd", "abcdX"), [(0, 0), (1, 1), (2, 2), (3, 3)]);
    }

    #[test]
    fn interleaved_changes_keep_every_unchanged_item() {
        // b drops c and f, changes e to E, and adds X, Y and Z.
        let pairs = aligned("abcdefgh", "XabdEYghZ");
        assert_eq!(pairs, [(0, 1), (1, 2), (3, 3), (6, 6), (7, 7)]);
        assert_eq!(aligned("abab", "baba").len(), 3);
        assert_eq!(aligned("xyz", "abc"), []);
    }

    /// A small deterministic generator (xorshift): the same sequences on every run.
    fn random(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    /// Random pairs of lengths 0 to 40 (very unequal ones too) over alphabets of 1 to 6 letters: the pairs
    /// are as many as the longest common subsequence has.
    #[test]
    fn random_sequences_pair_as_many_as_the_longest_common_subsequence() {
        let mut state = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let letters = random(&mut state) % 6 + 1;
            let sequence = |state: &mut u64| {
                let len = random(state) % 41;
                (0..len).map(|_| random(state) % letters).collect::<Vec<u64>>()
            };
            let (a, b) = (sequence(&mut state), sequence(&mut state));
            let found = common_subsequence(&a, &b, UNBOUNDED);
            assert_common(&a, &b, &found);
            assert_eq!(found.pairs.len(), lcs_length(&a, &b), "{a:?} against {b:?}");
            assert_eq!(found.left_out, (0, 0));
        }
    }

    /// Edits of a random sequence (inserted, deleted and changed items): the same check, at lengths the
    /// middle split recurses into often.
    #[test]
    fn edited_copies_pair_as_many_as_the_longest_common_subsequence() {
        let mut state = 0x2545_f491_4f6c_dd1d;
        for _ in 0..500 {
            let a: Vec<u64> = (0..random(&mut state) % 300).map(|_| random(&mut state) % 8).collect();
            let mut b = a.clone();
            for _ in 0..random(&mut state) % 30 {
                let at = (random(&mut state) as usize) % (b.len() + 1);
                match random(&mut state) % 3 {
                    0 => b.insert(at, random(&mut state) % 8),
                    1 if at < b.len() => drop(b.remove(at)),
                    _ if at < b.len() => b[at] = random(&mut state) % 8,
                    _ => {}
                }
            }
            let found = common_subsequence(&a, &b, UNBOUNDED);
            assert_common(&a, &b, &found);
            assert_eq!(found.pairs.len(), lcs_length(&a, &b));
        }
    }

    /// 200,000 items with 50 scattered edits on the other side: every untouched item pairs with its own
    /// counterpart, which a table of 4·10^10 cells could not have held.
    #[test]
    fn a_large_sequence_with_scattered_edits_pairs_every_untouched_item() {
        const N: usize = 200_000;
        let a: Vec<u64> = (0..N as u64).map(|i| i % 7).collect();
        let mut b: Vec<u64> = a.clone();
        let mut extra = Vec::new();
        // 25 insertions of an item found nowhere in a, 25 deletions, from the end so the places hold.
        for e in (0..50).rev() {
            let at = 1_000 + e * 3_997;
            match e % 2 {
                0 => {
                    b.insert(at, 100 + e as u64);
                    extra.push(at);
                }
                _ => drop(b.remove(at)),
            }
        }
        let found = common_subsequence(&a, &b, 1 << 28);
        assert_common(&a, &b, &found);
        assert_eq!((found.pairs.len(), found.left_out), (N - 25, (0, 0)));
        let paired_b: std::collections::HashSet<usize> = found.pairs.iter().map(|p| p.1).collect();
        assert!(extra.iter().all(|e| !paired_b.contains(e)), "an inserted item was paired");
    }

    /// Two unrelated sequences cost the budget, then what is left is counted, not dropped unsaid; what was
    /// aligned before is still a common subsequence.
    #[test]
    fn a_spent_budget_leaves_stretches_out_and_counts_them() {
        let a: Vec<u64> = (0..5_000).map(|i| i % 2).collect();
        let b: Vec<u64> = (0..5_000).map(|i| 2 + i % 3).collect();
        let mut with_ends = vec![9; 10];
        with_ends.extend(&a);
        with_ends.push(8);
        let mut other = vec![9; 10];
        other.extend(&b);
        other.push(8);
        let found = common_subsequence(&with_ends, &other, 10_000);
        assert_common(&with_ends, &other, &found);
        assert_eq!(found.pairs.len(), 11, "the common prefix and suffix");
        assert_eq!(found.left_out, (5_000, 5_000));
        // Alike but for 400 changed items: the budget runs out part of the way, what was aligned is a
        // common subsequence, and every item is paired, counted as left out, or alone against nothing.
        let a: Vec<u64> = (0..20_000).map(|i| i % 5).collect();
        let b: Vec<u64> = (0..20_000).map(|i| if i % 50 == 0 { 7 } else { i % 5 }).collect();
        let found = common_subsequence(&a, &b, 1_000_000);
        assert_common(&a, &b, &found);
        assert!(found.left_out.0 > 0 && !found.pairs.is_empty(), "{:?}", found.left_out);
        assert!(found.pairs.len() + found.left_out.0 <= a.len());
        assert!(found.pairs.len() + found.left_out.1 <= b.len());
        assert_eq!(common_subsequence(&a, &b, UNBOUNDED).pairs.len(), 20_000 - 400);
    }
}
