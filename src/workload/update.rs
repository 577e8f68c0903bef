//! What a unit sends its shard owners: a dense vector, or sparse runs of
//! (index, value) for a unit that touches few of the coordinates (a block of
//! ratings touches only its users' and items' factor rows).
//!
//! Every sum is a left fold from zero in a fixed order, coordinate by
//! coordinate. A coordinate a sparse update leaves out adds nothing, and
//! `0.0 + x` is `x`, so a sparse and a dense update of the same values reduce
//! to the same bits (up to the sign of a zero, which no step can tell apart).

use std::ops::Range;

use serde::{Deserialize, Serialize};

/// A unit's update over some coordinates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Update {
    /// One value per coordinate.
    Dense(Vec<f64>),
    /// Values at the listed coordinates only; `idx` ascending, no repeats,
    /// as long as `val`.
    Sparse {
        /// Coordinates, ascending.
        idx: Vec<u32>,
        /// Their values.
        val: Vec<f64>,
    },
}

impl Default for Update {
    fn default() -> Self {
        Self::zero()
    }
}

impl Update {
    /// Nothing yet: adds nothing, and whatever is added to it is kept as is.
    pub fn zero() -> Self {
        Self::Sparse {
            idx: Vec::new(),
            val: Vec::new(),
        }
    }

    /// The sum of `contributions` (coordinate, value) per coordinate, each
    /// coordinate's values folded in the order given (a stable sort keeps
    /// it), as sparse runs.
    pub fn from_contributions(mut contributions: Vec<(u32, f64)>) -> Self {
        contributions.sort_by_key(|c| c.0);
        let mut idx: Vec<u32> = Vec::with_capacity(contributions.len());
        let mut val: Vec<f64> = Vec::with_capacity(contributions.len());
        for (i, x) in contributions {
            match idx.last() {
                Some(&last) if last == i => *val.last_mut().expect("as long as idx") += x,
                _ => {
                    idx.push(i);
                    val.push(x);
                }
            }
        }
        Self::Sparse { idx, val }
    }

    /// Whether it holds every coordinate of its range.
    pub fn is_dense(&self) -> bool {
        matches!(self, Self::Dense(_))
    }

    /// Whether it carries no values at all.
    pub fn is_empty(&self) -> bool {
        match self {
            Self::Dense(v) => v.is_empty(),
            Self::Sparse { idx, .. } => idx.is_empty(),
        }
    }

    /// Adds it into `acc` (its coordinates index `acc`).
    ///
    /// # Panics
    /// If a coordinate lies outside `acc`.
    pub fn add_into(&self, acc: &mut [f64]) {
        match self {
            Self::Dense(v) => {
                for (a, x) in acc.iter_mut().zip(v) {
                    *a += x;
                }
            }
            Self::Sparse { idx, val } => {
                for (&i, x) in idx.iter().zip(val) {
                    acc[i as usize] += x;
                }
            }
        }
    }

    /// Adds `other` to it, coordinate by coordinate (`self + other`, in that
    /// order). A sparse sum stays sparse; anything with a dense side turns
    /// dense, over `dims` coordinates.
    pub fn add(&mut self, other: &Update, dims: usize) {
        match (&mut *self, other) {
            (Self::Dense(acc), _) => other.add_into(acc),
            (Self::Sparse { idx, .. }, Self::Dense(v)) if idx.is_empty() => {
                *self = Self::Dense(v.clone());
            }
            (Self::Sparse { .. }, Self::Dense(_)) => {
                let mut acc = self.to_dense(dims);
                other.add_into(&mut acc);
                *self = Self::Dense(acc);
            }
            (Self::Sparse { idx, val }, Self::Sparse { idx: oi, val: ov }) => {
                let (idx, val) = merge(idx, val, oi, ov);
                *self = Self::Sparse { idx, val };
            }
        }
    }

    /// Every coordinate of `0..dims`.
    pub fn to_dense(&self, dims: usize) -> Vec<f64> {
        match self {
            Self::Dense(v) => v.clone(),
            Self::Sparse { .. } => {
                let mut acc = vec![0.0; dims];
                self.add_into(&mut acc);
                acc
            }
        }
    }

    /// The part over coordinates `range`, indexed from its start (a shard's
    /// slice).
    pub fn slice(&self, range: Range<usize>) -> Update {
        match self {
            Self::Dense(v) => Self::Dense(v[range].to_vec()),
            Self::Sparse { idx, val } => {
                let from = idx.partition_point(|&i| (i as usize) < range.start);
                let to = idx.partition_point(|&i| (i as usize) < range.end);
                let base = range.start as u32;
                Self::Sparse {
                    idx: idx[from..to].iter().map(|&i| i - base).collect(),
                    val: val[from..to].to_vec(),
                }
            }
        }
    }

    /// It cut into the parts `ranges`, each as [`Update::slice`] gives it.
    /// A dense update cut into ranges that follow each other from 0 to its
    /// end keeps its buffer for the first part and copies only the others
    /// (the first shard's part of a unit's gradient is then not copied).
    pub fn split(self, ranges: &[Range<usize>]) -> Vec<Update> {
        let follow = |len: usize| {
            ranges.first().is_some_and(|r| r.start == 0)
                && ranges.windows(2).all(|w| w[0].end == w[1].start)
                && ranges.last().is_some_and(|r| r.end == len)
        };
        match self {
            Self::Dense(mut v) if follow(v.len()) => {
                let mut parts: Vec<Update> = ranges[1..]
                    .iter()
                    .rev()
                    .map(|r| Self::Dense(v.split_off(r.start)))
                    .collect();
                parts.push(Self::Dense(v));
                parts.reverse();
                parts
            }
            other => ranges.iter().map(|r| other.slice(r.clone())).collect(),
        }
    }

    /// Bytes of its payload on the wire: 8 a value, 4 an index.
    pub fn wire_bytes(&self) -> u64 {
        match self {
            Self::Dense(v) => 8 * v.len() as u64,
            Self::Sparse { idx, .. } => 12 * idx.len() as u64,
        }
    }
}

impl std::ops::Index<usize> for Update {
    type Output = f64;

    /// The value at coordinate `j` (0 where a sparse update has none).
    fn index(&self, j: usize) -> &f64 {
        const ZERO: f64 = 0.0;
        match self {
            Self::Dense(v) => &v[j],
            Self::Sparse { idx, val } => match idx.binary_search(&(j as u32)) {
                Ok(k) => &val[k],
                Err(_) => &ZERO,
            },
        }
    }
}

/// The sorted union of two sparse runs, `a + b` where both have a value.
fn merge(ai: &[u32], av: &[f64], bi: &[u32], bv: &[f64]) -> (Vec<u32>, Vec<f64>) {
    let mut idx = Vec::with_capacity(ai.len() + bi.len());
    let mut val = Vec::with_capacity(ai.len() + bi.len());
    let (mut i, mut j) = (0, 0);
    while i < ai.len() || j < bi.len() {
        let take_a = j == bi.len() || (i < ai.len() && ai[i] <= bi[j]);
        let take_b = i == ai.len() || (j < bi.len() && bi[j] <= ai[i]);
        match (take_a, take_b) {
            (true, true) => {
                idx.push(ai[i]);
                val.push(av[i] + bv[j]);
                i += 1;
                j += 1;
            }
            (true, false) => {
                idx.push(ai[i]);
                val.push(av[i]);
                i += 1;
            }
            _ => {
                idx.push(bi[j]);
                val.push(bv[j]);
                j += 1;
            }
        }
    }
    (idx, val)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sparse(pairs: &[(u32, f64)]) -> Update {
        Update::Sparse {
            idx: pairs.iter().map(|p| p.0).collect(),
            val: pairs.iter().map(|p| p.1).collect(),
        }
    }

    /// Values where the order of addition shows in the bits.
    const BIG: f64 = 1e16;

    /// Cut into ranges, an update gives each range's slice: a dense one
    /// cut into ranges that follow each other keeps its buffer for the
    /// first part; other ranges, or a sparse update, are sliced.
    #[test]
    fn split_gives_each_ranges_slice_and_the_first_keeps_the_buffer() {
        let dense = Update::Dense((0..10).map(f64::from).collect());
        let sparse = sparse(&[(1, 1.0), (4, 4.0), (5, 5.0), (9, 9.0)]);
        let shards = [0..4, 4..5, 5..10];
        let gapped = [0..3, 6..10];
        let whole = std::slice::from_ref(&(0..10));
        for (update, ranges) in [
            (&dense, &shards[..]),
            (&dense, &gapped[..]),
            (&sparse, &shards[..]),
            (&dense, whole),
        ] {
            let expected: Vec<Update> = ranges.iter().map(|r| update.slice(r.clone())).collect();
            assert_eq!(update.clone().split(ranges), expected, "{ranges:?}");
        }
        let Update::Dense(v) = dense.clone() else {
            unreachable!("dense")
        };
        let buffer = v.as_ptr();
        match Update::Dense(v).split(&shards).first() {
            Some(Update::Dense(first)) => assert_eq!(first.as_ptr(), buffer),
            other => panic!("a dense first part, not {other:?}"),
        }
    }

    #[test]
    fn contributions_fold_per_coordinate_in_the_order_given() {
        let u =
            Update::from_contributions(vec![(5, BIG), (2, 0.5), (5, 1.0), (5, -BIG), (2, 0.25)]);
        // coordinate 5: (1e16 + 1) - 1e16 = 0 in floats, not 1
        assert_eq!(u, sparse(&[(2, 0.75), (5, (BIG + 1.0) - BIG)]));
        assert_eq!(
            u.to_dense(6),
            vec![0.0, 0.0, 0.75, 0.0, 0.0, (BIG + 1.0) - BIG]
        );
    }

    #[test]
    fn a_sparse_fold_has_the_bits_of_the_dense_fold() {
        let units = [
            sparse(&[(0, BIG), (3, 0.1)]),
            sparse(&[(0, 1.0), (1, 0.2), (3, 1e-17)]),
            Update::Dense(vec![-BIG, 0.0, 0.3, 0.7]),
            sparse(&[(3, 2.0)]),
        ];
        let mut dense = vec![0.0; 4];
        let mut folded = Update::zero();
        let mut sparse_only = Update::zero();
        for u in &units {
            u.to_dense(4)
                .iter()
                .zip(dense.iter_mut())
                .for_each(|(x, a)| *a += x);
            folded.add(u, 4);
            if matches!(u, Update::Sparse { .. }) {
                sparse_only.add(u, 4);
            }
        }
        assert_eq!(folded, Update::Dense(dense));
        assert!(
            matches!(sparse_only, Update::Sparse { .. }),
            "sparse stays sparse"
        );
        let mut into = vec![0.0; 4];
        units[0].add_into(&mut into);
        units[1].add_into(&mut into);
        units[3].add_into(&mut into);
        assert_eq!(sparse_only.to_dense(4), into);
    }

    #[test]
    fn a_slice_is_indexed_from_the_shard_start() {
        let u = sparse(&[(1, 1.0), (4, 4.0), (5, 5.0), (9, 9.0)]);
        assert_eq!(u.slice(4..9), sparse(&[(0, 4.0), (1, 5.0)]));
        assert_eq!(u.slice(10..12), sparse(&[]));
        assert_eq!(
            Update::Dense(vec![0.0, 1.0, 2.0]).slice(1..3),
            Update::Dense(vec![1.0, 2.0])
        );
    }

    #[test]
    fn sparse_runs_cost_twelve_bytes_an_entry() {
        assert_eq!(sparse(&[(1, 1.0), (7, 2.0)]).wire_bytes(), 24);
        assert_eq!(Update::Dense(vec![0.0; 10]).wire_bytes(), 80);
        assert!(Update::zero().is_empty());
    }
}
