//! Whether a paced run's nominal time per row leaves room for the real
//! compute it stands for: measured once before the run on the job's own
//! first unit, on the calling thread alone and then on as many threads at
//! once as the job has workers (the cores' sharing, caches and memory
//! included: 8 CNN workers on 2 cores take well over 4× one core's time).

use std::time::Instant;

use crate::spec::{partitioning_for, JobPlan, SpecError};
use crate::workload::{micro_batched_gradient, Draws, Workload};

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
    /// The same unit computed by several threads at once, if measured.
    pub shared: Option<SharedPace>,
}

/// A unit's compute with `threads` threads computing it at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SharedPace {
    /// Threads that computed at once.
    pub threads: u32,
    /// Wall ns per row of the median thread.
    pub ns_per_row: f64,
}

/// The most threads [`measure`] starts at once; more workers are estimated
/// from that many in proportion.
const MOST_SHARED_THREADS: u32 = 256;

impl MeasuredPace {
    /// The pace `workers` workers sharing [`MeasuredPace::cores`] cores need
    /// for every unit's real gradient to fit in its nominal time, ns per row:
    /// measured with that many threads at once, or estimated from the
    /// threads measured (from one core's compute when none were) in
    /// proportion to the workers beyond the cores.
    pub fn needed_ns_per_row(&self, workers: u32) -> f64 {
        let cores = f64::from(self.cores.max(1));
        let share = |n: u32| (f64::from(n) / cores).max(1.0);
        match self.shared {
            Some(s) if s.threads == workers => s.ns_per_row,
            Some(s) => s.ns_per_row * share(workers) / share(s.threads),
            None => self.ns_per_row * share(workers),
        }
    }

    /// How the needed pace of `workers` workers was found, for messages.
    pub fn how(&self, workers: u32) -> String {
        match self.shared {
            Some(s) if s.threads == workers => {
                format!("measured with {workers} threads computing at once")
            }
            Some(s) => format!("estimated from {} threads computing at once", s.threads),
            None => "estimated from one core's compute".to_owned(),
        }
    }
}

/// Times the gradient of iteration 0's first unit of `plan` (micro-batch
/// by micro-batch, as the run computes it) three times on this thread, then
/// once on each of `plan.workers` threads at once (at most
/// `MOST_SHARED_THREADS`) when the job has more than one worker.
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
                Draws::default(),
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
    let gradient = || {
        micro_batched_gradient(
            workload,
            Draws::default(),
            &source,
            &params,
            &unit.rows,
            plan.micro_batch as usize,
        )
    };
    let rows = unit.rows.len().max(1) as f64;
    let shared = (plan.workers > 1).then(|| {
        let threads = plan.workers.min(MOST_SHARED_THREADS);
        // Units back to back for about 20 ms each, so that the threads
        // compute side by side rather than one after the other.
        let repeats = (20e6 / best_ns.max(1) as f64).ceil().clamp(1.0, 1000.0) as u32;
        SharedPace {
            threads,
            ns_per_row: at_once(threads, repeats, &gradient) / (rows * f64::from(repeats)),
        }
    });
    MeasuredPace {
        ns_per_row: best_ns as f64 / rows,
        rows: unit.rows.len(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        shared,
    }
}

/// The median wall time, ns, of `repeats` calls of `compute` on each of
/// `threads` threads started together (each thread calls it once before, so
/// per-thread caches such as the CNN's built module are warm, as in a run).
fn at_once<T>(threads: u32, repeats: u32, compute: &(impl Fn() -> T + Sync)) -> f64 {
    let start = std::sync::Barrier::new(threads as usize);
    let mut walls: Vec<f64> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    std::hint::black_box(compute());
                    start.wait();
                    let t = Instant::now();
                    for _ in 0..repeats {
                        std::hint::black_box(compute());
                    }
                    t.elapsed().as_nanos() as f64
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a gradient does not panic"))
            .collect()
    });
    crate::stats::median(&mut walls)
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
                 {:.0} ns per row ({}; 0 runs at native speed)",
                plan.pace_ns_per_row,
                measured.ns_per_row,
                measured.rows,
                plan.workers,
                measured.cores,
                measured.needed_ns_per_row(plan.workers),
                measured.how(plan.workers)
            ),
        )
    })
}

/// What to tell a user whose pace of `pace_ns_per_row` one core keeps but
/// `workers` workers sharing the cores do not (`measured`), if so: the run
/// goes ahead, its units overrunning their nominal time.
pub fn shortfall(workers: u32, pace_ns_per_row: u64, measured: &MeasuredPace) -> Option<String> {
    let needed = measured.needed_ns_per_row(workers);
    ((pace_ns_per_row as f64) < needed).then(|| {
        format!(
            "{workers} workers share {} cores, so a row's real compute takes about {needed:.0} ns \
             ({}), over the pace of {pace_ns_per_row} ns: units will run past their nominal \
             time, and the bound, which takes the pace for the compute, will be too low",
            measured.cores,
            measured.how(workers),
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
        let mut m = MeasuredPace {
            ns_per_row: 1_000.0,
            rows: 8,
            cores: 2,
            shared: None,
        };
        assert_eq!(m.needed_ns_per_row(1), 1_000.0);
        assert_eq!(m.needed_ns_per_row(2), 1_000.0);
        assert_eq!(m.needed_ns_per_row(8), 4_000.0);
        // Measured with 8 threads at once: what 8 take, and in proportion beyond.
        m.shared = Some(SharedPace {
            threads: 8,
            ns_per_row: 6_000.0,
        });
        assert_eq!(m.needed_ns_per_row(8), 6_000.0);
        assert_eq!(m.needed_ns_per_row(16), 12_000.0);
        assert!(m.how(8).contains("measured with 8 threads"));
        assert!(m.how(16).contains("estimated from 8 threads"));
    }

    #[test]
    fn a_pace_the_shared_cores_cannot_keep_is_told() {
        let m = MeasuredPace {
            ns_per_row: 1_000.0,
            rows: 8,
            cores: 2,
            shared: Some(SharedPace {
                threads: 8,
                ns_per_row: 6_000.0,
            }),
        };
        let note = shortfall(8, 5_000, &m).expect("5,000 ns is short of 6,000");
        assert_eq!(
            note,
            "8 workers share 2 cores, so a row's real compute takes about 6000 ns (measured \
             with 8 threads computing at once), over the pace of 5000 ns: units will run past \
             their nominal time, and the bound, which takes the pace for the compute, will be \
             too low"
        );
        assert_eq!(shortfall(8, 6_000, &m), None);
        // estimated for other worker counts, in proportion beyond the cores
        assert!(shortfall(16, 10_000, &m).is_some_and(|n| n.contains("about 12000 ns")));
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
