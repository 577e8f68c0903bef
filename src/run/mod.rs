//! The run: a job's training as a timely dataflow on W workers.
//!
//! [`run_job`] lays the job out ([`JobContext`]), starts the [`sink`] thread,
//! runs the dataflow of [`dataflow`] on timely workers, and returns the final
//! parameters with every iteration's record.

pub mod bound;
pub mod cluster;
pub mod context;
pub mod dataflow;
pub mod detect;
pub mod evaluator;
pub mod gather;
pub mod handshake;
pub mod holdings;
mod job;
pub mod messages;
pub mod oplog;
pub mod pace;
pub mod parts;
pub mod placement;
pub mod plain;
pub mod plain_burn;
pub mod prepare;
pub mod reduce;
pub mod scheduler;
pub mod sink;
pub mod stage;
pub mod staged_eval;
pub mod stop;
pub mod token;
pub mod wallclock;
pub mod worker;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc};
use std::time::Instant;

use sha2::{Digest, Sha256};

pub use crate::detect::{detect_laggard, LaggardReport};
pub use cluster::ClusterSpec;
pub use context::JobContext;
pub use sink::{Observer, Progress, SinkEvent};

use crate::checkpoint::Checkpoint;
use crate::fsutil::hex;
use crate::spec::JobPlan;
use crate::trace::{IterationRecord, TraceError, TraceStamp};
use crate::workload::{Evaluation, Workload};

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Timely could not start or a worker failed.
    #[error("timely: {0}")]
    Timely(String),
    /// The processes did not all connect and authenticate.
    #[error("{0}")]
    Connect(String),
    /// The trace could not be written.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The thread that writes the trace could not be started.
    #[error("failed to start the sink thread")]
    SinkThread(#[source] std::io::Error),
    /// The online predictor could not be loaded.
    #[error("cannot load the online predictor")]
    Predictor(#[source] crate::predict::LstmError),
    /// Processes of one job run different plans.
    #[error("worker {worker} runs plan {found}, this process plan {expected}: every process must run the same job file and flags")]
    PlanMismatch {
        /// A worker of another process.
        worker: usize,
        /// Its plan hash (first 12 hex digits).
        found: String,
        /// This process's plan hash (first 12 hex digits).
        expected: String,
    },
    /// `[workers] shards` below the worker count in a multi-process run.
    #[error("[workers] shards = {shards} with {workers} workers in several processes: across processes every worker owns a shard; leave shards out or set it to {workers}")]
    ShardsAcrossProcesses {
        /// The job's shards.
        shards: u32,
        /// The job's workers.
        workers: u32,
    },
    /// The run ended without the final parameters (a worker stopped early).
    #[error("the run ended before the final parameters were produced")]
    Incomplete,
    /// Training produced a non-finite loss or parameter.
    #[error("training diverged at iteration {iteration}: {what}; lower [model] learning_rate (or check the data)")]
    Diverged {
        /// The iteration whose reduction was not finite.
        iteration: u64,
        /// What was not finite.
        what: String,
    },
    /// A checkpoint could not be written.
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    /// A pipeline's operation trace could not be written.
    #[error(transparent)]
    Ops(#[from] crate::ops::OpsError),
}

impl From<sink::SinkError> for RunError {
    fn from(e: sink::SinkError) -> Self {
        match e {
            sink::SinkError::Trace(e) => RunError::Trace(e),
            sink::SinkError::Checkpoint(e) => RunError::Checkpoint(e),
            sink::SinkError::Ops(e) => RunError::Ops(e),
        }
    }
}

/// How a run goes beyond training: where it checkpoints, what it continues
/// from, which process of a cluster it is.
#[derive(Default)]
pub struct RunOptions<'a> {
    /// Sees each iteration's row as it completes (process 0).
    pub observer: Option<Observer>,
    /// This process's place in a multi-process job.
    pub cluster: Option<&'a ClusterSpec>,
    /// The job's output directory, where checkpoints go (none: no checkpoints).
    pub checkpoint_dir: Option<PathBuf>,
    /// The checkpoint this run continues from.
    pub resume: Option<Checkpoint>,
    /// Testing: the bytes the trace parts and checkpoint files may take
    /// together (a disk that fills up).
    pub quota: crate::fsutil::Quota,
    /// Stop after this many iterations (at most the plan's), checkpointing
    /// there: the same plan resumed from that checkpoint continues as if it
    /// had never stopped.
    pub stop_after: Option<u64>,
    /// The run's stop from outside ([`stop`]): asking it stops every process
    /// at an iteration they agree on, with a checkpoint there; afterwards it
    /// says where the run stopped. None: a stop of the run's own (SIGTERM
    /// still asks it).
    pub stop: Option<Arc<stop::Stop>>,
}

/// What a finished run produced.
#[derive(Debug)]
pub struct RunOutput {
    /// One row per iteration.
    pub iterations: Vec<IterationRecord>,
    /// The trained parameters.
    pub params: Vec<f64>,
    /// SHA-256 (hex) of the parameters as little-endian `f64` bytes.
    pub digest: String,
    /// Test-set quality of the trained parameters.
    pub eval: Evaluation,
    /// Wall time of the dataflow, µs.
    pub wall_us: u64,
    /// Trace part files written.
    pub parts: Vec<PathBuf>,
    /// Estimated Σ of iteration times without the injected delays (µs).
    pub ideal_us: u64,
    /// Σ of the iterations' load-balancing bounds ([`bound`]), µs.
    pub bound_us: u64,
    /// Σ of the iterations' bounds with whole units ([`bound`]), µs.
    pub unit_bound_us: u64,
    /// Units computed.
    pub units_total: u64,
    /// Units computed by a peer of their owner (rapid reassignment).
    pub units_reassigned: u64,
    /// Speculative copies computed (speculation).
    pub units_cloned: u64,
    /// Checkpoints completed (their versions).
    pub checkpoints: Vec<u64>,
    /// A pipeline's activation memory by stage (this process's workers):
    /// the most activations a worker kept at once, and their bytes.
    pub stage_memory: std::collections::BTreeMap<u32, (u32, u64)>,
    /// A pipeline's bubble by stage (this process's workers): Σ of the time
    /// outside the passes, and Σ of the iterations' wall times, µs.
    pub stage_bubble: std::collections::BTreeMap<u32, (u64, u64)>,
    /// `rebalance-stages`: each new placement, from its first iteration.
    pub recuts: Vec<(u64, crate::pipeline::Placement)>,
    /// A pipeline's evaluations: versions scored through its stages, and
    /// whole (their scores did not all arrive).
    pub stage_evaluations: (u32, u32),
    /// Bytes the workers sent (this process's iterations' rows): gradient
    /// slices, and a pipeline's activations and their gradients; not the
    /// parameter versions.
    pub bytes_sent: u64,
    /// The iteration this run started at (a resumed run's checkpoint), whose
    /// earlier rows `iterations` holds from the trace.
    pub first_iteration: u64,
}

/// SHA-256 (hex) of parameters as little-endian `f64` bytes.
pub fn params_digest(params: &[f64]) -> String {
    let mut h = Sha256::new();
    for x in params {
        h.update(x.to_le_bytes());
    }
    hex(&h.finalize())
}

/// Trains `plan`'s `workload` with `plan.workers` timely worker threads, writing
/// the trace under `trace_dir`. `observer` hears of each iteration as it is
/// trained, then of its row once the row is complete (with its evaluation).
pub fn run_job(
    plan: &JobPlan,
    workload: Arc<dyn Workload>,
    trace_dir: &Path,
    stamp: TraceStamp,
    observer: Option<Observer>,
) -> Result<RunOutput, RunError> {
    let options = RunOptions {
        observer,
        ..RunOptions::default()
    };
    run_job_in_cluster(plan, workload, trace_dir, stamp, options)?.ok_or(RunError::Incomplete)
}

/// As [`run_job`], with `options`: as process `cluster.process` of a
/// multi-process job (timely's cluster mode) when a cluster is given, writing
/// checkpoints, continuing from one. Process 0 hosts worker 0, which assembles
/// the iterations and the final parameters: it returns the output; the other
/// processes write their workers' unit records into the same trace directory
/// (parts named by process) and return `None`.
pub fn run_job_in_cluster(
    plan: &JobPlan,
    workload: Arc<dyn Workload>,
    trace_dir: &Path,
    stamp: TraceStamp,
    options: RunOptions<'_>,
) -> Result<Option<RunOutput>, RunError> {
    let RunOptions {
        observer,
        cluster,
        checkpoint_dir,
        resume,
        quota,
        stop_after,
        stop,
    } = options;
    let mut context = job::context_for(plan, &workload, cluster, resume, stop_after)?;
    if let Some(stop) = stop {
        context.stop = stop;
    }
    // A link to shape (slow-link over tc) is found, and tc tried, first.
    let shaper = job::start_shaper(&context, cluster)?;
    // Connect (and authenticate) before the trace and the sink start: a
    // peer that never comes leaves no trace parts behind.
    let network = match cluster {
        Some(c) => Some(job::connect(c, &mut context)?),
        None => None,
    };
    let cx = Arc::new(context);
    let process = cluster.map_or(0, |c| c.process);
    let (writer, kept_rows) = job::open_trace(&cx, trace_dir, stamp, cluster)?;
    let writer = writer.with_quota(quota.clone());
    if let Some(out) = &checkpoint_dir {
        crate::checkpoint::store::remove_after(out, cx.first_iteration())?;
    }
    let sink_config = job::sink_config(&cx, process, checkpoint_dir, quota);
    // A worker that panics, or a sink that cannot write, must not leave the
    // others waiting forever: it raises the flag, and every worker then drops
    // the dataflow and stops.
    let failed = Arc::new(AtomicBool::new(false));
    let (sender, receiver) = mpsc::channel();
    let sink_thread = job::spawn_sink(
        receiver,
        writer,
        Arc::clone(&workload),
        sink_config,
        observer,
        Arc::clone(&failed),
    )?;
    let disruptors = job::start_disruptors(&cx, process);
    let started = Instant::now();
    // from here SIGTERM stops at an iteration boundary, with a checkpoint
    // (or, hung inside an iteration, after its grace)
    stop::arm();
    stop::watch();
    let executed = job::execute(&cx, network, sender, failed);
    let wall_us = started.elapsed().as_micros() as u64;
    for d in disruptors {
        d.stop();
    }
    if let Some(s) = shaper {
        s.stop().map_err(RunError::Connect)?;
    }
    if let Some((worker, found)) = executed.mismatch {
        let _ = sink_thread.join();
        let expected = plan.hash();
        return Err(RunError::PlanMismatch {
            worker,
            found: found[..12.min(found.len())].to_owned(),
            expected: expected[..12].to_owned(),
        });
    }
    let sink_output = sink_thread
        .join()
        .map_err(|_| RunError::Timely("the sink thread panicked".into()))?;
    let sink_output = sink_output?;
    if let Some((iteration, what)) = sink_output.diverged {
        return Err(RunError::Diverged { iteration, what });
    }
    executed.result.map_err(RunError::Timely)?;
    if process != 0 {
        return Ok(None);
    }
    job::output(&cx, kept_rows, sink_output, wall_us).map(Some)
}
