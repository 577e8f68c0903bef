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
pub mod holdings;
pub mod messages;
pub mod oplog;
pub mod placement;
pub mod plain;
pub mod plain_burn;
pub mod prepare;
pub mod reduce;
pub mod sink;
pub mod worker;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

pub use crate::detect::{detect_laggard, LaggardReport};
pub use cluster::ClusterSpec;
pub use context::JobContext;
pub use sink::{Observer, SinkEvent};

use crate::checkpoint::Checkpoint;

use crate::fsutil::hex;
use crate::inject::{CpuDisruptor, Pattern};
use crate::spec::{DisruptorMode, JobPlan};
use crate::trace::writer::Kept;
use crate::trace::{IterationRecord, TraceError, TraceStamp, TraceWriter, WorkerRecord};
use crate::workload::{Evaluation, Workload};

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Timely could not start or a worker failed.
    #[error("timely: {0}")]
    Timely(String),
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
}

impl From<sink::SinkError> for RunError {
    fn from(e: sink::SinkError) -> Self {
        match e {
            sink::SinkError::Trace(e) => RunError::Trace(e),
            sink::SinkError::Checkpoint(e) => RunError::Checkpoint(e),
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
    /// The iteration this run started at (a resumed run's checkpoint), whose
    /// earlier rows `iterations` holds from the trace.
    pub first_iteration: u64,
}

/// Raises its flag when dropped during a panic.
struct RaiseOnPanic<'a>(&'a AtomicBool);

impl Drop for RaiseOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
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
/// the trace under `trace_dir`. `observer` sees each iteration's row as it
/// completes.
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
    } = options;
    let predictor = context::online_predictor(plan).map_err(RunError::Predictor)?;
    let mut context = JobContext::new(plan.clone(), Arc::clone(&workload), predictor);
    if let Some(c) = cluster {
        if c.workers() != plan.workers {
            return Err(RunError::Timely(format!(
                "the cluster has {} processes × {} threads = {} workers, the plan {}",
                c.processes(),
                c.threads,
                c.workers(),
                plan.workers
            )));
        }
        c.check_own_port().map_err(RunError::Timely)?;
        // Across processes every worker owns a shard: a process that owns
        // none would not stop with the others when the training diverges
        // (measured: the job hung), so fewer shards stay single-process.
        if let Some(shards) = plan.shards.filter(|&s| s < plan.workers) {
            return Err(RunError::ShardsAcrossProcesses {
                shards,
                workers: plan.workers,
            });
        }
        context.shards = context::even_shards(context.dims, plan.workers);
        context.threads_per_process = c.threads;
        if let Some(epoch) = c.epoch_us {
            // One job clock for all processes: the launcher's origin, read
            // through each process's wall clock (on one host the same clock;
            // across hosts as close as their clocks are synchronised).
            context.start = cluster::instant_of_epoch(epoch);
        }
    }
    if let Some(checkpoint) = resume {
        context = context.resuming(checkpoint);
    }
    let cx = Arc::new(context);
    let process = cluster.map_or(0, |c| c.process);
    let first = cx.first_iteration();
    let plan_hash = plan.hash();
    let (writer, kept_rows) = if cx.resume.is_some() {
        let processes = cluster.map_or(1, ClusterSpec::processes);
        TraceWriter::resume(trace_dir, (process, processes), stamp, first)?
    } else {
        (
            TraceWriter::try_new(trace_dir, process, stamp)?,
            Kept::default(),
        )
    };
    let writer = writer.with_quota(quota.clone());
    if let Some(out) = &checkpoint_dir {
        crate::checkpoint::store::remove_after(out, first)?;
    }
    let threads = cx.threads_per_process;
    let sink_config = sink::SinkConfig {
        iterations: plan.iterations,
        eval_every: plan.eval_every,
        part_iterations: plan.part_iterations,
        rows_per_iteration: cx.partitioning.rows_per_iteration(),
        units_per_iteration: plan.partitions * plan.units_per_partition,
        first_iteration: first,
        pace_ns_per_row: plan.pace_ns_per_row,
        job_start: cx.start,
        checkpoints: checkpoint_dir.map(|out| sink::Checkpointing {
            out,
            every: plan.checkpoint_every,
            plan_hash: plan_hash.clone(),
            process,
            processes: plan.workers / threads,
            workers: plan.workers,
            shards: cx.shards.len() as u32,
            local: process * threads..(process + 1) * threads,
            slack: plan.policy.slack(),
            quota,
        }),
    };
    // A worker that panics, or a sink that cannot write, must not leave the
    // others waiting forever: it raises the flag, and every worker then drops
    // the dataflow and stops.
    let failed = Arc::new(AtomicBool::new(false));
    let (sender, receiver) = mpsc::channel();
    let sink_workload = Arc::clone(&workload);
    let sink_failed = Arc::clone(&failed);
    let sink_thread = std::thread::Builder::new()
        .name("forestall-sink".into())
        .spawn(move || {
            sink::run_sink(
                receiver,
                writer,
                sink_workload,
                sink_config,
                observer,
                &sink_failed,
            )
        })
        .map_err(RunError::SinkThread)?;

    // Real disruptors: one CPU-burning thread per emulated machine, burning
    // while its machine is disrupted (on top of the emulated slowdown).
    let disruptors: Vec<CpuDisruptor> = match (&plan.pattern, plan.disruptor) {
        (
            Pattern::DisruptedMachine {
                workers_per_machine,
                ..
            },
            DisruptorMode::Cpu,
        ) => (0..plan.workers.div_ceil(*workers_per_machine))
            // Each process burns for the machines whose first worker it
            // hosts, so a disrupted machine's CPU load lands in its process.
            .filter(|machine| cx.process_of(machine * workers_per_machine) == process)
            .map(|machine| CpuDisruptor::start(cx.schedule.clone(), machine, cx.start, 1))
            .collect(),
        _ => Vec::new(),
    };

    let config = match cluster {
        Some(c) => c.timely_config(),
        None if plan.workers == 1 => timely::Config::thread(),
        None => timely::Config::process(plan.workers as usize),
    };
    let started = Instant::now();
    let worker_cx = Arc::clone(&cx);

    let check_plans = cluster.is_some();
    let mismatch: Arc<std::sync::Mutex<Option<(usize, String)>>> = Arc::default();
    let worker_mismatch = Arc::clone(&mismatch);
    let connected = Arc::new(AtomicBool::new(false));
    if let Some(c) = cluster {
        cluster::watch_connection(c, Arc::clone(&connected));
    }
    let result = timely::execute(config, move |worker| {
        // Workers start once timely has connected every process.
        connected.store(true, Ordering::Relaxed);
        let _flag = RaiseOnPanic(&failed);
        if check_plans {
            if let Some(other) = cluster::first_other_plan(worker, &plan_hash) {
                if let Ok(mut slot) = worker_mismatch.lock() {
                    slot.get_or_insert(other);
                }
                return;
            }
        }
        dataflow::build_training_dataflow(worker, Arc::clone(&worker_cx), sender.clone());
        while worker.has_dataflows() && !failed.load(Ordering::Relaxed) {
            worker.step_or_park(Some(Duration::from_millis(20)));
        }
        if failed.load(Ordering::Relaxed) {
            for id in worker.installed_dataflows() {
                worker.drop_dataflow(id);
            }
        }
    })
    .and_then(|guards| {
        guards
            .join()
            .into_iter()
            .collect::<Result<Vec<()>, String>>()
    });
    let wall_us = started.elapsed().as_micros() as u64;
    for d in disruptors {
        d.stop();
    }
    if let Some((worker, found)) = mismatch.lock().ok().and_then(|mut m| m.take()) {
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
    result.map_err(RunError::Timely)?;
    if process != 0 {
        return Ok(None);
    }
    // The iterations before the checkpoint come from the trace, with their
    // ideal time and bound estimated as the sink estimates them.
    let mut kept_workers: BTreeMap<u64, Vec<WorkerRecord>> = BTreeMap::new();
    for w in &kept_rows.workers {
        kept_workers.entry(w.iteration).or_default().push(w.clone());
    }
    let (mut kept_ideal_us, mut kept_bound_us, mut kept_unit_bound_us) = (0u64, 0u64, 0u64);
    for it in &kept_rows.iterations {
        let workers = kept_workers
            .get(&it.iteration)
            .map_or(&[][..], Vec::as_slice);
        kept_ideal_us += bound::iteration_ideal_us(workers, it.start_us);
        let b = bound::iteration_bounds(workers, it.start_us, plan.pace_ns_per_row);
        kept_bound_us += b.fluid_us;
        kept_unit_bound_us += b.units_us;
    }
    let mut iterations = kept_rows.iterations;
    iterations.extend(sink_output.iterations);
    let params = sink_output
        .final_params
        .ok_or(RunError::Incomplete)?
        .to_vec();
    let eval = sink_output.final_eval.ok_or(RunError::Incomplete)?;
    Ok(Some(RunOutput {
        iterations,
        checkpoints: sink_output.checkpoints,
        first_iteration: first,
        digest: params_digest(&params),
        params,
        eval,
        wall_us,
        parts: sink_output.parts,
        ideal_us: kept_ideal_us + sink_output.ideal_us,
        bound_us: kept_bound_us + sink_output.bound_us,
        unit_bound_us: kept_unit_bound_us + sink_output.unit_bound_us,
        units_total: sink_output.units_total,
        units_reassigned: sink_output.units_reassigned,
        units_cloned: sink_output.units_cloned,
    }))
}
