//! A unit computed micro-batch by micro-batch as its time comes, so that
//! the rest of it can be handed over between micro-batches with the running
//! sums, and only the micro-batch in flight is computed in vain.

use std::time::{Duration, Instant};

use crate::data::RowSource;
use crate::run::messages::Carry;
use crate::workload::{Draws, MicroBatches, UnitGradient, Workload};

/// What computing a micro-batch needs: the workload, the unit's draws, the
/// rows' source and the iteration's parameters.
pub(super) type Work<'a> = (&'a dyn Workload, Draws, &'a dyn RowSource, &'a [f64]);

/// A unit's micro-batches on their way: the sums of those that ended and the
/// one in flight (computed when it began, folded in when it ends).
pub(super) struct Lazy {
    fold: MicroBatches,
    /// The micro-batch in flight: its sums, its rows and what computing it
    /// took.
    pending: Option<(UnitGradient, usize, Duration)>,
    /// Rows a peer folded in before it handed the rest over.
    first_rows: usize,
}

impl Lazy {
    /// Begins a unit of `rows` in micro-batches of `micro` rows, from the
    /// running sums `carry` of its first rows (a rest), computing its first
    /// micro-batch here; returns what that took.
    pub(super) fn begin(
        work: Work<'_>,
        rows: &[u32],
        micro: usize,
        carry: Option<Carry>,
    ) -> (Lazy, Duration) {
        let mut fold = MicroBatches::new(work.0.param_count(), micro);
        if let Some(c) = carry {
            fold.done = c.done_rows as usize;
            fold.sums = UnitGradient {
                grad: c.grad,
                loss_sum: c.loss_sum,
            };
        }
        let first_rows = fold.done;
        let mut lazy = Lazy {
            fold,
            pending: None,
            first_rows,
        };
        let took = lazy.compute(work, rows);
        (lazy, took)
    }

    /// Micro-batches ended here.
    pub(super) fn folded(&self) -> u32 {
        ((self.fold.done - self.first_rows) / self.fold.size.max(1)) as u32
    }

    /// Computes the next micro-batch, if one is left; returns what it took.
    fn compute(&mut self, (workload, draws, source, params): Work<'_>, rows: &[u32]) -> Duration {
        let started = Instant::now();
        self.pending = self
            .fold
            .compute_next(workload, draws, source, params, rows)
            .map(|(g, n)| (g, n, started.elapsed()));
        self.pending.as_ref().map_or(Duration::ZERO, |p| p.2)
    }

    /// Ends micro-batches until `due` have ended here (or all have), each
    /// next one computed as the one before ends; returns the compute spent.
    pub(super) fn advance(&mut self, work: Work<'_>, rows: &[u32], due: u32) -> Duration {
        let mut spent = Duration::ZERO;
        while self.folded() < due {
            let Some((g, n, _)) = self.pending.take() else {
                break;
            };
            self.fold.fold_in(&g, n);
            spent += self.compute(work, rows);
        }
        spent
    }

    /// Ends every micro-batch: the unit's sums, and the compute spent on the
    /// micro-batches not computed yet.
    pub(super) fn finish(mut self, work: Work<'_>, rows: &[u32]) -> (UnitGradient, Duration) {
        let spent = self.advance(work, rows, u32::MAX);
        (self.fold.sums, spent)
    }

    /// Stops here: the running sums of the micro-batches ended (the rest's
    /// carry), and what the micro-batch in flight took (in vain).
    pub(super) fn stop(self) -> (Carry, Duration) {
        let lost = self.pending.map_or(Duration::ZERO, |p| p.2);
        let carry = Carry {
            done_rows: self.fold.done as u32,
            grad: self.fold.sums.grad,
            loss_sum: self.fold.sums.loss_sum,
        };
        (carry, lost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::micro::tests::{softmax, PARAMS};
    use crate::workload::micro_batched_gradient;

    /// Eight rows in micro-batches of 2, stopped after k of them and
    /// finished from the carry (as a peer does with a rest): the sums of
    /// the unit computed whole, for every k.
    #[test]
    fn a_rest_finished_from_its_carry_has_the_whole_units_sums() {
        let w = softmax();
        let source = w.data().source();
        let rows: Vec<u32> = (0..8).collect();
        let whole = micro_batched_gradient(&w, Draws::default(), &source, &PARAMS, &rows, 2);
        let work: Work<'_> = (&w, Draws::default(), &source, &PARAMS);
        for k in 1..4 {
            let (mut lazy, _) = Lazy::begin(work, &rows, 2, None);
            lazy.advance(work, &rows, k);
            assert_eq!(lazy.folded(), k);
            let (carry, _) = lazy.stop();
            assert_eq!(carry.done_rows, 2 * k);
            let (rest, _) = Lazy::begin(work, &rows, 2, Some(carry));
            assert_eq!(rest.folded(), 0, "the rest counts its own micro-batches");
            assert_eq!(rest.finish(work, &rows).0, whole, "stopped after {k}");
        }
        let (lazy, _) = Lazy::begin(work, &rows, 2, None);
        assert_eq!(lazy.finish(work, &rows).0, whole);
    }
}
