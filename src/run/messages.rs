//! What travels between operators of the dataflow.

use serde::{Deserialize, Serialize};

use crate::data::UnitKey;

/// One shard of a parameter version, sent by its owner to one worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardParams {
    /// Worker this copy is addressed to (the exchange key).
    pub target: u32,
    /// Parameter version (= the iteration that will use it).
    pub version: u64,
    /// Shard index.
    pub shard: u32,
    /// The shard's coordinates.
    pub values: Vec<f64>,
    /// The final version the job stops at, once worker 0 fixed one
    /// ([`crate::run::stop`]).
    pub stop_at: Option<u64>,
    /// When the owner handed the version to its link, on the job clock
    /// (the receiver measures the shard's transit from it).
    pub sent_us: u64,
}

impl ShardParams {
    /// Bytes one copy of a shard of `len` coordinates puts on the wire
    /// (bincode: the fields, 8 bytes of length and 8 a coordinate).
    pub fn wire_bytes(len: usize) -> u64 {
        4 + 8 + 4 + 8 + 8 * len as u64 + 9 + 8
    }
}

/// One unit's gradient restricted to one shard, sent to that shard's owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GradSlice {
    /// Owner of the shard (the exchange key).
    pub owner: u32,
    /// Iteration the gradient belongs to.
    pub iteration: u64,
    /// Which unit.
    pub partition: u32,
    /// Which unit.
    pub unit: u32,
    /// Worker that computed it.
    pub executor: u32,
    /// Rows the unit covered.
    pub rows: u32,
    /// The unit's log-loss sum (carried on shard 0 only; 0 elsewhere).
    pub loss_sum: f64,
    /// Σ over the unit's rows of the gradient, for this shard's coordinates
    /// (indexed from the shard's first): dense, or sparse runs.
    pub update: crate::workload::Update,
    /// dpro-substitute: not computed; the shard owner uses this unit's last
    /// gradient instead (`update` is empty).
    pub substitute: bool,
    /// The final version the job stops at, if the worker that computed it
    /// knew one ([`crate::run::stop`]): so its shard's owner checkpoints it.
    pub stop_at: Option<u64>,
    /// When its worker handed it to the exchange, µs on the job clock (0
    /// until then): its owner measures how long it took to arrive.
    pub sent_us: u64,
    /// A part of the shard only: (first coordinate within the shard,
    /// coordinates), `update` indexed from that first. A pipeline whose
    /// layers moved between stages sends a shard's gradient in parts, one
    /// from each stage worker whose layers it spans; the owner puts them
    /// together (copies, no arithmetic) before the reduction. None: the
    /// whole shard.
    pub span: Option<(u32, u32)>,
    /// A piece of the unit only (its tail went to a peer, or this is that
    /// tail): the owner holds the pieces until they cover the unit and folds
    /// them in row order, which gives the unit's sums, bit for bit. None:
    /// the whole unit.
    pub piece: Option<PieceSums>,
}

/// Which rows of a unit a piece covers, as a worker computes it: rows
/// `first_row..first_row + rows` of a unit of `unit_rows` rows (whole
/// micro-batches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    /// The piece's first row within the unit (0: the piece the unit's
    /// worker kept).
    pub first_row: u32,
    /// Rows in the whole unit.
    pub unit_rows: u32,
}

/// A piece's contribution to a shard: the first piece's sums are the
/// slice's `update` and `loss_sum` (folded from zero, as the whole unit's
/// begin); a later piece's micro-batches come one by one, as computed from
/// zero, for the owner to fold after the pieces before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PieceSums {
    /// Which rows.
    pub piece: Piece,
    /// A later piece's micro-batches, in order: each one's gradient sum
    /// over the shard and its loss sum (shard 0 only; 0 elsewhere).
    pub micro: Vec<(crate::workload::Update, f64)>,
}

impl GradSlice {
    /// The unit this slice belongs to.
    pub fn key(&self) -> UnitKey {
        UnitKey {
            partition: self.partition,
            unit: self.unit,
        }
    }

    /// Bytes this slice puts on the wire (payload and header, approximately).
    pub fn wire_bytes(&self) -> u64 {
        let piece = self.piece.as_ref().map_or(0, |p| {
            8 + 8 + p.micro.iter().map(|(u, _)| u.wire_bytes() + 8).sum::<u64>()
        });
        self.update.wire_bytes() + 48 + piece
    }
}

/// Progress a worker reports to worker 0, which tracks who still holds each
/// iteration (a probe's frontier is global and cannot say who).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Progress {
    /// The worker finished its units of `record.iteration` (barrier wait not
    /// known yet, 0).
    Finished(crate::trace::WorkerRecord),
    /// The worker holds every shard of parameter version `iteration`: its wait
    /// at the barrier of `iteration - 1` is over.
    Ready {
        /// The worker.
        worker: u32,
        /// The version it now holds.
        iteration: u64,
        /// When.
        ready_us: u64,
        /// The worker's process was asked to stop ([`crate::run::stop`]).
        stop: bool,
    },
    /// A pipeline stage worker's operations of an iteration (its passes,
    /// sends and receives), for the run's operation trace.
    Ops(Vec<StageOp>),
    /// A pipeline's last stage scored one test batch of parameter version
    /// `version` (the evaluation through the stages).
    Scores {
        /// The version.
        version: u64,
        /// The batch, among the workload's test batches.
        batch: u32,
        /// Each row's score and whether its label is positive.
        scores: Vec<(f64, bool)>,
    },
    /// Every shard of parameter version `version` reached `worker`; `late`
    /// holds, for each shard whose owner is on another host, how long it
    /// took (shard, µs).
    ParamsIn {
        /// The receiver.
        worker: u32,
        /// The version.
        version: u64,
        /// (shard, µs from the owner's send to its arrival).
        late: Vec<(u32, u64)>,
    },
}

/// A rapid-reassignment message between two workers, at the iteration's time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Control {
    /// Receiver (the exchange key).
    pub to: u32,
    /// Sender.
    pub from: u32,
    /// Iteration it is about.
    pub iteration: u64,
    /// What it says.
    pub kind: crate::policy::ControlKind,
    /// With `Assign`: the units that now belong to the receiver.
    pub units: Vec<UnitKey>,
    /// With `Assign` or `Clone` to a worker that is not a settled holder of
    /// their partitions: the units' rows.
    pub rows: Vec<crate::data::DataRow>,
    /// With `Rest`: the running sums of the unit's micro-batches done.
    pub carry: Option<Box<Carry>>,
}

/// The running sums the rest of a unit in flight travels with
/// ([`ControlKind::Rest`](crate::policy::ControlKind::Rest)): those of its
/// first `done_rows` rows, folded micro-batch by micro-batch from zero, to
/// which whoever finishes it adds the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Carry {
    /// Rows folded in (whole micro-batches, from the unit's first).
    pub done_rows: u32,
    /// Their gradient sum.
    pub grad: crate::workload::Update,
    /// Their loss sum.
    pub loss_sum: f64,
}

impl Control {
    /// Bytes the message occupies on the wire, fixed-width as the serde
    /// encoding between processes writes it (a 4-byte tag per enum, 8 bytes
    /// of length per vector), without the data rows it may carry: those are
    /// counted where they arrive (`bytes_moved`).
    pub fn wire_bytes(&self) -> u64 {
        let carry = self
            .carry
            .as_ref()
            .map_or(0, |c| 4 + 4 + c.grad.wire_bytes() + 8);
        4 + 4 + 8 + self.kind.wire_bytes() + 8 + 8 * self.units.len() as u64 + 8 + 1 + carry
    }
}

/// Control traffic: messages sent and their bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Messages.
    pub messages: u32,
    /// Their [`Control::wire_bytes`].
    pub bytes: u64,
}

impl Traffic {
    /// Counts `message`.
    pub fn count(&mut self, message: &Control) {
        self.messages += 1;
        self.bytes += message.wire_bytes();
    }
}

/// Backup workers: shard 0's owner tells the other shard owners which
/// partitions an iteration drops, so every shard reduces the same set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DropDecision {
    /// Shard owner addressed (the exchange key).
    pub target: u32,
    /// Iteration.
    pub iteration: u64,
    /// Dropped partitions, ascending.
    pub partitions: Vec<u32>,
}

/// A micro-batch's activation (forward, to the next stage) or activation
/// gradient (backward, to the stage before) between two stage workers of
/// one pipeline replica.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageTraffic {
    /// Receiver (the exchange key).
    pub to: u32,
    /// Iteration.
    pub iteration: u64,
    /// Micro-batch, within the replica's iteration.
    pub micro: u32,
    /// An activation (true) or its gradient (false).
    pub forward: bool,
    /// An activation of the test set's evaluation (`micro` is then the
    /// test batch; `iteration` the parameter version).
    pub eval: bool,
    /// The values, row-major.
    pub values: Vec<f32>,
    /// Rows × columns.
    pub shape: [usize; 2],
    /// With a gradient: the micro-batch's loss sum (from the last stage),
    /// passed back to the first, which carries it to shard 0's owner.
    pub loss_sum: f64,
}

impl StageTraffic {
    /// Bytes it puts on the wire (values and header, approximately).
    pub fn wire_bytes(&self) -> u64 {
        4 * self.values.len() as u64 + 48
    }
}

/// One operation of a pipeline stage worker, on the job clock: a row of
/// the operation trace (`ops.parquet`, the ByteDance importer's schema).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageOp {
    /// Iteration (the trace's step).
    pub iteration: u64,
    /// Replica (the trace's data-parallel rank).
    pub replica: u32,
    /// Stage.
    pub stage: u32,
    /// Worker (the trace's global rank).
    pub worker: u32,
    /// What it was.
    pub kind: crate::ops::OpKind,
    /// Its index among its kind's on its worker in its iteration.
    pub seq_id: u32,
    /// Micro-batch.
    pub micro: u32,
    /// Start, µs on the job clock.
    pub start_us: u64,
    /// Duration, µs.
    pub duration_us: u64,
}

/// What a pipeline's stage workers send each other: activations and their
/// gradients, (under `rebalance-stages`) what each measured of an
/// iteration, and (under `rapid-reassign`) the units replicas take from
/// each other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StageMessage {
    /// An activation or its gradient, to a neighbour stage.
    Traffic(StageTraffic),
    /// A stage worker's iteration, to every stage worker.
    Timing(StageTiming),
    /// Units between replicas within an iteration.
    Steal(StealMessage),
}

impl StageMessage {
    /// Its receiver (the exchange key).
    pub fn to(&self) -> u32 {
        match self {
            Self::Traffic(t) => t.to,
            Self::Timing(t) => t.to,
            Self::Steal(m) => m.to,
        }
    }
}

/// What a stage worker measured of an iteration: every stage worker learns
/// every one's, so that all compute the same next placement.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StageTiming {
    /// Receiver (the exchange key).
    pub to: u32,
    /// Sender.
    pub from: u32,
    /// Iteration.
    pub iteration: u64,
    /// Its passes' time, compute and injected delay, µs.
    pub pass_us: u64,
    /// Images its passes covered.
    pub rows: u64,
}

/// Units taken between a pipeline's replicas within an iteration
/// (`rapid-reassign` under `[parallel]`; see [`crate::pipeline::steal`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StealMessage {
    /// Receiver (the exchange key).
    pub to: u32,
    /// The sender's replica.
    pub replica: u32,
    /// Iteration.
    pub iteration: u64,
    /// What it says.
    pub kind: StealKind,
}

/// What one replica's stage worker tells another about units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StealKind {
    /// A first stage that fed its whole list asks another for units
    /// (its round of asking, its time per micro-batch so far, µs).
    Ask {
        /// The asker's round.
        round: u32,
        /// Its time per micro-batch so far, µs.
        micro_us: f64,
    },
    /// The answer to an ask: units (partition, unit of the partition) from
    /// the end of the giver's list, perhaps none.
    Gift {
        /// The round answered.
        round: u32,
        /// The units given, in list order.
        units: Vec<(u32, u32)>,
    },
    /// The sender's first stage feeds nothing more this iteration: it
    /// answers no more asks.
    Closed,
    /// To its replica's other stages: the list as it stands now, and
    /// whether it is final (`seq` orders the shapes one first stage sends).
    Shape {
        /// The replica's units, in order.
        units: Vec<(u32, u32)>,
        /// No more changes.
        closed: bool,
        /// Its place among the first stage's shapes this iteration.
        seq: u32,
    },
}

impl StealMessage {
    /// Bytes it puts on the wire (approximately).
    pub fn wire_bytes(&self) -> u64 {
        let units = match &self.kind {
            StealKind::Gift { units, .. } | StealKind::Shape { units, .. } => units.len(),
            _ => 0,
        };
        32 + 8 * units as u64
    }
}
