//! What a predictor sees: each worker's history, one step per iteration,
//! normalised to the iteration's median so jobs of different speeds compare.

use std::collections::BTreeMap;

use crate::stats::quantiles;
use crate::trace::TraceSet;

/// One worker in one iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// Iteration.
    pub iteration: u64,
    /// Time per unit, µs.
    pub unit_us: f64,
    /// Time per unit relative to the iteration's median over workers: what the
    /// predictors predict.
    pub ratio: f64,
    /// Barrier wait relative to the iteration's median time per unit.
    pub wait_ratio: f64,
    /// Share of the iteration's units this worker computed.
    pub share: f64,
    /// The iteration's median time per unit, µs.
    pub median_us: f64,
    /// The iteration's spread: (p90 − p10) / median of the time per unit.
    pub spread: f64,
    /// Workers that computed in the iteration (so `share × workers` is 1 for an
    /// even share).
    pub workers: u32,
}

/// One worker's steps, in iteration order.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSeries {
    /// Worker.
    pub worker: u32,
    /// Its steps.
    pub steps: Vec<Step>,
}

/// Why a history cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// No worker rows.
    #[error("the trace has no worker rows")]
    Empty,
    /// A single worker: there is no median to be slower than.
    #[error("the trace has a single worker; straggler prediction needs at least two")]
    SingleWorker,
    /// A time is NaN or infinite.
    #[error("worker {worker}, iteration {iteration}: time per unit is not finite")]
    NotFinite {
        /// Worker.
        worker: u32,
        /// Iteration.
        iteration: u64,
    },
}

/// The steps of one iteration from its rows `(worker, µs per unit, barrier
/// wait µs, units)`: each worker's time relative to the iteration's median.
pub(crate) fn iteration_steps(
    iteration: u64,
    rows: impl IntoIterator<Item = (u32, f64, f64, u32)>,
) -> Vec<(u32, Step)> {
    let rows: Vec<(u32, f64, f64, u32)> = rows.into_iter().collect();
    let times: Vec<f64> = rows.iter().map(|r| r.1).collect();
    if times.is_empty() {
        return Vec::new();
    }
    let [median, p90, p10] = quantiles(&times, [0.5, 0.9, 0.1]);
    let median = median.max(1e-9);
    let spread = (p90 - p10) / median;
    let units: u32 = rows.iter().map(|r| r.3).sum();
    let workers = rows.len() as u32;
    rows.into_iter()
        .map(|(worker, unit_us, wait_us, n)| {
            (
                worker,
                Step {
                    iteration,
                    unit_us,
                    ratio: unit_us / median,
                    wait_ratio: wait_us / median,
                    share: f64::from(n) / f64::from(units.max(1)),
                    median_us: median,
                    spread,
                    workers,
                },
            )
        })
        .collect()
}

/// Every worker's series from the `workers` table of `trace`. Workers that
/// computed nothing in an iteration have no step there.
pub fn worker_series(trace: &TraceSet) -> Result<Vec<WorkerSeries>, HistoryError> {
    let mut by_iteration: BTreeMap<u64, Vec<(u32, f64, f64, u32)>> = BTreeMap::new();
    for w in &trace.workers {
        if w.units == 0 {
            continue;
        }
        let unit_us = w.busy_us as f64 / f64::from(w.units);
        if !unit_us.is_finite() {
            return Err(HistoryError::NotFinite {
                worker: w.worker,
                iteration: w.iteration,
            });
        }
        by_iteration.entry(w.iteration).or_default().push((
            w.worker,
            unit_us,
            w.barrier_wait_us as f64,
            w.units,
        ));
    }
    if by_iteration.is_empty() {
        return Err(HistoryError::Empty);
    }
    let mut series: BTreeMap<u32, Vec<Step>> = BTreeMap::new();
    for (iteration, rows) in by_iteration {
        for (worker, step) in iteration_steps(iteration, rows) {
            series.entry(worker).or_default().push(step);
        }
    }
    if series.len() < 2 {
        return Err(HistoryError::SingleWorker);
    }
    Ok(series
        .into_iter()
        .map(|(worker, steps)| WorkerSeries { worker, steps })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::WorkerRecord;

    fn trace(rows: &[(u64, u32, u64)]) -> TraceSet {
        TraceSet {
            units: Vec::new(),
            workers: rows
                .iter()
                .map(|&(t, w, us)| WorkerRecord::single_unit(t, w, 0, us))
                .collect(),
            iterations: Vec::new(),
            stamps: Vec::new(),
        }
    }

    #[test]
    fn ratios_are_to_the_iteration_median() {
        let s = worker_series(&trace(&[
            (0, 0, 100),
            (0, 1, 100),
            (0, 2, 300),
            (1, 0, 50),
            (1, 1, 50),
            (1, 2, 50),
        ]))
        .expect("series");
        assert_eq!(s.len(), 3);
        assert_eq!(s[2].steps[0].ratio, 3.0);
        assert_eq!(s[2].steps[1].ratio, 1.0);
        assert_eq!(s[0].steps[0].median_us, 100.0);
        assert!((s[0].steps[0].share - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn empty_and_single_worker_traces_are_refused() {
        assert_eq!(worker_series(&trace(&[])), Err(HistoryError::Empty));
        assert_eq!(
            worker_series(&trace(&[(0, 0, 1), (1, 0, 2)])),
            Err(HistoryError::SingleWorker)
        );
    }
}
