//! The load-balancing bound of an iteration: how long it would have taken had
//! its work been spread over the workers in proportion to their speed, as if
//! it were fluid. No policy that keeps BSP semantics (every unit computed once,
//! by one worker, before the iteration ends) can beat it: whichever way the
//! units are placed, some worker finishes no earlier than the total work over
//! the combined speed.
//!
//! From the injected ground truth of each worker's record:
//! - nominal work: what its units take undelayed: `rows × pace` in paced mode;
//!   at native speed, its rows at the iteration's median time per row (each
//!   worker's busy time less its injected delay, over its rows), since the
//!   measured gradient time leaves out the rest of a unit's work;
//! - speed: the inverse of its mean slowdown, nominal / (nominal + injected
//!   delay) (at native speed, from its measured compute, which the delay
//!   stretches); a worker that computed nothing counts at `1 / gt_slowdown`;
//! - the bound: Σ nominal / Σ speed, plus the iteration's time that is not
//!   the workers' own: the earliest a worker had its parameters, which no
//!   placement of units changes.

use crate::trace::WorkerRecord;

/// An iteration's estimated time without the injected delays, µs: its
/// slowest worker's finish after `start_us`, less the delay injected into it.
pub fn iteration_ideal_us(workers: &[WorkerRecord], start_us: u64) -> u64 {
    workers
        .iter()
        .map(|r| {
            r.finish_us
                .saturating_sub(start_us)
                .saturating_sub(r.gt_delay_us)
        })
        .max()
        .unwrap_or(0)
}

/// The bound of one iteration that started at `start_us`, from its workers'
/// records, µs. `pace_ns_per_row` is the job's pace (0: native speed).
pub fn iteration_bound_us(workers: &[WorkerRecord], start_us: u64, pace_ns_per_row: u64) -> u64 {
    let us_per_row = if pace_ns_per_row > 0 {
        pace_ns_per_row as f64 / 1000.0
    } else {
        let mut rates: Vec<f64> = workers
            .iter()
            .filter(|w| w.rows > 0)
            .map(|w| w.busy_us.saturating_sub(w.gt_delay_us) as f64 / w.rows as f64)
            .collect();
        if rates.is_empty() {
            return 0;
        }
        crate::analyze::classify::median(&mut rates)
    };
    let mut rows = 0u64;
    let mut speed_sum = 0.0;
    for w in workers {
        rows += w.rows;
        let measured = if pace_ns_per_row > 0 {
            w.rows as f64 * us_per_row
        } else {
            w.compute_us as f64
        };
        speed_sum += if measured > 0.0 {
            measured / (measured + w.gt_delay_us as f64)
        } else {
            1.0 / w.gt_slowdown.max(1.0)
        };
    }
    let fluid = if speed_sum > 0.0 {
        rows as f64 * us_per_row / speed_sum
    } else {
        0.0
    };
    let fixed = workers
        .iter()
        .filter(|w| w.units > 0)
        .map(|w| w.ready_us.saturating_sub(start_us))
        .min()
        .unwrap_or(0);
    fluid.round() as u64 + fixed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker that computed `rows` rows at 1 µs a row (paced at 1,000
    /// ns/row), slowed `slowdown`-fold, ending `finish_us` after the start
    /// (ready at `finish_us` less its time computing).
    fn worker(w: u32, rows: u64, slowdown: f64, finish_us: u64) -> WorkerRecord {
        let ready = finish_us.saturating_sub((rows as f64 * slowdown) as u64);
        let mut r = WorkerRecord::single_unit(0, w, ready, finish_us);
        r.units = u32::from(rows > 0);
        r.rows = rows;
        r.gt_slowdown = slowdown;
        r.gt_delay_us = (rows as f64 * (slowdown - 1.0)) as u64;
        r
    }

    #[test]
    fn a_slowed_worker_counts_at_its_speed() {
        // 8 workers of 1,000 µs of work; one 5× slower: 8,000 µs over a combined
        // speed of 7.2 is 1,111 µs, against 5,000 µs under BSP.
        let mut ws: Vec<WorkerRecord> = (0..7).map(|w| worker(w, 1000, 1.0, 1000)).collect();
        ws.push(worker(7, 1000, 5.0, 5000));
        assert_eq!(iteration_bound_us(&ws, 0, 1000), 1111);
    }

    #[test]
    fn no_stragglers_is_the_mean_work_plus_what_is_not_compute() {
        // every worker reads its parameters 50 µs after the start
        let ws: Vec<WorkerRecord> = (0..4).map(|w| worker(w, 1000, 1.0, 1050)).collect();
        assert_eq!(iteration_bound_us(&ws, 0, 1000), 1050);
    }

    #[test]
    fn a_worker_that_gave_its_units_away_still_counts_at_its_slowdown() {
        // worker 1 (4× slow) handed both its units to worker 0
        let ws = vec![worker(0, 2000, 1.0, 2000), worker(1, 0, 4.0, 0)];
        assert_eq!(iteration_bound_us(&ws, 0, 1000), 1600);
    }

    #[test]
    fn native_speed_takes_work_from_busy_time_and_speed_from_compute() {
        // 10 rows each, 30 µs a row once the delay is taken off busy time; the
        // gradient alone took 100 µs and worker 1's was stretched 2×
        let mut ws = vec![worker(0, 10, 1.0, 300), worker(1, 10, 2.0, 600)];
        for w in &mut ws {
            w.ready_us = 0;
            w.compute_us = 100;
            w.busy_us = 300;
        }
        ws[1].gt_delay_us = 100;
        ws[1].busy_us = 400;
        // 600 µs of work at speeds 1 and 0.5
        assert_eq!(iteration_bound_us(&ws, 0, 0), 400);
    }

    #[test]
    fn nothing_recorded_is_zero() {
        assert_eq!(iteration_bound_us(&[], 0, 1000), 0);
    }
}
