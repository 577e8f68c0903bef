//! The control protocol: the messages peers exchange during an iteration (progress,
//! offers, assignments, clones, done notices, timings), read and answered here.

use std::sync::Arc;

use super::epoch::{Epoch, Given};
use super::pieces::{rest_running, rows_for, tail_running};
use super::{ComputeState, Emit};
use crate::data::{DataRow, LocalRows, UnitKey, UnitRows};
use crate::policy::handover::{self, Cancelled, Taker};
use crate::policy::{ControlKind, PeerAgent};
use crate::predict::Timing;
use crate::run::context::JobContext;
use crate::run::holdings::Holdings;
use crate::run::messages::{Control, Piece};
use crate::trace::UnitAction;

impl ComputeState {
    /// The control messages to read now. With `control_delay = N` each message
    /// first waits a seeded random 0..=N activations, so messages from
    /// different peers are read in shuffled orders (a test of exactly-once).
    pub(super) fn release(&mut self, incoming: Vec<Control>) -> Vec<Control> {
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

    /// Takes one control message: timings go to the history, messages of a
    /// later iteration wait, units handed over join the lists, and the agent
    /// answers the rest.
    pub(super) fn on_control(&mut self, message: Control, emit: &mut Emit<'_>) {
        match message.kind {
            // Worker 0 gathers the timings and passes them on.
            ControlKind::Timing { units, busy_us } => {
                let timing = Timing { units, busy_us };
                self.on_timing(message.iteration, message.from, timing, emit);
                return;
            }
            ControlKind::Timings { ref all } => {
                if let Some(history) = self.history.as_mut() {
                    for (w, &(units, busy_us)) in all.iter().enumerate() {
                        history.record(message.iteration, w as u32, Timing { units, busy_us });
                    }
                }
                return;
            }
            _ => {}
        }
        let current = self.epoch.as_ref().map(|e| e.iteration);
        if current.is_none_or(|t| message.iteration > t) {
            self.on_later(message, emit);
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
                    | ControlKind::Rest { .. }
                    | ControlKind::Tail { .. }
                    | ControlKind::Done
            )
        {
            return; // a report or offer about an iteration this worker has left
        }
        let closed = self.latest.as_ref().map_or(0, |l| l.version);
        if self.epoch.is_none() || message.iteration < closed {
            // Units of an iteration already reduced (a clone that lost the
            // race in flight): nothing to compute, nobody to tell.
            return;
        }
        // (whether handed units already waited here when these came)
        let mut waited = false;
        match message.kind {
            ControlKind::Assign { .. }
            | ControlKind::Clone { .. }
            | ControlKind::Planned { .. }
            | ControlKind::Rest { .. }
            | ControlKind::Tail { .. } => {
                waited = self.epoch.as_ref().is_some_and(Epoch::holds_passable);
                self.receive_units(&message, older, emit);
                if older {
                    return;
                }
            }
            ControlKind::Done => {
                self.on_done(&message, emit);
                return;
            }
            _ => {}
        }
        let (Some(epoch), Some(agent)) = (self.epoch.as_mut(), self.agent.as_mut()) else {
            return;
        };
        let left = epoch.own_left();
        let now_us = self.cx.now_us();
        epoch.observe(agent, now_us);
        let mut out = agent.on_message(message.from, &message.kind, left);
        if let (ControlKind::Offer { unit_us }, [(to, ControlKind::Decline)]) =
            (&message.kind, out.as_slice())
        {
            // Nothing in the list to give: the unit in flight, if it is far
            // from its end, is worth a copy.
            let helper = (*to, *unit_us);
            if self.cx.plan.policy.clones_in_flight() {
                let idle = (*to, Taker::idle(*unit_us));
                let at = (&*self.cx, self.worker, &self.holdings);
                // (what the agent says once a rest is out of its hands)
                let mut after = Vec::new();
                if pass_queued(
                    self.worker,
                    (epoch, agent),
                    &self.holdings,
                    idle,
                    now_us,
                    emit,
                ) || tail_running(at, epoch, helper, now_us, emit)
                    || rest_running(at, epoch, (agent, &mut after), helper, now_us, emit)
                    || clone_running(self.worker, epoch, &self.holdings, helper, now_us, emit)
                {
                    out.clear();
                    out.append(&mut after);
                } else if epoch.running.is_some() && *unit_us > 0 {
                    // Not late yet: it may be by the next micro-batch.
                    epoch.waiting_helpers.retain(|h| h.0 != helper.0);
                    epoch.waiting_helpers.push(helper);
                }
            }
        }
        if self.cx.plan.policy.clones_in_flight() {
            // A peer with less work left than the units queued here.
            if let Some(taker) = handover::report_taker(&message.kind, &out, agent.takers()) {
                let to = (message.from, taker);
                pass_queued(
                    self.worker,
                    (epoch, agent),
                    &self.holdings,
                    to,
                    now_us,
                    emit,
                );
            }
        }
        send_all((&self.cx, self.worker, &self.holdings), epoch, out, emit);
        let handed =
            matches!(message.kind, ControlKind::Assign { .. }) && !message.units.is_empty();
        if self.cx.plan.policy.clones_in_flight() && handed && waited {
            // Handed units from two sides: those waiting here unbegun (these among them) on to
            // the peer expected free first, as far as that gains (once an iteration).
            if let Some(to) = agent.freest_peer(message.from) {
                let at = (epoch, &mut *agent);
                if pass_queued(self.worker, at, &self.holdings, to, now_us, emit) {
                    agent.forwarded();
                }
            }
        }
        if let ControlKind::Decline = message.kind {
            self.offer_help(emit); // try another peer
        }
    }

    /// A message of an iteration this worker has not begun: kept until it
    /// begins it. A report from a later iteration (SSP) also says the peer
    /// is done with ours: it is ahead, and may take units of this iteration.
    fn on_later(&mut self, message: Control, emit: &mut Emit<'_>) {
        if let (ControlKind::Progress { unit_us, .. }, Some(epoch), Some(agent)) =
            (&message.kind, self.epoch.as_mut(), self.agent.as_mut())
        {
            let total = agent.own_total_hint();
            let ahead = ControlKind::Progress {
                done: total,
                total,
                queued: 0,
                unit_us: *unit_us,
            };
            let left = epoch.own.len();
            epoch.observe(agent, self.cx.now_us());
            let out = agent.on_message(message.from, &ahead, left);
            send_all((&self.cx, self.worker, &self.holdings), epoch, out, emit);
        }
        if !self.finished {
            self.early_control.push(message);
        }
    }

    /// Units a peer handed over (`Assign`, `Clone`, `Planned`) join the
    /// lists; rows that came with them are kept for them, and their
    /// partitions are held from the next iteration on. `older`: the message
    /// is of an iteration before the current one.
    fn receive_units(&mut self, message: &Control, older: bool, emit: &mut Emit<'_>) {
        let Some(epoch) = self.epoch.as_mut() else {
            return;
        };
        let action = match message.kind {
            ControlKind::Clone { .. } => UnitAction::Clone,
            // (from its first micro-batch: a unit's first part, cut before
            // and handed over whole, which counts the unit)
            ControlKind::Tail { first: 0, .. } => UnitAction::Reassigned,
            ControlKind::Tail { .. } => UnitAction::Tail,
            _ => UnitAction::Reassigned,
        };
        let payload = (!message.rows.is_empty()).then(|| {
            epoch.bytes_moved += message.rows.iter().map(DataRow::wire_bytes).sum::<u64>();
            Arc::new(LocalRows::from_rows(&message.rows))
        });
        for key in &message.units {
            let mut rows = self.cx.unit_rows(message.iteration, *key);
            // A tail: its micro-batches only.
            let piece = match message.kind {
                ControlKind::Tail { first, count } => {
                    let micro = self.cx.plan.micro_batch as usize;
                    let unit_rows = rows.rows.len() as u32;
                    let from = (first as usize * micro).min(rows.rows.len());
                    let to = ((first + count) as usize * micro).min(rows.rows.len());
                    rows.rows = rows.rows[from..to].to_vec();
                    Some(Piece {
                        first_row: from as u32,
                        unit_rows,
                    })
                }
                _ => None,
            };
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
                        &epoch.caps.placement,
                        ((key.partition, self.worker), epoch.iteration + 1, 1),
                    );
                }
            }
            // Planned units join the receiver's own list, but only
            // in their own iteration: a receiver already ahead
            // (SSP) computes them as given units of that iteration.
            let planned = !older && matches!(message.kind, ControlKind::Planned { .. });
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
                carry: message.carry.clone(),
                piece,
            };
            if planned {
                epoch.planned_in.push_back(given);
            } else {
                epoch.given_to_me.push_back(given);
            }
        }
        epoch.idle_reported = false;
    }

    /// A peer finished these units first: skip our copies. Unit keys repeat
    /// every iteration: a notice about an earlier one touches only that
    /// iteration's copies.
    fn on_done(&mut self, message: &Control, emit: &mut Emit<'_>) {
        let Some(epoch) = self.epoch.as_mut() else {
            return;
        };
        for key in &message.units {
            let mut lists = Lists {
                epoch: &mut *epoch,
                iteration: message.iteration,
            };
            let cancelled = handover::done(&mut lists, message.from, *key);
            match cancelled {
                Cancelled::Nothing => {
                    // A clone finished here after the original: in vain.
                    epoch.wasted_us += epoch
                        .clones_done
                        .remove(&(message.iteration, *key))
                        .unwrap_or(0);
                }
                _ => epoch.units_cancelled += 1,
            }
            if cancelled == Cancelled::Handed {
                // Its compute is in vain; the peer's copy counts.
                continue;
            }
            if matches!(cancelled, Cancelled::Own | Cancelled::Running) {
                if let Some(agent) = self.agent.as_mut() {
                    epoch.observe(agent, self.cx.now_us());
                    let out = agent.on_own_unit_done(epoch.unit_us());
                    send_all((&self.cx, self.worker, &self.holdings), epoch, out, emit);
                }
            }
        }
    }

    /// With nothing left to compute, offers help to a peer that is behind in the
    /// oldest open iteration (peer policies only).
    pub(super) fn offer_help(&mut self, emit: &mut Emit<'_>) {
        let oldest_open = self.latest.as_ref().map_or(0, |l| l.version);
        let (Some(agent), Some(epoch)) = (self.agent.as_mut(), self.epoch.as_mut()) else {
            return;
        };
        if epoch.has_units() {
            return;
        }
        epoch.observe(agent, self.cx.now_us());
        for (to, iteration, kind) in agent.on_idle(epoch.unit_us(), oldest_open) {
            let cap = if iteration == epoch.iteration {
                Some(epoch.caps.control.clone())
            } else {
                self.latest
                    .as_ref()
                    .and_then(|l| l.caps.control.try_delayed(&iteration))
            };
            if let Some(cap) = cap {
                let message = Control {
                    to,
                    from: self.worker,
                    iteration,
                    kind,
                    units: Vec::new(),
                    rows: Vec::new(),
                    carry: None,
                };
                epoch.control.count(&message);
                (emit.control)(&cap, message);
            }
        }
    }
}

/// Sends a copy of the unit in flight to the fastest peer that offered help
/// before it was late enough, if it is now (see [`clone_running`]). Never
/// its rest: that peer may have taken other work since it offered, and a
/// rest waiting behind it would hold the unit up, where a copy only races
/// the unit (in `cnn-rests-2`, rests to remembered offers under
/// disrupted-machine made `forestall` slower than `bsp`).
pub(super) fn clone_to_waiting_helper(
    worker: u32,
    epoch: &mut Epoch,
    holdings: &Holdings,
    now_us: u64,
    emit: &mut Emit<'_>,
) {
    let Some(&fastest) = epoch.waiting_helpers.iter().min_by_key(|h| (h.1, h.0)) else {
        return;
    };
    if clone_running(worker, epoch, holdings, fastest, now_us, emit) {
        epoch.waiting_helpers.clear();
    }
}

/// Passes units peers handed to this worker that wait here unbegun on to
/// `to` = (peer, as a [`Taker`]: offering help, or reporting less work left
/// than this worker has), from the end of the queue, as many as
/// [`handover::pass_on`] says (a helper slowed in turn, or handed units
/// from two sides at once, passes on what it took). Copies and units of
/// earlier iterations stay. They go with their rows unless the peer holds
/// them, and the agent counts them in its view of that peer's work left.
/// Returns whether any went.
fn pass_queued(
    worker: u32,
    (epoch, agent): (&mut Epoch, &mut PeerAgent),
    holdings: &Holdings,
    (to, taker): (u32, Taker),
    now_us: u64,
    emit: &mut Emit<'_>,
) -> bool {
    let queued = epoch
        .given_to_me
        .iter()
        .filter(|g| epoch.passable(g))
        .count();
    if queued == 0 {
        return false;
    }
    let running = epoch.running.as_ref().map(|r| r.in_flight(now_us));
    let count = handover::pass_on(queued, running.as_ref(), epoch.unit_us(), taker);
    if count == 0 {
        return false;
    }
    let mut passed = Vec::with_capacity(count);
    let mut k = epoch.given_to_me.len();
    while passed.len() < count && k > 0 {
        k -= 1;
        if epoch.passable(&epoch.given_to_me[k]) {
            passed.extend(epoch.given_to_me.remove(k));
        }
    }
    passed.reverse(); // in queue order
    let rows = passed
        .iter()
        .flat_map(|g| rows_for(holdings, to, g))
        .collect();
    epoch.units_given += passed.len() as u32;
    agent.passed(to, passed.len() as u32);
    let message = Control {
        to,
        from: worker,
        iteration: epoch.iteration,
        kind: ControlKind::Assign {
            count: passed.len() as u32,
        },
        units: passed.iter().map(|g| g.rows.key).collect(),
        rows,
        carry: None,
    };
    epoch.control.count(&message);
    (emit.control)(&epoch.caps.control, message);
    true
}

/// Answers an offer of help from `helper` = (peer, its µs per unit) with a
/// copy of the unit in flight — own or handed over by a peer, never itself a
/// copy — when [`handover::clone_in_flight`] says it is far enough from its
/// end. Its rows go with it unless the helper holds them (from the store, or
/// from the rows that came with a handed-over unit). The unit stays in flight
/// here; whichever copy finishes first tells the other. Returns whether a
/// copy went.
fn clone_running(
    worker: u32,
    epoch: &mut Epoch,
    holdings: &Holdings,
    (to, helper_unit_us): (u32, u64),
    now_us: u64,
    emit: &mut Emit<'_>,
) -> bool {
    let Some(running) = epoch.running.as_ref() else {
        return false;
    };
    let unit = &running.next.unit;
    let eligible = unit.action != UnitAction::Clone
        && running.first_rows == 0
        && unit.piece.is_none()
        && unit.iteration == epoch.iteration
        && !epoch.cloned_out.contains_key(&unit.rows.key)
        && handover::clone_in_flight(&running.in_flight(now_us), helper_unit_us);
    if !eligible {
        return false;
    }
    let key = unit.rows.key;
    let rows = rows_for(holdings, to, unit);
    epoch.cloned_out.insert(key, to);
    let message = Control {
        to,
        from: worker,
        iteration: epoch.iteration,
        kind: ControlKind::Clone { count: 1 },
        units: vec![key],
        rows,
        carry: None,
    };
    epoch.control.count(&message);
    (emit.control)(&epoch.caps.control, message);
    true
}

/// Tells `peer` that the copy of `key` of `iteration` computed here came
/// first (the unit's own iteration: keys repeat every iteration, and a copy
/// may finish after this worker has moved on).
pub(super) fn send_done(
    worker: u32,
    epoch: &mut Epoch,
    peer: u32,
    (iteration, key): (u64, UnitKey),
    emit: &mut Emit<'_>,
) {
    let message = Control {
        to: peer,
        from: worker,
        iteration,
        kind: ControlKind::Done,
        units: vec![key],
        rows: Vec::new(),
        carry: None,
    };
    epoch.control.count(&message);
    (emit.control)(&epoch.caps.control, message);
}

/// Sends the agent's messages. An `Assign` takes its units from the end of the
/// worker's own list first, so they are no longer this worker's to compute; a
/// `Clone` names units from the end that are not cloned yet, last first, and
/// keeps them (see [`crate::policy::handover`]).
///
/// Units go with their rows unless the receiver is a settled holder of them.
pub(super) fn send_all(
    (cx, worker, holdings): (&JobContext, u32, &Holdings),
    epoch: &mut Epoch,
    out: Vec<(u32, ControlKind)>,
    emit: &mut Emit<'_>,
) {
    for (to, kind) in out {
        if let ControlKind::Cut { count } = kind {
            super::pieces::cut_own((cx, worker, holdings), epoch, (to, count), emit);
            continue;
        }
        let iteration = epoch.iteration;
        let mut lists = Lists {
            epoch: &mut *epoch,
            iteration,
        };
        let mut units: Vec<UnitRows> = Vec::new();
        let handed = match kind {
            ControlKind::Assign { count } | ControlKind::Planned { count } => {
                Some(handover::give(&mut lists, count, &mut units))
            }
            ControlKind::Clone { count } => {
                Some(handover::clone_out(&mut lists, to, count, &mut units))
            }
            _ => None,
        };
        if let Some(handed) = handed {
            epoch.units_given += handed as u32;
            if handed == 0 {
                continue;
            }
        }
        let rows = units
            .iter()
            .filter(|u| !holdings.settled_holder(u.key.partition, to))
            .flat_map(|u| holdings.ship(&u.rows))
            .collect();
        let message = Control {
            to,
            from: worker,
            iteration: epoch.iteration,
            kind,
            units: units.iter().map(|u| u.key).collect(),
            rows,
            carry: None,
        };
        epoch.control.count(&message);
        (emit.control)(&epoch.caps.control, message);
    }
}

/// An iteration's lists as a message of `iteration` sees them: a message
/// about an earlier iteration reaches only the copies of that iteration
/// (unit keys repeat every iteration).
struct Lists<'a> {
    epoch: &'a mut Epoch,
    iteration: u64,
}

impl Lists<'_> {
    fn current(&self) -> bool {
        self.iteration == self.epoch.iteration
    }
}

impl handover::Lists for Lists<'_> {
    type Unit = UnitRows;

    fn key(unit: &UnitRows) -> UnitKey {
        unit.key
    }

    fn own(&self) -> impl DoubleEndedIterator<Item = &UnitRows> {
        let own = if self.current() {
            0..
        } else {
            self.epoch.own.len()..
        };
        self.epoch.own.range(own)
    }

    fn pop_own(&mut self) -> Option<UnitRows> {
        if !self.current() {
            return None;
        }
        // (the first part of a unit cut in two stays: it goes only as a
        // piece, by a cut)
        let back = self.epoch.own.back()?.key;
        if self.epoch.cut.iter().any(|c| c.0 == back) {
            return None;
        }
        self.epoch.own.pop_back()
    }

    fn cloned_to(&self, key: UnitKey) -> Option<u32> {
        if !self.current() {
            return None;
        }
        self.epoch.cloned_out.get(&key).copied()
    }

    fn set_cloned(&mut self, key: UnitKey, to: Option<u32>) {
        if !self.current() {
            return;
        }
        match to {
            Some(to) => self.epoch.cloned_out.insert(key, to),
            None => self.epoch.cloned_out.remove(&key),
        };
    }

    fn drop_copy(&mut self, from: u32, key: UnitKey) -> bool {
        let iteration = self.iteration;
        let copy_of = |g: &Given| {
            g.rows.key == key
                && g.action == UnitAction::Clone
                && g.from == from
                && g.iteration == iteration
        };
        let before = self.epoch.given_to_me.len();
        self.epoch.given_to_me.retain(|g| !copy_of(g));
        if self.epoch.given_to_me.len() < before {
            return true;
        }
        // The copy in flight here: stopped, its compute in vain.
        let running = self.epoch.running.take_if(|r| copy_of(&r.next.unit));
        if let Some(r) = &running {
            self.epoch.wasted_us += r.compute.as_micros() as u64;
        }
        running.is_some()
    }

    fn skip_own(&mut self, key: UnitKey) -> bool {
        if !self.current() {
            return false;
        }
        let before = self.epoch.own.len();
        self.epoch.own.retain(|u| u.key != key);
        self.epoch.own.len() < before
    }

    fn stop_running(&mut self, key: UnitKey) -> Option<bool> {
        if !self.current() {
            return None;
        }
        let iteration = self.iteration;
        let running = self.epoch.running.take_if(|r| {
            r.next.unit.action != UnitAction::Clone
                && r.next.unit.rows.key == key
                && r.next.unit.iteration == iteration
        })?;
        self.epoch.wasted_us += running.compute.as_micros() as u64;
        Some(running.next.counts_as_own)
    }
}
