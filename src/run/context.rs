//! What every worker of a job shares: the plan, the data, the placement, the
//! shard layout, the straggler schedule and the job's clock.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use super::placement::place_partitions;
use crate::data::{partition::even_range, Dataset, Partitioning};
use crate::inject::StragglerSchedule;
use crate::spec::JobPlan;

/// Read-only state of a job, shared by its workers.
#[derive(Debug)]
pub struct JobContext {
    /// The validated job.
    pub plan: JobPlan,
    /// The featurised data.
    pub dataset: Arc<Dataset>,
    /// Partitions and units.
    pub partitioning: Partitioning,
    /// Owner (data holder) of each partition.
    pub owners: Vec<u32>,
    /// Coordinates of each parameter shard; shard `s` is owned by worker `s`.
    pub shards: Vec<Range<usize>>,
    /// The injected straggler schedule.
    pub schedule: StragglerSchedule,
    /// Number of parameters.
    pub dims: usize,
    /// Timely worker threads per process.
    pub threads_per_process: u32,
    /// The job's time origin: every `*_us` is measured from here.
    pub start: Instant,
    assignments: Vec<Vec<u32>>,
}

impl JobContext {
    /// Lays the job out for `plan.workers` workers.
    pub fn new(plan: JobPlan, dataset: Arc<Dataset>) -> Self {
        let workers = plan.workers;
        let partitioning = Partitioning::new(
            &dataset.train,
            plan.partitions,
            plan.units_per_partition,
            plan.batch_fraction,
            plan.seed,
        );
        let schedule = StragglerSchedule::new(plan.seed, plan.pattern.clone(), workers);
        let weights = schedule.work_weights();
        let owners = place_partitions(plan.partitions, workers, weights.as_deref());
        let mut assignments = vec![Vec::new(); workers as usize];
        for (p, &w) in owners.iter().enumerate() {
            assignments[w as usize].push(p as u32);
        }
        let dims = dataset.dims();
        let shards = (0..workers as usize)
            .map(|s| even_range(dims, workers as usize, s))
            .collect();
        Self {
            threads_per_process: workers,
            plan,
            dataset,
            partitioning,
            owners,
            shards,
            schedule,
            dims,
            start: Instant::now(),
            assignments,
        }
    }

    /// Partitions whose units `worker` computes (bsp: the ones it holds).
    pub fn assignment(&self, worker: u32) -> &[u32] {
        &self.assignments[worker as usize]
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
