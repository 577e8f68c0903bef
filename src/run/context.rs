//! What every worker of a job shares: the plan, the data, the placement, the
//! shard layout, the straggler schedule and the job's clock.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use super::holdings::{PlacementUpdate, RowUpdate};
use super::placement::place_partitions;
use crate::checkpoint::Checkpoint;
use crate::data::{partition::even_range, DataRow, Partitioning, RowBlock, UnitKey, UnitRows};
use crate::inject::{Pattern, StragglerSchedule};
use crate::policy::reassign::helper_group;
use crate::policy::{peer_agent, PeerAgent, PolicyPlan};
use crate::predict::{CalibratedLstm, Ewma, LstmError, LstmPredictor, OnlinePredictor, Sustained};
use crate::spec::{partitioning_for, JobPlan, PredictorPlan};
use crate::workload::Workload;

/// The predictor `plan` names, loaded (an LSTM from its model directory).
pub fn online_predictor(plan: &JobPlan) -> Result<Option<OnlinePredictor>, LstmError> {
    plan.predictor.as_ref().map(load_predictor).transpose()
}

/// The predictor `plan` describes, loaded.
pub fn load_predictor(plan: &PredictorPlan) -> Result<OnlinePredictor, LstmError> {
    Ok(match plan {
        PredictorPlan::Last => OnlinePredictor::Last,
        PredictorPlan::Ewma { alpha } => OnlinePredictor::Ewma(Ewma { alpha: *alpha }),
        PredictorPlan::Sustained { k } => OnlinePredictor::Sustained(Sustained { k: *k }),
        PredictorPlan::Median { window } => {
            OnlinePredictor::Median(crate::predict::Median { window: *window })
        }
        PredictorPlan::Lstm { model } => {
            OnlinePredictor::Lstm(CalibratedLstm::new(Arc::new(LstmPredictor::load(model)?)))
        }
        PredictorPlan::Auto { model } => {
            OnlinePredictor::Auto(crate::predict::Auto::new(match model {
                Some(m) => Some(Arc::new(LstmPredictor::load(m)?)),
                None => None,
            }))
        }
    })
}

/// The rows and initial holders `worker` puts into the placement collection:
/// those of the partitions it owns, as if it had loaded them from storage.
pub fn owned_inputs(cx: &JobContext, worker: u32) -> (Vec<RowUpdate>, Vec<PlacementUpdate>) {
    let source = cx.workload.data().source();
    let owned: Vec<u32> = (0..cx.plan.partitions)
        .filter(|&p| cx.owners[p as usize] == worker)
        .collect();
    let mut rows = Vec::new();
    for &p in &owned {
        let mut ids = cx.partitioning.partition_rows(p).to_vec();
        ids.sort_unstable();
        for chunk in ids.chunks(RowBlock::ROWS) {
            let block = RowBlock {
                rows: chunk
                    .iter()
                    .map(|&r| DataRow::from_source(&source, r))
                    .collect(),
            };
            rows.push(((p, block), 0, 1));
        }
    }
    let initial = owned
        .iter()
        .flat_map(|&p| cx.holders[p as usize].iter().map(move |&h| ((p, h), 0, 1)))
        .collect();
    (rows, initial)
}

/// Read-only state of a job, shared by its workers.
#[derive(Debug)]
pub struct JobContext {
    /// The validated job.
    pub plan: JobPlan,
    /// The model and its data.
    pub workload: Arc<dyn Workload>,
    /// The parameters of version 0 (the workload's seeded initialisation).
    pub initial_params: Arc<Vec<f64>>,
    /// Partitions and units.
    pub partitioning: Partitioning,
    /// Owner (data holder) of each partition.
    pub owners: Vec<u32>,
    /// Coordinates of each parameter shard; shard `s` is owned by worker `s`
    /// (workers past the last shard own none).
    pub shards: Vec<Range<usize>>,
    /// The injected straggler schedule.
    pub schedule: StragglerSchedule,
    /// Number of parameters.
    pub dims: usize,
    /// Timely worker threads per process.
    pub threads_per_process: u32,
    /// Initial holders of each partition's rows: the owner and its replicas
    /// (the placement collection starts from these).
    pub holders: Vec<Vec<u32>>,
    /// The job's time origin: every `*_us` is measured from here.
    pub start: Instant,
    /// The online predictor, if the job has one.
    pub predictor: Option<OnlinePredictor>,
    /// The checkpoint the run continues from, if it resumes.
    pub resume: Option<Arc<Checkpoint>>,
    /// The parameter version this run ends at: the plan's iterations, or
    /// fewer when the run is to stop early (`forestall run --stop-after`);
    /// it checkpoints there, so that a later run of the same plan continues.
    /// A stop asked from outside may end it sooner ([`Self::end_version`]).
    pub end: u64,
    /// This process's view of a stop asked from outside (SIGTERM).
    pub stop: Arc<super::stop::Stop>,
    /// The iteration this process's first worker began last (the link
    /// shaper follows it).
    pub iteration_now: Arc<std::sync::atomic::AtomicU64>,
    assignments: Vec<Vec<u32>>,
}

impl JobContext {
    /// Lays the job out for `plan.workers` workers, predicting online with
    /// `predictor` (see [`online_predictor`]).
    pub fn new(
        plan: JobPlan,
        workload: Arc<dyn Workload>,
        predictor: Option<OnlinePredictor>,
    ) -> Self {
        let workers = plan.workers;
        let partitioning = partitioning_for(&plan, workload.data());
        // `ideal` runs the same job with the injection off.
        let pattern = match plan.policy {
            PolicyPlan::Ideal => Pattern::None,
            _ => plan.pattern.clone(),
        };
        let schedule = StragglerSchedule::new(plan.seed, pattern, workers);
        let weights = schedule.work_weights();
        let dims = workload.param_count();
        let (owners, holders, shards) = match &plan.parallel {
            None => {
                let owners = place_partitions(plan.partitions, workers, weights.as_deref());
                let holders = owners
                    .iter()
                    .map(|&o| {
                        let mut h = vec![o];
                        // the owner's first helper-group peers (other processes first)
                        h.extend(helper_group(o, workers, workers, plan.replicas));
                        h
                    })
                    .collect();
                (owners, holders, even_shards(dims, plan.shards_for(dims)))
            }
            Some(layout) => pipeline_layout(layout, plan.partitions, workload.as_ref()),
        };
        let mut assignments = vec![Vec::new(); workers as usize];
        for (p, &w) in owners.iter().enumerate() {
            assignments[w as usize].push(p as u32);
        }
        let initial_params = Arc::new(workload.init_params(plan.seed));
        Self {
            threads_per_process: workers,
            holders,
            end: plan.iterations,
            stop: Arc::default(),
            iteration_now: Arc::default(),
            plan,
            workload,
            initial_params,
            partitioning,
            owners,
            shards,
            schedule,
            dims,
            start: Instant::now(),
            predictor,
            resume: None,
            assignments,
        }
    }

    /// The same job continuing from `checkpoint`: its parameters are version
    /// `checkpoint.iteration`'s, its partitions held where they were, and the
    /// job clock (set it first) goes on from the checkpoint's time.
    pub fn resuming(mut self, checkpoint: Checkpoint) -> Self {
        self.initial_params = Arc::new(checkpoint.params.clone());
        // The placement as it was: owners first, then the other holders.
        if !checkpoint.placement.is_empty() {
            for holders in &mut self.holders {
                holders.truncate(1);
            }
            for &(partition, holder) in &checkpoint.placement {
                if let Some(h) = self.holders.get_mut(partition as usize) {
                    if holder < self.plan.workers && !h.contains(&holder) {
                        h.push(holder);
                    }
                }
            }
        }
        // The clock goes on from the checkpoint's time (the time lost to the
        // failure and the restart is not on it).
        self.start = self
            .start
            .checked_sub(std::time::Duration::from_micros(checkpoint.job_us))
            .unwrap_or(self.start);
        self.resume = Some(Arc::new(checkpoint));
        self
    }

    /// The first iteration this run computes (0, or the checkpoint's).
    pub fn first_iteration(&self) -> u64 {
        self.resume.as_ref().map_or(0, |c| c.iteration)
    }

    /// Checkpoint every this many iterations: the plan's `[checkpoint]
    /// every`, or, for a run without checkpoints that stops early, at the
    /// stop only (a stopped run is there to be continued).
    pub fn checkpoint_every(&self) -> u64 {
        let end = self.end_version();
        match self.plan.checkpoint_every {
            0 if end < self.plan.iterations => end,
            every => every,
        }
    }

    /// The parameter version this run ends at: [`Self::end`], or the one
    /// the job's processes agreed on when a stop was asked ([`super::stop`]).
    pub fn end_version(&self) -> u64 {
        self.stop.at().map_or(self.end, |at| at.min(self.end))
    }

    /// Whether parameter version `version` is checkpointed: every
    /// `[checkpoint] every` iterations and the final one, after the first.
    pub fn is_checkpoint(&self, version: u64) -> bool {
        let every = self.checkpoint_every();
        every > 0
            && version > self.first_iteration()
            && (version.is_multiple_of(every) || version == self.end_version())
    }

    /// Whether workers `a` and `b` share a host (and its link): in a job of
    /// one process each worker is a host of its own; across processes, a
    /// process's workers share one.
    pub fn same_host(&self, a: u32, b: u32) -> bool {
        self.host_worker(a) == self.host_worker(b)
    }

    /// The worker whose draws stand for `worker`'s host link: itself in a
    /// job of one process, its process's first worker across processes.
    pub fn host_worker(&self, worker: u32) -> u32 {
        if self.threads_per_process >= self.plan.workers {
            worker
        } else {
            self.process_of(worker) * self.threads_per_process
        }
    }

    /// The rate (Mbit/s) of `worker`'s host link in `iteration` when
    /// `slow-link` limits it and this process emulates it (`disruptor =
    /// "emulated"`): what the host sends out is held for as long as its
    /// bytes take ([`StragglerSchedule::over_link`]). None when the link is not limited, or
    /// `tc` limits the real interface instead.
    pub fn emulated_link(&self, worker: u32, iteration: u64) -> Option<f64> {
        if self.plan.disruptor == crate::spec::DisruptorMode::Tc {
            return None;
        }
        self.schedule.link_mbps(self.host_worker(worker), iteration)
    }

    /// Units `worker` owns in every iteration.
    pub fn own_units(&self, worker: u32) -> u32 {
        self.assignment(worker).len() as u32 * self.plan.units_per_partition
    }

    /// Partitions whose units `worker` computes (bsp: the ones it holds).
    pub fn assignment(&self, worker: u32) -> &[u32] {
        &self.assignments[worker as usize]
    }

    /// Whether `worker` is sent shard `shard`'s versions: every shard, or,
    /// in a pipeline, those of its stage (and worker 0 every one).
    pub fn reads_shard(&self, worker: u32, shard: u32) -> bool {
        // (under rebalance-stages a worker's layers change: it reads all)
        self.plan.policy == crate::policy::PolicyPlan::RebalanceStages
            || (self.plan.parallel.as_ref()).is_none_or(|l| l.reads_shard(worker, shard))
    }

    /// The rows of one unit of iteration `t`.
    pub fn unit_rows(&self, iteration: u64, key: UnitKey) -> UnitRows {
        let mut units = self.partitioning.units(iteration, key.partition);
        units.swap_remove(key.unit as usize)
    }

    /// The peer-to-peer agent of `worker`, if the policy uses one.
    pub fn peer_agent(&self, worker: u32) -> Option<PeerAgent> {
        peer_agent(
            &self.plan.policy,
            worker,
            self.plan.workers,
            self.threads_per_process,
        )
    }

    /// Process of a worker.
    pub fn process_of(&self, worker: u32) -> u32 {
        worker / self.threads_per_process
    }

    /// µs since the job started.
    pub fn now_us(&self) -> u64 {
        self.us_since_start(Instant::now())
    }

    /// µs from the job's start to `at`.
    pub fn us_since_start(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_micros() as u64
    }
}

/// A pipeline's partition owners (each replica's first stage worker),
/// their holders (the owners alone: a pipeline moves no partition) and its
/// shards, cut at the stages' boundaries.
fn pipeline_layout(
    layout: &crate::pipeline::StageLayout,
    partitions: u32,
    workload: &dyn Workload,
) -> (Vec<u32>, Vec<Vec<u32>>, Vec<Range<usize>>) {
    let owners: Vec<u32> = place_partitions(partitions, layout.replicas, None)
        .into_iter()
        .map(|replica| layout.worker(replica, 0))
        .collect();
    let holders = owners.iter().map(|&o| vec![o]).collect();
    let staged = workload
        .staged()
        .expect("validation admits [parallel] only for a model with layers");
    let shards = layout.shards(|layers| staged.layer_params(layers));
    (owners, holders, shards)
}

/// `count` shards of `dims` coordinates, in order.
pub(crate) fn even_shards(dims: usize, count: u32) -> Vec<Range<usize>> {
    let count = count as usize;
    (0..count).map(|s| even_range(dims, count, s)).collect()
}
