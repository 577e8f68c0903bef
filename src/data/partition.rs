//! Partitions and work units: which training rows each unit of an iteration covers.
//!
//! Everything here is fixed by the job (partition count, units per partition,
//! batch fraction) and its seed, never by the worker count, so the same job
//! computes the same sums whatever the number of workers or the policy.

use crate::rng::KeyedRng;

const PARTITION_STREAM: u64 = 0x5041_5254; // "PART"
const SAMPLE_STREAM: u64 = 0x5341_4D50; // "SAMP"

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
        Self {
            partitions: parts,
            units_per_partition,
            batch_fraction,
            seed,
        }
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
        let mut rng = KeyedRng::new(&[self.seed, SAMPLE_STREAM, iteration, p as u64]);
        for i in 0..take {
            let j = i + rng.below((pool.len() - i) as u64) as usize;
            pool.swap(i, j);
        }
        pool.truncate(take);
        pool.sort_unstable();
        pool
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
