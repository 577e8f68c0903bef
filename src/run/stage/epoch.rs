//! What a stage worker holds of one iteration: its replica's micro-batches
//! in order, the passes its schedule still has to run, the forwards kept
//! for their backwards, and each unit's gradient folded micro-batch by
//! micro-batch.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use timely::dataflow::operators::Capability;

use crate::data::UnitRows;
use crate::ops::OpKind;
use crate::pipeline::Pass;
use crate::run::messages::StageOp;
use crate::trace::UnitRecord;
use crate::workload::staged::StageForward;
use crate::workload::Update;

/// A stage worker's capabilities at one iteration.
pub struct StageCaps {
    /// Gradient slices, to the shard owners.
    pub grads: Capability<u64>,
    /// Progress, to worker 0.
    pub progress: Capability<u64>,
    /// Activations and their gradients, to the neighbour stages.
    pub traffic: Capability<u64>,
}

impl StageCaps {
    /// The same capabilities at `t` (not before them).
    pub fn delayed(&self, t: u64) -> Self {
        Self {
            grads: self.grads.delayed(&t),
            progress: self.progress.delayed(&t),
            traffic: self.traffic.delayed(&t),
        }
    }
}

/// One micro-batch of the replica's iteration.
#[derive(Debug, Clone, PartialEq)]
pub struct MicroBatch {
    /// Index of its unit in the iteration's units.
    pub unit: usize,
    /// Its rows.
    pub rows: Vec<u32>,
    /// Whether it is its unit's last.
    pub closes_unit: bool,
}

/// The micro-batches of `units`, in order: each unit's rows cut into
/// `size` rows at a time (0: the unit whole).
pub fn micro_batches(units: &[UnitRows], size: usize) -> Vec<MicroBatch> {
    let mut out = Vec::new();
    for (u, unit) in units.iter().enumerate() {
        let step = if size == 0 {
            unit.rows.len().max(1)
        } else {
            size
        };
        let chunks: Vec<&[u32]> = unit.rows.chunks(step).collect();
        let last = chunks.len().saturating_sub(1);
        for (i, chunk) in chunks.into_iter().enumerate() {
            out.push(MicroBatch {
                unit: u,
                rows: chunk.to_vec(),
                closes_unit: i == last,
            });
        }
    }
    out
}

/// A unit's running sums on this stage.
pub struct UnitFold {
    /// The stage's coordinates' gradient sum (from zero, in micro-batch
    /// order, as [`crate::workload::MicroBatches`] folds).
    pub grad: Update,
    /// The loss sum (known on the first stage, from the gradients' messages,
    /// and on the last).
    pub loss_sum: f64,
    /// Rows folded in.
    pub rows: u32,
    /// Micro-batches folded in.
    pub micro: u32,
    /// When its first pass here began, job clock.
    pub start_us: u64,
    /// Real compute of its passes here, µs.
    pub compute_us: u64,
    /// Time the injection or pacing added, µs.
    pub delay_us: u64,
    /// The largest slowdown its passes met.
    pub slowdown: f64,
}

impl UnitFold {
    /// Nothing folded, from `start_us`.
    pub fn new(start_us: u64) -> Self {
        Self {
            grad: Update::zero(),
            loss_sum: 0.0,
            rows: 0,
            micro: 0,
            start_us,
            compute_us: 0,
            delay_us: 0,
            slowdown: 1.0,
        }
    }
}

/// One iteration on one stage worker.
pub struct StageEpoch {
    /// The iteration.
    pub iteration: u64,
    /// The layers this stage worker holds in it.
    pub layers: std::ops::Range<usize>,
    /// Their coordinates.
    pub coords: std::ops::Range<usize>,
    /// Its capabilities.
    pub caps: StageCaps,
    /// The parameters it computes with (the whole vector; this stage's
    /// coordinates are version `iteration`'s).
    pub params: Arc<Vec<f64>>,
    /// The replica's units, in order.
    pub units: Vec<UnitRows>,
    /// Their micro-batches, in order.
    pub micro: Vec<MicroBatch>,
    /// The passes left, in the schedule's order.
    pub passes: VecDeque<Pass>,
    /// Forwards kept for their backwards, by micro-batch.
    pub tapes: BTreeMap<u32, StageForward>,
    /// Bytes of the activations at the stage's boundaries (its input and
    /// its output) each kept forward holds, by micro-batch.
    pub held: BTreeMap<u32, u64>,
    /// The last stage's loss sums, by micro-batch, until their backward.
    pub losses: BTreeMap<u32, f64>,
    /// Each unit's running sums, once its first pass here began.
    pub folds: Vec<Option<UnitFold>>,
    /// Unit rows for the sink.
    pub records: Vec<UnitRecord>,
    /// When its parameters were ready, job clock.
    pub ready_us: u64,
    /// When its last pass ended (delays included), job clock.
    pub last_end_us: u64,
    /// Real compute of its passes, µs.
    pub compute_us: u64,
    /// Time the injection or pacing added, µs.
    pub delay_us: u64,
    /// The largest slowdown its passes met.
    pub max_slowdown: f64,
    /// Bytes sent: gradient slices, activations and their gradients.
    pub bytes_sent: u64,
    /// Activations this stage keeps at most at once, and their bytes.
    pub kept: (usize, u64),
    /// Its operations so far (the operation trace's rows).
    pub ops: Vec<StageOp>,
    /// When its previous pass ended (or its parameters were ready), job
    /// clock: a receive is issued then.
    pub free_us: u64,
    /// When the pass running now began, job clock.
    pub pass_began_us: u64,
}

impl StageEpoch {
    /// Keeps micro-batch `m`'s forward until its backward, holding `bytes`
    /// at the stage's boundaries; counts the most kept at once.
    pub fn keep(&mut self, m: u32, forward: StageForward, bytes: u64) {
        self.tapes.insert(m, forward);
        self.held.insert(m, bytes);
        let now: u64 = self.held.values().sum();
        self.kept = (self.kept.0.max(self.tapes.len()), self.kept.1.max(now));
    }

    /// Records an operation of `kind` on micro-batch `micro` from
    /// `start_us` to `end_us` (job clock), as worker `worker`'s, stage
    /// `stage` of replica `replica`.
    pub fn record_op(
        &mut self,
        (worker, replica, stage): (u32, u32, u32),
        (kind, micro): (OpKind, u32),
        (start_us, end_us): (u64, u64),
    ) {
        let seq_id = self.ops.iter().filter(|o| o.kind == kind).count() as u32;
        self.ops.push(StageOp {
            iteration: self.iteration,
            replica,
            stage,
            worker,
            kind,
            seq_id,
            micro,
            start_us,
            duration_us: end_us.saturating_sub(start_us),
        });
    }

    /// Micro-batch `m`'s forward, for its backward.
    pub fn take(&mut self, m: u32) -> Option<StageForward> {
        self.held.remove(&m);
        self.tapes.remove(&m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::UnitKey;

    fn unit(partition: u32, rows: std::ops::Range<u32>) -> UnitRows {
        UnitRows {
            key: UnitKey { partition, unit: 0 },
            rows: rows.collect(),
        }
    }

    #[test]
    fn micro_batches_cut_each_unit_in_order_and_mark_its_last() {
        let units = [unit(0, 0..5), unit(1, 10..14)];
        let m = micro_batches(&units, 2);
        let rows: Vec<Vec<u32>> = m.iter().map(|b| b.rows.clone()).collect();
        assert_eq!(
            rows,
            [vec![0, 1], vec![2, 3], vec![4], vec![10, 11], vec![12, 13]]
        );
        let closes: Vec<bool> = m.iter().map(|b| b.closes_unit).collect();
        assert_eq!(closes, [false, false, true, false, true]);
        assert_eq!(
            m.iter().map(|b| b.unit).collect::<Vec<_>>(),
            [0, 0, 0, 1, 1]
        );
        // 0: each unit whole
        let whole = micro_batches(&units, 0);
        assert_eq!(whole.len(), 2);
        assert!(whole.iter().all(|b| b.closes_unit));
    }
}
