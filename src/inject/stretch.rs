//! How long a piece of work takes under a schedule: its undelayed duration
//! stretched by the slowdowns it meets while it runs.
//!
//! A slowdown keyed on the iteration holds for the whole of a unit, so the
//! unit takes `f` times its undelayed duration. A `disrupted-machine` window
//! slows a machine for a stretch of wall-clock time, as FlexRR's disruptor
//! process (and [`CpuDisruptor`](super::CpuDisruptor)) did: work done inside
//! the window goes at `1 / f` of its speed, work outside it at full speed. A
//! unit begun just before a window ends is slow only until the window ends,
//! and one begun just before a window opens is slowed from then on.

use std::time::Duration;

use super::StragglerSchedule;

/// The most windows one stretch walks; past it the rest of the work takes
/// the slowdown of the last window reached (only a window far shorter than
/// the work, e.g. a 1 µs period, gets there).
const MAX_WINDOWS: u32 = 100_000;

/// A piece of work's duration under the schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stretch {
    /// How long it takes, injected slowdowns included.
    pub span: Duration,
    /// The mean slowdown it met: `span` over the undelayed duration (the
    /// slowdown at its start when that is zero). For a slowdown keyed on the
    /// iteration, exactly that factor.
    pub slowdown: f64,
}

impl StragglerSchedule {
    /// How long `base` of undelayed work by `worker` in `iteration` takes
    /// when begun at `start_us` after the job started, and the mean slowdown
    /// it meets on the way (see the [module docs](crate::inject::stretch)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use forestall::inject::{Pattern, StragglerSchedule};
    ///
    /// let pattern = Pattern::SlowWorker { probability: 1.0, delay_percent: 400.0 };
    /// let schedule = StragglerSchedule::new(1, pattern, 4);
    /// let stretch = schedule.stretch(0, 3, 0, Duration::from_millis(10));
    /// assert_eq!(stretch.span, Duration::from_millis(50));
    /// assert_eq!(stretch.slowdown, 5.0);
    /// ```
    pub fn stretch(&self, worker: u32, iteration: u64, start_us: u64, base: Duration) -> Stretch {
        let at_start = self.slowdown(worker, iteration, start_us);
        let Some(period_us) = self.disruption_period_us() else {
            return Stretch {
                span: saturating_secs(base.as_secs_f64() * at_start),
                slowdown: at_start,
            };
        };
        let base_us = base.as_secs_f64() * 1e6;
        if base_us <= 0.0 {
            return Stretch {
                span: base,
                slowdown: at_start,
            };
        }
        // The windows from the one the work begins in, each at its slowdown
        // (a window's slowdown is the same throughout it).
        let first = start_us / period_us;
        let windows = (first..first + u64::from(MAX_WINDOWS)).map(|window| {
            let from = (window * period_us).max(start_us) as f64;
            let to = ((window + 1) * period_us) as f64;
            (
                from,
                to,
                self.slowdown(worker, iteration, window * period_us),
            )
        });
        let span_us = time_through(base_us, windows);
        Stretch {
            span: saturating_secs(span_us / 1e6),
            slowdown: (span_us / base_us).max(1.0),
        }
    }
}

/// How long `work` µs of undelayed work takes through consecutive stretches
/// of time `(from, to, slowdown)` (µs; the first from the work's start,
/// each ending where the next begins; the last may end at infinity), µs:
/// inside each it goes at `1 / slowdown` of its speed, and past the last at
/// the last one's.
pub(crate) fn time_through(work: f64, stretches: impl IntoIterator<Item = (f64, f64, f64)>) -> f64 {
    let mut left = work;
    let mut took = 0.0;
    let mut last = 1.0;
    for (from, to, factor) in stretches {
        let can = (to - from) / factor;
        if left <= can {
            return took + left * factor;
        }
        left -= can;
        took += to - from;
        last = factor;
    }
    took + left * last
}

/// `secs` seconds as a duration, `Duration::MAX` past it (the spans of
/// extreme knobs), zero for what is not a positive number.
pub fn saturating_secs(secs: f64) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::Pattern;

    const PERIOD: u64 = 10_000;

    fn disrupted(probability: f64) -> StragglerSchedule {
        let pattern = Pattern::DisruptedMachine {
            probability,
            period_us: PERIOD,
            delay_percent: 400.0,
            workers_per_machine: 2,
        };
        StragglerSchedule::new(5, pattern, 4)
    }

    /// A window that disrupts worker 0's machine followed by one that
    /// disrupts nobody.
    fn slow_then_clear(schedule: &StragglerSchedule) -> u64 {
        (0..10_000)
            .find(|&k| {
                schedule.disrupted_machine(k) == Some(0)
                    && schedule.disrupted_machine(k + 1).is_none()
            })
            .expect("such a pair of windows")
    }

    fn us(d: Duration) -> f64 {
        d.as_secs_f64() * 1e6
    }

    #[test]
    fn a_slowdown_keyed_on_the_iteration_stretches_the_whole_unit() {
        for pattern in [
            Pattern::None,
            Pattern::SlowWorker {
                probability: 0.5,
                delay_percent: 150.0,
            },
            Pattern::PowerLaw {
                alpha: 4.0,
                max_slowdown: 20.0,
            },
        ] {
            let schedule = StragglerSchedule::new(9, pattern, 8);
            for (w, t) in [(0, 0), (3, 7), (7, 100)] {
                let base = Duration::from_micros(12_345);
                let f = schedule.slowdown(w, t, 999);
                let s = schedule.stretch(w, t, 999, base);
                assert_eq!(s.span, base.mul_f64(f));
                assert_eq!(s.slowdown.to_bits(), f.to_bits());
            }
        }
    }

    #[test]
    fn work_in_a_window_goes_at_its_slowdown_and_speeds_up_when_it_ends() {
        let schedule = disrupted(0.5);
        let k = slow_then_clear(&schedule);
        // Begun 100 µs before the disrupted window ends: 20 µs of work get
        // done by then, the other 980 at full speed.
        let start = (k + 1) * PERIOD - 100;
        let s = schedule.stretch(0, 0, start, Duration::from_micros(1_000));
        assert!((us(s.span) - 1_080.0).abs() < 1e-3, "{:?}", s.span);
        assert!((s.slowdown - 1.08).abs() < 1e-6);
        // Worker 2 is on machine 1, which the window leaves alone.
        let other = schedule.stretch(2, 0, start, Duration::from_micros(1_000));
        assert!((us(other.span) - 1_000.0).abs() < 1e-3);
        assert_eq!(other.slowdown, 1.0);
    }

    #[test]
    fn work_begun_before_a_window_slows_when_it_opens() {
        let schedule = disrupted(0.5);
        let k = (1..10_000)
            .find(|&k| {
                schedule.disrupted_machine(k - 1).is_none()
                    && schedule.disrupted_machine(k) == Some(0)
            })
            .expect("a clear window before a disrupted one");
        // 200 µs of work before the window opens, the other 300 at 5×.
        let start = k * PERIOD - 200;
        let s = schedule.stretch(1, 4, start, Duration::from_micros(500));
        assert!((us(s.span) - 1_700.0).abs() < 1e-3, "{:?}", s.span);
    }

    #[test]
    fn every_window_disrupted_is_the_full_factor_and_none_is_none() {
        let base = Duration::from_micros(3 * PERIOD + 17);
        let always = disrupted(1.0);
        // With p = 1 every window disrupts some machine: keep to a worker
        // whose machine each window picked.
        let s = StragglerSchedule::new(
            5,
            Pattern::DisruptedMachine {
                probability: 1.0,
                period_us: PERIOD,
                delay_percent: 400.0,
                workers_per_machine: 4,
            },
            4,
        )
        .stretch(3, 0, 123, base);
        assert!((us(s.span) - 5.0 * us(base)).abs() < 1e-2, "{:?}", s.span);
        assert!((s.slowdown - 5.0).abs() < 1e-9);
        let never = disrupted(0.0).stretch(0, 0, 77, base);
        assert_eq!(never.slowdown, 1.0);
        assert!((us(never.span) - us(base)).abs() < 1e-3);
        // Whatever the windows, the span lies between the base and 5× it and
        // grows with the work.
        let mut last = Duration::ZERO;
        for micros in (0..60_000).step_by(1_337) {
            let base = Duration::from_micros(micros);
            let s = always.stretch(1, 0, 4_321, base);
            assert!(s.span + Duration::from_nanos(1) >= base);
            assert!(s.span <= base.mul_f64(5.0) + Duration::from_nanos(1));
            assert!(s.span >= last);
            last = s.span;
        }
    }

    #[test]
    fn extreme_spans_saturate() {
        let pattern = Pattern::SlowWorker {
            probability: 1.0,
            delay_percent: 1e12,
        };
        let s = StragglerSchedule::new(1, pattern, 1).stretch(0, 0, 0, Duration::MAX);
        assert_eq!(s.span, Duration::MAX);
        assert_eq!(saturating_secs(f64::NAN), Duration::ZERO);
        assert_eq!(saturating_secs(-1.0), Duration::ZERO);
        assert_eq!(saturating_secs(f64::INFINITY), Duration::MAX);
    }

    #[test]
    fn no_work_takes_no_time() {
        let s = disrupted(1.0).stretch(0, 0, 5, Duration::ZERO);
        assert_eq!(s.span, Duration::ZERO);
        assert!(s.slowdown >= 1.0);
    }
}
