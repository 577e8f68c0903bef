//! Slowdowns that follow the clock, not the iteration.
//!
//! A `disrupted-machine` window slows a machine for a stretch of time,
//! whatever iteration its workers are in. A replay that kept each recorded
//! iteration's speeds would let a faster policy meet the windows at the same
//! iterations as the recorded run, which it does not: it gets through more
//! iterations per window. So when a trace shows a worker's slowdown changing
//! within an iteration (the sign of a slowdown keyed on time), the replay
//! takes every unit's cost without its slowdown and applies the slowdowns the
//! trace shows for that worker over the replay's own time on the job clock
//! (a recorded unit's mean slowdown from its start to the next one's).

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

    /// How long `cost_us` of work without slowdowns takes worker `w` when
    /// begun at `at_us` on the job clock, µs: each stretch of it at the
    /// slowdown the recorded run met then (a unit's mean slowdown holds from
    /// its start to the next unit's), so work that runs into a recorded
    /// disruption's end speeds up there.
    pub fn span(&self, w: usize, at_us: u64, cost_us: u64) -> u64 {
        self.span_f(w, at_us as f64, cost_us as f64).round() as u64
    }

    /// [`Clock::span`] without rounding.
    pub(super) fn span_f(&self, w: usize, at: f64, cost: f64) -> f64 {
        crate::inject::stretch::time_through(cost, self.stretches(w, at))
    }

    /// The work without slowdowns worker `w` gets through in `wall` µs from
    /// `at` on the job clock, µs.
    pub(super) fn work_in(&self, w: usize, at: f64, wall: f64) -> f64 {
        let end = at + wall;
        self.stretches(w, at)
            .take_while(|&(from, _, _)| from < end)
            .map(|(from, to, factor)| (to.min(end) - from) / factor)
            .sum()
    }

    /// Worker `w`'s stretches of equal slowdown from `at` on: (from, to,
    /// slowdown), the last one ending at infinity.
    fn stretches(&self, w: usize, at: f64) -> impl Iterator<Item = (f64, f64, f64)> + '_ {
        let steps = self.steps.get(w).map_or(&[][..], Vec::as_slice);
        let first = steps
            .partition_point(|&(t, _)| t as f64 <= at)
            .saturating_sub(1);
        let mut now = at;
        let mut i = first;
        std::iter::from_fn(move || {
            if now.is_infinite() {
                return None;
            }
            let from = now;
            let Some(&(_, factor)) = steps.get(i) else {
                // A worker the trace never saw runs at full speed.
                now = f64::INFINITY;
                return Some((from, now, 1.0));
            };
            now = steps
                .get(i + 1)
                .map_or(f64::INFINITY, |&(t, _)| (t as f64).max(from));
            i += 1;
            Some((from, now, factor))
        })
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

    /// Worker 1 slowed 5× from 300 µs, in the middle of iteration 0, to
    /// 1,400 µs; worker 0 never.
    fn slowed_mid_iteration() -> Clock {
        let units = [
            unit(0, 0, 0, 1.0),
            unit(0, 1, 0, 1.0),
            unit(0, 1, 300, 5.0),
            unit(1, 1, 900, 5.0),
            unit(1, 1, 1_400, 1.0),
        ];
        Clock::from_units(&units, 0).expect("keyed on time")
    }

    #[test]
    fn a_slowdown_changing_within_an_iteration_is_keyed_on_time() {
        let clock = slowed_mid_iteration();
        assert_eq!(clock.slowdown(1, 0), 1.0);
        assert_eq!(clock.slowdown(1, 299), 1.0);
        assert_eq!(clock.slowdown(1, 300), 5.0);
        assert_eq!(clock.slowdown(1, 1_000), 5.0);
        assert_eq!(clock.slowdown(1, 10_000), 1.0);
        assert_eq!(clock.slowdown(0, 5_000), 1.0);
        assert_eq!(clock.slowdown(7, 5_000), 1.0, "a worker it never saw");
    }

    #[test]
    fn work_speeds_up_where_the_recorded_slowdown_ends() {
        let clock = slowed_mid_iteration();
        // Wholly before the slowdown, and wholly in it.
        assert_eq!(clock.span(1, 0, 200), 200);
        assert_eq!(clock.span(1, 300, 100), 500);
        // 100 µs of work by 300, the other 100 at 5×.
        assert_eq!(clock.span(1, 200, 200), 600);
        // 100 µs at 5× up to 1,400 (20 µs of work), the other 80 at full speed.
        assert_eq!(clock.span(1, 1_300, 100), 180);
        // Before a worker's first unit its first slowdown holds; a worker
        // the trace never saw runs at full speed.
        assert_eq!(clock.span(7, 50, 100), 100);
        // The work done in a stretch of time is the span's inverse.
        assert_eq!(clock.work_in(1, 200.0, 600.0), 200.0);
        assert_eq!(clock.work_in(1, 1_300.0, 180.0), 100.0);
        assert_eq!(clock.work_in(7, 0.0, 42.0), 42.0);
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
