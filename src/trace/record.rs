//! The rows a run writes: one per unit, one per (iteration, worker), one per iteration.
//!
//! All times are µs since the job started (`*_us`, `u64`). Columns whose name starts
//! with `gt_` are the injected ground truth: they exist for evaluation only and no
//! predictor may read them.

use serde::{Deserialize, Serialize};

use crate::detect::{detect_laggard, WorkerTiming, DEFAULT_LAGGARD_THRESHOLD};

/// What happened to a unit in its iteration (the policy's decision as executed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum UnitAction {
    /// Computed by the worker the assignment gave it to; counted in the sum.
    Assigned,
    /// Given by its owner to a peer during the iteration (rapid reassignment)
    /// and computed there; counted in the sum.
    Reassigned,
    /// A speculative copy computed by a peer while the owner kept the unit;
    /// whichever copy reaches the shard owners first is counted, the other is
    /// discarded.
    Clone,
    /// The micro-batches a worker computed of a unit before it handed the
    /// rest to a peer (with their running sums): not counted on its own —
    /// the record of the rest, `Reassigned` on the peer, counts the unit.
    Split,
    /// The last micro-batches of a peer's unit in flight, handed over while
    /// the peer went on with the others (each micro-batch's sums sent as
    /// they are, folded after the peer's at the shard owners): not counted
    /// on its own — the peer's record counts the unit, with its rows.
    Tail,
}

impl UnitAction {
    /// The name written to the trace.
    pub fn as_str(self) -> &'static str {
        match self {
            UnitAction::Assigned => "assigned",
            UnitAction::Reassigned => "reassigned",
            UnitAction::Clone => "clone",
            UnitAction::Split => "split",
            UnitAction::Tail => "tail",
        }
    }

    /// Whether the record is of the unit's original computation, not of a
    /// copy or of the first part of a unit whose rest a peer computed: a
    /// unit has at most one (none when a copy came first).
    pub fn is_original(self) -> bool {
        matches!(self, UnitAction::Assigned | UnitAction::Reassigned)
    }
}

/// One row per (iteration, executing worker, unit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitRecord {
    /// Iteration (= timely epoch) the unit belongs to.
    pub iteration: u64,
    /// Global index of the worker that executed the unit.
    pub worker: u32,
    /// Process (timely cluster index) of that worker.
    pub process: u32,
    /// Data partition the unit's rows come from.
    pub partition: u32,
    /// Index of the unit within its partition for this iteration.
    pub unit: u32,
    /// Worker the unit was assigned to by the data placement.
    pub owner: u32,
    /// Worker that computed it (equals `worker`; kept explicit for replay).
    pub executor: u32,
    /// When the computation of the unit started.
    pub start_us: u64,
    /// When the unit's gradient was handed to the exchange.
    pub end_us: u64,
    /// Time spent computing the real gradient (excludes injected delay and pacing).
    pub compute_us: u64,
    /// Idle time of the worker just before this unit (since the parameters were
    /// ready or since its previous unit ended).
    pub wait_us: u64,
    /// Rows in the unit.
    pub rows: u32,
    /// Bytes of gradient sent to shard owners for this unit.
    pub bytes_sent: u64,
    /// What the policy did with the unit.
    pub action: UnitAction,
    /// Ground truth: slowdown factor injected for this unit (1.0 = none).
    pub gt_slowdown: f64,
    /// Ground truth: time added to the unit by the injector.
    pub gt_delay_us: u64,
    /// Micro-batches of this record's rows (1 for a unit computed at once;
    /// a `split` record and the rest a peer computed count theirs).
    pub micro_batches: u32,
    /// Time the unit's gradient took to leave over its worker's link after
    /// its compute (the `slow-link` pattern's emulated link; 0 when the link
    /// was not limited or the time is not known).
    pub send_us: u64,
    /// Ground truth: the rate its worker's link was limited to, Mbit/s (0:
    /// not limited).
    pub gt_link_mbps: f64,
}

/// One row per (iteration, worker): how the worker spent the iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerRecord {
    /// Iteration.
    pub iteration: u64,
    /// Global worker index.
    pub worker: u32,
    /// Process of the worker.
    pub process: u32,
    /// Units the worker executed.
    pub units: u32,
    /// Rows the worker processed.
    pub rows: u64,
    /// When all parameter shards of this iteration's version had arrived.
    pub ready_us: u64,
    /// When the worker finished its last unit of the iteration.
    pub finish_us: u64,
    /// Sum of the units' real compute time.
    pub compute_us: u64,
    /// `finish_us - ready_us`: the worker's part of the iteration.
    pub busy_us: u64,
    /// Time from `finish_us` until the next version's parameters were ready: the
    /// wait at the barrier for the slowest worker.
    pub barrier_wait_us: u64,
    /// Time timely's log says the compute operator was scheduled on this worker
    /// since the previous iteration closed.
    pub operator_us: u64,
    /// Bytes of gradient sent.
    pub bytes_sent: u64,
    /// Bytes of data rows that reached this worker in this iteration for
    /// partitions it did not hold (shipped with units, or placement diffs).
    pub bytes_moved: u64,
    /// Units this worker gave away to peers.
    pub units_given: u32,
    /// Control messages this worker sent.
    pub control_sent: u32,
    /// Their bytes on the wire, without the data rows some carry (those are
    /// `bytes_moved` at the receiver); 0 in traces of schema version 2 and 3.
    pub control_bytes: u64,
    /// Units this worker skipped because a peer's clone finished them first
    /// (own units), or dropped because their owner finished first (clones) or
    /// because the iteration closed without them.
    pub units_cancelled: u32,
    /// Compute (µs) this worker spent on copies of units that another copy
    /// beat: an own unit in flight stopped because its clone finished first,
    /// or a clone finished here after the original (its gradient discarded).
    /// 0 in traces of schema version 2 to 4.
    pub wasted_us: u64,
    /// The longest time one of this worker's gradient slices took to reach
    /// shard 0's owner on another host (job clock, so across hosts as close
    /// as the clock exchange made them), µs; 0 when that owner shares its
    /// host, and in traces of schema version 2 to 6. A slow link shows here.
    pub transit_us: u64,
    /// The longest time the parameter shard this worker owns took, in its
    /// next version, to reach a worker on another host (job clock, as
    /// `transit_us`), µs; 0 for a worker that owns no shard, and in traces
    /// of schema version 2 to 7. A slow link out of a shard owner's host
    /// shows here.
    pub params_transit_us: u64,
    /// Parameter version the worker computed this iteration with; under SSP
    /// `iteration - params_version` is the staleness it used (0 under BSP).
    pub params_version: u64,
    /// The time per unit the run's online predictor expected for this worker
    /// in this iteration, made at the iteration boundary before it (None: no
    /// predictor, or no history yet).
    pub predicted_unit_us: Option<f64>,
    /// Ground truth: the largest slowdown injected into this worker's units
    /// (for a worker that computed none, the slowdown it had at the start).
    pub gt_slowdown: f64,
    /// Ground truth: time the injector added to this worker's units.
    pub gt_delay_us: u64,
}

impl WorkerTiming for WorkerRecord {
    fn worker(&self) -> u32 {
        self.worker
    }
    fn ready_us(&self) -> u64 {
        self.ready_us
    }
    fn finish_us(&self) -> u64 {
        self.finish_us
    }
}

impl IterationRecord {
    /// The row of an iteration known only from its workers' timings (an import,
    /// a synthetic trace): it starts at `start`, lasts as long as its slowest
    /// worker, names the laggard as a run's detector would, and has no loss or
    /// evaluation. `units` were computed over the rows the workers report.
    pub fn timing_only(
        iteration: u64,
        start: u64,
        workers: &[WorkerRecord],
        units: u32,
        workload: &str,
    ) -> Self {
        let longest = workers.iter().map(|r| r.busy_us).max().unwrap_or(0);
        let report = detect_laggard(workers, DEFAULT_LAGGARD_THRESHOLD);
        Self {
            iteration,
            start_us: start,
            end_us: start + longest,
            wall_us: longest,
            train_loss: f64::NAN,
            test_loss: None,
            test_accuracy: None,
            laggard: report.laggard,
            lag_us: report.lag_us,
            median_busy_us: report.median_busy_us,
            barrier_wait_us: workers.iter().map(|r| r.barrier_wait_us).sum(),
            units,
            rows: workers.iter().map(|r| r.rows).sum(),
            dropped_partitions: String::new(),
            workload: workload.into(),
            test_metrics: Default::default(),
        }
    }
}

impl WorkerRecord {
    /// A worker that computed one unit from `ready_us` to `finish_us` of
    /// `iteration` and recorded nothing else (no rows, bytes or messages; a
    /// slowdown of 1).
    pub fn single_unit(iteration: u64, worker: u32, ready_us: u64, finish_us: u64) -> Self {
        let busy_us = finish_us.saturating_sub(ready_us);
        Self {
            iteration,
            worker,
            process: 0,
            units: 1,
            rows: 0,
            ready_us,
            finish_us,
            compute_us: busy_us,
            busy_us,
            barrier_wait_us: 0,
            operator_us: 0,
            bytes_sent: 0,
            bytes_moved: 0,
            units_given: 0,
            control_sent: 0,
            control_bytes: 0,
            units_cancelled: 0,
            wasted_us: 0,
            transit_us: 0,
            params_transit_us: 0,
            params_version: iteration,
            predicted_unit_us: None,
            gt_slowdown: 1.0,
            gt_delay_us: 0,
        }
    }
}

/// One row per iteration: the model's progress and who held the barrier up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterationRecord {
    /// Iteration.
    pub iteration: u64,
    /// Earliest time any worker had this iteration's parameters.
    pub start_us: u64,
    /// Latest time any worker finished its units of this iteration.
    pub end_us: u64,
    /// `end_us - start_us`.
    pub wall_us: u64,
    /// Mean training loss (the workload's own: log-loss, cross-entropy,
    /// class-weighted binary cross-entropy) over the iteration's sampled rows,
    /// at the parameters the iteration started from.
    pub train_loss: f64,
    /// Test-set log-loss (cross-entropy for several classes) of those
    /// parameters, when evaluated this iteration.
    pub test_loss: Option<f64>,
    /// Test-set accuracy of those parameters, when evaluated this iteration.
    pub test_accuracy: Option<f64>,
    /// Worker that finished last, if it lagged by more than the threshold.
    pub laggard: Option<u32>,
    /// How much later the last worker finished than the median worker.
    pub lag_us: u64,
    /// Median over workers of `finish_us - start_us`.
    pub median_busy_us: u64,
    /// Sum over workers of their barrier wait for this iteration.
    pub barrier_wait_us: u64,
    /// Units computed in the iteration.
    pub units: u32,
    /// Rows sampled in the iteration.
    pub rows: u64,
    /// Backup workers: partitions whose gradients were dropped this iteration,
    /// comma-separated in ascending order ("" when none).
    pub dropped_partitions: String,
    /// The `[model] kind` the run trained (`logistic`, `softmax`, `cnn`); in
    /// an imported trace, the import format it came from (`alibaba-minibatch`,
    /// `bytedance-ops`).
    pub workload: String,
    /// The workload's own test metrics of those parameters, by name without
    /// the `test_` prefix (the CNN's `auc`), when evaluated this iteration;
    /// empty when not evaluated or when the workload has none of its own.
    /// Written as a JSON object (null when empty); a non-finite value is
    /// written as JSON `null` and reads back as NaN.
    pub test_metrics: std::collections::BTreeMap<String, f64>,
}
