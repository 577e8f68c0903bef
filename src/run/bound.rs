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

/// An iteration's bounds, µs after its start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IterationBound {
    /// The load-balancing bound: the work as if it were fluid.
    pub fluid_us: u64,
    /// The bound with whole units: the iteration's units, each of the mean
    /// unit's nominal work, placed one by one where they finish earliest —
    /// for units alike on workers of different speeds the shortest
    /// makespan there is. The fluid bound less what no placement of whole
    /// units recovers: a slow worker's share that is not a whole number of
    /// its units, the last unit's tail.
    pub units_us: u64,
}

/// Both bounds of one iteration that started at `start_us`, from its
/// workers' records, µs. `pace_ns_per_row` is the job's pace (0: native
/// speed).
pub fn iteration_bounds(
    workers: &[WorkerRecord],
    start_us: u64,
    pace_ns_per_row: u64,
) -> IterationBound {
    let us_per_row = if pace_ns_per_row > 0 {
        pace_ns_per_row as f64 / 1000.0
    } else {
        let mut rates: Vec<f64> = workers
            .iter()
            .filter(|w| w.rows > 0)
            .map(|w| w.busy_us.saturating_sub(w.gt_delay_us) as f64 / w.rows as f64)
            .collect();
        if rates.is_empty() {
            return IterationBound::default();
        }
        crate::stats::median(&mut rates)
    };
    let speeds: Vec<f64> = workers
        .iter()
        .map(|w| {
            let measured = if pace_ns_per_row > 0 {
                w.rows as f64 * us_per_row
            } else {
                w.compute_us as f64
            };
            if measured > 0.0 {
                measured / (measured + w.gt_delay_us as f64)
            } else {
                1.0 / w.gt_slowdown.max(1.0)
            }
        })
        .collect();
    let rows: u64 = workers.iter().map(|w| w.rows).sum();
    let units: u64 = workers.iter().map(|w| u64::from(w.units)).sum();
    let (fluid, whole) = fluid_and_whole(rows as f64 * us_per_row, units, &speeds);
    let fixed = workers
        .iter()
        .filter(|w| w.units > 0)
        .map(|w| w.ready_us.saturating_sub(start_us))
        .min()
        .unwrap_or(0);
    IterationBound {
        fluid_us: fluid.round() as u64 + fixed,
        units_us: whole.round() as u64 + fixed,
    }
}

/// Both bounds of `work` split into `units` alike, on workers of these
/// `speeds` (work per unit of time): the work over their combined speed
/// (fluid), and the makespan of the units placed where they finish
/// earliest (never below the fluid one). Zero without speed.
pub(crate) fn fluid_and_whole(work: f64, units: u64, speeds: &[f64]) -> (f64, f64) {
    let speed: f64 = speeds.iter().sum();
    if speed <= 0.0 {
        return (0.0, 0.0);
    }
    let fluid = work / speed;
    let whole = if units > 0 {
        whole_units_makespan(units, work / units as f64, speeds).max(fluid)
    } else {
        fluid
    };
    (fluid, whole)
}

/// The makespan of `units` units of `unit_us` nominal work each on workers
/// of these `speeds`, each unit placed where it finishes earliest (for
/// identical units on workers of different speeds, the optimum).
fn whole_units_makespan(units: u64, unit_us: f64, speeds: &[f64]) -> f64 {
    let working = (0..speeds.len()).filter(|&w| speeds[w] > 0.0);
    greedy_makespan(units, working, |w, at| at + unit_us / speeds[w])
}

/// The makespan of `units` units placed one by one on whichever of
/// `workers` finishes it earliest, where a unit worker w begins at `at`
/// (µs, ≥ 0) ends at `end(w, at)`; ties go to the worker listed first. Zero
/// without workers.
pub(crate) fn greedy_makespan(
    units: u64,
    workers: impl IntoIterator<Item = usize>,
    end: impl Fn(usize, f64) -> f64,
) -> f64 {
    use std::cmp::Reverse;
    // Finish times are ≥ 0, so their bits order like the numbers; the
    // second key keeps the listed order among ties.
    let mut next: std::collections::BinaryHeap<Reverse<(u64, usize, usize)>> = workers
        .into_iter()
        .enumerate()
        .map(|(k, w)| Reverse((end(w, 0.0).to_bits(), k, w)))
        .collect();
    if next.is_empty() {
        return 0.0;
    }
    let mut makespan = 0.0f64;
    for _ in 0..units {
        let Reverse((f, k, w)) = next.pop().expect("a worker");
        let f = f64::from_bits(f);
        makespan = makespan.max(f);
        next.push(Reverse((end(w, f).to_bits(), k, w)));
    }
    makespan
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
        assert_eq!(iteration_bounds(&ws, 0, 1000).fluid_us, 1111);
    }

    #[test]
    fn no_stragglers_is_the_mean_work_plus_what_is_not_compute() {
        // every worker reads its parameters 50 µs after the start
        let ws: Vec<WorkerRecord> = (0..4).map(|w| worker(w, 1000, 1.0, 1050)).collect();
        assert_eq!(iteration_bounds(&ws, 0, 1000).fluid_us, 1050);
    }

    #[test]
    fn a_worker_that_gave_its_units_away_still_counts_at_its_slowdown() {
        // worker 1 (4× slow) handed both its units to worker 0
        let ws = vec![worker(0, 2000, 1.0, 2000), worker(1, 0, 4.0, 0)];
        assert_eq!(iteration_bounds(&ws, 0, 1000).fluid_us, 1600);
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
        assert_eq!(iteration_bounds(&ws, 0, 0).fluid_us, 400);
    }

    #[test]
    fn nothing_recorded_is_zero() {
        assert_eq!(iteration_bounds(&[], 0, 1000).fluid_us, 0);
    }

    #[test]
    fn whole_units_leave_a_slow_worker_s_fraction_of_a_unit() {
        // 4 workers of 4 units of 250 µs (1,000 rows at 1 µs), one 5× slow:
        // fluid, 4,000 µs over 3.2 is 1,250 µs; in whole units the slow one
        // can do one unit (1,250 µs) and the others 5 each (1,250 µs) — 16
        // units. With 3 units each the others do 4 and the slow one none.
        let mut ws: Vec<WorkerRecord> = (0..3).map(|w| worker(w, 1000, 1.0, 1000)).collect();
        ws.push(worker(3, 1000, 5.0, 5000));
        for w in &mut ws {
            w.units = 4;
        }
        let b = iteration_bounds(&ws, 0, 1000);
        assert_eq!(
            b,
            IterationBound {
                fluid_us: 1250,
                units_us: 1250
            }
        );
        for w in &mut ws {
            w.units = 3; // 333 µs a unit: 12 units, the slow one's take 1,667 µs
        }
        let b = iteration_bounds(&ws, 0, 1000);
        assert_eq!(b.fluid_us, 1250);
        assert_eq!(b.units_us, 1333);
    }

    #[test]
    fn whole_units_are_never_below_the_fluid_bound() {
        for units in 1..40u32 {
            for slow in [1.0, 1.5, 3.0, 7.0] {
                let mut ws: Vec<WorkerRecord> = (0..5).map(|w| worker(w, 997, 1.0, 997)).collect();
                ws.push(worker(5, 997, slow, (997.0 * slow) as u64));
                for w in &mut ws {
                    w.units = units;
                }
                let b = iteration_bounds(&ws, 0, 1000);
                assert!(b.units_us >= b.fluid_us, "{units} {slow} {b:?}");
            }
        }
    }
}
