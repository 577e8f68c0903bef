//! `JobSpec`: a job file as written, before any check.

use serde::Deserialize;

/// A job file as written. Every field is optional here; [`super::validate`](fn@super::validate)
/// applies defaults and checks every value.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// `[job]`: name, seed, length.
    #[serde(default)]
    pub job: JobSection,
    /// `[data]`: dataset and how it is cut.
    #[serde(default)]
    pub data: DataSection,
    /// `[model]`: optimiser knobs.
    #[serde(default)]
    pub model: ModelSection,
    /// `[workers]`: how many, and pacing.
    #[serde(default)]
    pub workers: WorkersSection,
    /// `[straggler]`: the injected pattern.
    #[serde(default)]
    pub straggler: StragglerSection,
    /// `[policy]`: the mitigation policy.
    #[serde(default)]
    pub policy: PolicySection,
    /// `[predictor]`: online straggler prediction.
    #[serde(default)]
    pub predictor: PredictorSection,
    /// `[detect]`: laggard detection.
    #[serde(default)]
    pub detect: DetectSection,
    /// `[trace]`: trace files.
    #[serde(default)]
    pub trace: TraceSection,
    /// `[checkpoint]`: how often the job's state is saved.
    #[serde(default)]
    pub checkpoint: CheckpointSection,
    /// `[cluster]`: processes (the command line's flags win).
    #[serde(default)]
    pub cluster: ClusterSection,
    /// `[parallel]`: model-parallel (pipeline) training of the CNN.
    #[serde(default)]
    pub parallel: Option<ParallelSection>,
}

/// `[parallel]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ParallelSection {
    /// Pipeline stages S (the workers are S × R).
    pub stages: Option<u32>,
    /// Replicas R; if given, it must be the worker count over `stages`.
    pub replicas: Option<u32>,
    /// The layer each stage after the first begins at (S − 1 names, in
    /// order; unset: the best cut for the layers' measured costs).
    pub cut: Option<Vec<String>>,
    /// `gpipe` or `1f1b`.
    pub schedule: Option<String>,
}

/// `[job]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JobSection {
    /// Name of the job; names the default output directory.
    pub name: Option<String>,
    /// Seed of partitioning, sampling and the straggler schedule.
    pub seed: Option<u64>,
    /// Training iterations (timely epochs).
    pub iterations: Option<u64>,
    /// Output directory (relative to the current directory).
    pub out: Option<String>,
}

/// `[data]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DataSection {
    /// Parquet file, relative to the job file's directory.
    pub path: Option<String>,
    /// Binary label column.
    pub label: Option<String>,
    /// Value of the label column for the positive class.
    pub positive: Option<String>,
    /// Columns to ignore (identifiers and the like).
    pub drop: Option<Vec<String>>,
    /// Share of rows held out for testing.
    pub test_fraction: Option<f64>,
    /// Seed of the train/test split (unset: the fixed one every job shares).
    pub split_seed: Option<u64>,
    /// Evaluate on this share of the training part instead of the test part.
    pub validation_fraction: Option<f64>,
    /// Number of data partitions (fixed by the job, not by the worker count).
    pub partitions: Option<u32>,
    /// Work units per partition per iteration.
    pub units_per_partition: Option<u32>,
    /// Rows per micro-batch: a unit's gradient is the in-order sum of its
    /// micro-batches' (unset: the whole unit at once).
    pub micro_batch: Option<u32>,
    /// Share of each partition's rows sampled per iteration (1.0 = full batch).
    pub batch_fraction: Option<f64>,
    /// How each iteration draws its rows: `independent` or `epoch`.
    pub sampling: Option<String>,
    /// A categorical column whose values stay whole in one partition (MF:
    /// `user`, so a partition holds whole users and their ratings).
    pub partition_by: Option<String>,
    /// Extra holders of every partition besides its owner (in other processes
    /// first), who can take its units without moving data.
    pub replicas: Option<u32>,
}

/// `[model]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// Model kind: logistic, softmax or cnn.
    pub kind: Option<String>,
    /// cnn: how the loss weighs the classes (balanced or none).
    pub class_weighting: Option<String>,
    /// cnn: dropout rate after each max-pooling while training (0 ≤ rate < 1;
    /// default 0).
    pub dropout: Option<f64>,
    /// The optimiser: adam (default) or sgd.
    pub optimizer: Option<String>,
    /// The optimiser's step size.
    pub learning_rate: Option<f64>,
    /// L2 penalty on the weights (not the bias); mf: the per-rating λ.
    pub l2: Option<f64>,
    /// mf: length of each user's and item's factor row.
    pub rank: Option<u32>,
    /// lda: topics K.
    pub topics: Option<u32>,
    /// lda: prior of a document's topics.
    pub alpha: Option<f64>,
    /// lda: prior of a topic's words.
    pub beta: Option<f64>,
    /// Evaluate on the test rows every this many iterations (and at the end).
    pub eval_every: Option<u64>,
}

/// `[workers]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WorkersSection {
    /// Timely workers (threads in this process).
    pub count: Option<u32>,
    /// Paced mode: nominal ns of work per row on a dedicated core (0 = native speed).
    pub pace_ns_per_row: Option<u64>,
    /// KiB of finished units' gradient slices a worker holds before sending
    /// them (0: every unit's at its end).
    pub grad_bucket_kib: Option<u64>,
    /// Parameter shards, owned by workers 0..shards (default: one per
    /// [`MIN_SHARD_COORDS`](crate::spec::MIN_SHARD_COORDS) coordinates, at
    /// most one per worker).
    pub shards: Option<u32>,
}

/// `[straggler]`: one table for every pattern; which keys apply depends on `pattern`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StragglerSection {
    /// none, slow-worker, disrupted-machine, power-law, persistent,
    /// slow-link.
    pub pattern: Option<String>,
    /// slow-worker, disrupted-machine: probability of a slowdown.
    pub probability: Option<f64>,
    /// slow-worker, disrupted-machine: extra time in percent (400 = 5× slower).
    pub delay_percent: Option<f64>,
    /// disrupted-machine: window length in milliseconds.
    pub period_ms: Option<u64>,
    /// disrupted-machine: workers per emulated machine.
    pub workers_per_machine: Option<u32>,
    /// disrupted-machine: "emulated" (default) or "cpu" (real CPU-burning threads).
    pub disruptor: Option<String>,
    /// power-law: exponent α of p(x) ∝ x^-α.
    pub alpha: Option<f64>,
    /// power-law: cap on a drawn slowdown.
    pub max_slowdown: Option<f64>,
    /// persistent: the slow workers.
    pub workers: Option<Vec<u32>>,
    /// persistent: slowdown factor of those workers.
    pub factor: Option<f64>,
    /// persistent: share of the data those workers carry.
    pub work_share: Option<f64>,
    /// slow-link: the rate a slowed worker's outgoing link is limited to,
    /// Mbit/s.
    pub link_mbps: Option<f64>,
}

/// `[policy]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PolicySection {
    /// Policy name.
    pub name: Option<String>,
    /// rapid-reassign: peers a worker reports to and may help.
    pub group_size: Option<u32>,
    /// rapid-reassign: share of its own units after which a worker reports.
    pub checkpoint: Option<f64>,
    /// rapid-reassign: units given to a peer that reported being ahead.
    pub initial_units: Option<u32>,
    /// rapid-reassign: units given in answer to a help offer.
    pub follow_up_units: Option<u32>,
    /// forestall: balance every iteration through worker 0 (default true).
    pub broker: Option<bool>,
    /// forestall: answer an offer of help with a copy of the unit in flight
    /// when it is far from its end.
    pub clone_in_flight: Option<bool>,
    /// forestall: answer an offer of help with the rest of the unit in
    /// flight, between its micro-batches, when it is far from its end
    /// (default true; needs `clone_in_flight`).
    pub rest_in_flight: Option<bool>,
    /// forestall: answer an offer of help with the last micro-batches of
    /// the unit in flight not yet begun, going on with the others (default
    /// true; needs `clone_in_flight`).
    pub tail_in_flight: Option<bool>,
    /// Testing: hold each control message for a seeded random 0..=N activations
    /// of its receiver before reading it, to shuffle message order (0 = off).
    pub control_delay: Option<u32>,
    /// When a worker reads control messages: "at-once" (default) or
    /// "between-units".
    pub respond: Option<String>,
    /// backup-workers: workers whose gradients are dropped each iteration.
    pub backups: Option<u32>,
    /// ssp, flexrr: iterations a worker may run ahead of the slowest.
    pub slack: Option<u64>,
    /// speculate: share of its units after which a worker reports progress.
    pub quantile: Option<f64>,
    /// speculate: clone when this many times slower per unit than a finished peer.
    pub multiplier: Option<f64>,
    /// speculate: cap on the share of a worker's units that are cloned.
    pub max_clone_share: Option<f64>,
    /// proactive, forestall: share of its own units every worker keeps.
    pub floor: Option<f64>,
    /// proactive, forestall: least gain of a move, in receiver unit times.
    pub min_gain: Option<f64>,
    /// proactive-clone: at most this share of an iteration's units is cloned.
    pub clone_budget: Option<f64>,
    /// dpro-substitute: predicted completion time over the median that calls
    /// a straggler.
    pub threshold: Option<f64>,
}

/// `[predictor]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PredictorSection {
    /// `last`, `ewma` or `lstm`.
    pub name: Option<String>,
    /// ewma: weight of the newest observation.
    pub alpha: Option<f64>,
    /// sustained: iterations a slowdown must last.
    pub k: Option<usize>,
    /// median: iterations it looks back.
    pub window: Option<usize>,
    /// lstm: model directory from `forestall predictor train`, relative to the
    /// job file's directory.
    pub model: Option<String>,
}

/// `[detect]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DetectSection {
    /// A worker is the laggard when it finishes more than this fraction of the
    /// median busy time after the median worker.
    pub laggard_threshold: Option<f64>,
}

/// `[trace]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TraceSection {
    /// Iterations per trace part file.
    pub part_iterations: Option<u64>,
}

/// `[checkpoint]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSection {
    /// Save the job's state every this many iterations (and at the end);
    /// 0 turns checkpoints off.
    pub every: Option<u64>,
}

/// `[cluster]`: the same settings as `forestall run`'s flags of that name.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    /// Local processes (`--processes`).
    pub processes: Option<u32>,
    /// Worker threads per process (`--threads`).
    pub threads: Option<u32>,
    /// Hostfile of a multi-host job, relative to the job file (`--hostfile`).
    pub hostfile: Option<String>,
    /// Restarts from the newest checkpoint (`--max-restarts`).
    pub max_restarts: Option<u32>,
}
