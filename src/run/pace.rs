//! Whether a paced run's nominal time per row leaves room for the real
//! compute it stands for: measured once before the run, on the calling
//! thread, on the job's own first unit.

use std::time::Instant;

use crate::spec::{partitioning_for, JobPlan, SpecError};
use crate::workload::{micro_batched_gradient, Workload};

/// The real compute per row, measured before a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasuredPace {
    /// ns per row on one core: the best of three gradients of the job's
    /// first unit (the first call also warms the workload's caches).
    pub ns_per_row: f64,
    /// Rows of the unit measured.
    pub rows: usize,
    /// Cores this process may use.
    pub cores: u32,
}

impl MeasuredPace {
    /// The pace `workers` workers sharing [`MeasuredPace::cores`] cores need
    /// for every unit's real gradient to fit in its nominal time, ns per row.
    pub fn needed_ns_per_row(&self, workers: u32) -> f64 {
        self.ns_per_row * (f64::from(workers) / f64::from(self.cores.max(1))).max(1.0)
    }
}

/// Times the gradient of iteration 0's first unit of `plan` (micro-batch
/// by micro-batch, as the run computes it) three times.
pub fn measure(plan: &JobPlan, workload: &dyn Workload) -> MeasuredPace {
    let data = workload.data();
    let unit = partitioning_for(plan, data)
        .units(0, 0)
        .into_iter()
        .next()
        .expect("every partition has at least one unit");
    let params = workload.init_params(plan.seed);
    let source = data.source();
    let best = (0..3)
        .map(|_| {
            let started = Instant::now();
            let g = micro_batched_gradient(
                workload,
                &source,
                &params,
                &unit.rows,
                plan.micro_batch as usize,
            );
            std::hint::black_box(g);
            started.elapsed()
        })
        .min()
        .unwrap_or_default();
    MeasuredPace {
        ns_per_row: best.as_nanos() as f64 / unit.rows.len().max(1) as f64,
        rows: unit.rows.len(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
    }
}

/// Refuses a paced `plan` whose pace is shorter than one core's measured
/// compute per row: every unit would overrun its nominal time, and the
/// injected slowdowns would not be what the pattern says. Returns the
/// measurement (`None` at native speed), so the caller can also note a pace
/// that fits one core but not the workers sharing the cores.
pub fn check_pace(plan: &JobPlan, workload: &dyn Workload) -> Result<Option<MeasuredPace>, SpecError> {
    if plan.pace_ns_per_row == 0 {
        return Ok(None);
    }
    let measured = measure(plan, workload);
    if (plan.pace_ns_per_row as f64) < measured.ns_per_row {
        return Err(SpecError::in_plan(
            plan,
            "workers",
            "pace_ns_per_row",
            format!(
                "{} ns per row is shorter than the measured compute: a row takes {:.0} ns on one \
                 core (best of 3 gradients of a {}-row unit); {} workers on {} cores need at least \
                 {:.0} ns per row (0 runs at native speed)",
                plan.pace_ns_per_row,
                measured.ns_per_row,
                measured.rows,
                plan.workers,
                measured.cores,
                measured.needed_ns_per_row(plan.workers)
            ),
        ));
    }
    Ok(Some(measured))
}
