//! One worker's side of an iteration: which units it computes, in what order,
//! and what it tells its peers — the state behind the compute operator.
//!
//! A worker holds the capabilities of iteration `t` from the moment it has every
//! shard of parameter version `t` until it has every shard of version `t + 1`.
//! In between it computes its own units, then units peers gave it, one per
//! activation, and answers control messages between units; it cannot be asked
//! for work of `t` after `t + 1` is complete, because `t + 1` needs every unit of
//! `t`.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use timely::dataflow::operators::Capability;

use super::context::JobContext;
use super::holdings::{Holdings, PlacementUpdate};
use super::messages::{Control, GradSlice, Progress};
use super::oplog::OperatorClock;
use super::sink::SinkEvent;
use crate::data::{DataRow, LocalRows, UnitKey, UnitRows};
use crate::workload::unit_gradient;
use crate::policy::proactive::within_budget;
use crate::policy::{plan_moves, ControlKind, PeerAgent, PolicyPlan};
use crate::predict::{OnlineHistory, Timing};
use crate::trace::{UnitAction, UnitRecord, WorkerRecord};

/// The capabilities of one iteration `t`: gradients, progress, control (at
/// `t`), and placement requests (at `t + 1`).
pub type Caps = (
    Capability<u64>,
    Capability<u64>,
    Capability<u64>,
    Capability<u64>,
);

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
}

/// A unit a peer handed over.
struct Given {
    rows: UnitRows,
    /// The unit's rows, when they came with the message (not held here).
    payload: Option<Arc<LocalRows>>,
    action: UnitAction,
    from: u32,
    iteration: u64,
}

/// The newest complete parameter version a worker holds.
struct Latest {
    version: u64,
    caps: Caps,
    params: Arc<Vec<f64>>,
}

/// The iteration a worker is in.
struct Epoch {
    iteration: u64,
    caps: Caps,
    params: Arc<Vec<f64>>,
    /// The parameter version the iteration computes with (SSP: ≥ iteration − slack).
    params_version: u64,
    own: VecDeque<UnitRows>,
    /// Units from peers: rows, reassigned or clone, from whom, their iteration.
    given_to_me: VecDeque<Given>,
    /// Units the proactive plan gave this worker whose rows came with them
    /// (computed after the own units; planned units of partitions held here
    /// join the own list, where rapid reassignment can pass them on).
    planned_in: VecDeque<Given>,
    /// Own units cloned to a peer, and to whom.
    cloned_out: BTreeMap<UnitKey, u32>,
    units_cancelled: u32,
    ready_us: u64,
    last_end_us: u64,
    compute_us: u64,
    rows: u64,
    bytes_sent: u64,
    bytes_moved: u64,
    units_given: u32,
    control_sent: u32,
    max_slowdown: f64,
    delay_us: u64,
    /// How late the previous unit's sleep woke up.
    oversleep: Duration,
    operator_us_at_start: u64,
    units: Vec<UnitRecord>,
    units_done: u32,
    /// Whether the worker reported being idle since it last had work.
    idle_reported: bool,
    /// Whether this iteration's timing went to the peers (online prediction).
    timing_sent: bool,
    /// What the online predictor expected of this worker, µs per unit.
    predicted_unit_us: Option<f64>,
}

impl Epoch {
    fn has_units(&self) -> bool {
        !self.own.is_empty() || !self.given_to_me.is_empty() || !self.planned_in.is_empty()
    }

    /// Mean time per unit so far this iteration, µs (0 before the first unit).
    fn unit_us(&self) -> u64 {
        self.last_end_us.saturating_sub(self.ready_us) / u64::from(self.units_done.max(1))
    }
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
    /// The rows this worker holds, and who holds its partitions.
    pub holdings: Holdings,
    /// Every worker's timings so far (online prediction only).
    history: Option<OnlineHistory>,
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
        let holdings = Holdings::new(cx.dataset.rows.rows(), sizes);
        let history = cx
            .predictor
            .as_ref()
            .map(|_| OnlineHistory::new(cx.plan.workers));
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
            next_iteration: 0,
            latest: None,
            finished: false,
            epoch: None,
            agent,
        }
    }

    /// Whether the operator should be scheduled again without new input.
    pub fn has_work(&self) -> bool {
        self.epoch.as_ref().is_some_and(Epoch::has_units)
            || self.can_begin()
            || !self.held.is_empty()
    }

    /// The control messages to read now. With `control_delay = N` each message
    /// first waits a seeded random 0..=N activations, so messages from
    /// different peers are read in shuffled orders (a test of exactly-once).
    fn release(&mut self, incoming: Vec<Control>) -> Vec<Control> {
        let max = self.cx.plan.control_delay;
        if max == 0 && self.held.is_empty() {
            return incoming;
        }
        for message in incoming {
            self.received += 1;
            let wait = crate::rng::hash_words(&[
                self.cx.plan.seed,
                u64::from(self.worker),
                u64::from(message.from),
                message.iteration,
                self.received,
            ]) % (u64::from(max) + 1);
            self.held.push((wait as u32, message));
        }
        let mut ready = Vec::new();
        let mut waiting = Vec::new();
        for (wait, message) in self.held.drain(..) {
            if wait == 0 {
                ready.push(message);
            } else {
                waiting.push((wait - 1, message));
            }
        }
        self.held = waiting;
        ready
    }

    fn operator_us(&self) -> u64 {
        self.clock.as_ref().map_or(0, |c| c.borrow().total_us())
    }

    /// One activation: take control messages, begin the next iteration if its
    /// parameters are complete, then compute at most one unit.
    pub fn step(&mut self, control: Vec<Control>, emit: &mut Emit<'_>) {
        for message in self.release(control) {
            self.on_control(message, emit);
        }
        self.assemble_versions();
        self.abandon_closed_iteration();
        if self.can_begin() {
            self.begin(emit);
        }
        let Some(epoch) = self.epoch.as_mut() else {
            return;
        };
        epoch.bytes_moved += self.holdings.take_moved_bytes();
        // Peers' units first (someone waits for them), then the own list,
        // then planned units that came with their rows.
        let next = match epoch.given_to_me.pop_front() {
            // A peer's unit does not count toward this worker's own progress.
            Some(g) => Some((g.rows, g.payload, g.action, g.from, g.iteration, false)),
            None => match epoch.own.pop_front() {
                Some(u) => Some((
                    u,
                    None,
                    UnitAction::Assigned,
                    self.worker,
                    epoch.iteration,
                    true,
                )),
                None => epoch
                    .planned_in
                    .pop_front()
                    .map(|g| (g.rows, g.payload, g.action, g.from, g.iteration, true)),
            },
        };
        if let Some((unit, payload, action, from, iteration, counts_as_own)) = next {
            epoch.idle_reported = false;
            // A worker computes only rows it holds, or rows shipped with the unit.
            let source = payload.as_deref().unwrap_or(self.holdings.store());
            let (record, slices) = compute_unit(
                &self.cx,
                self.worker,
                epoch,
                source,
                &unit,
                action,
                iteration,
            );
            epoch.bytes_sent += record.bytes_sent;
            epoch.units.push(record);
            epoch.units_done += 1;
            if iteration == epoch.iteration {
                (emit.grads)(&epoch.caps.0, slices);
            } else if let Some(cap) = self
                .latest
                .as_ref()
                .and_then(|l| l.caps.0.try_delayed(&iteration))
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
                send_done(self.worker, epoch, peer, unit.key, emit);
            }
            if counts_as_own {
                if let Some(agent) = self.agent.as_mut() {
                    let out = agent.on_own_unit_done(epoch.unit_us());
                    send_all(self.worker, epoch, &self.holdings, out, emit);
                }
            }
        }
        if !epoch.has_units() && !epoch.idle_reported {
            self.report_idle(emit);
            self.offer_help(emit);
        }
    }

    /// With nothing left to compute, offers help to a peer that is behind in the
    /// oldest open iteration (peer policies only).
    fn offer_help(&mut self, emit: &mut Emit<'_>) {
        let oldest_open = self.latest.as_ref().map_or(0, |l| l.version);
        let (Some(agent), Some(epoch)) = (self.agent.as_mut(), self.epoch.as_mut()) else {
            return;
        };
        if epoch.has_units() {
            return;
        }
        for (to, iteration, kind) in agent.on_idle(epoch.unit_us(), oldest_open) {
            let cap = if iteration == epoch.iteration {
                Some(epoch.caps.2.clone())
            } else {
                self.latest
                    .as_ref()
                    .and_then(|l| l.caps.2.try_delayed(&iteration))
            };
            if let Some(cap) = cap {
                epoch.control_sent += 1;
                (emit.control)(
                    &cap,
                    Control {
                        to,
                        from: self.worker,
                        iteration,
                        kind,
                        units: Vec::new(),
                        rows: Vec::new(),
                    },
                );
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
        if let (Some(history), false) = (self.history.as_mut(), epoch.timing_sent) {
            // Every worker learns every worker's first report of the iteration,
            // so all compute the same predictions (and proactive plans).
            epoch.timing_sent = true;
            let (units, busy_us) = (record.units, record.busy_us);
            history.record(epoch.iteration, self.worker, Timing { units, busy_us });
            for to in (0..self.cx.plan.workers).filter(|&w| w != self.worker) {
                epoch.control_sent += 1;
                (emit.control)(
                    &epoch.caps.2,
                    Control {
                        to,
                        from: self.worker,
                        iteration: epoch.iteration,
                        kind: ControlKind::Timing { units, busy_us },
                        units: Vec::new(),
                        rows: Vec::new(),
                    },
                );
            }
        }
        (emit.progress)(&epoch.caps.1, Progress::Finished(record));
        let units = std::mem::take(&mut epoch.units);
        let _ = self.sink.send(SinkEvent::Units(units));
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

    fn on_control(&mut self, message: Control, emit: &mut Emit<'_>) {
        if let ControlKind::Timing { units, busy_us } = message.kind {
            if let Some(history) = self.history.as_mut() {
                history.record(message.iteration, message.from, Timing { units, busy_us });
            }
            return;
        }
        let current = self.epoch.as_ref().map(|e| e.iteration);
        if current.is_none_or(|t| message.iteration > t) {
            // A report from a later iteration (SSP) also says the peer is done
            // with ours: it is ahead, and may take units of this iteration.
            if let (ControlKind::Progress { unit_us, .. }, Some(epoch), Some(agent)) =
                (&message.kind, self.epoch.as_mut(), self.agent.as_mut())
            {
                let total = agent.own_total_hint();
                let ahead = ControlKind::Progress {
                    done: total,
                    total,
                    unit_us: *unit_us,
                };
                let left = epoch.own.len();
                let out = agent.on_message(message.from, &ahead, left);
                send_all(self.worker, epoch, &self.holdings, out, emit);
            }
            if !self.finished {
                self.early_control.push(message);
            }
            return;
        }
        let older = current != Some(message.iteration);
        if older {
            if let Some(agent) = self.agent.as_mut() {
                agent.on_earlier(message.iteration, message.from, &message.kind);
            }
            if let ControlKind::Decline = message.kind {
                self.offer_help(emit); // try another peer
            }
        }
        if older
            && !matches!(
                message.kind,
                ControlKind::Assign { .. }
                    | ControlKind::Clone { .. }
                    | ControlKind::Planned { .. }
                    | ControlKind::Done
            )
        {
            return; // a report or offer about an iteration this worker has left
        }
        let Some(epoch) = self.epoch.as_mut() else {
            return;
        };
        let mut agent = self.agent.as_mut();
        match message.kind {
            ControlKind::Assign { .. }
            | ControlKind::Clone { .. }
            | ControlKind::Planned { .. } => {
                let action = match message.kind {
                    ControlKind::Clone { .. } => UnitAction::Clone,
                    _ => UnitAction::Reassigned,
                };
                let payload = (!message.rows.is_empty()).then(|| {
                    epoch.bytes_moved += message.rows.iter().map(DataRow::wire_bytes).sum::<u64>();
                    Arc::new(LocalRows::from_rows(&message.rows))
                });
                for key in &message.units {
                    let rows = self.cx.unit_rows(message.iteration, *key);
                    // Rows held here are read from the store; the message
                    // carries only the rows of units this worker does not hold.
                    let held = self.holdings.holds(key.partition);
                    if !held {
                        assert!(
                            payload
                                .as_ref()
                                .is_some_and(|p| rows.rows.iter().all(|&r| p.contains(r))),
                            "worker {} was handed unit {key:?} without its rows",
                            self.worker
                        );
                        // From the next iteration on, hold the partition: its
                        // rows travel once, as diffs of the placement.
                        if self.holdings.request(key.partition) {
                            (emit.placement)(
                                &epoch.caps.3,
                                ((key.partition, self.worker), epoch.iteration + 1, 1),
                            );
                        }
                    }
                    let planned = matches!(message.kind, ControlKind::Planned { .. });
                    if planned && held {
                        epoch.own.push_back(rows);
                        continue;
                    }
                    let given = Given {
                        rows,
                        payload: if held { None } else { payload.clone() },
                        action,
                        from: message.from,
                        iteration: message.iteration,
                    };
                    if planned {
                        epoch.planned_in.push_back(given);
                    } else {
                        epoch.given_to_me.push_back(given);
                    }
                }
                epoch.idle_reported = false;
                if older {
                    return;
                }
            }
            ControlKind::Done => {
                // A peer finished these first: skip our copies.
                for key in &message.units {
                    let before = epoch.own.len() + epoch.given_to_me.len();
                    epoch.own.retain(|u| u.key != *key);
                    let own_skipped = epoch.own.len() + epoch.given_to_me.len() < before;
                    epoch.given_to_me.retain(|g| {
                        !(g.rows.key == *key
                            && g.action == UnitAction::Clone
                            && g.from == message.from
                            && g.iteration == message.iteration)
                    });
                    let skipped = epoch.own.len() + epoch.given_to_me.len() < before;
                    if skipped {
                        epoch.units_cancelled += 1;
                    }
                    if !older && epoch.cloned_out.remove(key).is_some() && own_skipped {
                        if let Some(agent) = agent.as_mut() {
                            let out = agent.on_own_unit_done(epoch.unit_us());
                            send_all(self.worker, epoch, &self.holdings, out, emit);
                        }
                    }
                }
                return;
            }
            _ => {}
        }
        let left = epoch
            .own
            .iter()
            .filter(|u| !epoch.cloned_out.contains_key(&u.key))
            .count();
        let Some(agent) = agent else {
            return;
        };
        let out = agent.on_message(message.from, &message.kind, left);
        send_all(self.worker, epoch, &self.holdings, out, emit);
        if let ControlKind::Decline = message.kind {
            self.offer_help(emit); // try another peer
        }
    }

    /// Takes every parameter version whose shards are all here, in order; the
    /// newest becomes `latest` (dropping the capabilities of the one before).
    fn assemble_versions(&mut self) {
        if let Some(caps) = self.initial.take() {
            self.install(0, caps, Arc::new(vec![0.0; self.cx.dims]));
        }
        while let Some((&v, p)) = self.pending.first_key_value() {
            if p.received < p.shards.len() {
                break;
            }
            let p = self.pending.remove(&v).expect("present");
            let mut params = Vec::with_capacity(self.cx.dims);
            for shard in p.shards.into_iter().flatten() {
                params.extend_from_slice(&shard);
            }
            self.install(v, p.caps, Arc::new(params));
        }
    }

    fn install(&mut self, version: u64, caps: Caps, params: Arc<Vec<f64>>) {
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

    /// Whether the next iteration may begin: the current one has nothing left
    /// and the newest parameters are at most `slack` versions behind it.
    fn can_begin(&self) -> bool {
        let idle = self.epoch.as_ref().is_none_or(|e| !e.has_units());
        let Some(latest) = &self.latest else {
            return false;
        };
        // A proactive plan for t needs every worker's timing of t − 1.
        let planned = !self.cx.plan.policy.predicts()
            || self.next_iteration == 0
            || self.next_iteration >= self.cx.plan.iterations
            || self
                .history
                .as_ref()
                .is_none_or(|h| h.complete(self.next_iteration - 1));
        idle && !self.finished
            && planned
            && self.holdings.ready()
            && (latest.version + self.cx.plan.policy.slack() >= self.next_iteration
                || latest.version >= self.cx.plan.iterations)
    }

    fn begin(&mut self, emit: &mut Emit<'_>) {
        // An iteration left without going idle (its leftovers were abandoned)
        // still reports, so its records are not lost.
        self.report_idle(emit);
        let latest = self.latest.as_ref().expect("checked by can_begin");
        let iteration = self.next_iteration.min(self.cx.plan.iterations);
        if latest.version >= self.cx.plan.iterations {
            // The final version: every iteration is reduced; report the last
            // barrier and let every capability go.
            let ready_us = self.cx.now_us();
            (emit.progress)(
                &latest.caps.1,
                Progress::Ready {
                    worker: self.worker,
                    iteration: self.cx.plan.iterations,
                    ready_us,
                },
            );
            self.finished = true;
            self.epoch = None;
            self.latest = None;
            return;
        }
        if iteration >= self.cx.plan.iterations {
            return; // all iterations done here; waiting for the final version
        }
        let caps = (
            latest.caps.0.delayed(&iteration),
            latest.caps.1.delayed(&iteration),
            latest.caps.2.delayed(&iteration),
            latest.caps.3.delayed(&(iteration + 1)),
        );
        let params = Arc::clone(&latest.params);
        let params_version = latest.version;
        self.next_iteration += 1;
        let version = iteration;
        let ready_us = self.cx.now_us();
        (emit.progress)(
            &caps.1,
            Progress::Ready {
                worker: self.worker,
                iteration,
                ready_us,
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
        self.epoch = Some(Epoch {
            iteration: version,
            caps,
            params,
            params_version,
            own,
            given_to_me: VecDeque::new(),
            planned_in: VecDeque::new(),
            cloned_out: BTreeMap::new(),
            units_cancelled: 0,
            ready_us,
            last_end_us: ready_us,
            compute_us: 0,
            rows: 0,
            bytes_sent: 0,
            bytes_moved: 0,
            units_given: 0,
            control_sent: 0,
            max_slowdown: 1.0,
            delay_us: 0,
            oversleep: Duration::ZERO,
            operator_us_at_start: self.operator_us(),
            units: Vec::new(),
            units_done: 0,
            idle_reported: false,
            timing_sent: false,
            predicted_unit_us: None,
        });
        let planned_in = self.plan_ahead(emit);
        if let (Some(agent), Some(epoch)) = (self.agent.as_mut(), self.epoch.as_ref()) {
            agent.begin(version, epoch.own.len() as u32 + planned_in);
        }
        let early: Vec<Control> = std::mem::take(&mut self.early_control);
        for message in early {
            self.on_control(message, emit);
        }
    }

    /// At the start of an iteration: predict every worker's time per unit from
    /// the timings so far and, under a proactive policy, give this worker's
    /// share of the planned moves (units of partitions the receiver holds
    /// first). Returns how many units the plan gives this worker.
    fn plan_ahead(&mut self, emit: &mut Emit<'_>) -> u32 {
        let (Some(history), Some(predictor), Some(epoch)) = (
            self.history.as_ref(),
            self.cx.predictor.as_ref(),
            self.epoch.as_mut(),
        ) else {
            return 0;
        };
        let predicted = history.predict(predictor.as_predictor());
        epoch.predicted_unit_us = predicted.get(self.worker as usize).copied().flatten();
        if let PolicyPlan::DproSubstitute { floor, threshold } = self.cx.plan.policy {
            substitute_if_predicted_slow(
                &self.cx,
                self.worker,
                epoch,
                &predicted,
                floor,
                threshold,
                emit,
            );
            return 0;
        }
        let Some(config) = self.cx.plan.policy.proactive() else {
            return 0;
        };
        let own: Vec<u32> = (0..self.cx.plan.workers)
            .map(|w| self.cx.own_units(w))
            .collect();
        let mut moves = plan_moves(&own, &predicted, config);
        if let PolicyPlan::ProactiveClone { budget, .. } = self.cx.plan.policy {
            // Clones: the predicted-slow worker keeps its units; the first copy
            // to finish wins and the other side skips or discards its copy.
            let total: u32 = own.iter().sum();
            moves = within_budget(&moves, (f64::from(total) * budget).floor() as u32);
            let mine: Vec<(u32, ControlKind)> = moves
                .into_iter()
                .filter(|m| m.from == self.worker)
                .map(|m| (m.to, ControlKind::Clone { count: m.count }))
                .collect();
            send_all(self.worker, epoch, &self.holdings, mine, emit);
            return 0;
        }
        let planned_in = moves
            .iter()
            .filter(|m| m.to == self.worker)
            .map(|m| m.count)
            .sum();
        let mine: Vec<(u32, ControlKind)> = moves
            .into_iter()
            .filter(|m| m.from == self.worker)
            .map(|m| (m.to, ControlKind::Planned { count: m.count }))
            .collect();
        // `send_all` gives units from the end of the list: put the units each
        // receiver already holds there, in the order the moves are sent.
        let mut tail: Vec<UnitRows> = Vec::new();
        for (to, kind) in &mine {
            let ControlKind::Planned { count } = *kind else {
                continue;
            };
            let mut picked = Vec::with_capacity(count as usize);
            let held: Vec<usize> = (0..epoch.own.len())
                .rev()
                .filter(|&i| {
                    self.holdings
                        .settled_holder(epoch.own[i].key.partition, *to)
                })
                .take(count as usize)
                .collect();
            for i in held {
                picked.extend(epoch.own.remove(i));
            }
            while picked.len() < count as usize {
                match epoch.own.pop_back() {
                    Some(u) => picked.push(u),
                    None => break,
                }
            }
            picked.reverse();
            tail.splice(0..0, picked);
        }
        epoch.own.extend(tail);
        send_all(self.worker, epoch, &self.holdings, mine, emit);
        planned_in
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
            control_sent: epoch.control_sent,
            units_cancelled: epoch.units_cancelled,
            params_version: epoch.params_version,
            predicted_unit_us: epoch.predicted_unit_us,
            gt_slowdown: epoch.max_slowdown,
            gt_delay_us: epoch.delay_us,
        }
    }
}

/// dpro-substitute: when this worker's predicted completion time (its units ×
/// its predicted time per unit) is over `threshold` × the median worker's, it
/// keeps only the units of the first `floor` share of its partitions (at least
/// one) and tells every shard owner to use the other units' last gradients.
fn substitute_if_predicted_slow(
    cx: &JobContext,
    worker: u32,
    epoch: &mut Epoch,
    predicted: &[Option<f64>],
    floor: f64,
    threshold: f64,
    emit: &mut Emit<'_>,
) {
    let finish = |w: usize| {
        predicted
            .get(w)
            .copied()
            .flatten()
            .map(|t| t * f64::from(cx.own_units(w as u32)))
    };
    let mut known: Vec<f64> = (0..predicted.len()).filter_map(finish).collect();
    let Some(mine) = finish(worker as usize) else {
        return;
    };
    known.sort_by(f64::total_cmp);
    // The lower median: with half the workers slow, the upper one is slow too.
    let median = known[(known.len() - 1) / 2];
    if !(median > 0.0 && mine > threshold * median) {
        return;
    }
    let partitions = cx.assignment(worker);
    let keep =
        ((partitions.len() as f64 * floor).ceil() as usize).clamp(1, partitions.len().max(1));
    let kept: Vec<u32> = partitions[..keep.min(partitions.len())].to_vec();
    let (stay, skip): (Vec<UnitRows>, Vec<UnitRows>) = epoch
        .own
        .drain(..)
        .partition(|u| kept.contains(&u.key.partition));
    epoch.own = stay.into();
    let iteration = epoch.iteration;
    let markers: Vec<GradSlice> = skip
        .iter()
        .flat_map(|u| {
            (0..cx.shards.len() as u32).map(move |owner| GradSlice {
                owner,
                iteration,
                partition: u.key.partition,
                unit: u.key.unit,
                executor: worker,
                rows: u.rows.len() as u32,
                loss_sum: 0.0,
                values: Vec::new(),
                substitute: true,
            })
        })
        .collect();
    (emit.grads)(&epoch.caps.0, markers);
}

/// Tells `peer` that the copy of `key` computed here came first.
fn send_done(worker: u32, epoch: &mut Epoch, peer: u32, key: UnitKey, emit: &mut Emit<'_>) {
    epoch.control_sent += 1;
    (emit.control)(
        &epoch.caps.2,
        Control {
            to: peer,
            from: worker,
            iteration: epoch.iteration,
            kind: ControlKind::Done,
            units: vec![key],
            rows: Vec::new(),
        },
    );
}

/// Sends the agent's messages. An `Assign` takes its units from the end of the
/// worker's own list first, so they are no longer this worker's to compute; a
/// `Clone` names units from the end that are not cloned yet and keeps them.
///
/// Units go with their rows unless the receiver is a settled holder of them.
fn send_all(
    worker: u32,
    epoch: &mut Epoch,
    holdings: &Holdings,
    out: Vec<(u32, ControlKind)>,
    emit: &mut Emit<'_>,
) {
    for (to, kind) in out {
        let units: Vec<UnitRows> = match kind {
            ControlKind::Assign { count } | ControlKind::Planned { count } => {
                let mut taken: Vec<UnitRows> =
                    (0..count).filter_map(|_| epoch.own.pop_back()).collect();
                taken.reverse();
                epoch.units_given += taken.len() as u32;
                if taken.is_empty() {
                    continue;
                }
                taken
            }
            ControlKind::Clone { count } => {
                let mut picked: Vec<UnitRows> = epoch
                    .own
                    .iter()
                    .rev()
                    .filter(|u| !epoch.cloned_out.contains_key(&u.key))
                    .take(count as usize)
                    .cloned()
                    .collect();
                picked.reverse();
                for u in &picked {
                    epoch.cloned_out.insert(u.key, to);
                }
                epoch.units_given += picked.len() as u32;
                if picked.is_empty() {
                    continue;
                }
                picked
            }
            _ => Vec::new(),
        };
        let rows = units
            .iter()
            .filter(|u| !holdings.settled_holder(u.key.partition, to))
            .flat_map(|u| holdings.ship(&u.rows))
            .collect();
        epoch.control_sent += 1;
        (emit.control)(
            &epoch.caps.2,
            Control {
                to,
                from: worker,
                iteration: epoch.iteration,
                kind,
                units: units.iter().map(|u| u.key).collect(),
                rows,
            },
        );
    }
}

/// Sleeps until `deadline` and returns by how much the sleep overshot it.
fn sleep_until(deadline: Instant) -> Duration {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
    Instant::now().saturating_duration_since(deadline)
}

/// Computes one unit's real gradient, stretches it by the injected slowdown (and
/// to its nominal duration in paced mode), and cuts it into shard slices.
fn compute_unit(
    cx: &JobContext,
    worker: u32,
    epoch: &mut Epoch,
    source: &LocalRows,
    unit: &UnitRows,
    action: UnitAction,
    iteration: u64,
) -> (UnitRecord, Vec<GradSlice>) {
    let started = Instant::now();
    let start_us = cx.us_since_start(started);
    let gradient = unit_gradient(source, &epoch.params, &unit.rows);
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
            iteration,
            partition: unit.key.partition,
            unit: unit.key.unit,
            executor: worker,
            rows,
            loss_sum: if owner == 0 { gradient.loss_sum } else { 0.0 },
            values: gradient.grad[range.clone()].to_vec(),
            substitute: false,
        })
        .collect();
    let end_us = cx.now_us();
    let compute_us = compute.as_micros() as u64;
    let record = UnitRecord {
        iteration,
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
        action,
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
