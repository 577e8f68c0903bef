//! Finds the laggard of an iteration from the workers' completion records.
//!
//! Timely's probe frontier is global: it passes iteration `t` only when the
//! slowest worker is done, so it cannot say *who* was slow. Each worker therefore
//! sends a [`WorkerRecord`] (when it started and finished `t`) to worker 0, and
//! this pure function names the worker that held the barrier up.

use crate::trace::WorkerRecord;

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

fn median(sorted: &[u64]) -> u64 {
    match sorted.len() {
        0 => 0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2,
    }
}

/// Names the laggard among `records` (one per worker, one iteration): the worker
/// that finished last, when it finished more than `threshold` × the others'
/// median busy time after that median. With one worker nobody lags.
pub fn detect_laggard(records: &[WorkerRecord], threshold: f64) -> LaggardReport {
    let start_us = records.iter().map(|r| r.ready_us).min().unwrap_or(0);
    let end_us = records
        .iter()
        .map(|r| r.finish_us)
        .max()
        .unwrap_or(start_us);
    let mut busy: Vec<(u64, u32)> = records
        .iter()
        .map(|r| (r.finish_us.saturating_sub(start_us), r.worker))
        .collect();
    // Latest last; among equal finish times the higher worker index counts as last.
    busy.sort_unstable();
    let all: Vec<u64> = busy.iter().map(|b| b.0).collect();
    let median_busy_us = median(&all);
    let Some(&(last_busy, last_worker)) = busy.last() else {
        return LaggardReport {
            start_us,
            end_us,
            laggard: None,
            lag_us: 0,
            median_busy_us,
        };
    };
    let others = median(&all[..all.len() - 1]);
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

    fn record(worker: u32, ready_us: u64, finish_us: u64) -> WorkerRecord {
        WorkerRecord {
            iteration: 0,
            worker,
            process: 0,
            units: 1,
            rows: 1,
            ready_us,
            finish_us,
            compute_us: 0,
            busy_us: finish_us - ready_us,
            barrier_wait_us: 0,
            operator_us: 0,
            bytes_sent: 0,
            gt_slowdown: 1.0,
        }
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
