//! `JobPlan`: a job with every default applied, every path resolved and every
//! value checked. Nothing downstream reads a `JobSpec`.

use std::path::PathBuf;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::data::DataConfig;
use crate::data::{DataError, Dataset, Partitioning, Sampling};
pub use crate::detect::DEFAULT_LAGGARD_THRESHOLD;
use crate::fsutil::hex;
use crate::inject::Pattern;
use crate::policy::PolicyPlan;
pub use crate::workload::{ClassWeighting, ModelPlan};
use crate::workload::{OptimizerConfig, Workload};

/// Default gradient bucket, KiB: a worker holds its finished units' gradient
/// slices until they are this large, or until it runs out of units (see
/// [`JobPlan::grad_bucket_bytes`]).
pub const DEFAULT_GRAD_BUCKET_KIB: u64 = 256;
/// The largest gradient bucket, KiB (1 GiB).
pub const MAX_GRAD_BUCKET_KIB: u64 = 1 << 20;

/// Without `[workers] shards`, a job has one parameter shard per this many
/// coordinates (at least one, at most one per worker): each shard's owner
/// hears from every worker and answers every worker each iteration, so a
/// small model split W ways costs W² messages for a few coordinates each
/// (logistic regression on Adult has about a hundred).
pub const MIN_SHARD_COORDS: usize = 4096;

/// Default number of training iterations.
pub const DEFAULT_ITERATIONS: u64 = 100;
/// Default seed.
pub const DEFAULT_SEED: u64 = 42;
/// Default partition count: several per worker for up to 8 workers or so.
pub const DEFAULT_PARTITIONS: u32 = 48;
/// Default units per partition.
pub const DEFAULT_UNITS_PER_PARTITION: u32 = 4;
/// Default share of rows held out for testing.
pub const DEFAULT_TEST_FRACTION: f64 = 1.0 / 3.0;
/// Default Adam step size.
pub const DEFAULT_LEARNING_RATE: f64 = 0.05;
/// Default Adam step size of softmax regression.
pub const DEFAULT_SOFTMAX_LEARNING_RATE: f64 = 0.01;
/// Default Adam step size of the CNN (the seeds' 0.001).
pub const DEFAULT_CNN_LEARNING_RATE: f64 = 0.001;
/// Default L2 penalty.
pub const DEFAULT_L2: f64 = 1e-4;
/// Default Adam step size of matrix factorisation.
pub const DEFAULT_MF_LEARNING_RATE: f64 = 0.01;
/// Default per-rating L2 weight of matrix factorisation.
pub const DEFAULT_MF_L2: f64 = 0.1;
/// Default rank of matrix factorisation's factor rows.
pub const DEFAULT_MF_RANK: u32 = 10;
/// Default topics of LDA.
pub const DEFAULT_LDA_TOPICS: u32 = 20;
/// Default prior of a document's topics (the `lda` package's).
pub const DEFAULT_LDA_ALPHA: f64 = 0.1;
/// Default prior of a topic's words (the `lda` package's `eta`).
pub const DEFAULT_LDA_BETA: f64 = 0.01;
/// The most topics a job may ask for.
pub const MAX_LDA_TOPICS: u32 = 10_000;
/// The highest rank a job may ask for.
pub const MAX_MF_RANK: u32 = 1024;
/// Default extra holders of every partition.
pub const DEFAULT_REPLICAS: u32 = 1;
/// Default worker count.
pub const DEFAULT_WORKERS: u32 = 4;
/// Default iterations per trace part.
pub const DEFAULT_PART_ITERATIONS: u64 = 25;
/// Default checkpoint interval, iterations. A checkpoint costs this machine
/// ≈ 5 ms of a native logistic run's time (`pipelines/processes.toml`), whose
/// iterations take ≈ 3 ms: every 50 keeps the cost near 3 % there, and far
/// below for slower iterations (the CNN's cost is not measurable).
pub const DEFAULT_CHECKPOINT_EVERY: u64 = 50;
/// Default disrupted-machine window, ms.
pub const DEFAULT_PERIOD_MS: u64 = 500;
/// Default workers per emulated machine.
pub const DEFAULT_WORKERS_PER_MACHINE: u32 = 2;
/// Default power-law cap on a slowdown.
pub const DEFAULT_MAX_SLOWDOWN: f64 = 20.0;

/// Policy names that are implemented.
pub const AVAILABLE_POLICIES: &[&str] = &[
    "bsp",
    "ssp",
    "rapid-reassign",
    "flexrr",
    "speculate",
    "backup-workers",
    "proactive",
    "proactive-clone",
    "dpro-substitute",
    "forestall",
    "forestall-ssp",
    "rebalance-stages",
    "ideal",
];
/// Policy names from the design that are not implemented yet.
pub const PLANNED_POLICIES: &[&str] = &[];

/// Model kinds a job can name in `[model] kind`.
pub const MODEL_KINDS: &[&str] = &["logistic", "softmax", "cnn", "mf", "lda"];

/// How a disrupted machine is slowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DisruptorMode {
    /// Stretch the units of the disrupted workers (deterministic; the default).
    Emulated,
    /// Also run real CPU-burning threads during disrupted windows.
    Cpu,
    /// `slow-link`: limit the host's network interface with `tc` while its
    /// link is slow, instead of delaying its gradients in the process
    /// ([`crate::inject::shaper`]).
    Tc,
}

/// When a worker reads its peers' control messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Respond {
    /// At once, also while a unit is in flight: the unit's real gradient is
    /// computed, then its injected (or paced) remainder runs on a timer while
    /// the worker's operator answers peers — as a responder thread beside a
    /// compute thread would (the default).
    #[default]
    AtOnce,
    /// Only between units: the worker sleeps through a unit's remainder, so a
    /// slow worker answers after its current unit.
    BetweenUnits,
}

/// The predictor a run uses online, at every iteration boundary.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "name", rename_all = "kebab-case")]
pub enum PredictorPlan {
    /// Hold the last time per unit.
    Last,
    /// Exponentially weighted moving average.
    Ewma {
        /// Weight of the newest observation.
        alpha: f64,
    },
    /// The smallest ratio of the last `k` iterations.
    Sustained {
        /// Iterations a slowdown must last.
        k: usize,
    },
    /// The median ratio of the last `window` iterations.
    Median {
        /// Iterations it looks back.
        window: usize,
    },
    /// An LSTM trained with `forestall predictor train`.
    Lstm {
        /// Model directory.
        model: PathBuf,
    },
    /// For all workers, whichever of `median`, `sustained`, `last`, `ewma`
    /// (and the LSTM in `model`, if given) has had the lowest recent error.
    Auto {
        /// LSTM model directory, if the LSTM is a candidate.
        model: Option<PathBuf>,
    },
}

/// Predictors a job can name.
pub const PREDICTORS: &[&str] = &["last", "ewma", "sustained", "median", "lstm", "auto"];

/// A validated job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobPlan {
    /// Job name.
    pub name: String,
    /// Seed of partitioning, sampling and the straggler schedule.
    pub seed: u64,
    /// Training iterations.
    pub iterations: u64,
    /// Dataset and split.
    pub data: DataConfig,
    /// Data partitions.
    pub partitions: u32,
    /// Units per partition per iteration.
    pub units_per_partition: u32,
    /// Rows per micro-batch (0: the whole unit in one gradient call). A
    /// unit's gradient is the left fold of its micro-batches' gradients, so
    /// the size is part of the math; left out of the plan's JSON (and hash)
    /// at 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub micro_batch: u32,
    /// Share of each partition sampled per iteration.
    pub batch_fraction: f64,
    /// How each iteration draws its rows (left out of the plan's JSON, and
    /// hash, when independent, the default).
    #[serde(skip_serializing_if = "Sampling::is_independent")]
    pub sampling: Sampling,
    /// A categorical column whose values each stay in one partition, with
    /// as many values in every partition (their rows as many as the values
    /// hold); unset: rows are shuffled into partitions of equal size (left
    /// out of the plan's JSON, and hash, then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition_by: Option<String>,
    /// Extra holders of every partition besides its owner.
    pub replicas: u32,
    /// The model and its knobs.
    pub model: ModelPlan,
    /// Optimiser.
    pub optimizer: OptimizerConfig,
    /// Evaluate on test rows every this many iterations.
    pub eval_every: u64,
    /// Timely workers.
    pub workers: u32,
    /// Paced mode: nominal ns per row (0 = native speed).
    pub pace_ns_per_row: u64,
    /// A worker holds its finished units' gradient slices of an iteration
    /// until they reach this many bytes on the wire, or until it has no unit
    /// left, and then sends them at once (PyTorch DDP's gradient buckets,
    /// for the same reason). Every send wakes each shard owner's thread and
    /// makes timely broadcast progress to every worker: sent unit by unit,
    /// the wake-ups, not the gradients, took the cores at 64 workers on 2.
    /// Holding slices back delays no reduction: a shard cannot reduce before
    /// the iteration's last unit is in, and a worker sends what it holds as
    /// soon as it runs out of units. A model whose unit gradient alone fills
    /// the bucket (the CNN) sends unit by unit, overlapping communication
    /// with the next unit's compute. 0: every unit's slices at its end.
    /// Left out of the plan's JSON (and hash) at the default.
    #[serde(skip_serializing_if = "is_default_bucket")]
    pub grad_bucket_bytes: u64,
    /// Parameter shards (owned by workers `0..shards`), or `None` for
    /// [`JobPlan::shards_for`]'s default. Left out of the plan's JSON (and
    /// hash) when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// Injected straggler pattern.
    pub pattern: Pattern,
    /// How disrupted machines are slowed.
    pub disruptor: DisruptorMode,
    /// Mitigation policy and its knobs.
    pub policy: PolicyPlan,
    /// Online predictor (proactive policies always have one).
    pub predictor: Option<PredictorPlan>,
    /// Testing: a control message waits a seeded random 0..=N activations of
    /// its receiver before it is read (0 = off).
    pub control_delay: u32,
    /// When a worker reads control messages.
    pub respond: Respond,
    /// Laggard threshold.
    pub laggard_threshold: f64,
    /// Iterations per trace part file.
    pub part_iterations: u64,
    /// Checkpoint every this many iterations and at the end (0: never).
    pub checkpoint_every: u64,
    /// Output directory, if the job or the command line named one.
    pub out: Option<PathBuf>,
    /// The job file the plan came from.
    pub source: Option<PathBuf>,
    /// Model-parallel training: the CNN's layers cut into pipeline stages
    /// (`[parallel]`); None for data-parallel (left out of the plan's JSON,
    /// and hash, then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel: Option<crate::pipeline::StageLayout>,
}

impl JobPlan {
    /// SHA-256 (hex) of everything that determines the run's results: the plan
    /// without its output directory and source file.
    pub fn hash(&self) -> String {
        let mut plan = self.clone();
        plan.out = None;
        plan.source = None;
        let json = serde_json::to_vec(&plan).expect("a plan always serialises to JSON");
        hex(&Sha256::digest(json))
    }

    /// SHA-256 (hex) of what determines the trained parameters under BSP
    /// semantics: everything but the worker count, the injected pattern, pacing,
    /// detection, trace and checkpoint settings. Runs with equal math hashes must produce
    /// bit-identical parameters.
    pub fn math_hash(&self) -> String {
        let mut plan = self.clone();
        plan.workers = 1;
        plan.pattern = Pattern::None;
        plan.disruptor = DisruptorMode::Emulated;
        plan.pace_ns_per_row = 0;
        plan.grad_bucket_bytes = DEFAULT_GRAD_BUCKET_KIB * 1024;
        plan.shards = None;
        plan.control_delay = 0;
        plan.respond = Respond::AtOnce;
        plan.laggard_threshold = 0.0;
        plan.part_iterations = 1;
        plan.checkpoint_every = 0;
        plan.eval_every = 1;
        plan.predictor = None;
        // a pipeline trains the parameters of data-parallel training
        plan.parallel = None;
        plan.hash()
    }

    /// Parameter shards of a model with `dims` coordinates: the job's
    /// `shards`, or one per [`MIN_SHARD_COORDS`] coordinates, at least one
    /// and at most one per worker. The shard count never changes the
    /// parameters (each coordinate's sum and step run alone).
    pub fn shards_for(&self, dims: usize) -> u32 {
        self.shards.unwrap_or_else(|| {
            let wanted = dims.div_ceil(MIN_SHARD_COORDS).max(1);
            u32::try_from(wanted).unwrap_or(u32::MAX).min(self.workers)
        })
    }

    /// The plan as pretty JSON, as written next to every output.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a plan always serialises to JSON")
    }
}

/// Whether a plan's micro-batch is the whole unit (left out of its JSON).
fn is_zero(rows: &u32) -> bool {
    *rows == 0
}

/// Whether a plan's gradient bucket is the default (left out of its JSON).
fn is_default_bucket(bytes: &u64) -> bool {
    *bytes == DEFAULT_GRAD_BUCKET_KIB * 1024
}

/// Loads the data of `plan` and builds the workload its `[model] kind` names.
pub fn load_workload(plan: &JobPlan) -> Result<std::sync::Arc<dyn Workload>, DataError> {
    crate::workload::load(&plan.model, &plan.data)
}

/// The plan's cut of the dataset's training rows into partitions and units.
/// Under `partition_by`, a column the data lacks leaves the rows shuffled;
/// [`check_against_data`](crate::spec::check_against_data) refuses such a
/// plan before anything runs.
pub fn partitioning_for(plan: &JobPlan, dataset: &Dataset) -> Partitioning {
    let (train, partitions) = (&dataset.train, plan.partitions);
    let (units, fraction, seed) = (plan.units_per_partition, plan.batch_fraction, plan.seed);
    let groups = plan
        .partition_by
        .as_deref()
        .and_then(|column| dataset.train_groups(column));
    match groups {
        Some(groups) => Partitioning::grouped(train, &groups, partitions, units, fraction, seed),
        None => Partitioning::new(train, partitions, units, fraction, seed),
    }
    .with_sampling(plan.sampling)
}
