//! The steps of [`super::run_job_in_cluster`] around the dataflow: the job's
//! context for this process, the trace it continues, the sink's settings and
//! thread, the CPU disruptors, the timely workers, and the output assembled
//! from the sink's rows and those a resumed run kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::sink::{self, Observer, SinkError, SinkEvent, SinkOutput};
use super::{bound, cluster, context, dataflow, params_digest};
use super::{ClusterSpec, JobContext, RunError, RunOutput};
use crate::checkpoint::Checkpoint;
use crate::fsutil::Quota;
use crate::inject::shaper::LinkShaper;
use crate::inject::{CpuDisruptor, Pattern};
use crate::spec::{DisruptorMode, JobPlan};
use crate::trace::writer::Kept;
use crate::trace::{TraceStamp, TraceWriter, WorkerRecord};
use crate::workload::Workload;

/// Raises its flag when dropped during a panic.
struct RaiseOnPanic<'a>(&'a AtomicBool);

impl Drop for RaiseOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// The job's context for this process: the plan's predictor, the cluster's
/// shards and clock, and the checkpoint it continues from.
pub(super) fn context_for(
    plan: &JobPlan,
    workload: &Arc<dyn Workload>,
    cluster: Option<&ClusterSpec>,
    resume: Option<Checkpoint>,
    stop_after: Option<u64>,
) -> Result<JobContext, RunError> {
    let predictor = context::online_predictor(plan).map_err(RunError::Predictor)?;
    let mut context = JobContext::new(plan.clone(), Arc::clone(workload), predictor);
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
        // (a pipeline's shards are one per worker already, cut at its
        // stages' boundaries)
        if plan.parallel.is_none() {
            context.shards = context::even_shards(context.dims, plan.workers);
        }
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
    if let Some(stop) = stop_after {
        context.end = stop.clamp(context.first_iteration() + 1, plan.iterations);
    }
    Ok(context)
}

/// This process's trace writer under `trace_dir`, and the rows a resumed
/// run keeps from the trace before its checkpoint.
pub(super) fn open_trace(
    cx: &JobContext,
    trace_dir: &Path,
    stamp: TraceStamp,
    cluster: Option<&ClusterSpec>,
) -> Result<(TraceWriter, Kept), RunError> {
    let process = cluster.map_or(0, |c| c.process);
    Ok(if cx.resume.is_some() {
        let processes = cluster.map_or(1, ClusterSpec::processes);
        TraceWriter::resume(trace_dir, (process, processes), stamp, cx.first_iteration())?
    } else {
        (
            TraceWriter::try_new(trace_dir, process, stamp)?,
            Kept::default(),
        )
    })
}

/// The sink's settings for process `process`, checkpointing into
/// `checkpoint_dir` if given.
pub(super) fn sink_config(
    cx: &JobContext,
    process: u32,
    checkpoint_dir: Option<PathBuf>,
    quota: Quota,
) -> sink::SinkConfig {
    let plan = &cx.plan;
    let threads = cx.threads_per_process;
    sink::SinkConfig {
        iterations: cx.end,
        eval_every: plan.eval_every,
        part_iterations: plan.part_iterations,
        rows_per_iteration: cx.partitioning.rows_per_iteration(),
        units_per_iteration: plan.partitions * plan.units_per_partition,
        first_iteration: cx.first_iteration(),
        pace_ns_per_row: plan.pace_ns_per_row,
        job_start: cx.start,
        pipeline: plan.parallel.clone().map(|layout| {
            let units = u64::from(plan.partitions * plan.units_per_partition).max(1);
            let micro_rows = match plan.micro_batch {
                0 => cx.partitioning.rows_per_iteration() / units,
                m => u64::from(m),
            };
            (layout, micro_rows as u32)
        }),
        checkpoints: checkpoint_dir.map(|out| sink::Checkpointing {
            out,
            every: cx.checkpoint_every(),
            plan_hash: plan.hash(),
            process,
            processes: plan.workers / threads,
            workers: plan.workers,
            shards: cx.shards.len() as u32,
            local: process * threads..(process + 1) * threads,
            slack: plan.policy.slack(),
            quota,
        }),
    }
}

/// Starts the sink's thread. A sink that cannot write raises `failed`.
pub(super) fn spawn_sink(
    receiver: Receiver<SinkEvent>,
    writer: TraceWriter,
    workload: Arc<dyn Workload>,
    config: sink::SinkConfig,
    observer: Option<Observer>,
    failed: Arc<AtomicBool>,
) -> Result<JoinHandle<Result<SinkOutput, SinkError>>, RunError> {
    std::thread::Builder::new()
        .name("forestall-sink".into())
        .spawn(move || sink::run_sink(receiver, writer, workload, config, observer, &failed))
        .map_err(|e| RunError::Timely(format!("failed to start the sink thread: {e}")))
}

/// Real disruptors: one CPU-burning thread per emulated machine, burning
/// while its machine is disrupted (on top of the emulated slowdown). Each
/// process burns for the machines whose first worker it hosts, so a
/// disrupted machine's CPU load lands in its process.
pub(super) fn start_disruptors(cx: &JobContext, process: u32) -> Vec<CpuDisruptor> {
    let plan = &cx.plan;
    match (&plan.pattern, plan.disruptor) {
        (
            Pattern::DisruptedMachine {
                workers_per_machine,
                ..
            },
            DisruptorMode::Cpu,
        ) => (0..plan.workers.div_ceil(*workers_per_machine))
            .filter(|machine| cx.process_of(machine * workers_per_machine) == process)
            .map(|machine| CpuDisruptor::start(cx.schedule.clone(), machine, cx.start, 1))
            .collect(),
        _ => Vec::new(),
    }
}

/// `slow-link` with `disruptor = "tc"`: this process's host interface
/// shaped as the schedule draws for its first worker. A job of one process
/// has no host link to shape: refused.
pub(super) fn start_shaper(
    cx: &JobContext,
    cluster: Option<&ClusterSpec>,
) -> Result<Option<LinkShaper>, RunError> {
    if cx.plan.disruptor != DisruptorMode::Tc {
        return Ok(None);
    }
    let Some(c) = cluster else {
        return Err(RunError::Timely(
            "slow-link with disruptor = \"tc\" shapes the network interface of each process's \
             host: run the job's processes on hosts (--hostfile, or a scheduler's environment)"
                .into(),
        ));
    };
    let first = c.process * c.threads;
    LinkShaper::start(
        &c.addresses[c.process as usize],
        cx.schedule.clone(),
        first,
        std::sync::Arc::clone(&cx.iteration_now),
    )
    .map(Some)
    .map_err(RunError::Connect)
}

/// What the timely workers came to: their result, and a worker of another
/// process that runs a different plan, with that plan's hash, if one does.
pub(super) struct Executed {
    pub(super) result: Result<(), String>,
    pub(super) mismatch: Option<(usize, String)>,
}

/// Connects this process to the others ([`ClusterSpec::connect`]). A process
/// above 0 whose job clock has no shared origin (no launcher's
/// `--epoch-us`) takes process 0's, as the clock exchange measured it.
pub(super) fn connect(
    c: &ClusterSpec,
    context: &mut JobContext,
) -> Result<cluster::Network, RunError> {
    let origin_us = c.epoch_us.unwrap_or_else(|| {
        cluster::unix_now_us().saturating_sub(context.start.elapsed().as_micros() as u64)
    });
    let network = c
        .connect(&context.plan.hash(), origin_us)
        .map_err(RunError::Connect)?;
    if let (None, Some(sync)) = (c.epoch_us, network.clock) {
        context.start = cluster::instant_of_epoch(sync.origin_us);
        tracing::info!(
            "process {}: the job clock is process 0's, whose wall clock is {:+} µs from this \
             one's (best round trip {} µs of {})",
            c.process,
            sync.offset_us,
            sync.round_trip_us,
            crate::run::handshake::SYNC_ROUNDS
        );
    }
    Ok(network)
}

/// Runs the training dataflow on this process's timely workers until it
/// ends or `failed` is raised (a worker that panics raises it too, so the
/// others drop the dataflow and stop instead of waiting forever). Across
/// processes the workers first check that every process runs `cx`'s plan.
pub(super) fn execute(
    cx: &Arc<JobContext>,
    network: Option<cluster::Network>,
    sender: Sender<SinkEvent>,
    failed: Arc<AtomicBool>,
) -> Executed {
    let check_plans = network.is_some();
    let built = match network {
        Some(n) => Ok((n.builders, n.guard)),
        None if cx.plan.workers == 1 => timely::CommunicationConfig::Thread.try_build(),
        None => timely::CommunicationConfig::Process(cx.plan.workers as usize).try_build(),
    };
    let (builders, others) = match built {
        Ok(b) => b,
        Err(e) => {
            return Executed {
                result: Err(e),
                mismatch: None,
            }
        }
    };
    let worker_cx = Arc::clone(cx);
    let plan_hash = cx.plan.hash();
    let mismatch: Arc<Mutex<Option<(usize, String)>>> = Arc::default();
    let worker_mismatch = Arc::clone(&mismatch);
    let config = timely::WorkerConfig::default();
    let result = timely::execute::execute_from(builders, others, config, move |worker| {
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
    })
    .map(|_| ());
    let mismatch = mismatch.lock().ok().and_then(|mut m| m.take());
    Executed { result, mismatch }
}

/// Process 0's output: the rows a resumed run kept from the trace (their
/// ideal time and bounds estimated as the sink estimates them), then the
/// sink's.
pub(super) fn output(
    cx: &JobContext,
    kept: Kept,
    sink: SinkOutput,
    wall_us: u64,
) -> Result<RunOutput, RunError> {
    let mut kept_workers: BTreeMap<u64, Vec<WorkerRecord>> = BTreeMap::new();
    for w in &kept.workers {
        kept_workers.entry(w.iteration).or_default().push(w.clone());
    }
    let (mut kept_ideal_us, mut kept_bound_us, mut kept_unit_bound_us) = (0u64, 0u64, 0u64);
    for it in &kept.iterations {
        let workers = kept_workers
            .get(&it.iteration)
            .map_or(&[][..], Vec::as_slice);
        kept_ideal_us += bound::iteration_ideal_us(workers, it.start_us);
        let b = bound::iteration_bounds(workers, it.start_us, cx.plan.pace_ns_per_row);
        kept_bound_us += b.fluid_us;
        kept_unit_bound_us += b.units_us;
    }
    let mut iterations = kept.iterations;
    iterations.extend(sink.iterations);
    let params = sink.final_params.ok_or(RunError::Incomplete)?.to_vec();
    let eval = sink.final_eval.ok_or(RunError::Incomplete)?;
    Ok(RunOutput {
        iterations,
        checkpoints: sink.checkpoints,
        first_iteration: cx.first_iteration(),
        digest: params_digest(&params),
        params,
        eval,
        wall_us,
        parts: sink.parts,
        ideal_us: kept_ideal_us + sink.ideal_us,
        bound_us: kept_bound_us + sink.bound_us,
        unit_bound_us: kept_unit_bound_us + sink.unit_bound_us,
        units_total: sink.units_total,
        units_reassigned: sink.units_reassigned,
        units_cloned: sink.units_cloned,
        stage_memory: sink.stage_memory,
        stage_bubble: sink.stage_bubble,
        recuts: sink.recuts,
        stage_evaluations: sink.stage_evaluations,
        bytes_sent: sink.bytes_sent,
    })
}
