//! Pairs that repeat an earlier pair, read once (diff and compare). A CANN dump of every input and output
//! records each activation twice: as an op's output, and again as the next op's input. Two such runs pair
//! the second copies as they pair the first, so about half of their pairs hold the same two tensors as an
//! earlier pair. Such a pair waits for the first one, and takes what was measured of it where each side
//! stores the same bytes for both ([`Source::same_stored_data`]: compared byte for byte, never a hash
//! alone); otherwise it is measured as any other pair.

use crate::index::Index;
use crate::matching::TensorPair;
use crate::sources::Source;
use crate::threads::{in_flight, tensor_bytes, InFlight};
use std::borrow::Borrow;
use std::collections::HashMap;

/// Pairs measured at a time when some repeat earlier ones. Reading a payload maps its neighbours' pages
/// too (the kernel's fault-around), and a repeat's pages mapped that way stay counted as resident until
/// the repeat is compared and released: windows in pair order bound that to a constant however large the
/// capture.
const WINDOW: usize = 256;

/// Pairs measured at a time when none repeats another: each window's results are handed on before the
/// next is read, so that what is held in flight is bounded however many pairs there are (one window of
/// all the pairs held up to three results a pair at once).
const WINDOW_WITHOUT_REPEATS: usize = 1024;

/// Each pair that repeats an earlier one -> the first pair before it with the same two content hashes, when
/// the hashes differ and both sides have data (a pair whose hashes are equal is identical without a
/// decode, and one without data is not read). Only the repeats are held (#18: an entry for every pair was
/// 16 bytes a pair, where a statistics capture has no repeat at all).
pub(crate) fn earlier_pair_with_the_hashes<P: Borrow<TensorPair>>(
    target: &Index,
    bench: &Index,
    pairs: &[P],
) -> HashMap<usize, usize> {
    let mut first: HashMap<(u64, u64), usize> = HashMap::new();
    let mut earlier = HashMap::new();
    for (i, p) in pairs.iter().enumerate() {
        let p = p.borrow();
        let (it, ib) = (&target.tensors[p.target()], &bench.tensors[p.bench()]);
        match (it.hash(), ib.hash()) {
            (Some(ht), Some(hb)) if ht != hb && it.has_data && ib.has_data => {
                let e = *first.entry((ht, hb)).or_insert(i);
                if e != i {
                    earlier.insert(i, e);
                }
            }
            _ => {}
        }
    }
    earlier
}

/// A first pair's result, what its repeats take from it, and whether each repeat (by index) stores the
/// same data.
type Measured<R, K> = (R, Option<K>, Vec<(usize, bool)>);

/// A repeat's index, whether its target side stores the same data as its first pair's, and whether both do.
type Checked = (usize, bool, bool);

/// Every pair's result, in pair order, from [`measure_pairs_into`]: the tests' form (the commands take
/// each result as it comes).
#[cfg(test)]
pub(crate) fn measure_pairs<R: Send, K: Send + Sync>(
    sources: (&dyn Source, &dyn Source),
    limits: InFlight,
    pairs: &[&TensorPair],
    measure: impl Fn(&TensorPair) -> R + Sync,
    kept: impl Fn(&R) -> Option<K> + Sync,
    repeat: impl Fn(&TensorPair, &K) -> R + Sync,
) -> Vec<R> {
    let mut results = Vec::with_capacity(pairs.len());
    measure_pairs_into(sources, limits, pairs, measure, kept, repeat, |r| results.push(r));
    results
}

/// Each pair's result handed to `place` in pair order as its window is done (so that a caller keeps it
/// where it ends up, compare's rows, or folds it, diff's tables, instead of a table of results copied from at
/// the end), with at most as many pairs measured at once as `limits` says
/// ([`in_flight`]: each on one of the pool's first threads, the rest of the pool free for the work within a
/// pair; a pair's size is its larger tensor's as f32). `measure` reads and measures a pair; a pair that repeats an
/// earlier pair's hashes ([`earlier_pair_with_the_hashes`]) waits for it instead, and `repeat` builds its
/// result from what `kept` took from the first pair's (`None`: the first was not measured, or could not be
/// read), where both sides store the same data for the two pairs. Otherwise, or where that cannot be told
/// (an error of the comparison), the repeat is measured itself, and fails as it would have.
///
/// Whether a repeat stores the same data as its first pair is asked just before the first pair is
/// measured: the first pair's stored bytes are then read once for both (a capture keeps their pages mapped
/// for the read that follows), where asking afterwards would bring them back into memory after that read
/// had released them. What the checks left is released after the read ([`Source::release_stored_data`]),
/// and everything at the end of each window ([`Source::release_all`]).
pub(crate) fn measure_pairs_into<R: Send, K: Send + Sync, P: Borrow<TensorPair> + Sync>(
    (target, bench): (&dyn Source, &dyn Source),
    limits: InFlight,
    pairs: &[P],
    measure: impl Fn(&TensorPair) -> R + Sync,
    kept: impl Fn(&R) -> Option<K> + Sync,
    repeat: impl Fn(&TensorPair, &K) -> R + Sync,
    mut place: impl FnMut(R),
) {
    let earlier = earlier_pair_with_the_hashes(target.index(), bench.index(), pairs);
    let (ti, bi) = (&target.index().tensors, &bench.index().tensors);
    let pair = |i: usize| pairs[i].borrow();
    let size = |i: usize| tensor_bytes(&ti[pair(i).target()]).max(tensor_bytes(&bi[pair(i).bench()]));
    // Each pair's repeats, in order (a repeat comes after its first).
    let mut repeats: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut in_order: Vec<(usize, usize)> = earlier.iter().map(|(&i, &e)| (i, e)).collect();
    in_order.sort_unstable();
    for (i, e) in in_order {
        repeats.entry(e).or_default().push(i);
    }
    // Without repeats nothing waits and no repeat's pages are mapped early: larger windows.
    let window = if repeats.is_empty() { WINDOW_WITHOUT_REPEATS } else { WINDOW };
    // Whether each repeat's two sides store the same data as its first pair's (asked with the first pair).
    let mut same = vec![false; pairs.len()];
    // What the pairs measured first left for their repeats, kept until the last of these is done.
    let mut firsts: HashMap<usize, K> = HashMap::new();
    for start in (0..pairs.len()).step_by(window) {
        let range = start..(start + window).min(pairs.len());
        let end = range.end;
        let first_pass: Vec<Option<Measured<R, K>>> = in_flight(
            limits,
            range.len(),
            |k| size(start + k),
            || (),
            |_, k| {
                let i = start + k;
                (!earlier.contains_key(&i)).then(|| {
                    let (f, mine) = (pair(i), repeats.get(&i).map_or(&[][..], Vec::as_slice));
                    let checked: Vec<Checked> = mine
                        .iter()
                        .map(|&j| {
                            let p = pair(j);
                            let t = target.same_stored_data(f.target(), p.target()).unwrap_or(false);
                            (j, t, t && bench.same_stored_data(f.bench(), p.bench()).unwrap_or(false))
                        })
                        .collect();
                    let r = measure(f);
                    let k = if mine.is_empty() { None } else { kept(&r) };
                    // What the checks and the read left mapped (a failure only leaves pages mapped): the first
                    // pair's, and the repeats' (the bench side only where it was compared).
                    if !mine.is_empty() {
                        let _ = target.release_stored_data(f.target());
                        let _ = bench.release_stored_data(f.bench());
                    }
                    for &(j, t, _) in &checked {
                        let _ = target.release_stored_data(pair(j).target());
                        if t {
                            let _ = bench.release_stored_data(pair(j).bench());
                        }
                    }
                    (r, k, checked.into_iter().map(|(j, _, same)| (j, same)).collect())
                })
            },
        );
        let mut done: Vec<Option<R>> = Vec::with_capacity(first_pass.len());
        for (r, i) in first_pass.into_iter().zip(range.clone()) {
            done.push(r.map(|(r, k, checked)| {
                for (j, s) in checked {
                    same[j] = s;
                }
                if let Some(k) = k {
                    firsts.insert(i, k);
                }
                r
            }));
        }
        // The repeats: each takes its first pair's result, or is measured itself.
        let (firsts_here, same_here) = (&firsts, &same);
        let todo: Vec<usize> = range.clone().filter(|&i| done[i - start].is_none()).collect();
        let repeated = in_flight(
            limits,
            todo.len(),
            |k| size(todo[k]),
            || (),
            |_, k| {
                let (i, p) = (todo[k], pair(todo[k]));
                match earlier.get(&i).and_then(|e| firsts_here.get(e)) {
                    Some(first) if same_here[i] => repeat(p, first),
                    _ => measure(p),
                }
            },
        );
        for (i, r) in todo.into_iter().zip(repeated) {
            done[i - start] = Some(r);
        }
        for r in done {
            place(r.expect("every pair of the window is measured"));
        }
        // No read is in flight between windows: pages that reads mapped around their own (records around
        // a repeat are mostly repeats, released before or never read) go here, so that they do not add up
        // over the whole run.
        target.release_all();
        bench.release_all();
        firsts.retain(|&e, _| repeats[&e].last().is_some_and(|&last| last >= end));
    }
    crate::threads::release_kept_buffers();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{Io, TensorId, TensorInfo};
    use crate::matching::MatchKind;
    use accutrace_formats::DType;
    use std::path::Path;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    /// A run of one op per tensor, with the given content hashes (`None`: no data either); tensors of one
    /// hash store the same bytes, except those in `differ`, whose bytes differ from every other's.
    struct Run {
        index: Index,
        differ: Vec<TensorId>,
        /// What was asked of the source, in order: `('s', a, b)` for `same_stored_data(a, b)`, `('r', a, a)`
        /// for `release_stored_data(a)`, `('a', 0, 0)` for `release_all()`.
        log: Mutex<Vec<(char, TensorId, TensorId)>>,
    }

    impl Run {
        fn new(hashes: impl Iterator<Item = Option<u64>>, differ: Vec<TensorId>) -> Run {
            let mut index = Index::default();
            for hash in hashes {
                let op = index.push_op(format!("op{}", index.ops.len()), "T".into(), 0, 0);
                index.push_tensor(
                    TensorInfo {
                        has_data: hash.is_some(),
                        ..TensorInfo::for_test(op, Io::Output, 0, DType::FLOAT16, vec![4])
                    }
                    .with_hash(hash),
                );
            }
            Run { index, differ, log: Mutex::new(Vec::new()) }
        }
    }

    impl Source for Run {
        fn kind(&self) -> &'static str {
            "test"
        }
        fn root(&self) -> &Path {
            Path::new("test")
        }
        fn index(&self) -> &Index {
            &self.index
        }
        fn read_values(&self, _: TensorId, _: &mut Vec<f32>) -> anyhow::Result<()> {
            unreachable!("measure_pairs reads nothing itself")
        }
        fn content_hash(&self, t: TensorId) -> anyhow::Result<u64> {
            self.index.tensors[t].hash().ok_or_else(|| anyhow::anyhow!("no data"))
        }
        fn same_stored_data(&self, a: TensorId, b: TensorId) -> anyhow::Result<bool> {
            anyhow::ensure!(a < b, "asked about {a} and {b}: not an earlier pair");
            self.log.lock().unwrap().push(('s', a, b));
            let hash = |t: TensorId| self.index.tensors[t].hash();
            Ok(hash(a).is_some() && hash(a) == hash(b) && ![a, b].iter().any(|t| self.differ.contains(t)))
        }
        fn release_stored_data(&self, a: TensorId) -> anyhow::Result<()> {
            self.log.lock().unwrap().push(('r', a, a));
            Ok(())
        }
        fn release_all(&self) {
            self.log.lock().unwrap().push(('a', 0, 0));
        }
    }

    /// Every pair's result through [`measure_pairs`], against the same rule applied one pair at a time: over
    /// several windows, a repeat of a pair in an earlier window, of one whose measurement failed, of one
    /// stored with other bytes on either side, pairs with equal hashes and pairs without data.
    #[test]
    fn a_repeat_takes_the_first_pairs_result_only_where_both_sides_store_the_same_bytes() {
        let n = 3 * WINDOW + 77;
        // Hashes repeat every 97 pairs (within and across windows); every 11th pair's two hashes are equal,
        // every 13th has no data on the bench side.
        let target = Run::new((0..n).map(|i| Some((i % 97) as u64)), vec![]);
        let bench_hash = |i: usize| {
            if i.is_multiple_of(13) {
                None
            } else if i.is_multiple_of(11) {
                Some((i % 97) as u64)
            } else {
                Some(1000 + (i % 97) as u64)
            }
        };
        let differ_bench: Vec<TensorId> = (0..n).filter(|i| i % 7 == 3).collect();
        let bench = Run::new((0..n).map(bench_hash), differ_bench.clone());
        let pairs: Vec<TensorPair> = (0..n).map(|i| TensorPair::new(i, i, MatchKind::Exact)).collect();
        let pairs: Vec<&TensorPair> = pairs.iter().collect();
        // Measuring pair i fails where i % 5 == 1 (as an unreadable tensor would).
        let measured = AtomicUsize::new(0);
        let results: Vec<Result<(usize, Option<usize>), usize>> = measure_pairs(
            (&target, &bench),
            InFlight::any(4),
            &pairs,
            |p| {
                measured.fetch_add(1, Ordering::Relaxed);
                if p.target() % 5 == 1 {
                    Err(p.target())
                } else {
                    Ok((p.target(), None))
                }
            },
            |r| r.as_ref().ok().map(|&(i, _)| i),
            |p, &first| Ok((p.target(), Some(first))),
        );
        // The rule, one pair at a time.
        let mut first_of: HashMap<(u64, u64), usize> = HashMap::new();
        let mut expected = Vec::new();
        let mut repeats = 0;
        for i in 0..n {
            let measure = |i: usize| if i % 5 == 1 { Err(i) } else { Ok((i, None)) };
            let first = match (Some((i % 97) as u64), bench_hash(i)) {
                (Some(ht), Some(hb)) if ht != hb => Some(*first_of.entry((ht, hb)).or_insert(i)),
                _ => None,
            };
            expected.push(match first {
                Some(e)
                    if e != i && e % 5 != 1 && !differ_bench.contains(&i) && !differ_bench.contains(&e) =>
                {
                    repeats += 1;
                    Ok((i, Some(e)))
                }
                _ => measure(i),
            });
        }
        let across_windows =
            expected.iter().filter(|r| matches!(r, Ok((i, Some(e))) if e / WINDOW < i / WINDOW));
        assert!(repeats > WINDOW && across_windows.count() > 100, "the test has too few repeats: {repeats}");
        assert_eq!(results, expected);
        assert_eq!(measured.load(Ordering::Relaxed), n - repeats);
    }

    /// A repeat's stored data is compared with its first pair's before the first pair is measured; what the
    /// comparisons brought in (of the first pair and of its repeats) is released after the measurement,
    /// once each, and everything at the end of each window.
    #[test]
    fn the_stored_data_is_compared_before_the_first_pair_is_read() {
        let n = 2 * WINDOW + 31;
        // Hashes repeat every 40 pairs: pairs 0..40 are firsts, the rest repeats (several per first, in
        // this window and the next ones). Measuring pair i fails where i % 3 == 2.
        let target = Run::new((0..n).map(|i| Some((i % 40) as u64)), vec![]);
        let bench = Run::new((0..n).map(|i| Some(1000 + (i % 40) as u64)), vec![5]);
        let pairs: Vec<TensorPair> = (0..n).map(|i| TensorPair::new(i, i, MatchKind::Exact)).collect();
        let pairs: Vec<&TensorPair> = pairs.iter().collect();
        // Where each pair's measurement began, in the order of the sources' log (bench's log length then).
        let measured_at: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(usize::MAX)).collect();
        let results: Vec<Result<(usize, Option<usize>), usize>> = measure_pairs(
            (&target, &bench),
            InFlight::any(4),
            &pairs,
            |p| {
                let at = (target.log.lock().unwrap().len(), bench.log.lock().unwrap().len());
                measured_at[p.target()].store(at.0 << 32 | at.1, Ordering::SeqCst);
                if p.target() % 3 == 2 {
                    Err(p.target())
                } else {
                    Ok((p.target(), None))
                }
            },
            |r| r.as_ref().ok().map(|&(i, _)| i),
            |p, &first| Ok((p.target(), Some(first))),
        );
        let (tlog, blog) = (target.log.into_inner().unwrap(), bench.log.into_inner().unwrap());
        for (first, at) in measured_at.iter().enumerate().take(40) {
            let at = at.load(Ordering::SeqCst);
            let (t_at, b_at) = (at >> 32, at & 0xffff_ffff);
            // Every repeat of this first pair was asked about on the target side before it was measured,
            // and on the bench side too where the target side stores the same bytes (all of them).
            let asked = |log: &[(char, usize, usize)], before: usize| {
                log[..before].iter().filter(|&&(k, a, _)| k == 's' && a == first).count()
            };
            let repeats = (first + 40..n).step_by(40).count();
            assert_eq!(asked(&tlog, t_at), repeats, "target side of {first}");
            assert_eq!(asked(&blog, b_at), repeats, "bench side of {first}");
            assert_eq!(asked(&tlog, tlog.len()) + asked(&blog, blog.len()), 2 * repeats, "asked once");
            // The first pair and each repeat released once on each side, after the measurement began.
            for (log, before) in [(&tlog, t_at), (&blog, b_at)] {
                for t in std::iter::once(first).chain((first + 40..n).step_by(40)) {
                    let released: Vec<usize> = (0..log.len()).filter(|&k| log[k] == ('r', t, t)).collect();
                    assert_eq!(released.len(), 1, "releases of {t}");
                    assert!(released[0] >= before, "{t} released before {first} was measured");
                }
            }
        }
        for log in [&tlog, &blog] {
            assert_eq!(
                log.iter().filter(|e| e.0 == 'a').count(),
                n.div_ceil(WINDOW),
                "one release_all a window"
            );
            assert_eq!(log.last(), Some(&('a', 0, 0)));
        }
        // The results are the rule's: a repeat takes its first pair's where that was measured and both
        // sides store the same bytes (pair 5's bench side does not: its repeats are measured themselves).
        for (i, r) in results.iter().enumerate() {
            let e = i % 40;
            let expected = if e == i || e % 3 == 2 || e == 5 {
                if i % 3 == 2 {
                    Err(i)
                } else {
                    Ok((i, None))
                }
            } else {
                Ok((i, Some(e)))
            };
            assert_eq!(*r, expected, "pair {i}");
        }
    }

    /// At most `n` pairs are measured at once, by `n` threads only (those that keep buffers per thread), in
    /// every window and both passes, while the pool has more threads and the work within a pair (here a
    /// parallel loop) runs on them too; the results are in pair order and follow the repeat rule.
    #[test]
    fn at_most_n_pairs_are_in_flight_on_n_threads_of_a_larger_pool() {
        let n_pairs = 2 * WINDOW + 45;
        // Hashes repeat every 60 pairs; pair 7's bench side stores other bytes (its repeats are measured).
        let target = Run::new((0..n_pairs).map(|i| Some((i % 60) as u64)), vec![]);
        let bench = Run::new((0..n_pairs).map(|i| Some(1000 + (i % 60) as u64)), vec![7]);
        let pairs: Vec<TensorPair> = (0..n_pairs).map(|i| TensorPair::new(i, i, MatchKind::Exact)).collect();
        let pairs: Vec<&TensorPair> = pairs.iter().collect();
        for n in [1, 2, 3] {
            let (now, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
            let measuring = Mutex::new(std::collections::BTreeSet::new());
            let helping = Mutex::new(std::collections::BTreeSet::new());
            let pool = rayon::ThreadPoolBuilder::new().num_threads(5).build().unwrap();
            let results: Vec<(usize, Option<usize>)> = pool.install(|| {
                let in_flight = |p: &TensorPair, first: Option<usize>| {
                    most.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    measuring.lock().unwrap().insert(rayon::current_thread_index());
                    // Held until what may run at once has (crate::threads::hold_until says why).
                    crate::threads::hold_until(|| most.load(Ordering::SeqCst) >= n);
                    use rayon::prelude::*;
                    (0..8).into_par_iter().for_each(|_| {
                        helping.lock().unwrap().insert(rayon::current_thread_index());
                        crate::threads::hold_until(|| helping.lock().unwrap().len() > n);
                        std::thread::sleep(std::time::Duration::from_micros(100));
                    });
                    now.fetch_sub(1, Ordering::SeqCst);
                    (p.target(), first)
                };
                measure_pairs(
                    (&target, &bench),
                    InFlight::any(n),
                    &pairs,
                    |p| in_flight(p, None),
                    |&(i, _)| Some(i),
                    |p, &first| in_flight(p, Some(first)),
                )
            });
            let expected: Vec<(usize, Option<usize>)> =
                (0..n_pairs).map(|i| (i, (i >= 60 && i % 60 != 7).then_some(i % 60))).collect();
            assert_eq!(results, expected, "n = {n}");
            assert_eq!(most.load(Ordering::SeqCst), n, "n = {n}: pairs in flight");
            let measuring = measuring.into_inner().unwrap();
            assert_eq!(measuring.len(), n, "n = {n}: threads that measured: {measuring:?}");
            assert!(
                helping.into_inner().unwrap().len() > n,
                "n = {n}: the work within pairs used {n} threads"
            );
        }
    }

    #[test]
    fn pairs_of_equal_hashes_or_without_data_have_no_earlier_pair() {
        let target =
            Run::new([Some(1), Some(1), Some(2), Some(2), None, None, Some(3), Some(3)].into_iter(), vec![]);
        let bench =
            Run::new([Some(9), Some(9), Some(2), Some(2), Some(4), Some(4), None, None].into_iter(), vec![]);
        let pairs: Vec<TensorPair> = (0..8).map(|i| TensorPair::new(i, i, MatchKind::Exact)).collect();
        let pairs: Vec<&TensorPair> = pairs.iter().collect();
        let earlier = earlier_pair_with_the_hashes(&target.index, &bench.index, &pairs);
        assert_eq!(earlier, HashMap::from([(1, 0)]));
    }
}
