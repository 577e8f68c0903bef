//! A worker reads its own writes. Under a policy that reads stale parameters
//! (SSP), a worker may begin iteration t on a version that lacks the units
//! it computed itself in the iterations before. Where units write their
//! values ([`OptimizerKind::Set`]: LDA's tokens' topics), those values are
//! the units' own state, and a document swept from a version without its
//! last sweep would start again from the sweep before. So the worker lays
//! the writes of its own units that the version lacks over the version it
//! begins with, as SSP's read-my-writes guarantee has it (Ho et al., 2013).
//! A unit a peer computed (a FlexRR helper) is not here: its writes reach
//! this worker with the version that has them.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use crate::run::messages::GradSlice;
use crate::spec::JobPlan;
use crate::workload::{write_into, OptimizerKind};

/// The writes of this worker's units that the newest version may lack.
#[derive(Debug, Default)]
pub(super) struct OwnWrites {
    /// Iteration → the slices of the units computed here.
    writes: BTreeMap<u64, Vec<GradSlice>>,
}

impl OwnWrites {
    /// Kept only where units write values and reads may be stale.
    pub(super) fn for_plan(plan: &JobPlan) -> Option<Self> {
        (plan.optimizer.kind == OptimizerKind::Set && plan.policy.slack() > 0).then(Self::default)
    }

    /// Keeps the slices of a unit of `iteration` computed here.
    pub(super) fn keep(&mut self, iteration: u64, slices: &[GradSlice]) {
        self.writes
            .entry(iteration)
            .or_default()
            .extend(slices.iter().cloned());
    }

    /// `params`, of `version` (every iteration before it reduced), with the
    /// writes of the iterations from `version` on laid over it, in
    /// iteration order; `shards` are the owners' coordinate ranges. Forgets
    /// the writes the version has.
    pub(super) fn over(
        &mut self,
        version: u64,
        params: Arc<Vec<f64>>,
        shards: &[Range<usize>],
    ) -> Arc<Vec<f64>> {
        self.writes = self.writes.split_off(&version);
        if self.writes.is_empty() {
            return params;
        }
        let mut values = (*params).clone();
        for slice in self.writes.values().flatten() {
            let range = shards[slice.owner as usize].clone();
            let sum = slice.update.to_dense(range.len());
            write_into(&mut values[range], &sum);
        }
        Arc::new(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{written, Update};

    fn slice(owner: u32, iteration: u64, at: u32, value: f64) -> GradSlice {
        GradSlice {
            owner,
            iteration,
            partition: 0,
            unit: 0,
            executor: 0,
            rows: 1,
            loss_sum: 0.0,
            update: Update::from_contributions(vec![(at, written(value))]),
            substitute: false,
            stop_at: None,
            sent_us: 0,
            span: None,
            piece: None,
        }
    }

    #[test]
    fn the_writes_a_version_lacks_are_laid_over_it_in_order() {
        let shards = [0..2, 2..4];
        let mut own = OwnWrites::default();
        own.keep(3, &[slice(0, 3, 1, 5.0), slice(1, 3, 0, 0.0)]);
        own.keep(4, &[slice(1, 4, 0, 2.0)]);
        let version = Arc::new(vec![9.0; 4]);
        // version 3 lacks iterations 3 and 4: the later write wins
        let read = own.over(3, Arc::clone(&version), &shards);
        assert_eq!(*read, vec![9.0, 5.0, 2.0, 9.0]);
        // version 4 has iteration 3: only iteration 4's write is laid over
        let read = own.over(4, Arc::clone(&version), &shards);
        assert_eq!(*read, vec![9.0, 9.0, 2.0, 9.0]);
        // version 5 has them all: the version itself, not a copy
        let read = own.over(5, Arc::clone(&version), &shards);
        assert!(Arc::ptr_eq(&read, &version));
        assert!(own.writes.is_empty());
    }
}
