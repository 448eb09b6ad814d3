//! The training data: a deterministic synthetic token stream that a model can learn.
//!
//! The stream follows `next = (3 * prev + 1) mod vocab` with probability 0.9 and a random token otherwise,
//! so the next token is mostly predictable from the current one and the loss falls from ln(vocab) toward
//! the noise floor. An epoch is `EPOCH` batches; step k uses batch `k mod EPOCH` of that fixed set, or a
//! permuted one under the `shuffle_data` fault (the same data in a different order). In a data-parallel
//! job of n ranks, rank r's shard of step k is batch `k * n + r` of that stream ([`shard`]).

use crate::config::ModelConfig;
use crate::rng::Rng;

/// Batches per epoch.
pub const EPOCH: u64 = 16;

/// One batch: `tokens` and `labels` (the tokens shifted by one), each batch x seq, row-major.
pub struct Batch {
    pub tokens: Vec<i32>,
    pub labels: Vec<i32>,
}

/// The batch of a step (of a single-process run).
pub fn batch(cfg: &ModelConfig, step: u64) -> Batch {
    shard(cfg, step, 0, 1)
}

/// Rank `rank`'s batch of a step in a data-parallel job of `ranks` ranks: the next `ranks` batches of the
/// stream are dealt out one per rank, as a distributed sampler does.
pub fn shard(cfg: &ModelConfig, step: u64, rank: u64, ranks: u64) -> Batch {
    at(cfg, step * ranks + rank)
}

/// Batch number `n` of the stream.
fn at(cfg: &ModelConfig, n: u64) -> Batch {
    let index = if cfg.faults.shuffle_data { shuffled(cfg.seed, n) } else { n % EPOCH };
    let mut tokens = Vec::with_capacity(cfg.batch * cfg.seq);
    let mut labels = Vec::with_capacity(cfg.batch * cfg.seq);
    for row in 0..cfg.batch {
        let mut rng = Rng::derive(cfg.seed, "data", index * cfg.batch as u64 + row as u64);
        let mut t = rng.below(cfg.vocab);
        let mut seq = Vec::with_capacity(cfg.seq + 1);
        for _ in 0..=cfg.seq {
            seq.push(t as i32);
            t = if rng.uniform() < 0.9 { (3 * t + 1) % cfg.vocab } else { rng.below(cfg.vocab) };
        }
        tokens.extend_from_slice(&seq[..cfg.seq]);
        labels.extend_from_slice(&seq[1..]);
    }
    Batch { tokens, labels }
}

/// Batch index of a step under the shuffle fault: a per-epoch permutation that never keeps batch 0 first,
/// so the very first step already differs.
fn shuffled(seed: u64, step: u64) -> u64 {
    let epoch = step / EPOCH;
    let mut order: Vec<u64> = (0..EPOCH).collect();
    Rng::derive(seed, "shuffle", epoch).shuffle(&mut order);
    if order[0] == 0 {
        order.swap(0, 1);
    }
    order[(step % EPOCH) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_reorders_the_same_batches() {
        let cfg = ModelConfig::default();
        let mut shuf = cfg.clone();
        shuf.faults.shuffle_data = true;
        assert_ne!(batch(&cfg, 0).tokens, batch(&shuf, 0).tokens);
        let mut a: Vec<Vec<i32>> = (0..EPOCH).map(|k| batch(&cfg, k).tokens).collect();
        let mut b: Vec<Vec<i32>> = (0..EPOCH).map(|k| batch(&shuf, k).tokens).collect();
        a.sort();
        b.sort();
        assert_eq!(a, b);
        let one = batch(&cfg, 3);
        assert!(one.tokens.iter().all(|&t| (0..cfg.vocab as i32).contains(&t)));
        assert_eq!(one.tokens[1..cfg.seq], one.labels[..cfg.seq - 1]);
    }

    #[test]
    fn shards_deal_out_the_stream() {
        let cfg = ModelConfig::default();
        assert_eq!(shard(&cfg, 2, 0, 1).tokens, batch(&cfg, 2).tokens);
        assert_eq!(shard(&cfg, 1, 2, 4).tokens, batch(&cfg, 6).tokens);
        assert_ne!(shard(&cfg, 1, 2, 4).tokens, shard(&cfg, 1, 3, 4).tokens);
    }
}
