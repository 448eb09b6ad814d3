//! The alignment's table ([`super`]): the best totals over (API outputs i, rows 0..=n) x (kernel j, state u
//! of kernel j, the columns), filled row by row, and the moves that reached them, traced back from the best
//! cell of the last row.
//!
//! The moves of the whole table took (n + 1) x cols x 2 bytes, 283 MiB for a 128-layer eager step (#18).
//! Only one block of rows' moves is held now: the fill keeps the best totals of the row before each block
//! (a checkpoint), and the trace back, reaching a block, fills it again from its checkpoint with its moves.
//! Where even the checkpoints are too many, blocks are split in turn (levels), one more fill each. A fill
//! from a checkpoint repeats the same additions and comparisons in the same order, so every split gives the
//! same moves, ties included, as the whole table.

/// A move of the table and the state it came from, in 16 bits: the kind in the top two, the state below (a
/// kernel's states are a bit mask of at most [`super::MASK_OUTPUTS`] outputs, or an output's position: a step
/// with a kernel of more than 16,383 outputs is not aligned).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Move(u16);

impl Move {
    const NONE: Move = Move(0);
    const SKIP_API: Move = Move(1 << 14);
    const MATCH: Move = Move(2 << 14);
    const NEXT_KERNEL: Move = Move(3 << 14);
    pub(super) const STATE: u16 = (1 << 14) - 1;

    fn matched(from: usize) -> Move {
        Move(Self::MATCH.0 | from as u16)
    }

    fn next_kernel(from: usize) -> Move {
        Move(Self::NEXT_KERNEL.0 | from as u16)
    }

    fn kind(self) -> Move {
        Move(self.0 & !Self::STATE)
    }

    fn state(self) -> usize {
        (self.0 & Self::STATE) as usize
    }
}

/// How the rows are split: `levels` of checkpoints, each block of a level split into at most `parts`
/// blocks of the level below, down to blocks of `leaf` rows whose moves are held at once. 0 levels: the
/// whole table's moves at once, filled once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Plan {
    pub levels: usize,
    pub parts: usize,
    pub leaf: usize,
}

/// The most levels of checkpoints: each costs one more fill of the table.
const MAX_LEVELS: usize = 3;

/// The table of one rank and step: `n` API outputs against kernels of `states[j]` states each (a bit mask of
/// outputs taken where `by_mask[j]`, else the last output taken).
pub(super) struct Table<'a> {
    n: usize,
    states: &'a [usize],
    by_mask: &'a [bool],
    offsets: Vec<usize>,
    cols: usize,
}

/// A cell: (row i, kernel j, state u).
type Cell = (usize, usize, usize);

/// The working rows of a fill: the totals of row i and of row i + 1, what API output i may take at one
/// kernel ((output position, weight), in the order they are tried), and the moves of one block of rows.
struct Work {
    row: Vec<f64>,
    below: Vec<f64>,
    fits: Vec<(usize, f64)>,
    how: Vec<Move>,
}

impl<'a> Table<'a> {
    pub fn new(n: usize, states: &'a [usize], by_mask: &'a [bool]) -> Table<'a> {
        let mut offsets = Vec::with_capacity(states.len());
        let mut cols = 0usize;
        for &w in states {
            offsets.push(cols);
            cols = cols.saturating_add(w);
        }
        Table { n, states, by_mask, offsets, cols }
    }

    pub fn cells(&self) -> usize {
        (self.n + 1).saturating_mul(self.cols)
    }

    /// The bytes a plan holds: two rows of totals, the checkpoints (up to `parts` - 1 rows a level) and
    /// one block's moves.
    pub fn bytes(&self, plan: Plan) -> usize {
        let rows = 2 * 8 + plan.levels * (plan.parts - 1) * 8 + plan.leaf * 2;
        rows.saturating_mul(self.cols)
    }

    /// The plan of fewest levels (fewest fills) whose bytes are at most `budget`, and of those the fewest
    /// bytes; `None` when none fits.
    pub fn plan(&self, budget: usize) -> Option<Plan> {
        let rows = self.n + 1;
        let whole = Plan { levels: 0, parts: 1, leaf: rows };
        if self.bytes(whole) <= budget {
            return Some(whole);
        }
        (1..=MAX_LEVELS).find_map(|levels| {
            let mut best: Option<Plan> = None;
            for parts in 2..=rows {
                let span = parts.saturating_pow(levels as u32);
                let plan = Plan { levels, parts, leaf: rows.div_ceil(span) };
                if self.bytes(plan) <= budget && best.is_none_or(|b| self.bytes(plan) < self.bytes(b)) {
                    best = Some(plan);
                }
                // More parts only add checkpoints once a part is one row.
                if span >= rows {
                    break;
                }
            }
            best
        })
    }

    /// The alignment: for each API output, the (kernel, output position) it took, if any. `fit(i, j, fits)`
    /// appends what API output i may take at kernel j.
    pub fn align(
        &self,
        plan: Plan,
        fit: &mut impl FnMut(usize, usize, &mut Vec<(usize, f64)>),
    ) -> Vec<Option<(usize, usize)>> {
        let mut work = Work {
            row: vec![f64::NEG_INFINITY; self.cols],
            below: vec![f64::NEG_INFINITY; self.cols],
            fits: Vec::new(),
            how: vec![Move::NONE; plan.leaf.min(self.n + 1) * self.cols],
        };
        let mut matched = vec![None; self.n];
        let (lo, hi) = (0, self.n);
        if plan.levels == 0 {
            self.leaf(lo, hi, None, &mut work, fit);
            let end = self.best(&work.row);
            self.trace(lo, end, &work, &mut matched);
            return matched;
        }
        let part = plan.leaf * plan.parts.pow(plan.levels as u32 - 1);
        let checkpoints = self.sweep(lo, hi, hi, None, part, &mut work, fit);
        let end = self.best(&work.row);
        self.parts(
            lo,
            hi,
            None,
            &checkpoints,
            part,
            end,
            plan,
            plan.levels - 1,
            &mut work,
            fit,
            &mut matched,
        );
        matched
    }

    /// The cell of the last row with the best total (the last of equals).
    fn best(&self, row: &[f64]) -> Cell {
        (0..self.states.len())
            .flat_map(|j| (0..self.states[j]).map(move |u| (j, u)))
            .max_by(|a, b| row[self.offsets[a.0] + a.1].total_cmp(&row[self.offsets[b.0] + b.1]))
            .map(|(j, u)| (self.n, j, u))
            .unwrap_or((self.n, 0, 0))
    }

    /// Traces back rows `lo..=hi`, entered at `cell` in row `hi`: `start` is row `lo` - 1's totals
    /// (`None`: `lo` is 0). The cell it leaves the rows at, or `None` at the table's first cell.
    #[allow(clippy::too_many_arguments)]
    fn back(
        &self,
        (lo, hi): (usize, usize),
        start: Option<&[f64]>,
        cell: Cell,
        plan: Plan,
        level: usize,
        work: &mut Work,
        fit: &mut impl FnMut(usize, usize, &mut Vec<(usize, f64)>),
        matched: &mut [Option<(usize, usize)>],
    ) -> Option<Cell> {
        if level == 0 {
            self.leaf(lo, hi, start, work, fit);
            return self.trace(lo, cell, work, matched);
        }
        let part = plan.leaf * plan.parts.pow(level as u32 - 1);
        if hi - lo < part {
            return self.back((lo, hi), start, cell, plan, level - 1, work, fit, matched);
        }
        // Up to the row before the last block: its checkpoint is the last needed.
        let last = lo + (hi - lo) / part * part - 1;
        let checkpoints = self.sweep(lo, last, hi, start, part, work, fit);
        self.parts(lo, hi, start, &checkpoints, part, cell, plan, level - 1, work, fit, matched)
    }

    /// Traces back rows `lo..=hi` block by block, `part` rows a block, from the last: block k > 0 starts
    /// from checkpoint k - 1.
    #[allow(clippy::too_many_arguments)]
    fn parts(
        &self,
        lo: usize,
        hi: usize,
        start: Option<&[f64]>,
        checkpoints: &[f64],
        part: usize,
        mut cell: Cell,
        plan: Plan,
        level: usize,
        work: &mut Work,
        fit: &mut impl FnMut(usize, usize, &mut Vec<(usize, f64)>),
        matched: &mut [Option<(usize, usize)>],
    ) -> Option<Cell> {
        let cols = self.cols;
        for k in (0..=(hi - lo) / part).rev() {
            let first = lo + k * part;
            let from = if k == 0 { start } else { Some(&checkpoints[(k - 1) * cols..k * cols]) };
            let rows = (first, (first + part - 1).min(hi));
            cell = self.back(rows, from, cell, plan, level, work, fit, matched)?;
        }
        Some(cell)
    }

    /// Fills rows `lo..=last` from `start`, ending with row `last`'s totals in `work.row`, and keeps the
    /// totals of the row before each block of `part` rows of `lo..=hi` after the first.
    #[allow(clippy::too_many_arguments)]
    fn sweep(
        &self,
        lo: usize,
        last: usize,
        hi: usize,
        start: Option<&[f64]>,
        part: usize,
        work: &mut Work,
        fit: &mut impl FnMut(usize, usize, &mut Vec<(usize, f64)>),
    ) -> Vec<f64> {
        let mut checkpoints = Vec::with_capacity((hi - lo) / part * self.cols);
        self.enter(lo, start, work, fit, None);
        for i in lo..=last {
            let down = i < last;
            self.step(i, work, fit, true, down, None, None);
            if (i + 1 - lo).is_multiple_of(part) && i < hi {
                checkpoints.extend_from_slice(&work.row);
            }
            if down {
                std::mem::swap(&mut work.row, &mut work.below);
                work.below.fill(f64::NEG_INFINITY);
            }
        }
        checkpoints
    }

    /// Sets `work.row` to row `lo`'s totals as row `lo` - 1 leaves them (from `start`, its totals; or the
    /// table's first cell), writing the moves into row `lo` to `into`.
    fn enter(
        &self,
        lo: usize,
        start: Option<&[f64]>,
        work: &mut Work,
        fit: &mut impl FnMut(usize, usize, &mut Vec<(usize, f64)>),
        into: Option<&mut [Move]>,
    ) {
        work.below.fill(f64::NEG_INFINITY);
        match start {
            None => {
                work.row.fill(f64::NEG_INFINITY);
                work.row[self.offsets[0]] = 0.0;
            }
            Some(totals) => {
                // Row lo - 1's totals are final: only its moves down are made again.
                work.row.copy_from_slice(totals);
                self.step(lo - 1, work, fit, false, true, None, into);
                std::mem::swap(&mut work.row, &mut work.below);
                work.below.fill(f64::NEG_INFINITY);
            }
        }
    }

    /// Fills rows `lo..=hi` from `start` with their moves (`work.how`), ending with row `hi`'s totals in
    /// `work.row`.
    fn leaf(
        &self,
        lo: usize,
        hi: usize,
        start: Option<&[f64]>,
        work: &mut Work,
        fit: &mut impl FnMut(usize, usize, &mut Vec<(usize, f64)>),
    ) {
        let cols = self.cols;
        let mut how = std::mem::take(&mut work.how);
        how[..(hi - lo + 1) * cols].fill(Move::NONE);
        self.enter(lo, start, work, fit, Some(&mut how[..cols]));
        for i in lo..=hi {
            let (here, next) = how[(i - lo) * cols..].split_at_mut(cols);
            let down = i < hi;
            self.step(i, work, fit, true, down, Some(here), down.then(|| &mut next[..cols]));
            if down {
                std::mem::swap(&mut work.row, &mut work.below);
                work.below.fill(f64::NEG_INFINITY);
            }
        }
        work.how = how;
    }

    /// Traces back from `cell` through the moves of the block starting at row `lo` (`work.how`): the cell
    /// it leaves the block at, or `None` at the table's first cell.
    fn trace(
        &self,
        lo: usize,
        cell: Cell,
        work: &Work,
        matched: &mut [Option<(usize, usize)>],
    ) -> Option<Cell> {
        let (mut i, mut j, mut u) = cell;
        while i >= lo {
            let mv = work.how[(i - lo) * self.cols + self.offsets[j] + u];
            match mv.kind() {
                Move::NONE => return None,
                Move::SKIP_API => i -= 1,
                Move::MATCH => {
                    let prev = mv.state();
                    let p = if self.by_mask[j] { (u ^ prev).trailing_zeros() as usize } else { u - 1 };
                    matched[i - 1] = Some((j, p));
                    (i, u) = (i - 1, prev);
                }
                _ => (j, u) = (j - 1, mv.state()),
            }
        }
        Some((i, j, u))
    }

    /// Row i: `work.row` holds its totals as row i - 1 left them. `along`: completes them (a move to the
    /// next kernel stays in the row); `down` (i < n): adds to `work.below` what row i + 1 gets. Moves are
    /// written to `here` (row i's) and `next` (row i + 1's) where given. A total is replaced only by a
    /// greater one, tried in one order (kernel, state; skipping the API output, then taking each output
    /// that fits), so ties keep the same move however the rows are split.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        i: usize,
        work: &mut Work,
        fit: &mut impl FnMut(usize, usize, &mut Vec<(usize, f64)>),
        along: bool,
        down: bool,
        mut here: Option<&mut [Move]>,
        mut next: Option<&mut [Move]>,
    ) {
        let Work { row, below, fits, .. } = work;
        let down = down && i < self.n;
        let m = self.states.len();
        for j in 0..m {
            let mut fitted = false;
            for u in 0..self.states[j] {
                let v = row[self.offsets[j] + u];
                if v == f64::NEG_INFINITY {
                    continue;
                }
                if along && j + 1 < m {
                    relax(row, &mut here, self.offsets[j + 1], v, Move::next_kernel(u));
                }
                if !down {
                    continue;
                }
                if !fitted {
                    fits.clear();
                    fit(i, j, fits);
                    fitted = true;
                }
                relax(below, &mut next, self.offsets[j] + u, v, Move::SKIP_API);
                for &(p, w) in fits.iter() {
                    if let Some(to) = self.take(j, u, p) {
                        relax(below, &mut next, self.offsets[j] + to, v + w, Move::matched(u));
                    }
                }
            }
        }
    }

    /// The state output p of kernel j leads to from state u, if it may be taken there.
    fn take(&self, j: usize, u: usize, p: usize) -> Option<usize> {
        if self.by_mask[j] {
            (u & (1 << p) == 0).then_some(u | (1 << p))
        } else {
            (u != p + 1).then_some(p + 1)
        }
    }
}

fn relax(totals: &mut [f64], how: &mut Option<&mut [Move]>, col: usize, v: f64, mv: Move) {
    if v > totals[col] {
        totals[col] = v;
        if let Some(how) = how {
            how[col] = mv;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A move keeps its kind and the state it came from, up to the largest state a kernel may have.
    #[test]
    fn a_move_packs_its_kind_and_state() {
        for state in [0, 1, 63, Move::STATE as usize] {
            let (matched, next) = (Move::matched(state), Move::next_kernel(state));
            assert_eq!((matched.kind(), matched.state()), (Move::MATCH, state));
            assert_eq!((next.kind(), next.state()), (Move::NEXT_KERNEL, state));
        }
        assert_eq!((Move::SKIP_API.kind(), Move::NONE.kind()), (Move::SKIP_API, Move::NONE));
    }

    /// A small random table: kernels of 1 to 8 outputs (bit masks and positions), API outputs that fit a
    /// few of each kernel's outputs with weights from a short list, so that ties are common.
    struct Random {
        n: usize,
        states: Vec<usize>,
        by_mask: Vec<bool>,
        fits: Vec<Vec<Vec<(usize, f64)>>>,
    }

    impl Random {
        fn new(seed: u64) -> Random {
            // splitmix64
            let mut x = seed;
            let mut next = move |below: u64| {
                x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = x;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                ((z ^ (z >> 31)) % below) as usize
            };
            let (n, m) = (1 + next(40), 1 + next(12));
            let outputs: Vec<usize> = (0..m).map(|_| 1 + next(8)).collect();
            let by_mask: Vec<bool> = outputs.iter().map(|&k| k <= 6).collect();
            let states =
                outputs.iter().zip(&by_mask).map(|(&k, &mask)| if mask { 1 << k } else { k + 1 }).collect();
            let weights = [100.0, 100.5, 102.0, 102.25];
            let mut fits = vec![vec![Vec::new(); m]; n];
            for row in &mut fits {
                for (j, cell) in row.iter_mut().enumerate() {
                    for p in 0..outputs[j] {
                        if next(3) == 0 {
                            cell.push((p, weights[next(4)]));
                        }
                    }
                }
            }
            Random { n, states, by_mask, fits }
        }

        fn align(&self, plan: Plan) -> Vec<Option<(usize, usize)>> {
            let table = Table::new(self.n, &self.states, &self.by_mask);
            table.align(plan, &mut |i, j, fits: &mut Vec<(usize, f64)>| fits.extend(&self.fits[i][j]))
        }
    }

    /// Every split of the rows, at every level, traces back the alignment the whole table gives, ties
    /// included.
    #[test]
    fn an_alignment_split_in_blocks_is_the_whole_tables() {
        let mut splits = 0;
        for seed in 0..400 {
            let random = Random::new(seed);
            let rows = random.n + 1;
            let whole = random.align(Plan { levels: 0, parts: 1, leaf: rows });
            assert!(whole.iter().any(Option::is_some) || random.fits.iter().flatten().all(Vec::is_empty));
            for levels in 1..=3 {
                for parts in 2usize..=4 {
                    for leaf in 1..=3 {
                        if leaf * parts.pow(levels as u32) < rows {
                            continue;
                        }
                        let plan = Plan { levels, parts, leaf };
                        assert_eq!(random.align(plan), whole, "seed {seed}, {plan:?}, {rows} rows");
                        splits += 1;
                    }
                }
            }
        }
        assert!(splits > 1_000, "{splits} splits tried");
    }

    /// The plan holds the whole table where it fits, and otherwise splits it within the budget.
    #[test]
    fn a_plan_splits_only_what_does_not_fit() {
        let (states, by_mask) = (vec![2; 1_000], vec![true; 1_000]);
        let table = Table::new(999, &states, &by_mask);
        let whole = Plan { levels: 0, parts: 1, leaf: 1_000 };
        assert_eq!(table.plan(table.bytes(whole)), Some(whole));
        let plan = table.plan(table.bytes(whole) / 4).unwrap();
        assert_eq!(plan.levels, 1);
        assert!(table.bytes(plan) <= table.bytes(whole) / 4 && plan.leaf * plan.parts >= 1_000, "{plan:?}");
        // 2,000 columns: one level holds at least 262 bytes a column, two 152, three 120.
        assert_eq!(table.plan(2_000 * 200).unwrap().levels, 2);
        assert_eq!(table.plan(2_000 * 100), None);
    }
}
