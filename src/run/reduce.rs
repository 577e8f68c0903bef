//! A parameter shard's owner: collects each unit's gradient slice exactly once,
//! reduces in partition order, and steps the optimiser.
//!
//! The reduction is `Σ_p (Σ_u g[p,u])`, each sum a left fold in index order,
//! coordinate by coordinate, so the result does not depend on which worker
//! computed a unit, in which order slices arrived, or how coordinates are
//! sharded.

use std::collections::BTreeMap;
use std::ops::Range;

use super::messages::GradSlice;
use crate::model::{Adam, AdamConfig};

/// What became of an offered slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// First copy of this unit for its iteration: counted.
    Accepted,
    /// The unit was already counted (a clone's twin or a late copy): discarded.
    Duplicate,
}

/// One iteration's reduced result for the shard.
#[derive(Debug, Clone, PartialEq)]
pub struct Reduced {
    /// The new values of the shard's coordinates (version `iteration + 1`).
    pub values: Vec<f64>,
    /// Σ of the units' loss sums, folded in the same order (shard 0 only).
    pub loss_sum: f64,
}

#[derive(Debug)]
struct Slots {
    grads: Vec<Option<(Vec<f64>, f64)>>,
    filled: usize,
}

/// State of one parameter shard at its owner.
#[derive(Debug)]
pub struct ShardReducer {
    range: Range<usize>,
    partitions: u32,
    units_per_partition: u32,
    rows_per_iteration: f64,
    values: Vec<f64>,
    adam: Adam,
    pending: BTreeMap<u64, Slots>,
    reduced_through: Option<u64>,
    duplicates: u64,
}

impl ShardReducer {
    /// The owner of coordinates `range`, starting from zeros.
    pub fn new(
        range: Range<usize>,
        partitions: u32,
        units_per_partition: u32,
        rows_per_iteration: u64,
        optimizer: AdamConfig,
    ) -> Self {
        Self {
            values: vec![0.0; range.len()],
            adam: Adam::new(optimizer, range.start, range.len()),
            range,
            partitions,
            units_per_partition,
            rows_per_iteration: rows_per_iteration as f64,
            pending: BTreeMap::new(),
            reduced_through: None,
            duplicates: 0,
        }
    }

    /// The coordinates this shard covers.
    pub fn range(&self) -> Range<usize> {
        self.range.clone()
    }

    /// Slices discarded as duplicates so far.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Takes a slice into its iteration's slot, unless that unit is already there.
    pub fn offer(&mut self, slice: GradSlice) -> Offer {
        if self.reduced_through.is_some_and(|r| slice.iteration <= r) {
            self.duplicates += 1;
            return Offer::Duplicate;
        }
        let units = (self.partitions * self.units_per_partition) as usize;
        let slots = self
            .pending
            .entry(slice.iteration)
            .or_insert_with(|| Slots {
                grads: vec![None; units],
                filled: 0,
            });
        let index = (slice.partition * self.units_per_partition + slice.unit) as usize;
        match &mut slots.grads[index] {
            Some(_) => {
                self.duplicates += 1;
                Offer::Duplicate
            }
            slot @ None => {
                *slot = Some((slice.values, slice.loss_sum));
                slots.filled += 1;
                Offer::Accepted
            }
        }
    }

    /// Whether every unit of `iteration` has arrived.
    pub fn is_complete(&self, iteration: u64) -> bool {
        self.pending
            .get(&iteration)
            .is_some_and(|s| s.filled == s.grads.len())
    }

    /// Reduces `iteration` in partition order and steps the optimiser, if every
    /// unit has arrived; iterations must be reduced in order.
    pub fn try_reduce(&mut self, iteration: u64) -> Option<Reduced> {
        if !self.is_complete(iteration) {
            return None;
        }
        debug_assert_eq!(
            self.reduced_through.map_or(0, |r| r + 1),
            iteration,
            "iterations are reduced in order"
        );
        let slots = self.pending.remove(&iteration)?;
        let mut total = vec![0.0; self.values.len()];
        let mut loss_sum = 0.0;
        let mut grads = slots.grads.into_iter();
        for _ in 0..self.partitions {
            let mut partial = vec![0.0; self.values.len()];
            let mut partial_loss = 0.0;
            for _ in 0..self.units_per_partition {
                let (g, loss) = grads.next().flatten()?;
                for (acc, x) in partial.iter_mut().zip(&g) {
                    *acc += x;
                }
                partial_loss += loss;
            }
            for (acc, x) in total.iter_mut().zip(&partial) {
                *acc += x;
            }
            loss_sum += partial_loss;
        }
        self.adam
            .step(&mut self.values, &total, self.rows_per_iteration);
        self.reduced_through = Some(iteration);
        Some(Reduced {
            values: self.values.clone(),
            loss_sum,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> AdamConfig {
        AdamConfig {
            learning_rate: 0.1,
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            l2: 0.0,
        }
    }

    fn slice(iteration: u64, partition: u32, unit: u32, values: Vec<f64>) -> GradSlice {
        GradSlice {
            owner: 0,
            iteration,
            partition,
            unit,
            executor: 0,
            rows: 1,
            loss_sum: values[0],
            values,
        }
    }

    /// Values chosen so that float addition order matters: 1e16 + 1 - 1e16.
    fn grads() -> Vec<(u32, u32, Vec<f64>)> {
        vec![
            (0, 0, vec![1e16, 0.1]),
            (0, 1, vec![1.0, 0.2]),
            (1, 0, vec![-1e16, 0.3]),
            (1, 1, vec![1.0, 1e-17]),
        ]
    }

    #[test]
    fn arrival_order_does_not_change_the_bits() {
        let mut first: Option<Reduced> = None;
        let orders: [[usize; 4]; 4] = [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1], [1, 3, 0, 2]];
        for order in orders {
            let mut r = ShardReducer::new(0..2, 2, 2, 4, config());
            for &i in &order {
                let (p, u, g) = grads()[i].clone();
                assert!(r.try_reduce(0).is_none());
                assert_eq!(r.offer(slice(0, p, u, g)), Offer::Accepted);
            }
            let out = r.try_reduce(0).expect("complete");
            match &first {
                None => first = Some(out),
                Some(f) => {
                    assert_eq!(f.values[0].to_bits(), out.values[0].to_bits());
                    assert_eq!(f.values[1].to_bits(), out.values[1].to_bits());
                    assert_eq!(f.loss_sum.to_bits(), out.loss_sum.to_bits());
                }
            }
        }
    }

    #[test]
    fn duplicates_are_counted_once() {
        let mut r = ShardReducer::new(0..2, 2, 2, 4, config());
        for (p, u, g) in grads() {
            assert_eq!(r.offer(slice(0, p, u, g.clone())), Offer::Accepted);
            assert_eq!(r.offer(slice(0, p, u, g)), Offer::Duplicate);
        }
        let out = r.try_reduce(0).expect("complete");
        // (1e16 + 1) + (-1e16 + 1) in partition order: the 1 of partition 0 is lost
        // to rounding, the 1 of partition 1 survives.
        assert_eq!(out.loss_sum, 1e16 + 1.0 + (-1e16 + 1.0));
        assert_eq!(r.offer(slice(0, 0, 0, vec![5.0, 5.0])), Offer::Duplicate);
        assert_eq!(r.duplicates(), 5);
    }

    #[test]
    fn incomplete_iteration_is_not_reduced() {
        let mut r = ShardReducer::new(0..2, 2, 2, 4, config());
        for (p, u, g) in grads().into_iter().take(3) {
            r.offer(slice(0, p, u, g));
        }
        assert!(r.try_reduce(0).is_none());
    }
}
