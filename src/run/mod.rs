//! The run: a job's training as a timely dataflow on W workers.
//!
//! [`run_job`] lays the job out ([`JobContext`]), starts the [`sink`] thread,
//! runs the dataflow of [`dataflow`] on timely workers, and returns the final
//! parameters with every iteration's record.

pub mod cluster;
pub mod context;
pub mod dataflow;
pub mod detect;
pub mod holdings;
pub mod messages;
pub mod oplog;
pub mod placement;
pub mod plain;
pub mod reduce;
pub mod sink;
pub mod worker;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

pub use cluster::ClusterSpec;
pub use context::JobContext;
pub use detect::{detect_laggard, LaggardReport};
pub use sink::{Observer, SinkEvent};

use crate::inject::{CpuDisruptor, Pattern};
use crate::spec::{hex, DisruptorMode, JobPlan};
use crate::trace::{IterationRecord, TraceError, TraceStamp, TraceWriter};
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
    /// The online predictor could not be loaded.
    #[error("predictor: {0}")]
    Predictor(String),
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
    /// The run ended without the final parameters (a worker stopped early).
    #[error("the run ended before the final parameters were produced")]
    Incomplete,
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
    /// Units computed.
    pub units_total: u64,
    /// Units computed by a peer of their owner (rapid reassignment).
    pub units_reassigned: u64,
    /// Speculative copies computed (speculation).
    pub units_cloned: u64,
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
    run_job_in_cluster(plan, workload, trace_dir, stamp, observer, None)?
        .ok_or(RunError::Incomplete)
}

/// As [`run_job`], as process `cluster.process` of a multi-process job
/// (timely's cluster mode) when `cluster` is given. Process 0 hosts worker 0,
/// which assembles the iterations and the final parameters: it returns the
/// output; the other processes write their workers' unit records into the same
/// trace directory (parts named by process) and return `None`.
pub fn run_job_in_cluster(
    plan: &JobPlan,
    workload: Arc<dyn Workload>,
    trace_dir: &Path,
    stamp: TraceStamp,
    observer: Option<Observer>,
    cluster: Option<&ClusterSpec>,
) -> Result<Option<RunOutput>, RunError> {
    let predictor =
        context::online_predictor(plan).map_err(|e| RunError::Predictor(e.to_string()))?;
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
        context.threads_per_process = c.threads;
        if let Some(epoch) = c.epoch_us {
            // One job clock for all processes: the launcher's origin, read
            // through each process's wall clock (on one host the same clock;
            // across hosts as close as their clocks are synchronised).
            context.start = cluster::instant_of_epoch(epoch);
        }
    }
    let cx = Arc::new(context);
    let process = cluster.map_or(0, |c| c.process);
    let writer = TraceWriter::try_new(trace_dir, process, stamp)?;
    let (sender, receiver) = mpsc::channel();
    let sink_config = sink::SinkConfig {
        iterations: plan.iterations,
        eval_every: plan.eval_every,
        part_iterations: plan.part_iterations,
        rows_per_iteration: cx.partitioning.rows_per_iteration(),
        units_per_iteration: plan.partitions * plan.units_per_partition,
    };
    let sink_workload = Arc::clone(&workload);
    let sink_thread = std::thread::Builder::new()
        .name("forestall-sink".into())
        .spawn(move || sink::run_sink(receiver, writer, sink_workload, sink_config, observer))
        .map_err(|e| RunError::Timely(format!("failed to start the sink thread: {e}")))?;

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
    // A worker that panics must not leave its peers waiting for it forever:
    // it raises the flag, and every worker then drops the dataflow and stops.
    let failed = Arc::new(AtomicBool::new(false));
    let plan_hash = plan.hash();
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
    result.map_err(RunError::Timely)?;
    let sink_output = sink_output?;
    if process != 0 {
        return Ok(None);
    }
    let params = sink_output
        .final_params
        .ok_or(RunError::Incomplete)?
        .to_vec();
    let eval = sink_output.final_eval.ok_or(RunError::Incomplete)?;
    Ok(Some(RunOutput {
        iterations: sink_output.iterations,
        digest: params_digest(&params),
        params,
        eval,
        wall_us,
        parts: sink_output.parts,
        ideal_us: sink_output.ideal_us,
        units_total: sink_output.units_total,
        units_reassigned: sink_output.units_reassigned,
        units_cloned: sink_output.units_cloned,
    }))
}
