//! The sink: one thread per process that receives records from the workers,
//! has parameter versions evaluated on the test rows, assembles the
//! per-iteration rows, writes trace parts, and tells an observer about
//! progress.
//!
//! It runs beside the dataflow, not in it, so writing Parquet never lengthens
//! a worker's iteration; the evaluations run on a thread of idle priority
//! ([`Evaluator`]) so that they take no core the workers could use.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;

use crate::checkpoint::{store, CheckpointError, CutHeader, ShardState};
use crate::detect::LaggardReport;
use crate::fsutil::Quota;
use crate::ops::placements::{write_placements, PlacementEntry};
use crate::run::evaluator::{Evaluator, PENDING_BUDGET};
use crate::run::staged_eval::StagedEvaluations;
use crate::trace::{
    IterationRecord, TraceError, TraceWriter, UnitAction, UnitRecord, WorkerRecord,
};
use crate::workload::{Evaluation, Workload};

/// How long the sink waits for a worker's event before it looks for finished
/// evaluations.
const EVALUATIONS_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// What workers tell the sink.
#[derive(Debug)]
pub enum SinkEvent {
    /// A worker's unit rows for one iteration.
    Units(Vec<UnitRecord>),
    /// Every worker's row for one iteration, with the laggard report (worker 0).
    Iteration {
        /// The workers' rows.
        workers: Vec<WorkerRecord>,
        /// Who lagged.
        report: LaggardReport,
    },
    /// An iteration's mean training loss (owner of shard 0).
    TrainLoss {
        /// Iteration.
        iteration: u64,
        /// Mean log-loss over the iteration's rows.
        loss: f64,
    },
    /// Backup workers: the partitions iteration `iteration` dropped (shard 0's
    /// owner, when it decides).
    Dropped {
        /// Iteration.
        iteration: u64,
        /// Dropped partitions, ascending.
        partitions: Vec<u32>,
    },
    /// A worker began `iteration`: it has handed over every record of an
    /// iteration before `iteration − slack`.
    Began {
        /// The worker.
        worker: u32,
        /// The iteration it began.
        iteration: u64,
        /// When, on the job clock.
        job_us: u64,
        /// Worker 0 at a checkpoint iteration: the online predictor's history.
        history: Option<Vec<f64>>,
        /// At a checkpoint iteration: the holders of the worker's partitions.
        placement: Option<Vec<(u32, u32)>>,
    },
    /// A parameter shard's state at a checkpoint version (its owner).
    Shard(ShardState),
    /// A shard owner found the training diverged at `iteration`.
    Diverged {
        /// Iteration whose reduction gave a non-finite value.
        iteration: u64,
        /// What was not finite.
        what: String,
    },
    /// The job's processes agreed to stop at version `end`, before the
    /// plan's last ([`crate::run::stop`]): it is final and checkpointed.
    Stop {
        /// The final version.
        end: u64,
    },
    /// A pipeline stage worker's iteration kept at most `activations`
    /// micro-batches' activations for their backwards, of `bytes`.
    StageMemory {
        /// The worker.
        worker: u32,
        /// Its stage.
        stage: u32,
        /// Activations kept at once, at most.
        activations: u32,
        /// Their bytes, at most.
        bytes: u64,
    },
    /// `rebalance-stages` moved work from iteration `iteration` on (worker 0).
    Recut {
        /// The first iteration with the new placement.
        iteration: u64,
        /// It.
        placement: crate::pipeline::Placement,
    },
    /// A pipeline stage worker's operations of an iteration (worker 0's
    /// sink writes them all to `ops.parquet`).
    Ops(Vec<crate::run::messages::StageOp>),
    /// A pipeline's last stage scored one test batch of `version`.
    Scores {
        /// The parameter version.
        version: u64,
        /// The batch, among the workload's test batches.
        batch: u32,
        /// Each row's score and whether its label is positive.
        scores: Vec<(f64, bool)>,
    },
    /// A complete parameter version (worker 0); version `iterations` is final.
    Params {
        /// Version.
        version: u64,
        /// All coordinates.
        values: Arc<Vec<f64>>,
    },
}

/// What an observer hears of the run's progress.
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// Every worker finished this iteration (its row may still wait for its
    /// evaluation).
    Trained {
        /// The iteration.
        iteration: u64,
    },
    /// An iteration's row is complete; rows come in iteration order.
    Row(&'a IterationRecord),
}

/// Hears of each iteration as it is trained, then of its row.
pub type Observer = Box<dyn FnMut(Progress<'_>) + Send>;

/// What the sink hands back when the run is over.
#[derive(Debug)]
pub struct SinkOutput {
    /// One row per iteration, in order.
    pub iterations: Vec<IterationRecord>,
    /// The final parameters, if the last version arrived.
    pub final_params: Option<Arc<Vec<f64>>>,
    /// Test quality of the final parameters.
    pub final_eval: Option<Evaluation>,
    /// Trace part files written.
    pub parts: Vec<PathBuf>,
    /// Σ over iterations of the estimated iteration time without the injected
    /// delays: max over workers of (finish − iteration start − injected delay).
    pub ideal_us: u64,
    /// Σ over iterations of their load-balancing bound
    /// ([`crate::run::bound`]), µs.
    pub bound_us: u64,
    /// Σ over iterations of their bound with whole units, µs.
    pub unit_bound_us: u64,
    /// Units computed, and of those computed by a peer of their owner.
    pub units_total: u64,
    /// Units computed by a peer of their owner.
    pub units_reassigned: u64,
    /// Speculative copies computed.
    pub units_cloned: u64,
    /// The iteration at which training diverged, and what was not finite.
    pub diverged: Option<(u64, String)>,
    /// Checkpoints completed by this process (their versions).
    pub checkpoints: Vec<u64>,
    /// A pipeline's activation memory by stage: the most activations one
    /// of its workers kept at once in an iteration, and their bytes.
    pub stage_memory: BTreeMap<u32, (u32, u64)>,
    /// A pipeline's bubble by stage: Σ over its workers and the iterations
    /// of the time outside its passes (the iteration's wall time less the
    /// worker's compute and injected delay), and Σ of the wall times, µs.
    pub stage_bubble: BTreeMap<u32, (u64, u64)>,
    /// `rebalance-stages`: each new placement, from its first iteration.
    pub recuts: Vec<(u64, crate::pipeline::Placement)>,
    /// A pipeline's evaluations: versions scored through its stages, and
    /// whole (their scores did not all arrive).
    pub stage_evaluations: (u32, u32),
    /// Σ over the iterations and workers of the bytes they sent (gradient
    /// slices; a pipeline's activations and their gradients too).
    pub bytes_sent: u64,
}

/// Why the sink stopped the run.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// A trace part could not be written.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A checkpoint file could not be written.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The operation trace could not be written.
    #[error(transparent)]
    Ops(#[from] crate::ops::OpsError),
}

#[derive(Debug, Default)]
struct Pending {
    timing: Option<(u64, LaggardReport)>,
    loss: Option<f64>,
    eval: Option<Evaluation>,
    dropped: Vec<u32>,
}

/// Settings of the sink.
pub struct SinkConfig {
    /// Training iterations; version `iterations` is the final model.
    pub iterations: u64,
    /// Evaluate on the test rows every this many iterations (and the last one).
    pub eval_every: u64,
    /// Iterations per trace part.
    pub part_iterations: u64,
    /// Rows sampled per iteration.
    pub rows_per_iteration: u64,
    /// Units per iteration.
    pub units_per_iteration: u32,
    /// The first iteration of this run (a resumed run's checkpoint).
    pub first_iteration: u64,
    /// The job's pace, ns per row (0: native speed), for the bound.
    pub pace_ns_per_row: u64,
    /// The job clock's origin.
    pub job_start: std::time::Instant,
    /// A pipeline's layout and the rows of its micro-batches; None for
    /// data-parallel training.
    pub pipeline: Option<(crate::pipeline::StageLayout, u32)>,
    /// Checkpoints, if the job writes them.
    pub checkpoints: Option<Checkpointing>,
}

/// Where and how this process writes its share of each checkpoint.
#[derive(Debug, Clone)]
pub struct Checkpointing {
    /// The job's output directory.
    pub out: std::path::PathBuf,
    /// Every this many iterations, and the final one.
    pub every: u64,
    /// The job's plan hash.
    pub plan_hash: String,
    /// This process.
    pub process: u32,
    /// Processes in the job.
    pub processes: u32,
    /// Workers in the job.
    pub workers: u32,
    /// Parameter shards in the job (owned by workers `0..shards`).
    pub shards: u32,
    /// This process's workers.
    pub local: std::ops::Range<u32>,
    /// The policy's slack (SSP): how far behind a worker's late records may be.
    pub slack: u64,
    /// Testing: the bytes the checkpoint files may take.
    pub quota: Quota,
}

impl Checkpointing {
    /// How many shards this process's workers own (each writes one file
    /// per checkpoint).
    fn local_shards(&self) -> u32 {
        self.local.end.min(self.shards) - self.local.start.min(self.shards)
    }
}

/// The checkpoints' progress in one process's sink.
struct Cuts {
    cfg: Checkpointing,
    iterations: u64,
    /// The latest iteration each local worker began.
    began: Vec<u64>,
    /// Shard files written, per version.
    shards: BTreeMap<u64, u32>,
    /// Worker 0's begin of each checkpoint iteration: job clock and history.
    begun: BTreeMap<u64, (u64, Vec<f64>)>,
    /// The local workers' partitions' holders at each checkpoint iteration.
    placement: BTreeMap<u64, Vec<(u32, u32)>>,
    /// A pipeline's placements from their first iteration on, as worker 0
    /// moved them (process 0).
    stages: Vec<(u64, crate::pipeline::Placement)>,
    /// The next checkpoint to complete.
    next: Option<u64>,
}

impl Cuts {
    fn new(cfg: Checkpointing, iterations: u64, first: u64) -> Self {
        let began = vec![first; cfg.local.len()];
        let mut cuts = Self {
            cfg,
            iterations,
            began,
            shards: BTreeMap::new(),
            begun: BTreeMap::new(),
            placement: BTreeMap::new(),
            stages: Vec::new(),
            next: None,
        };
        cuts.next = cuts.after(first);
        cuts
    }

    /// Worker `worker` began `iteration` (with, at a checkpoint iteration,
    /// worker 0's predictor history and its partitions' holders).
    fn on_began(
        &mut self,
        worker: u32,
        iteration: u64,
        job_us: u64,
        history: Option<Vec<f64>>,
        placement: Option<Vec<(u32, u32)>>,
    ) {
        if let Some(mut pairs) = placement {
            self.placement
                .entry(iteration)
                .or_default()
                .append(&mut pairs);
        }
        let local = self.cfg.local.clone();
        if let Some(b) = self.began.get_mut((worker - local.start) as usize) {
            *b = (*b).max(iteration);
        }
        if worker == 0 && self.next.is_some_and(|c| c <= iteration) {
            self.begun
                .insert(iteration, (job_us, history.unwrap_or_default()));
        }
    }

    /// The run ends at version `end`, which is checkpointed whatever the
    /// plan's `every`.
    fn stop_at(&mut self, end: u64) {
        self.iterations = self.iterations.min(end);
        self.next = Some(self.next.map_or(end, |c| c.min(end)));
    }

    /// The first checkpoint version after `version`.
    fn after(&self, version: u64) -> Option<u64> {
        let every = self.cfg.every;
        (every > 0 && version < self.iterations)
            .then(|| ((version / every + 1) * every).min(self.iterations))
    }

    /// The checkpoint whose cut is due, if every local record before it is in
    /// (`assembled`: the iteration rows assembled so far, process 0).
    fn due(&self, assembled: u64) -> Option<u64> {
        let c = self.next?;
        let shards_in = self.shards.get(&c).copied().unwrap_or(0) == self.cfg.local_shards();
        let began = self.began.iter().min().copied().unwrap_or(u64::MAX);
        let last = self.iterations.saturating_sub(1);
        let ready = c < self.iterations
            && shards_in
            && c + self.cfg.slack <= last
            && began >= c + self.cfg.slack
            && (self.cfg.process != 0 || (assembled >= c && self.begun.contains_key(&c)));
        ready.then_some(c)
    }

    /// Writes this process's cut of checkpoint `c` (its records before `c`
    /// are committed); process 0 then prunes old checkpoints.
    fn write_cut(&mut self, c: u64, job_us: u64) -> Result<(), CheckpointError> {
        let history = self.begun.remove(&c).map(|b| b.1).unwrap_or_default();
        let cut = CutHeader {
            iteration: c,
            process: self.cfg.process,
            processes: self.cfg.processes,
            workers: self.cfg.workers,
            shards: Some(self.cfg.shards),
            plan_hash: self.cfg.plan_hash.clone(),
            job_us,
            placement: self.placement.remove(&c).unwrap_or_default(),
            stages: (self.stages.iter().rev())
                .find(|(from, _)| *from <= c)
                .map(|(_, p)| p.clone()),
        };
        store::write_cut(&self.cfg.out, &cut, &history, &self.cfg.quota)?;
        if self.cfg.process == 0 {
            store::prune(&self.cfg.out)?;
        }
        self.shards.retain(|&v, _| v > c);
        self.begun.retain(|&v, _| v > c);
        self.placement.retain(|&v, _| v > c);
        self.next = self.after(c);
        Ok(())
    }
}

/// Runs the sink until every sender is gone.
///
/// A failure to write (or a diverged training) raises `stop`, so the workers
/// stop instead of computing iterations nobody can record.
pub fn run_sink(
    events: Receiver<SinkEvent>,
    writer: TraceWriter,
    workload: Arc<dyn Workload>,
    config: SinkConfig,
    observer: Option<Observer>,
    stop: &AtomicBool,
) -> Result<SinkOutput, SinkError> {
    let result = sink_loop(events, writer, workload, config, observer, stop);
    if result.as_ref().map_or(true, |o| o.diverged.is_some()) {
        stop.store(true, Ordering::Relaxed);
    }
    result
}

fn sink_loop(
    events: Receiver<SinkEvent>,
    writer: TraceWriter,
    workload: Arc<dyn Workload>,
    config: SinkConfig,
    observer: Option<Observer>,
    stop: &AtomicBool,
) -> Result<SinkOutput, SinkError> {
    let mut sink = Sink::new(writer, workload, config, observer, stop);
    loop {
        match events.recv_timeout(EVALUATIONS_POLL) {
            Ok(event) => sink.take(event)?,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        let done = sink.evaluator.ready();
        sink.settle(done)?;
    }
    let mut owed = sink.evaluator.finish();
    if let Some(staged) = sink.staged.as_mut() {
        let workload = Arc::clone(&sink.workload);
        owed.extend(staged.owed(|params| workload.evaluate(params)));
        sink.out.stage_evaluations = staged.counts;
    }
    sink.settle(owed)?;
    sink.finish()
}

/// Whether iteration `t`'s row carries an evaluation (of version `t`):
/// every `eval_every` iterations and the last of `iterations`.
pub fn wants_eval(t: u64, eval_every: u64, iterations: u64) -> bool {
    t.is_multiple_of(eval_every.max(1)) || t + 1 == iterations
}

/// The sink's state between events.
struct Sink<'a> {
    writer: TraceWriter,
    workload: Arc<dyn Workload>,
    config: SinkConfig,
    observer: Option<Observer>,
    stop: &'a AtomicBool,
    /// Scores the versions the rows carry.
    evaluator: Evaluator,
    /// A pipeline's: evaluations through its stages.
    staged: Option<StagedEvaluations>,
    out: SinkOutput,
    cuts: Option<Cuts>,
    /// Iteration rows waiting for their parts, by iteration.
    pending: BTreeMap<u64, Pending>,
    /// Records not yet in a part.
    units: Vec<UnitRecord>,
    /// A pipeline's operations (worker 0's sink), written at the end.
    ops: Vec<crate::run::messages::StageOp>,
    workers: Vec<WorkerRecord>,
    /// `out.iterations[written..]` are the rows not yet in a part.
    written: usize,
    /// The next row to assemble.
    next_row: u64,
    /// The iteration the current part ends before.
    part_end: u64,
}

impl<'a> Sink<'a> {
    fn new(
        writer: TraceWriter,
        workload: Arc<dyn Workload>,
        config: SinkConfig,
        observer: Option<Observer>,
        stop: &'a AtomicBool,
    ) -> Self {
        let cuts = config
            .checkpoints
            .clone()
            .map(|c| Cuts::new(c, config.iterations, config.first_iteration));
        let first = config.first_iteration;
        let part_end = (first / config.part_iterations + 1) * config.part_iterations;
        let staged = (workload.staged())
            .filter(|_| config.pipeline.is_some())
            .map(|s| StagedEvaluations::new(s.test_batches().len() as u32));
        Self {
            evaluator: Evaluator::start(Arc::clone(&workload), PENDING_BUDGET),
            staged,
            writer,
            workload,
            observer,
            stop,
            out: SinkOutput {
                iterations: Vec::new(),
                final_params: None,
                final_eval: None,
                parts: Vec::new(),
                ideal_us: 0,
                bound_us: 0,
                unit_bound_us: 0,
                units_total: 0,
                units_reassigned: 0,
                units_cloned: 0,
                stage_memory: BTreeMap::new(),
                stage_bubble: BTreeMap::new(),
                recuts: Vec::new(),
                stage_evaluations: (0, 0),
                bytes_sent: 0,
                diverged: None,
                checkpoints: Vec::new(),
            },
            cuts,
            pending: BTreeMap::new(),
            units: Vec::new(),
            ops: Vec::new(),
            workers: Vec::new(),
            written: 0,
            next_row: first,
            part_end,
            config,
        }
    }

    /// Whether iteration `t`'s row carries an evaluation.
    fn wants_eval(&self, t: u64) -> bool {
        wants_eval(t, self.config.eval_every, self.config.iterations)
    }

    /// Takes one event from the workers.
    fn take(&mut self, event: SinkEvent) -> Result<(), SinkError> {
        match event {
            SinkEvent::Units(batch) => self.on_units(batch),
            SinkEvent::Iteration { workers, report } => self.on_iteration(workers, report),
            SinkEvent::Dropped {
                iteration,
                partitions,
            } => {
                self.pending.entry(iteration).or_default().dropped = partitions;
            }
            SinkEvent::TrainLoss { iteration, loss } => {
                self.pending.entry(iteration).or_default().loss = Some(loss);
            }
            SinkEvent::Began {
                worker,
                iteration,
                job_us,
                history,
                placement,
            } => {
                if let Some(cuts) = self.cuts.as_mut() {
                    cuts.on_began(worker, iteration, job_us, history, placement);
                }
            }
            SinkEvent::Shard(state) => {
                if let Some(cuts) = self.cuts.as_mut() {
                    store::write_shard(
                        &cuts.cfg.out,
                        &state,
                        &cuts.cfg.plan_hash,
                        &cuts.cfg.quota,
                    )?;
                    *cuts.shards.entry(state.iteration).or_default() += 1;
                }
            }
            SinkEvent::Diverged { iteration, what } => {
                self.out.diverged.get_or_insert((iteration, what));
                self.stop.store(true, Ordering::Relaxed);
            }
            SinkEvent::Stop { end } => {
                self.config.iterations = self.config.iterations.min(end);
                if let Some(cuts) = self.cuts.as_mut() {
                    cuts.stop_at(end);
                }
            }
            SinkEvent::Ops(mut ops) => self.ops.append(&mut ops),
            SinkEvent::Recut {
                iteration,
                placement,
            } => {
                if let Some(cuts) = self.cuts.as_mut() {
                    cuts.stages.push((iteration, placement.clone()));
                }
                self.out.recuts.push((iteration, placement));
            }
            SinkEvent::StageMemory {
                stage,
                activations,
                bytes,
                ..
            } => {
                let at = self.out.stage_memory.entry(stage).or_default();
                *at = (at.0.max(activations), at.1.max(bytes));
            }
            SinkEvent::Scores {
                version,
                batch,
                scores,
            } => {
                let workload = Arc::clone(&self.workload);
                let evaluate = |all: &[(f64, bool)]| Some(workload.staged()?.evaluation(all));
                let staged = self.staged.as_mut();
                if let Some(eval) =
                    staged.and_then(|s| s.on_scores(version, batch, scores, evaluate))
                {
                    self.place_evals(vec![(version, eval)]);
                }
            }
            SinkEvent::Params { version, values } => {
                let last = version >= self.config.iterations;
                if last {
                    self.out.final_params = Some(Arc::clone(&values));
                }
                if !last && !self.wants_eval(version) {
                    return Ok(());
                }
                if let Some(staged) = self.staged.as_mut() {
                    staged.expect(version, values);
                } else if last {
                    self.out.final_eval = Some(self.workload.evaluate(&values));
                } else if let Some(eval) = self.evaluator.submit(version, values) {
                    self.pending.entry(version).or_default().eval = Some(eval);
                }
            }
        }
        Ok(())
    }

    /// Evaluations into their rows (the final version's into the output).
    fn place_evals(&mut self, done: Vec<(u64, Evaluation)>) {
        for (version, eval) in done {
            if version >= self.config.iterations {
                self.out.final_eval = Some(eval);
            } else {
                self.pending.entry(version).or_default().eval = Some(eval);
            }
        }
    }

    /// Evaluations the evaluator finished, into their rows; then every row
    /// and checkpoint that is complete.
    fn settle(&mut self, done: Vec<(u64, Evaluation)>) -> Result<(), SinkError> {
        self.place_evals(done);
        self.assemble_rows()?;
        self.cut_due_checkpoints()
    }

    /// A worker's unit rows.
    fn on_units(&mut self, mut batch: Vec<UnitRecord>) {
        let count = |action: UnitAction| batch.iter().filter(|u| u.action == action).count() as u64;
        self.out.units_total += batch.len() as u64;
        self.out.units_reassigned += count(UnitAction::Reassigned);
        self.out.units_cloned += count(UnitAction::Clone);
        self.units.append(&mut batch);
    }

    /// Every worker's row of an iteration, with its laggard report.
    fn on_iteration(&mut self, mut w: Vec<WorkerRecord>, report: LaggardReport) {
        let t = w.first().map_or(0, |r| r.iteration);
        let barrier_wait_us = w.iter().map(|r| r.barrier_wait_us).sum();
        self.out.ideal_us += crate::run::bound::iteration_ideal_us(&w, report.start_us);
        match &self.config.pipeline {
            None => {
                let pace = self.config.pace_ns_per_row;
                let bound = crate::run::bound::iteration_bounds(&w, report.start_us, pace);
                self.out.bound_us += bound.fluid_us;
                self.out.unit_bound_us += bound.units_us;
            }
            Some((layout, micro_rows)) => {
                let wall = report.end_us.saturating_sub(report.start_us);
                for r in &w {
                    let at = self
                        .out
                        .stage_bubble
                        .entry(r.worker % layout.stages)
                        .or_default();
                    at.0 += wall.saturating_sub(r.compute_us + r.gt_delay_us);
                    at.1 += wall;
                }
                let (bound, shares) = self.pipeline_bounds_us(layout, *micro_rows, &w);
                self.out.bound_us += bound;
                self.out.unit_bound_us += shares;
            }
        }
        self.out.bytes_sent += w.iter().map(|r| r.bytes_sent).sum::<u64>();
        self.workers.append(&mut w);
        self.pending.entry(t).or_default().timing = Some((barrier_wait_us, report));
        if let Some(observer) = self.observer.as_mut() {
            observer(Progress::Trained { iteration: t });
        }
    }

    /// A paced pipeline iteration's bounds (0 at native speed): the best
    /// cuts and data shares for the slowdowns its stage workers met, and
    /// the best data shares at the job's cut (data alone moving between
    /// the replicas).
    fn pipeline_bounds_us(
        &self,
        layout: &crate::pipeline::StageLayout,
        micro_rows: u32,
        w: &[WorkerRecord],
    ) -> (u64, u64) {
        let (pace, Some(staged)) = (self.config.pace_ns_per_row, self.workload.staged()) else {
            return (0, 0);
        };
        if pace == 0 || micro_rows == 0 {
            return (0, 0);
        }
        let mut slowdowns = vec![vec![1.0; layout.stages as usize]; layout.replicas as usize];
        for r in w {
            let (replica, stage) = layout.place(r.worker);
            slowdowns[replica as usize][stage as usize] = r.gt_slowdown.max(1.0);
        }
        let micro = (self.config.rows_per_iteration / u64::from(micro_rows)) as u32;
        let micro_ns = pace as f64 * f64::from(micro_rows);
        let costs = staged.layer_costs();
        let both =
            crate::pipeline::paced_bound_us(costs, &slowdowns, layout.schedule, (micro, micro_ns));
        let cut: Vec<_> = (0..layout.stages).map(|s| layout.layers(s)).collect();
        let shares = crate::pipeline::paced_shares_bound_us(
            costs,
            &slowdowns,
            layout.schedule,
            (micro, micro_ns),
            &cut,
        );
        (both.map_or(0, |b| b as u64), shares.map_or(0, |b| b as u64))
    }

    /// Assembles every row that is complete, in order, and writes a part
    /// whenever one is full.
    fn assemble_rows(&mut self) -> Result<(), SinkError> {
        while let Some(p) = self.pending.get(&self.next_row) {
            let ready = p.timing.is_some()
                && p.loss.is_some()
                && (!self.wants_eval(self.next_row) || p.eval.is_some());
            if !ready {
                break;
            }
            let p = self.pending.remove(&self.next_row).unwrap_or_default();
            let Some(row) = self.row(self.next_row, p) else {
                break;
            };
            if let Some(observer) = self.observer.as_mut() {
                observer(Progress::Row(&row));
            }
            self.out.iterations.push(row);
            self.next_row += 1;
            if self.next_row >= self.part_end {
                // A part never straddles a checkpoint's cut.
                let end = self
                    .cuts
                    .as_ref()
                    .and_then(|c| c.next)
                    .map_or(self.part_end, |c| c.min(self.part_end));
                self.flush(end)?;
                self.part_end += self.config.part_iterations;
            }
        }
        Ok(())
    }

    /// Iteration `iteration`'s row from what arrived of it (none without its
    /// timing).
    fn row(&self, iteration: u64, p: Pending) -> Option<IterationRecord> {
        let (barrier_wait_us, report) = p.timing?;
        Some(IterationRecord {
            iteration,
            workload: self.workload.kind().to_owned(),
            start_us: report.start_us,
            end_us: report.end_us,
            wall_us: report.end_us.saturating_sub(report.start_us),
            train_loss: p.loss.unwrap_or(f64::NAN),
            test_loss: p.eval.as_ref().map(|e| e.log_loss),
            test_accuracy: p.eval.as_ref().map(|e| e.accuracy),
            test_metrics: p.eval.map(|e| e.metrics).unwrap_or_default(),
            laggard: report.laggard,
            lag_us: report.lag_us,
            median_busy_us: report.median_busy_us,
            barrier_wait_us,
            units: self.config.units_per_iteration,
            rows: self.config.rows_per_iteration,
            dropped_partitions: p
                .dropped
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
        })
    }

    /// Writes the cut of every checkpoint that is due: this process's
    /// records before it are committed first.
    fn cut_due_checkpoints(&mut self) -> Result<(), SinkError> {
        while let Some(c) = self.cuts.as_ref().and_then(|cuts| cuts.due(self.next_row)) {
            self.flush(c)?;
            let cuts = self.cuts.as_mut().expect("due");
            let job_us = cuts.begun.get(&c).map_or(0, |b| b.0);
            cuts.write_cut(c, job_us)?;
            self.out.checkpoints.push(c);
        }
        Ok(())
    }

    /// Every sender is gone: writes the records left and the checkpoints
    /// left (the final one; under SSP those near the end), which are
    /// complete once every record is committed, if the run got that far.
    fn finish(mut self) -> Result<SinkOutput, SinkError> {
        self.flush(u64::MAX)?;
        if !self.ops.is_empty() {
            crate::run::stage::ops_file::write_stage_ops(
                self.writer.dir(),
                &self.ops,
                self.config.first_iteration,
            )?;
        }
        if let Some((layout, _)) = &self.config.pipeline {
            let moves: Vec<PlacementEntry> = (self.out.recuts.iter())
                .map(|(iteration, p)| PlacementEntry {
                    iteration: *iteration,
                    cuts: p.cuts.clone(),
                })
                .collect();
            let job_cut = vec![layout.bounds.clone(); layout.replicas as usize];
            write_placements(
                self.writer.dir(),
                &moves,
                self.config.first_iteration,
                &job_cut,
            )?;
        }
        if let Some(cuts) = self.cuts.as_mut().filter(|_| self.out.diverged.is_none()) {
            let local = cuts.cfg.local_shards();
            while let Some(c) = cuts.next {
                if cuts.shards.get(&c).copied().unwrap_or(0) < local {
                    break;
                }
                let job_us = cuts.begun.get(&c).map_or_else(
                    || self.config.job_start.elapsed().as_micros() as u64,
                    |b| b.0,
                );
                cuts.write_cut(c, job_us)?;
                self.out.checkpoints.push(c);
            }
        }
        Ok(self.out)
    }

    /// Writes every buffered record of iterations before `end` ([`flush`]).
    fn flush(&mut self, end: u64) -> Result<(), TraceError> {
        flush(
            &mut self.writer,
            &mut self.out,
            &mut self.units,
            &mut self.workers,
            &mut self.written,
            end,
        )
    }
}

/// Writes every buffered record of iterations before `end` as one part per table.
fn flush(
    writer: &mut TraceWriter,
    out: &mut SinkOutput,
    units: &mut Vec<UnitRecord>,
    workers: &mut Vec<WorkerRecord>,
    written: &mut usize,
    end: u64,
) -> Result<(), TraceError> {
    let (done, later): (Vec<_>, Vec<_>) = units.drain(..).partition(|u| u.iteration < end);
    *units = later;
    out.parts.extend(writer.write_units(&done)?);
    let (done, later): (Vec<_>, Vec<_>) = workers.drain(..).partition(|w| w.iteration < end);
    *workers = later;
    out.parts.extend(writer.write_workers(&done)?);
    let upto = *written + out.iterations[*written..].partition_point(|r| r.iteration < end);
    let part = writer.write_iterations(&out.iterations[*written..upto])?;
    out.parts.extend(part);
    *written = upto;
    Ok(())
}
