//! A real disruptor for `disrupted-machine`: threads that burn CPU while their
//! machine's window is disrupted.
//!
//! The default way forestall injects a [`Pattern::DisruptedMachine`] is emulated:
//! the compute operator multiplies each unit's time by
//! [`StragglerSchedule::slowdown`]. [`CpuDisruptor`] is the alternative FlexRR used:
//! it competes for the machine's cores, so the slowdown is whatever the operating
//! system's scheduler makes of the contention. Its effect therefore depends on the
//! number of cores, on what else runs, and on `threads`: with more spare cores than
//! burning threads, the workers may not slow down at all. Use it to check that a
//! policy copes with real interference; use the emulated slowdown when results must
//! be reproducible. Do not use both at once for the same job unless you mean to.
//!
//! [`Pattern::DisruptedMachine`]: super::Pattern::DisruptedMachine

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::StragglerSchedule;

/// How long a disruptor thread sleeps at most before it checks the stop flag and
/// the schedule again.
const POLL: Duration = Duration::from_millis(10);

/// How long one round of CPU burning lasts at most before the stop flag is checked.
const BURN_ROUND: Duration = Duration::from_millis(1);

/// Threads that burn CPU on one machine during the windows in which a
/// [`StragglerSchedule`] of a [`Pattern::DisruptedMachine`] disrupts that machine.
///
/// Started with [`CpuDisruptor::start`]; stopped (and joined) by
/// [`CpuDisruptor::stop`] or on drop. For any other pattern it starts no threads.
/// See the [module docs](crate::inject::disruptor) for when to prefer it over the emulated slowdown.
///
/// [`Pattern::DisruptedMachine`]: super::Pattern::DisruptedMachine
#[derive(Debug)]
pub struct CpuDisruptor {
    stop: Arc<AtomicBool>,
    burn_rounds: Arc<AtomicU64>,
    handles: Vec<JoinHandle<()>>,
}

impl CpuDisruptor {
    /// Starts `threads` OS threads that burn CPU while `machine` is disrupted
    /// according to `schedule`, with windows counted from `job_start`, and sleep
    /// otherwise.
    ///
    /// Starts nothing when the schedule's pattern is not `disrupted-machine`. If the
    /// operating system refuses a thread, a warning is logged and the disruptor runs
    /// with the threads it got.
    pub fn start(
        schedule: StragglerSchedule,
        machine: u32,
        job_start: Instant,
        threads: usize,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let burn_rounds = Arc::new(AtomicU64::new(0));
        let mut handles = Vec::new();
        if let Some(period_us) = schedule.disruption_period_us() {
            for index in 0..threads {
                let disruptor = DisruptorThread {
                    schedule: schedule.clone(),
                    machine,
                    job_start,
                    period_us,
                    stop: Arc::clone(&stop),
                    burn_rounds: Arc::clone(&burn_rounds),
                };
                let spawned = std::thread::Builder::new()
                    .name(format!("forestall-disruptor-{machine}-{index}"))
                    .spawn(move || disruptor.run());
                match spawned {
                    Ok(handle) => handles.push(handle),
                    Err(err) => {
                        tracing::warn!(
                            cause = %err,
                            machine,
                            started = index,
                            requested = threads,
                            "failed to start a disruptor thread"
                        );
                        break;
                    }
                }
            }
        }
        Self {
            stop,
            burn_rounds,
            handles,
        }
    }

    /// The number of disruptor threads running.
    pub fn threads(&self) -> usize {
        self.handles.len()
    }

    /// How many rounds (of at most a millisecond each) of CPU burning the threads
    /// have done so far, all threads together.
    pub fn burn_rounds(&self) -> u64 {
        self.burn_rounds.load(Ordering::Relaxed)
    }

    /// Stops the threads and waits for them; each notices within about 10 ms.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for handle in self.handles.drain(..) {
            if handle.join().is_err() {
                tracing::warn!("a disruptor thread panicked");
            }
        }
    }
}

impl Drop for CpuDisruptor {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// What one disruptor thread needs.
struct DisruptorThread {
    schedule: StragglerSchedule,
    machine: u32,
    job_start: Instant,
    period_us: u64,
    stop: Arc<AtomicBool>,
    burn_rounds: Arc<AtomicU64>,
}

impl DisruptorThread {
    fn run(self) {
        let period = Duration::from_micros(self.period_us);
        while !self.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let elapsed = now.saturating_duration_since(self.job_start);
            let elapsed_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
            let window = elapsed_us / self.period_us;
            let window_end_us = window.saturating_add(1).saturating_mul(self.period_us);
            let until_window_end =
                Duration::from_micros(window_end_us.saturating_sub(elapsed_us)).min(period);
            if self.schedule.disrupted_machine(window) == Some(self.machine) {
                burn(now + until_window_end.min(BURN_ROUND));
                self.burn_rounds.fetch_add(1, Ordering::Relaxed);
            } else {
                // Before the job starts, `elapsed` is zero; sleeping in short steps
                // keeps the thread responsive to both the stop flag and window 0.
                std::thread::sleep(until_window_end.clamp(Duration::from_micros(100), POLL));
            }
        }
    }
}

/// Busy arithmetic until `deadline`.
fn burn(deadline: Instant) {
    let mut x = 0x9E37_79B9_7F4A_7C15_u64;
    loop {
        for _ in 0..4_096 {
            x = std::hint::black_box(
                x.wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407),
            );
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    std::hint::black_box(x);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::Pattern;

    fn disrupted(probability: f64, workers: u32) -> StragglerSchedule {
        let pattern = Pattern::DisruptedMachine {
            probability,
            period_us: 50_000,
            delay_percent: 100.0,
            workers_per_machine: 1,
        };
        StragglerSchedule::new(5, pattern, workers)
    }

    #[test]
    fn burns_during_a_forced_window_and_stops() {
        // One machine and p = 1: every window disrupts machine 0.
        let disruptor = CpuDisruptor::start(disrupted(1.0, 1), 0, Instant::now(), 1);
        assert_eq!(disruptor.threads(), 1);
        // Generous bound: this is a liveness check, not a timing assertion.
        let deadline = Instant::now() + Duration::from_secs(30);
        while disruptor.burn_rounds() == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            disruptor.burn_rounds() > 0,
            "no CPU burnt in a forced window"
        );
        // Returns once the thread has seen the stop flag (within a burn round).
        disruptor.stop();
    }

    #[test]
    fn idles_when_its_machine_is_never_disrupted() {
        let disruptor = CpuDisruptor::start(disrupted(0.0, 2), 1, Instant::now(), 2);
        assert_eq!(disruptor.threads(), 2);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(disruptor.burn_rounds(), 0);
        drop(disruptor);
    }

    #[test]
    fn starts_no_threads_for_other_patterns() {
        let schedule = StragglerSchedule::new(
            5,
            Pattern::SlowWorker {
                probability: 1.0,
                delay_percent: 100.0,
            },
            4,
        );
        let disruptor = CpuDisruptor::start(schedule, 0, Instant::now(), 4);
        assert_eq!(disruptor.threads(), 0);
        assert_eq!(disruptor.burn_rounds(), 0);
        disruptor.stop();
    }
}
