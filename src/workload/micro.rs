//! Units computed micro-batch by micro-batch: the in-order fold that keeps a
//! unit's sums the same whoever computes which of its micro-batches.

use super::{Draws, UnitGradient, Update, Workload};
use crate::data::RowSource;

/// A unit's gradient computed micro-batch by micro-batch: the gradient and
/// loss sums of `rows[..done]` (whole micro-batches, in order), each
/// micro-batch's sums added to the running sums by a left fold from zero.
///
/// The sums depend only on the rows and the micro-batch size, never on who
/// computes which micro-batch: a unit handed over between micro-batches
/// carries its running sums, so whoever finishes it adds the rest to the
/// same values. As the first of its partition's units, a unit of k
/// micro-batches of m rows has the bits of k units of m rows reduced in order
/// (the shard owners fold units the same way from zero); after another unit
/// it does not (the owners add its whole sum to the running one).
#[derive(Debug, Clone, PartialEq)]
pub struct MicroBatches {
    /// Rows per micro-batch (the last may be shorter only when the unit is
    /// not a multiple, which the job's validation refuses).
    pub size: usize,
    /// Rows of the unit already folded in.
    pub done: usize,
    /// The running sums.
    pub sums: UnitGradient,
    /// Parameters in all (a sparse sum meeting a dense one turns dense).
    pub dims: usize,
}

impl MicroBatches {
    /// Nothing folded yet, over `dims` parameters, `size` rows at a time
    /// (0: the whole unit at once).
    pub fn new(dims: usize, size: usize) -> Self {
        Self {
            size,
            done: 0,
            sums: UnitGradient {
                grad: Update::zero(),
                loss_sum: 0.0,
            },
            dims,
        }
    }

    /// The rows of the next micro-batch of `rows`, empty when all are done.
    pub fn next_rows<'r>(&self, rows: &'r [u32]) -> &'r [u32] {
        let left = &rows[self.done.min(rows.len())..];
        match self.size {
            0 => left,
            size => &left[..size.min(left.len())],
        }
    }

    /// Whether every row of `rows` is folded in.
    pub fn is_done(&self, rows: &[u32]) -> bool {
        self.done >= rows.len()
    }

    /// Computes the next micro-batch of `rows` at `params` and folds it in;
    /// returns the rows it covered (0 when the unit was done).
    pub fn step(
        &mut self,
        workload: &dyn Workload,
        draws: Draws,
        source: &dyn RowSource,
        params: &[f64],
        rows: &[u32],
    ) -> usize {
        match self.compute_next(workload, draws, source, params, rows) {
            Some((g, n)) => {
                self.fold_in(&g, n);
                n
            }
            None => 0,
        }
    }

    /// The sums of the next micro-batch of `rows` at `params` and its rows,
    /// not yet folded in (None when every row is): a unit computed as its
    /// time comes folds each in at its end ([`MicroBatches::fold_in`]).
    pub fn compute_next(
        &self,
        workload: &dyn Workload,
        draws: Draws,
        source: &dyn RowSource,
        params: &[f64],
        rows: &[u32],
    ) -> Option<(UnitGradient, usize)> {
        let batch = self.next_rows(rows);
        (!batch.is_empty()).then(|| {
            (
                workload.unit_update(draws, source, params, batch),
                batch.len(),
            )
        })
    }

    /// Folds in the sums `g` of the next micro-batch, of `rows` rows.
    pub fn fold_in(&mut self, g: &UnitGradient, rows: usize) {
        self.sums.grad.add(&g.grad, self.dims);
        self.sums.loss_sum += g.loss_sum;
        self.done += rows;
    }
}

/// The gradient and loss sums of `rows` as [`MicroBatches`] of `micro_batch`
/// rows (0: the whole unit in one call).
pub fn micro_batched_gradient(
    workload: &dyn Workload,
    draws: Draws,
    source: &dyn RowSource,
    params: &[f64],
    rows: &[u32],
    micro_batch: usize,
) -> UnitGradient {
    if micro_batch == 0 || micro_batch >= rows.len() {
        // One micro-batch: its sums are the fold's (0 + x is x for every
        // value the reduction can tell apart: it folds from zero too).
        return workload.unit_update(draws, source, params, rows);
    }
    let mut fold = MicroBatches::new(workload.param_count(), micro_batch);
    while fold.step(workload, draws, source, params, rows) > 0 {}
    fold.sums
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::data::{Dataset, SparseRows};
    use crate::workload::softmax::SoftmaxRegression;

    /// Eight rows of (bias, x) in three classes, all training rows.
    pub(crate) fn softmax() -> SoftmaxRegression {
        let xs = [-1.0, 0.2, 1.5, 0.7, -0.4, 2.2, 0.9, -1.3];
        let mut rows = SparseRows {
            offsets: vec![0],
            indices: Vec::new(),
            values: Vec::new(),
        };
        for x in xs {
            rows.indices.extend([0, 1]);
            rows.values.extend([1.0, x]);
            rows.offsets.push(rows.indices.len());
        }
        SoftmaxRegression::new(Dataset {
            rows,
            labels: vec![0.0, 1.0, 2.0, 1.0, 0.0, 2.0, 1.0, 0.0],
            train: (0..8).collect(),
            test: Vec::new(),
            feature_names: vec!["bias".into(), "x".into()],
        })
    }

    pub(crate) const PARAMS: [f64; 6] = [0.1, -0.3, 0.25, 0.5, -0.2, 0.05];

    #[test]
    fn a_unit_of_micro_batches_has_the_bits_of_as_many_units_folded_in_order() {
        let w = softmax();
        let source = w.data().source();
        let rows: Vec<u32> = (0..8).collect();
        let micro = micro_batched_gradient(&w, Draws::default(), &source, &PARAMS, &rows, 2);
        // the shard owners' fold of four units of two rows
        let mut grad = vec![0.0; 6];
        let mut loss = 0.0;
        for unit in rows.chunks(2) {
            let g = w.unit_gradient(&source, &PARAMS, unit);
            g.grad.add_into(&mut grad);
            loss += g.loss_sum;
        }
        assert_eq!(micro.grad, Update::Dense(grad));
        assert_eq!(micro.loss_sum.to_bits(), f64::to_bits(loss));
        // the same sums, not the same bits, as one call over the eight rows
        let whole = micro_batched_gradient(&w, Draws::default(), &source, &PARAMS, &rows, 0);
        assert_eq!(whole, w.unit_gradient(&source, &PARAMS, &rows));
        assert!((whole.loss_sum - micro.loss_sum).abs() < 1e-12);
    }

    #[test]
    fn a_unit_handed_over_between_micro_batches_ends_with_the_same_bits() {
        let w = softmax();
        let source = w.data().source();
        let rows: Vec<u32> = (0..8).collect();
        let mut fold = MicroBatches::new(6, 2);
        assert_eq!(fold.next_rows(&rows), &[0, 1]);
        assert_eq!(fold.step(&w, Draws::default(), &source, &PARAMS, &rows), 2);
        assert_eq!(fold.step(&w, Draws::default(), &source, &PARAMS, &rows), 2);
        // the rest goes to a peer with the running sums
        let mut peer = fold.clone();
        while peer.step(&w, Draws::default(), &source, &PARAMS, &rows) > 0 {}
        assert!(peer.is_done(&rows) && !fold.is_done(&rows));
        assert_eq!(peer.done, 8);
        assert_eq!(
            peer.sums,
            micro_batched_gradient(&w, Draws::default(), &source, &PARAMS, &rows, 2)
        );
        assert_eq!(
            peer.step(&w, Draws::default(), &source, &PARAMS, &rows),
            0,
            "nothing left"
        );
    }

    #[test]
    fn a_short_last_micro_batch_covers_the_rest() {
        let w = softmax();
        let source = w.data().source();
        let rows: Vec<u32> = (0..5).collect();
        let mut fold = MicroBatches::new(6, 2);
        let mut sizes = Vec::new();
        loop {
            match fold.step(&w, Draws::default(), &source, &PARAMS, &rows) {
                0 => break,
                n => sizes.push(n),
            }
        }
        assert_eq!(sizes, [2, 2, 1]);
    }
}
