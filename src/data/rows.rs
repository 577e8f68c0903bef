//! Rows as they travel and as a worker keeps them.
//!
//! A worker computes from the rows it holds, not from the loaded file: a
//! [`DataRow`] is one training row on the wire (a differential-dataflow record,
//! so its floats travel as bits and it is `Ord`), a [`LocalRows`] is the store a
//! worker builds from the rows delivered to it, and [`RowSource`] is what the
//! gradient reads, whichever of the two (or the whole dataset) it comes from.

use serde::{Deserialize, Serialize};

use super::features::SparseRows;

/// Read access to labelled sparse rows by their global row index.
pub trait RowSource {
    /// The (index, value) pairs of row `r`.
    fn row(&self, r: u32) -> (&[u32], &[f64]);
    /// The label of row `r`.
    fn label(&self, r: u32) -> f64;
}

/// Every row of a featurised file with its labels.
#[derive(Debug, Clone, Copy)]
pub struct LabelledRows<'a> {
    /// Feature rows.
    pub features: &'a SparseRows,
    /// One label per row.
    pub labels: &'a [f64],
}

impl RowSource for LabelledRows<'_> {
    #[inline]
    fn row(&self, r: u32) -> (&[u32], &[f64]) {
        self.features.row(r as usize)
    }

    #[inline]
    fn label(&self, r: u32) -> f64 {
        self.labels[r as usize]
    }
}

/// One training row on the wire.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DataRow {
    /// Global row index.
    pub row: u32,
    /// The label's bits.
    pub label_bits: u64,
    /// Feature indices.
    pub indices: Vec<u32>,
    /// The values' bits, one per index.
    pub value_bits: Vec<u64>,
}

impl DataRow {
    /// Row `r` of `source`, bit for bit.
    pub fn from_source(source: &impl RowSource, r: u32) -> Self {
        let (indices, values) = source.row(r);
        Self {
            row: r,
            label_bits: source.label(r).to_bits(),
            indices: indices.to_vec(),
            value_bits: values.iter().map(|v| v.to_bits()).collect(),
        }
    }

    /// Bytes the row occupies on the wire: index, label, and 12 bytes per
    /// stored (index, value) pair.
    pub fn wire_bytes(&self) -> u64 {
        12 + 12 * self.indices.len() as u64
    }
}

/// Consecutive rows of one partition travelling as one record of the placement
/// collection (rows per record: [`RowBlock::ROWS`]), so that loading a large
/// dataset costs a few hundred records rather than a record per row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RowBlock {
    /// The rows, ascending.
    pub rows: Vec<DataRow>,
}

impl RowBlock {
    /// Rows per block.
    pub const ROWS: usize = 256;

    /// Bytes the block occupies on the wire.
    pub fn wire_bytes(&self) -> u64 {
        self.rows.iter().map(DataRow::wire_bytes).sum()
    }
}

/// How a [`LocalRows`] finds a global row.
#[derive(Debug, Clone)]
enum Slots {
    /// One slot per global row (`u32::MAX` = absent): a worker's store.
    Dense(Vec<u32>),
    /// Sorted (global row, slot) pairs: a handful of rows shipped with a message.
    Sparse(Vec<(u32, u32)>),
}

const ABSENT: u32 = u32::MAX;

/// Rows held locally, in compressed-row form, addressed by global row index.
#[derive(Debug, Clone)]
pub struct LocalRows {
    slots: Slots,
    offsets: Vec<usize>,
    indices: Vec<u32>,
    values: Vec<f64>,
    labels: Vec<f64>,
    held: usize,
}

impl LocalRows {
    /// An empty store for a file of `total_rows` rows.
    pub fn with_capacity_for(total_rows: usize) -> Self {
        Self::empty(Slots::Dense(vec![ABSENT; total_rows]))
    }

    /// The given rows (a message's payload), looked up by binary search.
    pub fn from_rows(rows: &[DataRow]) -> Self {
        let mut local = Self::empty(Slots::Sparse(Vec::with_capacity(rows.len())));
        for row in rows {
            local.insert(row);
        }
        if let Slots::Sparse(pairs) = &mut local.slots {
            pairs.sort_unstable();
        }
        local
    }

    fn empty(slots: Slots) -> Self {
        Self {
            slots,
            offsets: vec![0],
            indices: Vec::new(),
            values: Vec::new(),
            labels: Vec::new(),
            held: 0,
        }
    }

    fn slot(&self, r: u32) -> Option<usize> {
        let slot = match &self.slots {
            Slots::Dense(slots) => *slots.get(r as usize)?,
            Slots::Sparse(pairs) => {
                let i = pairs.binary_search_by_key(&r, |&(row, _)| row).ok()?;
                pairs[i].1
            }
        };
        (slot != ABSENT).then_some(slot as usize)
    }

    /// Whether row `r` is held.
    pub fn contains(&self, r: u32) -> bool {
        self.slot(r).is_some()
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.held
    }

    /// Whether no row is held.
    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// Adds a row; a row already held is left as it is. Returns whether it was new.
    pub fn insert(&mut self, row: &DataRow) -> bool {
        if self.contains(row.row) {
            return false;
        }
        let slot = (self.offsets.len() - 1) as u32;
        match &mut self.slots {
            Slots::Dense(slots) => {
                if slots.len() <= row.row as usize {
                    slots.resize(row.row as usize + 1, ABSENT);
                }
                slots[row.row as usize] = slot;
            }
            // `from_rows` sorts once all are in.
            Slots::Sparse(pairs) => pairs.push((row.row, slot)),
        }
        self.indices.extend_from_slice(&row.indices);
        self.values
            .extend(row.value_bits.iter().map(|&b| f64::from_bits(b)));
        self.offsets.push(self.indices.len());
        self.labels.push(f64::from_bits(row.label_bits));
        self.held += 1;
        true
    }

    /// Forgets a row (its storage is not reclaimed). Returns whether it was held.
    pub fn remove(&mut self, r: u32) -> bool {
        let held = match &mut self.slots {
            Slots::Dense(slots) => slots
                .get_mut(r as usize)
                .map(|s| std::mem::replace(s, ABSENT) != ABSENT),
            Slots::Sparse(pairs) => pairs
                .binary_search_by_key(&r, |&(row, _)| row)
                .ok()
                .map(|i| std::mem::replace(&mut pairs[i].1, ABSENT) != ABSENT),
        };
        let held = held.unwrap_or(false);
        if held {
            self.held -= 1;
        }
        held
    }
}

impl RowSource for LocalRows {
    /// # Panics
    /// If the row is not held: callers compute only rows they hold.
    #[inline]
    fn row(&self, r: u32) -> (&[u32], &[f64]) {
        let s = self.slot(r).expect("row held locally");
        let range = self.offsets[s]..self.offsets[s + 1];
        (&self.indices[range.clone()], &self.values[range])
    }

    #[inline]
    fn label(&self, r: u32) -> f64 {
        self.labels[self.slot(r).expect("row held locally")]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> (SparseRows, Vec<f64>) {
        let features = SparseRows {
            offsets: vec![0, 2, 3, 5],
            indices: vec![0, 3, 0, 0, 1],
            values: vec![1.0, -0.1, 1.0, 1.0, f64::MIN_POSITIVE],
        };
        (features, vec![1.0, 0.0, 1.0])
    }

    #[test]
    fn rows_round_trip_bit_for_bit_through_both_stores() {
        let (features, labels) = source();
        let all = LabelledRows {
            features: &features,
            labels: &labels,
        };
        let wire: Vec<DataRow> = (0..3).map(|r| DataRow::from_source(&all, r)).collect();
        let mut dense = LocalRows::with_capacity_for(3);
        for row in wire.iter().rev() {
            assert!(dense.insert(row));
        }
        let sparse = LocalRows::from_rows(&[wire[2].clone(), wire[0].clone()]);
        for r in 0..3 {
            assert_eq!(dense.row(r), all.row(r));
            assert_eq!(dense.label(r).to_bits(), all.label(r).to_bits());
        }
        assert_eq!(sparse.row(2), all.row(2));
        assert_eq!(sparse.row(0), all.row(0));
        assert!(!sparse.contains(1));
        assert_eq!((dense.len(), sparse.len()), (3, 2));
    }

    #[test]
    fn insert_is_idempotent_and_remove_forgets() {
        let (features, labels) = source();
        let all = LabelledRows {
            features: &features,
            labels: &labels,
        };
        let row = DataRow::from_source(&all, 1);
        let mut store = LocalRows::with_capacity_for(1);
        assert!(store.insert(&row));
        assert!(!store.insert(&row));
        assert_eq!(store.len(), 1);
        assert!(store.remove(1));
        assert!(!store.remove(1));
        assert!(!store.contains(1) && store.is_empty());
        assert!(store.insert(&row), "a removed row can come back");
        assert_eq!(store.row(1), all.row(1));
        assert_eq!(row.wire_bytes(), 12 + 12);
    }
}
