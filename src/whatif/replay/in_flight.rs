//! A worker's unit in flight, when a peer offers help: units queued ahead
//! of it passed on, a copy of it, or the rest of it after the micro-batches
//! done, as the run's worker gives them (see [`handover`]).

use std::cmp::Reverse;

use super::{place, Replay, Worker, CHECK};
use crate::policy::handover::{self, Taker, CLONE_IN_FLIGHT_MARGIN};
use crate::policy::ControlKind;
use crate::whatif::TimedUnit;

impl Replay<'_> {
    /// Passes units peers handed to worker `w` that wait unbegun on to
    /// peer `to` (offering help, or reporting less work left than `w` has),
    /// from the end of its queue, as many as [`handover::pass_on`] says, as
    /// the run's worker does (copies stay). Returns whether any went.
    pub(super) fn pass_queued(&mut self, w: u32, to: u32, taker: Taker, now: u64) -> bool {
        let worker = &mut self.workers[place(self.slot, w)];
        let queued = worker.given.iter().filter(|g| Worker::passable(g)).count();
        if queued == 0 {
            return false;
        }
        let running = worker.in_flight(now);
        let count = handover::pass_on(queued, running.as_ref(), worker.unit_us(), taker);
        if count == 0 {
            return false;
        }
        let start = self.carried.len();
        let mut k = worker.given.len();
        while self.carried.len() - start < count && k > 0 {
            k -= 1;
            if Worker::passable(&worker.given[k]) {
                let (unit, _, _) = worker.given.remove(k).expect("in range");
                self.carried.push(unit);
            }
        }
        self.carried[start..].reverse(); // in queue order
        let count = (self.carried.len() - start) as u32;
        // (its view of that peer's work left grows by them)
        if let Some(agent) = self.agent(w) {
            agent.passed(to, count);
        }
        self.send(
            w,
            to,
            ControlKind::Assign { count },
            start..self.carried.len(),
            now,
        );
        true
    }

    /// Answers an offer of help from `helper` = (peer, its µs per unit) with
    /// a copy of worker `w`'s unit in flight (own or handed over, not itself
    /// a copy), when
    /// [`handover::clone_in_flight`] says it is far enough from its end (a
    /// replayed unit is one micro-batch: the trace does not say more), as the
    /// run's worker does. Otherwise the helper waits for a later look (see
    /// [`Replay::file_check`]). Returns whether a copy went.
    pub(super) fn copy_in_flight(&mut self, w: u32, (to, helper_us): (u32, u64), now: u64) -> bool {
        let worker = &mut self.workers[place(self.slot, w)];
        let (Some((unit, _, clone_of)), Some(in_flight)) = (worker.running, worker.in_flight(now))
        else {
            return false;
        };
        let eligible = clone_of.is_none()
            && !unit.rest
            && !unit.piece
            && !worker.tailed
            && !worker.cloned_out.iter().any(|c| c.0 == unit.key)
            && handover::clone_in_flight(&in_flight, helper_us);
        if !eligible {
            if helper_us > 0 {
                // Not late yet: it may be by the next look.
                worker.waiting.retain(|h| h.0 != to);
                worker.waiting.push((to, helper_us));
                self.file_check(w, now);
            }
            return false;
        }
        worker.cloned_out.push((unit.key, to));
        worker.waiting.clear();
        worker.check_order = 0;
        let at = self.carried.len();
        self.carried.push(unit);
        self.send(w, to, ControlKind::Clone { count: 1 }, at..at + 1, now);
        true
    }

    /// Files worker `w`'s next look at its unit in flight for the fastest
    /// helper waiting: the end of its micro-batch in flight at `now`, or the
    /// moment it has run [`CLONE_IN_FLIGHT_MARGIN`] of that helper's units
    /// (a rest is never copied), if before its end and not copied already
    /// (as the compute operator's `next_check`).
    pub(super) fn file_check(&mut self, w: u32, now: u64) {
        let worker = &self.workers[place(self.slot, w)];
        let Some(fastest) = worker.waiting.iter().map(|h| h.1).min() else {
            return;
        };
        let Some((unit, _, None)) = worker.running else {
            return;
        };
        if worker.cloned_out.iter().any(|c| c.0 == unit.key) {
            return;
        }
        let late = match unit.rest || unit.piece || worker.tailed {
            true => u64::MAX,
            false => worker.started + (CLONE_IN_FLIGHT_MARGIN * fastest as f64) as u64 + 1,
        };
        // Late enough already: a look now if the fastest helper waiting
        // would get a copy now, else only a micro-batch's end changes the
        // answer (filed at its time past, the look went back in time, and
        // one that found the unit too near its end filed itself again and
        // again).
        let late = match late > now {
            true => late,
            false => match worker.in_flight(now) {
                Some(f) if late != u64::MAX && handover::clone_in_flight(&f, fastest) => now,
                _ => u64::MAX,
            },
        };
        let at = worker.next_boundary(now).map_or(late, |b| b.min(late));
        if at >= worker.ends {
            return;
        }
        let order = self.next_order(w);
        self.workers[place(self.slot, w)].check_order = order;
        self.events.push(Reverse((at, order, CHECK | u64::from(w))));
    }

    /// Worker `w`'s look for a waiting helper: a copy of its unit in flight
    /// to the fastest, now that it is late enough.
    pub(super) fn copy_to_waiting_helper(&mut self, w: u32, now: u64) {
        let worker = &self.workers[place(self.slot, w)];
        let Some(&fastest) = worker.waiting.iter().min_by_key(|h| (h.1, h.0)) else {
            return;
        };
        // Never its rest: the helper may have taken other work since it
        // offered (see `run::worker::control::clone_to_waiting_helper`).
        self.copy_in_flight(w, fastest, now);
    }

    /// Answers an offer of help from `helper` = (peer, its µs per unit) with
    /// the rest of worker `w`'s unit in flight (own or handed over, not a
    /// copy, not copied to a peer) when [`handover::rest_in_flight`] says
    /// so, as the run's worker does: the micro-batches not yet ended go, the
    /// unit stops here, and the worker goes on. Returns whether it went.
    pub(super) fn rest_in_flight(&mut self, w: u32, (to, helper_us): (u32, u64), now: u64) -> bool {
        if !self.rest_in_flight {
            return false;
        }
        let worker = &mut self.workers[place(self.slot, w)];
        let Some(((unit, own, clone_of), in_flight)) = worker.running_at(now) else {
            return false;
        };
        let eligible = clone_of.is_none()
            && !unit.piece
            && !worker.tailed
            && !worker.cloned_out.iter().any(|c| c.0 == unit.key)
            && handover::rest_in_flight(&in_flight, helper_us);
        if !eligible {
            return false;
        }
        let (done, total) = (u64::from(in_flight.done), u64::from(in_flight.total));
        let part = |of: u64| of - of * done / total;
        let rest = TimedUnit {
            rows: part(u64::from(unit.rows)) as u32,
            owner_us: part(unit.owner_us),
            micro_batches: in_flight.total - in_flight.done,
            rest: true,
            piece: false,
            ..unit
        };
        worker.running = None;
        worker.end_order = 0;
        worker.waiting.clear();
        worker.check_order = 0;
        worker.last_end_us = now;
        let unit_us = worker.unit_us();
        let at = self.carried.len();
        self.carried.push(rest);
        self.send(
            w,
            to,
            ControlKind::Rest {
                done: in_flight.done,
            },
            at..at + 1,
            now,
        );
        if own {
            // Out of its hands: for its progress, an own unit done.
            if let Some(agent) = self.observed(w, now) {
                let sends = agent.on_own_unit_done(unit_us);
                self.send_all(w, sends, now);
            }
        }
        self.next_unit(w, now);
        true
    }

    /// Answers an offer of help from `helper` = (peer, its µs per unit) with
    /// the last micro-batches of worker `w`'s unit in flight (own, handed
    /// over or a rest; not a copy, not copied, not itself a tail), as many
    /// as [`handover::tail_in_flight`] says, as the run's worker does: the
    /// worker goes on with the others and its part ends sooner; the helper
    /// computes the tail, and the iteration waits for both. Returns whether
    /// a tail went.
    pub(super) fn tail_in_flight(&mut self, w: u32, (to, helper_us): (u32, u64), now: u64) -> bool {
        let rests = self.rest_in_flight;
        let pick = |worker: &Worker, in_flight: &handover::InFlight| {
            let rest = rests && !worker.tailed && handover::rest_in_flight(in_flight, helper_us);
            handover::tail_in_flight(in_flight, worker.unit_us(), helper_us, rest)
        };
        self.hand_tail(w, to, pick, now)
    }

    /// The tail of worker `w`'s unit in flight that `pick` counts (0:
    /// none), handed to `to` (see [`Replay::tail_in_flight`]).
    fn hand_tail(
        &mut self,
        w: u32,
        to: u32,
        pick: impl FnOnce(&Worker, &handover::InFlight) -> u32,
        now: u64,
    ) -> bool {
        if !self.tail_in_flight {
            return false;
        }
        let worker = &mut self.workers[place(self.slot, w)];
        let Some(((unit, own, clone_of), in_flight)) = worker.running_at(now) else {
            return false;
        };
        // (never a rest: its sums go with it, and a rest in turn may go on)
        if clone_of.is_some()
            || unit.piece
            || unit.rest
            || worker.cloned_out.iter().any(|c| c.0 == unit.key)
        {
            return false;
        }
        let count = pick(worker, &in_flight);
        if count == 0 {
            return false;
        }
        let total = in_flight.total;
        let keep = total - count;
        let (head, tail) = cut_in_two(unit, keep, count);
        let ends = worker.started
            + ((worker.ends - worker.started) * u64::from(keep)).div_ceil(u64::from(total));
        worker.running = Some((head, own, clone_of));
        worker.tailed = true;
        worker.waiting.clear();
        worker.check_order = 0;
        self.push_unit_done(ends, w);
        self.tails_split += 1;
        let at = self.carried.len();
        self.carried.push(tail);
        self.send(
            w,
            to,
            ControlKind::Tail { first: keep, count },
            at..at + 1,
            now,
        );
        true
    }

    /// Worker `w` hands `to` the last `count` micro-batches of its own
    /// list, as the broker ordered (`ControlKind::Cut`; see
    /// [`handover::cut`]), as the run's worker does: units that go whole
    /// go as units (one cut before, as its first part, in a `Tail` from its
    /// first micro-batch), the unit where the count ends is cut in two:
    /// its first part stays in the list, marked cut (never handed over
    /// whole again, copied, or its rest handed over), and its tail goes.
    pub(super) fn cut_last(&mut self, w: u32, to: u32, count: u32, now: u64) {
        let worker = &self.workers[place(self.slot, w)];
        let own = &self.flat[worker.head..worker.tail];
        let held = own.iter().rev().map(|u| {
            let copied = worker.cloned_out.iter().any(|c| c.0 == u.key);
            (!copied).then_some(u.micro_batches.max(1))
        });
        let steps = handover::cut(held, count);
        let listed: u32 = steps.iter().map(handover::CutStep::micro_batches).sum();
        for step in steps {
            let worker = &mut self.workers[place(self.slot, w)];
            let at = worker.tail - 1;
            let unit = self.flat[at];
            let start = self.carried.len();
            match step {
                handover::CutStep::Whole { micro_batches } => {
                    worker.tail -= 1;
                    let kind = match worker.cut.iter().position(|&k| k == unit.key) {
                        Some(i) => {
                            worker.cut.swap_remove(i);
                            ControlKind::Tail {
                                first: 0,
                                count: micro_batches,
                            }
                        }
                        None => ControlKind::Assign { count: 1 },
                    };
                    self.carried.push(unit);
                    self.send(w, to, kind, start..start + 1, now);
                    if let Some(agent) = self.agent(w) {
                        agent.handed_own(to);
                    }
                }
                handover::CutStep::Tail { first, count } => {
                    let (head, tail) = cut_in_two(unit, first, count);
                    self.flat[at] = head;
                    if !worker.cut.contains(&unit.key) {
                        worker.cut.push(unit.key);
                    }
                    self.tails_split += 1;
                    self.carried.push(tail);
                    self.send(
                        w,
                        to,
                        ControlKind::Tail { first, count },
                        start..start + 1,
                        now,
                    );
                }
            }
        }
        // What the list does not hold comes from the unit in flight.
        if count > listed {
            let owed = count - listed;
            let pick =
                |_: &Worker, f: &handover::InFlight| owed.min(f.total.saturating_sub(f.done + 1));
            self.hand_tail(w, to, pick, now);
        }
    }
}

/// `unit` cut after its first `keep` micro-batches: that first part, and
/// the tail of the next `count` (a piece), each with its share of the
/// rows and of the owner's time.
fn cut_in_two(unit: TimedUnit, keep: u32, count: u32) -> (TimedUnit, TimedUnit) {
    let total = keep + count;
    let part = |of: u64| of * u64::from(keep) / u64::from(total);
    let head = TimedUnit {
        rows: part(u64::from(unit.rows)) as u32,
        owner_us: part(unit.owner_us),
        micro_batches: keep,
        ..unit
    };
    let tail = TimedUnit {
        rows: unit.rows - head.rows,
        owner_us: unit.owner_us - head.owner_us,
        micro_batches: count,
        rest: false,
        piece: true,
        ..unit
    };
    (head, tail)
}
