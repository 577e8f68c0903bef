//! One worker's side of an iteration: which units it computes, in what order,
//! and what it tells its peers — the state behind the compute operator.
//!
//! A worker holds the capabilities of iteration `t` from the moment it has every
//! shard of parameter version `t` until it has every shard of version `t + 1`.
//! In between it computes its own units, then units peers gave it, one at a
//! time, and answers control messages at once — also while a unit is in
//! flight, unless the job says `respond = "between-units"`; it cannot be asked
//! for work of `t` after `t + 1` is complete, because `t + 1` needs every unit of
//! `t`.
//!
//! This module holds the iteration lifecycle (assembling parameter versions,
//! beginning, reporting and abandoning iterations); `control` the control
//! protocol, `compute` unit compute and pacing, `plan` the predictive
//! policies' decisions applied at an iteration's start, and `epoch` what a
//! worker holds of an iteration.

mod compute;
mod control;
mod epoch;
mod lazy;
mod own_writes;
mod pieces;
mod plan;

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use timely::dataflow::operators::Capability;

use self::compute::{advance, finish_unit, sleep_until, start_unit};
use self::control::{clone_to_waiting_helper, send_all, send_done};
pub use self::epoch::Caps;
use self::epoch::{Epoch, Given, Latest};
use self::own_writes::OwnWrites;
use super::context::JobContext;
use super::holdings::{Holdings, PlacementUpdate};
use super::messages::{Control, GradSlice, Progress, Traffic};
use super::oplog::OperatorClock;
use super::sink::SinkEvent;
use crate::data::UnitRows;
use crate::policy::{ControlKind, PeerAgent};
use crate::predict::{OnlineHistory, Timing};
use crate::spec::Respond;
use crate::trace::{UnitAction, WorkerRecord};

/// Where the compute operator's output goes.
pub struct Emit<'a> {
    /// Gradient slices, to the shard owners.
    pub grads: &'a mut dyn FnMut(&Capability<u64>, Vec<GradSlice>),
    /// Progress, to worker 0.
    pub progress: &'a mut dyn FnMut(&Capability<u64>, Progress),
    /// Control messages, to peers.
    pub control: &'a mut dyn FnMut(&Capability<u64>, Control),
    /// Requests to hold a partition, to the placement collection.
    pub placement: &'a mut dyn FnMut(&Capability<u64>, PlacementUpdate),
}

/// A parameter version whose shards are arriving.
pub struct PendingVersion {
    /// Capabilities at the version's time.
    pub caps: Caps,
    /// Shards received so far.
    pub shards: Vec<Option<Vec<f64>>>,
    /// How many.
    pub received: usize,
    /// (shard, µs) for the shards from other hosts: their transit.
    pub late: Vec<(u32, u64)>,
}

/// The compute operator's state on one worker.
pub struct ComputeState {
    worker: u32,
    /// The job.
    pub cx: Arc<JobContext>,
    sink: Sender<SinkEvent>,
    clock: Option<Rc<RefCell<OperatorClock>>>,
    /// Capabilities for iteration 0, from the operator's construction.
    pub initial: Option<Caps>,
    /// Versions whose shards are arriving.
    pub pending: BTreeMap<u64, PendingVersion>,
    /// Control messages for iterations this worker has not begun.
    early_control: Vec<Control>,
    /// Testing (`control_delay`): messages held back, with activations left.
    held: Vec<(u32, Control)>,
    received: u64,
    next_iteration: u64,
    latest: Option<Latest>,
    finished: bool,
    epoch: Option<Epoch>,
    agent: Option<PeerAgent>,
    /// When worker 0's broker means to balance without the paces missing,
    /// on the job clock, µs (see [`ComputeState::broker_time`]).
    broker_due_us: Option<u64>,
    /// The rows this worker holds, and who holds its partitions.
    pub holdings: Holdings,
    /// Every worker's timings so far (online prediction only).
    history: Option<OnlineHistory>,
    /// Control messages sent after the current iteration's report (worker 0
    /// passing timings on): counted in the next iteration's record.
    control_after_report: Traffic,
    /// Where units write values under stale reads: this worker's writes.
    own_writes: Option<OwnWrites>,
}

impl ComputeState {
    /// The state of `worker`.
    pub fn new(
        worker: u32,
        cx: Arc<JobContext>,
        sink: Sender<SinkEvent>,
        clock: Option<Rc<RefCell<OperatorClock>>>,
    ) -> Self {
        let agent = cx.peer_agent(worker);
        let sizes = (0..cx.plan.partitions)
            .map(|p| cx.partitioning.partition_rows(p).len())
            .collect();
        let holdings = Holdings::new(cx.workload.data().rows.rows(), sizes);
        let workers = cx.plan.workers;
        let history = cx.predictor.as_ref().map(|predictor| {
            cx.resume
                .as_ref()
                .and_then(|c| OnlineHistory::from_floats(workers, &c.history))
                .unwrap_or_else(|| OnlineHistory::new(workers))
                .judged_for(predictor)
        });
        let next_iteration = cx.first_iteration();
        let own_writes = OwnWrites::for_plan(&cx.plan);
        Self {
            history,
            holdings,
            worker,
            cx,
            sink,
            clock,
            initial: None,
            pending: BTreeMap::new(),
            early_control: Vec::new(),
            held: Vec::new(),
            received: 0,
            next_iteration,
            latest: None,
            finished: false,
            epoch: None,
            agent,
            broker_due_us: None,
            control_after_report: Traffic::default(),
            own_writes,
        }
    }

    /// When the operator should run again without new input: at once when
    /// it has work it can do now, at the end of the unit in flight when that
    /// is all it has (a message wakes it sooner), never otherwise.
    pub fn wake_in(&self) -> Option<Duration> {
        if !self.held.is_empty() || self.can_begin() {
            return Some(Duration::ZERO);
        }
        let broker = self
            .broker_due_us
            .map(|due| Duration::from_micros(due.saturating_sub(self.cx.now_us())));
        let work = self.work_wake_in();
        match (work, broker) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// [`ComputeState::wake_in`] for the work of the iteration.
    fn work_wake_in(&self) -> Option<Duration> {
        let epoch = self.epoch.as_ref()?;
        match &epoch.running {
            Some(r) => {
                let now = Instant::now();
                let at = match epoch.waiting_helpers.iter().map(|h| h.1).min() {
                    Some(helper_us) if !epoch.cloned_out.contains_key(&r.next.unit.rows.key) => {
                        r.next_check(helper_us, now)
                    }
                    _ => r.deadline,
                };
                // A unit computed as its time comes computes its next
                // micro-batch when the one before ends.
                let at = r.next_boundary(now).map_or(at, |b| b.min(at));
                Some(at.saturating_duration_since(now))
            }
            None => epoch.has_units().then_some(Duration::ZERO),
        }
    }

    fn operator_us(&self) -> u64 {
        self.clock.as_ref().map_or(0, |c| c.borrow().total_us())
    }

    /// One activation: take control messages, begin the next iteration if its
    /// parameters are complete, then compute at most one unit.
    pub fn step(&mut self, control: Vec<Control>, emit: &mut Emit<'_>) {
        self.broker_due_us = None;
        for message in self.release(control) {
            self.on_control(message, emit);
        }
        self.assemble_versions(emit);
        self.abandon_closed_iteration();
        if self.can_begin() {
            self.begin(emit);
        }
        let Some(epoch) = self.epoch.as_mut() else {
            return;
        };
        epoch.bytes_moved += self.holdings.take_moved_bytes();
        if let Some(agent) = self.agent.as_mut() {
            self.broker_due_us =
                broker_time(self.worker, epoch, agent, &self.holdings, &self.cx, emit);
        }
        if epoch.running.is_none() {
            if let Some(next) = epoch.next_unit(self.worker) {
                epoch.idle_reported = false;
                // A worker computes only rows it holds, or rows shipped with the unit.
                let payload = next.unit.payload.clone();
                let source = payload.as_deref().unwrap_or(self.holdings.store());
                let running = start_unit(&self.cx, self.worker, epoch, source, next);
                if let Some(agent) = self.agent.as_mut() {
                    let whole = running.first_rows == 0 && running.next.unit.piece.is_none();
                    if running.next.counts_as_own && whole {
                        agent.set_micro_batches(running.micro_batches);
                    }
                }
                epoch.running = Some(running);
            }
        }
        if let Some(running) = epoch.running.as_mut().filter(|r| r.lazy.is_some()) {
            // Its micro-batches ended so far (computed as their time comes).
            let payload = running.next.unit.payload.clone();
            let source = payload.as_deref().unwrap_or(self.holdings.store());
            advance(&self.cx, &epoch.params, source, running, self.cx.now_us());
        }
        if let Some(deadline) = epoch.running.as_ref().map(|r| r.deadline) {
            if self.cx.plan.respond == Respond::BetweenUnits {
                sleep_until(deadline);
            } else if Instant::now() < deadline {
                if !epoch.waiting_helpers.is_empty() {
                    let now_us = self.cx.now_us();
                    clone_to_waiting_helper(self.worker, epoch, &self.holdings, now_us, emit);
                }
                if epoch.running.is_some() {
                    return; // in flight: answer peers until its end (`wake_in`)
                }
            }
        }
        // Its rest handed over (nothing to finish here), or it is over.
        if let Some(running) = epoch.running.take() {
            let payload = running.next.unit.payload.clone();
            let source = payload.as_deref().unwrap_or(self.holdings.store());
            let params = Arc::clone(&epoch.params);
            let at = (self.worker, params.as_slice(), source);
            let (next, record, slices) = finish_unit(&self.cx, at, epoch, running);
            let Given {
                rows: unit,
                action,
                from,
                iteration,
                ..
            } = next.unit;
            let unit_bytes = record.bytes_sent;
            if action == UnitAction::Clone {
                // In vain if the original's done notice comes after.
                epoch
                    .clones_done
                    .insert((iteration, unit.key), record.compute_us);
            }
            if let Some(own) = self.own_writes.as_mut() {
                own.keep(iteration, &slices);
            }
            epoch.bytes_sent += unit_bytes;
            epoch.units.push(record);
            epoch.units_done += 1;
            if iteration == epoch.iteration {
                epoch.grads_held_bytes += unit_bytes;
                epoch.grads_held.extend(slices);
                if epoch.grads_held_bytes >= self.cx.plan.grad_bucket_bytes {
                    send_held_grads(epoch, emit);
                }
            } else if let Some(cap) = self
                .latest
                .as_ref()
                .and_then(|l| l.caps.grads.try_delayed(&iteration))
            {
                // A peer's unit of an earlier iteration (SSP): emit at its time.
                (emit.grads)(&cap, slices);
            }
            // First copy of a cloned unit: tell the other side to skip it.
            let twin = match action {
                UnitAction::Clone => Some(from),
                _ => epoch.cloned_out.remove(&unit.key),
            };
            if let Some(peer) = twin {
                send_done(self.worker, epoch, peer, (iteration, unit.key), emit);
            }
            if next.counts_as_own {
                if let Some(agent) = self.agent.as_mut() {
                    epoch.observe(agent, self.cx.now_us());
                    let out = agent.on_own_unit_done(epoch.unit_us());
                    send_all((&self.cx, self.worker, &self.holdings), epoch, out, emit);
                }
            }
        }
        if !epoch.has_units() {
            send_held_grads(epoch, emit);
            if !epoch.idle_reported {
                self.report_idle(emit);
                self.offer_help(emit);
            }
        }
    }

    /// Tells worker 0 that this worker has nothing left of the current iteration
    /// (as of now) and hands its unit records to the sink.
    fn report_idle(&mut self, emit: &mut Emit<'_>) {
        if self.epoch.as_ref().is_none_or(|e| e.idle_reported) {
            return;
        }
        let record = self.worker_record();
        let epoch = self.epoch.as_mut().expect("checked above");
        epoch.idle_reported = true;
        if self.history.is_some() && !epoch.timing_sent {
            // Every worker learns every worker's first report of the iteration,
            // so all compute the same predictions (and proactive plans): each
            // tells worker 0, which passes all of them on once they are in
            // (2 (W − 1) messages an iteration, not W (W − 1)).
            epoch.timing_sent = true;
            let (units, busy_us) = (record.units, record.busy_us);
            let iteration = epoch.iteration;
            if self.worker == 0 {
                self.on_timing(iteration, 0, Timing { units, busy_us }, emit);
            } else {
                let message = Control {
                    to: 0,
                    from: self.worker,
                    iteration,
                    kind: ControlKind::Timing { units, busy_us },
                    units: Vec::new(),
                    rows: Vec::new(),
                    carry: None,
                };
                epoch.control.count(&message);
                (emit.control)(&epoch.caps.control, message);
            }
        }
        let epoch = self.epoch.as_mut().expect("checked above");
        (emit.progress)(&epoch.caps.progress, Progress::Finished(record));
        let units = std::mem::take(&mut epoch.units);
        let _ = self.sink.send(SinkEvent::Units(units));
    }

    /// Worker 0 records `worker`'s timing of `iteration` and passes every
    /// iteration it completes on to the other workers.
    fn on_timing(&mut self, iteration: u64, worker: u32, timing: Timing, emit: &mut Emit<'_>) {
        let Some(history) = self.history.as_mut() else {
            return;
        };
        let completed = history.record_completing(iteration, worker, timing);
        let Some(epoch) = self.epoch.as_mut() else {
            return; // the run is over: nobody plans again
        };
        for (done, timings) in completed {
            let all: Vec<(u32, u64)> = timings.iter().map(|t| (t.units, t.busy_us)).collect();
            for to in 1..self.cx.plan.workers {
                let message = Control {
                    to,
                    from: 0,
                    iteration: done,
                    kind: ControlKind::Timings { all: all.clone() },
                    units: Vec::new(),
                    rows: Vec::new(),
                    carry: None,
                };
                // After its report, the next iteration's record counts them.
                if epoch.idle_reported {
                    self.control_after_report.count(&message);
                } else {
                    epoch.control.count(&message);
                }
                (emit.control)(&epoch.caps.control, message);
            }
        }
    }

    /// A newer complete version means the current iteration was reduced without
    /// what is left of it here (a lossy policy dropped it, or the originals of
    /// these clones came first): drop the leftovers.
    fn abandon_closed_iteration(&mut self) {
        let (Some(epoch), Some(latest)) = (self.epoch.as_mut(), self.latest.as_ref()) else {
            return;
        };
        if latest.version > epoch.iteration && epoch.has_units() {
            let closed = latest.version;
            let before = epoch.own.len() + epoch.given_to_me.len();
            epoch.own.clear();
            epoch.planned_in.clear();
            epoch.given_to_me.retain(|g| g.iteration >= closed);
            epoch.units_cancelled += (before - epoch.own.len() - epoch.given_to_me.len()) as u32;
        }
    }

    /// Takes every parameter version whose shards are all here, in order; the
    /// newest becomes `latest` (dropping the capabilities of the one before).
    /// Each version from other hosts is reported to worker 0 with its
    /// shards' transit (`workers.params_transit_us` of their owners).
    fn assemble_versions(&mut self, emit: &mut Emit<'_>) {
        if let Some(caps) = self.initial.take() {
            // Version 0, or the checkpoint's version when the run resumes.
            let first = self.cx.first_iteration();
            let caps = if first == 0 {
                caps
            } else {
                caps.delayed(first)
            };
            self.install(first, caps, Arc::clone(&self.cx.initial_params));
        }
        while let Some((&v, p)) = self.pending.first_key_value() {
            if p.received < p.shards.len() {
                break;
            }
            let p = self.pending.remove(&v).expect("present");
            if !p.late.is_empty() {
                let report = Progress::ParamsIn {
                    worker: self.worker,
                    version: v,
                    late: p.late,
                };
                (emit.progress)(&p.caps.progress, report);
            }
            let mut params = Vec::with_capacity(self.cx.dims);
            for shard in p.shards.into_iter().flatten() {
                params.extend_from_slice(&shard);
            }
            self.install(v, p.caps, Arc::new(params));
        }
    }

    fn install(&mut self, version: u64, caps: Caps, params: Arc<Vec<f64>>) {
        crate::run::stop::boundary();
        if self.worker == 0 {
            let _ = self.sink.send(SinkEvent::Params {
                version,
                values: Arc::clone(&params),
            });
        }
        self.latest = Some(Latest {
            version,
            caps,
            params,
        });
    }

    /// Whether this worker has no unit of an iteration left: a message that
    /// reaches it now was not kept waiting behind a unit's compute.
    pub fn idle(&self) -> bool {
        self.epoch.as_ref().is_none_or(|e| !e.has_units())
    }

    /// Whether the next iteration may begin: the current one has nothing left
    /// and the newest parameters are at most `slack` versions behind it.
    fn can_begin(&self) -> bool {
        let idle = self.idle();
        let Some(latest) = &self.latest else {
            return false;
        };
        // A proactive plan for t needs every worker's timing of t − 1; so does
        // a prediction recorded under a policy that waits for everyone anyway
        // (slack 0), so every iteration after the first records one. Under
        // slack, recording waits for nobody: a prediction is recorded when
        // the timings are in; a plan (`forestall-ssp`) waits for the
        // timings up to t − 1 − slack.
        let policy = &self.cx.plan.policy;
        let planned = match &self.history {
            None => true,
            Some(_) if !policy.predicts() && policy.slack() > 0 => true,
            Some(_) if self.next_iteration == 0 => true,
            Some(_) if self.next_iteration >= self.cx.end_version() => true,
            // A resumed run measures its first iteration anew.
            Some(_) if self.next_iteration == self.cx.first_iteration() => true,
            // Under slack, the plan for t needs the timings up to
            // t − 1 − slack only (see `plan_ahead`).
            Some(h) => (self.next_iteration - 1)
                .checked_sub(policy.slack())
                .is_none_or(|known| h.complete(known)),
        };
        idle && !self.finished
            && planned
            && self.holdings.ready()
            && (latest.version + self.cx.plan.policy.slack() >= self.next_iteration
                || latest.version >= self.cx.end_version())
    }

    /// The final version: every iteration is reduced; reports the last
    /// barrier and lets every capability go.
    fn finish(&mut self, emit: &mut Emit<'_>) {
        let Some(latest) = self.latest.as_ref() else {
            return;
        };
        let ready_us = self.cx.now_us();
        let end = self.cx.end_version();
        if self.cx.is_checkpoint(end) {
            // The final checkpoint holds what a run continued from it needs
            // (a run stopped early is continued): the predictor's history and
            // the placement, as if the next iteration began here.
            let history = (self.worker == 0)
                .then(|| self.history.as_ref().map(OnlineHistory::to_floats))
                .flatten();
            let _ = self.sink.send(SinkEvent::Began {
                worker: self.worker,
                iteration: end,
                job_us: ready_us,
                history,
                placement: Some(self.holdings.placement()),
            });
        }
        (emit.progress)(
            &latest.caps.progress,
            Progress::Ready {
                worker: self.worker,
                iteration: end,
                ready_us,
                stop: false,
            },
        );
        self.finished = true;
        self.epoch = None;
        self.latest = None;
    }

    fn begin(&mut self, emit: &mut Emit<'_>) {
        // Units abandoned in this activation left the slices of those done.
        if let Some(epoch) = self.epoch.as_mut() {
            send_held_grads(epoch, emit);
        }
        // An iteration left without going idle (its leftovers were abandoned)
        // still reports, so its records are not lost.
        self.report_idle(emit);
        let latest = self.latest.as_ref().expect("checked by can_begin");
        let end = self.cx.end_version();
        let iteration = self.next_iteration.min(end);
        if latest.version >= end {
            self.finish(emit);
            return;
        }
        if iteration >= end {
            return; // all iterations done here; waiting for the final version
        }
        let caps = latest.caps.delayed(iteration);
        let params_version = latest.version;
        let params = match self.own_writes.as_mut() {
            Some(own) => own.over(params_version, Arc::clone(&latest.params), &self.cx.shards),
            None => Arc::clone(&latest.params),
        };
        self.next_iteration += 1;
        if self.cx.host_worker(self.worker) == self.worker {
            self.cx
                .iteration_now
                .store(iteration, std::sync::atomic::Ordering::Relaxed);
        }
        let version = iteration;
        let ready_us = self.cx.now_us();
        // Every record of this worker's from before `iteration − slack` is with
        // the sink now (the trace cut of a checkpoint waits for it).
        let checkpoint = self.cx.is_checkpoint(iteration);
        let history = (self.worker == 0 && checkpoint)
            .then(|| self.history.as_ref().map(OnlineHistory::to_floats))
            .flatten();
        let _ = self.sink.send(SinkEvent::Began {
            worker: self.worker,
            iteration,
            job_us: ready_us,
            history,
            placement: checkpoint.then(|| self.holdings.placement()),
        });
        (emit.progress)(
            &caps.progress,
            Progress::Ready {
                worker: self.worker,
                iteration,
                ready_us,
                // a stop asked here goes to worker 0, which fixes where
                stop: self.cx.stop.asked() && self.cx.stop.at().is_none(),
            },
        );
        // The previous iteration's capabilities drop here.
        self.epoch = None;
        let own: VecDeque<UnitRows> = self
            .cx
            .assignment(self.worker)
            .iter()
            .flat_map(|&p| self.cx.partitioning.units(version, p))
            .collect();
        self.epoch = Some(Epoch::start(
            version,
            caps,
            (params, params_version),
            own,
            ready_us,
            std::mem::take(&mut self.control_after_report),
            self.operator_us(),
        ));
        let moves = self.plan_ahead(emit);
        let planned_in: u32 = moves
            .iter()
            .filter(|m| m.to == self.worker)
            .map(|m| m.count)
            .sum();
        if let (Some(agent), Some(epoch)) = (self.agent.as_mut(), self.epoch.as_mut()) {
            epoch.observe(agent, ready_us);
            agent.begin(version, epoch.own.len() as u32 + planned_in);
            if agent.brokers() {
                let own: Vec<u32> = (0..self.cx.plan.workers)
                    .map(|w| self.cx.own_units(w))
                    .collect();
                agent.expect_lists(crate::policy::lists_after(&own, &moves));
            }
        }
        let early: Vec<Control> = std::mem::take(&mut self.early_control);
        for message in early {
            self.on_control(message, emit);
        }
    }

    /// The worker's record of the current iteration as it stands.
    fn worker_record(&self) -> WorkerRecord {
        let operator_now = self.operator_us();
        let epoch = self.epoch.as_ref().expect("called within an iteration");
        let finish_us = epoch.last_end_us;
        WorkerRecord {
            iteration: epoch.iteration,
            worker: self.worker,
            process: self.cx.process_of(self.worker),
            units: epoch.units_done,
            rows: epoch.rows,
            ready_us: epoch.ready_us,
            finish_us,
            compute_us: epoch.compute_us,
            busy_us: finish_us.saturating_sub(epoch.ready_us),
            barrier_wait_us: 0,
            operator_us: operator_now.saturating_sub(epoch.operator_us_at_start),
            bytes_sent: epoch.bytes_sent,
            bytes_moved: epoch.bytes_moved,
            units_given: epoch.units_given,
            control_sent: epoch.control.messages,
            control_bytes: epoch.control.bytes,
            units_cancelled: epoch.units_cancelled,
            wasted_us: epoch.wasted_us,
            // worker 0 fills it in when the iteration closes
            transit_us: 0,
            params_transit_us: 0,
            params_version: epoch.params_version,
            predicted_unit_us: epoch.predicted_unit_us,
            // A worker that computed nothing (it gave its units away) records
            // the slowdown its units would have had, for the bound.
            gt_slowdown: if epoch.units_done == 0 {
                self.cx
                    .schedule
                    .slowdown(self.worker, epoch.iteration, epoch.ready_us)
            } else {
                epoch.max_slowdown
            },
            gt_delay_us: epoch.delay_us,
        }
    }
}

/// Sends the gradient slices `epoch` holds to their shard owners.
fn send_held_grads(epoch: &mut Epoch, emit: &mut Emit<'_>) {
    if epoch.grads_held.is_empty() {
        return;
    }
    let slices = std::mem::take(&mut epoch.grads_held);
    epoch.grads_held_bytes = 0;
    (emit.grads)(&epoch.caps.grads, slices);
}

/// Worker 0's broker, when its time to balance without the paces missing
/// has come, balances (its orders leave now); returns that time, on the job
/// clock, µs, while it is still to come: the operator wakes then, whether or
/// not a message arrives, as the what-if replay's broker does.
fn broker_time(
    worker: u32,
    epoch: &mut Epoch,
    agent: &mut PeerAgent,
    holdings: &Holdings,
    cx: &JobContext,
    emit: &mut Emit<'_>,
) -> Option<u64> {
    let due = agent.broker_due()?;
    let now_us = cx.now_us();
    if now_us < due {
        return Some(due);
    }
    epoch.observe(agent, now_us);
    let out = agent.on_broker_time(epoch.own_left());
    send_all((cx, worker, holdings), epoch, out, emit);
    None
}
