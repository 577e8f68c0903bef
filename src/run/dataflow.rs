//! The training dataflow: one iteration per timely epoch.
//!
//! ```text
//!   params (version t, one message per shard and worker)
//!        │ exchange by target worker
//!        ▼
//!   forestall-compute ──grad slices (t, partition, unit, shard)──► forestall-reduce
//!        │                     exchange by shard owner                │
//!        │ progress: finished t / ready for t+1 (to worker 0)          │ version t+1
//!        ▼                                                            ▼
//!   forestall-detect ──► sink                              feedback (+1) ──► params
//! ```
//!
//! The compute operator holds a capability for `t` while it has units of `t`
//! left, processes one unit per activation and re-activates itself, so a slow
//! worker still runs its reduce operator between units. Version 0 (zeros) needs
//! no message: every worker starts iteration 0 from its initial capabilities.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::{Capability, ConnectLoop, Feedback};
use timely::worker::Worker;

use super::context::JobContext;
use super::detect::ProgressTracker;
use super::messages::{GradSlice, Progress, ShardParams};
use super::oplog::{register_clock, OperatorClock};
use super::reduce::ShardReducer;
use super::sink::SinkEvent;
use crate::data::UnitRows;
use crate::model::unit_gradient;
use crate::trace::{UnitAction, UnitRecord, WorkerRecord};

type Builder<D> = CapacityContainerBuilder<Vec<D>>;
/// The capabilities of one iteration: (gradient output, progress output).
type Caps = (Capability<u64>, Capability<u64>);

/// Builds the dataflow on `worker`; timely runs it to completion afterwards.
pub fn build_training_dataflow(worker: &mut Worker, cx: Arc<JobContext>, sink: Sender<SinkEvent>) {
    let clock = register_clock(worker);
    let index = worker.index() as u32;
    worker.dataflow::<u64, _, _>(|scope| {
        let (loop_handle, params) = scope.feedback::<Vec<ShardParams>>(1);

        // compute
        let mut builder = OperatorBuilder::new("forestall-compute".to_owned(), scope);
        let info = builder.operator_info();
        if let Some(clock) = &clock {
            clock.borrow_mut().watch(info.global_id);
        }
        let activator = scope.activator_for(Rc::clone(&info.address));
        let mut params_in =
            builder.new_input(params, Exchange::new(|m: &ShardParams| m.target as u64));
        let (grads_out, grads) = builder.new_output::<Vec<GradSlice>>();
        let (done_out, progress) = builder.new_output::<Vec<Progress>>();
        let mut grads_out = OutputBuilder::<u64, Builder<GradSlice>>::from(grads_out);
        let mut done_out = OutputBuilder::<u64, Builder<Progress>>::from(done_out);
        let mut state = ComputeState::new(index, Arc::clone(&cx), sink.clone(), clock);
        builder.build(move |mut caps| {
            let done_cap = caps.pop().expect("two outputs");
            let grad_cap = caps.pop().expect("two outputs");
            state.initial = Some((grad_cap, done_cap));
            move |_frontiers| {
                params_in.for_each(|cap, data| {
                    let Some(&version) = cap.least() else {
                        return;
                    };
                    let shards = state.cx.plan.workers as usize;
                    let entry = state
                        .pending
                        .entry(version)
                        .or_insert_with(|| PendingVersion {
                            caps: (cap.delayed(&version, 0), cap.delayed(&version, 1)),
                            shards: vec![None; shards],
                            received: 0,
                        });
                    for msg in data.drain(..) {
                        let slot = &mut entry.shards[msg.shard as usize];
                        if slot.is_none() {
                            entry.received += 1;
                        }
                        *slot = Some(msg.values);
                    }
                });
                let mut grads = grads_out.activate();
                let mut done = done_out.activate();
                state.step(
                    &mut |cap, slices| grads.session(cap).give_iterator(slices.into_iter()),
                    &mut |cap, record| done.session(cap).give(record),
                );
                if state.has_work() {
                    activator.activate();
                }
            }
        });

        // reduce: this worker owns shard `index`
        let workers = cx.plan.workers;
        let mut reducer = ShardReducer::new(
            cx.shards[index as usize].clone(),
            cx.plan.partitions,
            cx.plan.units_per_partition,
            cx.partitioning.rows_per_iteration(),
            cx.plan.optimizer,
        );
        let mut builder = OperatorBuilder::new("forestall-reduce".to_owned(), scope);
        let mut grads_in = builder.new_input(grads, Exchange::new(|g: &GradSlice| g.owner as u64));
        let (params_out, next_params) = builder.new_output::<Vec<ShardParams>>();
        let mut params_out = OutputBuilder::<u64, Builder<ShardParams>>::from(params_out);
        let reduce_sink = sink.clone();
        let rows = cx.partitioning.rows_per_iteration() as f64;
        builder.build(move |_caps| {
            let mut open: BTreeMap<u64, Capability<u64>> = BTreeMap::new();
            move |_frontiers| {
                grads_in.for_each(|cap, data| {
                    for slice in data.drain(..) {
                        let t = slice.iteration;
                        if reducer.offer(slice) == super::reduce::Offer::Accepted {
                            open.entry(t).or_insert_with(|| cap.delayed(&t, 0));
                        }
                    }
                });
                let mut out = params_out.activate();
                while let Some((&t, _)) = open.first_key_value() {
                    let Some(reduced) = reducer.try_reduce(t) else {
                        break;
                    };
                    let cap = open.remove(&t).expect("present");
                    let mut session = out.session(&cap);
                    for target in 0..workers {
                        session.give(ShardParams {
                            target,
                            version: t + 1,
                            shard: index,
                            values: reduced.values.clone(),
                        });
                    }
                    if index == 0 {
                        // The receiver only disappears if the sink failed; the
                        // run reports that error at the end.
                        let _ = reduce_sink.send(SinkEvent::TrainLoss {
                            iteration: t,
                            loss: reduced.loss_sum / rows,
                        });
                    }
                }
            }
        });
        next_params.connect_loop(loop_handle);

        // detect: worker 0 tracks every worker's progress
        let mut builder = OperatorBuilder::new("forestall-detect".to_owned(), scope);
        let mut progress_in = builder.new_input(progress, Exchange::new(|_: &Progress| 0));
        let detect_sink = sink.clone();
        let mut tracker = ProgressTracker::new(workers, cx.plan.laggard_threshold);
        builder.build(move |_caps| {
            move |_frontiers| {
                progress_in.for_each(|_cap, data| {
                    for message in data.drain(..) {
                        match message {
                            Progress::Finished(record) => {
                                let t = record.iteration;
                                if let Some(report) = tracker.on_finished(record) {
                                    tracing::debug!(
                                        iteration = t,
                                        laggard = ?report.laggard,
                                        lag_us = report.lag_us,
                                        "iteration closed"
                                    );
                                }
                            }
                            Progress::Ready {
                                worker,
                                iteration,
                                ready_us,
                            } => {
                                if let Some((workers, report)) =
                                    tracker.on_ready(worker, iteration, ready_us)
                                {
                                    let _ =
                                        detect_sink.send(SinkEvent::Iteration { workers, report });
                                }
                            }
                        }
                    }
                });
            }
        });
    });
}

struct PendingVersion {
    caps: Caps,
    shards: Vec<Option<Vec<f64>>>,
    received: usize,
}

/// The iteration a worker is working on.
struct Epoch {
    iteration: u64,
    caps: Caps,
    params: Arc<Vec<f64>>,
    queue: VecDeque<UnitRows>,
    ready_us: u64,
    last_end_us: u64,
    compute_us: u64,
    rows: u64,
    bytes_sent: u64,
    max_slowdown: f64,
    delay_us: u64,
    /// How late the previous unit's sleep woke up.
    oversleep: Duration,
    operator_us_at_start: u64,
    units: Vec<UnitRecord>,
}

struct ComputeState {
    worker: u32,
    cx: Arc<JobContext>,
    sink: Sender<SinkEvent>,
    clock: Option<Rc<RefCell<OperatorClock>>>,
    initial: Option<Caps>,
    pending: BTreeMap<u64, PendingVersion>,
    next_version: u64,
    epoch: Option<Epoch>,
}

impl ComputeState {
    fn new(
        worker: u32,
        cx: Arc<JobContext>,
        sink: Sender<SinkEvent>,
        clock: Option<Rc<RefCell<OperatorClock>>>,
    ) -> Self {
        Self {
            worker,
            cx,
            sink,
            clock,
            initial: None,
            pending: BTreeMap::new(),
            next_version: 0,
            epoch: None,
        }
    }

    fn has_work(&self) -> bool {
        self.epoch.as_ref().is_some_and(|e| !e.queue.is_empty())
    }

    fn operator_us(&self) -> u64 {
        self.clock.as_ref().map_or(0, |c| c.borrow().total_us())
    }

    /// One activation: start the next iteration if its parameters are complete,
    /// then compute at most one unit.
    fn step(
        &mut self,
        send_grads: &mut dyn FnMut(&Capability<u64>, Vec<GradSlice>),
        send_done: &mut dyn FnMut(&Capability<u64>, Progress),
    ) {
        if self.epoch.is_none() {
            if let Some((caps, params)) = self.take_next_version() {
                self.begin(caps, params, send_done);
            }
        }
        if let Some(epoch) = self.epoch.as_mut() {
            if let Some(unit) = epoch.queue.pop_front() {
                let (record, slices) = compute_unit(&self.cx, self.worker, epoch, &unit);
                epoch.bytes_sent += record.bytes_sent;
                epoch.units.push(record);
                send_grads(&epoch.caps.0, slices);
            }
            if epoch.queue.is_empty() {
                self.end(send_done);
            }
        }
    }

    fn take_next_version(&mut self) -> Option<(Caps, Arc<Vec<f64>>)> {
        let v = self.next_version;
        if v == 0 {
            let caps = self.initial.take()?;
            return Some((caps, Arc::new(vec![0.0; self.cx.dims])));
        }
        let complete = self
            .pending
            .get(&v)
            .is_some_and(|p| p.received == p.shards.len());
        if !complete {
            return None;
        }
        let p = self.pending.remove(&v)?;
        let mut params = Vec::with_capacity(self.cx.dims);
        for shard in p.shards.into_iter().flatten() {
            params.extend_from_slice(&shard);
        }
        Some((p.caps, Arc::new(params)))
    }

    fn begin(
        &mut self,
        caps: Caps,
        params: Arc<Vec<f64>>,
        send_done: &mut dyn FnMut(&Capability<u64>, Progress),
    ) {
        let version = self.next_version;
        self.next_version += 1;
        let ready_us = self.cx.now_us();
        send_done(
            &caps.1,
            Progress::Ready {
                worker: self.worker,
                iteration: version,
                ready_us,
            },
        );
        if self.worker == 0 {
            let _ = self.sink.send(SinkEvent::Params {
                version,
                values: Arc::clone(&params),
            });
        }
        if version >= self.cx.plan.iterations {
            return; // the final version: nothing left to compute; caps drop here
        }
        let queue: VecDeque<UnitRows> = self
            .cx
            .assignment(self.worker)
            .iter()
            .flat_map(|&p| self.cx.partitioning.units(version, p))
            .collect();
        self.epoch = Some(Epoch {
            iteration: version,
            caps,
            params,
            queue,
            ready_us,
            last_end_us: ready_us,
            compute_us: 0,
            rows: 0,
            bytes_sent: 0,
            max_slowdown: 1.0,
            delay_us: 0,
            oversleep: Duration::ZERO,
            operator_us_at_start: self.operator_us(),
            units: Vec::new(),
        });
    }

    fn end(&mut self, send_done: &mut dyn FnMut(&Capability<u64>, Progress)) {
        let operator_now = self.operator_us();
        let Some(epoch) = self.epoch.take() else {
            return;
        };
        let finish_us = epoch.last_end_us;
        let record = WorkerRecord {
            iteration: epoch.iteration,
            worker: self.worker,
            process: self.cx.process_of(self.worker),
            units: epoch.units.len() as u32,
            rows: epoch.rows,
            ready_us: epoch.ready_us,
            finish_us,
            compute_us: epoch.compute_us,
            busy_us: finish_us.saturating_sub(epoch.ready_us),
            barrier_wait_us: 0,
            operator_us: operator_now.saturating_sub(epoch.operator_us_at_start),
            bytes_sent: epoch.bytes_sent,
            gt_slowdown: epoch.max_slowdown,
            gt_delay_us: epoch.delay_us,
        };
        send_done(&epoch.caps.1, Progress::Finished(record));
        let _ = self.sink.send(SinkEvent::Units(epoch.units));
        // epoch.caps drop here: this worker is done with the iteration.
    }
}

/// Computes one unit's real gradient, stretches it by the injected slowdown (and
/// to its nominal duration in paced mode), and cuts it into shard slices.
fn compute_unit(
    cx: &JobContext,
    worker: u32,
    epoch: &mut Epoch,
    unit: &UnitRows,
) -> (UnitRecord, Vec<GradSlice>) {
    let started = Instant::now();
    let start_us = cx.us_since_start(started);
    let gradient = unit_gradient(
        &cx.dataset.rows,
        &cx.dataset.labels,
        &epoch.params,
        &unit.rows,
    );
    let compute = started.elapsed();
    let slowdown = cx.schedule.slowdown(worker, epoch.iteration, start_us);
    let base = match cx.plan.pace_ns_per_row {
        0 => compute,
        ns => Duration::from_nanos(ns * unit.rows.len() as u64),
    };
    let target = base.mul_f64(slowdown);
    // A sleep wakes up late by tens of µs; the next unit of the iteration
    // absorbs the previous overshoot, so it does not pile up over many units.
    let deadline = started + target.saturating_sub(epoch.oversleep).max(compute);
    epoch.oversleep = if target > compute {
        sleep_until(deadline)
    } else {
        Duration::ZERO
    };
    let rows = unit.rows.len() as u32;
    let slices: Vec<GradSlice> = cx
        .shards
        .iter()
        .enumerate()
        .map(|(owner, range)| GradSlice {
            owner: owner as u32,
            iteration: epoch.iteration,
            partition: unit.key.partition,
            unit: unit.key.unit,
            executor: worker,
            rows,
            loss_sum: if owner == 0 { gradient.loss_sum } else { 0.0 },
            values: gradient.grad[range.clone()].to_vec(),
        })
        .collect();
    let end_us = cx.now_us();
    let compute_us = compute.as_micros() as u64;
    let record = UnitRecord {
        iteration: epoch.iteration,
        worker,
        process: cx.process_of(worker),
        partition: unit.key.partition,
        unit: unit.key.unit,
        owner: cx.owners[unit.key.partition as usize],
        executor: worker,
        start_us,
        end_us,
        compute_us,
        wait_us: start_us.saturating_sub(epoch.last_end_us),
        rows,
        bytes_sent: slices.iter().map(GradSlice::wire_bytes).sum(),
        action: UnitAction::Assigned,
        gt_slowdown: slowdown,
        gt_delay_us: target.saturating_sub(base).as_micros() as u64,
    };
    epoch.last_end_us = end_us;
    epoch.compute_us += compute_us;
    epoch.rows += rows as u64;
    epoch.max_slowdown = epoch.max_slowdown.max(slowdown);
    epoch.delay_us += record.gt_delay_us;
    (record, slices)
}

/// Sleeps until `deadline` and returns by how much the sleep overshot it.
fn sleep_until(deadline: Instant) -> Duration {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
    Instant::now().saturating_duration_since(deadline)
}
