//! Per-worker operator time from timely's own log stream.
//!
//! Timely reports `Schedule` start/stop events for every operator on the worker
//! that runs it. We subscribe on each worker, keep the total scheduled time of
//! the compute operator, and the compute operator reads it at iteration ends.
//! The log is flushed at the end of every `worker.step()`, so a reading lags the
//! current activation by at most one step.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use timely::logging::{StartStop, TimelyEvent, TimelyEventBuilder};
use timely::worker::Worker;

/// Scheduled time of one operator on one worker.
#[derive(Debug, Default)]
pub struct OperatorClock {
    operator: Option<usize>,
    started: Option<Duration>,
    total: Duration,
}

impl OperatorClock {
    /// Starts timing the operator with worker-unique id `id`.
    pub fn watch(&mut self, id: usize) {
        self.operator = Some(id);
    }

    /// Total scheduled time so far, µs.
    pub fn total_us(&self) -> u64 {
        self.total.as_micros() as u64
    }

    fn observe(&mut self, at: Duration, event: &TimelyEvent) {
        if let TimelyEvent::Schedule(s) = event {
            if Some(s.id) == self.operator {
                match s.start_stop {
                    StartStop::Start => self.started = Some(at),
                    StartStop::Stop => {
                        if let Some(start) = self.started.take() {
                            self.total += at.saturating_sub(start);
                        }
                    }
                }
            }
        }
    }
}

/// Subscribes a clock to `worker`'s timely log. Must run before the dataflow is
/// built. Returns `None` when the worker has no log registry.
pub fn register_clock(worker: &mut Worker) -> Option<Rc<RefCell<OperatorClock>>> {
    let clock = Rc::new(RefCell::new(OperatorClock::default()));
    let sink = Rc::clone(&clock);
    let mut registry = worker.log_register()?;
    registry.insert::<TimelyEventBuilder, _>("timely", move |_time, data| {
        if let Some(events) = data {
            let mut clock = sink.borrow_mut();
            for (at, event) in events.iter() {
                clock.observe(*at, event);
            }
        }
    });
    Some(clock)
}
