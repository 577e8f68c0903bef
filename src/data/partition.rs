//! Partitions and work units: which training rows each unit of an iteration covers.
//!
//! Everything here is fixed by the job (partition count, units per partition,
//! batch fraction) and its seed, never by the worker count, so the same job
//! computes the same sums whatever the number of workers or the policy.

use crate::rng::KeyedRng;

const PARTITION_STREAM: u64 = 0x5041_5254; // "PART"
const SAMPLE_STREAM: u64 = 0x5341_4D50; // "SAMP"
const EPOCH_STREAM: u64 = 0x4550_4F43; // "EPOC"

/// How each iteration draws its `batch_fraction` of a partition's rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sampling {
    /// A fresh draw every iteration, independent of the others: over many
    /// iterations a row may come twice before another comes once.
    #[default]
    Independent,
    /// Epochs, as a data loader that reshuffles every epoch: each epoch walks
    /// a fresh shuffle of the partition a batch at a time, so every row comes
    /// once an epoch. The `len mod batch` rows a shuffle leaves over are
    /// skipped that epoch (a different few each epoch, as `drop_last`).
    Epoch,
}

impl Sampling {
    /// The names a job file may give, in the order the docs list them.
    pub const NAMES: &'static [&'static str] = &["independent", "epoch"];

    /// The sampling a job file names.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "independent" => Some(Self::Independent),
            "epoch" => Some(Self::Epoch),
            _ => None,
        }
    }

    /// Whether this is the default (left out of a plan's JSON and hash).
    pub fn is_independent(&self) -> bool {
        *self == Self::Independent
    }
}

/// Names one unit of an iteration: a chunk of one partition's sampled rows.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct UnitKey {
    /// Partition.
    pub partition: u32,
    /// Chunk of the partition's sampled rows, `0..units_per_partition`.
    pub unit: u32,
}

/// A unit with the rows it covers in one iteration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitRows {
    /// Which unit.
    pub key: UnitKey,
    /// Row indices into the dataset, ascending.
    pub rows: Vec<u32>,
}

/// The training rows cut into partitions, and the rule that picks each
/// iteration's rows and cuts them into units.
#[derive(Debug, Clone)]
pub struct Partitioning {
    partitions: Vec<Vec<u32>>,
    units_per_partition: u32,
    batch_fraction: f64,
    sampling: Sampling,
    seed: u64,
}

impl Partitioning {
    /// Shuffles `train` with `seed` and cuts it into `partitions` blocks whose
    /// sizes differ by at most one. Each iteration samples `batch_fraction` of each
    /// partition's rows (all of them at 1.0) and cuts them into
    /// `units_per_partition` units.
    ///
    /// The caller has checked `1 <= partitions <= train.len()` and
    /// `units_per_partition >= 1`.
    pub fn new(
        train: &[u32],
        partitions: u32,
        units_per_partition: u32,
        batch_fraction: f64,
        seed: u64,
    ) -> Self {
        let mut rows = train.to_vec();
        KeyedRng::new(&[seed, PARTITION_STREAM]).shuffle(&mut rows);
        let parts = (0..partitions as usize)
            .map(|p| {
                let mut block = rows[even_range(rows.len(), partitions as usize, p)].to_vec();
                block.sort_unstable();
                block
            })
            .collect();
        Self::of_parts(parts, units_per_partition, batch_fraction, seed)
    }

    /// Like [`Partitioning::new`], but the rows of one group stay in one
    /// partition: `groups[i]` is the group of `train[i]` (a value of a
    /// categorical column, say the user who gave a rating). The distinct
    /// groups are shuffled with `seed` and cut into `partitions` blocks whose
    /// group counts differ by at most one, so a partition holds as many rows
    /// as its groups do: uneven where the groups are.
    ///
    /// The caller has checked that there are at least `partitions` groups
    /// and `units_per_partition >= 1`.
    pub fn grouped(
        train: &[u32],
        groups: &[u32],
        partitions: u32,
        units_per_partition: u32,
        batch_fraction: f64,
        seed: u64,
    ) -> Self {
        let mut distinct: Vec<u32> = groups.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        KeyedRng::new(&[seed, PARTITION_STREAM]).shuffle(&mut distinct);
        let mut block_of = std::collections::HashMap::with_capacity(distinct.len());
        for p in 0..partitions as usize {
            for &g in &distinct[even_range(distinct.len(), partitions as usize, p)] {
                block_of.insert(g, p);
            }
        }
        let mut parts: Vec<Vec<u32>> = vec![Vec::new(); partitions as usize];
        for (&row, g) in train.iter().zip(groups) {
            parts[block_of[g]].push(row);
        }
        for block in &mut parts {
            block.sort_unstable();
        }
        Self::of_parts(parts, units_per_partition, batch_fraction, seed)
    }

    /// The cut into `parts` (each ascending), sampled independently.
    fn of_parts(
        parts: Vec<Vec<u32>>,
        units_per_partition: u32,
        batch_fraction: f64,
        seed: u64,
    ) -> Self {
        Self {
            partitions: parts,
            units_per_partition,
            batch_fraction,
            sampling: Sampling::Independent,
            seed,
        }
    }

    /// The same cut, sampled as `sampling` says.
    pub fn with_sampling(mut self, sampling: Sampling) -> Self {
        self.sampling = sampling;
        self
    }

    /// Number of partitions.
    pub fn partitions(&self) -> u32 {
        self.partitions.len() as u32
    }

    /// Units each partition is cut into per iteration.
    pub fn units_per_partition(&self) -> u32 {
        self.units_per_partition
    }

    /// All training rows of partition `p`.
    pub fn partition_rows(&self, p: u32) -> &[u32] {
        &self.partitions[p as usize]
    }

    /// Rows partition `p` contributes to iteration `t`, ascending.
    pub fn sampled_rows(&self, iteration: u64, p: u32) -> Vec<u32> {
        let all = &self.partitions[p as usize];
        let take = self.sample_size(all.len());
        if take == all.len() {
            return all.clone();
        }
        let mut pool = all.clone();
        let mut sample = match self.sampling {
            Sampling::Independent => {
                let mut rng = KeyedRng::new(&[self.seed, SAMPLE_STREAM, iteration, p as u64]);
                for i in 0..take {
                    let j = i + rng.below((pool.len() - i) as u64) as usize;
                    pool.swap(i, j);
                }
                pool.truncate(take);
                pool
            }
            Sampling::Epoch => {
                let per_epoch = (all.len() / take) as u64;
                let (epoch, batch) = (iteration / per_epoch, (iteration % per_epoch) as usize);
                KeyedRng::new(&[self.seed, EPOCH_STREAM, epoch, p as u64]).shuffle(&mut pool);
                pool[batch * take..(batch + 1) * take].to_vec()
            }
        };
        sample.sort_unstable();
        sample
    }

    /// The units of partition `p` in iteration `t`, in unit order.
    pub fn units(&self, iteration: u64, p: u32) -> Vec<UnitRows> {
        let rows = self.sampled_rows(iteration, p);
        let n = self.units_per_partition as usize;
        (0..n)
            .map(|u| UnitRows {
                key: UnitKey {
                    partition: p,
                    unit: u as u32,
                },
                rows: rows[even_range(rows.len(), n, u)].to_vec(),
            })
            .collect()
    }

    /// Rows sampled in one iteration, over all partitions.
    pub fn rows_per_iteration(&self) -> u64 {
        self.partitions
            .iter()
            .map(|p| self.sample_size(p.len()) as u64)
            .sum()
    }

    /// Rows sampled from each partition per iteration.
    pub fn sample_size(&self, partition_len: usize) -> usize {
        ((partition_len as f64 * self.batch_fraction).round() as usize).clamp(1, partition_len)
    }
}

/// The `i`-th of `n` contiguous ranges covering `0..len` with sizes differing by ≤ 1.
pub fn even_range(len: usize, n: usize, i: usize) -> std::ops::Range<usize> {
    let base = len / n;
    let extra = len % n;
    let start = i * base + i.min(extra);
    start..start + base + usize::from(i < extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_ranges_cover_everything_once() {
        for len in [0, 1, 7, 48, 1000] {
            for n in 1..10 {
                let mut next = 0;
                for i in 0..n {
                    let r = even_range(len, n, i);
                    assert_eq!(r.start, next);
                    assert!(r.len() == len / n || r.len() == len / n + 1);
                    next = r.end;
                }
                assert_eq!(next, len);
            }
        }
    }

    #[test]
    fn partitions_cover_the_training_rows_once() {
        let train: Vec<u32> = (0..1000).map(|i| i * 3).collect();
        let p = Partitioning::new(&train, 7, 3, 1.0, 9);
        let mut all: Vec<u32> = (0..7).flat_map(|i| p.partition_rows(i).to_vec()).collect();
        all.sort_unstable();
        assert_eq!(all, train);
    }

    #[test]
    fn a_group_stays_in_one_partition_and_partitions_follow_their_groups() {
        // 40 groups of 1..=40 rows: group g holds rows g·100 .. g·100 + g
        let (mut train, mut groups) = (Vec::new(), Vec::new());
        for g in 1..=40u32 {
            for r in 0..g {
                train.push(g * 100 + r);
                groups.push(g);
            }
        }
        let p = Partitioning::grouped(&train, &groups, 8, 2, 1.0, 3);
        let mut all = Vec::new();
        let mut sizes = Vec::new();
        for part in 0..8 {
            let rows = p.partition_rows(part);
            let mut seen: Vec<u32> = rows.iter().map(|r| r / 100).collect();
            seen.dedup();
            assert_eq!(seen.len(), 5, "five whole groups a partition: {seen:?}");
            for g in &seen {
                assert_eq!(rows.iter().filter(|r| *r / 100 == *g).count() as u32, *g);
            }
            sizes.push(rows.len());
            all.extend_from_slice(rows);
        }
        all.sort_unstable();
        assert_eq!(all, train, "every row once");
        assert!(sizes.iter().max() > sizes.iter().min(), "uneven: {sizes:?}");
        let again = Partitioning::grouped(&train, &groups, 8, 2, 1.0, 3);
        assert_eq!(again.partitions, p.partitions, "the seed decides the cut");
        let other = Partitioning::grouped(&train, &groups, 8, 2, 1.0, 4);
        assert_ne!(other.partitions, p.partitions);
    }

    #[test]
    fn units_cover_the_sample_in_order() {
        let train: Vec<u32> = (0..500).collect();
        let p = Partitioning::new(&train, 5, 4, 0.5, 1);
        for t in 0..3 {
            let units = p.units(t, 2);
            assert_eq!(units.len(), 4);
            let joined: Vec<u32> = units.iter().flat_map(|u| u.rows.clone()).collect();
            assert_eq!(joined, p.sampled_rows(t, 2));
            assert_eq!(joined.len(), 50);
        }
    }

    #[test]
    fn epoch_sampling_gives_every_row_once_an_epoch() {
        let train: Vec<u32> = (0..103).collect();
        // 3 partitions of 34–35 rows, 10 a batch: 3 batches an epoch, 4–5 rows left over
        let p = Partitioning::new(&train, 3, 2, 0.29, 7).with_sampling(Sampling::Epoch);
        for part in 0..3 {
            let len = p.partition_rows(part).len();
            let take = p.sample_size(len);
            assert_eq!(take, 10);
            let per_epoch = (len / take) as u64;
            let mut seen_by_epoch = Vec::new();
            for epoch in 0..3 {
                let mut seen: Vec<u32> = (0..per_epoch)
                    .flat_map(|b| p.sampled_rows(epoch * per_epoch + b, part))
                    .collect();
                seen.sort_unstable();
                let before = seen.len();
                seen.dedup();
                assert_eq!(seen.len(), before, "a row twice in epoch {epoch}");
                assert_eq!(seen.len(), per_epoch as usize * take);
                assert!(seen.iter().all(|r| p.partition_rows(part).contains(r)));
                seen_by_epoch.push(seen);
            }
            // a fresh shuffle each epoch: not the same rows left over every time
            assert!(seen_by_epoch.windows(2).any(|w| w[0] != w[1]));
        }
        // a pure function of (seed, iteration, partition)
        let q = Partitioning::new(&train, 3, 2, 0.29, 7).with_sampling(Sampling::Epoch);
        assert_eq!(p.units(5, 1), q.units(5, 1));
        assert_ne!(p.sampled_rows(5, 1), p.sampled_rows(6, 1));
    }

    #[test]
    fn independent_sampling_is_the_default_and_unchanged() {
        let train: Vec<u32> = (0..500).collect();
        let a = Partitioning::new(&train, 5, 2, 0.3, 1);
        let b = Partitioning::new(&train, 5, 2, 0.3, 1).with_sampling(Sampling::Independent);
        assert_eq!(a.sampled_rows(4, 1), b.sampled_rows(4, 1));
        assert_eq!(Sampling::from_name("epoch"), Some(Sampling::Epoch));
        assert_eq!(Sampling::from_name("epochs"), None);
    }

    #[test]
    fn sampling_depends_on_seed_and_iteration_only() {
        let train: Vec<u32> = (0..500).collect();
        let a = Partitioning::new(&train, 5, 2, 0.3, 1);
        let b = Partitioning::new(&train, 5, 2, 0.3, 1);
        let c = Partitioning::new(&train, 5, 2, 0.3, 2);
        assert_eq!(a.sampled_rows(4, 1), b.sampled_rows(4, 1));
        assert_ne!(a.sampled_rows(4, 1), a.sampled_rows(5, 1));
        assert_ne!(a.partition_rows(0), c.partition_rows(0));
    }
}
