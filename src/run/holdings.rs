//! What one worker holds: the rows delivered to it by the placement collection,
//! and what it knows of who else holds its own partitions.
//!
//! The placement (`partition → holders`) is a differential collection joined
//! with the rows (see [`super::placement::placement_flow`]); each worker receives
//! the diffs of the rows it holds and keeps them in a [`LocalRows`] store. A
//! worker computes only from that store, or from rows shipped with a message.
//!
//! A holder is *settled* once the frontier of the deliveries has passed the time
//! it was added: timely's frontier is global, so by then every worker has
//! consumed its rows. A worker that hands units to a settled holder sends their
//! keys only; to anybody else it ships the unit's rows too.

use std::collections::{BTreeMap, BTreeSet};

use crate::data::{DataRow, LocalRows, RowBlock};

/// One change to the placement: `((partition, worker), time, diff)`.
pub type PlacementUpdate = ((u32, u32), u64, isize);

/// A block of a partition's rows, as put into the placement collection:
/// `((partition, block), time, diff)`.
pub type RowUpdate = ((u32, RowBlock), u64, isize);

/// A block of rows delivered to a holder: `((partition, (holder, block)), time, diff)`.
pub type Delivery = ((u32, (u32, RowBlock)), u64, isize);

/// A worker's rows and its view of who holds its partitions.
#[derive(Debug)]
pub struct Holdings {
    store: LocalRows,
    /// Rows held per partition.
    counts: BTreeMap<u32, usize>,
    /// Row count of every partition.
    sizes: Vec<usize>,
    /// Holders of this worker's partitions: (partition, holder) → (time, multiplicity).
    view: BTreeMap<(u32, u32), (u64, isize)>,
    /// Every delivery and placement update earlier than this has been consumed.
    settled_before: u64,
    /// Partitions this worker asked to hold.
    requested: BTreeSet<u32>,
    /// Bytes of rows delivered after the initial placement, not yet accounted.
    moved_bytes: u64,
}

impl Holdings {
    /// Nothing held yet, in a file of `total_rows` rows cut into partitions of
    /// `sizes` rows.
    pub fn new(total_rows: usize, sizes: Vec<usize>) -> Self {
        Self {
            store: LocalRows::with_capacity_for(total_rows),
            counts: BTreeMap::new(),
            sizes,
            view: BTreeMap::new(),
            settled_before: 0,
            requested: BTreeSet::new(),
            moved_bytes: 0,
        }
    }

    /// Applies a delivered block of rows: time 0 is the initial load, later
    /// times were moved.
    pub fn on_delivery(&mut self, partition: u32, block: &RowBlock, time: u64, diff: isize) {
        for row in &block.rows {
            self.on_row(partition, row, time, diff);
        }
    }

    fn on_row(&mut self, partition: u32, row: &DataRow, time: u64, diff: isize) {
        let changed = if diff > 0 {
            self.store.insert(row)
        } else {
            self.store.remove(row.row)
        };
        if changed {
            let count = self.counts.entry(partition).or_default();
            if diff > 0 {
                *count += 1;
                if time > 0 {
                    self.moved_bytes += row.wire_bytes();
                }
            } else {
                *count -= 1;
            }
        }
    }

    /// Applies a change to the placement of one of this worker's partitions.
    pub fn on_placement(&mut self, partition: u32, holder: u32, time: u64, diff: isize) {
        let entry = self.view.entry((partition, holder)).or_insert((time, 0));
        entry.0 = entry.0.max(time);
        entry.1 += diff;
        if entry.1 <= 0 {
            self.view.remove(&(partition, holder));
        }
    }

    /// The settled holders of this worker's partitions, as `(partition,
    /// holder)` pairs in order (for a checkpoint).
    pub fn placement(&self) -> Vec<(u32, u32)> {
        self.view
            .iter()
            .filter(|(_, &(time, _))| time < self.settled_before)
            .map(|(&key, _)| key)
            .collect()
    }

    /// Deliveries and placement updates before `time` are complete.
    pub fn settle_before(&mut self, time: u64) {
        self.settled_before = self.settled_before.max(time);
    }

    /// Whether the initial placement has arrived: computing may begin.
    pub fn ready(&self) -> bool {
        self.settled_before > 0
    }

    /// Whether every row of `partition` is held here.
    pub fn holds(&self, partition: u32) -> bool {
        let size = self.sizes.get(partition as usize).copied().unwrap_or(0);
        self.counts.get(&partition).copied().unwrap_or(0) == size && size > 0
    }

    /// Whether `holder` holds `partition` (one of this worker's) and has
    /// certainly consumed its rows.
    pub fn settled_holder(&self, partition: u32, holder: u32) -> bool {
        self.view
            .get(&(partition, holder))
            .is_some_and(|&(time, _)| time < self.settled_before)
    }

    /// Whether to ask for `partition`'s rows: not held and not asked for yet.
    /// Marks it asked for.
    pub fn request(&mut self, partition: u32) -> bool {
        !self.holds(partition) && self.requested.insert(partition)
    }

    /// Bytes of rows moved here since the last call.
    pub fn take_moved_bytes(&mut self) -> u64 {
        std::mem::take(&mut self.moved_bytes)
    }

    /// The rows held.
    pub fn store(&self) -> &LocalRows {
        &self.store
    }

    /// The held rows `rows`, for shipping to a worker that does not hold them.
    pub fn ship(&self, rows: &[u32]) -> Vec<DataRow> {
        rows.iter()
            .map(|&r| DataRow::from_source(&self.store, r))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(r: u32) -> DataRow {
        DataRow {
            row: r,
            label_bits: 1.0f64.to_bits(),
            indices: vec![0, r],
            value_bits: vec![1.0f64.to_bits(), 0.5f64.to_bits()],
        }
    }

    #[test]
    fn a_partition_is_held_once_all_its_rows_arrived() {
        let mut h = Holdings::new(10, vec![2, 3]);
        assert!(!h.ready() && !h.holds(0));
        h.on_row(0, &row(0), 0, 1);
        assert!(!h.holds(0));
        h.on_row(0, &row(5), 0, 1);
        h.on_row(0, &row(5), 0, 1); // a duplicate changes nothing
        assert!(h.holds(0) && !h.holds(1));
        assert_eq!(h.take_moved_bytes(), 0, "the initial load is not a move");
        h.on_delivery(1, &RowBlock { rows: vec![row(1)] }, 3, 1);
        assert_eq!(h.take_moved_bytes(), 36);
        assert_eq!(h.take_moved_bytes(), 0);
        h.on_row(0, &row(5), 4, -1);
        assert!(!h.holds(0), "a retracted row is no longer held");
        assert!(!h.store().contains(5));
    }

    #[test]
    fn holders_settle_when_the_frontier_passes_their_time() {
        let mut h = Holdings::new(4, vec![1]);
        h.on_placement(0, 2, 0, 1);
        h.on_placement(0, 3, 5, 1);
        assert!(!h.settled_holder(0, 2));
        h.settle_before(1);
        assert!(h.ready());
        assert!(h.settled_holder(0, 2) && !h.settled_holder(0, 3));
        h.settle_before(6);
        assert!(h.settled_holder(0, 3));
        h.on_placement(0, 3, 7, -1);
        assert!(!h.settled_holder(0, 3), "a removed holder is gone");
        assert!(!h.settled_holder(0, 1), "never a holder");
    }

    #[test]
    fn a_partition_is_requested_once_and_never_when_held() {
        let mut h = Holdings::new(4, vec![1, 1]);
        h.on_row(0, &row(0), 0, 1);
        assert!(!h.request(0), "already held");
        assert!(h.request(1));
        assert!(!h.request(1), "asked for once");
    }
}
