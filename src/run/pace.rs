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
    /// first unit (the first call also warms the workload's caches), in the
    /// thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`: what other processes on
    /// a busy machine take is not counted), else in wall time.
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
    let best_ns = (0..3)
        .map(|_| {
            let (cpu, wall) = (thread_cpu_ns(), Instant::now());
            let g = micro_batched_gradient(
                workload,
                &source,
                &params,
                &unit.rows,
                plan.micro_batch as usize,
            );
            std::hint::black_box(g);
            match (cpu, thread_cpu_ns()) {
                (Some(a), Some(b)) => b.saturating_sub(a),
                _ => wall.elapsed().as_nanos() as u64,
            }
        })
        .min()
        .unwrap_or_default();
    MeasuredPace {
        ns_per_row: best_ns as f64 / unit.rows.len().max(1) as f64,
        rows: unit.rows.len(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
    }
}

/// Refuses a paced `plan` whose pace is shorter than one core's measured
/// compute per row: every unit would overrun its nominal time, and the
/// injected slowdowns would not be what the pattern says. Returns the
/// measurement (`None` at native speed), so the caller can also note a pace
/// that fits one core but not the workers sharing the cores.
pub fn check_pace(
    plan: &JobPlan,
    workload: &dyn Workload,
) -> Result<Option<MeasuredPace>, SpecError> {
    if plan.pace_ns_per_row == 0 {
        return Ok(None);
    }
    let measured = measure(plan, workload);
    if let Some(refused) = refusal(plan, &measured) {
        return Err(refused);
    }
    Ok(Some(measured))
}

/// The error for a `plan` whose pace is shorter than one core's `measured`
/// compute per row, if it is.
pub fn refusal(plan: &JobPlan, measured: &MeasuredPace) -> Option<SpecError> {
    ((plan.pace_ns_per_row as f64) < measured.ns_per_row).then(|| {
        SpecError::in_plan(
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
        )
    })
}

/// The calling thread's CPU time so far, ns, if the kernel tells it.
fn thread_cpu_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_needed_pace_grows_with_workers_beyond_the_cores() {
        let m = MeasuredPace {
            ns_per_row: 1_000.0,
            rows: 8,
            cores: 2,
        };
        assert_eq!(m.needed_ns_per_row(1), 1_000.0);
        assert_eq!(m.needed_ns_per_row(2), 1_000.0);
        assert_eq!(m.needed_ns_per_row(8), 4_000.0);
    }

    #[test]
    fn thread_cpu_time_advances_with_work() {
        let before = thread_cpu_ns().expect("the kernel tells a thread's CPU time");
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        assert!(thread_cpu_ns().expect("still readable") > before, "{x}");
    }
}
