//! Slowdowns that follow the clock, not the iteration.
//!
//! A `disrupted-machine` window slows a machine for a stretch of time,
//! whatever iteration its workers are in. A replay that kept each recorded
//! iteration's speeds would let a faster policy meet the windows at the same
//! iterations as the recorded run, which it does not: it gets through more
//! iterations per window. So when a trace shows a worker's slowdown changing
//! within an iteration (the sign of a slowdown keyed on time), the replay
//! takes every unit's cost without its slowdown and applies the slowdown the
//! trace shows for that worker at the replay's own time on the job clock.

use crate::trace::UnitRecord;

/// Each worker's recorded slowdown over the job clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Clock {
    /// The first iteration's start on the job clock, µs.
    start_us: u64,
    /// Per worker: (start on the job clock µs, slowdown) of each unit it
    /// began, by time.
    steps: Vec<Vec<(u64, f64)>>,
}

impl Clock {
    /// The clock of a trace's `units` whose first iteration began at
    /// `start_us`: `None` unless some worker's slowdown changes within one
    /// of its iterations (slowdowns keyed on the iteration then replay as
    /// recorded).
    pub fn from_units(units: &[UnitRecord], start_us: u64) -> Option<Clock> {
        let recorded = |u: &&UnitRecord| u.gt_slowdown.is_finite() && u.gt_slowdown >= 1.0;
        let mut steps: Vec<Vec<(u64, f64)>> = Vec::new();
        let mut seen: std::collections::HashMap<(u64, u32), f64> = Default::default();
        let mut keyed_on_time = false;
        for u in units.iter().filter(recorded) {
            let w = u.executor as usize;
            if steps.len() <= w {
                steps.resize_with(w + 1, Vec::new);
            }
            steps[w].push((u.start_us, u.gt_slowdown));
            let first = *seen
                .entry((u.iteration, u.executor))
                .or_insert(u.gt_slowdown);
            keyed_on_time |= first != u.gt_slowdown;
        }
        if !keyed_on_time {
            return None;
        }
        for s in &mut steps {
            s.sort_by_key(|&(t, _)| t);
        }
        Some(Clock { start_us, steps })
    }

    /// When the first iteration began on the job clock, µs.
    pub fn start_us(&self) -> u64 {
        self.start_us
    }

    /// Worker `w`'s slowdown at `at_us` on the job clock: that of the last
    /// unit it began by then in the recorded run (before its first unit,
    /// that one's; 1 for a worker that recorded none).
    pub fn slowdown(&self, w: usize, at_us: u64) -> f64 {
        let Some(steps) = self.steps.get(w).filter(|s| !s.is_empty()) else {
            return 1.0;
        };
        let i = steps.partition_point(|&(t, _)| t <= at_us);
        steps[i.saturating_sub(1)].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(iteration: u64, worker: u32, start_us: u64, slowdown: f64) -> UnitRecord {
        UnitRecord {
            owner: worker,
            start_us,
            end_us: start_us + 100,
            gt_slowdown: slowdown,
            ..crate::trace::tests_support::unit(iteration, worker, worker, 0)
        }
    }

    #[test]
    fn a_slowdown_changing_within_an_iteration_is_keyed_on_time() {
        // Worker 1 is slowed from 250 µs on, in the middle of iteration 0.
        let units = [
            unit(0, 0, 0, 1.0),
            unit(0, 1, 0, 1.0),
            unit(0, 1, 300, 5.0),
            unit(1, 1, 900, 5.0),
            unit(1, 1, 1_400, 1.0),
        ];
        let clock = Clock::from_units(&units, 0).expect("keyed on time");
        assert_eq!(clock.slowdown(1, 0), 1.0);
        assert_eq!(clock.slowdown(1, 299), 1.0);
        assert_eq!(clock.slowdown(1, 300), 5.0);
        assert_eq!(clock.slowdown(1, 1_000), 5.0);
        assert_eq!(clock.slowdown(1, 10_000), 1.0);
        assert_eq!(clock.slowdown(0, 5_000), 1.0);
        assert_eq!(clock.slowdown(7, 5_000), 1.0, "a worker it never saw");
    }

    #[test]
    fn slowdowns_that_hold_for_an_iteration_are_not() {
        let units = [
            unit(0, 0, 0, 1.0),
            unit(0, 0, 100, 1.0),
            unit(1, 0, 300, 5.0),
            unit(1, 0, 400, 5.0),
            unit(2, 0, 600, f64::NAN),
            unit(2, 0, 700, 3.0),
        ];
        assert_eq!(Clock::from_units(&units, 0), None);
    }
}
