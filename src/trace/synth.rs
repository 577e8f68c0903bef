//! Synthetic traces from the injection patterns: `forestall trace synth`.
//!
//! Every worker computes `units` units of `rows` rows at `us_per_row` µs a
//! row (a worker carrying a larger share of the data, under `persistent`
//! with `work_share`, has proportionally more units, rounded, at least one,
//! as a run places more partitions on it), times the pattern's slowdown for
//! it in that iteration (the same
//! [`StragglerSchedule`] a run injects, so a synthetic trace of a pattern is
//! what a run of it would record with a perfectly even machine), times an
//! optional seeded jitter. Iterations are synchronous: iteration t starts when
//! the slowest worker of t − 1 finished. Only the `workers` and `iterations`
//! tables are written (a unit table at 10,000 workers would be tens of
//! millions of rows); the what-if replay cuts each worker's time into its
//! recorded number of equal units.

use std::path::Path;

use super::{Result, TraceStamp, TraceWriter, WorkerRecord};
use crate::inject::{Pattern, StragglerSchedule};
use crate::rng;

/// What to synthesise.
#[derive(Debug, Clone)]
pub struct Synth {
    /// Workers.
    pub workers: u32,
    /// Iterations.
    pub iterations: u64,
    /// Units per worker per iteration.
    pub units: u32,
    /// Rows per unit.
    pub rows: u32,
    /// Nominal µs per row.
    pub us_per_row: f64,
    /// Each (worker, iteration) is scaled by a uniform draw in 1 ± jitter.
    pub jitter: f64,
    /// The slowdowns.
    pub schedule: StragglerSchedule,
}

impl Synth {
    /// Slow-worker (p = 0.1, 400 %, schedule seed 1): `units` units of
    /// `rows` rows at 10 µs a row a worker, each worker-iteration scaled by
    /// a draw in 1 ± `jitter`. The what-if replay's scale bench and tests
    /// measure this shape.
    pub fn slow_worker(workers: u32, iterations: u64, units: u32, rows: u32, jitter: f64) -> Self {
        Synth {
            workers,
            iterations,
            units,
            rows,
            us_per_row: 10.0,
            jitter,
            schedule: StragglerSchedule::new(
                1,
                Pattern::SlowWorker {
                    probability: 0.1,
                    delay_percent: 400.0,
                },
                workers,
            ),
        }
    }
}

/// Iterations per part file (bounds the writer's memory at 10,000 workers).
const ITERATIONS_PER_PART: u64 = 25;

const STREAM_JITTER: u64 = u64::from_be_bytes(*b"syn-jitr");

/// Writes the trace into `dir`; returns the mean iteration time, µs.
pub fn write_synth(synth: &Synth, dir: &Path, stamp: TraceStamp) -> Result<f64> {
    let mut writer = TraceWriter::try_new(dir, 0, stamp)?;
    let weights = synth.schedule.work_weights();
    let mut start = 0u64;
    let (mut workers, mut iterations) = (Vec::new(), Vec::new());
    for t in 0..synth.iterations {
        let mut rows: Vec<WorkerRecord> = (0..synth.workers)
            .map(|w| {
                let share = weights
                    .as_ref()
                    .map_or(1.0, |v| v[w as usize] * f64::from(synth.workers));
                // A run gives a worker with more of the data more
                // partitions, so more units of the same size.
                let units = ((f64::from(synth.units) * share).round() as u32).max(1);
                let work_rows = f64::from(units * synth.rows);
                let noise = 1.0
                    + synth.jitter
                        * (2.0
                            * rng::uniform(&[
                                synth.schedule.seed(),
                                STREAM_JITTER,
                                u64::from(w),
                                t,
                            ])
                            - 1.0);
                let base = work_rows * synth.us_per_row * noise;
                let stretch = synth.schedule.stretch(
                    w,
                    t,
                    start,
                    crate::inject::stretch::saturating_secs(base / 1e6),
                );
                let busy = (stretch.span.as_secs_f64() * 1e6).round() as u64;
                WorkerRecord {
                    units,
                    rows: work_rows as u64,
                    gt_slowdown: stretch.slowdown,
                    gt_delay_us: (busy as f64 - base).max(0.0).round() as u64,
                    ..WorkerRecord::single_unit(t, w, start, start + busy)
                }
            })
            .collect();
        let longest = rows.iter().map(|r| r.busy_us).max().unwrap_or(0);
        for r in &mut rows {
            r.barrier_wait_us = longest - r.busy_us;
        }
        iterations.push(super::IterationRecord::timing_only(
            t,
            start,
            &rows,
            rows.iter().map(|r| r.units).sum(),
            "synth",
        ));
        workers.extend(rows);
        start += longest;
        if (t + 1) % ITERATIONS_PER_PART == 0 || t + 1 == synth.iterations {
            writer.write_workers(&workers)?;
            writer.write_iterations(&iterations)?;
            workers.clear();
            iterations.clear();
        }
    }
    Ok(start as f64 / synth.iterations.max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::Pattern;
    use crate::trace::{read_trace_dir, TraceSet};

    /// `workers` × `iterations` of 4 units of 10 rows at 5 µs a row under
    /// `pattern`, written and read back, with the mean iteration time.
    fn synthesise(workers: u32, iterations: u64, pattern: Pattern) -> (f64, TraceSet) {
        let dir = tempfile::tempdir().unwrap();
        let synth = Synth {
            workers,
            iterations,
            units: 4,
            rows: 10,
            us_per_row: 5.0,
            jitter: 0.0,
            schedule: StragglerSchedule::new(1, pattern, workers),
        };
        let stamp = TraceStamp {
            job_id: "synth:test".into(),
            git_revision: "test".into(),
            plan_hash: "0".into(),
            seed: 1,
        };
        let mean = write_synth(&synth, dir.path(), stamp).unwrap();
        (mean, read_trace_dir(dir.path()).unwrap())
    }

    #[test]
    fn a_persistent_straggler_is_in_every_iteration_of_the_synthetic_trace() {
        let slow = Pattern::Persistent {
            workers: vec![2],
            factor: 3.0,
            work_share: None,
        };
        let (mean, trace) = synthesise(6, 30, slow);
        assert_eq!(mean, 3.0 * 40.0 * 5.0);
        assert_eq!(trace.workers.len(), 6 * 30);
        assert_eq!(trace.iterations.len(), 30);
        assert!(trace.units.is_empty());
        assert!(trace.iterations.iter().all(|i| i.laggard == Some(2)));
        assert_eq!(trace.workers[0].busy_us, 200);
        assert_eq!(trace.workers[2].busy_us, 600);
        assert_eq!(
            trace.workers[6].ready_us, 600,
            "iteration 1 starts after the slowest"
        );
    }

    /// A larger share of the data is more units of the same rows, as a run
    /// places more partitions on the worker (FlexRR's default: half the
    /// workers carry 75 % of the work).
    #[test]
    fn a_larger_share_of_the_data_is_more_units_of_the_same_size() {
        let uneven = Pattern::Persistent {
            workers: vec![0, 1],
            factor: 1.0,
            work_share: Some(0.75),
        };
        let (_, trace) = synthesise(4, 2, uneven);
        let units: Vec<u32> = trace.workers[..4].iter().map(|w| w.units).collect();
        assert_eq!(units, vec![6, 6, 2, 2]);
        let rows: Vec<u64> = trace.workers[..4].iter().map(|w| w.rows).collect();
        assert_eq!(rows, vec![60, 60, 20, 20]);
        assert_eq!(trace.workers[0].busy_us, 300);
        assert_eq!(trace.iterations[0].units, 16);
    }
}
