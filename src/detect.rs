//! The laggard rule: which worker held an iteration up, from the workers'
//! ready and finish times alone. A run's worker 0 applies it as iterations
//! close, and the importers and the synthetic traces apply it to recorded
//! timings, so every trace names its laggards the same way.

use crate::stats::median_u64;

/// Default laggard threshold (fraction of the median busy time).
pub const DEFAULT_LAGGARD_THRESHOLD: f64 = 0.25;

/// One worker's times in one iteration, as the laggard rule reads them.
pub trait WorkerTiming {
    /// The worker's index.
    fn worker(&self) -> u32;
    /// When the worker held the iteration's parameters, µs.
    fn ready_us(&self) -> u64;
    /// When it finished its last unit of the iteration, µs.
    fn finish_us(&self) -> u64;
}

/// Who finished last and by how much.
#[derive(Debug, Clone, PartialEq)]
pub struct LaggardReport {
    /// Earliest `ready_us` over the workers: when the iteration began.
    pub start_us: u64,
    /// Latest `finish_us`: when the last worker was done.
    pub end_us: u64,
    /// The last worker, if its lag exceeds the threshold.
    pub laggard: Option<u32>,
    /// How much later the last worker finished than the median of the others.
    pub lag_us: u64,
    /// Median over all workers of `finish_us - start_us`.
    pub median_busy_us: u64,
}

/// Names the laggard among `records` (one per worker, one iteration): the worker
/// that finished last, when it finished more than `threshold` × the others'
/// median busy time after that median. With one worker nobody lags.
pub fn detect_laggard<R: WorkerTiming>(records: &[R], threshold: f64) -> LaggardReport {
    let start_us = records.iter().map(|r| r.ready_us()).min().unwrap_or(0);
    let end_us = records
        .iter()
        .map(|r| r.finish_us())
        .max()
        .unwrap_or(start_us);
    let mut busy: Vec<(u64, u32)> = records
        .iter()
        .map(|r| (r.finish_us().saturating_sub(start_us), r.worker()))
        .collect();
    // Latest last; among equal finish times the higher worker index counts as last.
    busy.sort_unstable();
    let all: Vec<u64> = busy.iter().map(|b| b.0).collect();
    let median_busy_us = median_u64(&all);
    let Some(&(last_busy, last_worker)) = busy.last() else {
        return LaggardReport {
            start_us,
            end_us,
            laggard: None,
            lag_us: 0,
            median_busy_us,
        };
    };
    let others = median_u64(&all[..all.len() - 1]);
    let lag_us = if all.len() > 1 {
        last_busy.saturating_sub(others)
    } else {
        0
    };
    let laggard = (all.len() > 1 && lag_us > 0 && lag_us as f64 > threshold * others as f64)
        .then_some(last_worker);
    LaggardReport {
        start_us,
        end_us,
        laggard,
        lag_us,
        median_busy_us,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::WorkerRecord;

    fn record(worker: u32, ready_us: u64, finish_us: u64) -> WorkerRecord {
        WorkerRecord::single_unit(0, worker, ready_us, finish_us)
    }

    #[test]
    fn names_the_worker_far_behind() {
        let r = detect_laggard(
            &[
                record(0, 10, 110),
                record(1, 12, 400),
                record(2, 11, 105),
                record(3, 10, 120),
            ],
            0.25,
        );
        assert_eq!(r.laggard, Some(1));
        assert_eq!(r.start_us, 10);
        assert_eq!(r.end_us, 400);
        // others' busy times 95, 100, 110 → median 100; last 390
        assert_eq!(r.lag_us, 290);
    }

    #[test]
    fn names_nobody_below_the_threshold() {
        let r = detect_laggard(
            &[record(0, 0, 100), record(1, 0, 110), record(2, 0, 120)],
            0.25,
        );
        assert_eq!(r.laggard, None);
        assert_eq!(r.lag_us, 15);
    }

    #[test]
    fn one_worker_never_lags() {
        let r = detect_laggard(&[record(0, 0, 1000)], 0.0);
        assert_eq!(r.laggard, None);
        assert_eq!(r.lag_us, 0);
        assert_eq!(r.median_busy_us, 1000);
    }
}
