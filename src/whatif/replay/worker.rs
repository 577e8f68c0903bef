//! A replayed worker: its lists, the unit it computes, and what it has done
//! this iteration.

use std::collections::VecDeque;

use crate::data::UnitKey;
use crate::policy::handover;
use crate::whatif::TimedUnit;

/// A unit being computed: the unit, whether it is the worker's own, and the
/// owner when it is a clone.
pub(in crate::whatif) type Running = (TimedUnit, bool, Option<u32>);

#[derive(Default)]
pub(in crate::whatif) struct Worker {
    /// Its own units still to compute: `flat[head..tail]` of the replay.
    pub(in crate::whatif) head: usize,
    pub(in crate::whatif) tail: usize,
    /// Units from peers: (unit, from, whether it is a clone).
    pub(in crate::whatif) given: VecDeque<(TimedUnit, u32, bool)>,
    /// Own units cut in two at the broker's order (`ControlKind::Cut`):
    /// the list holds their first parts, their tails are with peers.
    pub(in crate::whatif) cut: Vec<UnitKey>,
    /// Own units cloned to peers, with the peer.
    pub(in crate::whatif) cloned_out: Vec<(UnitKey, u32)>,
    /// Own units a peer's clone finished first: skipped when reached.
    pub(in crate::whatif) skip: Vec<UnitKey>,
    /// The unit being computed, whether it is one of its own, and the owner
    /// when it is a clone.
    pub(in crate::whatif) running: Option<Running>,
    /// Whether the running unit handed a tail over: it is then not copied
    /// or its rest handed over (its part here ends sooner instead).
    pub(in crate::whatif) tailed: bool,
    /// Events it has caused this iteration (their order among ties).
    pub(in crate::whatif) caused: u32,
    /// When the running unit began, and when it ends.
    pub(in crate::whatif) started: u64,
    pub(in crate::whatif) ends: u64,
    /// The order of the running unit's end event (0: none awaited).
    pub(in crate::whatif) end_order: u64,
    /// Peers that offered help while the unit in flight was not yet late
    /// enough to copy, with their time per unit (policies that copy units
    /// in flight).
    pub(in crate::whatif) waiting: Vec<(u32, u64)>,
    /// The order of the last check for them filed.
    pub(in crate::whatif) check_order: u64,
    pub(in crate::whatif) units_done: u32,
    pub(in crate::whatif) last_end_us: u64,
    pub(in crate::whatif) last_unit_us: u64,
    pub(in crate::whatif) idle_reported: bool,
}

impl Worker {
    /// Ready for a new iteration, keeping its buffers.
    pub(in crate::whatif) fn clear(&mut self) {
        self.head = 0;
        self.tail = 0;
        self.given.clear();
        self.cut.clear();
        self.cloned_out.clear();
        self.skip.clear();
        self.running = None;
        self.tailed = false;
        self.end_order = 0;
        self.waiting.clear();
        self.check_order = 0;
        self.caused = 0;
        self.units_done = 0;
        self.last_end_us = 0;
        self.last_unit_us = 0;
        self.idle_reported = false;
    }

    /// Copies it still holds of units that have finished elsewhere, once
    /// every unit has (the iteration ended before the notices that would
    /// have stopped them arrived): the one in flight, if it raced, clones
    /// queued, and own units cloned out and not begun.
    pub(in crate::whatif) fn copies_left(&self) -> u32 {
        let running = self.running.map(|r| r.0.key);
        let raced_in_flight = self.running.is_some_and(|(u, _, clone_of)| {
            clone_of.is_some() || self.cloned_out.iter().any(|c| c.0 == u.key)
        });
        let queued = self.given.iter().filter(|g| g.2).count();
        let listed = self
            .cloned_out
            .iter()
            .filter(|c| Some(c.0) != running)
            .count();
        u32::from(raced_in_flight) + (queued + listed) as u32
    }

    /// Whether a unit queued here may be passed on to a peer: not a copy,
    /// not a rest (its sums travel only with the message that hands it
    /// over) nor a piece (the owners fold it with the others of its unit).
    pub(in crate::whatif) fn passable(given: &(TimedUnit, u32, bool)) -> bool {
        !given.2 && !given.0.rest && !given.0.piece
    }

    /// Whether units handed over wait here that may be passed on.
    pub(in crate::whatif) fn holds_passable(&self) -> bool {
        self.given.iter().any(Self::passable)
    }

    /// Own units still in its list that could be handed off.
    pub(in crate::whatif) fn left(&self) -> usize {
        // Units cloned out are in the list, or the one in flight.
        let running = self.running.map(|r| r.0.key);
        let listed_clones = self
            .cloned_out
            .iter()
            .filter(|c| Some(c.0) != running)
            .count();
        (self.tail - self.head).saturating_sub(listed_clones)
    }

    /// How long the unit it computes has run at `now`, if it computes one.
    pub(in crate::whatif) fn running_us(&self, now: u64) -> Option<u64> {
        self.running.map(|_| now - self.started)
    }

    /// The unit it computes as it sees it at `now`: its micro-batches end
    /// evenly spaced until its end, as the compute operator has it.
    pub(in crate::whatif) fn in_flight(&self, now: u64) -> Option<handover::InFlight> {
        let (unit, ..) = self.running?;
        let elapsed_us = now - self.started;
        let total = unit.micro_batches.max(1);
        let span = self.ends - self.started;
        let done = match span {
            0 => total,
            span => (u64::from(total) * elapsed_us / span).min(u64::from(total)) as u32,
        };
        Some(handover::InFlight {
            elapsed_us,
            done,
            total,
            ended_us: span * u64::from(done) / u64::from(total),
        })
    }

    /// The unit it computes, with how it sees it at `now` ([`Worker::in_flight`]).
    pub(in crate::whatif) fn running_at(&self, now: u64) -> Option<(Running, handover::InFlight)> {
        Some((self.running?, self.in_flight(now)?))
    }

    /// When the micro-batch in flight at `now` ends (before the unit's end),
    /// if the unit has more than one: the first moment its worker sees one
    /// more done.
    pub(in crate::whatif) fn next_boundary(&self, now: u64) -> Option<u64> {
        let (unit, ..) = self.running?;
        let total = u64::from(unit.micro_batches.max(1));
        let span = self.ends - self.started;
        let k = (now - self.started) * total / span.max(1) + 1;
        (k < total).then(|| self.started + (k * span).div_ceil(total))
    }

    /// Time per unit as it stands: the mean so far, or the last unit's time
    /// when that is longer (as the compute operator has it).
    pub(in crate::whatif) fn unit_us(&self) -> u64 {
        (self.last_end_us / u64::from(self.units_done.max(1))).max(self.last_unit_us)
    }
}
